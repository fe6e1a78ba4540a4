"""Generate docs/opcodes.md: which CPython 3.11 opcodes the symbolic interpreter handles, and which test exercises each.

Usage (from the repository root):

    PYTHONPATH=src .venv/bin/python tools/opcode_coverage.py            # run the suites, write docs/opcodes.md
    PYTHONPATH=src .venv/bin/python tools/opcode_coverage.py --json out.json   # also dump the raw data

How it works. The test suites (tests/semantics, tests/capture, tests/guards, tests/api by
default) run in this process through ``pytest.main`` with a small plugin that reads
``cdynamo._C.opcode_counts()`` (how many times the C++ interpreter *completed* each base
opcode since process start) before and after every test item; the opcodes whose count grew
are attributed to that test's node id. The torch._dynamo reference runs of the semantic corpus
are skipped (CDYNAMO_SEMANTICS_DYNAMO=0): they do not touch cdynamo's counters.

Every base opcode of ``dis.opmap`` (CPython 3.11) then gets one status, from the data:

- ``not an instruction (folded by the decoder)``: CACHE and EXTENDED_ARG never reach the interpreter;
- ``traced``: the interpreter completed it in at least one test;
- ``handled, not exercised by a test``: it has a ``case Op::NAME:`` in the interpreter's
  dispatch (csrc/trace/*.cpp) but no test completed it: a gap in the tests, to fill;
- ``unsupported: <reason>``: no case handles it; the interpreter's ``default:`` fails the
  trace with "opcode NAME is not supported yet" and the frame runs natively. The reason names
  the language feature (a fixed table below, by opcode family).
"""
import argparse
import datetime
import dis
import json
import os
import re
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
DEFAULT_SUITES = ["tests/semantics", "tests/capture", "tests/guards", "tests/api"]
DEFAULT_OUTPUT = ROOT / "docs" / "opcodes.md"
TRACE_SOURCES = ROOT / "csrc" / "trace"

STATUS_TRACED = "traced"
STATUS_GAP = "handled, not exercised by a test"
STATUS_FOLDED = "not an instruction (folded by the decoder)"
UNSUPPORTED = "unsupported: "

FOLDED = {
    "CACHE": "inline cache unit after an instruction; the decoder skips opCaches(op) units",
    "EXTENDED_ARG": "argument prefix; the decoder folds it into the next instruction's arg",
}

_ASYNC = "coroutines are not traced (the frame runs natively)"
_EXC = "exception handling: not supported yet"
_MATCH = "pattern matching (`match` statement): not supported yet"
_NOT_IN_FUNCTIONS = "never in a function's code: module and class bodies only"

