"""Generators and iterators made in the trace where the lazy model stops: each case runs
natively (or breaks the graph) with a reported reason and gives eager's answer, never the
answer of a generator run ahead or an iterator snapshotted. Compared on the
first call and on the cache hit; graph counts from a counting backend, torch._dynamo's
beside them where it captures."""
import pytest
import torch
import torch._dynamo
import torch._dynamo.testing

import cdynamo
from cdynamo.testing import CompileCounter


def outcome(fn, *args):
    try:
        return ("ok", fn(*args))
    except Exception as e:  # noqa: BLE001 - the exception is the result compared
        return ("raised", type(e), str(e))


def same(a, b):
    if type(a).__name__ == "generator":  # compared by what is left of it
        return type(b).__name__ == "generator" and same(list(a), list(b))
    if isinstance(a, torch.Tensor):
        return isinstance(b, torch.Tensor) and torch.equal(a, b)
    if isinstance(a, (list, tuple)):
        return type(a) is type(b) and len(a) == len(b) and all(same(x, y) for x, y in zip(a, b))
    if isinstance(a, dict):
        return type(a) is type(b) and a.keys() == b.keys() and all(same(a[k], b[k]) for k in a)
    return a == b


def run_both(fn, make_args):
    """Eager, then compiled twice on fresh equal arguments: outcomes and arguments after."""
    cdynamo.reset()
    eager_args = make_args()
    want = outcome(fn, *eager_args)
    cnt = CompileCounter()
    cf = cdynamo.compile(fn, backend=cnt)
    for call in ("first call", "cache hit"):
        args = make_args()
        got = outcome(cf, *args)
        assert got[0] == want[0], (call, got, want)
        if got[0] == "ok":
            assert same(got[1], want[1]), (call, got, want)
        else:
            assert got[1:] == want[1:], (call, got, want)
        assert same(list(args), list(eager_args)), (call, args, eager_args)
    return cnt, cdynamo.stats()


def native_reasons(st):
    return " | ".join(str(n.get("reason")) for n in st["native_frames"])


def T():
    return (torch.arange(4.0),)


def returned_generator(x):
    log = []

    def g():
        for i in range(3):
            log.append(i)
            yield x + i
    it = g()
    next(it)
    return it, log


def test_started_generator_returned_runs_natively():
    # The paused generator leaves the frame: the frame runs natively, with its reason.
    cdynamo.reset()
    cf = cdynamo.compile(returned_generator, backend=CompileCounter())
    for _ in range(2):
        got_it, got_log = cf(torch.arange(4.0))
        want_it, want_log = returned_generator(torch.arange(4.0))
        assert got_log == want_log == [0]
        assert type(got_it).__name__ == "generator"
        assert same(list(got_it), list(want_it)) and got_log == want_log == [0, 1, 2]
    st = cdynamo.stats()
    assert st["frames_native"] >= 1 and "generator" in native_reasons(st), native_reasons(st)


def test_unstarted_generator_returned():
    def f(x):
        return (x * i for i in range(3))
    cdynamo.reset()
    cf = cdynamo.compile(f, backend=CompileCounter())
    for _ in range(2):
        g = cf(torch.ones(2))
        assert type(g).__name__ == "generator"
        assert same(list(g), list(f(torch.ones(2))))


def test_generator_alive_at_a_graph_break():
    def f(x):
        log = []

        def g():
            for i in range(3):
                log.append(i)
                yield x * i
        it = g()
        a = next(it)
        if (x.sum() > 0).item():  # data-dependent: a graph break with `it` paused
            a = a + 1
        return a, next(it), log
    cnt, st = run_both(f, T)
    assert st["frames_native"] >= 1 or st["graph_breaks"] >= 1, st


def test_generator_paused_in_try_finally_dropped():
    # Dropping a paused generator closes it: its finally block runs when the frame lets it
    # go. The trace does not model that close: the frame runs natively.
    def f(x):
        log = []

        def g():
            try:
                yield x + 1
                yield x + 2
            finally:
                log.append("closed")
        it = g()
        a = next(it)
        del it
        return a, log
    cnt, st = run_both(f, T)
    assert "try/with" in native_reasons(st), native_reasons(st)


