"""Lets `import timm` work where torchvision cannot be imported (model runner only).

timm 1.0.x imports torchvision when it is imported (torchvision.ops.misc,
torchvision.datasets, torchvision.transforms, ...), though none of the models the
runner builds uses it. PyPI's torchvision wheel is a CUDA build: next to the CPU torch
its operators fail to load (it links libtorch_cuda) and `import torchvision` raises,
taking `import timm` down with it. `install()` puts a finder on sys.meta_path that
serves `torchvision` and its submodules as modules of stand-ins: every name read from
them is a class that raises when it is instantiated or called, so a model that really
needed torchvision fails loudly, naming what it asked for, instead of running something
else. Used only in the processes that build timm models, and only when the real
torchvision does not import (see `needed()`).
"""
import importlib.abc
import importlib.machinery
import sys
import types

_PREFIX = "torchvision"


class _MissingMeta(type):
    def __getattr__(cls, name):
        if name.startswith("__"):
            raise AttributeError(name)
        return _missing(f"{cls.__qualname__}.{name}")

    def __repr__(cls):
        return f"<torchvision stand-in {cls.__qualname__}>"


def _missing(qualname):
    def refuse(*args, **kwargs):
        raise RuntimeError(f"{qualname} is part of torchvision, which is not installed here "
                           "(cdynamo's model runner only lets timm import without it)")

    return _MissingMeta(qualname.rsplit(".", 1)[-1], (), {"__qualname__": qualname, "__new__": refuse,
                                                          "__module__": qualname.rsplit(".", 1)[0]})


class _ShimModule(types.ModuleType):
    def __getattr__(self, name):
        if name.startswith("__"):
            raise AttributeError(name)
        value = _missing(f"{self.__name__}.{name}")
        setattr(self, name, value)
        return value


class _Finder(importlib.abc.MetaPathFinder, importlib.abc.Loader):
    def find_spec(self, fullname, path=None, target=None):
        if fullname == _PREFIX or fullname.startswith(_PREFIX + "."):
            return importlib.machinery.ModuleSpec(fullname, self, is_package=True)
        return None

    def create_module(self, spec):
        module = _ShimModule(spec.name)
        module.__path__ = []
        if spec.name == _PREFIX:
            module.__version__ = "0.0.0+cdynamo.shim"
        return module

    def exec_module(self, module):
        pass


def needed():
    """True when the real torchvision cannot be imported in this process."""
    try:
        import torchvision  # noqa: F401
        return False
    except Exception:
        for name in [m for m in sys.modules if m == _PREFIX or m.startswith(_PREFIX + ".")]:
            del sys.modules[name]
        return True


def install():
    """Puts the stand-in finder in front of sys.meta_path (idempotent)."""
    if not any(isinstance(f, _Finder) for f in sys.meta_path):
        sys.meta_path.insert(0, _Finder())
