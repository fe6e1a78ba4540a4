"""Python numbers read from tensors: Tensor.item(), int(t), float(t), bool(t), tolist().

cdynamo.config.capture_scalar_outputs (default False) is torch._dynamo's option of the
same name. Off, each read stops the trace with a reason naming the operation. On,
Tensor.item() is recorded in the graph as torch._dynamo records it (a call_method node
whose fake value is an unbacked SymFloat/SymInt/SymBool), so the graph reads the value
each time it runs; branching on it still stops the trace.
"""
import pytest
import torch
import torch._dynamo
import torch._dynamo.testing

import cdynamo
from cdynamo.testing import CompileCounter

CAPTURE_HINT = "(set cdynamo.config.capture_scalar_outputs=True to keep it in the graph)"


def compiled(fn, **kw):
    cnt = CompileCounter()
    return cdynamo.compile(fn, backend=cnt, **kw), cnt


def reasons():
    return [nf["reason"] for nf in cdynamo.stats()["native_frames"]]


def same(a, b):
    """Equal results, Python numbers of the same type included."""
    if isinstance(a, (tuple, list)):
        return type(a) is type(b) and len(a) == len(b) and all(same(x, y) for x, y in zip(a, b))
    if isinstance(a, torch.Tensor):
        return isinstance(b, torch.Tensor) and torch.equal(a, b)
    return type(a) is type(b) and a == b


def dynamo_counts(fn, *args):
    """(frame_count, op_count) of torch._dynamo with capture_scalar_outputs=True."""
    ref = torch._dynamo.testing.CompileCounter()
    torch._dynamo.reset()
    with torch._dynamo.config.patch(capture_scalar_outputs=True):
        torch.compile(fn, backend=ref)(*args)
    return ref.frame_count, ref.op_count


@pytest.fixture
def capture():
    old = cdynamo.config.capture_scalar_outputs
    cdynamo.config.capture_scalar_outputs = True
    yield
    cdynamo.config.capture_scalar_outputs = old


def item_mul(x, t):
    return x * t.item()


def int_mul(x, t):
    return x * int(t)


def float_mul(x, t):
    return x * float(t)


def bool_mul(x, t):
    return x * bool(t)


def dunder_float_mul(x, t):
    return x * t.__float__()


def tolist_mul(x, t):
    return x * t.tolist()


def item_twice(x, t):
    s = t.item()
    return x * s + s


def item_in_factory(x, t):
    return x + torch.full((3,), t.item())


# ------------------------------------------------------------------ option off (default)

@pytest.mark.parametrize("fn, op", [
    (item_mul, "Tensor.item() reads a tensor's value"),
    (int_mul, "int() of a tensor reads its value"),
    (float_mul, "float() of a tensor reads its value"),
    (bool_mul, "bool() of a tensor reads its value"),
    (dunder_float_mul, "float() of a tensor reads its value"),
])
def test_off_each_read_stops_the_trace_naming_the_operation(fn, op):
    assert cdynamo.config.capture_scalar_outputs is False
    cf, cnt = compiled(fn)
    x, t = torch.randn(3), torch.tensor(2.5)
    assert same(cf(x, t), fn(x, t))
    assert same(cf(x, t), fn(x, t))
    assert cnt.frame_count == 0
    assert reasons() == [f"{op} {CAPTURE_HINT}"]


def test_tolist_is_never_captured():
    for flag in (False, True):
        cdynamo.reset()
        cdynamo.config.capture_scalar_outputs = flag
        try:
            cf, cnt = compiled(tolist_mul)
            x, t = torch.randn(3), torch.tensor(2.5)
            assert same(cf(x, t), tolist_mul(x, t))
        finally:
            cdynamo.config.capture_scalar_outputs = False
        assert cnt.frame_count == 0
        assert reasons() == ["Tensor.tolist() reads a tensor's values into Python lists (not capturable)"]


def test_off_fullgraph_raises_with_the_reason():
    cf, _ = compiled(item_mul, fullgraph=True)
    with pytest.raises(cdynamo.Unsupported, match=r"Tensor\.item\(\) reads a tensor's value"):
        cf(torch.randn(3), torch.tensor(2.5))


# ------------------------------------------------------------------ option on

@pytest.mark.parametrize("fn, t", [
    (item_mul, torch.tensor(2.5)),
    (item_mul, torch.tensor(3)),
    (int_mul, torch.tensor(3.7)),
    (int_mul, torch.tensor(3)),
    (float_mul, torch.tensor(3)),
    (float_mul, torch.tensor(2.5)),
    (bool_mul, torch.tensor(2.5)),
    (dunder_float_mul, torch.tensor(2.5)),
    (item_twice, torch.tensor(2.5)),
    (item_in_factory, torch.tensor(2.5)),
])
def test_on_item_is_one_graph_with_dynamos_op_count(capture, fn, t):
    cf, cnt = compiled(fn)
    x = torch.randn(3)
    assert same(cf(x, t), fn(x, t))
    assert (cnt.frame_count, cnt.op_count) == dynamo_counts(fn, x, t)
    assert cnt.frame_count == 1 and reasons() == []
    assert any(n.op == "call_method" and n.target == "item" for n in cnt.graphs[0].graph.nodes)
    # A hit with another value: the graph reads it at run time (not a constant baked in).
    t2 = t * -3 + 1
    assert same(cf(x, t2), fn(x, t2))
    assert cnt.frame_count == 1 and cdynamo.stats()["cache_hits"] == 1


