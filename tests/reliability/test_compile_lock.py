"""The compile lock (Note [The compile lock] in csrc/frame/compile_lock.h): re-entrant on the
thread that compiles, reset() deferred while a compile is in flight on the same thread, and
never held while user code runs. Each case runs in a subprocess with a timeout: the failure
mode is a deadlock."""
import os
import subprocess
import sys
import textwrap

import pytest


def run_script(body, timeout=120):
    src = "import faulthandler, sys, torch, cdynamo\nfaulthandler.dump_traceback_later(%d, exit=True)\n" % (timeout - 10)
    src += textwrap.dedent(body)
    p = subprocess.run([sys.executable, "-c", src], capture_output=True, text=True, timeout=timeout)
    assert p.returncode == 0, p.stdout[-3000:] + p.stderr[-6000:]
    return p.stdout


def test_compiled_function_called_and_compiled_inside_a_backend():
    out = run_script("""
        inner = cdynamo.compile(lambda t: t.cos() + 1, backend="eager")
        seen = []
        def backend(gm, example_inputs):
            # compiles `inner` (a nested compile on the thread holding the compile lock)
            seen.append(inner(torch.ones(2)))
            return gm.forward
        f = cdynamo.compile(lambda x: x * 2, backend=backend)
        x = torch.randn(3)
        assert torch.equal(f(x), x * 2)
        assert torch.allclose(seen[0], torch.ones(2).cos() + 1)
        s = cdynamo.stats()
        assert s["frames_captured"] == 2, s      # both frames compiled, none native
        assert not s["native_frames"], s["native_frames"]
        assert torch.equal(f(x), x * 2) and cdynamo.stats()["cache_hits"] >= 1
        print("ok")
    """)
    assert "ok" in out


def test_compiled_function_called_from_a_property_read_while_tracing():
    # The guard/trace machinery reads attributes of program objects for real; a class whose
    # __getattr__ runs a compiled function is a compile inside a compile on one thread.
    out = run_script("""
        helper = cdynamo.compile(lambda t: t + 100, backend="eager")
        class Obj:
            def __init__(self):
                self.t = torch.ones(2)
            def __getattr__(self, name):
                if name == "extra":
                    return helper(self.t)
                raise AttributeError(name)
        def f(o, x):
            return x * o.extra
        cf = cdynamo.compile(f, backend="eager")
        o, x = Obj(), torch.randn(2)
        for _ in range(3):
            assert torch.equal(cf(o, x), f(o, x))
        print("ok")
    """)
    assert "ok" in out


def test_reset_inside_a_backend_is_deferred_to_the_end_of_the_compile():
    out = run_script("""
        calls = []
        def backend(gm, example_inputs):
            cdynamo.reset()     # on the compiling thread: done when this compile ends
            calls.append(1)
            return gm.forward
        f = cdynamo.compile(lambda x: x + 1, backend=backend)
        x = torch.randn(3)
        assert torch.equal(f(x), x + 1)      # the entry made runs once...
        assert cdynamo.stats()["cache_entries"] == 0   # ...and the deferred reset dropped it
        assert torch.equal(f(x), x + 1)      # compiles again
        assert len(calls) == 2
        print("ok")
    """)
    assert "ok" in out


def test_native_frame_after_reset_calls_compiled_functions_without_deadlock():
    # The old hook evaluated a frame whose code was reset meanwhile while still holding the
    # lock; a compiled call from that frame then waited for itself forever.
    out = run_script("""
        import threading, time
        inner = cdynamo.compile(lambda t: t.sin(), backend="eager")
        def outer(x):
            return inner(x) + 1
        c = cdynamo.compile(outer, backend="eager")
        stop = threading.Event()
        def resetter():
            while not stop.is_set():
                cdynamo.reset()
                time.sleep(0.0005)
        th = threading.Thread(target=resetter)
        th.start()
        for i in range(300):
            x = torch.randn(3 + i % 4)
            assert torch.allclose(c(x), x.sin() + 1)
        stop.set(); th.join()
        print("ok")
    """)
    assert "ok" in out


def test_fork_after_compiling_child_calls_compiled_functions():
    if not hasattr(os, "fork"):
        pytest.skip("no fork")
    out = run_script("""
        import os, threading, time
        f = cdynamo.compile(lambda x: x * 3 + 1, backend="eager")
        x = torch.randn(4)
        assert torch.equal(f(x), x * 3 + 1)
        # Another thread is in the middle of a compile (its backend sleeps) when we fork.
        started = threading.Event()
        def slow(gm, ex):
            started.set(); time.sleep(2); return gm.forward
        g = cdynamo.compile(lambda x: x - 5, backend=slow)
        th = threading.Thread(target=lambda: g(torch.randn(2)))
        th.start(); started.wait()
        pid = os.fork()
        if pid == 0:
            ok = torch.equal(f(x), x * 3 + 1) and torch.equal(f(torch.ones(6)), torch.ones(6) * 4)
            h = cdynamo.compile(lambda x: x.cos(), backend="eager")   # a new compile in the child
            ok = ok and torch.equal(h(x), x.cos())
            os._exit(0 if ok else 3)
        _, status = os.waitpid(pid, 0)
        th.join()
        assert os.WIFEXITED(status) and os.WEXITSTATUS(status) == 0, status
        print("ok")
    """)
    assert "ok" in out
