"""A 0-d tensor passed where an operator's schema takes a Python number (docs/conformance.md:
data-dependent): the C binding would read it with .item(), which no graph can hold. The
operators with another overload or a composition that takes the tensor itself
(cdynamo._internal.polyfills: _foreach_lerp_, _foreach_pow, addcmul/addcmul_) are traced through it,
as torch._dynamo does; every other call of them is recorded as before. Each case: eager vs
cdynamo on a first call and a cache hit, one graph, no break.
"""
import pytest
import torch

from .harness import same_as_eager


def lists():
    return lambda: ([torch.ones(2, 2) * 4.26, torch.randn(2, 2)], [torch.ones(2, 2), torch.randn(2, 2)])


@pytest.mark.parametrize("weight", ["torch.tensor(0.5)", "torch.tensor(0.75)", "0.25", "[torch.tensor(0.1), torch.tensor(0.9)]"])
def test_foreach_lerp_inplace_with_a_tensor_weight(weight):
    code = compile(f"def fn(x, y):\n    r = torch._foreach_lerp_(x, y, {weight})\n    return r, x\n", "<case>", "exec")
    ns = {"torch": torch}
    exec(code, ns)  # noqa: S102
    same_as_eager(ns["fn"], lists(), fullgraph=True, expect_graphs=1)


def test_foreach_lerp_weight_computed_in_the_graph():
    def fn(x, y, w):
        return torch._foreach_lerp(x, y, w.sum() / 10)
    same_as_eager(fn, lambda: (*lists()(), torch.rand(3)), fullgraph=True, expect_graphs=1)


def test_foreach_pow_of_a_tensor_base():
    def fn(base, exps):
        return torch._foreach_pow(base, exps), torch._foreach_pow(exps, 2)
    same_as_eager(fn, lambda: (torch.tensor(0.8), [torch.tensor(3.4), torch.randn(3)]), fullgraph=True,
                  expect_graphs=1)


def test_addcmul_inplace_with_a_tensor_value_returns_its_receiver():
    def fn(x, y, z, s):
        r = x.addcmul_(y, z, value=s)
        return r is x, x, x.addcmul_(y, z, value=2), x.addcmul_(y, z)
    same_as_eager(fn, lambda: (torch.ones(2, 2), torch.ones(2, 2) + 1, torch.rand(2, 2), torch.tensor(0.3)),
                  fullgraph=True, expect_graphs=1)


def test_addcmul_with_a_tensor_value():
    def fn(x, y, z, s):
        return torch.addcmul(x, y, z, value=s), x.addcmul(y, z, value=s * 2), torch.addcmul(x, y, z, value=0.5)
    same_as_eager(fn, lambda: (torch.randn(2, 3), torch.randn(2, 3), torch.randn(3), torch.tensor(0.3)),
                  fullgraph=True, expect_graphs=1)


@pytest.mark.parametrize("call", ["torch.addcmul(x, y, z, value=s)", "x.addcmul_(y, z, value=s)"])
def test_addcmul_with_a_one_item_tensor_value_raises_as_eager(call):
    # the binding takes a 0-d tensor as a number, not a tensor of one item (TypeError)
    code = compile(f"def fn(x, y, z, s):\n    return {call}\n", "<case>", "exec")
    ns = {"torch": torch}
    exec(code, ns)  # noqa: S102
    same_as_eager(ns["fn"], lambda: (torch.randn(3), torch.randn(3), torch.randn(3), torch.tensor([0.3])),
                  captured=False)
