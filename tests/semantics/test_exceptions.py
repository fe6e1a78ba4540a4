"""Exceptions inside the traced region: try/except/else/finally, raise and catch in the trace,
assert on constants; and a few functions that raise out of their frame (outcome only)."""
import pytest
import torch

import cdynamo
import cdynamo.testing

from .harness import Cases, check, tensors

case = Cases()
T4 = tensors((4,))


class MyError(Exception):
    pass


class SubError(MyError):
    def __init__(self, code):
        super().__init__(f"code {code}")
        self.code = code


class Empty:
    pass


def risky(n):
    if n > 2:
        raise ValueError("too big")
    return n


@case(T4)
def try_except_caught_value_error(x):
    try:
        raise ValueError("boom")
    except ValueError:
        x = x + 1
    return x


@case(T4)
def try_except_as_message(x):
    try:
        raise KeyError("k")
    except KeyError as e:
        msg = str(e)
    return x * len(msg), msg


@case(T4)
def try_except_no_exception(x):
    try:
        y = x * 2
    except RuntimeError:
        y = x
    return y


@case(T4)
def try_except_else(x):
    try:
        y = x + 1
    except ValueError:
        y = x - 1
    else:
        y = y * 10
    return y


@case(T4)
def try_finally_runs(x):
    log = []
    try:
        y = x + 1
    finally:
        log.append("finally")
    return y, log


@case(T4)
def try_except_finally_with_raise(x):
    log = []
    try:
        log.append("try")
        raise IndexError("i")
    except IndexError:
        log.append("except")
        x = x * 2
    finally:
        log.append("finally")
    return x, log


@case(T4)
def return_inside_finally_path(x):
    def f(t):
        try:
            return t + 1
        finally:
            t.add_(0)
    return f(x)


@case(T4)
def except_tuple_of_types(x):
    try:
        {}["missing"]
    except (IndexError, KeyError):
        x = x + 5
    return x


@case(T4)
def except_base_class_catches_subclass(x):
    try:
        raise SubError(7)
    except MyError as e:
        return x * e.code, str(e)


@case(T4)
def exception_from_inlined_call(x):
    try:
        risky(5)
    except ValueError as e:
        return x - 1, e.args
    return x


@case(T4)
def no_exception_from_inlined_call(x):
    try:
        n = risky(1)
    except ValueError:
        n = -1
    return x * n


@case(T4)
def builtin_raises_key_error_caught(x):
    d = {"a": 1}
    try:
        v = d["b"]
    except KeyError:
        v = 0
    return x + v


@case(T4)
def builtin_raises_index_error_caught(x):
    xs = [1, 2]
    try:
        v = xs[5]
    except IndexError:
        v = -1
    return x * v


@case(T4)
def zero_division_caught(x):
    try:
        k = 1 // 0
    except ZeroDivisionError:
        k = 2
    return x * k


@case(T4)
def attribute_error_caught(x):
    try:
        v = Empty().missing
    except AttributeError:
        v = 3
    return x * v


@case(T4)
def stop_iteration_caught(x):
    it = iter([])
    try:
        next(it)
        hit = False
    except StopIteration:
        hit = True
    return x + hit


@case(T4)
def nested_try_inner_handles(x):
    try:
        try:
            raise ValueError("inner")
        except ValueError:
            x = x + 1
        x = x * 2
    except ValueError:
        x = x - 100
    return x


@case(T4)
def nested_try_reraise_outer_handles(x):
    try:
        try:
            raise ValueError("inner")
        except ValueError:
            x = x + 1
            raise
    except ValueError as e:
        x = x * 3
        msg = str(e)
    return x, msg


@case(T4)
def raise_from_caught(x):
    try:
        try:
            raise KeyError("a")
        except KeyError as e:
            raise RuntimeError("wrapped") from e
    except RuntimeError as e:
        return x + 1, str(e), type(e.__cause__).__name__


