"""Runs tools/models/worker.py in subprocesses and survives their deaths.

`run_models(models, ...)` measures the models in one process; when that process dies (a
segfault in the tracer, a timeout), the frontend it was running is recorded as CRASH or
TIMEOUT for the model it was measuring, and a fresh process goes on with the rest (that
model's remaining frontends, then the models after it). Used by benchmarks/models.py
(one model per call) and tests/models/ (the quick subset in one call).
"""
import json
import os
import signal
import subprocess
import sys
import tempfile
from pathlib import Path

WORKER = Path(__file__).resolve().parent / "worker.py"
FRONTENDS = ("cdynamo", "dynamo")


def death(rc, stderr):
    """'CRASH (SIGSEGV)', 'TIMEOUT' or 'ERROR: <last line>' for a worker that did not finish."""
    if rc == "timeout":
        return "TIMEOUT"
    if isinstance(rc, int) and rc < 0:
        return f"CRASH ({signal.Signals(-rc).name})"
    lines = [ln for ln in (stderr or "").strip().splitlines() if ln.strip()]
    return "ERROR: " + (lines[-1] if lines else f"exit {rc}")


def spawn(models, mode, size, frontends, timeout, env=None, extra=()):
    """One worker process: ({model: result}, rc, stderr). rc is 'timeout' when it was killed."""
    fd, out = tempfile.mkstemp(suffix=".json", prefix="cdynamo-models-")
    os.close(fd)
    cmd = [sys.executable, str(WORKER), ",".join(models), "--mode", mode, "--size", size, "--frontends",
           ",".join(frontends), "--out", out, *extra]
    try:
        p = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, env=env)
        rc, err = p.returncode, p.stderr
    except subprocess.TimeoutExpired as e:
        rc = "timeout"
        err = e.stderr.decode(errors="replace") if isinstance(e.stderr, bytes) else (e.stderr or "")
    try:
        with open(out) as f:
            got = json.load(f)["models"]
    except (OSError, ValueError, KeyError):
        got = {}
    finally:
        for path in (out, out + ".tmp"):
            if os.path.exists(path):
                os.unlink(path)
    return got, rc, err


def run_models(models, mode="infer", size="full", frontends=FRONTENDS, timeout=900, env=None, extra=(), log=None):
    """{model: result} for every model; see the module docstring."""
    results = {}

    def run(models, frontends):
        got, rc, err = spawn(models, mode, size, frontends, timeout, env, extra)
        for m in models:
            if m in got:
                r = results.setdefault(m, {"model": m})
                for k, v in got[m].items():
                    if k not in FRONTENDS or k in frontends:
                        r[k] = v
        alive = rc in (0, 1)  # 1: a model raised; the worker recorded it and went on
        if alive:
            for m in models:
                if m in got and got[m].get("error") and "failure" not in results[m]:
                    last = got[m]["error"].strip().splitlines()[-1]
                    results[m]["failure"] = f"ERROR: {last[:300]} at stage {got[m].get('stage')}"
                if m not in got:  # the worker never reached it (it failed before the first model)
                    results[m] = {"model": m, "failure": death(rc, err), "stderr_tail": err[-2000:]}
            return
        started = [m for m in models if m in got]
        if not started:
            for m in models:
                results[m] = {"model": m, "failure": death(rc, err), "stderr_tail": err[-2000:]}
            return
        dead = started[-1]
        r = results[dead]
        stage = r.get("stage")
        if log:
            log(f"   {dead}: {stage} {death(rc, err)}")
        rest = models[models.index(dead) + 1:]
        if stage in frontends:
            r[stage] = {"failure": death(rc, err), "stderr_tail": err[-2000:]}
            after = list(frontends[frontends.index(stage) + 1:])
            if after:
                run([dead], after)
        else:  # it died building the model or running it eagerly
            r["failure"] = f"{death(rc, err)} at stage {stage}"
            r["stderr_tail"] = err[-2000:]
        if rest:
            run(rest, frontends)

    run(list(models), tuple(frontends))
    return results
