"""The constructs CPython versions compile differently (3.12 inlines comprehensions, has
slice opcodes, RETURN_CONST, LOAD_SUPER_ATTR, LOAD_ATTR's method form, intrinsics for +x and
starred displays, END_FOR / END_SEND, COMPARE_OP's shifted argument): each case runs on every
version the build supports, compiled against eager, on the first call and on the cache hit."""
import collections

import pytest
import torch

from .harness import Cases, check, with_args

case = Cases()


@case(with_args([1.0, 2.0, 3.0]))
def comprehension_shadows_a_bound_local(x, xs):
    # 3.12: the loop variable's outer value is saved (LOAD_FAST_AND_CLEAR) and put back.
    v = 10
    ys = [x * v for v in xs]
    return sum(ys), v


@case(with_args([1.0, 2.0]))
def comprehension_variable_unbound_before_and_after(x, xs):
    # The saved value is NULL: the variable is unbound again after the comprehension.
    ys = [x + v for v in xs]
    try:
        v  # noqa: B018
        bound = True
    except NameError:
        bound = False
    return ys[0] + ys[1], bound


@case(with_args(3))
def nested_comprehensions_and_dict_set(x, n):
    grid = [[x * (i + j) for j in range(n)] for i in range(n)]
    d = {i: x + i for i in range(n)}
    s = {i * 2 for i in range(n)}
    return grid[1][2] + d[2], sorted(s)


@case(with_args([1, 2, 3, 4, 5]))
def slices_loaded_and_stored(x, xs):
    # BINARY_SLICE / STORE_SLICE on a list and a tensor.
    head = xs[1:3]
    xs[0:2] = [7, 8]
    y = x.clone()
    y[1:3] = 0.5
    return x[1:3] * 2, y, head, xs


@case(with_args(True))
def constants_returned_on_each_path(x, flag):
    # RETURN_CONST after an in-place op (the graph's only effect).
    x.mul_(2)
    if flag:
        return None
    return x


@case(with_args([1, 2]))
def unary_positive_and_starred_display(x, xs):
    # 3.12: CALL_INTRINSIC_1 (UNARY_POSITIVE, LIST_TO_TUPLE).
    t = (*xs, 3)
    return +x, -x, ~torch.tensor(3), not xs, t


@case(with_args(2.0, 3))
def comparisons_of_every_kind(x, a, b):
    # COMPARE_OP's argument (shifted on 3.12) picks the comparison.
    return (x * (a < b) + (a <= b) + (a == b) + (a != b) + (a > b) + (a >= b), x > 0)


class Scaled(torch.nn.Linear):
    def forward(self, x):
        # LOAD_SUPER_ATTR (method form) and an attribute through super().
        return super().forward(x) * 2 + super().__getattribute__("out_features")


@case(lambda: (torch.randn(2, 4), Scaled(4, 3)))
def zero_argument_super_in_a_module(x, m):
    return m(x)


class Base:
    scale = 3

    def f(self, v):
        return v * self.scale


class Child(Base):
    def f(self, v):
        return super(Child, self).f(v) + 1


@case(lambda: (torch.randn(4), Child()))
def two_argument_super(x, obj):
    return obj.f(x)


@case(with_args([None, 1, None, 2]))
def loops_with_none_tests_and_method_calls(x, xs):
    # FOR_ITER / END_FOR, POP_JUMP_IF_NONE / NOT_NONE, LOAD_ATTR's method form with keywords.
    total = x
    for v in xs:
        if v is None:
            continue
        total = total.add(v, alpha=2)
    i = 0
    while xs[i] is None:
        i += 1
    return total, i


def _items(t):
    yield t + 1
    yield t * 2
    return 5


def _delegate(t):
    r = yield from _items(t)
    yield t - r


@case(with_args())
def generator_with_yield_from(x):
    # SEND / END_SEND: `yield from` a generator made in the trace.
    return list(_delegate(x))


@case(lambda: (torch.randn(3, 4),), expect_graphs=2)
def graph_break_in_the_middle(x):
    # The break code and the resume function are made for the running version.
    y = x.sin()
    torch._dynamo.graph_break()
    return y + x.cos(), [v for v in (1, 2)]


# On 3.12 collections.deque and defaultdict are heap types (C types made from a spec, as C
# extensions make theirs, not classes): their methods' signatures are still read from the
# C type, and a call they refuse raises Python's TypeError in the frame.
@case(with_args())
def c_heap_type_methods_refuse_arguments(x):
    said = []
    for call in (lambda: collections.deque([1]).pop(0), lambda: collections.defaultdict(int).copy(1)):
        try:
            call()
            said.append("accepted")
        except TypeError as e:
            said.append(str(e))
    return x + 1, said


@case(with_args())
def fromkeys_of_a_c_heap_dict_type(x):
    d = collections.defaultdict.fromkeys(["a", "b"], x + 1)
    return d["a"] * 2 + d["b"], type(d).__name__, d.default_factory


@pytest.mark.parametrize("fn,make_args,expect_graphs", case.params)
def test_python_versions(fn, make_args, expect_graphs):
    check(fn, make_args, expect_graphs=expect_graphs)


def test_range_iterator_passed_in_after_next():
    # 3.12's range iterator reduces to (iter, (range of what is left,), None): the input's
    # remaining items are still read (and guarded) right.
    import cdynamo
    import cdynamo.testing

    def fn(x, it):
        return x + sum(it)

    def started(start):
        it = iter(range(start, 11, 3))
        next(it)
        return it

    x = torch.randn(3)
    cdynamo.reset()
    cnt = cdynamo.testing.CompileCounter()
    cfn = cdynamo.compile(fn, backend=cnt)
    for start in (1, 1, 2):
        it_got, it_eager = started(start), started(start)
        assert torch.equal(cfn(x, it_got), fn(x, it_eager))
        assert list(it_got) == list(it_eager) == []
    st = cdynamo.stats()
    assert st["frames_native"] == 0, st["native_frames"]
    assert cnt.frame_count == 2 and st["cache_hits"] == 1  # start 2: other items, a recompile
