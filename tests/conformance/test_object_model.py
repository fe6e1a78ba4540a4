"""The Python object model as the trace reads it: attribute lookup by the
descriptor protocol, for instances, nn.Modules and classes; a class's own __getattribute__
and __getattr__; hasattr() by the same lookup; the guards on what each read assumed.

Each case runs eagerly and compiled (first call and a cache hit) with same_as_eager, which
compares results, exceptions and argument state, checks that nothing ran natively and that
cdynamo needs no more graphs than torch._dynamo. The guard cases change what the trace read
after compiling and check that the stale graph does not run.
"""
import enum

import torch

import cdynamo
import cdynamo.testing

from .harness import assert_same, same_as_eager


def one(*shape):
    return lambda: (torch.randn(*shape or (3,)),)


def compiled(fn):
    cnt = cdynamo.testing.CompileCounter()
    cdynamo.reset()
    return cdynamo.compile(fn, backend=cnt), cnt


# ---------------------------------------------------------------- class attributes by kind

class Kinds:
    scale = 3
    table = {"a": 2}

    def method(self, x):
        return x * self.scale

    @staticmethod
    def static(x):
        return x + 10

    @classmethod
    def klass(cls, x):
        return x * cls.scale

    @property
    def prop(self):
        return self.scale + 1


KINDS = Kinds()


def test_instance_reads_each_kind_of_class_attribute():
    def fn(x):
        return KINDS.method(x), KINDS.static(x), KINDS.klass(x), x * KINDS.prop, x * KINDS.table["a"]
    same_as_eager(fn, one())


def test_class_reads_each_kind_of_class_attribute():
    def fn(x):
        return (Kinds.method(KINDS, x), Kinds.static(x), Kinds.klass(x), isinstance(Kinds.prop, property),
                x * Kinds.scale, type(KINDS).static(x), type(KINDS).klass(x))
    same_as_eager(fn, one())


class Sub(Kinds):
    scale = 5

    @classmethod
    def klass(cls, x):
        return super().klass(x) + 1

    def method(self, x):
        return super().method(x) - 1


def test_super_reaches_methods_and_classmethods_of_the_base():
    obj = Sub()

    def fn(x):
        return obj.method(x), Sub.klass(x), obj.klass(x)
    same_as_eager(fn, one())


class Doubler:
    """A non-data descriptor written in Python."""

    def __get__(self, obj, owner):
        return 2 if obj is None else obj.base * 2


class Clamped:
    """A data descriptor written in Python: it wins over the instance dict."""

    def __get__(self, obj, owner):
        if obj is None:
            return self
        return obj.__dict__.get("_v", 0) + 100

    def __set__(self, obj, value):
        obj.__dict__["_v"] = value


class WithDescriptors:
    double = Doubler()
    clamped = Clamped()

    def __init__(self):
        self.base = 4
        self.__dict__["clamped"] = -1  # shadowed by the data descriptor


DESCRIBED = WithDescriptors()


def test_python_descriptors_follow_the_protocol():
    def fn(x):
        return x * DESCRIBED.double, x + DESCRIBED.clamped, WithDescriptors.double, isinstance(WithDescriptors.clamped, Clamped)
    same_as_eager(fn, one(), expect_graphs=1)  # torch._dynamo breaks on the descriptor (2 graphs)


class Slotted:
    __slots__ = ("a", "b")

    def __init__(self):
        self.a = 2


SLOTTED = Slotted()


def test_slots_members_and_missing_slot():
    def fn(x):
        try:
            b = SLOTTED.b
        except AttributeError:
            b = -1
        return x * SLOTTED.a + b
    same_as_eager(fn, one())


# ---------------------------------------------------------------- enum members (M3)

class Mode(enum.Enum):
    FAST = "fast"
    SLOW = "slow"
    NONE = "none"


def test_enum_members_are_constants_compared_by_identity():
    def fn(x, mode):
        y = x * 2
        if mode in (Mode.FAST, Mode.SLOW):
            y = y + 1
        if mode == Mode.NONE:
            y = y - 1
        return y, mode.value, Mode.FAST.name
    same_as_eager(fn, lambda: (torch.randn(3), Mode.FAST))
    same_as_eager(fn, lambda: (torch.randn(3), Mode.NONE))


def test_enum_member_argument_is_guarded():
    def fn(x, mode):
        return x + 1 if mode is Mode.FAST else x - 1

    cfn, cnt = compiled(fn)
    x = torch.zeros(2)
    for mode in (Mode.FAST, Mode.FAST, Mode.SLOW, Mode.SLOW):
        assert torch.equal(cfn(x, mode), fn(x, mode))
    assert cnt.frame_count == 2


