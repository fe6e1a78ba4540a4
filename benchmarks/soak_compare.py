"""Live allocator blocks (sys.getallocatedblocks) and tracemalloc growth a compile/reset
cycle of soak_memory.py's f and g, cdynamo against torch._dynamo (benchmarks/RESULTS.md,
"The ~220 B a cycle is tracemalloc's own"):

    .venv/bin/python benchmarks/soak_compare.py cdynamo|dynamo tm|no
"""
import collections
import gc
import os
import sys
import tracemalloc

import torch
import torch._dynamo

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
sys.path.insert(0, os.path.join(HERE, "..", "src"))
import cdynamo  # noqa: E402
from cdynamo import _events  # noqa: E402
from soak_memory import f, g  # noqa: E402

_events.records = collections.deque(maxlen=150)
torch.set_num_threads(1)
which, traced = sys.argv[1], sys.argv[2] == "tm"
x, y = torch.ones(8), torch.ones(8)
def cycle(i):
    if which == "cdynamo":
        c1 = cdynamo.compile(f, backend="eager"); c2 = cdynamo.compile(g, backend="eager")
    else:
        c1 = torch.compile(f, backend="eager"); c2 = torch.compile(g, backend="eager")
    c1(x, y, i % 3); c2(x if i % 2 else -x)
    (cdynamo.reset if which == "cdynamo" else torch._dynamo.reset)()
if traced: tracemalloc.start()
for i in range(100): cycle(i)
gc.collect(); b0 = sys.getallocatedblocks(); t0 = tracemalloc.get_traced_memory()[0] if traced else 0
N = 300
for i in range(N): cycle(i)
gc.collect(); b1 = sys.getallocatedblocks(); t1 = tracemalloc.get_traced_memory()[0] if traced else 0
ec = len(torch.fx.graph_module._loader.eval_cache)
print("%-14s %-14s blocks/cycle %6.2f  tracemalloc B/cycle %7.1f  fx eval_cache entries %d" % (which, "tracemalloc" if traced else "no tracemalloc", (b1-b0)/N, (t1-t0)/N, ec))
