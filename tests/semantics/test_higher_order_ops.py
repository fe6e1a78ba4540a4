"""Higher-order ops whose callables are traced as subgraphs: torch.cond and
torch.utils.checkpoint.checkpoint (use_reentrant=False).

Each callable (function, lambda, bound method, nn.Module, functools.partial) is traced by the
frame's own tracer into a graph of its own; the tensors it reads beyond its explicit inputs
(closure cells, globals, module parameters and buffers, values the frame computed) are lifted
as extra inputs. The frame's graph holds one node of the op over get_attr submodules named as
torch._dynamo names them, so AOT autograd and inductor lower it. A body that cannot be one
graph (a side effect outside it, a graph break, an in-place change of an input) makes the call
Unsupported with the reason, a graph break there (or the user's error under fullgraph=True).
"""
import functools
import warnings

import pytest
import torch
import torch._dynamo.testing
from torch.utils.checkpoint import checkpoint

import cdynamo
import cdynamo.testing

from .harness import Cases, check, tensors

case = Cases()

W = torch.randn(4)
LIN = torch.nn.Linear(4, 4)


def _pred_and_x():
    return torch.tensor(True), torch.randn(4)


def _false_and_x():
    return torch.tensor(False), torch.randn(4)


# ---------------------------------------------------------------- torch.cond


@case(_pred_and_x)
def cond_of_functions_reading_a_global(p, x):
    def t(x):
        return x.sin() + W

    def f(x):
        return x.cos() * 2

    return torch.cond(p, t, f, (x,)), x + 1


@case(_false_and_x)
def cond_false_branch_taken(p, x):
    return torch.cond(p, lambda y: y + 1, lambda y: y - 1, [x])


@case(tensors((4,)))
def cond_on_a_computed_predicate_with_a_closure_tensor(x):
    scale = x * 3  # a value the frame computed, read by the branch through its closure

    def t(y):
        return y + scale

    return torch.cond(x.sum() > 0, t, lambda y: y.abs(), (x,))


@case(_pred_and_x)
def cond_of_partials(p, x):
    def mul(y, k):
        return y * k

    return torch.cond(p, functools.partial(mul, k=2.0), functools.partial(mul, k=3.0), (x,))


@case(_pred_and_x)
def cond_returning_a_tuple(p, x):
    return torch.cond(p, lambda y: (y + 1, y * 2), lambda y: (y - 1, y / 2), (x,))


@case(_pred_and_x)
def two_conds_in_one_frame(p, x):
    a = torch.cond(p, lambda y: y + 1, lambda y: y - 1, (x,))
    return torch.cond(p, lambda y: y * 2, lambda y: y / 2, (a,))


@case(_pred_and_x)
def cond_with_an_in_place_op_on_a_tensor_the_branch_made(p, x):
    def t(y):
        z = y * 2
        z.add_(1)
        return z

    return torch.cond(p, t, lambda y: y.cos(), (x,))