# Why an opcode without a case in the dispatch is unsupported, by family. Used only for
# opcodes the data shows unhandled; a handled opcode never shows these.
REASONS = {
    # async / await
    "GET_AWAITABLE": (_ASYNC, "`await`"),
    "GET_AITER": (_ASYNC, "`async for`"),
    "GET_ANEXT": (_ASYNC, "`async for`"),
    "BEFORE_ASYNC_WITH": (_ASYNC, "`async with`"),
    "END_ASYNC_FOR": (_ASYNC, "end of `async for` (exception path)"),
    "ASYNC_GEN_WRAP": (_ASYNC, "`yield` in an async generator"),
    "SEND": ("`await` and `yield from` delegation: not supported yet",
             "`await`, and `yield from` in generators"),
    "GET_YIELD_FROM_ITER": ("`yield from` delegation: not supported yet", "`yield from` in generators"),
    # exceptions: handlers are only reached when the traced code raises
    "PUSH_EXC_INFO": (_EXC, "entry of an `except`/`finally` handler (reached only when the body raises)"),
    "POP_EXCEPT": (_EXC, "exit of an `except` handler"),
    "CHECK_EXC_MATCH": (_EXC, "`except SomeError:` match test"),
    "RERAISE": (_EXC, "re-raise at the end of `finally`/unmatched `except`/`with` exit"),
    "WITH_EXCEPT_START": (_EXC, "`with` block left by an exception (calls `__exit__` with it)"),
    "CHECK_EG_MATCH": ("exception groups (`except*`): not supported yet", "`except*` match test"),
    "PREP_RERAISE_STAR": ("exception groups (`except*`): not supported yet", "end of `except*` handlers"),
    "RAISE_VARARGS": ("`raise` statement: not supported yet", "`raise`, `raise X`, `raise X from Y`"),
    "LOAD_ASSERTION_ERROR": ("failing `assert`: not supported yet", "the failure path of `assert`"),
    # pattern matching
    "MATCH_MAPPING": (_MATCH, "mapping pattern"),
    "MATCH_SEQUENCE": (_MATCH, "sequence pattern"),
    "MATCH_KEYS": (_MATCH, "mapping pattern keys"),
    "MATCH_CLASS": (_MATCH, "class pattern"),
    "GET_LEN": (_MATCH, "length test of a sequence pattern"),
    # module and class bodies
    "LOAD_NAME": (_NOT_IN_FUNCTIONS, "name lookup through locals() dict (module/class body, exec)"),
    "STORE_NAME": (_NOT_IN_FUNCTIONS, "name store into locals() dict (module/class body, exec)"),
    "DELETE_NAME": (_NOT_IN_FUNCTIONS, "`del name` in a module/class body"),
    "LOAD_CLASSDEREF": ("never in a function's code: class bodies only",
                        "free variable read in a class body"),
    "SETUP_ANNOTATIONS": (_NOT_IN_FUNCTIONS, "creates `__annotations__` in a module/class body"),
    "IMPORT_STAR": ("never in a function's code: `from m import *` is a SyntaxError in a function",
                    "module level only"),
    "PRINT_EXPR": ("never in a function's code: interactive mode (`compile(..., 'single')`) only",
                   "REPL expression statement"),
    # can appear in a function, not implemented
    "IMPORT_NAME": ("`import` inside a function: not supported yet", "`import m` / `from m import x`"),
    "IMPORT_FROM": ("`from m import x` inside a function: not supported yet", "`from m import x`"),
    "LOAD_BUILD_CLASS": ("`class` statement inside a function: not supported yet",
                         "pushes `builtins.__build_class__`"),
    "DELETE_GLOBAL": ("`del` of a global: not supported yet", "`global g; del g`"),
}

# What each handled opcode is for, shown in the notes of gaps (so the missing test is obvious).
SYNTAX_HINTS = {
    "DELETE_FAST": "`del x` of a local",
    "SWAP": "e.g. `a, b = b, a` (3 names), chained comparisons, `with` exits",
    "COPY": "chained comparisons `a < b < c`, augmented subscript `xs[i] += 1`",
    "UNARY_INVERT": "`~x`",
    "UNARY_POSITIVE": "`+x`",
    "JUMP_IF_TRUE_OR_POP": "`a or b` as a value",
    "JUMP_IF_FALSE_OR_POP": "`a and b` as a value",
    "BUILD_SLICE": "`xs[a:b:c]`",
    "UNPACK_EX": "`a, *b = xs`",
    "LIST_TO_TUPLE": "`(*xs, y)`",
    "CALL_FUNCTION_EX": "`f(*args, **kwargs)`",
    "DICT_MERGE": "`f(**kw)` / `f(**a, **b)`",
    "DICT_UPDATE": "`{**a, **b}`",
    "SET_UPDATE": "`{*xs}`",
    "DELETE_SUBSCR": "`del xs[i]`",
    "DELETE_ATTR": "`del obj.attr`",
    "DELETE_DEREF": "`del v` of a cell/nonlocal variable",
    "POP_JUMP_BACKWARD_IF_NONE": "loop that ends with `if x is None` back-edge",
    "POP_JUMP_BACKWARD_IF_NOT_NONE": "loop that ends with `if x is not None` back-edge",
    "POP_JUMP_BACKWARD_IF_TRUE": "`while` loop with a condition that compiles to a back-edge test",
    "POP_JUMP_BACKWARD_IF_FALSE": "`while` loop with a condition that compiles to a back-edge test",
    "MAP_ADD": "dict comprehension",
    "SET_ADD": "set comprehension",
    "LIST_APPEND": "list comprehension",
    "BUILD_CONST_KEY_MAP": "`{'a': x, 'b': y}`",
    "FORMAT_VALUE": "f-string field",
    "BUILD_STRING": "f-string with several pieces",
    "NOP": "`pass`, some constant-folded conditions",
    "YIELD_VALUE": "`yield` in a generator",
    "RETURN_GENERATOR": "generator function prologue",
}


# ----------------------------------------------------------------------------- sources

