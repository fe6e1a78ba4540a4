"""Iterators: tuple iterators passed into a compiled frame, and lazy iterator builtins.

A resume function receives one for every `for` loop a graph break cut (the break's output
plan rebuilds the loop's iterator as iter(tuple)), and a user may pass one too. The trace
models it over the items it has left; what it consumes is replayed on the real iterator,
which stays the same object. Every test compares with eager on the first call and on hits:
results, what is left in the iterator, and identities.
"""
import io
import contextlib

import torch

import cdynamo
from cdynamo.testing import CompileCounter


def _left(it):
    """What an iterator has left, without consuming it (as its __reduce__ tells)."""
    state = it.__reduce__()
    return state[1][0][state[2]:] if len(state) > 2 else ()


def _run_both(fn, make_args, calls=3):
    """fn on fresh arguments eagerly and compiled, `calls` times; returns the counter."""
    cnt = CompileCounter()
    cf = cdynamo.compile(fn, backend=cnt)
    for _ in range(calls):
        torch.manual_seed(0)
        e_args = make_args()
        torch.manual_seed(0)
        c_args = make_args()
        expected, got = fn(*e_args), cf(*c_args)
        _assert_same(expected, got, e_args, c_args)
        for ea, ca in zip(e_args, c_args):
            if type(ea).__name__ == "tuple_iterator":
                _assert_same(_left(ea), _left(ca), e_args, c_args)
    assert cdynamo.stats()["native_frames"] == []
    return cnt


def _assert_same(a, b, a_args, b_args):
    if isinstance(a, torch.Tensor):
        assert isinstance(b, torch.Tensor) and torch.allclose(a, b)
    elif isinstance(a, (list, tuple)):
        assert type(a) is type(b) and len(a) == len(b)
        for p, q in zip(a, b):
            _assert_same(p, q, a_args, b_args)
    elif type(a).__name__ == "tuple_iterator":
        # The same argument handed back, in the same position.
        assert [x is a for x in a_args] == [x is b for x in b_args]
    else:
        assert a == b


def test_next_consumes_from_the_callers_iterator():
    def f(x, it):
        a = next(it)
        b = next(it)
        return x * a + b

    cnt = _run_both(f, lambda: (torch.randn(4), iter((2.0, 3.0, 4.0))))
    assert cnt.frame_count == 1


def test_for_loop_with_break_statement_leaves_the_rest():
    def f(x, it):
        for t in it:
            x = x + t
            if t.shape[0] == 2:
                break
        return x

    cnt = _run_both(f, lambda: (torch.randn(2), iter((torch.randn(2), torch.randn(2), torch.randn(3)))))
    assert cnt.frame_count == 1


def test_iterator_returned_and_drained():
    def f(x, it):
        first = next(it)
        return x + first, it

    assert _run_both(f, lambda: (torch.randn(3), iter((torch.randn(3), torch.randn(3))))).frame_count == 1

    def g(x, it):
        return x + sum(list(it))

    assert _run_both(g, lambda: (torch.randn(3), iter((torch.randn(3), torch.randn(3))))).frame_count == 1


def test_one_iterator_under_two_names():
    def f(x, a, b):
        return x + next(a) + next(b)

    def args():
        it = iter((1.0, 2.0, 3.0))
        return torch.randn(2), it, it

    assert _run_both(f, args).frame_count == 1


def test_for_loop_cut_by_a_break_each_iteration_keeps_its_graphs():
    # The resume function gets the loop's iterator: it is traced, not run natively.
    def f(x):
        for t in [x, x * 2, x * 3]:
            x = x + t.sin()
            print("step", tuple(t.shape))
        return x.cos()

    cnt = CompileCounter()
    cf = cdynamo.compile(f, backend=cnt)
    x = torch.randn(4)
    for _ in range(3):
        e_out, c_out = io.StringIO(), io.StringIO()
        with contextlib.redirect_stdout(e_out):
            expected = f(x)
        with contextlib.redirect_stdout(c_out):
            got = cf(x)
        assert torch.allclose(expected, got)
        assert e_out.getvalue() == c_out.getvalue()
    s = cdynamo.stats()
    assert s["native_frames"] == []
    # The frame up to the first print; the loop body (one entry for every iteration: the
    # resume function is guarded on the item it takes, not on how many are left); the tail.
    assert (cnt.frame_count, s["graph_breaks"]) == (3, 2)


