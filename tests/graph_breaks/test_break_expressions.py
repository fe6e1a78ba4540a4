"""Graph breaks with much live state: in the middle of expressions (operands already on the
value stack), inside list/tuple/dict/set displays and call arguments, in keyword-argument
calls, method calls and calls with *args/**kwargs, with many live (and unbound) locals,
several breaks in one function, other branches taken on later calls, and breaks at every
kind of instruction that can run natively on its own (operators, subscripts, attribute
loads and stores, comparisons, formatting, unpacking) through user dunder methods.
"""
import pytest
import torch

import cdynamo

from .harness import BRANCH, Call, Cases, DISABLED, PRINT, check_breaks, negative, positive, tensors

cases = Cases()
T4 = tensors((4,))
T4x3 = tensors((4,), (4,), (4,))





@cdynamo.disable
def d2(t):
    return t * 2


@cdynamo.disable
def dkw(t, *, k=1, bias=0.0):
    return t * k + bias


@cdynamo.disable
def dvar(*ts, **opts):
    s = sum(ts)
    return s * opts.get("scale", 1)


def noisy(t):
    print("noisy", tuple(t.shape))
    return t + 1


# ----------------------------------------------------------------------------- in the middle of expressions

@cases(T4x3, expect_graphs=1, reason=DISABLED)  # nothing to compute before the break
def break_in_middle_of_expression(a, b, c):
    return a + d2(b) * c


@cases(T4x3, expect_graphs=3, reason=PRINT)
def inlined_break_in_middle_of_expression(a, b, c):
    return (a * 2) + noisy(b) * c.sin()


@cases(T4, expect_graphs=2, reason=DISABLED)
def break_inside_list_display(x):
    return [x + 1, d2(x), x * 3]


@cases(T4, expect_graphs=2, reason=DISABLED)
def break_inside_tuple_display(x):
    y = x.cos()
    t = (y, "s", 3, d2(y), None)
    return t, t[3] + t[0]


@cases(T4, expect_graphs=2, reason=DISABLED)
def break_inside_dict_display(x):
    return {"a": x.sin(), "b": d2(x), "c": x.exp(), 4: "four"}


@cases(T4, expect_graphs=2, reason=DISABLED)
def break_inside_dict_display_with_computed_keys(x):
    k = "key"
    return {k + "1": x + 1, k + "2": d2(x), (1, 2): x - 1}


@cases(T4, expect_graphs=1, reason="Tensor.item()")
def break_inside_set_display(x):
    return {1, 2, int(x.sum().item() > 100), 7}


@cases(T4, expect_graphs=1, reason=DISABLED)
def break_inside_torch_call_arguments(x):
    return torch.cat([x, d2(x), x + 1], dim=0)


@cases(T4, expect_graphs=2, reason=DISABLED)
def break_inside_keyword_argument(x):
    return torch.add(x.sin(), other=d2(x), alpha=2)


# The bound `x.cos().add` on the stack is rebuilt and wrapped by receiver and name: the
# resume function hits on later calls (cos | add).
@cases(T4, expect_graphs=2, reason=DISABLED)
def break_inside_tensor_method_arguments(x):
    return x.cos().add(d2(x), alpha=3)


@cases(T4x3, expect_graphs=2, reason=DISABLED)
def break_inside_nested_call_arguments(a, b, c):
    return torch.where(a > 0, torch.maximum(b, d2(c)), torch.minimum(a, b))


@cases(T4, expect_graphs=2, reason="Tensor.item()")
def item_inside_arithmetic_expression(x):
    return x * 2 + x.sum().item() * x.mean()


# ----------------------------------------------------------------------------- calls: keywords, methods, *args/**kwargs

@cases(T4, expect_graphs=2, reason=DISABLED)
def keyword_only_call_breaks(x):
    y = dkw(x.sin(), k=3, bias=0.5)
    return y - 1


@cases(T4, expect_graphs=2, reason=DISABLED)
def star_args_call_breaks(x):
    ts = [x, x + 1, x * 2]
    return dvar(*ts, scale=2) + 1


@cases(T4, expect_graphs=2, reason=DISABLED)
def star_star_kwargs_call_breaks(x):
    opts = {"k": 2, "bias": 1.0}
    return dkw(x.exp(), **opts) * 2


def helper_varargs(*ts, **opts):
    total = ts[0] * opts["w"]
    print("varargs", len(ts), sorted(opts))
    for t in ts[1:]:
        total = total + t
    return total


@cases(T4x3, reason=PRINT)
def break_in_helper_with_varargs_parameters(a, b, c):
    return helper_varargs(a, b.sin(), c, w=2, extra="e") * 3


@cases(T4x3, reason=PRINT)
def break_in_helper_called_with_star_args(a, b, c):
    args = (a, b)
    kw = {"w": 3}
    return helper_varargs(*args, c, **kw) + 1


@cases(lambda: Call(torch.randn(4), torch.randn(4), scale=3), expect_graphs=2, reason=PRINT)
def compiled_function_with_varargs(*xs, **opts):
    y = xs[0] * opts.get("scale", 1)
    print("compiled varargs", len(xs), sorted(opts))
    return y + xs[1]


class Acc:
    def __init__(self):
        self.items = []
        self.scale = 2

    def add(self, t, *, times=1):
        for _ in range(times):
            self.items.append(t)
        print("acc add", len(self.items))
        return self

    def total(self):
        out = self.items[0]
        for t in self.items[1:]:
            out = out + t
        return out * self.scale


