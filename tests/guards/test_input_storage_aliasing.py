"""The storage guard: a graph that mutates a tensor input runs only while its tensor inputs
share storages as they did when it was traced.

A backend that functionalizes the graph (AOT autograd, inductor) computes with the
aliasing it was traced with: traced with two separate tensors, `a.add_(b); return c + 1`
reads c before the mutation, so passing one tensor as both a and c gave c + 1 of the old
value (a wrong result under aot_eager). torch._dynamo guards the same-object case (its
aliasing guard); a view of one input passed as another it misses, cdynamo checks storages.
"""
import pytest
import torch
from torch import nn

import cdynamo
from torch._dynamo.backends.registry import lookup_backend


class Counting:
    """A backend (aot_eager by default) that counts the graphs it is given."""

    def __init__(self, inner="aot_eager"):
        self.inner = lookup_backend(inner)
        self.frame_count = 0

    def __call__(self, gm, example_inputs):
        self.frame_count += 1
        return self.inner(gm, example_inputs)


def mutate_a_read_c(a, b, c):
    a.add_(b)
    return c + 1


def run_case(fn, make_args, backend):
    """Eager and compiled on fresh copies of the same arguments: result and argument states."""
    eager_args, compiled_args = make_args(), make_args()
    expected = fn(*eager_args)
    got = backend(*compiled_args)
    torch.testing.assert_close(got, expected)
    for g, e in zip(compiled_args, eager_args):
        if isinstance(e, torch.Tensor):
            torch.testing.assert_close(g, e)


def separate():
    return torch.zeros(3), torch.ones(3), torch.zeros(3)


def one_tensor_twice():
    x = torch.zeros(3)
    return x, torch.ones(3), x


def view_as_other():
    x = torch.zeros(3)
    return x, torch.ones(3), x[:]


def reason():
    return cdynamo.stats()["recompile_reasons"][-1]["reason"]


@pytest.mark.parametrize("backend_name", ["aot_eager"])
def test_one_tensor_passed_as_two_inputs_recompiles(backend_name):
    cnt = Counting(backend_name)
    cf = cdynamo.compile(mutate_a_read_c, backend=cnt)
    run_case(mutate_a_read_c, separate, cf)
    run_case(mutate_a_read_c, separate, cf)  # a hit
    assert cnt.frame_count == 1
    run_case(mutate_a_read_c, one_tensor_twice, cf)  # eager: c sees the add (2, not 1)
    assert cnt.frame_count == 2
    assert "L['a'] (mutated by the graph) and L['c']" in reason(), reason()
    run_case(mutate_a_read_c, one_tensor_twice, cf)  # hits the entry traced aliased
    run_case(mutate_a_read_c, separate, cf)  # and the first entry still serves separate ones
    assert cnt.frame_count == 2
    # torch._dynamo also recompiles here (its aliasing guard): no more compiles than it.
    ref = torch._dynamo.testing.CompileCounterWithBackend(backend_name)
    opt = torch.compile(mutate_a_read_c, backend=ref)
    for make in (separate, separate, one_tensor_twice, one_tensor_twice, separate):
        opt(*make())
    assert cnt.frame_count <= ref.frame_count
    torch._dynamo.reset()


def test_a_view_of_one_input_passed_as_another_recompiles():
    # Different objects, one storage: torch._dynamo's identity guard passes and its
    # aot_eager result is c + 1 of the old value; cdynamo recompiles and matches eager.
    cnt = Counting()
    cf = cdynamo.compile(mutate_a_read_c, backend=cnt)
    run_case(mutate_a_read_c, separate, cf)
    run_case(mutate_a_read_c, view_as_other, cf)
    assert cnt.frame_count == 2
    assert "had separate storages at trace time, now they share one" in reason(), reason()
    run_case(mutate_a_read_c, view_as_other, cf)
    assert cnt.frame_count == 2


def test_traced_aliased_then_called_with_separate_tensors_recompiles():
    cnt = Counting()
    cf = cdynamo.compile(mutate_a_read_c, backend=cnt)
    run_case(mutate_a_read_c, view_as_other, cf)
    run_case(mutate_a_read_c, separate, cf)
    assert cnt.frame_count == 2
    assert "shared a storage at trace time, now they do not" in reason(), reason()


def test_mutation_through_a_view_of_an_input_counts():
    def fn(a, c):
        a[1:].mul_(3)
        return c * 2

    cnt = Counting()
    cf = cdynamo.compile(fn, backend=cnt)
    run_case(fn, lambda: (torch.ones(4), torch.ones(4)), cf)

    def aliased():
        x = torch.ones(4)
        return x, x

    run_case(fn, aliased, cf)
    assert cnt.frame_count == 2


