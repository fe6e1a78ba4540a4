"""The user-facing API: decorator forms, backends, errors, fallbacks, stats, logs, reset."""
import logging
import threading

import pytest
import torch
import torch._dynamo.testing

import cdynamo
from cdynamo.testing import CompileCounter


def test_decorator_forms_and_wrapper_metadata():
    @cdynamo.compile
    def a(x):
        """doc of a"""
        return x + 1

    @cdynamo.compile(backend="eager", fullgraph=True)
    def b(x):
        return x + 2

    x = torch.randn(2)
    torch.testing.assert_close(a(x), x + 1)
    torch.testing.assert_close(b(x), x + 2)
    assert a.__name__ == "a" and a.__doc__ == "doc of a" and a.__wrapped__.__name__ == "a"


def test_compiled_method_binds_self():
    class Holder:
        def __init__(self):
            self.k = 3.0

        @cdynamo.compile(backend="eager")
        def scale(self, x):
            return x * 2

    x = torch.randn(2)
    torch.testing.assert_close(Holder().scale(x), x * 2)


def dynamo_frame_count(fn, *argsets):
    """How many graphs torch._dynamo compiles running fn on each argument tuple in turn."""
    ref = torch._dynamo.testing.CompileCounter()
    torch._dynamo.reset()
    rf = torch.compile(fn, backend=ref)
    for args in argsets:
        rf(*args)
    return ref.frame_count


def test_data_dependent_branch_is_a_graph_break_with_reason_and_line():
    cnt = CompileCounter()

    def f(x):
        y = x * 2
        if y.sum() > 0:  # data-dependent branch: the graph breaks at the jump
            return y.relu()
        return y.tanh()

    cf = cdynamo.compile(f, backend=cnt)
    pos, neg = torch.ones(3), -torch.ones(3)
    for x in (pos, neg, pos, neg):  # each branch on its first call, then from the cache
        torch.testing.assert_close(cf(x), f(x))
    # The graph up to the jump (mul, sum, gt), then one resume function per branch.
    assert cnt.frame_count == 3 == dynamo_frame_count(f, (pos,), (neg,))
    ops = [[n.target if n.op == "call_method" else n.target.__name__ for n in g.graph.nodes if "call" in n.op]
           for g in cnt.graphs]
    assert ops == [["mul", "sum", "gt"], ["relu"], ["tanh"]]
    s = cdynamo.stats()
    assert (s["graph_breaks"], s["frames_captured"], s["frames_native"]) == (1, 3, 0)
    assert s["native_frames"] == []
    (gb,) = s["graph_break_reasons"]
    assert gb["reason"] == "control flow depends on a tensor's value (data-dependent branch)"
    assert gb["filename"] == __file__
    assert gb["line"] == f.__code__.co_firstlineno + 2
    assert gb["function"].startswith(f.__qualname__)
    assert f"{__file__}:{gb['line']} in {f.__qualname__}" in gb["user_stack"]


def test_graph_break_keeps_the_callers_containers():
    def f(x, log, cfg):
        y = x * 2
        if y.sum() > 0:  # graph break
            log.append("positive")
            cfg["sign"] = 1
        return y, log, cfg

    cf = cdynamo.compile(f, backend="eager")
    log, cfg = [], {}
    out = cf(torch.ones(2), log, cfg)
    assert cdynamo.stats()["graph_breaks"] == 1
    torch.testing.assert_close(out[0], torch.full((2,), 2.0))
    assert (log, cfg) == (["positive"], {"sign": 1}), "eager changes the caller's list and dict"
    assert out[1] is log and out[2] is cfg


def test_frame_that_cannot_be_resumed_runs_natively_and_is_reported():
    # A break inside an autocast block: cdynamo cannot re-enter autocast in a resume
    # function yet, so the break at the branch makes f run natively, with both reasons.
    cnt = CompileCounter()

    def f(x):
        y = x * 2
        with torch.autocast("cpu", enabled=False):
            if y.sum() > 0:
                return y.relu()
            return y.tanh()

    cf = cdynamo.compile(f, backend=cnt)
    pos, neg = torch.ones(3), -torch.ones(3)
    for x in (pos, neg, pos):
        torch.testing.assert_close(cf(x), f(x))
    s = cdynamo.stats()
    assert (s["graph_breaks"], s["frames_native"]) == (0, 1)
    assert s["graph_break_reasons"] == []
    (nf,) = s["native_frames"]
    assert nf["reason"] == ("control flow depends on a tensor's value (data-dependent branch) (and no graph break "
                            "is possible there: graph break inside a `with` block of a context manager other than "
                            "no_grad/enable_grad/set_grad_enabled)")
    assert nf["filename"] == __file__
    assert nf["line"] == f.__code__.co_firstlineno + 3
    assert nf["function"] == f.__qualname__
    assert cnt.frame_count == 0


