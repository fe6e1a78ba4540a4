"""Traceable wrapper subclasses (a __torch_dispatch__ of their own and __tensor_flatten__):
instances are graph inputs as they are, made inside the trace, and returned; the guards see
their class, their inner tensors and their flatten context."""
import pytest
import torch
import torch.utils._pytree as pytree
from torch.testing._internal.two_tensor import TwoTensor

import cdynamo
import cdynamo.testing

from .harness import check


class Tagged(torch.Tensor):
    """One inner tensor and a tag in the flatten context; multiplication adds the tag, so
    a graph traced for one tag gives a wrong answer for another unless the guard sees it."""

    @staticmethod
    def __new__(cls, inner, tag):
        return torch.Tensor._make_wrapper_subclass(cls, inner.shape, strides=inner.stride(), dtype=inner.dtype,
                                                   device=inner.device, requires_grad=inner.requires_grad)

    def __init__(self, inner, tag):
        self.inner = inner
        self.tag = tag

    def __tensor_flatten__(self):
        return ["inner"], {"tag": self.tag}

    @staticmethod
    def __tensor_unflatten__(inner_tensors, ctx, outer_size, outer_stride):
        return Tagged(inner_tensors["inner"], ctx["tag"])

    @classmethod
    def __torch_dispatch__(cls, func, types, args, kwargs=None):
        kwargs = kwargs or {}
        tag = max(x.tag for x in pytree.tree_flatten(args)[0] if isinstance(x, Tagged))
        out = func(*pytree.tree_map_only(Tagged, lambda x: x.inner, args),
                   **pytree.tree_map_only(Tagged, lambda x: x.inner, kwargs))
        if func is torch.ops.aten.mul.Tensor:
            out = out + tag
        return pytree.tree_map_only(torch.Tensor, lambda x: Tagged(x, tag), out)


class TaggedByParity(Tagged):
    """Tags of one parity are one context for the guard (__metadata_guard__)."""

    @classmethod
    def __metadata_guard__(cls, saved, now):
        return saved["tag"] % 2 == now["tag"] % 2

    @staticmethod
    def __tensor_unflatten__(inner_tensors, ctx, outer_size, outer_stride):
        return TaggedByParity(inner_tensors["inner"], ctx["tag"])


def two(*shape, dtype=torch.float32):
    return TwoTensor(torch.randn(*shape, dtype=dtype), torch.randn(*shape, dtype=dtype))


def same(a, b):
    assert type(a) is type(b)
    if isinstance(a, TwoTensor):
        torch.testing.assert_close(a.a, b.a)
        torch.testing.assert_close(a.b, b.b)
    elif isinstance(a, Tagged):
        assert a.tag == b.tag
        torch.testing.assert_close(a.inner, b.inner)
    else:
        torch.testing.assert_close(a, b)


def run(fn, inputs, backend=None, **kw):
    counter = backend or cdynamo.testing.CompileCounter()
    c = cdynamo.compile(fn, backend=counter, **kw)
    for args in inputs:
        same(c(*args), fn(*args))
    return counter


def dynamo_frames(fn, inputs):
    import torch._dynamo
    import torch._dynamo.testing
    torch._dynamo.reset()
    counter = torch._dynamo.testing.CompileCounter()
    c = torch.compile(fn, backend=counter)
    for args in inputs:
        c(*args)
    return counter


def test_input_op_and_hit_as_dynamo():
    def f(t):
        return t.sin() + 1

    x = two(3)
    counter = run(f, [(x,), (x,), (two(3),)], fullgraph=True)
    ref = dynamo_frames(f, [(x,), (x,), (two(3),)])
    assert (counter.frame_count, counter.op_count) == (ref.frame_count, ref.op_count) == (1, 2)


def test_harness_mixed_with_plain_tensor():
    check(lambda t, y: (t * y).cos().sum(), lambda: (two(4), torch.randn(4)))


def test_inner_dtype_and_class_recompile_same_does_not():
    def f(t):
        return t * 2

    counter = run(f, [(two(3),), (two(3),)], fullgraph=True)
    assert counter.frame_count == 1
    counter = run(f, [(two(3),), (two(3, dtype=torch.float64),)], fullgraph=True)
    assert counter.frame_count == 2
    counter = run(f, [(two(3),), (Tagged(torch.randn(3), 1),)], fullgraph=True)
    assert counter.frame_count == 2


def test_inner_subclass_context_is_guarded():
    # The outer class, metadata and context are the same; an inner tensor's context differs.
    def f(t):
        return t * t

    def mk(tag):
        return (TwoTensor(Tagged(torch.ones(3), 1), Tagged(torch.ones(3), tag)),)

    counter = cdynamo.testing.CompileCounter()
    c = cdynamo.compile(f, backend=counter, fullgraph=True)
    for tag in (1, 1, 4):
        got, want = c(*mk(tag)), f(*mk(tag))
        same(got.b, want.b)
    assert counter.frame_count == 2


