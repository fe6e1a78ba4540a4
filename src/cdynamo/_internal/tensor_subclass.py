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
