"""Graph breaks in frames with structure: cells shared with closures, zero-argument
super() in a root frame, grad mode across a break, a `with no_grad()` block re-entered by
the resume function, try/finally, recursion, and a loop that breaks on every iteration
(continuations keep the stack flat). Each compares with eager on the first call and a hit."""
import torch

import cdynamo
from cdynamo.testing import CompileCounter


def _same(a, b):
    if isinstance(a, torch.Tensor):
        return isinstance(b, torch.Tensor) and a.requires_grad == b.requires_grad and torch.allclose(a, b)
    if isinstance(a, (list, tuple)):
        return type(a) is type(b) and len(a) == len(b) and all(_same(p, q) for p, q in zip(a, b))
    return a == b


def _check(fn, *args, graphs, breaks):
    cnt = CompileCounter()
    cf = cdynamo.compile(fn, backend=cnt)
    expected = fn(*args)
    for _ in range(2):
        assert _same(expected, cf(*args))
    s = cdynamo.stats()
    assert s["native_frames"] == []
    assert (cnt.frame_count, s["graph_breaks"]) == (graphs, breaks)
    return cnt


def test_cells_shared_with_a_closure_made_before_the_break():
    def f(x):
        y = x + 1
        g = lambda: y * 2  # noqa: E731
        print(end="")
        y = y * 10  # the closure sees the new value
        return g() + x

    _check(f, torch.ones(2), graphs=2, breaks=1)


def test_argument_captured_by_an_inner_function():
    def f(x, w):
        def inner(a):
            return a * w

        y = inner(x)
        print(end="")
        w = w + 1
        return inner(y)

    _check(f, torch.ones(2), torch.full((2,), 3.0), graphs=2, breaks=1)


def test_closure_appending_to_a_captured_list():
    def f(x):
        acc = []

        def push(v):
            acc.append(v)

        push(x + 1)
        print(end="")
        push(x * 2)
        return acc

    _check(f, torch.ones(2), graphs=2, breaks=1)


class Base(torch.nn.Module):
    def forward(self, x):
        print(end="")
        return x + 1


class Child(Base):
    def forward(self, x):
        x = x * 2  # self not read before super(): the root argument is loaded for it
        x = super().forward(x)
        return x - 1


def test_zero_argument_super_in_a_root_frame_then_a_break_in_the_parent_method():
    _check(Child(), torch.ones(3), graphs=3, breaks=2)  # x * 2 | x + 1 | x - 1


def test_grad_mode_set_before_a_break_holds_after_it():
    def f(x):
        torch.set_grad_enabled(False)
        y = x * 2
        print(end="")
        z = y * 3
        torch.set_grad_enabled(True)
        return z, z.requires_grad, (x * 1).requires_grad

    _check(f, torch.ones(3, requires_grad=True), graphs=2, breaks=1)


def test_no_grad_block_continues_in_the_resume_function():
    def f(x):
        with torch.no_grad():
            y = x + 1
            print(end="")
            z = y * 2
        return z, (x * 2).requires_grad

    cnt = _check(f, torch.ones(2, requires_grad=True), graphs=2, breaks=1)
    assert torch.is_grad_enabled()
    assert cnt.frame_count == 2


def test_exception_after_a_break_caught_by_an_outer_handler_through_finally():
    def f(x):
        try:
            try:
                x = x + 1
                print(end="")
                raise KeyError("k")
            finally:
                x = x * 2
        except KeyError:
            x = x - 1
        return x

    _check(f, torch.ones(3), graphs=2, breaks=1)


def test_recursion_through_breaks():
    def rec(x, n):
        if n == 0:
            return x
        print(end="")
        return rec(x + 1, n - 1) * 2

    cf = cdynamo.compile(rec, backend="eager")
    assert torch.equal(cf(torch.ones(3), 3), rec(torch.ones(3), 3))
    assert cdynamo.stats()["native_frames"] == []


def test_a_loop_breaking_every_iteration_runs_in_constant_stack_depth():
    def f(x):
        while x.sum() < 3000:  # more iterations than the recursion limit allows frames
            x = x + 1
        return x

    cnt = CompileCounter()
    cf = cdynamo.compile(f, backend=cnt)
    assert torch.equal(cf(torch.zeros(2)), f(torch.zeros(2)))
    s = cdynamo.stats()
    # The frame up to the condition, and one resume function (the loop body up to the
    # condition again), hit 1499 times.
    assert cnt.frame_count == 2 and s["graph_breaks"] == 2 and s["cache_hits"] >= 1499


def test_tensor_version_counter_is_the_real_one():
    # A fake's version counter starts at 0 for an input; the real one counts every in-place
    # change, before the call too. Reading it breaks the graph and gives eager's answer.
    def f(x):
        y = x * 2
        y.relu_()
        return y + y._version + x._version

    cnt = CompileCounter()
    cf = cdynamo.compile(f, backend=cnt)
    x = torch.randn(4)
    for _ in range(3):
        x.add_(1)  # a new version every call
        assert torch.allclose(cf(x), f(x))
    reasons = [b["reason"] for b in cdynamo.stats()["graph_break_reasons"]]
    assert any("Tensor._version" in r for r in reasons)
    assert cdynamo.stats()["native_frames"] == []
