"""The translation records behind the summary, the trace and the report keep nothing of the
program alive: a compiled function, its graph module and its code die with the program's
last reference, and the history stays bounded."""
import collections
import gc
import weakref

import torch

import cdynamo
from cdynamo import _events
from cdynamo.testing import CompileCounter


def _make_fn(i=0):
    # A code object of its own (not a constant of this module's code, which lives on).
    src = f"def f(x):\n    y = x * {i + 2}\n    print('break')\n    return y + 1\n"
    ns = {}
    exec(compile(src, f"<generated {i}>", "exec"), ns)
    return ns["f"]


def test_records_hold_no_code_or_graph_module(capsys):
    graphs = []

    def backend(gm, example_inputs):
        graphs.append(weakref.ref(gm))
        return gm.forward

    f = _make_fn()
    code_ref = weakref.ref(f.__code__)
    compiled = cdynamo.compile(f, backend=backend)
    x = torch.randn(3)
    torch.testing.assert_close(compiled(x), f(x))
    assert len(graphs) == 2
    assert any(r.kind == "captured" and r.has_graph for r in _events.records)
    assert all(r.graph_module is None for r in _events.records)
    assert all(isinstance(r.code, _events.CodeInfo) for r in _events.records)
    summary = _events.summary()
    assert "graphs compiled:" in summary

    del compiled, f
    cdynamo.reset()
    gc.collect()
    assert code_ref() is None
    assert all(g() is None for g in graphs)


def test_history_is_bounded(monkeypatch):
    assert _events.records.maxlen == _events.MAX_RECORDS
    # The same bound, made small: the newest records stay.
    monkeypatch.setattr(_events, "records", collections.deque(maxlen=5))
    counter = CompileCounter()
    for i in range(12):
        g = cdynamo.compile(_make_fn(i), backend=counter)
        g(torch.randn(2))
    assert counter.frame_count == 24  # each: the graph before the break, and the resume function's
    assert len(_events.records) == 5
    assert [r.code.co_filename for r in _events.records][-1] == "<generated 11>"
