"""A call of the operator module's operator functions (operator.add, operator.iadd, operator.or_,
operator.lt, operator.eq, operator.neg, ...) is the same operation as the operator itself: every kind of operand that `a + b` handles,
operator.add(a, b) handles the same way (a list extended in place by operator.iadd, a user
class's __add__ / __radd__, dict | dict, set ^ set, torch.Size + tuple), on the first call and
on the cache hit, in one graph."""
import operator
from collections import deque

import pytest
import torch

from .harness import Cases, check, tensors

case = Cases()
T4 = tensors((4,))


class Money:
    def __init__(self, n):
        self.n = n

    def __add__(self, other):
        return Money(self.n + (other.n if isinstance(other, Money) else other))

    def __radd__(self, other):
        return Money(other + self.n)


@case(T4)
def add_of_lists_and_tuples(x):
    return x + len(operator.add([1, 2], [3])), operator.add((1,), (2, 3)), operator.mul([0], 3)


@case(T4)
def iadd_extends_the_list_itself(x):
    xs = [x]
    alias = xs
    ys = operator.iadd(xs, [x + 1])
    return torch.stack(alias), ys is xs, len(xs)


@case(T4)
def iadd_of_a_deque_keeps_its_maxlen(x):
    d = deque([1, 2], maxlen=3)
    operator.iadd(d, [3, 4])
    return x + sum(d), list(d), d.maxlen


@case(T4)
def user_class_dunders(x):
    a = operator.add(Money(2), 3)
    b = operator.add(4, Money(1))
    return x * a.n + b.n


@case(T4)
def dict_or_and_ior(x):
    d = {"a": 1}
    e = operator.or_(d, {"b": 2})
    operator.ior(d, {"c": 3})
    return x + len(e), e, d


@case(T4)
def set_operators(x):
    s = {1, 2, 3}
    return x + len(operator.xor(s, {3, 4})), operator.and_(s, {2, 3}), operator.sub(s, {1})


@case(T4)
def size_plus_tuple(x):
    return x.view(operator.add(x.shape, (1,))), operator.add((1,), x.shape)


@case(T4)
def tensors_and_numbers(x):
    return operator.add(x, 1), operator.mul(2, x), operator.truediv(x, operator.add(x, 3))


@case(T4)
def mixed_types_raise_as_eagerly(x):
    try:
        operator.add([1], (2,))
    except TypeError as e:
        return x + 1, str(e)
    return x


class Version:
    def __init__(self, n):
        self.n = n

    def __lt__(self, other):
        return self.n < other.n

    def __eq__(self, other):
        return isinstance(other, Version) and self.n == other.n

    def __neg__(self):
        return Version(-self.n)

    __hash__ = None


@case(T4)
def comparisons_of_containers_and_user_objects(x):
    return (x + 1, operator.lt([1, 2], [1, 3]), operator.ge((2,), (1, 9)), operator.eq({1, 2}, {2, 1}),
            operator.lt(Version(1), Version(2)), operator.eq(Version(3), Version(3)), operator.ne(Version(3), 4))


@case(T4)
def comparisons_of_tensors(x):
    return operator.gt(x, 0), operator.eq(x, x), operator.le(x.sum(), 1.0)


@case(T4)
def unary_operators(x):
    return operator.neg(x), operator.invert(5), operator.pos(-2), operator.neg(Version(4)).n


@case(T4)
def comparison_that_python_refuses(x):
    try:
        operator.lt([1], (2,))
    except TypeError as e:
        return x + 1, str(e)
    return x


@pytest.mark.parametrize("fn,make_args,expect_graphs", case.params)
def test_operator_functions(fn, make_args, expect_graphs):
    check(fn, make_args, expect_graphs=expect_graphs)
