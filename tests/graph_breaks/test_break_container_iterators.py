"""Iterators of lists, dicts and sets alive at a graph break, their container changed after it.

A list_iterator reads its list by index as it goes, so the items it gives after the break
are the list's as they are then; a dict or set iterator raises RuntimeError once its
container changed size. At a break the output plan rebuilds a list iterator made in the
trace over the very list the resume function gets (cdynamo._internal.frame_rebuild.list_iterator_at), and
the resume function's trace reads an iterator passed in over the items it had left only as
long as it does not change the container: changing it pins the iterator to the container's
value (Iterators::pin), guarded to be the container the iterator reads (and its index).
Each case compares eager, cdynamo and torch._dynamo on a first call and a cache hit.
"""
import pytest
import torch

from .harness import PRINT, Cases, check_breaks, tensors, with_args

cases = Cases()
T4 = tensors((4,))


@cases(T4, reason=PRINT)
def list_iterator_sees_append_after_break(x):
    lst = [x, x + 1, x + 2]
    it = iter(lst)
    next(it)
    print("break")
    lst.append(x + 3)
    return list(it)


@cases(T4, reason=PRINT)
def list_iterator_sees_insert_and_delete_after_break(x):
    lst = [x, x + 1, x + 2, x + 3]
    it = iter(lst)
    a = next(it)
    print("break")
    lst.insert(0, x * 10)  # the item at its index is the one before it now
    b = next(it)
    del lst[0]
    del lst[0]
    return a, b, list(it), lst


@cases(T4, reason=PRINT)
def list_iterator_taken_before_and_after_the_change(x):
    lst = [x, x + 1, x + 2]
    it = iter(lst)
    print("break")
    a = next(it)
    lst.append(x + 3)
    b = next(it)
    lst[2] = x * 5
    return a, b, next(it), next(it), next(it, None), lst


@cases(T4, reason=PRINT)
def list_iterator_changed_before_it_is_read(x):
    lst = [x, x + 1]
    it = iter(lst)
    next(it)
    print("break")
    lst.clear()
    lst.extend([x * 2, x * 3, x * 4])
    return list(it), lst


@cases(T4, reason=PRINT)
def exhausted_list_iterator_stays_exhausted(x):
    lst = [x, x + 1]
    it = iter(lst)
    print("break")
    r = list(it)
    lst.append(x + 2)
    return r, list(it), lst


@cases(T4, reason=PRINT)
def list_iterator_left_at_its_end_sees_appends(x):
    lst = [x, x + 1]
    it = iter(lst)
    print("break")
    a, b = next(it), next(it)
    lst.append(x + 2)  # not exhausted: its end was never seen
    return a, b, list(it)


@cases(with_args([1, 2, 3]), reason=PRINT)
def iterator_over_a_list_passed_in(x, lst):
    it = iter(lst)
    next(it)
    print("break")
    lst.append(4)
    return x + sum(it), lst


@cases(T4, reason=PRINT)
def for_loop_over_a_list_that_grows(x):
    lst = [1, 2]
    for v in lst:
        print(v)
        if len(lst) < 4:
            lst.append(v + 10)
        x = x + v
    return x, lst


@cases(T4, reason=PRINT)
def list_iterator_in_a_dict_alive_at_break(x):
    lst = [x, x + 1]
    holder = {"it": iter(lst)}
    next(holder["it"])
    print("break")
    lst.append(x + 2)
    return list(holder["it"])


@cases(T4, reason=PRINT)
def two_iterators_over_one_list(x):
    lst = [x, x + 1, x + 2]
    a, b = iter(lst), iter(lst)
    next(a)
    print("break")
    lst.append(x + 3)
    return list(a), list(b)


@cases(T4, reason=PRINT)
def iterator_over_another_list_is_not_pinned(x):
    lst, other = [x, x + 1], [x * 2]
    it = iter(other)
    print("break")
    lst.append(x + 2)
    return list(it), lst


