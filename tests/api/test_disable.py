"""cdynamo.disable: the counterpart of torch._dynamo.disable.

A disabled function runs natively and is never traced. A traced frame that calls one stops
there with the reason "call to <qualname>, which is wrapped by cdynamo.disable": a graph
break at the call, as in torch._dynamo (the graph before it, the call run natively, the
rest captured in a resume function), or, where no break is possible, the frame runs
natively as a whole. These tests check the results, which ops were captured (compared with
torch._dynamo's graphs on the same program) and which never were, and where the reason is
reported.
"""
import types

import pytest
import torch
import torch._dynamo.testing

import cdynamo
from cdynamo import _C
from cdynamo.testing import CompileCounter


def compiled(fn, **kw):
    cnt = CompileCounter()
    return cdynamo.compile(fn, backend=cnt, **kw), cnt


def ops_of(graphs):
    """Names of the calls in each graph: method names and function __name__s."""
    out = []
    for gm in graphs:
        names = set()
        for n in gm.graph.nodes:
            if n.op == "call_method":
                names.add(n.target)
            elif n.op == "call_function":
                names.add(getattr(n.target, "__name__", str(n.target)))
        out.append(names)
    return out


def dynamo_graphs(fn, *args):
    """The graphs torch._dynamo captures running fn(*args) once."""
    graphs = []

    def backend(gm, example_inputs):
        graphs.append(gm)
        return gm.forward

    torch._dynamo.reset()
    torch.compile(fn, backend=backend)(*args)
    return graphs


def break_reasons():
    return [b["reason"] for b in cdynamo.stats()["graph_break_reasons"]]


def native_reasons():
    return [nf["reason"] for nf in cdynamo.stats()["native_frames"]]


def sin_inner(x):
    return x.sin()


def test_decorator_forms_keep_metadata_and_run_eagerly():
    def plain(x):
        """doc"""
        return x + 1

    @cdynamo.disable
    def a(x):
        """doc of a"""
        return x * 2

    @cdynamo.disable(recursive=False)
    def b(x):
        return x * 3

    c = cdynamo.disable(plain)
    x = torch.randn(3)
    torch.testing.assert_close(a(x), x * 2)
    torch.testing.assert_close(b(x), x * 3)
    torch.testing.assert_close(c(x), x + 1)
    assert (a.__name__, a.__doc__, a.__wrapped__.__name__) == ("a", "doc of a", "a")
    assert c.__wrapped__ is plain and c.__qualname__ == plain.__qualname__ and c.__doc__ == "doc"
    # torch's own disable has the same call forms.
    assert torch._dynamo.disable(plain)(x).equal(c(x))
    with pytest.raises(TypeError):
        cdynamo.disable(3)


def test_traced_call_of_disabled_function_is_a_graph_break_with_reason():
    calls = []

    def body(x):
        calls.append(1)
        return sin_inner(x) + 1

    helper = cdynamo.disable(body)

    def f(x):
        return helper(x * 2) * 3

    cf, cnt = compiled(f)
    x = torch.randn(4)
    torch.testing.assert_close(cf(x), f(x))  # first call
    torch.testing.assert_close(cf(x), f(x))  # again: the same decision, from the cache
    assert len(calls) == 4, "the disabled body ran on every call, compiled or not"
    assert break_reasons() == [f"call to {body.__qualname__}, which is wrapped by cdynamo.disable"]
    assert native_reasons() == []
    (gb,) = cdynamo.stats()["graph_break_reasons"]
    assert (gb["filename"], gb["line"]) == (__file__, f.__code__.co_firstlineno + 1)
    # The graph before the call (x * 2) and the resume function's (* 3); nothing under the
    # disabled call is traced. The second call hits both cache entries.
    assert ops_of(cnt.graphs) == [{"mul"}, {"mul"}]
    s = cdynamo.stats()
    assert (s["graph_breaks"], s["cache_hits"], s["frames_native"]) == (1, 2, 0)
    # torch._dynamo on the same program with its own disable: the same graph break.
    ref_helper = torch._dynamo.disable(body)
    ref = dynamo_graphs(lambda x: ref_helper(x * 2) * 3, x)
    assert ops_of(ref) == ops_of(cnt.graphs)

    # Control: the same program without disable is captured whole, sin included.
    def helper2(x):
        return sin_inner(x) + 1

    def f2(x):
        return helper2(x * 2) * 3

    cf2, cnt2 = compiled(f2)
    torch.testing.assert_close(cf2(x), f2(x))
    assert cnt2.frame_count == 1 and "sin" in ops_of(cnt2.graphs)[0]


