"""Golden text tests: what the translation of each case in cases.py produced, as text.

For every case the expected file tests/golden/expected/<case>.txt holds the frames that got
cache entries (the case's own code, helpers it called, resume functions), each entry's guard
listing and FX code, the graph breaks and native frames with their reasons, and for every
graph break the generated break code and resume functions (dis). A refactor of the tracer
must leave these texts unchanged; a change of behaviour shows as a diff in review.

    CDYNAMO_GOLDEN_UPDATE=1 .venv/bin/python -m pytest tests/golden   # rewrite the files

The texts are made deterministic: addresses and this checkout's path are replaced.
"""
import dis
import io
import os
import re
import types

import pytest
import torch

import cdynamo
import cdynamo.config
import cdynamo.testing
from cdynamo import _C, _logging

from golden import cases

HERE = os.path.dirname(os.path.abspath(__file__))
EXPECTED = os.path.join(HERE, "expected")
UPDATE = os.environ.get("CDYNAMO_GOLDEN_UPDATE", "") not in ("", "0")
REPO = os.path.dirname(os.path.dirname(HERE))


def _clean(text):
    text = re.sub(r" at 0x[0-9a-f]+", " at 0x?", text)
    text = text.replace(REPO + os.sep, "")
    return text.rstrip() + "\n"


def _disassembly(code):
    buf = io.StringIO()
    dis.dis(code, file=buf, depth=0)
    return buf.getvalue()


def _codes_of_module(module):
    """Every code object defined in `module`, in source order (nested ones included)."""
    out = []

    def visit(code):
        out.append(code)
        for c in code.co_consts:
            if isinstance(c, types.CodeType):
                visit(c)

    for value in vars(module).values():
        fn = getattr(value, "__wrapped__", value)
        if isinstance(fn, types.FunctionType) and fn.__module__ == module.__name__:
            visit(fn.__code__)
        elif isinstance(value, type) and value.__module__ == module.__name__:
            for attr in vars(value).values():
                f = getattr(attr, "fget", attr)
                if isinstance(f, types.FunctionType):
                    visit(f.__code__)
    seen, unique = set(), []
    for c in out:
        if id(c) not in seen:
            seen.add(id(c))
            unique.append(c)
    unique.sort(key=lambda c: (c.co_firstlineno, c.co_qualname))
    return unique


def _frame_text(code, label):
    lines = []
    entries = _C.cache_entries(code)
    for k, e in enumerate(entries):
        lines.append(f"== frame {label} (entry {k + 1} of {len(entries)})")
        lines.append("-- guards")
        lines.append(e["guards"].rstrip())
        gm = e["graph_module"]
        lines.append("-- graph" if gm is not None else "-- no graph")
        if gm is not None:
            lines.append(gm.code.strip())
    return lines


def _same(a, b):
    if isinstance(a, torch.Tensor):
        return isinstance(b, torch.Tensor) and a.shape == b.shape and torch.allclose(a, b, equal_nan=True)
    if isinstance(a, (list, tuple)):
        return type(a) is type(b) and len(a) == len(b) and all(_same(x, y) for x, y in zip(a, b))
    if isinstance(a, dict):
        return type(a) is type(b) and list(a) == list(b) and all(_same(a[k], b[k]) for k in a)
    return True  # objects, iterators, functions: compared by the rest of the suite


def render(name):
    fn, make_args, calls, config = cases.CASES[name]
    events = []
    saved_emit = _logging.emit_bytecode
    saved_config = {k: getattr(cdynamo.config, k) for k in config}
    _logging.emit_bytecode = lambda original, brk, table: events.append((original, brk, table))
    _C.set_log_channels(16)
    try:
        for k, v in config.items():
            setattr(cdynamo.config, k, v)
        cases.reset_state()
        torch.manual_seed(0)
        expected = fn(*make_args())
        counter = cdynamo.testing.CompileCounter()
        compiled = cdynamo.compile(fn, backend=counter)
        for _ in range(calls):
            cases.reset_state()
            torch.manual_seed(0)
            got = compiled(*make_args())
            assert _same(expected, got), f"{name}: compiled result differs from eager"
    finally:
        _logging.emit_bytecode = saved_emit
        _logging.set_logs(os.environ.get("CDYNAMO_LOGS", ""))
        for k, v in saved_config.items():
            setattr(cdynamo.config, k, v)
    s = cdynamo.stats()
    lines = [f"# golden case {name}: {calls} calls",
             f"graphs compiled {s['graphs_compiled']}, frames captured {s['frames_captured']}, "
             f"graph breaks {s['graph_breaks']}, native frames {s['frames_native']}, "
             f"cache hits {s['cache_hits']}, misses {s['cache_misses']}"]
    for b in s["graph_break_reasons"]:
        lines.append(f"graph break in {b['function']}: {b['reason']} (line {b['line']})")
    for n in s["native_frames"]:
        lines.append(f"native frame {n['function']}: {n['reason']} (line {n['line']})")
    for code in _codes_of_module(cases):
        lines += _frame_text(code, code.co_qualname)
    resumes = []
    for original, brk, table in events:
        lines.append(f"== break in {original.co_qualname}")
        lines.append("-- break code")
        lines.append(_disassembly(brk).rstrip())
        for code in _C.resume_codes(table):
            lines.append(f"-- resume function {code.co_name}")
            lines.append(_disassembly(code).rstrip())
            if all(code is not r for r in resumes):
                resumes.append(code)
    for code in resumes:
        lines += _frame_text(code, code.co_name)
    return _clean("\n".join(lines))


@pytest.mark.parametrize("name", sorted(cases.CASES))
def test_golden(name):
    text = render(name)
    path = os.path.join(EXPECTED, name + ".txt")
    if UPDATE:
        os.makedirs(EXPECTED, exist_ok=True)
        with open(path, "w") as f:
            f.write(text)
        return
    assert os.path.exists(path), f"no golden file for {name}: run with CDYNAMO_GOLDEN_UPDATE=1"
    with open(path) as f:
        want = f.read()
    if text != want:
        import difflib

        diff = "".join(difflib.unified_diff(want.splitlines(True), text.splitlines(True), "expected", "got"))
        pytest.fail(f"golden text of {name} changed (CDYNAMO_GOLDEN_UPDATE=1 rewrites it):\n{diff}")