@case(T4)
def exception_in_loop_continue(x):
    total = x * 0
    for i in range(4):
        try:
            if i % 2:
                raise ValueError(i)
            total = total + x * i
        except ValueError:
            continue
    return total


@case(T4)
def assert_on_constant_passes(x):
    assert 1 + 1 == 2, "math"
    assert isinstance(x, torch.Tensor)
    return x + 1


@case(T4)
def assert_on_shape(x):
    assert x.shape[0] == 4, f"bad shape {x.shape}"
    assert x.dim() == 1
    return x * 2


@case(T4)
def exception_variable_cleared_after_except(x):
    try:
        raise ValueError("v")
    except ValueError as err:
        name = type(err).__name__
    return x + len(name), name


@case(T4)
def isinstance_on_caught_exception(x):
    try:
        raise SubError(3)
    except Exception as e:
        if isinstance(e, SubError):
            return x * e.code
        return x


@case(T4)
def exception_object_created_not_raised(x):
    e = ValueError("not raised", 3)
    return x * e.args[1], e.args[0]


@case(T4)
def finally_after_return_in_inlined(x):
    log = []

    def f(t):
        try:
            return t * 2
        finally:
            log.append("cleanup")
    return f(x), log


# ---- functions that raise out of their frame: outcome (exception, argument state) only


# Implicit chaining: an exception raised while another is handled gets it as __context__
# (set at every raise: a raise statement, a modelled builtin, C code run in the trace, an
# inlined call), never at a bare `raise`; a chain leading back to the raised one is cut.
@case(T4)
def context_of_raise_inside_handler(x):
    seen = []
    try:
        try:
            1 / 0
        except ZeroDivisionError:
            for cls in (KeyError, IndexError):
                try:
                    raise cls
                except cls as e:
                    seen.append(type(e.__context__).__name__)
            raise
    except ZeroDivisionError as outer:
        seen.append(outer.__context__)
    return x + len(seen), seen


@case(T4)
def context_of_builtin_error_inside_handler(x):
    d = {}
    try:
        raise ValueError("first")
    except ValueError:
        try:
            d["missing"]
        except KeyError as e:
            return x * 2, type(e.__context__).__name__, e.__context__.args


@case(T4)
def context_through_inlined_call(x):
    def inner():
        try:
            raise ValueError("inner")
        except ValueError:
            raise KeyError("second")
    try:
        raise IndexError("outer")
    except IndexError:
        try:
            inner()
        except KeyError as e:
            # inner's KeyError was chained to inner's ValueError, which was chained to the
            # caller's IndexError; propagating out of inner() does not chain again
            return x - 1, type(e.__context__).__name__, type(e.__context__.__context__).__name__


@case(T4)
def context_with_explicit_cause(x):
    try:
        raise IndexError("a")
    except IndexError as ie:
        try:
            raise KeyError("b") from ie
        except KeyError as e:
            return x + 3, type(e.__context__).__name__, e.__cause__ is ie, e.__suppress_context__


@case(T4)
def context_chain_cycle_is_cut(x):
    try:
        try:
            raise TypeError("a")
        except TypeError as a_:
            a = a_
            try:
                raise ValueError("b")
            except ValueError as b_:
                b = b_
                raise a
    except TypeError as e:
        # raising a again while b (whose context is a) is handled: a.__context__ = b, and
        # b's link back to a is cut
        return x * 3, e is a, a.__context__ is b, b.__context__ is None


@case(T4)
def no_context_outside_a_handler(x):
    try:
        raise ValueError("alone")
    except ValueError as e:
        return x + 1, e.__context__ is None


class ErrorWithFields(Exception):
    def __init__(self, a, b=None, *, c=0):
        self.a = a
        self.b = b
        self.c = c


@case(T4)
def exception_class_called_with_keywords(x):
    # keywords go to the Python __init__; .args keeps only the positional arguments
    try:
        raise ErrorWithFields(2, b=3, c=4)
    except ErrorWithFields as e:
        return x * e.a + e.b + e.c, e.args


