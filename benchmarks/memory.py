"""Section 4: memory held per cache entry and per traced op."""
import ctypes
import gc
import os
import tracemalloc

import torch
import torch._dynamo

import cdynamo
from common import CaptureCheck, CountingBackend, Section, assert_same, log, reason_cell, reset_all, table
from workloads import make_loop

try:
    _libc = ctypes.CDLL("libc.so.6")
except OSError:  # pragma: no cover
    _libc = None


class _Mallinfo2(ctypes.Structure):
    _fields_ = [(n, ctypes.c_size_t) for n in ("arena", "ordblks", "smblks", "hblks", "hblkhd", "usmblks",
                                                 "fsmblks", "uordblks", "fordblks", "keepcost")]


def heap_bytes():
    """glibc malloc bytes in use (uordblks + mmapped hblkhd): C/C++ `new`, tensor storage, large Python objects."""
    if _libc is not None and hasattr(_libc, "mallinfo2"):
        _libc.mallinfo2.restype = _Mallinfo2
        mi = _libc.mallinfo2()
        return mi.uordblks + mi.hblkhd
    with open("/proc/self/statm") as f:  # fallback: resident set
        return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")


def settle():
    gc.collect()
    gc.collect()
    if _libc is not None:
        _libc.malloc_trim(0)


def held(method, build):
    """Bytes still held after build() (which returns the objects to keep alive), and after a reset."""
    settle()
    if method == "tracemalloc":
        tracemalloc.start()
        settle()
        base = tracemalloc.get_traced_memory()[0]
    else:
        base = heap_bytes()
    keep = build()
    settle()
    after = tracemalloc.get_traced_memory()[0] if method == "tracemalloc" else heap_bytes()
    del keep
    reset_all()
    settle()
    after_reset = tracemalloc.get_traced_memory()[0] if method == "tracemalloc" else heap_bytes()
    if method == "tracemalloc":
        tracemalloc.stop()
    return after - base, after_reset - base


def entries_builder(frontend, n_entries, inputs, capture):
    def fn(x):
        return x + 1

    def build():
        reset_all()
        cb = CountingBackend()
        f = cdynamo.compile(fn, backend=cb, dynamic=False) if frontend == "cdynamo" else torch.compile(fn, backend=cb, dynamic=False)
        cc = CaptureCheck() if frontend == "cdynamo" else None
        for x in inputs[:n_entries]:
            assert_same(f(x), fn(x), f"memory entries [{frontend}]")
        if cc is not None:
            capture.append(cc.result(min_graphs=n_entries))
        assert cb.graphs == n_entries, f"{frontend}: {cb.graphs} graphs for {n_entries} shapes"
        return f, cb
    return build


def ops_builder(frontend, loop_fn, x, capture):
    def build():
        reset_all()
        cb = CountingBackend()
        if frontend == "cdynamo":
            f = cdynamo.compile(loop_fn, backend=cb, fullgraph=True)
        else:
            f = torch.compile(loop_fn, backend=cb, fullgraph=True, dynamic=False)
        cc = CaptureCheck() if frontend == "cdynamo" else None
        assert_same(f(x), loop_fn(x), f"memory ops [{frontend}]")
        if cc is not None:
            capture.append(cc.result())
        build.ops = cb.ops
        return f, cb
    return build


def run(quick):
    sec = Section("4. Memory")
    n_entries = 20 if quick else 50
    loop_n = 100 if quick else 500
    inputs = [torch.randn(k + 1) for k in range(n_entries)]
    x = torch.randn(8)
    loop_fn = make_loop(loop_n)
    rows, leak_rows = [], []
    for method in ("tracemalloc", "malloc"):
        for fe in ("cdynamo", "dynamo"):
            log(f"  [memory] {method} {fe}")
            cap = []
            # Per cache entry: n_entries entries of `x + 1` (one op each) minus one entry (the
            # fixed cost of the first: imports, wrapper, per-code data) -> marginal bytes per entry.
            h1, r1 = held(method, entries_builder(fe, 1, inputs, cap))
            hn, rn = held(method, entries_builder(fe, n_entries, inputs, cap))
            bo = ops_builder(fe, loop_fn, x, cap)
            ho, ro = held(method, bo)
            bad = [c for c in cap if not c[0]]
            if bad:
                rows.append([method, fe, "not captured: " + reason_cell(bad[0][1]), "", ""])
                continue
            per_entry = (hn - h1) / (n_entries - 1)
            per_op = (ho - h1) / bo.ops
            rows.append([method, fe, f"{per_entry:,.0f}", f"{per_op:,.0f}", f"{ho:,.0f} ({bo.ops} ops)"])
            leak_rows.append([method, fe, f"{rn:,.0f}", f"{ro:,.0f}"])
            log(f"    per entry {per_entry:,.0f} B, per op {per_op:,.0f} B")
    sec.add(f"Bytes still held (after `gc.collect()` and `malloc_trim`) by a compiled function and its cache. "
            f"*Per cache entry*: `x + 1` compiled for {n_entries} input shapes minus the same compiled for 1 "
            f"shape, divided by {n_entries - 1}. *Per traced op*: a fullgraph loop of {loop_n} x (add, sin) "
            f"({2 * loop_n} ops, one entry) minus the 1-entry `x + 1` case, divided by the op count. Methods: "
            "*tracemalloc* counts memory allocated through Python's allocators (Python objects: FX nodes, "
            "generated code, guards kept as Python objects, fake-tensor wrappers); *malloc* is glibc's "
            "bytes-in-use (`mallinfo2`: uordblks + hblkhd, measured in a separate pass without tracemalloc), "
            "which sees C/C++ heap allocations (cdynamo's guard programs and cache entries, torch's C++ "
            "objects) and Python objects over 512 bytes, but not small Python objects (pymalloc arenas). "
            "Neither alone is the whole footprint; together they bracket it. Backend: returns "
            "`gm.forward`, which keeps each GraphModule alive in both frontends."
            + (" **Quick mode**: 20 entries, 100-iteration loop." if quick else ""))
    sec.add(table(["method", "frontend", "bytes per cache entry", "bytes per traced op",
                   "loop entry, total bytes"], rows))
    sec.add("Bytes still held relative to the start after `cdynamo.reset()` + `torch._dynamo.reset()` "
            "(a leak check; small positive numbers are allocator noise and interned objects):")
    sec.add(table(["method", "frontend", "after reset: entries case", "after reset: loop case"], leak_rows))
    return sec
