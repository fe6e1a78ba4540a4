"""What a backend sees of a graph follows torch._dynamo's conventions (checked against it).

Graph inputs are named from their sources as torch._dynamo names them (L['x'] -> L_x_, a
module's parameter L_mod_parameters_weight_, a root frame's free variable a local); one tensor
reached through two sources is one input (guarded: two tensors later recompile); call nodes
carry meta["stack_trace"] (print_readable groups them by line); the placeholders of
parameters and module tensors carry meta["tensor_dict"] with their static-input mark; a
functools.partial made in the trace is rebuilt at a graph break.
"""
import functools

import torch
import torch._dynamo
import torch._dynamo.testing
from torch._dynamo.testing import normalize_gm

import cdynamo
from cdynamo.testing import CompileCounter


def graphs_of(compile_fn, fn, *args):
    gms = []

    def backend(gm, example_inputs):
        gms.append(gm)
        return gm

    out = compile_fn(fn, backend=backend)(*args)
    return out, gms


def both(fn, *args):
    torch._dynamo.reset()
    cdynamo.reset()
    got, ours = graphs_of(cdynamo.compile, fn, *args)
    want, theirs = graphs_of(torch.compile, fn, *args)
    torch._dynamo.reset()
    torch.testing.assert_close(got, want)
    return ours, theirs


def placeholders(gm):
    return [(n.name, n.target) for n in gm.graph.nodes if n.op == "placeholder"]


def readable(gm):
    return normalize_gm(gm.print_readable(print_output=False))


def helper(a, b):
    return a * b


def test_placeholder_names_and_printout_match_dynamo():
    lin = torch.nn.Linear(3, 3)

    def f(x, y, mod):
        return mod(helper(x, y)) + lin.bias

    args = (torch.randn(2, 3), torch.randn(2, 3), torch.nn.Linear(3, 3))
    ours, theirs = both(f, *args)
    assert len(ours) == len(theirs) == 1
    assert placeholders(ours[0]) == placeholders(theirs[0])
    assert "L_mod_parameters_weight_" in [t for _, t in placeholders(ours[0])]
    assert readable(ours[0]) == readable(theirs[0])  # blank lines between source lines included


def test_stack_trace_names_the_innermost_user_frame():
    def f(x):
        return helper(x, 2) + 1

    ours, _ = both(f, torch.randn(3))
    traces = [n.meta.get("stack_trace") for n in ours[0].graph.nodes if n.op == "call_function"]
    assert 'in helper\n    return a * b' in traces[0] and traces[0].index("in f") < traces[0].index("in helper")
    assert "in helper" not in traces[1] and "return helper(x, 2) + 1" in traces[1]


def test_one_tensor_through_two_sources_is_one_input_and_guarded():
    def f(a, b):
        return a * 2 + b

    cnt = CompileCounter()
    cf = cdynamo.compile(f, backend=cnt)
    x = torch.randn(3)
    for _ in range(2):
        torch.testing.assert_close(cf(x, x), f(x, x))
    assert cnt.frame_count == 1
    assert len(placeholders(cnt.graphs[0])) == 1
    y = torch.randn(3)
    torch.testing.assert_close(cf(x, y), f(x, y))  # the aliasing guard fails: a new entry
    assert cnt.frame_count == 2
    assert len(placeholders(cnt.graphs[1])) == 2
    torch.testing.assert_close(cf(y, x), f(y, x))
    assert cnt.frame_count == 2


def test_free_variable_of_the_root_frame_is_named_as_a_local():
    mod = torch.nn.Module()
    mod.buf = torch.ones(3)

    def f(x):
        return x * mod.buf

    ours, theirs = both(f, torch.randn(3))
    assert placeholders(ours[0]) == placeholders(theirs[0])
    assert ("l_mod_buf", "L_mod_buf") in placeholders(ours[0])


def test_static_input_marks_in_tensor_dict_match_dynamo():
    class M(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.lin = torch.nn.Linear(2, 2)
            self.plain = torch.ones(2)

        def forward(self, x):
            return self.lin(x) * self.plain

    def marks(gm):
        return {n.target: n.meta.get("tensor_dict") for n in gm.graph.nodes if n.op == "placeholder"}

    m1, m2 = M(), M()
    cdynamo.reset()
    _, ours = graphs_of(cdynamo.compile, m1, torch.randn(2))
    torch._dynamo.reset()
    _, theirs = graphs_of(torch.compile, m2, torch.randn(2))
    torch._dynamo.reset()
    assert marks(ours[0]) == marks(theirs[0])
    assert marks(ours[0])["L_x_"] == {}
    assert m1.plain._dynamo_static_input_type == "unguarded"


def test_partial_made_in_the_trace_rebuilt_at_a_graph_break():
    def f(fn, x):
        p = functools.partial(fn, b=x)
        print("break")
        return torch.mul(p(x), p(x + 1)), p

    x = torch.randn(2)
    cnt = CompileCounter()
    cf = cdynamo.compile(f, backend=cnt)
    for _ in range(2):
        got, p = cf(helper, x)
        want, q = f(helper, x)
        torch.testing.assert_close(got, want)
        assert isinstance(p, functools.partial) and p.func is helper and p.args == ()
        assert p.keywords.keys() == {"b"} and p.keywords["b"] is x
    st = cdynamo.stats()
    assert st["frames_native"] == 0 and st["graph_breaks"] >= 1
    assert cnt.frame_count == 1  # the part before the break has no ops
    ours, theirs = both(lambda fn, x: f(fn, x)[0], helper, x)
    assert [readable(g) for g in ours] == [readable(g) for g in theirs]
