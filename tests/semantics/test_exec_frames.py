"""Code made by exec/eval at run time (a dataclass's __init__, __eq__ and __repr__, a
namedtuple's __new__ and _replace, a function compiled from a string with a "<string>"
filename) is traced like any other code: the tracer reads bytecode, never source, so no
linecache entry or inspect.getsource is needed. A compiled function that builds a dataclass
instance inlines its __init__ (nothing runs natively). Each case: eager vs cdynamo on the
first call and on a cache hit, graph counts against torch._dynamo's."""
import collections
import dataclasses
import linecache
import typing

import pytest
import torch

import cdynamo
import cdynamo.testing

from .harness import Cases, check, tensors

case = Cases()
T4 = tensors((4,))


@dataclasses.dataclass
class Point:
    x: torch.Tensor
    scale: int = 3


@dataclasses.dataclass(frozen=True)
class FrozenPair:
    a: torch.Tensor
    b: float = 0.5


@dataclasses.dataclass
class WithPostInit:
    t: torch.Tensor
    tags: list = dataclasses.field(default_factory=list)
    doubled: torch.Tensor = dataclasses.field(init=False, default=None)

    def __post_init__(self):
        self.doubled = self.t * 2
        self.tags.append("made")


@dataclasses.dataclass(order=True)
class Key:
    major: int
    minor: int = 0


@dataclasses.dataclass(slots=True, kw_only=True)
class Slotted:
    t: torch.Tensor
    k: int = 2


Pair = collections.namedtuple("Pair", "first second", defaults=(10,))


class Typed(typing.NamedTuple):
    t: torch.Tensor
    n: int = 4


_NS = {}
exec(compile(
    "import torch\n"
    "def affine(x, a=2):\n"
    "    return x * a + 1\n"
    "def looped(x, n):\n"
    "    for i in range(n):\n"
    "        x = x + i\n"
    "    return x\n"
    "def broken(x):\n"
    "    y = x.sin()\n"
    "    torch._dynamo.graph_break()\n"
    "    return y * 2\n",
    "<string>", "exec"), _NS)
affine, looped, broken = _NS["affine"], _NS["looped"], _NS["broken"]


@case(T4)
def dataclass_init_with_a_default(x):
    p = Point(x * 2)
    return p.x + p.scale


@case(T4)
def dataclass_eq_of_two_instances(x):
    return x + (Point(x) == Point(x)) + (Key(1, 2) == Key(1, 3))


@case(T4)
def dataclass_order_methods(x):
    return x * (Key(1, 2) < Key(1, 3)) + (Key(2) >= Key(1, 9))


@case(T4)
def frozen_dataclass_init(x):
    f = FrozenPair(x.cos())
    return f.a * f.b


@case(T4)
def dataclass_post_init_and_default_factory(x):
    w = WithPostInit(x)
    return w.doubled + len(w.tags)


@case(T4)
def slotted_keyword_only_dataclass(x):
    s = Slotted(t=x, k=5)
    return s.t * s.k


@case(T4)
def dataclass_replace_and_fields(x):
    p = dataclasses.replace(Point(x), scale=7)
    return p.x * p.scale + len(dataclasses.fields(p))


@case(T4)
def namedtuple_new_replace_and_asdict(x):
    p = Pair(x)
    q = p._replace(second=3)
    return q.first * q.second + len(p._asdict())


@case(T4)
def typed_namedtuple_default(x):
    t = Typed(x)
    return t.t + t.n


@case(T4)
def function_made_by_exec(x):
    return affine(x) + affine(x, a=3)


@case(lambda: (torch.randn(4), 3))
def loop_in_a_function_made_by_exec(x, n):
    return looped(x, n) - 1


@pytest.mark.parametrize("fn,make_args,expect_graphs", case.params)
def test_exec_frame(fn, make_args, expect_graphs):
    check(fn, make_args, expect_graphs=expect_graphs)


def test_graph_break_inside_a_function_made_by_exec():
    # A break in "<string>" code resumes in a function made from its bytecode alone.
    def f(x):
        return broken(x) + 1

    check(f, T4, expect_graphs=3)


def test_function_made_by_exec_compiled_itself():
    check(affine, T4, expect_graphs=1)


def test_no_source_is_read_for_string_code():
    # linecache has nothing for "<string>"; the trace must not need it.
    assert linecache.getline("<string>", 2) == ""
    x = torch.randn(4)
    cnt = cdynamo.testing.CompileCounter()
    cf = cdynamo.compile(lambda t: Point(affine(t)).x, backend=cnt)
    for _ in range(2):
        torch.testing.assert_close(cf(x), x * 2 + 1)
    st = cdynamo.stats()
    assert cnt.frame_count == 1 and not st["native_frames"] and not st["graph_break_reasons"]


class _Slots:
    __slots__ = ("a", "b")

    def __init__(self, a):
        self.a = a
        self.b = 2


class _SlotsAndDict(_Slots):
    pass


@pytest.mark.parametrize("make", ["slotted_dataclass", "slots_class", "slots_and_dict_subclass"])
@pytest.mark.parametrize("brk", [False, True], ids=["one_graph", "with_break"])
def test_object_with_slots_made_in_the_trace_is_returned_whole(make, brk):
    # The compiled code rebuilds an object the trace made: attributes the class keeps in
    # slots go to the slots (the instance may have no __dict__, and a __dict__ entry
    # would be hidden by the slot's descriptor), the others to its __dict__.
    def f(x):
        if make == "slotted_dataclass":
            o = Slotted(t=x + 1, k=3)
        elif make == "slots_class":
            o = _Slots(x + 1)
        else:
            o = _SlotsAndDict(x + 1)
            o.extra = 5
        if brk:
            torch._dynamo.graph_break()
        return o

    def attrs(o):
        names = [n for n in ("t", "k", "a", "b", "extra") if hasattr(o, n)]
        return type(o), names, [getattr(o, n) for n in names], getattr(o, "__dict__", None)

    x = torch.randn(4)
    want = attrs(f(x))
    cf = cdynamo.compile(f, backend=cdynamo.testing.CompileCounter())
    for _ in range(2):  # the first call and a cache hit
        got = attrs(cf(x))
        assert got[0] is want[0] and got[1] == want[1] and got[3] == want[3], (got, want)
        for g, w in zip(got[2], want[2]):
            torch.testing.assert_close(g, w)
