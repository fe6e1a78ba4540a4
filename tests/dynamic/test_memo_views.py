"""The output-metadata memo (csrc/graph/memo.cpp) and results that are views: what a
memoized view result is keyed as by the ops that use it must be its own layout, not its
base's, or a later op hits an entry made for a differently shaped tensor."""
import pytest
import torch

from torch import nn

import cdynamo
from cdynamo.testing import CompileCounter


class LinearThenRelu(nn.Module):
    def __init__(self):
        super().__init__()
        self.lin = nn.Linear(4, 8)   # a parameter: static sizes even with dynamic=True

    def forward(self, x):
        y1 = self.lin(x)                     # 3-d: a view of a 2-d base when it requires grad
        r1 = torch.relu(y1.reshape(-1, 8))   # relu of a 2-d tensor of the base's layout
        y2 = self.lin(x)                     # a memo hit
        r2 = torch.relu(y2)                  # must not hit r1's entry (2-d)
        return r1 * r1.dim(), r2 * r2.dim(), r2.shape[-1] + r2.dim()


@pytest.mark.parametrize("dynamic", [False, True])
def test_memo_hit_of_a_view_result_is_keyed_by_its_own_layout(dynamic):
    torch.manual_seed(0)
    m = LinearThenRelu()
    cnt = CompileCounter()
    cf = cdynamo.compile(m, backend=cnt, dynamic=dynamic)
    torch._dynamo.reset()
    ref = torch.compile(m, backend="eager", dynamic=dynamic)
    for n in (3, 5):
        x = torch.randn(2, n, 4)
        expected = m(x)
        torch.testing.assert_close(cf(x), expected)
        torch.testing.assert_close(cf(x), expected)  # a cache hit
        torch.testing.assert_close(ref(x), expected)
    gm = cnt.graphs[0]
    relus = [n.meta["example_value"] for n in gm.graph.nodes if n.target is torch.relu]
    assert [r.dim() for r in relus] == [2, 3]
    assert cnt.frame_count <= (1 if dynamic else 2)


def unsqueeze_in_place(x):
    y = x + 1
    z = torch.relu(y)        # y's memo signature is read: [n, 4]
    y.unsqueeze_(0)          # y's metadata changes in place
    w = torch.relu(y)        # keyed as y is now, [1, n, 4]: not z's entry
    return z, w * w.dim()


def transpose_in_place(x):
    y = x + 1
    z = torch.relu(y)
    y.t_()
    w = torch.relu(y)
    return z, w * w.stride(0)


def requires_grad_in_place(x):
    y = x + 1
    z = torch.relu(y)
    y.requires_grad_()
    w = torch.relu(y)
    return z, w, w.requires_grad


@pytest.mark.parametrize("dynamic", [False, True])
@pytest.mark.parametrize("fn", [unsqueeze_in_place, transpose_in_place, requires_grad_in_place])
def test_memo_keys_see_metadata_changed_in_place(fn, dynamic):
    cnt = CompileCounter()
    cf = cdynamo.compile(fn, backend=cnt, dynamic=dynamic)
    torch._dynamo.reset()
    ref = torch.compile(fn, backend="eager", dynamic=dynamic)
    for n in (3, 5):
        x = torch.randn(n, 4)
        expected = fn(x)
        for got in (cf(x), cf(x), ref(x)):
            assert len(got) == len(expected)
            for a, b in zip(got, expected):
                if isinstance(b, torch.Tensor):
                    assert a.shape == b.shape and a.requires_grad == b.requires_grad
                    torch.testing.assert_close(a, b)
                else:
                    assert a == b
    assert cnt.frame_count >= 1
    assert cnt.frame_count <= (1 if dynamic else 2)


class CountDispatch:
    """Counts the ops FakeTensorMode dispatches at top level while in use."""

    def __init__(self):
        from torch._subclasses.fake_tensor import FakeTensorMode
        self.cls, self.orig, self.ops, self.depth = FakeTensorMode, FakeTensorMode.__torch_dispatch__, [], 0

    def __enter__(self):
        counter = self

        def dispatch(mode, func, types, args=(), kwargs=None):
            if counter.depth == 0:
                counter.ops.append(str(func))
            counter.depth += 1
            try:
                return counter.orig(mode, func, types, args, kwargs or {})
            finally:
                counter.depth -= 1
        self.cls.__torch_dispatch__ = dispatch
        return self

    def __exit__(self, *exc):
        self.cls.__torch_dispatch__ = self.orig


class TwoLinears(nn.Module):
    def __init__(self):
        super().__init__()
        self.lin = nn.Linear(8, 8)

    def forward(self, x):
        h = self.lin(x)      # x does not require grad, the parameters do: h does
        return self.lin(h)   # more inputs require grad: the first one's entry serves (h still does)
        # (with dynamic=True x's size 8 is a symbol the first linear specializes to 8: the
        # entry is stored under the key with that replacement too, which h's matches)


