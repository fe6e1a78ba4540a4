"""hasattr() on tensors answers what the real tensor has (PyTorch's test_misc).

A tensor's attributes are its class's plus those set on the object itself (x.tag = ...).
The trace used to ask the fake tensor, whose class has attributes of its own (fake_mode,
constant, ...) and whose __dict__ is not the program's tensor's: hasattr(x, "tag") was
False for a tagged input, and nothing guarded it, so a later call with another tensor
reused that answer. Now the class is asked (the tensor check pins it), and an input's own
__dict__ is read and guarded (present: loaded; absent: a no-such-key check).
"""
import torch
import torch._dynamo
import torch._dynamo.testing

import cdynamo
import cdynamo.testing

from .harness import same_as_eager


def tagged(tag):
    x = torch.ones(3)
    if tag is not None:
        x.tag = tag
    return x


def branch_on_tag(x):
    if hasattr(x, "tag"):
        return x + 10
    return x - 10


def run_sequence(fn, inputs):
    """Eager, cdynamo and torch._dynamo over one sequence of inputs; graph counts."""
    eager = [fn(tagged(t)) for t in inputs]
    cdynamo.reset()
    cnt = cdynamo.testing.CompileCounter()
    cfn = cdynamo.compile(fn, backend=cnt)
    got = [cfn(tagged(t)) for t in inputs]
    for e, g in zip(eager, got):
        assert torch.equal(e, g)
    torch._dynamo.reset()
    dcnt = torch._dynamo.testing.CompileCounter()
    dfn = torch.compile(fn, backend=dcnt)
    for t in inputs:
        dfn(tagged(t))
    torch._dynamo.reset()
    return cnt.frame_count, dcnt.frame_count


def test_hasattr_reads_the_input_tensors_own_attribute():
    same_as_eager(branch_on_tag, lambda: (tagged(None),))
    same_as_eager(branch_on_tag, lambda: (tagged(1),))


def test_hasattr_on_tensor_input_is_guarded_both_ways():
    # absent then present then absent again: each answer is eager's, and the second
    # absent call reuses the first entry.
    ours, dynamo = run_sequence(branch_on_tag, [None, "a", None, "b"])
    assert ours == 2 and ours <= dynamo


def test_hasattr_sees_no_fake_tensor_attributes():
    def fn(x):
        y = x * 2
        flags = [hasattr(t, n) for t in (x, y) for n in ("fake_mode", "constant", "_mode_key")]
        return y, flags, hasattr(x, "shape"), hasattr(y, "add_"), hasattr(x, "__dict__")
    same_as_eager(fn, lambda: (torch.randn(2, 2),), fullgraph=True)


def test_hasattr_of_a_tensor_made_in_the_trace():
    def fn(x):
        y = x + 1
        return y if hasattr(y, "tag") else y * 3
    same_as_eager(fn, lambda: (tagged("t"),), fullgraph=True)