def test_fullgraph_raises_unsupported_with_reason_and_line():
    def helper(x):
        print("side effect")
        return x

    def f(x):
        return helper(x + 1)

    cf = cdynamo.compile(f, backend="eager", fullgraph=True)
    with pytest.raises(cdynamo.Unsupported) as info:
        cf(torch.randn(2))
    msg = str(info.value)
    assert "print" in msg
    assert f"{__file__}:{helper.__code__.co_firstlineno + 1}" in msg
    assert "in test_fullgraph_raises_unsupported_with_reason_and_line.<locals>.f" in msg  # the inlined chain


def test_backend_that_raises_gives_backend_compiler_failed():
    def bad_backend(gm, example_inputs):
        raise ValueError("boom")

    cf = cdynamo.compile(lambda x: x + 1, backend=bad_backend)
    with pytest.raises(cdynamo.BackendCompilerFailed) as info:
        cf(torch.randn(2))
    assert isinstance(info.value.__cause__, ValueError)
    assert "boom" in str(info.value.__cause__)


def test_backend_returning_non_callable_gives_backend_compiler_failed():
    cf = cdynamo.compile(lambda x: x + 1, backend=lambda gm, ex: 42)
    with pytest.raises(cdynamo.BackendCompilerFailed, match="non-callable"):
        cf(torch.randn(2))


def test_backend_receives_graph_module_and_real_example_inputs():
    seen = {}

    def backend(gm, example_inputs):
        seen["gm"] = gm
        seen["inputs"] = example_inputs
        return gm.forward

    x = torch.randn(3)
    cdynamo.compile(lambda t: t.sin() * 2, backend=backend)(x)
    assert isinstance(seen["gm"], torch.fx.GraphModule)
    assert len(seen["inputs"]) == 1 and seen["inputs"][0] is x
    ops = [n.target for n in seen["gm"].graph.nodes if n.op in ("call_function", "call_method")]
    assert ops[0] == "sin"


def test_eager_error_is_raised_the_same_way():
    def f(x, y):
        return x @ y

    cf = cdynamo.compile(f, backend="eager")
    with pytest.raises(RuntimeError) as eager_err:
        f(torch.randn(2, 3), torch.randn(2, 3))
    with pytest.raises(RuntimeError) as compiled_err:
        cf(torch.randn(2, 3), torch.randn(2, 3))
    assert str(compiled_err.value) == str(eager_err.value)


def test_reset_drops_entries():
    cnt = CompileCounter()
    cf = cdynamo.compile(lambda x: x + 1, backend=cnt)
    cf(torch.randn(2))
    assert cdynamo.stats()["cache_entries"] == 1
    cdynamo.reset()
    assert cdynamo.stats()["cache_entries"] == 0
    cf(torch.randn(2))
    assert cnt.frame_count == 2


def test_cache_size_limit_falls_back_to_native():
    # Past the limit the entries still hit and the other calls run natively (one warning);
    # tests/dynamic/test_recompile_policy.py has the policy in full.
    cnt = CompileCounter()
    cf = cdynamo.compile(lambda x: x + 1, backend=cnt, dynamic=False)
    with pytest.warns(UserWarning, match="recompile_limit"):
        for n in range(1, 12):
            torch.testing.assert_close(cf(torch.ones(n)), torch.full((n,), 2.0))
    assert cnt.frame_count == cdynamo.config.cache_size_limit
    assert cdynamo.stats()["native_frames"] == []


