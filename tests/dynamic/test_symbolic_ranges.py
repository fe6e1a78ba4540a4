"""range() and indexing on symbolic sizes: range needs its values, so a symbolic
size (or int) passed to it is specialized with a shape guard, as torch._dynamo specializes
it; a size held across a graph break reaches the resumed code. Each case is compared with
eager on the first call and on hits, and with torch._dynamo's compile count."""
import pytest
import torch
import torch._dynamo.testing

import cdynamo
from cdynamo.testing import CompileCounter


def dynamo_count(fn, calls, **kw):
    torch._dynamo.reset()
    cnt = torch._dynamo.testing.CompileCounter()
    cf = torch.compile(fn, backend=cnt, **kw)
    for args in calls:
        cf(*args)
    return cnt.frame_count


def same(got, expected):
    if isinstance(expected, (list, tuple)):
        assert type(got) is type(expected) and len(got) == len(expected)
        for g, e in zip(got, expected):
            same(g, e)
    else:
        torch.testing.assert_close(got, expected)


def run(cf, fn, calls):
    for args in calls:
        expected = fn(*args)
        same(cf(*args), expected)
        same(cf(*args), expected)  # a cache hit


def range_of_size(x):
    y = x
    for i in range(x.shape[0]):
        y = y + i
    return y


def test_range_of_a_symbolic_size_specializes_it_with_a_shape_guard():
    cnt = CompileCounter()
    cf = cdynamo.compile(range_of_size, backend=cnt, dynamic=True)
    calls = [(torch.randn(n),) for n in (3, 4, 3, 4)]
    run(cf, range_of_size, calls)
    assert cnt.frame_count == 2 == dynamo_count(range_of_size, calls, dynamic=True)
    assert cdynamo.stats()["graph_breaks"] == 0 and cdynamo.stats()["native_frames"] == []
    assert [len([n for n in g.graph.nodes if n.op == "call_function"]) for g in cnt.graphs] == [3, 4]
    guards = "\n".join(e["guards"] for e in cdynamo.cache_entries(range_of_size))
    assert "Eq(L['x'].size()[0], 3)" in guards and "Eq(L['x'].size()[0], 4)" in guards, guards
    reason = cdynamo.stats()["recompile_reasons"][0]["reason"]
    assert "L['x'].size()[0] = 4" in reason and "range_of_size" in reason


def rows(x):
    return [x[i] * 2 for i in range(x.size(0))]


def test_indexing_in_a_comprehension_over_range_of_a_size():
    cnt = CompileCounter()
    cf = cdynamo.compile(rows, backend=cnt, dynamic=True)
    calls = [(torch.randn(n, 3),) for n in (2, 3, 2)]
    run(cf, rows, calls)
    assert cnt.frame_count <= dynamo_count(rows, calls, dynamic=True)
    assert cdynamo.stats()["native_frames"] == []


def range_of_int(x, n):
    for i in range(n, n + 2):
        x = x * i
    return x


def test_range_of_a_symbolic_int_argument():
    cnt = CompileCounter()
    cf = cdynamo.compile(range_of_int, backend=cnt, dynamic=True)
    calls = [(torch.randn(3), k) for k in (1, 2, 1)]
    run(cf, range_of_int, calls)
    assert cnt.frame_count == 2 == dynamo_count(range_of_int, calls, dynamic=True)
    assert cdynamo.stats()["native_frames"] == []


def size_across_a_break(x):
    n = x.shape[0]
    torch._dynamo.graph_break()
    return x + n


def test_a_size_held_across_a_graph_break_reaches_the_resumed_code():
    # The graph before the break has no op, only the size symbol as its output: it is run as
    # the graph module itself, no backend (this raised "the compiled graph returned 0
    # outputs" when it was not run at all).
    cnt = CompileCounter()
    cf = cdynamo.compile(size_across_a_break, backend=cnt, dynamic=True)
    calls = [(torch.randn(n),) for n in (4, 5, 9)]
    run(cf, size_across_a_break, calls)
    assert cdynamo.stats()["native_frames"] == []
    assert cnt.frame_count == 1 <= dynamo_count(size_across_a_break, calls, dynamic=True)


def index_by_int(x, n):
    return x[n] + x[-1]


def test_indexing_a_tensor_by_a_symbolic_int_keeps_it_symbolic():
    # x[n] with n a symbol is torch.select(x, 0, n) in the graph, as torch._dynamo records
    # it (Tensor.__getitem__ on the fake would take n's __index__ and specialize it).
    cnt = CompileCounter()
    cf = cdynamo.compile(index_by_int, backend=cnt, dynamic=True)
    x = torch.randn(6, 2)
    calls = [(x, k) for k in (1, 2, 4, 5)]
    run(cf, index_by_int, calls)
    assert cnt.frame_count == 1 == dynamo_count(index_by_int, calls, dynamic=True)
    assert any(n.target is torch.select for n in cnt.graphs[0].graph.nodes)
    # Negative and out-of-range indices: eager's results and eager's errors.
    run(cf, index_by_int, [(x, -1), (x, -6)])
    for k in (6, -7):
        with pytest.raises(IndexError) as eager:
            index_by_int(x, k)
        with pytest.raises(IndexError) as compiled:
            cf(x, k)
        assert str(compiled.value) == str(eager.value)
    assert cdynamo.stats()["native_frames"] == []


def index_0d(x, n):
    return x.sum()[n]


def test_indexing_a_0d_tensor_by_a_symbolic_int_raises_like_eager():
    cf = cdynamo.compile(index_0d, backend=CompileCounter(), dynamic=True)
    with pytest.raises(IndexError) as eager:
        index_0d(torch.randn(3), 0)
    with pytest.raises(IndexError) as compiled:
        cf(torch.randn(3), 0)
    assert str(compiled.value) == str(eager.value)
