"""operator's C callables, in Python."""
import operator

from .registry import polyfill


@polyfill(operator.methodcaller)
def methodcaller(name, /, *args, **kwargs):
    # operator.methodcaller: a callable calling obj.<name>(*args, **kwargs). The tracer
    # cannot make the C object from values it holds (tensors among the arguments), so the
    # object is this closure, as torch._dynamo models it; it calls the same method with
    # the same arguments, and raises methodcaller's TypeError for a name that is no str.
    if not isinstance(name, str):
        raise TypeError("method name must be a string")

    def caller(obj, /):
        return getattr(obj, name)(*args, **kwargs)

    return caller
