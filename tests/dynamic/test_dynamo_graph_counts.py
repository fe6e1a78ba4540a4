"""Graph counts against torch._dynamo's on the same calls, for programs where cdynamo used to
compile more under dynamic shapes: a frame whose trace makes no op, max() of a size comparison,
len() of a tensor with a symbolic size, F.interpolate on a symbolic size, and values
read from tensors whose use needs a runtime check (unbacked sizes, torch._check).
Every case compares cdynamo's results with eager on the first call and on a cache hit,
and its graph count with torch._dynamo's in the same test."""
import math
from unittest.mock import patch

import pytest
import torch
import torch._dynamo
import torch._dynamo.testing

import cdynamo
from cdynamo.testing import CompileCounter

# torch._dynamo's defaults on both sides: a frame without ops is skipped for good.
pytestmark = pytest.mark.usefixtures("dynamo_skips_empty_frames")


def run_both(fn, calls, **kw):
    """(cdynamo's counter, torch._dynamo's counter, torch._dynamo's outcome per call) over
    `calls`; cdynamo's results (first call and a hit) equal eager's, or raise what eager
    raises."""
    cnt = CompileCounter()
    cf = cdynamo.compile(fn, backend=cnt, **kw)
    for args in calls:
        try:
            expected = fn(*args)
        except Exception as e:  # noqa: BLE001 - eager's error is the reference
            for _ in range(2):
                with pytest.raises(type(e)):
                    cf(*args)
            continue
        for _ in range(2):  # the first call, then a cache hit
            got = cf(*args)
            torch.testing.assert_close(got, expected)
            if isinstance(expected, torch.Tensor):
                assert got.dtype == expected.dtype
    torch._dynamo.reset()
    ref = torch._dynamo.testing.CompileCounter()
    tf = torch.compile(fn, backend=ref, **kw)
    outcomes = []
    for args in calls:
        try:
            tf(*args)
            outcomes.append("ok")
        except Exception as e:  # noqa: BLE001 - recorded: Dynamo raises on some of these
            outcomes.append(type(e).__name__)
    return cnt, ref, outcomes


def sizes(*ns, **kw):
    return [(torch.randn(n, **kw),) for n in ns]


# A frame whose trace recorded no op -----------------------------------------------------------

def at_least_four(x):
    return max(x.shape[0], 4)


def test_frame_without_ops_runs_natively_for_good_as_dynamo_skips_it():
    # The first call traces no op (a static size): torch._dynamo skips the code for good;
    # cdynamo used to keep an entry and, once the size changed, compile a graph of
    # torch.sym_max alone (1 graph against 0).
    cnt, ref, _ = run_both(at_least_four, sizes(2, 3, 5, 6, 7))
    assert cnt.frame_count == ref.frame_count == 0
    (native,) = [f for f in cdynamo.stats()["native_frames"] if "at_least_four" in f["function"]]
    assert "no op traced" in native["reason"]


def test_frame_without_ops_under_dynamic_true_keeps_its_symbolic_graph():
    # With sizes symbolic from the start the trace records torch.sym_max: a graph, in both.
    cnt, ref, _ = run_both(at_least_four, sizes(2, 3, 5, 6, 7), dynamic=True)
    assert cnt.frame_count == ref.frame_count == 1


def plus_one_if(x, flag):
    return x + 1 if flag else x


def test_recompile_without_ops_stops_the_earlier_entries_too():
    # torch._dynamo marks the code skipped at any trace without ops, a recompile included:
    # the entry of the first call is no longer used either (the frame runs eagerly, so the
    # results are eager's). cdynamo does the same, so counts stay equal.
    x = torch.randn(3)
    cnt, ref, _ = run_both(plus_one_if, [(x, True), (x, False), (x, True), (x, True)])
    assert cnt.frame_count == ref.frame_count == 1


def calls_a_helper(x):
    return helper_without_ops(x) * 2


def helper_without_ops(x):
    return x


def test_frames_called_by_a_skipped_frame_are_still_captured():
    def outer(x):
        n = x.shape[0]  # no op here; the callee makes one
        return calls_a_helper(x) if n > 0 else x

    cnt, ref, _ = run_both(outer, sizes(3, 3))
    assert cnt.frame_count == ref.frame_count == 1


