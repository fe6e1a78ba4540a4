"""What `make demo` runs: three programs compiled by cdynamo (inductor backend), their
captured graphs and guards, a check against eager, and per-call times next to eager and
torch.compile."""
import time

import torch
from torch import nn

import cdynamo


class MLP(nn.Module):
    def __init__(self):
        super().__init__()
        self.net = nn.Sequential(nn.Linear(32, 64), nn.GELU(), nn.LayerNorm(64), nn.Linear(64, 10))

    def forward(self, x):
        return self.net(x).softmax(dim=-1)


class CNN(nn.Module):
    def __init__(self):
        super().__init__()
        self.conv1 = nn.Conv2d(3, 16, 3, padding=1)
        self.bn1 = nn.BatchNorm2d(16)
        self.conv2 = nn.Conv2d(16, 16, 3, stride=2)
        self.head = nn.Linear(16 * 7 * 7, 10)

    def forward(self, x):
        x = torch.relu(self.bn1(self.conv1(x)))
        x = torch.relu(self.conv2(x))
        return self.head(x.flatten(1))


def gelu_mix(x, y, alpha):
    h = (x @ y).relu() + alpha * torch.tanh(x.sum(dim=-1, keepdim=True))
    return h / h.shape[-1]


def median_us(fn, args, reps=200):
    for _ in range(10):
        fn(*args)
    times = []
    for _ in range(reps):
        t0 = time.perf_counter_ns()
        fn(*args)
        times.append(time.perf_counter_ns() - t0)
    times.sort()
    return times[len(times) // 2] / 1000


def show(name, eager_fn, args):
    print(f"\n=== {name} " + "=" * (60 - len(name)))
    graphs = []

    def backend(gm, example_inputs):
        graphs.append(gm)
        from torch._inductor.compile_fx import compile_fx
        return compile_fx(gm, example_inputs)

    compiled = cdynamo.compile(eager_fn, backend=backend)
    t0 = time.perf_counter()
    out = compiled(*args)
    first = time.perf_counter() - t0
    torch.testing.assert_close(out, eager_fn(*args), rtol=1e-4, atol=1e-4)
    torch.testing.assert_close(compiled(*args), eager_fn(*args), rtol=1e-4, atol=1e-4)
    print(f"captured {len(graphs)} graph(s); first call (trace + inductor) {first:.2f} s; matches eager")
    for gm in graphs:
        print(gm.code.strip())
    for entry in cdynamo.cache_entries(eager_fn if not isinstance(eager_fn, nn.Module) else eager_fn):
        lines = entry["guards"].strip().splitlines()
        print(f"guards ({entry['num_guards']}):")
        for line in lines[:8]:
            print("   ", line)
        if len(lines) > 8:
            print(f"    ... {len(lines) - 8} more")

    ref = torch.compile(eager_fn, backend="inductor")
    ref(*args)
    e, c, r = median_us(eager_fn, args), median_us(compiled, args), median_us(ref, args)
    print(f"per call: eager {e:.1f} us | cdynamo {c:.1f} us ({c / e:.2f}x eager) | "
          f"torch.compile {r:.1f} us ({r / e:.2f}x eager)")


def data_dependent(x):
    # TorchDynamo's documentation example: the branch depends on a tensor's value.
    y = x * 2
    if y.sum() > 0:
        z = y.relu()
    else:
        z = y.tanh()
    return z + 1


def show_graph_break():
    print("\n== graph break: data-dependent branch ==")
    report = cdynamo.explain(data_dependent)(torch.randn(8))
    print("\n".join("    " + line for line in str(report).splitlines()[:12]))
    compiled = cdynamo.compile(data_dependent, backend="eager")
    for x in (torch.ones(8), -torch.ones(8)):
        assert torch.allclose(compiled(x), data_dependent(x))
    print("    results equal eager for a positive and a negative input")


def main():
    torch.manual_seed(0)
    # One intra-op thread: on a small shared machine, spinning OpenMP workers make
    # per-call timings of tiny graphs swing by orders of magnitude.
    torch.set_num_threads(1)
    with torch.no_grad():
        show("MLP (nn.Sequential inside a module)", MLP().eval(), (torch.randn(8, 32),))
        show("CNN (conv, batchnorm, linear)", CNN().eval(), (torch.randn(4, 3, 16, 16),))
        show("plain function", gelu_mix, (torch.randn(16, 16), torch.randn(16, 16), 0.5))
    show_graph_break()
    s = cdynamo.stats()
    print(f"\ncdynamo stats: {s['frames_captured']} frames captured, {s['frames_native']} native, "
          f"{s['graphs_compiled']} graphs, {s['graph_breaks']} graph breaks, {s['cache_hits']} cache hits, "
          f"{s['cache_misses']} misses")
    for nf in s["native_frames"]:
        print(f"  native: {nf['function']} at {nf['filename']}:{nf['line']}: {nf['reason']}")


if __name__ == "__main__":
    main()