# Sources whose `case Op::` labels are not the interpreter's dispatch (graph_break.cpp
# lists the instructions that may run natively at a break).
NOT_DISPATCH = {"graph_break.cpp"}


def handled_opcodes(src_dir=TRACE_SOURCES):
    """{opcode name: [files with a `case Op::NAME:` label]} over the interpreter's sources."""
    out = {}
    this_version = f"_py{sys.version_info[0]}{sys.version_info[1]}.cpp"
    for path in sorted(Path(src_dir).rglob("*.cpp")):
        if path.name in NOT_DISPATCH:
            continue
        if re.search(r"_py3\d+\.cpp$", path.name) and not path.name.endswith(this_version):
            continue  # another Python version's dispatch
        text = path.read_text()
        for name in re.findall(r"\bcase\s+(?:bytecode::)?Op::([A-Z_0-9]+)\s*:", text):
            files = out.setdefault(name, [])
            rel = str(path.relative_to(ROOT))
            if rel not in files:
                files.append(rel)
    return out


def base_opcodes():
    """Every base opcode of this interpreter's `dis.opmap`, in opcode-number order."""
    return sorted(dis.opmap, key=dis.opmap.get)


# ----------------------------------------------------------------------------- running the tests

class OpcodeRecorder:
    """pytest plugin: per test item, the opcodes whose completion count grew while it ran."""

    def __init__(self, counts_fn):
        self.counts_fn = counts_fn
        self.per_test = {}  # nodeid -> {opcode: delta}
        self.outcome = {}   # nodeid -> "passed" | "failed" | "skipped"
        self.order = []

    @pytest.hookimpl(hookwrapper=True)
    def pytest_runtest_protocol(self, item, nextitem):
        before = self.counts_fn()
        yield
        after = self.counts_fn()
        delta = {op: after[op] - before.get(op, 0) for op in after if after[op] > before.get(op, 0)}
        self.per_test[item.nodeid] = delta
        self.order.append(item.nodeid)

    def pytest_runtest_logreport(self, report):
        prev = self.outcome.get(report.nodeid)
        if report.failed:
            self.outcome[report.nodeid] = "failed"
        elif report.skipped and prev is None:
            self.outcome[report.nodeid] = "skipped"
        elif report.when == "call" and report.passed and prev is None:
            self.outcome[report.nodeid] = "passed"



def run_suites(suites, extra_args=()):
    os.environ["CDYNAMO_SEMANTICS_DYNAMO"] = "0"
    src = str(ROOT / "src")
    if src not in sys.path:
        sys.path.insert(0, src)
    from cdynamo import _C

    rec = OpcodeRecorder(_C.opcode_counts)
    os.chdir(ROOT)
    rc = pytest.main(["-q", "-p", "no:cacheprovider", *suites, *extra_args], plugins=[rec])
    return rec, int(rc)


# ----------------------------------------------------------------------------- classification

def classify(per_test, outcome, order, handled):
    """One row per base opcode: (name, status, exercised_by, notes)."""
    rows = []
    for name in base_opcodes():
        tests = [t for t in order if per_test.get(t, {}).get(name, 0) > 0]
        passed = [t for t in tests if outcome.get(t) == "passed"]
        total = sum(per_test[t][name] for t in tests)
        where = handled.get(name)
        notes = []
        if name in FOLDED:
            status = STATUS_FOLDED
            notes.append(FOLDED[name])
        elif tests:
            status = STATUS_TRACED
            if not passed:
                notes.append("completed only in failing tests")
            notes.append(f"completed {total} times")
            if where is None:
                notes.append("**no `case Op::` found in csrc/trace: check the scan**")
        elif where is not None:
            status = STATUS_GAP
            hint = SYNTAX_HINTS.get(name) or (REASONS[name][1] if name in REASONS else None)
            if name == "JUMP_BACKWARD_NO_INTERRUPT" and "SEND" not in handled:
                # CPython 3.11 emits it only in the SEND loop of `yield from` / `await`.
                notes.append("unreachable for now: 3.11 emits it only in the `yield from`/`await` loop, "
                             "right after SEND, which is unsupported")
            else:
                notes.append("**gap: add a test**" + (f" ({hint})" if hint else ""))
        else:
            reason, what = REASONS.get(name, ("not implemented yet", None))
            status = UNSUPPORTED + reason
            if what:
                notes.append(what)
            if not reason.startswith("never in a function"):
                notes.append(f"trace fails (\"opcode {name} is not supported yet\"); the frame runs natively")
        if where:
            notes.append("in " + ", ".join(f"`{w}`" for w in where))
        if tests:
            first = (passed or tests)[0]
            by = f"`{first}`" + (f" (+{len(tests) - 1} more)" if len(tests) > 1 else "")
        else:
            by = ""
        rows.append({"opcode": name, "number": dis.opmap[name], "status": status, "exercised_by": by,
                     "first_test": (passed or tests or [None])[0], "tests": len(tests),
                     "count": total, "notes": "; ".join(notes)})
    return rows


