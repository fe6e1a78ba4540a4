"""8 threads on compiled functions and modules at once (run by test_threads.py in a subprocess).

Phase 1 (racing first calls): 8 threads wait on a barrier, then all call the same new
compiled function with equal-shaped inputs: exactly one compile may happen (the others
wait for it, or hit the entry it made), and every result equals eager.

Phase 2 (chaos), for a number of rounds: threads call the same compiled function, other
compiled functions (one with a graph break), a compiled module shared between threads, and
a function reading a guarded global that another thread keeps changing; one thread calls
cdynamo.reset() meanwhile, one runs the same functions uncompiled. The backend sleeps (so it
releases the GIL while a compile is in flight). Every result is compared with eager.

Exit status 0 when everything matched; a hang is caught by faulthandler (all stacks dumped).
"""
import faulthandler
import random
import sys
import threading
import time

import torch

import cdynamo

faulthandler.dump_traceback_later(int(sys.argv[1]) if len(sys.argv) > 1 else 240, exit=True)
sys.setswitchinterval(1e-5)  # switch threads as often as possible
torch.set_num_threads(1)

SCALE = 1.0
scale_version = [0]
failures = []
fail_lock = threading.Lock()


def fail(msg):
    with fail_lock:
        failures.append(msg)


class SlowCounter:
    """A thread-safe counting backend that sleeps (releasing the GIL) while 'compiling'."""

    def __init__(self, sleep=0.002):
        self.lock = threading.Lock()
        self.count = 0
        self.sleep = sleep

    def __call__(self, gm, example_inputs):
        time.sleep(self.sleep)
        with self.lock:
            self.count += 1
        return gm.forward


def f_same(x, y):
    return (x * y + 1).relu().sum(0)


def f_other(x):
    return torch.sin(x) * 2 - x


def f_break(x):
    y = x * 2
    if y.sum() > 0:  # data-dependent branch: a graph break
        return y + 1
    return y - 1


def f_global(x):
    return x * SCALE + 1


def f_list(x, items):
    out = [x + i for i in items]
    items.append(len(out))
    return out


def make_module():
    torch.manual_seed(0)
    return torch.nn.Sequential(torch.nn.Linear(4, 8), torch.nn.ReLU(), torch.nn.Linear(8, 2))


def close(a, b):
    if isinstance(a, torch.Tensor):
        return isinstance(b, torch.Tensor) and a.shape == b.shape and a.dtype == b.dtype and torch.allclose(a, b)
    if isinstance(a, (list, tuple)):
        return type(a) is type(b) and len(a) == len(b) and all(close(u, v) for u, v in zip(a, b))
    return a == b


