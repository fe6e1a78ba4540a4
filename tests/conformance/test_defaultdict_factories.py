"""collections.defaultdict made in the trace with any factory (docs/conformance.md:
builtins-misc): a real callable (a builtin type, a class, a function of the program), one
made in the trace (a lambda, a closure over the frame's locals) or None. A missing key
calls the factory; `dd.default_factory` is the factory; a defaultdict that escapes (returned,
alive at a graph break) is a real one whose factory behaves as the traced one did. Compared
with eager on a first call and a cache hit, with torch._dynamo's graph count.
"""
import collections

import pytest
import torch

import cdynamo
import cdynamo.testing

from .harness import dynamo_graphs, same_as_eager


def one():
    return lambda: (torch.randn(3),)


def seven():
    return 7


class Box:
    def __init__(self):
        self.items = []


CASES = {
    "lambda_over_a_tensor": lambda x: _fill(collections.defaultdict(lambda: x * 0), x),
    "closure_over_a_local": lambda x: _closure(x),
    "builtin_list": lambda x: _fill_list(collections.defaultdict(list), x),
    "builtin_int": lambda x: _count(collections.defaultdict(int), x),
    "program_function": lambda x: (x + collections.defaultdict(seven)["k"],),
    "program_class": lambda x: _box(collections.defaultdict(Box), x),
    "with_initial_items": lambda x: _fill(collections.defaultdict(lambda: x + 5, {"a": x, "z": 2}), x),
    "dict_made_in_the_factory": lambda x: (x * 2, _fill(collections.defaultdict(lambda: dict()), 1)),
}


def _fill(dd, x):
    dd["a"] = dd["a"] + 1 if not isinstance(dd["a"], dict) else dd["a"]
    dd["b"]
    dd.update({"c": x})
    return dd["b"], dd


def _closure(x):
    offset = x.sum()

    def make():
        return offset * 2

    dd = collections.defaultdict(make)
    return x + dd["p"], dd, dd.default_factory is make


def _fill_list(dd, x):
    dd["a"].append(x)
    dd["a"].append(x * 2)
    dd["b"]
    return dd


def _count(dd, x):
    for word in ["u", "v", "u", "u"]:
        dd[word] += 1
    return x * dd["u"], dd


def _box(dd, x):
    dd["k"].items.append(x + 1)
    return dd["k"].items[0], type(dd["k"]), len(dd)


@pytest.mark.parametrize("name", sorted(CASES))
def test_defaultdict_factory(name):
    fn = CASES[name]
    same_as_eager(lambda x: fn(x), one())


def test_defaultdict_without_factory_raises_keyerror():
    def fn(x):
        dd = collections.defaultdict(None, {"a": 1})
        return x + dd["a"] + dd["b"]

    same_as_eager(fn, one(), captured=False)


def test_defaultdict_factory_that_is_not_callable_raises_typeerror():
    def fn(x):
        return x + 1, collections.defaultdict(3)

    same_as_eager(fn, one(), captured=False)


def test_returned_defaultdict_calls_the_traced_factory():
    def fn(x):
        n = 4
        dd = collections.defaultdict(lambda: n * 10)
        dd["a"] += 1
        return x + dd["a"], dd

    x = torch.randn(3)
    cdynamo.reset()
    cnt = cdynamo.testing.CompileCounter()
    cfn = cdynamo.compile(fn, backend=cnt)
    for _ in range(2):
        got, dd = cfn(x)
        assert torch.equal(got, x + 41)
        assert type(dd) is collections.defaultdict and dict(dd) == {"a": 41}
        assert dd["new"] == 40 and callable(dd.default_factory)
    assert cnt.frame_count == 1 and cdynamo.stats()["cache_hits"] == 1


def test_defaultdict_with_a_traced_factory_across_a_graph_break():
    def fn(x):
        dd = collections.defaultdict(lambda: 5)
        dd["a"] += 1
        torch._dynamo.graph_break()
        dd["b"] += 1
        return x + dd["a"] + dd["b"], dd

    x = torch.randn(3)
    expected_val, expected_dd = fn(x)
    cdynamo.reset()
    cnt = cdynamo.testing.CompileCounter()
    cfn = cdynamo.compile(fn, backend=cnt)
    for _ in range(3):
        got, dd = cfn(x)
        assert torch.equal(got, expected_val) and dict(dd) == dict(expected_dd) and dd["c"] == 5
    st = cdynamo.stats()
    assert st["frames_native"] == 0, st["native_frames"]
    # the resume function's graph only (the part before the break has no operation), and no
    # recompile: the factory rebuilt at the break on each call is guarded by its code
    assert cnt.frame_count == 1 == dynamo_graphs(fn, one(), calls=3), cnt.frame_count
