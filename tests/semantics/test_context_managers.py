"""Grad-mode and autocast context managers entered and exited inside the trace."""
import contextlib

import pytest
import torch

from .harness import Cases, check

case = Cases()


class ScaleContext:
    def __init__(self):
        self.entered = False

    def __enter__(self):
        self.entered = True
        return 3

    def __exit__(self, *exc):
        self.entered = False
        return False


def leaf(*shape):
    return lambda: (torch.randn(*shape, requires_grad=True),)


def leaf_and(*shape, extra=()):
    return lambda: (torch.randn(*shape, requires_grad=True),) + tuple(extra)


@case(leaf(4))
def no_grad_block(x):
    with torch.no_grad():
        y = x * 2
    z = x * 3
    return y, z


@case(leaf(4))
def no_grad_then_grad_mode_restored(x):
    with torch.no_grad():
        a = x + 1
        inside = torch.is_grad_enabled()
    after = torch.is_grad_enabled()
    return a, x.sin(), inside, after


@case(leaf(4))
def enable_grad_inside_no_grad(x):
    with torch.no_grad():
        a = x * 2
        with torch.enable_grad():
            b = x * 3
        c = x * 4
    return a, b, c


@case(leaf_and(4, extra=(False,)))
def set_grad_enabled_from_arg(x, flag):
    with torch.set_grad_enabled(flag):
        y = x.exp()
    return y, x.exp()


@case(leaf_and(4, extra=(True,)))
def set_grad_enabled_true_arg(x, flag):
    with torch.set_grad_enabled(flag):
        y = x.exp()
    return y


@case(leaf(4))
def set_grad_enabled_constant(x):
    with torch.set_grad_enabled(False):
        y = x.cos()
    return y


@case(leaf(4))
def inference_mode_block(x):
    with torch.inference_mode():
        y = x * 2
    return y.clone()


@case(leaf(4))
def inference_mode_false(x):
    with torch.inference_mode(False):
        y = x * 2
    return y


@case(lambda: (torch.randn(4, 4), torch.randn(4, 4)))
def autocast_cpu_block(a, b):
    with torch.autocast("cpu"):
        c = a @ b
    d = a @ b
    return c, d


@case(lambda: (torch.randn(4, 4), torch.randn(4, 4)))
def autocast_cpu_bfloat16_explicit(a, b):
    with torch.autocast(device_type="cpu", dtype=torch.bfloat16):
        c = torch.mm(a, b)
        dt = c.dtype
    return c.float(), dt


@case(lambda: (torch.randn(4, 4), torch.randn(4, 4)))
def autocast_disabled(a, b):
    with torch.autocast("cpu", enabled=False):
        c = a @ b
    return c


@case(lambda: (torch.randn(4, 4), torch.randn(4, 4)))
def autocast_nested_disable(a, b):
    with torch.autocast("cpu"):
        c = a @ b
        with torch.autocast("cpu", enabled=False):
            d = a @ b
    return c, d


@case(leaf(4))
def no_grad_as_decorator_of_inner(x):
    @torch.no_grad()
    def inner(t):
        return t * 5
    return inner(x), x * 5


@case(leaf(4))
def no_grad_early_return(x):
    with torch.no_grad():
        return x * 2


@case(leaf(4))
def no_grad_in_loop(x):
    outs = []
    for i in range(2):
        with torch.no_grad():
            outs.append(x + i)
        outs.append(x - i)
    return outs


@case(leaf(4))
def is_grad_enabled_branch(x):
    if torch.is_grad_enabled():
        return x * 2
    return x


@case(leaf(4))
def nested_same_manager(x):
    with torch.no_grad():
        with torch.no_grad():
            y = x + 1
        z = x + 2
    return y, z, x + 3


@case(leaf(4))
def two_managers_one_with(x):
    with torch.no_grad(), torch.autocast("cpu"):
        y = x * 2
    return y


@case(leaf(4))
def detach_inside_enable_grad(x):
    with torch.enable_grad():
        y = x.detach() * 2
    return y, y.requires_grad


@case(lambda: (torch.randn(4),))
def nullcontext_block(x):
    with contextlib.nullcontext():
        y = x + 1
    return y


@case(leaf(4))
def requires_grad_output_checks(x):
    with torch.no_grad():
        a = x * 2
    return a.requires_grad, (x * 2).requires_grad, a


@case(lambda: (torch.randn(4),))
def user_context_manager_class(x):
    cm = ScaleContext()
    with cm as k:
        y = x * k
        inside = cm.entered
    return y, inside, cm.entered


@case(lambda: (torch.randn(4),))
def contextlib_contextmanager(x):
    log = []

    @contextlib.contextmanager
    def tag(name):
        log.append("enter " + name)
        yield name
        log.append("exit " + name)
    with tag("a") as n:
        y = x * len(n)
    return y, log


@case(leaf(4))
def no_grad_restored_after_caught_exception(x):
    try:
        with torch.no_grad():
            y = x * 2
            raise ValueError("inside")
    except ValueError:
        pass
    return y, x * 3, torch.is_grad_enabled()


@pytest.mark.parametrize("fn,make_args,expect_graphs", case.params)
def test_context_managers(fn, make_args, expect_graphs):
    check(fn, make_args, expect_graphs=expect_graphs)
