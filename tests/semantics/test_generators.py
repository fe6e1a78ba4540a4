"""Generators as values: send(), throw() and close() act on the paused frame as CPython's do
(the exception is raised at the yield, its handlers and finally blocks run there, in the
program's order), `yield from` hands send/throw/close to the subgenerator, and a generator
closed by the trace's end runs its finally blocks as dropping it would."""
import pytest
import torch

from .harness import Cases, check, tensors

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


@pytest.mark.parametrize("fn,make_args,expect_graphs", case.params)
def test_generators(fn, make_args, expect_graphs):
    check(fn, make_args, expect_graphs=expect_graphs)
