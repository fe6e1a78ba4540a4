"""Static tensors whose identity is guarded are held by the graph module (get_attr nodes), not
passed as inputs, as torch._dynamo installs them: a tensor marked with
torch._dynamo.mark_static_address(t, guard=True), and under inductor's parameter freezing
(torch._inductor.config.freezing with grad mode off) every parameter and buffer of a module.
Another object under the source recompiles; the graph reads the very tensor, so in-place
changes to it are seen. Each case compares with eager on the first call and a cache hit, and
the graph's inputs and attributes with torch._dynamo's."""
import pytest
import torch
import torch._dynamo
import torch._dynamo.testing
import torch._inductor.config

import cdynamo
from cdynamo.testing import CompileCounter


def kinds(gm):
    return (sorted(n.op for n in gm.graph.nodes if n.op in ("placeholder", "get_attr")),
            len(list(gm.buffers())), len(list(gm.parameters())))


def run(compile_fn, fn, calls):
    """Calls fn compiled with compile_fn on each args tuple (twice: a cache hit); returns the
    results and the graphs."""
    gms = []

    def backend(gm, example_inputs):
        gms.append(gm)
        return gm.forward

    cf = compile_fn(fn, backend=backend)
    out = []
    for args in calls():
        out.append(cf(*args))
        out.append(cf(*args))
    return out, gms


def compare(fn, calls, reset):
    expected = []
    for args in calls():
        expected += [fn(*args), fn(*args)]
    results = {}
    for name, compile_fn in (("cdynamo", cdynamo.compile), ("dynamo", torch.compile)):
        reset()
        cdynamo.reset()
        torch._dynamo.reset()
        out, gms = run(compile_fn, fn, calls)
        for g, e in zip(out, expected):
            torch.testing.assert_close(g, e)
        results[name] = gms
    torch._dynamo.reset()
    return results["cdynamo"], results["dynamo"]


class Scaled(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.lin = torch.nn.Linear(3, 3)
        self.buf = torch.nn.Buffer(torch.ones(3) * 2)

    def forward(self, x):
        return self.lin(x) * self.buf


@pytest.fixture
def freezing():
    with torch._inductor.config.patch(freezing=True), torch.no_grad():
        yield


def test_module_tensors_are_graph_attributes_under_freezing(freezing):
    torch.manual_seed(0)
    mod = Scaled()
    x = torch.randn(2, 3)

    def fn(x, m):
        return m(x)

    ours, theirs = compare(fn, lambda: [(x, mod)], lambda: None)
    assert len(ours) == len(theirs) == 1
    assert kinds(ours[0]) == kinds(theirs[0]) == (["get_attr", "get_attr", "get_attr", "placeholder"], 1, 2)


def test_replacing_a_frozen_buffer_recompiles_and_sees_the_new_one(freezing):
    mod = Scaled()

    def fn(x, m):
        return m(x)

    def calls():
        x = torch.randn(2, 3)
        yield x, mod
        mod.buf = torch.full((3,), 5.0)  # another object: the identity guard fails
        yield x, mod
        mod.buf.mul_(2)  # in place: the graph reads the live tensor, no recompile
        yield x, mod

    torch.manual_seed(0)
    cnt = CompileCounter()
    cf = cdynamo.compile(fn, backend=cnt)
    torch.manual_seed(1)
    for x, m in calls():
        expected = fn(x, m)
        torch.testing.assert_close(cf(x, m), expected)
        torch.testing.assert_close(cf(x, m), expected)
    assert cnt.frame_count == 2
    assert "L['m']._buffers['buf']" in cdynamo.stats()["recompile_reasons"][-1]["reason"]


def test_without_freezing_module_tensors_stay_inputs():
    torch.manual_seed(0)
    mod = Scaled()
    x = torch.randn(2, 3)

    def fn(x, m):
        return m(x)

    ours, theirs = compare(fn, lambda: [(x, mod)], lambda: None)
    assert kinds(ours[0]) == kinds(theirs[0]) == (["placeholder"] * 4, 0, 0)


def test_freezing_needs_grad_mode_off():
    torch.manual_seed(0)
    mod = Scaled()
    x = torch.randn(2, 3)

    def fn(x, m):
        return m(x)

    with torch._inductor.config.patch(freezing=True):
        ours, theirs = compare(fn, lambda: [(x, mod)], lambda: None)
    assert kinds(ours[0]) == kinds(theirs[0]) == (["placeholder"] * 4, 0, 0)


def test_mark_static_address_guarded_tensor_is_a_graph_attribute():
    state = {}

    def fresh():
        state["t"] = torch.arange(4.0)
        torch._dynamo.mark_static_address(state["t"], guard=True)

    def fn(x, s):
        s.mul_(2)
        return x + s

    def calls():
        x = torch.ones(4)
        yield x, state["t"]

    fresh()
    expected_state = state["t"].clone()
    ours, theirs = compare(fn, calls, fresh)
    assert kinds(ours[0]) == kinds(theirs[0])
    assert kinds(ours[0])[0] == ["get_attr", "placeholder"]
    # The in-place op ran on the very tensor, twice (first call and cache hit).
    torch.testing.assert_close(state["t"], expected_state * 4)


def test_mark_static_address_returned_as_is_keeps_identity():
    t = torch.arange(3.0)
    torch._dynamo.mark_static_address(t, guard=True)

    def fn(x, s):
        return x * 2, s

    cnt = CompileCounter()
    cf = cdynamo.compile(fn, backend=cnt)
    for _ in range(2):
        y, s = cf(torch.ones(3), t)
        assert s is t
        torch.testing.assert_close(y, torch.full((3,), 2.0))
    other = torch.arange(3.0)
    torch._dynamo.mark_static_address(other, guard=True)
    y, s = cf(torch.ones(3), other)
    assert s is other and cnt.frame_count == 2
