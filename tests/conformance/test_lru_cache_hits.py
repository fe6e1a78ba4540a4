"""A call without arguments of a functools.lru_cache wrapper of a function without
parameters whose cache already holds its result (docs/conformance.md: lru-cache; torch's
`is_fx_tracing()` calls such a wrapper, which logs a warning the first time): eagerly a
cache hit that runs nothing, so the traced call is that cached constant, with no warning
that the cache is skipped, guarded on the cache still holding it; after cache_clear() the
call runs the function again (traced through it). Compared with eager on a first call and a
cache hit, with graph counts and torch._dynamo as a reference.
"""
import functools
import warnings

import torch
import torch.fx

import cdynamo
import cdynamo.testing

from .harness import dynamo_graphs, same_as_eager

RUNS = []


@functools.lru_cache
def cached_flag():
    RUNS.append("ran")  # a side effect eager runs only on a miss
    return 3


def uses_flag(x):
    return x * cached_flag() if cached_flag() > 1 else x


def test_cached_zero_argument_call_is_the_cached_constant():
    cached_flag.cache_clear()
    RUNS.clear()
    cached_flag()  # eagerly filled: every later call is a hit
    x = torch.randn(4)
    cdynamo.reset()
    cnt = cdynamo.testing.CompileCounter()
    cfn = cdynamo.compile(uses_flag, backend=cnt, fullgraph=True)
    with warnings.catch_warnings(record=True) as w:
        warnings.simplefilter("always")
        for _ in range(2):
            assert torch.equal(cfn(x), x * 3)
    assert not any("lru_cache" in str(m.message) for m in w), "a cache hit is not a skipped cache"
    assert RUNS == ["ran"], RUNS  # nothing ran again, as eagerly
    assert cnt.frame_count == 1 and cdynamo.stats()["cache_hits"] == 1


def test_cleared_cache_runs_the_function_again():
    cached_flag.cache_clear()
    RUNS.clear()
    cached_flag()
    x = torch.randn(4)
    cdynamo.reset()
    cnt = cdynamo.testing.CompileCounter()
    cfn = cdynamo.compile(uses_flag, backend=cnt)
    assert torch.equal(cfn(x), x * 3)
    cached_flag.cache_clear()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        assert torch.equal(cfn(x), x * 3)
    # the guard on the cache failed: the call was traced again through the function, whose
    # side effect ran (eagerly too: a miss)
    assert RUNS[:2] == ["ran", "ran"], RUNS
    assert cnt.frame_count == 2


def test_is_fx_tracing_inside_a_trace():
    def fn(x, y):
        if torch.fx._symbolic_trace.is_fx_tracing():
            return x - 1
        return y + 1

    torch.fx._symbolic_trace.is_fx_tracing()  # the warning's cache, as after any first use
    make = lambda: (torch.randn(3), torch.randn(3))  # noqa: E731
    same_as_eager(fn, make, fullgraph=True)
    assert dynamo_graphs(fn, make) == 1
