"""Real models (timm, Hugging Face transformers) under cdynamo and torch._dynamo.

    .venv/bin/python benchmarks/models.py [--train | --inductor] [--models a,b] [--size full|quick]
                                          [--write docs/models.md | --no-write] [--json DIR]

Every model runs in its own subprocess (tools/models/worker.py, through
tools/models/runner.py): eager, cdynamo and torch._dynamo on identical copies of the
model, in that process. A process that dies (a segfault in the tracer) is recorded as
CRASH for the frontend it was running, and the other frontend is measured in a fresh
process. `make models` runs inference and
`--train`; `make models-inductor` runs `--inductor`. Each run rewrites its own section of
docs/models.md (between its markers) and leaves the others as they were.

Inference: counting backend, eval mode, no_grad. Graphs, graph breaks and native frames
(with reasons) after the first call; outputs on the first call and on a cache hit
compared with eager (torch.testing.assert_close); frontend time = first call minus the
fastest eager call, for both frontends (the ratio is Dynamo's over cdynamo's).
Training (--train): one forward and backward with aot_eager (counted) on each frontend;
loss, outputs, gradients and buffers compared with eager.
Inductor (--inductor; resnet18, bert, llama by default): the inductor backend, one
process per frontend (fresh inductor caches), first-call time and the median of steady
calls, with eager's median measured in the same process (one thread, no_grad).
"""
import argparse
import datetime
import json
import os
import re
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "tools" / "models"))

import runner  # noqa: E402
import zoo  # noqa: E402

DOC = ROOT / "docs" / "models.md"
INDUCTOR_MODELS = ["resnet18", "bert", "llama"]


# ---- formatting -------------------------------------------------------------------------

def graphs_cell(r, fe):
    d = r.get(fe, {})
    if "failure" in d:
        return d["failure"].split(" (")[0].split(":")[0]
    return str(d.get("graphs", "?"))


def ok_cell(d, key):
    if "failure" in d:
        return "—"
    if key not in d:
        return "?"
    return "equal" if d[key] is None else "**differ**"


def frontend_s(d, eager_s):
    """First call minus the fastest eager call: what the frontend added (tracing, guards,
    the counting backend) to running the model once."""
    if "first_call_s" not in d or eager_s is None:
        return None
    return max(d["first_call_s"] - eager_s, 1e-6)


def short(reason, n=200):
    reason = re.sub(r"\s+", " ", reason)
    reason = re.sub(r"[^\s(\[]*/site-packages/", "", reason)  # paths relative to site-packages
    reason = reason.replace(str(ROOT) + "/", "")
    return reason if len(reason) <= n else reason[: n - 1] + "…"


def reasons_md(results, mode):
    lines = []
    for r in results:
        c, d = r.get("cdynamo", {}), r.get("dynamo", {})
        items = []
        if "failure" in c:
            tail = [ln for ln in c.get("stderr_tail", "").splitlines() if ln.strip()]
            items.append(f"- cdynamo: {c['failure']}" + (f" — last output: `{short(tail[-1], 200)}`" if tail else ""))
        for reason, n in c.get("break_reasons", {}).items():
            items.append(f"- cdynamo break ×{n}: `{short(reason)}`")
        for reason, n in c.get("native_reasons", {}).items():
            items.append(f"- cdynamo native frame ×{n}: `{short(reason)}`")
        for key in ("outputs", "outputs_hit", "loss", "gradients"):
            if c.get(key):
                items.append(f"- cdynamo {key}: {short(c[key], 300)}")
        if "failure" in d:
            items.append(f"- torch._dynamo: {d['failure']}")
        for reason, n in d.get("break_reasons", {}).items():
            items.append(f"- torch._dynamo break ×{n}: `{short(reason)}`")
        if r.get("failure"):
            items.append(f"- {r['failure']}")
        if items:
            lines.append(f"**{r['model']}** ({mode})\n")
            lines.extend(items)
            lines.append("")
    return lines