def test_fullgraph_raises_unsupported_with_the_reason():
    @cdynamo.disable
    def helper(x):
        return x + 1

    def f(x):
        return helper(x) * 2

    cf, cnt = compiled(f, fullgraph=True)
    with pytest.raises(cdynamo.Unsupported, match="call to .*helper, which is wrapped by cdynamo.disable"):
        cf(torch.randn(2))
    assert cnt.frame_count == 0


def test_explain_reports_the_reason():
    @cdynamo.disable
    def helper(x):
        return x + 1

    def f(x):
        return helper(x) * 2

    out = cdynamo.explain(f)(torch.randn(2))
    assert any("which is wrapped by cdynamo.disable" in b.reason for b in out.break_reasons)


def test_recursive_disable_compiled_directly_captures_nothing():
    def h(x):
        return sin_inner(x) + 1

    hd = cdynamo.disable(h)
    cf, cnt = compiled(hd)
    x = torch.randn(3)
    torch.testing.assert_close(cf(x), h(x))
    torch.testing.assert_close(cf(x), h(x))
    assert cnt.frame_count == 0
    s = cdynamo.stats()
    assert s["frames_captured"] == 0 and s["frames_native"] == 0, "skipped, not failed"
    # (torch.compile(torch._dynamo.disable(h)) unwraps the disabled wrapper and compiles h;
    # cdynamo keeps the user's decision.)
    cf2, cnt2 = compiled(h)  # control
    torch.testing.assert_close(cf2(x), h(x))
    assert cnt2.frame_count == 1


def test_non_recursive_skips_only_its_own_frame():
    def h(x):
        return sin_inner(x) + 1  # h's own op (+ 1) is never captured; sin_inner is

    hd = cdynamo.disable(h, recursive=False)
    assert _C.is_disabled(h.__code__)
    cf, cnt = compiled(hd)
    x = torch.randn(3)
    torch.testing.assert_close(cf(x), h(x))
    torch.testing.assert_close(cf(x), h(x))
    assert cnt.frame_count == 1 and ops_of(cnt.graphs) == [{"sin"}]
    assert cdynamo.stats()["cache_hits"] == 1

    # Called from a traced frame: a graph break at the call; sin_inner is still captured
    # when h runs. torch._dynamo captures the same three graphs.
    def f(x):
        return hd(x * 2) * 3

    ref_hd = torch._dynamo.disable(h, recursive=False)
    ref_graphs = dynamo_graphs(lambda x: ref_hd(x * 2) * 3, x)
    cdynamo.reset()
    cf, cnt = compiled(f)
    torch.testing.assert_close(cf(x), f(x))
    torch.testing.assert_close(cf(x), f(x))
    assert break_reasons() == [f"call to {h.__qualname__}, which is wrapped by cdynamo.disable"]
    assert native_reasons() == []
    # x * 2 before the call, sin_inner when h runs it, * 3 after; h's own + 1 never.
    assert ops_of(cnt.graphs) == [{"mul"}, {"sin"}, {"mul"}]
    assert ops_of(ref_graphs) == ops_of(cnt.graphs)
    assert cdynamo.stats()["cache_hits"] == 3