def test_frame_without_ops_under_fullgraph_still_compiles():
    # fullgraph=True: torch._dynamo never skips; an empty graph for a frame returning a
    # tensor, nothing for one returning a number.
    def same(x):
        return x

    cnt, ref, _ = run_both(same, sizes(3, 4), fullgraph=True)
    assert cnt.frame_count == ref.frame_count


# max()/min() of a SymBool and numbers -----------------------------------------------------------

def times_big(x):
    return x * max(x.shape[0] > 3, 0)


def test_max_of_a_size_comparison_is_the_bool_eager_returns():
    # max(True, 0) is True and max(False, 0) False: x * bool keeps x's dtype. The comparison's
    # truth is guarded (as a branch on it is): static 2, then symbolic <= 3, then > 3: three
    # graphs for lengths 2..7. torch._dynamo records torch.sym_max(s0 > 3, 0), which its fake
    # run rejects (a SymBool is not a number): every call after the first raises.
    cnt, ref, outcomes = run_both(times_big, sizes(2, 3, 4, 5, 6, 7))
    assert cnt.frame_count == 3
    assert outcomes[0] == "ok" and set(outcomes[1:]) == {"TorchRuntimeError"}
    assert cdynamo.stats()["graph_break_reasons"] == []


def test_max_of_a_size_comparison_under_dynamic_true():
    cnt, ref, outcomes = run_both(times_big, sizes(2, 3, 4, 5, 6, 7), dynamic=True)
    assert cnt.frame_count == 2  # s0 <= 3 and s0 > 3
    assert set(outcomes) == {"TorchRuntimeError"}


def mixed_max(x, n):
    return x * max(n, 2.5), type(max(n, 2.5)) is int


@pytest.mark.parametrize("dynamic", [None, True])
def test_max_of_an_int_and_a_float_keeps_the_winning_item(dynamic):
    # max(3, 2.5) is the int 3, max(2, 2.5) the float 2.5: the winner itself, with a guard
    # on the comparison (torch.sym_max would make every result a float).
    x = torch.randn(3)
    cnt, ref, _ = run_both(mixed_max, [(x, n) for n in (1, 2, 3, 4, 5)], dynamic=dynamic)
    cf = cdynamo.compile(mixed_max, backend="eager", dynamic=dynamic)
    assert cf(x, 3)[1] is True and cf(x, 2)[1] is False
    assert cnt.frame_count <= ref.frame_count + 1


# len() of a tensor with a symbolic size -------------------------------------------------------

def times_len(x):
    return x * len(x)


@pytest.mark.parametrize("dynamic", [None, True])
def test_len_of_a_tensor_is_its_symbolic_size(dynamic):
    cnt, ref, _ = run_both(times_len, sizes(2, 3, 4, 5), dynamic=dynamic)
    assert cnt.frame_count == ref.frame_count == (2 if dynamic is None else 1)


def test_len_of_a_0d_tensor_raises_as_eager():
    cnt, _, _ = run_both(times_len, [(torch.tensor(2.0),), (torch.tensor(3.0),)], dynamic=True)
    with pytest.raises(TypeError, match="len\\(\\) of a 0-d tensor"):
        times_len(torch.tensor(2.0))


# math functions of a symbolic size ---------------------------------------------------------------

def scaled_by_sqrt(x):
    return x * math.sqrt(x.shape[0])


def scaled_by_floor(x):
    return x * math.floor(x.shape[0] / 3) + math.ceil(x.shape[0] / 4) - math.trunc(x.shape[0] / 5)


@pytest.mark.parametrize("fn", [scaled_by_sqrt, scaled_by_floor])
@pytest.mark.parametrize("dynamic", [None, True])
def test_math_function_of_a_size_stays_symbolic(fn, dynamic):
    # torch._dynamo records torch._sym_sqrt(s0) / math.floor(s0 / 3): one graph for every
    # length (after the first, static one under automatic dynamic).
    cnt, ref, _ = run_both(fn, sizes(4, 5, 6, 7), dynamic=dynamic)
    assert cnt.frame_count == ref.frame_count == (2 if dynamic is None else 1)


def root_of_int(x, n):
    return x * math.sqrt(n)


def test_math_sqrt_of_a_negative_symbolic_int_raises_as_eager():
    x = torch.randn(3)
    cnt, ref, _ = run_both(root_of_int, [(x, 4), (x, 9), (x, 16), (x, -4)], dynamic=True)
    assert cnt.frame_count == 1


# Composite ops with Python decompositions -----------------------------------------------------

