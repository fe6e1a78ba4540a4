"""C functions of the standard library called in a trace (docs/conformance.md: itertools,
reduce, lru-cache, dict-fromkeys): traced through their Python versions
(cdynamo._internal.polyfills), the function an lru_cache wraps, or a dict made in the trace; each
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


@pytest.mark.parametrize("case", [
    "a + next(itertools.count(2))",
    "list(zip(range(3), filter(lambda y: y < 10, itertools.count())))",
    "list(zip(range(10, 12), filter(lambda y: y > 10, itertools.count())))",
    "list(map(lambda x, y: x + y, [a, b], itertools.count(3)))",
    "list(map(operator.mul, [a, b], itertools.count(2, 3)))",
    "list(zip(itertools.count(1.5, 0.5), [a, b]))",
    "list(enumerate(zip(itertools.repeat(a), 'xy')))",
    "list(itertools.repeat(a, 3)) + list(itertools.repeat(b, -1))",
    "list(itertools.islice(itertools.cycle([a, 1, b]), 7))",
    "list(itertools.islice(itertools.cycle(iter([a, 2])), 1, 6))",
    "list(zip('abc', filter(None, itertools.cycle([0, 'x', (), 2]))))",
    "[v for _, v in zip(range(4), itertools.count(5, -2))]",
])
def test_endless_itertools_are_taken_item_by_item(case):
    # count/repeat/cycle are stepped one item at a time (zip/map/filter over them stop
    # where the real ones stop), so the frame is captured whole
    code = compile(f"def fn(a, b):\n    return a + 1, {case}\n", "<case>", "exec")
    ns = {"itertools": itertools, "operator": operator}
    exec(code, ns)  # noqa: S102
    same_as_eager(ns["fn"], two(), fullgraph=True)


def test_endless_itertools_consume_their_source_lazily():
    def fn(a):
        log = []

        def step(v):
            log.append(v)
            return v
        c = itertools.cycle(map(step, [1, 2, 3]))
        first = [next(c), next(c)]
        return a + sum(first), first, list(log)
    same_as_eager(fn, lambda: (torch.ones(2),), fullgraph=True)


def _taken(it, n):
    return [next(it) for _ in range(n)]


@pytest.mark.parametrize("make", ["count", "count_float_step", "repeat", "repeat_times", "cycle_done", "cycle_midway"])
def test_returned_endless_itertools_are_real_ones_in_the_same_state(make):
    def fn(a):
        if make == "count":
            it = itertools.count(2)
        elif make == "count_float_step":
            it = itertools.count(1, 0.25)
        elif make == "repeat":
            it = itertools.repeat(a)
        elif make == "repeat_times":
            it = itertools.repeat(7, 5)
        elif make == "cycle_done":
            it = itertools.cycle([1, 2, 3])
            next(it), next(it), next(it)
        else:
            it = itertools.cycle(iter([4, 5, 6]))
        for _ in range(2):
            a = a + next(it)
        return it, a

    expected, ea = fn(torch.ones(2))
    want = _taken(expected, 6 if make != "repeat_times" else 3)
    cnt = cdynamo.testing.CompileCounter()
    cfn = cdynamo.compile(fn, backend=cnt, fullgraph=True)
    for _ in range(2):  # a compile, then a cache hit
        got, ga = cfn(torch.ones(2))
        assert type(got) is type(expected)
        assert torch.equal(ga, ea)
        items = _taken(got, len(want))
        assert all(torch.equal(x, y) if isinstance(x, torch.Tensor) else x == y for x, y in zip(items, want))
        if make == "repeat_times":
            assert list(got) == []
    assert cnt.frame_count == 1
    assert cdynamo.stats()["cache_hits"] >= 1


def test_type_of_endless_itertools():
    def fn(a):
        c, r, y = itertools.count(), itertools.repeat(1), itertools.cycle([1])
        return a + 1, type(c) is itertools.count, isinstance(r, itertools.repeat), type(y).__name__
    same_as_eager(fn, lambda: (torch.ones(2),), fullgraph=True)


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


def test_compiling_an_lru_cache_wrapper_traces_the_call_of_it():
    # The compiled callable itself is the cache wrapper (C code): its call is traced from a
    # frame of cdynamo's, so the cache is skipped with the warning, as torch._dynamo does.
    @functools.lru_cache
    def cached(x):
        return x + 1

    def plain(x):
        return x * 2

    for target in (cached, functools.partial(plain), torch.relu):
        cnt = cdynamo.testing.CompileCounter()
        cdynamo.reset()
        cfn = cdynamo.compile(target, backend=cnt, fullgraph=True)
        x = torch.randn(4)
        with warnings.catch_warnings(record=True) as w:
            warnings.simplefilter("always")
            first, hit = cfn(x), cfn(x)
        expected = target.__wrapped__(x) if target is cached else target(x)
        assert torch.equal(first, expected) and torch.equal(hit, expected)
        assert cnt.frame_count == 1, target
        assert cdynamo.stats()["cache_hits"] >= 1
        warned = any("lru_cache" in str(m.message) for m in w)
        assert warned == (target is cached)
        assert cfn.__wrapped__ is target


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


# ---------------------------------------------------------------- collections.namedtuple

def test_namedtuple_class_made_in_the_trace():
    # collections.namedtuple on constants makes the class at trace time (it runs no code of
    # the program); instances of it are traced as any namedtuple's.
    def fn(a, b):
        Point = collections.namedtuple("Point", ["x", "y", "xy"], defaults=(None, 1, None))
        p = Point(a, xy=b)
        q = p._replace(y=2)
        return Point(p.x, p[1], p.xy + b), q.y, Point._fields, type(p).__name__

    eager = fn(torch.ones(2), torch.ones(2))
    cdynamo.reset()
    cnt = cdynamo.testing.CompileCounter()
    cfn = cdynamo.compile(fn, backend=cnt, fullgraph=True)
    for _ in range(2):
        got = fn(torch.ones(2), torch.ones(2)) and cfn(torch.ones(2), torch.ones(2))
        assert type(got[0]).__name__ == "Point" and type(got[0])._fields == ("x", "y", "xy")
        assert type(got[0]).__module__ == __name__
        torch.testing.assert_close(tuple(got[0]), tuple(eager[0]), rtol=0, atol=0)
        assert got[1:] == eager[1:]
    assert cnt.frame_count == 1


def test_namedtuple_with_bad_field_names_raises_as_eager():
    def fn(a):
        try:
            collections.namedtuple("P", ["x", "x"])
        except ValueError:
            return a + 1
        return a - 1
    same_as_eager(fn, lambda: (torch.ones(2),))


# ---------------------------------------------------------------- sorted(key=, reverse=)

@pytest.mark.parametrize("case", [
    "sorted(d)",
    "sorted(d.items(), key=operator.itemgetter(0))",
    "sorted(d.items(), key=operator.itemgetter(0), reverse=True)",
    "sorted(d.items(), key=lambda kv: -kv[0])",
    "sorted(rows, key=lambda r: r[2]), sorted(rows, reverse=True), sorted(rows, key=None)",
    "sorted([3, 1, 2], key=lambda v: v % 2)",  # stable: equal keys keep their order
])
def test_sorted_with_key_and_reverse(case):
    code = compile("def fn(a, b):\n"
                   "    d = {1: a, 10: a - 1, 3: 2 * a, -1: b + 2, 0: a * b}\n"
                   "    rows = [('john', 'A', 8), ('jane', 'B', 5), ('dave', 'B', 10)]\n"
                   f"    return a + 1, {case}\n", "<case>", "exec")
    ns = {"operator": operator}
    exec(code, ns)  # noqa: S102
    same_as_eager(ns["fn"], two(), fullgraph=True)


def test_sorted_of_keys_that_do_not_compare_raises_as_eager():
    def fn(a):
        try:
            return sorted([1, "x"], key=lambda v: v)
        except TypeError:
            return a + 1
    same_as_eager(fn, lambda: (torch.ones(2),))


# ---------------------------------------------------------------- match statements

def test_match_sequence_patterns():
    def fn(a, b):
        out = []
        for point in ((0, 0), (0, 3), (4, 0), (5, 8), [1, 2, 3], "ab"):
            match point:
                case (0, 0):
                    out.append(a)
                case (0, y):
                    out.append(a - y)
                case (x, 0):
                    out.append(a + x)
                case [x, *rest] if len(rest) == 2:
                    out.append(b * x + rest[1])
                case (x, y):
                    out.append(a + x - y)
                case _:
                    out.append(b)
        return out
    same_as_eager(fn, two(), fullgraph=True)


def test_match_mapping_patterns():
    def fn(a, b):
        out = []
        for param in ({"a": 0.5}, {"b": 2.0, "c": 1}, {"z": 1}, [("a", 1)]):
            match param:
                case {"a": v}:
                    out.append(a * v)
                case {"b": v, **rest}:
                    out.append(b / v + len(rest))
                case {}:
                    out.append(a + b)
                case _:
                    out.append(a - b)
        return out
    same_as_eager(fn, two(), fullgraph=True)
