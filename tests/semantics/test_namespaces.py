"""types.SimpleNamespace made in the trace (trace/kinds/namespace.cpp, Kind::Namespace): made from
keywords, read, written, probed with hasattr/getattr-with-default, seen through vars() and
__dict__, escaping the frame (one object however often it is returned), and its errors."""
import types

import pytest
import torch

from .harness import Cases, check, tensors

case = Cases()
T4 = tensors((4,))


@case(T4)
def namespace_fields_read_and_written(x):
    ns = types.SimpleNamespace(a=x + 1, b=2)
    ns.c = ns.a * ns.b
    ns.b = 3
    return ns.c + ns.b


@case(T4)
def namespace_returned_keeps_identity(x):
    ns = types.SimpleNamespace(y=x.sin())
    ns.z = x.cos()
    return ns, [ns], ns.y


@case(T4)
def namespace_vars_and_dict_are_its_attributes(x):
    ns = types.SimpleNamespace(a=x)
    vars(ns)["b"] = x * 2
    ns.__dict__["c"] = 1
    return ns.b + ns.c, sorted(vars(ns))


@case(T4)
def namespace_hasattr_and_getattr_default(x):
    ns = types.SimpleNamespace(a=x)
    out = x
    if hasattr(ns, "a"):
        out = out + 1
    if not hasattr(ns, "missing"):
        out = out * 2
    return out + getattr(ns, "missing", 3) + getattr(ns, "a", 0)


@case(T4)
def namespace_missing_attribute_raises_attribute_error(x):
    ns = types.SimpleNamespace(a=x)
    try:
        return ns.nope
    except AttributeError as e:
        return x - 1, str(e)


@case(T4)
def namespace_type_and_truth(x):
    ns = types.SimpleNamespace()
    if ns and isinstance(ns, types.SimpleNamespace) and type(ns) is types.SimpleNamespace:
        return x + 1
    return x


@case(T4, expect_graphs=None)
def namespace_positional_argument_is_a_type_error(x):
    return types.SimpleNamespace({"a": x})


@pytest.mark.parametrize("fn,make_args,expect_graphs", case.params)
def test_namespaces(fn, make_args, expect_graphs):
    check(fn, make_args, expect_graphs=expect_graphs, dynamo_reference=True)
