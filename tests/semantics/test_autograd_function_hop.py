"""Autograd in the compiled frame: autograd.Function.apply recording a backward, tensor hooks,
.grad stores.

* apply with a gradient to record is torch.ops.higher_order.autograd_function_apply over the
  speculated forward and backward bodies (protocol/autograd_function.cpp): the user's
  backward is what runs, with the values the forward saves for it.
* t.register_hook(h) on a tensor the graph computes is torch.ops.higher_order.register_hook
  over the speculated hook; on a tensor the caller passed in (and
  register_post_accumulate_grad_hook) it is replayed on the real tensor after the graph.
* x.grad = v on an input tensor is a replayed store that later reads in the trace see.

Every case runs eagerly and compiled (first call and a cache hit), with the eager and
aot_eager backends, and compares outputs and the gradients of the leaves; graph counts
come from a counting backend and are compared with torch._dynamo's in the same run.
"""
import functools

import pytest
import torch
import torch._dynamo
import torch._dynamo.testing

import cdynamo
import cdynamo.testing


class ScaledSin(torch.autograd.Function):
    # Its backward is deliberately not sin's derivative: a compiled gradient equal to eager's
    # shows that the user's backward ran, not autograd's derivative of the forward's ops.
    @staticmethod
    def forward(ctx, x, k):
        ctx.k = k
        ctx.save_for_backward(x)
        return x.sin() * k

    @staticmethod
    def backward(ctx, g):
        (x,) = ctx.saved_tensors
        gx = g * x.cos() * ctx.k * 2 if ctx.needs_input_grad[0] else None
        return gx, None


class TwoOutputs(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x, y):
        a = x.sin()
        b = y * 2
        ctx.mark_non_differentiable(b)
        ctx.stash = a  # a forward intermediate stashed on ctx, read by the backward
        return a, b, [1, 2]

    @staticmethod
    def backward(ctx, ga, gb, gl):
        return ga * ctx.stash, gb * 0.0


class SetupStyle(torch.autograd.Function):
    @staticmethod
    def forward(x, w):
        return x * w

    @staticmethod
    def setup_context(ctx, inputs, output):
        x, w = inputs
        ctx.save_for_backward(x, w)

    @staticmethod
    def backward(ctx, g):
        x, w = ctx.saved_tensors
        return g * w * 3, (g * x).sum(0)


class BreaksInForward(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x):
        torch._dynamo.graph_break()
        return x * 2

    @staticmethod
    def backward(ctx, g):
        return g * 5


def apply_scaled_sin(x):
    return ScaledSin.apply(x * 1, 3.0).sum()


def apply_two_outputs(x, y):
    a, b, lst = TwoOutputs.apply(x, y)
    return a.sum() + b.sum(), b.requires_grad, lst


def apply_setup_style(x, w):
    return SetupStyle.apply(x, w).sum()


def hook_on_intermediate_used_before_and_after(x):
    y = x * 2
    z = y + 1
    y.register_hook(lambda g: g * 3)
    w = y * 4
    return (z + w).sum()


def hook_returning_none_with_closure(x):
    y = x.sin()
    seen = y.cos()
    y.register_hook(lambda g: None)
    z = y * 2
    z.register_hook(lambda g: g + seen)
    return (z * z).sum()


def scaled_hook(grad, *, k):
    return grad * k


def hook_on_input(x):
    x.register_hook(functools.partial(scaled_hook, k=5))
    return (x * x).sum()


CASES = {
    "apply_scaled_sin": (apply_scaled_sin, lambda: [torch.randn(4, requires_grad=True)], 1),
    "apply_two_outputs": (apply_two_outputs,
                          lambda: [torch.randn(3, requires_grad=True), torch.randn(3, requires_grad=True)], 1),
    "apply_setup_style": (apply_setup_style,
                          lambda: [torch.randn(2, 3, requires_grad=True), torch.randn(3, requires_grad=True)], 1),
    "hook_on_intermediate_used_before_and_after": (hook_on_intermediate_used_before_and_after,
                                                   lambda: [torch.randn(3, requires_grad=True)], 1),
    "hook_returning_none_with_closure": (hook_returning_none_with_closure,
                                         lambda: [torch.randn(3, requires_grad=True)], 1),
    "hook_on_input": (hook_on_input, lambda: [torch.randn(3, requires_grad=True)], 1),
}


