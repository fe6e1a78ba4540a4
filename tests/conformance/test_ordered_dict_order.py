"""An OrderedDict read from the program is walked in its linked order (wrong results before).

OrderedDict keeps its order in a linked list beside the dict's storage: move_to_end changes
the list, not the storage order PyDict_Next walks. The trace read an OrderedDict input's
items (and its key guard compared them) in storage order, so after a move_to_end the values
came out in the wrong order, and an entry made for one order passed its guard for the other
(PyTorch's test_dicts.py test_ordered_dict_reordered_keys). Replaying a trace's changes to
an OrderedDict input cleared and refilled it with PyDict_Clear/PyDict_Update, which write the
storage under the linked list: the dict afterwards iterated a stale, shorter key list.

Each case runs eagerly and compiled (first call and a cache hit), with graph counts.
"""
from collections import OrderedDict

import torch

import cdynamo
import cdynamo.testing

from .harness import same_as_eager


class Registry(OrderedDict):
    pass


def reordered(kind):
    def make():
        d = kind()
        d[2] = 4
        d[3] = 5
        d["z"] = 7
        d.move_to_end(2)        # linked order 3, "z", 2; storage order 2, 3, "z"
        d.move_to_end("z", last=False)
        return torch.ones(3), d
    return make


def walk(x, d):
    y = x
    for i, v in enumerate(d.values()):
        y = y * v if i == 0 else y + v
    return y, list(d), list(d.items()), [k for k in d.keys()]


def test_values_of_a_reordered_ordered_dict():
    same_as_eager(walk, reordered(OrderedDict))


def test_values_of_a_reordered_ordered_dict_subclass():
    same_as_eager(walk, reordered(Registry))


def test_a_new_order_recompiles_and_each_order_hits_its_entry():
    for kind in (OrderedDict, Registry):
        cdynamo.reset()
        cnt = cdynamo.testing.CompileCounter()
        fn = cdynamo.compile(walk, backend=cnt)
        x = torch.ones(2)
        d = kind([(1, 10), (2, 20), (3, 30)])
        seen = []
        for step in range(6):  # three orders, each met twice
            assert repr(fn(x, d)) == repr(walk(x, d)), (kind, step)
            seen.append(list(d))
            d.move_to_end(next(iter(d)))
        assert cnt.frame_count == 3, (kind, cnt.frame_count, seen)


def mutate(x, d):
    d.move_to_end(2)
    d[7] = 1
    d.move_to_end(3, last=False)
    del d[4]
    return x + 1, list(d), list(d.values())


def test_changes_to_an_ordered_dict_input_are_replayed_in_its_linked_order():
    same_as_eager(mutate, lambda: (torch.ones(2), OrderedDict([(2, 1), (3, 2), (4, 3), (5, 4)])))


def test_replayed_ordered_dict_stays_a_working_ordered_dict():
    cdynamo.reset()
    fn = cdynamo.compile(mutate, backend="eager")
    for _ in range(2):
        d, e = OrderedDict([(2, 1), (3, 2), (4, 3), (5, 4)]), OrderedDict([(2, 1), (3, 2), (4, 3), (5, 4)])
        fn(torch.ones(2), d)
        mutate(torch.ones(2), e)
        # The object itself: its linked order, its storage and its own methods agree.
        assert list(d) == list(e) and list(reversed(d)) == list(reversed(e)) and dict(d) == dict(e)
        d.move_to_end(3)
        e.move_to_end(3)
        assert d.popitem(last=False) == e.popitem(last=False) and list(d.items()) == list(e.items())
