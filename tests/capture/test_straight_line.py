"""Straight-line tensor code: one graph, results equal eager on the first call and on hits."""
import operator

import pytest
import torch
import torch._dynamo.testing

import cdynamo
from cdynamo.testing import CompileCounter


def compiled(fn, **kw):
    cnt = CompileCounter()
    return cdynamo.compile(fn, backend=cnt, **kw), cnt


def test_matmul_relu_add_captures_one_graph_and_hits():
    def f(x, y):
        return (x @ y).relu() + 1

    cf, cnt = compiled(f)
    x, y = torch.randn(3, 4), torch.randn(4, 5)
    torch.testing.assert_close(cf(x, y), f(x, y))
    assert (cnt.frame_count, cnt.op_count) == (1, 3)
    x2, y2 = torch.randn(3, 4), torch.randn(4, 5)
    torch.testing.assert_close(cf(x2, y2), f(x2, y2))
    assert cnt.frame_count == 1, "a hit with same-shaped inputs compiles nothing"
    s = cdynamo.stats()
    assert (s["cache_hits"], s["cache_misses"], s["frames_captured"], s["frames_native"]) == (1, 1, 1, 0)


def test_new_shape_recompiles():
    def f(x, y):
        return (x @ y).relu() + 1

    cf, cnt = compiled(f)
    torch.testing.assert_close(cf(torch.ones(2, 2), torch.ones(2, 2)), torch.full((2, 2), 3.0))
    out = cf(torch.ones(3, 2), torch.ones(2, 4))
    torch.testing.assert_close(out, torch.full((3, 4), 3.0))
    assert cnt.frame_count == 2
    assert cdynamo.stats()["recompiles"] == 1
    # Both entries stay usable.
    cf(torch.ones(2, 2), torch.ones(2, 2))
    cf(torch.ones(3, 2), torch.ones(2, 4))
    assert cnt.frame_count == 2


def test_changed_python_constant_recompiles():
    def f(x, scale, shift):
        return x * scale + shift

    cf, cnt = compiled(f)
    x = torch.randn(4)
    torch.testing.assert_close(cf(x, 2.0, 1), f(x, 2.0, 1))
    torch.testing.assert_close(cf(x, 2.0, 1), f(x, 2.0, 1))
    assert cnt.frame_count == 1
    torch.testing.assert_close(cf(x, 3.0, 1), f(x, 3.0, 1))
    assert cnt.frame_count == 2
    torch.testing.assert_close(cf(x, 3.0, 5), f(x, 3.0, 5))
    assert cnt.frame_count == 3
    # An int where a float was seen is a different constant type: recompile, never reuse.
    torch.testing.assert_close(cf(x, 3, 5), f(x, 3, 5))
    assert cnt.frame_count == 4


BINARY = [operator.add, operator.sub, operator.mul, operator.truediv, operator.floordiv, operator.mod,
          operator.pow, operator.matmul, operator.lt, operator.le, operator.eq, operator.ne, operator.gt,
          operator.ge]


@pytest.mark.parametrize("op", BINARY, ids=lambda o: o.__name__)
def test_binary_operators_on_tensors(op):
    src = {operator.add: "a + b", operator.sub: "a - b", operator.mul: "a * b", operator.truediv: "a / b",
           operator.floordiv: "a // b", operator.mod: "a % b", operator.pow: "a ** b", operator.matmul: "a @ b",
           operator.lt: "a < b", operator.le: "a <= b", operator.eq: "a == b", operator.ne: "a != b",
           operator.gt: "a > b", operator.ge: "a >= b"}[op]
    ns = {}
    exec(f"def f(a, b):\n    return ({src}) * 1", ns)
    f = ns["f"]
    cf, cnt = compiled(f)
    a, b = torch.rand(3, 3) + 0.5, torch.rand(3, 3) + 0.5
    torch.testing.assert_close(cf(a, b), f(a, b))
    torch.testing.assert_close(cf(b, a), f(b, a))
    assert cnt.frame_count == 1


def test_bitwise_and_unary_and_inplace_operators():
    def f(a, b, x):
        c = (a & b) | (a ^ b)
        c = ~c
        y = -x + (+x)
        y += 2
        y *= x
        return c, y, a << 1, b >> 1

    cf, cnt = compiled(f)
    args = (torch.tensor([1, 2, 3]), torch.tensor([3, 1, 0]), torch.randn(3))
    for _ in range(2):
        for got, want in zip(cf(*args), f(*args)):
            torch.testing.assert_close(got, want)
    assert cnt.frame_count == 1


