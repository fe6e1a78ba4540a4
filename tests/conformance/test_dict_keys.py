"""Dicts keyed by objects that hash by identity: tensors and parameters, nn.Modules,
classes (pytree-style registries), functions and user objects whose class keeps object's
__hash__/__eq__. The trace keys its dict model by the real object and guards that the key's
source still gives that object; a dict read from the program has its keys guarded one by one,
identity for these keys (never ==, which for tensors compares elements).

Each case is compared with eager on a first call and a cache hit (same_as_eager: results,
argument state, no break, no native frame, torch._dynamo's graph count); the guard cases change
what the trace relied on and check that the stale entry does not run.
"""
import collections

import torch

import cdynamo
import cdynamo.testing

from .harness import same_as_eager


def compiled(fn):
    cnt = cdynamo.testing.CompileCounter()
    cdynamo.reset()
    return cdynamo.compile(fn, backend=cnt), cnt


WEIGHT = torch.nn.Parameter(torch.ones(3))
LINEAR = torch.nn.Linear(3, 3)


class Plain:
    pass


class Valued:
    def __init__(self, v):
        self.v = v

    def __eq__(self, other):
        return isinstance(other, Valued) and other.v == self.v

    def __hash__(self):
        return hash(self.v)


TOKEN = Plain()


def double(x):
    return x * 2


def negate(x):
    return -x


# A registry keyed by types, as pytree keeps its node handlers.
HANDLERS = {int: double, float: negate, Plain: torch.sin}


def test_dict_made_in_the_trace_keyed_by_a_parameter_module_class_function_and_object():
    def fn(x):
        d = {"a": x, WEIGHT: 3, LINEAR: 4, Plain: 5, double: 6, TOKEN: 7}
        d[WEIGHT] = d[WEIGHT] + 1
        total = x * d[WEIGHT] + d[LINEAR] + d.get(Plain) + d.pop(double) + (TOKEN in d) + (negate in d)
        return total, len(d), [k is WEIGHT for k in d]
    same_as_eager(fn, lambda: (torch.randn(3),))


def test_registry_keyed_by_types_read_from_the_program():
    def fn(x):
        out = HANDLERS[type(2)](x) + HANDLERS[float](x) + HANDLERS.get(Plain, negate)(x)
        return out, [k.__name__ for k in HANDLERS], list(HANDLERS.values()) == [double, negate, torch.sin]
    same_as_eager(fn, lambda: (torch.randn(3),))


def test_registry_key_replaced_is_seen():
    table = {int: double, Plain: negate}

    def fn(x):
        return table[Plain](x) + sum(1 for k in table if k is int)

    cfn, cnt = compiled(fn)
    x = torch.randn(3)
    assert torch.equal(cfn(x), fn(x))
    assert torch.equal(cfn(x), fn(x))
    del table[int]
    table[float] = double  # same number of keys, another class in that place
    assert torch.equal(cfn(x), fn(x)), "a stale entry ran after a key changed"
    assert cnt.frame_count == 2


ONE_A = torch.ones(1)
ONE_B = torch.ones(1)


def test_tensor_keys_are_told_apart_by_identity_not_value():
    # Two one-element tensors that are equal by value are different keys (their hashes are
    # their ids): d.get(ONE_B) must miss, d.get(ONE_A) hit. (A tensor used as a key is
    # guarded to be that object: the dict the trace built holds it.)
    def fn(x):
        d = {ONE_A: 10}
        return x + d.get(ONE_B, 0) + d.get(ONE_A, 0), ONE_B in d, len(d), [k is ONE_B for k in d]

    same_as_eager(fn, lambda: (torch.randn(2),))


def test_dict_from_the_program_keyed_by_a_tensor_is_guarded_by_identity():
    a = torch.ones(1)
    b = torch.ones(1)
    d = {a: 1.0}

    def fn(x):
        return x * sum(d.values()) + sum(1 for k in d if k is a)

    cfn, cnt = compiled(fn)
    x = torch.randn(2)
    assert torch.equal(cfn(x), fn(x))
    assert torch.equal(cfn(x), fn(x))
    d.clear()
    d[b] = 1.0  # equal to a by value, another object
    assert torch.equal(cfn(x), fn(x)), "the key guard compared tensors by value"
    assert cnt.frame_count == 2


def test_defaultdict_from_the_program_gets_a_parameter_key():
    dd = collections.defaultdict(list)

    def fn(x):
        dd["a"] = x + 1
        dd[WEIGHT] = 5
        return dd["missing"], x * dd[WEIGHT]

    x = torch.randn(3)
    expected = fn(x)
    expected_items = dict(dd)
    dd.clear()
    cfn, cnt = compiled(fn)
    for _ in range(2):
        got = cfn(x)
        assert got[0] == expected[0] and torch.equal(got[1], expected[1])
        assert list(dd) == list(expected_items) and dd[WEIGHT] == 5 and torch.equal(dd["a"], expected_items["a"])
    # The second call finds the keys the first one added: the key guard sends it to a new entry.
    assert cnt.frame_count == 2
    assert cdynamo.stats()["frames_native"] == 0


def test_key_with_its_own_hash_is_refused_and_runs_correctly():
    # A key hashed by value (user __hash__/__eq__) would need the program's hash at trace
    # time: refused with a reason, the frame still gives eager's result.
    def fn(x):
        d = {Valued(1): x}
        return d[Valued(1)] + 1

    cfn, _ = compiled(fn)
    x = torch.randn(3)
    assert torch.equal(cfn(x), fn(x))
    assert torch.equal(cfn(x), fn(x))
