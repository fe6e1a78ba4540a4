"""The break code runs the breaking instruction once (Note [The break code's first pass] in
csrc/bytecode/resume.cpp). When that instruction raises and a handler of the frame catches
the exception, the rest of the frame runs natively in the break code; a loop can then bring
it back to the breaking instruction, which must go on as the original code does instead of
calling the continuation with the stack the trace had (found with tuple comparisons that
raise: `out.append(a == b)` in a loop "called" the list out). Each case is compared with
eager on a first call and a cache hit."""
import pytest
import torch

import cdynamo
from cdynamo.testing import CompileCounter


class Swallow:
    def __enter__(self):
        return self

    def __exit__(self, *exc):
        return True


def append_of_a_comparison_that_raises_in_a_loop(x):
    y = x + 1
    out = []
    for a in [(x, 1), [x, 1], (1, 1)]:
        try:
            out.append(a == (2,))  # (x, 1) == (2,) compares x == 2: ambiguous, raises
        except RuntimeError:
            out.append("raised")
    return y, out


def item_in_a_context_manager_that_swallows(x):
    y = x * 2
    out = []
    for t in [x, x[:1], x[1:]]:
        with Swallow():
            out.append(t.item())  # raises for 2 elements, swallowed
    return y, out


def data_dependent_branch_that_raises_in_a_loop(x):
    y = x - 1
    out = []
    for t in [x, x[:1], x]:
        try:
            if t:  # ambiguous for 2 elements
                out.append(1)
            else:
                out.append(0)
        except RuntimeError:
            out.append(2)
    return y, out


def method_call_after_a_handler_in_a_while_loop(x):
    y = x + 3
    out = []
    i = 0
    while i < 3:
        i += 1
        try:
            out.append(bool(x[:i]))
        except RuntimeError:
            out.append(-i)
    return y, out


@pytest.mark.parametrize("fn", [append_of_a_comparison_that_raises_in_a_loop, item_in_a_context_manager_that_swallows,
                                data_dependent_branch_that_raises_in_a_loop,
                                method_call_after_a_handler_in_a_while_loop], ids=lambda f: f.__name__)
@pytest.mark.parametrize("fill", [1.0, 0.0])
def test_breaking_instruction_reached_again_after_a_handler(fn, fill):
    cnt = CompileCounter()
    cf = cdynamo.compile(fn, backend=cnt)
    for _ in range(2):  # the first call compiles, the second hits
        x = torch.full((2,), fill)
        got, want = cf(x), fn(x)
        assert torch.equal(got[0], want[0]) and got[1] == want[1], (got, want)
    if fn is item_in_a_context_manager_that_swallows:
        # A break inside the block of a context manager the program defines runs the frame
        # natively, as torch._dynamo does: only the outcome is compared.
        reasons = [nf.get("reason", "") for nf in cdynamo.stats()["native_frames"]]
        assert any("context manager the program defines" in r for r in reasons), reasons
        return
    assert cnt.frame_count >= 1  # the graph before the break (and a resume function's)
    assert cdynamo.stats()["cache_hits"] >= 1
