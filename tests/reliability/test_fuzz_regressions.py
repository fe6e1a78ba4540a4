"""Regression tests written from the fuzzer's minimal programs (tools/fuzz; the list with
diagnoses is kept in the fuzz bug list, F1, F2, ...). Fixed ones pass; the others are strict
xfails naming the mechanism to fix."""
import torch

import cdynamo
from cdynamo.testing import CompileCounter


def outcome(fn, *args):
    try:
        return ("ok", fn(*args))
    except Exception as e:  # noqa: BLE001
        return ("raised", type(e), str(e))


def test_no_grad_block_with_a_break_under_aot_eager_keeps_grad_mode():
    # F1: aot_eager ran the graph's _set_grad_enabled(False) while compiling and left grad mode
    # off; the new entry's grad-mode guard then rejected the frame it was built from, the frame
    # ran natively under no_grad, and grad mode stayed off after the call. Fixed in csrc/frame:
    # torch's global state is saved before a translation and restored after it.
    def f(x):
        with torch.no_grad():
            f0 = x.sum().item()
            t0 = x
        return (t0, f0)

    cf = cdynamo.compile(f, backend="aot_eager")
    x = torch.randn(4)
    got, want = cf(x), f(x)
    assert torch.equal(got[0], want[0]) and got[1] == want[1]
    assert torch.is_grad_enabled()
    assert not cdynamo.stats()["native_frames"]


def test_recursive_closure_escaping_the_trace():
    def f(x):
        def g(a):
            return g(a)
        print("break here")
        return x + 1

    def f2(x):
        def g(a):
            return g(a) if a > 0 else a
        return x + 1, g

    x = torch.ones(2)
    got = outcome(cdynamo.compile(f, backend=CompileCounter()), x)
    assert got[0] == "ok" and torch.equal(got[1], f(x)), got
    got = outcome(cdynamo.compile(f2, backend=CompileCounter()), x)
    assert got[0] == "ok" and torch.equal(got[1][0], x + 1) and got[1][1](0) == 0, got
