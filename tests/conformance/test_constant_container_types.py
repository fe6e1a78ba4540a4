"""Namedtuples and deques of constants keep their class when a builtin reads them
(PyTorch's test_misc test_namedtuple3).

A builtin that is a pure function of its arguments (type, isinstance, repr, str, ...) runs
for real on the arguments' Python objects when they are all constants. A namedtuple (a
Tuple value with its class) and a deque (a List value with the deque class and maxlen)
were handed over as a plain tuple and a plain list: type(p) was tuple, isinstance(p,
MyTuple) False, repr(p) "(1, 2, 3)" — the wrong branch taken, silently, for a namedtuple of
numbers passed in or made in the trace. Now they go over as instances of their class
(a namedtuple made as _make makes it; one with attributes of its own is no constant).
"""
import collections
import typing

import torch

from .harness import same_as_eager

Point = collections.namedtuple("Point", ["x", "y"])


class Point3(Point):
    def norm1(self):
        return abs(self.x) + abs(self.y)


class Typed(typing.NamedTuple):
    a: int
    b: float = 0.5


def test_isinstance_of_a_namedtuple_of_numbers_passed_in():
    def fn(t, p):
        if isinstance(p, Point):
            return t + p.x
        return t - 100
    same_as_eager(fn, lambda: (torch.randn(3), Point(2, 3)), fullgraph=True)


def test_type_and_repr_of_namedtuples_made_in_the_trace():
    def fn(t):
        p, s, n = Point(1, 2), Point3(3, -4), Typed(7)
        return (t * 2, type(p), repr(p), str(s), type(s), isinstance(s, Point), s.norm1(), repr(n),
                n == (7, 0.5), hash(p) == hash((1, 2)), sorted(p, reverse=True), max(n))
    same_as_eager(fn, lambda: (torch.randn(3),), fullgraph=True)


def test_type_and_repr_of_a_deque_of_numbers():
    def fn(t):
        d = collections.deque([1, 2, 3], maxlen=3)
        d.append(4)
        return t + d[0], type(d), repr(d), isinstance(d, collections.deque), str(d)
    same_as_eager(fn, lambda: (torch.randn(3),), fullgraph=True)
