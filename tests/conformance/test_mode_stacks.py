"""torch's mode stacks at the time a compiled function is called (PyTorch's test_modes.py
found two wrong results: docs/conformance.md), and autocast (their sibling, at the end).

A TorchFunctionMode entered by the caller runs its __torch_function__ on every torch call of
the frame, before a tensor subclass's own. cdynamo does not trace modes yet: an entry
compiled without one ran its graph under one (the mode never saw the traced calls; a
subclass's __torch_function__ had been inlined in the mode's place), and a frame first
called under one was traced as if it were absent. Now every entry is guarded on the mode
stack and on torch function dispatch being on, and a call under a mode the trace does not
model runs natively that once (nothing marked: outside the mode the code compiles), or,
with fullgraph=True, raises Unsupported. A torch.device context is such a mode too: it is
compiled and its devices guarded. A TorchDispatchMode makes the frame run natively, as
torch._dynamo does. Each case compares with eager on every call.
"""
import pytest
import torch
import torch._dynamo.testing
from torch.overrides import BaseTorchFunctionMode
from torch.utils._python_dispatch import TorchDispatchMode

import cdynamo
import cdynamo.testing


class AddGivesZeros(BaseTorchFunctionMode):
    def __torch_function__(self, func, types, args=(), kwargs=None):
        if func is torch.add:
            return torch.zeros(2, 2)
        return super().__torch_function__(func, types, args, kwargs or {})


class AddGivesOnes(torch.Tensor):
    @classmethod
    def __torch_function__(cls, func, types, args=(), kwargs=None):
        if func is torch.add:
            return torch.ones(2, 2)
        return super().__torch_function__(func, types, args, kwargs or {})


def plus_three_doubled(x):
    return torch.add(x, 3) * 2


def plus_three(x):
    return torch.add(x, 3)


def traced_adds(cnt):
    """How many graphs of `cnt` call torch.add: the traced frame's (the mode's own
    __torch_function__ runs with the mode off, so its frame may be compiled, without add)."""
    return sum(any(n.target is torch.add for n in gm.graph.nodes) for gm in cnt.graphs)


def native_reasons():
    return [n.get("reason", "") for n in cdynamo.stats()["native_frames"]]


@pytest.mark.parametrize("backend", ["eager", "aot_eager"])
def test_entry_compiled_without_a_mode_is_not_used_under_one(backend):
    x = torch.ones(2, 2)
    cnt = torch._dynamo.testing.CompileCounterWithBackend(backend)
    opt = cdynamo.compile(plus_three_doubled, backend=cnt)
    assert torch.equal(opt(x), plus_three_doubled(x))
    for _ in range(2):
        with AddGivesZeros():
            want = plus_three_doubled(x)
            got = opt(x)
        assert torch.equal(got, want), (got, want)
    assert traced_adds(cnt) == 1  # the frame was not compiled again under the mode
    assert any("TorchFunctionMode (AddGivesZeros)" in r for r in native_reasons())
    assert len([r for r in native_reasons() if "AddGivesZeros" in r]) == 1  # recorded once
    hits = cdynamo.stats()["cache_hits"]
    assert torch.equal(opt(x), plus_three_doubled(x))  # outside again: the first entry, a hit
    assert cdynamo.stats()["cache_hits"] == hits + 1 and traced_adds(cnt) == 1


def test_mode_outranks_a_subclass_input_and_the_code_compiles_after():
    def make():
        return (torch.ones(2, 2) + 1).as_subclass(AddGivesOnes)

    cnt = cdynamo.testing.CompileCounter()
    opt = cdynamo.compile(plus_three, backend=cnt)
    for _ in range(2):  # first call under the mode, then again
        with AddGivesZeros():
            want = plus_three(make())
            got = opt(make())
        assert torch.equal(got, want) and type(got) is type(want), (got, want)
        assert torch.equal(got, torch.zeros(2, 2))
    assert traced_adds(cnt) == 0
    # the code was not marked native: outside the mode it compiles, and the subclass decides
    before = cnt.frame_count
    got, want = opt(make()), plus_three(make())
    assert torch.equal(got, want) and torch.equal(got, torch.ones(2, 2))
    assert cnt.frame_count == before + 1


