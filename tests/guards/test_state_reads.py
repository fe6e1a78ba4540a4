"""The torch state every entry is guarded on (torch function dispatch, the TorchFunctionMode
stack, autocast, the default dtype) is read in C++ on a hit; a read that does not confirm
the traced answer falls back to torch's own query. These tests change each state between
calls and compare with eager on the first call and on hits, and count the graphs: a state
the entry was not traced under never runs it, and the original state hits again."""
import torch

import cdynamo
from cdynamo.testing import CompileCounter


def _factory_add(x):
    # A factory without a dtype: its dtype is baked into the graph from the default dtype.
    return x + torch.ones(2), torch.arange(2) * 0.5


def _compiled(fn):
    cnt = CompileCounter()
    return cdynamo.compile(fn, backend=cnt), cnt


def _same(got, want):
    for g, w in zip(got, want):
        assert g.dtype == w.dtype, (g.dtype, w.dtype)
        torch.testing.assert_close(g, w)


def test_default_dtype_read_on_the_hit_tells_entries_apart():
    cf, cnt = _compiled(_factory_add)
    x = torch.zeros(2, dtype=torch.float64)
    prev = torch.get_default_dtype()
    try:
        for dtype in (torch.float32, torch.float32, torch.float64, torch.float64, torch.bfloat16, torch.float32):
            torch.set_default_dtype(dtype)
            _same(cf(x), _factory_add(x))
    finally:
        torch.set_default_dtype(prev)
    assert cnt.frame_count == 3  # float32, float64, bfloat16; each later call of one hits


def test_autocast_on_is_not_the_entry_traced_without_it():
    def f(x, w):
        return x @ w

    cf, cnt = _compiled(f)
    x, w = torch.randn(4, 4), torch.randn(4, 4)
    torch.testing.assert_close(cf(x, w), f(x, w))
    torch.testing.assert_close(cf(x, w), f(x, w))
    assert cnt.frame_count == 1
    with torch.autocast("cpu", dtype=torch.bfloat16):
        got, want = cf(x, w), f(x, w)
        assert got.dtype == want.dtype == torch.bfloat16
        torch.testing.assert_close(got, want)
        got = cf(x, w)
        assert got.dtype == torch.bfloat16
    assert cnt.frame_count == 2
    got = cf(x, w)  # autocast off again: the first entry, float32
    assert got.dtype == torch.float32
    torch.testing.assert_close(got, f(x, w))
    assert cnt.frame_count == 2


class _Tagged(torch.Tensor):
    @classmethod
    def __torch_function__(cls, func, types, args=(), kwargs=None):
        return super().__torch_function__(func, types, args, kwargs or {})


def test_torch_function_dispatch_disabled_does_not_run_the_entry():
    def f(x):
        return x * 2 + 1

    cf, cnt = _compiled(f)
    x = torch.randn(3)
    torch.testing.assert_close(cf(x), f(x))
    torch.testing.assert_close(cf(x), f(x))
    assert cnt.frame_count == 1
    with torch._C.DisableTorchFunctionSubclass():
        torch.testing.assert_close(cf(x), f(x))
        torch.testing.assert_close(cf(x), f(x))
    with torch._C.DisableTorchFunction():
        torch.testing.assert_close(cf(x), f(x))
    torch.testing.assert_close(cf(x), f(x))
    # Tracing under disabled dispatch is not modelled: those calls ran natively, and the
    # enabled state hits the one entry again.
    assert cnt.frame_count == 1


def test_a_device_mode_pushed_is_not_the_entry_traced_without_it():
    def f(x):
        return x + torch.ones(3)

    cf, cnt = _compiled(f)
    x = torch.randn(3)
    torch.testing.assert_close(cf(x), f(x))
    with torch.device("cpu"):  # a TorchFunctionMode: the stack is one deep
        torch.testing.assert_close(cf(x), f(x))
        torch.testing.assert_close(cf(x), f(x))
    n = cnt.frame_count
    assert n == 2
    torch.testing.assert_close(cf(x), f(x))
    assert cnt.frame_count == n
