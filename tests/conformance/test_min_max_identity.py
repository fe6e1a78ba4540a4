"""min()/max() over tensors return one of their items itself (wrong results before).

Eager's ``max(a, b)`` is ``a`` or ``b``, the very object. cdynamo computes its value as
torch.where() steps, and also which item won (an index the graph computes); the result is
a *choice* (GraphBuilder::markChoice):

- its value is the where() node's (arithmetic, comparisons, metadata);
- returned, stored into a container or an object that leaves the frame, or alive at a graph
  break, it is rebuilt as ``(items...)[index]`` from the graph's outputs: the winner itself;
- an identity test (``is``, set membership) against it is decided at trace time when every
  item answers alike, else the graph breaks before it and eager's test runs;
- an in-place change of it, of one of its items or of a view of them, and a view of it
  (``m[()]``, ``m.detach()``), break the graph before that operation (eager changes, or
  views, the winner itself); so do reads of the object's own state (``.grad``, ``._base``).

Before this, ``max(a, b) is a`` was always False compiled and ``max(a, b)[()].add_(1)``
changed a fresh tensor instead of the winner. torch._dynamo is no reference here: it
records torch.maximum (a new tensor, NaN-propagating), so ``max(a, b) is a`` is False under
it too. Each case runs eagerly and compiled on argument sets where different items win,
twice over (the first pass compiles, the second is all cache hits), comparing results
(which argument object is returned, by identity), exceptions and the arguments' final
state, with graph and graph-break counts.
"""
import functools

import torch

import cdynamo
import cdynamo.testing

from semantics.harness import _compare_outcome, _run

# Argument sets where a, b, c win in turn (values of 0-d float tensors), and a tie (the
# first item wins).
VALUES = [(1.0, 2.0, 0.5), (3.0, -1.0, 0.0), (0.0, 1.0, 7.0), (2.0, 2.0, 2.0)]


def args3(values):
    return [torch.tensor(v) for v in values]


def check(fn, *, graphs, breaks, nargs=3, values=VALUES):
    """Eager vs compiled on every argument set, first pass and cache hits; graph counts."""
    __tracebackhide__ = True
    cdynamo.reset()
    cnt = cdynamo.testing.CompileCounter()
    cfn = cdynamo.compile(fn, backend=cnt)
    for rnd in ("first pass", "cache hits"):
        before = cdynamo.stats()["cache_hits"]
        for vals in values:
            ea = args3(vals[:nargs])
            eager = _run(fn, ea, {})
            ga = args3(vals[:nargs])
            got = _run(cfn, ga, {})
            _compare_outcome(f"compiled ({rnd}, {vals})", eager, (ea, {}), got, (ga, {}))
        if rnd == "cache hits":
            assert cdynamo.stats()["cache_hits"] > before, "the second pass was not served from the cache"
    st = cdynamo.stats()
    assert st["frames_native"] == 0, [n.get("reason") for n in st["native_frames"]]
    assert cnt.frame_count == graphs, f"{cnt.frame_count} graphs, expected {graphs}"
    reasons = [b.get("reason") for b in st["graph_break_reasons"]]
    assert len(reasons) == breaks, reasons
    return cnt, reasons


def where_nodes(cnt):
    return sum(1 for g in cnt.graphs for n in g.graph.nodes if n.target is torch.where)


def test_returned_result_is_the_item_that_won():
    # The winner itself leaves the frame: (a, b, c)[index], one graph, no break.
    def fn(a, b, c):
        return max(a, b, c)
    check(fn, graphs=1, breaks=0)


def test_returned_with_its_items_and_stored_in_containers():
    def fn(a, b, c):
        m = min(a, b)
        box = {"m": m, "all": [a, m, b]}
        return m, a, box, (m,)
    check(fn, graphs=1, breaks=0)


def test_result_of_items_computed_in_the_graph():
    # The items are graph outputs too: the winner is one of them (torch's test_map_max).
    def fn(a, b, c):
        s, t = a * 2, b * 2
        m = max(map(lambda x: x + 1, [s, t]))
        return m, s, t, max([s, t]) is s
    check(fn, graphs=1, breaks=1)


def test_is_depends_on_the_values_and_breaks():
    # Which object max() returned is known only from the values: the graph breaks at `is`.
    def fn(a, b, c):
        m = max(a, b)
        y = a + b
        return m is a, m is not b, y * 2
    # The resume function gets the winner itself: a graph per way of aliasing (m is a, m is b).
    cnt, reasons = check(fn, graphs=3, breaks=1)
    assert "depends on their values" in reasons[0]


