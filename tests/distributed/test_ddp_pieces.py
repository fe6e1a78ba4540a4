"""The DDP graph splitter in one process: the pieces cdynamo cuts a captured graph into, for
several bucket sizes, against the pieces torch._dynamo's DDPOptimizer cuts the same graph into,
and the split module run against the whole graph (forward and gradients)."""
import pytest
import torch
import torch.distributed as dist

import cdynamo
from cdynamo._internal import ddp as _ddp

pytestmark = pytest.mark.skipif(not dist.is_available(), reason="torch.distributed is not available")


class Net(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.layers = torch.nn.ModuleList([torch.nn.Linear(256, 256) for _ in range(4)])
        self.head = torch.nn.Linear(256, 4)
        self.head.bias.requires_grad_(False)  # a frozen parameter counts for no bucket

    def forward(self, x):
        for layer in self.layers:
            x = torch.tanh(layer(x)) + x
        return self.head(x).sum(1)


def captured():
    seen = {}

    def keep(gm, example_inputs):
        seen["gm"], seen["inputs"] = gm, list(example_inputs)
        return gm.forward

    torch.manual_seed(0)
    net = Net()
    x = torch.randn(8, 256)
    cdynamo.compile(net, backend=keep, fullgraph=True)(x)
    return net, x, seen["gm"], seen["inputs"]


@pytest.mark.parametrize("cap_kb", [256, 300, 600, 2048])
def test_pieces_as_torch_dynamo_cuts_them(cap_kb):
    from torch._dynamo.backends.distributed import DDPOptimizer

    _, _, gm, inputs = captured()
    cap = cap_kb * 1024
    ours = _ddp.pieces(gm, cap, cap)
    theirs = []

    def count(g, ex):
        theirs.append(g)
        return g.forward

    # torch's splitter reads what torch._dynamo's graphs carry besides the graph.
    for n in gm.graph.find_nodes(op="placeholder"):
        n._dynamo_source = None
    gm._param_name_to_source = {}
    DDPOptimizer(bucket_bytes_cap=cap, backend_compile_fn=count, first_bucket_cap=cap).compile_fn(gm, inputs)
    assert len(ours) == len(theirs)
    if len(theirs) > 1:
        ops = [sorted(str(n.target) for n in g.graph.nodes if n.op == "call_function") for g in theirs]
        assert [sorted(str(n.target) for n in p if n.op == "call_function") for p in ours] == ops


class FakeDDP:
    def __init__(self, cap):
        self.bucket_bytes_cap = cap


def test_split_module_runs_as_the_whole_graph():
    net, x, gm, inputs = captured()
    graphs = []

    def backend(g, ex):
        graphs.append(g)
        assert all(isinstance(t, torch.Tensor) for t in ex)
        return g.forward

    split = _ddp.split_and_compile(backend, gm, inputs, FakeDDP(300 * 1024))
    assert len(graphs) > 1
    params = [p for p in inputs if isinstance(p, torch.nn.Parameter) and p.requires_grad]
    whole = gm(*inputs)[0]
    g_whole = torch.autograd.grad(whole.sum(), params)
    pieces = split(*inputs)[0]
    g_pieces = torch.autograd.grad(pieces.sum(), params)
    torch.testing.assert_close(pieces, whole)
    for a, b in zip(g_pieces, g_whole):
        torch.testing.assert_close(a, b)
    torch.testing.assert_close(whole, net(x))
