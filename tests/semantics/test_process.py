"""A process that compiled and ran something exits cleanly (no abort at interpreter finalization)."""
import subprocess
import sys

SCRIPT = """
import torch, cdynamo
g = cdynamo.compile(lambda x: x + 1, backend=cdynamo.testing.CompileCounter())
assert g(torch.ones(2)).tolist() == [2.0, 2.0]
assert g(torch.ones(2)).tolist() == [2.0, 2.0]
print("ok")
"""


def test_interpreter_exits_cleanly_with_live_cache_entries():
    p = subprocess.run([sys.executable, "-c", SCRIPT], capture_output=True, text=True, timeout=120)
    assert p.returncode == 0 and p.stdout.strip() == "ok", (p.returncode, p.stdout[-500:], p.stderr[-1500:])