def test_marks_survive_reset():
    def h(x):
        return sin_inner(x) + 1

    hd = cdynamo.disable(h, recursive=False)
    hr = cdynamo.disable(h)
    for _ in range(2):
        cdynamo.reset()
        assert _C.is_disabled(h.__code__) and _C.is_disabled(hr.__code__)
        cf, cnt = compiled(hd)
        x = torch.randn(3)
        torch.testing.assert_close(cf(x), h(x))
        assert ops_of(cnt.graphs) == [{"sin"}], "h itself is still skipped after reset()"
        cf, cnt = compiled(hr)
        torch.testing.assert_close(cf(x), h(x))
        assert cnt.frame_count == 0


def test_compiled_function_called_inside_a_disabled_one_is_compiled():
    inner, cnt = compiled(sin_inner)

    @cdynamo.disable
    def helper(x):
        return inner(x) + 1

    outer, outer_cnt = compiled(lambda x: helper(x) * 2)
    x = torch.randn(3)
    torch.testing.assert_close(outer(x), (x.sin() + 1) * 2)
    torch.testing.assert_close(outer(x), (x.sin() + 1) * 2)
    assert cnt.frame_count == 1 and ops_of(cnt.graphs) == [{"sin"}]
    # The outer frame breaks at the call (nothing before it to compile); its resume
    # function's graph is the * 2. torch._dynamo: the same single graph.
    assert break_reasons() == [f"call to {helper.__qualname__}, which is wrapped by cdynamo.disable"]
    assert ops_of(outer_cnt.graphs) == [{"mul"}]
    ref_inner = torch.compile(sin_inner, backend="eager")
    ref_helper = torch._dynamo.disable(lambda x: ref_inner(x) + 1)
    assert ops_of(dynamo_graphs(lambda x: ref_helper(x) * 2, x)) == [{"mul"}]


def test_disable_of_a_compiled_function_disables_the_function():
    def f(x):
        return x.cos()

    cf, cnt = compiled(f)
    d = cdynamo.disable(cf)
    assert d.__wrapped__ is f
    x = torch.randn(3)
    torch.testing.assert_close(cdynamo.compile(d, backend=cnt)(x), x.cos())
    assert cnt.frame_count == 0


def test_disabled_method_called_through_self():
    class Holder:
        def __init__(self):
            self.calls = 0

        @cdynamo.disable
        def helper(self, x):
            self.calls += 1
            return x.sin()

        def run(self, x):
            return self.helper(x) + 1

    h = Holder()
    cf, cnt = compiled(lambda x: h.run(x))
    x = torch.randn(3)
    torch.testing.assert_close(cf(x), x.sin() + 1)
    torch.testing.assert_close(cf(x), x.sin() + 1)
    assert h.calls == 2
    # run() is inlined into the lambda, so the lambda breaks at its call of run; run then
    # runs as a frame of its own and breaks at self.helper. Its resume function has the + 1.
    reason = f"call to {Holder.helper.__qualname__}, which is wrapped by cdynamo.disable"
    assert break_reasons() == [reason, reason]
    assert [b["function"].split(" (")[0] for b in cdynamo.stats()["graph_break_reasons"]] == [
        "test_disabled_method_called_through_self.<locals>.<lambda>", Holder.run.__qualname__]
    assert native_reasons() == []
    assert ops_of(cnt.graphs) == [{"add"}]

    class RefHolder:
        @torch._dynamo.disable
        def helper(self, x):
            return x.sin()

        def run(self, x):
            return self.helper(x) + 1

    r = RefHolder()
    assert ops_of(dynamo_graphs(lambda x: r.run(x), x)) == ops_of(cnt.graphs)


def test_disabled_torch_function_is_not_recorded_as_a_graph_op():
    # functools.wraps gives the wrapper relu's __module__ (torch.nn.functional): the
    # disabled check must come before the tracer's "is this a torch function" test.
    relu = cdynamo.disable(torch.nn.functional.relu)

    def f(x):
        return relu(x) + 1

    cf, cnt = compiled(f)
    x = torch.randn(5)
    torch.testing.assert_close(cf(x), f(x))
    torch.testing.assert_close(cf(x), f(x))
    assert break_reasons() == ["call to relu, which is wrapped by cdynamo.disable"]
    assert native_reasons() == []
    assert ops_of(cnt.graphs) == [{"add"}], "relu ran natively, only the + 1 after it is captured"
    ref_relu = torch._dynamo.disable(torch.nn.functional.relu)
    assert ops_of(dynamo_graphs(lambda x: ref_relu(x) + 1, x)) == ops_of(cnt.graphs)


