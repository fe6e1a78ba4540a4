"""Callables the tracer treats by rule, and torch's own markers that cdynamo honours.

The C++ tracer consults one dict ``{callable: rule}`` (handed over once with
``_C.set_call_rules``; edited here in place), so a new special callable needs no C++:

* ``GRAPH_BREAK``: the trace stops at the call, which becomes a graph break
  (``torch._dynamo.graph_break()``).
* ``IN_GRAPH``: the call is one node of the graph, run on fake tensors at trace time
  (``allow_in_graph``).
* ``CONSTANT_RESULT``: called at trace time on constant arguments; the result is baked in
  as a constant and not guarded (``assume_constant_result``). A function marked by
  ``torch.compiler.assume_constant_result`` (its ``_dynamo_marked_constant`` attribute) is
  treated the same without being registered here.

torch's disable wrappers (``torch.compiler.disable`` / ``torch._dynamo.disable``) share
one code object per kind; that code is marked in cdynamo's code cache, so a trace stops at
a call of any torch-disabled function and nothing under the recursive wrapper is traced.
"""
import types

from . import _C

GRAPH_BREAK = 1
IN_GRAPH = 2
CONSTANT_RESULT = 3

_rules = {}
_C.set_call_rules(_rules)
_torch_ready = False


def allow_in_graph(fn):
    """Record calls of ``fn`` as one graph node instead of tracing into it (the
    counterpart of ``torch._dynamo.allow_in_graph``): ``fn`` runs on fake tensors when the
    frame is traced and on real ones each time the graph runs."""
    if isinstance(fn, (list, tuple)):
        return [allow_in_graph(x) for x in fn]
    if not callable(fn):
        raise TypeError("allow_in_graph expects a callable")
    _rules[fn] = IN_GRAPH
    return fn


def disallow_in_graph(fn):
    """Undo ``allow_in_graph`` (and ``assume_constant_result``) for ``fn``."""
    _rules.pop(fn, None)
    return fn


def assume_constant_result(fn):
    """Treat ``fn``'s result as a constant when a trace calls it with constant arguments:
    it is called once, at trace time, and its result is not guarded (the counterpart of
    ``torch.compiler.assume_constant_result``)."""
    if not callable(fn):
        raise TypeError("assume_constant_result expects a callable")
    _rules[fn] = CONSTANT_RESULT
    return fn


def _probe():
    return None


def ensure_torch_rules():
    """Registers torch._dynamo's in-code markers (once; imports torch._dynamo)."""
    global _torch_ready
    if _torch_ready:
        return
    import torch._dynamo
    from torch._dynamo import decorators

    _rules[decorators.graph_break] = GRAPH_BREAK
    # Every recursive disable wrapper runs the same code (DisableContext's inner _fn).
    # (decorators.disable: the module attribute torch._dynamo.disable may have been replaced,
    # by a test shim routing it to cdynamo.disable; torch's own wrappers, TorchPatcher's
    # included, still run DisableContext's code)
    _C.mark_disabled(decorators.disable(_probe).__code__, True)
    # torch._disable_dynamo (torch's own decorator: Optimizer.zero_grad, state_dict, manual_seed,
    # ...) wraps each function in one shared `inner` that makes a torch._dynamo.disable wrapper
    # on first use and caches it on the function: a call of it stops the trace and the call
    # runs natively, nothing under it traced, as under torch._dynamo.
    import torch._compile
    _C.mark_disabled(torch._compile._disable_dynamo(_probe).__code__, True)
    nonrecursive = getattr(decorators, "_nonrecursive_disable_wrapper_code", None)
    if nonrecursive is not None:
        _C.mark_disabled(nonrecursive)
    # A function compiled by torch._dynamo itself (torch.compile while cdynamo is not
    # installed): everything under its wrapper is torch._dynamo's to intercept, so cdynamo's
    # context is off there and frames pass on to torch._dynamo's hook.
    from torch._dynamo import eval_frame as dynamo_eval_frame
    for const in dynamo_eval_frame._TorchDynamoContext.__call__.__code__.co_consts:
        if isinstance(const, types.CodeType) and const.co_name == "compile_wrapper":
            _C.mark_disabled(const, True)
    _torch_ready = True
