"""Helpers of the conformance regressions (tests/conformance/).

Each regression is a wrong result, crash or hang that PyTorch's own TorchDynamo tests found
(docs/conformance.md), restated as a small program. ``same_as_eager`` runs a function eagerly
and then compiled by cdynamo twice (the first call compiles, the second must be a cache hit),
each time on fresh, equal arguments, and asserts what the semantic corpus asserts: the same
result (types all the way down), the same exception, the same final state of the arguments;
and that cdynamo really captured the frame (no frame ran natively, a graph per expected
frame, the second call a hit), with no more graphs than torch._dynamo needs for it.

A case that crashes or hangs the interpreter cannot be an in-process xfail: ``isolated``
runs a module-level ``case_*`` function in a fresh interpreter with a timeout and fails
(AssertionError) with the signal, the exit status or "hung", and the output tail.
"""
import json
import os
import subprocess
import sys

import torch
import torch._dynamo
import torch._dynamo.testing

import cdynamo
import cdynamo.testing
from semantics.harness import _build, _compare_outcome, _run, assert_same  # noqa: F401 (re-exported)

CURRENT = {"nodeid": None}


def dynamo_graphs(fn, make_args, calls=2, backend=None, **compile_kw):
    """How many graphs torch._dynamo compiles for `calls` calls of fn on fresh arguments."""
    torch._dynamo.reset()
    cnt = torch._dynamo.testing.CompileCounter()
    opt = torch.compile(fn, backend=cnt if backend is None else backend, **compile_kw)
    for _ in range(calls):
        a, k = _build(make_args)
        _run(opt, a, k)
    torch._dynamo.reset()
    return cnt.frame_count


def same_as_eager(fn, make_args, *, expect_graphs=None, fullgraph=False, compare_with_dynamo=True, captured=True):
    """Eager vs cdynamo (first call, then a cache hit), as the module docstring says.

    expect_graphs: graphs over both calls (default: torch._dynamo's count, at least 1). No
    graph break is expected (these cases are captured whole by torch._dynamo).
    captured=False: only the outcomes are compared (a crash regression: never crash, and give
    eager's outcome; capturing the case is tracked by the conformance list).
    """
    __tracebackhide__ = True
    ea, ek = _build(make_args)
    eager = _run(fn, ea, ek)
    cdynamo.reset()
    cnt = cdynamo.testing.CompileCounter()
    cfn = cdynamo.compile(fn, backend=cnt, fullgraph=fullgraph)
    hits = []
    for call in ("first call", "cache-hit call"):
        ga, gk = _build(make_args)
        got = _run(cfn, ga, gk)
        _compare_outcome(f"compiled ({call})", eager, (ea, ek), got, (ga, gk))
        hits.append(cdynamo.stats()["cache_hits"])
    if not captured:
        return cnt
    st = cdynamo.stats()
    assert st["frames_native"] == 0, f"a frame ran natively: {[n.get('reason') for n in st['native_frames']]}"
    assert st["graph_breaks"] == 0, f"graph breaks: {[b.get('reason') for b in st['graph_break_reasons']]}"
    assert hits[1] > hits[0], "the second call was not a cache hit"
    if expect_graphs is None:
        expect_graphs = max(1, dynamo_graphs(fn, make_args)) if compare_with_dynamo else 1
    assert cnt.frame_count == expect_graphs, f"cdynamo compiled {cnt.frame_count} graphs, expected {expect_graphs}"
    return cnt


_RUNNER = r"""
import faulthandler, importlib, json, os, select, signal, sys, time, traceback
sys.path[:0] = [SRC, TESTS]
m = importlib.import_module(MODULE)  # torch and cdynamo are imported once; every case runs in a fork
results = {}
for name in sorted(n for n in dir(m) if n.startswith("case_")):
    r, w = os.pipe()
    pid = os.fork()
    if pid == 0:
        os.close(r)
        os.dup2(w, 1)
        os.dup2(w, 2)
        faulthandler.enable()
        try:
            getattr(m, name)()
            print("CASE PASSED", flush=True)
            code = 0
        except BaseException:
            traceback.print_exc()
            code = 1
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(code)
    os.close(w)
    out, deadline, hung = b"", time.monotonic() + TIMEOUT, False
    while True:
        left = deadline - time.monotonic()
        if left <= 0:
            hung = True
            os.kill(pid, signal.SIGKILL)
            break
        ready, _, _ = select.select([r], [], [], left)
        if ready:
            chunk = os.read(r, 65536)
            if not chunk:
                break
            out += chunk
    os.close(r)
    _, status = os.waitpid(pid, 0)
    text = out.decode(errors="replace")[-3000:]
    if hung:
        results[name] = ("hung", text)
    elif os.WIFSIGNALED(status):
        results[name] = (f"killed by signal {os.WTERMSIG(status)}", text)
    elif os.WEXITSTATUS(status) != 0 or "CASE PASSED" not in text:
        results[name] = (f"exit status {os.WEXITSTATUS(status)}", text)
    else:
        results[name] = ("passed", text)
print("\nRESULTS " + json.dumps(results))
"""
_ISOLATED = {}  # module -> {case: (status, output tail)}


def isolated(module, case, timeout=60):
    """Runs `module`.`case`() away from pytest's process; AssertionError unless it passes.

    All ``case_*`` functions of a module are run by one helper interpreter, each in a fork of
    it (torch is imported once), with `timeout` seconds each: a segfault, an abort or a hang
    costs that case only.
    """
    __tracebackhide__ = True
    if module not in _ISOLATED:
        tests_dir = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
        src_dir = os.path.dirname(os.path.dirname(os.path.abspath(cdynamo.__file__)))
        script = (f"SRC, TESTS, MODULE, TIMEOUT = {src_dir!r}, {tests_dir!r}, {module!r}, {timeout!r}\n" + _RUNNER)
        r = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, errors="replace",
                           env=dict(os.environ, OMP_NUM_THREADS="1"))
        marker = r.stdout.rfind("RESULTS ")
        if marker < 0:
            raise AssertionError(f"the runner of {module} failed (exit status {r.returncode}):\n"
                                 f"{(r.stdout + r.stderr)[-3000:]}")
        _ISOLATED[module] = json.loads(r.stdout[marker + len("RESULTS "):])
    status, out = _ISOLATED[module][case]
    if status != "passed":
        raise AssertionError(f"{case}, run in a separate process, failed ({status}):\n{out}")