def test_recompile_reason_is_logged(caplog):
    cdynamo.set_logs("recompiles")
    try:
        cf = cdynamo.compile(lambda x: x * 2, backend="eager")
        cf(torch.randn(2))
        with caplog.at_level(logging.INFO, logger="cdynamo"):
            cdynamo._logging.log.propagate = True
            cf(torch.randn(3))
    finally:
        cdynamo._logging.log.propagate = False
        cdynamo.set_logs("")
    text = "\n".join(r.getMessage() for r in caplog.records)
    assert "Recompiling" in text and "size of dim 0 of L['x']: expected 2, got 3" in text


def test_unknown_log_channel_is_an_error():
    with pytest.raises(ValueError, match="unknown channel"):
        cdynamo.set_logs("nonsense")


def test_generator_functions_run_natively():
    def gen(x):
        yield x + 1
        yield x + 2

    cf = cdynamo.compile(gen, backend="eager")
    x = torch.zeros(1)
    assert [t.item() for t in cf(x)] == [1.0, 2.0]


def test_dynamic_true_compiles_one_symbolic_entry():
    cnt = CompileCounter()
    cf = cdynamo.compile(lambda x: x * 2, backend=cnt, dynamic=True)
    for n in (3, 4, 7):
        torch.testing.assert_close(cf(torch.ones(n)), torch.ones(n) * 2)
    assert cnt.frame_count == 1


def test_threads_share_the_cache_safely():
    cnt = CompileCounter()
    cf = cdynamo.compile(lambda x, y: (x @ y).relu() + 1, backend=cnt, dynamic=False)
    errors = []

    def worker(seed):
        try:
            g = torch.Generator().manual_seed(seed)
            for i in range(200):
                n = 2 + (i % 3)
                x, y = torch.randn(n, n, generator=g), torch.randn(n, n, generator=g)
                torch.testing.assert_close(cf(x, y), (x @ y).relu() + 1)
        except Exception as e:  # pragma: no cover - reported below
            errors.append(e)

    threads = [threading.Thread(target=worker, args=(s,)) for s in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors
    assert cnt.frame_count == 3  # one entry per shape, whichever thread compiled it


def test_hook_is_off_outside_compiled_calls():
    cf = cdynamo.compile(lambda x: x + 1, backend="eager")
    cf(torch.randn(1))
    before = cdynamo.stats()["frames_seen"]

    def plain(x):
        return x + 1

    plain(torch.randn(1))
    assert cdynamo.stats()["frames_seen"] == before


STEP = 0


def test_generator_with_side_effects_is_not_reordered():
    # A generator's frame pauses at each yield: the global it sets before each
    # yield is what the consumer reads at that step, never the final state. One graph.
    def steps(n):
        global STEP
        for i in range(n):
            STEP = i
            yield i

    def f(x):
        out = x
        for i in steps(3):
            out = out + STEP * i
        return out

    cnt = CompileCounter()
    cf = cdynamo.compile(f, backend=cnt)
    x = torch.zeros(2)
    torch.testing.assert_close(cf(x), f(x))
    torch.testing.assert_close(cf(x), torch.full((2,), 5.0))
    assert cnt.frame_count == 1
    assert not cdynamo.stats()["native_frames"]


def test_explain_reports_graphs_ops_guards_and_reasons():
    def captured(x, y):
        return (x @ y).relu() + 1

    report = cdynamo.explain(captured)(torch.randn(2, 2), torch.randn(2, 2))
    assert (report.graph_count, report.graph_break_count, report.op_count) == (1, 0, 3)
    assert report.ops_per_graph == [["matmul", "relu", "add"]]
    assert any("L['x'] matches Tensor" in g for g in report.guards)
    assert "Graph Count: 1" in str(report)

    def branchy(x):
        if x.sum() > 0:
            return x + 1
        return x - 1

    x = torch.ones(2)
    report = cdynamo.explain(branchy)(x)
    torch.testing.assert_close(report.out, branchy(x))
    # A graph break at the branch: the graph up to it, and the resume function of the
    # branch taken (as torch._dynamo.explain: 2 graphs, 1 break).
    assert (report.graph_count, report.graph_break_count) == (2, 1)
    ref = torch._dynamo.explain(branchy)(x)
    assert (ref.graph_count, ref.graph_break_count) == (2, 1)
    assert report.ops_per_graph == [["sum", "gt"], ["add"]]
    (reason,) = report.break_reasons
    assert reason.reason == "control flow depends on a tensor's value (data-dependent branch)"
    assert reason.filename == __file__ and reason.lineno == branchy.__code__.co_firstlineno + 1
    assert reason.function.startswith(branchy.__qualname__)
    text = str(report)
    assert "Graph Count: 2" in text and "Graph Break Count: 1" in text and "Break Reason 1" in text

    # Breaks come first, then frames that ran natively (each counts as one break).
    def unresumable(x):
        with torch.autocast("cpu", enabled=False):
            if x.sum() > 0:
                return x + 1
            return x - 1

    def both(x):
        y = branchy(x)  # inlined: both breaks at this call, branchy then runs as a frame
        return unresumable(y)  # the same in both's resume function

    report = cdynamo.explain(both)(x)
    torch.testing.assert_close(report.out, both(x))
    branch_line = branchy.__code__.co_firstlineno + 1
    cell_line = unresumable.__code__.co_firstlineno + 2
    # (A resume function is named after the line of the break it follows, as torch._dynamo's.)
    where = [(b.function.split(" (")[0], b.lineno) for b in report.break_reasons]
    assert where == [(both.__qualname__, branch_line), (branchy.__qualname__, branch_line),
                     (f"{both.__qualname__}.<resume at line {both.__code__.co_firstlineno + 1}>", cell_line),
                     (unresumable.__qualname__, cell_line)]
    assert "autocast" not in report.break_reasons[2].reason
    assert report.break_reasons[3].reason.endswith("other than no_grad/enable_grad/set_grad_enabled)")
    # Captured: branchy's graph up to its branch and its resume function; both's graphs
    # before each call are empty (nothing compiled), unresumable ran natively.
    assert report.ops_per_graph == [["sum", "gt"], ["add"]]


def test_extension_refuses_another_torch_version():
    # The tensor guards read torch's C++ objects by the layout of the torch version the
    # extension was built against; under another torch, importing cdynamo must fail plainly.
    import os
    import subprocess
    import sys

    src = os.path.dirname(os.path.dirname(os.path.abspath(cdynamo.__file__)))
    code = ("import torch\n"
            "torch.__version__ = '2.99.0+cpu'\n"
            "try:\n"
            "    import cdynamo\n"
            "except ImportError as e:\n"
            "    print('ImportError:', e)\n"
            "else:\n"
            "    print('imported')\n")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120,
                         env=dict(os.environ, PYTHONPATH=src))
    assert out.returncode == 0, out.stderr
    assert "ImportError: cdynamo's extension was built against torch 2.13.0 but torch 2.99.0+cpu" in out.stdout
    assert "make build" in out.stdout


