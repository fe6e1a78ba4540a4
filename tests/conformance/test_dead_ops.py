"""Ops whose results are never used stay in the graph, as torch._dynamo keeps them.

torch._dynamo records every call it traces and only drops, at the end, the unused nodes that
merely read something out of another node (operator.getitem; size/stride/storage_offset/item
of a tensor; arithmetic on symbolic numbers). A frame whose every op is dead is still compiled
(its graph returns nothing); only a frame that recorded no call at all is skipped. Each case
is compared with eager on a first call and a cache hit (same_as_eager, graph count from
torch._dynamo), and the op count of the graph with torch._dynamo's on the same function.
"""
import torch
import torch._dynamo
import torch._dynamo.testing

import cdynamo
import cdynamo.testing

from .harness import same_as_eager


def one():
    return (torch.randn(4, 4),)


def op_counts(fn, make_args, **kw):
    """(cdynamo's, torch._dynamo's) op counts over two calls of fn."""
    counts = []
    for reset, compile_fn, counter in (
        (cdynamo.reset, cdynamo.compile, cdynamo.testing.CompileCounter),
        (torch._dynamo.reset, torch.compile, torch._dynamo.testing.CompileCounter),
    ):
        reset()
        cnt = counter()
        opt = compile_fn(fn, backend=cnt, **kw)
        for _ in range(2):
            opt(*make_args())
        counts.append((cnt.frame_count, cnt.op_count))
        reset()
    return counts


def check(fn, make_args=one, *, ops):
    cnt = same_as_eager(fn, make_args)
    assert cnt.op_count == ops, f"cdynamo counted {cnt.op_count} ops, expected {ops}"
    ours, dynamo = op_counts(fn, make_args)
    assert ours == dynamo, f"(graphs, ops): cdynamo {ours}, torch._dynamo {dynamo}"


def test_dead_op_whose_result_is_only_asked_a_constant_question():
    def fn(x):
        y = x + 1
        return torch.is_floating_point(y), y.dtype, y.shape
    check(fn, ops=1)


def test_every_op_dead_still_compiles_a_graph():
    def fn(x):
        x + 1
        torch.sin(x) * 2
    check(fn, ops=3)


def test_dead_op_inside_a_discarded_container():
    def fn(x):
        return not [x + 1], len((x * 2, x - 3))
    check(fn, ops=3)


def test_dead_factory_and_new_with_a_size():
    def fn(x):
        y = torch.zeros(5, 8)
        z = x.new(y.size())
        return z.size() == y.size(), z.dim()
    check(fn, ops=2)


def test_dead_ops_next_to_live_ones():
    def fn(x):
        unused = x.cos()
        unused = unused.sum()
        return x + 1
    check(fn, ops=3)


def test_unused_items_of_a_tuple_result_are_dropped():
    # max(dim) gives a (values, indices) pair: the unused getitem of indices is dropped, the
    # call itself and the used getitem stay.
    def fn(x):
        values, _indices = x.max(0)
        return values * 2
    check(fn, ops=3)


def test_unused_size_query_under_dynamic_shapes_is_dropped():
    def fn(x):
        n = x.size(0)
        _ = n * 2
        return x + 1

    def args():
        return (torch.randn(torch.randint(3, 9, ()).item(), 4),)

    ours, dynamo = op_counts(fn, args, dynamic=True)
    assert ours == dynamo, f"(graphs, ops): cdynamo {ours}, torch._dynamo {dynamo}"
    same_as_eager(fn, args, compare_with_dynamo=False)


def test_dead_op_before_a_graph_break_is_in_the_first_graph():
    def fn(x):
        x * 3  # dead, before the break
        torch._dynamo.graph_break()
        return x + 1

    ours, dynamo = op_counts(fn, one)
    assert ours == dynamo == (2, 2), f"(graphs, ops): cdynamo {ours}, torch._dynamo {dynamo}"


def test_frame_without_any_call_is_still_skipped():
    def fn(x):
        return x.shape, x.dtype

    ours, dynamo = op_counts(fn, one)
    assert ours == dynamo == (0, 0), f"(graphs, ops): cdynamo {ours}, torch._dynamo {dynamo}"
