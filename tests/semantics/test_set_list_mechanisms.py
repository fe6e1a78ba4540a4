"""Sets, frozensets and lists beyond their literals: instances of set/frozenset subclasses made
in the trace (their base's methods and operators on their items, their escape), sets read from
the program holding functions, the operators' TypeErrors, collections.abc generics subscripted
by a TypeVar, list special methods called by name, slices made for real and extended slices,
and list methods comparing items by a class's own __eq__."""
import pytest
import torch
from typing import Generic, List, TypeVar, cast

import cdynamo
import cdynamo.testing
from torch.utils._ordered_set import OrderedSet

from .harness import Cases, check, tensors

case = Cases()
T4 = tensors((4,))


class Bag(set):
    pass


class Frozen(frozenset):
    pass


class Shifted(set):
    """A set subclass whose own add goes through set's with super()."""

    def add(self, item):
        return super().add(item + 1)

    def total(self):
        return sum(self)


class Labelled(set):
    """A set subclass with its own __init__ reaching set's."""

    def __init__(self, items, label):
        super().__init__(items)
        self.label = label


# ---- set and frozenset subclasses made in the trace

@case(T4)
def set_subclass_methods(x):
    x = x + 1  # an op first: a graph break in what follows would show as a second graph
    p = Bag("abc")
    p.add("d")
    p.discard("a")
    Bag.add(p, "e")
    q = p.copy()
    q.remove("b")
    u = p.union("xy")
    return x + len(p), sorted(p), sorted(q), type(q).__name__, sorted(u), type(u).__name__, "c" in p


@case(T4)
def set_subclass_operators(x):
    x = x + 1  # an op first: a graph break in what follows would show as a second graph
    p, q = Bag("abc"), Bag("bcd")
    out = [p | q, p & q, p - q, p ^ q, Bag.__sub__(p, q), {"a", "z"} | p]
    return x * 2, [sorted(s) for s in out], [type(s).__name__ for s in out]


@case(T4)
def set_subclass_inplace_keeps_the_instance(x):
    x = x + 1  # an op first: a graph break in what follows would show as a second graph
    p = Bag("ab")
    alias = p
    p |= {"c"}
    p -= Bag("a")
    r = p.__ior__({"z"})
    return x + 1, p is alias, r is p, type(p).__name__, sorted(alias)


@case(T4)
def set_subclass_comparisons(x):
    x = x + 1  # an op first: a graph break in what follows would show as a second graph
    p, q, r = Bag("abc"), Bag("bef"), Bag("ab")
    return x - 1, [p == set("abc"), p == frozenset("abc"), set("abc") == p, p != q, p != 1, r < p, p > r,
                   r <= p, q >= r, Bag.__eq__(p, p), p == Frozen("abc"), p.issuperset(r), r.issubset("abcz")]


@case(T4)
def set_subclass_escapes(x):
    x = x + 1  # an op first: a graph break in what follows would show as a second graph
    p = Bag([1, 2])
    p.add(3)
    return x + 1, p


@case(T4)
def frozenset_subclass_made_hashed_and_escaping(x):
    x = x + 1  # an op first: a graph break in what follows would show as a second graph
    p = Frozen("abc")
    q = p | Frozen("cd")
    holder = {p, Frozen("abc")}
    inner = Bag([frozenset("ab")])
    return x * 3, p, sorted(q), type(q).__name__, len(holder), Frozen("ab") in inner, frozenset(p) == p


@case(T4)
def set_subclass_own_methods_and_init(x):
    x = x + 1  # an op first: a graph break in what follows would show as a second graph
    s = Shifted([1, 2])
    s.add(3)
    t = Labelled([1, 2, 2], "L")
    return x + s.total(), sorted(s), s == {1, 2, 4}, sorted(t), t.label


class TaggedSet(set):
    def __new__(cls, items, tag=None):
        self = super().__new__(cls)  # empty: set.__init__ (C) fills it after
        self.tag = tag
        return self


class TaggedFrozen(frozenset):
    def __new__(cls, items, tag):
        self = super().__new__(cls, items)
        self.tag = tag
        return self


class NewList(list):
    def __new__(cls, *args):
        return super().__new__(cls)


class NewDict(dict):
    def __new__(cls, *args, **kwargs):
        return super().__new__(cls)


