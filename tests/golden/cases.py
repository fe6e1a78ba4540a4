"""The golden corpus: ~30 representative functions whose translation is kept as text.

Each case is a function (or a module) and an argument factory (called after
torch.manual_seed(0)). test_golden.py runs it under cdynamo with a recording backend and
writes what the translation produced: the FX code of every graph, the guard listing of
every cache entry, and for a graph break the break code and resume functions (dis) and the
reasons. Editing this file moves line numbers in those texts: rewrite the expected files
(CDYNAMO_GOLDEN_UPDATE=1) and review the diff.
"""
import collections
import functools

import torch

CASES = {}

# Program state the side-effect cases touch; reset before every run of a case.
STATE = {"count": 0, "log": [], "table": {}}
COUNTER = 0


class Holder:
    pass


HOLDER = Holder()


def reset_state():
    global COUNTER
    COUNTER = 0
    STATE["count"] = 0
    STATE["log"] = []
    STATE["table"] = {}
    HOLDER.__dict__.clear()


def case(make_args, calls=2, config=None):
    """Registers `fn` as a golden case; `make_args()` gives its positional arguments."""

    def deco(fn):
        CASES[fn.__name__] = (fn, make_args, calls, config or {})
        return fn

    return deco


def t(*shape):
    return lambda: (torch.randn(*shape),)


def t2(*shape):
    return lambda: (torch.randn(*shape), torch.randn(*shape))


# ---- straight-line tensor code, metadata, operators ---------------------------------------


@case(t2(4, 4))
def arithmetic(x, y):
    z = x @ y + 1
    return torch.relu(z) * x.sin() - y / 2


@case(t(2, 3))
def metadata_queries(x):
    n, m = x.shape
    return x.view(m, n) * x.dim() + x.size(1), x.dtype, n * m


@case(t(4))
def constants_and_fstrings(x):
    name = "scale"
    label = f"{name}={3 * 2:>4}"
    return x * len(label), label.upper()


# ---- modules ----------------------------------------------------------------------------


