"""The graph-break corpus harness: one function run eagerly, by cdynamo, and by torch._dynamo.

``check_breaks(fn, make_args, ...)`` is the counterpart of tests/semantics/harness.py's
``check`` for functions that cannot be captured whole. It reuses that harness's comparison
(``assert_same``, ``_compare_outcome``: values, types, exceptions, aliasing, argument state)
and adds what a graph break changes:

- ``make_args`` is a factory (called after ``torch.manual_seed(0)``) or a list of factories,
  one per call (e.g. a positive then a negative input, to take the other branch on a later
  call). With a single factory the function is called ``calls`` times (default 2).
- Eager runs every call first, then cdynamo runs the same calls with fresh arguments (and a
  fresh ``world``); after *each* call the outcome (result or exception), the arguments' state,
  the identities among them (one list reachable twice stays one list, a returned argument is
  the argument), the ``world`` snapshot, everything printed to stdout and torch's global state
  (grad mode...) must equal eager's after the same call. Printing is the simplest effect
  outside the program that a natively run instruction has, so stdout is compared exactly.
- ``shared_args=True`` builds the arguments (and resets ``world``) once and calls the function
  repeatedly on the same objects, so state accumulates over the calls (a counter on an
  object, a list that grows); each call's state is compared with eager's after that call.
- Graphs: ``expect_graphs`` (if not None) is the exact CompileCounter.frame_count after all
  calls. A call whose factory was already used by an earlier call must be a cache hit all
  the way through (no new cache miss), unless ``shared_args`` (guarded state changes).
- Breaks: by default the case must really break (``stats()["graph_breaks"] > 0``);
  ``expect_breaks=N`` asks for exactly N, ``expect_breaks=0`` for none (the "without a break"
  variants of the side-effect corpus). ``reason`` (a substring, or a list of substrings) must
  each appear in some ``stats()["graph_break_reasons"]`` reason.
- Native frames: none may run natively unless ``allow_native`` lists substrings, one of which
  every native frame's reason must contain (a helper made of an unsupported instruction runs
  natively after its caller broke at its CALL).
- Reference: unless CDYNAMO_SEMANTICS_DYNAMO=0, ``torch.compile(fn, backend=CompileCounter())``
  runs the same calls; when it reproduces eager's outcomes and compiled every frame it met
  (counters["frames"] total == ok) and put at least as many ops in graphs as cdynamo did,
  cdynamo must not have used more graphs than it did. It is skipped where cdynamo used at most
  one graph (nothing to do with fewer), and runs a repeated call once.
- A case that crashes the interpreter cannot be an in-process xfail: ``run_case`` runs one
  marked ``isolate=True`` in a subprocess (``python -X dev``) and fails with the signal.
"""
import contextlib
import copy
import io
import os
import random
import types
from collections import deque

import pytest
import torch
import torch._dynamo
import torch._dynamo.testing
import torch._dynamo.utils

import cdynamo
import cdynamo.testing
# The semantic corpus's argument factories and comparisons, shared. (Its _build also resets a
# `world` while one of its own checks runs; outside them it only seeds and builds.)
from semantics.harness import (Call, _build, _compare_outcome, assert_same, global_state, restore_global_state,
                               tensors, with_args)

__all__ = ["Call", "check_breaks", "run_case", "Cases", "tensors", "with_args", "snapshot_copy", "RECORDS"]

RECORDS = []
CURRENT = {"nodeid": None}
_DYNAMO_REFERENCE = os.environ.get("CDYNAMO_SEMANTICS_DYNAMO", "1") != "0"


# ----------------------------------------------------------------------------- shared by the case files

# Break reasons (substrings of cdynamo's reasons).
BRANCH = "data-dependent"
ITEM = "Tensor.item()"
PRINT = "print() has effects outside the program"
DISABLED = "wrapped by cdynamo.disable"


def positive():
    """make_args: one tensor of 4 positive values (a branch on its sign goes one way)..."""
    return (torch.rand(4) + 0.5,)


def negative():
    """...and one of 4 negative values (the other way)."""
    return (-torch.rand(4) - 0.5,)


