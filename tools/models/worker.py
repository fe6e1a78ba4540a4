"""Measures one model under eager, cdynamo and torch._dynamo in this process; writes JSON.

    python tools/models/worker.py MODEL[,MODEL...] --mode infer|train|inductor [--size full|quick]
                                  [--frontends cdynamo,dynamo] --out FILE

Run by benchmarks/models.py and tests/models/ in a subprocess, so that a crash (a
segfault in the tracer) is recorded for the model it happened in and the run goes on
(tools/models/runner.py starts a fresh process for the models after it). The JSON file
({"models": {name: result}}) is rewritten after every stage: when the process dies, what
it had measured so far is there, and each result's `stage` says where it died.

Modes:
  infer     eval mode, no_grad; each frontend with a counting backend: graphs, graph
            breaks and native frames with reasons, outputs on the first call and on a
            cache hit compared with eager, first-call (frontend) time.
  train     train mode; one forward and backward with aot_eager (counted) on each
            frontend: graphs, breaks, loss, gradients and buffers compared with eager.
  inductor  eval mode, no_grad; the inductor backend on the one frontend given:
            first-call time and steady-state time, next to eager's in the same process.
"""
import argparse
import copy
import json
import os
import re
import statistics
import sys
import time
import traceback
from collections import Counter
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

import torch  # noqa: E402

import zoo  # noqa: E402

OUT_RTOL, OUT_ATOL = 1.3e-6, 1e-5  # torch.testing's float32 defaults
GRAD_RTOL, GRAD_ATOL = 1e-4, 1e-5  # aot_eager's decompositions reorder float math
TRAIN_SEED = 1234  # the generator state every training step starts from


class Report:
    """The results file: one entry per model, written through after every change."""

    def __init__(self, path):
        self.path = path
        self.all = {"models": {}}

    def model(self, name, **fields):
        self.data = dict(fields, model=name, stage="start")
        self.all["models"][name] = self.data
        self.flush()
        return self

    def set(self, **fields):
        self.data.update(fields)
        self.flush()

    def flush(self):
        tmp = self.path + ".tmp"
        with open(tmp, "w") as f:
            json.dump(self.all, f, indent=1, default=str)
        os.replace(tmp, self.path)


def compare(ref, got, rtol, atol):
    """None when every tensor of `got` equals `ref`'s (same structure), else what differs."""
    a, b = zoo.flatten(ref), zoo.flatten(got)
    if [p for p, _ in a] != [p for p, _ in b]:
        return f"output structure differs: {[p for p, _ in a]} vs {[p for p, _ in b]}"
    for (path, x), (_, y) in zip(a, b):
        try:
            torch.testing.assert_close(y, x, rtol=rtol, atol=atol)
        except AssertionError as e:
            return f"{path}: {str(e).splitlines()[0]} ({' '.join(str(e).split())[:300]})"
    return None


def grads_of(model):
    return {n: p.grad for n, p in model.named_parameters() if p.grad is not None}


def compare_grads(ref_model, model):
    g0, g1 = grads_of(ref_model), grads_of(model)
    if sorted(g0) != sorted(g1):
        missing = sorted(set(g0) ^ set(g1))
        return f"parameters with a gradient differ: {missing[:5]}"
    for n in g0:
        try:
            torch.testing.assert_close(g1[n], g0[n], rtol=GRAD_RTOL, atol=GRAD_ATOL)
        except AssertionError as e:
            return f"grad of {n}: {' '.join(str(e).split())[:300]}"
    b0, b1 = dict(ref_model.named_buffers()), dict(model.named_buffers())
    for n in b0:
        try:
            torch.testing.assert_close(b1[n], b0[n], rtol=GRAD_RTOL, atol=GRAD_ATOL)
        except AssertionError as e:
            return f"buffer {n} after the step: {' '.join(str(e).split())[:300]}"
    return None


def counted(inner):
    """A backend that counts its graphs and hands them to `inner` (a backend callable)."""
    def backend(gm, example_inputs):
        backend.graphs += 1
        backend.ops += sum(1 for n in gm.graph.nodes if "call" in n.op)
        return inner(gm, example_inputs) if inner else gm.forward

    backend.graphs = 0
    backend.ops = 0
    return backend


_warmed = False