@pytest.mark.parametrize("disable", ["DisableTorchFunctionSubclass", "DisableTorchFunction"])
def test_subclass_input_with_torch_function_dispatch_disabled(disable):
    def make():
        return (torch.ones(2, 2) + 1).as_subclass(AddGivesOnes)

    cnt = cdynamo.testing.CompileCounter()
    opt = cdynamo.compile(plus_three, backend=cnt)
    assert torch.equal(opt(make()), torch.ones(2, 2))  # compiled with dispatch on
    for _ in range(2):
        with getattr(torch._C, disable)():
            want = plus_three(make())
            got = opt(make())
        assert torch.equal(got, want) and type(got) is type(want), (got, want)
        assert torch.equal(got, torch.full((2, 2), 5.0))
    assert cnt.frame_count == 1


def test_fullgraph_under_a_mode_raises_unsupported():
    opt = cdynamo.compile(plus_three_doubled, backend="eager", fullgraph=True)
    with AddGivesZeros():
        with pytest.raises(cdynamo.Unsupported, match="TorchFunctionMode"):
            opt(torch.ones(2, 2))
    assert torch.equal(opt(torch.ones(2, 2)), plus_three_doubled(torch.ones(2, 2)))


def test_device_context_is_compiled_and_guarded():
    def make_zeros(x):
        return x + torch.zeros(2, 2)

    cnt = cdynamo.testing.CompileCounter()
    opt = cdynamo.compile(make_zeros, backend=cnt)
    x = torch.ones(2, 2)
    with torch.device("cpu"):
        assert torch.equal(opt(x), make_zeros(x))
        assert torch.equal(opt(x), make_zeros(x))
    assert cnt.frame_count == 1 and cdynamo.stats()["cache_hits"] == 1
    assert torch.equal(opt(x), make_zeros(x))  # no device context: another entry
    assert cnt.frame_count == 2
    with torch.device("meta"):
        got = opt(torch.ones(2, 2, device="meta"))
    assert got.device.type == "meta" and cnt.frame_count == 3


class AddBecomesMul(TorchDispatchMode):
    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        if func is torch.ops.aten.add.Tensor:
            func = torch.ops.aten.mul.Tensor
        return func(*args, **(kwargs or {}))


class IgnoresCompileInternals(AddBecomesMul):
    @classmethod
    def ignore_compile_internals(cls):
        return True


def double(x):
    return x + x


def test_dispatch_mode_runs_the_frame_natively():
    cnt = cdynamo.testing.CompileCounter()
    opt = cdynamo.compile(double, backend=cnt)
    x = torch.tensor([3.0])
    with AddBecomesMul():
        assert torch.equal(opt(x), double(x)) and torch.equal(double(x), torch.tensor([9.0]))
    assert cnt.frame_count == 0
    assert any("TorchDispatchMode" in r for r in native_reasons())
    with IgnoresCompileInternals():  # such a mode does not stop a compile
        assert torch.equal(opt(x), double(x))
    assert cnt.frame_count == 1


# Their sibling: autocast's state was not guarded either. An entry traced under
# torch.autocast (AOT autograd bakes its casts into the graph) ran on calls outside it and
# gave bfloat16 where eager gives float32. Every entry is now guarded on autocast being off,
# or on each device's autocast state and dtype when on.
def matmul(x, w):
    return x @ w


@pytest.mark.parametrize("backend", ["eager", "aot_eager"])
def test_entry_traced_under_autocast_is_not_used_outside_it(backend):
    x, w = torch.randn(2, 2), torch.randn(2, 2)
    cnt = torch._dynamo.testing.CompileCounterWithBackend(backend)
    opt = cdynamo.compile(matmul, backend=cnt, fullgraph=True)
    for _ in range(2):
        with torch.autocast("cpu", dtype=torch.bfloat16):
            got, want = opt(x, w), matmul(x, w)
        assert got.dtype == want.dtype == torch.bfloat16 and torch.equal(got, want)
        got, want = opt(x, w), matmul(x, w)
        assert got.dtype == want.dtype == torch.float32 and torch.allclose(got, want)
        with torch.autocast("cpu", dtype=torch.float16):
            got, want = opt(x, w), matmul(x, w)
        assert got.dtype == want.dtype == torch.float16
    assert cnt.frame_count == 3  # one entry per autocast state, each hit on the second round