@case(T4, expect_graphs=None)
def raises_value_error_out(x):
    y = x + 1  # noqa: F841
    raise ValueError("raised out of the frame")


@case(lambda: ([torch.randn(2)],), expect_graphs=None)
def raises_after_mutating_list_arg(xs):
    xs.append(xs[0] * 2)
    raise RuntimeError(f"after append, {len(xs)} items")


@case(lambda: (torch.randn(4),), expect_graphs=None)
def raises_after_inplace_on_arg(x):
    x.add_(1)
    raise MyError("after add_")


@case(T4, expect_graphs=None)
def assert_fails(x):
    assert x.shape[0] == 5, "expected 5 rows"
    return x


@case(T4, expect_graphs=None)
def shape_mismatch_raises_runtime_error(x):
    return x + torch.ones(3)


@case(T4, expect_graphs=None)
def key_error_out(x):
    d = {"a": x}
    return d["b"]


@case(T4, expect_graphs=None)
def inlined_call_raises_out(x):
    return x * risky(10)


@case(T4, expect_graphs=None)
def type_error_from_bad_call(x):
    return x.view(2, 2, 2, 2, "bad")


def _raise_deeper(n):
    if n == 0:
        raise ValueError("at the bottom")
    return _raise_deeper(n - 1)


@case(T4)
def traceback_is_set_in_the_handler(x):
    # a caught exception has a traceback (one entry: this frame) as in CPython
    try:
        raise ValueError("oops")
    except ValueError as e:
        tb = e.__traceback__
        if tb is not None:
            x = x + 1
        return x, tb is None, tb.tb_next is None, type(tb).__name__


@case(T4)
def traceback_entries_follow_the_frames_it_left(x):
    # one entry for the handler's frame, then one per frame the exception unwound through,
    # with each frame's line
    try:
        _raise_deeper(2)
    except ValueError as e:
        lines = []
        tb = e.__traceback__
        while tb is not None:
            lines.append(tb.tb_lineno)
            tb = tb.tb_next
        return x * len(lines), lines


@case(T4)
def reraise_adds_no_traceback_entry(x):
    def inner():
        try:
            raise KeyError("k")
        except KeyError:
            raise

    try:
        inner()
    except KeyError as e:
        n = 0
        tb = e.__traceback__
        while tb is not None:
            n += 1
            tb = tb.tb_next
        return x + n, n


@case(T4)
def traceback_tb_next_set_and_checked(x):
    try:
        raise ValueError("first")
    except ValueError as e:
        tb1 = e.__traceback__
        try:
            raise RuntimeError("second") from None
        except RuntimeError as e2:
            tb2 = e2.__traceback__
            tb2.tb_next = tb1
            linked = tb2.tb_next is tb1
            try:
                tb1.tb_next = tb2  # a cycle: ValueError, as CPython checks
            except ValueError:
                x = x + 10
            try:
                tb1.tb_next = 3
            except TypeError:
                x = x + 100
            tb2.tb_next = None
            return x, linked, tb2.tb_next is None


@case(T4)
def with_traceback_and_set_traceback(x):
    try:
        raise ValueError("first")
    except ValueError as e:
        tb = e.__traceback__
    try:
        raise RuntimeError("second").with_traceback(tb) from None
    except RuntimeError as e2:
        # the raise puts this frame's entry in front of the traceback it was given
        same_tail = e2.__traceback__.tb_next is tb
        e2.__traceback__ = None
        cleared = e2.__traceback__ is None
        try:
            e2.with_traceback(5)
        except TypeError:
            x = x * 2
        return x, same_tail, cleared


@case(T4)
def sys_exc_info_inside_and_after_handlers(x):
    import sys
    outside_before = sys.exc_info()
    try:
        raise ZeroDivisionError("z")
    except ZeroDivisionError as e:
        inside = sys.exc_info()
        same = inside[1] is e and inside[0] is ZeroDivisionError and inside[2] is e.__traceback__
        try:
            raise KeyError("k")
        except KeyError:
            nested = type(sys.exception()).__name__
        back = sys.exception() is e
    after = sys.exc_info()
    return x + 1, outside_before, same, nested, back, after, sys.exception()


