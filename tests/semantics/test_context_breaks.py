"""Graph breaks inside `with` blocks, torch's profiler contexts and the global-state setters
a program calls directly.

torch._dynamo resumes a frame inside the `with` blocks of the contexts it models (grad mode,
nullcontext, the profiler's, which it treats as doing nothing) and runs a frame natively when
a break falls inside the block of a context manager the program defines (its __enter__ and
__exit__ are then captured as frames of their own). Each case is compared with eager on a
first call and a cache hit, and its graph count with torch._dynamo's in the same run."""
import contextlib

import pytest
import torch

import cdynamo
import cdynamo.testing

from .harness import Cases, check
from .test_context_managers import GradModeSwitch, grad_mode_switch

case = Cases()


# The program's own grad-mode contexts (a class, a contextlib generator), shared with the
# context-manager corpus.
GradSwitch = GradModeSwitch
grad_switch = grad_mode_switch


def break_in_no_grad_of_a_callee(x, z):
    def inner(z):
        with torch.no_grad():
            torch._dynamo.graph_break()
            return torch.sin(z)

    a = x * 2
    return a, inner(z)


def nested_grad_modes_with_breaks(x):
    with torch.set_grad_enabled(False):
        torch._dynamo.graph_break()
        with torch.set_grad_enabled(True):
            x = x * 5
            torch._dynamo.graph_break()
            x = x.sqrt()
            inside = torch.is_grad_enabled()
    return x, inside, torch.is_grad_enabled()


def break_in_a_user_context(x):
    with GradSwitch(False):
        x = x + 1
        torch._dynamo.graph_break()
        x = x.relu()
    return x - 1, torch.is_grad_enabled()


def break_in_nested_user_contexts(x):
    with GradSwitch(True):
        x = x + 1
        with GradSwitch(False):
            torch._dynamo.graph_break()
            x = x * 1.5
        x = x.relu()
    return x - 1


def break_in_a_contextlib_generator(x):
    with grad_switch(False):
        x = x + 1
        torch._dynamo.graph_break()
        x = x * 3
    return x, torch.is_grad_enabled()


def break_in_nullcontext(x):
    y = x + 1
    with contextlib.nullcontext():
        y = y * 2
        torch._dynamo.graph_break()
        y = y - 3
    return y


def break_in_profiler_blocks(x):
    y = x ** 2
    with torch.profiler.profile():
        y = y + 2
        with torch.profiler.record_function("part"):
            z = y ** 3
            torch._dynamo.graph_break()
            z = z + 1
    return z


def break_in_autograd_profiler_blocks(x):
    y = x * 2
    with torch.autograd.profiler.profile() as p:
        with torch.autograd.profiler.record_function("part"):
            torch._dynamo.graph_break()
            y = y + 1
    return y, p is not None


def grad_context_object_alive_at_a_break(x):
    x = x + 1
    ctx = torch.set_grad_enabled(False)
    torch._dynamo.graph_break()
    with ctx:
        x = x * 2
    return x, torch.is_grad_enabled()


def no_grad_object_alive_at_a_break(x):
    ctx = torch.no_grad()
    y = x * 3
    torch._dynamo.graph_break()
    with ctx:
        y = y + x
    return y


def hooks_message():
    return torch._C._autograd._saved_tensors_hooks_get_disabled_error_message()


def sdpa_backends():
    return tuple(torch.nn.attention._cur_sdpa_kernel_backends())


def break_in_disable_saved_tensors_hooks(x):
    # (torch._dynamo breaks on reading the message: see the test below for what it is)
    with torch.autograd.graph.disable_saved_tensors_hooks("not here"):
        y = x + 1
        torch._dynamo.graph_break()
        y = y * 2
    return y


def break_in_sdpa_kernel(q):
    with torch.nn.attention.sdpa_kernel([torch.nn.attention.SDPBackend.MATH]):
        a = torch.nn.functional.scaled_dot_product_attention(q, q, q)
        torch._dynamo.graph_break()
        b = torch.nn.functional.scaled_dot_product_attention(q, q, q)
    return a + b, sdpa_backends()