def test_flatten_context_recompiles_when_it_changes():
    def f(t):
        return t * t

    inputs = [(Tagged(torch.ones(2), 1),), (Tagged(torch.ones(2), 1),), (Tagged(torch.ones(2), 5),)]
    counter = run(f, inputs, fullgraph=True)
    assert counter.frame_count == 2
    for backend in ("eager", "aot_eager"):
        run(f, inputs, backend=backend, fullgraph=True)


def test_metadata_guard_decides_what_is_equal():
    def f(t):
        return t * t

    def mk(tag):
        return (TaggedByParity(torch.ones(2), tag),)

    counter = cdynamo.testing.CompileCounter()
    c = cdynamo.compile(f, backend=counter, fullgraph=True)
    c(*mk(1))
    c(*mk(3))  # same parity: the class says the context is equal, a hit
    assert counter.frame_count == 1
    c(*mk(2))
    assert counter.frame_count == 2


@pytest.mark.parametrize("backend", ["eager", "aot_eager"])
def test_gradients_through_subclass_input(backend):
    def f(t):
        return (t.sin() * 2).sum()

    for _ in range(2):
        a, b = torch.randn(3), torch.randn(3)
        t_eager = TwoTensor(a, b).requires_grad_()
        t_comp = TwoTensor(a.clone(), b.clone()).requires_grad_()
        f(t_eager).backward()
        c = cdynamo.compile(f, backend=backend, fullgraph=True)
        c(t_comp).backward()
        same(t_comp.grad, t_eager.grad)


def test_subclass_returned_with_plain_outputs():
    def f(t, y):
        return t.cos(), y + 1, t.sum()

    c = cdynamo.compile(f, backend="eager", fullgraph=True)
    x, y = two(2, 3), torch.randn(2, 3)
    for got, want in zip(c(x, y), f(x, y)):
        same(got, want)


@pytest.mark.parametrize("backend", ["eager", "aot_eager"])
def test_made_inside_the_trace_and_returned(backend):
    def f(a, b):
        return TwoTensor(a, b).cos() + 1

    args = (torch.randn(3), torch.randn(3))
    for _ in range(2):
        same(cdynamo.compile(f, backend=backend, fullgraph=True)(*args), f(*args))
    counter = run(f, [args, args], fullgraph=True)
    ref = dynamo_frames(f, [args, args])
    assert (counter.frame_count, counter.op_count) == (ref.frame_count, ref.op_count) == (1, 3)


def test_made_with_a_context_inside_the_trace():
    def f(x, tag):
        return Tagged(x, tag) * Tagged(x, tag)

    counter = run(f, [(torch.ones(2), 3), (torch.ones(2), 3)], fullgraph=True)
    assert counter.frame_count == 1


def test_inner_tensors_of_an_input_are_inputs():
    def f(t):
        return t.a + t.b * 2

    x = two(3)
    counter = run(f, [(x,), (x,), (two(3),)], fullgraph=True)
    ref = dynamo_frames(f, [(x,), (x,), (two(3),)])
    # torch._dynamo makes each inner tensor an input of its own; here they are getattr
    # nodes (read where the program reads them: see the in-place test below).
    assert counter.frame_count == ref.frame_count == 1


def test_inner_tensor_read_after_an_in_place_op_on_the_outer():
    def f(t):
        t.add_(1)
        return t.a * 2

    for backend in ("eager", "aot_eager"):
        x, y = two(3), None
        y = TwoTensor(x.a.clone(), x.b.clone())
        got = cdynamo.compile(f, backend=backend, fullgraph=True)(x)
        want = f(y)
        same(got, want)
        same(x, y)


def test_inner_tensor_passed_again_and_mutated_is_not_compiled_wrong():
    # f(t, t.a): the graph's in-place op on the second input must be seen through the
    # first; a functionalizing backend would not see that aliasing through the subclass.
    def f(t, a):
        a.add_(1)
        return t * 2

    for backend in ("eager", "aot_eager"):
        x = TwoTensor(torch.zeros(3), torch.zeros(3))
        y = TwoTensor(torch.zeros(3), torch.zeros(3))
        c = cdynamo.compile(f, backend=backend)
        same(c(x, x.a), f(y, y.a))
        same(x, y)


def test_aliasing_that_appears_later_recompiles():
    def f(t, a):
        a.add_(1)
        return t * 2

    counter = cdynamo.testing.CompileCounter()
    c = cdynamo.compile(f, backend=counter)
    x = TwoTensor(torch.ones(3), torch.ones(3))
    y = TwoTensor(torch.ones(3), torch.ones(3))
    same(c(x, torch.zeros(3)), f(y, torch.zeros(3)))
    assert counter.frame_count == 1
    x = TwoTensor(torch.zeros(3), torch.zeros(3))
    y = TwoTensor(torch.zeros(3), torch.zeros(3))
    same(c(x, x.a), f(y, y.a))  # the entry's storage guard fails: not run with the aliasing
    same(x, y)
