"""Union types made in the frame: ``int | None`` is computed at trace time (a
types.UnionType), and one that leaves the frame was not rebuilt ("returning a object is not
supported yet": the frame ran natively). It is made again from its members after the graph,
``operator.or_(operator.or_(a, b), c)``, as eager makes it: an equal union, a new object each
call. The message for what still cannot be returned names the value's type.

Each case runs eagerly and compiled (first call and a cache hit, same_as_eager: results,
types, argument state, graph counts against torch._dynamo).
"""
import typing

import torch

import cdynamo
import cdynamo.testing

from .harness import same_as_eager

T = typing.TypeVar("T")


def one():
    return (torch.randn(3),)


def test_returned_union_types():
    def fn(x):
        return int | None, int | str | None, list[int] | None, T | float, x + 1
    same_as_eager(fn, one)


def test_union_in_containers_and_used_in_the_trace():
    def fn(x):
        u = int | None
        ok = isinstance(3, u) and not isinstance("s", u)
        return {"u": u}, [u], ok, x * 2
    same_as_eager(fn, one)


def test_union_is_a_new_object_each_call_as_in_eager():
    def fn(x):
        return int | None, x + 1
    cdynamo.reset()
    cnt = cdynamo.testing.CompileCounter()
    cfn = cdynamo.compile(fn, backend=cnt)
    first, second = cfn(torch.ones(2))[0], cfn(torch.ones(2))[0]
    assert first == second == (int | None) and type(first) is type(int | None)
    assert first is not second  # eager: `int | None` makes a new union every time
    assert fn(torch.ones(2))[0] is not fn(torch.ones(2))[0]
    st = cdynamo.stats()
    assert cnt.frame_count == 1 and st["frames_native"] == 0 and st["cache_hits"] >= 1


def test_union_alive_at_a_graph_break():
    def fn(x):
        u = int | None
        y = x + 1
        torch._dynamo.graph_break()
        return u, isinstance(None, u), y * 2
    ea = one()
    eager = fn(*ea)
    cdynamo.reset()
    cnt = cdynamo.testing.CompileCounter()
    cfn = cdynamo.compile(fn, backend=cnt)
    for _ in range(2):
        got = cfn(*ea)
        assert got[0] == eager[0] and got[1] is eager[1] and torch.equal(got[2], eager[2])
    st = cdynamo.stats()
    assert st["frames_native"] == 0, [n.get("reason") for n in st["native_frames"]]
    assert cnt.frame_count == 2 and st["graph_breaks"] >= 1