# A class's own __new__ reaching its container base's: the base's C __init__ still runs
# (list.__init__, dict.__init__, set.__init__ fill what __new__ made empty), as
# type.__call__ runs it. It was skipped: NewList([1, 2]) came out empty.
@case(T4)
def container_subclasses_with_their_own_new(x):
    s = TaggedSet([1, 2])
    f = TaggedFrozen("ab", 3)
    l = NewList([1, 2])
    d = NewDict({"a": 1}, b=2)
    return (x + 1, sorted(s), s.tag, sorted(f), f.tag, type(f | f).__name__, list(l), type(l).__name__,
            sorted(d.items()), frozenset.__new__(frozenset, [1]), set.__new__(set, [1]), TaggedFrozen([2], 1))


@case(T4)
def set_subclass_errors(x):
    x = x + 1  # an op first: a graph break in what follows would show as a second graph
    p = Bag("ab")
    out = []
    for f in (lambda: p.add(["unhashable"]), lambda: p - 1, lambda: p.remove("zz"), lambda: {p},
              lambda: Frozen("ab") - 1, lambda: Bag.pop(Bag())):
        try:
            f()
            out.append(None)
        except (TypeError, KeyError) as e:
            out.append(type(e).__name__ + ": " + str(e))
    return x + 1, out


class Token:
    def __init__(self, w):
        self.w = w


@case(T4)
def set_of_objects_made_in_the_trace(x):
    a, b = Token(2), Token(3)
    s = {a, b, a}
    s.add(Token(4))
    rest = s - {a}
    total = sum(t.w for t in rest)
    return x * total, len(s), a in s, Token(2) in s, b in rest, a in rest


@case(T4)
def set_of_tuples_made_in_the_trace(x):
    y = x + 1
    a, b = 1, "k"
    s = {(y, 1), (y, 1), (a, b)}  # (a, b) is built in the trace from constants
    s.add((1, "k"))
    out = [len(s), (y, 1) in s, (1, "k") in s, (a, b) in s, (x, 1) in s, ((y, 1), 2) in {((y, 1), 2)}]
    try:
        {(1, [2])}
    except TypeError as e:
        out.append(str(e))
    return y * len(s), out


@case(T4)
def plain_set_operator_type_errors(x):
    x = x + 1  # an op first: a graph break in what follows would show as a second graph
    out = []
    for f in (lambda: {1, 2} - 1, lambda: frozenset({1}) | [1], lambda: {1} ^ "a"):
        try:
            f()
            out.append(None)
        except TypeError as e:
            out.append(str(e))
    return x + 1, out


@case(T4)
def dict_keys_views_as_sets(x):
    d = {"a": 1, "b": 2}
    k = d.keys()
    return x + 1, [sorted(k & {"a", "z"}), sorted(k | {"z"}), sorted(k - {"a"}), sorted({"b", "c"} - k),
                   k.isdisjoint({"q"}), k.isdisjoint(["b"]), k == {"a", "b"}, {"a"} < k, sorted(d.items() & {("a", 1)})]


# ---- collections.abc generics and OrderedSet

T = TypeVar("T")


@case(T4)
def ordered_set_operators(x):
    x = x + 1  # an op first: a graph break in what follows would show as a second graph
    s1, s2 = OrderedSet(["a", "b", "c"]), OrderedSet(["b", "c", "d"])
    out = [s1 | s2, s1 & s2, s1 - s2, s1 ^ s2]
    return x + 1, [list(s) for s in out], [type(s).__name__ for s in out]


@case(T4)
def abc_generic_subscript_by_typevar(x):
    x = x + 1  # an op first: a graph break in what follows would show as a second graph
    alias = OrderedSet[T]
    y = cast(OrderedSet[T], [x])
    return y[0] + 1, type(alias).__name__


class Box(Generic[T]):
    def __init__(self, v):
        self.v = v

    def again(self):
        return Box[T](self.v * 2)


@case(T4)
def typing_alias_of_a_generic_class_called(x):
    b = Box[int](x)
    c = b.again()
    return c.v + 1, b.__orig_class__ is not None, type(c).__name__, List[T] is not None


# ---- sets read from the program holding functions