def warm_up():
    """Compiles a small function with each frontend once per process, so that neither
    frontend's first model pays for imports and one-time set-up the other already paid for."""
    global _warmed
    if _warmed:
        return
    _warmed = True
    import cdynamo

    def f(x, y):
        return torch.nn.functional.relu(x @ y + 1).sum(dim=0)

    x, y = torch.randn(4, 4), torch.randn(4, 4)
    cdynamo.compile(f, backend=counted(None))(x, y)
    torch.compile(f, backend=counted(None))(x, y)
    cdynamo.reset()
    torch._dynamo.reset()


def site(entry):
    """'file.py:line in function (its file.py:line)', without directories."""
    function = re.sub(r"\(\S*/([^/\s]+:\d+)\)$", r"(\1)", entry["function"])
    return f"{Path(entry['filename']).name}:{entry['line']} in {function}"


def cdynamo_findings():
    import cdynamo

    s = cdynamo.stats()
    breaks = Counter(f"{b['reason']} [{site(b)}]" for b in s["graph_break_reasons"])
    native = Counter(f"{n['reason']} [{site(n)}]" for n in s["native_frames"])
    return {"breaks": s["graph_breaks"], "break_reasons": dict(breaks.most_common()),
            "native_frames": len(s["native_frames"]), "native_reasons": dict(native.most_common()),
            "recompiles": s["recompiles"], "cache_entries": s["cache_entries"]}


def dynamo_findings():
    from torch._dynamo.utils import counters

    breaks = Counter()
    for reason, n in counters["graph_break"].items():
        breaks[" ".join(str(reason).split())[:300]] += n
    return {"breaks": sum(breaks.values()), "break_reasons": dict(breaks.most_common()),
            "unique_graphs": counters["stats"].get("unique_graphs", 0)}


def call(fn, args, kwargs):
    t0 = time.perf_counter()
    out = fn(*args, **kwargs)
    return out, time.perf_counter() - t0


def frontend_compile(frontend, model, backend):
    import cdynamo

    if frontend == "cdynamo":
        cdynamo.reset()
        return cdynamo.compile(model, backend=backend)
    torch._dynamo.reset()
    from torch._dynamo.utils import counters

    counters.clear()
    return torch.compile(model, backend=backend)


def findings(frontend):
    return cdynamo_findings() if frontend == "cdynamo" else dynamo_findings()


def frontend_failed(rep, fe):
    """Records an exception raised while frontend `fe` ran: that frontend's result is the
    error, and the other frontends are still measured."""
    err = traceback.format_exc()
    rep.set(**{fe: {"failure": "ERROR: " + err.strip().splitlines()[-1][:300], "error": err[-3000:]}})
    traceback.print_exc()


def run_infer(name, size, frontends, rep):
    model, args, kwargs = zoo.build(name, size)
    model.eval()
    with torch.no_grad():
        ref, _ = call(model, args, kwargs)
        t_eager = min(call(model, args, kwargs)[1] for _ in range(3))
    rep.set(stage="eager", eager_s=t_eager)
    warm_up()
    for fe in frontends:
        rep.set(stage=fe)
        try:
            backend = counted(None)
            compiled = frontend_compile(fe, model, backend)
            with torch.no_grad():
                out1, t_first = call(compiled, args, kwargs)
                graphs_first = backend.graphs
                out2, t_hit = call(compiled, args, kwargs)
            rep.set(**{fe: dict(graphs=graphs_first, graphs_after_hit=backend.graphs, ops=backend.ops,
                                first_call_s=t_first, second_call_s=t_hit,
                                outputs=compare(ref, out1, OUT_RTOL, OUT_ATOL),
                                outputs_hit=compare(ref, out2, OUT_RTOL, OUT_ATOL), **findings(fe))})
        except Exception:
            frontend_failed(rep, fe)


