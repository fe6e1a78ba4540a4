"""Conformance with PyTorch's own TorchDynamo tests (`make conformance`).

Runs PyTorch's test/dynamo files that the shared peer folder holds (test_functions.py,
test_modules.py, test_ctx_manager.py, test_exceptions.py, test_generator.py, test_list.py
and test_sets.py) twice: under torch._dynamo itself (the *baseline*, cached per test file,
torch and Python version) and under cdynamo through the peer shim. What counts is the
tests that pass under torch._dynamo; of those it prints how many pass under cdynamo, and
which crash (the process died) or hang (past the timeout).

The tests that still fail are listed, each with its mechanism and a one-line reason, in
docs/conformance_failing.tsv (explained in docs/conformance.md). The check fails when

- a test that passes under torch._dynamo fails under cdynamo and is not on the list,
- a listed test now passes (take it off the list: the list may only shrink),
- a listed test fails differently (FAILED became CRASH/TIMEOUT, or the other way), or
- a listed test no longer exists or no longer passes under torch._dynamo.

usage: python tools/conformance.py [--peer DIR] [--out DIR] [--extra DIR] [--only functions,modules]
           [--baseline-from DIR] [--rerun-baseline] [--shim-from DIR] [--update]

--peer           the peer folder (default: $CDYNAMO_PEER, else ../shared/peer or
                 ../../shared/peer from the checkout); absent: a message, exit status 0
--out            where runs write logs/ and results/ (default: $PEER_OUT, else build/conformance)
--baseline-from  seed the baseline cache from an earlier run's results/NAME_baseline.json
--rerun-baseline run torch._dynamo again even when a cached baseline exists
--shim-from      check the results/NAME_shim.json(l) of an earlier run instead of running
--extra DIR      also run every test_*.py of DIR (other files of PyTorch's test/dynamo taken
                 for a measurement; named by the file's stem without "test_", e.g. misc),
                 against the same list; --only picks among them too
--update         rewrite the list from this run (keeps the reasons of tests still failing,
                 drops fixed ones, adds new ones with their first error line, marked NEW)
"""
import argparse
import hashlib
import json
import os
import shutil
import subprocess
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
LIST = os.path.join(ROOT, "docs", "conformance_failing.tsv")
FILES = {"functions": "test_functions.py", "modules": "test_modules.py",
         "ctx_manager": "test_ctx_manager.py", "exceptions": "test_exceptions.py",
         "generator": "test_generator.py", "list": "test_list.py", "sets": "test_sets.py"}
HEADER = ("# Tests of PyTorch's test/dynamo files that pass under torch._dynamo and still fail under\n"
          "# cdynamo (see docs/conformance.md). Checked by `make conformance`; the list may only shrink.\n"
          "# columns: test<TAB>outcome (FAILED|CRASH|TIMEOUT)<TAB>mechanism<TAB>fix in (cdynamo|shim)<TAB>reason\n")


def find_peer(arg):
    if arg:
        cands = [arg]
    elif os.environ.get("CDYNAMO_PEER"):
        cands = [os.environ["CDYNAMO_PEER"]]
    else:
        cands = [os.path.join(ROOT, "..", "shared", "peer"), os.path.join(ROOT, "..", "..", "shared", "peer")]
    for c in cands:
        if c and os.path.isfile(os.path.join(c, "run_suite.py")) and os.path.isdir(os.path.join(c, "pytorch")):
            return os.path.abspath(c)
    return None


def outcome_kind(v):
    return v.split("(")[0]


def baseline_key(testfile):
    import platform
    h = hashlib.sha256(open(testfile, "rb").read())
    torch_version = subprocess.run([os.path.join(ROOT, ".venv", "bin", "python"), "-c",
                                    "import torch; print(torch.__version__)"],
                                   capture_output=True, text=True).stdout.strip()
    h.update(torch_version.encode())
    h.update(platform.python_version().encode())
    return h.hexdigest()[:16], torch_version