def _run(fn, args):
    out = fn(*args)
    loss = out[0] if isinstance(out, tuple) else out
    loss.backward()
    return out, [a.grad.clone() if a.grad is not None else None for a in args]


def _same(a, b):
    if isinstance(a, torch.Tensor):
        torch.testing.assert_close(a, b)
    elif isinstance(a, (tuple, list)):
        assert type(a) is type(b) and len(a) == len(b)
        for x, y in zip(a, b):
            _same(x, y)
    else:
        assert a == b, (a, b)


def _dynamo_frames(fn, make_args):
    torch._dynamo.reset()
    cnt = torch._dynamo.testing.CompileCounter()
    torch.compile(fn, backend=cnt)(*make_args())
    torch._dynamo.reset()
    return cnt.frame_count


@pytest.mark.parametrize("backend", ["eager", "aot_eager"])
@pytest.mark.parametrize("name", sorted(CASES))
def test_autograd_in_the_frame_matches_eager(name, backend):
    fn, make_args, graphs = CASES[name]
    torch.manual_seed(0)
    seeds = [make_args() for _ in range(2)]
    eager = [_run(fn, [a.detach().clone().requires_grad_() for a in args]) for args in seeds]
    cdynamo.reset()
    cnt = torch._dynamo.testing.CompileCounterWithBackend(backend)
    cf = cdynamo.compile(fn, backend=cnt, fullgraph=True)
    for args, (ref_out, ref_grads) in zip(seeds, eager):  # first call, then a cache hit
        out, grads = _run(cf, [a.detach().clone().requires_grad_() for a in args])
        _same(out, ref_out)
        _same(grads, ref_grads)
    assert cnt.frame_count == graphs
    assert cnt.frame_count <= _dynamo_frames(fn, make_args)


def _graph_targets(fn, args):
    gms = []

    def record(gm, example_inputs):
        gms.append(gm)
        return gm

    cdynamo.reset()
    cdynamo.compile(fn, backend=record, fullgraph=True)(*args)
    return [str(n.target) for n in gms[0].graph.nodes if n.op == "call_function"]


def test_apply_is_the_autograd_function_apply_op():
    targets = _graph_targets(apply_scaled_sin, [torch.randn(4, requires_grad=True)])
    assert any("autograd_function_apply" in t for t in targets), targets


def test_intermediate_hook_is_the_register_hook_op():
    targets = _graph_targets(hook_on_intermediate_used_before_and_after, [torch.randn(3, requires_grad=True)])
    assert any("register_hook" in t for t in targets), targets


def test_apply_whose_forward_breaks_runs_natively_with_the_users_backward():
    def f(x):
        return BreaksInForward.apply(x + 1).sum()

    x = torch.randn(3, requires_grad=True)
    f(x).backward()
    ref = x.grad
    x.grad = None
    cdynamo.reset()
    cnt = cdynamo.testing.CompileCounter()
    cf = cdynamo.compile(f, backend=cnt)
    for _ in range(2):
        cf(x).backward()
        torch.testing.assert_close(x.grad, ref)
        torch.testing.assert_close(x.grad, torch.full((3,), 5.0))
        x.grad = None
    reasons = [r.get("reason", "") for r in cdynamo.stats()["graph_break_reasons"]]
    assert any("BreaksInForward (forward)" in r for r in reasons), reasons
    with pytest.raises(cdynamo.Unsupported):
        cdynamo.reset()
        cdynamo.compile(f, backend="eager", fullgraph=True)(x)


