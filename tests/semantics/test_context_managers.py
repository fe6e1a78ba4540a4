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


class GradModeSwitch:
    """A context manager of the program's own that sets grad mode through torch's binding
    (PyTorch's test_ctx_manager has one), restoring the mode it found when made."""

    def __init__(self, mode):
        self.prev = torch.is_grad_enabled()
        self.mode = mode

    def __enter__(self):
        torch._C._set_grad_enabled(self.mode)

    def __exit__(self, *exc):
        torch._C._set_grad_enabled(self.prev)


@contextlib.contextmanager
def grad_mode_switch(mode):
    prev = torch.is_grad_enabled()
    try:
        yield torch._C._set_grad_enabled(mode)
    finally:
        torch._C._set_grad_enabled(prev)


@case(leaf(4))
def set_grad_enabled_object_entered_after_the_mode_changed(x):
    # set_grad_enabled sets its mode when made AND when entered: entering it after the
    # program switched the mode back switches it again (once a wrong result: the block ran
    # with grad on and its output required grad).
    ctx = torch.set_grad_enabled(False)
    torch.set_grad_enabled(True)
    with ctx:
        y = x * 2
        inside = torch.is_grad_enabled()
    return y, y.requires_grad, inside, torch.is_grad_enabled()


@case(leaf(4))
def user_class_setting_grad_mode_through_the_binding(x):
    with GradModeSwitch(False):
        y = x * 2
        inside = torch.is_grad_enabled()
    return y, inside, x * 3, torch.is_grad_enabled()


@case(leaf(4))
def nested_user_classes_setting_grad_mode(x):
    with torch.no_grad():
        with GradModeSwitch(True):
            y = x.sin()
            with GradModeSwitch(False):
                z = y * 1.5
            w = z + y
    return y, z, w, torch.is_grad_enabled()


@case(leaf(4))
def contextlib_generator_setting_grad_mode(x):
    with grad_mode_switch(False) as r:
        y = x * 2
    with grad_mode_switch(True):
        z = x * 4
    return y, z, r, torch.is_grad_enabled()


@case(leaf(4))
def binding_called_as_a_function(x):
    prev = torch.is_grad_enabled()
    torch._C._set_grad_enabled(False)
    y = x + 1
    torch._C._set_grad_enabled(prev)
    return y, x + 2, torch.is_grad_enabled()


@pytest.mark.parametrize("fn,make_args,expect_graphs", case.params)
def test_context_managers(fn, make_args, expect_graphs):
    check(fn, make_args, expect_graphs=expect_graphs)


def _redundant_modes(a, b):
    x = a + 1
    with torch.no_grad():  # already off under the caller's no_grad: nothing to record
        x = x + b
    with torch.set_grad_enabled(False):
        x = x * 2
    with GradModeSwitch(False):
        x = x - 1
    return x


def _op_counts(compile_fn, counter):
    with torch.no_grad():
        out = compile_fn(_redundant_modes, backend=counter)(torch.ones(3), torch.ones(3))
    return out, counter.op_count, counter.frame_count


def test_grad_mode_changes_to_the_mode_in_force_are_not_recorded():
    # torch._dynamo coalesces the grad-mode changes of its context objects: entering no_grad
    # under no_grad records no _set_grad_enabled node (PyTorch's test_no_grad counts the
    # ops). The graph runs under the grad mode it was traced in (guarded): such a node
    # would be a no-op.
    import cdynamo
    import cdynamo.testing

    with torch.no_grad():
        expected = _redundant_modes(torch.ones(3), torch.ones(3))
    cdynamo.reset()
    got, ops, frames = _op_counts(cdynamo.compile, cdynamo.testing.CompileCounter())
    torch._dynamo.reset()
    _, dynamo_ops, dynamo_frames = _op_counts(torch.compile, torch._dynamo.testing.CompileCounter())
    torch._dynamo.reset()
    assert torch.equal(got, expected) and not got.requires_grad
    # 4 tensor ops; the program's own two calls of torch._C._set_grad_enabled (in
    # GradModeSwitch) are recorded, as torch._dynamo records them.
    assert (ops, frames) == (dynamo_ops, dynamo_frames) == (6, 1)
