"""Library version checks inside a compiled function fold to constants, as under
torch._dynamo: packaging.version.parse(torch.__version__) >= parse("2.0") (the regular
expression a Version is parsed with is a compiled pattern whose methods run on constants,
torch.__version__ is a str subclass iterated as its characters), TorchVersion's own
comparisons (through torch's vendored packaging, traced like user code), and the tuple keys
those compare (tuples of objects, compared item by item as Python does). Each case: eager vs
cdynamo on the first call and a cache hit, one graph, against torch._dynamo's count."""
import collections
import re

import pytest
import torch
from packaging import version

import cdynamo
import cdynamo.testing

from .harness import Cases, check, tensors

case = Cases()
T4 = tensors((4,))

PAIR = re.compile(r"(?P<major>\d+)\.(?P<minor>\d+)")


@case(T4)
def packaging_parse_of_torch_version(x):
    if version.parse(torch.__version__) >= version.parse("2.0"):
        return x + 1
    return x - 1


@case(T4)
def packaging_parse_of_local_and_pre_releases(x):
    a = version.parse("2.1.0+cpu")
    b = version.parse("2.1.0rc1")
    return x * (a > b) + (b < version.Version("2.1")) + (a.release == (2, 1, 0))


@case(T4)
def torch_version_compared_to_a_str_and_a_tuple(x):
    return x + (torch.__version__ >= "2.0") + (torch.__version__ > (1, 13))


@case(T4)
def torch_version_iterated_as_its_characters(x):
    return x + len([c for c in torch.__version__ if c == "."])


@case(T4)
def compiled_pattern_methods_on_constants(x):
    m = PAIR.fullmatch("3.14")
    parts = PAIR.split("a1.2b")
    return x * int(m.group("major")) + int(m["minor"]) + len(parts) + (PAIR.match("x") is None)


class _Top:
    def __eq__(self, other):
        return isinstance(other, _Top)

    def __lt__(self, other):
        return False

    def __gt__(self, other):
        return not isinstance(other, _Top)

    __hash__ = object.__hash__


TOP = _Top()
Ordered = collections.namedtuple("Ordered", "a b")


class Reversed(Ordered):
    def __lt__(self, other):
        return tuple(self) > tuple(other)


@case(T4)
def tuples_holding_objects_compared_in_order(x):
    r = [(1, 2, TOP) > (1, 2, 3), (1, TOP) < (1, 2), (1, 2) < (1, 2, TOP), [1, TOP] == [1, _Top()],
         (TOP, 1) <= (TOP, 0), Reversed(1, 2) < Reversed(1, 3), (x.shape[0], TOP) >= (4, TOP)]
    return x + sum(int(v) for v in r)


@case(T4, expect_graphs=None)
def tuple_order_raises_as_python_does(x):
    return x + ((1, "a") < (1, 2))


@pytest.mark.parametrize("fn,make_args,expect_graphs", case.params)
def test_version_check(fn, make_args, expect_graphs):
    check(fn, make_args, expect_graphs=expect_graphs)


def test_another_pattern_object_is_another_entry():
    # A pattern's methods are folded, so the entry is guarded on that pattern object (re
    # hands out its cached object for a pattern compiled twice: the third call hits).
    def f(x, pat):
        return x + len(pat.findall("a1b22c333"))

    x = torch.randn(3)
    cnt = cdynamo.testing.CompileCounter()
    cf = cdynamo.compile(f, backend=cnt)
    for pat, n in ((re.compile(r"\d"), 6), (re.compile(r"\d+"), 3), (re.compile(r"\d"), 6)):
        torch.testing.assert_close(cf(x, pat), x + n)
    assert cnt.frame_count == 2
