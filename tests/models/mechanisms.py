"""Minimal repros of what keeps real models out of one graph, one per mechanism.

Each case is a function of tensors (or a module) that uses one Python construct the way
timm or transformers does, without importing either. `check(case)` runs it eagerly,
under cdynamo (counting backend; first call and a cache hit) and under torch._dynamo in
the same process, and asserts what every real model must meet: outputs equal eager's, no more graphs
than torch._dynamo, no graph break where torch._dynamo has none, no native frame.
test_mechanisms.py runs every case (the crashing ones in a subprocess); the diagnosis of
each, with the C++ location and torch._dynamo's rule, is in the case's `why` and in
/work/helpers/models-rootcauses.md.

    python tests/models/mechanisms.py CASE     # one case, in this process (used for crashes)
"""
import collections
import collections.abc
import copy
import dataclasses
import enum
import inspect
import sys
from typing import Optional

import torch

import cdynamo
from cdynamo.testing import CompileCounter

CASES = {}


def case(name, why, crash=False, models=()):
    """Registers `make() -> (fn, args)`; `why` is the diagnosis at the current commit."""
    def register(make):
        CASES[name] = dict(make=make, why=why, crash=crash, models=models, name=name)
        return make

    return register


def same(a, b, path="out"):
    """Asserts that a compiled result equals eager's (tensors, containers, plain values)."""
    if isinstance(a, torch.Tensor):
        assert isinstance(b, torch.Tensor), f"{path}: {type(b).__name__} instead of a tensor"
        torch.testing.assert_close(b, a, msg=lambda m: f"{path}: {m}")
    elif isinstance(a, dict):
        assert type(a) is type(b) and list(a) == list(b), f"{path}: {a!r} vs {b!r}"
        for k in a:
            same(a[k], b[k], f"{path}[{k!r}]")
    elif isinstance(a, (list, tuple)):
        assert type(a) is type(b) and len(a) == len(b), f"{path}: {type(a).__name__}/{len(a)} vs {b!r}"
        for i, (x, y) in enumerate(zip(a, b)):
            same(x, y, f"{path}[{i}]")
    elif dataclasses.is_dataclass(a) and not isinstance(a, type):
        assert type(a) is type(b), f"{path}: {type(b).__name__}"
        for f in dataclasses.fields(a):
            same(getattr(a, f.name), getattr(b, f.name), f"{path}.{f.name}")
    else:
        assert a == b, f"{path}: {a!r} vs {b!r}"


def check(name):
    c = CASES[name]
    fn, calls = c["make"]()
    expected = [fn(*args) for args in calls]

    cdynamo.reset()
    cnt = CompileCounter()
    compiled = cdynamo.compile(fn, backend=cnt)
    got = [compiled(*args) for args in calls]
    hit = compiled(*calls[-1])  # a cache hit of the last inputs
    stats = cdynamo.stats()

    torch._dynamo.reset()
    from torch._dynamo.testing import CompileCounter as DynamoCounter
    from torch._dynamo.utils import counters

    counters.clear()
    dcnt = DynamoCounter()
    dgot = [torch.compile(fn, backend=dcnt)(*args) for args in calls]
    dynamo_breaks = sum(counters["graph_break"].values())
    torch._dynamo.reset()

    for e, d in zip(expected, dgot):
        same(e, d, "torch._dynamo")  # the reference agrees with eager
    assert dcnt.frame_count >= 1, "torch._dynamo captured nothing: the case does not test capture"
    problems = []
    for i, (e, g) in enumerate(zip(expected, got)):
        try:
            same(e, g, f"call {i}")
        except AssertionError as err:
            problems.append(f"wrong result: {err}")
    try:
        same(expected[-1], hit, "cache hit")
    except AssertionError as err:
        problems.append(f"wrong result: {err}")
    if cnt.frame_count > dcnt.frame_count:
        problems.append(f"{cnt.frame_count} graphs, torch._dynamo {dcnt.frame_count}")
    if stats["graph_breaks"] > dynamo_breaks:
        reasons = sorted({b["reason"] for b in stats["graph_break_reasons"]})
        problems.append(f"{stats['graph_breaks']} graph breaks (torch._dynamo {dynamo_breaks}): {reasons}")
    if stats["native_frames"]:
        problems.append(f"native frames: {sorted({n['reason'] for n in stats['native_frames']})}")
    if cnt.frame_count == 0:
        problems.append("nothing was captured")
    assert not problems, "\n".join(problems)


# ---- torch functions called without tensor arguments ------------------------------------