def test_metadata_answers_at_trace_time():
    def f(x):
        n, m = x.shape
        return x.view(m, n) * x.dim() + x.size(0) + x.ndim + (1 if x.dtype == torch.float32 else 2), x.size()

    cf, cnt = compiled(f)
    x = torch.randn(2, 3)
    for _ in range(2):
        out, size = cf(x)
        torch.testing.assert_close(out, f(x)[0])
        assert size == torch.Size([2, 3])
    assert cnt.frame_count == 1
    # view, mul and three adds: metadata reads are answered at trace time, as in Dynamo.
    ref = torch._dynamo.testing.CompileCounter()
    torch.compile(f, backend=ref)(x)
    assert cnt.op_count == ref.op_count == 5


def test_indexing_and_slicing():
    def f(x, y):
        return x[0], x[:, 1:3], x[..., ::2], x[None, 1], x[1, -1], y[(0, 1)], [y, x][1][0, 0]

    cf, cnt = compiled(f)
    x, y = torch.randn(3, 4), torch.randn(2, 2)
    for _ in range(2):
        for got, want in zip(cf(x, y), f(x, y)):
            torch.testing.assert_close(got, want)
    assert cnt.frame_count == 1


def test_tuple_and_list_outputs_and_constants():
    def f(x):
        a = x + 1
        return [a, (a * 2, None, "tag"), 3]

    cf, cnt = compiled(f)
    x = torch.randn(2)
    for _ in range(2):
        out = cf(x)
        assert isinstance(out, list) and isinstance(out[1], tuple)
        torch.testing.assert_close(out[0], x + 1)
        torch.testing.assert_close(out[1][0], (x + 1) * 2)
        assert out[1][1:] == (None, "tag") and out[2] == 3
    assert cnt.frame_count == 1


def test_returned_input_is_the_same_object():
    def f(x, y):
        return x, y + 1

    cf, cnt = compiled(f)
    x, y = torch.randn(2), torch.randn(2)
    for _ in range(2):
        a, b = cf(x, y)
        assert a is x
        torch.testing.assert_close(b, y + 1)
    assert cnt.frame_count == 1


def test_torch_functions_and_kwargs():
    def f(x, w):
        y = torch.nn.functional.linear(x, w)
        y = torch.cat([y, torch.zeros(2, 3)], dim=1)
        y = torch.softmax(y, dim=-1)
        return torch.sum(y, dim=0, keepdim=True), torch.split(y, 2, dim=1)

    cf, cnt = compiled(f)
    x, w = torch.randn(2, 4), torch.randn(5, 4)
    for _ in range(2):
        got, want = cf(x, w), f(x, w)
        torch.testing.assert_close(got[0], want[0])
        for g, e in zip(got[1], want[1]):
            torch.testing.assert_close(g, e)
    assert cnt.frame_count == 1


def test_function_without_tensor_ops_compiles_no_graph(dynamo_skips_empty_frames):
    def f(x, n):
        return x, n * 2

    cf, cnt = compiled(f)
    x = torch.randn(2)
    assert cf(x, 3) == (x, 6)
    assert cf(x, 3) == (x, 6)
    assert cnt.frame_count == 0
    s = cdynamo.stats()
    # No op traced: the frame runs natively from then on, as torch._dynamo skips it.
    assert s["frames_captured"] == 0 and s["frames_native"] == 1 and s["cache_hits"] == 0
    assert "no op traced" in s["native_frames"][0]["reason"]


def test_inlined_user_functions_and_closures():
    scale = 3.0

    def helper(t, k=2, *, bias=0.5):
        return t * k + bias

    def f(x):
        return helper(x) + helper(x, 4, bias=1.0) * scale

    cf, cnt = compiled(f)
    x = torch.randn(3)
    for _ in range(2):
        torch.testing.assert_close(cf(x), f(x))
    assert cnt.frame_count == 1


def test_grad_mode_is_guarded():
    def f(x):
        return x * 2

    cf, cnt = compiled(f)
    x = torch.randn(2, requires_grad=True)
    assert cf(x).requires_grad
    with torch.no_grad():
        assert not cf(x).requires_grad
    assert cnt.frame_count == 2
