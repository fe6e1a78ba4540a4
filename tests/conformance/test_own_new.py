"""Instances of Python classes with a __new__ of their own (PyTorch's test_misc
test_dunder_new_function_inlining*, test_multiple_inheritance).

A class whose instances object.__new__ makes (no builtin base) but which defines __new__
stopped the trace ("custom __new__ is not supported"). As type.__call__ does, its __new__
is now inlined with the class first, and __init__ runs when what it returned is an
instance of the class: object.__new__(cls), super().__new__(cls) and super(C, cls).__new__
make the instance; a __new__ returning something else skips __init__.
"""
import abc

import torch

from .harness import same_as_eager


def one():
    return (torch.randn(4),)


class Counted:
    def __new__(cls, scale):
        inst = super().__new__(cls)
        inst.made_by_new = scale * 10
        return inst

    def __init__(self, scale):
        self.scale = scale


class Base:
    def __new__(cls, *args, **kwargs):
        return super(Base, cls).__new__(cls)

    def __init__(self, a):
        self.a = a


class Derived(Base):
    def __new__(cls, *args, **kwargs):
        return super(Derived, cls).__new__(cls)

    def __init__(self, a, b):
        super().__init__(a)
        self.b = b


class Other:
    def __init__(self):
        self.tag = "other"


class Redirect:
    def __new__(cls):
        obj = object.__new__(Other)
        obj.tag = "from Redirect.__new__"
        return obj

    def __init__(self):  # not run: __new__ returned no Redirect
        self.tag = "Redirect.__init__"


def test_own_new_then_init():
    def fn(x):
        c = Counted(3)
        return x * c.scale + c.made_by_new, type(c) is Counted, sorted(vars(c))
    same_as_eager(fn, one, fullgraph=True)


def test_super_new_through_a_hierarchy():
    def fn(x):
        d = Derived(2, 5)
        return x * d.a - d.b, isinstance(d, Base), type(d).__name__
    same_as_eager(fn, one, fullgraph=True)


def test_new_returning_another_class_skips_init():
    def fn(x):
        r = Redirect()
        return x + len(r.tag), type(r) is Other, r.tag
    same_as_eager(fn, one, fullgraph=True)


def test_instance_escapes_with_its_attributes():
    def fn(x):
        return x + 1, Counted(4), Derived(1, 2)
    same_as_eager(fn, one, fullgraph=True)


class Abstract(abc.ABC):
    def __new__(cls):
        return super().__new__(cls)

    @abc.abstractmethod
    def run(self):
        ...


def test_abstract_class_raises_as_eagerly():
    def fn(x):
        try:
            Abstract()
        except TypeError:
            return x - 1
        return x + 1
    same_as_eager(fn, one, captured=False)