class Token:
    pass


A, B, C = Token(), Token(), Token()


def test_objects_without_eq_compare_by_identity_in_membership():
    def fn(x, t, a, b):
        return x + 1 if t in (a, b) else x - 1
    same_as_eager(fn, lambda: (torch.zeros(2), A, A, B))
    same_as_eager(fn, lambda: (torch.zeros(2), C, A, B))


def test_identity_membership_is_guarded():
    def fn(x, t, a, b):
        return x + 1 if t in (a, b) else x - 1

    cfn, _ = compiled(fn)
    x = torch.zeros(2)
    assert torch.equal(cfn(x, A, A, B), fn(x, A, A, B))
    assert torch.equal(cfn(x, C, A, B), fn(x, C, A, B)), "a stale membership answer"


# ---------------------------------------------------------------- guards on class attributes

def test_class_attribute_change_is_seen():
    class Config:
        scale = 2

    def fn(x):
        return x * Config.scale

    cfn, cnt = compiled(fn)
    x = torch.ones(2)
    assert torch.equal(cfn(x), fn(x))
    assert torch.equal(cfn(x), fn(x))
    Config.scale = 5
    assert torch.equal(cfn(x), fn(x)), "a stale class attribute"
    assert cnt.frame_count == 2


def test_class_attribute_shadowed_later_by_the_instance_is_seen():
    class Layer:
        bias = 1

        def apply(self, x):
            return x + self.bias

    layer = Layer()

    def fn(x):
        return layer.apply(x)

    cfn, _ = compiled(fn)
    x = torch.zeros(2)
    assert torch.equal(cfn(x), fn(x))
    layer.bias = 7
    assert torch.equal(cfn(x), fn(x)), "the instance attribute that shadows the class's was missed"


def test_method_replaced_on_the_class_is_seen():
    class Op:
        def run(self, x):
            return x + 1

    op = Op()

    def fn(x):
        return op.run(x)

    cfn, _ = compiled(fn)
    x = torch.zeros(2)
    assert torch.equal(cfn(x), fn(x))
    Op.run = lambda self, x: x - 1
    assert torch.equal(cfn(x), fn(x)), "the old method ran"


# ---------------------------------------------------------------- nn.Module attributes (M4)

class Mod(torch.nn.Module):
    factor = 2.0

    def __init__(self):
        super().__init__()
        self.lin = torch.nn.Linear(3, 3)

    @staticmethod
    def act(t):
        return t.relu()

    @classmethod
    def scale_of(cls):
        return cls.factor

    @property
    def width(self):
        return self.lin.out_features

    def forward(self, x):
        name = self.__class__.__name__
        y = self.act(self.lin(x)) * self.scale_of() + self.width
        if type(self).forward is Mod.forward and name == "Mod":
            y = y + 1
        return y


def test_module_class_attributes_of_each_kind():
    m = Mod()
    same_as_eager(lambda x: m(x), one(2, 3))


def test_module_hasattr_and_getattr_default():
    m = Mod()

    def fn(x):
        a = hasattr(m, "lin") and hasattr(m, "width") and not hasattr(m, "missing")
        b = getattr(m, "missing", None) is None
        return m(x) if a and b else x
    same_as_eager(fn, one(2, 3))


def test_module_attribute_absent_then_added_is_seen():
    m = Mod()

    def fn(x):
        return x + 1 if hasattr(m, "extra") else x - 1

    cfn, _ = compiled(fn)
    x = torch.zeros(2)
    assert torch.equal(cfn(x), fn(x))
    m.extra = 1
    assert torch.equal(cfn(x), fn(x)), "hasattr answered from a stale trace"


# ---------------------------------------------------------------- __getattribute__ / __getattr__ (M7)

class Aliased:
    aliases = {"layers": "n"}

    def __init__(self):
        self.n = 3

    def __getattribute__(self, key):
        if key != "aliases" and key in super().__getattribute__("aliases"):
            key = super().__getattribute__("aliases")[key]
        return super().__getattribute__(key)


ALIASED = Aliased()


def test_own_getattribute_is_inlined():
    def fn(x):
        try:
            n = ALIASED.layers
        except AttributeError:
            n = 0
        return x * n, hasattr(ALIASED, "layers"), hasattr(ALIASED, "nope")
    same_as_eager(fn, one())


