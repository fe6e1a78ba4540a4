"""Subclasses of tuple and list, and namedtuples with methods of their own.

An instance of a tuple or list subclass is a user object whose items are a tuple or list
value (read through the C layout and guarded like a tuple's or list's, never through the
class's own __getitem__); the base's C methods and slots called on it (through super(),
through the class, or as the operator's fallback) act on those items; one made in the trace
(cls(...), tuple.__new__(cls, xs), list.__new__(cls), a custom __new__) is rebuilt with its
class and attributes when it escapes. A namedtuple class's own Python methods, properties and
operators are used before tuple's.

Each case runs eagerly and compiled (first call and a cache hit) with same_as_eager (results
with their types, argument state, no break, torch._dynamo's graph count).
"""
from typing import NamedTuple

import torch

import cdynamo
import cdynamo.testing

from .harness import same_as_eager


def compiled(fn):
    cnt = cdynamo.testing.CompileCounter()
    cdynamo.reset()
    return cdynamo.compile(fn, backend=cnt), cnt


class Row(tuple):  # noqa: SLOT001
    def width(self):
        return len(self) * 10

    def __contains__(self, item):
        self.asked = item
        return super().__contains__(item)


class Bag(list):
    def total(self):
        return sum(v for v in self) + len(self) + sum(list.__getitem__(self, slice(1, None)))

    def __getitem__(self, i):
        raise RuntimeError("the trace must read the items through the list layout")


class Plain(tuple):  # noqa: SLOT001
    pass


class Made(tuple):  # noqa: SLOT001
    def __new__(cls, n):
        return super().__new__(cls, range(n))


class Pair(NamedTuple):
    a: torch.Tensor
    b: torch.Tensor

    def both(self):
        return self.a + self.b

    @property
    def first(self):
        return self.a

    @staticmethod
    def kind():
        return 7

    @classmethod
    def make(cls, x):
        return cls(x, x * 2)


class Summed(Pair):
    def __new__(cls, a, b):
        return super().__new__(cls, a * 1, b)

    def __add__(self, other):
        return Summed(self.a + other.a, self.b + other.b)

    def __eq__(self, other):
        return "custom eq"


def test_tuple_subclass_from_the_program_own_and_base_methods():
    def fn(x, row):
        y = torch.cos(x) if 3 in row else torch.sin(x)
        return y * row.width() + row[1], len(row), list(row), tuple.__len__(row), row.count(2), row + (9,)
    same_as_eager(fn, lambda: (torch.randn(3), Row([1, 2, 3])))


def test_list_subclass_from_the_program_mutated_through_base_methods():
    def fn(x, bag):
        bag.append(4)
        list.append(bag, 5)
        bag.extend([6])
        return x * bag.total(), len(bag), 4 in bag
    same_as_eager(fn, lambda: (torch.randn(3), Bag([1, 2, 3])))


def test_ne_and_eq_between_tuple_subclass_instances_compare_items():
    # A wrong result before: != fell back to identity and said two equal rows differ.
    def fn(x, r1, r2, r3):
        return (x + 1 if r1 != r2 else x - 1), r1 == r2, r1 != r3, r1 == (1, -1), r1 < r3
    same_as_eager(fn, lambda: (torch.randn(2), Plain([1, -1]), Plain([1, -1]), Plain([1, 2])))


def test_tuple_subclass_length_is_guarded():
    def fn(x, row):
        return x * len(row)

    cfn, cnt = compiled(fn)
    x = torch.ones(2)
    assert torch.equal(cfn(x, Plain([1, 2])), fn(x, Plain([1, 2])))
    assert torch.equal(cfn(x, Plain([1, 2, 3])), fn(x, Plain([1, 2, 3])))
    assert cnt.frame_count == 2


def test_subclass_instances_made_in_the_trace_keep_their_class_and_attributes():
    def fn(x):
        row = Plain([1, 2, 3])
        made = Made(2)
        via_new = tuple.__new__(Plain, [x * 2])
        via_new.tag = "t"
        bag = list.__new__(Bag)
        bag.append(x)
        bag.note = 3
        built = Bag([1, 2])
        same = tuple.__new__(tuple, [x])
        return row, made, via_new, bag, built, same, 3 in row
    same_as_eager(fn, lambda: (torch.randn(3),))


def test_namedtuple_own_methods_property_static_and_class_methods():
    def fn(x):
        p = Pair(x, x + 1)
        q = Pair.make(x)
        return p.both(), p.first, p.kind(), q, q.both()
    same_as_eager(fn, lambda: (torch.randn(3),))


def test_namedtuple_subclass_own_new_and_operators():
    # A wrong result before: s1 + s2 concatenated the tuples instead of calling __add__.
    def fn(s1, s2):
        s = s1 + s2
        return s, s.a, type(s).__name__, s1 == s2, Summed(s1.a, s2.b)
    same_as_eager(fn, lambda: (Summed(torch.randn(3), torch.randn(2)), Summed(torch.randn(1), torch.randn(2))))