@cases(lambda: (torch.randn(4), Acc()), reason=PRINT)
def chained_method_calls_that_break(x, acc):
    return acc.add(x).add(x * 2, times=2).total()


# ----------------------------------------------------------------------------- many live locals, unbound locals

@cases(T4x3, expect_graphs=2, reason=PRINT)
def many_live_locals(a, b, c):
    i, f, s, n = 3, 2.5, "name", None
    tup, lst, dct = (1, a), [b, 2], {"c": c, "k": 4}
    t1, t2, t3 = a * 2, b + 1, c.sin()
    flag = True
    print("many locals", i, f, s, n)
    return (t1 + t2 + t3 + tup[1] + lst[0] + dct["c"]) * i * f, s, n, tup[0], lst[1], dct["k"], flag


@cases(T4, expect_graphs=2, reason=PRINT)  # tmp is dead, but x * 2 stays in the graph before the break (torch._dynamo: 2)
def unbound_and_deleted_locals_at_break(x):
    tmp = x * 2
    del tmp
    print("break with unbound locals")
    later = x + 1
    return later * 3


@cases([positive, negative], reason=PRINT)
def local_bound_on_one_branch_only(x):
    if x.sum() > 0:
        only_pos = x * 2
        pos = True
    else:
        pos = False
    print("after branch")  # only_pos is unbound here on the negative path
    if pos:
        return only_pos + 1
    return x - 1


# ----------------------------------------------------------------------------- several breaks

@cases(T4, expect_graphs=4, expect_breaks=3, reason=PRINT)
def three_prints(x):
    a = x + 1
    print("one")
    b = a * 2
    print("two")
    c = b - 3
    print("three")
    return c.relu()


@cases(T4, reason=["Tensor.item()", BRANCH, DISABLED])
def item_then_branch_then_disabled(x):
    s = x.abs().sum().item()
    y = x * s
    if y.sum() > 0:
        y = y + 1
    z = d2(y)
    return z - y


@cases([positive, negative, negative, positive], expect_graphs=4, reason=BRANCH)  # root, 2 branches, shared tail
def two_branches_both_ways(x):
    y = x * 2
    if y.sum() > 0:
        y = y.relu()
    else:
        y = y.abs()
    if y.max() > 1000:
        return y * 0
    return y + 1


@cases([positive, negative, positive], reason=[BRANCH, DISABLED])
def branch_then_disabled_on_both_paths(x):
    if x.mean() > 0:
        y = d2(x)
    else:
        y = d2(-x)
    return y.sqrt()


@cases(T4, expect_graphs=1, reason=DISABLED)
def return_value_of_breaking_call(x):
    return d2(x.sin())


# ----------------------------------------------------------------------------- breaks at other instructions (user dunders that print)

class Loud:
    def __init__(self, v):
        self.v = v

    def __add__(self, other):
        print("Loud.__add__")
        return other + self.v

    def __neg__(self):
        print("Loud.__neg__")
        return Loud(-self.v)

    def __getitem__(self, k):
        print("Loud.__getitem__", k)
        return self.v * k

    def __setitem__(self, k, value):
        print("Loud.__setitem__", k)
        self.v = value * k

    def __contains__(self, k):
        print("Loud.__contains__")
        return k == 1

    @property
    def doubled(self):
        print("Loud.doubled")
        return self.v * 2

    @doubled.setter
    def doubled(self, value):
        print("Loud.doubled =")
        self.v = value / 2


def loud():
    x = torch.randn(4)
    return (x, Loud(x.cos()))


@cases(loud, reason=PRINT)
def break_at_binary_op(x, o):
    return (o + x.sin()) * 2


@cases(loud, reason=PRINT)
def break_at_unary_negative(x, o):
    n = -o
    return n.v + x


@cases(loud, reason=PRINT)
def break_at_subscript(x, o):
    return o[3] + x


@cases(loud, reason=PRINT)
def break_at_store_subscript(x, o):
    o[2] = x * 5
    return o.v - 1


@cases(loud, reason=PRINT)
def break_at_contains(x, o):
    return (x + 1) if 1 in o else x


class LoudTag:
    def __init__(self, tag):
        self.tag = tag

    def __eq__(self, other):
        print("LoudTag.__eq__")
        return isinstance(other, LoudTag) and other.tag == self.tag

    __hash__ = None


@cases(lambda: (torch.randn(4), LoudTag("a")), reason=PRINT)
def break_at_compare(x, o):
    same = o == LoudTag("a")
    other = o != LoudTag("b")
    return x * 2, same, other


@cases(loud, reason=PRINT)
def break_at_property_load(x, o):
    return o.doubled + x.exp()


@cases(loud, reason=PRINT)
def break_at_property_store(x, o):
    o.doubled = x * 4
    return o.v + x


@cases(T4, reason="f-string")
def break_at_format_value(x):
    s = f"total={x.sum():.3f}"
    return x * len(s), s


@cases(T4, expect_graphs=1, reason=DISABLED)
def break_then_unpack(x):
    a, b = d2(x).chunk(2)
    return a * b


@pytest.mark.parametrize("fn,make_args,kw", cases.params)
def test_break_expressions(fn, make_args, kw):
    check_breaks(fn, make_args, **kw)
