"""`python -m cdynamo run`, CDYNAMO=1, the structured trace read by tlparse, and the HTML
capture report loaded in a real headless browser.

One run of examples/torch_compile_program.py (a plain torch.compile program: a graph break,
recompiles, a frame that runs natively) feeds the summary, tlparse and report checks.
"""
import json
import os
import re
import shutil
import subprocess
import sys

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
EXAMPLE = os.path.join(ROOT, "examples", "torch_compile_program.py")
ARTIFACTS = os.path.join(ROOT, "build", "test-artifacts")


def run_cdynamo(args, cwd=None, env=None, timeout=300):
    e = dict(os.environ)
    e.pop("TORCH_TRACE", None)
    e.pop("CDYNAMO_TRACE", None)
    e.update(env or {})
    return subprocess.run([sys.executable, "-m", "cdynamo", "run"] + args, cwd=cwd or ROOT, env=e,
                          capture_output=True, text=True, timeout=timeout)


@pytest.fixture(scope="module")
def example_run(tmp_path_factory):
    d = tmp_path_factory.mktemp("run")
    trace_dir, report = d / "trace", d / "report.html"
    p = run_cdynamo(["--trace", str(trace_dir), "--report", str(report), EXAMPLE])
    return p, trace_dir, report


def test_summary_and_exit_code(example_run):
    p, _, _ = example_run
    assert p.returncode == 0, p.stderr
    assert "ok: [3.0, 3.0, 3.0, 3.0, 3.0]" in p.stdout
    err = p.stderr
    assert "==== cdynamo summary" in err
    assert "frames captured: 4 (2 of them resume functions" in err
    assert "graphs compiled: 4" in err
    assert "graph breaks: 2" in err and "call to torch._dynamo.graph_break()" in err
    assert re.search(r"frames run natively: 1\n  \[2/0\] checked .*ValueError", err)
    assert "recompiles: 2" in err and "size of dim 0 of L['x']: expected 3, got 5" in err
    assert re.search(r"time: frontend \d+\.\d+ s, backends \d+\.\d+ s", err)


def test_script_semantics(tmp_path):
    script = tmp_path / "prog.py"
    script.write_text(
        "import sys, os, torch\n"
        "assert __name__ == '__main__'\n"
        "assert sys.path[0] == os.path.dirname(os.path.abspath(__file__))\n"
        "f = torch.compile(lambda x: x * 2, backend='eager')\n"
        "assert torch.equal(f(torch.ones(2)), torch.ones(2) * 2)\n"
        "import cdynamo; assert cdynamo.installed() and cdynamo.stats()['frames_captured'] == 1\n"
        "print('argv', sys.argv[1:])\n"
        "sys.exit(int(sys.argv[1]))\n")
    p = run_cdynamo([str(script), "3", "--flag"])
    assert p.returncode == 3, p.stderr
    assert "argv ['3', '--flag']" in p.stdout
    assert "frames captured: 1" in p.stderr
    bad = tmp_path / "bad.py"
    bad.write_text("raise KeyError('boom')\n")
    p = run_cdynamo(["--quiet", str(bad)])
    assert p.returncode == 1
    assert "KeyError: 'boom'" in p.stderr and "==== cdynamo summary" not in p.stderr


def test_cdynamo_env_switch(tmp_path):
    # CDYNAMO=1: a program that never imports cdynamo still goes through it.
    script = tmp_path / "plain.py"
    script.write_text(
        "import sys, torch\n"
        "f = torch.compile(lambda x: x + 1, backend='eager')\n"
        "assert torch.equal(f(torch.ones(2)), torch.ones(2) + 1)\n"
        "m = sys.modules.get('cdynamo')\n"
        "print('installed', bool(m and m.installed()), m and m.stats()['frames_captured'])\n")
    env = dict(os.environ, CDYNAMO="1")
    p = subprocess.run([sys.executable, str(script)], env=env, capture_output=True, text=True, timeout=300)
    assert p.returncode == 0, p.stderr
    assert "installed True 1" in p.stdout
    env["CDYNAMO"] = "0"
    p = subprocess.run([sys.executable, str(script)], env=env, capture_output=True, text=True, timeout=300)
    assert "installed False" in p.stdout


