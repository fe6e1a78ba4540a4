"""The differential fuzzer: random programs, run eagerly and under cdynamo, compared.

    python tools/fuzz/run.py --seed 1 -n 10000 [--out build/fuzz/1] [--backends count:85,eager:10,aot_eager:5]

(`make fuzz SEED=1 N=10000`.) Programs come from tools/fuzz/grammar.py (hypothesis
strategies); each is checked by tools/fuzz/check.py. A program whose outcome differs is
shrunk by hypothesis to a minimal one, recorded, and the run goes on with the next seed
(so one run finds several bugs). A failure that matches a bug already found in this run, or
one listed in tools/fuzz/known.py (same kind of difference, and the program uses every
production of that bug's minimal program), is counted as a duplicate and not shrunk again.

The programs run in a worker process; a crash (signal) or a hang (--timeout seconds for one
program) of the worker is recorded with the program it was running, and a new worker goes
on with the next seed. At the end the run prints (and writes to OUT/summary.json):
programs run, mismatches and crashes (minimal source, symptom), construct coverage (how
often each grammar production was drawn), and how often frames ran natively or broke, with
the reasons. Exit status 1 if anything new was found.
"""
import argparse
import collections
import json
import os
import re
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)


def _parse_backends(spec):
    out = []
    for part in spec.split(","):
        name, _, w = part.partition(":")
        out.append((name, int(w or 1)))
    return out


def signature(kind, mismatch):
    """A coarse class of a difference: its kind and what kind of thing differed."""
    text = re.sub(r"^call \d+ \(\w\): ", "", mismatch or "")
    if kind == "exception":
        m = re.match(r"eager (returned|raised (\w+))\b.*, compiled (returned|raised (\w+))", text, re.S)
        if m:
            return "exception: eager %s / compiled %s" % (m.group(2) or "ok", m.group(4) or "ok")
    m = re.search(r": (type|identity|tensor values|tensor|len|keys|exception|stdout|grad mode)", text)
    return "%s: %s" % (kind, m.group(1) if m else "value")


def is_known(sig, tags, known, text=""):
    """Same kind of difference (the signature, or a known symptom text) and every production
    of the known bug's minimal program."""
    return any((sig == k.get("signature") or k.get("symptom_contains") and k["symptom_contains"] in (text or ""))
               and set(k["tags"]) <= set(tags) for k in known)


# ---------------------------------------------------------------------------------------- worker

# What a worker may map beyond what it has mapped when it starts (bytes): a generated program
# that grows without bound raises MemoryError inside it (check.py skips it) instead of taking
# the machine's memory. Relative to the start: under ASan (make sanitize) the process has
# reserved terabytes of shadow memory before any of this runs.
WORKER_ADDRESS_SPACE = 8 * 1024**3


def _mapped_bytes():
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith("VmSize:"):
                return int(line.split()[1]) * 1024
    return 0