class WithBranches(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.lin = torch.nn.Linear(4, 4)
        self.register_buffer("offset", torch.ones(4))

    def up(self, x):
        return self.lin(x) + self.offset  # parameters and a buffer, lifted

    def down(self, x):
        return x - self.offset

    def forward(self, x):
        return torch.cond(x.sum() > 0, self.up, self.down, (x,))


def _module_and_x():
    return WithBranches(), torch.randn(4)


@case(_module_and_x)
def cond_of_bound_methods_reading_parameters(m, x):
    return m(x), m(-x.abs() - 1)


# ---------------------------------------------------------------- checkpoint


@case(tensors((4,)))
def checkpoint_of_a_function_reading_a_global(x):
    def body(y):
        return torch.relu(y * W).sin()

    return checkpoint(body, x, use_reentrant=False)


@case(tensors((3, 4), (4,)))
def checkpoint_of_a_module_with_keywords(x, y):
    def body(a, b, scale=1.0):
        return LIN(a).relu() * b * scale

    return checkpoint(body, x, y, use_reentrant=False, scale=2.0) + 1


@case(tensors((3, 4)))
def checkpoint_of_an_nn_module(x):
    return checkpoint(LIN, x, use_reentrant=False).sum(0)


# The op's result is made from the body's outputs without running the body on fakes again
# (when nothing but their metadata matters): these are the cases where more than metadata does.


@case(tensors((4, 3)))
def checkpoint_returning_a_view_of_its_input_changed_in_place_after(x):
    y = checkpoint(lambda a: a.t(), x, use_reentrant=False)
    y.add_(1)  # changes x through the view, as in eager
    return y * 2


@case(tensors((4,)))
def checkpoint_returning_one_tensor_twice(x):
    a, b = checkpoint(lambda t: (lambda u: (u, u))(t.sin()), x, use_reentrant=False)
    a.mul_(3)  # b is the same tensor in eager
    return a + b


@case(lambda: (torch.randn(4, requires_grad=True),))
def checkpoint_result_requiring_grad_changed_in_place(x):
    y = checkpoint(lambda a: a.sin() * 2, x, use_reentrant=False)
    y.add_(1)  # not a leaf: an in-place op on it is allowed
    return y.requires_grad, y.is_leaf, y


@case(lambda: (torch.randn(4, requires_grad=True),))
def checkpoint_body_enabling_grad_under_no_grad(x):
    def body(a):
        with torch.enable_grad():
            return a.cos() + 1

    with torch.no_grad():
        y = checkpoint(body, x, use_reentrant=False)
    return y.requires_grad, y


# ---------------------------------------------------------------- wrap, map, scan

from torch._higher_order_ops.map import map as hop_map  # noqa: E402
from torch._higher_order_ops.scan import scan  # noqa: E402
from torch._higher_order_ops.wrap import wrap  # noqa: E402


@case(tensors((4,)))
def nested_wraps_lift_a_global_through_both(x):
    return wrap(lambda y: wrap(lambda z: z + W, y) * 2, x)


@case(tensors((4,)))
def wrap_of_a_value_computed_in_the_frame(x):
    z = x.cos()
    return wrap(lambda y: y * z, x)


@case(tensors((2, 4), (4,)))
def map_over_rows_with_an_argument_and_a_global(xs, y):
    return hop_map(lambda x, y: x * y + W, xs, y)


@case(tensors((2, 4)))
def map_whose_body_reads_a_value_of_all_rows(xs):
    # The body's x is one row (a stand-in slice, its own placeholder); the frame's total over
    # all rows is lifted apart. (Reading xs itself inside is refused by torch as aliasing.)
    total = xs.sum(0)
    return hop_map(lambda x: x + total, xs)


@case(tensors((4,), (3, 4)))
def scan_carrying_a_sum(init, xs):
    def step(c, x):
        n = c + x * W
        return n, n.sin()

    return scan(step, init, xs)


@pytest.mark.parametrize("fn,make_args,expect_graphs", case.params)
def test_higher_order_op(fn, make_args, expect_graphs):
    check(fn, make_args, expect_graphs=expect_graphs)


# ---------------------------------------------------------------- graphs, against torch._dynamo


class Recorder:
    def __init__(self):
        self.graphs = []

    def __call__(self, gm, example_inputs):
        self.graphs.append(gm)
        return gm


def _hop_summary(gm):
    """The frame graph's call targets, and per submodule its placeholder count and call targets."""
    calls = [str(n.target) for n in gm.graph.nodes if n.op == "call_function"]
    subs = {}
    for name, sub in gm.named_children():
        ph = [n for n in sub.graph.nodes if n.op == "placeholder"]
        subs[name] = (len(ph), [str(n.target) for n in sub.graph.nodes if n.op in ("call_function", "call_method")])
    return calls, subs


def _cond_fn(p, x):
    def t(y):
        return y.sin() + W

    def f(y):
        return y.cos() * 2

    return torch.cond(p, t, f, (x,))


def _ckpt_fn(x):
    def body(y):
        return torch.relu(y * W).sin()

    return checkpoint(body, x, use_reentrant=False)


def _map_fn(xs, y):
    return hop_map(lambda x, y: x * y + W, xs, y)


def _scan_fn(init, xs):
    def step(c, x):
        n = c + x * W
        return n, n.sin()

    return scan(step, init, xs)


_GRAPH_CASES = {
    "cond": (_cond_fn, lambda: (torch.tensor(True), torch.randn(4)), torch.ops.higher_order.cond),
    "checkpoint": (_ckpt_fn, lambda: (torch.randn(4),), torch.ops.higher_order.tag_activation_checkpoint),
    "map": (_map_fn, lambda: (torch.randn(2, 4), torch.randn(4)), torch.ops.higher_order.map_impl),
    "scan": (_scan_fn, lambda: (torch.zeros(4), torch.randn(3, 4)), torch.ops.higher_order.scan),
}


@pytest.mark.parametrize("which", list(_GRAPH_CASES))
def test_graph_is_torch_dynamos(which):
    fn, make, hop = _GRAPH_CASES[which]
    args = make()
    ours, theirs = Recorder(), Recorder()
    cnt = torch._dynamo.testing.CompileCounterWithBackend(ours)
    torch.testing.assert_close(cdynamo.compile(fn, backend=cnt, fullgraph=True)(*args), fn(*args))
    torch.testing.assert_close(cdynamo.compile(fn, backend=cnt, fullgraph=True)(*args), fn(*args))  # a hit
    dcnt = torch._dynamo.testing.CompileCounterWithBackend(theirs)
    torch.compile(fn, backend=dcnt, fullgraph=True)(*args)
    assert cnt.frame_count == dcnt.frame_count == 1
    assert cnt.op_count == dcnt.op_count
    assert _hop_summary(ours.graphs[0]) == _hop_summary(theirs.graphs[0])
    assert [n.target for n in ours.graphs[0].graph.nodes if n.op == "call_function"][0] is hop


@pytest.mark.parametrize("backend", ["aot_eager", "inductor"])
@pytest.mark.parametrize("which", ["cond_true", "cond_false", "checkpoint"])
def test_backward_through_the_op(which, backend):
    w = torch.randn(4, requires_grad=True)
    lin = torch.nn.Linear(4, 4)

    def f(p, x):
        return torch.cond(p, lambda y: (y.sin() * w).sum(0) + lin(y).sum(), lambda y: y.cos().sum(0) * 2, (x,))

    def g(p, x):
        return checkpoint(lambda y: torch.relu(lin(y) * w).sin(), x, use_reentrant=False).sum(0)

    fn = g if which == "checkpoint" else f
    p = torch.tensor(which != "cond_false")
    leaves = [w, lin.weight, lin.bias]

    def run(callable_):
        x = torch.randn(3, 4, requires_grad=True, generator=torch.Generator().manual_seed(1))
        out = callable_(p, x)
        out.sum().backward()
        grads = [x.grad] + [t.grad.clone() for t in leaves]
        for t in leaves:
            t.grad = None
        return out, grads

    eager_out, eager_grads = run(fn)
    cnt = torch._dynamo.testing.CompileCounterWithBackend(backend)
    cf = cdynamo.compile(fn, backend=cnt, fullgraph=True)
    for _ in range(2):  # the first call and a cache hit
        out, grads = run(cf)
        torch.testing.assert_close(out, eager_out)
        for a, b in zip(grads, eager_grads):
            torch.testing.assert_close(a, b)
    assert cnt.frame_count == 1


# ---------------------------------------------------------------- refusals

LOG = []


def test_a_branch_with_a_side_effect_is_unsupported_with_the_reason():
    def f(p, x):
        def t(y):
            LOG.append(1)
            return y + 1

        return torch.cond(p, t, lambda y: y - 1, (x,))

    with pytest.raises(cdynamo.Unsupported, match="torch.cond .true branch.: its body changes state outside it"):
        cdynamo.compile(f, backend="eager", fullgraph=True)(torch.tensor(True), torch.randn(4))
    assert LOG == []  # nothing of the branch ran for real


def test_a_branch_leaving_a_tensor_outside_is_unsupported():
    def f(p, x):
        box = []

        def t(y):
            z = y * 2
            box.append(z)
            return z

        return torch.cond(p, t, lambda y: y.cos(), (x,)), box

    with pytest.raises(cdynamo.Unsupported, match="torch.cond"):
        cdynamo.compile(f, backend="eager", fullgraph=True)(torch.tensor(True), torch.randn(4))


def test_a_branch_changing_its_input_in_place_is_unsupported():
    def f(p, x):
        def t(y):
            y.add_(1)
            return y.sin()

        return torch.cond(p, t, lambda y: y.cos(), (x,))

    with pytest.raises(cdynamo.Unsupported, match="in place"):
        cdynamo.compile(f, backend="eager", fullgraph=True)(torch.tensor(True), torch.randn(4))


def test_branches_of_different_structure_are_unsupported():
    def f(p, x):
        return torch.cond(p, lambda y: (y.sin(), y.cos()), lambda y: y.sum(), (x,))

    with pytest.raises(cdynamo.Unsupported, match="same pytree structure"):
        cdynamo.compile(f, backend="eager", fullgraph=True)(torch.tensor(True), torch.randn(4))


def test_branches_with_different_outputs_raise_torchs_error():
    # torch's fake implementation of cond rejects them: the program's own error, as
    # torch._dynamo reports it (RuntimeError when making fake tensor call).
    def f(p, x):
        return torch.cond(p, lambda y: y.sin(), lambda y: y.sum(), (x,))

    with pytest.raises(cdynamo.exc.TorchRuntimeError, match="expected same dim"):
        cdynamo.compile(f, backend="eager", fullgraph=True)(torch.tensor(True), torch.randn(4))


def test_a_checkpointed_body_with_a_graph_break_is_a_break_at_the_call():
    def f(x):
        def body(y):
            LOG.append(2)  # a side effect: checkpoint runs natively, with its reason
            return y.sin()

        return checkpoint(body, x, use_reentrant=False) + 1

    LOG.clear()
    x = torch.randn(4)
    cnt = cdynamo.testing.CompileCounter()
    torch.testing.assert_close(cdynamo.compile(f, backend=cnt)(x), x.sin() + 1)
    assert LOG == [2]
    reasons = [r.get("reason", "") for r in cdynamo.stats()["graph_break_reasons"]]
    assert any("torch.utils.checkpoint.checkpoint: its body changes state outside it" in r for r in reasons), reasons
    assert cnt.frame_count == 1  # the `+ 1` after the call, in the resume function
    assert cdynamo.stats()["frames_native"] == 0


def test_a_constant_predicate_takes_one_branch_with_the_warning():
    def f(x):
        return torch.cond(True, lambda y: y.sin(), lambda y: y.cos(), (x,))

    x = torch.randn(4)
    cnt = cdynamo.testing.CompileCounter()
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        torch.testing.assert_close(cdynamo.compile(f, backend=cnt, fullgraph=True)(x), x.sin())
    assert any("Pred is a Python constant" in str(w.message) for w in caught)
    assert cnt.frame_count == 1 and cnt.op_count == 1


# The body's own values may change (a list it fills, its own cells); what existed before it
# may not: the op runs the body apart from the frame (cond speculates both branches).


@case(tensors((4,)))
def body_filling_its_own_list_and_cells(x):
    def body(y):
        out = []
        z = y * 2

        def add_z(v):
            return v + z

        out.append(add_z(y).sin())
        out.append(y.cos())
        return out

    return wrap(body, x)


@pytest.mark.parametrize("what", ["outer_list", "outer_iterator", "nonlocal", "outer_object", "outer_generator"])
def test_a_body_changing_what_existed_before_it_is_unsupported(what):
    class Box:
        pass

    def f(p, x):
        lst, it, box, gen = [1], iter([1, 2, 3]), Box(), (i for i in range(3))
        n = 0

        def t(y):
            nonlocal n
            if what == "outer_list":
                lst.append(2)
            elif what == "outer_iterator":
                next(it)
            elif what == "nonlocal":
                n = 1
            elif what == "outer_object":
                box.a = 1
            else:
                next(gen)
            return y.sin()

        return torch.cond(p, t, lambda y: y.cos(), (x,)), lst, list(it), n, list(gen)

    with pytest.raises(cdynamo.Unsupported, match="its body changes state outside it"):
        cdynamo.compile(f, backend="eager", fullgraph=True)(torch.tensor(False), torch.randn(4))
