"""Helpers the runtime calls when it rebuilds a frame's state at a graph break."""
import torch


def grad_mode_exit(cls, prev):
    """The bound ``__exit__`` of a ``cls`` context (no_grad, enable_grad, set_grad_enabled)
    that was entered when the grad mode was ``prev``: leaving it restores ``prev``, as the
    original ``with`` block would have."""
    ctx = cls.__new__(cls)
    ctx.prev = prev
    return ctx.__exit__


__all__ = ["grad_mode_exit"]
