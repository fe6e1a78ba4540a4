"""Generators and iterators made in the trace are lazy, as Python's are: a generator's frame
runs to its next yield when an item is taken (what it does in between is seen in the
program's order), and an iterator over a list, dict or set reads the container as it is
when each item is taken (before, these were run ahead / snapshotted, wrong results).
Full consumption (list(gen), sum(gen), for over a generator) stays in one graph."""
import itertools

import pytest
import torch

from .harness import Cases, check, tensors

case = Cases()
T4 = tensors((4,))


class Box:
    def __init__(self):
        self.n = 0


def passthrough(it):
    for v in it:
        yield v


# ---- generators: the frame pauses at each yield ----

@case(T4)
def generator_leaves_its_source_partly_consumed(x):
    it = iter([1, 2, 3])
    s = passthrough(it)
    first = next(s)
    return x * first, list(it)


@case(T4)
def generator_object_attribute_between_items(x):
    o = Box()

    def g():
        for i in range(3):
            o.n += 1
            yield x + i
    it = g()
    a = next(it)
    return a, o.n


@case(T4)
def generator_appends_before_each_yield(x):
    log = []

    def g():
        for i in range(3):
            log.append(i)
            yield x * i
    it = g()
    a = next(it)
    seen = list(log)
    b = next(it)
    return a + b, seen, log


@case(T4)
def generator_dict_store_before_each_yield(x):
    d = {}

    def g():
        for i in range(3):
            d[i] = i * 2
            yield x + i
    it = g()
    a = next(it)
    return a, dict(d)


@case(T4)
def generator_reads_list_changed_between_items(x):
    l = [1, 2, 3]

    def g():
        for v in l:
            yield x * v
    it = g()
    a = next(it)
    l[1] = 10
    b = next(it)
    return a, b


@case(T4)
def generator_reads_tensor_changed_between_items(x):
    state = [x]

    def g():
        for _ in range(2):
            yield state[0] * 2
    it = g()
    a = next(it)
    state[0] = x + 100
    b = next(it)
    return a, b


@case(T4)
def generator_mutates_argument_list_per_item(x, out):
    def g():
        for i in range(3):
            out.append(i)
            yield x + i
    it = g()
    return next(it), len(out)


@case(T4)
def generator_in_place_tensor_op_per_item(x):
    y = x.clone()

    def g():
        for i in range(3):
            y.add_(1)
            yield y * 1
    it = g()
    a = next(it)
    b = y.clone()
    return a, b, list(it)


@case(T4)
def generator_full_consumption_one_graph(x):
    def g(n):
        for i in range(n):
            yield x * i
    return sum(g(4)), list(g(2)), tuple(v + 1 for v in g(2))


@case(T4)
def generator_for_loop_interleaved_with_consumer(x):
    log = []

    def g():
        for i in range(3):
            log.append(("gen", i))
            yield i
    acc = x
    for v in g():
        log.append(("loop", v))
        acc = acc + v
    return acc, log


@case(T4)
def generator_send_values(x):
    def g():
        total = x
        while True:
            v = yield total
            if v is None:
                return
            total = total + v
    it = g()
    a = next(it)
    b = it.send(1)
    c = it.send(2)
    return a, b, c


@case(T4)
def generator_close_then_next(x):
    def g():
        yield x + 1
        yield x + 2
    it = g()
    a = next(it)
    it.close()
    return a, next(it, "done")


@case(T4)
def generator_return_value_through_yield_from(x):
    log = []

    def inner():
        log.append("inner")
        yield x + 1
        return 7

    def outer():
        r = yield from inner()
        log.append(r)
        yield x * r
    it = outer()
    a = next(it)
    seen = list(log)
    return a, seen, list(it), log


@case(T4)
def yield_from_list_changed_between_items(x):
    l = [1, 2, 3]

    def g():
        yield from l
    it = g()
    a = next(it)
    l.append(4)
    return x * a, list(it)


@case(T4)
def generator_stop_iteration_value(x):
    def g():
        yield 1
        return 5
    it = g()
    next(it)
    try:
        next(it)
    except StopIteration as e:
        return x * e.value
    return x


@case(T4)
def generator_raises_inside_consumer_catches(x):
    def g():
        yield x + 1
        raise ValueError("bad item")
    it = g()
    a = next(it)
    try:
        next(it)
    except ValueError as e:
        return a, str(e), next(it, "ended")
    return a


@case(T4)
def generator_stop_iteration_becomes_runtime_error(x):
    def g():
        yield 1
        raise StopIteration
    try:
        list(g())
    except RuntimeError as e:
        return x + 1, str(e)
    return x


@case(T4)
def generator_expression_over_list_appended(x):
    l = [1, 2]
    g = (v * 10 for v in l)
    a = next(g)
    l.append(3)
    return x + a, list(g)


@case(T4)
def two_generators_interleaved(x):
    log = []

    def g(tag):
        for i in range(2):
            log.append((tag, i))
            yield x * i
    a, b = g("a"), g("b")
    r = [next(a), next(b), next(a), next(b)]
    return torch.stack(r), log


