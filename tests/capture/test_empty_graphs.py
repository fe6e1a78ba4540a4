"""Frames whose graph has no operation: torch._dynamo compiles the empty graph when
fullgraph=True and the frame returns one tensor without side effects (a graph that returns
its input); else no graph (without fullgraph the frame is skipped for good, and runs
natively in cdynamo too). cdynamo's graph counts agree: checked against torch._dynamo's, on a first call and a cache hit, results as eager.
"""
import pytest
import torch
import torch._dynamo
import torch._dynamo.testing

import cdynamo
from cdynamo.testing import CompileCounter

pytestmark = pytest.mark.usefixtures("dynamo_skips_empty_frames")  # torch._dynamo's default


def returns_input(x):
    return x


def returns_a_tuple(x):
    return (x,)


def returns_input_and_constant(x):
    return x, 1


def mutates_a_list(x, lst):
    lst.append(1)
    return x


def reduces_one_item(x):
    import functools
    return functools.reduce(lambda a, b: (a, b), [x])


def reduces_with_initial(x):
    import functools
    return functools.reduce(lambda a, b: (a, b), [x], None)


def picks_from_permutations(x, y):
    import itertools
    itertools.permutations([x, y])
    return x


CASES = [returns_input, returns_a_tuple, returns_input_and_constant, mutates_a_list, reduces_one_item,
         reduces_with_initial, picks_from_permutations]


def args_for(fn):
    if fn is mutates_a_list:
        return lambda: (torch.ones(2), [])
    n = fn.__code__.co_argcount
    return lambda: tuple(torch.full((2,), float(i)) for i in range(n))


def dynamo_count(fn, fullgraph):
    torch._dynamo.reset()
    cnt = torch._dynamo.testing.CompileCounter()
    opt = torch.compile(fn, backend=cnt, fullgraph=fullgraph)
    opt(*args_for(fn)())
    opt(*args_for(fn)())
    torch._dynamo.reset()
    return cnt.frame_count


@pytest.mark.parametrize("fullgraph", [True, False])
@pytest.mark.parametrize("fn", CASES, ids=lambda f: f.__name__)
def test_graph_count_of_a_frame_without_ops(fn, fullgraph):
    expected_count = dynamo_count(fn, fullgraph)
    cdynamo.reset()
    cnt = CompileCounter()
    cfn = cdynamo.compile(fn, backend=cnt, fullgraph=fullgraph)
    for _ in range(2):
        a, b = args_for(fn)(), args_for(fn)()
        got, want = cfn(*a), fn(*b)
        assert type(got) is type(want)
        flat_got = got if isinstance(got, tuple) else (got,)
        flat_want = want if isinstance(want, tuple) else (want,)
        assert len(flat_got) == len(flat_want)
        for g, w in zip(flat_got, flat_want):
            assert torch.equal(g, w) if isinstance(w, torch.Tensor) else g == w
        if fn is mutates_a_list:
            assert a[1] == b[1] == [1]
    assert cnt.frame_count == expected_count
    st = cdynamo.stats()
    if fullgraph:
        assert st["frames_native"] == 0 and st["cache_hits"] >= 1
    else:  # skipped for good, as torch._dynamo skips it (SkipFrame: no ops traced); a lambda
        # that reduce() calls in the frame run natively is traced (and skipped) on its own
        assert st["frames_native"] >= 1 and st["cache_hits"] == 0
        assert all("no op traced" in f["reason"] for f in st["native_frames"])
