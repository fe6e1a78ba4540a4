"""Strict torch.export with cdynamo's capture, against torch's strict export and eager.

Each case exports a module twice, with torch's strict export (torch._dynamo's capture) and
with cdynamo.export, and checks that the two ExportedPrograms have the same graph signature,
the same range constraints and the same ATen ops, that both run equal to eager on the example
inputs and on inputs of new sizes (within the spec), and that cdynamo's program survives
torch.export.save/load. Every cdynamo export must have been captured by cdynamo (counted), not
handed back to torch._dynamo.
"""
import io
import warnings

import pytest
import torch
from torch.export import Dim

import cdynamo
from cdynamo import _export


@pytest.fixture
def captures(monkeypatch):
    """How many times cdynamo's export capture ran."""
    count = {"n": 0}
    original = _export.capture

    def counted(*a, **k):
        count["n"] += 1
        return original(*a, **k)

    monkeypatch.setattr(_export, "capture", counted)
    return count


def _ops(ep):
    return [str(n.target) for n in ep.graph.nodes if n.op == "call_function"]


def _same(a, b):
    fa, sa = torch.utils._pytree.tree_flatten(a)
    fb, sb = torch.utils._pytree.tree_flatten(b)
    assert sa == sb
    for x, y in zip(fa, fb):
        if isinstance(x, torch.Tensor):
            assert isinstance(y, torch.Tensor) and x.shape == y.shape and x.dtype == y.dtype
            torch.testing.assert_close(x, y)
        else:
            assert x == y


def _check(mod, args, kwargs=None, dynamic_shapes=None, new_inputs=(), captures=None):
    kwargs = kwargs or {}
    assert not cdynamo.installed()
    ref = torch.export.export(mod, args, kwargs, dynamic_shapes=dynamic_shapes, strict=True)
    before = captures["n"]
    with warnings.catch_warnings():
        warnings.simplefilter("error", RuntimeWarning)  # no hand-back to torch._dynamo
        ep = cdynamo.export(mod, args, kwargs, dynamic_shapes=dynamic_shapes)
    assert captures["n"] == before + 1
    assert ep.graph_signature == ref.graph_signature
    assert list(ep.range_constraints.values()) == list(ref.range_constraints.values())
    assert _ops(ep) == _ops(ref)
    buf = io.BytesIO()
    torch.export.save(ep, buf)
    buf.seek(0)
    loaded = torch.export.load(buf)
    for a, k in [(args, kwargs), *new_inputs]:
        expected = mod(*a, **k)
        _same(ep.module()(*a, **k), expected)
        _same(ref.module()(*a, **k), expected)
        _same(loaded.module()(*a, **k), expected)
    return ep, ref


