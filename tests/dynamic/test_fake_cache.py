"""A symbolic trace runs its fake ops with FakeTensorMode's dispatch cache off (its entries
are keyed on the trace's fresh ShapeEnv and cost more to make than they save there; the
output-metadata memo answers the repeats), and hands the backend the mode with the cache as
torch configures it (AOT autograd's re-trace repeats calls and hits it)."""
import torch
from torch import nn

import cdynamo
from cdynamo.testing import CompileCounter


def _encoder():
    torch.manual_seed(0)
    layer = nn.TransformerEncoderLayer(16, 2, dim_feedforward=32, dropout=0.0, batch_first=True)
    return nn.TransformerEncoder(layer, num_layers=2, enable_nested_tensor=False)


def test_backend_gets_the_mode_with_its_cache_setting_and_results_equal_eager():
    m = _encoder()
    seen = []
    cnt = CompileCounter()

    def backend(gm, example_inputs):
        ctx = torch._guards.TracingContext.try_get()
        seen.append(ctx.fake_mode.cache_enabled if ctx is not None else None)
        return cnt(gm, example_inputs)

    cf = cdynamo.compile(m, backend=backend, dynamic=True)
    for n in (5, 7, 9):
        x = torch.randn(2, n, 16)
        expected = m(x)
        torch.testing.assert_close(cf(x), expected)
        torch.testing.assert_close(cf(x), expected)  # a cache hit
    assert cnt.frame_count == 1
    assert seen == [torch._dynamo.config.fake_tensor_cache_enabled]


def test_symbolic_trace_makes_no_fake_cache_entries():
    from torch._subclasses.fake_tensor import FakeTensorMode
    m = _encoder()
    cnt = CompileCounter()
    cf = cdynamo.compile(m, backend=cnt, dynamic=True)
    before = FakeTensorMode.cache_misses + FakeTensorMode.cache_hits
    x = torch.randn(2, 6, 16)
    torch.testing.assert_close(cf(x), m(x))
    assert cnt.frame_count == 1 and cnt.op_count > 10
    assert FakeTensorMode.cache_misses + FakeTensorMode.cache_hits == before


def test_aot_eager_training_through_a_symbolic_trace_matches_eager():
    m = _encoder()
    cf = cdynamo.compile(m, backend="aot_eager", dynamic=True)
    for n in (4, 6):
        x = torch.randn(2, n, 16, requires_grad=True)
        x_ref = x.detach().clone().requires_grad_(True)
        out = cf(x)
        ref = m(x_ref)
        torch.testing.assert_close(out, ref)
        g = torch.randn_like(ref)
        out.backward(g)
        ref.backward(g)
        torch.testing.assert_close(x.grad, x_ref.grad)