def run_suite(peer, out, testfile, mode, name):
    env = dict(os.environ, PEER_OUT=out, CHECKOUT=ROOT)
    print(f"conformance: running {os.path.basename(testfile)} under {'cdynamo (shim)' if mode == 'shim' else 'torch._dynamo'}"
          f" ... (log: {out}/logs/{name}.log)", flush=True)
    r = subprocess.run([sys.executable, os.path.join(peer, "run_suite.py"), testfile, mode, name],
                       cwd=ROOT, env=env)
    if r.returncode != 0:
        sys.exit(f"conformance: run_suite.py failed (exit status {r.returncode})")
    return json.load(open(f"{out}/results/{name}.json"))


def load_messages(jsonl):
    msgs = {}
    if os.path.exists(jsonl):
        for line in open(jsonl):
            try:
                r = json.loads(line)
            except ValueError:
                continue
            if r.get("outcome") == "failed":
                m = (r.get("message") or "").split("  at ")[0].split("To execute this test")[0]
                msgs[r["nodeid"]] = " ".join(m.split())[:200]
    return msgs


def read_list():
    entries = {}
    if not os.path.exists(LIST):
        return entries
    for line in open(LIST):
        if not line.strip() or line.startswith("#"):
            continue
        cols = line.rstrip("\n").split("\t")
        while len(cols) < 5:
            cols.append("")
        entries[cols[0]] = {"outcome": cols[1], "mechanism": cols[2], "fix_in": cols[3], "reason": cols[4]}
    return entries


