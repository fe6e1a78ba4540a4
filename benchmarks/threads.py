"""Cache-hit throughput of 8 threads against 1, and 8 threads compiling different
functions at once against the same compiles done by one thread.

    .venv/bin/python benchmarks/threads.py [--calls N]

Hits take no lock (Note [The compile lock] in csrc/frame/eval_frame.cpp), so under the GIL 8
threads should do about the hits per second of one (ratio ~1.0: no contention besides the
GIL itself); torch._dynamo is measured the same way for reference. Compiles serialize behind
the one compile lock; with a backend that releases the GIL (here: sleeps 20 ms, like a
compiler subprocess), 8 threads compiling 8 functions take about 8 backend times either way,
because the backend runs under the lock too. Results are printed (ratios), not asserted.
"""
import argparse
import os
import sys
import threading
import time

import torch
import torch._dynamo

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "src"))
import cdynamo  # noqa: E402

torch.set_num_threads(1)


def f(x, y):
    return x * y + 1


def hits_per_second(compiled, nthreads, calls):
    x, y = torch.ones(4), torch.ones(4)
    compiled(x, y)  # compiled before timing
    barrier = threading.Barrier(nthreads + 1)

    def work():
        barrier.wait()
        for _ in range(calls):
            compiled(x, y)

    ts = [threading.Thread(target=work) for _ in range(nthreads)]
    for t in ts:
        t.start()
    barrier.wait()
    t0 = time.perf_counter()
    for t in ts:
        t.join()
    return nthreads * calls / (time.perf_counter() - t0)


def compile_time(nthreads, nfuncs, sleep):
    def backend(gm, ex):
        time.sleep(sleep)
        return gm.forward

    cdynamo.reset()
    fns = []
    for i in range(nfuncs):
        ns = {}
        exec("def g%d(x):\n    return x * %d + 1\n" % (i, i), ns)
        fns.append(cdynamo.compile(ns["g%d" % i], backend=backend))
    work = [fns[i::nthreads] for i in range(nthreads)]
    x = torch.ones(3)
    t0 = time.perf_counter()
    ts = [threading.Thread(target=lambda w=w: [g(x) for g in w]) for w in work]
    for t in ts:
        t.start()
    for t in ts:
        t.join()
    return time.perf_counter() - t0


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--calls", type=int, default=20000, help="hits per thread")
    args = ap.parse_args()
    rows = []
    for name, make in (("cdynamo", lambda: cdynamo.compile(f, backend="eager")),
                       ("torch._dynamo", lambda: torch.compile(f, backend="eager"))):
        c = make()
        one = hits_per_second(c, 1, args.calls)
        eight = hits_per_second(c, 8, args.calls // 8)
        rows.append((name, one, eight))
        torch._dynamo.reset()
    print("cache hits per second (f(x, y) = x * y + 1, backend eager):")
    print("  %-14s %12s %12s %8s" % ("", "1 thread", "8 threads", "8/1"))
    for name, one, eight in rows:
        print("  %-14s %12.0f %12.0f %8.2f" % (name, one, eight, eight / one))
    serial = compile_time(1, 8, 0.02)
    parallel = compile_time(8, 8, 0.02)
    print("8 compiles, backend sleeping 20 ms: 1 thread %.3f s, 8 threads %.3f s (ratio %.2f)"
          % (serial, parallel, parallel / serial))


if __name__ == "__main__":
    main()
