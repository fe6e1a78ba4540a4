"""C functions of the standard library called in a trace (docs/conformance.md: itertools,
reduce, lru-cache, dict-fromkeys): traced through their Python versions
(cdynamo._polyfills), the function an lru_cache wraps, or a dict made in the trace; each
compared with eager on a first call and a cache hit, with torch._dynamo's graph count.
"""
import collections
import functools
import itertools
import operator
import warnings

import pytest
import torch

import cdynamo
import cdynamo.testing

from .harness import same_as_eager


def two():
    return lambda: (torch.randn(3), torch.randn(3))


# ---------------------------------------------------------------- itertools

@pytest.mark.parametrize("case", [
    "list(itertools.chain([a, b], [1, 2]))",
    "list(itertools.chain.from_iterable([[a, b], (1,), iter([a])]))",
    "list(itertools.islice(itertools.chain([a + 1, a + 2], [b]), 1, 3))",
    "next(itertools.islice([a, b], 1, None))",
    "list(itertools.compress([a, b, a * 2], [1, 0, 1]))",
    "list(itertools.filterfalse(lambda v: v > 1, [0, 1, 2, 3]))",
    "list(itertools.takewhile(lambda v: v < 2, [0, 1, 2, 0]))",
    "list(itertools.dropwhile(lambda v: v < 2, [0, 1, 2, 0]))",
    "list(itertools.starmap(lambda u, v: u * v, [(a, 2), (b, 3)]))",
    "list(itertools.accumulate([a, b, a]))",
    "list(itertools.pairwise([a, b, 3]))",
    "list(itertools.zip_longest([a, b, a], 'ab', fillvalue=0))",
    "list(itertools.product([a, b], [1, 2]))",
    "list(itertools.permutations((1, 2, 3), 2))",
    "list(itertools.combinations((1, 2, 3, 4), 2))",
    "[torch.ones(p) for p in itertools.pairwise((1, 2, 3))]",
])
def test_itertools_function(case):
    code = compile(f"def fn(a, b):\n    return a + 1, {case}\n", "<case>", "exec")
    ns = {"itertools": itertools, "torch": torch}
    exec(code, ns)  # noqa: S102
    same_as_eager(ns["fn"], two())


def test_for_over_itertools_product_and_chain():
    def fn(a, b):
        v = a
        for x, i in itertools.product([a, b], [1, 2]):
            v = v + x * i
        for x in itertools.chain([a], (b,)):
            v = v - x
        return v
    same_as_eager(fn, two())


@pytest.mark.parametrize("make", ["chain", "islice", "compress", "accumulate", "zip_longest"])
def test_returned_itertools_iterator_keeps_its_type(make):
    def fn(a):
        if make == "chain":
            return itertools.chain([a], [a + 1])
        if make == "islice":
            return itertools.islice([a, a + 1, a + 2], 1, None)
        if make == "compress":
            return itertools.compress([a, a + 1], [0, 1])
        if make == "accumulate":
            return itertools.accumulate([a, a])
        return itertools.zip_longest([a], [1, 2])

    a = torch.ones(2)
    expected = fn(a)
    want = list(expected)
    cfn = cdynamo.compile(fn, backend=cdynamo.testing.CompileCounter())
    for _ in range(2):
        got = cfn(a)
        assert type(got) is type(expected)
        items = list(got)
        assert len(items) == len(want) and all(
            torch.equal(x, y) if isinstance(x, torch.Tensor) else x == y
            for u, w in zip(items, want) for x, y in zip(u if isinstance(u, tuple) else (u,),
                                                          w if isinstance(w, tuple) else (w,)))


def test_infinite_itertools_are_not_unrolled():
    def fn(a):
        it = itertools.count(2)
        return a + next(it)
    same_as_eager(fn, lambda: (torch.ones(2),), captured=False)


# ---------------------------------------------------------------- functools.reduce

@pytest.mark.parametrize("case", [
    "functools.reduce(operator.add, [a, b, a])",
    "functools.reduce(operator.add, [b, a], a)",
    "functools.reduce(lambda u, v: (u, v), [a + 1])",
    "functools.reduce(lambda u, v: u + v, map(lambda x: x + 1, [a, b]))",
])
def test_reduce(case):
    code = compile(f"def fn(a, b):\n    return {case}\n", "<case>", "exec")
    ns = {"functools": functools, "operator": operator}
    exec(code, ns)  # noqa: S102
    same_as_eager(ns["fn"], two())


def test_reduce_of_nothing_is_a_type_error():
    def fn(a):
        try:
            functools.reduce(operator.add, [])
        except TypeError as e:
            return a + 1, str(e)
        return a - 1, ""
    same_as_eager(fn, lambda: (torch.ones(2),), expect_graphs=1)


# ---------------------------------------------------------------- dict.fromkeys

def test_fromkeys_of_dict_types():
    def fn(x, y):
        lst = ["a", "b"]
        d = dict.fromkeys(lst)
        d1 = dict.fromkeys(d, x + 1)
        d2 = collections.defaultdict.fromkeys(iter(d1), x - 2)
        d3 = collections.OrderedDict.fromkeys(tuple(lst), value=y)
        return d, d1["a"] * d2["b"] + d2["a"] + d1["b"] + d3["a"] + d3["b"] + 1, type(d2).__name__, type(d3).__name__
    same_as_eager(fn, two())


# ---------------------------------------------------------------- functools.lru_cache

@functools.lru_cache
def _cached_scale(x, k=2):
    """scales x"""
    return x * k


def test_lru_cache_wrapped_function_is_traced():
    def fn(x):
        return _cached_scale(x) + _cached_scale(x, 3), _cached_scale.__name__, _cached_scale.__doc__
    with warnings.catch_warnings(record=True) as w:
        warnings.simplefilter("always")
        same_as_eager(fn, lambda: (torch.ones(2),))
    assert any("lru_cache" in str(m.message) for m in w), "no warning that the cache is skipped"


def test_lru_cache_on_a_method():
    class Foo:
        @functools.lru_cache  # noqa: B019
        def run(self, val, c=1.0):
            return val * c * 2

    f = Foo()

    def fn(x):
        return f.run(x)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        same_as_eager(fn, lambda: (torch.ones(2),))


# ---------------------------------------------------------------- outputs

def test_returning_a_recursive_closure():
    def fn(x):
        def g(n):
            return 0 if n == 0 else 1 + g(n - 1)
        return x + g(3), g

    cfn = cdynamo.compile(fn, backend=cdynamo.testing.CompileCounter())
    for _ in range(2):
        out, g = cfn(torch.zeros(2))
        assert torch.equal(out, torch.full((2,), 3.0))
        assert g(4) == 4 and g.__closure__[0].cell_contents is g