def random_world(seed):
    """A `world` for cases that use the random module: seeded before each call, its state compared after."""
    return (lambda: random.seed(seed), lambda: {"state": list(random.getstate()[1][:8])})


def _call(fn, args, kwargs):
    """Runs one call; returns (outcome, stdout, torch global state after it)."""
    buf = io.StringIO()
    with contextlib.redirect_stdout(buf):
        try:
            out = ("ok", fn(*args, **kwargs))
        except Exception as e:  # noqa: BLE001 - the exception is the result being compared
            out = ("raised", e)
    return out, buf.getvalue(), global_state()


def _clone(o, memo):
    """A deep copy that keeps identities (memo) and copies tensors that deepcopy refuses (non-leaf)."""
    if isinstance(o, (int, float, complex, bool, str, bytes, type(None), range, slice, type,
                      torch.dtype, torch.device, torch.Size, BaseException)) or callable(o) and not hasattr(o, "__dict__"):
        return o
    if id(o) in memo:
        return memo[id(o)][1]
    if isinstance(o, torch.Tensor):
        c = o.detach().clone()
        if o.requires_grad:
            c.requires_grad_(True)
    elif isinstance(o, torch.nn.Module):
        try:
            c = copy.deepcopy(o)
        except Exception:  # noqa: BLE001 - non-leaf tensors stored on the module: compare live
            c = o
    elif type(o) is list:
        c = []
        memo[id(o)] = (o, c)
        c.extend(_clone(v, memo) for v in o)
    elif type(o) is tuple:
        c = tuple(_clone(v, memo) for v in o)
    elif isinstance(o, tuple) and hasattr(o, "_fields"):
        c = type(o)(*(_clone(v, memo) for v in o))
    elif isinstance(o, dict):
        c = copy.copy(o)
        c.clear()
        memo[id(o)] = (o, c)
        for k, v in o.items():
            c[k] = _clone(v, memo)
    elif isinstance(o, (set, frozenset)):
        c = copy.copy(o)
    elif isinstance(o, deque):
        c = deque((_clone(v, memo) for v in o), maxlen=o.maxlen)
    elif hasattr(o, "__dict__") and not isinstance(o, types.ModuleType) and not callable(o):
        c = copy.copy(o)
        memo[id(o)] = (o, c)
        c.__dict__ = {k: _clone(v, memo) for k, v in vars(o).items()}
    else:
        try:
            c = copy.deepcopy(o)
        except Exception:  # noqa: BLE001
            c = o
    memo[id(o)] = (o, c)
    return c


def snapshot_copy(obj):
    """A deep copy for world snapshots (keeps aliasing; copies non-leaf tensors too)."""
    return _clone(obj, {})


def _snapshot(outcome, args, kwargs):
    """A copy of (result, arguments) taken together, so aliasing between them survives."""
    kind, value = outcome
    memo = {}
    args, kwargs = _clone(list(args), memo), _clone(dict(kwargs), memo)
    if kind == "ok":
        value = _clone(value, memo)
    return (kind, value), (args, kwargs)


def _run_all(fn, factories, shared_args, world):
    """Calls fn once per factory; returns per-call (outcome, (args, kwargs), stdout, gstate, world)."""
    reset, snap = world if world is not None else (None, None)
    before = global_state()
    results = []
    shared = None
    try:
        for i, mk in enumerate(factories):
            if not shared_args or i == 0:
                if reset is not None:
                    reset()
                shared = _build(mk)
            args, kwargs = shared
            out, printed, gstate = _call(fn, args, kwargs)
            restore_global_state(before)
            outcome, state = _snapshot(out, args, kwargs)
            results.append((outcome, state, printed, gstate, _clone(snap(), {}) if snap else None))
    finally:
        restore_global_state(before)
    return results