def test_set_of_functions_read_from_the_program_is_guarded_by_its_table():
    s = {torch.sin, "hello", torch.cos}

    def fn(x, s):
        if torch.cos in s:
            return x.sin()
        return x.cos()

    cnt = cdynamo.testing.CompileCounter()
    cf = cdynamo.compile(fn, backend=cnt, fullgraph=True)
    x = torch.randn(3)
    for _ in range(2):
        assert torch.equal(cf(x, s), fn(x, s))
    assert cnt.frame_count == 1
    s.remove(torch.cos)
    s.add(torch.tan)
    for _ in range(2):
        assert torch.equal(cf(x, s), fn(x, s))
    assert cnt.frame_count == 2


def test_set_of_tensors_read_from_the_program_is_refused_with_the_reason():
    def fn(x, s):
        for t in s:
            x = x + t
        return x

    cf = cdynamo.compile(fn, backend=cdynamo.testing.CompileCounter(), fullgraph=True)
    with pytest.raises(cdynamo.Unsupported, match="holding tensors"):
        cf(torch.ones(1), {torch.ones(1), torch.zeros(1)})


# ---- lists

@case(T4)
def list_special_methods_by_name(x):
    x = x + 1  # an op first: a graph break in what follows would show as a second graph
    p, q = list("ab"), list("cd")
    r = p.__iadd__(q)
    m = q.__mul__(2)
    rm = q.__rmul__(2)
    s = list("xy")
    s2 = s.__imul__(2)
    out = []
    for f in (lambda: p.__add__({"k": 1}), lambda: p.__mul__(2.5), lambda: p.__iadd__(), lambda: (1,).__add__([2])):
        try:
            f()
            out.append(None)
        except TypeError as e:
            out.append(str(e))
    return x + 1, p, r is p, m, rm, s, s2 is s, out


class Seq(list):
    pass


@case(T4)
def list_subclass_inplace_keeps_the_instance(x):
    x = x + 1  # an op first: a graph break in what follows would show as a second graph
    p = Seq("ab")
    alias = p
    p += "cd"
    p *= 2
    r = p.__iadd__(["z"])
    return x + 1, p is alias, r is p, type(p).__name__, list(p)


@case(T4)
def sequence_indices_of_another_type_raise(x):
    p, q = [1, 2], (1, 2)
    out = []
    for f in (lambda: p["a"], lambda: q[1.5], lambda: p.__setitem__(1.0, 3), lambda: p[5]):
        try:
            f()
        except (TypeError, IndexError) as e:
            out.append(type(e).__name__ + ": " + str(e))
    return x + 1, out


@case(T4)
def list_slices_made_for_real_and_extended(x):
    x = x + 1  # an op first: a graph break in what follows would show as a second graph
    p = list("abcdefgh")
    p.__delitem__(slice(1, 3))
    del p[::2]
    q = list(range(8))
    q[::3] = ["a", "b", "c"]
    del q[slice(None, None, -3)]
    out = []
    for f in (lambda: q.__delitem__(slice(1, 1, 0)), lambda: q.__setitem__(slice(None, None, 2), [1]),
              lambda: q.__delitem__(1.5), lambda: q.__delitem__(), lambda: q.__setitem__(1)):
        try:
            f()
        except (ValueError, TypeError) as e:
            out.append(type(e).__name__ + ": " + str(e))
    return x + 1, p, q, out


class AlwaysEqual:
    def __eq__(self, other):
        return True


class NeverEqual:
    def __eq__(self, other):
        return False


@case(T4)
def list_methods_compare_with_the_items_own_eq(x):
    x = x + 1  # an op first: a graph break in what follows would show as a second graph
    never = NeverEqual()
    p = [AlwaysEqual(), 1]
    p.remove(NeverEqual())  # the item's __eq__ is asked first
    q = [never, 2]
    q.remove(never)  # identity before ==
    r = [NeverEqual(), 3]
    out = [NeverEqual() in r, 3 in r, r.count(3), r.index(3), len(p), len(q)]
    try:
        r.remove(NeverEqual())
    except ValueError as e:
        out.append(str(e))
    return x + 1, out


class ByMod3:
    def __init__(self, v):
        self.v = v

    def __lt__(self, other):
        return self.v % 3 < other.v % 3


