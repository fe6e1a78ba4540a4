"""Attributes of a function made in the trace (PyTorch's test_misc).

The trace knew a few attributes of a function it made (__name__, __qualname__, __doc__,
__dict__, what functools.wraps sets) and answered every other name with AttributeError,
including __code__, __defaults__, __globals__ that every function has: a program catching
AttributeError took the wrong branch (a wrong result), and cdynamo.disable(fn) (which reads
its wrapper's __code__) raised in the trace where it runs eagerly. Now __code__,
__defaults__ and __kwdefaults__ answer as the function has them; another attribute of the
function type stops the trace (graph break, eager's value); a name no function has is
still an AttributeError.
"""
import torch

from .harness import same_as_eager


def one():
    return (torch.randn(3),)


def test_code_and_defaults_of_a_function_made_in_the_trace():
    def fn(x):
        def inner(a, b=2, *, c=3):
            return a * b * c
        code = inner.__code__
        return inner(x), code.co_name, code.co_argcount, inner.__defaults__, inner.__kwdefaults__
    same_as_eager(fn, one, fullgraph=True)


def test_defaults_made_in_the_trace_are_its_values():
    def fn(x):
        def inner(a, b=x + 1):
            return a - b
        (b,) = inner.__defaults__
        return inner(x), b * 2
    same_as_eager(fn, one, fullgraph=True)


def test_function_type_attribute_is_no_attribute_error():
    # __globals__ and __call__ exist on every function: eagerly no AttributeError.
    def fn(x):
        def inner(a):
            return a
        seen = []
        for name in ("__globals__", "__call__", "no_such_name"):
            try:
                getattr(inner, name)
                seen.append(name)
            except AttributeError:
                seen.append("missing")
        return x + 1, seen
    same_as_eager(fn, one, captured=False)
