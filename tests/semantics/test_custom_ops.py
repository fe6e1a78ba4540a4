"""Operators of torch.ops called in a compiled frame: aten's, and those a library defines
(torch.library.custom_op, a torch.library.Library's define with a fake kernel), called through
the packet (torch.ops.ns.op), an overload (torch.ops.ns.op.default) or the custom op's own
object. Each call is one node whose target is the operator object itself, as torch._dynamo
records it; the fake kernel gives the node its metadata, and the dispatcher runs the real
kernel when the graph runs. An op declared to mutate an argument stays in the graph for its
effect even when it returns nothing.

Each case: eager vs cdynamo on the first call and on a cache hit (outputs and the arguments'
final state), graph and op counts against torch._dynamo's in the same run."""
import pytest
import torch
import torch._dynamo
import torch._dynamo.testing

import cdynamo
import cdynamo.testing

from .harness import Cases, check, tensors

case = Cases()
T4 = tensors((4,))
T4x2 = tensors((4,), (4,))


# Defined at import, as a library registers its ops when it is imported.
@torch.library.custom_op("cdynamo_test::scaled_sin", mutates_args=())
def scaled_sin(x: torch.Tensor, k: float) -> torch.Tensor:
    return x.sin() * k


@scaled_sin.register_fake
def _(x, k):
    return torch.empty_like(x)


@torch.library.custom_op("cdynamo_test::accumulate", mutates_args=("acc",))
def accumulate(x: torch.Tensor, acc: torch.Tensor) -> None:
    acc.add_(x)


@accumulate.register_fake
def _(x, acc):
    return None


