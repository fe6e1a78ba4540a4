"""Crashes and hangs that PyTorch's TorchDynamo tests found in cdynamo (docs/conformance.md).

Each case is a module-level ``case_*`` function that compares cdynamo with eager Python on a
first call and a cache hit and raises AssertionError on any difference in the outcome; the
test runs it away from pytest's process with a timeout (``harness.isolated``), since a
segfault or a deadlock would take pytest down. What these assert is the crash fix: no
crash, no hang, eager's outcome (a clean native run counts); capturing the case is tracked by
the conformance list. Those not fixed yet are strict xfails, with the diagnosis.
"""
import threading

import pytest
import torch

import cdynamo
import cdynamo.testing

from .harness import isolated, same_as_eager

MODULE = "conformance.test_crashes"


def crash(reason):
    return pytest.mark.xfail(strict=True, raises=AssertionError, reason=reason)


# ---------------------------------------------------------------- the cases (run in a subprocess)

class Countdown:
    """An iterator whose __iter__ returns itself (the usual shape of a hand-written iterator)."""

    def __init__(self, n):
        self.n = n

    def __iter__(self):
        self.left = self.n
        return self

    def __next__(self):
        if self.left == 0:
            raise StopIteration
        self.left -= 1
        return self.left


def _loop_over_own_iterator(x):
    for i in Countdown(3):
        x = x + i
    return x


def case_for_over_iterator_returning_self():
    same_as_eager(_loop_over_own_iterator, lambda: (torch.ones(2),), captured=False)


def _enumerate_own_iterator(x):
    for i, v in enumerate(Countdown(3)):
        x = x + i * v
    return x


def case_enumerate_over_iterator_returning_self():
    same_as_eager(_enumerate_own_iterator, lambda: (torch.ones(2),), captured=False)


class Unloopable:
    def __iter__(self):
        raise ValueError("not today")


def _loop_over_iter_that_raises(x):
    try:
        for i in Unloopable():
            x = x + i
    except ValueError:
        x = x - 1
    return x


def case_for_over_iter_that_raises():
    same_as_eager(_loop_over_iter_that_raises, lambda: (torch.ones(2),), captured=False)


def _frozenset_of_frozenset(x):
    inner = frozenset({x})
    return x + len(frozenset(inner))


def case_frozenset_of_a_set_holding_a_tensor():
    same_as_eager(_frozenset_of_frozenset, lambda: (torch.ones(2),), captured=False)


def _returns_frozenset_with_tensor(x):
    return x + 1, frozenset([1, x])


def case_frozenset_with_a_tensor_returned():
    # the tensor is the argument itself: compare the set by membership of the same object
    def check(fn_out, x):
        out, s = fn_out
        assert isinstance(s, frozenset) and len(s) == 2 and 1 in s and x in s, f"got {s!r}"
        assert torch.equal(out, x + 1)

    x = torch.ones(2)
    check(_returns_frozenset_with_tensor(x), x)
    cfn = cdynamo.compile(_returns_frozenset_with_tensor, backend=cdynamo.testing.CompileCounter())
    for _ in range(2):
        check(cfn(x), x)


def _min_values_floor(b):
    return b.min(dim=0).values.floor()


def case_attribute_of_a_torch_named_tuple_then_a_method():
    same_as_eager(_min_values_floor, lambda: (torch.randn(3, 4),), captured=False)


def _max_named_fields(b):
    r = b.max(dim=1)
    return r.values + 1, r.indices, type(r).__name__


def case_torch_named_tuple_fields_and_type():
    same_as_eager(_max_named_fields, lambda: (torch.randn(3, 4),), captured=False)


