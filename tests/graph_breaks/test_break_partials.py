"""functools.partial objects alive at a graph break (locals, stack, containers, objects).

A partial made in the trace is rebuilt for the resume code (and for the caller when
returned) by calling functools.partial again. functools.partial(p, ...) with p a partial
flattens: the new partial holds p's function and arguments, not p. So the object rebuilt
for a partial that two others were made from is kept by nothing but the rebuild's memo;
the memo must own it (a borrowed slot read after it was freed handed the resume code
whatever object reused the memory: "the first argument must be callable", or worse).
"""
import functools

import pytest
import torch

import cdynamo
import cdynamo.testing

from .harness import BRANCH, PRINT, Cases, check_breaks, negative, positive, tensors

cases = Cases()
T4 = tensors((4,))


def scale_shift(a, b, c=1.0):
    return a * b + c


class Scaler:
    def __init__(self, k):
        self.k = k

    def apply(self, x, bias=0.0):
        return x * self.k + bias


class Holder:
    pass


@cases(T4, reason=PRINT)
def nested_partial_of_torch_function_alive_at_print(x):
    p = functools.partial(functools.partial(torch.add, other=1), alpha=2)
    print("break")
    return p(x)


@cases(T4, reason=PRINT)
def two_partials_of_one_dead_partial(x):
    inner = functools.partial(scale_shift, c=2.0)
    p1 = functools.partial(inner, x)
    p2 = functools.partial(inner, x + 1)
    print("break")
    return p1(3.0) + p2(4.0)


@cases(T4, reason=PRINT)
def two_partials_of_one_live_partial(x):
    inner = functools.partial(scale_shift, c=2.0)
    p1 = functools.partial(inner, x)
    p2 = functools.partial(inner, b=5.0)
    print("break")
    return inner(x, 2.0) + p1(3.0) + p2(x)


@cases([positive, negative, positive], reason=BRANCH)
def two_partials_of_one_partial_at_branch(x):
    inner = functools.partial(torch.add, alpha=2)
    p1 = functools.partial(inner, x)
    p2 = functools.partial(inner, other=x * 3)
    if x.sum() > 0:
        return p1(x), p2(x)
    return p2(x), p1(x)


@cases(T4, reason=PRINT)
def partial_with_keywords_only(x):
    p = functools.partial(scale_shift, b=3.0, c=-1.0)
    print("break")
    return p(x), p(x, c=0.5)


@cases(T4, reason=PRINT)
def partial_of_bound_method_of_new_object(x):
    s = Scaler(3.0)
    p = functools.partial(s.apply, bias=1.0)
    q = functools.partial(p, x)
    print("break")
    s.k = 5.0
    return p(x), q()


@cases(T4, reason=PRINT)
def partial_of_closure_and_lambda(x):
    k = 2.0

    def closure(a, b):
        return a * k + b

    p = functools.partial(closure, b=1.0)
    q = functools.partial(lambda a, b: a - b + k, b=3.0)
    r = functools.partial(q, x)
    print("break")
    return p(x), q(x), r()


@cases(T4, reason=PRINT)
def partials_in_list_and_dict(x):
    inner = functools.partial(scale_shift, c=0.5)
    ps = [functools.partial(inner, x), {"mul": functools.partial(torch.mul, other=2), "inner": inner}]
    ps.append(functools.partial(inner, b=2.0))
    print("break")
    return ps[0](2.0) + ps[1]["mul"](x) + ps[1]["inner"](x, 1.0) + ps[2](x)


@cases(T4, reason=PRINT)
def partials_on_object_attributes(x):
    h = Holder()
    h.base = functools.partial(scale_shift, b=2.0)
    h.first = functools.partial(h.base, c=1.0)
    h.second = functools.partial(h.base, c=-1.0)
    print("break")
    return h.first(x) + h.second(x), h.base(x)


@cases(T4, reason=PRINT)
def partials_returned_after_break(x):
    inner = functools.partial(scale_shift, c=2.0)
    p1 = functools.partial(inner, x)
    p2 = functools.partial(inner, x * 2)
    print("break")
    return p1, p2, p1(1.0) + p2(1.0)


@pytest.mark.parametrize("fn,make_args,kw", cases.params)
def test_break_partials(fn, make_args, kw):
    check_breaks(fn, make_args, **kw)


def _parts(p):
    return p.func, p.args, dict(p.keywords)


def test_returned_partials_of_one_partial_are_rebuilt_flat_as_eagerly():
    """Without a break: two partials made from one (flattened eagerly) are handed back with
    the function, arguments and keywords eager gives, on the first call and on a cache hit."""
    def fn(x):
        inner = functools.partial(scale_shift, c=2.0)
        return functools.partial(inner, x), functools.partial(inner, x + 1), inner

    cnt = cdynamo.testing.CompileCounter()
    cfn = cdynamo.compile(fn, backend=cnt)
    x = torch.ones(3)
    want = fn(x)
    for call in ("first call", "cache hit"):
        got = cfn(x)
        assert len(got) == len(want)
        for w, g in zip(want, got):
            wf, wa, wk = _parts(w)
            gf, ga, gk = _parts(g)
            assert gf is wf, call
            assert len(ga) == len(wa) and list(gk) == list(wk), call
            for a, b in zip(wa, ga):
                assert a is b or torch.equal(a, b), call
            assert gk == wk, call
        assert got[0].args[0] is x, call  # the argument itself, as eagerly
        torch.testing.assert_close(got[1](2.0), want[1](2.0))
    assert cnt.frame_count == 1


def test_factory_with_requires_grad_in_nested_partial_breaks_and_resumes():
    """PyTorch's test_rand_tensor_partial in its own words: a factory called with
    requires_grad=True through partials of a partial breaks the graph (a new autograd leaf);
    the partials alive at the break are rebuilt for the resume code."""
    def fn(x):
        make = functools.partial(torch.ones, dtype=torch.float64, requires_grad=True)
        make_a = functools.partial(make, (2, 3))
        make_b = functools.partial(make, (2, 3))
        a = make_a()
        b = make_b()
        return a + b * x, a, b

    cnt = cdynamo.testing.CompileCounter()
    cfn = cdynamo.compile(fn, backend=cnt)
    x = torch.full((3,), 2.0, dtype=torch.float64)
    want = fn(x)
    for call in ("first call", "cache hit"):
        got = cfn(x)
        for w, g in zip(want, got):
            assert (g.dtype, g.requires_grad, g.is_leaf) == (w.dtype, w.requires_grad, w.is_leaf), call
            torch.testing.assert_close(g, w)
    assert any("requires_grad=True" in r["reason"] for r in cdynamo.stats()["graph_break_reasons"])
    assert cnt.frame_count == 1  # only the sum and product: the factories ran outside the graph