class Fallback:
    def __init__(self):
        self.real = 1

    def __getattr__(self, name):
        if name.startswith("x_"):
            return len(name)
        raise AttributeError(name)


FALLBACK = Fallback()


def test_getattr_runs_only_when_lookup_fails():
    def fn(x):
        return x * FALLBACK.real + FALLBACK.x_abc, hasattr(FALLBACK, "x_q"), hasattr(FALLBACK, "y"), getattr(FALLBACK, "y", 5)
    same_as_eager(fn, one())


class Both:
    def __getattribute__(self, name):
        if name == "broken":
            raise AttributeError(name)
        return object.__getattribute__(self, name)

    def __getattr__(self, name):
        return 11


def test_getattr_after_getattribute_raises():
    obj = Both()

    def fn(x):
        return x + obj.broken
    same_as_eager(fn, one())


class Meta(type):
    @property
    def registry_size(cls):
        return len(cls.members)


class Registered(metaclass=Meta):
    members = [1, 2, 3]


def test_metaclass_property_on_a_class():
    def fn(x):
        return x * Registered.registry_size, Registered.__name__
    same_as_eager(fn, one())


# ---------------------------------------------------------------- guard loads keyed by non-strings (M10)

WEIGHTS = {0: 2.0, 1: 3.0, (2, "a"): 4.0}


def test_dict_with_int_and_tuple_keys_is_read_and_guarded():
    def fn(x):
        return x * WEIGHTS[0] + WEIGHTS[1] * len(WEIGHTS) + WEIGHTS[(2, "a")]

    cfn, cnt = compiled(fn)
    x = torch.ones(2)
    assert torch.equal(cfn(x), fn(x))
    assert torch.equal(cfn(x), fn(x))
    WEIGHTS[1] = 10.0
    try:
        assert torch.equal(cfn(x), fn(x)), "a stale dict value"
    finally:
        WEIGHTS[1] = 3.0
    assert cnt.frame_count == 2
    assert cdynamo.stats()["frames_native"] == 0


# ---------------------------------------------------------------- dict subclasses, own __setattr__, dataclasses (M6)

import collections  # noqa: E402
import dataclasses  # noqa: E402
from typing import Optional  # noqa: E402


class Registry(dict):
    def __setitem__(self, key, value):
        super().__setitem__(str(key), value)

    def get(self, key, default=None):
        return super().get(str(key), default)


def test_dict_subclass_from_the_program_reads_through_super():
    reg = Registry()
    reg["k"] = 2.0
    reg[3] = 5.0

    def fn(x):
        return x * reg.get("k") + reg.get(3) + len(reg) + ("k" in reg) + reg["3"], list(reg), dict(reg.items())
    same_as_eager(fn, one())


def test_dict_subclass_from_the_program_mutated_in_the_trace():
    def fn(x, reg):
        reg[7] = 1.5
        dict.__setitem__(reg, "raw", 2)
        return x * reg.get(7) + reg["raw"]
    same_as_eager(fn, lambda: (torch.randn(3), Registry(a=1)))


class Output(collections.OrderedDict):
    """A reduced transformers ModelOutput: an OrderedDict subclass filled by a dataclass
    __init__ through its own __setattr__/__setitem__."""

    def __post_init__(self):
        for f in dataclasses.fields(self):
            v = self.__dict__.get(f.name)
            if v is not None:
                self[f.name] = v

    def __setattr__(self, name, value):
        if value is not None and name in {f.name for f in dataclasses.fields(self)}:
            super().__setitem__(name, value)
        super().__setattr__(name, value)

    def __setitem__(self, key, value):
        super().__setitem__(key, value)
        super().__setattr__(key, value)

    def __getitem__(self, k):
        if isinstance(k, str):
            return dict(self.items())[k]
        return self.to_tuple()[k]

    def to_tuple(self):
        return tuple(self[k] for k in self.keys())


@dataclasses.dataclass
class EncoderOutput(Output):
    last_hidden_state: Optional[torch.Tensor] = None
    hidden_states: Optional[tuple] = None
    attentions: Optional[tuple] = None


def check_output(got, expected):
    assert type(got) is type(expected)
    assert list(got.keys()) == list(expected.keys())
    for k in expected:
        torch.testing.assert_close(got[k], expected[k])
    assert vars(got).keys() == vars(expected).keys()
    for f in dataclasses.fields(expected):
        a, b = getattr(expected, f.name), getattr(got, f.name)
        assert (a is None) == (b is None)


