"""Generators as values: send(), throw() and close() act on the paused frame as CPython's do
(the exception is raised at the yield, its handlers and finally blocks run there, in the
program's order), `yield from` hands send/throw/close to the subgenerator, and a generator
closed by the trace's end runs its finally blocks as dropping it would."""
import contextlib
import itertools
import types

import pytest
import torch

from .harness import Cases, assert_same, check, tensors

case = Cases()
T4 = tensors((4,))


class Ctx:
    def __init__(self, log):
        self.log = log

    def __enter__(self):
        self.log.append("enter")

    def __exit__(self, *exc):
        self.log.append(exc[0].__name__ if exc[0] else None)
        return False


# ---- throw() ----

@case(T4)
def throw_caught_yields_from_handler(x):
    def g(t):
        try:
            yield t.sin()
        except RuntimeError:
            yield t.cos()

    gen = g(x)
    a = next(gen)
    b = gen.throw(RuntimeError)
    return a + b


@case(T4)
def throw_instance_caught_and_message_read(x):
    def g(t):
        try:
            yield t + 1
        except ValueError as e:
            yield t * len(str(e))

    gen = g(x)
    next(gen)
    return gen.throw(ValueError("abc"))


@case(T4)
def throw_not_caught_runs_finally_and_propagates(x):
    log = []

    def g(t):
        try:
            yield t + 1
        except ValueError:
            log.append("value")
        finally:
            log.append("finally")

    gen = g(x)
    a = next(gen)
    try:
        gen.throw(KeyError("k"))
    except KeyError as e:
        log.append(str(e))
    try:
        next(gen)
    except StopIteration:
        log.append("ended")
    return a, log


@case(T4)
def throw_caught_then_returns_stop_iteration(x):
    log = []

    def g(t):
        try:
            yield t
        except ValueError:
            log.append(1)
        finally:
            log.append(2)
        return 7

    gen = g(x)
    next(gen)
    try:
        gen.throw(ValueError)
    except StopIteration as e:
        return x + e.value, log
    return x, log


@case(T4)
def throw_into_unstarted_generator(x):
    log = []

    def g():
        log.append("ran")
        try:
            yield 1
        except ValueError:
            yield 2

    gen = g()
    try:
        gen.throw(ValueError)
    except ValueError:
        log.append("raised")
    try:
        next(gen)
    except StopIteration:
        log.append("ended")
    return x + 1, log


@case(T4)
def throw_into_finished_generator(x):
    def g():
        yield 1

    gen = g()
    list(gen)
    try:
        gen.throw(KeyError)
    except KeyError:
        return x + 1
    return x


@case(T4)
def throw_stop_iteration_becomes_runtime_error(x):
    def g():
        yield 1

    gen = g()
    next(gen)
    try:
        gen.throw(StopIteration)
    except RuntimeError as e:
        return x + 1, str(e), type(e.__cause__).__name__
    return x


@case(T4)
def throw_nested_try_except_finally(x):
    log = []

    def g():
        try:
            try:
                yield 1
            except ValueError:
                log.append("inner")
                yield 2
            finally:
                log.append("inner finally")
        except ValueError:
            log.append("outer")
            yield 3
        finally:
            log.append("outer finally")

    gen = g()
    next(gen)
    a = gen.throw(ValueError)
    b = gen.throw(ValueError)
    return x + a + b, log


@case(T4)
def throw_handler_sees_its_exception_and_caller_keeps_its_own(x):
    def g():
        try:
            yield 1
        except KeyError:
            yield 2  # paused inside its handler
            yield 3

    gen = g()
    next(gen)
    gen.throw(KeyError)
    try:
        raise ValueError("outer")
    except ValueError as e:
        v = next(gen)
        return x + v, str(e)


@case(T4)
def throw_with_type_value_traceback(x):
    def g():
        try:
            yield 1
        except ValueError as e:
            yield len(str(e))

    gen = g()
    next(gen)
    err = ValueError("four")
    return x + gen.throw(ValueError, err, None)


@contextlib.contextmanager
def _guarded(log):
    log.append("enter")
    try:
        yield 5
    except ValueError as e:
        log.append("caught " + str(e))
    finally:
        log.append("finally")


@case(T4)
def contextmanager_exception_through_with_block_is_thrown_in(x):
    log = []
    with _guarded(log) as v:
        y = x + v
        raise ValueError("boom")
    return y, log


@case(T4)
def contextmanager_exception_it_does_not_catch(x):
    log = []
    try:
        with _guarded(log):
            raise KeyError("k")
    except KeyError:
        log.append("outer")
    return x + 1, log


# ---- close() ----

