"""Containers: list/tuple/dict/set literals and methods, slicing, concatenation, membership,
unpacking, nesting, star-args, comprehensions, OrderedDict, namedtuple, deque."""
import collections
from collections import OrderedDict, deque, namedtuple

import pytest
import torch

from .harness import Cases, check, tensors

case = Cases()
T4 = tensors((4,))

Point = namedtuple("Point", ["x", "y"])
Pair = collections.namedtuple("Pair", "a b")


@case(T4)
def list_literal_index(x):
    xs = [x, x + 1, x * 2]
    return xs[1] + xs[-1]


@case(T4)
def list_append_extend(x):
    xs = [x]
    xs.append(x + 1)
    xs.extend([x * 2, x * 3])
    return torch.stack(xs)


@case(T4)
def list_insert_pop(x):
    xs = [1, 2, 3]
    xs.insert(1, 10)
    last = xs.pop()
    first = xs.pop(0)
    return x * last + first, xs


@case(T4)
def list_remove_index_count(x):
    xs = [3, 1, 3, 2]
    xs.remove(3)
    i = xs.index(2)
    c = xs.count(3)
    return x + i * 10 + c, xs


@case(T4)
def list_sort_and_reverse(x):
    xs = [3, 1, 2]
    xs.sort()
    ys = [5, 4, 6]
    ys.sort(reverse=True)
    zs = [1, 2, 3]
    zs.reverse()
    return x * xs[0] + ys[0] + zs[0], xs, ys, zs


@case(T4)
def list_copy_clear(x):
    xs = [1, 2]
    ys = xs.copy()
    xs.clear()
    return x + len(ys) + len(xs), xs, ys


@case(T4)
def list_slicing(x):
    xs = [0, 1, 2, 3, 4, 5]
    a = xs[1:4]
    b = xs[::2]
    c = xs[::-1]
    return x * sum(a) + b[-1] + c[0]


@case(T4)
def list_slice_assignment_and_del(x):
    xs = [0, 1, 2, 3]
    xs[1:3] = [9]
    del xs[0]
    return x + xs[0], xs


@case(T4)
def list_concat_repeat(x):
    xs = [1, 2] + [3]
    ys = [0] * 3
    return x * len(xs + ys), xs, ys


@case(T4)
def list_item_assignment(x):
    xs = [x, x]
    xs[0] = x * 5
    return xs


@case(lambda: ([torch.randn(3), torch.randn(3)],))
def mutate_list_arg_append(xs):
    xs.append(xs[0] + xs[1])
    return xs[-1] * 2


@case(lambda: ([torch.randn(3), torch.randn(3)],))
def mutate_list_arg_setitem_pop(xs):
    y = xs.pop()
    xs[0] = y * 3
    return y


@case(T4)
def list_membership(x):
    xs = [1, 2, 3]
    if 2 in xs and 5 not in xs:
        return x + 1
    return x


@case(T4)
def list_equality(x):
    if [1, 2] == [1, 2] and [1] != [2]:
        return x * 2
    return x


@case(T4)
def tuple_literal_and_index(x):
    t = (x, x + 1, 3)
    return t[0] + t[1] * t[2]


@case(T4)
def tuple_concat_slice_count_index(x):
    t = (1, 2) + (3, 2)
    return x * t.count(2) + t.index(3) + sum(t[1:])


@case(T4)
def tuple_unpacking(x):
    a, b, c = (x, 2, 3)
    return a * b + c


@case(T4)
def star_unpacking(x):
    a, *b = [1, 2, 3, 4]
    *c, d = (5, 6, 7)
    return x * a + sum(b) + d, b, c


@case(T4)
def nested_unpacking(x):
    (a, b), c = (1, 2), x
    return c * a + b


@case(lambda: ((torch.randn(2), torch.randn(2)),))
def unpack_tuple_arg(pair):
    a, b = pair
    return a - b


@case(T4)
def swap_via_tuple(x):
    a, b = x, x + 1
    a, b = b, a
    return a - b


@case(T4)
def dict_literal_getitem(x):
    d = {"a": x, "b": x * 2}
    return d["a"] + d["b"]


@case(T4)
def dict_setitem_delitem(x):
    d = {}
    d["k"] = x + 1
    d["j"] = 2
    del d["j"]
    return d


@case(T4)
def dict_get_with_default(x):
    d = {"a": 2}
    return x * d.get("a", 1) + d.get("z", 10)


