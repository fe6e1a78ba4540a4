"""Builtins and factories over symbolic numbers: min()/max() of sizes, symbolic int
arguments and Tensor.item()s (torch.sym_max / torch.sym_min in the graph, as torch._dynamo
records them), and torch.tensor() of data holding tensors or symbolic numbers (built by
torch._refs.tensor in the graph, as torch._dynamo does). Every case compares with eager on
the first call and on a cache hit (values and Python types), and its compile and op counts
with torch._dynamo's under the same counting backend."""
from unittest.mock import patch

import pytest
import torch
import torch._dynamo.config
import torch._dynamo.testing

import cdynamo
from cdynamo.testing import CompileCounter  # the same counting for both


def same(a, b):
    if isinstance(a, (tuple, list)):
        return type(a) is type(b) and len(a) == len(b) and all(same(x, y) for x, y in zip(a, b))
    if isinstance(a, torch.Tensor):
        return isinstance(b, torch.Tensor) and a.dtype == b.dtype and a.shape == b.shape and torch.equal(a, b)
    return type(a) is type(b) and a == b


def run(compile_, fn, calls, **kw):
    cnt = CompileCounter()
    cf = compile_(fn, backend=cnt, **kw)
    results = []
    for args in calls:
        results.append(cf(*args))
        results.append(cf(*args))  # a cache hit
    return cnt, results


def check(fn, calls, **kw):
    """(cdynamo's counter, torch._dynamo's); cdynamo's results equal eager's."""
    cnt, got = run(cdynamo.compile, fn, calls, **kw)
    expected = [r for args in calls for r in (fn(*args), fn(*args))]
    for g, e in zip(got, expected):
        assert same(g, e), (g, e)
    ref, _ = run(torch.compile, fn, calls, **kw)
    return cnt, ref


def targets(cnt):
    return [[n.target for n in gm.graph.nodes if n.op == "call_function"] for gm in cnt.graphs]


def ones_of_max_item(x):
    return torch.ones(max(x.item(), 1024))


def min_of_three_items(x):
    v = x.item()
    return x * min(v, 5, v + 1)


def scale_by_max_float_item(x):
    return x * max(x.sum().item(), 1.5)


@pytest.mark.parametrize("fn,values", [
    (ones_of_max_item, (1000, 2000, 3000)),
    (min_of_three_items, (1, 7, 3)),
    (scale_by_max_float_item, (1.0, 7.0, -3.0)),
])
def test_min_max_of_items_stay_in_the_graph(fn, values):
    calls = [(torch.tensor([v]),) for v in values]
    with patch.object(torch._dynamo.config, "capture_scalar_outputs", True):
        cnt, ref = check(fn, calls, fullgraph=True)
    assert cnt.frame_count == ref.frame_count == 1
    assert cnt.op_count <= ref.op_count
    assert any(t in (torch.sym_max, torch.sym_min) for t in targets(cnt)[0])


def ones_of_max_size(x):
    return torch.ones(max(x.shape[0], 4))


def slice_to_min_size(x):
    return x[:min(x.shape[0], 4)] * 2


def add_max_of_int(x, n):
    return x + max(n, 2)