@case(T4)
def reraise_leaves_no_exception_active(x):
    import sys
    try:
        try:
            raise ValueError
        except ValueError:
            for cls in (KeyError, IndexError):
                try:
                    raise cls
                except cls as e:
                    assert isinstance(e.__context__, ValueError)
            raise
    except ValueError:
        pass
    return x - 1, sys.exc_info()[0] is None


@case(T4)
def vars_of_a_constant_raises_type_error(x):
    try:
        vars(42)
        return x
    except TypeError as e:
        return x.sin(), str(e)


@case(T4)
def returned_exception_is_made_anew(x):
    # an exception made in the frame and returned: a new object on every call, with its
    # chained exceptions and attributes
    try:
        raise ValueError(1, 2)
    except ValueError:
        try:
            raise ErrorWithFields(5, b="b") from None
        except ErrorWithFields as e:
            e.__cause__ = KeyError("why")
            e.extra = 7
            return x.sin(), e


def _exception_reached_several_ways(x):
    import sys
    r = RuntimeError("r")
    same = r.with_traceback(None)
    try:
        raise ValueError(1)
    except ValueError as e:
        return x + 1, r, same, e, sys.exc_info()[1], sys.exception()


def test_returned_exception_reached_several_ways_is_one_object():
    # the harness compares values; identity among the results, and a new object per call,
    # are checked here (first call and cache hit), against eager
    check(_exception_reached_several_ways, T4)
    cdynamo.reset()
    cnt = cdynamo.testing.CompileCounter()
    cfn = cdynamo.compile(_exception_reached_several_ways, backend=cnt)
    eager = _exception_reached_several_ways(torch.randn(4))
    seen = []
    for _ in range(2):
        got = cfn(torch.randn(4))
        for res in (eager, got):
            assert res[1] is res[2] and res[3] is res[4] is res[5] and res[1] is not res[3]
        seen.append(got[3])
    assert seen[0] is not seen[1]
    assert cnt.frame_count == 1


@case(T4)
def returned_exception_with_links_set(x):
    v = TypeError("t", 3)
    v.__context__ = IndexError()
    v.__cause__ = RuntimeError("r")
    return x + 1, v


def _set_cause_on_arg(x, err):
    err.__cause__ = ValueError("the cause")
    return x.cos(), err.__suppress_context__


def _set_bad_cause_on_arg(x, err):
    try:
        err.__cause__ = 2
    except TypeError as e:
        return x + 1, str(e)


def _set_context_on_arg(x, err):
    err.__context__ = KeyError("k")
    err.__suppress_context__ = False
    return x * 2


@pytest.mark.parametrize("fn,compare_dynamo", [(_set_cause_on_arg, True), (_set_context_on_arg, True),
                                               # torch._dynamo runs this one eagerly (no graph)
                                               (_set_bad_cause_on_arg, False)])
def test_exception_links_set_on_an_argument(fn, compare_dynamo):
    # the store is replayed on the argument on every call (checked through its mutated state)
    check(fn, lambda: (torch.randn(4), TypeError("abcd")), dynamo_reference=compare_dynamo)


def test_escaping_exception_reported_where_raised():
    # fullgraph: the error names the frame and line the program raised it at, not the end
    def g():
        raise LookupError("deep")

    def f(x):
        try:
            g()
        except LookupError:
            raise
        return x

    cdynamo.reset()
    with pytest.raises(cdynamo.Unsupported) as info:
        cdynamo.compile(f, fullgraph=True)(torch.randn(2))
    text = str(info.value)
    assert 'in g\n' in text and 'raise LookupError("deep")' in text and "LookupError: deep" in text


