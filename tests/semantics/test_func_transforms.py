"""torch.func transforms inside a compiled frame.

torch._dynamo does not make higher-order ops for vmap/grad/jvp/vjp/jacrev/jacfwd/hessian: it
traces torch/_functorch's Python and models the bindings it meets, and cdynamo does the same.
The bindings that change functorch's interpreter stack or its switches (nesting increment /
decrement, the fwd-grad, inplace-requires-grad and dual-level switches) are graph nodes that
are also applied at trace time, so the traced ops run on batched / grad-tracking fake
tensors; whatever a trace leaves applied is undone when it ends, however it ends. The
wrappers (_add_batch_dim, _wrap_for_grad, ...) are graph calls. Each case here is compared
with eager on the first call and on a cache hit, and its graph with torch._dynamo's.
"""
import pytest
import torch
import torch._dynamo
import torch._dynamo.testing
from torch.func import functional_call, grad, grad_and_value, hessian, jacfwd, jacrev, jvp, vjp, vmap

import cdynamo
import cdynamo.testing

from .harness import Call, Cases, check, tensors

case = Cases()
T33 = tensors((3, 3))
T3 = tensors((3,))


def depth():
    return torch._C._functorch.get_dynamic_layer_stack_depth()


@pytest.fixture(autouse=True)
def no_level_leaks():
    # Every test starts and ends with functorch's stack empty and its switches off: a level
    # a trace leaves pushed would batch every later op of the process.
    assert depth() == 0
    yield
    assert depth() == 0
    assert torch._C._functorch.get_inplace_requires_grad_allowed() is False
    assert torch._C._is_fwd_grad_enabled() is True


@case(T33)
def vmap_of_a_function(x):
    return vmap(torch.sin)(x)


@case(tensors((4, 3), (4,)))
def vmap_in_dims_and_out_dims(x, y):
    return vmap(lambda a, b: a * b + 1, in_dims=(1, None), out_dims=1)(x, y)


@case(tensors((2, 3, 4)))
def vmap_nested(x):
    return vmap(vmap(lambda a: a.cos() * a.sum()))(x)


@case(tensors((3, 4)))
def vmap_returning_a_tuple_and_a_constant_dim(x):
    return vmap(lambda a: (a.sum(), a * 2), out_dims=(0, 1))(x)


@case(T33)
def vmap_randomness_same(x):
    return vmap(lambda a: a + torch.rand(()), randomness="same")(x)


@case(T33)
def vmap_randomness_different(x):
    return vmap(lambda a: a + torch.rand(3), randomness="different")(x)


@case(T33)
def grad_of_a_sum(x):
    return grad(lambda y: y.sin().sum())(x)


@case(tensors((3,), (3,)))
def grad_argnums(x, y):
    return grad(lambda a, b: (a * b.exp()).sum(), argnums=(0, 1))(x, y)


@case(T33)
def grad_and_value_with_aux(x):
    return grad_and_value(lambda y: (y.sin().sum(), y.cos()), has_aux=True)(x)


@case(T33)
def vjp_and_its_function(x):
    out, fn = vjp(torch.sin, x)
    return out, fn(torch.ones_like(out))


@case(T33)
def jvp_of_a_function(x):
    return jvp(lambda a: a.sin() * 2, (x,), (torch.ones_like(x),))


@case(T3)
def jacrev_of_a_function(x):
    return jacrev(lambda a: a.sin() * a.sum())(x)


@case(T3)
def jacfwd_of_a_function(x):
    return jacfwd(lambda a: a.sin() * a.sum())(x)


@case(T3)
def hessian_of_a_sum(x):
    return hessian(lambda a: (a.sin() * a).sum())(x)


@case(T33)
def vmap_of_grad(x):
    return vmap(grad(lambda a: a.sin().sum()))(x)


LIN = torch.nn.Linear(3, 2)


@case(T33)
def functional_call_with_other_parameters(x):
    params = {"weight": torch.ones(2, 3), "bias": torch.zeros(2)}
    return functional_call(LIN, params, (x,)), LIN(x)


