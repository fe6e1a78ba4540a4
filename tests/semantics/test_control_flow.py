"""Control flow on Python values: branches, boolean operators, loops, iteration protocols,
branches on tensor metadata, on None, on globals, identity and membership tests."""
import pytest
import torch

from .harness import Cases, check, tensors, with_args

case = Cases()
T4 = tensors((4,))
T23 = tensors((2, 3))

SCALE = 3
MODE = "double"
FLAGS = {"relu": True, "neg": False}
NOTHING = None


@case(with_args(1))
def if_else_on_int_arg(x, n):
    if n > 0:
        return x + n
    else:
        return x - n


@case(with_args(5))
def if_elif_else_chain(x, n):
    if n == 1:
        y = x.sin()
    elif n == 5:
        y = x.cos()
    elif n == 7:
        y = x.tan()
    else:
        y = x
    return y * 2


@case(with_args(0))
def if_on_zero_is_falsy(x, n):
    if n:
        return x + 1
    return x - 1


@case(with_args(True, False))
def and_or_of_bool_args(x, a, b):
    if a and not b:
        x = x * 2
    if a or b:
        x = x + 1
    return x


@case(with_args(0, 7))
def or_returns_operand(x, a, b):
    k = a or b
    m = a and b
    return x * k + m


@case(with_args(3))
def conditional_expression(x, n):
    y = x * 2 if n > 2 else x / 2
    z = (y.relu() if n % 2 else y.abs())
    return z


@case(with_args(4))
def while_loop_counter(x, n):
    i = 0
    while i < n:
        x = x + i
        i += 1
    return x


@case(with_args(10))
def while_with_break(x, n):
    i = 0
    while True:
        if i >= n // 3:
            break
        x = x * 1.5
        i += 1
    return x, i


@case(T4)
def for_range_accumulate(x):
    acc = torch.zeros_like(x)
    for i in range(5):
        acc = acc + x * i
    return acc


@case(T4)
def for_range_start_stop_step(x):
    for i in range(10, 2, -3):
        x = x - i
    return x


@case(T4)
def for_range_continue(x):
    for i in range(6):
        if i % 2 == 0:
            continue
        x = x + i
    return x


@case(T4)
def for_else_no_break(x):
    for i in range(3):
        x = x + 1
    else:
        x = x * 10
    return x


@case(T4)
def for_else_with_break(x):
    for i in range(5):
        if i == 2:
            break
        x = x + 1
    else:
        x = x * 10
    return x


@case(T4)
def nested_loops(x):
    for i in range(3):
        for j in range(i):
            x = x + i * j
    return x


@case(with_args([1.0, 2.0, 3.0]))
def for_over_list_arg(x, ws):
    for w in ws:
        x = x * w
    return x


@case(T4)
def for_over_tuple_literal(x):
    for k in (1, 2, 3):
        x = x + k
    return x


@case(T4)
def for_over_dict_keys(x):
    d = {"a": 1, "b": 2, "c": 3}
    for k in d:
        if k != "b":
            x = x + d[k]
    return x


@case(T4)
def for_over_dict_values_items(x):
    d = {"a": 1.0, "b": 2.0}
    for v in d.values():
        x = x * v
    for k, v in d.items():
        x = x + len(k) * v
    return x


@case(T4)
def for_over_string(x):
    for ch in "abc":
        if ch == "b":
            x = x + 1
        else:
            x = x * 2
    return x


@case(T4)
def for_enumerate(x):
    for i, v in enumerate([10, 20, 30]):
        x = x + i * v
    return x


@case(T4)
def for_enumerate_start(x):
    out = []
    for i, v in enumerate("xy", start=5):
        out.append(x * i)
    return out


@case(T4)
def for_zip(x):
    for a, b in zip([1, 2, 3], (4, 5, 6)):
        x = x + a * b
    return x


@case(T4)
def for_reversed_list(x):
    seq = []
    for v in reversed([1, 2, 3]):
        x = x * 2 + v
        seq.append(v)
    return x, seq


@case(T4)
def iter_next_manual(x):
    it = iter([1, 2, 3])
    a = next(it)
    b = next(it)
    return x + a * 10 + b


@case(T4)
def next_with_default(x):
    it = iter([])
    v = next(it, 7)
    return x * v


