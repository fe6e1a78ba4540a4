"""Memory soak: RSS and tracemalloc over many cache hits and compile/reset cycles.

    .venv/bin/python benchmarks/soak_memory.py [--hits 1000000] [--cycles 10000] [--checkpoints 10] [--log FILE]

Prints RSS (from /proc/self/statm), tracemalloc's traced Python memory, the number of
live memory blocks of Python's allocator (sys.getallocatedblocks(), which needs no tracing)
and the number of history records (cdynamo._events, at most MAX_RECORDS) at --checkpoints checkpoints of each
phase, and the growth from the first checkpoint to the last; --log appends each checkpoint to
FILE as it is taken, so that a run lost half way still leaves its numbers. A hit allocates nothing
that outlives the call, and a compile/reset cycle frees what it made, so both should be flat
(a few hundred KiB of noise from allocator caches). Numbers, not assertions: tests cover the
freeing itself (tests/reliability/test_memory.py).

tracemalloc is not a neutral witness of compile/reset cycles: it keeps the filename of every
frame it has seen allocate (its own table, emptied only by tracemalloc.stop() or
clear_traces()), and each FX graph runs its generated code under a fresh
"<eval_with_key>.N" filename, so the traced memory grows by one such string (~70 B) a graph
while tracing is on, and not at all without it (the blocks column shows it; pure CPython
does the same: exec of a def under a new filename, 1 block per exec with tracemalloc, 0
without). --no-tracemalloc measures without it.
"""
import argparse
import collections
import gc
import os
import sys
import time
import tracemalloc

import torch

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "src"))
import cdynamo  # noqa: E402
from cdynamo import _events  # noqa: E402
from cdynamo.testing import CompileCounter  # noqa: E402

torch.set_num_threads(1)


def rss_kib():
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE") // 1024


LOG = None


def checkpoint(rows, label):
    gc.collect()
    cur, _ = tracemalloc.get_traced_memory()
    rows.append((label, rss_kib(), cur // 1024, sys.getallocatedblocks(), len(_events.records)))
    if LOG:
        with open(LOG, "a") as out:
            out.write("%s %-14s RSS %8d KiB  tracemalloc %8d KiB  blocks %9d  records %5d\n"
                      % (time.strftime("%H:%M:%S"), label, *rows[-1][1:]))


def report(title, rows):
    print(title)
    for label, rss, traced, blocks, nrec in rows:
        print("  %-18s RSS %8d KiB   tracemalloc %8d KiB   blocks %9d   records %5d" % (label, rss, traced, blocks, nrec))
    if len(rows) < 3:
        return
    print("  growth first->last: RSS %+d KiB, tracemalloc %+d KiB, blocks %+d"
          % (rows[-1][1] - rows[1][1], rows[-1][2] - rows[1][2], rows[-1][3] - rows[1][3]))


def f(x, y, n):
    z = x * y
    for i in range(n):
        z = z + i
    return z.relu(), [n, "k"]


def g(x):
    y = x.sin()
    if y.sum() > 0:  # graph break: two graphs and a resume function per compile
        return y + 1
    return y - 1


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--hits", type=int, default=1_000_000)
    ap.add_argument("--cycles", type=int, default=10_000)
    ap.add_argument("--checkpoints", type=int, default=10)
    ap.add_argument("--log", help="append each checkpoint to this file as it is taken")
    ap.add_argument("--diff", type=int, default=0, metavar="N",
                    help="print the N source lines whose traced memory grew most from the middle "
                         "of the cycles (the history full by then) to the end")
    ap.add_argument("--max-records", type=int, default=None, metavar="N",
                    help="keep only the newest N history records instead of MAX_RECORDS, so that "
                         "the cycles run past a full history sooner (3 records a cycle)")
    ap.add_argument("--frames", type=int, default=1, help="frames tracemalloc keeps per allocation (--diff groups by the innermost)")
    ap.add_argument("--no-tracemalloc", action="store_true",
                    help="do not trace (the tracemalloc column reads 0; RSS and blocks still count)")
    args = ap.parse_args()
    if args.diff and args.no_tracemalloc:
        ap.error("--diff needs tracemalloc")
    if args.max_records is not None:
        _events.records = collections.deque(maxlen=args.max_records)
    global LOG
    LOG = args.log
    if not args.no_tracemalloc:
        tracemalloc.start(args.frames)

    cf = cdynamo.compile(f, backend="eager")
    cg = cdynamo.compile(g, backend="eager")
    x, y = torch.ones(8), torch.ones(8)
    rows = []
    checkpoint(rows, "before")
    cf(x, y, 3), cg(x)
    t0 = time.time()
    step = max(1, args.hits // args.checkpoints)
    for i in range(args.hits):
        cf(x, y, 3)
        if i % 4 == 0:
            cg(x)
        if i % step == step - 1:
            checkpoint(rows, "hits %d" % (i + 1))
    s = cdynamo.stats()
    assert s["cache_misses"] == 3 and s["frames_native"] == 0, s
    report("%d cache hits (f, and g with a graph break every 4th call) in %.0f s; misses %d"
           % (args.hits, time.time() - t0, s["cache_misses"]), rows)

    rows = []
    checkpoint(rows, "before")
    t0 = time.time()
    step = max(1, args.cycles // args.checkpoints)
    for i in range(args.cycles):
        cnt = CompileCounter()
        c1 = cdynamo.compile(f, backend=cnt)
        c2 = cdynamo.compile(g, backend=cnt)
        c1(x, y, i % 3)
        c2(x if i % 2 else -x)
        cdynamo.reset()
        if i % step == step - 1:
            checkpoint(rows, "cycles %d" % (i + 1))
        if args.diff and i == args.cycles // 2:
            gc.collect()
            middle = tracemalloc.take_snapshot()
    report("%d compile/reset cycles (3 graphs each) in %.0f s" % (args.cycles, time.time() - t0), rows)
    if args.diff:
        gc.collect()
        top = tracemalloc.take_snapshot().compare_to(middle, "traceback")[:args.diff]
        lines = ["growth from cycle %d to %d by where it was allocated:" % (args.cycles // 2 + 1, args.cycles)]
        for stat in top:
            lines.append("  %s" % stat)
            lines += ["      %s" % frame for frame in list(stat.traceback)[:args.frames][::-1]]
        print("\n".join(lines))
        if LOG:
            with open(LOG, "a") as out:
                out.write("\n".join(lines) + "\n")


if __name__ == "__main__":
    main()