def write_list(entries):
    with open(LIST, "w") as f:
        f.write(HEADER)
        for t in sorted(entries):
            e = entries[t]
            f.write("\t".join([t, e["outcome"], e["mechanism"], e["fix_in"], e["reason"]]) + "\n")


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--peer")
    ap.add_argument("--out")
    ap.add_argument("--extra")
    ap.add_argument("--only")
    ap.add_argument("--baseline-from")
    ap.add_argument("--rerun-baseline", action="store_true")
    ap.add_argument("--shim-from")
    ap.add_argument("--update", action="store_true")
    a = ap.parse_args()

    peer = find_peer(a.peer)
    if peer is None:
        print("conformance: the peer folder (PyTorch's test/dynamo files and the cdynamo shim, normally "
              "../shared/peer) is not here; nothing to run. Point --peer or $CDYNAMO_PEER at it.")
        return 0
    out = os.path.abspath(a.out or os.environ.get("PEER_OUT") or os.path.join(ROOT, "build", "conformance"))
    cache = os.path.join(out, "baseline-cache")
    os.makedirs(cache, exist_ok=True)
    files = {n: os.path.join(peer, "pytorch", f) for n, f in FILES.items()}
    if a.extra:
        if not os.path.isdir(a.extra):
            sys.exit(f"conformance: --extra {a.extra} is not a folder")
        for f in sorted(os.listdir(a.extra)):
            if f.startswith("test_") and f.endswith(".py"):
                files.setdefault(f[len("test_"):-len(".py")], os.path.abspath(os.path.join(a.extra, f)))
    names = [n for n in (a.only or ",".join(files)).split(",") if n]
    for n in names:
        if n not in files:
            sys.exit(f"conformance: no test file named {n} (known: {', '.join(files)})")

    listed = read_list()
    problems = []
    summary = []
    current = {}  # test -> (outcome, message) for every baseline-passing test not passing under cdynamo
    stale = set()  # listed tests that are no longer tests passing under torch._dynamo
    measured = set()  # files measured in this run
    for name in names:
        testfile = files[name]
        fname = os.path.basename(testfile)
        key, torch_version = baseline_key(testfile)
        cached = os.path.join(cache, f"{name}_baseline-{key}.json")
        if a.baseline_from:
            shutil.copyfile(os.path.join(a.baseline_from, f"{name}_baseline.json"), cached)
        if a.rerun_baseline or not os.path.exists(cached):
            base = run_suite(peer, out, testfile, "baseline", f"{name}_baseline")
            json.dump(base, open(cached, "w"), indent=1, sort_keys=True)
        else:
            print(f"conformance: torch._dynamo baseline of {fname} from the cache ({os.path.basename(cached)}, "
                  f"torch {torch_version})")
        base = json.load(open(cached))
        if a.shim_from:
            shim = json.load(open(os.path.join(a.shim_from, f"{name}_shim.json")))
            msgs = load_messages(os.path.join(a.shim_from, f"{name}_shim.jsonl"))
        else:
            shim = run_suite(peer, out, testfile, "shim", f"{name}_shim")
            msgs = load_messages(f"{out}/results/{name}_shim.jsonl")
        if base and not shim:
            # Nothing collected under the shim: the shim or cdynamo failed at configure time
            # (its log says why). Never a measurement, and never a list to write.
            sys.exit(f"conformance: no test of {fname} ran under cdynamo; see {out}/logs/{name}_shim.log")
        measured.add(fname)
        base_pass = sorted(t for t, v in base.items() if v == "PASSED")
        ok = [t for t in base_pass if shim.get(t) == "PASSED"]
        crashes = [t for t in base_pass if outcome_kind(shim.get(t, "")) == "CRASH"]
        hangs = [t for t in base_pass if outcome_kind(shim.get(t, "")) == "TIMEOUT"]
        extra = sorted(t for t, v in shim.items() if v == "PASSED" and base.get(t) != "PASSED")
        for t in base_pass:
            if shim.get(t) != "PASSED":
                kind = outcome_kind(shim.get(t, "NOTRUN"))
                died = {"CRASH": "the test process died (see the log)", "TIMEOUT": "past the timeout (see the log)"}
                current[t] = (kind, msgs.get(t) or died.get(kind, ""))
        if base_pass and not ok:
            # Not one test passes: cdynamo or the shim is broken for the whole file (one error
            # everywhere), not a measurement of the tracer. Never rewrite the list from it.
            sys.exit(f"conformance: no test of {fname} passes under cdynamo; see {out}/logs/{name}_shim.log")
        rate = len(ok) / max(1, len(base_pass))
        summary.append(f"{fname}: {len(ok)}/{len(base_pass)} of the tests that pass under torch._dynamo "
                       f"pass under cdynamo ({100 * rate:.1f}%); {len(crashes)} crash, {len(hangs)} hang"
                       + (f"; {len(extra)} pass only under cdynamo" if extra else ""))
        for t in crashes:
            summary.append(f"    CRASH   {t}")
        for t in hangs:
            summary.append(f"    TIMEOUT {t}")
        # entries of this file that are no longer tests passing under torch._dynamo
        for t in listed:
            if t.split("::")[0] == fname and t not in base_pass:
                stale.add(t)
                problems.append(f"listed but not a test that passes under torch._dynamo (any more): {t}")

    for t, (kind, msg) in sorted(current.items()):
        e = listed.get(t)
        if e is None:
            problems.append(f"NEW FAILURE ({kind}), not on the list: {t}\n        {msg}")
        elif e["outcome"] != kind:
            problems.append(f"listed as {e['outcome']}, now {kind}: {t}\n        {msg}")
    for t, e in sorted(listed.items()):
        if t.split("::")[0] in measured and t not in current and t not in stale:
            problems.append(f"PASSES NOW, take it off the list: {t} ({e['mechanism']})")

    if a.update:
        new = {t: e for t, e in listed.items() if t.split("::")[0] not in measured}  # files not run now
        for t, (kind, msg) in current.items():
            old = listed.get(t)
            if old is not None:
                new[t] = dict(old, outcome=kind)
            else:
                new[t] = {"outcome": kind, "mechanism": "NEW", "fix_in": "cdynamo", "reason": msg}
        write_list(new)
        print(f"conformance: wrote {os.path.relpath(LIST, ROOT)} ({len(new)} tests)")
        problems = []

    print("\n== conformance with PyTorch's test/dynamo files (cdynamo through the peer shim) ==")
    for line in summary:
        print(line)
    if problems:
        print(f"\n{len(problems)} problem(s) against {os.path.relpath(LIST, ROOT)}:")
        for p in problems:
            print("  " + p)
        return 1
    print(f"\nthe failures are exactly the ones listed in {os.path.relpath(LIST, ROOT)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
