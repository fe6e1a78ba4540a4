"""docs/opcodes.md accounts for every CPython 3.11 opcode (fast: parses the table, runs no corpus).

Regenerate the table with ``PYTHONPATH=src .venv/bin/python tools/opcode_coverage.py``.
"""
import dis
import re
import sys
from pathlib import Path

import pytest

# The table lists CPython 3.11's opcodes; other versions' are in docs/python_versions.md.
pytestmark = pytest.mark.skipif(sys.version_info[:2] != (3, 11), reason="docs/opcodes.md is the 3.11 opcode table")

ROOT = Path(__file__).resolve().parent.parent
TABLE = ROOT / "docs" / "opcodes.md"
TRACE_SOURCES = ROOT / "csrc" / "trace"
REGENERATE = "regenerate it: PYTHONPATH=src .venv/bin/python tools/opcode_coverage.py"

ROW = re.compile(r"^\|\s*`([A-Z_0-9]+)`(?:\s*\((\d+)\))?\s*\|([^|]*)\|")
STATUSES = ("traced", "handled, not exercised by a test", "not an instruction (folded by the decoder)")


def _rows():
    rows = []
    for line in TABLE.read_text().splitlines():
        m = ROW.match(line)
        if m:
            rows.append((m.group(1), m.group(2), m.group(3).strip()))
    return rows


# A source named *_py3XX.cpp is compiled only for that version: another version's dispatch
# does not count.
_OTHER_VERSION = re.compile(r"_py3\d+\.cpp$")
_THIS_VERSION = f"_py{sys.version_info[0]}{sys.version_info[1]}.cpp"


def _handled():
    names = set()
    for path in TRACE_SOURCES.rglob("*.cpp"):
        if path.name == "graph_break.cpp":  # instructions that may break, not the dispatch
            continue
        if _OTHER_VERSION.search(path.name) and not path.name.endswith(_THIS_VERSION):
            continue
        names.update(re.findall(r"\bcase\s+(?:bytecode::)?Op::([A-Z_0-9]+)\s*:", path.read_text()))
    return names


def test_every_opcode_appears_once_with_a_status():
    rows = _rows()
    assert rows, f"no table rows in {TABLE}"
    seen = {}
    for name, number, status in rows:
        seen.setdefault(name, []).append(status)
        if number is not None and name in dis.opmap:
            assert int(number) == dis.opmap[name], f"{name}: number {number} != dis.opmap {dis.opmap[name]}"
    missing = sorted(set(dis.opmap) - set(seen))
    assert not missing, f"opcodes missing from {TABLE.name}: {missing}; {REGENERATE}"
    extra = sorted(set(seen) - set(dis.opmap))
    assert not extra, f"rows for names that are not base opcodes of dis.opmap: {extra}"
    dup = sorted(n for n, s in seen.items() if len(s) > 1)
    assert not dup, f"opcodes listed more than once: {dup}"
    for name, (status,) in seen.items():
        assert status, f"{name} has an empty status"
        assert status in STATUSES or re.match(r"unsupported: \S", status), f"{name}: unknown status {status!r}"


def test_traced_opcodes_are_handled_by_the_interpreter():
    handled = _handled()
    traced = [n for n, _, s in _rows() if s == "traced"]
    assert traced
    not_handled = sorted(set(traced) - handled)
    assert not not_handled, f"marked traced but no `case Op::NAME:` in csrc/trace: {not_handled}"


def test_table_is_not_stale_about_handled_opcodes():
    """An opcode the dispatch now handles must not still be listed as unsupported."""
    handled = _handled()
    stale = sorted(n for n, _, s in _rows() if s.startswith("unsupported") and n in handled)
    if stale:
        pytest.fail(f"now handled in csrc/trace but listed as unsupported: {stale}; {REGENERATE}")