class Block(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.linear = torch.nn.Linear(4, 4)
        self.norm = torch.nn.LayerNorm(4)
        self.scale = 0.5

    def forward(self, x):
        return self.norm(self.linear(x)) * self.scale + x


@case(lambda: (torch.nn.Sequential(Block(), torch.nn.ReLU(), Block()), torch.randn(2, 4)))
def module_sequential(model, x):
    return model(x)


class Stack(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.layers = torch.nn.ModuleList([torch.nn.Linear(3, 3) for _ in range(3)])
        self.calls = 0

    def forward(self, x):
        self.calls += 1
        for i, layer in enumerate(self.layers):
            x = layer(x) if i % 2 == 0 else x + layer(x)
        return x


@case(lambda: (Stack(), torch.randn(2, 3)))
def module_list_and_attribute_store(model, x):
    return model(x)


# ---- containers -----------------------------------------------------------------------------

Point = collections.namedtuple("Point", ["x", "y"])


@case(t2(3))
def containers_made_in_trace(a, b):
    items = [a, b]
    items.append(a * b)
    table = {"first": items[0], "rest": items[1:]}
    table["sum"] = sum(items[1:], a)
    seen = {1, 2}
    seen.add(3)
    p = Point(a, b)._replace(y=b + 1)
    return table, len(seen), p, p.y


@case(lambda: ([torch.randn(2) for _ in range(3)], {"w": torch.randn(2), "n": 3}))
def containers_from_inputs(xs, cfg):
    xs.append(xs[0] + cfg["w"])
    cfg["n"] += 1
    return [x * cfg["n"] for x in xs]


@case(t(3))
def deque_and_defaultdict(x):
    q = collections.deque([x, x + 1], maxlen=2)
    q.append(x * 3)
    groups = collections.defaultdict(list)
    for i, v in enumerate(q):
        groups[i % 2].append(v)
    return q, groups, dict(groups)


@case(lambda: (iter((torch.randn(2), torch.randn(2), torch.randn(2))),))
def input_iterator(it):
    first = next(it)
    return first + next(it), it


@case(t2(3))
def zip_enumerate_map(a, b):
    pairs = list(zip([a, b], [b, a]))
    out = [x * i + y for i, (x, y) in enumerate(pairs)]
    return list(map(torch.neg, out)), sorted([3, 1, 2])


# ---- closures and functions made in the trace ---------------------------------------------------


@case(t(3))
def closures(x):
    scale = 2

    def inner(y):
        return y * scale

    def bump():
        nonlocal scale
        scale += 1

    bump()
    return inner(x), inner


@case(t(3))
def partial_and_lambda(x):
    add = functools.partial(torch.add, alpha=2)
    f = lambda y: add(y, x)  # noqa: E731
    return f(x), list(map(lambda v: v + 1, [1, 2]))


# ---- user objects ------------------------------------------------------------------------------


class Base:
    def __init__(self, v):
        self.v = v

    def value(self):
        return self.v


class Derived(Base):
    def __init__(self, v, w):
        super().__init__(v)
        self.w = w

    @property
    def total(self):
        return self.value() + self.w

    def __add__(self, other):
        return Derived(self.v + other.v, self.w)


@case(t2(2))
def objects_made_in_trace(a, b):
    d = Derived(a, b) + Derived(b, a)
    return d.total, d


@case(lambda: (HOLDER, torch.randn(2)))
def side_effects_on_inputs(obj, x):
    global COUNTER
    COUNTER += 1
    obj.last = x * 2
    STATE["log"].append(COUNTER)
    STATE["table"]["x"] = x
    return obj.last + 1


# ---- control flow, exceptions, context managers ------------------------------------------------


@case(t(3))
def try_except_in_trace(x):
    try:
        raise ValueError("bad")
    except ValueError as e:
        msg = str(e.args[0])
    finally:
        x = x + 1
    try:
        {}["missing"]
    except KeyError:
        x = x * 2
    return x, msg


@case(t(3))
def with_no_grad(x):
    with torch.no_grad():
        y = x * 2
    with torch.enable_grad():
        z = y + 1
    return y, z, torch.is_grad_enabled()


@torch.no_grad()
def decorated_helper(x):
    return x * 3


@case(t(3))
def context_decorated_call(x):
    return decorated_helper(x) + 1


@case(t(4))
def generator_expression(x):
    total = sum(v * 2 for v in [1, 2, 3])
    squares = tuple(x * i for i in range(3))
    return total, squares


# ---- graph breaks ------------------------------------------------------------------------------


@case(t(3))
def break_on_print(x):
    y = x + 1
    print("golden")
    return y * 2


@case(lambda: ([torch.randn(2) for _ in range(3)],))
def break_in_loop(xs):
    acc = 0
    for x in xs:
        acc = acc + x
        print("step")
    return acc


@case(t(3))
def break_on_data_dependent_branch(x):
    y = x.sum()
    if y > 0:
        return x + 1
    return x - 1


@case(t(3))
def break_inside_try(x):
    try:
        y = x * 2
        print("in try")
        z = y + 1
    except RuntimeError:
        z = y
    return z


@case(t(3))
def break_inside_no_grad(x):
    with torch.no_grad():
        y = x * 2
        print("in no_grad")
        y = y + 1
    return y


def helper_that_breaks(x):
    x = x + 1
    print("helper")
    return x * 2


@case(t(3))
def break_in_inlined_call(x):
    return helper_that_breaks(x) - 1


@case(t(3))
def break_with_closure_cell(x):
    k = 3

    def scale(v):
        return v * k

    y = scale(x)
    print("cell")
    return scale(y)


@case(t(3))
def break_with_side_effects(x):
    STATE["count"] += 1
    HOLDER.seen = STATE["count"]
    print("effects")
    return x + HOLDER.seen


@case(t(3), config={"capture_scalar_outputs": True})
def scalar_item_captured(x):
    s = x.sum().item()
    return x * s + 1


# ---- frames that run natively --------------------------------------------------------------------


@case(t(3))
def generator_run_in_place(x):
    def gen():
        yield x + 1
        yield x + 2

    g = gen()
    return next(g) + next(g)


@case(t(3))
def native_break_in_except(x):
    try:
        raise ValueError("handled")
    except ValueError:
        print("handling")
    return x + 1