def test_is_decided_at_trace_time_when_all_items_agree():
    def fn(a, b, c):
        m = max(a, b)
        return m is c, m is m, max(a, a) is a, m + c
    check(fn, graphs=1, breaks=0)


def test_nested_and_reduced_results():
    def fn(a, b, c):
        m = max(max(a, b), c)
        r = functools.reduce(min, [c, b, a])
        return m, r, [m, r]
    check(fn, graphs=1, breaks=0)


def test_in_place_change_of_the_result_changes_the_winner():
    def fn(a, b, c):
        m = max(a, b)
        y = a * 3
        m.add_(10)
        return m, y, a + b
    cnt, reasons = check(fn, graphs=3, breaks=1)  # the resume function: m is a, m is b
    assert "in-place change" in reasons[0]


def test_in_place_change_through_a_view_of_the_result():
    # m[()] is a view of the winner in eager: the graph breaks at the view.
    def fn(a, b, c):
        m = max(a, b)
        y = a * 3
        m[()].add_(1)
        return y, m
    cnt, reasons = check(fn, graphs=2, breaks=1)
    assert "a view of the result" in reasons[0]


def test_view_of_the_result_leaving_the_frame():
    # Eager's view shares the winner's memory (a later change of a shows in it).
    def fn(a, b, c):
        m = min(a, b)
        return m.detach(), m.view(1), c + 1
    # After the break at detach() the resume function has the winner itself (as an input).
    cnt, reasons = check(fn, graphs=2, breaks=1)
    assert "a view of the result" in reasons[0]


def test_in_place_change_of_an_item_after_the_choice():
    # Eager's m is a: changing a (directly or through an older view) changes m's value.
    def fn(a, b, c):
        v = a.view(())
        m = max(a, b)
        y = m + 1
        v.mul_(2)
        return m + 0, y, m
    check(fn, graphs=2, breaks=1)


def test_explicit_special_method_calls_change_the_item():
    # Tensor.__setitem__ and Tensor.__iadd__ called by name change the tensor (they were
    # recorded as pure calls returning no tensor: the change was lost, without a choice too).
    def fn(a, b, c):
        m = max(a, b)
        b.__setitem__((), 5.0)
        return m, a.__iadd__(1)
    check(fn, graphs=2, breaks=1)

    def plain(a, b, c):
        a.__setitem__((), 4.0)
        c.__imul__(2)
        return a + b, c
    check(plain, graphs=1, breaks=0)


def test_result_alive_at_a_graph_break():
    def fn(a, b, c):
        m = max(a, b)
        torch._dynamo.graph_break()
        return m is a, m * 2
    check(fn, graphs=3, breaks=1)  # the resume function: m is a, m is b


def test_set_membership_of_the_result():
    def fn(a, b, c):
        m = max(a, b)
        return m in {a}, m in {a, b}, m in {c}, c - 1
    cnt, reasons = check(fn, graphs=3, breaks=1)  # `m in {a}` depends on the values
    assert "depends on their values" in reasons[0]


def test_identity_returning_ops_on_the_result():
    # m.float() of a float m, m.contiguous(), m.to(m.dtype) return m itself in eager.
    def fn(a, b, c):
        m = min(a, b)
        f = m.float()
        return f, m.contiguous(), m.to(torch.float32), f is m, m.double()
    check(fn, graphs=1, breaks=0)


def test_state_of_the_object_itself_breaks():
    # .grad and ._base are the winner's own: the graph breaks before the read.
    def fn(a, b, c):
        m = max(a, b)
        return m.grad, m._base, m.shape, m.dtype, m + 1
    cnt, reasons = check(fn, graphs=2, breaks=1)  # the resume function reads the winner's own
    assert "Tensor.grad of the result" in reasons[0]


def test_unused_index_leaves_no_op():
    # The winner's index is the trace's bookkeeping: without an identity use it is dropped,
    # and the graph holds what it held before (a comparison and a where() per pair).
    def fn(a, b, c):
        return max(a, b) - min(a, b, c) + c
    cnt, _ = check(fn, graphs=1, breaks=0)
    assert where_nodes(cnt) == 3
    def returned(a, b, c):
        return max(a, b, c)
    cnt, _ = check(returned, graphs=1, breaks=0)
    assert where_nodes(cnt) == 4  # 2 for the value, 2 for the index
