"""itertools iterators over other iterators take each item from their source only when the
program takes it (docs/conformance.md: itertools). Their Python versions in
cdynamo._internal.polyfills are iterator classes stepped item by item, so a source the program also
uses directly sees the program's order of takes, an endless source works under islice, and
one that outlives the trace is the real C iterator in the same state. Each case is compared
with eager on a first call and a cache hit, with torch._dynamo's graph count.
"""
import itertools

import pytest
import torch

import cdynamo
import cdynamo.testing

from .harness import same_as_eager


def one():
    return lambda: (torch.randn(3),)


# islice's argument forms, over a range, a list iterator and an endless count
@pytest.mark.parametrize("args", [(7,), (2, 9), (1, 12, 4), (8, 3), (5, 5), (None,), (None, None),
                                  (None, None, None), (3, None), (0, None, 3), (4, 40, 7)])
def test_islice_argument_forms(args):
    def fn(x):
        return x * 2, list(itertools.islice(range(30), *args)), list(itertools.islice(iter(list(range(12))), *args))

    same_as_eager(fn, one())


def test_islice_takes_no_item_it_does_not_need():
    def fn(x):
        it = iter([x, x + 1, x + 2, x + 3, x + 4])
        s = itertools.islice(it, 1, 4, 2)
        first = next(s)           # took items 0 and 1
        rest_direct = next(it)    # item 2, taken by the program itself
        return first, rest_direct, list(s), list(it)

    same_as_eager(fn, one())


def test_islice_over_count_leaves_it_where_cpython_does():
    def fn(x):
        c = itertools.count(5)
        taken = list(itertools.islice(c, 1, 3, 50))  # reads up to stop, not to the next step
        return x + taken[0], next(c)

    same_as_eager(fn, one())


def test_islice_of_an_endless_iterator_without_stop():
    def fn(x):
        s = itertools.islice(itertools.count(2), 1, None, 3)
        return x * next(s) + next(s)

    same_as_eager(fn, one())


@pytest.mark.parametrize("args", [(1.5,), (-1,), (2, -3), (-2, 5), (0, 4, 0), (0, 4, -1), (), (1, 2, 3, 4)])
def test_islice_invalid_arguments_raise_as_eager(args):
    # the exception escapes the frame: it runs natively to raise it (captured=False), with
    # eager's type and message
    def fn(x):
        return x + 1, list(itertools.islice(range(10), *args))

    same_as_eager(fn, one(), captured=False)


@pytest.mark.parametrize("make", [
    lambda it: itertools.chain(it, [7]),
    lambda it: itertools.takewhile(lambda v: v < 100, it),
    lambda it: itertools.dropwhile(lambda v: v < 1, it),
    lambda it: itertools.filterfalse(lambda v: v == 2, it),
    lambda it: itertools.compress(it, [1, 0, 1, 1, 1, 1]),
    lambda it: itertools.starmap(lambda a: a * 10, ((v,) for v in [0, 1, 2, 3, 4])),
    lambda it: itertools.accumulate(it),
    lambda it: itertools.pairwise(it),
    lambda it: itertools.zip_longest(it, [9]),
], ids=["chain", "takewhile", "dropwhile", "filterfalse", "compress", "starmap", "accumulate", "pairwise",
        "zip_longest"])
def test_wrapper_takes_from_its_source_lazily(make):
    def fn(x):
        it = iter([0, 1, 2, 3, 4, 5])
        w = make(it)
        first = next(w)
        direct = next(it)  # the program takes from the source between two items
        return x + 1, first, direct, list(w), list(it)

    same_as_eager(fn, one())


@pytest.mark.parametrize("make", [
    lambda it: itertools.islice(it, 1, 5, 2),
    lambda it: itertools.chain(it, "ab"),
    lambda it: itertools.takewhile(lambda v: v < 4, it),
    lambda it: itertools.dropwhile(lambda v: v < 2, it),
    lambda it: itertools.accumulate(it, initial=100),
    lambda it: itertools.pairwise(it),
    lambda it: itertools.zip_longest(it, [8, 9], fillvalue=-1),
    lambda it: itertools.starmap(pow, zip(it, itertools.repeat(2))),
], ids=["islice", "chain", "takewhile", "dropwhile", "accumulate", "pairwise", "zip_longest", "starmap"])
def test_partly_consumed_wrapper_returned_is_the_real_one_in_its_state(make):
    def fn(x):
        it = iter([0, 1, 2, 3, 4, 5])
        w = make(it)
        return x, next(w), w, it

    x = torch.randn(3)
    e_x, e_first, e_w, e_it = fn(x)
    expected = (e_first, type(e_w), list(e_w), list(e_it))
    cdynamo.reset()
    cnt = cdynamo.testing.CompileCounter()
    cfn = cdynamo.compile(fn, backend=cnt)
    for call in range(2):
        got_x, first, w, it = cfn(x)
        assert got_x is x
        assert (first, type(w), list(w), list(it)) == expected, f"call {call}"
    assert cdynamo.stats()["frames_native"] == 0, cdynamo.stats()["native_frames"]
    assert cdynamo.stats()["cache_hits"] >= 1


def test_returned_exhausted_islice_takes_nothing_more():
    def fn(x):
        it = iter([1, 2, 3, 4])
        s = itertools.islice(it, 2)
        return x + sum(s), s, it

    x = torch.randn(3)
    cdynamo.reset()
    cfn = cdynamo.compile(fn, backend=cdynamo.testing.CompileCounter())
    for _ in range(2):
        _, s, it = cfn(x)
        assert type(s) is itertools.islice and list(s) == [] and list(it) == [3, 4]
