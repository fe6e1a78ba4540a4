"""Faults and bad input: backends that fail, interrupts in the middle of a compile, user code
that raises or has effects while it is traced or guarded, recursion, generators, tracing
functions, and the other frontend (torch.compile) mixed in. Each compiled call is compared
with eager; afterwards the next call must work and torch's global state must be as eager
leaves it."""
import asyncio
import logging
import os
import subprocess
import sys
import textwrap
import warnings

import pytest
import torch

import cdynamo
from cdynamo.testing import CompileCounter


def torch_state():
    return (torch.is_grad_enabled(), torch.is_autocast_enabled("cpu"), torch.get_autocast_dtype("cpu"),
            torch.is_inference_mode_enabled())


@pytest.fixture(autouse=True)
def _state_unchanged():
    before = torch_state()
    yield
    assert torch_state() == before


# ---------------------------------------------------------------------------------------- backends

def test_backend_that_raises_gives_backend_compiler_failed_with_the_cause():
    def bad(gm, example_inputs):
        raise ValueError("no thanks")

    f = cdynamo.compile(lambda x: x + 1, backend=bad)
    with pytest.raises(cdynamo.BackendCompilerFailed) as info:
        f(torch.ones(2))
    assert isinstance(info.value.__cause__, ValueError) and "no thanks" in str(info.value.__cause__)
    with pytest.raises(cdynamo.BackendCompilerFailed):  # not cached as a success, nor silently native
        f(torch.ones(2))


def test_backend_failure_message_names_the_backends_error():
    # Code that matches the error's text (as torch.compile's "backend=... raised: T: msg")
    # must find the backend's own error in it, not only in __cause__.
    def bad(gm, example_inputs):
        raise AssertionError("must be two modes")

    f = cdynamo.compile(lambda x: x + 1, backend=bad)
    with pytest.raises(cdynamo.BackendCompilerFailed, match="AssertionError: must be two modes"):
        f(torch.ones(2))


def test_backend_that_raises_with_suppress_errors_runs_eagerly_with_a_warning(monkeypatch):
    monkeypatch.setattr(cdynamo.config, "suppress_errors", True)

    def bad(gm, example_inputs):
        raise ValueError("no thanks")

    f = cdynamo.compile(lambda x: x * 3, backend=bad)
    x = torch.randn(3)
    with pytest.warns(RuntimeWarning, match="no thanks.*suppress_errors"):
        assert torch.equal(f(x), x * 3)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert torch.equal(f(x), x * 3)  # native from then on: no second warning
    reasons = [n["reason"] for n in cdynamo.stats()["native_frames"]]
    assert any("backend compiler failed" in r for r in reasons), reasons


def test_suppress_errors_follows_torch_dynamo_config():
    # cdynamo.config.suppress_errors is None: torch._dynamo.config.suppress_errors decides
    # (code written for torch.compile sets torch's); cdynamo's own False wins over it.
    def bad(gm, example_inputs):
        raise ValueError("no thanks")

    assert cdynamo.config.suppress_errors is None
    with torch._dynamo.config.patch(suppress_errors=True):
        f = cdynamo.compile(lambda x: x * 5, backend=bad)
        with pytest.warns(RuntimeWarning, match="no thanks.*suppress_errors"):
            assert torch.equal(f(torch.ones(2)), torch.full((2,), 5.0))
        cdynamo.reset()
        cdynamo.config.suppress_errors = False
        try:
            with pytest.raises(cdynamo.BackendCompilerFailed):
                f(torch.ones(2))
        finally:
            cdynamo.config.suppress_errors = None


def test_backend_returning_a_non_callable():
    f = cdynamo.compile(lambda x: x - 1, backend=lambda gm, ex: 42)
    with pytest.raises(cdynamo.BackendCompilerFailed, match="non-callable"):
        f(torch.ones(2))


