"""Fixtures of the graph-break corpus: clean cdynamo and torch._dynamo around every case."""
import json
import os

import pytest

from . import harness
from semantics import harness as semantics_harness


def pytest_configure(config):
    # torch._dynamo warns once per C function it cannot trace (the breaks these cases are about).
    config.addinivalue_line("filterwarnings", "ignore:Dynamo does not know how to trace:UserWarning")


@pytest.fixture(autouse=True)
def _fresh_compilers(request):
    with semantics_harness.fresh_compilers(harness.CURRENT, request.node.nodeid):
        yield


def pytest_terminal_summary(terminalreporter):
    recs = harness.RECORDS
    if not recs:
        return
    compared = sum(1 for r in recs if r["compared_with_dynamo"])
    fewer = [r for r in recs if r["compared_with_dynamo"] and r["cdynamo_graphs"] < r["dynamo"]["graphs"]]
    skipped = [r for r in recs if r["dynamo"] and not r["compared_with_dynamo"]]
    terminalreporter.section("graph-break corpus")
    terminalreporter.write_line(f"{len(recs)} checks, {compared} compared with torch._dynamo's graph count, "
                                f"{len(fewer)} with fewer graphs than torch._dynamo")
    for r in skipped:
        d = r["dynamo"]
        terminalreporter.write_line(f"  not compared: {r['nodeid']}: dynamo error={d['error']!s:.150} "
                                    f"frames total/ok={d['frames_total']}/{d['frames_ok']} ops dynamo/cdynamo={d['ops']}/{r.get('cdynamo_ops')}")
    path = os.environ.get("CDYNAMO_BREAKS_REPORT")
    if path:
        with open(path, "w") as f:
            for r in recs:
                f.write(json.dumps(r, default=str) + "\n")
