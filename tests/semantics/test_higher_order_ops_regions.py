"""while_loop, selective checkpointing and nested compile regions, each traced as a
higher-order op over subgraphs the running tracer speculates.

* while_loop's fake implementation makes unbacked symbols of the trace's ShapeEnv: a trace
  made without one is made again with one (static sizes), and the op is recorded over its
  cond_fn/body_fn subgraphs, as torch._dynamo records it.
* checkpoint's context_fn is no graph value: it goes, as a real object guarded by identity, to
  the body GraphModule's meta, where AOT autograd reads the policy that decides what the
  backward recomputes.
* A call of a torch.compiler.nested_compile_region function is invoke_subgraph over its
  body; calls whose bodies are the same (structure, input metadata) share one subgraph.
"""
import functools

import pytest
import torch
import torch._dynamo.testing
from torch._dynamo.backends.common import aot_autograd
from torch._higher_order_ops import while_loop
from torch.utils.checkpoint import CheckpointPolicy, checkpoint, create_selective_checkpoint_contexts

import cdynamo

from .test_higher_order_ops import Recorder


def _summary(gm):
    calls = [str(n.target) for n in gm.graph.nodes if n.op == "call_function"]
    attrs = [n.target for n in gm.graph.nodes if n.op == "get_attr"]
    subs = {name: [str(n.target) for n in sub.graph.nodes if n.op in ("call_function", "call_method")]
            for name, sub in gm.named_children()}
    return calls, attrs, subs


def _against_dynamo(fn, args, hop):
    """Compiled result equals eager on the first call and a hit; one graph whose op targets,
    get_attrs and subgraph bodies are torch._dynamo's."""
    ours, theirs = Recorder(), Recorder()
    cnt = torch._dynamo.testing.CompileCounterWithBackend(ours)
    cf = cdynamo.compile(fn, backend=cnt, fullgraph=True)
    for _ in range(2):
        torch.testing.assert_close(cf(*args), fn(*args))
    dcnt = torch._dynamo.testing.CompileCounterWithBackend(theirs)
    torch.compile(fn, backend=dcnt, fullgraph=True)(*args)
    assert cnt.frame_count == dcnt.frame_count == 1
    assert cnt.op_count == dcnt.op_count
    assert _summary(ours.graphs[0]) == _summary(theirs.graphs[0])
    assert any(n.target is hop for n in ours.graphs[0].graph.nodes)
    return ours.graphs[0]


# ---------------------------------------------------------------- while_loop

W = torch.randn(4)


def _count_loop(x):
    def cond(i, y):
        return i < 3

    def body(i, y):
        return i + 1, y.sin() + W  # W: a global, lifted

    return while_loop(cond, body, (torch.tensor(0), x))


def test_while_loop_graph_is_torch_dynamos():
    _against_dynamo(_count_loop, (torch.randn(4),), torch.ops.higher_order.while_loop)


def test_while_loop_runs_to_a_data_dependent_end():
    def f(x):
        return while_loop(lambda y: y.sum() < 100, lambda y: (y * 2,), (x,))

    cnt = torch._dynamo.testing.CompileCounter()
    cf = cdynamo.compile(f, backend=cnt, fullgraph=True)
    for x in (torch.ones(3), torch.full((3,), 5.0), torch.ones(3)):  # a hit for other values
        torch.testing.assert_close(cf(x), f(x))
    assert cnt.frame_count == 1


def test_while_loop_under_aot_eager():
    cnt = torch._dynamo.testing.CompileCounterWithBackend("aot_eager")
    cf = cdynamo.compile(_count_loop, backend=cnt, fullgraph=True)
    x = torch.randn(4)
    for _ in range(2):
        torch.testing.assert_close(cf(x), _count_loop(x))
    assert cnt.frame_count == 1


def test_while_loop_body_changing_the_carried_metadata_is_an_error():
    def f(x):
        return while_loop(lambda y: y.sum() < 10, lambda y: (y.sum(0),), (x,))

    with pytest.raises(Exception, match="carried_inputs|body_output|metadata"):
        cdynamo.compile(f, backend="eager", fullgraph=True)(torch.ones(2, 2))


def test_while_loop_over_an_int_is_unsupported_with_the_reason():
    def f(x):
        return while_loop(lambda i, y: i < 3, lambda i, y: (i + 1, y.sin()), (0, x))

    with pytest.raises(cdynamo.Unsupported, match="while_loop: its inputs must be tensors"):
        cdynamo.compile(f, backend="eager", fullgraph=True)(torch.randn(4))


# ---------------------------------------------------------------- selective checkpointing


def _save_mm(ctx, op, *args, **kwargs):
    return CheckpointPolicy.MUST_SAVE if op == torch.ops.aten.mm.default else CheckpointPolicy.PREFER_RECOMPUTE


SAVE_MM = functools.partial(create_selective_checkpoint_contexts, _save_mm)


def _mm_chain(x, y):
    return torch.sigmoid(torch.mm(torch.mm(x, y), y))


def _sac(x, y):
    return checkpoint(_mm_chain, torch.sin(x), y, use_reentrant=False, context_fn=SAVE_MM)


def _sac_partial_made_inside(x, y):
    ctx = functools.partial(create_selective_checkpoint_contexts, _save_mm)
    return checkpoint(_mm_chain, torch.sin(x), y, use_reentrant=False, context_fn=ctx)


def _plain(x, y):
    return checkpoint(_mm_chain, torch.sin(x), y, use_reentrant=False)


