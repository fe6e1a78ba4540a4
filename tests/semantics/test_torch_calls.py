"""Torch callables called without tensor arguments, decided by what they are:
Python helpers of torch are traced, the override-dispatch queries are answered from the
values, readers of global state are folded and guarded, aten operators go to the graph,
other bindings break at the call. Each case: eager vs cdynamo on the first call and on a
cache hit, graph counts with a counting backend and, where it helps, torch._dynamo's."""
import pytest
import torch
import torch._dynamo
from torch._dynamo.testing import CompileCounter as DynamoCounter

import cdynamo
from cdynamo.testing import CompileCounter


def run(fn, *args):
    """(eager, cdynamo first, cdynamo hit, counter, stats)."""
    expected = fn(*args)
    cdynamo.reset()
    cnt = CompileCounter()
    compiled = cdynamo.compile(fn, backend=cnt)
    first = compiled(*args)
    hit = compiled(*args)
    return expected, first, hit, cnt, cdynamo.stats()


def dynamo_graphs(fn, *args):
    torch._dynamo.reset()
    cnt = DynamoCounter()
    torch.compile(fn, backend=cnt)(*args)
    torch._dynamo.reset()
    return cnt.frame_count


def same(a, b):
    if isinstance(a, torch.Tensor):
        assert isinstance(b, torch.Tensor) and a.dtype == b.dtype and torch.equal(a, b), (a, b)
    elif isinstance(a, (tuple, list)):
        assert type(a) is type(b) and len(a) == len(b)
        for x, y in zip(a, b):
            same(x, y)
    else:
        assert type(a) is type(b) and a == b, (a, b)


def one_graph(fn, *args):
    expected, first, hit, cnt, stats = run(fn, *args)
    same(expected, first)
    same(expected, hit)
    assert cnt.frame_count == 1, stats["graph_break_reasons"]
    assert stats["graph_breaks"] == 0 and not stats["native_frames"], (stats["graph_break_reasons"],
                                                                         stats["native_frames"])
    assert cnt.frame_count <= dynamo_graphs(fn, *args)
    return cnt


def test_assert_on_a_python_bool_is_one_graph():
    # torch._assert -> torch._C._has_torch_function((cond,)) on a bool: answered False.
    def f(x):
        y = x * 2
        torch._assert(x.dim() == 2, "expected a matrix")
        return y + 1

    one_graph(f, torch.randn(3, 4))


def test_assert_that_fails_raises_as_in_eager():
    def f(x):
        y = x * 2
        torch._assert(x.dim() == 3, "expected a 3-d tensor")
        return y + 1

    with pytest.raises(AssertionError, match="expected a 3-d tensor"):
        f(torch.randn(3, 4))
    cdynamo.reset()
    with pytest.raises(AssertionError, match="expected a 3-d tensor"):
        cdynamo.compile(f, backend=CompileCounter())(torch.randn(3, 4))


def test_has_torch_function_on_constants_and_objects():
    class Plain:
        pass

    class Overrides:
        @classmethod
        def __torch_function__(cls, func, types, args=(), kwargs=None):
            return NotImplemented

    p, o = Plain(), Overrides()

    def f(x):
        a = torch._C._has_torch_function((1, "s", None))
        b = torch._C._has_torch_function_unary(p)
        c = torch._C._has_torch_function_variadic(1, 2.0)
        return x + 1, a, b, c

    one_graph(f, torch.randn(3))

    def g(x):
        return x + 1, torch._C._has_torch_function_unary(o)

    expected, first, hit, cnt, stats = run(g, torch.randn(3))
    same(expected, first)
    same(expected, hit)
    assert expected[1] is True


def test_jit_is_tracing_and_is_scripting_fold():
    # torch.jit.is_tracing is Python: it calls torch._C._is_tracing(), a pybind11 reader.
    def f(x):
        y = x * 2
        if torch.jit.is_tracing() or torch.jit.is_scripting():
            y = y - 1
        return y + 1

    one_graph(f, torch.randn(3))


def test_state_readers_fold():
    def f(x):
        return (x + 1, torch.is_grad_enabled(), torch.get_default_dtype(), torch.is_autocast_enabled(),
                torch._C._get_privateuse1_backend_name(), torch._C._are_functorch_transforms_active(),
                torch._C._is_any_autocast_enabled(), torch.is_inference_mode_enabled(),
                torch.cuda.is_available(), torch.compiler.is_compiling())

    expected, first, hit, cnt, stats = run(f, torch.randn(3))
    assert cnt.frame_count == 1 and stats["graph_breaks"] == 0, stats["graph_break_reasons"]
    same(expected[:-1], first[:-1])
    same(expected[:-1], hit[:-1])
    assert expected[-1] is False and first[-1] is True and hit[-1] is True