def test_backend_whose_artifact_returns_too_few_outputs_raises():
    # The output plan reads graph outputs by position: a compiled function returning fewer
    # than its graph has is a RuntimeError naming the count, on the first call and on hits,
    # never a read past the end of the tuple (it crashed the process).
    def short(gm, example_inputs):
        return lambda *args: ()

    f = cdynamo.compile(lambda x: (x + 1, x * 2), backend=short)
    for _ in range(2):
        with pytest.raises(RuntimeError, match="returned 0 outputs; output 0 is needed"):
            f(torch.ones(2))


def test_keyboard_interrupt_in_a_backend_propagates_and_state_is_restored():
    calls = []

    def interrupted(gm, example_inputs):
        calls.append(1)
        torch._C._set_grad_enabled(False)
        torch.set_autocast_enabled("cpu", True)
        if len(calls) == 1:
            raise KeyboardInterrupt
        return gm.forward

    f = cdynamo.compile(lambda x: (x * 2).sin(), backend=interrupted)
    x = torch.randn(3, requires_grad=True)
    with pytest.raises(KeyboardInterrupt):
        f(x)
    assert torch_state() == (True, False, torch.bfloat16, False)
    r = f(x)  # the lock was released and nothing was cached: compiles again, works
    assert torch.allclose(r, (x * 2).sin()) and r.requires_grad
    assert torch_state()[:2] == (True, False)


def test_backend_that_runs_the_graph_under_no_grad_leaves_grad_mode_alone():
    # Fuzzer bug F1: aot_eager traces a graph that sets grad mode (a no_grad block before a
    # break) and left it off; the fresh entry's grad-mode guard then failed.
    def f(x):
        with torch.no_grad():
            v = x.sum().item()  # graph break inside no_grad
            t = x * 2
        return t, v

    cf = cdynamo.compile(f, backend="aot_eager")
    for _ in range(2):
        x = torch.randn(4)
        got, want = cf(x), f(x)
        assert torch.equal(got[0], want[0]) and got[1] == want[1]
        assert torch.is_grad_enabled()
    assert not cdynamo.stats()["native_frames"]


def test_backend_that_consumes_random_numbers_does_not_change_the_program_stream():
    def rng_backend(gm, example_inputs):
        torch.randn(100)  # e.g. a backend that benchmarks on random data
        return gm.forward

    f = cdynamo.compile(lambda x: x + 1, backend=rng_backend)
    torch.manual_seed(0)
    f(torch.ones(2))
    got = torch.rand(3)
    torch.manual_seed(0)
    want = torch.rand(3)
    assert torch.equal(got, want)


# ---------------------------------------------------------------------------------------- user code run while tracing or guarding

class Loud:
    """An object whose __eq__/__hash__ count their calls and can raise."""

    log = []

    def __init__(self, v, fail=False):
        self.v, self.fail = v, fail

    def __hash__(self):
        Loud.log.append("hash")
        if self.fail:
            raise RuntimeError("hash failed")
        return hash(self.v)

    def __eq__(self, other):
        Loud.log.append("eq")
        return isinstance(other, Loud) and self.v == other.v


def test_user_hash_that_raises_while_traced_raises_as_eagerly():
    def f(x, k):
        d = {k: 1}
        return x + d[k]

    cf = cdynamo.compile(f, backend=CompileCounter())
    for _ in range(2):
        with pytest.raises(RuntimeError, match="hash failed"):
            f(torch.ones(2), Loud(1, fail=True))
        with pytest.raises(RuntimeError, match="hash failed"):
            cf(torch.ones(2), Loud(1, fail=True))


def test_user_hash_and_eq_run_as_often_as_eagerly():
    def f(x, k, d):
        return x + d[k]

    cf = cdynamo.compile(f, backend=CompileCounter())
    key = Loud(1)
    for _ in range(3):
        d = {Loud(1): 5}
        Loud.log.clear()
        want = f(torch.ones(2), key, d)
        eager_log = list(Loud.log)
        Loud.log.clear()
        got = cf(torch.ones(2), key, d)
        assert torch.equal(got, want)
        assert Loud.log == eager_log