def case_compile_inside_dispatch_mode_during_a_compile():
    from torch.utils._python_dispatch import TorchDispatchMode

    @cdynamo.compile(backend="eager")
    def inner(x):
        return x * 2

    class CallsCompiled(TorchDispatchMode):
        def __torch_dispatch__(self, func, types, args=(), kwargs=None):
            inner(torch.ones(1))
            return func(*args, **(kwargs or {}))

    def outer(x):
        return x + 1

    cfn = cdynamo.compile(outer, backend="eager")
    done = []

    def run():
        with CallsCompiled():
            for _ in range(2):
                done.append(torch.equal(cfn(torch.ones(2)), outer(torch.ones(2))))

    t = threading.Thread(target=run, daemon=True)
    t.start()
    t.join(20)
    assert not t.is_alive(), "the compile deadlocked"
    assert done == [True, True], done


# PyTorch's test_repros (test_list_self_reference, test_multi_dot_import: torch.fx's
# symbolic_trace hands a module's globals on): a list, dict or tuple read from the program is
# wrapped item by item before its own value exists, so one that holds itself recursed until
# the C stack overflowed (a segfault; a dict's growing guard names made it a hang first).
def _first_of_cyclic(x, box):
    return x + box[0]


def _cyclic_list():
    box = [1]
    box.append(box)
    return box


def case_list_that_contains_itself():
    same_as_eager(_first_of_cyclic, lambda: (torch.ones(2), _cyclic_list()), captured=False)


def _cyclic_dict():
    d = {0: 2}
    d["self"] = {"again": d}
    return d


def case_dict_that_contains_itself_through_another():
    same_as_eager(_first_of_cyclic, lambda: (torch.ones(2), _cyclic_dict()), captured=False)


def _cyclic_tuple():
    inner = [3]
    outer = (4, inner)
    inner.append(outer)
    return outer


def case_tuple_in_a_cycle_through_a_list():
    same_as_eager(_first_of_cyclic, lambda: (torch.ones(2), _cyclic_tuple()), captured=False)


# A container made to hold itself inside the trace, then read by a builtin that asks for
# its constant form (isinstance, len, ==, type): the conversion recursed without end and
# the process died (found by a probe of cyclic values, 2026-12-06).
def _self_holding_made_in_the_trace(x, which):
    v = [3, 1, 2] if which == "list" else {"a": 1}
    y = x + 1
    if which == "list":
        v[1] = v
    else:
        v["b"] = v
    return y, isinstance(v, (list, dict)), len(v), v == v, type(v).__name__, bool(v), [v] == [v]


def case_list_made_to_hold_itself_in_the_trace():
    same_as_eager(_self_holding_made_in_the_trace, lambda: (torch.ones(2), "list"))


def case_dict_made_to_hold_itself_in_the_trace():
    # (The frame then runs natively: a dict holding itself is not modelled.)
    same_as_eager(_self_holding_made_in_the_trace, lambda: (torch.ones(2), "dict"), captured=False)


_GLOBAL_CYCLE = [5]
_GLOBAL_CYCLE.append(_GLOBAL_CYCLE)


def _reads_global_cycle(x):
    return x * _GLOBAL_CYCLE[0]


def case_global_list_that_contains_itself():
    same_as_eager(_reads_global_cycle, lambda: (torch.ones(2),), captured=False)


def _deep_list(depth):
    d = [1.0]
    for _ in range(depth):
        d = [d]
    return d


def _depth_of(x, nest):
    n = 0
    while isinstance(nest, list) and len(nest) == 1 and isinstance(nest[0], list):
        nest = nest[0]
        n += 1
    return x + n


def case_very_deeply_nested_list():
    # Acyclic, but deep enough to exhaust the C stack if each level were wrapped recursively.
    same_as_eager(_depth_of, lambda: (torch.ones(2), _deep_list(20000)), captured=False)


# PyTorch's test_restricted_list_subclass3: a.extend(b) with b the same list-subclass instance
# took b's items one at a time while appending them to the same item list: a hang. CPython
# copies a list (or the list itself) first.
class Registry(list):
    def add_all_twice(self, other):
        self.extend(other)
        self.extend(other)
        return self


def _extend_by_itself(x, a):
    a.add_all_twice(a)
    a.extend(a)
    return x + len(a)