@case(T4)
def branch_on_shape(x):
    if x.shape[0] > 2:
        return x.sum()
    return x.mean()


@case(T23)
def branch_on_dim_and_size(x):
    if x.dim() == 2 and x.size(1) == 3:
        return x.t()
    return x


@case(T4)
def branch_on_dtype(x):
    if x.dtype == torch.float32:
        return x.double() + 1
    return x


@case(T4)
def branch_on_is_floating_point(x):
    if x.is_floating_point() and not x.requires_grad:
        return x * 0.5
    return x


@case(T4)
def branch_on_numel_and_ndim(x):
    y = x
    if x.numel() > 3:
        y = y + 1
    if x.ndim != 1:
        y = y * 100
    return y


@case(T4)
def branch_on_device(x):
    if x.device.type == "cpu":
        return x + 1
    return x - 1


@case(lambda: (torch.randn(4), None))
def branch_on_none_arg(x, bias):
    if bias is None:
        return x * 2
    return x + bias


@case(lambda: (torch.randn(4), torch.randn(4)))
def branch_on_not_none_arg(x, bias):
    if bias is not None:
        x = x + bias
    return x


@case(T4)
def branch_on_global_int(x):
    if SCALE > 2:
        return x * SCALE
    return x


@case(T4)
def branch_on_global_str(x):
    if MODE == "double":
        return x * 2
    elif MODE == "half":
        return x / 2
    return x


@case(T4)
def branch_on_global_dict(x):
    if FLAGS["relu"]:
        x = x.relu()
    if FLAGS.get("neg"):
        x = -x
    return x


@case(T4)
def branch_on_global_none(x):
    if NOTHING is None:
        return x + 1
    return x


@case(with_args("relu"))
def membership_in_tuple(x, act):
    if act in ("relu", "gelu"):
        return torch.relu(x)
    return x


@case(with_args(3))
def membership_not_in_list(x, k):
    if k not in [1, 2]:
        return x * k
    return x


@case(T4)
def is_identity_on_type(x):
    if type(x) is torch.Tensor:
        return x + 1
    return x


@case(with_args(2))
def chained_comparison(x, n):
    if 0 < n <= 3:
        return x * n
    return x


@case(with_args(1.5))
def branch_on_float_arg(x, f):
    if f >= 1.0:
        x = x * f
    return x


@case(T4)
def loop_builds_list_then_stack(x):
    parts = []
    for i in range(3):
        parts.append(x + i)
    return torch.stack(parts)


@case(T4)
def while_over_list_pop(x):
    stack = [1, 2, 3]
    while stack:
        x = x + stack.pop()
    return x


@case(with_args(3))
def loop_count_depends_on_arg(x, n):
    out = x
    for _ in range(n):
        out = out.sin()
    return out


@case(lambda: ([torch.randn(2), torch.randn(2), torch.randn(2)],))
def for_over_list_of_tensors(xs):
    total = xs[0] * 0
    for t in xs:
        total = total + t
    return total


@case(lambda: ((torch.randn(2), torch.randn(3)),))
def for_over_tuple_of_tensors_sizes(xs):
    out = []
    for t in xs:
        if t.shape[0] == 3:
            out.append(t.sum())
        else:
            out.append(t * 2)
    return out


@case(T4)
def early_return_in_loop(x):
    for i in range(10):
        x = x + 1
        if i == 3:
            return x
    return x * 0


@case(with_args(None, 2))
def ternary_on_none_default(x, scale, n):
    s = scale if scale is not None else n
    return x * s


@case(T4)
def any_all_over_generator_of_constants(x):
    if all(k > 0 for k in (1, 2, 3)) and not any(k > 5 for k in [1, 2]):
        return x + 1
    return x


@case(T4)
def loop_with_zip_enumerate_nested(x):
    names = ["a", "b"]
    ws = [0.5, 2.0]
    for i, (n, w) in enumerate(zip(names, ws)):
        x = x * w + i + len(n)
    return x


@case(T4)
def while_else(x):
    i = 0
    while i < 2:
        x = x + 1
        i += 1
    else:
        x = x * 3
    return x


@pytest.mark.parametrize("fn,make_args,expect_graphs", case.params)
def test_control_flow(fn, make_args, expect_graphs):
    check(fn, make_args, expect_graphs=expect_graphs)