def test_zip_used_after_its_source_was_consumed_directly_matches_eager():
    # The zip takes from its source as its items are taken (an iterator over a list made in
    # the trace is read item by item): once the source moved on its own, the zip
    # starts from the second item, as the real one does. Captured in one graph.
    def f(x):
        it = iter([x, x + 1, x + 2])
        pairs = zip(it, [1, 2, 3])
        next(it)  # the real zip now starts from the second item
        rows = list(pairs)
        return x + rows[0][0] * rows[0][1] + len(rows)

    cnt = CompileCounter()
    cf = cdynamo.compile(f, backend=cnt)
    for _ in range(2):
        x = torch.randn(3)
        assert torch.allclose(cf(x), f(x))
    assert not cdynamo.stats()["native_frames"] and cnt.frame_count == 1


def test_guards_follow_what_the_trace_took():
    # next() once: an entry holds for any iterator whose first item left matches (a constant
    # by value, a tensor by its metadata) and that has at least one; the items after it are
    # not guarded. An exhausted one raises StopIteration, as in eager.
    def f(x, it):
        return x + next(it)

    cnt = CompileCounter()
    cf = cdynamo.compile(f, backend=cnt)
    x = torch.randn(3)
    cases = [(1.0, 2.0), (1.0, 2.0, 7.0), (5.0,), (torch.ones(3),), (torch.ones(3),) * 5, ()]
    for items in cases:
        e_it, c_it = iter(items), iter(items)
        outcomes = []
        for fn, it in ((f, e_it), (cf, c_it)):
            try:
                outcomes.append(("ok", fn(x, it)))
            except StopIteration:
                outcomes.append(("raised", None))
        (e_kind, e_val), (c_kind, c_val) = outcomes
        assert e_kind == c_kind and (e_kind == "raised" or torch.allclose(e_val, c_val))
        assert len(_left(e_it)) == len(_left(c_it))
    assert cnt.frame_count == 3  # 1.0, 5.0, a tensor; () is not captured (it raises)
    described = "\n".join(e["guards"] for e in cdynamo.cache_entries(f))
    assert "len(L['it'].<items left>) >= 1" in described
    assert "<items left>[1]" not in described

    # Drained: the exact length is part of what the trace depended on.
    def g(x, it):
        return x + sum(it)

    cnt = CompileCounter()
    cg = cdynamo.compile(g, backend=cnt)
    for items in [(1.0, 2.0), (1.0, 2.0), (1.0, 2.0, 3.0)]:
        assert torch.allclose(cg(x, iter(items)), x + sum(items))
    assert cnt.frame_count == 2


def test_map_with_a_function_that_changes_state_is_not_run_ahead():
    # map() calls its function item by item as items are taken; running it for every item
    # when the map is made would append 1, 2, 3 where eager appends 1. The map is lazy in
    # the trace too: the frame is one graph.
    def f(x):
        log = []
        for y in map(lambda v: log.append(v) or v, [1, 2, 3]):
            break
        return x + y, log

    x = torch.randn(2)
    expected = f(x)
    cdynamo.reset()
    cnt = CompileCounter()
    cf = cdynamo.compile(f, backend=cnt)
    for _ in range(2):
        got = cf(x)
        assert torch.allclose(expected[0], got[0]) and expected[1] == got[1] == [1]
    assert cnt.frame_count == 1 and cdynamo.stats()["graph_breaks"] == 0

    # A pure function is still traced whole.
    def g(x):
        return sum(map(lambda v: v * x, [1, 2, 3]))

    cdynamo.reset()
    cnt = CompileCounter()
    assert torch.allclose(cdynamo.compile(g, backend=cnt)(x), g(x))
    assert cnt.frame_count == 1 and cdynamo.stats()["graph_breaks"] == 0


class _Holder:
    pass


def test_item_left_that_is_also_an_argument_keeps_its_guards():
    # obj is both an item the iterator still has and an argument: it is one traced value,
    # and obj.k, read through it, must stay guarded even though the item was not taken.
    def f(x, it, obj):
        a = next(it)
        return x * a + obj.k

    cf = cdynamo.compile(f, backend=CompileCounter())
    x = torch.ones(2)
    obj = _Holder()
    for k in (1.0, 5.0, 5.0, 2.0):
        obj.k = k
        assert torch.allclose(cf(x, iter((2.0, obj)), obj), f(x, iter((2.0, obj)), obj))