def phase1():
    """Racing first calls: one compile, all results right, stats consistent."""
    cdynamo.reset()
    backend = SlowCounter(sleep=0.02)

    def fresh(x, y):
        return torch.cos(x) + y * 3

    cf = cdynamo.compile(fresh, backend=backend)
    barrier = threading.Barrier(8)
    x, y = torch.randn(5), torch.randn(5)
    expected = fresh(x, y)

    def work():
        barrier.wait()
        for _ in range(50):
            r = cf(x, y)
            if not close(r, expected):
                fail("phase1: wrong result")

    threads = [threading.Thread(target=work) for _ in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    s = cdynamo.stats()
    if backend.count != 1 or s["frames_captured"] != 1:
        fail("phase1: %d compiles, %d frames captured (expected 1 each)" % (backend.count, s["frames_captured"]))
    if s["cache_hits"] + s["cache_misses"] != 400 or s["cache_hits"] < 399:
        fail("phase1: hits %d + misses %d != 400 calls" % (s["cache_hits"], s["cache_misses"]))
    if s["frames_native"]:
        fail("phase1: native frames %s" % cdynamo.stats()["native_frames"])


def phase2(rounds, iters):
    global SCALE
    stop = threading.Event()
    for rnd in range(rounds):
        backend = SlowCounter()
        eager_backend = "eager"
        mod = make_module()
        c_same = cdynamo.compile(f_same, backend=backend)
        c_other = cdynamo.compile(f_other, backend=eager_backend)
        c_break = cdynamo.compile(f_break, backend=backend)
        c_global = cdynamo.compile(f_global, backend=backend)
        c_list = cdynamo.compile(f_list, backend=backend)
        c_mod = cdynamo.compile(mod, backend=backend)
        barrier = threading.Barrier(8)
        stop.clear()
        rng_lock = threading.Lock()

        def inputs(seed, n=4):
            g = torch.Generator().manual_seed(seed)
            return torch.randn(n, generator=g), torch.randn(n, generator=g)

        def same_fn(tid):
            barrier.wait()
            for i in range(iters):
                x, y = inputs(tid * 1000 + i, 4 + (i % 3))
                if not close(c_same(x, y), f_same(x, y)):
                    fail("same fn: wrong result")

        def other_fns(tid):
            barrier.wait()
            for i in range(iters):
                x, _ = inputs(tid * 1000 + i)
                if i % 2:
                    x = -x.abs()
                if not close(c_other(x), f_other(x)):
                    fail("other fn: wrong result")
                if not close(c_break(x), f_break(x)):
                    fail("break fn: wrong result")
                items_c, items_e = [1, 2], [1, 2]
                if not close(c_list(x, items_c), f_list(x, items_e)) or items_c != items_e:
                    fail("list fn: wrong result or argument state")

        def module_user(tid):
            barrier.wait()
            for i in range(iters):
                x = torch.randn(3, 4)
                with torch.no_grad() if i % 3 == 0 else torch.enable_grad():
                    got, want = c_mod(x), mod(x)
                if not close(got, want) or got.requires_grad != want.requires_grad:
                    fail("module: wrong result")

        def global_reader(tid):
            barrier.wait()
            for i in range(iters):
                x, _ = inputs(i)
                v0 = scale_version[0]
                got = c_global(x)
                want = f_global(x)
                if v0 == scale_version[0] and not close(got, want):
                    fail("guarded global: stale result (SCALE=%s)" % SCALE)

        def global_writer(tid):
            global SCALE
            barrier.wait()
            while not stop.is_set():
                scale_version[0] += 1
                SCALE = float(random.randint(1, 4))
                scale_version[0] += 1
                time.sleep(0.001)

        def resetter(tid):
            barrier.wait()
            while not stop.is_set():
                cdynamo.reset()
                time.sleep(0.003)

        def uncompiled(tid):
            barrier.wait()
            for i in range(iters):
                x, y = inputs(i)
                a = f_same(x, y), f_other(x), f_break(x), mod(torch.ones(2, 4))
                b = f_same(x, y), f_other(x), f_break(x), mod(torch.ones(2, 4))
                if not close(a, b):
                    fail("uncompiled: results differ")

        workers = [same_fn, same_fn, other_fns, module_user, global_reader, uncompiled]
        daemons = [global_writer, resetter]
        ts = [threading.Thread(target=w, args=(i,)) for i, w in enumerate(workers)]
        ds = [threading.Thread(target=d, args=(i,)) for i, d in enumerate(daemons)]
        for t in ts + ds:
            t.start()
        for t in ts:
            t.join()
        stop.set()
        for t in ds:
            t.join()
        if torch.is_grad_enabled() is not True:
            fail("grad mode left off")


def phase3():
    """After the chaos: everything still compiles and hits, from every thread."""
    cdynamo.reset()
    backend = SlowCounter(sleep=0)
    c = cdynamo.compile(f_same, backend=backend)
    x, y = torch.randn(4), torch.randn(4)

    def work():
        for _ in range(20):
            if not close(c(x, y), f_same(x, y)):
                fail("phase3: wrong result")

    ts = [threading.Thread(target=work) for _ in range(8)]
    for t in ts:
        t.start()
    for t in ts:
        t.join()
    s = cdynamo.stats()
    if backend.count != 1 or s["cache_hits"] != 159 or s["cache_misses"] != 1:
        fail("phase3: compiles %d hits %d misses %d" % (backend.count, s["cache_hits"], s["cache_misses"]))


if __name__ == "__main__":
    rounds = int(sys.argv[2]) if len(sys.argv) > 2 else 3
    iters = int(sys.argv[3]) if len(sys.argv) > 3 else 60
    phase1()
    phase2(rounds, iters)
    phase3()
    if failures:
        print("FAILURES (%d):" % len(failures))
        for f in sorted(set(failures)):
            print("  %s (x%d)" % (f, failures.count(f)))
        sys.exit(1)
    print("threads: ok")
