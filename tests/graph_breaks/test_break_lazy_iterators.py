"""Lazy iterators (map, filter, zip, generators, itertools objects) reaching a resume function.

A map made in the trace stays lazy (its function runs when an item is taken), so at a graph
break it is handed to the resume function as a real map object over what its sources have
left. The trace cannot read such an iterator ahead without running its function, so it is
an opaque value there, guarded by type: taking an item from it (next(), a for loop) breaks
the graph at that instruction, and what the function it runs does is captured as a frame of
its own; the rest of the resume function is still captured (it used to run natively
whole: 'cannot trace a value of type map'), as in torch._dynamo (3 graphs).
"""
import itertools

import pytest
import torch

import cdynamo

from .harness import PRINT, Cases, check_breaks, tensors

cases = Cases()
T33 = tensors((3, 3))
T4 = tensors((4,))


@cases(T33, expect_graphs=3, reason=["graph_break()", "next() of a map object the trace cannot read ahead"])
def map_of_closure_across_graph_break(a):
    a += 1

    def g(x):
        nonlocal a
        a += 1
        return x + 1

    m = map(g, [1, 2, 3, 4, 5])
    a += next(m)
    torch._dynamo.graph_break()
    a += next(m)
    return a


# filter() with a function that changes state is lazy too (its function runs per item taken).
@cases(T33, expect_graphs=3, reason=["graph_break()", "next() of a filter object the trace cannot read ahead"])
def filter_of_closure_across_graph_break(a):
    a += 1

    def g(x):
        nonlocal a
        a += 1
        return x > 1

    m = filter(g, [1, 2, 3, 4, 5])
    a += next(m)
    torch._dynamo.graph_break()
    a += next(m)
    return a


@cases(T4, reason=PRINT)
def map_listed_after_break(x):
    m = map(lambda v: v * 2, [1, 2, 3])
    first = next(m)
    print("break")
    return x + first, list(m)


@cases(T4, reason=PRINT)
def filter_and_zip_taken_after_break(x):
    f = filter(lambda v: v % 2, [1, 2, 3, 4, 5])
    z = zip([10, 20, 30], "abc")
    a = next(f)
    print("break")
    b = next(f)
    n, s = next(z)
    return x * a + b + n, s, list(f), list(z)


# A generator alive at the break is not rebuilt (its paused frame cannot be): the frame runs
# natively, reported, with eager's values.
@cases(T4, expect_breaks=0, allow_native="a generator made in the trace is still running")
def generator_taken_after_break(x):
    g = (v * v for v in range(5))
    a = next(g)
    print("break")
    return x + a + next(g), list(itertools.islice(g, 2))


@pytest.mark.parametrize("fn,make_args,kw", cases.params)
def test_break_lazy_iterators(fn, make_args, kw):
    check_breaks(fn, make_args, **kw)


def test_map_passed_in_is_handed_back_itself():
    """A map object passed to a compiled function is opaque there: returned, it is the very
    object; what is taken from it after the call is what eager leaves."""
    def fn(x, m):
        print("break")
        return x + 1, m

    cfn = cdynamo.compile(fn, backend="eager")
    for call in ("first call", "cache hit"):
        m = map(str, [1, 2, 3])
        out, got = cfn(torch.ones(2), m)
        assert got is m, call
        assert list(m) == ["1", "2", "3"], call
        torch.testing.assert_close(out, torch.full((2,), 2.0))
