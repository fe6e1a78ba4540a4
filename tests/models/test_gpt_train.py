"""A small GPT trained for three steps, compiled end to end.

Blocks are checkpointed (torch.utils.checkpoint, use_reentrant=False), attention is
flex_attention with a causal block mask made in the forward, and AdamW's step is compiled
too. Through aot_eager the losses and the parameters after each step equal eager's, and
cdynamo compiles no more graphs than torch._dynamo does for the same program (with the
default that a frame without ops is not compiled, as torch._dynamo skips it).

torch 2.13's flex_attention has no backward on CPU (its input check raises, eagerly and
compiled), so training with it needs a GPU; on CPU the same model trains with causal
scaled_dot_product_attention, and its flex_attention forward is checked without gradients.
"""
import pytest
import copy
import warnings

import torch
import torch._dynamo.testing
import torch.nn as nn
import torch.nn.functional as F
from torch.nn.attention.flex_attention import create_block_mask, flex_attention
from torch.utils.checkpoint import checkpoint

import cdynamo

VOCAB, D, HEADS, LAYERS, SEQ, BATCH = 64, 32, 2, 2, 128, 2


def causal(b, h, q_idx, kv_idx):
    return q_idx >= kv_idx


class Attention(nn.Module):
    def __init__(self, flex):
        super().__init__()
        self.flex = flex
        self.qkv = nn.Linear(D, 3 * D)
        self.proj = nn.Linear(D, D)

    def forward(self, x, block_mask):
        b, s, _ = x.shape
        q, k, v = self.qkv(x).view(b, s, 3, HEADS, D // HEADS).permute(2, 0, 3, 1, 4).unbind(0)
        if self.flex:
            y = flex_attention(q, k, v, block_mask=block_mask)
        else:
            y = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        return self.proj(y.transpose(1, 2).reshape(b, s, D))


class Block(nn.Module):
    def __init__(self, flex):
        super().__init__()
        self.ln1 = nn.LayerNorm(D)
        self.attn = Attention(flex)
        self.ln2 = nn.LayerNorm(D)
        self.mlp = nn.Sequential(nn.Linear(D, 4 * D), nn.GELU(), nn.Linear(4 * D, D))

    def forward(self, x, block_mask):
        x = x + self.attn(self.ln1(x), block_mask)
        return x + self.mlp(self.ln2(x))


class GPT(nn.Module):
    def __init__(self, flex=True):
        super().__init__()
        self.flex = flex
        self.tok = nn.Embedding(VOCAB, D)
        self.pos = nn.Parameter(torch.randn(SEQ, D) * 0.02)
        self.blocks = nn.ModuleList(Block(flex) for _ in range(LAYERS))
        self.ln = nn.LayerNorm(D)
        self.head = nn.Linear(D, VOCAB, bias=False)

    def forward(self, idx, targets):
        block_mask = create_block_mask(causal, None, None, SEQ, SEQ, device=idx.device) if self.flex else None
        x = self.tok(idx) + self.pos
        for blk in self.blocks:
            x = checkpoint(blk, x, block_mask, use_reentrant=False) if self.training else blk(x, block_mask)
        logits = self.head(self.ln(x))
        return F.cross_entropy(logits.view(-1, VOCAB), targets.view(-1))


def _data(device="cpu"):
    g = torch.Generator().manual_seed(1)
    return [tuple(torch.randint(0, VOCAB, (BATCH, SEQ), generator=g).to(device) for _ in range(2)) for _ in range(3)]


def _train(opt, forward, step, data):
    losses = []
    for idx, targets in data:
        loss = forward(idx, targets)
        loss.backward()
        step()
        opt.zero_grad()
        losses.append(loss.detach())
    return losses


def _run(base, data, compile_fn=None, counter=None):
    model = copy.deepcopy(base)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-2)
    if compile_fn is None:
        return _train(opt, model, opt.step, data), model
    return _train(opt, compile_fn(model, counter), compile_fn(opt.step, counter), data), model


@pytest.mark.parametrize("attention", ["flex", "sdpa"])
def test_gpt_trains_like_eager(attention, dynamo_skips_empty_frames):
    flex = attention == "flex"
    if flex and not torch.cuda.is_available():
        pytest.skip("flex_attention has no backward on CPU in torch 2.13")
    device = "cuda" if flex else "cpu"
    data = _data(device)
    torch.manual_seed(0)
    base = GPT(flex).to(device)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        eager_losses, eager_model = _run(base, data)
        dcnt = torch._dynamo.testing.CompileCounterWithBackend("aot_eager")
        _run(base, data, lambda f, c: torch.compile(f, backend=c), dcnt)
        cnt = torch._dynamo.testing.CompileCounterWithBackend("aot_eager")
        losses, model = _run(base, data, lambda f, c: cdynamo.compile(f, backend=c), cnt)
    for a, b in zip(losses, eager_losses):
        torch.testing.assert_close(a, b, atol=1e-5, rtol=1e-5)
    # The key projection's bias has no gradient in exact arithmetic (softmax ignores a shift
    # of every score of a row); AdamW normalizes its float noise into steps of up to lr, so
    # that one differs by ~2e-4 from eager for torch._dynamo too. Everything else is ~1e-6.
    for (name, p), (_, q) in zip(model.named_parameters(), eager_model.named_parameters()):
        tol = 1e-3 if name.endswith("qkv.bias") else 1e-5
        torch.testing.assert_close(p, q, atol=tol, rtol=1e-5, msg=lambda m: f"{name}: {m}")
    # The steps did change the parameters (the compiled update ran, on the real tensors).
    assert not torch.equal(model.head.weight, base.head.weight)
    # The model's forward and the optimizer's update are compiled (not run natively).
    assert cnt.frame_count >= 2
    assert cnt.frame_count <= dcnt.frame_count


def test_gpt_forward_with_flex_attention_without_gradients(dynamo_skips_empty_frames):
    data = _data()
    torch.manual_seed(0)
    model = GPT(flex=True).eval()
    with torch.no_grad(), warnings.catch_warnings():
        warnings.simplefilter("ignore")
        expected = [model(i, t) for i, t in data]
        dcnt = torch._dynamo.testing.CompileCounterWithBackend("aot_eager")
        dm = torch.compile(model, backend=dcnt)
        for i, t in data:
            dm(i, t)
        cnt = torch._dynamo.testing.CompileCounterWithBackend("aot_eager")
        cm = cdynamo.compile(model, backend=cnt)
        got = [cm(i, t) for i, t in data]  # the first call, then cache hits
    for a, b in zip(got, expected):
        torch.testing.assert_close(a, b, atol=1e-5, rtol=1e-5)
    assert cnt.frame_count == 1 <= dcnt.frame_count
    assert cdynamo.stats()["cache_hits"] >= 2
