"""A DDP module compiled by cdynamo, on two processes (gloo over 127.0.0.1; ddp_worker.py): its
graph is split at DDP's bucket boundaries as torch._dynamo's (same graph count with the same
buckets), three SGD steps end with the parameters of eager DDP, and a rank whose backend fails
makes both ranks fail fast, the failing one with the reason."""
import json
import os
import socket
import subprocess
import sys
import time

import pytest
import torch.distributed as dist

pytestmark = pytest.mark.skipif(not (dist.is_available() and dist.is_gloo_available()),
                                reason="torch.distributed with gloo is not available")

WORKER = os.path.join(os.path.dirname(__file__), "ddp_worker.py")


def _free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _run(tmp_path, timeout=60):
    port = str(_free_port())
    env = dict(os.environ)
    src = os.path.join(os.path.dirname(__file__), "..", "..", "src")
    env["PYTHONPATH"] = os.pathsep.join([os.path.abspath(src), env.get("PYTHONPATH", "")])
    env["OMP_NUM_THREADS"] = "1"
    procs, outs = [], []
    for rank in range(2):
        out = tmp_path / f"rank{rank}.json"
        outs.append(out)
        procs.append(subprocess.Popen([sys.executable, WORKER, str(rank), "2", port, str(out)],
                                      env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True))
    start = time.monotonic()
    results = []
    try:
        for p in procs:
            _, err = p.communicate(timeout=max(1, timeout - (time.monotonic() - start)))
            results.append((p.returncode, err))
    finally:
        for p in procs:
            if p.poll() is None:
                p.kill()
    return results, outs, time.monotonic() - start


def test_ddp_graph_split_training_and_a_failing_rank(tmp_path):
    results, outs, elapsed = _run(tmp_path)
    for out, (_, err) in zip(outs, results):
        assert out.exists(), err[-3000:]
        r = json.loads(out.read_text())
        assert r["cdynamo_equal"] and r["dynamo_equal"]  # parameters after 3 steps equal eager DDP's
        assert r["native_frames"] == []  # the module's forward was captured
        assert r["cdynamo_graphs"] == r["dynamo_graphs"] > 1  # split at the buckets, as torch._dynamo splits
    # Then rank 1's backend fails: it stops with the reason, and rank 0, whose gradient
    # all-reduce has no partner any more, stops with an error instead of waiting.
    (rc0, err0), (rc1, err1) = results
    assert rc1 == 3 and "this rank's backend cannot compile the graph" in err1, err1[-3000:]
    assert rc0 == 3, err0[-3000:]
    assert elapsed < 55
