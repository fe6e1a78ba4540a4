"""`in` over classes and functions (PyTorch's test_misc: test_frozenset_torch_func_contains,
test_class_duner_mro, test_user_function_variable_supports_type_abcmeta_argument).

`func in frozenset([torch.add])`, `Bar in (Bar, Baz)` and `A in type(m).__mro__` stopped the
trace: a class or function compared with another was "not known at trace time". Their
identity is guarded and, when their types' == (and hash) are C code (type.__eq__, a
metaclass such as ABCMeta that keeps it, a builtin's identity), comparing the real objects is
what eager execution does. A metaclass with a Python __eq__ still stops the trace.
"""
import abc

import torch

import cdynamo
import cdynamo.testing

from .harness import same_as_eager

FUNCS = frozenset([torch.add, torch.sub])


class Abstract(metaclass=abc.ABCMeta):
    @abc.abstractmethod
    def read(self):
        ...


class Concrete(Abstract):
    def read(self):
        return 1


class Plain:
    pass


class Parent(torch.nn.Module):
    pass


class Child(Parent):
    pass


class LooseMeta(type):
    def __eq__(cls, other):
        return True

    __hash__ = type.__hash__


class Loose(metaclass=LooseMeta):
    pass


def test_function_in_a_frozenset_is_guarded():
    def fn(x, op):
        return x * 2 if op in FUNCS else x - 2
    same_as_eager(fn, lambda: (torch.randn(3), torch.add), fullgraph=True)
    same_as_eager(fn, lambda: (torch.randn(3), torch.mul), fullgraph=True)
    # one compiled function, two ops: the identity guard sends the second to a new entry
    cdynamo.reset()
    cnt = cdynamo.testing.CompileCounter()
    cfn = cdynamo.compile(fn, backend=cnt, fullgraph=True)
    x = torch.randn(3)
    for op in (torch.add, torch.mul, torch.sub, torch.add):
        assert torch.equal(cfn(x, op), fn(x, op))
    assert cnt.frame_count == 3


def test_classes_in_a_tuple_and_an_mro():
    def fn(x, m, kinds=(Concrete, Plain)):
        a = Concrete in kinds
        b = Abstract in kinds
        c = Parent in type(m).__mro__
        d = torch.nn.Linear in type(m).__mro__
        return x + a + 2 * b + 4 * c + 8 * d, kinds.index(Plain), kinds.count(Concrete)
    same_as_eager(fn, lambda: (torch.randn(3), Child()), fullgraph=True)


def test_metaclass_with_python_eq_is_not_compared_for_real():
    def fn(x):
        return x + (Loose in (Plain, Concrete))  # LooseMeta.__eq__ says True
    same_as_eager(fn, lambda: (torch.randn(3),), captured=False)
