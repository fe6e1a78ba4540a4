"""Threads: compiled functions and modules called from 8 threads at once (thread_stress.py),
in a subprocess so that a crash or a deadlock fails this test instead of killing pytest."""
import os
import subprocess
import sys

HERE = os.path.dirname(os.path.abspath(__file__))


def test_eight_threads_compile_hit_reset_and_mutate_concurrently():
    # A deadlock makes faulthandler dump every thread's stack and exit (timeout, in seconds).
    p = subprocess.run([sys.executable, os.path.join(HERE, "thread_stress.py"), "150", "3", "40"],
                       capture_output=True, text=True, timeout=300)
    assert p.returncode == 0, p.stdout[-4000:] + p.stderr[-8000:]
    assert "threads: ok" in p.stdout