@case(T33)
def grad_through_functional_call(x):
    params = dict(LIN.named_parameters())
    return grad(lambda p, a: functional_call(LIN, p, (a,)).sum())(params, x)


@pytest.mark.parametrize("fn,make_args,expect_graphs", case.params)
def test_func_transform(fn, make_args, expect_graphs):
    check(fn, make_args, expect_graphs=expect_graphs)


def _ops(gm):
    return [getattr(n.target, "__name__", str(n.target)) for n in gm.graph.nodes
            if n.op in ("call_function", "call_method")]


@pytest.mark.parametrize("fn,make_args,expect_graphs", case.params)
def test_func_transform_graph_is_torch_dynamos(fn, make_args, expect_graphs):
    # The same operations in the same order as torch._dynamo's graph (node names aside).
    args = make_args()
    ours, theirs = [], []
    cdynamo.compile(fn, backend=lambda gm, ex: (ours.append(_ops(gm)), gm)[1], fullgraph=True)(*args)
    torch._dynamo.reset()
    torch.compile(fn, backend=lambda gm, ex: (theirs.append(_ops(gm)), gm)[1], fullgraph=True)(*args)
    assert ours == theirs


class _WithBuffer(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.sub = torch.nn.Linear(3, 3)
        self.register_buffer("b", torch.ones(3))

    def forward(self, x):
        return self.sub(x) + self.b


def test_module_state_swapped_through_its_dicts_is_read_back():
    # A store into module._parameters / _buffers / _modules (functional_call's accessor does
    # it) is what a later attribute read in forward sees: the graph must use what was stored,
    # not the module's own parameter, buffer or submodule.
    m = _WithBuffer()

    def param(w, x):
        orig = m.sub._parameters["weight"]
        m.sub._parameters["weight"] = w
        try:
            return m(x)
        finally:
            m.sub._parameters["weight"] = orig

    def buffer(b, x):
        orig = m._buffers["b"]
        m._buffers["b"] = b
        try:
            return m(x)
        finally:
            m._buffers["b"] = orig

    def submodule(x):
        orig = m._modules["sub"]
        m._modules["sub"] = torch.nn.Identity()
        try:
            return m(x)
        finally:
            m._modules["sub"] = orig

    check(param, tensors((3, 3), (3,)))
    check(buffer, tensors((3,), (3,)))
    check(submodule, tensors((3,)))


def test_backward_through_a_vmapped_function_with_aot_eager():
    def f(x, w):
        return vmap(lambda row: (row * w).sin().sum())(x).sum()

    x = torch.randn(4, 3, requires_grad=True)
    w = torch.randn(3, requires_grad=True)
    ref = f(x, w)
    ref_grads = torch.autograd.grad(ref, (x, w))
    be = torch._dynamo.testing.CompileCounterWithBackend("aot_eager")
    cf = cdynamo.compile(f, backend=be, fullgraph=True)
    for _ in range(2):  # the first call and a cache hit
        out = cf(x, w)
        torch.testing.assert_close(out, ref)
        torch.testing.assert_close(torch.autograd.grad(out, (x, w)), ref_grads)
    assert be.frame_count == 1


def _breaks_inside(y):
    torch._dynamo.graph_break()
    return y.sin()


def test_graph_break_inside_vmap_under_fullgraph_raises_and_pops_the_level():
    def f(x):
        return vmap(_breaks_inside)(x + 1) * 2

    with pytest.raises(cdynamo.Unsupported):
        cdynamo.compile(f, backend=cdynamo.testing.CompileCounter(), fullgraph=True)(torch.randn(3, 3))
    assert depth() == 0
    assert torch.ones(2).add(1).shape == (2,)  # later ops are not batched


def test_graph_break_inside_vmap_breaks_the_frame_at_the_call():
    # As torch._dynamo: the frame breaks at the root's call of the transform, which runs
    # natively; what comes before and after is captured.
    def f(x):
        return vmap(_breaks_inside)(x + 1) * 2

    x = torch.randn(3, 3)
    cnt = cdynamo.testing.CompileCounter()
    cf = cdynamo.compile(f, backend=cnt)
    for _ in range(2):
        torch.testing.assert_close(cf(x), f(x))
        assert depth() == 0
    assert cnt.frame_count == 2


def test_unsupported_op_with_a_level_pushed_pops_it():
    # The program pushes a level itself, then the trace stops: the level it pushed at trace
    # time is popped, and the frame (which cannot resume with a graph's level pushed) runs
    # natively, with the same result as eager.
    def f(x):
        level = torch._C._functorch._vmap_increment_nesting(3, "error")
        torch._dynamo.graph_break()
        torch._C._functorch._vmap_decrement_nesting()
        return x + level

    x = torch.randn(3)
    cnt = cdynamo.testing.CompileCounter()
    cf = cdynamo.compile(f, backend=cnt)
    for _ in range(2):
        torch.testing.assert_close(cf(x), f(x))
        assert depth() == 0
    with pytest.raises(cdynamo.Unsupported):
        cdynamo.compile(f, backend=cnt, fullgraph=True)(x)
    assert depth() == 0


def test_exception_inside_grad_pops_the_level():
    def f(x):
        def g(y):
            raise ValueError("inside the transform")
        return grad(g)(x)

    x = torch.randn(3)
    for fullgraph in (False, True):
        cdynamo.reset()
        with pytest.raises((ValueError, cdynamo.Unsupported)):
            cdynamo.compile(f, backend=cdynamo.testing.CompileCounter(), fullgraph=fullgraph)(x)
        assert depth() == 0
        assert torch._C._functorch.get_inplace_requires_grad_allowed() is False


def test_low_level_bindings_in_one_graph():
    def f(x):
        level = torch._C._functorch._grad_increment_nesting()
        torch._C._functorch.set_inplace_requires_grad_allowed(True)
        torch._functorch.eager_transforms._set_tensor_requires_grad(x)
        torch._C._functorch.set_inplace_requires_grad_allowed(False)
        torch._C._functorch._grad_decrement_nesting()
        return x + level

    cnt = cdynamo.testing.CompileCounter()
    cf = cdynamo.compile(f, backend=cnt, fullgraph=True)
    for _ in range(2):
        x = torch.randn(3)
        torch.testing.assert_close(cf(x), x + 1)
        assert x.requires_grad
    assert cnt.frame_count == 1


def test_frame_called_inside_eager_transforms_is_guarded_on_the_stack():
    # A compiled function called from an eager vmap traces on batched tensors with the
    # level baked in; called at another depth (nested vmap) or outside it, it recompiles.
    def inner(a):
        return a.sin() * a.sum()

    cnt = cdynamo.testing.CompileCounter()
    ci = cdynamo.compile(inner, backend=cnt)
    x = torch.randn(2, 3, 4)
    for _ in range(2):
        torch.testing.assert_close(vmap(ci)(x), vmap(inner)(x))
        torch.testing.assert_close(vmap(vmap(ci))(x), vmap(vmap(inner))(x))
        torch.testing.assert_close(ci(x), inner(x))
        torch.testing.assert_close(grad(lambda a: ci(a).sum())(x), grad(lambda a: inner(a).sum())(x))
    assert depth() == 0


def test_stack_depth_is_a_guarded_constant():
    def f(x):
        return x + torch._C._functorch.get_dynamic_layer_stack_depth()

    cnt = cdynamo.testing.CompileCounter()
    cf = cdynamo.compile(f, backend=cnt, fullgraph=True)
    x = torch.randn(3)
    torch.testing.assert_close(cf(x), x)
    torch._C._functorch._grad_increment_nesting()
    try:
        torch.testing.assert_close(cf(x), x + 1)
    finally:
        torch._C._functorch._grad_decrement_nesting()
    torch.testing.assert_close(cf(x), x)
    assert cnt.frame_count == 2