@case(T4)
def close_runs_finally(x):
    log = []

    def g(t):
        try:
            yield t.sin()
            yield t.cos()
        finally:
            log.append("closed")

    gen = g(x)
    a = next(gen)
    r = gen.close()
    gen.close()  # a second close does nothing
    return a, r, log


@case(T4)
def close_caught_generator_exit_and_returns(x):
    log = []

    def g():
        try:
            yield 1
        except GeneratorExit:
            log.append("exit")
            return 5

    gen = g()
    next(gen)
    return x + 1, gen.close(), log


@case(T4)
def close_that_yields_again_is_runtime_error(x):
    def g():
        try:
            yield 1
        except GeneratorExit:
            yield 2

    gen = g()
    next(gen)
    try:
        gen.close()
    except RuntimeError as e:
        return x + 1, str(e)
    return x


@case(T4)
def close_not_caught_by_except_exception(x):
    log = []

    def g():
        try:
            yield 1
        except Exception:
            log.append("wrong")
        finally:
            log.append("finally")

    gen = g()
    next(gen)
    gen.close()
    return x + 1, log


@case(T4)
def close_handler_raises_other_error(x):
    def g():
        try:
            yield 1
        except GeneratorExit:
            raise ValueError("from close")

    gen = g()
    next(gen)
    try:
        gen.close()
    except ValueError as e:
        return x + 1, str(e)
    return x


@case(T4)
def close_inside_with_runs_exit(x):
    log = []

    def g():
        with Ctx(log):
            yield 1
            yield 2

    gen = g()
    next(gen)
    gen.close()
    return x + 1, log


# ---- yield from hands send/throw/close to the subgenerator ----

@case(T4)
def yield_from_throw_caught_by_subgenerator(x):
    log = []

    def sub():
        try:
            yield 1
        except ValueError:
            log.append("sub")
            yield 10
        return 100

    def outer():
        r = yield from sub()
        log.append(r)
        yield r + 1

    gen = outer()
    a = next(gen)
    b = gen.throw(ValueError)
    c = next(gen)
    return x + a + b + c, log


@case(T4)
def yield_from_throw_subgenerator_returns(x):
    def sub():
        try:
            yield 1
        except ValueError:
            return 5

    def outer():
        r = yield from sub()
        yield r * 2

    gen = outer()
    next(gen)
    return x + gen.throw(ValueError)


@case(T4)
def yield_from_throw_passes_through_subgenerator(x):
    log = []

    def sub():
        try:
            yield 1
        finally:
            log.append("sub finally")

    def outer():
        try:
            yield from sub()
        except KeyError:
            log.append("outer caught")
            yield 2

    gen = outer()
    next(gen)
    return x + gen.throw(KeyError), log


@case(T4)
def yield_from_close_closes_subgenerator_first(x):
    log = []

    def sub():
        try:
            yield 1
        finally:
            log.append("sub")

    def outer():
        try:
            yield from sub()
        finally:
            log.append("outer")

    gen = outer()
    next(gen)
    gen.close()
    return x + 1, log


@case(T4)
def yield_from_send_reaches_subgenerator(x):
    def sub():
        got = yield 1
        yield got * 2

    def outer():
        yield from sub()

    gen = outer()
    next(gen)
    return gen.send(x)


# ---- a generator left paused where the frame ends is closed as Python drops it ----

@case(T4)
def paused_generator_finally_runs_at_frame_end(x):
    log = []

    def g(t):
        try:
            yield t + 1
            yield t + 2
        finally:
            log.append("dropped")

    gen = g(x)
    a = next(gen)
    return a, log


# ---- a generator the program keeps leaves the frame as a generator of its items ----
# (compared by what they yield: test_kept_generators)

KEPT = []


def kept(fn):
    KEPT.append(pytest.param(fn, id=fn.__name__))
    return fn


@kept
def returned_generator_partly_taken(x):
    def g(t):
        yield t + 1
        yield t + 2
        yield t * 3

    gen = g(x)
    first = next(gen)
    return first, gen


@kept
def returned_zip_over_generator(x):
    def g(t):
        yield t.sin()
        yield t.cos()

    return zip(range(3), g(x)), x + 1


@kept
def returned_generator_delegating(x):
    def sub(t):
        yield t + 1
        yield t + 2

    def outer(t):
        yield from sub(t)
        yield t + 3

    gen = outer(x)
    next(gen)
    return gen


@kept
def returned_tee_copies_at_their_positions(x):
    a, b = itertools.tee(x * i for i in range(4))
    next(a)
    next(a)
    next(b)
    return a, b


@case(T4)
def generator_expression_consumed_by_builtins(x):
    vals = [1.0, 2.0, 3.0]
    total = sum(v * 2 for v in vals)
    biggest = max(x[i] for i in range(3))
    flags = any(v > 2.5 for v in vals), all(v > 0 for v in vals)
    return x * total + biggest, flags, tuple(v + 1 for v in vals)


