"""Properties whose getter is a callable object (before: ``property(Getter())`` with a class
defining __call__ stopped the trace, "call of <Getter object> is not supported yet").

The getter is called as Python calls it, getter(instance): its class's __call__ is traced,
and what it reads of the getter object is guarded (changing it recompiles, never answers from
the old graph). Compared with eager on a first call and a cache hit.
"""
import torch

import cdynamo
import cdynamo.testing

from .harness import same_as_eager


class Getter:
    def __init__(self, flag):
        self.flag = flag

    def __call__(self, obj):
        return self.flag


class Holder:
    def __init__(self):
        self.base = 3


Holder.p = property(Getter(True))


class Scaled(torch.nn.Module):
    def forward(self, x):
        return x + 1 if self.p else x - 1


def test_property_getter_object_on_a_module_made_into_a_subclass():
    mod = Scaled()
    mod.__class__ = type("Scaled", (Scaled,), {"p": property(Getter(True))})

    def fn(x):
        return mod(x)
    same_as_eager(fn, lambda: (torch.randn(2),), fullgraph=True)


def test_property_getter_object_state_is_guarded():
    getter = Getter(True)

    class Box:
        p = property(getter)

    box = Box()

    def fn(x):
        return x + 1 if box.p else x - 1

    cnt = cdynamo.testing.CompileCounter()
    cdynamo.reset()
    cfn = cdynamo.compile(fn, backend=cnt, fullgraph=True)
    x = torch.randn(2)
    assert torch.equal(cfn(x), x + 1) and torch.equal(cfn(x), x + 1)
    getter.flag = False
    assert torch.equal(cfn(x), x - 1)
    assert cnt.frame_count == 2


def test_property_getter_object_on_a_class_attribute():
    def fn(x):
        h = Holder()
        return (x * 2 if h.p else x), h.base
    same_as_eager(fn, lambda: (torch.randn(2),), fullgraph=True)
