"""The tracing workloads of section 3 (also used by the memory section)."""
import torch
import torch.utils.checkpoint
from torch import nn


def make_loop(n):
    def loop_add_sin(x):
        for i in range(n):
            x = x + 1
            x = torch.sin(x)
        return x
    return loop_add_sin


class LinearList(nn.Module):
    def __init__(self, n=20, width=10):
        super().__init__()
        self.layers = nn.ModuleList([nn.Linear(width, width) for _ in range(n)])

    def forward(self, x):
        for layer in self.layers:
            x = layer(x)
        return x


class Tree(nn.Module):
    """Depth d, width w: w children of depth d-1, outputs summed; leaves are Linear(8, 8)."""

    def __init__(self, depth, width):
        super().__init__()
        self.depth = depth
        if depth == 0:
            self.leaf = nn.Linear(8, 8)
        else:
            self.a = Tree(depth - 1, width)
            self.b = Tree(depth - 1, width) if width > 1 else None
            self.c = Tree(depth - 1, width) if width > 2 else None

    def forward(self, x):
        if self.depth == 0:
            return torch.relu(self.leaf(x))
        y = self.a(x)
        if self.b is not None:
            y = y + self.b(x)
        if self.c is not None:
            y = y + self.c(x)
        return y


def _chain_fns(depth):
    """c0 -> c1 -> ... -> c{depth-1}; the last one does the tensor op."""
    ns = {}
    src = [f"def c{depth - 1}(x):\n    return x * 0.5 + 1\n"]
    for i in range(depth - 2, -1, -1):
        src.append(f"def c{i}(x):\n    return c{i + 1}(x)\n")
    exec(compile("".join(src), "<benchmarks/workloads.py: chain>", "exec"), ns)
    return ns["c0"]


def make_chain(calls, depth=10):
    c0 = _chain_fns(depth)

    def call_chain(x):
        for _ in range(calls):
            x = c0(x)
        return x
    return call_chain


def make_transformer(layers=12, d_model=64, nhead=4, ff=128):
    layer = nn.TransformerEncoderLayer(d_model, nhead, dim_feedforward=ff, dropout=0.0, batch_first=True)
    return nn.TransformerEncoder(layer, num_layers=layers, enable_nested_tensor=False)


class CheckpointedEncoder(nn.Module):
    """Each layer of a TransformerEncoder under non-reentrant activation checkpointing: one
    checkpoint higher-order op per layer, whose body is traced as a subgraph."""

    def __init__(self, layers):
        super().__init__()
        self.enc = make_transformer(layers)

    def forward(self, x):
        for layer in self.enc.layers:
            x = torch.utils.checkpoint.checkpoint(layer, x, use_reentrant=False)
        return x


def tracing_workloads(quick):
    """(label, fn, args, fullgraph, note) for section 3."""
    torch.manual_seed(0)
    loop_n = 200 if quick else 1000
    chain_calls = 200 if quick else 1000
    tf_layers = 4 if quick else 12
    return [
        (f"loop: {loop_n} x (add, sin), fullgraph", make_loop(loop_n), (torch.randn(8),), True),
        ("ModuleList of 20 Linear(10, 10)", LinearList(20, 10), (torch.randn(4, 10),), False),
        ("nested modules, depth 5, width 3 (243 Linear leaves)", Tree(5, 3), (torch.randn(2, 8),), False),
        (f"{chain_calls} calls through a 10-deep function chain", make_chain(chain_calls), (torch.randn(8),), False),
        (f"{tf_layers}-layer nn.TransformerEncoder (d=64, 4 heads, ff=128, dropout=0)", make_transformer(tf_layers),
         (torch.randn(2, 16, 64),), False),
        (f"{tf_layers}-layer checkpointed nn.TransformerEncoder (each layer under checkpoint)",
         CheckpointedEncoder(tf_layers), (torch.randn(2, 16, 64, requires_grad=True),), False),
    ]


def dynamic_tracing_workloads(quick):
    """The workloads of section 3 traced with dynamic=True: symbolic sizes."""
    return [w for w in tracing_workloads(quick)
            if w[0].startswith("loop") or ("TransformerEncoder" in w[0] and "checkpointed" not in w[0])]
