"""Side effects around graph breaks: attribute stores, list/dict/set mutation, global and
nonlocal stores, new objects that escape, in-place mutation of input tensors.

tests/semantics/test_side_effects.py checks such effects when the whole frame is captured
(mostly on globals). Here every scenario calls ``observe(...)`` between its effects, and
runs in two variants:

- ``whole``: ``observe`` is a plain function cdynamo traces (it appends what it is given to
  the global LOG): the frame is captured whole, no break (``expect_breaks=0``), and the
  effects are replayed after the graph;
- ``break``: ``observe`` is wrapped by ``cdynamo.disable`` (it appends to LOG and prints):
  the frame breaks at the call. Effects made before the break must already be applied
  when the natively run call sees the objects (what it logs and prints is compared with
  eager), and effects after it must land in order on the same objects.

Each variant is called 3 times on fresh arguments (the 2nd and 3rd calls must be cache
hits), comparing result, argument state, globals (LOG included) and stdout with eager
after every call. A second group (``shared``) calls 3 times on the same objects, so state
accumulates across calls (a counter that grows, a list that keeps its appends). A third
group breaks with other kinds of break (print, a data-dependent branch, item()) right
between two effects.
"""
import copy

import pytest
import torch

import cdynamo
from cdynamo.testing import CompileCounter

from .harness import Cases, run_case, snapshot_copy

LOG = []
COUNT = 0
LAST = None
G_LIST = []
G_DICT = {}


class Holder:
    pass


class Registry:
    calls = 0


HOLDER = Holder()


class Box:
    def __init__(self, v=None):
        self.v = v


