"""Special methods of user objects that raise, caught inside the traced frame; attributes
of values that have none to model.

Before the tracer's one failure protocol (trace/engine/result.h), a traced special method that
raised came back as a null value that some callers took for a result: `in` and `for` over
such an object crashed the interpreter. Each case raises in the method and catches the
exception in the compiled function; the frame is captured whole. Before typed values
(trace/values/value.h), an attribute of a method, an iterator or a slice was read as a
function's attribute from a payload those kinds do not have (a crash): now such a read
stops the trace there (a graph break) and runs natively."""
import pytest
import torch

from .harness import Cases, check, tensors

case = Cases()
T4 = tensors((4,))


class Raising:
    def __contains__(self, item):
        raise ValueError("contains")

    def __iter__(self):
        raise ValueError("iter")

    def __len__(self):
        raise ValueError("len")

    def __getitem__(self, key):
        raise KeyError(key)

    def __add__(self, other):
        raise ArithmeticError("add")

    def __eq__(self, other):
        raise LookupError("eq")

    __hash__ = None


class RaisingBool:
    def __bool__(self):
        raise ValueError("bool")


class RaisingEnter:
    def __enter__(self):
        raise RuntimeError("enter")

    def __exit__(self, *exc):
        return False


@case(T4)
def contains_raises(x):
    try:
        return 1 in Raising(), x
    except ValueError:
        return "caught", x + 1


@case(T4)
def iter_raises(x):
    try:
        for _ in Raising():
            x = x * 2
    except ValueError:
        x = x + 1
    return x


@case(T4)
def len_raises(x):
    try:
        return len(Raising()), x
    except ValueError:
        return "caught", x + 1


@case(T4)
def getitem_raises(x):
    try:
        return Raising()["k"], x
    except KeyError:
        return "caught", x + 1


@case(T4)
def add_raises(x):
    try:
        return Raising() + 1, x
    except ArithmeticError:
        return "caught", x + 1


@case(T4)
def eq_raises(x):
    try:
        return Raising() == 1, x
    except LookupError:
        return "caught", x + 1


@case(T4)
def bool_raises(x):
    try:
        if RaisingBool():
            x = x * 2
    except ValueError:
        x = x + 1
    return x


@case(T4)
def enter_raises(x):
    try:
        with RaisingEnter():
            x = x * 2
    except RuntimeError:
        x = x + 1
    return x


@case(T4, expect_graphs=None)
def attribute_of_a_method(x):
    m = x.relu
    return m.__name__, x + 1


@case(T4, expect_graphs=None)
def attribute_of_an_iterator(x):
    it = iter([x, x])
    n = it.__length_hint__()
    return n, next(it) + 1


@pytest.mark.parametrize("fn,make_args,expect_graphs", case.params)
def test_failure_protocol(fn, make_args, expect_graphs):
    check(fn, make_args, expect_graphs=expect_graphs)
