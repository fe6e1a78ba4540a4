"""str()/repr()/f-strings of an object made in the trace whose class keeps object's
__repr__ (docs/conformance.md: builtins-misc): "<module.Class object at 0x...>", with the
address of the id() the trace gives the object, so within one call repr and id agree and two
objects differ, as eagerly. A user __str__/__repr__ is still traced. Compared with eager on
a first call and a cache hit (the address part, which differs between any two runs, compared
by shape), with torch._dynamo's graph count.
"""
import re

import pytest
import torch

import cdynamo
import cdynamo.testing

from .harness import dynamo_graphs

ADDRESS = re.compile(r" at 0x[0-9a-f]+>")


class Plain:
    pass


class OnlyStr:
    def __str__(self):
        return "only-str"


class Child(Plain):
    def __init__(self, v):
        self.v = v


def shapes(result):
    # (values with every address replaced) and the equalities between addresses in result
    flat = [r for r in result if isinstance(r, (str, bool))]
    return [ADDRESS.sub(" at ADDR>", r) if isinstance(r, str) else r for r in flat]


CASES = {
    "str": lambda x: (x + 1, str(Plain())),
    "repr": lambda x: (x + 1, repr(Plain())),
    "fstring": lambda x: (x + 1, f"value {Plain()}!"),
    "fstring_repr": lambda x: (x + 1, f"{Child(x)!r}"),
    "format": lambda x: (x + 1, format(Plain(), "")),
    "str_of_subclass_instance": lambda x: (x * 2, str(Child(3))),
    "own_str_default_repr": lambda x: (x + 1, str(OnlyStr()), repr(OnlyStr())),
    "same_object_twice": lambda x: _twice(x),
    "two_objects_differ": lambda x: _two(x),
    "repr_shows_its_id": lambda x: _shows_id(x),
}


def _twice(x):
    a = Plain()
    return x + 1, str(a) == repr(a), str(a) == str(a)


def _two(x):
    a, b = Plain(), Plain()  # both alive: two addresses (eagerly, a dead one's may be reused)
    return x + 1, repr(a) == repr(b)


def _shows_id(x):
    a = Child(x)
    return x + 1, hex(id(a)) in repr(a)


@pytest.mark.parametrize("name", sorted(CASES))
def test_default_repr_of_object_made_in_trace(name):
    fn = CASES[name]
    x = torch.randn(3)
    expected = fn(x)
    cdynamo.reset()
    cnt = cdynamo.testing.CompileCounter()
    cfn = cdynamo.compile(fn, backend=cnt, fullgraph=True)
    for _ in range(2):
        got = cfn(x)
        assert torch.equal(got[0], expected[0])
        assert shapes(got) == shapes(expected), (got, expected)
    assert cnt.frame_count == 1 == max(1, dynamo_graphs(fn, lambda: ((x,), {}), calls=2))
    assert cdynamo.stats()["cache_hits"] == 1