class Stateful(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.lin = torch.nn.Linear(4, 4)
        self.register_buffer("running", torch.zeros(4))
        self.calls = 0
        self.scale = 1.0


def _make_bump():
    n = 0

    def bump(x, observe):
        nonlocal n
        n += 1
        observe(n)
        n += 10
        return x * n
    return bump


BUMP = _make_bump()


def _reset():
    global COUNT, LAST, G_LIST
    LOG.clear()
    COUNT = 0
    LAST = None
    G_LIST = []
    G_DICT.clear()
    HOLDER.__dict__.clear()
    Registry.calls = 0
    BUMP.__closure__[0].cell_contents = 0


def _snapshot():
    return snapshot_copy({"LOG": LOG, "COUNT": COUNT, "LAST": LAST, "G_LIST": G_LIST, "G_DICT": G_DICT,
                          "HOLDER": dict(HOLDER.__dict__), "Registry.calls": Registry.calls,
                          "bump.n": BUMP.__closure__[0].cell_contents})


WORLD = (_reset, _snapshot)


def observe_traced(*vals):
    LOG.append(vals)


@cdynamo.disable
def observe_native(*vals):
    LOG.append(vals)
    print("observe", *vals)


VARIANTS = {"whole": observe_traced, "break": observe_native}
DISABLED = "wrapped by cdynamo.disable"

scenarios = []


def scenario(make_state, graphs=(1, 2), xfail=None, xfail_whole=None, xfail_break=None, isolate_break=False):
    """make_state() -> tuple of arguments before `observe`; graphs = (whole, break)."""
    def deco(fn):
        for variant, observe in VARIANTS.items():
            def make_args(make_state=make_state, observe=observe):
                return tuple(make_state()) + (observe,)
            reason = xfail or (xfail_whole if variant == "whole" else xfail_break)
            marks = [pytest.mark.xfail(strict=True, reason=reason)] if reason else []
            kw = {"expect_graphs": graphs[0] if variant == "whole" else graphs[1],
                  "expect_breaks": 0 if variant == "whole" else None,
                  "reason": None if variant == "whole" else DISABLED,
                  "calls": 3, "world": WORLD}
            if variant == "break" and isolate_break:
                kw["isolate"] = True
            scenarios.append(pytest.param(fn, make_args, kw, id=f"{fn.__name__}-{variant}", marks=marks))
        return fn
    return deco


def t4():
    return (torch.randn(4),)


def t4_box(**attrs):
    def make():
        b = Box()
        b.__dict__.update(copy.deepcopy(attrs))
        return (torch.randn(4), b)
    return make


def t4_list(*items):
    return lambda: (torch.randn(4), list(copy.deepcopy(items)))


def t4_dict(**items):
    return lambda: (torch.randn(4), dict(copy.deepcopy(items)))




# ----------------------------------------------------------------------------- attribute stores

@scenario(t4_box())
def obj_hasattr_after_store(x, obj, observe):
    obj.tmp = x + 1
    observe(hasattr(obj, "tmp"), getattr(obj, "tmp", None) is not None)
    obj.other = 2
    return x * 2, hasattr(obj, "other")


@scenario(t4_box(count=0), graphs=(1, 1))
def obj_counter_increment(x, obj, observe):
    obj.count += 1
    observe(obj.count)
    obj.count += 1
    return x * obj.count


@scenario(t4_box())
def obj_store_tensor_then_read(x, obj, observe):
    obj.cache = x * 2
    observe(obj.cache)
    obj.cache = obj.cache + 1
    return obj.cache.sum()


@scenario(t4_box(keep=1))
def obj_add_then_delete_attribute(x, obj, observe):
    obj.tmp = x + 1
    observe(obj.tmp)
    del obj.tmp
    obj.keep = obj.keep + 5
    return x * obj.keep


@scenario(lambda: (torch.randn(2, 4), Stateful()), graphs=(1, 1))
def module_attribute_stores(x, m, observe):
    m.calls += 1
    m.scale = 3.0
    observe(m.calls, m.scale)
    m.calls += 1
    return m.lin(x) * m.scale


@scenario(lambda: (torch.randn(4), Stateful()))
def module_buffer_inplace(x, m, observe):
    m.running.add_(x)
    observe(m.running.clone())
    m.running.mul_(0.5)
    return m.running + 1


@scenario(t4)
def global_object_attribute(x, observe):
    HOLDER.value = x.cos()
    HOLDER.n = 2
    observe(HOLDER.n)
    HOLDER.n = HOLDER.n * 3
    return x * HOLDER.n


@scenario(t4, graphs=(1, 1))
def class_attribute_counter(x, observe):
    Registry.calls += 1
    observe(Registry.calls)
    Registry.calls += 1
    return x + Registry.calls


# ----------------------------------------------------------------------------- list mutation

@scenario(t4_list(), graphs=(1, 1))
def list_append_len_append(x, lst, observe):
    lst.append(1)
    observe(len(lst))
    lst.append(2)
    return x + len(lst)


@scenario(t4_list(0))
def list_extend(x, lst, observe):
    y = x + 1
    lst.extend([y, 2])
    observe(len(lst), lst[-1])
    lst.extend((3, 4))
    return y * len(lst)


@scenario(t4_list(1, 2, 3, 4), graphs=(1, 1))
def list_pop(x, lst, observe):
    a = lst.pop()
    observe(list(lst), a)
    b = lst.pop(0)
    return x * (a + b), lst


@scenario(t4_list(1, 2), graphs=(1, 1))
def list_insert(x, lst, observe):
    lst.insert(0, "head")
    observe(list(lst))
    lst.insert(len(lst), x * 2)
    return x + 1


@scenario(t4_list(1, 2, 3, 2), graphs=(1, 1))
def list_remove(x, lst, observe):
    lst.remove(2)
    observe(list(lst))
    lst.remove(2)
    return x * len(lst)


@scenario(t4_list(1, 2, 3))
def list_item_assignment(x, lst, observe):
    lst[0] = x * 3
    observe(len(lst), lst[1])
    lst[-1] = "z"
    return lst[0] + 1


@scenario(t4_list(1, 2, 3, 4, 5), graphs=(1, 1))
def list_del_item_and_slice(x, lst, observe):
    del lst[0]
    observe(list(lst))
    del lst[1:3]
    return x * len(lst)


@scenario(t4_list(1, 2, 3), graphs=(1, 1))
def list_slice_assignment(x, lst, observe):
    lst[1:2] = [7, 8, 9]
    observe(list(lst))
    lst[:2] = []
    return x + sum(lst)


@scenario(t4_list(3, 1, 2), graphs=(1, 1))
def list_reverse_then_sort(x, lst, observe):
    lst.reverse()
    observe(list(lst))
    lst.sort()
    return x * lst[0]


@scenario(t4_list(1), graphs=(1, 1))
def list_mutated_through_alias(x, lst, observe):
    alias = lst
    alias.append(2)
    observe(lst is alias, len(lst))
    lst.append(3)
    return x + len(alias)


def _same_list_twice():
    lst = [1]
    return (torch.randn(4), lst, lst)


@scenario(_same_list_twice, graphs=(1, 1))
def one_list_passed_as_two_arguments(x, a, b, observe):
    a.append(2)
    observe(len(b))
    b.append(3)
    return x + len(a)


@scenario(t4_list(1, 2), graphs=(1, 1))
def list_clear(x, lst, observe):
    lst.clear()
    observe(len(lst))
    lst.append(x * 2)
    return x - 1


# ----------------------------------------------------------------------------- dict and set mutation

@scenario(t4_dict(keep=1))
def dict_item_assignment(x, d, observe):
    d["a"] = x * 2
    observe(sorted(d))
    d["b"] = 2
    return d["a"] + d["b"]


@scenario(t4_dict(a=0))
def dict_update(x, d, observe):
    d.update(a=1, b=x.sin())
    observe(sorted(d), d["a"])
    d.update({"c": 3})
    return x * len(d)


@scenario(t4_dict(), graphs=(1, 1))
def dict_setdefault_append(x, d, observe):
    d.setdefault("k", []).append(1)
    observe(list(d["k"]))
    d.setdefault("k", []).append(2)
    d.setdefault("other", 5)
    return x * len(d["k"])


# Crashed the interpreter before the output memo (use after free): the dict's replay installed a copy of
# its list value, freeing the list the next effect wrote through.
# After the break v and d["k"] are two sources of one list in the resume function: one value.
@scenario(lambda: (torch.randn(4), {"k": [1]}), graphs=(1, 1))
def dict_setdefault_existing_list(x, d, observe):
    v = d.setdefault("k", 0)
    v.append(2)
    observe(list(d["k"]), v is d["k"])
    d.setdefault("k", 0).append(3)
    return x * len(v)


@scenario(t4_dict(a=1, b=2, c=3), graphs=(1, 1))
def dict_pop_and_del(x, d, observe):
    v = d.pop("a")
    observe(sorted(d), v)
    del d["b"]
    return x * v, d


@scenario(t4_dict(a=1, b=2), graphs=(1, 1))
def dict_clear_then_refill(x, d, observe):
    d.clear()
    observe(len(d))
    d["new"] = x + 1
    return x * 2


@scenario(lambda: (torch.randn(4), {1, 2}), graphs=(1, 1))
def set_add_discard(x, s, observe):
    s.add(3)
    observe(sorted(s))
    s.discard(1)
    return x * len(s)


# ----------------------------------------------------------------------------- globals and nonlocal

@scenario(t4, graphs=(1, 1))
def global_int_store(x, observe):
    global COUNT
    COUNT += 1
    observe(COUNT)
    COUNT += 10
    return x + COUNT


@scenario(t4)
def global_tensor_store(x, observe):
    global LAST
    LAST = x * 2
    observe(LAST)
    LAST = LAST + 1
    return LAST.sum()


@scenario(t4, graphs=(1, 1))
def global_list_rebind_then_append(x, observe):
    global G_LIST
    G_LIST = [1]
    observe(list(G_LIST))
    G_LIST.append(x + 1)
    return x * len(G_LIST)


@scenario(t4)
def global_dict_mutation(x, observe):
    G_DICT["a"] = x.cos()
    observe(sorted(G_DICT))
    G_DICT["b"] = len(G_DICT)
    return x * G_DICT["b"]


@scenario(t4, graphs=(1, 1))
def nonlocal_cell_of_closure(x, observe):
    return BUMP(x, observe)


@scenario(t4, graphs=(1, 1))
def nonlocal_cell_owned_by_the_frame(x, observe):
    n = 0

    def bump():
        nonlocal n
        n += 1

    bump()
    observe(n)
    bump()
    return x * n


# ----------------------------------------------------------------------------- new objects that escape

@scenario(t4)
def new_list_returned(x, observe):
    out = [x + 1]
    observe(len(out))
    out.append(x * 2)
    return out


@scenario(t4)
def new_list_appended_after_break_via_method(x, observe):
    out = []
    out.append(observe(x.sum()))
    out.append(x * 2)
    return out


@scenario(t4)
def new_list_returned_twice(x, observe):
    a = [x + 1]
    observe(len(a))
    a.append(x * 2)
    return a, a


@scenario(t4_box())
def new_dict_stored_on_input_object(x, obj, observe):
    obj.d = {}
    obj.d["a"] = x + 1
    observe(sorted(obj.d))
    obj.d["b"] = 2
    return x - 1


@scenario(t4)
def new_object_returned_with_final_state(x, observe):
    b = Box(x * 2)
    b.extra = 1
    observe(b.extra)
    b.extra += 1
    b.v = b.v + 1
    return b


@scenario(t4_list(), graphs=(1, 1))
def new_object_stored_in_input_list(x, lst, observe):
    lst.append(Box(1))
    lst[-1].v += 1
    observe(lst[-1].v)
    lst[-1].v += 10
    return x * lst[-1].v


@scenario(t4_box())
def new_list_shared_by_local_and_attribute(x, obj, observe):
    a = []
    obj.a = a
    a.append(x + 1)
    observe(len(a))
    a.append(2)
    return x * 2, obj.a is a, len(obj.a)


@scenario(t4, graphs=(1, 1))
def new_global_object(x, observe):
    HOLDER.box = Box(0)
    HOLDER.box.v = 5
    observe(HOLDER.box.v)
    HOLDER.box.v += 1
    return x * 3


# ----------------------------------------------------------------------------- tensor in-place mutation of inputs

@scenario(t4)
def input_tensor_inplace(x, observe):
    x.add_(1)
    observe(x.clone())
    x.mul_(2)
    return x.sum()


@scenario(t4)
def input_tensor_setitem_and_view(x, observe):
    x[0] = 5.0
    observe(x.clone())
    x[1:3].zero_()
    return x * 2


@scenario(lambda: (torch.randn(4), [torch.randn(4), torch.randn(4)]))
def tensor_in_input_list_inplace(x, ts, observe):
    ts[0].add_(x)
    observe(ts[0].clone())
    ts[1].sub_(ts[0])
    return ts[0] + ts[1]


@scenario(lambda: (torch.randn(2, 4), Stateful()))
def module_parameter_inplace_under_no_grad(x, m, observe):
    with torch.no_grad():
        m.lin.weight.mul_(0.5)
    observe(m.lin.weight.clone())
    with torch.no_grad():
        m.lin.bias.zero_()
    return m.lin(x)


# ----------------------------------------------------------------------------- ordering of several effects

@scenario(lambda: (torch.randn(4), [], {}, Box(0)), graphs=(1, 1))
def interleaved_effects_on_three_objects(x, lst, d, obj, observe):
    lst.append(1)
    d["n"] = len(lst)
    obj.v = d["n"] + 1
    observe(list(lst), dict(d), obj.v)
    lst.append(obj.v)
    d["n"] = len(lst)
    obj.v = obj.v * 10
    return x * obj.v


def helper_effects(lst, t, observe):
    lst.append("in helper")
    observe(len(lst))
    lst.append(t * 2)
    return t + 1


@scenario(t4_list(), graphs=(1, 2))
def effects_inside_inlined_helper(x, lst, observe):
    lst.append("before")
    y = helper_effects(lst, x, observe)
    lst.append("after")
    return y * 3


@scenario(t4_list(), graphs=(1, 1))
def effects_in_counted_loop(x, lst, observe):
    i = 0
    while i < 3:
        lst.append(i)
        observe(len(lst))
        i += 1
    return x + len(lst)


@pytest.mark.parametrize("fn,make_args,kw", scenarios)
def test_side_effects_around_break(fn, make_args, kw, request):
    run_case(fn, make_args, kw, module=__name__, collection="scenarios", case_id=request.node.callspec.id)


# ----------------------------------------------------------------------------- state accumulating over calls

shared = Cases()


@shared(t4_box(count=0), shared_args=True, calls=3, reason="print")
def shared_counter_grows(x, obj):
    obj.count += 1
    print("count", obj.count)
    obj.count += 1
    return x * obj.count


@shared(t4_list(), shared_args=True, calls=3, reason="print")
def shared_list_keeps_growing(x, lst):
    lst.append(len(lst))
    print("len", len(lst))
    lst.append(x.sum())
    return x + 1


@shared(lambda: (torch.zeros(4),), shared_args=True, calls=3, reason="print", expect_graphs=2)
def shared_tensor_accumulates(acc):
    acc.add_(1)
    print("acc", acc)
    acc.mul_(2)
    return acc.clone()


@shared(lambda: (torch.randn(4), Stateful()), shared_args=True, calls=3, reason="print")
def shared_module_counter(x, m):
    m.calls += 1
    print("calls", m.calls)
    m.running.add_(x)
    return m.running * m.calls


# ----------------------------------------------------------------------------- other kinds of break between effects

@shared(t4_list(), calls=3, expect_graphs=1, reason="print", world=WORLD)
def print_sees_append_before_it(x, lst):
    lst.append(1)
    print(len(lst), list(lst))
    lst.append(2)
    return x + len(lst)


@shared([lambda: (torch.rand(4) + 1, [], Box(0)), lambda: (torch.rand(4) - 2, [], Box(0))], calls=3,
        reason="data-dependent", world=WORLD)
def branch_between_effects(x, lst, obj):
    lst.append("start")
    obj.v = 1
    if x.sum() > 0:
        lst.append("pos")
        obj.v += 1
    else:
        lst.append("neg")
        obj.v -= 1
    lst.append(obj.v)
    return x * obj.v


@shared(t4_dict(), calls=3, expect_graphs=2, reason="Tensor.item()", world=WORLD)
def item_between_effects(x, d):
    global COUNT
    d["before"] = 1
    COUNT += 1
    s = x.sum().item()
    d["after"] = COUNT
    COUNT += 1
    return x * 2, s


def _make_counter():
    n = 0

    def bump(t):
        nonlocal n
        n += 1
        print("bump", n)
        return t * n
    return bump


@shared(lambda: (torch.randn(4),), calls=3, reason="print")
def fresh_closure_per_call(x):
    bump = _make_counter()
    return bump(x) + bump(x)


@cdynamo.disable
def failing_observer(lst):
    lst.append("observer ran")
    raise RuntimeError(f"seen {len(lst)}")


# The breaking call raises: its handler and the rest of the frame run natively inside the break code
# (nothing left to capture), so no graph at all.
@shared(t4_list(), calls=3, expect_graphs=0, reason=DISABLED, world=WORLD)
def effects_around_break_that_raises(x, lst):
    lst.append(1)
    try:
        failing_observer(lst)
    except RuntimeError as e:
        lst.append(str(e))
    lst.append(2)
    return x * len(lst)


@shared(t4_list(), calls=3, expect_graphs=3, expect_breaks=2, reason="print", world=WORLD)
def effects_between_two_breaks(x, lst):
    lst.append(x + 1)
    print("first", len(lst))
    lst.append(x * 2)
    print("second", len(lst))
    lst.append(x - 3)
    return lst[0] + lst[1] + lst[2]


@pytest.mark.parametrize("fn,make_args,kw", shared.params)
def test_side_effects_other_breaks(fn, make_args, kw, request):
    run_case(fn, make_args, kw, module=__name__, collection="shared.params", case_id=request.node.callspec.id)


def test_hasattr_on_a_program_object_is_guarded_both_ways():
    # hasattr's answer for an attribute the instance lacks is guarded (the instance dict's
    # keys), and so is one it has: an object of the same class that differs recompiles.
    class Obj:
        pass

    def f(x, o):
        return x + 1 if hasattr(o, "flag") else x - 1

    cf = cdynamo.compile(f, backend="eager")
    a, b = Obj(), Obj()
    b.flag = True
    x = torch.zeros(2)
    assert torch.equal(cf(x, a), f(x, a))
    assert torch.equal(cf(x, b), f(x, b))
    assert torch.equal(cf(x, a), f(x, a))


def test_out_argument_writes_the_buffer():
    # out= into an argument is traced as a write kept in the graph: later reads and the
    # buffer's final state are eager's, with no break.
    def f(x, buf):
        torch.add(x, 1, out=buf)
        y = buf.clone()
        torch.mul(buf, 2, out=buf)
        return buf + x, y

    cnt = CompileCounter()
    cf = cdynamo.compile(f, backend=cnt)
    x = torch.randn(4)
    for _ in range(2):
        b1, b2 = torch.zeros(4), torch.zeros(4)
        e, c = f(x, b1), cf(x, b2)
        assert torch.equal(e[0], c[0]) and torch.equal(e[1], c[1]) and torch.equal(b1, b2)
    assert cnt.frame_count == 1
    assert cdynamo.stats()["graph_breaks"] == 0


def test_one_list_under_two_sources_follows_the_object_on_hits():
    # f(x, l, l) traces l once (with a guard that both sources are one object); a later
    # call with two distinct lists must not reuse that entry.
    def f(x, a, b):
        a.append(3)
        return x + len(b)

    cf = cdynamo.compile(f, backend="eager")
    x = torch.zeros(1)
    for same in (True, False, True):
        l1, l2 = [], []
        e1, e2 = [], []
        got = cf(x, l1, l1) if same else cf(x, l1, l2)
        want = f(x, e1, e1) if same else f(x, e1, e2)
        assert torch.equal(got, want) and l1 == e1 and l2 == e2