def _alias_pattern(root):
    """Which mutable objects reachable from `root` are the same object, as first-occurrence indices
    in a fixed traversal order (lists, tuples, dict values, instance __dict__ values, tensors)."""
    seen, pattern = {}, []

    def walk(o, depth):
        if depth > 30 or isinstance(o, (int, float, complex, bool, str, bytes, type(None), type, range, slice,
                                        torch.dtype, torch.device, torch.Size, BaseException, types.ModuleType)) \
                or callable(o) and not isinstance(o, torch.nn.Module):
            return
        if id(o) in seen:
            pattern.append(seen[id(o)])
            return
        seen[id(o)] = len(seen)
        pattern.append(-1)
        if isinstance(o, (list, tuple, deque)):
            for v in o:
                walk(v, depth + 1)
        elif isinstance(o, dict):
            for v in o.values():
                walk(v, depth + 1)
        elif isinstance(o, (set, frozenset, torch.Tensor, torch.nn.Module)):
            return
        elif hasattr(o, "__dict__"):
            for v in vars(o).values():
                walk(v, depth + 1)

    walk(root, 0)
    return pattern


def _reasons(st):
    return [r.get("reason", "") for r in st.get("graph_break_reasons", [])]


def _report(st):
    lines = ["cdynamo graph breaks:"]
    lines += [f"  {r.get('function')} line {r.get('line')}: {r.get('reason')}" for r in st.get("graph_break_reasons", [])] or ["  (none)"]
    lines.append("cdynamo native frames:")
    lines += [f"  {nf.get('function')} at {nf.get('filename')}:{nf.get('line')}: {nf.get('reason')}"
              for nf in st.get("native_frames", [])] or ["  (none)"]
    return "\n".join(lines)


def _dynamo_reference(fn, factories, shared_args, world, eager):
    torch._dynamo.reset()
    torch._dynamo.utils.counters.clear()
    dcnt = torch._dynamo.testing.CompileCounter()
    rec = {"graphs": None, "ops": None, "frames_total": 0, "frames_ok": 0, "error": None, "break_reasons": []}
    try:
        got = _run_all(torch.compile(fn, backend=dcnt), factories, shared_args, world)
        for i, (e, g) in enumerate(zip(eager, got)):
            try:
                _compare_outcome(f"torch._dynamo (call {i + 1})", e[0], e[1], g[0], g[1])
                if e[2] != g[2]:
                    raise AssertionError(f"torch._dynamo (call {i + 1}) printed {g[2]!r:.200}, eager {e[2]!r:.200}")
            except AssertionError as err:
                rec["error"] = str(err)[:300]
                break
        rec["graphs"], rec["ops"] = dcnt.frame_count, dcnt.op_count
        c = torch._dynamo.utils.counters
        frames = dict(c.get("frames", {}))
        rec["frames_total"], rec["frames_ok"] = frames.get("total", 0), frames.get("ok", 0)
        rec["break_reasons"] = [str(r).strip().splitlines()[0][:200] for r in c.get("graph_break", {}).keys()]
    except Exception as e:  # noqa: BLE001
        rec["error"] = f"{type(e).__name__}: {str(e)[:300]}"
    finally:
        torch._dynamo.reset()
    return rec


def _dedupe(factories):
    """The calls up to the last first use of a factory, then one repeat of each (cache hits)."""
    last_new = max(factories.index(mk) for mk in factories)
    out = list(factories[:last_new + 1])
    for mk in factories[last_new + 1:]:
        if out.count(mk) < 2:
            out.append(mk)
    return out