def case_list_subclass_extended_by_itself():
    same_as_eager(_extend_by_itself, lambda: (torch.ones(2), Registry([1, 2])), captured=False)


def _plain_self_extend(x, a):
    a.extend(a)
    a += a
    return x + len(a)


def case_list_extended_by_itself():
    same_as_eager(_plain_self_extend, lambda: (torch.ones(2), [1, 2]), captured=False)


# PyTorch's test_jit_trace_errors: torch.jit.trace of a compiled function with dynamic=True
# segfaulted in the JIT tracer (TracingState::getOutput saw outputs it never recorded).
# torch._dynamo refuses to compile under torch.jit.trace with a RuntimeError; so does cdynamo.
def case_jit_trace_of_a_compiled_function():
    for dynamic in (True, False, None):
        cdynamo.reset()
        f = cdynamo.compile(lambda x: x + 1, backend="eager", dynamic=dynamic)
        try:
            torch.jit.trace(f, torch.randn(3))
        except RuntimeError as e:
            assert "torch.jit.trace" in str(e), str(e)
        else:
            raise AssertionError(f"torch.jit.trace of a compiled function (dynamic={dynamic}) did not raise")


# ---------------------------------------------------------------- the tests

# Fixed (2026-12-06: toPython stops at a value it is already converting).
def test_list_made_to_hold_itself_in_the_trace():
    isolated(MODULE, "case_list_made_to_hold_itself_in_the_trace")


def test_dict_made_to_hold_itself_in_the_trace():
    isolated(MODULE, "case_dict_made_to_hold_itself_in_the_trace")


def test_for_over_iterator_returning_self():
    isolated(MODULE, "case_for_over_iterator_returning_self")


def test_enumerate_over_iterator_returning_self():
    isolated(MODULE, "case_enumerate_over_iterator_returning_self")


# Fixed (r10: the tracer's failure protocol and typed values).
def test_for_over_iter_that_raises():
    isolated(MODULE, "case_for_over_iter_that_raises")


# Fixed (r10: the tracer's failure protocol and typed values).
def test_frozenset_of_a_set_holding_a_tensor():
    isolated(MODULE, "case_frozenset_of_a_set_holding_a_tensor")


# Fixed (r10: the tracer's failure protocol and typed values).
def test_frozenset_with_a_tensor_returned():
    isolated(MODULE, "case_frozenset_with_a_tensor_returned")


# Fixed (r10: the tracer's failure protocol and typed values).
def test_attribute_of_a_torch_named_tuple_then_a_method():
    isolated(MODULE, "case_attribute_of_a_torch_named_tuple_then_a_method")


# Fixed (w-torch: structseq results keep their type; fields by __match_args__).
def test_torch_named_tuple_fields_and_type():
    isolated(MODULE, "case_torch_named_tuple_fields_and_type")


def test_compile_inside_dispatch_mode_during_a_compile():
    # Once a deadlock: the compile lock was not re-entrant.
    isolated(MODULE, "case_compile_inside_dispatch_mode_during_a_compile")


def test_list_that_contains_itself():
    isolated(MODULE, "case_list_that_contains_itself")


def test_dict_that_contains_itself_through_another():
    isolated(MODULE, "case_dict_that_contains_itself_through_another")


def test_tuple_in_a_cycle_through_a_list():
    isolated(MODULE, "case_tuple_in_a_cycle_through_a_list")


def test_global_list_that_contains_itself():
    isolated(MODULE, "case_global_list_that_contains_itself")


def test_very_deeply_nested_list():
    isolated(MODULE, "case_very_deeply_nested_list")


def test_list_subclass_extended_by_itself():
    isolated(MODULE, "case_list_subclass_extended_by_itself")


def test_list_extended_by_itself():
    isolated(MODULE, "case_list_extended_by_itself")


def test_jit_trace_of_a_compiled_function():
    isolated(MODULE, "case_jit_trace_of_a_compiled_function")
