"""Builtins called in the trace, and math.* / operator.* on constants."""
import math
import operator

import pytest
import torch

from .harness import Cases, check, tensors

case = Cases()
T4 = tensors((4,))
T23 = tensors((2, 3))


class Obj:
    pass


class Base:
    pass


class Derived(Base):
    pass


@case(T4)
def len_of_list_tuple_str_dict(x):
    return x * (len([1, 2]) + len((1,)) + len("abc") + len({"a": 1}))


@case(T23)
def len_of_tensor(x):
    return x * len(x)


@case(T4)
def range_len_and_index(x):
    r = range(2, 10, 3)
    return x * len(r) + r[1] + r[-1]


@case(T4)
def enumerate_to_list(x):
    pairs = list(enumerate("ab"))
    return x + len(pairs), pairs


@case(T4)
def zip_to_list(x):
    z = list(zip([1, 2, 3], "ab"))
    return x * len(z), z


@case(T4)
def map_builtin(x):
    sq = list(map(lambda v: v * v, [1, 2, 3]))
    return x + sum(sq), sq


@case(T4)
def map_over_tensors(x):
    outs = list(map(torch.relu, [x, -x]))
    return outs


@case(T4)
def filter_builtin(x):
    evens = list(filter(lambda v: v % 2 == 0, range(7)))
    return x * len(evens), evens


@case(T4)
def sorted_builtin_with_key_reverse(x):
    words = sorted(["ccc", "a", "bb"], key=len, reverse=True)
    return x * len(words[0]), words


@case(T4)
def reversed_builtin(x):
    r = list(reversed((1, 2, 3)))
    return x * r[0], r


@case(T4)
def min_max_of_constants(x):
    return x * max(1, 5, 3) + min([4, 2, 8]) + max("ab", "b", key=len).__len__()


@case(T4)
def min_max_of_shapes(x):
    return x.reshape(2, 2) * max(x.shape[0], 3)


@case(T4)
def sum_builtin_with_start(x):
    return x + sum([1, 2, 3], 10)


@case(lambda: ([torch.randn(3), torch.randn(3)],))
def sum_of_tensor_list(xs):
    return sum(xs)


@case(T4)
def abs_builtin(x):
    return abs(x) + abs(-3)


@case(T4)
def all_any_builtins(x):
    a = all([True, 1, "s"])
    b = any([0, "", None])
    return x + a * 2 + b


@case(T4)
def isinstance_checks(x):
    y = x
    if isinstance(x, torch.Tensor):
        y = y + 1
    if isinstance(3, (int, float)):
        y = y * 2
    if not isinstance("s", int):
        y = y - 1
    return y


@case(T4)
def isinstance_user_class(x):
    d = Derived()
    if isinstance(d, Base) and not isinstance(d, int):
        return x + 1
    return x


@case(T4)
def issubclass_check(x):
    if issubclass(Derived, Base) and not issubclass(Base, Derived):
        return x * 2
    return x


@case(T4)
def type_builtin_comparisons(x):
    if type(3) is int and type("s") == str:
        return x + 1
    return x


@case(T4)
def callable_builtin(x):
    if callable(torch.sin) and not callable(3):
        return torch.sin(x)
    return x


@case(T4)
def getattr_hasattr_on_new_object(x):
    o = Obj()
    o.scale = 3
    if hasattr(o, "scale") and not hasattr(o, "missing"):
        return x * getattr(o, "scale") + getattr(o, "missing", 1)
    return x


@case(T4)
def setattr_on_new_object(x):
    o = Obj()
    setattr(o, "value", x * 2)
    return o.value


@case(T4)
def getattr_on_tensor(x):
    return getattr(x, "relu")()


@case(T4)
def int_float_bool_constructors(x):
    return x * int("3") + float(2) + int(3.9) + bool(5)


@case(T4)
def str_constructor(x):
    s = str(12) + str(1.5)
    return x * len(s), s


@case(T4)
def tuple_list_dict_set_constructors(x):
    t = tuple([1, 2])
    l = list("ab")  # noqa: E741
    d = dict(a=1, b=2)
    d2 = dict([("c", 3)])
    s = set([1, 1, 2])
    return x * len(s), t, l, d, d2


@case(T4)
def round_divmod_pow(x):
    q, r = divmod(17, 5)
    return x * round(2.6) + q + r + pow(2, 3) + round(3.14159, 2)