@pytest.mark.parametrize("dynamic", [False, True])
def test_memo_entry_serves_calls_with_more_inputs_requiring_grad(dynamic):
    torch.manual_seed(0)
    m = TwoLinears()
    cnt = CompileCounter()
    cf = cdynamo.compile(m, backend=cnt, dynamic=dynamic)
    x = torch.randn(4, 8)
    cdynamo.config.memo_check = False  # (the check runs the op again: counted without it)
    with CountDispatch() as d:
        got = cf(x)
    expected = m(x)
    torch.testing.assert_close(got, expected)
    assert got.requires_grad and not got.is_leaf
    torch.testing.assert_close(cf(x), expected)
    assert cnt.frame_count == 1
    assert sum("addmm" in op for op in d.ops) == 1, d.ops   # the second linear is a memo hit
    vals = [n.meta["example_value"] for n in cnt.graphs[0].graph.nodes if n.op == "call_function"]
    assert [v.requires_grad for v in vals] == [True, True]


def relu_twice(x, y):
    a = torch.relu(x)    # no input requires grad: a does not
    b = torch.relu(y)    # y requires grad: a's entry must not serve (b requires grad)
    c = torch.relu(a)    # fewer inputs requiring grad than b's: b's entry must not serve
    return a, b, c, (a.requires_grad, b.requires_grad, c.requires_grad)


@pytest.mark.parametrize("dynamic", [False, True])
def test_memo_entries_keep_requires_grad_where_autograd_does(dynamic):
    cnt = CompileCounter()
    cf = cdynamo.compile(relu_twice, backend=cnt, dynamic=dynamic)
    torch._dynamo.reset()
    ref = torch.compile(relu_twice, backend="eager", dynamic=dynamic)
    x, y = torch.randn(3, 4), torch.randn(3, 4, requires_grad=True)
    expected = relu_twice(x, y)
    assert expected[3] == (False, True, False)
    for got in (cf(x, y), cf(x, y), ref(x, y)):
        assert got[3] == expected[3]
        for a, b in zip(got[:3], expected[:3]):
            assert a.requires_grad == b.requires_grad
            torch.testing.assert_close(a, b)
    assert cnt.frame_count == 1


def test_memo_check_reports_a_difference():
    from cdynamo._internal import symbolic_shapes
    a, b = torch.empty(2, 3), torch.empty(3, 2)
    with pytest.raises(RuntimeError, match="memo check"):
        symbolic_shapes.check_memo_result(a, b, torch.relu)
    assert symbolic_shapes.memo_check_failures and "relu" in symbolic_shapes.memo_check_failures[0]
    symbolic_shapes.memo_check_failures.clear()
    assert symbolic_shapes.check_memo_result((a, None), (torch.empty(2, 3), None), torch.relu)


def views_of_inputs(x):
    outs = []
    for _ in range(3):
        y = x.transpose(0, 1)                   # a view of the input
        z = y.reshape(-1)                       # a new tensor (y is not contiguous)
        w = x.view(-1, 2)                       # a view
        u = x.unsqueeze(0).expand(3, -1, -1)    # a view of a view
        outs.append(y.sum() + z[0] + w.sum() + u.sum() + y.stride(0))
    s = x.narrow(0, 1, 2).transpose(0, 1)       # a view at an offset
    s2 = x.narrow(0, 2, 2).transpose(0, 1)      # the same shape at another offset: s's entry, made at s2's
    return outs, s * 1, s2 * 1, s.storage_offset(), s2.storage_offset(), s._base is x, x.view(-1)._is_view()


@pytest.mark.parametrize("dynamic", [False, True])
@pytest.mark.parametrize("requires_grad", [False, True])
def test_views_of_inputs_are_memoized_as_views(dynamic, requires_grad):
    cnt = CompileCounter()
    cf = cdynamo.compile(views_of_inputs, backend=cnt, dynamic=dynamic)
    torch._dynamo.reset()
    ref = torch.compile(views_of_inputs, backend="eager", dynamic=dynamic)
    for n in (4, 6):
        x = torch.randn(n, 6, requires_grad=requires_grad)
        expected = views_of_inputs(x)
        for got in (cf(x), cf(x), ref(x)):
            torch.testing.assert_close(got, expected)
            assert got[1].requires_grad == requires_grad
    assert cnt.frame_count <= (1 if dynamic else 2)
    cdynamo.reset()
    cdynamo.config.memo_check = False  # (the check runs the op again: counted without it)
    with CountDispatch() as d:
        cdynamo.compile(views_of_inputs, backend=cnt, dynamic=dynamic)(torch.randn(4, 6))
    # The loop's once, and s's: s2's transpose takes s's entry (an entry keeps its result's
    # offset relative to the receiver's; storage_offset() of both is checked against eager).
    assert sum(op == "aten.transpose.int" for op in d.ops) == 2, d.ops
