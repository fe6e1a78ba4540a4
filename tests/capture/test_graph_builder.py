"""The graph builder's shortcuts (csrc/graph/graph_builder.cpp) give what the slow paths give.

Fake results of repeated ops come from the output-metadata memo, fakes of graph inputs from
the input shortcut, FX nodes from FxNodeMaker instead of Graph.create_node: the graphs a
backend sees must be the same as without them (metadata, autograd flags, views, aliasing
between inputs, FX bookkeeping).
"""
import torch
import torch.nn.functional as F
from torch import nn

import cdynamo
from cdynamo.testing import CompileCounter


def compile_once(fn, *args):
    cnt = CompileCounter()
    out = cdynamo.compile(fn, backend=cnt)(*args)
    assert cnt.frame_count == 1
    return out, cnt.graphs[0]


def values(gm, op=None, target=None):
    return [n.meta["example_value"] for n in gm.graph.nodes
            if (op is None or n.op == op) and (target is None or n.target is target)]


def meta(t):
    return (tuple(t.shape), t.stride(), t.storage_offset(), t.dtype, t.device, t.requires_grad, t.is_leaf,
            t.grad_fn is None, t._is_view(), t.is_inference(), isinstance(t, nn.Parameter))


def test_repeated_op_on_parameters_has_the_first_ones_metadata_and_history():
    lin = nn.Linear(4, 3)

    def f(x):
        return lin(x) + lin(x * 2) + lin(x * 3)

    x = torch.randn(2, 4)
    out, gm = compile_once(f, x)
    torch.testing.assert_close(out, f(x))
    linears = values(gm, target=torch._C._nn.linear)
    assert len(linears) == 3
    eager = lin(x)
    for v in linears:
        assert meta(v) == meta(eager)  # requires grad, not a leaf, a grad_fn, not a view
    assert len({v.untyped_storage()._cdata for v in linears}) == 3


def test_in_place_on_a_repeated_result_and_flags_read_in_the_trace():
    lin = nn.Linear(4, 4)

    def f(x):
        y = lin(x)
        z = lin(x)
        z.add_(1)
        z[0].zero_()
        return y + z, z.requires_grad, z.is_leaf

    x = torch.randn(2, 4, requires_grad=True)
    out, _ = compile_once(f, x)
    expected = f(x)
    torch.testing.assert_close(out[0], expected[0])
    assert out[1:] == expected[1:] == (True, False)
    out[0].sum().backward()
    grads = [p.grad.clone() for p in (x, lin.weight, lin.bias)]
    for p in (x, lin.weight, lin.bias):
        p.grad = None
    expected[0].sum().backward()
    for g, p in zip(grads, (x, lin.weight, lin.bias)):
        torch.testing.assert_close(g, p.grad)


def test_repeated_ops_under_no_grad_and_inference_mode():
    lin = nn.Linear(4, 4)

    def f(x):
        with torch.no_grad():
            a = lin(x)
            b = lin(x)
        with torch.inference_mode():
            c = lin(x)
            d = lin(x)
        e = lin(x)
        g = lin(x)
        return a + b + e + g, c + d, b.requires_grad, g.requires_grad

    x = torch.randn(2, 4)
    out, gm = compile_once(f, x)
    expected = f(x)
    torch.testing.assert_close(out[0], expected[0])
    torch.testing.assert_close(out[1], expected[1])
    assert out[2:] == expected[2:] == (False, True)
    a, b, c, d, e, g = values(gm, target=torch._C._nn.linear)
    assert meta(a) == meta(b) and not a.requires_grad and not a.is_inference()
    assert meta(c) == meta(d) and c.is_inference()
    assert meta(e) == meta(g) and g.requires_grad


def test_attention_output_stays_a_view_of_its_own_base():
    mha = nn.MultiheadAttention(8, 2)

    def f(x):
        a, wa = mha(x, x, x, need_weights=True)
        b, wb = mha(x, x, x, need_weights=True)
        c, _ = mha(x, x, x, need_weights=False)
        d, _ = mha(x, x, x, need_weights=False)
        d.mul_(2)
        return a + b + c + d, wa + wb

    x = torch.randn(5, 2, 8)
    out, gm = compile_once(f, x)
    for o, e in zip(out, f(x)):
        torch.testing.assert_close(o, e)
    results = values(gm, target=F.multi_head_attention_forward)
    assert len(results) == 4
    for first, again in ((results[0], results[1]), (results[2], results[3])):
        assert meta(first[0]) == meta(again[0]) and again[0]._is_view()
        assert meta(first[0]._base) == meta(again[0]._base)
        assert again[0].untyped_storage()._cdata != first[0].untyped_storage()._cdata
    assert meta(results[0][1]) == meta(results[1][1])
    assert results[2][1] is None and results[3][1] is None


def _shares_storage(a, b):
    return a.untyped_storage()._cdata == b.untyped_storage()._cdata


