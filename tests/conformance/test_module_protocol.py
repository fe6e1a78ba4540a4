"""nn.Module classes as Python classes: their own special methods (__getitem__, __len__,
__bool__, __eq__) traced with the class attribute guarded, a @staticmethod forward, and
lazy modules (torch.nn.modules.lazy) initialised on their first call inside a trace as
torch._dynamo does (docs/conformance.md: module-attrs, module-hooks). Each compared with
eager on a first call and a cache hit, graph counts against torch._dynamo.
"""
from typing import NamedTuple

import torch
import torch._dynamo
import torch._dynamo.testing
from torch.nn.modules.lazy import LazyModuleMixin

import cdynamo
import cdynamo.testing

from .harness import same_as_eager


def one(*shape):
    return lambda: (torch.randn(*shape or (4,)),)


# ---------------------------------------------------------------- special methods

class Layers(torch.nn.Module):
    """A module indexed by name, with a length of its own."""

    def __init__(self):
        super().__init__()
        self.inner = torch.nn.ModuleDict({"a": torch.nn.Linear(4, 4), "b": torch.nn.ReLU()})
        self.scales = torch.nn.ParameterDict({"s": torch.nn.Parameter(torch.full((4,), 3.0))})

    def __getitem__(self, key):
        return self.inner[key]

    def __len__(self):
        return len(self.inner) + 5

    def forward(self, x):
        x = self["b"](self["a"](x)) * self.scales["s"]
        return x + len(self)


def test_module_class_getitem_and_len_are_traced():
    m = Layers()
    same_as_eager(lambda x: m(x), one())


class Flagged(torch.nn.Module):
    def __init__(self, on):
        super().__init__()
        self.on = on

    def __bool__(self):
        return self.on


class Sized(torch.nn.Module):
    def __init__(self, n):
        super().__init__()
        self.n = n

    def __len__(self):
        return self.n


def test_truth_of_a_module_uses_its_class_bool_then_len():
    flagged, empty, plain = Flagged(False), Sized(0), torch.nn.ReLU()

    def fn(x):
        a = x + 1 if flagged else x - 1
        b = a * 2 if empty else a * 3
        return b + 5 if plain else b
    same_as_eager(fn, one())


def test_truth_of_a_module_follows_its_state():
    # __bool__ reads an attribute: changing it after compiling must not give a stale branch.
    flagged = Flagged(True)

    def fn(x):
        return x + 1 if flagged else x - 1
    cdynamo.reset()
    cnt = cdynamo.testing.CompileCounter()
    cfn = cdynamo.compile(fn, backend=cnt)
    x = torch.zeros(2)
    assert torch.equal(cfn(x), fn(x))
    flagged.on = False
    assert torch.equal(cfn(x), fn(x))
    assert torch.equal(cfn(x), fn(x))
    assert cnt.frame_count == 2


