"""Shared helpers of the benchmark harness: timing, interleaving, correctness and capture checks.

Every figure compares cdynamo and torch._dynamo in one process, on the same function with
the same backend. Timings use time.perf_counter_ns; candidates are run in interleaved
rounds (the order rotates every round) and the median over rounds is reported.
"""
import gc
import os
import platform
import statistics
import sys
import time

import torch
import torch._dynamo

import cdynamo


# ----------------------------------------------------------------------------- backends

def forward_backend(gm, example_inputs):
    """The frontend-only backend: run the captured graph as it is (only the frontend is measured)."""
    return gm.forward


class CountingBackend:
    """Counts graphs and call nodes; returns gm.forward (the same for both frontends)."""

    def __init__(self, keep=False, time_graphs=False, replay=False, record_calls=False):
        self.graphs = 0
        self.ops = 0
        self.keep = keep
        self.compiled = []   # with keep: (gm.forward, example_inputs) per graph, for graph-only baselines
        # With time_graphs: the backend returns a wrapper of gm.forward that adds the time spent
        # running the graph to graph_ns, so a first call's frontend time can be told apart from
        # the graph's own run (the same graph for both frontends, but its cost swings with load).
        self.time_graphs = time_graphs
        self.graph_ns = 0
        # With replay: the graph runs once, on the example inputs, when it is compiled, and the
        # compiled function hands back that result on every call. Calls with those same inputs
        # then cost the frontend's own work (guards, argument gathering, dispatch, outputs) plus
        # a near-free function call, which a graph of several hundred microseconds would
        # otherwise bury in its own run-to-run noise (section 2's module stack).
        self.replay = replay
        # With record_calls (and keep): a symbolic graph's example inputs are SymInts and fakes,
        # so the graph-only baseline calls it with the real inputs of its first calls instead
        # (sizes as ints, tensors), through the same recording wrapper the frontend calls, so
        # the wrapper's cost cancels out of "frontend - its graph".
        self.record_calls = record_calls
        self.calls = []  # per kept graph: the real argument tuples of its first calls

    def __call__(self, gm, example_inputs):
        self.graphs += 1
        self.ops += sum(1 for n in gm.graph.nodes if n.op.startswith("call"))
        if self.replay:
            result = gm.forward(*example_inputs)

            def compiled(*args):
                return result
        else:
            compiled = gm.forward
        if self.keep:
            ex = list(example_inputs)
            real = all(type(e) in (torch.Tensor, torch.nn.Parameter) for e in ex)
            calls = []
            if self.record_calls and not real:
                inner = compiled

                def compiled(*args, _f=inner, _calls=calls):
                    if len(_calls) < 64:
                        _calls.append(args)
                    return _f(*args)
            self.compiled.append((compiled, ex if real else None))
            self.calls.append(calls)
        if self.time_graphs:
            forward, backend = gm.forward, self

            def timed_forward(*args):
                t0 = time.perf_counter_ns()
                try:
                    return forward(*args)
                finally:
                    backend.graph_ns += time.perf_counter_ns() - t0
            return timed_forward
        return compiled

    def graph_loop(self, which):
        """A callable running the kept graphs `which` directly on their example inputs (or None)."""
        sel = [self.compiled[i] for i in which]
        if not sel or any(ex is None for _, ex in sel):
            return None
        plan = [(f, tuple(ex)) for f, ex in sel]
        if len(plan) == 1:
            f, ex = plan[0]
            return lambda: f(*ex)

        def run():
            for f, ex in plan:
                f(*ex)
        return run

    def dynamic_graph_loop(self, which):
        """For one symbolic graph serving every argument set: a callable running it on the real
        inputs it was first called with for the sets `which` (call i = set i), or None."""
        if len(self.compiled) != 1 or not self.record_calls:
            return None
        f, calls = self.compiled[0][0], self.calls[0]
        if len(calls) <= max(which):
            return None
        plan = [calls[i] for i in which]
        if len(plan) == 1:
            (a,) = plan
            return lambda: f(*a)

        def run():
            for a in plan:
                f(*a)
        return run


# ----------------------------------------------------------------------------- set-up

