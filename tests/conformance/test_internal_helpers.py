"""The Python helpers the C++ core reads: the polyfill registry and the lookup table's rows.

The registry is filled by ``@polyfill(original)`` in each polyfill module; the tracer reads
it as one dict (csrc/support/lookup.def: cdynamo_polyfills). Its keys are the originals the
one hand-written table held before the registry existed, listed here by name, and each
module registers originals of the module it is named for only.
"""
import functools
import importlib
import itertools
import operator
import pathlib
import re

import torch

from cdynamo._internal import polyfills
from cdynamo._internal.polyfills import POLYFILLS

# polyfill module -> the originals it stands in for, by their dotted names
ORIGINALS = {
    "itertools": [
        "itertools.chain", "itertools.chain.from_iterable", "itertools.islice", "itertools.compress",
        "itertools.filterfalse", "itertools.takewhile", "itertools.dropwhile", "itertools.starmap",
        "itertools.accumulate", "itertools.pairwise", "itertools.zip_longest", "itertools.product",
        "itertools.permutations", "itertools.combinations", "itertools.count", "itertools.repeat",
        "itertools.cycle", "itertools.tee", "itertools._tee",
    ],
    "functools": ["functools.reduce"],
    "operator": ["operator.methodcaller"],
    "torch_ops": [
        "torch._foreach_lerp_", "torch._foreach_lerp", "torch._foreach_pow", "torch.addcmul",
        "torch.Tensor.addcmul_", "torch.Tensor.addcmul",
        "torch.addcdiv", "torch.Tensor.addcdiv_", "torch.Tensor.addcdiv",
        "torch._foreach_addcdiv_", "torch._foreach_addcmul_", "torch._C._group_tensors_by_device_and_dtype",
    ],
    "torch_fx": ["torch._C._fx_map_aggregate", "torch._C._fx_map_arg"],
}
# the module each polyfill module is named for
ORIGINAL_MODULE = {"itertools": "itertools", "functools": "functools", "operator": "operator",
                   "torch_ops": "torch", "torch_fx": "torch._C"}


def _resolve(dotted):
    parts = dotted.split(".")
    for i in range(len(parts), 0, -1):
        try:
            obj = importlib.import_module(".".join(parts[:i]))
        except ImportError:
            continue
        for attr in parts[i:]:
            obj = getattr(obj, attr)
        return obj
    raise ImportError(dotted)


def test_registry_holds_exactly_the_originals_of_the_old_table():
    expected = {_resolve(name) for names in ORIGINALS.values() for name in names}
    assert len(expected) == 35
    assert set(POLYFILLS) == expected
    assert all(callable(fn) for fn in POLYFILLS.values())


def test_each_module_registers_originals_of_its_own_module():
    for module, names in ORIGINALS.items():
        prefix = ORIGINAL_MODULE[module] + "."
        assert all(name.startswith(prefix) for name in names), module
        mod = getattr(polyfills, module)
        for name in names:
            poly = POLYFILLS[_resolve(name)]
            assert poly.__module__ == mod.__name__, (name, poly.__module__)
            assert getattr(mod, poly.__name__) is poly


def test_iterator_class_polyfills_have_rebuild():
    for original, poly in POLYFILLS.items():
        if isinstance(poly, type):
            assert isinstance(original, type), original
            assert callable(getattr(poly, "rebuild", None)), poly


def test_stdlib_originals_are_the_real_ones():
    # the polyfill modules are named after stdlib modules: their own `import itertools`
    # (and functools, operator) must be the standard library's
    assert itertools.chain in POLYFILLS and functools.reduce in POLYFILLS
    assert operator.methodcaller in POLYFILLS and torch.addcmul in POLYFILLS


def test_every_cdynamo_row_of_the_lookup_table_resolves():
    text = (pathlib.Path(__file__).parents[2] / "csrc" / "support" / "lookup.def").read_text()
    rows = re.findall(r'^OBJ\((\w+), "([\w.]+)", "([\w.]*)"\)', text, re.M)
    ours = [(row, module, path) for row, module, path in rows if module.split(".")[0] == "cdynamo"]
    assert len(ours) > 30
    for row, module, path in ours:
        obj = importlib.import_module(module)
        for attr in filter(None, path.split(".")):
            obj = getattr(obj, attr)
        assert obj is not None, row
