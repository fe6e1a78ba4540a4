"""The output-metadata memo under a ShapeEnv (csrc/graph/memo.cpp): keys hold the sizes'
sympy expressions, memoized results copy the op's own result's (symbolic) layout. What a
backend sees and what runs must be what running every op on fakes gives."""
import pytest
import torch
from torch import nn

import cdynamo
from cdynamo.testing import CompileCounter


def values(gm, target):
    return [n.meta["example_value"] for n in gm.graph.nodes if n.target is target]


def sym_meta(t):
    return (str(tuple(t.shape)), str(t.stride()), str(t.storage_offset()), str(t.untyped_storage().nbytes()),
            t.dtype, t.requires_grad, t.is_leaf, t.grad_fn is None, t._is_view())


def test_repeated_ops_on_symbolic_sizes_have_the_first_ones_metadata():
    lin = nn.Linear(4, 4)

    def f(x):
        y = x
        for _ in range(4):
            y = torch.sin(y + 1)
        return lin(y) + lin(y * 2), y.view(-1)

    cnt = CompileCounter()
    cf = cdynamo.compile(f, backend=cnt, dynamic=True)
    for n in (3, 5, 9):
        x = torch.randn(n, 4)
        got, expected = cf(x), f(x)
        torch.testing.assert_close(got, expected)
    assert cnt.frame_count == 1
    gm = cnt.graphs[0]
    sins = values(gm, torch.sin)
    assert len(sins) == 4
    assert all(isinstance(s, torch.SymInt) for s in sins[0].shape[:1])
    assert len({sym_meta(v) for v in sins}) == 1
    assert len({v.untyped_storage()._cdata for v in sins}) == 4  # fresh storages
    linears = values(gm, torch._C._nn.linear)
    assert len(linears) == 2 and sym_meta(linears[0]) == sym_meta(linears[1])
    assert linears[0].requires_grad and not linears[0].is_leaf


def test_symbolic_memo_views_and_in_place_and_training_gradients():
    lin = nn.Linear(8, 8)

    def f(x):
        outs = []
        for _ in range(3):
            h = lin(x.relu())        # 3-d linear: a view of a fresh base
            h = h.transpose(0, 1)    # a view of an intermediate
            h.mul_(2)                # in place on it
            outs.append(h.sum(0))
        return torch.stack(outs).sum()

    cnt = CompileCounter()
    cf = cdynamo.compile(f, backend="aot_eager", dynamic=True)
    counting = CompileCounter()
    cdynamo.compile(f, backend=counting, dynamic=True)(torch.randn(2, 3, 8))
    assert counting.frame_count == 1
    for b, s in ((2, 3), (3, 7), (4, 5)):
        x = torch.randn(b, s, 8, requires_grad=True)
        x2 = x.detach().clone().requires_grad_(True)
        out = cf(x)
        expected = f(x2)
        torch.testing.assert_close(out, expected)
        out.backward()
        gw = lin.weight.grad.clone()
        lin.weight.grad = None
        lin.bias.grad = None
        expected.backward()
        torch.testing.assert_close(x.grad, x2.grad)
        torch.testing.assert_close(gw, lin.weight.grad)
        lin.weight.grad = None
        lin.bias.grad = None
    linears = values(counting.graphs[0], torch._C._nn.linear)
    assert len(linears) == 3
    assert all(v._is_view() for v in linears) and len({sym_meta(v) for v in linears}) == 1


def test_symbolic_memo_keys_separate_different_expressions():
    # Same op on tensors whose sizes are different symbols: no memo hit across them, each
    # result keeps its own sizes (s0 vs s1), and the relation the add derives is guarded.
    def f(x, y):
        a = torch.cat([x, x])
        b = torch.cat([y, y])
        return a.sum() + b.sum(), a.shape[0], b.shape[0]

    cnt = CompileCounter()
    cf = cdynamo.compile(f, backend=cnt, dynamic=True)
    for n, m in ((3, 5), (4, 7), (6, 2)):
        x, y = torch.randn(n), torch.randn(m)
        got, expected = cf(x, y), f(x, y)
        torch.testing.assert_close(got[0], expected[0])
        assert got[1:] == expected[1:]
    assert cnt.frame_count == 1
    cats = values(cnt.graphs[0], torch.cat)
    assert str(cats[0].shape[0]) != str(cats[1].shape[0])


def test_memo_hit_after_broadcast_keeps_guards():
    # The first add derives (and guards) that the sizes agree; the second, a memo hit, adds
    # nothing new; unequal sizes still raise eager's error.
    def f(x, y):
        return (x + y) * 2 + (x + y)

    cf = cdynamo.compile(f, backend=CompileCounter(), dynamic=True)
    x, y = torch.randn(5), torch.randn(5)
    torch.testing.assert_close(cf(x, y), f(x, y))
    x, y = torch.randn(6), torch.randn(6)
    torch.testing.assert_close(cf(x, y), f(x, y))
    try:
        f(torch.randn(3), torch.randn(4))
    except RuntimeError as e:
        msg = str(e)
    try:
        cf(torch.randn(3), torch.randn(4))
    except RuntimeError as e:
        assert str(e) == msg
    else:
        raise AssertionError("unequal sizes did not raise")


def _encoder(layers):
    torch.manual_seed(0)
    layer = torch.nn.TransformerEncoderLayer(16, 2, dim_feedforward=32, dropout=0.0, batch_first=True)
    return torch.nn.TransformerEncoder(layer, num_layers=layers, enable_nested_tensor=False).eval()


@pytest.mark.parametrize("dynamic", [True, False])
def test_stats_count_memo_hits_and_misses(dynamic):
    # Every layer after the first repeats the first one's ops on the same metadata: the memo
    # makes their results (a hit each). The second layer's input is the first's output (not
    # the graph input: one op's key differs, one more miss); from the third on, each added
    # layer adds only hits.
    seen = []
    for layers in (1, 2, 3):
        cdynamo.reset()
        assert (cdynamo.stats()["memo_hits"], cdynamo.stats()["memo_misses"]) == (0, 0)
        m = _encoder(layers)
        cnt = CompileCounter()
        cf = cdynamo.compile(m, backend=cnt, dynamic=dynamic)
        x = torch.randn(2, 6, 16)
        # With grad on (under no_grad an eval encoder takes torch's one-op fast path).
        torch.testing.assert_close(cf(x), m(x))
        s = cdynamo.stats()
        seen.append((s["memo_hits"], s["memo_misses"]))
        assert 0 < s["memo_hits"] + s["memo_misses"] <= cnt.op_count
        torch.testing.assert_close(cf(x), m(x))  # a cache hit: no op is traced
        assert (cdynamo.stats()["memo_hits"], cdynamo.stats()["memo_misses"]) == seen[-1]
        assert cnt.frame_count == 1
    (h1, m1), (h2, m2), (h3, m3) = seen
    assert h3 - h2 >= h2 - h1 > 0
    assert m3 == m2 >= m1 > 0
