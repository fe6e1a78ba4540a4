"""Module state changed after compiling: every change recompiles or runs correctly (never a
stale result). Each case: compile, call (compiles), change the module, call again and compare
with eager on the same module."""
import pytest
import torch

import cdynamo
from cdynamo.testing import CompileCounter


class Net(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.lin = torch.nn.Linear(4, 4)
        self.drop = torch.nn.Dropout(0.5)

    def forward(self, x):
        return self.drop(self.lin(x)).relu() + self.scale()

    def scale(self):
        return 1.0


def check(change):
    torch.manual_seed(0)
    m = Net().eval()
    cm = cdynamo.compile(m, backend=CompileCounter())
    x = torch.randn(2, 4)
    assert torch.equal(cm(x), m(x))
    undo = change(m)
    try:
        torch.manual_seed(1)
        want = m(x)
        torch.manual_seed(1)
        got = cm(x)
        assert torch.equal(got, want), (got, want)
    finally:
        if undo:
            undo()


def test_forward_hook_registered_later_on_the_module():
    check(lambda m: m.register_forward_hook(lambda mod, inp, out: out * 10).remove)


def test_forward_pre_hook_registered_later_on_a_submodule():
    check(lambda m: m.lin.register_forward_pre_hook(lambda mod, inp: (inp[0] + 5,)).remove)


def test_global_forward_hook_registered_later():
    check(lambda m: torch.nn.modules.module.register_module_forward_hook(lambda mod, inp, out: out + 1).remove)


def test_submodule_replaced():
    def change(m):
        m.lin = torch.nn.Linear(4, 4)
    check(change)


def test_parameter_reregistered():
    def change(m):
        m.lin.weight = torch.nn.Parameter(torch.ones(4, 4))
    check(change)


def test_train_flipped():
    check(lambda m: m.train() and None)


def test_method_monkeypatched_on_the_instance():
    def change(m):
        m.scale = lambda: 7.0
    check(change)


def test_method_monkeypatched_on_the_class():
    def change(m):
        old = Net.scale
        Net.scale = lambda self: 3.0

        def undo():
            Net.scale = old
        return undo
    check(change)


def test_global_forward_pre_hook_registered_later():
    check(lambda m: torch.nn.modules.module.register_module_forward_pre_hook(lambda mod, inp: None).remove)


def test_global_forward_pre_hook_changing_the_input_registered_later():
    def hook(mod, inp):
        if isinstance(mod, torch.nn.Linear):
            return (inp[0] * 3,)
    check(lambda m: torch.nn.modules.module.register_module_forward_pre_hook(hook).remove)


def test_hook_replaced_in_place_under_the_same_handle():
    # the entry compiled with the first hook must not run for the second
    torch.manual_seed(0)
    m = Net().eval()
    cm = cdynamo.compile(m, backend=CompileCounter())
    x = torch.randn(2, 4)
    handle = m.register_forward_hook(lambda mod, inp, out: out + 1)
    try:
        assert torch.equal(cm(x), m(x))
        m._forward_hooks[handle.id] = lambda mod, inp, out: out * 4
        assert torch.equal(cm(x), m(x))
    finally:
        handle.remove()


def test_forward_monkeypatched_on_the_instance():
    def change(m):
        m.forward = lambda x: m.lin(x) * 2
    check(change)


def test_forward_monkeypatched_on_the_class():
    def change(m):
        old = Net.forward
        Net.forward = lambda self, x: self.lin(x) - 3

        def undo():
            Net.forward = old
        return undo
    check(change)


def test_buffer_replaced():
    class WithBuffer(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.register_buffer("offset", torch.zeros(4))

        def forward(self, x):
            return x + self.offset

    m = WithBuffer()
    cm = cdynamo.compile(m, backend=CompileCounter())
    x = torch.randn(2, 4)
    assert torch.equal(cm(x), m(x))
    m.offset = torch.full((4,), 2.0)
    assert torch.equal(cm(x), m(x))
    m.register_buffer("offset", torch.full((4,), -1.0))
    assert torch.equal(cm(x), m(x))


def test_module_of_a_compiled_function_changed_later():
    # The same changes seen through a function that reads the module as a global.
    torch.manual_seed(0)
    net = torch.nn.Sequential(torch.nn.Linear(4, 4), torch.nn.ReLU())
    g = {"net": net}
    exec("def fn(x):\n    return net(x) + 1\n", g)
    fn = g["fn"]
    cfn = cdynamo.compile(fn, backend=CompileCounter())
    x = torch.randn(2, 4)
    assert torch.equal(cfn(x), fn(x))
    net[1] = torch.nn.Tanh()
    assert torch.equal(cfn(x), fn(x))
    handle = net[0].register_forward_hook(lambda mod, inp, out: out * -1)
    assert torch.equal(cfn(x), fn(x))
    handle.remove()
    net.append(torch.nn.Sigmoid())
    assert torch.equal(cfn(x), fn(x))
    net.train()
    assert torch.equal(cfn(x), fn(x))