def check_breaks(fn, make_args, *, calls=2, expect_graphs=None, expect_breaks=None, reason=None,
                 allow_native=None, shared_args=False, world=None, dynamo_reference=True):
    """Run fn eagerly, under cdynamo and under torch._dynamo; see the module docstring."""
    __tracebackhide__ = True
    factories = list(make_args) if isinstance(make_args, (list, tuple)) else [make_args] * calls
    rec = {"nodeid": CURRENT["nodeid"], "expect_graphs": expect_graphs, "cdynamo_graphs": None,
           "graph_breaks": None, "dynamo": None, "compared_with_dynamo": False}
    RECORDS.append(rec)

    eager = _run_all(fn, factories, shared_args, world)

    cdynamo.reset()
    cnt = cdynamo.testing.CompileCounter()
    cfn = cdynamo.compile(fn, backend=cnt)
    reset, snap = world if world is not None else (None, None)
    before = global_state()
    problems = []
    seen = []
    shared = None
    for i, mk in enumerate(factories):
        tag = f"cdynamo (call {i + 1} of {len(factories)})"
        if not shared_args or i == 0:
            if reset is not None:
                reset()
            shared = _build(mk)
        args, kwargs = shared
        st_before = cdynamo.stats()
        out, printed, gstate = _call(cfn, args, kwargs)
        restore_global_state(before)
        st_after = cdynamo.stats()
        outcome, state = _snapshot(out, args, kwargs)
        e_outcome, e_state, e_printed, e_gstate, e_world = eager[i]
        try:
            _compare_outcome(tag, e_outcome, e_state, outcome, state)
            # Identity inside the result and between it and the arguments' contents (two names for
            # one list must stay one list), on the snapshots, which keep identities.
            ep = _alias_pattern((e_outcome[1] if e_outcome[0] == "ok" else None, e_state))
            gp = _alias_pattern((outcome[1] if outcome[0] == "ok" else None, state))
            if ep != gp:
                raise AssertionError(f"{tag}: WRONG RESULT: objects that are one object in eager are distinct (or the "
                                     f"reverse) in the result and the arguments: identity pattern {gp} != eager {ep}")
            if printed != e_printed:
                raise AssertionError(f"{tag}: WRONG OUTPUT on stdout: {printed!r:.500}, eager printed {e_printed!r:.500}")
            if gstate != e_gstate:
                raise AssertionError(f"{tag}: WRONG GLOBAL STATE after the call: {gstate}, eager left {e_gstate}")
            if snap is not None:
                try:
                    assert_same(e_world, snap(), "globals")
                except AssertionError as err:
                    raise AssertionError(f"{tag}: WRONG FINAL STATE of globals: {err}") from None
        except AssertionError as err:
            problems.append(str(err))
            break
        if mk in seen and not shared_args and st_after["cache_misses"] != st_before["cache_misses"]:
            problems.append(f"{tag}: same inputs as an earlier call, but not a cache hit all the way through "
                            f"(cache misses {st_before['cache_misses']} -> {st_after['cache_misses']}, "
                            f"recompiles {st_before['recompiles']} -> {st_after['recompiles']})")
        seen.append(mk)
    restore_global_state(before)
    st = cdynamo.stats()
    rec["cdynamo_graphs"] = cnt.frame_count
    rec["graph_breaks"] = st["graph_breaks"]
    rec["cdynamo_ops"] = cnt.op_count
    if not problems:
        if allow_native is None:
            if st["frames_native"]:
                problems.append(f"{st['frames_native']} frame(s) ran natively (expected every frame captured)")
        else:
            subs = [allow_native] if isinstance(allow_native, str) else list(allow_native)
            for nf in st["native_frames"]:
                if not any(s in (nf.get("reason") or "") for s in subs):
                    problems.append(f"a frame ran natively for an unexpected reason: {nf.get('reason')}")
        if expect_graphs is not None and cnt.frame_count != expect_graphs:
            problems.append(f"CompileCounter.frame_count == {cnt.frame_count} after {len(factories)} calls, "
                            f"expected {expect_graphs}")
        if expect_breaks is None:
            if st["graph_breaks"] < 1:
                problems.append("no graph break happened (stats()['graph_breaks'] == 0): "
                                "the case would pass without breaking")
        elif st["graph_breaks"] != expect_breaks:
            problems.append(f"stats()['graph_breaks'] == {st['graph_breaks']}, expected {expect_breaks}")
        for sub in ([reason] if isinstance(reason, str) else list(reason or [])):
            if not any(sub in r for r in _reasons(st)):
                problems.append(f"no graph break reason contains {sub!r}")
    # With at most one graph there is nothing torch._dynamo could do with fewer (zero graphs would
    # mean fewer ops, which is not the same capture), so the reference run is skipped.
    if not problems and dynamo_reference and _DYNAMO_REFERENCE and cnt.frame_count > 1:
        # A call repeating an earlier call's inputs compiled nothing in cdynamo (asserted above):
        # torch._dynamo runs each distinct call once more at most, which can only lower its count.
        ref_calls = factories if shared_args else _dedupe(factories)
        d = _dynamo_reference(fn, ref_calls, shared_args, world, eager[:len(ref_calls)] if shared_args
                              else [eager[factories.index(mk)] for mk in ref_calls])
        rec["dynamo"] = d
        # Compared only where torch._dynamo captured the same program: eager's outcomes, every frame
        # it met compiled, and at least the ops cdynamo put in graphs (fewer means it ran some eagerly).
        if d["error"] is None and d["frames_total"] == d["frames_ok"] and d["graphs"] is not None \
                and d["ops"] >= cnt.op_count:
            rec["compared_with_dynamo"] = True
            if cnt.frame_count > d["graphs"]:
                problems.append(f"cdynamo compiled {cnt.frame_count} graphs, torch._dynamo only {d['graphs']} "
                                f"(dynamo breaks: {d['break_reasons'][:3]})")
    if problems:
        raise AssertionError("\n".join(problems) + f"\n(stats: { {k: v for k, v in st.items() if k not in ('native_frames', 'graph_break_reasons')} })\n"
                             + _report(st))