def test_graph_inputs_alias_as_the_real_tensors_do():
    p1 = nn.Parameter(torch.randn(4, 4))
    p2 = nn.Parameter(torch.randn(4, 4))
    q = nn.Parameter(torch.randn(4, 4))
    q.grad = torch.randn(4, 4)
    cases = [
        (p1, p2, p2.detach()),  # a parameter of a known kind, then a tensor sharing its storage
        (p1, p2, p2.t()),       # ... then a view of it
        (p2.t(), p1, p2),       # the view first
        (p1, q, q.grad),        # a parameter with a .grad, then the grad
        (p1, q.grad, q),
        (p1, p2, p2),           # the same tensor twice
    ]
    for args in cases:
        cdynamo.reset()
        out, gm = compile_once(lambda a, b, c: a + b * c, *args)
        torch.testing.assert_close(out, args[0] + args[1] * args[2])
        fakes = values(gm, op="placeholder")
        distinct = [a for i, a in enumerate(args) if all(a is not b for b in args[:i])]
        assert len(fakes) == len(distinct)  # one tensor passed twice is one graph input, as in torch._dynamo
        args = distinct
        for (ra, fa) in zip(args, fakes):
            assert meta(fa) == meta(ra)
            for (rb, fb) in zip(args, fakes):
                assert _shares_storage(fa, fb) == _shares_storage(ra, rb)
                assert (fa is fb) == (ra is rb)


def test_parameter_first_read_under_inference_mode_is_not_an_inference_fake():
    lin = nn.Linear(4, 4)
    other = nn.Linear(4, 4)

    def f(x):
        y = other(x)
        with torch.inference_mode():
            z = lin(x)
        return y, z

    x = torch.randn(2, 4)
    _, gm = compile_once(f, x)
    for v in values(gm, op="placeholder"):
        assert not v.is_inference()


def test_fx_graph_bookkeeping_is_that_of_create_node():
    def f(x):
        for _ in range(3):
            x = torch.sin(x + 1)
        return x

    x = torch.randn(3)
    _, gm = compile_once(f, x)
    g = gm.graph
    nodes = list(g.nodes)
    assert len(g.nodes) == len(nodes) == 1 + 6 + 1
    # Each sin is stored into x: named after it, as torch._dynamo names them.
    assert [n.name for n in g.find_nodes(op="call_function", target=torch.sin)] == ["x", "x_1", "x_2"]
    assert gm.code == g.python_code("self").src
    # A backend adding nodes gets fresh names from the same namespace (which, as
    # torch._dynamo's, still holds the names the nodes had before they were renamed).
    with g.inserting_before(nodes[-1]):
        extra = g.call_function(torch.sin, (nodes[-2],))
    assert extra.name == "sin_3"
    nodes[-1].args = ((extra,),)
    gm.recompile()
    torch.testing.assert_close(gm(x)[0], torch.sin(f(x)))


def test_generated_forward_source_is_fxs_own(monkeypatch):
    # With CDYNAMO_CHECK_FX_CODEGEN=1 the builder compares its generated PythonCode with
    # Graph.python_code's (source, globals, line map) and raises on any difference.
    monkeypatch.setenv("CDYNAMO_CHECK_FX_CODEGEN", "1")

    def f(x, y, idx):
        a = x + 1.5
        b = a * float("inf") - y
        c = torch.where(b > 0, b, torch.zeros_like(b))
        d = c.to(torch.float64).to(dtype=torch.float32, device=torch.device("cpu"))
        e = d[1:, None, ::2]
        g = d[(0, slice(None))]
        h = d.T + d.mT
        h[0] = 3
        h += 1
        i = -h @ h.transpose(0, 1)
        j = F.layer_norm(i, (4,), eps=1e-5)
        k = torch.cat([j, j], dim=0).sum(dim=(0, 1), keepdim=True)
        m = x.view(2, 2, 2, 2).permute(0, 2, 1, 3).reshape(-1)
        n = torch.clamp(m, min=-1.0, max=None)
        return e, g, k, n, idx + 1, y.abs() // 2, y % 3, y ** 2

    x = torch.randn(4, 4)
    y = torch.randn(4, 4)
    idx = torch.arange(4)
    out, gm = compile_once(f, x, y, idx)
    for o, e in zip(out, f(x, y, idx)):
        torch.testing.assert_close(o, e, equal_nan=True)
    assert "return" in gm.code

    lin = nn.Linear(4, 4)
    seq = nn.Sequential(lin, nn.ReLU(), nn.LayerNorm(4), nn.Dropout(0.0))
    cdynamo.reset()
    out, gm = compile_once(seq, x)
    torch.testing.assert_close(out, seq(x))


def test_memoized_fakes_have_the_attributes_and_compact_dict_of_fresh_ones():
    # The memo sets a fake's attributes one by one, so its __dict__ stays CPython's
    # key-sharing form (as FakeTensor.__init__ leaves it) instead of a combined table of
    # nearly three times the size, one per node the GraphModule keeps.
    import sys

    def f(x):
        for _ in range(4):
            x = (x + 1).sin()
        return x

    out, gm = compile_once(f, torch.randn(8))
    adds = values(gm, target=torch.Tensor.add) or values(gm, "call_function")[::2]
    first, repeats = adds[0], adds[1:]
    assert repeats
    for fake in repeats:
        assert fake.__dict__.keys() == first.__dict__.keys()
        assert fake.fake_mode is first.fake_mode and fake.device == first.device
        assert sys.getsizeof(fake.__dict__) == sys.getsizeof(first.__dict__)