def configure(cache_limit=64):
    """Same rules for both frontends: static shapes, a cache limit large enough for the runs."""
    cdynamo.config.cache_size_limit = cache_limit
    cdynamo.reset()
    cfg = torch._dynamo.config
    if hasattr(cfg, "recompile_limit"):
        cfg.recompile_limit = cache_limit
    else:  # older torch
        cfg.cache_size_limit = cache_limit
    # Static shapes unless a workload asks for dynamic=True; cdynamo.config.automatic_dynamic_shapes
    # is None, so cdynamo follows this setting too: like with like.
    cfg.automatic_dynamic_shapes = False
    torch._dynamo.reset()


def reset_all():
    cdynamo.reset()
    torch._dynamo.reset()


def warm_up():
    """One trivial trace in each frontend, so that lazy imports are not billed to a workload."""
    def f(x):
        return torch.sin(x) + 1
    x = torch.randn(3)
    for _ in range(2):
        reset_all()
        cdynamo.compile(f, backend=forward_backend)(x)
        torch.compile(f, backend=forward_backend, dynamic=False)(x)
    reset_all()


def compile_both(fn, backend=forward_backend, fullgraph=False):
    """(cdynamo-compiled, torch._dynamo-compiled) versions of fn (function or module)."""
    c = cdynamo.compile(fn, backend=backend, fullgraph=fullgraph)
    d = torch.compile(fn, backend=backend, fullgraph=fullgraph, dynamic=False)
    return c, d


# ----------------------------------------------------------------------------- checks

def assert_same(actual, expected, what):
    """Outputs must equal eager's (exact structure; values allclose with tight tolerances)."""
    try:
        torch.testing.assert_close(actual, expected, rtol=1e-5, atol=1e-6, equal_nan=True)
    except Exception as e:  # noqa: BLE001 - report with context
        raise AssertionError(f"{what}: output differs from eager: {e}") from None
    a = actual if isinstance(actual, (tuple, list)) else (actual,)
    b = expected if isinstance(expected, (tuple, list)) else (expected,)
    for x, y in zip(a, b):
        if isinstance(x, torch.Tensor) and x.requires_grad != y.requires_grad:
            raise AssertionError(f"{what}: requires_grad {x.requires_grad} != eager's {y.requires_grad}")


class CaptureCheck:
    """Did cdynamo capture the workload (rather than run a frame natively)?

    Use: ``cc = CaptureCheck()`` right after cdynamo.reset() and before the first call;
    ``cc.result()`` afterwards -> (captured: bool, reason: str).
    """

    def result(self, min_graphs=1):
        s = cdynamo.stats()
        native = s.get("native_frames") or []
        if native:
            nf = native[0]
            where = f"{os.path.basename(str(nf.get('filename', '?')))}:{nf.get('line', '?')}"
            more = f" (+{len(native) - 1} more)" if len(native) > 1 else ""
            return False, f"{nf.get('function', '?')} at {where}: {nf.get('reason', '?')}{more}"
        if s.get("graphs_compiled", 0) < min_graphs:
            return False, f"no graph compiled (stats: {short_stats(s)})"
        return True, ""


def short_stats(s):
    keys = ("frames_seen", "frames_captured", "frames_native", "graphs_compiled", "cache_hits",
            "cache_misses", "recompiles", "cache_entries")
    return ", ".join(f"{k}={s.get(k)}" for k in keys)


def reason_cell(reason, limit=140):
    r = " ".join(str(reason).split()).replace("|", "\\|")
    return r if len(r) <= limit else r[: limit - 3] + "..."


# ----------------------------------------------------------------------------- timing

def time_loop_ns(fn, inner):
    """Per-call time (ns) of `inner` back-to-back calls of fn()."""
    t0 = time.perf_counter_ns()
    for _ in range(inner):
        fn()
    return (time.perf_counter_ns() - t0) / inner


def interleaved(cands, rounds, inner, warmup=3):
    """Median per-call ns of each candidate over `rounds` interleaved rounds.

    cands: dict name -> zero-argument callable. In every round each candidate runs `inner`
    calls; the order of the candidates rotates from round to round. GC is disabled during
    a round (enabled between rounds) so a collection does not land on one candidate.
    """
    names = list(cands)
    for name in names:  # warm-up (caches, branch predictors, allocator)
        for _ in range(warmup):
            cands[name]()
    samples = {n: [] for n in names}
    for r in range(rounds):
        order = names[r % len(names):] + names[: r % len(names)]
        gc.disable()
        try:
            for n in order:
                samples[n].append(time_loop_ns(cands[n], inner))
        finally:
            gc.enable()
    return {n: statistics.median(v) for n, v in samples.items()}, samples


