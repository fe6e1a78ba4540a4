"""Run the semantic corpus file by file and write tests/semantics/STATUS.md.

    .venv/bin/python tests/semantics/report.py            # writes tests/semantics/STATUS.md

Each file runs in its own pytest process (a crash of one case is detected, recorded and
the file rerun without it). Every check() call records its outcome (see harness.RECORDS);
this script groups the failures by root cause: the first reason in cdynamo.stats()
['native_frames'], or, where every frame was captured, the kind of failure. Wrong results,
wrong final states and crashes are listed first, with the case's source as the repro.
"""
import collections
import importlib
import inspect
import json
import os
import re
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
PY = sys.executable
FILES = ["test_control_flow.py", "test_containers.py", "test_functions.py", "test_builtins.py",
         "test_strings.py", "test_objects.py", "test_modules.py", "test_context_managers.py",
         "test_exceptions.py", "test_torch_idioms.py", "test_side_effects.py", "test_process.py", "test_harness.py"]


def collect(path):
    out = subprocess.run([PY, "-m", "pytest", "-q", "--collect-only", "-p", "no:cacheprovider", path],
                         cwd=ROOT, capture_output=True, text=True).stdout
    return [line.strip() for line in out.splitlines() if "::" in line]


def run_file(path):
    """-> (records, outcomes {nodeid: 'passed'|'failed'|'crashed'})"""
    ids = collect(path)
    deselect, records, outcomes, crashed = [], [], {}, []
    retried_usage = False
    for _ in range(len(ids) + 1):
        with tempfile.NamedTemporaryFile("r", suffix=".jsonl", delete=False) as tmp:
            rpath = tmp.name
        os.unlink(rpath)
        env = dict(os.environ, CDYNAMO_SEMANTICS_REPORT=rpath)
        cmd = [PY, "-m", "pytest", "-q", "-rA", "--tb=no", "-p", "no:cacheprovider", path]
        for d in deselect:
            cmd += ["--deselect", d]
        p = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, env=env)
        for line in p.stdout.splitlines():
            m = re.match(r"^(PASSED|FAILED|ERROR) (\S+)", line)
            if m:
                outcomes[m.group(2)] = m.group(1).lower()
        if os.path.exists(rpath):
            records = [json.loads(line) for line in open(rpath)]
            os.unlink(rpath)
        if p.returncode in (0, 1):
            break
        if 2 <= p.returncode <= 5:  # pytest's own errors (interrupted, internal, usage, nothing collected)
            if not retried_usage:  # e.g. the extension was being rebuilt while collecting: once more
                retried_usage = True
                continue
            crashed.append((f"{path} (pytest exit status {p.returncode}, not a case crash)", p.returncode,
                            (p.stdout + p.stderr)[-1500:]))
            break
        # A crash: the first collected case without an outcome is the culprit.
        done = set(outcomes)
        culprit = next((i for i in ids if i not in done and i not in deselect), None)
        if culprit is None:  # every case finished: the process died on the way out
            crashed.append((f"{path} (at interpreter exit, after all cases)", p.returncode,
                            (p.stdout + p.stderr)[-1500:]))
            break
        crashed.append((culprit, p.returncode, (p.stdout + p.stderr)[-1500:]))
        deselect.append(culprit)
        outcomes = {}
    for c, rc, _ in crashed:
        if c in ids:
            outcomes[c] = "crashed"
    return records, outcomes, crashed, ids


def root_cause(rec):
    f = rec.get("failure") or ""
    if "WRONG" in f:
        return "WRONG " + re.sub(r"^.*?WRONG ", "", f.splitlines()[0])[:60].split(":")[0]
    if rec.get("native_reasons"):
        r = re.sub(r" at 0x[0-9a-f]+", "", rec["native_reasons"][0])
        if re.match(r"call of <class 'semantics\.", r):
            return "call of <class 'user-defined class'> is not supported yet (creating a user object in the trace)"
        if re.match(r"call of <class '\w*(Error|Exception)'>", r):
            return "call of <class 'SomeError'> is not supported yet (creating an exception object)"
        m = re.match(r"cannot trace a value of type (\w+) yet", r)
        if m and m.group(1) not in ("dict", "list", "tuple", "set", "str", "int", "float"):
            return "cannot trace a value of type <user-defined class> yet (user object as input/global)"
        return r
    if "compiled raised" in f or "compiled returned" in f:
        return "compiled call raised / returned differently: " + f.splitlines()[0][:120]
    if "not a cache hit" in f and "frame_count" in f:
        return "recompiles on the second call with fresh arguments (guard too specific; torch._dynamo does not)"
    if "frame_count" in f:
        return "graph count differs: " + re.sub(r"\d+", "N", f.splitlines()[0])
    return f.splitlines()[0][:150] if f else "(no record: failed outside check())"