@case(T4)
def dict_setdefault(x):
    d = {"a": 1}
    v = d.setdefault("b", 5)
    w = d.setdefault("a", 7)
    return x * v + w, d


@case(T4)
def dict_update_and_pop(x):
    d = {"a": 1, "b": 2}
    d.update({"b": 3, "c": 4})
    d.update(e=5)
    p = d.pop("a")
    return x + p + d["b"] + d["c"] + d["e"], d


@case(T4)
def dict_keys_values_items_lists(x):
    d = {"a": 1, "b": 2}
    ks = list(d.keys())
    vs = list(d.values())
    its = list(d.items())
    return x * len(ks) + sum(vs), ks, its


@case(T4)
def dict_membership_len(x):
    d = {"a": x}
    if "a" in d and "b" not in d:
        return x * len(d)
    return x


@case(T4)
def dict_copy_clear(x):
    d = {"a": 1}
    e = d.copy()
    d.clear()
    return x + len(e), d, e


@case(T4)
def dict_double_star_merge(x):
    a = {"p": 1}
    b = {"q": 2}
    d = dict(**a, **b)
    e = {**a, "r": 3, **b}
    return x * d["q"], d, e


@case(lambda: ({"w": torch.randn(4), "b": torch.randn(4)}, torch.randn(4)))
def dict_arg_read(params, x):
    return x * params["w"] + params["b"]


@case(lambda: ({"count": 0}, torch.randn(4)))
def dict_arg_mutated(state, x):
    state["count"] += 1
    state["last"] = x * 2
    return x + 1


@case(T4)
def dict_int_keys(x):
    d = {0: 1.5, 1: 2.5}
    return x * d[0] + d[1]


@case(T4)
def dict_tensor_values_loop(x):
    d = {"a": x, "b": x + 1}
    out = {}
    for k, v in d.items():
        out[k + "_sq"] = v * v
    return out


@case(T4)
def set_literal_membership(x):
    s = {1, 2, 3}
    if 2 in s:
        return x + len(s)
    return x


@case(T4)
def set_add_discard(x):
    s = set()
    s.add(1)
    s.add(2)
    s.add(1)
    s.discard(2)
    return x * len(s), s


@case(T4)
def set_union_intersection(x):
    a = {1, 2}
    b = {2, 3}
    return x + len(a | b) * 10 + len(a & b), a - b


@case(T4)
def list_comprehension(x):
    ys = [x * i for i in range(3)]
    return ys


@case(T4)
def list_comprehension_with_if(x):
    ys = [x + i for i in range(6) if i % 2]
    return torch.stack(ys)


@case(T4)
def dict_comprehension(x):
    d = {f"k{i}": x * i for i in range(3)}
    return d


@case(T4)
def set_comprehension(x):
    s = {i % 3 for i in range(10)}
    return x * len(s), s


@case(T4)
def nested_comprehension(x):
    grid = [[i * j for j in range(3)] for i in range(2)]
    return x * grid[1][2], grid


@case(T4)
def generator_in_sum(x):
    return sum(x * i for i in range(4))


@case(T4)
def generator_in_list_tuple(x):
    a = list(x + i for i in range(2))
    b = tuple(i * 2 for i in range(3))
    return a, b


@case(T4)
def generator_in_max_min(x):
    m = max(i * i for i in [-3, 2])
    n = min(len(s) for s in ["ab", "c"])
    return x * m + n


@case(T4)
def star_args_call_with_list(x):
    shape = [2, 2]
    return x.reshape(*shape)


@case(T4)
def star_in_list_literal(x):
    a = [1, 2]
    b = (3,)
    c = [*a, *b, 4]
    return x * len(c), c


@case(T4)
def nested_containers(x):
    cfg = {"layers": [{"scale": 2}, {"scale": 3}], "bias": (1, 2)}
    for layer in cfg["layers"]:
        x = x * layer["scale"]
    return x + cfg["bias"][1]


@case(T4)
def ordered_dict_basic(x):
    d = OrderedDict()
    d["b"] = x
    d["a"] = x * 2
    d.move_to_end("b")
    return list(d.keys()), d["a"] + d["b"]


@case(T4)
def ordered_dict_from_pairs(x):
    d = OrderedDict([("p", 1), ("q", 2)])
    return x * sum(d.values()), d