class Prop:
    def __init__(self):
        self.reads = 0
        self.t = torch.ones(2)

    @property
    def value(self):
        self.reads += 1
        if self.reads > 100:
            raise RuntimeError("too many reads")
        return self.t * self.reads


def test_property_with_side_effects_runs_once_per_call():
    def f(o, x):
        return o.value + x

    cf = cdynamo.compile(f, backend=CompileCounter())
    oe, oc = Prop(), Prop()
    for _ in range(3):
        x = torch.randn(2)
        assert torch.equal(cf(oc, x), f(oe, x))
        assert oc.reads == oe.reads


class FlakyGetattr:
    """__getattr__ that raises KeyboardInterrupt on its first call only (a Ctrl-C that lands
    while the attribute is being read)."""

    def __init__(self):
        self.__dict__["calls"] = 0

    def __getattr__(self, name):
        self.__dict__["calls"] += 1
        if self.__dict__["calls"] == 1:
            raise KeyboardInterrupt
        return torch.ones(2)


def test_keyboard_interrupt_while_tracing_propagates():
    def f(o, x):
        return o.anything + x

    with pytest.raises(KeyboardInterrupt):
        f(FlakyGetattr(), torch.ones(2))
    cf = cdynamo.compile(f, backend=CompileCounter())
    with pytest.raises(KeyboardInterrupt):
        cf(FlakyGetattr(), torch.ones(2))
    assert torch.equal(cf(FlakyGetattr.__new__(FlakyGetattr) if False else _ready(), torch.ones(2)), torch.ones(2) * 2)


def _ready():
    o = FlakyGetattr()
    o.__dict__["calls"] = 1
    return o


# ---------------------------------------------------------------------------------------- recursion

def _run(body, timeout=180):
    src = "import faulthandler, sys, torch, cdynamo\nfaulthandler.dump_traceback_later(%d, exit=True)\n" % (timeout - 10)
    src += textwrap.dedent(body)
    p = subprocess.run([sys.executable, "-c", src], capture_output=True, text=True, timeout=timeout)
    assert p.returncode == 0, "exit %d\n%s\n%s" % (p.returncode, p.stdout[-3000:], p.stderr[-6000:])
    return p.stdout


def test_deep_recursion_raises_recursion_error_as_eagerly():
    # In a subprocess: a C++ stack overflow in the tracer would kill the process.
    out = _run("""
        def r(x, n):
            if n == 0:
                return x
            return r(x + 1, n - 1)
        sys.setrecursionlimit(1000)
        try:
            r(torch.ones(1), 5000)
        except RecursionError as e:
            eager = type(e).__name__
        c = cdynamo.compile(r, backend="eager")
        try:
            c(torch.ones(1), 5000)
            got = "returned"
        except RecursionError as e:
            got = type(e).__name__
        assert got == eager, got
        assert torch.equal(c(torch.ones(1), 30), torch.ones(1) + 30)   # and shallow recursion works
        print("ok")
    """)
    assert "ok" in out


@pytest.mark.skipif("libasan" in os.environ.get("LD_PRELOAD", ""),
                    reason="ASan's allocator reports running out of memory itself instead of throwing std::bad_alloc")
def test_memory_running_out_in_the_tracer_runs_the_frame_natively():
    # In a subprocess under an address-space limit: `lst += lst` doubling a list to 1.5M
    # items, each item modelled and guarded, outgrows the tracer's memory long before the
    # program's (its list is 12 MB). The tracer's std::bad_alloc aborted the process (fuzzer
    # seed 95000); the frame now runs natively with that reason, and the result is eager's.
    out = _run("""
        import resource
        mapped = 0
        for line in open("/proc/self/maps"):
            a, b = line.split()[0].split("-")
            mapped += int(b, 16) - int(a, 16)
        limit = mapped + 400 * 2**20
        resource.setrlimit(resource.RLIMIT_AS, (limit, limit))

        def f(x, lst):
            for _ in range(19):
                lst += lst
            return x + len(lst)

        c = cdynamo.compile(f, backend="eager")
        got, lst = c(torch.ones(1), [1, 2, 3]), [1, 2, 3]
        assert torch.equal(got, f(torch.ones(1), lst)), got
        reasons = [n["reason"] for n in cdynamo.stats()["native_frames"]]
        assert any("out of memory while tracing" in r for r in reasons), reasons
        print("ok")
    """)
    assert "ok" in out


