"""Graph breaks in every kind of surrounding code: loops, inlined helpers (1-3 levels),
methods and modules, grad-mode blocks, try/except/finally.

A break inside a helper the root frame inlines breaks the root frame at its CALL; the
helper then runs as a frame of its own (captured, with its own break). A break inside a
`with torch.no_grad()` block must leave grad mode exactly as eager does, inside the block
(results' requires_grad) and after it. A break inside a try block stays inside it: an
exception raised after the break, or by the breaking call itself, is handled by the same
handlers as in eager execution.
"""
import pytest
import torch

import cdynamo

from .harness import BRANCH, Cases, DISABLED, PRINT, check_breaks, negative, positive, tensors

cases = Cases()
T4 = tensors((4,))
T4_GRAD = tensors((4,), requires_grad=True)





@cdynamo.disable
def disabled_scale(t, k=2):
    return t * k


@cdynamo.disable
def disabled_raise(t, msg):
    raise ValueError(msg)


@cdynamo.disable
def disabled_maybe_raise(t):
    if t.sum() < 0:
        raise KeyError("negative")
    return t + 1


# ----------------------------------------------------------------------------- loops

# i changes every iteration and is specialized: one resume entry per value (as torch._dynamo).
@cases(T4, expect_graphs=4, reason=PRINT)
def while_counter_loop_with_print(x):
    i = 0
    while i < 3:
        x = x * 2
        print("iteration", i)
        i += 1
    return x + 1


@cases(T4, expect_graphs=5, reason=BRANCH)
def while_counter_loop_with_branch(x):
    i = 0
    acc = x
    while i < 4:
        if acc.sum() > 0:
            acc = acc - 1
        else:
            acc = acc + 2
        i += 1
    return acc


@cases(T4, reason=PRINT)
def for_range_with_print(x):
    for i in range(3):
        x = x + i
        print("step", i)
    return x * 2


@cases(T4, reason=BRANCH)
def for_range_with_branch(x):
    for i in range(3):
        if x.sum() > 0:
            x = x - 1
        else:
            x = x + 1
    return x


@cases(T4, reason="Tensor.item()")
def for_list_with_item(x):
    total = 0.0
    for t in [x, x * 2, x * 3]:
        total = total + t.sum().item()
    return x * total


@cases(T4, reason=DISABLED)
def for_list_of_tensors_with_disabled(x):
    outs = []
    for t in [x, x + 1]:
        outs.append(disabled_scale(t))
    return outs[0] + outs[1]


@cases(T4, expect_graphs=4, reason=BRANCH)
def while_data_dependent_with_break_statement(x):
    n = 0
    while True:
        x = x * 2
        n += 1
        if x.abs().sum() > 50:
            break
        if n > 20:
            break
    return x, n


@cases(T4, expect_graphs=3, reason=[BRANCH, PRINT])
def loop_with_print_after_loop(x):
    i = 0
    while i < 2:
        x = x.cos()
        i += 1
    print("done")
    if x.sum() > 100:
        return x
    return x.sin()


# ----------------------------------------------------------------------------- nested calls

def inner_print(t):
    u = t * 2
    print("inner", tuple(u.shape))
    return u + 1


def middle_print(t):
    return inner_print(t.sin()) * 3


def outer_print(t):
    return middle_print(t + 1) - 1


def inner_branch(t):
    if t.sum() > 0:
        return t.relu()
    return t.neg()


def middle_branch(t, k):
    v = inner_branch(t * k)
    return v + k


@cases(T4, expect_graphs=4, reason=PRINT)  # exp | inner: mul | inner: add | sum
def break_in_helper_one_level(x):
    y = x.exp()
    z = inner_print(y)
    return z.sum()


@cases(T4, reason=PRINT)
def break_in_helper_two_levels(x):
    return middle_print(x) + x


@cases(T4, reason=PRINT)
def break_in_helper_three_levels(x):
    a = x * 2
    b = outer_print(a)
    return a + b


@cases([positive, negative, positive], reason=BRANCH)
def branch_in_helper_two_levels(x):
    return middle_branch(x, 2) * 5


@cases(T4, reason=DISABLED)
def disabled_called_from_helper(x):
    def helper(t):
        return disabled_scale(t, k=3) + 1
    return helper(x.sin()) * 2


def helper_item(t):
    return t * t.max().item()


@cases(T4, reason="Tensor.item()")
def item_in_helper_result_used(x):
    a = helper_item(x)
    b = helper_item(a + 1)
    return a - b


class Scaler:
    def __init__(self, k):
        self.k = k

    def apply(self, t):
        print("applying", self.k)
        return t * self.k

    def apply_branch(self, t):
        if (t > 0).all():
            return t * self.k
        return t / self.k


@cases(lambda: (torch.randn(4), Scaler(3)), reason=PRINT)
def method_call_that_breaks(x, s):
    y = s.apply(x + 1)
    return y.sum()


@cases([lambda: (torch.rand(4) + 1, Scaler(2)), lambda: (torch.rand(4) - 2, Scaler(2))], reason=BRANCH)
def method_call_with_branch(x, s):
    return s.apply_branch(x) + s.k


