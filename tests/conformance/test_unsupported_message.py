"""With fullgraph=True the Unsupported error names where the trace stopped and shows that
line's source text, as Python's tracebacks (and torch._dynamo's "from user code") do, so a
user sees which statement stopped it (docs/conformance.md: contextmanager). Here: a class
called without its required argument inside a contextlib.contextmanager block, and an
attribute a tensor does not have (eagerly a TypeError and an AttributeError; torch._dynamo
raises its Unsupported with the line for the first).
"""
import contextlib

import pytest
import torch
import torch._dynamo

import cdynamo


class NeedsArgument:
    def __init__(self, cls):
        self.cls = cls


@contextlib.contextmanager
def block():
    yield


def bad_call():
    with block():
        made = NeedsArgument()
        return made


def bad_attribute(x):
    y = x * 2
    return y.attribute_no_tensor_has


@pytest.mark.parametrize("fn, args, line", [
    (bad_call, (), "made = NeedsArgument()"),
    (bad_attribute, (torch.ones(2),), "return y.attribute_no_tensor_has"),
])
def test_fullgraph_error_shows_the_source_line(fn, args, line):
    with pytest.raises(TypeError if fn is bad_call else AttributeError):
        fn(*args)
    cdynamo.reset()
    with pytest.raises(cdynamo.Unsupported) as err:
        cdynamo.compile(fn, backend="eager", fullgraph=True)(*args)
    text = str(err.value)
    assert f"in {fn.__name__}\n    {line}\n" in text, text
    if fn is bad_call:
        torch._dynamo.reset()
        with pytest.raises(torch._dynamo.exc.Unsupported, match=line.replace("(", r"\(").replace(")", r"\)")):
            torch.compile(fn, backend="eager", fullgraph=True)(*args)
        torch._dynamo.reset()


def test_source_line_of_a_function_without_source_is_left_out():
    ns = {}
    exec(compile("def f(x):\n    return x.attribute_no_tensor_has\n", "<no file>", "exec"), ns)  # noqa: S102
    cdynamo.reset()
    with pytest.raises(cdynamo.Unsupported) as err:
        cdynamo.compile(ns["f"], backend="eager", fullgraph=True)(torch.ones(1))
    assert "<no file>:2 in f\n  inlined call stack:" in str(err.value), str(err.value)