# ---------------------------------------------------------------------------------------- generators, coroutines

def test_generator_function_compiled():
    def gen(x, n):
        for i in range(n):
            yield x * i

    cg = cdynamo.compile(gen, backend=CompileCounter())
    x = torch.randn(3)
    got, want = list(cg(x, 4)), list(gen(x, 4))
    assert len(got) == len(want) and all(torch.equal(a, b) for a, b in zip(got, want))


def test_coroutine_and_async_generator_compiled():
    async def co(x):
        await asyncio.sleep(0)
        return x * 2

    async def agen(x):
        for i in range(3):
            await asyncio.sleep(0)
            yield x + i

    async def collect(g):
        return [v async for v in g]

    x = torch.randn(2)
    assert torch.equal(asyncio.run(cdynamo.compile(co, backend=CompileCounter())(x)), x * 2)
    got = asyncio.run(collect(cdynamo.compile(agen, backend=CompileCounter())(x)))
    assert all(torch.equal(a, x + i) for i, a in enumerate(got)) and len(got) == 3


def test_compiled_function_that_calls_a_generator():
    def gen(x):
        yield x + 1
        yield x * 2

    def f(x):
        return sum(gen(x))

    cf = cdynamo.compile(f, backend=CompileCounter())
    x = torch.randn(3)
    for _ in range(2):
        assert torch.allclose(cf(x), f(x))


# ---------------------------------------------------------------------------------------- torch.compile mixed in

def test_cdynamo_calls_torch_compile_and_the_reverse():
    import torch._dynamo

    tc = torch.compile(lambda x: x.cos() * 2, backend="eager")

    def f(x):
        return tc(x) + 1

    cf = cdynamo.compile(f, backend="eager")
    cd = cdynamo.compile(lambda x: x.sin() - 1, backend="eager")

    def g(x):
        return cd(x) * 3

    tg = torch.compile(g, backend="eager")
    for _ in range(3):
        x = torch.randn(4)
        assert torch.allclose(cf(x), x.cos() * 2 + 1)
        assert torch.allclose(tg(x), (x.sin() - 1) * 3)
    torch._dynamo.reset()


def test_torch_compile_after_its_hook_was_left_installed():
    # torch._dynamo can leave its frame hook installed after a compile that raised (here: a
    # recompile under the fail_on_recompile stance); cdynamo's hook then goes in over it and
    # hands it the frames that are not cdynamo's, and it hands back to its predecessor (us)
    # the frames it does not want. Such a frame must run, not bounce between the two hooks.
    out = _run("""
        def g(x):
            return x * 7

        f = torch.compile(g, backend="eager")
        f(torch.randn(2))
        with torch.compiler.set_stance("fail_on_recompile"):
            try:
                f(torch.ones(3))
            except RuntimeError:
                pass
        tc = torch.compile(lambda x: x.cos() * 2, backend="eager")

        def ff(x):
            return tc(x) + 1

        cf = cdynamo.compile(ff, backend="eager")
        for _ in range(3):
            x = torch.randn(4)
            assert torch.allclose(cf(x), x.cos() * 2 + 1)
        print("ok")
    """, timeout=120)
    assert out.strip().endswith("ok")


# ---------------------------------------------------------------------------------------- tracing functions

