"""torch.autograd.Function.apply inside a compiled frame.

With no gradient to record (grad mode off, or no tensor argument requires grad) apply is
forward run under no_grad on a ctx, its outputs wrapped as apply wraps them (an input
returned comes back as a new view of it; a dirty input as itself); cdynamo inlines that
(cdynamo._internal.autograd_function.autograd_function_apply) into the frame's graph, as torch._dynamo does.
When apply records a backward, forward and backward are speculated into the
autograd_function_apply higher-order op (test_autograd_function_hop.py); what they cannot
capture is a graph break with its reason.
"""
import pytest
import torch
import torch._dynamo.testing

import cdynamo
import cdynamo.testing

from .harness import Cases, check, tensors

case = Cases()
T4 = tensors((4,))
T4_GRAD = tensors((4,), requires_grad=True)


class Gelu(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x):
        ctx.save_for_backward(x)
        return x * 0.5 * (1.0 + torch.tanh(0.79788456 * x * (1 + 0.044715 * x * x)))

    @staticmethod
    def backward(ctx, g):
        (x,) = ctx.saved_tensors
        return g * torch.sigmoid(1.702 * x)


class Identity(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x, y):
        return x, y * 2, 3

    @staticmethod
    def backward(ctx, gx, gy, gk):
        return gx, gy * 2


class AddOneInPlace(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x):
        x.add_(1)
        ctx.mark_dirty(x)
        return x

    @staticmethod
    def backward(ctx, g):
        return g


class NeedsInputGrad(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x, scale):
        ctx.scale = scale
        return x * scale, ctx.needs_input_grad

    @staticmethod
    def backward(ctx, g, _):
        return g * ctx.scale, None


class SetupContext(torch.autograd.Function):
    @staticmethod
    def forward(x, k):
        return x.sin() * k

    @staticmethod
    def setup_context(ctx, inputs, output):
        x, k = inputs
        ctx.save_for_backward(x)
        ctx.k = k

    @staticmethod
    def backward(ctx, g):
        (x,) = ctx.saved_tensors
        return g * x.cos() * ctx.k, None


class OwnApply(Gelu):
    @classmethod
    def apply(cls, *args):
        return super().apply(*args) + 1


@case(T4)
def apply_in_the_graph(x):
    return Gelu.apply(x + 1).sum() * 2


@case(T4)
def apply_returns_input_as_a_new_view(x):
    a, b, k = Identity.apply(x, x + 1)
    return a, b, k, a is x, a._base is x


@case(T4)
def apply_dirty_input_comes_back_itself(x):
    y = AddOneInPlace.apply(x)
    return y is x, y * 2


@case(T4_GRAD)
def apply_under_no_grad_sees_needs_input_grad(x):
    with torch.no_grad():
        y, needs = NeedsInputGrad.apply(x, 3.0)
    return y, needs, y.requires_grad


@case(T4)
def apply_with_setup_context(x):
    return SetupContext.apply(x, 2.0) + x


@case(T4)
def apply_through_an_override_calling_super(x):
    return OwnApply.apply(x * 2)


@pytest.mark.parametrize("fn,make_args,expect_graphs", case.params)
def test_autograd_function_apply(fn, make_args, expect_graphs):
    check(fn, make_args, expect_graphs=expect_graphs)


LOG = []


class Logged(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x):
        LOG.append(x.shape[0])  # reaches outside the call: never run at compile time
        return x * 3

    @staticmethod
    def backward(ctx, g):
        return g * 3


def _train_step(f, x, backend):
    cf = cdynamo.compile(f, backend=backend)
    out = cf(x)
    out.backward()
    grad, x.grad = x.grad, None
    return out, grad


@pytest.mark.parametrize("backend", ["counting", "aot_eager"])
@pytest.mark.parametrize("fn", ["gelu", "setup_context", "override"])
def test_apply_recording_a_backward_is_one_call_in_the_graph(fn, backend):
    # torch._dynamo captures these in one graph too (a higher-order op holding forward and
    # backward); cdynamo's node is the apply itself, and AOTAutograd traces the backward.
    def gelu(x):
        return Gelu.apply(x * 2).sum()

    def setup_context(x):
        return (SetupContext.apply(x, 2.0) * x).sum()

    def override(x):
        return OwnApply.apply(x - 1).sum()

    f = {"gelu": gelu, "setup_context": setup_context, "override": override}[fn]
    x = torch.randn(4, requires_grad=True)
    ref = f(x)
    ref.backward()
    ref_grad, x.grad = x.grad, None
    cnt = cdynamo.testing.CompileCounter()
    be = cnt if backend == "counting" else torch._dynamo.testing.CompileCounterWithBackend("aot_eager")
    cf = cdynamo.compile(f, backend=be)
    for _ in range(2):  # the first call and a cache hit
        out = cf(x)
        out.backward()
        torch.testing.assert_close(out, ref)
        torch.testing.assert_close(x.grad, ref_grad)
        assert out.grad_fn is not None
        x.grad = None
    assert be.frame_count == 1
    assert cdynamo.stats()["graph_break_reasons"] == []


def test_apply_whose_forward_reaches_outside_is_a_reported_break():
    def f(x):
        return Logged.apply(x + 1).sum()

    x = torch.randn(5, requires_grad=True)
    LOG.clear()
    ref = f(x)
    ref.backward()
    ref_grad, x.grad = x.grad, None
    assert LOG == [5]
    cnt = cdynamo.testing.CompileCounter()
    cf = cdynamo.compile(f, backend=cnt)
    for calls in (2, 3):
        out = cf(x)
        out.backward()
        torch.testing.assert_close(out, ref)
        torch.testing.assert_close(x.grad, ref_grad)
        x.grad = None
        assert LOG == [5] * calls  # once a call, as eagerly: nothing ran it on fakes
    reasons = [r.get("reason", "") for r in cdynamo.stats()["graph_break_reasons"]]
    # The forward's body (of the autograd_function_apply op) changes a list outside it.
    assert any("autograd.Function.apply of Logged (forward)" in r and "side effect" in r for r in reasons), reasons
    # x + 1; .sum() in the resume function; and forward and backward, which the native
    # apply and the autograd engine call as frames of their own (compiled like any frame
    # called from C, as torch._dynamo does).
    assert cnt.frame_count == 4
