"""Sets and frozensets holding tensors (before: frozenset() of a set holding a tensor and a
returned frozenset([1, x]) crashed in PySet_Add; `set in set` and set algebra over tensors
stopped the trace).

Tensors hash by identity, so a set made in the trace holds them as they are: lookups find
the very tensor (an input reached twice is one object, which an aliasing guard pins), a
frozenset of them is hashable and equal to another of the same members, and a set or
frozenset that leaves the trace (returned, or alive at a graph break) is rebuilt as the type
it is. Each case is compared with eager on a first call and a cache hit, with graph counts
(same_as_eager), or, across a graph break, by hand.
"""
import pytest
import torch

import cdynamo
import cdynamo.testing

from .harness import same_as_eager


def one():
    return (torch.randn(3),)


def test_frozenset_of_a_set_and_of_a_frozenset():
    def fn(x):
        s = frozenset({x})
        t = frozenset(s)
        return len(t), t is s, x in t, type(t), x * 2
    same_as_eager(fn, one, fullgraph=True)


def test_returned_frozenset_holding_a_tensor_is_a_frozenset():
    def fn(x):
        y = x + 1
        s = frozenset([1, y, x, y])
        return y, s, frozenset(), frozenset([2, 3])
    same_as_eager(fn, one, fullgraph=True)


def test_frozenset_has_no_mutating_methods():
    def fn(x):
        fs = frozenset([x])
        try:
            fs.add(1)
        except AttributeError as e:
            msg = str(e)
        return msg, len(fs), x + 1
    same_as_eager(fn, one, fullgraph=True)


def test_set_algebra_over_tensors():
    def fn(x):
        y = x * 2
        a = {x, 1, 2}
        b = frozenset([y, 2])
        return (
            a | b, a & b, a - b, a ^ b, b | a, type(b | a), b - {y},
            a.union([y], (3,)), a.intersection({x}), a.difference([1], [2]), a.symmetric_difference({x, 5}),
            {x}.issubset(a), a.issuperset({1, x}), a.isdisjoint(b), b.isdisjoint({x}),
            a == {2, 1, x}, a != {1, x}, {x} < a, a <= a, a > {x}, b >= frozenset([y]), b == {y, 2},
            a == [x, 1, 2], y + 1,
        )
    same_as_eager(fn, one, fullgraph=True)


def test_in_place_set_operators_change_the_set_itself():
    def fn(x):
        y = x + 1
        s = {x, 1}
        alias = s
        s |= {y}
        s -= {1}
        s ^= {x, 7}
        s &= {y, 7, 8}
        t = {x}
        t.update([y], {3})
        t.difference_update({3})
        t.symmetric_difference_update({x, 4})
        t.intersection_update({y, 4, 5})
        fs = frozenset([x])
        before = fs
        fs |= {1}  # a new frozenset: the old one is unchanged
        return s is alias, s, t, fs, before, type(fs)
    same_as_eager(fn, one, fullgraph=True)


def test_membership_of_tensors_sets_and_constants():
    def fn(x):
        y = x + 1
        s = {x, 1}
        fs = frozenset([y, 2])
        outer = {fs, frozenset("ab"), 5}
        return (
            x in s, y in s, 1 in s, 1.0 in s, "a" in s,
            fs in outer, frozenset([2, y]) in outer, {2, y} in outer, frozenset([y]) in outer,
            set("ba") in outer, {"a"} in outer, x in fs, y in fs, y,
        )
    same_as_eager(fn, one, fullgraph=True)


def test_set_in_set_of_frozensets_of_constants():
    def fn(x):
        var = set("abc")
        other = set([frozenset("abc")])
        return x + 1 if var in other else x - 1
    same_as_eager(fn, one, fullgraph=True)


def test_unhashable_items_raise_type_error():
    def fn(x):
        s = {x}
        out = []
        for bad in ([1], {2: 3}, {4}):
            try:
                s.add(bad)
            except TypeError as e:
                out.append(str(e))
        try:
            [1] in s
        except TypeError as e:
            out.append(str(e))
        return out, x + 1
    same_as_eager(fn, one, fullgraph=True)


def test_set_of_constants_is_walked_in_pythons_order():
    # {3, 1} is walked as 1, 3 by Python (its table is ordered by hash), not in the order
    # the items were added.
    def fn(x, n):
        s = {n, 1}
        s.add(-4)
        s.discard(99)
        seen = [v for v in s]
        return x + len(seen), seen, list({"z", n, "a", 17}), s.pop(), s
    same_as_eager(fn, lambda: (torch.randn(2), 3), fullgraph=True)


def test_set_pop_and_remove_with_tensors():
    def fn(x):
        s = {x}
        t = s.pop()
        u = {x, 1}
        u.remove(x)
        try:
            u.remove(2)
        except KeyError as e:
            err = e.args
        return t * 2, u, err, s
    same_as_eager(fn, one, fullgraph=True)


def test_sets_holding_tensors_alive_at_a_graph_break():
    def fn(x):
        y = x * 2
        s = {y, 1}
        fs = frozenset([y, 2])
        outer = {fs, 3}
        torch._dynamo.graph_break()
        s.add(3)
        return len(s), y in fs, fs in outer, fs, s, y + 1

    x = torch.randn(3)
    expected = fn(x)
    cdynamo.reset()
    cnt = cdynamo.testing.CompileCounter()
    cfn = cdynamo.compile(fn, backend=cnt)
    for _ in range(2):
        got = cfn(x)
        assert got[:3] == expected[:3]
        assert type(got[3]) is frozenset and type(got[4]) is set
        assert len(got[3]) == 2 and 2 in got[3]
        (t,) = [v for v in got[3] if isinstance(v, torch.Tensor)]
        assert torch.equal(t, x * 2)
        assert 1 in got[4] and 3 in got[4] and len(got[4]) == 3
        assert torch.equal(got[5], expected[5])
    assert cnt.frame_count >= 1  # the part before the break is a graph


@pytest.mark.parametrize("listlike", [set, frozenset])
def test_constant_membership_in_a_set_of_one_tensor(listlike):
    # A tensor hashes by identity: it never holds a constant (no comparison runs).
    def fn(x):
        x.add_(1)
        s = listlike([x])
        return 1 in s, x in s
    same_as_eager(fn, one, fullgraph=True)


def test_frozenset_holding_a_tensor_as_a_dict_key():
    # A frozenset of tensors hashes by its members' identities: a real frozenset of the
    # very tensors is the key (it stopped the trace: "dict keys must be constants or objects
    # hashed by identity", and the frame ran natively).
    def fn(x, y):
        d = {frozenset([x]): 1, frozenset([x, 2]): 2}
        d[frozenset([y])] = 3
        return d[frozenset([x])], d.get(frozenset([2, x])), frozenset([y]) in d, frozenset([x, y]) in d, x + 1, d

    cdynamo.reset()
    cnt = cdynamo.testing.CompileCounter()
    cfn = cdynamo.compile(fn, backend=cnt)
    x, y = torch.randn(3), torch.randn(3)
    expected = fn(x, y)
    for _ in range(2):  # first call and cache hit (the same tensors: keys are guarded by identity)
        got = cfn(x, y)
        assert got[:4] == expected[:4], (got, expected)
        assert torch.equal(got[4], expected[4])
        assert list(got[5].items()) == list(expected[5].items())
        assert all(type(k) is frozenset for k in got[5])
    st = cdynamo.stats()
    assert st["frames_native"] == 0 and st["graph_breaks"] == 0, st["native_frames"]
    assert cnt.frame_count == 1 and st["cache_hits"] >= 1
