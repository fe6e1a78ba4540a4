"""User objects: attributes through the MRO, methods, properties, static and class methods,
super(), objects created in the trace, dataclasses, dunder methods defined in Python."""
import dataclasses
from dataclasses import dataclass, field

import pytest
import torch

from .harness import Cases, check, tensors

case = Cases()
T4 = tensors((4,))


class Config:
    scale = 2.0
    shift = 1.0

    def __init__(self, scale=None):
        if scale is not None:
            self.scale = scale


class SubConfig(Config):
    shift = -1.0


class Affine:
    def __init__(self, w, b):
        self.w = w
        self.b = b

    def apply(self, x):
        return x * self.w + self.b

    def apply_twice(self, x):
        return self.apply(self.apply(x))


class Scaled:
    def __init__(self, k):
        self._k = k

    @property
    def k(self):
        return self._k * 2

    @k.setter
    def k(self, v):
        self._k = v

    @staticmethod
    def static_add(a, b):
        return a + b

    @classmethod
    def make(cls, k):
        return cls(k)

    @classmethod
    def name(cls):
        return cls.__name__


class Animal:
    sound = 1

    def __init__(self, weight):
        self.weight = weight

    def speak(self, x):
        return x * self.sound

    def describe(self):
        return "animal"


class Dog(Animal):
    sound = 3

    def __init__(self, weight, tricks):
        super().__init__(weight)
        self.tricks = tricks

    def speak(self, x):
        return super().speak(x) + self.weight

    def describe(self):
        return "dog:" + super().describe()


class Puppy(Dog):
    def speak(self, x):
        return super().speak(x) * 2


class A:
    def f(self):
        return 1


class B(A):
    def f(self):
        return 10 + super().f()


class C(A):
    def f(self):
        return 100 + super().f()


class D(B, C):
    def f(self):
        return 1000 + super().f()


class Seq:
    def __init__(self, items):
        self.items = items

    def __len__(self):
        return len(self.items)

    def __getitem__(self, i):
        return self.items[i]

    def __contains__(self, v):
        return v in self.items

    def __iter__(self):
        return iter(self.items)


class Mul:
    def __init__(self, k):
        self.k = k

    def __call__(self, x):
        return x * self.k


class Vec:
    def __init__(self, t):
        self.t = t

    def __add__(self, other):
        return Vec(self.t + other.t)

    def __mul__(self, k):
        return Vec(self.t * k)

    def __neg__(self):
        return Vec(-self.t)

    def __eq__(self, other):
        return isinstance(other, Vec) and self.t.shape == other.t.shape


class Counter:
    def __init__(self):
        self.n = 0

    def bump(self, x):
        self.n += 1
        return x + self.n


class WithSlots:
    __slots__ = ("a", "b")

    def __init__(self, a, b):
        self.a = a
        self.b = b


class Boolish:
    def __init__(self, v):
        self.v = v

    def __bool__(self):
        return self.v > 0


@dataclass
class Params:
    weight: torch.Tensor
    bias: float = 0.0
    tags: list = field(default_factory=list)

    def apply(self, x):
        return x * self.weight + self.bias


@dataclass(frozen=True)
class Frozen:
    a: int
    b: int = 2


class Registry:
    items = []


GLOBAL_AFFINE = Affine(2.0, 1.0)
GLOBAL_COUNTER = Counter()


@case(T4)
def class_attribute_read(x):
    return x * Config.scale + Config.shift


@case(T4)
def instance_created_in_trace(x):
    c = Config(3.0)
    return x * c.scale + c.shift


@case(T4)
def attribute_through_mro(x):
    c = SubConfig()
    return x * c.scale + c.shift


@case(T4)
def method_call_on_new_object(x):
    a = Affine(3.0, -1.0)
    return a.apply(x)


@case(T4)
def method_calls_method(x):
    return Affine(2.0, 0.5).apply_twice(x)


@case(T4)
def method_on_global_object(x):
    return GLOBAL_AFFINE.apply(x)


@case(lambda: (Affine(torch.randn(4), torch.randn(4)), torch.randn(4)))
def method_on_object_arg(a, x):
    return a.apply(x)


@case(lambda: (Affine(1.0, 2.0), torch.randn(4)))
def mutate_object_arg_attribute(a, x):
    a.w = a.w + 1
    a.extra = x.sum()
    return a.apply(x)