def test_ops_returning_their_input_are_remembered_as_such_but_in_place_ones_still_run():
    # dropout in eval mode returns its input: the memo hands back the argument's own fake
    # (as running it does). relu(inplace=True) returns its input too, but changed in place
    # (its version and grad_fn): that must still run on the fake every time.
    def f(x):
        a, b = x * 2, x * 3
        da, db = F.dropout(a, 0.5, False), F.dropout(b, 0.5, False)
        ra, rb = F.relu(a * 1, inplace=True), F.relu(b * 1, inplace=True)
        return da + db + ra + rb

    x = torch.randn(4, requires_grad=True)
    out, gm = compile_once(f, x)
    torch.testing.assert_close(out, f(x))
    drops = [n for n in gm.graph.nodes if n.target is F.dropout]
    assert len(drops) == 2
    for n in drops:
        assert n.meta["example_value"] is n.args[0].meta["example_value"]
    relus = [n for n in gm.graph.nodes if n.target is F.relu]
    assert len(relus) == 2
    for n in relus:
        fake = n.meta["example_value"]
        assert fake is n.args[0].meta["example_value"]
        assert fake._version == 1 and type(fake.grad_fn).__name__ == "ReluBackward0"


def _count_conversions(monkeypatch):
    from torch._subclasses.fake_tensor import FakeTensorMode

    calls = []
    orig = FakeTensorMode.from_tensor

    def counting(self, t, **kw):
        calls.append(kw)
        return orig(self, t, **kw)

    monkeypatch.setattr(FakeTensorMode, "from_tensor", counting)
    return calls


def test_later_traces_make_input_fakes_from_the_first_ones_template(monkeypatch):
    # The attributes from_tensor gives a plain leaf depend on its kind and on the mode only
    # through fake_mode: a later trace (after reset(), a recompile) starts from the
    # template of an earlier one, with its own mode, and converts nothing.
    def f(a, b):
        return a * b + 1

    args = (torch.randn(3), nn.Parameter(torch.randn(3)))
    _, gm1 = compile_once(f, *args)
    first = values(gm1, op="placeholder")
    cdynamo.reset()
    calls = _count_conversions(monkeypatch)
    out, gm2 = compile_once(f, *args)
    torch.testing.assert_close(out, f(*args))
    assert calls == []
    later = values(gm2, op="placeholder")
    for a, b, real in zip(first, later, args):
        assert meta(b) == meta(real) == meta(a)
        assert b.__dict__.keys() == a.__dict__.keys()
        assert b.fake_mode is later[0].fake_mode and b.fake_mode is not a.fake_mode
        assert b.fake_mode is values(gm2, op="call_function")[0].fake_mode


def test_static_inputs_of_a_symbolic_trace_alias_as_the_real_tensors_do(monkeypatch):
    # dynamic=True: parameters and non-contiguous tensors keep static sizes and are made as
    # in a static trace (the input shortcut); the others get symbols from from_tensor, which
    # must alias the shortcut's fakes as the real tensors alias each other.
    p1 = nn.Parameter(torch.randn(4, 4))
    p2 = nn.Parameter(torch.randn(4, 4))
    cases = [
        (p1, p2, p2.detach()),  # static, static, then a symbolic one sharing p2's storage
        (p1, p2.detach(), p2),  # the symbolic one first
        (p1, p2, p2.t()),       # a static view of a static one
        (p2.detach(), p1, p2.t()),
    ]
    for args in cases:
        cdynamo.reset()
        cnt = CompileCounter()
        fn = cdynamo.compile(lambda a, b, c: a + b * c, backend=cnt, dynamic=True)
        out = fn(*args)
        assert cnt.frame_count == 1
        torch.testing.assert_close(out, args[0] + args[1] * args[2])
        fakes = [v for v in values(cnt.graphs[0], op="placeholder") if isinstance(v, torch.Tensor)]
        assert len(fakes) == 3
        for (ra, fa) in zip(args, fakes):
            static = isinstance(ra, nn.Parameter) or not ra.is_contiguous()
            assert all(type(s) is int for s in fa.shape) == static
            assert fa.dtype == ra.dtype and fa.requires_grad == ra.requires_grad
            assert isinstance(fa, nn.Parameter) == isinstance(ra, nn.Parameter)
            for (rb, fb) in zip(args, fakes):
                assert _shares_storage(fa, fb) == _shares_storage(ra, rb)
    # And a parameter of a symbolic trace is not converted again by a backend that
    # fakifies the real inputs through the mode (AOT autograd): no guard on the batch size.
    lin = nn.Linear(3, 4)
    cf = cdynamo.compile(lambda x: lin(x).relu().sum(), backend="aot_eager", dynamic=True)
    cdynamo.reset()
    for n in (4, 5, 8):
        x = torch.randn(n, 3, requires_grad=True)
        cf(x).backward()
    assert cdynamo.stats()["cache_misses"] == 1
