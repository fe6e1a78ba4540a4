"""Helpers the runtime calls when it rebuilds a frame's state at a graph break."""
import types


def grad_mode_exit(cls, prev):
    """The bound ``__exit__`` of a ``cls`` context (no_grad, enable_grad, set_grad_enabled)
    that was entered when the grad mode was ``prev``: leaving it restores ``prev``, as the
    original ``with`` block would have."""
    ctx = cls.__new__(cls)
    ctx.prev = prev
    return ctx.__exit__


def make_function(code, globals, qualname, defaults, kwdefaults, closure, attrs):
    """A function made by the traced program (MAKE_FUNCTION), rebuilt at a graph break with
    the same code, defaults and closure cells (shared with the frame and other closures)."""
    fn = types.FunctionType(code, globals, code.co_name, defaults, closure or None)
    fn.__qualname__ = qualname
    if kwdefaults:
        fn.__kwdefaults__ = kwdefaults
    if attrs:
        fn.__dict__.update(attrs)
    return fn


__all__ = ["grad_mode_exit", "make_function"]
