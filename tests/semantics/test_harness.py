"""Self-tests of the corpus harness's comparison: a broken comparison would make cases pass vacuously."""
from collections import OrderedDict, namedtuple

import pytest
import torch

from .harness import _aliasing, assert_same

P = namedtuple("P", "a b")


@pytest.mark.parametrize("expected,actual", [
    ((1, 2), [1, 2]),
    (torch.Size([2]), (2,)),
    (1, True),
    (1, 1.0),
    ({"a": 1, "b": 2}, {"b": 2, "a": 1}),
    (OrderedDict(a=1), {"a": 1}),
    (P(1, 2), (1, 2)),
    (torch.ones(2), torch.ones(2, dtype=torch.float64)),
    (torch.ones(2), torch.ones(3)),
    (torch.ones(2), torch.ones(2) + 1e-3),
    (torch.ones(2, requires_grad=True) * 1, torch.ones(2)),
    ([torch.ones(1), 3], [torch.ones(1), 4]),
    (float("nan"), 0.0),
    ("a", "b"),
])
def test_assert_same_detects_differences(expected, actual):
    with pytest.raises(AssertionError):
        assert_same(expected, actual)


@pytest.mark.parametrize("value", [
    (1, [2.0, "s"], {"k": torch.ones(2)}), torch.Size([1, 2]), float("nan"), P(torch.zeros(1), None),
])
def test_assert_same_accepts_equal_copies(value):
    import copy
    assert_same(value, copy.deepcopy(value))


def test_aliasing_sees_returned_arguments():
    x, y = torch.ones(1), torch.ones(1)
    assert _aliasing(x, [x], {}) != _aliasing(y, [x], {})
    assert _aliasing([x, 1], [x], {}) != _aliasing([y, 1], [x], {})
