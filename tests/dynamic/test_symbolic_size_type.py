"""x.shape and x.size() are a torch.Size under dynamic shapes too (found while
fuzzing sequence operators): a symbolic shape was held as a plain tuple, so type(),
isinstance(), a slice or a + of it, and a shape returned or alive at a graph break, were
tuples where eagerly they are Sizes; torch.Size([x.shape[0], 5]) returned the trace's
SymInts. Each case is compared with eager, types all the way down, on the first call and on
a cache hit of another length, and must be captured (no frame run natively)."""
import pytest
import torch

import cdynamo
from cdynamo.testing import CompileCounter


def same(a, b):
    """Equal values of identical types, containers item by item."""
    if type(a) is not type(b):
        return False
    if isinstance(a, torch.Tensor):
        return torch.equal(a, b)
    if isinstance(a, (tuple, list)):
        return len(a) == len(b) and all(same(x, y) for x, y in zip(a, b))
    return a == b


def outcome(fn, x):
    try:
        return ("ok", fn(x))
    except Exception as e:  # noqa: BLE001 - the exception is the outcome compared
        return ("raised", type(e), str(e))


def shape(x):
    return x + 1, x.shape, x.size()


def size_type(x):
    return x + 1, type(x.shape) is torch.Size, isinstance(x.size(), torch.Size), isinstance(x.shape, tuple)


def slices(x):
    return x + 1, x.shape[1:], x.shape[:-1], x.size()[::-1]


def concatenations(x):
    s = x.shape
    return x + 1, s + (1,), (1,) + s, s + s, s * 2, 2 * s, s[:1] + (x.shape[-1],)


def numel(x):
    return x + 1, x.shape.numel(), x[0].shape.numel()


def made_from_sizes(x):
    return x + 1, torch.Size([x.shape[0], 5]), torch.Size(list(x.shape)), torch.Size(x.shape[1:])


def through_a_break(x):
    s = x.shape[1:]
    print("break")
    return x + 1, s, type(s).__name__


def size_with_a_list_raises(x):
    out = []
    for other in ([1], [x.shape[0]]):
        try:
            out.append(x.shape + other)
        except TypeError as e:
            out.append(str(e))
    try:
        out.append([1] + x.shape)
    except TypeError as e:
        out.append(str(e))
    return x + 1, out


def reshapes(x):
    return x.view(x.shape[:-1] + (-1,)).sum(), x.new_zeros(x.shape[1:]), torch.zeros(x.size()).sum()


CASES = [shape, size_type, slices, concatenations, numel, made_from_sizes, through_a_break,
         size_with_a_list_raises, reshapes]


@pytest.mark.parametrize("fn", CASES, ids=lambda f: f.__name__)
def test_symbolic_shape_is_a_torch_size(fn, capsys):
    cnt = CompileCounter()
    cf = cdynamo.compile(fn, backend=cnt, dynamic=True)
    for x in (torch.randn(2, 3), torch.randn(4, 5)):
        got, want = outcome(cf, x), outcome(fn, x)
        assert got[0] == want[0] == "ok" and same(got[1], want[1]), (got, want)
    assert cnt.frame_count >= 1
    assert not cdynamo.stats()["native_frames"], cdynamo.stats()["native_frames"]
    # Symbolic: one compile served both lengths, its sizes SymInts of the graph.
    assert any(isinstance(n.meta.get("example_value"), torch.SymInt)
               for gm in cnt.graphs for n in gm.graph.nodes if n.op == "placeholder")


def test_stride_stays_a_tuple():
    def fn(x):
        return x + 1, x.stride(), type(x.stride()) is tuple

    cf = cdynamo.compile(fn, backend=CompileCounter(), dynamic=True)
    for x in (torch.randn(2, 3), torch.randn(4, 5)):
        assert same(cf(x), fn(x))
