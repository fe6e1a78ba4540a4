"""The output-metadata memo (csrc/graph/memo.cpp) and results that are views: what a
memoized view result is keyed as by the ops that use it must be its own layout, not its
base's, or a later op hits an entry made for a differently shaped tensor."""
import pytest
import torch
import torch.nn.functional as F
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
