"""NumPy traced as torch operations: the graph targets cdynamo records for NumPy calls.

In a trace a NumPy array is a tensor (a graph node) that the program sees as an ndarray
(csrc/trace/kinds/ndarray.cpp). A NumPy function, an ndarray method, attribute or operator applied
to such arrays is recorded as one graph call of a target made here: it views its tensor
arguments as torch._numpy arrays, calls torch._numpy's counterpart of what the program
called (NumPy semantics, written in torch ops), and hands tensors back. The graph so holds
torch operations only; the frame's ndarray results are made real arrays after it runs
(`to_ndarray`).
"""

from __future__ import annotations

import operator
import sys

import torch

_targets: dict = {}


def _tnp():
    import torch._numpy as tnp

    return tnp


def _as_arrays(value):
    """Tensors (the graph's view of arrays) as torch._numpy arrays, inside tuples/lists too."""
    if isinstance(value, torch.Tensor):
        return _tnp().ndarray(value)
    if isinstance(value, (tuple, list)):
        return type(value)(_as_arrays(v) for v in value)
    return value


def _as_tensors(value):
    """torch._numpy arrays (and its scalars' dtypes) back as what a graph carries."""
    tnp = _tnp()
    if isinstance(value, tnp.ndarray):
        return value.tensor
    if isinstance(value, (tuple, list)):
        return type(value)(_as_tensors(v) for v in value)
    return value


class _Target:
    """A graph target: calls `self._run(*arrays)` with tensors viewed as arrays."""

    __module__ = __name__

    def __init__(self, name: str):
        self.__name__ = name
        self.__qualname__ = name

    def __call__(self, *args, **kwargs):
        return _as_tensors(self._run(*_as_arrays(args), **_as_arrays(kwargs)))

    def __repr__(self):
        return f"{__name__}.{self.__name__}"


class _Function(_Target):
    def __init__(self, fn, name):
        super().__init__(name)
        self._fn = fn

    def _run(self, *args, **kwargs):
        return self._fn(*args, **kwargs)


class _Method(_Target):
    def __init__(self, method):
        super().__init__("ndarray_" + method)
        self._method = method

    def _run(self, self_, *args, **kwargs):
        return getattr(self_, self._method)(*args, **kwargs)


class _Attribute(_Target):
    def __init__(self, attr):
        super().__init__("ndarray_attr_" + attr)
        self._attr = attr

    def _run(self, self_):
        return getattr(self_, self._attr)


def _publish(key, make):
    """One target per key, reachable as a global of this module (graph code names it)."""
    target = _targets.get(key)
    if target is None:
        target = make()
        name = target.__name__
        while name in globals() and globals()[name] is not target:
            name += "_"
        target.__name__ = target.__qualname__ = name
        globals()[name] = target
        _targets[key] = target
    return target


def counterpart(fn):
    """The torch._numpy callable standing for the NumPy callable `fn` (same submodule, same
    name: numpy.linalg.norm -> torch._numpy.linalg.norm), or None when it has none."""
    module = getattr(fn, "__module__", None)
    name = getattr(fn, "__name__", None)
    if not isinstance(module, str) or not isinstance(name, str):
        return None
    if module != "numpy" and not module.startswith("numpy."):
        return None
    tnp = _tnp()
    place = tnp
    parts = module.split(".")[1:]
    # NumPy's implementation modules (numpy._core.fromnumeric, numpy.lib._function_base_impl)
    # publish their functions at the top level.
    if parts and (parts[0].startswith("_") or parts[0] in ("lib", "core")):
        parts = []
    for part in parts:
        place = getattr(place, part, None)
        if place is None:
            return None
    found = getattr(place, name, None)
    if found is None and place is not tnp:
        found = getattr(tnp, name, None)
    return found if callable(found) else None


def function(fn):
    """The graph target for the NumPy callable `fn`, or None when torch._numpy has no
    counterpart for it."""
    tnp_fn = counterpart(fn)
    if tnp_fn is None:
        return None
    return _publish(("function", tnp_fn), lambda: _Function(tnp_fn, "np_" + fn.__name__))


_OPERATORS = {
    name: getattr(operator, name)
    for name in (
        "add", "sub", "mul", "truediv", "floordiv", "mod", "pow", "matmul", "and_", "or_", "xor",
        "lshift", "rshift", "lt", "le", "eq", "ne", "gt", "ge", "neg", "pos", "invert", "abs",
        "getitem",
    )
}


def operator_target(name):
    """The graph target for operator `name` (operator.<name>) applied to arrays."""
    op = _OPERATORS.get(name)
    if op is None:
        return None
    return _publish(("operator", name), lambda: _Function(op, "np_operator_" + name.rstrip("_")))


def method(name):
    """The graph target for ndarray method `name`, or None when torch._numpy's ndarray has
    no such method."""
    cls = _tnp().ndarray
    if not callable(getattr(cls, name, None)) or isinstance(getattr(cls, name, None), property):
        return None
    return _publish(("method", name), lambda: _Method(name))


def attribute(name):
    """The graph target reading ndarray attribute `name` (a property of torch._numpy's
    ndarray: T, real, shape, size, ...), or None when it is not one."""
    if not isinstance(getattr(_tnp().ndarray, name, None), property):
        return None
    return _publish(("attribute", name), lambda: _Attribute(name))


def dtype_name(obj):
    """The name of a NumPy dtype or scalar type (np.float64, np.dtype("float") -> "float64"),
    which torch._numpy takes for a dtype; None for anything else."""
    np = sys.modules.get("numpy")
    if np is None:
        return None
    if isinstance(obj, np.dtype) or (isinstance(obj, type) and issubclass(obj, np.generic)):
        return np.dtype(obj).name
    if isinstance(obj, _tnp().DType):
        return obj.name
    return None


def to_ndarray(tensor):
    """A graph's tensor handed back to the program as the NumPy array it stood for."""
    return tensor.numpy(force=True)


def ndarray_type():
    np = sys.modules.get("numpy")
    return np.ndarray if np is not None else None


def _foldable(value):
    """What a NumPy call on constants may give as a constant of the trace."""
    np = sys.modules.get("numpy")
    if value is None or isinstance(value, (bool, int, float, complex, str, torch.finfo, torch.iinfo)):
        return True
    if np is not None and isinstance(value, np.dtype):
        return True
    if isinstance(value, tuple):
        return all(_foldable(v) for v in value)
    return False


def fold(fn, args, kwargs):
    """A NumPy call whose arguments are all constants, computed now by torch._numpy
    (np.iinfo(np.int16).max, np.dtype("float")): (result,) when that is a constant,
    None when the call must be recorded instead (it makes an array, or draws random
    numbers, which change state)."""
    tnp_fn = counterpart(fn)
    if tnp_fn is None or getattr(tnp_fn, "__module__", "").startswith("torch._numpy.random"):
        return None
    tnp = _tnp()

    def arg(a):
        name = dtype_name(a)
        return a if name is None else name

    result = tnp_fn(*[arg(a) for a in args], **{k: arg(v) for k, v in kwargs.items()})
    if isinstance(result, tnp.DType):
        import numpy as np

        result = np.dtype(result.name)
    return (result,) if _foldable(result) else None
