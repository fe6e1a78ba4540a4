"""One rank of the DDP tests (tests/distributed/test_ddp.py starts two, on gloo over 127.0.0.1).

usage: ddp_worker.py RANK WORLD PORT OUT
First three SGD steps of the same model under eager DDP, DDP compiled by cdynamo and DDP
compiled by torch._dynamo (each with a counting backend); the graph counts and whether the
parameters equal eager's go to OUT (JSON). Then the same training compiled by cdynamo
again, where rank 1's backend raises: that rank must fail with the backend's reason and the
other rank must not wait for it. A failure prints its reason and exits with status 3 at once
(no process-group teardown, which would wait for the other rank). One process per rank does
both parts: starting a process that imports torch is most of the test's time."""
import datetime
import json
import os
import sys
import traceback

import torch
import torch.distributed as dist
import torch.nn.functional as F
from torch.nn.parallel import DistributedDataParallel as DDP

import cdynamo


class Net(torch.nn.Module):
    # About 1 MB of parameters in each of the two middle layers: with 1 MB buckets (c10d's
    # first-bucket size, so torch._dynamo's splitter accepts it) the graph has pieces. A class
    # of the program's (torch._dynamo compiles no frame of torch.nn's own containers).
    def __init__(self):
        super().__init__()
        self.inp = torch.nn.Linear(64, 512)
        self.mid = torch.nn.ModuleList([torch.nn.Linear(512, 512), torch.nn.Linear(512, 512)])
        self.out = torch.nn.Linear(512, 8)

    def forward(self, x):
        x = torch.relu(self.inp(x))
        for layer in self.mid:
            x = torch.relu(layer(x))
        return self.out(x)


def model():
    torch.manual_seed(0)
    return Net()


class Counter:
    def __init__(self, fail=False):
        self.graphs = 0
        self.fail = fail

    def __call__(self, gm, example_inputs):
        if self.fail:
            raise RuntimeError("this rank's backend cannot compile the graph")
        self.graphs += 1
        return gm.forward


def train(rank, world, wrap):
    m = model()
    ddp = DDP(m, bucket_cap_mb=1)
    opt = torch.optim.SGD(m.parameters(), lr=0.05)
    step = wrap(ddp)
    for i in range(3):
        g = torch.Generator().manual_seed(100 + 10 * i + rank)
        x = torch.randn(16, 64, generator=g)
        y = torch.randn(16, 8, generator=g)
        loss = F.mse_loss(step(x), y)
        opt.zero_grad()
        loss.backward()
        opt.step()
    return [p.detach().clone() for p in m.parameters()]


def main():
    rank, world, port, out = int(sys.argv[1]), int(sys.argv[2]), sys.argv[3], sys.argv[4]
    dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{port}", rank=rank, world_size=world,
                            timeout=datetime.timedelta(seconds=20))
    eager = train(rank, world, lambda ddp: ddp)
    ours = Counter()
    compiled = train(rank, world, lambda ddp: cdynamo.compile(ddp, backend=ours))
    theirs = Counter()
    reference = train(rank, world, lambda ddp: torch.compile(ddp, backend=theirs))
    result = {
        "cdynamo_graphs": ours.graphs,
        "dynamo_graphs": theirs.graphs,
        "cdynamo_equal": all(torch.allclose(a, b, atol=1e-6) for a, b in zip(eager, compiled)),
        "dynamo_equal": all(torch.allclose(a, b, atol=1e-6) for a, b in zip(eager, reference)),
        "native_frames": cdynamo.stats()["native_frames"],
    }
    with open(out, "w") as f:
        json.dump(result, f, default=str)
    dist.barrier()
    cdynamo.reset()
    failing = Counter(fail=rank == 1)
    train(rank, world, lambda ddp: cdynamo.compile(ddp, backend=failing))
    print("trained although rank 1 could not compile", flush=True)
    os._exit(0)


if __name__ == "__main__":
    try:
        main()
    except BaseException:
        traceback.print_exc()
        sys.stderr.flush()
        os._exit(3)
