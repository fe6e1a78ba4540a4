"""set.isdisjoint/issuperset take an iterable's items one at a time (wrong results before).

Over an iterable that is not a set, Python stops at the first item that decides
(isdisjoint: the first member; issuperset: the first non-member), so a generator keeps the
rest and the side effects of producing them do not happen. The trace drained the iterable
first (PyTorch's test_sets.py test_isdisjoint_with_generator: a counter the generator bumps
came out 6 instead of 3).
"""
import pytest
import torch

from .harness import same_as_eager


def counting_source():
    log = []

    def gen():
        for v in (1, 2, 3, 4):
            log.append(v)
            yield v

    return gen, log


@pytest.mark.parametrize("frozen", [False, True])
@pytest.mark.parametrize("method", ["isdisjoint", "issuperset", "issubset"])
def test_generator_argument_is_taken_as_far_as_python_takes_it(method, frozen):
    def fn(x):
        gen, log = counting_source()
        s = {2, 4, 5} if not frozen else frozenset({2, 4, 5})
        answer = getattr(s, method)(gen())
        return x + len(log), answer, list(log)

    same_as_eager(fn, lambda: (torch.ones(2),))


def test_iterator_argument_keeps_its_rest():
    def fn(x, items):
        it = iter(items)
        a = {3, 9}.isdisjoint(it)
        b = {1, 2, 3, 4}.issuperset(it)
        return x * 2, a, b, list(it)

    same_as_eager(fn, lambda: (torch.ones(2), [1, 3, 5, 7, 8]))


def test_operator_contains_on_an_iterator_is_not_run_ahead():
    # operator.contains(it, x) stops at the first match as `x in it` does; the trace folded it
    # as a pure call that takes the iterator whole. Now it is not folded (a native frame, with
    # eager's outcome).
    import operator

    import cdynamo

    def fn(x, items):
        it = iter(items)
        found = operator.contains(it, 3)
        return x + 1, found, list(it)

    cdynamo.reset()
    for _ in range(2):
        eager = fn(torch.ones(1), [1, 3, 5])
        got = cdynamo.compile(fn, backend="eager")(torch.ones(1), [1, 3, 5])
        assert repr(got) == repr(eager), (got, eager)