@pytest.mark.parametrize("fn,make_args,expect_graphs", case.params)
def test_exceptions(fn, make_args, expect_graphs):
    check(fn, make_args, expect_graphs=expect_graphs)


def _raise_and_report_context(x):
    try:
        raise ValueError("in the frame")
    except ValueError as e:
        return x + 1, type(e.__context__)


def _call_while_handling(f, x):
    try:
        raise ZeroDivisionError("the caller's")
    except ZeroDivisionError:
        return f(x)


def test_context_of_the_callers_handled_exception():
    # An exception raised at the compiled frame's top level takes as __context__ whatever
    # the caller is handling at that call: a graph compiled while the caller handled nothing
    # is guarded (sys.exception() is None) to be used only then, and a call inside an except
    # block runs natively (never a stale None context); eager is the reference on every
    # call, in both orders.
    x = torch.randn(4)
    for first_inside in (False, True):
        cdynamo.reset()
        cnt = cdynamo.testing.CompileCounter()
        cfn = cdynamo.compile(_raise_and_report_context, backend=cnt)
        order = [True, False, True, False] if first_inside else [False, True, False, True]
        for inside in order:
            if inside:
                expected = _call_while_handling(_raise_and_report_context, x)
                got = _call_while_handling(cfn, x)
                assert expected[1] is ZeroDivisionError
            else:
                expected = _raise_and_report_context(x)
                got = cfn(x)
                assert expected[1] is type(None)
            assert got[1] is expected[1]
            torch.testing.assert_close(got[0], expected[0])
        st = cdynamo.stats()
        # the graph compiled by a first call outside a handler; once a call inside one has
        # refused the trace, the frame runs natively from then on (as any refused frame)
        assert cnt.frame_count == (0 if first_inside else 1)
        if not first_inside:
            assert any("exception(...) == None" in r["reason"] for r in st["recompile_reasons"])
        reasons = [nf.get("reason") or "" for nf in st.get("native_frames", [])]
        assert any("caller handles another" in r for r in reasons), reasons


def _shape_error_after_finally(t):
    try:
        t.expand_as(torch.randn(2))  # raises on the fake tensors as it does eagerly
    finally:
        t.sin()
    return t.cos()


def _shape_error_plain(t):
    y = t * 2
    return torch.mm(y, y)  # (2, 3) @ (2, 3)


@pytest.mark.parametrize("fn", [_shape_error_after_finally, _shape_error_plain])
def test_op_failing_on_fake_tensors_under_fullgraph(fn):
    # The program's own error, not a construct cdynamo cannot capture: under fullgraph it is
    # torch._dynamo's TorchRuntimeError class (a RuntimeError), as torch.compile raises it,
    # on every call; without fullgraph the op runs eagerly and raises eager's error itself.
    import torch._dynamo.exc

    t = torch.randn(2, 3)
    with pytest.raises(RuntimeError) as eager:
        fn(t)
    cdynamo.reset()
    opt = cdynamo.compile(fn, backend="eager", fullgraph=True)
    for _ in range(2):
        with pytest.raises(cdynamo.exc.TorchRuntimeError) as info:
            opt(t)
        assert isinstance(info.value, torch._dynamo.exc.TorchRuntimeError)
        assert not isinstance(info.value, cdynamo.Unsupported)
        assert str(info.value).startswith("RuntimeError when making fake tensor call")
    torch._dynamo.reset()
    with pytest.raises(torch._dynamo.exc.TorchRuntimeError, match="RuntimeError when making fake tensor call"):
        torch.compile(fn, backend="eager", fullgraph=True)(t)
    cdynamo.reset()
    counter = cdynamo.testing.CompileCounter()
    relaxed = cdynamo.compile(fn, backend=counter)
    for _ in range(2):
        with pytest.raises(type(eager.value)) as info:
            relaxed(t)
        assert str(info.value) == str(eager.value)
    assert counter.frame_count >= 1  # the ops before the failing one are a graph