class Block(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.lin = torch.nn.Linear(4, 4)

    def forward(self, t):
        h = self.lin(t)
        if h.sum() > 0:
            h = h.relu()
        return h * 2


class Net(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.a = Block()
        self.b = Block()

    def forward(self, t):
        return self.b(self.a(t)) + 1


@cases(lambda: (Net(), torch.randn(2, 4)), reason=BRANCH)
def module_with_branching_submodules(m, x):
    return m(x)


@cases(lambda: (Net(), torch.randn(2, 4)), reason=PRINT)
def print_between_module_calls(m, x):
    h = m.a(x)
    print("after a")
    return m.b(h)


# ----------------------------------------------------------------------------- grad-mode blocks

@cases(T4_GRAD, expect_graphs=2, reason=PRINT)  # y, z | w, w + y
def print_inside_no_grad(x):
    y = x * 2
    with torch.no_grad():
        z = y * 3
        print("in no_grad", torch.is_grad_enabled())
        w = z + 1
    return y, z, w, w + y


@cases(T4_GRAD, reason=BRANCH)
def branch_inside_no_grad(x):
    with torch.no_grad():
        y = x * 2
        if y.sum() > 0:
            y = y + 1
        else:
            y = y - 1
        z = y * x
    return z, x * 2


@cases(T4_GRAD, reason=PRINT)
def enable_grad_inside_no_grad_with_break(x):
    with torch.no_grad():
        a = x + 1
        with torch.enable_grad():
            b = x * 2
            print("enabled", torch.is_grad_enabled())
            c = b + 1
        d = c * 2
    return a, b, c, d


@cases(T4_GRAD, reason=PRINT)
def set_grad_enabled_false_block(x):
    with torch.set_grad_enabled(False):
        y = x.sin()
        print("grad", torch.is_grad_enabled())
        y = y * 2
    return y, y + x


@cases(T4_GRAD, reason="Tensor.item()")
def item_inside_no_grad(x):
    with torch.no_grad():
        s = x.sum().item()
        y = x * s
    return y, x * 2


@cases(T4_GRAD, reason=PRINT)
def break_in_helper_called_inside_no_grad(x):
    with torch.no_grad():
        y = inner_print(x)
    return y, y * x


@cases(T4_GRAD, reason=PRINT)
def break_after_no_grad_block(x):
    with torch.no_grad():
        y = x * 2
    print("after block", torch.is_grad_enabled())
    return y * x


@cases(T4_GRAD, reason=PRINT)
def set_grad_enabled_call_then_break(x):
    torch.set_grad_enabled(False)
    y = x * 2
    print("grad", torch.is_grad_enabled())
    torch.set_grad_enabled(True)
    return y, y * x


# Not a break: cdynamo cannot break inside inference_mode; the frame must run natively, correctly.
@cases(T4_GRAD, expect_breaks=0, allow_native="context manager other than")
def break_inside_inference_mode_falls_back(x):
    with torch.inference_mode():
        y = x * 2
        print("inference")
    return y + 1


# ----------------------------------------------------------------------------- try / except / finally

@cases(T4, reason=PRINT)
def break_inside_try_no_exception(x):
    try:
        y = x * 2
        print("in try")
        y = y + 1
    except ValueError:
        y = x
    return y


@cases(T4, reason=PRINT)
def exception_after_break_caught(x):
    log = []
    try:
        y = x * 2
        print("before raise")
        log.append("raised")
        raise ValueError("after the break")
    except ValueError as e:
        log.append(str(e))
        y = x - 1
    return y, log


@cases(T4, reason=DISABLED)
def breaking_call_raises_caught(x):
    try:
        y = disabled_raise(x, "from disabled")
    except ValueError as e:
        y = x * 3
        msg = str(e)
    return y, msg


@cases(T4, reason=DISABLED)
def breaking_call_raises_uncaught(x):
    y = x * 2
    z = disabled_raise(y, "escapes")
    return z


@cases([positive, negative], reason=DISABLED)
def breaking_call_raises_on_second_input(x):
    try:
        y = disabled_maybe_raise(x * 2)
        kind = "ok"
    except KeyError:
        y = x.neg()
        kind = "key"
    return y, kind


@cases(T4, reason=PRINT)
def break_inside_try_finally(x):
    trail = []
    try:
        y = x + 1
        print("body")
        trail.append("body")
    finally:
        trail.append("finally")
        y = y * 2
    return y, trail


@cases(T4, reason=PRINT)
def break_inside_finally_body(x):
    trail = []
    try:
        y = x.cos()
        trail.append(1)
    finally:
        print("finally")
        trail.append(2)
    return y * 2, trail


# The resume function raises out of itself: it runs natively to raise (by design).
@cases(T4, reason=PRINT, allow_native="escapes the traced frame")
def exception_after_break_propagates_through_finally(x):
    out = []
    try:
        out.append(x * 2)
        print("about to fail")
        raise RuntimeError("boom")
    finally:
        out.append("cleanup")


@cases([positive, negative], reason=BRANCH)
def branch_raises_caught(x):
    try:
        if x.sum() < 0:
            raise ValueError("negative")
        y = x * 2
    except ValueError:
        y = x.abs()
    return y + 1


# Not a break: neither cdynamo nor torch._dynamo break while an exception is handled (dynamo skips
# the frame too); the frame must run natively, correctly.
@cases(T4, expect_breaks=0, allow_native="exception is being handled")
def break_inside_except_handler(x):
    try:
        raise KeyError("k")
    except KeyError:
        y = x * 2
        print("handling")
        y = y + 1
    return y


@cases(T4, reason=PRINT)
def break_in_helper_inside_try(x):
    try:
        y = inner_print(x)
        z = y.sum()
    except RuntimeError:
        z = None
    return y, z


@cases(T4, reason=DISABLED, allow_native="escapes the traced frame")
def exception_from_helper_after_break_caught_by_caller(x):
    def helper(t):
        u = disabled_scale(t)
        raise IndexError("helper failed")
    try:
        return helper(x)
    except IndexError as e:
        return x + 1, str(e)


@pytest.mark.parametrize("fn,make_args,kw", cases.params)
def test_break_structures(fn, make_args, kw):
    check_breaks(fn, make_args, **kw)