def test_generator_close_inside_try_finally():
    def f(x):
        log = []

        def g():
            try:
                yield x + 1
            finally:
                log.append("closed")
        it = g()
        a = next(it)
        it.close()
        return a, log
    # close() raises GeneratorExit at the yield: the finally block runs in the trace.
    cnt, st = run_both(f, T)
    assert st["frames_native"] == 0 and cnt.frame_count == 1, st


def test_generator_finished_inside_try_finally_captured():
    def f(x):
        log = []

        def g():
            try:
                yield x + 1
            finally:
                log.append("closed")
        return list(g()), log
    cnt, st = run_both(f, T)
    assert st["frames_native"] == 0 and cnt.frame_count == 1, st


def test_generator_throw_is_captured():
    def f(x):
        def g():
            try:
                yield x + 1
            except ValueError:
                yield x + 2
        it = g()
        next(it)
        return it.throw(ValueError("in"))
    # throw() raises at the yield: the generator's handler runs in the trace.
    cnt, st = run_both(f, T)
    assert st["frames_native"] == 0 and cnt.frame_count == 1, st


def test_generator_that_resumes_itself_raises_value_error():
    def f(x):
        box = []

        def g():
            yield next(box[0])
        it = g()
        box.append(it)
        try:
            next(it)
        except ValueError as e:
            return x + 1, str(e)
        return x
    run_both(f, T)


def test_dict_keys_replaced_same_size_during_iteration():
    # Python walks a dict by its entry table; a key deleted and another added keeps the size
    # and is not modeled: the frame runs natively rather than guess the order.
    def f(x):
        d = {1: 1, 2: 2, 3: 3}
        out = []
        for k in d:
            out.append(k)
            if k == 1:
                del d[2]
                d[4] = 4
        return x + 1, out
    cnt, st = run_both(f, T)
    assert st["frames_native"] >= 1, st


def test_deque_mutated_during_iteration_raises():
    from collections import deque

    def f(x):
        q = deque([1, 2, 3])
        try:
            for v in q:
                q.append(v)
        except RuntimeError as e:
            return x + 1, str(e)
        return x
    run_both(f, T)


def test_context_manager_inside_generator_reported():
    def f(x):
        def g():
            with torch.no_grad():
                yield x * 2
        it = g()
        a = next(it)
        grad = torch.is_grad_enabled()
        return a, grad, list(it)
    cnt, st = run_both(f, T)
    assert "generator" in native_reasons(st), native_reasons(st)


def test_simple_generator_use_matches_dynamo_graph_count():
    def f(x):
        def g():
            for i in range(3):
                yield x + i
        it = g()
        a = next(it)
        b = next(it)
        return a * b, list(it)
    cnt, st = run_both(f, T)
    assert st["frames_native"] == 0 and cnt.frame_count == 1
    torch._dynamo.reset()
    dcnt = torch._dynamo.testing.CompileCounter()
    torch.compile(f, backend=dcnt)(torch.arange(4.0))
    torch._dynamo.reset()
    assert cnt.frame_count <= dcnt.frame_count


class Seq:
    """A sequence with only __getitem__ and __len__: iter() is collections.abc's
    Sequence.__iter__ style generator, paused inside `try: ... except IndexError`."""

    def __init__(self, items):
        self.items = items

    def __getitem__(self, i):
        return self.items[i]

    def __len__(self):
        return len(self.items)


def seq_iter(s):
    i = 0
    try:
        while True:
            v = s[i]
            yield v
            i += 1
    except IndexError:
        return


def test_generator_paused_in_try_except_dropped_is_captured():
    # Dropping it raises GeneratorExit at its yield, which `except IndexError` lets through
    # without changing anything: closing it in the trace shows that, and the frame is captured.
    def f(x):
        s = Seq([x, x + 1])
        return next(seq_iter(s)) * 2
    cnt, st = run_both(f, T)
    assert st["frames_native"] == 0 and cnt.frame_count == 1, st
