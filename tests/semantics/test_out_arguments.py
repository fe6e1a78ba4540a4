"""torch functions called with out=: the call writes into tensors the trace holds (arguments,
or tensors made in the trace), so it is kept in the graph for that effect, and later reads of
the out tensor see what it wrote. A write that resizes or retypes the out tensor (eager
allows an empty or too small out) is a graph break, the call run eagerly."""
import torch
import torch._dynamo.testing

import cdynamo

from .harness import check, tensors


def test_out_into_an_argument_is_seen_by_later_reads():
    def f(a, b, c):
        r = torch.maximum(a, b, out=c)
        return r is c, c * 2, r + 1

    check(f, tensors((4,), (4,), (4,)), expect_graphs=1)


def test_out_into_a_tensor_made_in_the_trace():
    def f(a, b):
        t = a * 1
        torch.mul(t, b, out=t)
        return t.sum(), t

    check(f, tensors((3, 2), (3, 2)), expect_graphs=1)


def test_out_of_a_reduction_into_an_argument():
    def f(a, c):
        torch.sum(a, 0, out=c)
        return c + 1

    check(f, tensors((3, 4), (4,)), expect_graphs=1)


def test_out_in_a_loop_over_a_list_of_buffers():
    # (torch.optim's amsgrad: the running maximum kept in the state, written with out=)
    def f(xs, bufs):
        for x, b in zip(xs, bufs):
            torch.maximum(b, x.abs(), out=b)
        return [b.sum() for b in bufs]

    check(f, lambda: ([torch.randn(3), torch.randn(2)], [torch.zeros(3), torch.zeros(2)]), expect_graphs=1)


def test_out_that_resizes_is_a_graph_break():
    def f(a, b):
        c = torch.empty(0)
        y = a + 1
        torch.add(a, b, out=c)
        return c, y

    check(f, tensors((4,), (4,)), expect_graphs=1)
    reasons = [r["reason"] for r in cdynamo.stats()["graph_break_reasons"]]
    assert any("out= tensor whose size, strides or dtype" in r for r in reasons), reasons


def test_out_into_an_argument_under_aot_autograd():
    # AOT autograd functionalizes the write: the argument must still end written.
    def f(a, b, c):
        torch.maximum(a, b, out=c)
        return c * 2

    torch.manual_seed(0)
    a, b = torch.randn(5), torch.randn(5)
    c_e, c_c = torch.zeros(5), torch.zeros(5)
    expected = f(a, b, c_e)
    cnt = torch._dynamo.testing.CompileCounterWithBackend("aot_eager")
    g = cdynamo.compile(f, backend=cnt)
    for _ in range(2):
        c_c.zero_()
        torch.testing.assert_close(g(a, b, c_c), expected)
        torch.testing.assert_close(c_c, c_e)
    assert cnt.frame_count == 1
