"""An object's attributes and its __dict__ read as a dict are one state (objects.cpp
aliasedInstanceDict): a write through either view is seen through the other, in the trace
and after it, for objects from the program and for functions. These were wrong results:
`o.__dict__["k"] = v; return o.k` returned the old `o.k`, and a store into a real function's
__dict__ was lost."""
import pytest
import torch

from .harness import Cases, check, tensors

case = Cases()


class Box:
    pass


def boxed(**attrs):
    def make():
        b = Box()
        for k, v in attrs.items():
            setattr(b, k, v)
        return (b, torch.randn(4))
    return make


@case(boxed(k=1.0))
def dict_store_then_attribute_read(o, x):
    o.__dict__["k"] = x + 100
    return o.k


@case(boxed(k=1.0))
def dict_held_then_attribute_store(o, x):
    d = o.__dict__
    o.k = x + 5
    o.j = 2
    return d["k"] * d["j"], len(d)


@case(boxed(k=1.0))
def vars_store_then_attribute_read(o, x):
    vars(o)["k"] = x - 1
    return o.k * 2


@case(boxed(k=1.0))  # the part before the break has no tensor op: one graph
def dict_from_before_a_break_then_attribute_read(o, x):
    d = o.__dict__
    torch._dynamo.graph_break()  # the resume gets the dict and the object as two inputs
    d["k"] = x - 1
    return o.k * 2


@case(boxed(k=1.0))
def dict_store_then_hasattr(o, x):
    o.__dict__["fresh"] = 3
    return x + (1 if hasattr(o, "fresh") else 0) + o.fresh


@case(boxed(k=1.0))  # the part before the break has no tensor op: one graph
def attribute_store_then_dict_read(o, x):
    o.k = x + 7
    return o.__dict__["k"]


def helper():
    pass


def _reset():
    helper.__dict__.clear()
    helper.count = 1


def _snapshot():
    return dict(helper.__dict__)


def function_dict_store_then_attribute(x):
    helper.__dict__["count"] = 5
    helper.__dict__["other"] = x.sum()
    return x + helper.count


@pytest.mark.parametrize("fn,make_args,expect_graphs", case.params)
def test_instance_dicts(fn, make_args, expect_graphs):
    check(fn, make_args, expect_graphs=expect_graphs)


def test_function_dict_store_is_replayed_and_read_back():
    check(function_dict_store_then_attribute, tensors((4,)), world=(_reset, _snapshot))
