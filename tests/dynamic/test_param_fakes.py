"""Parameters in a symbolic trace keep static sizes (as torch._dynamo's
force_parameter_static_shapes); their fakes are made by the input shortcut as in a static
trace (csrc/graph/dynamic_shapes.cpp addSymbolicInput). What the graph sees must be what
FakeTensorMode.from_tensor gives: static sizes, the parameter's requires_grad, and an alias
of any other input sharing its storage."""
import pytest
import torch
from torch import nn
from torch.multiprocessing.reductions import StorageWeakRef

import cdynamo
from cdynamo.testing import CompileCounter


def placeholders(gm):
    return [n.meta["example_value"] for n in gm.graph.nodes if n.op == "placeholder"]


def test_parameters_static_inputs_symbolic_and_results_equal_eager_in_training():
    torch.manual_seed(0)
    m = nn.Sequential(nn.Linear(6, 8), nn.ReLU(), nn.Linear(8, 3))
    cnt = CompileCounter()
    cf = cdynamo.compile(m, backend=cnt, dynamic=True)
    ref = torch.compile(m, backend="eager", dynamic=True)
    torch._dynamo.reset()
    for n in (3, 5, 7):
        x = torch.randn(n, 6)
        expected = m(x)
        torch.testing.assert_close(cf(x), expected)
        torch.testing.assert_close(cf(x), expected)  # a cache hit
        torch.testing.assert_close(ref(x), expected)
    assert cnt.frame_count == 1
    tensors = [v for v in placeholders(cnt.graphs[0]) if isinstance(v, torch.Tensor)]
    params = [v for v in tensors if all(isinstance(s, int) for s in v.shape)]
    symbolic = [v for v in tensors if any(isinstance(s, torch.SymInt) for s in v.shape)]
    assert len(params) == 4 and len(symbolic) == 1
    assert sorted(tuple(p.shape) for p in params) == sorted(tuple(p.shape) for p in m.parameters())
    assert all(p.requires_grad and p.is_leaf for p in params)
    assert not symbolic[0].requires_grad


w0 = nn.Parameter(torch.randn(5))  # the first parameter of its kind: FakeTensorMode.from_tensor
w = nn.Parameter(torch.randn(4, 5))  # the next ones: the input shortcut
held = {}


def param_then_alias(x):
    y = w0 + w * 2           # the parameters become graph inputs first,
    v = held["view"]         # then a tensor sharing its storage
    v.add_(1)                # w changes too
    return y.sum(0) + v + x, w.sum()


def alias_then_param(x):
    v = held["view"]         # the view first
    v.add_(1)
    return v * 2 + x, (w0 + w * 3).sum()


@pytest.mark.parametrize("fn", [param_then_alias, alias_then_param])
def test_an_input_sharing_a_parameters_storage_is_its_alias(fn):
    seen = []

    def backend(gm, example_inputs):
        seen.append(placeholders(gm))
        return gm.forward

    cf = cdynamo.compile(fn, backend=backend, dynamic=True)
    with torch.no_grad():
        base = w.detach().clone()
        try:
            for rows in (2, 3, 4):
                x = torch.randn(rows, 5)
                w.copy_(base)
                held["view"] = w.detach()[:rows]
                expected = fn(x)  # eager
                w_eager = w.detach().clone()
                w.copy_(base)
                got = cf(x)
                torch.testing.assert_close(got, expected)
                torch.testing.assert_close(w.detach(), w_eager)
        finally:
            w.copy_(base)
            held.clear()
    tensors = [v for v in seen[0] if isinstance(v, torch.Tensor)]
    assert len(tensors) == 4
    storages = [StorageWeakRef(t.untyped_storage()) for t in tensors]
    assert len(set(storages)) == 3  # w0's, x's, and one shared by w and the view


def test_aot_autograd_refakes_shortcut_parameters_as_the_graph_has_them():
    # AOT autograd fakes the example inputs again with from_tensor: a parameter whose fake
    # the input shortcut made must get that fake back (not one with fresh symbols, whose
    # guards no input's size gives: the frame then ran natively).
    torch.manual_seed(0)
    m = nn.Sequential(nn.Linear(6, 8), nn.ReLU(), nn.Linear(8, 3))
    ref = nn.Sequential(nn.Linear(6, 8), nn.ReLU(), nn.Linear(8, 3))
    ref.load_state_dict(m.state_dict())
    cdynamo.reset()
    cf = cdynamo.compile(m, backend="aot_eager", dynamic=True)
    for n in (3, 5, 7):
        x = torch.randn(n, 6)
        m.zero_grad()
        ref.zero_grad()
        cf(x).square().sum().backward()
        ref(x).square().sum().backward()
        for p, q in zip(m.parameters(), ref.parameters()):
            torch.testing.assert_close(p.grad, q.grad)
    stats = cdynamo.stats()
    assert stats["native_frames"] == [] and stats["graph_breaks"] == 0
    assert stats["frames_captured"] == 1