@pytest.mark.parametrize("fn,shapes", [
    (break_in_disable_saved_tensors_hooks, [(3,)]),
    (break_in_no_grad_of_a_callee, [(4, 4), (4,)]),
    (nested_grad_modes_with_breaks, [(3, 4)]),
    (break_in_a_user_context, [(2, 3)]),
    (break_in_nested_user_contexts, [(2, 3)]),
    (break_in_a_contextlib_generator, [(2, 3)]),
    (break_in_nullcontext, [(3,)]),
    (break_in_profiler_blocks, [(2, 2)]),
    (break_in_autograd_profiler_blocks, [(2, 2)]),
    (grad_context_object_alive_at_a_break, [(4,)]),
    (no_grad_object_alive_at_a_break, [(4,)]),
], ids=lambda v: getattr(v, "__name__", None))
@pytest.mark.parametrize("grad", [True, False])
def test_break_inside_a_with_block(fn, shapes, grad):
    def args():
        torch.manual_seed(0)
        return [torch.rand(*s, requires_grad=grad) for s in shapes]

    def run(compiled, counter):
        outs, counts = [], []
        for _ in range(2):  # the first call compiles, the second hits
            outs.append(compiled(*args()))
            counts.append(counter.frame_count)
        return outs, counts

    def same(a, b):
        if isinstance(a, tuple):
            return len(a) == len(b) and all(same(x, y) for x, y in zip(a, b))
        if isinstance(a, torch.Tensor):
            return torch.allclose(a, b) and a.requires_grad == b.requires_grad
        return a == b

    expected = fn(*args())
    cdynamo.reset()
    cnt = cdynamo.testing.CompileCounter()
    got, graphs = run(cdynamo.compile(fn, backend=cnt), cnt)
    assert torch.is_grad_enabled()
    torch._dynamo.reset()
    dcnt = torch._dynamo.testing.CompileCounter()
    _, dynamo_graphs = run(torch.compile(fn, backend=dcnt), dcnt)
    torch._dynamo.reset()
    for g in got:
        assert same(g, expected), (g, expected)
    # The first call's graphs are torch._dynamo's; the second call is a hit (torch._dynamo
    # may recompile a resume function there: a context object is guarded by identity).
    assert graphs[0] == dynamo_graphs[0], (graphs, dynamo_graphs)
    assert graphs[1] == graphs[0], graphs


# ---- global-state setters called directly (fullgraph: one graph each) -----------------------

@contextlib.contextmanager
def default_dtype(dtype):
    old = torch.get_default_dtype()
    try:
        torch.set_default_dtype(dtype)
        yield
    finally:
        torch.set_default_dtype(old)


def tensors(*shapes):
    return lambda: tuple(torch.randn(*s) for s in shapes)


@case(tensors((3,)))
def default_dtype_in_a_contextlib_block(x):
    with default_dtype(torch.float64):
        y = torch.tensor([1.0, 2.0, 3.0]) + x.double()
        z = torch.ones(3)
    return y, z, torch.ones(2)


@case(tensors((3,)))
def default_dtype_left_changed(x):
    torch.set_default_dtype(torch.float64)
    return torch.zeros(3) + x


@case(tensors((3,)))
def saved_tensors_hooks_switched_off_and_on(x):
    y = x + 1
    torch._C._autograd._saved_tensors_hooks_disable("not here")
    y = y * 2
    msg = torch._C._autograd._saved_tensors_hooks_get_disabled_error_message()
    torch._C._autograd._saved_tensors_hooks_enable()
    return y, msg


@case(tensors((3,)))
def saved_tensors_hooks_disabled_by_decorator(x):
    @torch.autograd.graph.disable_saved_tensors_hooks("no hooks")
    def inner(a):
        return a * 3, torch._C._autograd._saved_tensors_hooks_get_disabled_error_message()

    return inner(x)


@case(tensors((3, 3), (3, 3)))
def autocast_state_set_directly(x, y):
    torch.set_autocast_enabled("cpu", True)
    torch.set_autocast_dtype("cpu", torch.bfloat16)
    z = x @ y
    torch.set_autocast_enabled("cpu", False)
    return z, x @ y


def leaf(*shape):
    return lambda: (torch.randn(*shape, requires_grad=True),)


@case(leaf(4))
def grad_mode_class_called_on_a_function(x):
    def inner(a):
        return a.sin()

    with torch.enable_grad():
        f = torch.no_grad(inner)
        mode = torch.is_grad_enabled()
    return f(x), mode, inner(x)


@case(leaf(4))
def grad_mode_object_called_on_a_function(x):
    def inner(a):
        return a.cos()

    with torch.no_grad():
        f = torch.enable_grad()(inner)
        mode = torch.is_grad_enabled()
        y = f(x)
    return y, mode


@case(leaf(4))
def set_grad_enabled_called_on_a_function(x):
    def inner(a):
        return a * 2, torch.is_grad_enabled()

    with torch.set_grad_enabled(True):
        f = torch.set_grad_enabled(False)(inner)
        mode = torch.is_grad_enabled()  # calling it on a function leaves the mode alone
    return f(x), mode, torch.is_grad_enabled()


