"""A short fixed-seed run of the differential fuzzer (tools/fuzz; `make fuzz` runs long ones).

In a subprocess (the fuzzer's worker isolates crashes itself, and a crash must fail this test,
not kill pytest). Any mismatch, crash or hang not listed in tools/fuzz/known.py fails it, with
the minimal program in the message."""
import json
import os
import subprocess
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def test_fuzz_fixed_seed(tmp_path):
    out = tmp_path / "fuzz"
    p = subprocess.run([sys.executable, os.path.join(ROOT, "tools", "fuzz", "run.py"), "--seed", "1", "-n", "60",
                        "--out", str(out), "--backends", "count:8,eager:2", "--timeout", "120"],
                       capture_output=True, text=True, timeout=600)
    summary = json.loads((out / "summary.json").read_text())
    assert summary["programs"] >= 60, p.stdout[-3000:] + p.stderr[-3000:]
    assert not summary["bugs"], p.stdout[-12000:]
    # Skipped programs (an eager call too slow or out of memory) are not compared; nearly all are.
    assert summary["skipped"] <= 3, summary["skipped"]
    assert p.returncode == 0, p.stdout[-3000:] + p.stderr[-3000:]
    # The grammar really reached the interpreter: graphs were compiled and hit.
    assert summary["graphs"] > 0 and summary["cache_hits"] > 0
    assert len(summary["coverage"]) > 60