@case(lambda: (Affine(1.0, 2.0), torch.randn(4)))
def delete_object_arg_attribute(a, x):
    y = a.apply(x)
    del a.b
    a.c = y.sum()
    return y, hasattr(a, "b")


@case(T4)
def delete_attribute_of_new_object(x):
    a = Affine(x, 1.0)
    del a.w
    return x + a.b, hasattr(a, "w"), a


@case(T4)
def bound_method_stored_then_called(x):
    a = Affine(2.0, 0.0)
    m = a.apply
    return m(x)


@case(T4)
def property_getter(x):
    s = Scaled(3)
    return x * s.k


@case(T4)
def property_setter(x):
    s = Scaled(1)
    s.k = 5
    return x * s.k


@case(T4)
def staticmethod_call(x):
    return Scaled.static_add(x, 1) + Scaled(1).static_add(x, 2)


@case(T4)
def classmethod_factory(x):
    s = Scaled.make(4)
    return x * s.k, Scaled.name()


@case(T4)
def super_in_method(x):
    d = Dog(2.0, ["sit"])
    return d.speak(x), d.describe()


@case(T4)
def super_two_levels(x):
    return Puppy(1.0, []).speak(x)


@case(T4)
def super_diamond_mro(x):
    return x * D().f()


@case(T4)
def object_state_after_init(x):
    d = Dog(1.5, ["roll"])
    d.tricks.append("sit")
    return x * len(d.tricks), d.tricks


@case(T4)
def dunder_len_getitem(x):
    s = Seq([1, 2, 3])
    return x * len(s) + s[1]


@case(T4)
def dunder_contains_iter(x):
    s = Seq([x, x * 2])
    out = 0
    for t in s:
        out = out + t
    return out, 5 in Seq([5])


@case(T4)
def dunder_call(x):
    m = Mul(3)
    return m(x)


@case(T4)
def dunder_arithmetic(x):
    v = Vec(x) + Vec(x * 2)
    w = -(v * 3)
    return w.t


@case(T4)
def dunder_bool(x):
    if Boolish(3):
        x = x + 1
    if not Boolish(-1):
        x = x * 2
    return x


@case(T4)
def object_counter_mutation(x):
    c = Counter()
    a = c.bump(x)
    b = c.bump(x)
    return a + b, c.n


@case(lambda: (Counter(), torch.randn(4)))
def object_arg_counter_mutation(c, x):
    c.bump(x)
    return c.bump(x)


@case(T4)
def slots_object(x):
    w = WithSlots(2, 3)
    w.b = 4
    return x * w.a + w.b


@case(T4)
def dataclass_created_in_trace(x):
    p = Params(weight=x * 2, bias=1.0)
    return p.apply(x)


@case(T4)
def dataclass_default_factory(x):
    p = Params(x)
    p.tags.append("t")
    return p.weight + len(p.tags), p.tags


@case(lambda: (Params(torch.randn(4), 0.5), torch.randn(4)))
def dataclass_arg(p, x):
    return p.apply(x)


@case(T4)
def dataclass_fields_and_asdict(x):
    f = Frozen(3)
    names = [fl.name for fl in dataclasses.fields(f)]
    return x * (f.a + f.b), names


@case(T4)
def dataclass_eq(x):
    if Frozen(1, 2) == Frozen(1, 2) and Frozen(1) != Frozen(2):
        return x + 1
    return x


@case(T4)
def type_of_instance_and_name(x):
    d = Dog(1.0, [])
    return x + 1, type(d).__name__, type(d) is Dog


@case(T4)
def instance_dict_attribute(x):
    c = Config(4.0)
    return x * c.__dict__["scale"]


@case(T4)
def class_attribute_shadowed_by_instance(x):
    c = Config()
    c.shift = 10.0
    return x + c.shift + Config.shift


@case(T4)
def class_level_mutable_read(x):
    return x * (len(Registry.items) + 1)


@case(T4)
def object_identity_is(x):
    a = Affine(1, 2)
    b = a
    if a is b and a is not Affine(1, 2):
        return x + 1
    return x


@case(T4)
def getattr_default_on_object(x):
    c = Config()
    return x * getattr(c, "scale") + getattr(c, "nope", 0.0)


@case(T4)
def method_via_class_with_explicit_self(x):
    a = Affine(2.0, 0.0)
    return Affine.apply(a, x)


@pytest.mark.parametrize("fn,make_args,expect_graphs", case.params)
def test_objects(fn, make_args, expect_graphs):
    check(fn, make_args, expect_graphs=expect_graphs)