@case(T4)
def list_sort_by_key_functions_and_own_lt(x):
    p = [ByMod3(v) for v in (5, 3, 4, 6, 2)]
    p.sort()
    q = sorted(p, reverse=True)
    sizes = []
    r = [3, 1, 2]

    def key(v):
        sizes.append(len(r))  # the list is empty while its keys are computed
        return -v

    r.sort(key=key)
    s = ["bb", "a", "ccc", "dd"]
    s.sort(key=len, reverse=True)
    t = sorted([ByMod3(1), ByMod3(4), ByMod3(0)], key=lambda b: b)
    return x + 1, [b.v for b in p], [b.v for b in q], r, sizes, s, [b.v for b in t]


class Ranked:
    def __init__(self, v):
        self.v = v

    def __eq__(self, other):
        return isinstance(other, Ranked) and self.v == other.v

    def __lt__(self, other):
        return "less" if self.v < other.v else ""


@case(T4)
def sequence_comparisons_with_items_own_eq_and_lt(x):
    y = x + 1
    return y, [[AlwaysEqual()] == [1], [1] == [AlwaysEqual()], [Ranked(1), Ranked(2)] < [Ranked(1), Ranked(3)],
               (Ranked(1),) == (Ranked(1),), [Ranked(1)] != [Ranked(1), 2], (Ranked(1), 2) <= (Ranked(1),),
               [y, 1] < [y, 2], [Ranked(2)] > [Ranked(1)], [NeverEqual()] == [NeverEqual()]]


@case(T4)
def min_max_of_objects_by_their_own_comparisons(x):
    items = [ByMod3(4), ByMod3(2), ByMod3(5), ByMod3(3)]
    # ties keep the first item, as Python's fold does
    return x + 1, max(items).v, min(items).v, max(ByMod3(1), ByMod3(4)).v, min(ByMod3(7), ByMod3(1)).v


@pytest.mark.parametrize("fn,make_args,expect_graphs", case.params)
def test_set_list_mechanisms(fn, make_args, expect_graphs):
    check(fn, make_args, expect_graphs=expect_graphs)


# The cases above as whole graphs: a graph break inside a try block (the error cases) leaves
# the rest of the frame to run natively, which the graph count alone would not show.
@pytest.mark.parametrize("fn,make_args,expect_graphs", case.params)
def test_set_list_mechanisms_fullgraph(fn, make_args, expect_graphs):
    from .harness import assert_same

    torch.manual_seed(0)
    expected = fn(*make_args())
    cnt = cdynamo.testing.CompileCounter()
    cf = cdynamo.compile(fn, backend=cnt, fullgraph=True)
    for _ in range(2):
        torch.manual_seed(0)
        assert_same(expected, cf(*make_args()))
    assert cnt.frame_count == 1


# An instance of a set subclass read from the program: its items are not read, so set's C
# operators on it stop the trace (a graph break) instead of being taken as missing; taken as
# missing, `s | {2}` raised "unsupported operand" in the trace and the except branch ran.
def test_set_subclass_read_from_the_program_is_not_taken_as_lacking_operators():
    def fn(x, s):
        x = x + 1
        try:
            r = s | {2}
        except TypeError:
            r = "raised"
        return x * 2, r

    cf = cdynamo.compile(fn, backend=cdynamo.testing.CompileCounter())
    for _ in range(2):
        from .harness import assert_same

        assert_same(fn(torch.ones(2), Bag({1})), cf(torch.ones(2), Bag({1})))


class Keyed(frozenset):
    """A frozenset subclass hashed and compared by a key of its own."""

    def __hash__(self):
        return 0

    def __eq__(self, other):
        return True


# Looking such an instance up in a set by its members would skip its own __eq__/__hash__: the
# trace stops with the reason instead (and the frame gives eager's answer).
def test_set_subclass_with_its_own_equality_is_not_looked_up_by_members():
    def fn(x):
        x = x + 1
        return x, Keyed("a") in {Keyed("b")}

    with pytest.raises(cdynamo.Unsupported, match="own __eq__ or __hash__"):
        cdynamo.compile(fn, backend=cdynamo.testing.CompileCounter(), fullgraph=True)(torch.ones(1))
    cf = cdynamo.compile(fn, backend=cdynamo.testing.CompileCounter())
    assert cf(torch.ones(1))[1] is True