@case(T4)
def namedtuple_construct_access(x):
    p = Point(x, 2)
    return p.x * p.y + p[1]


@case(T4)
def namedtuple_return(x):
    return Point(x + 1, x - 1)


@case(T4)
def namedtuple_replace_and_unpack(x):
    p = Pair(a=1, b=x)
    q = p._replace(a=5)
    a, b = q
    return b * a


@case(lambda: (Point(torch.randn(3), torch.randn(3)),))
def namedtuple_arg(p):
    return p.x + p.y


@case(T4)
def deque_basics(x):
    q = deque([1, 2])
    q.append(3)
    q.appendleft(0)
    a = q.popleft()
    b = q.pop()
    return x * (a + b) + len(q), q


@case(T4)
def deque_maxlen(x):
    q = deque(maxlen=2)
    for i in range(4):
        q.append(x * i)
    return list(q)


@case(T4)
def defaultdict_counting(x):
    counts = collections.defaultdict(int)
    for w in ["a", "b", "a"]:
        counts[w] += 1
    return x * counts["a"], dict(counts)


@case(T4)
def list_of_tensors_cat(x):
    parts = [x[:2], x[2:]]
    return torch.cat(parts[::-1])


@case(T4)
def list_constructor_from_tuple_and_range(x):
    a = list((1, 2))
    b = list(range(3))
    return x + a[1] + b[2], a + b


@case(T4)
def tuple_comparison(x):
    if (1, 2) < (1, 3) and (2,) > (1, 9):
        return x + 1
    return x


@case(T4)
def sorted_list_then_index(x):
    xs = sorted([3, 1, 2])
    return x * xs[-1], xs


@case(lambda: ([1, 2, 3],), expect_graphs=0)
def pure_python_list_function(xs):
    ys = [v * 2 for v in xs]
    xs.append(len(ys))
    return ys


# list += / *= change the list in place: aliases (and the caller's list) see the new items.
@case(lambda: (torch.randn(4), [1, 2]))
def list_inplace_add_and_multiply_keep_identity(x, lst):
    alias = lst
    lst += (x, 3)
    made = [x * 2]
    same = made
    made *= 3
    made += iter([x + 1])
    return x + len(alias), alias is lst, same, len(made)


@case(T4)
def deque_inplace_add_and_multiply_respect_maxlen(x):
    q = deque([x, x + 1], maxlen=3)
    alias = q
    q += [x * 2, x * 3]
    q *= 2
    return list(alias), len(q), q.maxlen


# set |= &= -= ^= and dict |= change the object itself (the caller's too); d1 | d2 is new.
@case(lambda: (torch.randn(4), {1, 2}, {"a": 1}))
def set_and_dict_inplace_operators_keep_identity(x, s, d):
    alias_s, alias_d = s, d
    s |= {7}
    s -= {1}
    made = {1, 2, 3}
    same = made
    made &= {2, 3, 4}
    made ^= frozenset({9})
    d |= {"k": 3}
    d |= [("p", 4)]
    merged = {"z": 0} | d
    od = OrderedDict(a=1)
    alias_od = od
    od |= {"b": 2}
    return x + len(s), alias_s, same, alias_d, merged, merged is d, alias_od


# + and * of builtin sequences keep the type: a deque's repeat or concatenation is a deque
# with its maxlen (the trace made them lists), and sequences of two types refuse each other
# (list + deque, list + tuple(l) were concatenated into a list).
@case(lambda: (torch.randn(4), [1, 2, 3]))
def deque_concatenation_and_repeat_keep_the_deque(x, items):
    d = deque(items, maxlen=4)
    e = deque(items)
    both = d + deque([x])
    return x + 1, d + d, d * 2, 3 * d, e + e, e * 2, both, both.maxlen, deque([x]) + e, d * 0, d * -1


@case(lambda: (torch.randn(4), [1, 2, 3]))
def sequences_of_two_types_refuse_each_other(x, items):
    pairs = [(items, tuple(items)), (tuple(items), items), (items, deque(items)), (deque(items), items),
             (deque(items), (1,)), ((x,), [x]), ([x], (x,)), (Point(1, 2), [3]), ([3], Point(1, 2))]
    out = []
    for a, b in pairs:
        try:
            out.append(a + b)
        except TypeError as e:
            out.append(str(e))
    return x + 1, out, Point(1, 2) + (3,), (3,) + Point(1, 2), Point(x, 2) * 2