def _mm_counts(compile_fn, fn):
    counts = []

    def counting(kind):
        def compiler(gm, example_inputs):
            counts.append((kind, sum(1 for n in gm.graph.nodes if n.target == torch.ops.aten.mm.default)))
            return gm

        return compiler

    backend = aot_autograd(fw_compiler=counting("fw"), bw_compiler=counting("bw"))
    gen = torch.Generator().manual_seed(0)
    x = torch.randn(4, 4, requires_grad=True, generator=gen)
    y = torch.randn(4, 4, requires_grad=True, generator=gen)
    cf = compile_fn(fn, backend=backend)
    grads = []
    for _ in range(2):  # the first call and a hit
        out = cf(x, y)
        out.sum().backward()
        grads.append((out.detach(), x.grad.clone(), y.grad.clone()))
        x.grad = y.grad = None
    eager = fn(x, y)
    eager.sum().backward()
    for g in grads:
        for a, b in zip(g, (eager.detach(), x.grad, y.grad)):
            torch.testing.assert_close(a, b)
    return counts


@pytest.mark.parametrize("fn", [_sac, _sac_partial_made_inside, _plain])
def test_selective_checkpointing_saves_what_the_policy_says(fn):
    ours = _mm_counts(cdynamo.compile, fn)
    theirs = _mm_counts(torch.compile, fn)
    assert ours == theirs
    # Saving the forward's mm results leaves the backward's own 4; recomputing adds 2.
    assert dict(ours)["bw"] == (6 if fn is _plain else 4)


def test_a_context_fn_made_in_the_compiled_code_is_unsupported_with_the_reason():
    def f(x, y):
        def policy(ctx, op, *args, **kwargs):
            return CheckpointPolicy.PREFER_RECOMPUTE

        ctx = functools.partial(create_selective_checkpoint_contexts, policy)
        return checkpoint(_mm_chain, x, y, use_reentrant=False, context_fn=ctx)

    with pytest.raises(cdynamo.Unsupported, match="context_fn must be a function or a functools.partial"):
        cdynamo.compile(f, backend="eager", fullgraph=True)(torch.randn(4, 4), torch.randn(4, 4))


# ---------------------------------------------------------------- nested compile regions


@torch.compiler.nested_compile_region
def _region(x, y):
    return torch.mm(x, y).sin() * W


def _two_calls(x, y):
    return _region(x, y) + _region(x.cos(), y)


def test_nested_compile_region_graph_is_torch_dynamos():
    gm = _against_dynamo(_two_calls, (torch.randn(4, 4), torch.randn(4, 4)), torch.ops.higher_order.invoke_subgraph)
    assert len(dict(gm.named_children())) == 1  # both calls name one body


def test_nested_compile_region_bodies_of_other_shapes_are_apart():
    def f(x, y):
        return _region(x, y).sum() + _region(x[:2], y).sum() + _region(x, y).sum()

    rec = Recorder()
    cnt = torch._dynamo.testing.CompileCounterWithBackend(rec)
    cf = cdynamo.compile(f, backend=cnt, fullgraph=True)
    x, y = torch.randn(4, 4), torch.randn(4, 4)
    for _ in range(2):
        torch.testing.assert_close(cf(x, y), f(x, y))
    gm = rec.graphs[0]
    ops = [n for n in gm.graph.nodes if n.target is torch.ops.higher_order.invoke_subgraph]
    assert len(ops) == 3 and len(dict(gm.named_children())) == 2
    assert ops[0].args[1] == ops[2].args[1] != ops[1].args[1]


@pytest.mark.parametrize("backend", ["aot_eager", "inductor"])
def test_nested_compile_region_backward(backend):
    w = torch.randn(4, requires_grad=True)

    @torch.compiler.nested_compile_region
    def region(x, y):
        return torch.mm(x, y).sin() * w  # w: a closure tensor, lifted

    def f(x, y):
        return region(x, y) + region(x.cos(), y)

    def run(fn):
        gen = torch.Generator().manual_seed(0)
        x = torch.randn(4, 4, requires_grad=True, generator=gen)
        y = torch.randn(4, 4, requires_grad=True, generator=gen)
        out = fn(x, y)
        out.sum().backward()
        grads = (x.grad, y.grad, w.grad.clone())
        w.grad = None
        return out, grads

    expected = run(f)
    cnt = torch._dynamo.testing.CompileCounterWithBackend(backend)
    cf = cdynamo.compile(f, backend=cnt, fullgraph=True)
    for _ in range(2):
        torch.testing.assert_close(run(cf), expected)
    assert cnt.frame_count == 1


def test_another_policy_of_the_same_code_compiles_again():
    # A function argument is otherwise guarded by its code and globals; the policy a closure
    # holds is the graph's (in its meta), so another closure must not hit this entry.
    def policy_saving(save):
        def policy(ctx, op, *args, **kwargs):
            if save and op == torch.ops.aten.mm.default:
                return CheckpointPolicy.MUST_SAVE
            return CheckpointPolicy.PREFER_RECOMPUTE

        return policy

    def f(x, y, policy):
        ctx = functools.partial(create_selective_checkpoint_contexts, policy)
        return checkpoint(_mm_chain, x, y, use_reentrant=False, context_fn=ctx)

    cnt = torch._dynamo.testing.CompileCounterWithBackend("aot_eager")
    cf = cdynamo.compile(f, backend=cnt)
    x, y = torch.randn(4, 4, requires_grad=True), torch.randn(4, 4)
    save, recompute = policy_saving(True), policy_saving(False)
    for p in (save, save, recompute):
        out = cf(x, y, p)
        out.sum().backward()
        torch.testing.assert_close(out, f(x, y, p))
    assert cnt.frame_count == 2