def test_guard_fail_fn_gets_the_reason_of_each_recompile():
    failures = []
    scale = {"k": 2}

    def fn(x):
        return x * scale["k"]

    cf = cdynamo.compile(fn, backend=CompileCounter(), guard_fail_fn=failures.append)
    x = torch.ones(3)
    assert torch.equal(cf(x), fn(x))
    assert torch.equal(cf(x), fn(x))
    assert failures == []  # hits report nothing
    scale["k"] = 5
    assert torch.equal(cf(x), fn(x))
    assert len(failures) == 1
    reason, code = failures[0]
    assert failures[0].reason == reason and code is fn.__code__
    assert "['scale']['k'] == 2, got 5" in reason, reason
    # Under install(), torch._dynamo.optimize(guard_fail_fn=) takes it too.
    from cdynamo import _install
    seen = []
    opt = _install.optimize(CompileCounter(), guard_fail_fn=seen.append)(fn)
    opt(x)
    scale["k"] = 7
    assert torch.equal(opt(x), fn(x))
    assert len(seen) == 1


@pytest.mark.filterwarnings("ignore::pytest.PytestUnraisableExceptionWarning")
def test_a_guard_fail_fn_that_raises_does_not_break_the_call():
    def bad(failure):
        raise RuntimeError("boom")

    def fn(x, n):
        return x + n

    cnt = CompileCounter()
    cf = cdynamo.compile(fn, backend=cnt, dynamic=False, guard_fail_fn=bad)
    x = torch.ones(2)
    assert torch.equal(cf(x, 1), fn(x, 1))
    assert torch.equal(cf(x, 2), fn(x, 2))  # reported as unraisable; the call goes on
    assert cnt.frame_count == 2