def summarize(rows):
    s = {"traced": 0, "handled-not-exercised": 0, "unsupported": 0, "not-an-instruction": 0}
    for r in rows:
        st = r["status"]
        if st == STATUS_TRACED:
            s["traced"] += 1
        elif st == STATUS_GAP:
            s["handled-not-exercised"] += 1
        elif st == STATUS_FOLDED:
            s["not-an-instruction"] += 1
        else:
            s["unsupported"] += 1
    return s


def render(rows, suites, rc, ntests):
    s = summarize(rows)
    today = datetime.date.today().isoformat()
    esc = lambda t: t.replace("|", "\\|")  # noqa: E731
    lines = [
        "# Opcode coverage (CPython 3.11)",
        "",
        "<!-- Generated by tools/opcode_coverage.py; do not edit by hand. -->",
        "",
        f"Generated on {today} by running, from the repository root:",
        "",
        "```",
        "PYTHONPATH=src .venv/bin/python tools/opcode_coverage.py",
        "```",
        "",
        f"It runs {', '.join(suites)} in one process ({ntests} test items, pytest exit code {rc}; "
        "torch._dynamo reference runs off) and reads `cdynamo._C.opcode_counts()` — how many times the "
        "symbolic interpreter *completed* each base (de-specialized) opcode — before and after every "
        "test; an opcode is attributed to the tests during which its count grew. "
        "\"Exercised by\" names the first such test (a passing one when there is one) and how many others.",
        "",
        "Status, one per base opcode of `dis.opmap`:",
        "",
        f"- **{STATUS_TRACED}**: the interpreter completed it in at least one test;",
        f"- **{STATUS_GAP}**: the dispatch has a `case Op::NAME:` (csrc/trace/*.cpp) but no test "
        "completed it — a test to add;",
        "- **unsupported: reason**: no case handles it; the interpreter's `default:` fails the trace "
        "with \"opcode NAME is not supported yet\" and the frame runs natively (later: a graph break). "
        "Opcodes that the compiler never puts in a function's code say so;",
        f"- **{STATUS_FOLDED}**: CACHE and EXTENDED_ARG never reach the interpreter.",
        "",
        f"Totals: {s['traced']} traced, {s['handled-not-exercised']} handled but not exercised, "
        f"{s['unsupported']} unsupported, {s['not-an-instruction']} not instructions "
        f"({len(rows)} opcodes).",
        "",
        "| opcode | status | exercised by | notes |",
        "|---|---|---|---|",
    ]
    for r in rows:
        lines.append(f"| `{r['opcode']}` ({r['number']}) | {esc(r['status'])} | {esc(r['exercised_by'])} "
                     f"| {esc(r['notes'])} |")
    lines.append("")
    return "\n".join(lines)


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("suites", nargs="*", default=DEFAULT_SUITES, help="test paths (default: %(default)s)")
    ap.add_argument("--output", default=str(DEFAULT_OUTPUT), help="markdown file to write")
    ap.add_argument("--json", help="also write the raw per-test data here")
    ap.add_argument("--pytest-arg", action="append", default=[], help="extra argument for pytest (repeatable)")
    a = ap.parse_args(argv)

    rec, rc = run_suites(a.suites, a.pytest_arg)
    rows = classify(rec.per_test, rec.outcome, rec.order, handled_opcodes())
    Path(a.output).write_text(render(rows, a.suites, rc, len(rec.order)))
    if a.json:
        Path(a.json).write_text(json.dumps({"rows": rows, "per_test": rec.per_test, "outcome": rec.outcome},
                                           indent=1))
    s = summarize(rows)
    print(f"wrote {a.output}: " + ", ".join(f"{v} {k}" for k, v in s.items()))
    for r in rows:
        if r["status"] == STATUS_GAP:
            print(f"  gap: {r['opcode']}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