def test_on_the_item_node_holds_an_unbacked_symbol(capture):
    cf, cnt = compiled(item_mul)
    cf(torch.randn(3), torch.tensor(2.5))
    (item,) = [n for n in cnt.graphs[0].graph.nodes if n.target == "item"]
    assert isinstance(item.meta["example_value"], torch.SymFloat)
    assert item.meta["unbacked_bindings"], "the symbol's binding is recorded, as torch._dynamo does"


@pytest.mark.parametrize("t", [torch.tensor(2.5), torch.tensor(-2.5)])
def test_on_branching_on_the_value_stops_the_trace(capture, t):
    def f(x, t):
        if t.item() > 0:
            return x * 2
        return x - 1

    cf, cnt = compiled(f)
    x = torch.randn(3)
    assert same(cf(x, t), f(x, t))
    assert same(cf(x, -t), f(x, -t))  # the other branch, from the same (native) decision
    assert cnt.frame_count == 0
    assert reasons() == ["control flow depends on a value read from a tensor (Tensor.item()): a data-dependent branch"]


def test_on_bool_of_the_value_in_a_branch_stops_the_trace(capture):
    def f(x, t):
        return x * 2 if bool(t) else x

    cf, cnt = compiled(f)
    x = torch.randn(3)
    for t in (torch.tensor(1.5), torch.tensor(0.0)):
        assert same(cf(x, t), f(x, t))
    assert cnt.frame_count == 0 and "data-dependent branch" in reasons()[0]


@pytest.mark.parametrize("t", [torch.tensor(2.5), torch.tensor(7), torch.tensor(True)])
def test_on_returning_the_value_gives_a_python_number(capture, t):
    def f(x, t):
        return x + 1, t.item()

    cf, cnt = compiled(f)
    x = torch.randn(3)
    assert same(cf(x, t), f(x, t))  # float, int or bool, as eager
    t2 = ~t if t.dtype == torch.bool else t * 2
    assert same(cf(x, t2), f(x, t2))
    assert cnt.frame_count == 1


def test_on_type_and_isinstance_are_the_python_types(capture):
    def f(x, t, i):
        a, b = t.item(), i.item()
        return x * a, isinstance(a, float), isinstance(a, torch.Tensor), type(b) is int

    cf, cnt = compiled(f)
    args = (torch.randn(3), torch.tensor(2.5), torch.tensor(4))
    assert same(cf(*args), f(*args))
    assert cf(*args)[1:] == (True, False, True)
    assert cnt.frame_count == 1


def test_on_a_check_that_would_need_a_runtime_assert_is_not_captured(capture):
    def f(x, t):
        torch._check(t.item() > 0)
        return x * 2

    cf, cnt = compiled(f)
    x = torch.randn(3)
    assert same(cf(x, torch.tensor(1.5)), f(x, torch.tensor(1.5)))
    with pytest.raises(RuntimeError):  # eager raises; so does the frame, run natively
        cf(x, torch.tensor(-1.5))
    assert cnt.frame_count == 0
    assert "would need a runtime check" in reasons()[0]


def test_on_the_value_as_a_set_member_is_not_captured(capture):
    def f(x, t):
        s = {t.item()}
        return x * len(s)

    cf, cnt = compiled(f)
    x = torch.randn(3)
    assert same(cf(x, torch.tensor(1.5)), f(x, torch.tensor(1.5)))
    assert cnt.frame_count == 0 and "set item" in reasons()[0]


def test_on_attributes_of_the_value_are_not_a_tensors(capture):
    def f(x, t):
        return x * t.item().real

    cf, cnt = compiled(f)
    x = torch.randn(3)
    assert same(cf(x, torch.tensor(1.5)), f(x, torch.tensor(1.5)))
    assert cnt.frame_count == 0
    assert reasons() == ["attribute 'real' of a value read from a tensor (Tensor.item()) is not supported yet"]


def test_option_is_read_when_a_frame_is_traced():
    cf, cnt = compiled(item_mul)
    x, t = torch.randn(3), torch.tensor(2.5)
    assert same(cf(x, t), item_mul(x, t))
    assert cnt.frame_count == 0
    cdynamo.config.capture_scalar_outputs = True
    try:
        cdynamo.reset()  # the frame was marked native under the old setting
        assert same(cf(x, t), item_mul(x, t))
        assert cnt.frame_count == 1
    finally:
        cdynamo.config.capture_scalar_outputs = False


@pytest.mark.parametrize("backend", ["aot_eager", "inductor"])
def test_on_backends_that_retrace_the_graph(capture, backend):
    # AOT autograd re-traces with the trace's own fake mode and ShapeEnv (a TracingContext),
    # as under torch._dynamo; a fresh fake mode could not run Tensor.item().
    def f(x, t):
        s = t.item()
        return (x * s).relu() + int(t), s

    cf = cdynamo.compile(f, backend=backend)
    x = torch.randn(8)
    for t in (torch.tensor(2.5), torch.tensor(-0.5)):
        out, ref = cf(x, t), f(x, t)
        torch.testing.assert_close(out[0], ref[0])
        assert type(out[1]) is float and out[1] == ref[1]
    s = cdynamo.stats()
    assert (s["frames_captured"], s["cache_hits"], s["frames_native"]) == (1, 1, 0)
