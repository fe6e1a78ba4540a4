"""Side effects on state outside the arguments: globals, global containers and objects,
closure cells, class attributes, global tensors and modules. Each case resets that state
before every call and compares it after the compiled calls with what eager left."""
import copy

import pytest
import torch

from .harness import check, tensors

T4 = tensors((4,))

G = {"int": 0, "list": [], "dict": {}, "buf": torch.zeros(4)}
COUNT = 0
LAST = None


class Holder:
    pass


class Registry:
    calls = 0


HOLDER = Holder()
MOD = torch.nn.Linear(4, 4)


def _reset():
    global COUNT, LAST
    COUNT = 0
    LAST = None
    G["int"] = 0
    G["list"] = []
    G["dict"] = {}
    G["buf"] = torch.zeros(4)
    HOLDER.__dict__.clear()
    Registry.calls = 0
    MOD.train()
    torch.manual_seed(3)
    with torch.no_grad():
        MOD.weight.copy_(torch.randn(4, 4))
        MOD.bias.zero_()
    CELL_FN.__closure__[0].cell_contents = 0  # reset the closure's counter


def _snapshot():
    return copy.deepcopy({
        "COUNT": COUNT, "LAST": LAST, "G": G, "HOLDER": dict(HOLDER.__dict__),
        "Registry.calls": Registry.calls, "MOD.training": MOD.training,
        "MOD.weight": MOD.weight.detach().clone(),
    })


def _make_cell_fn():
    n = 0

    def bump(x):
        nonlocal n
        n += 1
        return x * n
    return bump


CELL_FN = _make_cell_fn()


def write_global_int(x):
    global COUNT
    COUNT += 1
    return x + COUNT


def write_global_tensor(x):
    global LAST
    LAST = x * 2
    return LAST + 1


def append_to_global_list(x):
    G["list"].append(x.sum())
    G["list"].append(len(G["list"]))
    return x + 1


def setitem_global_dict(x):
    G["dict"]["y"] = x.relu()
    G["int"] = G["int"] + 5
    return x - 1


def inplace_on_global_tensor(x):
    G["buf"].add_(x)
    return G["buf"] * 2


def setattr_on_global_object(x):
    HOLDER.value = x.cos()
    HOLDER.n = 3
    return x * HOLDER.n


def write_class_attribute(x):
    Registry.calls += 1
    return x * Registry.calls


def closure_cell_of_global_function(x):
    return CELL_FN(x) + CELL_FN(x)


def module_mode_switch_in_trace(x):
    MOD.eval()
    return MOD(x)


def inplace_on_global_module_parameter(x):
    with torch.no_grad():
        MOD.weight.mul_(0.5)
    return MOD(x)


CASES = [write_global_int, write_global_tensor, append_to_global_list, setitem_global_dict,
         inplace_on_global_tensor, setattr_on_global_object, write_class_attribute,
         closure_cell_of_global_function, module_mode_switch_in_trace, inplace_on_global_module_parameter]


@pytest.mark.parametrize("fn", CASES, ids=[f.__name__ for f in CASES])
def test_side_effects(fn):
    check(fn, T4, world=(_reset, _snapshot))
