"""Compiled calls inside a TorchDispatchMode of the program (PyTorch's test_misc).

cdynamo's own bookkeeping around a translation (saving and restoring torch's RNG state,
cdynamo/_internal/torch_state.py) ran operators, which the program's mode saw: a logging mode logged an
aten.equal that eager execution never makes, and a mode that answers every operator with
something else broke the restore (RuntimeError, IndexError from inside cdynamo). That
bookkeeping now runs with the modes set aside. And, as torch._dynamo does, a miss while
such a mode is on the stack (not an infra mode, not one saying ignore_compile_internals)
runs the frame natively and compiles nothing: the mode sees what eager execution does. A
mode is off the stack while its own __torch_dispatch__ runs, so a function compiled and
called from there is compiled.
"""
import torch
import torch._dynamo
import torch._dynamo.testing
from torch.utils._python_dispatch import TorchDispatchMode

import cdynamo
import cdynamo.testing


class Logging(TorchDispatchMode):
    def __init__(self):
        super().__init__()
        self.seen = []

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        self.seen.append(str(func))
        return func(*args, **(kwargs or {}))


class EverythingIsMul(TorchDispatchMode):
    # answers every operator with args[0] * args[1], whatever it was
    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        return torch.ops.aten.mul.Tensor(args[0], args[1])


def program(x):
    return (x.sin() + 1).cos()


def test_logging_mode_sees_what_eager_execution_does():
    x = torch.randn(3)
    with Logging() as eager_mode:
        expected = program(x)
    cdynamo.reset()
    cnt = cdynamo.testing.CompileCounter()
    compiled = cdynamo.compile(program, backend=cnt)
    for _ in range(2):
        with Logging() as mode:
            got = compiled(x)
        assert torch.equal(got, expected)
        assert mode.seen == eager_mode.seen
    assert cnt.frame_count == 0
    # torch._dynamo compiles nothing under the mode either
    torch._dynamo.reset()
    dcnt = torch._dynamo.testing.CompileCounter()
    with Logging():
        torch.compile(program, backend=dcnt)(x)
    torch._dynamo.reset()
    assert dcnt.frame_count == 0
    # out of the mode, the same function compiles
    assert torch.equal(compiled(x), program(x)) and cnt.frame_count == 1


def test_mode_answering_everything_does_not_break_cdynamo():
    x = torch.ones(5) * 3
    with EverythingIsMul():
        expected = torch.add(x, x)
    cdynamo.reset()
    for fullgraph in (False, True):
        with EverythingIsMul():
            got = cdynamo.compile(torch.add, backend="eager", fullgraph=fullgraph)(x, x)
        assert torch.equal(got, expected)


def test_function_compiled_inside_the_modes_own_dispatch_is_compiled():
    cdynamo.reset()
    cnt = cdynamo.testing.CompileCounter()

    def double(a):
        return a * 2

    compiled = cdynamo.compile(double, backend=cnt, fullgraph=True)

    class Doubling(TorchDispatchMode):
        def __torch_dispatch__(self, func, types, args=(), kwargs=None):
            return compiled(func(*args, **(kwargs or {})))

    x = torch.ones(3)
    with Doubling():
        got = x + 1
    assert torch.equal(got, torch.full((3,), 4.0))
    assert cnt.frame_count == 1
