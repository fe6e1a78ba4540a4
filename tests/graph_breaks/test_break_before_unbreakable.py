"""A graph break where the failing instruction cannot itself run natively as a break: a
BEFORE_WITH whose context's __enter__ the trace cannot follow, a FOR_ITER whose iterator's
__next__ it cannot step. The graph of what came before is kept, and the frame goes on at that
instruction in a resume function, which runs natively when its own trace stops at the same
place (as torch._dynamo compiles the partial graph and jumps into the original bytecode).
Before, the whole frame ran natively. Each case is compared with eager (outcome, state,
printed output) on the first call and a cache hit, with the exact graph count and reason."""
import os

import pytest
import torch

import cdynamo

from .harness import Cases, check_breaks, tensors

cases = Cases()
T4 = tensors((4,))
GETPID = "getpid"  # the reason names the C function the trace does not model
RESUMED_NATIVELY = ["getpid", "no op traced"]


class EntersWithAProcessCall:
    """A context whose __enter__ calls a C function the trace does not model."""

    def __enter__(self):
        self.pid = os.getpid()
        return self

    def __exit__(self, *exc):
        return False


class StepsNatively:
    """An iterator whose __next__ the trace must not enter (cdynamo.disable)."""

    def __init__(self, n):
        self.i, self.n = 0, n

    def __iter__(self):
        return self

    @cdynamo.disable
    def __next__(self):
        if self.i >= self.n:
            raise StopIteration
        self.i += 1
        return self.i


@cases(T4, expect_graphs=1, reason=GETPID, allow_native=RESUMED_NATIVELY)
def ops_then_an_unenterable_with(x):
    y = x.sin() * 2
    with EntersWithAProcessCall() as c:
        y = y + 1
        print("inside", c.pid > 0)
    return y.cos()


@cases(T4, expect_graphs=1, reason="cdynamo.disable", allow_native=["FOR_ITER", "no op traced"])
def ops_then_an_unsteppable_for(x):
    y = x.relu() + 3
    for i in StepsNatively(3):
        y = y * i
    return y - 1


@cases(T4, expect_graphs=1, reason=GETPID, allow_native=RESUMED_NATIVELY)
def unenterable_with_inside_try(x):
    y = x - 1
    try:
        with EntersWithAProcessCall():
            y = y / 0.5
            raise ValueError("from the block")
    except ValueError as e:
        y = y + len(str(e))
    return y


@cases(T4, expect_graphs=1, reason=GETPID, allow_native=RESUMED_NATIVELY)
def unenterable_with_inside_a_loop(x):
    out = []
    for k in range(3):
        x = x + k
        with EntersWithAProcessCall():
            out.append(k)
    return x, out


@cases(T4, expect_graphs=0, reason=None,
       allow_native=["cannot break the graph at BEFORE_WITH", "getpid"])
def unenterable_with_before_any_op(x):
    # Nothing to keep before it: the frame runs natively, as before.
    with EntersWithAProcessCall():
        y = x * 2
    return y


@pytest.mark.parametrize("fn,make_args,kw", cases.params)
def test_break_before_unbreakable(fn, make_args, kw):
    check_breaks(fn, make_args, **kw)


def test_fullgraph_still_refuses():
    cdynamo.reset()
    with pytest.raises(cdynamo.Unsupported, match="getpid"):
        cdynamo.compile(ops_then_an_unenterable_with, fullgraph=True)(torch.randn(4))
