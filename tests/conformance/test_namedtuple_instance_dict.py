"""Attributes of namedtuple instances (before: setting an attribute on an instance of a
NamedTuple subclass made in the trace stopped it, "a tuple that exists outside the trace").

A subclass of a namedtuple without __slots__ gives its instances a __dict__: attributes set
on one made in the trace are kept with it (read back, seen by hasattr/getattr, rebuilt into
the __dict__ of the object handed back). Its fields stay read-only (AttributeError "can't set
attribute"), and a namedtuple class without a __dict__ refuses other names. An attribute that
is nowhere raises AttributeError (getattr's default is taken), never a method of that name.
"""
from typing import Generic, NamedTuple, TypeVar

import torch

import cdynamo
import cdynamo.testing

from .harness import same_as_eager

T = TypeVar("T")


class Pair(NamedTuple):
    first: torch.Tensor
    second: torch.Tensor

    def total(self):
        return self.first + self.second


class PairWithDict(Pair):
    pass


class GenericPair(NamedTuple, Generic[T]):
    first: T
    second: T


class GenericPairWithDict(GenericPair[T]):
    pass


def two():
    return torch.randn(3), torch.randn(3)


def test_attributes_set_on_a_namedtuple_subclass_instance():
    for cls in (PairWithDict, GenericPairWithDict):
        def fn(a, b):
            p = cls(a, b)
            p.x = a
            p.y = b * 2
            p.z = b
            p.z = a  # a second store replaces the first
            return hasattr(p, "x"), hasattr(p, "w"), getattr(p, "w", 7), p.x + p.y, p.z, p
        cnt = same_as_eager(fn, two, fullgraph=True)
        assert cnt.op_count >= 2


def test_namedtuple_with_attributes_is_rebuilt_with_its_dict():
    def fn(a, b):
        p = PairWithDict(a + 1, b)
        p.note = "hi"
        p.scaled = a * 3
        return p, p.total()

    a, b = two()
    expected = fn(a, b)
    cdynamo.reset()
    cnt = cdynamo.testing.CompileCounter()
    cfn = cdynamo.compile(fn, backend=cnt, fullgraph=True)
    for _ in range(2):
        got = cfn(a, b)
        assert type(got[0]) is PairWithDict
        assert got[0].__dict__.keys() == {"note", "scaled"} and got[0].note == "hi"
        assert torch.equal(got[0].scaled, expected[0].scaled)
        assert torch.equal(got[0].first, expected[0].first) and torch.equal(got[1], expected[1])
    assert cnt.frame_count == 1


def test_namedtuple_fields_and_missing_dict_refuse_stores():
    def fn(a, b):
        out = []
        p = Pair(a, b)
        for target, name in ((p, "first"), (p, "other"), (PairWithDict(a, b), "second")):
            try:
                setattr(target, name, 1)
            except AttributeError as e:
                out.append(str(e))
        try:
            p.missing
        except AttributeError as e:
            out.append(str(e))
        return out, getattr(p, "missing", "default"), a + b
    same_as_eager(fn, two, fullgraph=True)


def test_instance_dict_of_a_namedtuple_from_the_program_is_not_guessed():
    # Read live from the real object (here: by running natively), never answered from the class.
    def fn(p):
        return hasattr(p, "x"), getattr(p, "y", 5), p.first + 1

    p = PairWithDict(torch.ones(2), torch.ones(2))
    p.x = 1
    cfn = cdynamo.compile(fn, backend=cdynamo.testing.CompileCounter())
    assert cfn(p)[:2] == (True, 5)
    p.y = 6
    assert cfn(p)[:2] == (True, 6)