def scale_by_max_of_list(x):
    return x * max([x.shape[0], 3, x.shape[0] // 2])


@pytest.mark.parametrize("fn,calls,kw", [
    (ones_of_max_size, [(torch.randn(n),) for n in (2, 3, 5, 6, 7)], {}),
    (slice_to_min_size, [(torch.randn(n),) for n in (2, 3, 5, 6, 7)], {}),
    (scale_by_max_of_list, [(torch.randn(n),) for n in (2, 3, 5, 6, 7)], {}),
    (add_max_of_int, [(torch.randn(3), n) for n in (1, 2, 3, 4, 5)], {}),
    (add_max_of_int, [(torch.randn(3), n) for n in (1, 2, 3, 4, 5)], {"dynamic": True}),
])
def test_min_max_of_symbolic_sizes_and_ints_no_recompile(fn, calls, kw):
    # automatic dynamic: the first compile static, the second symbolic, then every value
    # hits: the max() does not fix which item won (no guard on it)
    cnt, ref = check(fn, calls, **kw)
    assert cnt.frame_count == ref.frame_count == (1 if kw else 2)
    assert cnt.op_count == ref.op_count
    assert any(t in (torch.sym_max, torch.sym_min) for t in targets(cnt)[-1])


def max_int_and_float(x, n):
    return x * max(x.shape[0], 2.5)  # eagerly an int or the float 2.5: no sym_max


def test_max_of_mixed_int_and_float_keeps_the_winner_type():
    calls = [(torch.randn(n), 0) for n in (2, 3, 5)]
    cnt, _ = check(max_int_and_float, calls)
    assert all(torch.sym_max not in ts for ts in targets(cnt))


def tensor_of_item_list(v):
    return torch.tensor([v.item()])


def tensor_of_nested_items(v):
    return torch.tensor([[v.item()], [2.0]])


def tensor_of_item(v):
    return torch.tensor(v.item())


def tensor_of_item_tuple(v):
    return torch.tensor((v.item(),))


@pytest.mark.parametrize("fn", [tensor_of_item_list, tensor_of_nested_items, tensor_of_item, tensor_of_item_tuple])
@pytest.mark.parametrize("backend", ["eager", "aot_eager"])
def test_tensor_of_symbolic_floats(fn, backend):
    with patch.object(torch._dynamo.config, "capture_scalar_outputs", True):
        cf = cdynamo.compile(fn, backend=backend, fullgraph=True)
        for v in (torch.randn(1), torch.randn(1), torch.tensor([3.5])):
            assert same(cf(v), fn(v))
            assert same(cf(v), fn(v))
        cnt, ref = check(fn, [(torch.randn(1),), (torch.randn(1),)], fullgraph=True)
    assert cnt.frame_count == ref.frame_count == 1


def tensor_of_3d_tensors():
    a = torch.tensor([[[123]]])
    return torch.tensor([a, a])


def tensor_of_0d_tensors():
    a = torch.tensor(123)
    return torch.tensor([a, a])


def tensor_of_mixed_tensors():
    a = torch.tensor(123)
    b = torch.tensor([[[456]]])
    return torch.tensor([a, b])


def tensor_of_input_tensors(x, y):
    return torch.tensor([x, y, 2.5])


def tensor_of_a_tensor(x):
    return torch.tensor(x) + 1  # torch.tensor(t) of a tensor: recorded as itself


@pytest.mark.parametrize("fn,args", [
    (tensor_of_3d_tensors, ()),
    (tensor_of_0d_tensors, ()),
    (tensor_of_mixed_tensors, ()),
    (tensor_of_input_tensors, (torch.tensor(1.5), torch.tensor(-2.0))),
])
@pytest.mark.parametrize("backend", ["eager", "aot_eager"])
def test_tensor_of_tensors(fn, args, backend):
    cf = cdynamo.compile(fn, backend=backend, fullgraph=True)
    assert same(cf(*args), fn(*args))
    assert same(cf(*args), fn(*args))
    cnt, ref = check(fn, [args], fullgraph=True)
    assert cnt.frame_count == ref.frame_count == 1
    assert torch._refs.tensor in targets(cnt)[0]


def test_tensor_of_a_tensor_is_not_rewritten():
    x = torch.randn(3)
    with pytest.warns(UserWarning):  # eager's own warning: copy-construct with clone()
        expected = tensor_of_a_tensor(x)
    cnt, ref = check(tensor_of_a_tensor, [(x,)])
    assert cnt.frame_count == ref.frame_count == 1
    assert torch.tensor in targets(cnt)[0] and torch._refs.tensor not in targets(cnt)[0]
    torch.testing.assert_close(cdynamo.compile(tensor_of_a_tensor)(x), expected)


def tensor_of_two_element_tensors(x):
    return torch.tensor([x, x])


def test_tensor_of_larger_tensors_raises_as_eager():
    # eager reads each item as a number: a two-element tensor raises ValueError (torch's
    # stack-based build would not); the call stops the graph and runs natively
    x = torch.tensor([1.0, 2.0])
    cf = cdynamo.compile(tensor_of_two_element_tensors, backend=CompileCounter())
    for _ in range(2):
        with pytest.raises(ValueError, match="only one element tensors"):
            tensor_of_two_element_tensors(x)
        with pytest.raises(ValueError, match="only one element tensors"):
            cf(x)
    assert any("only one element tensors" in b["reason"] for b in cdynamo.stats()["graph_break_reasons"])


def check_at_least_three(x):
    torch._check(x.shape[0] >= 3)
    return x + 1


def catch_the_check(x):
    try:
        torch._check(x.shape[0] >= 3)
    except RuntimeError:
        return x - 1
    return x + 1


def outcome(cf, x):
    try:
        return cf(x)
    except RuntimeError as e:
        return ("RuntimeError", str(e))


@pytest.mark.parametrize("kw", [{}, {"dynamic": True}])
def test_torch_check_false_for_these_sizes_raises_without_a_graph(kw):
    sizes = (4, 5, 2, 6, 2, 7)
    counters = {}
    for name, compile_ in (("cdynamo", cdynamo.compile), ("dynamo", torch.compile)):
        cnt = CompileCounter()
        cf = compile_(check_at_least_three, backend=cnt, **kw)
        for n in sizes:
            x = torch.randn(n)
            got = outcome(cf, x)
            if name == "cdynamo":
                assert same(got, outcome(check_at_least_three, x))  # eager's error and message
                assert same(outcome(cf, x), got)
        counters[name] = cnt
    # no graph that only computes the condition: as many graphs as torch._dynamo
    assert counters["cdynamo"].frame_count == counters["dynamo"].frame_count == (1 if kw else 2)
    assert all(ts == [__import__("operator").add] for ts in targets(counters["cdynamo"]))


def test_torch_check_false_caught_by_the_program():
    cnt = CompileCounter()
    cf = cdynamo.compile(catch_the_check, backend=cnt)
    for n in (4, 5, 2, 6, 2, 7):
        x = torch.randn(n)
        assert same(cf(x), catch_the_check(x))
        assert same(cf(x), catch_the_check(x))
