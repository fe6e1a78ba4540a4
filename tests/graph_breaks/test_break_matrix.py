"""More combinations of a break kind with the construct around it, for the kinds the other
files use least: tolist/int/float/bool of a tensor, C functions with effects (random, os), unsupported instructions, disabled functions -- each inside loops,
helpers two levels deep, try/except/finally, grad-mode blocks, displays and expressions
holding several breaks at once.
"""
import os
import random

import pytest
import torch

import cdynamo

from .harness import Cases, DISABLED, PRINT, check_breaks, negative, positive, random_world, tensors

cases = Cases()
T4 = tensors((4,))
T4x2 = tensors((4,), (4,))
T4_GRAD = tensors((4,), requires_grad=True)





RANDOM_WORLD = random_world(99)


@cdynamo.disable
def d2(t):
    return t * 2


def helper_class_statement(t):
    class Local:
        k = 3
    return t * Local.k


# ----------------------------------------------------------------------------- numbers read from tensors

@cases(T4, reason="Tensor.tolist()")
def tolist_in_try_then_raise(x):
    try:
        vals = (x * 2).tolist()
        raise ValueError(f"{len(vals)} values")
    except ValueError as e:
        return x + 1, str(e)


@cases(T4, reason="int() of a tensor")
def int_of_tensor_in_counted_loop(x):
    i = 0
    total = 0
    while i < 3:
        total += int(x[i] > 0)
        i += 1
    return x * 2, total


def float_level2(t):
    return t * float(t.abs().max())


def float_level1(t):
    return float_level2(t + 1) - 1


@cases(T4, reason="float() of a tensor")
def float_in_helper_two_levels(x):
    return float_level1(x.sin()) * 3


def bool_helper(t):
    return bool((t > 0).any())


@cases([positive, negative], reason="bool() of a tensor")
def bool_in_helper_drives_python_branch(x):
    if bool_helper(x):
        return x.relu()
    return x.abs()


@cases(T4, reason="Tensor.item()")
def item_inside_dict_display_and_try_finally(x):
    trail = []
    try:
        d = {"sum": x.sum().item(), "t": x * 2}
    finally:
        trail.append("finally")
    return d, trail


# ----------------------------------------------------------------------------- C functions with effects

def random_level2(t):
    return t * random.random()


def random_level1(t):
    return random_level2(t.cos()) + random.random()


@cases(T4, reason="call of", world=RANDOM_WORLD)
def random_in_helper_two_levels(x):
    return random_level1(x) * 2


@cases(T4, reason="getpid")
def getpid_in_try_finally(x):
    out = []
    try:
        y = x + 1
        out.append(os.getpid() > 0)
    finally:
        out.append("done")
    return y * 2, out


def touches_cwd(t):
    os.getcwd()
    return t + 1


@cases(T4, reason="getcwd")
def getcwd_in_helper_inside_try(x):
    try:
        y = touches_cwd(x.exp())
    except RuntimeError:
        y = None
    return y


# ----------------------------------------------------------------------------- unsupported instructions, disabled

@cases(T4, reason="LOAD_BUILD_CLASS", allow_native=["LOAD_BUILD_CLASS", "LOAD_NAME"])
def class_statement_helper_in_counted_loop(x):
    i = 0
    while i < 2:
        x = helper_class_statement(x) + 1
        i += 1
    return x


@cases(T4, reason=DISABLED)
def disabled_in_counted_loop(x):
    i = 0
    while i < 3:
        x = d2(x) - 1
        i += 1
    return x


@cases(T4x2, expect_graphs=1, expect_breaks=2, reason=DISABLED)
def two_breaks_in_one_expression(x, y):
    return d2(x) + d2(y) * x


@cases(T4_GRAD, reason=DISABLED)
def disabled_inside_no_grad(x):
    with torch.no_grad():
        y = d2(x)
        z = y + 1
    return z, z * x


@cases(T4_GRAD, reason="data-dependent")
def data_dependent_while_inside_set_grad_enabled(x):
    with torch.set_grad_enabled(False):
        y = x.abs()
        while y.sum() < 10:
            y = y + 1
    return y, y * x


# ----------------------------------------------------------------------------- print variants

class Reporter:
    def __init__(self, name):
        self.name = name

    def report(self, t, *, prefix="", suffix=""):
        print(prefix + self.name, tuple(t.shape), suffix)
        return t * 2


@cases(lambda: (torch.randn(4), Reporter("r")), reason=PRINT)
def method_with_keyword_arguments_breaks(x, r):
    return r.report(x.sin(), prefix=">", suffix="<") + 1


@cases(T4, reason=PRINT)
def print_star_args(x):
    parts = ["a", "b", len(x)]
    print(*parts, sep=",")
    return x + 1


@cases([positive, negative, positive], reason=["data-dependent", PRINT, "Tensor.item()"])
def different_break_kinds_per_branch(x):
    if x.sum() > 0:
        print("positive branch")
        y = x * 2
    else:
        s = x.sum().item()
        y = x - s
    return y.exp()


class Stage(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.lin = torch.nn.Linear(4, 4)

    def forward(self, t):
        h = self.lin(t)
        print("stage", tuple(h.shape))
        return h.relu()


@cases(lambda: (torch.nn.Sequential(Stage(), Stage()), torch.randn(2, 4)), reason=PRINT)
def module_stages_with_print_in_forward(m, x):
    return m(x).sum()


@pytest.mark.parametrize("fn,make_args,kw", cases.params)
def test_break_matrix(fn, make_args, kw):
    check_breaks(fn, make_args, **kw)