@case(T4)
def generator_zip_with_list_lazy(x):
    log = []

    def g():
        for i in range(5):
            log.append(i)
            yield i
    pairs = list(zip(g(), [x, x + 1]))
    return pairs[1][1], log


@case(T4)
def any_all_stop_at_the_deciding_item(x):
    log = []

    def g():
        for i in range(5):
            log.append(i)
            yield i
    a = any(v >= 1 for v in g())
    b = all(v < 1 for v in g())
    return x + 1, a, b, log


@case(T4)
def any_leaves_the_rest_of_an_iterator(x):
    it = iter((0, 2, 0, 3))
    found = any(it)
    return x + 1, found, list(it)


# ---- iterators over lists, dicts and sets read them as they are ----

@case(T4)
def list_iterator_sees_append(x):
    l = [1, 2]
    it = iter(l)
    next(it)
    l.append(3)
    return x + 1, list(it)


@case(T4)
def list_iterator_sees_item_store(x):
    l = [x, x + 1, x + 2]
    it = iter(l)
    next(it)
    l[1] = x * 10
    return next(it), list(it)


@case(T4)
def for_loop_over_list_that_grows(x):
    l = [1, 2]
    acc = x
    for v in l:
        if len(l) < 5:
            l.append(v * 10)
        acc = acc + v
    return acc, l


@case(T4)
def list_iterator_exhausted_then_appended(x):
    l = [1]
    it = iter(l)
    list(it)
    l.append(2)
    return x + 1, list(it)


@case(T4)
def list_iterator_after_shrink(x):
    l = [1, 2, 3, 4]
    it = iter(l)
    next(it)
    l.pop()
    l.pop()
    return x + 1, list(it)


@case(T4)
def reversed_list_sees_item_store(x):
    l = [1, 2, 3]
    r = reversed(l)
    next(r)
    l[0] = 11
    return x + 1, list(r)


@case(T4)
def enumerate_over_list_changed(x):
    l = [1, 2, 3]
    e = enumerate(l)
    next(e)
    l[1] = 7
    return x + 1, list(e)


@case(T4)
def zip_over_list_changed(x):
    l = [1, 2, 3]
    z = zip(l, l)
    next(z)
    l.append(4)
    l[1] = 9
    return x + 1, list(z)


@case(T4)
def map_over_list_changed(x):
    l = [1, 2, 3]
    m = map(lambda v: x + v, l)
    next(m)
    l[1] = 20
    return list(m)


@case(T4)
def filter_over_list_changed(x):
    l = [1, 2, 3]
    f = filter(None, l)
    next(f)
    l[1] = 0
    return x + 1, list(f)


@case(T4)
def itertools_chain_over_list_changed(x):
    l = [1, 2]
    c = itertools.chain(l, [3])
    next(c)
    l.append(9)
    return x + 1, list(c)


@case(T4)
def dict_values_iterator_sees_store(x):
    d = {"a": x, "b": x + 1}
    it = iter(d.values())
    next(it)
    d["b"] = x * 5
    return list(it)


@case(T4)
def dict_changed_size_during_iteration(x):
    d = {1: 1, 2: 2}
    try:
        for k in d:
            d[k + 10] = 0
    except RuntimeError as e:
        return x + 1, str(e), len(d)
    return x


@case(T4)
def dict_items_iterator_changed_size(x):
    d = {1: x}
    it = iter(d.items())
    next(it)
    d[2] = x
    try:
        next(it)
    except RuntimeError as e:
        return x + 1, str(e)
    return x


@case(T4)
def set_changed_size_during_iteration(x):
    s = {1, 2}
    it = iter(s)
    next(it)
    s.add(5)
    try:
        next(it)
    except RuntimeError as e:
        return x + 1, str(e)
    return x


@case(T4)
def argument_list_iterated_and_appended(x, out):
    acc = x
    for v in out:
        if v < 3:
            out.append(v + 2)
        acc = acc + v
    return acc


# itertools.tee: copies share one source, each item taken from it once, when the first
# copy needs it; copies that leave the frame are real tees at their positions.
@case(T4)
def itertools_tee_copies_share_their_source(x):
    src = iter([x, x * 2, x * 3])
    a, b = itertools.tee(src)
    kind = type(a).__name__
    first = next(a)
    second = next(a)
    return first + second + next(b), list(src), list(a), list(b), kind


@case(T4)
def itertools_tee_long_buffer(x):
    a, b, c = itertools.tee(iter(range(500)), 3)
    total = sum(a)
    return x + total + next(b) + len(list(c))


@pytest.mark.parametrize("fn,make_args,expect_graphs", case.params)
def test_lazy_iteration(fn, make_args, expect_graphs):
    if fn.__code__.co_argcount == 2:
        base = make_args

        def make_args():
            return base() + ([1, 2],)
    check(fn, make_args, expect_graphs=expect_graphs)
