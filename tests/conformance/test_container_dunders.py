"""Containers' special methods and method objects, as unittest and PyTorch's test_dicts/test_sets/
test_list/test_iterators use them.

- l.__getitem__(2), d.__iter__(), s.__sub__(q), p.__eq__(q) and the unbound forms
  (dict.values(d), set.__sub__(p, q), frozenset.__or__(frozenset(...), q), tuple.__add__)
  are the C type's methods: the operator they stand for, NotImplemented where Python's gives
  it (an operand of another type); an iterator's __iter__ is itself, its __next__ its next
  item.
- f"{s}" / f"{l!r}" of a set, list, tuple or dict of constants is its repr, a set's items in
  the order walking it meets them (after a removal, not the order a rebuilt set would have).
- A method of a container value has __name__, __qualname__ ("set.add") and __self__
  (assertRaises(TypeError, s.add) reads __name__); a bound Python method __func__ too.
- exc.with_traceback(None) of an exception the trace raised (assertRaises' __exit__).
"""
import unittest

import torch

from .harness import same_as_eager


def one():
    return (torch.ones(2),)


def test_special_methods_by_name():
    def fn(x):
        l, d, s = [1, 2, 3], {"a": 1, "b": 2}, {1, 2}
        it = l.__iter__()
        a = next(it), it.__next__(), list(it.__iter__())
        b = list(d.__iter__()), list(d.values().__iter__()), l.__getitem__(1), l.__contains__(3), l.__len__()
        c = list(dict.values(d)), list(dict.keys(d)), set.__sub__(s, {1}), frozenset.__or__(frozenset([1]), {3})
        e = l.__eq__([1, 2, 3]), l.__eq__((1,)), s.__eq__(s), s.__lt__({1, 2, 3}), s.__eq__(1), tuple.__add__((1,), (2,))
        l.__setitem__(0, 9)
        l.__delitem__(1)
        d.__setitem__("c", 3)
        d.__delitem__("a")
        return x + 1, a, b, c, e, l, d, s.__iter__().__next__()

    same_as_eager(fn, one)


def test_exhausted_iterator_next_raises_stop_iteration():
    def fn(x):
        it = [1].__iter__()
        first = it.__next__()
        try:
            it.__next__()
        except StopIteration:
            return x + first
        return x

    same_as_eager(fn, one)


def test_f_strings_of_containers():
    def fn(x):
        s = {"q", "b", "zz", "hello", 5, 1, 9}
        s.remove(5)
        s.add(17)
        f = frozenset([3])
        return x * 2, f"{s} {[1, 'x', (2,), {'k': [1.5, None]}]!r} {(1,)} {()} {set()} {frozenset()} {f}"

    same_as_eager(fn, one)


def test_method_objects_and_assert_raises():
    tc = unittest.TestCase()

    class Box:
        def get(self):
            return 1

    def fn(x):
        s, l, b = {1}, [], Box()
        tc.assertRaises(TypeError, s.add)
        tc.assertRaises(TypeError, l.append, 1, 2)
        with tc.assertRaises(KeyError):
            {}.pop("missing")
        names = s.add.__name__, s.add.__qualname__, l.append.__qualname__, s.add.__self__ is s
        return x + 1, names, b.get.__name__, b.get.__func__ is Box.get, b.get.__self__ is b

    same_as_eager(fn, one)


def test_iterating_a_non_iterable_constant_raises_type_error():
    # set.issubset(1), list(None), for x in 3: Python's TypeError, raised in the trace
    # (it stopped the trace as unsupported).
    def fn(x):
        caught = []
        for call in (lambda: {1}.issubset(1), lambda: list(None), lambda: [v for v in 3], lambda: iter(2.5)):
            try:
                call()
            except TypeError as e:
                caught.append(str(e))
        return x + 1, caught

    same_as_eager(fn, one)
