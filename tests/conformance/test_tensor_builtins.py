"""Builtins and tensor values the trace computes as torch._dynamo does.

- a legacy tensor type (torch.HalfTensor) passed to a graph op goes in as its name;
- a one-element integer tensor made from constants (torch.as_tensor(2)) indexes a list or a
  tuple by its value, known at trace time;
- min()/max() over 0-d tensors of one dtype become torch.where(b > a, b, a) steps (eager's
  value, dtype, NaN and tie rules, and gradient); an in-place change of the result or an
  item afterwards breaks the graph (eager changes the item itself); a number among the
  items, a larger tensor or mixed dtypes are not modelled;
- operator.methodcaller made in the trace, with tensors among its arguments.

Each case runs eagerly and compiled (first call and a cache hit: same_as_eager, with the
graph count of torch._dynamo).
"""
import operator

import pytest
import torch

import cdynamo
import cdynamo.testing

from .harness import same_as_eager


def two():
    return (torch.randn(4, 4), torch.randn(4, 4))


def test_legacy_tensor_type_argument():
    def fn(a, b):
        m = a.type(torch.HalfTensor)
        return b.type(m.type()), m, b.type(torch.DoubleTensor).dtype
    cnt = same_as_eager(fn, two)
    assert cnt.op_count == 3


def test_list_and_tuple_indexed_by_a_constant_tensor():
    def fn(a, b):
        items = [a, b, a + 1, b + 1]
        pair = (a * 2, b * 2)
        return items[torch.as_tensor(2)], pair[torch.tensor([1])], items[torch.tensor(-1)]
    same_as_eager(fn, two, expect_graphs=1)  # torch._dynamo breaks on the last two: 3 graphs


def test_float_tensor_index_raises_as_eager():
    def fn(a, b):
        items = [a, b]
        try:
            return items[torch.as_tensor(1.0)]
        except TypeError:
            return a - b
    same_as_eager(fn, two, compare_with_dynamo=False)


def test_min_max_of_0d_tensors():
    def fn(a, b):
        s, t = a.sum(), b.sum()
        return max(s, t) - min(s, t) + a, max([a.mean()]), min(s, t, a.max()), max(t, s, a.min())
    cnt = same_as_eager(fn, two)
    assert cnt.frame_count == 1


def test_max_over_a_map_of_tensors():
    def fn(a, b):
        return max(map(lambda x: x.sum(), [a, b])), min(x.sum() for x in (a, b))
    same_as_eager(fn, two)


def test_min_max_ties_nan_and_integers_as_eager():
    # Python keeps the first of equal items, and compares NaN as never greater nor less.
    def fn(a, b):
        n, m = a.long().sum(), b.long().sum()
        nan = b.sum() / b.sum()
        return max(n, m), min(m, n), max(nan, a.sum()), max(a.sum(), nan), min(nan, a.sum())

    def args():
        return (torch.ones(2, 2), torch.zeros(3))
    same_as_eager(fn, args)


def test_items_that_require_grad_leave_the_losers_without_gradient():
    # Eager's max returns the winning item itself: the losing item is not in the backward
    # graph and its .grad stays None. A where() in the graph would give it zeros (a wrong
    # state), so with items that require grad max() is not recorded: the frame breaks
    # there and eager's max runs.
    def fn(a, b):
        return max(a.sum(), b.sum()) * 3

    def run(f):
        x = torch.ones(3, requires_grad=True)
        y = torch.ones(3, requires_grad=True)  # a tie: eager's max keeps the first item
        f(x, y).backward()
        return x.grad, y.grad
    expected = run(fn)
    cdynamo.reset()
    cnt = cdynamo.testing.CompileCounter()
    cfn = cdynamo.compile(fn, backend=cnt)
    for _ in range(2):  # first call and cache hit
        got = run(cfn)
        assert torch.equal(got[0], expected[0]), (got, expected)
        assert expected[1] is None and got[1] is None, (got, expected)
    assert cnt.frame_count >= 1
    ops = {n.target for g in cnt.graphs for n in g.graph.nodes}
    assert torch.where not in ops


@pytest.mark.parametrize("case", ["mutate result", "mutate item", "mutate item in place op"])
def test_in_place_change_after_min_max_breaks_the_graph(case):
    # Eager's max returns one of its items: a change of the result is a change of that item.
    # The graph breaks before the change (no frame runs natively), and the resume function
    # gets the winner itself (test_min_max_identity.py).
    def fn(a, b):
        s, t = a.sum(), b.sum()
        m = max(s, t)
        if case == "mutate result":
            m.add_(10)
        elif case == "mutate item":
            s.mul_(2)
        else:
            t += 1
        return m, s, t
    same_as_eager(fn, two, captured=False)
    st = cdynamo.stats()
    assert st["frames_native"] == 0, [n.get("reason") for n in st["native_frames"]]
    assert [b["reason"] for b in st["graph_break_reasons"]] and all(
        "in-place change of the result of min()/max()" in b["reason"] for b in st["graph_break_reasons"])


@pytest.mark.parametrize("case", ["larger tensor", "mixed dtypes", "bool tensor", "number"])
def test_min_max_not_modelled_stays_eager(case):
    # What no single graph gives eager's value and type for: the frame is not captured
    # through where(); eager's outcome either way.
    def fn(a, b):
        if case == "larger tensor":
            return max(a, b)  # eager: RuntimeError (truth of a 4x4 tensor)
        if case == "mixed dtypes":
            return max(a.sum(), b.sum().long())
        if case == "bool tensor":
            return max(a.sum() > 0, b.sum() > 0)
        return max(a.sum(), 0)  # eager: the int 0 itself when the sum is negative
    same_as_eager(fn, two, captured=False)
    cdynamo.reset()
    cnt = cdynamo.testing.CompileCounter()
    cfn = cdynamo.compile(fn, backend=cnt)
    try:
        cfn(*two())
    except RuntimeError:
        pass
    ops = {n.target for g in cnt.graphs for n in g.graph.nodes}
    assert torch.where not in ops


@pytest.mark.parametrize("name,args,kwargs", [
    ("size", (), {}),
    ("size", (1,), {}),
    ("add", (torch.ones(4, 4),), {}),
    ("add", (torch.ones(4, 4),), {"alpha": 3.0}),
])
def test_methodcaller_made_in_the_trace(name, args, kwargs):
    def fn(x, y):
        caller = operator.methodcaller(name, *args, **kwargs)
        return caller(x), caller(y)
    # x.size() records no op: no graph, as torch._dynamo (whose count the harness floors at 1)
    same_as_eager(fn, two, fullgraph=True, expect_graphs=0 if name == "size" else None)


def test_methodcaller_with_a_bad_name_raises_as_eager():
    def fn(x, y):
        try:
            operator.methodcaller(3)
        except TypeError as e:
            return x + 1, str(e)
        return x - 1, ""
    same_as_eager(fn, two)