def test_ordered_dict_subclass_dataclass_made_and_returned():
    def fn(x):
        out = EncoderOutput(last_hidden_state=x * 2, hidden_states=(x + 1,))
        first = out[0] + out["last_hidden_state"] + out.to_tuple()[1][0]
        return first, out

    cfn, cnt = compiled(fn)
    x = torch.randn(3)
    expected = fn(x)
    for _ in range(2):
        got = cfn(x)
        torch.testing.assert_close(got[0], expected[0])
        check_output(got[1], expected[1])
    st = cdynamo.stats()
    assert st["frames_native"] == 0 and st["graph_breaks"] == 0, st["graph_break_reasons"]
    assert cnt.frame_count == 1


class KVCache:
    def __init__(self):
        self.layers = []


def test_dict_subclass_item_that_is_also_an_attribute_is_one_object():
    # A ModelOutput's field is both an item and an attribute: a list or an object made in
    # the trace is rebuilt once and reachable from both (GPT-2's past_key_values, a cache
    # object, raised "cannot rebuild a container that contains itself" at run time).
    def fn(x):
        cache = KVCache()
        cache.layers.append(x * 3)
        out = EncoderOutput(last_hidden_state=x * 2, hidden_states=[x + 1, x + 2], attentions=cache)
        return out, cache

    cfn, cnt = compiled(fn)
    x = torch.randn(3)
    expected, expected_cache = fn(x)
    for _ in range(2):
        got, got_cache = cfn(x)
        assert type(got) is EncoderOutput and list(got.keys()) == list(expected.keys())
        torch.testing.assert_close(got["last_hidden_state"], expected["last_hidden_state"])
        torch.testing.assert_close(got["hidden_states"], expected["hidden_states"])
        assert vars(got).keys() == vars(expected).keys()
        assert got.hidden_states is got["hidden_states"]
        assert got.attentions is got["attentions"] is got_cache
        torch.testing.assert_close(got_cache.layers[0], expected_cache.layers[0])
    st = cdynamo.stats()
    assert st["frames_native"] == 0 and st["graph_breaks"] == 0, st["graph_break_reasons"]
    assert cnt.frame_count == 1


class Counter(dict):
    pass


def test_plain_dict_subclass_made_in_the_trace():
    def fn(x):
        c = Counter(a=1)
        c["b"] = 2
        c.update(z=3)
        total = sum(c.values()) + len(c)
        return x * total, c, "b" in c, [k for k in c]
    same_as_eager(fn, one())


@dataclasses.dataclass
class Settings:
    scale: float
    shift: float = 0.0

    def __setattr__(self, name, value):
        super().__setattr__(name, float(value))


@dataclasses.dataclass(frozen=True)
class Frozen:
    a: int
    b: int = 2


def test_dataclasses_with_own_setattr_and_frozen():
    def fn(x):
        s = Settings(2, shift=1)
        f = Frozen(3)
        return x * s.scale + s.shift + f.a * f.b, type(s.scale)
    same_as_eager(fn, one())


def test_tuple_subclass_equality_is_not_identity():
    class Pair(tuple):
        pass

    def fn(x, a, b):
        return x + 1 if a == b else x - 1

    cfn, _ = compiled(fn)
    x = torch.zeros(2)
    assert torch.equal(cfn(x, Pair([1, 2]), Pair([1, 2])), fn(x, Pair([1, 2]), Pair([1, 2])))


class Validated:
    """A class from the program with its own __setattr__ (huggingface_hub's strict
    dataclasses, transformers' configs): the store is traced through it, and replayed as
    object.__setattr__ (the class's __setattr__ does not run twice)."""

    def __init__(self):
        object.__setattr__(self, "stores", 0)
        self.v = 1

    def __setattr__(self, name, value):
        object.__setattr__(self, "stores", self.stores + 1)
        super().__setattr__(name, value * 2)


def test_own_setattr_of_an_object_from_the_program():
    def fn(x, obj):
        obj.v = 3
        return x * obj.v + obj.stores

    cfn, cnt = compiled(fn)
    for _ in range(2):
        eager_obj, comp_obj = Validated(), Validated()
        x = torch.randn(3)
        expected = fn(x, eager_obj)
        got = cfn(x, comp_obj)
        torch.testing.assert_close(got, expected)
        assert vars(comp_obj) == vars(eager_obj), (vars(comp_obj), vars(eager_obj))
    assert cnt.frame_count == 1
    assert cdynamo.stats()["graph_breaks"] == 0


import threading  # noqa: E402


class Local(threading.local):
    pass


