"""Automatic dynamic for Python ints read through an argument's attributes, items and keys
(the mechanism of automatic dynamic int arguments, extended to every source under an argument):
after the first recompile caused by such an int changing, it is a SymInt graph input and
later values hit one entry. Ints under an nn.Module stay constants unless
config.allow_unspec_int_on_nn_module, as torch._dynamo's flag of that name. Each case runs
the same calls under cdynamo and torch._dynamo, compares every result (and the state the
program left) with eager, on first calls and cache hits, and compares the compile counts."""
import copy

import pytest
import torch
import torch._dynamo.testing
import torch.nn.functional as F

import cdynamo
from cdynamo.testing import CompileCounter


def run_both(make, steps, **kw):
    """make() -> (fn, state); steps(fn, state) yields the values to compare. Runs eager,
    cdynamo and torch._dynamo on their own states; returns the two compile counts."""
    eager_fn, eager_state = make()
    torch.manual_seed(1)  # the inputs steps() makes
    expected = list(steps(eager_fn, eager_state))
    counts = []
    for compile_fn in (cdynamo.compile, torch.compile):
        fn, state = make()
        torch.manual_seed(1)
        cnt = CompileCounter() if compile_fn is cdynamo.compile else torch._dynamo.testing.CompileCounter()
        got = list(steps(compile_fn(fn, backend=cnt, **kw), state))
        assert len(got) == len(expected)
        for g, e in zip(got, expected):
            torch.testing.assert_close(g, e)
        counts.append(cnt.frame_count)
    return counts


class Box:
    def __init__(self, n):
        self.n = n


def scale_by_box(x, box):
    return x * box.n + 1


def test_int_attribute_of_an_argument_becomes_symbolic_after_one_recompile():
    def make():
        return scale_by_box, Box(2)

    def steps(fn, box):
        x = torch.randn(4)
        for n in (2, 3, 4, 5, 3):
            box.n = n
            yield fn(x, box)
            yield fn(x, box)  # a cache hit

    assert run_both(make, steps) == [2, 2]
    cdynamo.reset()  # forget the sizes and values seen
    cnt = CompileCounter()
    cf = cdynamo.compile(scale_by_box, backend=cnt)
    box = Box(2)
    cf(torch.randn(4), box)
    box.n = 7
    cf(torch.randn(4), box)
    syms = [n for n in cnt.graphs[1].graph.nodes
            if n.op == "placeholder" and isinstance(n.meta.get("example_value"), torch.SymInt)]
    assert [n.name for n in syms] == ["l_box_n"]
    assert "type(L['box'].n) is int" in cdynamo.cache_entries(scale_by_box)[0]["guards"]


def add_items(x, xs, cfg):
    return x + xs[1] - cfg["k"]


def test_int_items_of_list_and_dict_arguments_become_symbolic():
    def make():
        return add_items, None

    def steps(fn, _):
        x = torch.randn(3)
        for a, k in ((5, 2), (6, 2), (7, 2), (7, 3), (8, 4)):
            yield fn(x, [0, a], {"k": k})

    assert run_both(make, steps) == [3, 3]


LIMIT = 3


def add_global(x):
    return x + LIMIT


def test_int_global_stays_a_constant():
    global LIMIT

    def make():
        return add_global, None

    def steps(fn, _):
        global LIMIT
        x = torch.randn(3)
        for v in (3, 4, 5):
            LIMIT = v
            yield fn(x)

    try:
        assert run_both(make, steps) == [3, 3]
    finally:
        LIMIT = 3