def test_folded_reader_is_guarded():
    # The default dtype was folded at trace time: changing it must not reuse the entry.
    def f(n):
        return torch.zeros(n) + 1, torch.get_default_dtype()

    cdynamo.reset()
    cnt = CompileCounter()
    compiled = cdynamo.compile(f, backend=cnt)
    same(f(3), compiled(3))
    same(f(3), compiled(3))
    assert cnt.frame_count == 1
    old = torch.get_default_dtype()
    torch.set_default_dtype(torch.float64)
    try:
        same(f(3), compiled(3))
        assert compiled(3)[0].dtype == torch.float64
        assert cnt.frame_count == 2
    finally:
        torch.set_default_dtype(old)
    same(f(3), compiled(3))
    assert cnt.frame_count == 2  # the first entry serves again


def test_factories_and_dtype_queries_are_operators():
    def f(x):
        z = torch.zeros(2, 3) + torch.ones(3) * torch.arange(3)
        d = torch.promote_types(torch.int32, torch.float32)
        return x + z.sum(), d, torch.result_type(1, 2.0), torch.can_cast(torch.float, torch.int)

    cnt = one_graph(f, torch.randn(2, 3))
    assert cnt.op_count >= 4


def test_random_factory_is_a_graph_op():
    def f(x):
        r = torch.rand(4)
        return x + r * 0, r.shape

    expected, first, hit, cnt, stats = run(f, torch.randn(4))
    same(expected, first)
    same(expected, hit)
    assert cnt.frame_count == 1 and stats["graph_breaks"] == 0, stats["graph_break_reasons"]


def test_other_binding_breaks_with_its_name():
    # A C binding that is neither a reader nor an operator may change state: it runs natively.
    def f(x):
        y = x + 1
        torch.set_num_threads(torch.get_num_threads())
        return y * 2

    expected, first, hit, cnt, stats = run(f, torch.randn(3))
    same(expected, first)
    same(expected, hit)
    assert cnt.frame_count == 2
    reasons = [b["reason"] for b in stats["graph_break_reasons"]]
    assert any("torch.set_num_threads()" in r for r in reasons), reasons
    assert not any("pybind11" in r for r in reasons), reasons


def test_pybind_reader_reason_has_no_record_name():
    # A pybind11 reader whose result is not a constant: the break names it module.name.
    def f(x):
        y = x + 1
        s = torch._C._get_tracing_state()
        return y * 2, s

    expected, first, hit, cnt, stats = run(f, torch.randn(3))
    same(expected, first)
    same(expected, hit)
    assert cnt.frame_count == 1  # None when not tracing: a constant


# ---- in-place operators on numbers (M13) ------------------------------------------------

def test_augmented_assignment_to_an_int_is_out_of_place():
    # acc = 0; acc += t: an int has no __iadd__, so acc = acc + t (FX must not print `0 += t`).
    def f(x):
        acc = 0
        acc += (x > 0).long() * 4
        acc *= 2
        return acc + 1

    expected, first, hit, cnt, stats = run(f, torch.randn(5))
    same(expected, first)
    same(expected, hit)
    assert cnt.frame_count == 1 and not stats["native_frames"], stats["native_frames"]
    assert cnt.frame_count <= dynamo_graphs(f, torch.randn(5))


def test_augmented_assignment_to_a_float_and_operator_iadd():
    import operator

    def f(x):
        s = 1.5
        s -= x.sum()
        s = operator.iadd(2, s)
        return s

    expected, first, hit, cnt, stats = run(f, torch.randn(5))
    same(expected, first)
    same(expected, hit)
    assert cnt.frame_count == 1 and not stats["native_frames"], stats["native_frames"]


def test_augmented_assignment_to_a_tensor_stays_in_place():
    def f(x):
        y = x.clone()
        z = y
        y += 1
        y *= x
        return z, y is z

    x = torch.randn(4)
    expected, first, hit, cnt, stats = run(f, x)
    same(expected, first)
    same(expected, hit)
    assert first[1] is True
    assert cnt.frame_count == 1


# ---- identity of in-place results, structseq results ----------------------------------

def test_inplace_result_is_its_receiver():
    def f(x):
        y = x.mul_(2)
        z = x.view(-1)
        w = y.add_(1)
        s = {x, y, w}
        return len(s), y is x, w is x, z is x, x + 1

    args = lambda: (torch.ones(3),)  # noqa: E731
    expected = f(*args())
    cdynamo.reset()
    cnt = CompileCounter()
    compiled = cdynamo.compile(f, backend=cnt)
    first = compiled(*args())
    hit = compiled(*args())
    same(expected, first)
    same(expected, hit)
    assert expected[:4] == (1, True, True, False)
    assert cnt.frame_count == 1, cdynamo.stats()["graph_break_reasons"]