class Pair(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.l0 = torch.nn.Linear(4, 4)
        self.l1 = torch.nn.Linear(4, 4)

    @property
    def layers(self):
        return [self.l0, self.l1]

    def forward(self, x):
        out = x
        for layer in self.layers:
            out = layer(out)
            out = out.relu() if layer == self.l0 else out.sigmoid()
            out = out + 1 if layer != self.l1 else out
        return out


def test_modules_compare_by_identity():
    m = Pair()
    same_as_eager(lambda x: m(x), one())


class Tagged(torch.nn.Module):
    def __init__(self, tag):
        super().__init__()
        self.tag = tag

    def __eq__(self, other):
        return isinstance(other, Tagged) and other.tag == self.tag

    __hash__ = torch.nn.Module.__hash__


def test_module_class_eq_is_traced():
    a, b, c = Tagged(1), Tagged(1), Tagged(2)

    def fn(x):
        y = x + 1 if a == b else x - 1
        return y * 2 if a != c else y * 3
    same_as_eager(fn, one())


def test_module_class_getitem_patched_later_recompiles():
    class Box(torch.nn.Module):
        def __getitem__(self, k):
            return k + 1

    box = Box()

    def fn(x):
        return x * box[1]
    cdynamo.reset()
    cnt = cdynamo.testing.CompileCounter()
    cfn = cdynamo.compile(fn, backend=cnt)
    x = torch.ones(2)
    assert torch.equal(cfn(x), fn(x))
    Box.__getitem__ = lambda self, k: k + 10
    assert torch.equal(cfn(x), fn(x)), "stale __getitem__ after patching the class"
    assert cnt.frame_count == 2


class StaticForward(torch.nn.Module):
    @staticmethod
    def forward(x):
        return x * torch.sigmoid(x)


def test_static_method_forward_is_called_without_self():
    m = torch.nn.Sequential(torch.nn.Linear(4, 4), StaticForward())
    same_as_eager(lambda x: m(x) + 1, one())


# ---------------------------------------------------------------- lazy modules

class LazyMLP(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.fc1 = torch.nn.LazyLinear(8)
        self.fc2 = torch.nn.LazyLinear(2)

    def forward(self, x):
        return self.fc2(self.fc1(x).relu())


class Record(NamedTuple):
    items: list
    extra: torch.Tensor


class LazyFromRecord(LazyModuleMixin, torch.nn.Module):
    """Initialises from a namedtuple holding a list of tensors; makes a lazy child."""

    def initialize_parameters(self, rec):
        with torch.no_grad():
            self.w = torch.nn.Parameter(torch.full(rec.items[0].shape, 0.5))
            self.child = torch.nn.LazyLinear(3)

    def forward(self, rec):
        return self.child(sum(rec.items) * self.w + rec.extra)


def paired(make):
    torch.manual_seed(0)
    a = make()
    torch.manual_seed(0)
    b = make()
    return a, b


def dynamo_frames(make, call):
    torch._dynamo.reset()
    torch.manual_seed(0)
    m = make()
    cnt = torch._dynamo.testing.CompileCounter()
    opt = torch._dynamo.optimize(cnt)(call)
    opt(m)
    opt(m)
    torch._dynamo.reset()
    return cnt.frame_count


def check_lazy(make, make_args):
    eager_m, compiled_m = paired(make)
    args = make_args()

    def call(m):
        return m(*args)

    cdynamo.reset()
    cnt = cdynamo.testing.CompileCounter()
    ccall = cdynamo.compile(call, backend=cnt)
    for what in ("first call", "cache hit"):
        torch.manual_seed(3)  # the parameters are made (randomly) on the first call
        expected = call(eager_m)
        torch.manual_seed(3)
        got = ccall(compiled_m)
        torch.testing.assert_close(got, expected, msg=f"{what}: compiled differs from eager")
    assert type(compiled_m) is type(eager_m)
    assert [n for n, _ in compiled_m.named_parameters()] == [n for n, _ in eager_m.named_parameters()]
    st = cdynamo.stats()
    assert st["frames_native"] == 0 and st["graph_breaks"] == 0, st["native_frames"]
    assert st["cache_hits"] >= 1
    assert cnt.frame_count == dynamo_frames(make, call) == 1
    return ccall, cnt, args


def test_lazy_submodules_initialise_inside_the_trace():
    ccall, cnt, args = check_lazy(LazyMLP, lambda: (torch.randn(5, 6),))
    # Another, uninitialised instance: its class is still the lazy one (the guard follows
    # the class the first one became), so it compiles again and initialises too.
    torch.manual_seed(1)
    other = LazyMLP()
    torch.manual_seed(1)
    ref = LazyMLP()
    before = cnt.frame_count
    for _ in range(2):
        torch.manual_seed(4)
        got = ccall(other)
        torch.manual_seed(4)
        torch.testing.assert_close(got, ref(*args))
    assert cnt.frame_count == before + 1
    assert isinstance(other.fc1, torch.nn.Linear) and not isinstance(other.fc1, LazyModuleMixin)


def test_lazy_module_with_namedtuple_of_list_input_and_a_lazy_child():
    def args():
        torch.manual_seed(2)
        return (Record([torch.randn(3, 4), torch.randn(3, 4)], torch.randn(3, 4)),)
    check_lazy(LazyFromRecord, args)


def test_compiled_lazy_module_initialises_on_its_first_call():
    eager_m, compiled_m = paired(LazyMLP)
    cdynamo.reset()
    cnt = cdynamo.testing.CompileCounter()
    opt = cdynamo.compile(compiled_m, backend=cnt, fullgraph=True)
    x = torch.randn(3, 7)
    for _ in range(2):
        torch.manual_seed(5)
        got = opt(x)
        torch.manual_seed(5)
        torch.testing.assert_close(got, eager_m(x))
    assert cnt.frame_count == 1
    assert compiled_m.fc1.weight.shape == (8, 7)


# ---------------------------------------------------------------- dicts keyed by modules

def test_dict_keyed_by_modules_is_read_by_identity():
    net = Pair()
    other = torch.nn.ReLU()
    weights = {net: 10, net.l0: 20, net.l1: 30}

    def fn(x):
        for i, m in enumerate(net.modules()):
            x = x + weights[m] * (i + 1)
        x = x + weights.get(other, 5)
        return x * 2 if net.l0 in weights and other not in weights else x
    same_as_eager(fn, one())


def test_dict_keyed_by_modules_changed_after_compiling():
    net = Pair()
    weights = {net.l0: 2.0, net.l1: 3.0}

    def fn(x):
        return x * weights[net.l0] + weights[net.l1]
    cdynamo.reset()
    cnt = cdynamo.testing.CompileCounter()
    cfn = cdynamo.compile(fn, backend=cnt)
    x = torch.ones(2)
    assert torch.equal(cfn(x), fn(x))
    weights[net.l0] = 7.0  # a value changed
    assert torch.equal(cfn(x), fn(x))
    del weights[net.l1]  # a key gone: eagerly a KeyError
    try:
        fn(x)
    except KeyError:
        pass
    else:
        raise AssertionError("eager did not raise")
    try:
        cfn(x)
    except KeyError:
        pass
    else:
        raise AssertionError("compiled did not raise")
    weights[net.l1] = 1.0
    assert torch.equal(cfn(x), fn(x))
    assert torch.equal(cfn(x), fn(x))


def test_iterating_a_dict_keyed_by_modules():
    net = Pair()
    weights = {net.l0: 2.0, net.l1: 3.0}

    def fn(x):
        for m, w in weights.items():
            x = m(x) * w
        return x
    same_as_eager(fn, one(3, 4))


# ---------------------------------------------------------------- containers decided by type

class Sequential(torch.nn.Module):
    """Named like torch's container, but not one: its own indexing and length decide."""

    def __init__(self):
        super().__init__()
        self.first = torch.nn.Linear(4, 4)
        self.second = torch.nn.Linear(4, 4)

    def __getitem__(self, i):
        return self.second if i == 0 else self.first

    def __len__(self):
        return 7


class Backwards(torch.nn.ModuleList):
    """A ModuleList subclass that overrides indexing and length."""

    def __getitem__(self, i):
        return self._modules[str(len(self._modules) - 1 - i)]

    def __len__(self):
        return 1


def test_module_containers_are_decided_by_type_not_name():
    lookalike = Sequential()
    backwards = Backwards([torch.nn.Linear(4, 4), torch.nn.ReLU()])
    real = torch.nn.Sequential(torch.nn.Linear(4, 4), torch.nn.Tanh())
    named = torch.nn.ModuleDict({"a": torch.nn.ReLU(), "b": torch.nn.Sigmoid()})

    def fn(x):
        y = lookalike[0](x) + len(lookalike) + backwards[0](x) + len(backwards)
        y = y + real[1](real[0](x)) + len(real) + named["b"](x)
        return y, "a" in named, "c" in named, bool(real)
    same_as_eager(fn, one())


# ---------------------------------------------------------------- modules made in the trace

class Cache(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.key_cache = [0]
        self.bool_invoked = 0

    def __bool__(self):
        self.bool_invoked += 1
        return len(self.key_cache) > 0


class Sized2(torch.nn.Module):
    def __init__(self, n):
        super().__init__()
        self.n = n

    def __len__(self):
        return self.n


class Pairwise(torch.nn.Module):
    def forward(self, x, y):
        return torch.nn.ReLU()(torch.cat((x, y), dim=1))


def two(*shape):
    return lambda: (torch.randn(*shape or (2, 3)), torch.randn(*shape or (2, 3)))


def test_module_made_in_the_trace_branches_on_its_bool_and_escapes():
    # Its __init__ (nn.Module's included) and __bool__ traced; returned, it is a real
    # module of its class with the state the trace left (bool_invoked == 1).
    def fn(x):
        cache = Cache()
        if cache:
            return x + 1, cache
        return x + 2, cache
    same_as_eager(fn, one())


def test_module_made_in_the_trace_branches_on_its_len():
    def fn(x):
        return (x + 1 if Sized2(2) else x - 1), (x * 2 if Sized2(0) else x * 3)
    same_as_eager(fn, one())


def test_modules_made_and_called_in_the_trace():
    # torch's own classes (ReLU, Softmax) and the program's, called: Module.__call__ and
    # forward inlined into the one graph.
    def fn(x, y):
        return torch.nn.Softmax(dim=-1)(x + y * 2), Pairwise()(x, y)
    same_as_eager(fn, two())


def test_module_made_in_the_trace_passed_through_a_partial():
    import functools

    def use(mod, x, y):
        return mod(x, y)

    def fn(x, y):
        return functools.partial(use, mod=Pairwise())(x=x, y=y) + functools.partial(use, mod=Pairwise().forward)(x=x, y=y)
    same_as_eager(fn, two())


# ---------------------------------------------------------------- slices of containers

def test_slices_of_containers_are_containers_of_their_class():
    # Sequential[1:] is a Sequential and ModuleList[::-1] a ModuleList, as eagerly: called,
    # measured, iterated and returned (a plain list here was a TypeError on the call).
    seq = torch.nn.Sequential(torch.nn.Linear(4, 4), torch.nn.ReLU(), torch.nn.Linear(4, 2))
    layers = torch.nn.ModuleList([torch.nn.Linear(4, 4), torch.nn.Tanh(), torch.nn.Sigmoid()])

    def fn(x):
        tail = seq[1:]
        y = tail(seq[0](x))
        for layer in layers[::-1]:
            x = layer(x)
        return y, x, len(tail), type(layers[1:]).__name__, seq[:2]
    same_as_eager(fn, one(3, 4))
