"""__bool__ and __len__ results are checked as Python checks them (PyTorch's
test_misc test_if_cond_user_defined_object2).

The trace took whatever a class's __bool__ or __len__ returned and asked its truth: a
__bool__ returning 1.2 made `if not obj` take a branch where eager raises TypeError, a
__len__ returning -1 or 2.5 gave a truth (and len() a value) where eager raises
ValueError / TypeError — silently wrong results. Now __bool__ must return a bool, __len__
an int >= 0 (a bool counts as its int), and anything else raises in the program what
CPython raises.
"""
import torch

from .harness import same_as_eager


class BoolReturnsFloat:
    def __init__(self):
        self.x = 0.5

    def __bool__(self):
        self.x = 1.2
        return self.x


class BoolReturnsInt:
    def __bool__(self):
        return 1


class LenNegative:
    def __len__(self):
        return -1


class LenFloat:
    def __len__(self):
        return 2.5


class LenBool:
    def __len__(self):
        return True


class Fine:
    def __init__(self, n):
        self.n = n

    def __len__(self):
        return self.n


def one():
    return (torch.randn(3),)


def branch(obj):
    def fn(x):
        o = obj()
        try:
            return x + (1 if o else 2), getattr(o, "x", None)
        except (TypeError, ValueError) as e:
            return x - 1, type(e).__name__, str(e), getattr(o, "x", None)
    return fn


def test_bool_must_return_bool():
    same_as_eager(branch(BoolReturnsFloat), one, fullgraph=True)
    same_as_eager(branch(BoolReturnsInt), one, fullgraph=True)


def test_len_must_return_a_nonnegative_int():
    same_as_eager(branch(LenNegative), one, fullgraph=True)
    same_as_eager(branch(LenFloat), one, fullgraph=True)


def test_len_builtin_checks_and_converts():
    def fn(x):
        out = [len(LenBool()), type(len(LenBool())).__name__, len(Fine(3)), bool(Fine(0))]
        for cls in (LenNegative, LenFloat):
            try:
                out.append(len(cls()))
            except (TypeError, ValueError) as e:
                out.append((type(e).__name__, str(e)))
        return x * out[0], out
    same_as_eager(fn, one, fullgraph=True)


def test_uncaught_bool_error_propagates():
    def fn(x, o):
        if not o:
            return x + 1
        return x - 1
    same_as_eager(fn, lambda: (torch.randn(2), BoolReturnsFloat()), captured=False)