def case_source(nodeid):
    m = re.match(r"tests/semantics/(\w+)\.py::\w+\[(\w+)", nodeid)
    if not m:
        return None
    sys.path.insert(0, os.path.join(ROOT, "tests"))
    try:
        mod = importlib.import_module(f"semantics.{m.group(1)}")
        fn = getattr(mod, m.group(2), None)
        return inspect.getsource(fn) if fn is not None else None
    except Exception:  # noqa: BLE001
        return None


def main():
    all_recs, per_file, crashes = [], {}, []
    for f in FILES:
        recs, outcomes, crashed, ids = run_file(os.path.join("tests", "semantics", f))
        all_recs += recs
        crashes += crashed
        n_pass = sum(1 for v in outcomes.values() if v == "passed")
        n_fail = sum(1 for v in outcomes.values() if v in ("failed", "error"))
        per_file[f] = (len(ids), n_pass, n_fail, sum(1 for c in crashed if c[0] in ids))
        print(f, per_file[f], flush=True)

    failing = [r for r in all_recs if r["stage"] != "passed"]
    wrong = [r for r in failing if "WRONG" in (r.get("failure") or "")]
    groups = collections.defaultdict(list)
    for r in failing:
        groups[root_cause(r)].append(r["nodeid"])

    L = ["# Semantic corpus status", "",
         "Generated by `tests/semantics/report.py` (one pytest process per file). "
         "Each case runs eagerly, then compiled by cdynamo twice on fresh arguments (first call + cache hit), "
         "comparing results, exceptions, argument state and global torch state, and asserting the graph count "
         "with no native frames; then torch._dynamo on the same function as the reference.", ""]
    tot = [sum(v[i] for v in per_file.values()) for i in range(4)]
    L += ["## Totals", "", f"**{tot[0]} cases: {tot[1]} pass, {tot[2]} fail, {tot[3]} crash.**", "",
          "| file | cases | pass | fail | crash |", "|---|---:|---:|---:|---:|"]
    for f, (n, p, fl, c) in per_file.items():
        L.append(f"| {f} | {n} | {p} | {fl} | {c} |")
    L.append("")

    L += ["## Wrong results and crashes (fix these first)", ""]
    if not wrong and not crashes:
        L += ["None.", ""]
    for c, rc, tail in crashes:
        L += [f"### CRASH {c} (exit status {rc})", "", "```", tail.strip()[-800:], "```", ""]
    for r in wrong:
        msg = r["failure"].split("\n(stats:")[0]
        L += [f"### {r['nodeid']}", "", "```", msg.strip()[:900], "```"]
        if r.get("native_reasons"):
            L += [f"native frame reason: `{r['native_reasons'][0]}`"]
        src = case_source(r["nodeid"])
        if src:
            L += ["", "```python", src.rstrip(), "```"]
        L.append("")

    L += ["## Failing cases by root cause", "",
          "Root cause = the first reason in `cdynamo.stats()['native_frames']`, or, where every frame was captured, "
          "the kind of failure.", ""]
    for cause, ids in sorted(groups.items(), key=lambda kv: (-len(kv[1]), kv[0])):
        L.append(f"### {len(ids)} — `{cause}`")
        L.append("")
        for i in ids:
            L.append(f"- {i.split('::', 1)[1]} ({i.split('::')[0].rsplit('/', 1)[-1]})")
        L.append("")

    L += ["## torch._dynamo reference", "",
          "Cases torch._dynamo (same function, `torch._dynamo.testing.CompileCounter`, fresh arguments twice) "
          "does not capture in `expect_graphs` graphs without a graph break:", ""]
    for r in all_recs:
        d = r.get("dynamo") or {}
        if d and (d.get("graph_breaks") or d.get("error") or
                  (r["expect_graphs"] is not None and d.get("graphs") != r["expect_graphs"])):
            L.append(f"- {r['nodeid'].split('::', 1)[1]}: expect_graphs={r['expect_graphs']}, dynamo graphs={d.get('graphs')}, "
                     f"breaks={d.get('graph_breaks')}, error={d.get('error')}, reasons={d.get('break_reasons')[:1]}")
    L.append("")
    out = os.path.join(HERE, "STATUS.md")
    with open(out, "w") as fh:
        fh.write("\n".join(L))
    print("wrote", out, f"({tot[0]} cases, {tot[1]} pass)")


if __name__ == "__main__":
    main()
