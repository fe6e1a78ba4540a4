"""The fake result of a higher-order op that runs its body once, made from the body's outputs.

A higher-order op such as checkpoint's tag_activation_checkpoint or wrap runs its body once
and returns exactly what the body returned. The tracer has just speculated the body over the
trace's fake mode, so the body's output fakes already say what the op returns: running the
op on fakes again (torch's fake implementation interprets the body's graph node by node)
would compute the same metadata a second time, at the cost of the whole body's fake
dispatch, which dominated the tracing of checkpointed models.

``fresh_like`` makes new fakes with the outputs' metadata instead, or returns None where the
outputs' relations to other tensors matter beyond their metadata (then the op is run on
fakes as any other call):
  * an output that is a view (it may alias one of the body's inputs, and an in-place op on
    the op's result must then be seen on that input),
  * the same tensor returned twice (the two results are one object in eager),
  * sizes with unbacked symbols (running the op binds fresh ones of its own).
"""
import torch
from torch.fx.experimental.symbolic_shapes import free_unbacked_symbols


def fresh_like(fakes):
    seen = set()
    for f in fakes:
        if not isinstance(f, torch.Tensor) or type(f) is not torch._subclasses.fake_tensor.FakeTensor:
            return None
        if f._is_view() or id(f) in seen or f.is_sparse or f.is_quantized or f.is_nested:
            return None
        seen.add(id(f))
        if free_unbacked_symbols(f):
            return None
    out = []
    for f in fakes:
        # The fake mode of the trace is entered: these are fakes of it. A result that
        # requires grad is not a leaf (it has the body's grad_fn in eager): a clone of a leaf
        # is one, whatever the grad mode the op was called in (the body may enable grad).
        t = torch.empty_strided(f.size(), f.stride(), dtype=f.dtype, device=f.device)
        if f.requires_grad:
            with torch.enable_grad():
                t = t.requires_grad_(True).clone()
        out.append(t)
    return tuple(out)
