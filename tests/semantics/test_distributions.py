"""torch.distributions inside a compiled function: a distribution is a Python object holding
tensors (its constructor, its constraints and its lazy_property attributes traced like user
code, as torch._dynamo inlines the module), its log_prob/entropy tensor ops in the one graph.
Checking the arguments against the support (validate_args=True) reads a tensor's value,
which breaks the graph there under both compilers. Each case: eager vs cdynamo on the first
call and a cache hit; graph and op counts equal to torch._dynamo's."""
import pytest
import torch
import torch._dynamo
import torch._dynamo.testing

import cdynamo
import cdynamo.testing

from .harness import Cases, check

case = Cases()


def _normal_args():
    return torch.randn(4), torch.randn(4), torch.rand(4) + 0.5


def _categorical_args():
    return torch.tensor([0, 2, 1]), torch.randn(3, 4)


@case(_normal_args)
def normal_log_prob_unvalidated(x, loc, scale):
    d = torch.distributions.Normal(loc, scale, validate_args=False)
    return d.log_prob(x), d.mean, d.stddev


@case(_normal_args)
def normal_entropy_and_cdf(x, loc, scale):
    d = torch.distributions.Normal(loc, scale, validate_args=False)
    return d.entropy() + d.cdf(x)


@case(_categorical_args)
def categorical_from_logits(x, logits):
    d = torch.distributions.Categorical(logits=logits, validate_args=False)
    return d.log_prob(x), d.entropy(), d.probs


@case(_categorical_args)
def categorical_from_probs(x, logits):
    d = torch.distributions.Categorical(probs=logits.softmax(-1), validate_args=False)
    return d.log_prob(x) + d.logits.sum(-1)


@pytest.mark.parametrize("fn,make_args,expect_graphs", case.params)
def test_distribution(fn, make_args, expect_graphs):
    check(fn, make_args, expect_graphs=expect_graphs)


def _counts(compile_fn, fn, args):
    cnt = torch._dynamo.testing.CompileCounter()
    compile_fn(fn, backend=cnt)(*args)
    return cnt.frame_count, cnt.op_count


@pytest.mark.parametrize("fn", [p.values[0] for p in case.params], ids=[p.id for p in case.params])
def test_distribution_counts_match_dynamo(fn):
    args = next(p.values[1] for p in case.params if p.values[0] is fn)()
    cdynamo.reset()
    mine = _counts(cdynamo.compile, fn, args)
    torch._dynamo.reset()
    theirs = _counts(torch.compile, fn, args)
    torch._dynamo.reset()
    assert mine == theirs


def test_validated_arguments_break_where_dynamo_does():
    def f(x, loc, scale):
        return torch.distributions.Normal(loc, scale, validate_args=True).log_prob(x)

    args = _normal_args()
    want = f(*args)
    cf = cdynamo.compile(f, backend=cdynamo.testing.CompileCounter())
    for _ in range(2):
        torch.testing.assert_close(cf(*args), want)
    bad = (args[0], args[1], -args[2])  # a negative scale: eager raises ValueError
    with pytest.raises(ValueError):
        f(*bad)
    with pytest.raises(ValueError):
        cf(*bad)
    torch._dynamo.reset()
    dcnt = torch._dynamo.testing.CompileCounter()
    torch.compile(f, backend=dcnt)(*args)
    torch._dynamo.reset()
    cdynamo.reset()
    cnt = cdynamo.testing.CompileCounter()
    cdynamo.compile(f, backend=cnt)(*args)
    assert cnt.frame_count <= dcnt.frame_count