def infer_table(results):
    rows = ["| model | graphs cdynamo / Dynamo | breaks cdynamo / Dynamo | native frames | outputs (1st call, hit) "
            "| frontend time cdynamo / Dynamo | ratio |", "|---|---|---|---|---|---|---|"]
    for r in results:
        c, d = r.get("cdynamo", {}), r.get("dynamo", {})
        fc, fd = frontend_s(c, r.get("eager_s")), frontend_s(d, r.get("eager_s"))
        ratio = f"{fd / fc:.1f}x" if fc and fd else "—"
        times = f"{fc:.2f} s / {fd:.2f} s" if fc and fd else "—"
        native = c.get("native_frames", "—") if "failure" not in c else "—"
        outs = "—" if "failure" in c else f"{ok_cell(c, 'outputs')}, {ok_cell(c, 'outputs_hit')}"
        rows.append(f"| {r['model']} | {graphs_cell(r, 'cdynamo')} / {graphs_cell(r, 'dynamo')} | "
                    f"{c.get('breaks', '—')} / {d.get('breaks', '—')} | {native} | {outs} | {times} | {ratio} |")
    return rows


def train_table(results):
    rows = ["| model | graphs cdynamo / Dynamo | breaks cdynamo / Dynamo | native frames | loss, outputs "
            "| gradients cdynamo / Dynamo |", "|---|---|---|---|---|---|"]
    for r in results:
        c, d = r.get("cdynamo", {}), r.get("dynamo", {})
        native = c.get("native_frames", "—") if "failure" not in c else "—"
        lo = "—" if "failure" in c else f"{ok_cell(c, 'loss')}, {ok_cell(c, 'outputs')}"
        rows.append(f"| {r['model']} | {graphs_cell(r, 'cdynamo')} / {graphs_cell(r, 'dynamo')} | "
                    f"{c.get('breaks', '—')} / {d.get('breaks', '—')} | {native} | {lo} | "
                    f"{ok_cell(c, 'gradients')} / {ok_cell(d, 'gradients')} |")
    return rows


def inductor_table(results):
    rows = ["| model | graphs cdynamo / torch.compile | first call cdynamo / torch.compile | steady state: eager, "
            "cdynamo, torch.compile | cdynamo / torch.compile (steady) | outputs |", "|---|---|---|---|---|---|"]
    for r in results:
        c, d = r.get("cdynamo", {}), r.get("dynamo", {})

        def fmt(x, unit="s"):
            return "—" if x is None else (f"{x * 1e3:.2f} ms" if unit == "ms" else f"{x:.1f} s")

        eager = r.get("eager_steady_s")
        cs, ds = c.get("steady_s"), d.get("steady_s")
        ratio = f"{cs / ds:.2f}" if cs and ds else "—"
        outs = f"{ok_cell(c, 'outputs')} / {ok_cell(d, 'outputs')}"
        rows.append(f"| {r['model']} | {graphs_cell(r, 'cdynamo')} / {graphs_cell(r, 'dynamo')} | "
                    f"{fmt(c.get('first_call_s'))} / {fmt(d.get('first_call_s'))} | "
                    f"{fmt(eager, 'ms')}, {fmt(cs, 'ms')}, {fmt(ds, 'ms')} | {ratio} | {outs} |")
    return rows


HEADER = """# Real models under cdynamo and torch._dynamo

Regenerated by `make models` (inference, training) and `make models-inductor` (inductor end
to end): benchmarks/models.py, one subprocess per model (tools/models/worker.py), eager,
cdynamo and torch._dynamo on identical copies in that process. Models: timm
(`create_model(name, pretrained=False)`, batch 1 at 224x224) and transformers built from
config (2 layers, hidden 64, vocab 1000, 4 heads, FFN 128, dropout 0; batch 2, 16 tokens,
the second sequence padded), random weights, nothing downloaded. The model definitions
are tools/models/zoo.py. The goal: graphs no more than torch._dynamo's, outputs
and gradients equal, no native frame, no crash.
"""


def section(doc, key, body):
    start, end = f"<!-- models:{key} -->", f"<!-- /models:{key} -->"
    block = f"{start}\n{body.rstrip()}\n{end}"
    if start in doc and end in doc:
        return doc[: doc.index(start)] + block + doc[doc.index(end) + len(end):]
    return doc.rstrip() + "\n\n" + block + "\n"