def run_train(name, size, frontends, rep):
    from torch._dynamo.backends.registry import lookup_backend

    base, args, kwargs = zoo.build(name, size)
    base.train()
    ref_model = copy.deepcopy(base)
    # A training forward may draw random numbers (dropout, a MoE router's jitter noise):
    # every step starts from the same generator state, so eager and each frontend draw the
    # same numbers and a difference is the frontend's, not the draw's.
    torch.manual_seed(TRAIN_SEED)
    ref_out, t_eager = call(ref_model, args, kwargs)
    ref_loss = zoo.loss_of(ref_out)
    ref_loss.backward()
    rep.set(stage="eager", eager_s=t_eager)
    warm_up()
    for fe in frontends:
        rep.set(stage=fe)
        try:
            model = copy.deepcopy(base)
            backend = counted(lookup_backend("aot_eager"))
            compiled = frontend_compile(fe, model, backend)
            torch.manual_seed(TRAIN_SEED)
            out, t_first = call(compiled, args, kwargs)
            loss = zoo.loss_of(out)
            loss.backward()
            loss_diff = None
            try:
                torch.testing.assert_close(loss, ref_loss, rtol=GRAD_RTOL, atol=GRAD_ATOL)
            except AssertionError as e:
                loss_diff = " ".join(str(e).split())[:300]
            rep.set(**{fe: dict(graphs=backend.graphs, ops=backend.ops, first_call_s=t_first,
                                outputs=compare(ref_out, out, GRAD_RTOL, GRAD_ATOL), loss=loss_diff,
                                gradients=compare_grads(ref_model, model), **findings(fe))})
        except Exception:
            frontend_failed(rep, fe)


def run_inductor(name, size, frontends, rep, iters):
    import cdynamo
    from torch._dynamo.utils import counters

    torch.set_num_threads(1)
    model, args, kwargs = zoo.build(name, size)
    model.eval()

    def steady(fn):
        with torch.no_grad():
            for _ in range(3):
                fn(*args, **kwargs)
            times = []
            for _ in range(iters):
                times.append(call(fn, args, kwargs)[1])
        return statistics.median(times)

    with torch.no_grad():
        ref = model(*args, **kwargs)
    rep.set(stage="eager", eager_steady_s=steady(model))
    for fe in frontends:
        rep.set(stage=fe)
        try:
            compiled = cdynamo.compile(model, backend="inductor") if fe == "cdynamo" else torch.compile(model)
            with torch.no_grad():
                out, t_first = call(compiled, args, kwargs)
            graphs = (cdynamo.stats()["graphs_compiled"] if fe == "cdynamo"
                      else counters["stats"].get("unique_graphs", 0))
            rep.set(**{fe: dict(first_call_s=t_first, graphs=graphs, outputs=compare(ref, out, 1e-4, 1e-4),
                                steady_s=steady(compiled))})
        except Exception:
            frontend_failed(rep, fe)
        rep.set(eager_steady_after_s=steady(model))  # drift of the machine during the run


def main():
    p = argparse.ArgumentParser()
    p.add_argument("models", help="comma-separated: " + ",".join(zoo.ALL))
    p.add_argument("--mode", choices=["infer", "train", "inductor"], default="infer")
    p.add_argument("--size", choices=["full", "quick"], default="full")
    p.add_argument("--frontends", default="cdynamo,dynamo")
    p.add_argument("--iters", type=int, default=30)
    p.add_argument("--out", required=True)
    a = p.parse_args()
    if a.mode == "inductor":
        import torch._inductor.config as ic

        ic.fx_graph_cache = False  # each first call compiles, whatever ran before
        ic.autotune_local_cache = False
        torch._functorch.config.enable_autograd_cache = False
    try:
        import transformers

        transformers.logging.set_verbosity_error()
    except ImportError:
        pass
    frontends = [f for f in a.frontends.split(",") if f]
    models = [m for m in a.models.split(",") if m]
    for m in models:
        if not zoo.known(m):
            p.error(f"unknown model {m!r}")
    rep = Report(a.out)
    failed = False
    for m in models:
        rep.model(m, mode=a.mode, size=a.size, torch=torch.__version__)
        try:
            if a.mode == "infer":
                run_infer(m, a.size, frontends, rep)
            elif a.mode == "train":
                run_train(m, a.size, frontends, rep)
            else:
                run_inductor(m, a.size, frontends, rep, a.iters)
            rep.set(stage="done")
        except Exception:  # recorded for this model; the next one still runs
            rep.set(error=traceback.format_exc()[-3000:])
            traceback.print_exc()
            failed = True
    sys.exit(1 if failed else 0)


if __name__ == "__main__":
    main()