def test_settrace_sees_the_lines_of_a_compiled_function():
    def f(x):
        y = x + 1
        z = y * 2
        return z

    def lines_of(fn, x):
        seen = []

        def tracer(frame, event, arg):
            if frame.f_code is f.__code__ and event == "line":
                seen.append(frame.f_lineno)
            return tracer

        sys.settrace(tracer)
        try:
            r = fn(x)
        finally:
            sys.settrace(None)
        return r, seen

    cf = cdynamo.compile(f, backend=CompileCounter())
    x = torch.randn(2)
    cf(x)  # compiled before the tracer comes
    want = lines_of(f, x)
    got = lines_of(cf, x)
    assert torch.equal(got[0], want[0]) and got[1] == want[1] and want[1]
    assert torch.equal(cf(x), f(x))  # and without a tracer the entry runs again
    assert cdynamo.stats()["cache_hits"] >= 1


def test_setprofile_sees_the_calls_of_a_compiled_function():
    def helper(x):
        return x * 2

    def f(x):
        return helper(x) + 1

    def calls_of(fn, x):
        seen = []
        sys.setprofile(lambda frame, event, arg: seen.append(frame.f_code.co_name) if event == "call" else None)
        try:
            fn(x)
        finally:
            sys.setprofile(None)
        return [n for n in seen if n in ("f", "helper")]

    cf = cdynamo.compile(f, backend=CompileCounter())
    x = torch.randn(2)
    cf(x)
    assert calls_of(cf, x) == calls_of(f, x) == ["f", "helper"]


class _Records(logging.Handler):
    def __init__(self):
        super().__init__(logging.DEBUG)
        self.messages = []

    def emit(self, record):
        self.messages.append(record.getMessage())


@pytest.fixture
def fake_tensor_log():
    logger = logging.getLogger("torch._subclasses.fake_tensor")
    handler = _Records()
    logger.addHandler(handler)
    try:
        yield handler.messages
    finally:
        logger.removeHandler(handler)


def _stack_or_message(x, y):
    try:
        out = torch.stack([x, y])
    except RuntimeError as e:
        return x.sin(), str(e)
    return out.cos(), None


def test_a_failing_op_of_the_program_is_not_logged_by_fake_tensor_mode(fake_tensor_log):
    # The program's own torch.stack of unequal sizes fails on the fakes as eagerly; torch's
    # fake-tensor logger would print the traceback to stderr during the trace.
    cnt = CompileCounter()
    fn = cdynamo.compile(_stack_or_message, backend=cnt)
    for x, y in [(torch.ones(2), torch.ones(3)), (torch.ones(2) * 2, torch.ones(3)), (torch.ones(2), torch.ones(2))]:
        got, want = fn(x, y), _stack_or_message(x, y)
        assert torch.equal(got[0], want[0]) and got[1] == want[1]
    s = cdynamo.stats()
    assert s["cache_hits"] == 1 and s["cache_misses"] == 2
    # Unequal sizes: the frame breaks at the stack (no graph before it), which runs eagerly
    # and raises into the handler; equal sizes: one graph.
    assert [b["reason"].split(":")[0] for b in s["graph_break_reasons"]] == ["running stack on fake tensors"]
    assert cnt.frame_count == 1
    assert fake_tensor_log == []


def test_fake_tensor_errors_are_still_logged_outside_the_trace_and_in_a_backend(fake_tensor_log):
    from torch._subclasses.fake_tensor import FakeTensorMode

    def stack_fakes():
        with FakeTensorMode() as mode:
            a, b = mode.from_tensor(torch.ones(2)), mode.from_tensor(torch.ones(3))
            with pytest.raises(RuntimeError, match="stack expects"):
                torch.stack([a, b])

    stack_fakes()
    assert len(fake_tensor_log) == 1 and "failed while attempting to run meta" in fake_tensor_log[0]

    def backend(gm, example_inputs):
        stack_fakes()  # the backend's own fake propagation: its errors are its to report
        return gm

    fn = cdynamo.compile(lambda x: x + 1, backend=backend)
    assert torch.equal(fn(torch.ones(2)), torch.ones(2) + 1)
    assert len(fake_tensor_log) == 2