@case("torch_assert_on_bool", models=("timm: all but resnet18/convnext (norm_act, patch_embed, vit)",),
      why="torch._assert(bool) calls torch._C._has_torch_function((cond,)): no tensor argument, not on "
          "isPureTorchQuery's name list (calls.cpp Tracer::call, Kind::Callable, isTorchFunction && !anyTensor) "
          "-> break")
def _():
    def f(x):
        y = x * 2
        torch._assert(x.dim() == 2, "expected a matrix")
        return y + 1

    return f, [(torch.randn(3, 4),)]


@case("jit_is_tracing", models=("bert", "distilbert", "llama", "gpt2", "t5", "bart"),
      why="torch.jit.is_tracing() calls torch._C._is_tracing(): a pybind11 builtin without tensor arguments, not "
          "on the list -> break, and the reason prints its __qualname__ (a garbled pybind11 record name)")
def _():
    def f(x):
        y = x * 2
        if torch.jit.is_tracing():
            y = y - 1
        return y + 1

    return f, [(torch.randn(3),)]


# ---- class attributes and descriptors -----------------------------------------------------

class Action(enum.Enum):
    NONE = "none"
    NOTIFY = "notify"
    RAISE = "raise"


@case("enum_member_class_attribute", models=("bert", "distilbert", "llama", "gpt2", "t5", "bart"),
      why="Action.NONE: objectGetAttr (objects.cpp) finds an Enum instance in the class dict; it is no function, "
          "static/classmethod, constant or type -> 'class attribute of type Action is not supported yet'")
def _():
    def f(x):
        action = Action.NONE
        y = x * 2
        if action == Action.RAISE:
            y = y - 1
        return y + 1

    return f, [(torch.randn(3),)]


@case("enum_membership_of_inputs", models=("bert", "distilbert", "llama"),
      why="enum members passed in are Kind::Object (guarded by type only); `a in (b, c)` goes to the tuple's "
          "count(), whose sameValue (containers.cpp) only decides constants and tensors -> break "
          "'.count() needs comparisons known at trace time'")
def _():
    def f(x, action, a, b):
        y = x * 2
        if action in (a, b):
            y = y - 1
        return y + 1

    return f, [(torch.randn(3), Action.NOTIFY, Action.NOTIFY, Action.RAISE)]


