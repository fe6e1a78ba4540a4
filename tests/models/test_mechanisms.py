"""The mechanisms that keep real models out of one graph, one minimal repro
each (tests/models/mechanisms.py: the cases, the harness and each diagnosis).

Every case is a strict xfail while its mechanism is not fixed: the fix makes it pass,
the run then fails until the mark goes. Cases that crash the tracer run in a subprocess.
"""
import subprocess
import sys
from pathlib import Path

import pytest

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

import mechanisms  # noqa: E402

# Mechanisms not fixed yet, by case name (all of them at the commit this file was written).
# Fixed since: a raising __iter__/__contains__ is an exception of the traced program (the
# tracer's failure protocol, trace/engine/result.h), no longer a null value that was used.
# Automatic dynamic shapes: a frame called with every feature-map size compiles
# a static entry, then one symbolic entry for the dims that changed.
FIXED = {"iter_dunder_raises", "contains_dunder_raises", "recompile_per_shape",
         # Attribute reads follow the descriptor protocol for instances, modules and classes
         # (trace/kinds/object.cpp), enum members are constants, a class's own __getattribute__ is
         # inlined, and guard loads keyed by ints no longer leave a Python error set.
         "enum_member_class_attribute", "enum_membership_of_inputs", "module_dunder_class",
         "type_of_module_attribute", "module_staticmethod", "getattribute_override", "dict_item_int_keys",
         # Instances of dict/OrderedDict subclasses carry their items as a Dict value; the base's
         # C methods (through the class or super()) act on it; own __setattr__ is inlined.
         "dict_subclass_super_method", "ordered_dict_subclass_dataclass", "dataclass_own_setattr",
         # inspect.signature of a function or bound method is computed for real (call_rules.cpp).
         "inspect_signature_of_bound_method",
         # Torch functions without tensor arguments are decided by what they are (call_rules.cpp
         # torchKindOf): dispatch queries answered from the values, state readers folded and guarded.
         "torch_assert_on_bool", "jit_is_tracing", "augmented_assignment_to_int",
         # id() (the real id of an object from the program under an identity guard, a stand-in
         # for a value made in the trace), dict keys hashed by identity (classes, functions),
         # object.__reduce_ex__/object.__new__ and delattr: copy.deepcopy of a config.
         "deepcopy_of_object", "dict_with_type_keys", "deepcopy_of_object_made_in_trace", "id_of_values",
         "dict_keys_hashed_by_identity", "deepcopy_of_containers_and_hook",
         # LOAD_CLOSURE of an empty cell of the enclosing frame models an empty cell.
         "closure_cell_defined_after_break"}
# (w-conf fixed enum_membership_of_inputs, by `in` over a tuple comparing item by item up to
# the first match, and dict_item_int_keys, on its own path as well.)
OPEN = set(mechanisms.CASES) - FIXED


def params():
    for name, c in mechanisms.CASES.items():
        marks = [pytest.mark.xfail(reason=c["why"], strict=True)] if name in OPEN else []
        yield pytest.param(name, marks=marks, id=name)


@pytest.mark.parametrize("name", list(params()))
def test_mechanism(name):
    if mechanisms.CASES[name]["crash"]:
        p = subprocess.run([sys.executable, str(HERE / "mechanisms.py"), name], capture_output=True, text=True,
                           timeout=300)
        assert p.returncode == 0 and p.stdout.strip().endswith("ok"), (
            f"rc {p.returncode} (a negative rc is a signal: {-p.returncode if p.returncode < 0 else '-'})\n"
            f"{p.stdout[-1000:]}\n{p.stderr[-3000:]}")
    else:
        mechanisms.check(name)


def test_function_closing_over_a_frame_cell_leaves_a_resume_function():
    """A function made after a graph break closes over a cell of the frame (k, a cellvar):
    the resume function hands back the frame's own cell, read at run time, not the one of
    the call that was traced."""
    import torch

    import cdynamo
    from cdynamo.testing import CompileCounter

    def f(x, k):
        y = x.sin()
        print("a break")

        def scale(v):
            return v * k

        return y, scale

    cdynamo.reset()
    cnt = CompileCounter()
    cf = cdynamo.compile(f, backend=cnt)
    x = torch.randn(3)
    outs = [cf(x, 2), cf(x, 2), cf(x, 5)]
    for (y, scale), k in zip(outs, (2, 2, 5)):
        ey, escale = f(x, k)
        torch.testing.assert_close(y, ey)
        assert scale(3) == escale(3) == 3 * k
    assert outs[0][1].__closure__[0] is not outs[1][1].__closure__[0]
    assert cnt.frame_count >= 2 and not cdynamo.stats()["native_frames"]
