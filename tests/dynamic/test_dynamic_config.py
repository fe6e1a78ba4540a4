"""torch._dynamo.config's dynamic-shape options that cdynamo follows (config.effective):
force_parameter_static_shapes and automatic_dynamic_shapes_mark_as. Each case compares with
eager on the first call and on cache hits, and its compile count with torch._dynamo's under
the same setting and the same counting backend."""
from unittest.mock import patch

import pytest
import torch
import torch._dynamo.config
import torch._dynamo.testing

import cdynamo
from cdynamo.testing import CompileCounter


def counts(fn, calls, **kw):
    """(cdynamo's compiles, torch._dynamo's) over `calls`; every cdynamo result (first call
    and a repeated call that hits) equals eager."""
    cnt = CompileCounter()
    cf = cdynamo.compile(fn, backend=cnt, **kw)
    for args in calls:
        expected = fn(*args)
        torch.testing.assert_close(cf(*args), expected)
        torch.testing.assert_close(cf(*args), expected)  # a cache hit
    ref = torch._dynamo.testing.CompileCounter()
    tf = torch.compile(fn, backend=ref, **kw)
    for args in calls:
        tf(*args)
    return cnt, ref.frame_count


def matmul(x, w):
    return x @ w


def param_calls():
    w = torch.nn.Parameter(torch.randn(3, 2))
    return [(torch.nn.Parameter(torch.randn(n, 3)), w) for n in (1, 10, 11, 15, 15)]


@pytest.mark.parametrize("automatic", [True, False])
def test_parameters_static_by_default(automatic):
    with patch.object(torch._dynamo.config, "automatic_dynamic_shapes", automatic):
        cnt, dynamo = counts(matmul, param_calls())
    assert cnt.frame_count == dynamo == 4  # one entry per size: parameters keep static sizes


def test_parameters_dynamic_when_not_forced_static():
    with patch.object(torch._dynamo.config, "force_parameter_static_shapes", False):
        cnt, dynamo = counts(matmul, param_calls())
    # 1, then 10 (a recompile making dim 0 of x symbolic), then every size hits
    assert cnt.frame_count == dynamo == 2
    assert any(isinstance(n.meta.get("example_value"), torch.SymInt)
               for n in cnt.graphs[1].graph.nodes if n.op == "placeholder")


def test_parameters_dynamic_set_on_cdynamo_config():
    cdynamo.config.force_parameter_static_shapes = False
    try:
        cnt, _ = counts(matmul, param_calls())
    finally:
        cdynamo.config.force_parameter_static_shapes = None
    assert cnt.frame_count == 2


class Holder(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.w = torch.nn.Parameter(torch.randn(4, 3))

    def forward(self, x):
        return x @ self.w.t()


@pytest.mark.parametrize("forced", [True, False])
def test_module_parameter_replaced_by_other_sizes(forced):
    frames = {}
    with patch.object(torch._dynamo.config, "force_parameter_static_shapes", forced):
        for name, compile_ in (("cdynamo", cdynamo.compile), ("dynamo", torch.compile)):
            m = Holder()
            cnt = torch._dynamo.testing.CompileCounter()
            cm = compile_(m, backend=cnt)
            for n in (4, 5, 6, 7, 7):
                m.w = torch.nn.Parameter(torch.randn(n, 3))
                x = torch.randn(2, 3)
                torch.testing.assert_close(cm(x), m(x))
                torch.testing.assert_close(cm(x), m(x))
            frames[name] = cnt.frame_count
    assert frames["cdynamo"] == frames["dynamo"] == (4 if forced else 2)


def square(x):
    return x * x


def test_mark_as_unbacked_one_entry_for_sizes_zero_and_one():
    calls = [(torch.randn(n),) for n in (3, 2, 1, 0, 7)]
    with patch.object(torch._dynamo.config, "automatic_dynamic_shapes_mark_as", "unbacked"):
        cnt, dynamo = counts(square, calls)
    assert cnt.frame_count == dynamo == 2  # not four: no 0/1 specialization of unbacked sizes
    syms = [n.meta["example_value"] for n in cnt.graphs[1].graph.nodes
            if n.op == "placeholder" and isinstance(n.meta.get("example_value"), torch.SymInt)]
    assert [str(s) for s in syms] == ["u0"]


def test_mark_as_dynamic_specializes_zero_and_one():
    calls = [(torch.randn(n),) for n in (3, 2, 1, 0, 7)]
    cnt, dynamo = counts(square, calls)
    assert cnt.frame_count == dynamo == 4


def view_rows(x):
    return x.view(-1, 2).sum(1) * x.shape[0]


def test_mark_as_unbacked_sizes_in_the_program():
    calls = [(torch.randn(n, 2),) for n in (3, 2, 1, 0, 5)]
    with patch.object(torch._dynamo.config, "automatic_dynamic_shapes_mark_as", "unbacked"):
        cnt, dynamo = counts(view_rows, calls)
    assert cnt.frame_count == dynamo == 2


def add_pair(x, y):
    return x + y


def test_mark_as_unbacked_two_inputs_that_must_agree():
    # The add of two unbacked sizes needs a runtime check torch would put in the graph;
    # cdynamo stops the graph there (the add runs natively), results as eager, an
    # unequal pair raises eager's error, and it compiles no more than torch._dynamo.
    calls = [(torch.randn(n), torch.randn(n)) for n in (3, 2, 1, 0, 5)]
    with patch.object(torch._dynamo.config, "automatic_dynamic_shapes_mark_as", "unbacked"):
        cnt, dynamo = counts(add_pair, calls)
        cf = cdynamo.compile(add_pair, backend=cnt)
        with pytest.raises(RuntimeError, match="must match the size"):
            cf(torch.randn(3), torch.randn(2))
    assert cnt.frame_count <= dynamo


def scaled_rows(x):
    return x * x.shape[0]


def row_calls():
    return [(torch.randn(n, 3),) for n in (2, 5, 7, 7)]


@pytest.mark.parametrize("assume_static", [True, False])
def test_assume_static_by_default(assume_static):
    # False: the first compile is already symbolic (one graph for every size, as torch._dynamo's
    # dynamic=True); True (torch's default): static first, then one automatic-dynamic recompile.
    with patch.object(torch._dynamo.config, "assume_static_by_default", assume_static):
        cnt, dynamo = counts(scaled_rows, row_calls())
    assert cnt.frame_count == dynamo == (2 if assume_static else 1)
    first = cnt.graphs[0]
    symbolic = any(isinstance(n.meta.get("example_value"), torch.SymInt)
                   for n in first.graph.nodes if n.op == "placeholder")
    assert symbolic is (not assume_static)


def test_assume_static_by_default_set_on_cdynamo_config():
    cdynamo.config.assume_static_by_default = False
    try:
        cnt, _ = counts(scaled_rows, row_calls())
        # compile(dynamic=False) still means static sizes
        static = CompileCounter()
        f = cdynamo.compile(scaled_rows, backend=static, dynamic=False)
        for (x,) in row_calls():
            torch.testing.assert_close(f(x), scaled_rows(x))
    finally:
        cdynamo.config.assume_static_by_default = None
    assert cnt.frame_count == 1
    assert static.frame_count == 3
