"""Tensor subclasses with __torch_function__ around a compiled graph.

In a trace an instance of a torch.Tensor subclass is its plain tensor (a graph node); what
torch functions do to it goes through its class's __torch_function__, traced
(csrc/trace/kinds/tensor_subclass.cpp). The graph itself works on plain tensors: it runs with
subclass dispatch off (as the default __torch_function__ runs the function it is given),
and the frame's subclass results are made instances of their class again after it
(`as_subclass`), as torch's default __torch_function__ converts them.
"""

from __future__ import annotations

import functools

import torch

_as_subclass = torch._C.TensorBase.as_subclass


def as_subclass(tensor, cls):
    """`tensor` viewed as an instance of `cls` (a new object sharing its data)."""
    with torch._C.DisableTorchFunctionSubclass():
        return _as_subclass(tensor, cls)


def plain(tensor):
    """A plain torch.Tensor sharing `tensor`'s data (the graph's example of a subclass input)."""
    return as_subclass(tensor, torch.Tensor)


def plain_call(compiled):
    """`compiled` (a backend's callable) run with subclass dispatch off: its inputs may be
    instances of tensor subclasses whose __torch_function__ the trace has already applied."""

    @functools.wraps(compiled)
    def run(*args):
        with torch._C.DisableTorchFunctionSubclass():
            return compiled(*args)

    return run


# ---- traceable wrapper subclasses (__tensor_flatten__ / __torch_dispatch__) ----------------
#
# An instance of one is a graph input as it is (torch's fake tensor converter makes a fake of
# the same class around fakes of its inner tensors); what its ops do is its __torch_dispatch__,
# run on those fakes while tracing and by the backend (AOT autograd flattens it) afterwards.
# What the compiled graph depends on besides the outer tensor's metadata is the names of its
# inner tensors and its flatten context: `flatten_check` is the guard on both.


def is_wrapper_subclass(t):
    return torch.utils._python_dispatch.is_traceable_wrapper_subclass(t)


def flatten_check(t):
    """(inner attribute names, predicate): the predicate says whether another instance
    flattens to the same names and an equal context (the class's __metadata_guard__ decides
    when it has one). Raises when the context cannot be kept (deepcopy fails)."""
    import copy

    attrs, ctx = t.__tensor_flatten__()
    saved_attrs = list(attrs)
    saved_ctx = copy.deepcopy(ctx)
    custom = getattr(type(t), "__metadata_guard__", None)

    def check(x):
        a, c = x.__tensor_flatten__()
        if list(a) != saved_attrs:
            return False
        if custom is not None:
            return bool(custom(saved_ctx, c))
        return bool(c == saved_ctx)

    return tuple(saved_attrs), check