def test_tlparse_lists_every_frame_graph_break_and_recompile(example_run, tmp_path):
    tlparse = shutil.which("tlparse") or os.path.join(os.path.dirname(sys.executable), "tlparse")
    if not os.path.exists(tlparse):
        pytest.skip("tlparse is not installed (make test's set-up installs it from requirements-dev.txt)")
    _, trace_dir, _ = example_run
    logs = sorted(trace_dir.glob("*.log"))
    assert logs, "no structured trace written"
    out = tmp_path / "tl_out"
    p = subprocess.run([tlparse, str(logs[0]), "-o", str(out), "--overwrite", "--no-browser"],
                       capture_output=True, text=True, timeout=120)
    assert p.returncode == 0, p.stderr
    directory = json.loads((out / "compile_directory.json").read_text())
    artifacts = {cid: [a["name"] for a in v["artifacts"]] for cid, v in directory.items()}

    def has(cid, prefix):
        return any(name.startswith(prefix) for name in artifacts.get(cid, []))

    # scale [0/*] breaks and recompiles; its resume function [1/*] recompiles; checked [2/0] runs natively.
    for cid in ("[0/0]", "[0/1]", "[1/0]", "[1/1]"):
        assert has(cid, "dynamo_output_graph"), (cid, artifacts)
        assert has(cid, "dynamo_cpp_guards_str") and has(cid, "compilation_metrics"), (cid, artifacts)
    assert has("[0/0]", "dynamo_graph_break_reason") and has("[0/1]", "dynamo_graph_break_reason")
    assert has("[0/1]", "recompile_reasons") and has("[1/1]", "recompile_reasons")
    assert not has("[0/0]", "recompile_reasons")
    assert has("[2/0]", "compilation_metrics") and not has("[2/0]", "dynamo_output_graph")
    index = (out / "index.html").read_text()
    status = dict(re.findall(r"<a href='#(\[\d+/\d+\])' class='status-(\w+)'>", index))
    assert status == {"[0/0]": "break", "[0/1]": "break", "[1/0]": "ok", "[1/1]": "ok", "[2/0]": "error"}
    assert "torch_compile_program.py" in index
    reasons = next(out.glob("-_0_1_0/recompile_reasons_*.json")).read_text()
    assert "size of dim 0 of L['x']: expected 3, got 5" in reasons
    brk = next(out.glob("-_0_0_0/dynamo_graph_break_reason_*.txt")).read_text()
    assert "call to torch._dynamo.graph_break()" in brk and "torch_compile_program.py" in brk


def _chromium():
    for name in ("chromium", "chromium-browser", "google-chrome"):
        path = shutil.which(name)
        if path:
            return path
    return None


def test_report_in_headless_browser(example_run):
    _, _, report = example_run
    assert report.exists()
    text = report.read_text()
    assert "http://" not in text.replace("http://www.w3.org", "") and "https://" not in text  # no network
    browser = _chromium()
    if browser is None:
        pytest.skip("chromium is not installed (make test's set-up runs apt-get install chromium where it can)")
    flags = ["--headless", "--no-sandbox", "--disable-gpu", "--enable-logging=stderr", "--v=0"]
    p = subprocess.run([browser] + flags + ["--dump-dom", report.as_uri()], capture_output=True, text=True,
                       timeout=120)
    assert p.returncode == 0, p.stderr
    dom = p.stdout
    console = [line for line in p.stderr.splitlines() if "CONSOLE" in line or "Uncaught" in line]
    assert console == [], console
    assert 'data-ready="1"' in dom and "data-errors" not in dom  # the page's script ran, no error
    assert "marked lines: " in dom

    def row(line):
        m = re.search(rf'<tr id="L{line}"[^>]*>.*?</tr>', dom, re.S)
        assert m, line
        return m.group(0)

    src = open(EXAMPLE).read().splitlines()
    line_of = lambda s: next(i for i, t in enumerate(src, 1) if s in t)  # noqa: E731
    assert 'class="graph"' in row(line_of("y = x * k")) and "graph 0/0 0/1" in row(line_of("y = x * k"))
    brk = row(line_of("torch._dynamo.graph_break()"))
    assert 'class="break"' in brk and "call to torch._dynamo.graph_break()" in brk
    assert "graph 1/0 1/1" in row(line_of("return y.relu() + 1"))
    header = row(line_of("def scale(x, k):"))
    assert "guards [0/0]" in header and "recompile [0/1]" in header and "size of dim 0 of L['x']: expected 3, got 5" in header
    # Each guard also on the line whose use installed it, and the failing one there on the recompile.
    use = row(line_of("y = x * k"))
    assert "guarded here [0/0]" in use and "L[&#x27;k&#x27;] == 2" in use.replace("'", "&#x27;")
    assert "recompile [0/1]" in use and "guard from" in use
    native = row(line_of("def checked(x):"))
    assert 'class="native"' in native and "ValueError" in native
    os.makedirs(ARTIFACTS, exist_ok=True)
    shot = os.path.join(ARTIFACTS, "capture_report.png")
    p = subprocess.run([browser] + flags[:3] + ["--window-size=1300,1100", f"--screenshot={shot}", report.as_uri()],
                       capture_output=True, text=True, timeout=120)
    assert p.returncode == 0 and os.path.getsize(shot) > 10000, p.stderr
