"""A class attribute the trace resolved (a method, a property, a class constant) changed after
compiling, on the class, a base class, or shadowed on the instance: the next call recompiles
and uses the new attribute (guards: TypeVersion, NotInInstanceDict), never the stale one.
Siblings of the module monkey-patch cases in test_module_state.py, for user objects and for
a module's forward."""
import torch

import cdynamo
from cdynamo.testing import CompileCounter


class Base:
    def bias(self):
        return 1.0


class Scaler(Base):
    factor = 2.0

    def scale(self, x):
        return x * self.factor + self.bias()

    @property
    def offset(self):
        return 3.0


def run(fn, *args):
    cnt = CompileCounter()
    compiled = cdynamo.compile(fn, backend=cnt)
    return compiled, cnt


def use(o, x):
    return o.scale(x) + o.offset


def _twice_equal(compiled, o, x):
    want = use(o, x)
    got = compiled(o, x)
    assert torch.equal(got, want), (got, want)


def test_method_replaced_on_the_class():
    o, x = Scaler(), torch.ones(3)
    compiled, cnt = run(use)
    _twice_equal(compiled, o, x)
    old = Scaler.scale
    Scaler.scale = lambda self, x: x - 100
    try:
        _twice_equal(compiled, o, x)
        assert cnt.frame_count == 2
        _twice_equal(compiled, o, x)  # the new entry hits
        assert cnt.frame_count == 2
    finally:
        Scaler.scale = old
    _twice_equal(compiled, o, x)


def test_method_of_a_base_class_replaced():
    o, x = Scaler(), torch.ones(3)
    compiled, cnt = run(use)
    _twice_equal(compiled, o, x)
    old = Base.bias
    Base.bias = lambda self: -7.0
    try:
        _twice_equal(compiled, o, x)
    finally:
        Base.bias = old


def test_class_constant_and_property_replaced():
    o, x = Scaler(), torch.ones(3)
    compiled, cnt = run(use)
    _twice_equal(compiled, o, x)
    Scaler.factor = 5.0
    try:
        _twice_equal(compiled, o, x)
        Scaler.offset = property(lambda self: -1.0)
        _twice_equal(compiled, o, x)
    finally:
        Scaler.factor = 2.0
        Scaler.offset = property(lambda self: 3.0)


def test_method_shadowed_on_the_instance():
    o, x = Scaler(), torch.ones(3)
    compiled, cnt = run(use)
    _twice_equal(compiled, o, x)
    o.scale = lambda x: x * 0
    _twice_equal(compiled, o, x)
    del o.scale
    _twice_equal(compiled, o, x)
    other = Scaler()  # another instance without the shadow: still served by an entry
    _twice_equal(compiled, other, x)


class Net(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.lin = torch.nn.Linear(3, 3)

    def forward(self, x):
        return self.lin(x) + 1


def test_forward_replaced_on_the_instance():
    torch.manual_seed(0)
    m, x = Net(), torch.randn(2, 3)
    cnt = CompileCounter()
    cm = cdynamo.compile(m, backend=cnt)
    assert torch.equal(cm(x), m(x))
    m.forward = lambda x: x * 0 - 4
    assert torch.equal(cm(x), m(x))


def test_unchanged_classes_keep_hitting():
    o, x = Scaler(), torch.ones(3)
    compiled, cnt = run(use)
    for _ in range(3):
        _twice_equal(compiled, o, x)
    assert cnt.frame_count == 1
    assert cdynamo.stats()["recompiles"] == 0
