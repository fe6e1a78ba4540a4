"""Guard provenance: every recompile reason says where its guard came from, the
file:line of the traced program's use that installed it with the inlined call chain; and
explain() shows symbolic sizes and shape guards. The text is built on the miss, from what
the trace recorded."""
import torch
import torch._dynamo.testing

import cdynamo
from cdynamo.testing import CompileCounter

SCALE = 2.0


def line_of(fn, text):
    import inspect
    lines, first = inspect.getsourcelines(fn)
    (i,) = [k for k, line in enumerate(lines) if text in line]
    return f"{__file__}:{first + i} in {fn.__qualname__}"


def inner(y):
    return y * SCALE


def outer(x):
    y = x + 1
    return inner(y)


def reasons():
    return [r["reason"] for r in cdynamo.stats()["recompile_reasons"]]


def test_reason_names_the_inlined_call_chain_of_a_global_read():
    global SCALE
    cnt = CompileCounter()
    cf = cdynamo.compile(outer, backend=cnt)
    x = torch.ones(3)
    try:
        torch.testing.assert_close(cf(x), outer(x))
        SCALE = 3.0
        torch.testing.assert_close(cf(x), outer(x))
        torch.testing.assert_close(cf(x), outer(x))  # a hit: nothing recorded
    finally:
        SCALE = 2.0
    assert cnt.frame_count == 2
    chain = line_of(inner, "y * SCALE") + " <- " + line_of(outer, "return inner(y)")
    assert reasons() == [f"globals of inner['SCALE'] == 2.0, got 3.0 (guard from {chain})"]


def branchy(x):
    n = x.shape[0]
    if n > 4:
        return x + 1
    return x - 1


def test_shape_guard_reason_names_the_branch_on_the_size():
    cnt = CompileCounter()
    cf = cdynamo.compile(branchy, backend=cnt, dynamic=True)
    for n in (5, 6):
        torch.testing.assert_close(cf(torch.ones(n)), branchy(torch.ones(n)))
    torch.testing.assert_close(cf(torch.ones(3)), branchy(torch.ones(3)))
    assert cnt.frame_count == 2
    (r,) = reasons()
    assert r.startswith("shape guard ") and "L['x'].size()[0] = 3" in r
    assert r.endswith(f"(guard from {line_of(branchy, 'if n > 4')})"), r


def helper_view(t):
    return t.view(-1, 4)


def reshaping(x):
    return helper_view(x) * 2


def test_tensor_guard_reason_names_where_the_input_is_read():
    cnt = CompileCounter()
    cf = cdynamo.compile(reshaping, backend=cnt, dynamic=False)
    cf(torch.ones(8))
    cf(torch.ones(8, dtype=torch.float64))
    (r,) = reasons()
    assert r == ("dtype of L['x']: expected torch.float32, got torch.float64 "
                 f"(guard from {line_of(reshaping, 'return helper_view(x)')})")


def test_explain_shows_symbolic_sizes_and_shape_guards():
    report = cdynamo.explain(branchy, dynamic=True)(torch.ones(6, 3))
    assert report.graph_count == 1
    (sizes,) = report.symbolic_sizes
    assert sizes and any(v == "(s0, s1)" or v.startswith("(s") for v in sizes.values()), sizes
    assert any("L['x'].size()[0]" in g and "4" in g for g in report.shape_guards), report.shape_guards
    text = str(report)
    assert "Symbolic sizes of Graph 1:" in text and "Shape Guards:" in text
    # A static compile shows none.
    report = cdynamo.explain(branchy)(torch.ones(6, 3))
    assert report.symbolic_sizes == [{}] and report.shape_guards == []


def read_apart(x, y):
    a = x.sum()
    b = y.sum() * 2
    return a + b


def test_duck_sizing_relation_reason_names_where_the_tied_input_is_read():
    # x and y of equal sizes share one symbol (duck sizing); no instruction installed the
    # relation, so its origin is where the trace read y, whose size was tied to x's.
    cnt = CompileCounter()
    cf = cdynamo.compile(read_apart, backend=cnt, dynamic=True)
    args = (torch.ones(5), torch.ones(5))
    torch.testing.assert_close(cf(*args), read_apart(*args))
    args = (torch.ones(5), torch.ones(6))
    torch.testing.assert_close(cf(*args), read_apart(*args))
    assert cnt.frame_count == 2
    dcnt = torch._dynamo.testing.CompileCounter()
    df = torch.compile(read_apart, backend=dcnt, dynamic=True)
    df(torch.ones(5), torch.ones(5))
    df(torch.ones(5), torch.ones(6))
    assert cnt.frame_count <= dcnt.frame_count
    (r,) = reasons()
    assert r == ("shape guard L['y'].size()[0] == L['x'].size()[0] failed (L['y'].size()[0] = 6, "
                 f"L['x'].size()[0] = 5) (guard from {line_of(read_apart, 'b = y.sum()')})"), r


def test_specialization_range_reason_names_where_the_input_is_read():
    # The symbolic entry assumes size >= 2 (0/1 specialization, no instruction of the program
    # asked for it): the reason points at the input's first read.
    cnt = CompileCounter()
    cf = cdynamo.compile(read_apart, backend=cnt, dynamic=True)
    for n in (4, 1):
        args = (torch.ones(3), torch.ones(n))
        torch.testing.assert_close(cf(*args), read_apart(*args))
    assert cnt.frame_count == 2
    r = reasons()[0]
    assert "L['y'].size()[0] >= 2" in r and r.endswith(f"(guard from {line_of(read_apart, 'b = y.sum()')})"), r
