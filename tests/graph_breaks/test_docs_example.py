"""The data-dependent branch from TorchDynamo's documentation (torch.compile "graph breaks"):

    y = x * 2
    if y.sum() > 0: z = y.relu()
    else:           z = y.tanh()
    return z + 1

TorchDynamo compiles it as three graphs: everything up to the comparison, then one resume
function per branch, each compiled when it is first taken. cdynamo must do the same: called
with a positive then a negative input, exactly 3 graphs, the one break reported each time,
results equal to eager.
"""
import torch
import torch._dynamo
import torch._dynamo.testing

import cdynamo
import cdynamo.testing

from .harness import check_breaks


def toy_example(x):
    y = x * 2
    if y.sum() > 0:
        z = y.relu()
    else:
        z = y.tanh()
    return z + 1


def positive():
    return (torch.rand(8) + 0.1,)


def negative():
    return (-torch.rand(8) - 0.1,)


def test_docs_example_three_graphs_one_break():
    cnt = cdynamo.testing.CompileCounter()
    cf = cdynamo.compile(toy_example, backend=cnt)
    pos, neg = positive()[0], negative()[0]

    out = cf(pos)
    torch.testing.assert_close(out, toy_example(pos))
    st = cdynamo.stats()
    assert cnt.frame_count == 2  # x * 2, sum, gt | relu, + 1
    assert st["graph_breaks"] == 1
    (r,) = st["graph_break_reasons"]
    assert "data-dependent" in r["reason"] and r["line"] == toy_example.__code__.co_firstlineno + 2
    assert st["frames_native"] == 0

    out = cf(neg)
    torch.testing.assert_close(out, toy_example(neg))
    st = cdynamo.stats()
    assert cnt.frame_count == 3  # the other branch's resume function: tanh, + 1
    # The root frame's entry hits: its break is not traced (or reported) again.
    assert st["graph_breaks"] == 1 and len(st["graph_break_reasons"]) == 1
    assert st["frames_native"] == 0

    # Both branches are cached now: no further graphs.
    torch.testing.assert_close(cf(pos * 3), toy_example(pos * 3))
    torch.testing.assert_close(cf(neg * 3), toy_example(neg * 3))
    assert cnt.frame_count == 3
    assert cdynamo.stats()["cache_misses"] == 3

    # The ops of each graph, as TorchDynamo splits them.
    ops = [[n.target.__name__ if hasattr(n.target, "__name__") else str(n.target)
            for n in g.graph.nodes if n.op.startswith("call")] for g in cnt.graphs]
    assert len(ops[0]) == 3 and len(ops[1]) == 2 and len(ops[2]) == 2
    assert any("relu" in o for o in ops[1]) and any("tanh" in o for o in ops[2])


def test_docs_example_explain_reports_one_break_per_call():
    for make in (positive, negative):
        (x,) = make()
        report = cdynamo.explain(toy_example)(x)
        assert report.graph_count == 2
        assert report.graph_break_count == 1
        (reason,) = report.break_reasons
        assert "data-dependent" in reason.reason
        torch.testing.assert_close(report.out, toy_example(x))
        assert [len(ops) for ops in report.ops_per_graph] == [3, 2]


def test_docs_example_matches_torch_dynamo():
    cnt = torch._dynamo.testing.CompileCounter()
    df = torch.compile(toy_example, backend=cnt)
    df(positive()[0])
    df(negative()[0])
    assert cnt.frame_count == 3
    torch._dynamo.reset()


def test_docs_example_through_harness():
    check_breaks(toy_example, [positive, negative, positive, negative], expect_graphs=3, expect_breaks=1,
                 reason="data-dependent")