class Scaled(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.lin = torch.nn.Linear(4, 4)

    def forward(self, x):
        name = self.__class__.__name__
        y = self.lin(x)
        if name == "Scaled":
            y = y + 1
        return y * 3


@case("module_dunder_class", models=("bert", "llama", "distilbert", "gpt2", "t5", "bart"),
      why="self.__class__ on a module: Tracer::getAttr Kind::Module finds object.__class__ (a getset data "
          "descriptor) on the type and fails 'module attribute is a property or descriptor' before looking "
          "at what the descriptor is")
def _():
    m = Scaled()
    return m, [(torch.randn(2, 4),)]


class Checkpointed(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.lin = torch.nn.Linear(4, 4)

    def forward(self, x):
        if type(self).forward is Checkpointed.forward:
            return self.lin(x) + 1
        return self.lin(x)


@case("type_of_module_attribute", models=("bert", "llama", "distilbert", "gpt2", "t5", "bart"),
      why="type(self).forward: type(module) is a Callable of a module class; getAttr's Callable branch sends "
          "heap types to objectGetAttr except module classes (!isModuleClass), then PyObject_GetAttr gives a "
          "function, which is no constant -> 'attribute forward of a callable is not supported yet'")
def _():
    return Checkpointed(), [(torch.randn(2, 4),)]


class WithStatic(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.lin = torch.nn.Linear(4, 4)

    @staticmethod
    def scale(t):
        return t * 3

    def forward(self, x):
        return self.scale(self.lin(x)) + 1


@case("module_staticmethod", models=(),
      why="self.scale with scale a staticmethod of a module class: getAttr Kind::Module handles only plain "
          "functions and constants found on the type -> 'module class attribute of type staticmethod'")
def _():
    return WithStatic(), [(torch.randn(2, 4),)]


class Registry(dict):
    def __setitem__(self, key, value):
        super().__setitem__(str(key), value)

    def get(self, key):
        return super().get(str(key)) or {}


REGISTRY = Registry()
REGISTRY["k"] = {"scale": 2.0}


@case("dict_subclass_super_method", models=("bert", "llama", "distilbert", "gpt2", "t5", "bart"),
      why="super().get(...) in a dict subclass: objectGetAttr finds dict.get, a method_descriptor of the builtin "
          "base -> fail; the failing instruction is LOAD_METHOD, where graph_break.cpp cannot break, so the "
          "whole frame runs natively ('no graph break is possible there')")
def _():
    def f(x):
        y = x * 2
        conf = REGISTRY.get("k")
        return y * conf["scale"]

    return f, [(torch.randn(3),)]


# ---- objects made in the trace ------------------------------------------------------------

class Output(collections.OrderedDict):
    """transformers' ModelOutput, reduced: an OrderedDict subclass filled by a dataclass
    __init__ through its own __setattr__/__setitem__."""

    def __post_init__(self):
        for f in dataclasses.fields(self):
            v = getattr(self, f.name)
            if v is not None:
                self[f.name] = v

    def __setattr__(self, name, value):
        if value is not None and name in self.__dataclass_fields__:
            super().__setitem__(name, value)
        super().__setattr__(name, value)

    def __setitem__(self, key, value):
        super().__setitem__(key, value)
        super().__setattr__(key, value)

    def to_tuple(self):
        return tuple(self[k] for k in self.keys())


@dataclasses.dataclass
class EncoderOutput(Output):
    last_hidden_state: Optional[torch.Tensor] = None
    hidden_states: Optional[tuple] = None


@case("ordered_dict_subclass_dataclass", models=("bert", "llama", "distilbert", "gpt2", "t5", "bart"),
      why="EncoderOutput(...) is an OrderedDict subclass: newObject (objects.cpp) refuses classes with a builtin "
          "base ('custom __new__ or a builtin base'); its dataclass __init__ stores through the class's own "
          "__setattr__ ('a class with its own __setattr__'), which reaches dict.__setitem__/object.__setattr__ "
          "through super()")
def _():
    def f(x):
        out = EncoderOutput(last_hidden_state=x * 2)
        return out.to_tuple()[0] + 1, out["last_hidden_state"]

    return f, [(torch.randn(3),)]


@dataclasses.dataclass
class Settings:
    scale: float
    shift: float = 0.0

    def __setattr__(self, name, value):
        super().__setattr__(name, float(value))


@case("dataclass_own_setattr", models=("bert", "llama", "distilbert"),
      why="a class with its own __setattr__ made in the trace: storeAttr (objects.cpp) on a NewObject refuses "
          "any class whose __setattr__ is not object's instead of inlining it (its super().__setattr__ is "
          "object.__setattr__ on the new object)")
def _():
    def f(x):
        s = Settings(2, shift=1)
        return x * s.scale + s.shift

    return f, [(torch.randn(3),)]


def chunked(forward_fn, x):
    """transformers' apply_chunking_to_forward, reduced: counts the forward's parameters."""
    n = len(inspect.signature(forward_fn).parameters)
    assert n == 1
    return forward_fn(x)


class FFN(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.lin = torch.nn.Linear(4, 4)

    def ff_chunk(self, x):
        return self.lin(x).relu()

    def forward(self, x):
        return chunked(self.ff_chunk, x * 2) + 1


@case("inspect_signature_of_bound_method", models=("bert", "distilbert"),
      why="inspect.signature(self.ff_chunk) is traced into inspect.py; isinstance(obj, types.MethodType) on a "
          "Kind::Method value fails ('isinstance() of a value whose type is not known': typeOf returns null for "
          "Method), then len() of what remains fails")
def _():
    return FFN(), [(torch.randn(2, 4),)]


class Config:
    """transformers' PretrainedConfig, reduced: aliases resolved in __getattribute__."""
    attribute_map = {"num_layers": "n_layer"}

    def __init__(self):
        self.n_layer = 2

    def __getattribute__(self, key):
        if key != "attribute_map" and key in super().__getattribute__("attribute_map"):
            key = super().__getattribute__("attribute_map")[key]
        return super().__getattribute__(key)


CONFIG = Config()


@case("getattribute_override", models=("gpt2", "t5", "bart"),
      why="objectGetAttr ignores a class's own __getattribute__: config.num_layers is looked up as a plain "
          "attribute, is not found, and a spurious AttributeError is raised in the trace -- caught here by the "
          "program's own handler, so cdynamo returns a WRONG RESULT (0 layers)")
def _():
    def f(x):
        try:
            n = CONFIG.num_layers
        except AttributeError:
            n = 0
        return x * n

    return f, [(torch.randn(3),)]


SCALES = {0: 2.0, 1: 3.0}


@case("dict_item_int_keys", models=("t5", "bart"),
      why="a Python error left set: GuardProgram::load (guards/guard_program.cpp) shares loads by comparing names "
          "with PyUnicode_Compare, which raises TypeError (\"Can't compare int and int\") for the int keys of "
          "DictItem loads (made when the dict is wrapped) and leaves it pending; the next check of "
          "PyErr_Occurred() fails (here loadGlobal of the builtin len: 'global lookup: TypeError' at "
          "LOAD_GLOBAL, a native frame, as in T5/BART; or 'SystemError: ... returned a result with an "
          "exception set')")
def _():
    def f(x):
        scale = SCALES[0]  # wrapping SCALES makes a DictItem load per key
        n = len(SCALES)  # a builtin: loadGlobal checks PyErr_Occurred() when a name is not a global
        return x * scale * n

    return f, [(torch.randn(3),)]


class Hyper:
    def __init__(self):
        self.scale = 2.0
        self.shifts = [1.0, 2.0]


HYPER = Hyper()


@case("deepcopy_of_object", models=("t5", "bart"),
      why="copy.deepcopy (PreTrainedConfig.get_text_config of an encoder-decoder config) keys its memo by id(); "
          "builtins.cpp refuses id() ('id() depends on object addresses'). torch._dynamo inlines copy.deepcopy: "
          "id() of an object read from the program is its real id under an identity guard, of an object made in "
          "the trace a stand-in id usable as a key")
def _():
    def f(x):
        h = copy.deepcopy(HYPER)
        return x * h.scale + h.shifts[1]

    return f, [(torch.randn(3),)]


VALIDATORS = {int: lambda v: v * 2, float: lambda v: v + 1}


@case("dict_with_type_keys", models=("bart",),
      why="a dict read from the program whose keys are types (huggingface_hub's _BASIC_TYPE_VALIDATORS): the "
          "Dict model requires constant keys ('dict keys must be constants'); torch._dynamo keys its dicts by any "
          "hashable value whose hash is stable (types, functions, enum members, objects by identity)")
def _():
    def f(x):
        v = VALIDATORS.get(float)
        return x * v(1.0)

    return f, [(torch.randn(3),)]


class TextSettings:
    """A config-like object made in the trace and copied (transformers' get_text_config
    deep-copies an encoder-decoder config, renames keys with delattr/setattr)."""

    def __init__(self, scale):
        self.encoder_scale = scale
        self.shifts = [1.0, 2.0]
        self.extra = {"a": (1, [2, 3])}


@case("deepcopy_of_object_made_in_trace", models=("t5", "bart"),
      why="copy.deepcopy of an object made in the trace: id() of trace-made values as memo keys, "
          "object.__reduce_ex__(4) of a plain class, copyreg.__newobj__ -> object.__new__(cls), delattr of an "
          "attribute of the copy; the original keeps its state")
def _():
    def f(x):
        s = TextSettings(2.0)
        c = copy.deepcopy(s)
        c.shifts.append(5.0)
        c.extra["a"][1].append(4)
        value = getattr(c, "encoder_scale")
        delattr(c, "encoder_scale")
        setattr(c, "scale", value)
        gone = hasattr(c, "encoder_scale")
        try:
            delattr(c, "missing")
            missing = False
        except AttributeError:
            missing = True
        return (x * c.scale + len(c.shifts) + len(s.shifts) + len(c.extra["a"][1]) + len(s.extra["a"][1]),
                gone, missing, s.encoder_scale, c.extra["a"][0])

    return f, [(torch.randn(3),)]


@case("id_of_values", models=("t5", "bart"),
      why="id(): an object from the program has its real id (identity guarded); a value made in the trace a "
          "stand-in id, the same for the same value, distinct between values; a list made in the trace is never "
          "`is` a list from the program (copy.deepcopy's `y is not _nil` sentinel)")
def _():
    def f(x, sentinel=[]):  # noqa: B006
        a, b = [1], [1]
        memo = {id(a): "a", id(b): "b"}
        alias = a
        same = id(alias) == id(a) and id(a) != id(b) and id(HYPER) == id(HYPER)
        found = memo.get(id(a), sentinel)
        return x + len(memo), same, found, found is not sentinel, memo.get(id(sentinel), sentinel) is sentinel

    return f, [(torch.randn(3),)]


class CopyHook:
    def __init__(self, s):
        self.s = s

    def __deepcopy__(self, memo):
        return CopyHook(self.s + 1)


COPY_HOOK = CopyHook(2.0)


@case("deepcopy_of_containers_and_hook", models=(),
      why="copy.deepcopy of a nested constant list, of a dict in a counted loop, and of an object with its own "
          "__deepcopy__ (formerly graph-break cases: id() was refused)")
def _():
    def f(x):
        cfg = copy.deepcopy([1, [2, 3]])
        d = {"scale": 2}
        i = 0
        while i < 2:
            d = copy.deepcopy(d)
            d["scale"] += 1
            i += 1
        y = x.sin()
        c = copy.deepcopy(COPY_HOOK)
        return y * c.s + x * cfg[1][0] * d["scale"], COPY_HOOK.s

    return f, [(torch.randn(3),)]


HANDLERS = {int: lambda v: v * 2, float: lambda v: v + 1, collections.abc.Sequence: len, type(None): lambda v: 0}


@case("dict_keys_hashed_by_identity", models=("bart",),
      why="a dict keyed by types read from the program, iterated: its keys come back as the classes themselves "
          "(isinstance with them, calling the handler), and a dict made in the trace keyed by classes and "
          "functions")
def _():
    def f(x):
        total = 0.0
        for cls, handler in HANDLERS.items():
            if isinstance(2.5, cls):
                total += handler(2.5)
        made = {torch.Tensor: 1, f: 2}
        made[type(x)] = 3
        return x * total + made[torch.Tensor], len(made), list(made.values())

    return f, [(torch.randn(3),)]


@case("closure_cell_defined_after_break", models=("t5",),
      why="a local function that refers to itself (a cell), defined after a graph break: the resume function "
          "gets the frame's cell still empty and LOAD_CLOSURE read its contents ('free variable referenced before "
          "assignment' at LOAD_CLOSURE, a native frame: PreTrainedConfig.to_dict's to_list)")
def _():
    def f(x):
        y = x.sin()
        print("a break")

        def to_list(v):
            return [to_list(i) for i in v] if isinstance(v, tuple) else v

        return y + len(to_list((1, (2, 3)))), to_list((4, (5,)))

    return f, [(torch.randn(3),)]


# ---- crashes --------------------------------------------------------------------------------

class Layers:
    """A sequence whose iteration raises (as _PerLayerConfigView's __len__ does under cdynamo)."""

    def __init__(self, n):
        self.n = n

    def __iter__(self):
        if self.n < 0:
            raise ValueError("negative")
        yield from range(self.n)


@case("iter_dunder_raises", crash=True, models=("gpt2", "t5", "bart"),
      why="SEGFAULT: Tracer::getIter (ops.cpp) calls the user class's __iter__ through callDunder; when it raises "
          "(an exception of the traced program: null result, failed_ false) getIter recurses on the null value. "
          "In the models the exception is the spurious AttributeError of getattribute_override, raised inside "
          "collections.abc.Sequence.__iter__ of transformers' _PerLayerConfigView")
def _():
    def f(x):
        y = x * 2
        try:
            for i in Layers(-1):
                y = y + i
        except ValueError:
            y = y - 1
        return y + 1

    return f, [(torch.randn(3),)]


class Box:
    def __contains__(self, item):
        raise KeyError(item)


@case("contains_dunder_raises", crash=True, models=(),
      why="SEGFAULT (sibling of iter_dunder_raises): CONTAINS_OP (interpreter.cpp) on a user object calls "
          "__contains__ through callDunder and passes a null result (the method raised) to truthValue")
def _():
    def f(x):
        y = x * 2
        try:
            if 1 in Box():
                y = y + 1
        except KeyError:
            y = y - 1
        return y + 1

    return f, [(torch.randn(3),)]


# ---- graph construction and caching ---------------------------------------------------------

@case("augmented_assignment_to_int", models=("t5",),
      why="acc = 0; acc += t: INPLACE add of an int and a tensor is recorded with operator.iadd; FX codegen "
          "prints it as a statement `0 += mul` (a SyntaxError), the graph cannot be compiled and the frame runs "
          "natively (T5's relative position bucket)")
def _():
    def f(x):
        acc = 0
        acc += (x > 0).long() * 4
        return acc + 1

    return f, [(torch.randn(5),)]


CONV = torch.nn.Conv2d(3, 3, 3, padding=1)


@case("recompile_per_shape", models=("mobilenetv3_small_100", "efficientnet_b0"),
      why="fixed by automatic dynamic shapes: each small module (Conv2d.forward, BatchNormAct2d), a frame of "
          "its own after a break inside a block, is called with every feature-map size of the network; the "
          "recompile makes the dims that changed symbolic, as torch._dynamo does")
def _():
    def f(x):
        return CONV(x).relu()

    return f, [(torch.randn(1, 3, s, s),) for s in range(4, 14)]


if __name__ == "__main__":
    check(sys.argv[1])
    print("ok")