def versions():
    out = {}
    for mod in ("torch", "timm", "transformers"):
        try:
            from importlib.metadata import version

            out[mod] = version(mod)
        except Exception:
            out[mod] = "?"
    return out


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    g = ap.add_mutually_exclusive_group()
    g.add_argument("--train", action="store_true", help="one training step with aot_eager (gradients vs eager)")
    g.add_argument("--inductor", action="store_true", help="inductor end to end: first call and steady state")
    ap.add_argument("--models", default="", help="comma-separated subset of: " + ",".join(zoo.KNOWN)
                    + "; 'more' / 'more2' for all of zoo.MORE / zoo.MORE2; any timm model as timm:NAME")
    ap.add_argument("--size", choices=["full", "quick"], default="full")
    ap.add_argument("--timeout", type=int, default=900, help="seconds per worker process")
    ap.add_argument("--iters", type=int, default=30, help="--inductor: steady-state calls timed")
    ap.add_argument("--write", default=str(DOC), help="markdown file whose section this run rewrites")
    ap.add_argument("--no-write", action="store_true")
    ap.add_argument("--json", default="", help="directory to keep each model's raw JSON in")
    a = ap.parse_args(argv)
    mode = "train" if a.train else "inductor" if a.inductor else "infer"
    models = [m for m in a.models.split(",") if m] or (INDUCTOR_MODELS if a.inductor else zoo.ALL)
    models = [x for m in models for x in ({"more": zoo.MORE, "more2": zoo.MORE2}.get(m, [m]))]
    for m in models:
        if not zoo.known(m):
            ap.error(f"unknown model {m!r}; choose from {zoo.KNOWN}")

    def log(msg):
        print(msg, flush=True)

    t_start = time.time()
    log(f"models ({mode}, {a.size}): {', '.join(models)}")
    results = []
    for m in models:
        t0 = time.time()
        if mode == "inductor":
            r = {"model": m}
            for fe in runner.FRONTENDS:  # one process each: fresh inductor caches
                with tempfile.TemporaryDirectory(prefix="cdynamo-inductor-") as cache:
                    env = dict(os.environ, TORCHINDUCTOR_CACHE_DIR=cache, TORCHINDUCTOR_COMPILE_THREADS="1")
                    data = runner.run_models([m], "inductor", a.size, [fe], a.timeout, env=env,
                                             extra=("--iters", str(a.iters)), log=log)[m]
                r[fe] = data.get(fe) or {"failure": data.get("failure", "?")}
                r[f"eager_{fe}"] = data.get("eager_steady_s")
            eags = [x for x in (r.get("eager_cdynamo"), r.get("eager_dynamo")) if x]
            r["eager_steady_s"] = min(eags) if eags else None
        else:
            r = runner.run_models([m], mode, a.size, timeout=a.timeout, log=log)[m]
        r["elapsed_s"] = time.time() - t0
        results.append(r)
        c, d = r.get("cdynamo", {}), r.get("dynamo", {})
        log(f"{m:24s} graphs {graphs_cell(r, 'cdynamo'):>6s} / {graphs_cell(r, 'dynamo'):>6s}  "
            f"breaks {c.get('breaks', '-')}  native {c.get('native_frames', '-')}  ({r['elapsed_s']:.0f} s)")
        if a.json:
            os.makedirs(a.json, exist_ok=True)
            with open(os.path.join(a.json, f"{m}-{mode}.json"), "w") as f:
                json.dump(r, f, indent=1, default=str)
    elapsed = time.time() - t_start
    v = versions()
    stamp = (f"Measured {datetime.date.today().isoformat()} on {os.cpu_count()} cpus: torch {v['torch']}, timm "
             f"{v['timm']}, transformers {v['transformers']}; {len(models)} models in {elapsed / 60:.1f} min"
             f" ({a.size} size).")
    if mode == "infer":
        body = ["## Inference (counting backend)", "", stamp, "", *infer_table(results), "",
                "Frontend time: first call minus the fastest of 3 eager calls (the counting backend runs the "
                "graphs as captured); ratio: Dynamo's over cdynamo's.", "", "### Breaks, native frames and failures", "",
                *(reasons_md(results, "inference") or ["None."])]
    elif mode == "train":
        body = ["## Training step (aot_eager)", "", stamp, "", *train_table(results), "",
                "### Breaks, native frames and failures", "", *(reasons_md(results, "training") or ["None."])]
    else:
        body = ["## Inductor end to end", "", stamp, "", *inductor_table(results), "",
                "First call: compile and run (fresh inductor caches per process). Steady state: median of "
                f"{a.iters} calls after 3 warm-up calls, one thread, no_grad; eager is measured in the same "
                "processes (the faster of the two)."]
    text = "\n".join(body)
    log("\n" + text)
    if not a.no_write:
        path = Path(a.write)
        doc = path.read_text() if path.exists() else HEADER
        path.write_text(section(doc, mode, text))
        log(f"\nwrote {path}")
    failed = [r["model"] for r in results if "failure" in r]
    return 1 if failed and mode != "inductor" and len(failed) == len(results) else 0


if __name__ == "__main__":
    sys.exit(main())