def test_hook_on_input_stays_after_the_frame_and_the_handle_in_use_breaks():
    def f(x):
        x.register_hook(lambda g: g * 2)
        return x * 3

    cdynamo.reset()
    cnt = cdynamo.testing.CompileCounter()
    cf = cdynamo.compile(f, backend=cnt, fullgraph=True)
    x = torch.ones(3, requires_grad=True)
    cf(x).sum().backward()
    torch.testing.assert_close(x.grad, torch.full((3,), 6.0))
    x.backward(torch.ones(3))  # the hook is on x itself, as eager leaves it
    torch.testing.assert_close(x.grad, torch.full((3,), 8.0))
    assert cnt.frame_count == 1

    def keeps_handle(x):
        h = x.register_hook(lambda g: g * 2)
        y = x * 3
        h.remove()
        return y

    cdynamo.reset()
    x = torch.ones(3, requires_grad=True)
    cdynamo.compile(keeps_handle, backend="eager")(x).sum().backward()
    torch.testing.assert_close(x.grad, torch.full((3,), 3.0))  # removed before the backward
    with pytest.raises(cdynamo.Unsupported, match="handle"):
        cdynamo.reset()
        cdynamo.compile(keeps_handle, backend="eager", fullgraph=True)(torch.ones(3, requires_grad=True))


def _grad_times_ten(t):
    t.grad.mul_(10)


def _registers_post_accumulate_hook(x, y):
    x.register_post_accumulate_grad_hook(_grad_times_ten)
    return x * y


def test_post_accumulate_grad_hook_on_input():
    cdynamo.reset()
    cnt = cdynamo.testing.CompileCounter()
    cf = cdynamo.compile(_registers_post_accumulate_hook, backend=cnt, fullgraph=True)
    for _ in range(2):
        x = torch.ones(3, requires_grad=True)
        cf(x, torch.arange(3.0)).sum().backward()
        torch.testing.assert_close(x.grad, torch.arange(3.0) * 10)
    assert cnt.frame_count == 1


def test_grad_store_on_input_is_replayed_and_read_back():
    def f(x, g):
        before = x.grad
        x.grad = g * 2
        return x.grad + 1, before

    cdynamo.reset()
    cnt = cdynamo.testing.CompileCounter()
    cf = cdynamo.compile(f, backend=cnt, fullgraph=True)
    for _ in range(2):
        x = torch.ones(3, requires_grad=True)
        g = torch.arange(3.0)
        out, before = cf(x, g)
        torch.testing.assert_close(out, g * 2 + 1)
        assert before is None
        torch.testing.assert_close(x.grad, g * 2)
    assert cnt.frame_count == 1
    with pytest.raises(cdynamo.Unsupported, match="shape"):  # the setter's check, left to eager
        cdynamo.reset()
        cdynamo.compile(f, backend="eager", fullgraph=True)(torch.ones(3, requires_grad=True), torch.ones(2))


def test_torch_dynamo_allow_in_graph_mark_is_one_node():
    def opaque(x):
        return x * 2

    torch._dynamo.allow_in_graph(opaque)
    try:
        targets = _graph_targets(lambda x: opaque(x) + 1, [torch.randn(3)])
        assert any("opaque" in t for t in targets), targets
    finally:
        torch._dynamo.disallow_in_graph(opaque)


def test_post_accumulate_grad_hook_replayed_on_a_non_leaf_raises_as_eager():
    # Leaf-ness is not in the tensor check: a non-leaf with the same metadata hits the entry
    # traced for a leaf. The replayed registration raises there as eager does (before any
    # effect of the frame is visible), so the hit is never a wrong result.
    cdynamo.reset()
    cnt = cdynamo.testing.CompileCounter()
    cf = cdynamo.compile(_registers_post_accumulate_hook, backend=cnt, fullgraph=True)
    y = torch.arange(3.0)
    cf(torch.ones(3, requires_grad=True), y)
    non_leaf = torch.ones(3, requires_grad=True) * 1
    with pytest.raises(RuntimeError, match="non-leaf") as eager:
        _registers_post_accumulate_hook(non_leaf, y)
    with pytest.raises(RuntimeError, match="non-leaf") as compiled:
        cf(non_leaf, y)
    assert str(compiled.value) == str(eager.value)
    assert cnt.frame_count == 1