def worker(args):
    import faulthandler
    import resource

    soft, hard = resource.getrlimit(resource.RLIMIT_AS)
    limit = _mapped_bytes() + WORKER_ADDRESS_SPACE
    if hard != resource.RLIM_INFINITY:
        limit = min(limit, hard)
    resource.setrlimit(resource.RLIMIT_AS, (limit, hard))

    from hypothesis import HealthCheck, Phase, given, settings
    from hypothesis import seed as hyp_seed
    from hypothesis import strategies as st
    from hypothesis.errors import Flaky

    import check as checker
    import grammar
    import known as known_mod

    out = args.out
    known = list(known_mod.KNOWN) + _read_jsonl(os.path.join(out, "bugs.jsonl"))
    backends = _parse_backends(args.backends)
    weighted = [name for name, w in backends for _ in range(w)]
    progress = open(os.path.join(out, "progress.jsonl"), "a")
    current = os.path.join(out, "current.json")

    class Mismatch(Exception):
        def __init__(self, prog, backend, rep):
            super().__init__(rep.mismatch)
            self.prog, self.backend, self.rep = prog, backend, rep

    # A worker checks at most --per-worker programs, then exits and the parent starts a fresh
    # one: a process that has compiled ~80,000 programs holds hundreds of MB more (torch's
    # per-ShapeEnv caches, cdynamo's bounded records) and its backends began to fail with
    # MemoryError under the address-space limit (seeds 96001-96003, flaky).
    budget = min(args.n, args.per_worker)
    done, seed = 0, args.seed
    while done < budget:
        state = {"generated": 0, "failing": False}

        @settings(max_examples=budget - done, database=None, deadline=None, derandomize=False,
                  suppress_health_check=list(HealthCheck), phases=[Phase.generate, Phase.shrink],
                  report_multiple_bugs=False, print_blob=False)
        @hyp_seed(seed)
        @given(grammar.programs(), st.sampled_from(weighted))
        def prop(prog, backend):
            with open(current, "w") as fh:
                json.dump({"source": prog.source, "backend": backend, "tags": sorted(prog.tags), "seed": seed}, fh)
            faulthandler.dump_traceback_later(args.timeout, exit=True)
            try:
                rep = checker.check(prog, backend)
            finally:
                faulthandler.cancel_dump_traceback_later()
            if not state["failing"]:
                state["generated"] += 1
                sig = signature(rep.kind, rep.mismatch) if rep.mismatch else None
                dup = sig is not None and is_known(sig, prog.tags, known, rep.mismatch)
                progress.write(json.dumps({"tags": sorted(prog.tags), "backend": backend, "graphs": rep.graphs,
                                           "breaks": rep.breaks, "native": rep.native, "break_reasons": rep.break_reasons,
                                           "raised": rep.eager_raised, "hits": rep.hits, "misses": rep.misses,
                                           "mismatch": sig, "duplicate": dup, "skipped": rep.skipped}) + "\n")
                progress.flush()
            if rep.mismatch and not is_known(signature(rep.kind, rep.mismatch), prog.tags, known, rep.mismatch):
                if not state["failing"]:
                    # Kept for a Flaky outcome: hypothesis then reports only that the replay
                    # passed, and the first failure is all there is to diagnose.
                    state["first"] = {"source": prog.source, "backend": backend, "tags": sorted(prog.tags),
                                      "symptom": rep.mismatch}
                state["failing"] = True
                raise Mismatch(prog, backend, rep)

        try:
            prop()
            done += state["generated"]
            if state["generated"] == 0:
                break
        except Mismatch as m:
            bug = {"kind": "mismatch", "signature": signature(m.rep.kind, m.rep.mismatch), "tags": sorted(m.prog.tags),
                   "source": m.prog.source, "backend": m.backend, "symptom": m.rep.mismatch, "seed": seed,
                   "native": m.rep.native, "break_reasons": m.rep.break_reasons}
            _append(os.path.join(out, "bugs.jsonl"), bug)
            known.append(bug)
            print("\n=== new mismatch (seed %d): %s\n%s\n" % (seed, bug["symptom"], bug["source"]), file=sys.stderr)
            done += state["generated"]
        except Flaky as e:
            first = state.get("first") or {"source": _read_current(current).get("source", "")}
            _append(os.path.join(out, "bugs.jsonl"), {"kind": "flaky", "signature": "flaky", "tags": [],
                                                      "source": first["source"], "backend": first.get("backend"),
                                                      "first_symptom": first.get("symptom"),
                                                      "first_tags": first.get("tags"),
                                                      "symptom": str(e)[:2000], "seed": seed})
            done += state["generated"]
        except Exception as e:  # noqa: BLE001 - a harness or grammar error: recorded, run goes on
            import traceback

            cur = _read_current(current)
            _append(os.path.join(out, "bugs.jsonl"), {"kind": "harness", "signature": "harness:" + type(e).__name__,
                                                      "tags": cur.get("tags", []), "source": cur.get("source", ""),
                                                      "symptom": traceback.format_exc()[-3000:], "seed": seed})
            print(traceback.format_exc(), file=sys.stderr)
            done += state["generated"]
        seed += 1
    progress.close()
    return 0


# ---------------------------------------------------------------------------------------- parent

def _append(path, record):
    with open(path, "a") as fh:
        fh.write(json.dumps(record) + "\n")


def _read_jsonl(path):
    if not os.path.exists(path):
        return []
    with open(path) as fh:
        return [json.loads(line) for line in fh if line.strip()]


def _read_current(path):
    try:
        with open(path) as fh:
            return json.load(fh)
    except (OSError, ValueError):
        return {}


def _norm_reason(r):
    r = re.sub(r"'[^']*'|\"[^\"]*\"", "'...'", r)
    r = re.sub(r"\d+", "N", r)
    return r.split("\n")[0][:90]