@torch.library.custom_op("cdynamo_test::split_halves", mutates_args=())
def split_halves(x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    n = x.shape[0] // 2
    return x[:n].clone(), x[n:].clone()


@split_halves.register_fake
def _(x):
    n = x.shape[0] // 2
    return x.new_empty(n), x.new_empty(x.shape[0] - n)


# A custom op with a backward (register_autograd), for the aot_eager case.
@torch.library.custom_op("cdynamo_test::cube", mutates_args=())
def cube(x: torch.Tensor) -> torch.Tensor:
    return x * x * x


@cube.register_fake
def _(x):
    return torch.empty_like(x)


def _cube_setup(ctx, inputs, output):
    (x,) = inputs
    ctx.save_for_backward(x)


def _cube_backward(ctx, g):
    (x,) = ctx.saved_tensors
    return g * 3 * x * x


cube.register_autograd(_cube_backward, setup_context=_cube_setup)


# The older way: a Library defines the schema, an implementation per dispatch key, and a
# fake kernel registered apart.
_LIB = torch.library.Library("cdynamo_test_lib", "DEF")
_LIB.define("twice_plus(Tensor x, int n) -> Tensor")
_LIB.impl("twice_plus", lambda x, n: x * 2 + n, "CompositeExplicitAutograd")
torch.library.register_fake("cdynamo_test_lib::twice_plus", lambda x, n: torch.empty_like(x))
_LIB.define("fill_from(Tensor(a!) dst, Tensor src) -> ()")


def _fill_from(dst, src):
    dst.copy_(src)


_LIB.impl("fill_from", _fill_from, "CompositeExplicitAutograd")
torch.library.register_fake("cdynamo_test_lib::fill_from", lambda dst, src: None)


@case(T4)
def packet_of_a_custom_op(x):
    return torch.ops.cdynamo_test.scaled_sin(x, 2.0) + 1


@case(T4)
def overload_of_a_custom_op(x):
    return torch.ops.cdynamo_test.scaled_sin.default(x, 0.5) * x


@case(T4)
def custom_op_object_itself(x):
    return scaled_sin(x + 1, 3.0) - x


@case(T4)
def custom_op_with_keyword_argument(x):
    return torch.ops.cdynamo_test.scaled_sin.default(x, k=1.5)


@case(T4)
def custom_op_returning_a_tuple(x):
    a, b = torch.ops.cdynamo_test.split_halves(x * 2)
    return a + b


@case(T4)
def mutating_custom_op_on_a_fresh_tensor(x):
    acc = torch.zeros_like(x)
    torch.ops.cdynamo_test.accumulate(x, acc)
    accumulate(x * 2, acc)
    return acc + 1


@case(T4x2)
def mutating_custom_op_on_an_argument(x, acc):
    torch.ops.cdynamo_test.accumulate.default(x.cos(), acc)
    return acc * 2


@case(T4)
def library_defined_op_packet_and_overload(x):
    return torch.ops.cdynamo_test_lib.twice_plus(x, 3) + torch.ops.cdynamo_test_lib.twice_plus.default(x, 1)


@case(T4x2)
def library_defined_mutating_op(dst, src):
    torch.ops.cdynamo_test_lib.fill_from(dst, src * 3)
    return dst.sum()


@case(T4)
def aten_packet_and_overload(x):
    return torch.ops.aten.sin(x) + torch.ops.aten.mul.Tensor(x, x)


@case(T4)
def aten_in_place_packet_and_overload(x):
    y = x.clone()
    torch.ops.aten.add_.Tensor(y, 1)
    torch.ops.aten.mul_(y, 2)
    return y


@case(lambda: ())
def aten_factory_without_tensor_arguments():
    return torch.ops.aten.ones.default([3]) * 2


@case(T4)
def operator_held_in_a_local_and_a_dict(x):
    ops = {"f": torch.ops.cdynamo_test.scaled_sin.default}
    f = torch.ops.aten.cos
    return ops["f"](f(x), 2.0)


@pytest.mark.parametrize("fn,make_args,expect_graphs", case.params)
def test_custom_op(fn, make_args, expect_graphs):
    check(fn, make_args, expect_graphs=expect_graphs)


def _graphs(compile_fn, fn, args):
    """(graph count, op count, call_function targets) of fn compiled with a recording backend."""
    graphs = []

    def backend(gm, example_inputs):
        graphs.append(gm)
        return gm.forward

    cnt = torch._dynamo.testing.CompileCounterWithBackend(backend)
    compile_fn(fn, backend=cnt)(*[a.clone() for a in args])
    targets = [n.target for g in graphs for n in g.graph.nodes if n.op == "call_function"]
    return cnt.frame_count, cnt.op_count, targets


@pytest.mark.parametrize("fn", [p.values[0] for p in case.params], ids=[p.id for p in case.params])
def test_custom_op_graph_matches_dynamo(fn):
    # The same nodes as torch._dynamo: one per operator call, the operator object its target.
    args = next(p.values[1] for p in case.params if p.values[0] is fn)()
    cdynamo.reset()
    mine = _graphs(cdynamo.compile, fn, args)
    torch._dynamo.reset()
    theirs = _graphs(torch.compile, fn, args)
    torch._dynamo.reset()
    assert mine[:2] == theirs[:2], (mine, theirs)
    ops = lambda ts: [t for t in ts if isinstance(t, (torch._ops.OpOverload, torch._ops.OpOverloadPacket))]
    assert ops(mine[2]) == ops(theirs[2])


def test_operator_first_reached_in_the_compiled_call():
    # A packet's overloads are made on first use (its __getattr__): the compiled call is the
    # first to ask for this one, and the trace makes it as eager would.
    lib = torch.library.Library("cdynamo_test_fresh", "DEF")
    lib.define("plus_one(Tensor x) -> Tensor")
    lib.impl("plus_one", lambda x: x + 1, "CompositeExplicitAutograd")
    torch.library.register_fake("cdynamo_test_fresh::plus_one", lambda x: torch.empty_like(x))

    def f(x):
        return torch.ops.cdynamo_test_fresh.plus_one.default(x) * 2

    x = torch.randn(3)
    cnt = cdynamo.testing.CompileCounter()
    cf = cdynamo.compile(f, backend=cnt)
    for _ in range(2):
        torch.testing.assert_close(cf(x), (x + 1) * 2)
    assert cnt.frame_count == 1 and cnt.op_count == 2
    assert cdynamo.stats()["graph_break_reasons"] == []


def test_custom_op_with_a_backward_under_aot_eager():
    # AOTAutograd traces the op through its registered autograd formula.
    def f(x):
        return (cube(x) + torch.ops.cdynamo_test.cube(x * 2)).sum()

    x = torch.randn(4, requires_grad=True)
    ref = f(x)
    ref.backward()
    ref_grad, x.grad = x.grad, None
    be = torch._dynamo.testing.CompileCounterWithBackend("aot_eager")
    cf = cdynamo.compile(f, backend=be)
    for _ in range(2):  # the first call and a cache hit
        out = cf(x)
        out.backward()
        torch.testing.assert_close(out, ref)
        torch.testing.assert_close(x.grad, ref_grad)
        x.grad = None
    assert be.frame_count == 1
    assert cdynamo.stats()["graph_break_reasons"] == []


def test_op_without_a_fake_kernel_is_a_reported_break():
    # Without a fake kernel the op's output cannot be known at trace time: a graph break
    # with a reason (torch._dynamo breaks there too), the result still eager's.
    lib = torch.library.Library("cdynamo_test_nofake", "DEF")
    lib.define("halve(Tensor x) -> Tensor")
    lib.impl("halve", lambda x: x / 2, "CPU")

    def f(x):
        return torch.ops.cdynamo_test_nofake.halve(x + 1) - 1

    x = torch.randn(3)
    cf = cdynamo.compile(f, backend=cdynamo.testing.CompileCounter())
    for _ in range(2):
        torch.testing.assert_close(cf(x), (x + 1) / 2 - 1)
    st = cdynamo.stats()
    assert st["graph_break_reasons"] or st["native_frames"]


def operator_methods_and_attributes(x):
    # An operator's own methods and attributes read as an object's (name(), overloads(),
    # overloadpacket), while calling it stays one node.
    op = torch.ops.aten.sin.default
    n = len(op.name()) + len(torch.ops.cdynamo_test.scaled_sin.overloads())
    return op(x) + n + (op.overloadpacket is torch.ops.aten.sin)


def test_operator_methods_and_attributes():
    check(operator_methods_and_attributes, T4)


def test_mutating_custom_op_under_aot_eager():
    # AOTAutograd functionalizes the declared mutation and writes the argument back.
    def f(x, acc):
        torch.ops.cdynamo_test.accumulate(x.cos(), acc)
        fresh = torch.zeros_like(x)
        accumulate(x, fresh)
        return acc * 2 + fresh

    x = torch.randn(4)
    want_acc = torch.ones(4)
    want = f(x, want_acc)
    be = torch._dynamo.testing.CompileCounterWithBackend("aot_eager")
    cf = cdynamo.compile(f, backend=be)
    for _ in range(2):  # the first call and a cache hit
        acc = torch.ones(4)
        torch.testing.assert_close(cf(x, acc), want)
        torch.testing.assert_close(acc, want_acc)
    assert be.frame_count == 1
    assert cdynamo.stats()["graph_break_reasons"] == []