def upsample(x):
    return torch.nn.functional.interpolate(x, scale_factor=2)


@pytest.mark.parametrize("dynamic", [None, True])
def test_interpolate_keeps_the_size_symbolic(dynamic):
    # upsample_nearest1d's C++ composite reads sizes() and would specialize the length; run
    # with torch's Python dispatcher on, as torch._dynamo runs every fake op, its Python
    # decomposition keeps it symbolic.
    calls = [(torch.randn(1, 1, n),) for n in (4, 5, 6, 7)]
    cnt, ref, _ = run_both(upsample, calls, dynamic=dynamic)
    assert cnt.frame_count == ref.frame_count == (2 if dynamic is None else 1)


# Runtime asserts on values read from tensors ------------------------------------------------

@pytest.fixture
def capture_dynamic_outputs():
    # cdynamo follows torch._dynamo.config.capture_scalar_outputs (its own option is None);
    # under a ShapeEnv it captures nonzero() whatever capture_dynamic_output_shape_ops says
    # (torch._dynamo breaks there without it), so both are set for torch._dynamo's sake.
    with patch.object(torch._dynamo.config, "capture_scalar_outputs", True), \
            patch.object(torch._dynamo.config, "capture_dynamic_output_shape_ops", True):
        yield


def add_nonzeros(a, b):
    return a.nonzero() + b.nonzero()


def assert_ops(gm):
    return [n.target for n in gm.graph.nodes if n.target is torch.ops.aten._assert_scalar.default]


def test_add_of_two_unbacked_sizes_is_one_graph_with_its_runtime_assert(capture_dynamic_outputs):
    # nonzero()'s sizes are unbacked: the add assumes they agree (or broadcast), which torch
    # defers to a runtime assert; torch._dynamo puts it in the graph, and so does cdynamo
    # now (it used to stop the graph before the add).
    calls = [(torch.tensor([1, 0, 1]), torch.tensor([0, 1, 1])), (torch.tensor([1, 1, 0, 1]), torch.tensor([1, 1, 1, 0]))]
    cnt, ref, outcomes = run_both(add_nonzeros, calls)
    # the second call's lengths differ: a recompile with them symbolic, in both
    assert cnt.frame_count == ref.frame_count == 2 and outcomes == ["ok", "ok"]
    assert all(assert_ops(g) for g in cnt.graphs)
    assert cdynamo.stats()["graph_break_reasons"] == []


def test_unbacked_sizes_that_disagree_fail_the_runtime_assert(capture_dynamic_outputs):
    cnt = CompileCounter()
    cf = cdynamo.compile(add_nonzeros, backend=cnt)
    a, b = torch.tensor([1, 0, 1]), torch.tensor([0, 1, 1])
    torch.testing.assert_close(cf(a, b), add_nonzeros(a, b))
    bad = (torch.tensor([1, 1, 1]), torch.tensor([1, 1, 0]))  # 3 rows against 2
    with pytest.raises(RuntimeError):
        add_nonzeros(*bad)
    with pytest.raises(RuntimeError, match="Runtime assertion failed"):  # torch._dynamo's error too
        cf(*bad)
    assert cnt.frame_count == 1


def zeros_of_item(x, n):
    k = n.item()
    return torch.zeros(k) + torch.ones(k) + x.sum()


def test_sizes_from_item_are_one_graph(capture_dynamic_outputs):
    x = torch.randn(2)
    cnt, ref, outcomes = run_both(zeros_of_item, [(x, torch.tensor(3)), (x, torch.tensor(4))])
    assert cnt.frame_count == ref.frame_count == 1
    assert cdynamo.stats()["graph_break_reasons"] == []


def checked_item(x, t):
    torch._check(t.item() > 0)
    return x * 2


def test_torch_check_of_an_item_is_a_runtime_assert(capture_dynamic_outputs):
    x = torch.randn(3)
    cnt, ref, _ = run_both(checked_item, [(x, torch.tensor(1.5)), (x, torch.tensor(2.5))])
    assert cnt.frame_count == ref.frame_count == 1
    assert assert_ops(cnt.graphs[0])
    cf = cdynamo.compile(checked_item, backend=cnt)
    with pytest.raises(RuntimeError):
        checked_item(x, torch.tensor(-1.5))
    with pytest.raises(RuntimeError, match="Runtime assertion failed"):
        cf(x, torch.tensor(-1.5))
    assert cnt.frame_count == 1