# A list, a tuple and a deque are never equal to one another, whatever their items
# (deque([x]) == [x] was True in the trace).
@case(lambda: (torch.randn(4), [1, 2, 3]))
def sequences_of_two_types_are_never_equal(x, items):
    return (x + 1, deque([x]) == [x], [x] == deque([x]), deque([x]) != [x], [x] == (x,), (x,) != [x],
            Point(x, 1) == (x, 1), Point(x, 1) == [x, 1], deque([x]) == deque([x]))


# dict | OrderedDict is an OrderedDict (the subclass's __ror__ answers first); the trace
# made a dict. (It runs at a break now: one graph, after it.)
@case(T4)
def dict_or_a_dict_subclass_asks_the_subclass(x):
    od = OrderedDict(b=x)
    merged = {"a": x} | od
    return x + 1, merged, type(merged) is OrderedDict, {"a": 1} | {"b": x}


# Tuples compare their items up to the shorter length before their lengths ((x, 1) == (2,)
# compares x == 2, which raises for a 2-element x); lists and deques of other lengths
# differ at once. The trace answered False for the tuples.
@case(T4)
def tuple_equality_compares_items_before_lengths(x):
    y = x + 1  # the graph before the break (the first comparison breaks, raises and is caught)
    out = []
    for a, b in [((x, 1), (2,)), ((x, 1), tuple([2])), ([x, 1], [2]), (deque([x, 1]), deque([2])), ((x,), (x, 1))]:
        try:
            out.append(a == b)
        except RuntimeError as e:
            out.append(str(e))
    return y, out


# A list subclass + a deque raises list's concatenation error; an object without + raises
# CPython's "unsupported operand" message with both types (the trace's said neither).
class Box:
    pass


class Items(list):
    pass


@case(T4)
def binary_operators_without_an_answer_raise_as_eagerly(x):
    out = []
    box = Box()
    for make in (lambda: Items([x]) + deque([x]), lambda: box + 1, lambda: 1 + box, lambda: box * x):
        try:
            out.append(make())
        except TypeError as e:
            out.append(str(e))
    try:
        box += 1
    except TypeError as e:
        out.append(str(e))
    return x + 1, out, Items([x]) == deque([x])


# x.__class__ of a container is its class (a namedtuple's, a deque's, an OrderedDict's), not a
# method to call later (`is` against a class broke the graph).
@case(T4)
def container_class_attribute(x):
    return (x + 1, [x].__class__ is list, Point(x, 1).__class__ is Point, deque([x]).__class__ is deque,
            {"a": x}.__class__ is dict, OrderedDict(a=x).__class__ is OrderedDict, frozenset([1]).__class__.__name__,
            (x,).__class__ is tuple, {"a": x}.keys().__class__.__name__, {"a": x}.items().__class__.__name__,
            enumerate("ab").__class__ is enumerate, iter([x]).__class__.__name__)


# One iterator passed twice to zip takes its items in turn (the pairwise idiom); over a
# string or an enumerate the trace read its items once per argument ({'a': 'a', ...}).
@case(T4)
def zip_of_one_iterator_twice(x):
    chars = iter("abcd")
    pairs = enumerate("wxyz")
    nums = iter([x, x * 2, x * 3, x * 4])
    return x + 1, dict(zip(chars, chars)), list(zip(pairs, pairs)), [a + b for a, b in zip(nums, nums)]


# reversed() of a set raises as eagerly (the trace reversed its walk); a defaultdict's copy
# keeps its factory (the trace's copy had none).
@case(T4)
def reversed_set_raises_and_defaultdict_copy_keeps_its_factory(x):
    out = []
    for s in ({x.shape[0], 1}, frozenset({3, 1})):
        try:
            out.append(list(reversed(s)))
        except TypeError as e:
            out.append(str(e))
    d = collections.defaultdict(int, a=1)
    c = d.copy()
    c["missing"] += 2
    return x + 1, out, c, c.default_factory is int, d


# A method a container's class lacks raises AttributeError as eagerly (the trace ran
# OrderedDict.move_to_end on a plain dict, deque.appendleft's sibling on a list).
@case(T4)
def container_methods_of_another_class_raise(x):
    out = []
    for make in (lambda: {"a": x, "b": 1}.move_to_end("a"), lambda: [x].appendleft(1),
                 lambda: deque([x]).sort(), lambda: collections.defaultdict(int).move_to_end("a")):
        try:
            out.append(make())
        except AttributeError as e:
            out.append(str(e))
    od = OrderedDict(a=x, b=1)
    od.move_to_end("a")
    return x + 1, out, od


