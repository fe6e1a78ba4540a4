"""User mapping objects read as mappings (before: dict(m), d.update(m) and f(**m) of a
collections.abc.MutableMapping subclass stopped with "dict update sequence element is not a
pair": the object was iterated as a sequence of pairs).

Python reads an argument of dict()/dict.update()/{**m}/f(**m) that has a ``keys`` attribute
through ``m.keys()`` and ``m[key]`` (both traced as the class defines them); one without it
as a sequence of pairs. Compared with eager on a first call and a cache hit, and after the
mapping changed between calls.
"""
from collections.abc import Mapping, MutableMapping

import torch

import cdynamo
import cdynamo.testing

from .harness import same_as_eager


class Store(MutableMapping):
    def __init__(self):
        self._data = {}

    def __getitem__(self, key):
        return self._data[key]

    def __setitem__(self, key, value):
        self._data[key] = value

    def __delitem__(self, key):
        del self._data[key]

    def __iter__(self):
        return iter(self._data)

    def __len__(self):
        return len(self._data)


class Doubling(Mapping):
    """keys() of its own, and a __getitem__ that computes."""

    def __init__(self, base):
        self.base = base

    def keys(self):
        return ["p", "q"]

    def __getitem__(self, key):
        return self.base * (2 if key == "p" else 3)

    def __iter__(self):
        return iter(self.keys())

    def __len__(self):
        return 2


class Pairs:
    """No keys attribute: read as a sequence of pairs."""

    def __init__(self, items):
        self.items_ = items

    def __iter__(self):
        return iter(self.items_)


STORE = Store()
STORE["a"] = torch.ones(3) * 2


def scale(x, a=1, b=10):
    return x * a + b


def one():
    return (torch.randn(3),)


def test_dict_of_a_mutable_mapping_global():
    def fn(x):
        copy = dict(STORE)
        return x * copy["a"], copy
    same_as_eager(fn, one, fullgraph=True)


def test_update_merge_and_unpack_of_mapping_objects():
    def fn(x):
        d = {"z": 0}
        d.update(STORE)
        d.update(Doubling(x), w=1)
        merged = {**STORE, **Doubling(x + 1), "k": 5}
        return d, merged, scale(x, **STORE), dict(Pairs([("u", x), ("v", 2)]))
    same_as_eager(fn, one, fullgraph=True)


def test_mapping_changed_between_calls_is_seen():
    store = Store()
    store["a"] = torch.ones(3)

    def fn(x):
        return scale(x, **store), dict(store)

    cnt = cdynamo.testing.CompileCounter()
    cdynamo.reset()
    cfn = cdynamo.compile(fn, backend=cnt, fullgraph=True)
    x = torch.randn(3)
    for _ in range(2):
        got, expected = cfn(x), fn(x)
        assert torch.equal(got[0], expected[0]) and got[1].keys() == expected[1].keys()
    store["b"] = torch.full((3,), 5.0)
    got, expected = cfn(x), fn(x)
    assert torch.equal(got[0], expected[0]) and list(got[1]) == ["a", "b"]
    assert cnt.frame_count == 2  # a new key: recompiled, not answered from the first graph
