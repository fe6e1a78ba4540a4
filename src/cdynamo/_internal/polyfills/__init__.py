"""Python versions of C callables of the standard library and torch, traced in their place.

When the traced program calls one of the callables in ``POLYFILLS`` (``itertools.chain``,
``functools.reduce``, ``torch._foreach_lerp_``, ...), the tracer inlines the Python function
registered for it instead: the C function cannot be traced, its Python equivalent can, and
gives the same items in the same order, calling the program's functions the same number of
times. A polyfill that is a generator gives an iterator of the type of the original
(itertools.chain.from_iterable, ...): the tracer gives its result that type. A polyfill that
is a class (itertools.count, ...) is an iterator object the tracer steps one item at a time
(see the itertools module).

One module per original module, each polyfill registered next to its definition
(``@polyfill(original)``, registry.py):

* itertools: chain, islice, count, product, ... (their iterator classes, with ``rebuild``)
* functools: reduce; and ``lru_cache_holds``, the guard of an lru_cache hit (no polyfill)
* operator: methodcaller
* torch_ops: torch operators whose binding reads a 0-d tensor as a number (addcmul, _foreach_*)
* torch_fx: torch._C's helpers of torch.fx (_fx_map_aggregate, _fx_map_arg)
"""
from . import functools, itertools, operator, torch_fx, torch_ops
from .registry import POLYFILLS, polyfill

__all__ = ["POLYFILLS", "polyfill", "functools", "itertools", "operator", "torch_fx", "torch_ops"]