def test_c_getattribute_of_a_builtin_base_is_read_for_real():
    loc = Local()
    loc.scale = 3

    def fn(x):
        return x * loc.scale
    same_as_eager(fn, one(), expect_graphs=1)


# ---------------------------------------------------------------- delattr on objects from the program

class Bag:
    kind = "class level"


def bag():
    b = Bag()
    b.a, b.t = 2, torch.ones(3)
    return b


def test_del_attr_of_an_object_from_the_program_is_replayed():
    # `del obj.t` / delattr(): replayed after the graph; reads later in the trace see the
    # attribute gone (hasattr False, the class attribute visible again), then stored again.
    def fn(x, b):
        y = x + b.t
        del b.t
        gone = hasattr(b, "t")
        b.t = y * 2
        b.kind = "instance"
        before = b.kind
        delattr(b, "kind")
        delattr(b, "a")
        return y, gone, before, b.kind, hasattr(b, "a")
    same_as_eager(fn, lambda: (torch.randn(3), bag()), expect_graphs=1)


def test_del_attr_absent_raises_attribute_error():
    def fn(x, b):
        try:
            del b.missing
        except AttributeError:
            return x + 1
        return x - 1
    same_as_eager(fn, lambda: (torch.randn(3), bag()), expect_graphs=1)


class Tracked:
    def __init__(self):
        object.__setattr__(self, "deletes", 0)
        self.v = 1

    def __delattr__(self, name):
        object.__setattr__(self, "deletes", self.deletes + 1)
        super().__delattr__(name)


def test_own_delattr_of_an_object_from_the_program_is_inlined():
    def fn(x, obj):
        del obj.v
        return x * obj.deletes, hasattr(obj, "v")
    same_as_eager(fn, lambda: (torch.randn(3), Tracked()), expect_graphs=1)


class PropDel:
    def __init__(self):
        self._p = 5

    @property
    def p(self):
        return self._p

    @p.deleter
    def p(self):
        del self._p


def test_property_deleter_of_an_object_from_the_program():
    def fn(x, obj):
        del obj.p
        return x + 1, hasattr(obj, "_p")
    same_as_eager(fn, lambda: (torch.randn(3), PropDel()), expect_graphs=1)


def test_module_parameter_deleted_and_replaced_in_a_pre_hook():
    # A parameter swapped for a tensor around the module's forward (the pattern of
    # weight-norm style hooks): nn.Module.__delattr__ and __setattr__ are replayed in order,
    # so the parameter is back in _parameters and the temporary gone afterwards.
    def pre(mod, args):
        w = mod.weight
        mod._saved = w
        del mod.weight
        mod.weight = w * 2

    def post(mod, args, out):
        del mod.weight
        mod.weight = mod._saved
        del mod._saved

    def make():
        torch.manual_seed(0)
        m = torch.nn.Linear(3, 2)
        m.register_forward_pre_hook(pre)
        m.register_forward_hook(post)
        return m

    def fn(x, m):
        return m(x)

    # One module per side, called twice (hook handles are numbered per registration, so a
    # fresh module is a new set of hook dict keys: a recompile for torch._dynamo too).
    eager_m, comp_m = make(), make()
    cfn, cnt = compiled(fn)
    for _ in range(2):
        x = torch.randn(3)
        expected = fn(x, eager_m)
        got = cfn(x, comp_m)
        torch.testing.assert_close(got, expected)
        assert_same(eager_m, comp_m)
        assert list(dict(comp_m.named_parameters())) == ["bias", "weight"]
        assert "_saved" not in vars(comp_m) and "weight" not in vars(comp_m)
    assert cnt.frame_count == 1 and cnt.op_count >= 2
    assert cdynamo.stats()["cache_hits"] == 1 and cdynamo.stats()["graph_breaks"] == 0


def test_module_attribute_deleted_in_the_trace_is_not_read_again():
    def fn(x, m):
        m.extra = x * 3
        del m.extra
        return x + 1, hasattr(m, "extra"), hasattr(m, "bias")
    same_as_eager(fn, lambda: (torch.randn(3), torch.nn.Linear(3, 3)), expect_graphs=1)


def test_del_attr_of_objects_made_in_the_trace():
    # DELETE_ATTR on objects the trace made, through a class's own __delattr__ reaching
    # object.__delattr__ by super(), returned to the caller without the attribute.
    def fn(x):
        b, t = Bag(), Tracked()
        b.a = x + 1
        b.c = 2
        del b.a
        del t.v
        return x * 2, b, t, hasattr(b, "a"), t.deletes
    same_as_eager(fn, one(), expect_graphs=1)