@cases(T4, reason=PRINT)
def dict_iterator_raises_after_dict_grows(x):
    d = {"a": x, "b": x + 1}
    it = iter(d)
    next(it)
    print("break")
    d["c"] = x + 2
    try:
        next(it)
    except RuntimeError as e:
        return x, str(e)
    return x, "no error"


@cases(T4, reason=PRINT)
def dict_items_iterator_sees_new_values(x):
    d = {"a": x, "b": x + 1, "c": x + 2}
    it = iter(d.items())
    next(it)
    print("break")
    d["b"] = x * 7  # same keys: the iterator goes on, with the new value
    return list(it)


@cases(T4, reason=PRINT)
def set_iterator_raises_after_set_grows(x):
    s = {1, 2, 3}
    it = iter(s)
    next(it)
    print("break")
    s.add(4)
    try:
        next(it)
    except RuntimeError as e:
        return x, str(e)
    return x, "no error"


@cases(T4, reason=PRINT)
def enumerate_over_list_alive_at_break(x):
    lst = [x, x + 1]
    e = enumerate(lst)
    next(e)
    print("break")
    lst.append(x + 2)
    return list(e)


@cases(T4, reason=PRINT)
def zip_over_list_alive_at_break(x):
    lst = [x, x + 1]
    z = zip(lst, [1, 2, 3])
    next(z)
    print("break")
    lst.append(x + 2)
    return list(z)


@cases(T4, reason=PRINT)
def reversed_list_alive_at_break(x):
    lst = [x, x + 1, x + 2]
    r = reversed(lst)
    next(r)
    print("break")
    lst[0] = x * 9
    return list(r)


@pytest.mark.parametrize("fn,make_args,kw", cases.params)
def test_break_container_iterators(fn, make_args, kw):
    check_breaks(fn, make_args, **kw)


def test_loop_breaking_every_step_is_one_resume_entry():
    """Pinning costs no recompile where the list is not changed: a loop over a list kept
    alive after it, breaking every step, is still one resume entry for all steps."""
    import cdynamo
    import cdynamo.testing

    def fn(x):
        lst = [x, x + 1, x + 2, x + 3, x + 4, x + 5, x + 6, x + 7, x + 8, x + 9]
        for t in lst:
            print("step")
            x = x + t
        return x, lst

    cdynamo.reset()
    cnt = cdynamo.testing.CompileCounter()
    cfn = cdynamo.compile(fn, backend=cnt)
    x = torch.ones(3)
    for _ in range(2):
        out, lst = cfn(x)
        want, want_lst = fn(x)
        torch.testing.assert_close(out, want)
    frames = cnt.frame_count
    # the first frame; the loop body at its first step (t is x), at the others, past its end
    assert frames <= 4, frames
    assert not cdynamo.stats()["native_frames"]


@pytest.mark.parametrize("end", [False, True])
def test_iterator_returned_after_the_change_is_where_eager_leaves_it(end):
    """The list_iterator the resume function returns is the one it got, moved as eager's
    (set to its index once its list has its final contents; exhausted when its end was seen)."""
    import cdynamo
    import cdynamo.testing

    def fn(x, lst):
        it = iter(lst)
        next(it)
        print("break")
        lst.append(4)
        next(it)
        if end:
            rest = list(it)
            lst.append(5)
            return x + sum(rest), it, lst
        return x + 1, it, lst

    cdynamo.reset()
    cnt = cdynamo.testing.CompileCounter()
    cfn = cdynamo.compile(fn, backend=cnt)
    for call in ("first call", "cache hit"):
        x = torch.ones(2)
        want_out, want_it, want_lst = fn(x, [1, 2, 3])
        out, it, lst = cfn(x, [1, 2, 3])
        torch.testing.assert_close(out, want_out)
        assert lst == want_lst, call
        lst.append(6)
        want_lst.append(6)
        assert type(it) is type(want_it)
        assert list(it) == list(want_it), call
    assert cnt.frame_count == 1  # the resume function's; the first frame has no op
    assert cdynamo.stats()["cache_hits"] == 2 and not cdynamo.stats()["native_frames"]