class MLP(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.fc1 = torch.nn.Linear(8, 16)
        self.fc2 = torch.nn.Linear(16, 4)

    def forward(self, x):
        return self.fc2(torch.relu(self.fc1(x)))


def test_dynamic_batch(captures):
    torch.manual_seed(0)
    batch = Dim("batch", min=2, max=64)
    _check(MLP(), (torch.randn(5, 8),), dynamic_shapes={"x": {0: batch}},
           new_inputs=[((torch.randn(9, 8),), {}), ((torch.randn(2, 8),), {})], captures=captures)


class ShapeBranch(torch.nn.Module):
    def forward(self, x):
        if x.shape[0] > 4:
            return x.sin() * x.shape[0]
        return x.cos()


def test_control_flow_on_shapes_static(captures):
    _check(ShapeBranch(), (torch.randn(6, 3),), captures=captures)
    _check(ShapeBranch(), (torch.randn(3, 3),), captures=captures)


def test_control_flow_on_shapes_within_range(captures):
    n = Dim("n", min=5, max=50)
    ep, _ = _check(ShapeBranch(), (torch.randn(6, 3),), dynamic_shapes={"x": {0: n}},
                   new_inputs=[((torch.randn(11, 3),), {})], captures=captures)
    assert "sym_size" in " ".join(_ops(ep))  # x.shape[0] stays symbolic in the graph


def test_guard_narrowing_the_range_is_a_constraint_violation(captures):
    from torch._dynamo.exc import UserError

    spec = {"x": {0: Dim("n")}}
    with pytest.raises(UserError) as torch_error:
        torch.export.export(ShapeBranch(), (torch.randn(6, 3),), dynamic_shapes=spec, strict=True)
    with pytest.raises(UserError) as ours:
        cdynamo.export(ShapeBranch(), (torch.randn(6, 3),), dynamic_shapes=spec)
    assert captures["n"] == 1
    assert "Constraints violated (n)" in str(torch_error.value)
    assert "Constraints violated (n)" in str(ours.value)
    assert "L['x'].size()[0]" in str(ours.value)


class WithBuffers(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.register_buffer("scale", torch.full((3,), 2.0))
        self.register_buffer("steps", torch.zeros(()))
        self.register_buffer("scratch", torch.ones(3), persistent=False)

    def forward(self, x):
        self.steps.add_(1)
        return x * self.scale + self.scratch


def test_buffers_and_buffer_mutation(captures):
    mod = WithBuffers()
    ep, ref = _check(mod, (torch.randn(4, 3),), captures=captures)
    # Exporting changed nothing for real (each run of mod above did: 3 of them).
    assert mod.steps.item() == 3
    assert [s.kind for s in ep.graph_signature.output_specs] == [s.kind for s in ref.graph_signature.output_specs]


class Kwargs(torch.nn.Module):
    def forward(self, x, *, bias=None, alpha=1.0):
        y = x * alpha
        if bias is not None:
            y = y + bias
        return y


def test_kwargs(captures):
    b = Dim("b")
    _check(Kwargs(), (torch.randn(4, 3),), {"bias": torch.randn(3), "alpha": 0.5},
           dynamic_shapes={"x": {0: b}, "bias": None, "alpha": None},
           new_inputs=[((torch.randn(7, 3),), {"bias": torch.randn(3), "alpha": 0.5})], captures=captures)


class Block(torch.nn.Module):
    def __init__(self, shared):
        super().__init__()
        self.shared = shared
        self.norm = torch.nn.LayerNorm(6)

    def forward(self, x):
        return self.norm(self.shared(x)) + x


class Tower(torch.nn.Module):
    def __init__(self):
        super().__init__()
        shared = torch.nn.Linear(6, 6)
        self.blocks = torch.nn.ModuleList([Block(shared), Block(shared)])
        self.head = torch.nn.Sequential(torch.nn.Linear(6, 2), torch.nn.Tanh())

    def forward(self, x):
        for block in self.blocks:
            x = block(x)
        return self.head(x)


def test_submodules_with_a_shared_layer(captures):
    torch.manual_seed(0)
    seq = Dim("seq", max=128)
    _check(Tower(), (torch.randn(2, 5, 6),), dynamic_shapes={"x": {1: seq}},
           new_inputs=[((torch.randn(2, 9, 6),), {})], captures=captures)


class Constants(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.offset = torch.tensor([1.0, -1.0])  # a tensor attribute: a constant of the program
        self.factor = 3
        self.eps = 1e-3

    def forward(self, x, n):
        return (x + self.offset) * self.factor * n + self.eps, n


def test_constants_and_int_inputs(captures):
    _check(Constants(), (torch.randn(3, 2), 4), captures=captures)


class CondOnValues(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.lin = torch.nn.Linear(3, 3)

    def forward(self, x):
        def true_fn(x):
            return self.lin(x).sin()

        def false_fn(x):
            return x.cos()

        return torch.cond(x.sum() > 0, true_fn, false_fn, (x,))


def test_cond(captures):
    torch.manual_seed(0)
    batch = Dim("batch")
    x = torch.randn(4, 3).abs()
    _check(CondOnValues(), (x,), dynamic_shapes={"x": {0: batch}},
           new_inputs=[((-torch.randn(6, 3).abs(),), {}), ((torch.randn(5, 3).abs(),), {})], captures=captures)


class TwoInputs(torch.nn.Module):
    def forward(self, x, y):
        return x + y, x.sum(0) - y.sum(0)


def test_two_inputs_sharing_a_dim(captures):
    b = Dim("b", min=2, max=32)
    _check(TwoInputs(), (torch.randn(4, 3), torch.randn(4, 3)), dynamic_shapes={"x": {0: b}, "y": {0: b}},
           new_inputs=[((torch.randn(7, 3), torch.randn(7, 3)), {})], captures=captures)


def test_two_dims_the_program_needs_equal_are_a_constraint_violation(captures):
    from torch._dynamo.exc import UserError

    spec = {"x": {0: Dim("a")}, "y": {0: Dim("b")}}
    args = (torch.randn(4, 3), torch.randn(4, 3))
    with pytest.raises(UserError):
        torch.export.export(TwoInputs(), args, dynamic_shapes=spec, strict=True)
    with pytest.raises(UserError) as ours:
        cdynamo.export(TwoInputs(), args, dynamic_shapes=spec)
    assert "must always be equal" in str(ours.value)


class Nested(torch.nn.Module):
    def forward(self, inputs, mask):
        a, b = inputs["pair"]
        out = a @ b + inputs["bias"]
        return {"out": out * mask, "mask": mask, "rank": 2, "parts": [a, out.sum()]}


def test_nested_inputs_and_outputs(captures):
    inputs = {"pair": (torch.randn(3, 4), torch.randn(4, 5)), "bias": torch.randn(5)}
    rows = Dim("rows")
    _check(Nested(), (inputs, torch.ones(3, 5)),
           dynamic_shapes={"inputs": {"pair": ({0: rows}, None), "bias": None}, "mask": {0: rows}},
           new_inputs=[(({"pair": (torch.randn(6, 4), torch.randn(4, 5)), "bias": torch.randn(5)},
                         torch.ones(6, 5)), {})], captures=captures)


class Passthrough(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.register_buffer("table", torch.arange(4.0))

    def forward(self, x):
        return x, self.table


def test_program_without_ops(captures):
    _check(Passthrough(), (torch.randn(2),), captures=captures)


class Breaks(torch.nn.Module):
    def forward(self, x):
        y = x + 1
        torch._dynamo.graph_break()
        return y


def test_unsupported_construct_names_the_line(captures):
    with pytest.raises(cdynamo.Unsupported) as e:
        cdynamo.export(Breaks(), (torch.randn(3),))
    assert isinstance(e.value, torch._dynamo.exc.Unsupported)  # what torch's strict export raises
    assert "test_strict_export.py" in str(e.value)
    line = Breaks.forward.__code__.co_firstlineno + 2
    assert f":{line}" in str(e.value)


def test_installed_torch_export_goes_through_cdynamo(captures):
    torch.manual_seed(0)
    mod = MLP()
    x = torch.randn(5, 8)
    ref = torch.export.export(mod, (x,), dynamic_shapes={"x": {0: Dim("b")}}, strict=True)
    with cdynamo.installed_scope():
        ep = torch.export.export(mod, (x,), dynamic_shapes={"x": {0: Dim("b")}}, strict=True)
    assert captures["n"] == 1
    assert ep.graph_signature == ref.graph_signature
    y = torch.randn(11, 8)
    _same(ep.module()(y), mod(y))


def test_unsupported_spec_is_handed_to_torch_with_a_warning(captures):
    d = Dim("d", min=2, max=16)
    args = (torch.randn(4, 3), torch.randn(5, 3))

    class Shifted(torch.nn.Module):
        def forward(self, x, y):
            return x.sum() + y.sum()

    with pytest.warns(RuntimeWarning, match="derived Dim"):
        ep = cdynamo.export(Shifted(), args, dynamic_shapes={"x": {0: d}, "y": {0: d + 1}})
    assert captures["n"] == 0
    _same(ep.module()(*args), Shifted()(*args))


class ConvNorm(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.conv = torch.nn.Conv1d(3, 4, 3)
        self.bn = torch.nn.BatchNorm1d(4)

    def forward(self, x):
        return self.bn(self.conv(x)).relu()


@pytest.mark.parametrize("training", [True, False])
def test_convolution_and_batch_norm(captures, training):
    # The convolution's fake picks no backend by batch size (a guard the spec would not
    # allow); in training the running statistics change (the signature says how, as torch's).
    torch.manual_seed(0)
    mod = ConvNorm().train(training)
    _check(mod, (torch.randn(4, 3, 8),), dynamic_shapes={"x": {0: Dim("b")}},
           new_inputs=[((torch.randn(20, 3, 8),), {})], captures=captures)


class ExportingBranch(torch.nn.Module):
    def forward(self, x):
        if torch.compiler.is_exporting():
            return x + 1
        return x - 1


def test_is_exporting_is_true_in_the_capture(captures):
    x = torch.randn(3)
    ep = cdynamo.export(ExportingBranch(), (x,))
    assert captures["n"] == 1
    torch.testing.assert_close(ep.module()(x), x + 1)


class Scaled(torch.nn.Module):
    def forward(self, x, y):
        return x * 2 + y


def test_auto_dims_and_a_positional_spec(captures):
    args = (torch.randn(4, 3), torch.randn(4, 3))
    new = [((torch.randn(6, 3), torch.randn(6, 3)), {})]
    _check(Scaled(), args, dynamic_shapes={"x": {0: Dim.AUTO}, "y": {0: Dim.AUTO}}, new_inputs=new,
           captures=captures)
    q = Dim("q")
    _check(Scaled(), args, dynamic_shapes=({0: q}, {0: q}), new_inputs=new, captures=captures)


class Pairwise(torch.nn.Module):
    def forward(self, xs):
        return xs[0] + xs[1], len(xs)


def test_dims_only_in_nested_inputs(captures):
    # No argument is itself a tensor with a dynamic dim: the capture still needs its ShapeEnv.
    b = Dim("b")
    _check(Pairwise(), ([torch.randn(4, 3), torch.randn(4, 3)],), dynamic_shapes={"xs": [{0: b}, {0: b}]},
           new_inputs=[(([torch.randn(9, 3), torch.randn(9, 3)],), {})], captures=captures)


class CountsCalls(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.calls = 0

    def forward(self, x):
        self.calls += 1
        return x * 2


def test_side_effects_are_reported(captures):
    mod = CountsCalls()
    with pytest.warns(UserWarning, match="changed 1 object"):
        ep = cdynamo.export(mod, (torch.randn(3),))
    assert captures["n"] == 1
    assert mod.calls == 1  # as one eager call (torch's capture leaves it 0, warning as well)
    x = torch.randn(3)
    torch.testing.assert_close(ep.module()(x), x * 2)


class Hooked(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.lin = torch.nn.Linear(3, 3)

    def forward(self, x):
        return self.lin(x)


def test_hooks_of_the_exported_module_are_captured(captures):
    # The root module's hooks run around its forward: the exported program has them (as
    # torch's), not the one capture run alone.
    torch.manual_seed(0)
    mod = Hooked()
    mod.register_forward_pre_hook(lambda m, args: (args[0] * 3,))
    mod.register_forward_hook(lambda m, args, out: out.relu() + 1)
    mod.lin.register_forward_hook(lambda m, args, out: out * 2)
    _check(mod, (torch.randn(4, 3),), dynamic_shapes={"x": {0: Dim("b")}},
           new_inputs=[((torch.randn(6, 3),), {})], captures=captures)


def _call_ops(gm):
    return sorted(str(n.target) for n in gm.graph.nodes if n.op in ("call_function", "call_method"))


class Affine(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.lin = torch.nn.Linear(4, 3)

    def forward(self, x, y):
        return self.lin(x).relu() + y, x.shape[0]


def test_export_graph_as_torch_dynamo_export(captures):
    # torch._dynamo.export's result: a torch-level GraphModule called with the program's
    # arguments (sizes symbolic unless assume_static_by_default) and the guards.
    torch.manual_seed(0)
    mod, x, y = Affine(), torch.randn(5, 4), torch.randn(3)
    ref, _ = torch._dynamo.export(mod)(x, y)
    gm, guards = cdynamo.export_graph(mod)(x, y)
    assert captures["n"] == 1
    assert _call_ops(gm) == _call_ops(ref)
    assert any("L['x'].size()[0]" in g for g in guards)
    for rows in (5, 7, 2):
        x2 = torch.randn(rows, 4)
        _same(gm(x2, y), mod(x2, y))
    static, _ = cdynamo.export_graph(mod, assume_static_by_default=True)(x, y)
    assert all(not isinstance(n.meta.get("val"), torch.SymInt) for n in static.graph.nodes)
    assert static(x, y)[1] == 5
    with cdynamo.installed_scope():
        routed, _ = torch._dynamo.export(mod)(x, y)
    assert captures["n"] == 3
    assert _call_ops(routed) == _call_ops(ref)
