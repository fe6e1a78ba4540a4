"""Internal errors that PyTorch's TorchDynamo tests found: the outcome is right (the frame runs
natively), but only because cdynamo failed on code it should capture, for an internal reason
(docs/conformance.md). Strict xfail with the diagnosis; same_as_eager asserts the capture."""
import pytest
import torch

from .harness import same_as_eager


def internal(reason):
    return pytest.mark.xfail(strict=True, raises=AssertionError, reason=reason)


# Fixed: the in-place operator of a number is its plain operator (operators.cpp recordedOperator).
def test_augmented_assignment_to_a_number():
    def fn(x):
        n = 1
        n += x
        return n * 2
    same_as_eager(fn, lambda: (torch.ones(3),))


# Fixed (r10: set membership compares tensors by identity, constants by value).
def test_constant_in_a_set_holding_a_tensor():
    def fn(x):
        x.add_(1)
        s = set([x])
        return x + 1, 1 in s
    same_as_eager(fn, lambda: (torch.ones(1),))
