"""TorchFunctionModes the compiled function enters (`with Mode():`).

The mode exists only in the trace: TorchFunctionMode.__enter__/__exit__ are traced and their
push/pop of torch's mode stack act on the trace's own stack, and every torch call that torch
would hand the mode (torch functions, tensor methods, operators, indexing, tensor properties,
factories, torch.ops operators) inlines the mode's __torch_function__ with the mode taken off
the stack while it runs. The graph holds what the mode's code did (a mode that turns add into
mul records mul). Compared with eager on the first call and on a cache hit, and with
torch._dynamo's graph and op counts.
"""
import pytest
import torch
import torch._dynamo.testing
from torch.overrides import TorchFunctionMode

import cdynamo

from .harness import Cases, check, tensors

case = Cases()


class AddIsMul(TorchFunctionMode):
    """Changes what the program computes: every add becomes a mul."""

    def __torch_function__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        if func in (torch.add, torch.Tensor.add, torch.Tensor.__add__):
            return torch.mul(*args, **kwargs)
        return func(*args, **kwargs)


class PassThrough(TorchFunctionMode):
    def __torch_function__(self, func, types, args=(), kwargs=None):
        return func(*args, **(kwargs or {}))


class ScaleResults(TorchFunctionMode):
    """Reads its own state and changes every tensor result."""

    def __init__(self, k):
        super().__init__()
        self.k = k

    def __torch_function__(self, func, types, args=(), kwargs=None):
        out = func(*args, **(kwargs or {}))
        if isinstance(out, torch.Tensor) and out.is_floating_point():
            return out * self.k
        return out


class IndexByTensor(TorchFunctionMode):
    """x[t] with tensor indices as one aten.index op (what flex_attention's mode does)."""

    def __torch_function__(self, func, types, args=(), kwargs=None):
        if func is torch.Tensor.__getitem__ and isinstance(args[1], torch.Tensor):
            return torch.ops.aten.index(args[0], [args[1]])
        return func(*args, **(kwargs or {}))


@case(tensors((3,), (3,)))
def operators_functions_and_methods_go_through_the_mode(x, y):
    a = x + y  # before the block: an add
    with AddIsMul():
        b = x + y
        c = torch.add(x, 2)
        d = x.add(y).sin()
        n = x.shape[0]
        e = torch.ones(3) + 1
        g = torch.nn.functional.relu(x)
    return a, b, c, d, n, e, g


@case(tensors((4,)))
def a_pass_through_mode_changes_nothing(x):
    with PassThrough():
        y = (x * 2).sum() + x.mean()
    return y, x.dtype, x.size(0)


@case(tensors((4,)))
def a_mode_with_state_scales_every_result(x):
    with ScaleResults(3.0):
        y = x.sin() + 1
    return y


@case(tensors((4,)))
def nested_modes_innermost_first(x):
    with ScaleResults(2.0):
        with AddIsMul():
            y = x + 3
    return y


@case(lambda: (torch.randn(5), torch.tensor([1, 3])))
def tensor_indexing_inside_the_mode(x, i):
    with IndexByTensor():
        y = x[i] * 2
    return y


MODE = ScaleResults(5.0)


@case(tensors((4,)))
def a_mode_object_from_the_program(x):
    with MODE:
        y = x.cos()
    return y


@pytest.mark.parametrize("fn,make_args,expect_graphs", case.params)
def test_mode_entered_in_the_frame(fn, make_args, expect_graphs):
    check(fn, make_args, expect_graphs=expect_graphs)


def test_the_graph_holds_what_the_mode_did():
    def f(x, y):
        with AddIsMul():
            return x + y

    x, y = torch.randn(3), torch.randn(3)
    graphs = []

    def backend(gm, example_inputs):
        graphs.append(gm)
        return gm.forward

    out = cdynamo.compile(f, backend=backend, fullgraph=True)(x, y)
    torch.testing.assert_close(out, x * y)
    targets = [n.target for n in graphs[0].graph.nodes if n.op == "call_function"]
    assert targets == [torch.mul]
    dcnt = torch._dynamo.testing.CompileCounter()
    torch.compile(f, backend=dcnt, fullgraph=True)(x, y)
    assert dcnt.op_count == len(targets)


def test_a_mode_left_entered_runs_natively():
    def f(x):
        AddIsMul().__enter__()
        return x + 1

    x = torch.randn(3)
    cf = cdynamo.compile(f, backend="eager")
    try:
        out = cf(x)
        # The mode is still on torch's stack after the call, as eagerly.
        assert torch._C._len_torch_function_stack() == 1
        torch.testing.assert_close(out, x + 1)
    finally:
        while torch._C._len_torch_function_stack():
            torch._C._pop_torch_function_stack()
    reasons = [r["reason"] for r in cdynamo.stats()["native_frames"]]
    assert any("still active" in r for r in reasons), reasons


def test_a_graph_break_inside_the_mode_runs_the_frame_natively():
    def f(x):
        with AddIsMul():
            y = x + 1
            torch._dynamo.graph_break()
            return y + x

    x = torch.randn(3)
    out = cdynamo.compile(f, backend="eager")(x)
    torch.testing.assert_close(out, (x * 1) * x)
