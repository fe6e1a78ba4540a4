"""`cls.__dict__` in the trace (PyTorch's test_class_dict; descriptors).

type's own `__dict__` getset descriptor gives a mappingproxy of the class dict. The trace
reads the class dict through the class-dict register (its keys guarded, each value read
through its key) as a dict value of type mappingproxy: lookups, `in`, iteration, get(),
copy() (a dict), `|` work as on the proxy; a store raises TypeError and dict's mutating
methods AttributeError, as eagerly; returned, it is a new mappingproxy of the very class
dict. A store to the class before or after its __dict__ is read would not show in that
copy: the trace stops there instead (a reason, never a stale read).

Each case runs eagerly and compiled (first call and a cache hit: same_as_eager).
"""
import types

import pytest
import torch

import cdynamo
import cdynamo.testing

from .harness import same_as_eager


class Base:
    x = 4
    y = 5.0

    def __init__(self):
        self.a = 6

    def method(self):
        return 1

    @staticmethod
    def static():
        return 2


class Child(Base):
    z = 1


instance = Base()


def one():
    return (torch.randn(3),)


def test_membership_through_type_of_an_instance():
    def fn(x):
        if "x" in type(instance).__dict__:
            return x + 1, "z" in Child.__dict__, "x" in Child.__dict__
        return x + 2, False, False
    same_as_eager(fn, one, fullgraph=True)


def test_items_read_by_key_get_and_a_method_called():
    def fn(x):
        d = Base.__dict__
        return x * d["x"] + d.get("y", 0.0) + d.get("missing", 7) + d["method"](instance)
    same_as_eager(fn, one, fullgraph=True)


def test_type_keys_copy_and_the_proxy_returned():
    def fn(x):
        d = Child.__dict__
        return (x + len(d), type(d) is types.MappingProxyType, isinstance(d, dict), list(d.keys()),
                type(d.copy()), sorted(d.copy()), d)
    same_as_eager(fn, one)


def test_union_and_items_as_eagerly():
    # `|` and items() of the proxy are not captured yet (graph breaks); the outcomes are eager's.
    def fn(x):
        d = Child.__dict__
        return x + 1, sorted(d | {"q": 1}), [(k, v) for k, v in d.items() if k == "z"]
    same_as_eager(fn, one, captured=False)


def test_returned_proxy_is_of_the_class_dict_itself():
    def fn(x):
        return x + 1, Child.__dict__
    cfn = cdynamo.compile(fn, backend="eager")
    for call in ("first call", "cache hit"):
        _, d = cfn(torch.ones(1))
        assert type(d) is types.MappingProxyType, call
        assert d == Child.__dict__ and "z" in d, call
        Child.w = 3  # the proxy is live: a store to the class shows in it
        try:
            assert d["w"] == 3, call
        finally:
            del Child.w


@pytest.mark.parametrize("body,exc", [
    ("d['x'] = 1", TypeError), ("d.update({'x': 1})", AttributeError), ("d.pop('x')", AttributeError),
    ("d['missing']", KeyError), ("d.setdefault('x', 1)", AttributeError),
])
def test_errors_as_eagerly(body, exc):
    ns = {}
    exec(f"def fn(x):\n    d = Base.__dict__\n    {body}\n    return x + 1", {"Base": Base}, ns)
    fn = ns["fn"]
    cfn = cdynamo.compile(fn, backend="eager")
    for call in ("first call", "cache hit"):
        with pytest.raises(exc):
            fn(torch.ones(1))
        with pytest.raises(exc):
            cfn(torch.ones(1))
    assert Base.x == 4


def test_a_change_to_the_class_between_calls_is_seen():
    class K:
        x = 4

    def fn(x):
        return x + K.__dict__["x"], "y" in K.__dict__

    cnt = cdynamo.testing.CompileCounter()
    cfn = cdynamo.compile(fn, backend=cnt)
    for _ in range(2):
        out, has_y = cfn(torch.ones(1))
        assert (out.item(), has_y) == (5.0, False)
    K.x = 7
    out, has_y = cfn(torch.ones(1))
    assert (out.item(), has_y) == (8.0, False)
    K.y = 1
    out, has_y = cfn(torch.ones(1))
    assert (out.item(), has_y) == (8.0, True)
    assert cnt.frame_count == 3


@pytest.mark.parametrize("order", ["store_then_read", "read_then_store"])
def test_a_store_to_the_class_in_the_trace_is_never_read_stale(order):
    class K:
        x = 4

    def store_then_read(x):
        K.x = 10
        return x + K.__dict__["x"]

    def read_then_store(x):
        d = K.__dict__
        K.x = 10
        return x + d["x"]

    fn = {"store_then_read": store_then_read, "read_then_store": read_then_store}[order]
    want = fn(torch.ones(1))
    for call in ("first call", "cache hit"):
        K.x = 4
        got = cdynamo.compile(fn, backend="eager")(torch.ones(1))
        assert torch.equal(got, want) and K.x == 10, call