def summarize(out, elapsed, quiet=False):
    prog = _read_jsonl(os.path.join(out, "progress.jsonl"))
    bugs = _read_jsonl(os.path.join(out, "bugs.jsonl"))
    tags = collections.Counter(t for p in prog for t in p["tags"])
    native = collections.Counter(_norm_reason(r) for p in prog for r in p["native"])
    breaks = collections.Counter(_norm_reason(r) for p in prog for r in p["break_reasons"])
    n = len(prog)
    s = {
        "programs": n,
        "seconds": round(elapsed, 1),
        "backends": dict(collections.Counter(p["backend"] for p in prog)),
        "with_native_frame": sum(1 for p in prog if p["native"]),
        "with_graph_break": sum(1 for p in prog if p["breaks"]),
        "captured_whole": sum(1 for p in prog if not p["native"] and not p["breaks"] and p["graphs"]),
        "no_graph": sum(1 for p in prog if not p["graphs"]),
        "eager_raised_calls": sum(p["raised"] for p in prog),
        "graphs": sum(p["graphs"] for p in prog),
        "cache_hits": sum(p["hits"] for p in prog),
        "mismatching_programs": sum(1 for p in prog if p["mismatch"]),
        "duplicates_of_known": sum(1 for p in prog if p["duplicate"]),
        # Programs not compared (check.py: an eager call too slow or out of memory); not
        # counted among the programs checked.
        "skipped": sum(1 for p in prog if p.get("skipped")),
        "bugs": [{k: b.get(k) for k in ("kind", "signature", "symptom", "backend", "seed", "source")} for b in bugs],
        "coverage": dict(sorted(tags.items())),
        "native_reasons": dict(native.most_common(40)),
        "break_reasons": dict(breaks.most_common(40)),
    }
    with open(os.path.join(out, "summary.json"), "w") as fh:
        json.dump(s, fh, indent=1)
    if quiet:
        return s
    print("fuzz: %d programs in %.0f s (%s), %d of them skipped (eager too slow or out of memory)" % (
        n, elapsed, s["backends"], s["skipped"]))
    if n:
        print("  captured whole %.1f%%, with a graph break %.1f%%, with a native frame %.1f%%, no graph %.1f%%" % (
            100 * s["captured_whole"] / n, 100 * s["with_graph_break"] / n, 100 * s["with_native_frame"] / n,
            100 * s["no_graph"] / n))
    print("  coverage (%d productions):" % len(tags))
    print("    " + "  ".join("%s=%d" % kv for kv in sorted(tags.items())))
    print("  native reasons:")
    for r, c in native.most_common(15):
        print("    %6d  %s" % (c, r))
    print("  graph break reasons:")
    for r, c in breaks.most_common(10):
        print("    %6d  %s" % (c, r))
    print("  mismatching programs: %d (duplicates of known bugs: %d)" % (s["mismatching_programs"], s["duplicates_of_known"]))
    for b in bugs:
        print("\n--- %s [%s] backend=%s seed=%s\n%s\n%s" % (b["kind"], b["signature"], b.get("backend"), b.get("seed"),
                                                        b["symptom"][:1500], b["source"]))
    print("\n%d bugs found (%s)" % (len(bugs), os.path.join(out, "bugs.jsonl")))
    return s


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("-n", type=int, default=1000, help="programs to generate")
    ap.add_argument("--out", default=None, help="output folder (default build/fuzz/seed-SEED)")
    ap.add_argument("--backends", default="count:85,eager:10,aot_eager:5")
    ap.add_argument("--timeout", type=int, default=120, help="seconds one program may take")
    ap.add_argument("--per-worker", type=int, default=20000, help="programs one worker process checks")
    ap.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    ap.add_argument("--quiet", action="store_true")
    args = ap.parse_args()
    if args.out is None:
        args.out = os.path.join(os.path.dirname(os.path.dirname(HERE)), "build", "fuzz", "seed-%d" % args.seed)
    if args.worker:
        return worker(args)
    os.makedirs(args.out, exist_ok=True)
    for f in ("progress.jsonl", "bugs.jsonl", "current.json"):
        if os.path.exists(os.path.join(args.out, f)):
            os.remove(os.path.join(args.out, f))
    start = time.time()
    seed = args.seed
    while True:
        done = len(_read_jsonl(os.path.join(args.out, "progress.jsonl")))
        if done >= args.n:
            break
        cmd = [sys.executable, os.path.abspath(__file__), "--worker", "--seed", str(seed), "-n", str(args.n - done),
               "--out", args.out, "--backends", args.backends, "--timeout", str(args.timeout),
               "--per-worker", str(args.per_worker)]
        p = subprocess.run(cmd)
        cur = _read_current(os.path.join(args.out, "current.json"))
        if p.returncode == 0:
            if len(_read_jsonl(os.path.join(args.out, "progress.jsonl"))) == done:
                break  # hypothesis generated nothing more
            seed = cur.get("seed", seed) + 1  # the worker checked its share; a fresh one goes on
            continue
        # The worker died: a crash (signal) or a hang (faulthandler exits with 1).
        kind = "crash" if p.returncode < 0 else "hang-or-exit"
        _append(os.path.join(args.out, "bugs.jsonl"), {
            "kind": kind, "signature": "%s:%d" % (kind, p.returncode), "tags": cur.get("tags", []),
            "source": cur.get("source", ""), "backend": cur.get("backend"), "seed": cur.get("seed", seed),
            "symptom": "worker exited with %d" % p.returncode})
        _append(os.path.join(args.out, "progress.jsonl"), {"tags": cur.get("tags", []), "backend": cur.get("backend"),
                                                           "graphs": 0, "breaks": 0, "native": [], "break_reasons": [],
                                                           "raised": 0, "hits": 0, "misses": 0, "mismatch": kind,
                                                           "duplicate": False})
        seed = cur.get("seed", seed) + 1
    s = summarize(args.out, time.time() - start, args.quiet)
    return 1 if s["bugs"] else 0


if __name__ == "__main__":
    sys.exit(main())