def test_computed_tensors_are_distinct_objects():
    def f(x):
        y = x + 1
        z = y.relu()
        return y is z, y is x, len({x, y, z}), z

    expected, first, hit, cnt, stats = run(f, torch.randn(4))
    same(expected, first)
    same(expected, hit)
    assert cnt.frame_count == 1, stats["graph_break_reasons"]


def test_structseq_fields_index_and_type():
    def f(x):
        m = torch.max(x, dim=0)
        s = x.sort(dim=1)
        v, i = m
        return (m.values + 1, m.indices, m[0] is m.values, v * 2, i, s.values.floor(), s[1],
                type(m) is torch.return_types.max, isinstance(m, tuple))

    expected, first, hit, cnt, stats = run(f, torch.randn(3, 4))
    same(expected, first)
    same(expected, hit)
    assert cnt.frame_count == 1, stats["graph_break_reasons"]
    assert cnt.frame_count <= dynamo_graphs(f, torch.randn(3, 4))


def test_structseq_returned_keeps_its_type():
    def f(x):
        return torch.min(x * 2, dim=1)

    x = torch.randn(3, 4)
    expected, first, hit, cnt, stats = run(f, x)
    for got in (first, hit):
        assert type(got) is type(expected)
        same(tuple(expected), tuple(got))
        same(expected.values, got.values)
    assert cnt.frame_count == 1


# ---- graph breaks at LOAD_METHOD / LOAD_GLOBAL (M8) --------------------------------------

def _unmodelled_receiver():
    # An object of a C type the tracer has no model of: its methods are found by LOAD_METHOD.
    import array
    return array.array("d", [1.0, 2.0])


ARR = _unmodelled_receiver()


def test_break_at_load_method_resumes_after_it():
    def f(x):
        y = x * 2
        n = ARR.count(2.0)  # LOAD_METHOD on an object the tracer cannot model
        return y + n

    x = torch.randn(3)
    expected, first, hit, cnt, stats = run(f, x)
    same(expected, first)
    same(expected, hit)
    assert not stats["native_frames"], stats["native_frames"]
    assert cnt.frame_count >= 1


def test_break_at_load_method_keeps_bound_methods_right():
    # The break runs LOAD_ATTR + PUSH_NULL natively: a bound method then called as [NULL, bound].
    def f(x):
        y = x + 1
        v = ARR.tolist()
        return y * len(v), v

    x = torch.randn(3)
    expected, first, hit, cnt, stats = run(f, x)
    same(expected, first)
    same(expected, hit)
    assert not stats["native_frames"], stats["native_frames"]


REG = {int: 2, float: 3}  # keys the tracer does not model as constants (types)


def test_break_at_load_global_keeps_the_graph_before_it():
    # Before: the whole frame ran natively (no break possible at LOAD_GLOBAL).
    def f(x):
        y = x * 2
        return y + REG.get(int)

    x = torch.randn(3)
    expected, first, hit, cnt, stats = run(f, x)
    same(expected, first)
    same(expected, hit)
    assert cnt.frame_count >= 1  # y = x * 2 is captured
    assert all("<resume at" in n["function"] for n in stats["native_frames"]), stats["native_frames"]


# ---- Python helpers of torch with callables; bindings that are not operators -------------

def test_pytree_tree_map_with_a_function_is_traced():
    import torch.utils._pytree as pytree

    def f(x, y):
        out = pytree.tree_map(lambda t: t * 2, {"a": x, "b": [y, x]})
        return out["a"] + out["b"][0], out["b"][1]

    args = (torch.randn(3), torch.randn(3))
    expected, first, hit, cnt, stats = run(f, *args)
    same(expected, first)
    same(expected, hit)
    # Traced into, not recorded as one op of a lambda (pytree's registry, a dict keyed by
    # types, still breaks inside).
    reasons = [b["reason"] for b in stats["graph_break_reasons"]]
    assert not any("cannot be passed to a graph operation" in r for r in reasons), reasons
    assert cnt.frame_count >= 1


def test_python_op_wrapper_is_still_one_op():
    import torch.nn.functional as F

    def f(x):
        return F.relu(x) + F.gelu(x)

    cnt = one_graph(f, torch.randn(4))
    assert cnt.op_count == 3


def test_binding_with_tensors_that_is_not_an_operator_breaks():
    from torch._C._dynamo.eval_frame import unsupported

    def f(x, y):
        a = x + 1
        b = unsupported(a, y)
        return b * 2

    args = (torch.randn(3), torch.randn(3))
    expected, first, hit, cnt, stats = run(f, *args)
    same(expected, first)
    same(expected, hit)
    reasons = [b["reason"] for b in stats["graph_break_reasons"]]
    assert any("unsupported()" in r for r in reasons), reasons
    assert cnt.frame_count == 2 == dynamo_graphs(f, *args)