def calibrate_inner(fn, target_ns=2_000_000, lo=1, hi=20000):
    """How many calls make a round of about target_ns."""
    t = max(time_loop_ns(fn, 5), 1.0)
    return int(min(hi, max(lo, target_ns // t)))


def timed_ns(fn):
    t0 = time.perf_counter_ns()
    out = fn()
    return time.perf_counter_ns() - t0, out


# ----------------------------------------------------------------------------- formatting

def us(ns):
    return f"{ns / 1e3:.2f}"


def ms(ns):
    return f"{ns / 1e6:.1f}"


def ratio(a, b):
    """a / b as 'N.NNx', guarding against zero/negative denominators."""
    if b is None or a is None:
        return "n/a"
    if b <= 0:
        return "inf" if a > 0 else "n/a"
    return f"{a / b:.2f}x"


def table(header, rows):
    out = ["| " + " | ".join(header) + " |", "|" + "|".join("---" for _ in header) + "|"]
    for r in rows:
        out.append("| " + " | ".join(str(c) for c in r) + " |")
    return "\n".join(out)


def machine_info():
    cpu = platform.processor() or "?"
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    cpu = line.split(":", 1)[1].strip()
                    break
    except OSError:
        pass
    return {
        "nproc": os.cpu_count(),
        "cpu": cpu,
        "python": sys.version.split()[0],
        "torch": torch.__version__,
        "torch_threads": torch.get_num_threads(),
        "cdynamo": getattr(cdynamo, "__version__", "?"),
        "platform": platform.platform(),
    }


def log(*a):
    print(*a, flush=True)


class Section:
    """What a section hands back to run.py: markdown, and target verdicts."""

    def __init__(self, title):
        self.title = title
        self.parts = []      # markdown blocks
        self.targets = []    # (target, measured, met: True/False/None, note)
        self.notes = []      # bugs / observations

    def add(self, md):
        self.parts.append(md)

    def target(self, name, measured, met, note=""):
        self.targets.append((name, measured, met, note))

    def markdown(self):
        return f"## {self.title}\n\n" + "\n\n".join(self.parts) + "\n"


# ----------------------------------------------------------------------------- cache-hit timing

def measure_hits(label, fn, arg_sets, rounds, target_ns, ctx=None, fullgraph=False, timed=None, replay=False,
                 dynamic=False, own_graph=False):
    """Cache-hit time per call of eager fn, cdynamo and torch._dynamo (same backend).

    arg_sets: list of argument tuples, each compiled (in order) into its own cache entry;
    `timed` (indices into arg_sets, default all) are the sets each timed call-loop goes
    through, so with several sets every call differs from the previous one.
    Before timing: outputs of both frontends are checked against eager on every set (first
    call and a cache hit), cdynamo's capture is checked through stats(), and afterwards it
    is checked that no frontend compiled anything during the timed loops (hits only).
    Returns a dict (eager/cdynamo/dynamo[/graph_c/graph_d] ns per call, or captured=False
    with a reason). With replay, both frontends' backend is CountingBackend(replay=True): the
    graphs run once when compiled (results checked against eager as always) and the hits
    cost the frontends' own work only.
    """
    import contextlib

    ctx = ctx or contextlib.nullcontext
    timed = list(range(len(arg_sets))) if timed is None else list(timed)
    reset_all()
    # own_graph (dynamic=True, one symbolic entry): the graph-only baseline runs the one graph
    # on the real inputs of each set (CountingBackend.record_calls).
    cb_c = CountingBackend(keep=True, replay=replay, record_calls=own_graph)
    cb_d = CountingBackend(keep=True, replay=replay, record_calls=own_graph)
    # Both frontends with the same `dynamic` (False: one entry per argument set, as the
    # sections were written; True: one symbolic entry).
    c = cdynamo.compile(fn, backend=cb_c, fullgraph=fullgraph, dynamic=dynamic)
    d = torch.compile(fn, backend=cb_d, fullgraph=fullgraph, dynamic=dynamic)
    res = {"label": label}
    with ctx():
        expected = [fn(*a) for a in arg_sets]
        cc = CaptureCheck()
        try:
            for _ in range(2):  # miss, then hit
                for a, e in zip(arg_sets, expected):
                    assert_same(c(*a), e, f"{label} [cdynamo]")
        except AssertionError:
            raise
        except Exception as e:  # noqa: BLE001 - a crash of cdynamo is a result to report
            res.update(captured=False, reason=f"cdynamo raised {type(e).__name__}: {e}")
            return res
        ok, reason = cc.result(min_graphs=1 if dynamic else len(arg_sets))
        if not ok:
            res.update(captured=False, reason=reason)
            return res
        for _ in range(2):
            for a, e in zip(arg_sets, expected):
                assert_same(d(*a), e, f"{label} [torch._dynamo]")
        g_c, g_d = cb_c.graphs, cb_d.graphs
        misses = cdynamo.stats()["cache_misses"]

        sets = [arg_sets[i] for i in timed]
        n = len(sets)
        if n == 1:
            a = sets[0]
            if len(a) == 1:
                (x,) = a
                cands = {"eager": lambda: fn(x), "cdynamo": lambda: c(x), "dynamo": lambda: d(x)}
            else:
                cands = {"eager": lambda: fn(*a), "cdynamo": lambda: c(*a), "dynamo": lambda: d(*a)}
        else:
            def loop(f):
                def run():
                    for a in sets:
                        f(*a)
                return run
            cands = {"eager": loop(fn), "cdynamo": loop(c), "dynamo": loop(d)}
        # Graph-only baselines: each frontend's captured graph(s) called directly on the example
        # inputs; frontend minus its graph = guard evaluation + argument gathering + dispatch.
        if len(cb_c.compiled) == len(arg_sets) and len(cb_d.compiled) == len(arg_sets):
            gc_, gd_ = cb_c.graph_loop(timed), cb_d.graph_loop(timed)
            if gc_ is not None and gd_ is not None:
                cands["graph_c"], cands["graph_d"] = gc_, gd_
        elif own_graph:
            gc_, gd_ = cb_c.dynamic_graph_loop(timed), cb_d.dynamic_graph_loop(timed)
            if gc_ is not None and gd_ is not None:
                cands["graph_c"], cands["graph_d"] = gc_, gd_
        inner = calibrate_inner(cands["dynamo"], target_ns)
        med, _ = interleaved(cands, rounds, inner)
        med = {k: v / n for k, v in med.items()}
    s = cdynamo.stats()
    if s["cache_misses"] != misses or cb_c.graphs != g_c:
        raise AssertionError(f"{label}: cdynamo recompiled during the timed loop ({short_stats(s)})")
    if cb_d.graphs != g_d:
        raise AssertionError(f"{label}: torch._dynamo recompiled during the timed loop")
    res.update(captured=True, graphs_c=g_c, graphs_d=g_d, inner=inner, rounds=rounds, **med)
    ents = cdynamo.cache_entries(fn)
    res["cache_entries_c"] = len(ents)
    res["guards_c"] = sum(e["num_guards"] for e in ents)
    return res


def hit_rows(results):
    """Table rows for measure_hits results: overheads over eager and their ratio."""
    rows = []
    for r in results:
        if not r["captured"]:
            rows.append([r["label"], "not captured: " + reason_cell(r["reason"])] + [""] * (len(HIT_HEADER) - 2))
            continue
        oc, od = r["cdynamo"] - r["eager"], r["dynamo"] - r["eager"]
        row = [r["label"], us(r["eager"]), us(r["cdynamo"]), us(r["dynamo"]), us(oc), us(od), ratio(oc, od)]
        if "graph_c" in r:
            gc_, gd_ = r["cdynamo"] - r["graph_c"], r["dynamo"] - r["graph_d"]
            row += [f"{us(r['graph_c'])} / {us(r['graph_d'])}", us(gc_), us(gd_), ratio(gd_, gc_)]
        else:
            row += ["n/a"] * 4
        rows.append(row)
    return rows


HIT_HEADER = ["case", "eager us", "cdynamo us", "torch._dynamo us", "cdynamo - eager us",
              "dynamo - eager us", "overhead ratio cdynamo/dynamo (vs eager)",
              "graph alone us (cdynamo / dynamo)", "cdynamo - its graph us", "dynamo - its graph us",
              "guard+dispatch speed-up dynamo/cdynamo"]

HIT_NOTE = ("*graph alone*: the graph each frontend captured, called directly (`gm.forward(*example_inputs)`); "
            "*frontend - its graph* is then the pure cost of the cache hit (guard evaluation, argument "
            "gathering, dispatch), without the part of eager's time (e.g. `nn.Module.__call__`) that a "
            "captured graph skips.")