def test_function_made_in_the_trace_from_disabled_code():
    def outer(x):
        def inner(y):
            return y.cos()

        return inner(x) * 2

    inner_code = next(c for c in outer.__code__.co_consts if isinstance(c, types.CodeType))
    # Disabling one function made from this code (recursive=False) marks the code, so the
    # functions the trace makes from it are not traced either.
    cdynamo.disable(types.FunctionType(inner_code, globals()), recursive=False)
    cf, cnt = compiled(outer)
    x = torch.randn(3)
    torch.testing.assert_close(cf(x), outer(x))
    torch.testing.assert_close(cf(x), outer(x))
    # A graph break at that call: inner, made in the trace, is rebuilt as a real function
    # for the break code, runs natively (its code is disabled), and outer's resume
    # function captures the `* 2`.
    assert break_reasons() == ["call to test_function_made_in_the_trace_from_disabled_code.<locals>.outer.<locals>.inner, "
                               "which is wrapped by cdynamo.disable"]
    assert native_reasons() == []
    assert cnt.frame_count == 1
    assert [n.target.__name__ for n in cnt.graphs[0].graph.nodes if n.op == "call_function"] == ["mul"]


class Block(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.lin = torch.nn.Linear(4, 4)

    def forward(self, x):
        return self.lin(x).sin()


class Parent(torch.nn.Module):
    def __init__(self, block):
        super().__init__()
        self.pre = torch.nn.Linear(4, 4)
        self.block = block

    def forward(self, x):
        return self.block(self.pre(x)) + 1


def test_disabled_module_inside_a_compiled_model():
    torch.manual_seed(0)
    block = Block()
    hook_calls = []
    block.register_forward_hook(lambda m, i, o: hook_calls.append(1))
    model = Parent(cdynamo.disable(block))
    assert isinstance(model.block, cdynamo.DisabledModule) and model.block._orig_mod is block
    assert model.block.lin is block.lin, "attribute reads fall through to the original"
    cm, cnt = compiled(model)
    x = torch.randn(2, 4)
    torch.testing.assert_close(cm(x), model(x))
    torch.testing.assert_close(cm(x), model(x))
    assert len(hook_calls) == 4, "the original module is called, hooks included"
    assert break_reasons() == [f"call to {Block.__qualname__}.forward, which is wrapped by cdynamo.disable"]
    assert native_reasons() == []
    # self.pre before the call, + 1 after it; nothing of the block (its linear, sin).
    assert ops_of(cnt.graphs) == [{"linear"}, {"add"}]
    # The same state_dict names as torch's disable(module), and the same graphs.
    ref = Parent(torch._dynamo.disable(block))
    assert list(model.state_dict()) == list(ref.state_dict())
    assert ops_of(dynamo_graphs(ref, x)) == ops_of(cnt.graphs)
    # Control: the same model without disable is captured whole.
    cdynamo.reset()  # a fresh count of entries and breaks
    plain = Parent(Block())
    cm2, cnt2 = compiled(plain)
    torch.testing.assert_close(cm2(x), plain(x))
    assert cnt2.frame_count == 1 and "sin" in ops_of(cnt2.graphs)[0]


def test_disabled_module_compiled_directly_captures_nothing():
    block = Block()
    cm, cnt = compiled(cdynamo.disable(block))
    x = torch.randn(2, 4)
    torch.testing.assert_close(cm(x), block(x))
    torch.testing.assert_close(cm(x), block(x))
    assert cnt.frame_count == 0
    with pytest.raises(NotImplementedError):
        cdynamo.disable(block, recursive=False)
