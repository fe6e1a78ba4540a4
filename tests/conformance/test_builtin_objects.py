"""Builtin objects and methods the trace models: deque.insert/copy, set.__init__,
sys.getrecursionlimit (folded and guarded), dict views passed in (live views of the dict they
read), functools.partial objects passed in (their parts read through them and guarded as
what they are), torch.Tensor's methods called through the class, x.__class__ of a tensor,
functools.wraps over an lru_cache wrapper.

Each case is compared with eager on a first call and a cache hit (same_as_eager), or as a
guard scenario (what the trace read changes between calls).
"""
import collections
import functools
import sys

import torch

import cdynamo
import cdynamo.testing

from .harness import same_as_eager


def compiled(fn, **kw):
    cnt = cdynamo.testing.CompileCounter()
    cdynamo.reset()
    return cdynamo.compile(fn, backend=cnt, **kw), cnt


def one():
    return (torch.randn(3),)


def test_deque_insert_copy_and_maxlen():
    def fn(x):
        d = collections.deque([x, x + 1])
        d.insert(0, "first")
        d.insert(-1, x * 2)
        d.insert(99, "last")
        e = d.copy()
        e.append(x - 1)
        full = collections.deque([1, 2], maxlen=2)
        try:
            full.insert(0, 3)
        except IndexError:
            raised = True
        else:
            raised = False
        return d, e, raised, list(full)
    same_as_eager(fn, one)


def test_set_init_refills_the_set():
    def fn(x):
        s = set({"apple", "banana"})
        s.__init__({"google", "apple"})
        return (x + 1 if "banana" in s else x - 1), sorted(s)
    same_as_eager(fn, one)


def test_recursion_limit_is_folded_and_guarded():
    def fn(x):
        return x * sys.getrecursionlimit()

    cfn, cnt = compiled(fn)
    x = torch.ones(2)
    assert torch.equal(cfn(x), fn(x))
    assert torch.equal(cfn(x), fn(x))
    old = sys.getrecursionlimit()
    try:
        sys.setrecursionlimit(old + 7)
        assert torch.equal(cfn(x), fn(x)), "a stale recursion limit"
    finally:
        sys.setrecursionlimit(old)
    assert cnt.frame_count == 2


def test_dict_views_passed_in_are_live_views():
    def fn(x, d, keys, items):
        d["new"] = 5
        total = x + sum(v for _, v in items)
        return total, "new" in keys, len(keys), list(keys), ("new", 5) in items

    def args():
        d = {"a": 1, "b": 2}
        return torch.randn(2), d, d.keys(), d.items()
    same_as_eager(fn, args)


def test_dict_keys_view_alone_is_guarded_by_its_dict():
    d = {"a": 1}

    def fn(x, keys):
        return x - 1 if "c" in keys else x + 1

    cfn, cnt = compiled(fn)
    x = torch.zeros(2)
    assert torch.equal(cfn(x, d.keys()), fn(x, d.keys()))
    d["c"] = 3
    assert torch.equal(cfn(x, d.keys()), fn(x, d.keys())), "a stale view"
    assert cnt.frame_count == 2


def scaled(x, y, k=1):
    return x * y * k


def test_partial_objects_passed_in_read_their_parts():
    def fn(f0, f1, x):
        return f0(x) * f1(x, k=3)

    def args():
        return (functools.partial(scaled, y=torch.randn(2)), functools.partial(scaled, torch.randn(2), k=2),
                torch.randn(2))
    same_as_eager(fn, args)


def test_partials_swapped_reuse_the_entry_and_another_function_recompiles():
    def fn(f0, f1, x):
        return f0(x) + f1(x)

    cfn, cnt = compiled(fn)
    p0 = functools.partial(scaled, y=torch.randn(2))
    p1 = functools.partial(scaled, y=torch.randn(2))
    x = torch.randn(2)
    assert torch.equal(cfn(p0, p1, x), fn(p0, p1, x))
    assert torch.equal(cfn(p1, p0, x), fn(p1, p0, x))
    assert cnt.frame_count == 1
    p2 = functools.partial(lambda x, y: x - y, y=torch.randn(2))
    assert torch.equal(cfn(p2, p2, x), fn(p2, p2, x))
    assert cnt.frame_count == 2
    assert cfn(p0, p1, x) is not None and cdynamo.stats()["frames_native"] == 0


def test_partial_passed_in_is_returned_as_itself():
    def fn(f, x):
        return f, f(x)

    p = functools.partial(scaled, y=2.0)
    cfn, _ = compiled(fn)
    for _ in range(2):
        got = cfn(p, torch.ones(2))
        assert got[0] is p and torch.equal(got[1], torch.ones(2) * 2)


def test_tensor_methods_through_the_class_and_the_class_of_a_tensor():
    def fn(x):
        y = torch.Tensor.add_(x, 1)
        n = torch.Tensor.size(y, 0) + torch.Tensor.dim(y)
        return y * n, f"{x.__class__.__name__}!", x.__class__ is torch.Tensor
    same_as_eager(fn, one)


@functools.lru_cache
def cached_triple(x: torch.Tensor) -> torch.Tensor:
    return x * 3


def test_functools_wraps_over_an_lru_cache_wrapper():
    def deco(func):
        @functools.wraps(func)
        def inner(*args, **kwargs):
            return func(*args, **kwargs)
        return inner

    def fn(x):
        w = deco(cached_triple)
        return w(x), w.__name__, w.__annotations__["x"] is torch.Tensor, hasattr(cached_triple, "__dict__")
    same_as_eager(fn, one)


class WithPartialProperty:
    # A partial object reached without a source (a property's getter), its bound arguments
    # empty: called like any partial.
    factor = property(functools.partial(lambda self, k: k * 2, k=3))


def test_partial_without_a_source_and_no_bound_arguments():
    obj = WithPartialProperty()

    def fn(x):
        return x * obj.factor
    same_as_eager(fn, one)


# ---------------------------------------------------------------- str() / repr() of user objects

class _WithStr:
    def __init__(self, n):
        self.n = n

    def __str__(self):
        return f"n={self.n}"


class _WithRepr:
    def __repr__(self):
        return "R()"


class _ReprOnlyChild(_WithRepr):
    pass


class _BadStr:
    def __str__(self):
        return 3


def test_str_and_repr_of_user_objects_run_their_methods():
    def fn(x, obj):
        made = _WithStr(2)
        return x + 1, str(made), str(obj), repr(_WithRepr()), str(_ReprOnlyChild()), f"{made}"
    same_as_eager(fn, lambda: (torch.ones(2), _WithStr(5)), fullgraph=True)


def test_str_of_an_object_whose_str_returns_no_string_raises_as_eager():
    def fn(x):
        try:
            str(_BadStr())
        except TypeError as e:
            return x + 1, str(e)
        return x - 1, ""
    same_as_eager(fn, lambda: (torch.ones(2),), fullgraph=True)
