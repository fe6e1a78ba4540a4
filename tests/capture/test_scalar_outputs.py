"""Python numbers read from tensors: Tensor.item(), int(t), float(t), bool(t), tolist().

cdynamo.config.capture_scalar_outputs (default False) is torch._dynamo's option of the
same name. Off, each read is a graph break with a reason naming the operation (the read
runs natively, the number it gives is a constant of the resume function's graph, guarded
as torch._dynamo does with dynamic=False). On, Tensor.item() is recorded in the graph as
torch._dynamo records it (a call_method node whose fake value is an unbacked
SymFloat/SymInt/SymBool), so the graph reads the value each time it runs; branching on it
is still a graph break.
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


def break_reasons():
    return [b["reason"] for b in cdynamo.stats()["graph_break_reasons"]]


def native_reasons():
    return [nf["reason"] for nf in cdynamo.stats()["native_frames"]]


def ops_of(graphs):
    """The calls of each graph, in order: method names and function __name__s."""
    return [[n.target if n.op == "call_method" else getattr(n.target, "__name__", str(n.target))
             for n in gm.graph.nodes if "call" in n.op] for gm in graphs]


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


def dynamo_graphs(fn, *argsets, capture_scalar_outputs=False, dynamic=None):
    """The graphs torch._dynamo compiles running fn on each argument tuple in turn."""
    graphs = []

    def backend(gm, example_inputs):
        graphs.append(gm)
        return gm.forward

    torch._dynamo.reset()
    with torch._dynamo.config.patch(capture_scalar_outputs=capture_scalar_outputs):
        cf = torch.compile(fn, backend=backend, dynamic=dynamic)
        for args in argsets:
            cf(*args)
    return graphs


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
def test_off_each_read_is_a_graph_break_naming_the_operation(fn, op):
    assert cdynamo.config.effective("capture_scalar_outputs") is False
    cf, cnt = compiled(fn)
    x, t = torch.randn(3), torch.tensor(2.5)
    assert same(cf(x, t), fn(x, t))
    assert same(cf(x, t), fn(x, t))  # from the cache
    assert break_reasons() == [f"{op} {CAPTURE_HINT}"] and native_reasons() == []
    (gb,) = cdynamo.stats()["graph_break_reasons"]
    assert (gb["filename"], gb["line"]) == (__file__, fn.__code__.co_firstlineno + 1)
    # Nothing before the read to compile; the resume function's graph is the multiply by
    # the number read (a constant), as torch._dynamo's.
    assert ops_of(cnt.graphs) == [["mul"]] == ops_of(dynamo_graphs(fn, (x, t)))
    assert cdynamo.stats()["cache_hits"] == 2
    # Another value: the number is guarded, the resume function recompiles for it
    # (torch._dynamo does the same with dynamic=False), and the result is right.
    t2 = torch.tensor(0.0)  # a number unlike 2.5's for each read (bool included)
    assert same(cf(x, t2), fn(x, t2))
    assert cnt.frame_count == 2 == len(dynamo_graphs(fn, (x, t), (x, t2), dynamic=False))


def test_torch_dynamo_config_capture_scalar_outputs_is_followed():
    # cdynamo.config.capture_scalar_outputs is None: torch._dynamo.config's option decides,
    # as code written for torch.compile (and PyTorch's own tests) set it.
    assert cdynamo.config.capture_scalar_outputs is None
    x, t = torch.randn(3), torch.tensor(2.5)
    with torch._dynamo.config.patch(capture_scalar_outputs=True):
        cf, cnt = compiled(item_mul)
        assert same(cf(x, t), item_mul(x, t))
        assert same(cf(x, t), item_mul(x, t))
    assert ops_of(cnt.graphs) == [["item", "mul"]] and break_reasons() == []
    cdynamo.reset()
    cf, cnt = compiled(item_mul)
    assert same(cf(x, t), item_mul(x, t))
    assert ops_of(cnt.graphs) == [["mul"]] and len(break_reasons()) == 1


def test_tolist_is_never_captured():
    for flag in (False, True):
        cdynamo.reset()
        cdynamo.config.capture_scalar_outputs = flag
        try:
            cf, cnt = compiled(tolist_mul)
            x, t = torch.randn(3), torch.tensor(2.5)
            assert same(cf(x, t), tolist_mul(x, t))
            assert same(cf(x, t), tolist_mul(x, t))
        finally:
            cdynamo.config.capture_scalar_outputs = None
        assert break_reasons() == ["Tensor.tolist() reads a tensor's values into Python lists (not capturable)"]
        assert native_reasons() == []
        assert ops_of(cnt.graphs) == [["mul"]], "tolist() is never in a graph, only what follows it"
        ref = dynamo_graphs(tolist_mul, (x, t), capture_scalar_outputs=flag)
        assert ops_of(ref) == ops_of(cnt.graphs)


def test_off_fullgraph_captures_it_as_torch_dynamo_does():
    # Under fullgraph=True a break is an error, so torch._dynamo keeps Tensor.item() in the
    # graph whatever capture_scalar_outputs says; so does cdynamo (one graph, eager's value).
    cf, cnt = compiled(item_mul, fullgraph=True)
    x = torch.randn(3)
    for v in (2.5, 4.0):
        torch.testing.assert_close(cf(x, torch.tensor(v)), item_mul(x, torch.tensor(v)))
    assert cnt.frame_count == 1
    assert any(n.op == "call_method" and n.target == "item" for g in cnt.graphs for n in g.graph.nodes)


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
    assert cnt.frame_count == 1 and break_reasons() == native_reasons() == []
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
def test_on_branching_on_the_value_is_a_graph_break(capture, t):
    def f(x, t):
        if t.item() > 0:
            return x * 2
        return x - 1

    cf, cnt = compiled(f)
    x = torch.randn(3)
    assert same(cf(x, t), f(x, t))
    assert same(cf(x, -t), f(x, -t))  # the other branch: the same entry, another resume function
    assert same(cf(x, t * 3), f(x, t * 3))  # all from the cache: item() is read by the graph
    assert break_reasons() == ["control flow depends on a value read from a tensor (Tensor.item()): "
                               "a data-dependent branch"]
    assert native_reasons() == []
    # The graph up to the jump (item, > 0), then one resume function per branch taken.
    taken = ["mul", "sub"] if t > 0 else ["sub", "mul"]
    assert ops_of(cnt.graphs) == [["item", "gt"], [taken[0]], [taken[1]]]
    ref = dynamo_graphs(f, (x, t), (x, -t), (x, t * 3), capture_scalar_outputs=True)
    assert ops_of(ref) == ops_of(cnt.graphs)
    assert cdynamo.stats()["cache_hits"] == 3


def test_on_bool_of_the_value_in_a_branch_is_a_graph_break(capture, dynamo_skips_empty_frames):
    def f(x, t):
        return x * 2 if bool(t) else x

    cf, cnt = compiled(f)
    x = torch.randn(3)
    ts = (torch.tensor(1.5), torch.tensor(0.0), torch.tensor(-2.0))
    for t in ts:
        assert same(cf(x, t), f(x, t))
    assert break_reasons() == ["control flow depends on a value read from a tensor (Tensor.item()): "
                               "a data-dependent branch"]
    # The false branch's resume function returns x: no op, so it runs natively from then on,
    # as torch._dynamo skips it.
    assert [r.split(":")[0] for r in native_reasons()] == ["no op traced (no graph and no graph break)"]
    # bool(t) is recorded as item() != 0; the false branch returns x (no graph).
    assert ops_of(cnt.graphs) == [["item", "ne"], ["mul"]]
    ref = dynamo_graphs(f, *[(x, t) for t in ts], capture_scalar_outputs=True)
    assert ops_of(ref) == ops_of(cnt.graphs)


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


def test_on_a_check_is_a_runtime_assert_in_the_graph(capture):
    def f(x, t):
        torch._check(t.item() > 0)
        return x * 2

    cf, cnt = compiled(f)
    x = torch.randn(3)
    assert same(cf(x, torch.tensor(1.5)), f(x, torch.tensor(1.5)))
    with pytest.raises(RuntimeError):
        f(x, torch.tensor(-1.5))
    # The check is the ShapeEnv's deferred runtime assert, which torch's pass puts in the
    # graph (aten._assert_scalar) as torch._dynamo does: one graph, and a failing check
    # raises RuntimeError with torch's message about the expression (torch._dynamo's too),
    # not torch._check's own text.
    with pytest.raises(RuntimeError, match="Runtime assertion failed for expression"):
        cf(x, torch.tensor(-1.5))
    assert same(cf(x, torch.tensor(2.5)), f(x, torch.tensor(2.5)))
    assert break_reasons() == [] and native_reasons() == []
    assert cnt.frame_count == 1 and "_assert_scalar.default" in ops_of(cnt.graphs)[0]
    ref = dynamo_graphs(f, (x, torch.tensor(1.5)), capture_scalar_outputs=True)
    assert len(ref) == 1 and "_assert_scalar.default" in ops_of(ref)[0]
    torch._dynamo.reset()
    with torch._dynamo.config.patch(capture_scalar_outputs=True):
        tf = torch.compile(f, backend="eager")
        tf(x, torch.tensor(1.5))
        with pytest.raises(RuntimeError, match="Runtime assertion failed for expression"):
            tf(x, torch.tensor(-1.5))


def test_on_the_value_as_a_set_member_is_not_captured(capture):
    def f(x, t):
        s = {t.item()}
        return x * len(s)

    cf, cnt = compiled(f)
    x = torch.randn(3)
    for v in (1.5, 2.5):
        assert same(cf(x, torch.tensor(v)), f(x, torch.tensor(v)))
    # A graph break at BUILD_SET: the graph reads item(), the set is built natively. The
    # resume function receives the set (guarded equal: each new value recompiles it).
    # torch._dynamo fails on the set (guarding on an unbacked float) and skips the whole
    # frame: no graph at all.
    assert break_reasons() == ["a value read from a tensor (Tensor.item()) as a set item: "
                               "its hash is its value, known only at run time"]
    assert cdynamo.stats()["native_frames"] == []
    assert ops_of(cnt.graphs) == [["item"], ["mul"], ["mul"]]
    assert dynamo_graphs(f, (x, torch.tensor(1.5)), capture_scalar_outputs=True) == []


def test_on_attributes_of_the_value_are_not_a_tensors(capture):
    def f(x, t):
        return x * t.item().real

    cf, cnt = compiled(f)
    x = torch.randn(3)
    for v in (1.5, 1.5, -2.0):
        assert same(cf(x, torch.tensor(v)), f(x, torch.tensor(v)))
    # A graph break at the attribute read: the graph reads item(), .real runs natively, the
    # resume function multiplies by the number (a constant, guarded: -2.0 recompiles it).
    # torch._dynamo fails on .real of the unbacked float and skips the whole frame.
    assert break_reasons() == ["attribute 'real' of a value read from a tensor (Tensor.item()) is not supported yet"]
    assert native_reasons() == []
    assert ops_of(cnt.graphs) == [["item"], ["mul"], ["mul"]]
    s = cdynamo.stats()
    assert (s["cache_hits"], s["recompiles"]) == (3, 1)
    assert dynamo_graphs(f, (x, torch.tensor(1.5)), capture_scalar_outputs=True) == []


def test_option_is_read_when_a_frame_is_traced():
    cf, cnt = compiled(item_mul)
    x, t = torch.randn(3), torch.tensor(2.5)
    assert same(cf(x, t), item_mul(x, t))
    assert ops_of(cnt.graphs) == [["mul"]] and len(break_reasons()) == 1
    cdynamo.config.capture_scalar_outputs = True
    try:
        assert same(cf(x, t), item_mul(x, t))
        assert cnt.frame_count == 1, "a cache hit: the entry made under the old setting"
        cdynamo.reset()  # drops the entries compiled under the old setting
        assert same(cf(x, t), item_mul(x, t))
        assert ops_of(cnt.graphs[1:]) == [["item", "mul"]] and break_reasons() == []
    finally:
        cdynamo.config.capture_scalar_outputs = None


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