@case(T4)
def math_functions_on_constants(x):
    c = math.sqrt(16) + math.floor(2.7) + math.ceil(2.1) + math.log(math.e) + math.pi
    return x * c


@case(T4)
def math_on_shape(x):
    n = math.prod(x.shape) + math.isqrt(9)
    return x * n


@case(T4)
def math_isclose_inf(x):
    if math.isclose(0.1 + 0.2, 0.3) and math.isinf(math.inf) and not math.isnan(1.0):
        return x + 1
    return x


@case(T4)
def operator_module_on_constants(x):
    k = operator.add(2, 3) * operator.mul(2, 2) - operator.sub(5, 1)
    return operator.mul(x, k)


@case(T4)
def operator_getitem_itemgetter(x):
    g = operator.itemgetter(1)
    return x * g([5, 6, 7]) + operator.getitem((1, 2), 0)


@case(T4)
def operator_attrgetter_on_tensor(x):
    shape = operator.attrgetter("shape")(x)
    return x * shape[0]


@case(T4)
def operator_on_tensors(x):
    return operator.neg(operator.add(x, x))


@case(T4)
def id_equality_of_same_object(x):
    y = x
    if id(y) == id(x):
        return x + 1
    return x


@case(T4)
def hash_of_constants(x):
    if hash(1) == hash(1.0):
        return x + 1
    return x


@case(T4)
def chr_ord(x):
    return x * (ord("a") - 96) + len(chr(98))


@case(T4)
def iter_over_range_builtin(x):
    it = iter(range(3))
    return x + next(it) + next(it)


@case(T4)
def slice_builtin(x):
    s = slice(1, 3)
    return x[s]


@case(T4)
def bool_of_containers(x):
    if bool([]) or bool({}) or bool(""):
        return x
    return x * 2


@case(T4)
def float_special_values(x):
    return torch.clamp(x, min=-float("inf"), max=float("inf"))


@case(T4)
def min_max_with_default(x):
    return x * max([], default=4) + min((), default=1)


@case(T4)
def zip_strict_unequal(x):
    return x * len(list(zip([1, 2, 3], [4, 5])))


@case(T4)
def any_on_list_comprehension(x):
    if any([v > 2 for v in (1, 2, 3)]):
        return x + 1
    return x


@case(lambda: (3, 4), expect_graphs=0)
def no_tensor_arithmetic_builtins(a, b):
    return max(a, b), min(a, b), abs(a - b), divmod(b, a)


@case(lambda: ("hello",), expect_graphs=0)
def no_tensor_string_builtins(s):
    return len(s), sorted(s), list(reversed(s))


# ----------------------------------------------------------------------------- lazy consumption
# zip/enumerate/map/filter take items from an iterator only as their own items are taken.

@case(T4)
def zip_of_iterator_then_break_leaves_the_rest(x):
    it = iter([x, x + 1, x + 2])
    for a, b in zip(it, [1, 2, 3]):
        x = x + a * b
        break
    rest = list(it)
    return x, len(rest), rest[0]


@case(T4)
def zip_longer_iterator_first_loses_one_item(x):
    it = iter([1, 2, 3, 4])
    pairs = list(zip(it, [10, 20]))
    return x * len(pairs) + next(it)  # zip read 1, 2, then 3 before [10, 20] ran out: next is 4


@case(T4)
def zip_shorter_list_first_spares_the_iterator(x):
    it = iter([1, 2, 3, 4])
    pairs = list(zip([10, 20], it))
    return x * len(pairs) + next(it)  # [10, 20] ran out first: it still has 3


@case(T4)
def enumerate_of_iterator_partially(x):
    it = iter([x, x * 2, x * 3])
    for i, t in enumerate(it):
        if i == 1:
            break
        x = x + t
    return x + next(it)


@case(T4)
def map_and_filter_of_iterators_partially(x):
    it = iter([1, 2, 3, 4, 5, 6])
    first = next(map(lambda v: v * 10, it))
    evens = filter(lambda v: v % 2 == 0, it)
    second = next(evens)
    return x * first + second + len(list(it))


@case(T4)
def enumerate_of_zip_of_iterators(x):
    a, b = iter([1, 2, 3]), iter([4, 5])
    total = 0
    for i, (p, q) in enumerate(zip(a, b)):
        total += i * p * q
    return x * total + next(a, -1) + next(b, -1)


@pytest.mark.parametrize("fn,make_args,expect_graphs", case.params)
def test_builtins(fn, make_args, expect_graphs):
    check(fn, make_args, expect_graphs=expect_graphs)
