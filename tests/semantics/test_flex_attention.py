"""flex_attention and create_block_mask compiled.

torch.nn.attention.flex_attention's Python is traced like the program's (its input checks,
BlockMask and its constructors, create_block_mask's vmap over mask_mod under
TransformGetItemToIndex, a TorchFunctionMode the trace models). The op it ends in,
torch.ops.higher_order.flex_attention, is recorded as torch._dynamo records it: score_mod and
the block mask's mask_mod are subgraphs (score_mod_k, mask_fn_k) over 0-d stand-ins of the
score and b, h, q_idx, kv_idx, the tensors they read from outside (a bias table) lifted as
score_mod_other_buffers / mask_mod_other_buffers. Compared against eager flex_attention (the
unfused reference) and torch._dynamo's graph and op counts, first call and cache hit, and
through aot_eager (forward only: torch 2.13 has no CPU backward for flex_attention).
"""
import warnings

import pytest
import torch
import torch._dynamo.testing
from torch.nn.attention.flex_attention import create_block_mask, flex_attention

import cdynamo

B, H, S, D = 1, 2, 128, 16
BIAS = torch.randn(S, S)


def causal(b, h, q_idx, kv_idx):
    return q_idx >= kv_idx


def sliding_window(b, h, q_idx, kv_idx):
    return (q_idx >= kv_idx) & (q_idx - kv_idx <= 32)


def relative_bias(score, b, h, q_idx, kv_idx):
    return score + BIAS[q_idx, kv_idx]


def tanh_softcap(score, b, h, q_idx, kv_idx):
    return 20 * torch.tanh(score / 20)


def _with_mask(mask_mod, score_mod=None, **kw):
    def f(q, k, v):
        bm = create_block_mask(mask_mod, B, None, S, S, device="cpu")
        return flex_attention(q, k, v, score_mod=score_mod, block_mask=bm, **kw)

    return f


def _score_only(score_mod):
    def f(q, k, v):
        return flex_attention(q, k, v, score_mod=score_mod)

    return f


CASES = {
    "causal_mask": (_with_mask(causal), H),
    "sliding_window_mask": (_with_mask(sliding_window), H),
    "score_mod_reading_a_bias_table": (_score_only(relative_bias), H),
    "softcap_and_causal": (_with_mask(causal, tanh_softcap), H),
    "gqa": (_with_mask(causal, enable_gqa=True), 1),
    "return_lse": (_with_mask(causal, return_lse=True), H),
}


def _qkv(hkv, requires_grad=False):
    g = torch.Generator().manual_seed(0)
    q = torch.randn(B, H, S, D, generator=g, requires_grad=requires_grad)
    k = torch.randn(B, hkv, S, D, generator=g, requires_grad=requires_grad)
    v = torch.randn(B, hkv, S, D, generator=g, requires_grad=requires_grad)
    return q, k, v


def _eager(fn, *args):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return fn(*args)


def _summary(gm):
    calls = [str(n.target) for n in gm.graph.nodes if n.op == "call_function"]
    subs = {}
    for name, sub in gm.named_children():
        ph = [n for n in sub.graph.nodes if n.op == "placeholder"]
        # How many ops (torch._dynamo records `q >= kv` as operator.ge, we may as Tensor.ge).
        subs[name] = (len(ph), len([n for n in sub.graph.nodes if n.op in ("call_function", "call_method")]))
    return calls, subs


class Recorder:
    def __init__(self):
        self.graphs = []

    def __call__(self, gm, example_inputs):
        self.graphs.append(gm)
        return gm.forward


@pytest.mark.parametrize("which", list(CASES))
def test_flex_attention_against_eager_and_torch_dynamo(which):
    fn, hkv = CASES[which]
    args = _qkv(hkv)
    expected = _eager(fn, *args)
    ours = Recorder()
    cnt = torch._dynamo.testing.CompileCounterWithBackend(ours)
    cf = cdynamo.compile(fn, backend=cnt, fullgraph=True)
    for _ in range(2):  # the first call, then a cache hit
        torch.testing.assert_close(cf(*args), expected, atol=2e-5, rtol=2e-5)
    assert cnt.frame_count == 1
    theirs = Recorder()
    dcnt = torch._dynamo.testing.CompileCounterWithBackend(theirs)
    torch.compile(fn, backend=dcnt, fullgraph=True)(*args)
    assert dcnt.frame_count == 1
    assert cnt.op_count == dcnt.op_count
    o_calls, o_subs = _summary(ours.graphs[0])
    d_calls, d_subs = _summary(theirs.graphs[0])
    hop = torch.ops.higher_order.flex_attention
    for g in (ours.graphs[0], theirs.graphs[0]):
        assert [n.target for n in g.graph.nodes if n.op == "call_function"].count(hop) == 1
    assert o_subs == d_subs
    # AOT autograd takes the graph as it takes torch._dynamo's.
    acf = cdynamo.compile(fn, backend="aot_eager", fullgraph=True)
    torch.testing.assert_close(acf(*args), expected, atol=2e-5, rtol=2e-5)


def test_backward_on_cpu_raises_as_eagerly():
    # torch 2.13's flex_attention has no CPU backward: its input check raises, eagerly and
    # compiled; the compiled call raises the same error (the frame runs natively to raise it).
    fn, hkv = CASES["causal_mask"]
    q, k, v = _qkv(hkv, requires_grad=True)
    with pytest.raises(NotImplementedError, match="backward on CPU"):
        _eager(fn, q, k, v)
    with pytest.raises(NotImplementedError, match="backward on CPU"):
        cdynamo.compile(fn, backend="aot_eager")(q, k, v)


def test_a_block_mask_made_outside_the_compiled_function():
    bm = create_block_mask(causal, B, None, S, S, device="cpu")

    def f(q, k, v, bm):
        return flex_attention(q, k, v, block_mask=bm)

    args = _qkv(H)
    expected = _eager(f, *args, bm)
    cnt = torch._dynamo.testing.CompileCounter()
    cf = cdynamo.compile(f, backend=cnt, fullgraph=True)
    for _ in range(2):
        torch.testing.assert_close(cf(*args, bm), expected, atol=2e-5, rtol=2e-5)
    assert cnt.frame_count == 1