# A deque refuses slice assignment and deletion, and says "deque index out of range" (the
# trace assigned the slices as a list's and named a list in the message).
@case(T4)
def deque_slice_stores_and_index_errors(x):
    d = deque([x, 1, 2])
    out = []
    try:
        out.append(d[5])
    except IndexError as e:
        out.append(str(e))
    try:
        out.append(d[-4])
    except IndexError as e:
        out.append(str(e))
    try:
        d[1:2] = [7, 8]
    except TypeError as e:
        out.append(str(e))
    try:
        del d[1:]
    except TypeError as e:
        out.append(str(e))
    lst = [x, 1]
    try:
        lst[5] = 0
    except IndexError as e:
        out.append(str(e))
    return x + 1, out, list(d)


# A deque made in the trace is a deque to type() and isinstance() (it was a list).
@case(T4)
def deque_type_and_isinstance(x):
    d = deque([x, 1], maxlen=3)
    return x + 1, type(d) is deque, type(d).__name__, isinstance(d, list), isinstance(d, deque), d.maxlen


# A deque refuses a slice (TypeError) where the trace sliced it into a list.
@case(lambda: (torch.randn(4), [1, 2, 3]))
def deque_refuses_a_slice(x, items):
    d = deque(items)
    try:
        out = d[1:]
    except TypeError as e:
        out = str(e)
    return x + 1, out, d[-1]


class LyingDict(dict):
    # dict(d), d2.update(d) and {**d} read a dict subclass's storage when it keeps dict's
    # __iter__: these overrides are not called.
    def keys(self):
        return ["nope"]

    def __getitem__(self, k):
        return "overridden"


class OwnIterDict(dict):
    # With its own __iter__, the subclass is read as a mapping: keys() and __getitem__.
    def __iter__(self):
        return iter(sorted(super().keys()))

    def keys(self):
        return sorted(super().keys())

    def __getitem__(self, k):
        return dict.__getitem__(self, k) * 10


class NamedOrderedDict(OrderedDict):
    pass


@case(T4)
def dict_of_a_dict_subclass_made_in_the_trace(x):
    d = LyingDict(a=x, b=2)
    e = dict(d)
    f = {"z": 0}
    f.update(d)
    return e["a"] + 1, e["b"], sorted(f), {**d}["a"] * 2


@case(T4)
def dict_of_a_subclass_with_its_own_iteration(x):
    d = OwnIterDict(b=x, a=x + 1)
    e = dict(d)
    return list(e), e["a"], e["b"]


@case(T4)
def dict_of_an_ordered_dict_subclass(x):
    d = NamedOrderedDict(b=x, a=x + 1)
    d.move_to_end("b")
    e = dict(d)
    return list(e), e["a"] - e["b"]


@case(lambda: (torch.randn(4), LyingDict(w=torch.ones(4), n=3)))
def dict_of_a_dict_subclass_argument(x, d):
    e = dict(d)
    return x * e["w"] + e["n"], sorted(e)


@pytest.mark.parametrize("fn,make_args,expect_graphs", case.params)
def test_containers(fn, make_args, expect_graphs):
    check(fn, make_args, expect_graphs=expect_graphs)


# torch's argument parser refuses a deque where a list or tuple of tensors or ints goes
# (the trace passed its items as a list: torch.stack(deque) returned where eagerly it raises).
@pytest.mark.parametrize("op", ["stack", "cat", "view"])
def test_torch_ops_refuse_a_deque_as_eagerly(op):
    def fn(x):
        y = x + 1
        d = deque([y, y]) if op != "view" else deque([1, -1])
        return getattr(torch, op)(d) if op != "view" else y.view(d)

    def outcome(f, x):
        try:
            return ("ok", f(x))
        except TypeError as e:
            return ("raised", str(e).split(" - ")[0])

    import cdynamo
    cf = cdynamo.compile(fn, backend=cdynamo.testing.CompileCounter())
    for _ in range(2):
        got, want = outcome(cf, torch.ones(2)), outcome(fn, torch.ones(2))
        assert got == want and want[0] == "raised", (got, want)