@case(tensors((3,)))
def disable_saved_tensors_hooks_block(x):
    with torch.autograd.graph.disable_saved_tensors_hooks("inside"):
        y = x * 2
        inside = hooks_message()
    return y, inside, hooks_message()


@case(tensors((3,)))
def saved_tensors_hooks_decorated_function_called_twice(x):
    # The switch is set when the context is made; the second call sets it again (its first
    # call's exit put it back).
    @torch.autograd.graph.disable_saved_tensors_hooks("twice")
    def inner(a):
        return a + 1, hooks_message()

    first = inner(x)
    between = hooks_message()
    second = inner(x)
    return first, between, second


@case(tensors((3,)))
def nested_saved_tensors_hooks_decorators(x):
    @torch.autograd.graph.disable_saved_tensors_hooks("outer")
    def f(a):
        @torch.autograd.graph.disable_saved_tensors_hooks(error_message="inner")
        def g(b):
            return b + 1, hooks_message()

        r, m = g(a)
        return r * 2, m, hooks_message()

    return f(x), hooks_message()


@case(tensors((1, 2, 4, 8)))
def sdpa_kernel_block(q):
    with torch.nn.attention.sdpa_kernel(torch.nn.attention.SDPBackend.MATH) as entered:
        out = torch.nn.functional.scaled_dot_product_attention(q, q, q)
    return out, entered


@case(tensors((1, 2, 4, 8)))
def sdpa_kernel_as_decorator(q):
    math = torch.nn.attention.SDPBackend.MATH

    @torch.nn.attention.sdpa_kernel(backends=[math, math], set_priority=True)
    def attend(t):
        return torch.nn.functional.scaled_dot_product_attention(t, t, t)

    return attend(q) + attend(q * 2)


@case(tensors((3, 3), (3, 3)))
def autocast_nesting_set_directly(x, y):
    torch.set_autocast_enabled("cpu", True)
    depth = torch.autocast_increment_nesting()
    z = x @ y
    back = torch.autocast_decrement_nesting()
    torch.clear_autocast_cache()
    torch.set_autocast_enabled("cpu", False)
    return z, depth, back


@pytest.mark.parametrize("fn,make_args,expect_graphs", case.params)
def test_state_setters(fn, make_args, expect_graphs):
    try:
        check(fn, make_args, expect_graphs=expect_graphs)
    finally:
        # torch._dynamo's reference run can leave the switch off (its own trace's state)
        torch._C._autograd._saved_tensors_hooks_enable()


def test_hooks_message_read_guards_the_state_it_was_called_with():
    # The message read before the program changes it is the caller's: a call under
    # another message must not reuse the entry.
    def fn(x):
        return x + 1, torch._C._autograd._saved_tensors_hooks_get_disabled_error_message()

    cdynamo.reset()
    cf = cdynamo.compile(fn, backend=cdynamo.testing.CompileCounter())
    assert cf(torch.ones(1))[1] is None
    assert saved_tensors_hooks_disabled_by_decorator(torch.ones(1))[1] == "no hooks"
    assert cdynamo.compile(saved_tensors_hooks_disabled_by_decorator)(torch.ones(1))[1] == "no hooks"
    # the trace and the compiled call leave the switch as they found it
    assert torch._C._autograd._saved_tensors_hooks_get_disabled_error_message() is None
    torch._C._autograd._saved_tensors_hooks_disable("outer")
    try:
        assert cf(torch.ones(1))[1] == "outer"
    finally:
        torch._C._autograd._saved_tensors_hooks_enable()
    assert cf(torch.ones(1))[1] is None


def test_context_object_reachable_twice_is_one_object_after_a_break():
    def fn(x):
        a = torch.set_grad_enabled(False)
        b = a
        torch._dynamo.graph_break()
        with a:
            y = x * 2
        return y, a is b, torch.is_grad_enabled()

    x = torch.ones(2, requires_grad=True)
    expected = fn(x)
    torch.set_grad_enabled(True)
    cdynamo.reset()
    cnt = cdynamo.testing.CompileCounter()
    cf = cdynamo.compile(fn, backend=cnt)
    for _ in range(2):
        got = cf(x)
        torch.set_grad_enabled(True)
        assert got[1:] == expected[1:] and torch.equal(got[0], expected[0])
        assert got[0].requires_grad == expected[0].requires_grad
    assert cnt.frame_count >= 1


