"""Objects rebuilt after the graph keep the program's identities: a list made in the trace
and reachable twice is one list, an input container handed back is the input itself, and
locals that alias each other still do after a graph break."""
import torch

import cdynamo
from cdynamo.testing import CompileCounter


def _twice(fn, *args):
    cnt = CompileCounter()
    cf = cdynamo.compile(fn, backend=cnt)
    return cf(*args), cf(*args), cnt


def test_list_made_in_the_trace_returned_twice_is_one_object():
    def f(x):
        a = [x + 1]
        return a, a, {"k": a}

    for r in _twice(f, torch.ones(2))[:2]:
        assert r[0] is r[1] and r[2]["k"] is r[0]
    assert _twice(f, torch.ones(2))[2].frame_count == 1


def test_container_that_contains_itself():
    def f(x):
        a = [x * 2]
        a.append(a)
        return a

    r1, r2, cnt = _twice(f, torch.ones(2))
    for r in (r1, r2):
        assert r[1] is r
        torch.testing.assert_close(r[0], torch.full((2,), 2.0))
    assert cnt.frame_count == 1


def test_input_list_returned_is_the_input_itself():
    def f(lst, x):
        lst.append(x + 1)
        return lst

    lst = []
    cf = cdynamo.compile(f, backend="eager")
    assert cf(lst, torch.ones(1)) is lst
    assert cf(lst, torch.ones(1)) is lst
    assert len(lst) == 2


def test_aliased_locals_stay_aliased_across_a_graph_break():
    def f(x):
        a = [x + 1]
        b = a
        print("break")
        b.append(x * 3)
        return a, b

    r1, r2, cnt = _twice(f, torch.ones(2))
    for a, b in (r1, r2):
        assert a is b and len(a) == 2
    assert cdynamo.stats()["graph_breaks"] == 1
    assert cnt.frame_count == 2