def test_a_mutated_global_and_an_argument():
    g1, g2 = torch.ones(3), torch.zeros(3)

    def fn(a):
        a.add_(g1)
        return g2 + 1

    cnt = Counting()
    cf = cdynamo.compile(fn, backend=cnt)
    torch.testing.assert_close(cf(torch.zeros(3)), torch.ones(3))
    # a is g2 itself: eager's g2 + 1 sees the add, 2.
    torch.testing.assert_close(cf(g2), torch.full((3,), 2.0))
    assert cnt.frame_count == 2


def test_no_guard_without_a_mutation():
    # Aliasing cannot change what a graph without input mutations computes: one tensor
    # passed twice still hits the entry traced with two.
    def fn(a, b):
        return a * 2 + b

    cnt = Counting()
    cf = cdynamo.compile(fn, backend=cnt)
    x = torch.randn(3)
    torch.testing.assert_close(cf(torch.randn(3), torch.randn(3)).shape, x.shape)
    torch.testing.assert_close(cf(x, x), x * 3)
    assert cnt.frame_count == 1


def test_batchnorm_training_hits():
    # The running statistics are mutated buffers: the guard covers them and the input,
    # leaves the read-only parameters out, and every later call hits.
    torch.manual_seed(0)
    eager_bn, bn = nn.BatchNorm1d(4), nn.BatchNorm1d(4)
    bn.load_state_dict(eager_bn.state_dict())
    cnt = Counting()
    cm = cdynamo.compile(bn, backend=cnt)
    for _ in range(4):
        x = torch.randn(8, 4)
        torch.testing.assert_close(cm(x), eager_bn(x))
    torch.testing.assert_close(bn.running_mean, eager_bn.running_mean)
    torch.testing.assert_close(bn.running_var, eager_bn.running_var)
    assert bn.num_batches_tracked.item() == 4
    assert cnt.frame_count == 1


@pytest.mark.parametrize("n_mutated", [2, 40])
def test_many_tensor_inputs(n_mutated):
    # 40 tensor inputs (past the 32 a guard run keeps on its stack; with 40 mutated, past the
    # pairwise bound too: the sorted check). Separate tensors hit; one storage passed as a
    # mutated input and another recompiles and matches eager; two read-only inputs sharing a
    # storage do not matter to a graph that only mutates others.
    n = 40

    def fn(ts):
        a0, a1, a2, a3, a4, a5, a6, a7, a8, a9, a10, a11, a12, a13, a14, a15, a16, a17, a18, a19, \
            a20, a21, a22, a23, a24, a25, a26, a27, a28, a29, a30, a31, a32, a33, a34, a35, a36, a37, \
            a38, a39 = ts
        args = (a0, a1, a2, a3, a4, a5, a6, a7, a8, a9, a10, a11, a12, a13, a14, a15, a16, a17, a18, a19,
                a20, a21, a22, a23, a24, a25, a26, a27, a28, a29, a30, a31, a32, a33, a34, a35, a36, a37,
                a38, a39)
        for i in range(n_mutated):
            args[i].add_(1)
        total = args[0] * 0
        for t in args:
            total = total + t
        return total

    def separate():
        return [torch.full((3,), float(i)) for i in range(n)]

    def aliased_mutated():  # input 39 is a view of input 0 (mutated)
        ts = separate()
        ts[39] = ts[0][:]
        return ts

    def aliased_read_only():  # inputs 38 and 39 share a storage, neither mutated (n_mutated 2)
        ts = separate()
        ts[39] = ts[38].view(3)
        return ts

    def check(make, cf):
        e, c = make(), make()
        torch.testing.assert_close(cf(c), fn(e))
        for g, x in zip(c, e):
            torch.testing.assert_close(g, x)

    cnt = Counting()
    cf = cdynamo.compile(fn, backend=cnt)
    check(separate, cf)
    check(separate, cf)  # a hit
    assert cnt.frame_count == 1
    check(aliased_mutated, cf)
    assert cnt.frame_count == 2
    assert "L['ts'][0] (mutated by the graph)" in reason() or "L['ts'][39]" in reason(), reason()
    check(aliased_mutated, cf)  # the entry traced aliased
    check(separate, cf)
    assert cnt.frame_count == 2
    if n_mutated == 2:
        check(aliased_read_only, cf)
        assert cnt.frame_count == 2