def test_state_contexts_leave_the_state_as_they_found_it():
    # After the compiled call (and after its trace) the attention backends and the
    # saved-tensors-hooks switch are the caller's again, also when the caller's differ
    # from the first call's (the entry's guards see them).
    math = torch.nn.attention.SDPBackend.MATH

    def fn(q):
        with torch.nn.attention.sdpa_kernel([math]):
            a = torch.nn.functional.scaled_dot_product_attention(q, q, q)
        with torch.autograd.graph.disable_saved_tensors_hooks("m"):
            b = a * 2
        return b, sdpa_backends(), hooks_message()

    q = torch.randn(1, 2, 4, 8)
    before = sdpa_backends()
    cdynamo.reset()
    cnt = cdynamo.testing.CompileCounter()
    cf = cdynamo.compile(fn, backend=cnt)
    for _ in range(2):
        got, want = cf(q), fn(q)
        torch.testing.assert_close(got[0], want[0])
        assert got[1:] == want[1:] == (before, None)
        assert sdpa_backends() == before and hooks_message() is None
    assert cnt.frame_count == 1
    torch._C._autograd._saved_tensors_hooks_disable("caller's")
    try:
        with torch.nn.attention.sdpa_kernel([math, torch.nn.attention.SDPBackend.EFFICIENT_ATTENTION]):
            inner_before = sdpa_backends()
            got, want = cf(q), fn(q)
            assert got[1:] == want[1:] == (inner_before, "caller's")
            assert sdpa_backends() == inner_before
        assert hooks_message() == "caller's"
    finally:
        torch._C._autograd._saved_tensors_hooks_enable()
    assert sdpa_backends() == before


def test_break_inside_disable_saved_tensors_hooks_keeps_the_switch():
    # The breaking instruction and the rest of the block run with the switch off; the frame
    # leaves it as it found it.
    def fn(x):
        with torch.autograd.graph.disable_saved_tensors_hooks("not here"):
            y = x + 1
            torch._dynamo.graph_break()
            inside = hooks_message()
            y = y * 2
        return y, inside, hooks_message()

    x = torch.randn(3)
    cdynamo.reset()
    cnt = cdynamo.testing.CompileCounter()
    cf = cdynamo.compile(fn, backend=cnt)
    for _ in range(2):
        got = cf(x)
        torch.testing.assert_close(got[0], (x + 1) * 2)
        assert got[1:] == ("not here", None)
        assert hooks_message() is None
    assert cnt.frame_count == 2


@pytest.mark.parametrize("which", ["cdynamo", "torch"])
def test_contextlib_tracing_switched_off_breaks_at_the_context(which, monkeypatch):
    # enable_trace_contextlib=False (cdynamo's option, or torch._dynamo's read through
    # cdynamo's None): the call making a contextlib context breaks the graph; the block runs
    # natively and the functions it calls are frames of their own, as torch._dynamo does.
    @contextlib.contextmanager
    def doubled(x):
        try:
            yield x * 2
        finally:
            pass

    def inner(x):
        return x.neg() + x.cos()

    def fn(x):
        y = x.sin()
        with doubled(x) as z:
            y = y + inner(z)
        return y + y.tan()

    x = torch.randn(3)
    if which == "cdynamo":
        monkeypatch.setattr(cdynamo.config, "enable_trace_contextlib", False)
    else:
        monkeypatch.setattr(torch._dynamo.config, "enable_trace_contextlib", False)
    cdynamo.reset()
    cnt = cdynamo.testing.CompileCounter()
    cf = cdynamo.compile(fn, backend=cnt)
    for _ in range(2):
        torch.testing.assert_close(cf(x), fn(x))
    torch._dynamo.reset()
    dcnt = torch._dynamo.testing.CompileCounter()
    with torch._dynamo.config.patch(enable_trace_contextlib=False):
        dyn = torch.compile(fn, backend=dcnt)
        dyn(x)
    torch._dynamo.reset()
    assert cnt.frame_count == dcnt.frame_count == 2


def test_break_inside_sdpa_kernel_runs_natively_with_the_backends_set():
    # Not resumed (the frame runs natively): what runs after the break sees the block's
    # backends on every call, the first one included.
    @cdynamo.disable
    def enabled():
        return sdpa_backends()

    math, flash = torch.nn.attention.SDPBackend.MATH, torch.nn.attention.SDPBackend.FLASH_ATTENTION

    def fn(x):
        with torch.nn.attention.sdpa_kernel([math, flash]):
            x = x + 1
            torch._dynamo.graph_break()
            inside = enabled()
            x = x + 1
        return x, inside

    x = torch.randn(2)
    want = fn(x)
    cdynamo.reset()
    cf = cdynamo.compile(fn, backend=cdynamo.testing.CompileCounter())
    before = sdpa_backends()
    for _ in range(2):
        got = cf(x)
        torch.testing.assert_close(got[0], want[0])
        assert got[1] == want[1] and set(want[1]) == {math, flash}
        assert sdpa_backends() == before
    assert break_in_sdpa_kernel(torch.randn(1, 2, 4, 8))[1] == before
