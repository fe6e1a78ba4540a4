"""nn.Module calls: the forward hooks Module.__call__ runs (docs/conformance.md:
module-hooks; the __call__/forward cases of module-call-path are in test_wrong_results.py).
Forward pre-hooks and hooks (with and without kwargs, global ones, prepended ones), each
compared with eager on a first call and a cache hit, with torch._dynamo's graph count; a
hook registered or removed after compiling is seen.
"""
import torch

import cdynamo
import cdynamo.testing

from .harness import same_as_eager


def one(*shape):
    return lambda: (torch.randn(*shape or (3,)),)


def counted(fn):
    cdynamo.reset()
    cnt = cdynamo.testing.CompileCounter()
    return cdynamo.compile(fn, backend=cnt), cnt


# ---------------------------------------------------------------- hooks

class Affine(torch.nn.Module):
    def forward(self, x, scale=1.0):
        return 2 * x * scale + 1


def test_forward_hook_is_inlined_into_the_graph():
    m = Affine()
    m.register_forward_hook(lambda mod, inputs, out: 2 * out + 1)

    def fn(x):
        return m(x * 2 + 1)
    cnt = same_as_eager(fn, one())
    assert cnt.frame_count == 1


def test_pre_hooks_in_order_with_prepend_and_kwargs():
    m = Affine()
    m.register_forward_pre_hook(lambda mod, args: (args[0] + 1,))
    m.register_forward_pre_hook(lambda mod, args: (args[0] * 2,), prepend=True)
    m.register_forward_pre_hook(lambda mod, args, kwargs: (args, {**kwargs, "scale": 3.0}), with_kwargs=True)
    m.register_forward_pre_hook(lambda mod, args: None)  # args unchanged
    m.register_forward_hook(lambda mod, args, kwargs, out: out + kwargs["scale"], with_kwargs=True)
    m.register_forward_hook(lambda mod, args, out: None)

    def fn(x):
        return m(x)
    same_as_eager(fn, one())


def test_pre_hook_returning_a_single_value_replaces_the_args():
    m = Affine()
    m.register_forward_pre_hook(lambda mod, args: args[0] - 5)

    def fn(x):
        return m(x)
    same_as_eager(fn, one())


def test_hook_added_and_removed_after_compiling_is_seen():
    m = Affine()

    def fn(x):
        return m(x)

    cfn, cnt = counted(fn)
    x = torch.ones(2)
    assert torch.equal(cfn(x), fn(x))
    handle = m.register_forward_hook(lambda mod, args, out: out * 10)
    assert torch.equal(cfn(x), fn(x)), "the hook registered after compiling did not run"
    assert torch.equal(cfn(x), fn(x))
    handle.remove()
    assert torch.equal(cfn(x), fn(x)), "the hook removed after compiling still ran"
    assert cnt.frame_count == 2  # without the hook, the first entry again


def test_global_forward_hook_registered_after_compiling_is_seen():
    m = Affine()

    def fn(x):
        return m(x)

    cfn, cnt = counted(fn)
    x = torch.ones(2)
    assert torch.equal(cfn(x), fn(x))
    handle = torch.nn.modules.module.register_module_forward_hook(lambda mod, args, out: out + 100)
    try:
        assert torch.equal(cfn(x), fn(x)), "the global hook registered after compiling did not run"
        assert torch.equal(cfn(x), fn(x))
    finally:
        handle.remove()
    assert torch.equal(cfn(x), fn(x))


def test_method_of_an_object_as_a_pre_hook():
    class Shift:
        def __init__(self, module):
            self.amount = 1.0
            module.register_forward_pre_hook(self.shift, prepend=True, with_kwargs=True)

        def shift(self, module, args, kwargs):
            return (args[0] + self.amount,), kwargs

    m = Affine()
    Shift(m)

    def fn(x):
        return m(x)
    same_as_eager(fn, one())


def test_hooks_of_submodules_run_in_one_graph():
    model = torch.nn.Sequential(torch.nn.Linear(4, 4), torch.nn.ReLU(), torch.nn.Linear(4, 2))
    activations = []
    for mod in model.modules():
        mod.register_forward_hook(lambda mod, inp, out: activations.append(type(mod).__name__))

    def fn(x):
        return model(x)

    x = torch.randn(3, 4)
    expected = fn(x)
    eager_acts = list(activations)
    cfn, cnt = counted(fn)
    for _ in range(2):
        activations.clear()
        assert torch.allclose(cfn(x), expected)
        assert activations == eager_acts
    assert cnt.frame_count == 1
