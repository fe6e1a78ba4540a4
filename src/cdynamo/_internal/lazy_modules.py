"""Lazy modules met in a trace (torch.nn.modules.lazy.LazyModuleMixin).

The tracer hands a lazy module that still has its initialising pre-hook to ``initialize``
with its arguments' fake values (csrc/trace/protocol/calls.cpp, initializeLazyModule); the hook's
work runs for real, outside the trace's fake mode, so the parameters it makes are real.
"""
import torch.utils._python_dispatch as _dispatch


def initialize(module, args, kwargs):
    with _dispatch._disable_current_modes():
        module._infer_parameters(module, args, kwargs)