@case(T4)
def generator_return_value_through_stop_iteration(x):
    def g():
        yield 1
        return 5

    gen = g()
    next(gen)
    try:
        next(gen)
    except StopIteration as e:
        return x + e.value
    return x


@case(T4)
def in_on_generator_takes_up_to_the_item(x):
    log = []

    def g():
        for i in range(4):
            log.append(i)
            yield i

    gen = g()
    found = 2 in gen
    rest = list(gen)
    return x + 1, found, rest, log, 9 in g()


@case(T4)
def generator_consumed_then_closed_and_thrown(x):
    def g():
        yield 1
        yield 2

    gen = g()
    total = sum(gen)
    gen.close()
    try:
        gen.throw(KeyError)
    except KeyError:
        total += 10
    return x + total


def _kept_generator_that_changes_state(x, log):
    def g(t):
        log.append(1)
        yield t + 1
        log.append(2)
        yield t + 2

    return g(x)


def kept_generator_with_side_effects_runs_natively(x):
    log = []
    gen = _kept_generator_that_changes_state(x, log)
    return gen, log


@pytest.mark.parametrize("fn,make_args,expect_graphs", case.params)
def test_generators(fn, make_args, expect_graphs):
    check(fn, make_args, expect_graphs=expect_graphs)


def test_kept_generator_with_side_effects_is_not_rebuilt():
    # Running it ahead would move its appends before the caller sees the list: the frame
    # runs natively instead (a reason recorded), and the caller sees eager's behaviour.
    import cdynamo

    cdynamo.reset()
    compiled = cdynamo.compile(kept_generator_with_side_effects_runs_natively, backend="eager")
    x = torch.randn(4)
    gen, log = compiled(x)
    assert log == []
    assert type(gen).__name__ == "generator"
    items = list(gen)
    assert log == [1, 2]
    assert torch.equal(items[0], x + 1) and torch.equal(items[1], x + 2)
    natives = cdynamo.stats()["native_frames"]
    assert any("cannot be run ahead" in str(n) for n in natives), natives


def _materialize(v):
    if isinstance(v, tuple):
        return tuple(_materialize(x) for x in v)
    if isinstance(v, types.GeneratorType):
        return ("generator", [_materialize(x) for x in v])
    if isinstance(v, (zip, type(itertools.tee(())[0]))):
        return ("zip", [_materialize(x) for x in v])
    return v


@pytest.mark.parametrize("fn", KEPT)
def test_kept_generators(fn):
    # A generator returned unfinished is a generator (of the same items) on the first call
    # and on the cache hit, in one graph.
    import cdynamo
    import cdynamo.testing

    cdynamo.reset()
    torch.manual_seed(0)
    x = torch.randn(4)
    expected = _materialize(fn(x.clone()))
    cnt = cdynamo.testing.CompileCounter()
    compiled = cdynamo.compile(fn, backend=cnt)
    for _ in range(2):
        assert_same(expected, _materialize(compiled(x.clone())))
    assert cnt.frame_count == 1
    st = cdynamo.stats()
    assert st["cache_hits"] == 1 and st["frames_native"] == 0, st


def kept_generator_sharing_an_iterator(x):
    source = iter([x, x + 1, x + 2])
    gen = (v * 2 for v in source)
    return gen, source


def test_kept_generator_sharing_an_iterator_is_not_run_ahead():
    # The caller may take from `source` before it runs `gen`: running gen ahead would have
    # emptied it. The frame runs natively; the caller sees eager's behaviour.
    import cdynamo

    cdynamo.reset()
    x = torch.randn(4)
    gen, source = cdynamo.compile(kept_generator_sharing_an_iterator, backend="eager")(x)
    assert torch.equal(next(source), x)
    assert [v.tolist() for v in gen] == [((x + 1) * 2).tolist(), ((x + 2) * 2).tolist()]
    natives = cdynamo.stats()["native_frames"]
    assert any("cannot be run ahead" in str(n) for n in natives), natives


def kept_generator_reading_a_list_argument(x, lst):
    return (x * v for v in lst)


def test_kept_generator_reading_program_state_is_not_run_ahead():
    # The caller appends to the list before it takes the items: eager sees the new item.
    import cdynamo

    cdynamo.reset()
    x = torch.randn(4)
    lst = [1, 2]
    gen = cdynamo.compile(kept_generator_reading_a_list_argument, backend="eager")(x, lst)
    lst.append(3)
    assert len(list(gen)) == 3
    natives = cdynamo.stats()["native_frames"]
    assert any("cannot be run ahead" in str(n) for n in natives), natives