_INPROCESS = "CDYNAMO_BREAKS_INPROCESS"


def run_case(fn, make_args, kw, *, module, collection, case_id):
    """Runs one corpus case; one marked ``isolate`` (it crashes the interpreter) runs in a subprocess.

    A crash cannot be an xfail in-process (it takes pytest down), so such a case re-runs itself in
    a fresh interpreter and fails with the signal and the output tail if that one does not exit 0.
    """
    __tracebackhide__ = True
    kw = dict(kw)
    isolate = kw.pop("isolate", False)
    if not isolate or os.environ.get(_INPROCESS):
        check_breaks(fn, make_args, **kw)
        return
    import subprocess
    import sys
    tests_dir = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    src_dir = os.path.dirname(os.path.dirname(os.path.abspath(cdynamo.__file__)))
    script = (f"import sys; sys.path[:0] = [{src_dir!r}, {tests_dir!r}]\n"
              f"import {module} as m\n"
              f"from graph_breaks.harness import run_case\n"
              f"(p,) = [p for p in m.{collection} if p.id == {case_id!r}]\n"
              f"fn, make_args, kw = p.values\n"
              f"run_case(fn, make_args, dict(kw, dynamo_reference=False), module=None, collection=None, case_id=None)\n"
              f"print('CASE PASSED')\n")
    env = dict(os.environ, **{_INPROCESS: "1"})
    r = subprocess.run([sys.executable, "-X", "dev", "-c", script], env=env, capture_output=True, text=True, errors="replace",
                       timeout=120)
    if r.returncode != 0 or "CASE PASSED" not in r.stdout:
        how = f"killed by signal {-r.returncode}" if r.returncode < 0 else f"exit status {r.returncode}"
        raise AssertionError(f"the case, run in a subprocess, failed ({how}):\n{(r.stdout + r.stderr)[-3000:]}")


class Cases:
    """Collects cases for pytest.mark.parametrize: ``@cases(make_args, **check_breaks_kwargs)``.

    ``xfail="reason"`` marks a case that fails because cdynamo is wrong (strict: it must fail).
    """

    def __init__(self):
        self.params = []

    def __call__(self, make_args, *, xfail=None, dynamo_only=False, **kw):
        """``isolate=True``: the case crashes the interpreter; run_case runs it in a subprocess.
        ``dynamo_only=True``: the case fails only against torch._dynamo's graph count, so it is
        skipped when the reference runs are off (CDYNAMO_SEMANTICS_DYNAMO=0)."""
        def deco(fn):
            marks = [pytest.mark.xfail(strict=True, reason=xfail)] if xfail else []
            if dynamo_only:
                marks.append(pytest.mark.skipif(not _DYNAMO_REFERENCE, reason="compares with torch._dynamo, "
                                                "whose reference runs are off (CDYNAMO_SEMANTICS_DYNAMO=0)"))
            self.params.append(pytest.param(fn, make_args, kw, id=fn.__name__, marks=marks))
            return fn
        return deco