class Stepper(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.lin = torch.nn.Linear(4, 4)
        self.step = 10

    def forward(self, x):
        return self.lin(x + 1) + self.step


class Counting(torch.nn.Module):
    """Reads and bumps its own int on every call."""

    def __init__(self, layer):
        super().__init__()
        self.layer = layer
        self.counter = 0

    def forward(self, x):
        out = self.layer(x) + self.counter
        self.counter += 1
        return F.relu(out)


def stepper_steps(mod, state):
    x = torch.randn(3, 4)
    for _ in range(4):
        yield mod(x)
        yield mod(x)
        state.step += 1


def make_stepper():
    torch.manual_seed(0)
    m = Stepper()
    return m, m


def test_module_int_attribute_recompiles_by_default():
    # torch._dynamo's default: a module's ints are its configuration, specialized.
    assert cdynamo.config.effective("allow_unspec_int_on_nn_module") is False
    assert run_both(make_stepper, stepper_steps) == [4, 4]


@pytest.fixture
def unspec_module_ints():
    cdynamo.config.allow_unspec_int_on_nn_module = True
    with torch._dynamo.config.patch(allow_unspec_int_on_nn_module=True):
        yield
    cdynamo.config.allow_unspec_int_on_nn_module = None


def test_module_int_attribute_automatic_dynamic_with_the_flag(unspec_module_ints):
    assert run_both(make_stepper, stepper_steps) == [2, 2]


def test_module_counting_from_zero_two_graphs_and_state_written_back(unspec_module_ints):
    # The counter goes 0, 1, 2: the second compile makes it a symbol (1 is not specialized
    # as a size would be), so the third call and a second instance hit. The int the trace
    # stores back is a plain int of the right value.
    def make():
        torch.manual_seed(0)
        layer = torch.nn.Linear(5, 5)
        a, b = Counting(layer), Counting(layer)
        return a, (a, b)

    def steps(fn, state):
        a, b = state
        i = torch.randn(5)
        outs = [fn(i) for _ in range(3)]
        yield torch.stack(outs)
        assert type(a.counter) is int and a.counter == 3
        yield torch.tensor(a.counter)

    counts = run_both(make, steps)
    assert counts == [2, 2]


def test_second_instance_of_counting_module_hits_the_symbolic_entry(unspec_module_ints):
    torch.manual_seed(0)
    layer = torch.nn.Linear(5, 5)
    ref, m3, m4 = Counting(layer), Counting(layer), Counting(layer)
    i = torch.randn(5)
    expected = [ref(i) for _ in range(3)]
    cnt = CompileCounter()
    c3, c4 = cdynamo.compile(m3, backend=cnt), cdynamo.compile(m4, backend=cnt)
    for cm in (c3, c4):
        for e in expected:
            torch.testing.assert_close(cm(i), e)
    assert cnt.frame_count == 2
    assert (m3.counter, m4.counter) == (3, 3)


class Holder:
    def __init__(self, mod):
        self.mod = mod


def through_holder(x, h):
    return x + h.mod.step


def test_int_under_a_module_under_a_plain_object_stays_a_constant():
    def make():
        return through_holder, Holder(Stepper())

    def steps(fn, h):
        x = torch.randn(4)
        for v in (1, 2, 3):
            h.mod.step = v
            yield fn(x, h)

    assert run_both(make, steps) == [3, 3]


class Rows:
    def __init__(self, n):
        self.n = n


def loop_rows(x, r):
    for i in range(r.n):
        x = x + i
    return x


def test_int_attribute_the_program_needs_as_a_constant_is_specialized():
    # range() needs the value: the trace with it symbolic does not complete, so it is
    # specialized, each value its own graph, as torch._dynamo.
    def make():
        return loop_rows, Rows(2)

    def steps(fn, r):
        x = torch.randn(2)
        for n in (2, 3, 4, 3):
            r.n = n
            yield fn(x, r)

    counts = run_both(make, steps)
    assert counts[0] == 3 and counts[0] == counts[1]
    assert cdynamo.stats()["native_frames"] == []


@pytest.mark.parametrize("installed", [False, True])
def test_torch_dynamo_config_flag_is_followed(installed):
    # cdynamo.config's option is None (as torch._dynamo.config's), so patching torch's flag
    # -- code written for torch.compile does that -- changes what cdynamo compiles, installed
    # or not: automatic dynamic for the module's int, 2 compiles as torch._dynamo's, not 4.
    assert cdynamo.config.allow_unspec_int_on_nn_module is None
    if installed:
        cdynamo.install()
    try:
        # Installed, torch.compile is cdynamo's too (its run shares cdynamo's cache): only
        # cdynamo's own count is compared there.
        compared = slice(0, 1) if installed else slice(0, 2)
        with torch._dynamo.config.patch(allow_unspec_int_on_nn_module=True):
            assert cdynamo.config.effective("allow_unspec_int_on_nn_module") is True
            assert run_both(make_stepper, stepper_steps)[compared] == [2, 2][compared]
        assert cdynamo.config.effective("allow_unspec_int_on_nn_module") is False
        cdynamo.reset()
        torch._dynamo.reset()
        assert run_both(make_stepper, stepper_steps)[compared] == [4, 4][compared]
    finally:
        if installed:
            cdynamo.uninstall()
    assert cdynamo.config.allow_unspec_int_on_nn_module is None


def test_cdynamo_setting_wins_over_torch_dynamo_config():
    cdynamo.config.allow_unspec_int_on_nn_module = False
    try:
        with torch._dynamo.config.patch(allow_unspec_int_on_nn_module=True):
            assert cdynamo.config.effective("allow_unspec_int_on_nn_module") is False
            # cdynamo's own False: one compile per value (4); torch._dynamo, flag on: 2.
            assert run_both(make_stepper, stepper_steps) == [4, 2]
    finally:
        cdynamo.config.allow_unspec_int_on_nn_module = None


def test_an_argument_that_was_a_tensor_and_becomes_an_int_is_a_symbol_at_once():
    # torch._dynamo's frame state: a source that changed kind (a tensor, then an int) has
    # changed, so the int is a symbol in the compile that first sees it and later ints hit.
    def mul(x, y):
        return x * y

    def steps(fn, _):
        for n, y in [(2, None), (3, 3), (4, None), (4, None), (5, 4), (5, 4), (6, None)]:
            yield fn(torch.randn(n), torch.randn(n) if y is None else y)

    counts = run_both(lambda: (mul, None), steps)
    assert counts == [3, 3]
