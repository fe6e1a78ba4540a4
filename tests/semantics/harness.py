"""The semantic corpus harness: one function run eagerly, compiled by cdynamo, compiled by torch._dynamo.

``check(fn, make_args)`` runs ``fn`` on three equal but distinct sets of arguments (each built
by ``make_args()`` after ``torch.manual_seed(0)``): once eagerly, then twice through
``cdynamo.compile(fn, backend=CompileCounter())`` (the first call compiles, the second must
be a cache hit). It asserts, for both compiled calls, that

- the result is the eager result (same types all the way down, tensors by value, dtype,
  shape and requires_grad; returned arguments are the same argument objects),
- or, if eager raised, the same exception type and message is raised,
- every argument ends in the state eager execution left it in (mutations),
- exactly ``expect_graphs`` graphs were compiled over both calls, no frame ran natively,
  and the second call was a cache hit that compiled nothing.

With ``dynamo_reference`` it also runs ``torch.compile(fn, backend=torch._dynamo.testing.CompileCounter())``
on fresh arguments twice and asserts that cdynamo used no more graphs than torch._dynamo did;
what torch._dynamo did (graph count, graph breaks) is recorded in ``RECORDS`` for the report.

``expect_graphs=None`` is for the few functions that raise out of their frame (torch._dynamo
captures none of them either): only the outcome (the exception, the arguments' final state) is
asserted there, on both calls.

Set CDYNAMO_SEMANTICS_DYNAMO=0 to skip the torch._dynamo reference runs (about half the time).

``make_args()`` returns a tuple of positional arguments, or a ``Call(args, kwargs)``.
"""
import contextlib
import copy
import dataclasses
import math
import os
import traceback
from collections import deque

import torch
import torch._dynamo
import torch._dynamo.testing
import torch._dynamo.utils

import cdynamo
import cdynamo.testing

# One record per check() call, filled whether it passes or not (see conftest.py).
RECORDS = []
CURRENT = {"nodeid": None}


class NotCaptured(AssertionError):
    """The outcome equals eager, but cdynamo did not capture the case as expected."""


class Call:
    """Positional and keyword arguments for one call, from a make_args factory."""

    def __init__(self, *args, **kwargs):
        self.args = args
        self.kwargs = kwargs


_WORLD = {"reset": None, "snapshot": None}


def _build(make_args):
    if _WORLD["reset"] is not None:
        _WORLD["reset"]()
    torch.manual_seed(0)
    a = make_args()
    if isinstance(a, Call):
        return list(a.args), dict(a.kwargs)
    if not isinstance(a, tuple):
        raise TypeError("make_args must return a tuple or a Call")
    return list(a), {}


def _run(fn, args, kwargs):
    try:
        return ("ok", fn(*args, **kwargs))
    except Exception as e:  # noqa: BLE001 - the exception is the result being compared
        return ("raised", e)


# ----------------------------------------------------------------------------- comparison

_BUILTIN_SCALARS = (int, float, complex, bool, str, bytes, type(None), type(Ellipsis), range, slice)


def _fail(path, msg):
    raise AssertionError(f"at {path or '<result>'}: {msg}")


def _holds_tensor(v):
    return isinstance(v, torch.Tensor) or (isinstance(v, frozenset) and any(_holds_tensor(x) for x in v))


def assert_same(expected, actual, path="", _depth=0):
    """Deep equality with type identity; tensors by value, dtype, shape, requires_grad."""
    if _depth > 50:
        return
    d = _depth + 1
    if type(expected) is not type(actual):
        _fail(path, f"type {type(actual).__name__} != expected {type(expected).__name__} "
                    f"(got {actual!r:.200}, expected {expected!r:.200})")
    if isinstance(expected, torch.Tensor):
        if expected.shape != actual.shape:
            _fail(path, f"shape {tuple(actual.shape)} != expected {tuple(expected.shape)}")
        if expected.dtype != actual.dtype:
            _fail(path, f"dtype {actual.dtype} != expected {expected.dtype}")
        if expected.requires_grad != actual.requires_grad:
            _fail(path, f"requires_grad {actual.requires_grad} != expected {expected.requires_grad}")
        try:
            torch.testing.assert_close(actual.detach(), expected.detach(), equal_nan=True)
        except AssertionError as e:
            _fail(path, f"tensor values differ: {e}")
        return
    if type(expected).__module__ == "numpy" and type(expected).__name__ == "ndarray":
        if expected.shape != actual.shape or expected.dtype != actual.dtype:
            _fail(path, f"ndarray {actual.dtype}{actual.shape} != expected {expected.dtype}{expected.shape}")
        if not ((expected == actual) | ((expected != expected) & (actual != actual))).all():
            import numpy
            if not numpy.allclose(expected, actual, equal_nan=True):
                _fail(path, f"ndarray values differ: {actual!r:.200} != expected {expected!r:.200}")
        return
    if isinstance(expected, torch.nn.Module):
        if expected.training != actual.training:
            _fail(path, f"training {actual.training} != expected {expected.training}")
        es, as_ = expected.state_dict(keep_vars=True), actual.state_dict(keep_vars=True)
        if list(es) != list(as_):
            _fail(path, f"state_dict keys {list(as_)} != expected {list(es)}")
        for k in es:
            assert_same(es[k], as_[k], f"{path}.state_dict()[{k!r}]", d)
        for (n1, m1), (n2, m2) in zip(expected.named_modules(), actual.named_modules()):
            if n1 != n2 or m1.training != m2.training:
                _fail(path, f"submodule {n2!r} (training={m2.training}) != expected {n1!r} (training={m1.training})")
        ed = {k: v for k, v in vars(expected).items() if not k.startswith("_") and k != "training"}
        ad = {k: v for k, v in vars(actual).items() if not k.startswith("_") and k != "training"}
        assert_same(ed, ad, f"{path}.__dict__", d)
        return
    if isinstance(expected, (list, tuple)):  # includes torch.Size and namedtuples
        if len(expected) != len(actual):
            _fail(path, f"length {len(actual)} != expected {len(expected)} (got {actual!r:.200}, expected {expected!r:.200})")
        for i, (e, a) in enumerate(zip(expected, actual)):
            assert_same(e, a, f"{path}[{i}]", d)
        return
    if isinstance(expected, deque):
        if expected.maxlen != actual.maxlen:
            _fail(path, f"deque maxlen {actual.maxlen} != expected {expected.maxlen}")
        assert_same(list(expected), list(actual), path, d)
        return
    if isinstance(expected, dict):  # includes OrderedDict, defaultdict: key order matters
        if list(expected.keys()) != list(actual.keys()):
            _fail(path, f"keys {list(actual.keys())!r:.300} != expected {list(expected.keys())!r:.300}")
        for k in expected:
            assert_same(expected[k], actual[k], f"{path}[{k!r}]", d)
        return
    if isinstance(expected, (set, frozenset)):
        # Tensors (and frozensets of them) hash by identity: the compiled run's are other
        # objects, matched by value; the rest compare as Python does.
        plain_e = {v for v in expected if not _holds_tensor(v)}
        plain_a = {v for v in actual if not _holds_tensor(v)}
        if plain_e != plain_a or len(expected) != len(actual):
            _fail(path, f"{actual!r:.200} != expected {expected!r:.200}")
        left = [v for v in actual if _holds_tensor(v)]
        for e in (v for v in expected if _holds_tensor(v)):
            for i, a in enumerate(left):
                try:
                    assert_same(e, a, path, d)
                except AssertionError:
                    continue
                del left[i]
                break
            else:
                _fail(path, f"no item of {actual!r:.200} matches {e!r:.200}")
        return
    if isinstance(expected, float):
        if not (expected == actual or (math.isnan(expected) and math.isnan(actual))):
            _fail(path, f"{actual!r} != expected {expected!r}")
        return
    if isinstance(expected, _BUILTIN_SCALARS) or isinstance(expected, (torch.dtype, torch.device, type)):
        if expected != actual:
            _fail(path, f"{actual!r:.200} != expected {expected!r:.200}")
        return
    if isinstance(expected, BaseException):
        if str(expected) != str(actual):
            _fail(path, f"exception message {str(actual)!r} != expected {str(expected)!r}")
        return
    if callable(expected) and not hasattr(expected, "__dict__"):
        return  # builtins, bound methods of builtins: nothing comparable but the type
    if dataclasses.is_dataclass(expected) or hasattr(expected, "__dict__"):
        if hasattr(type(expected), "__eq__") and type(expected).__eq__ is not object.__eq__ \
                and not dataclasses.is_dataclass(expected):
            try:
                if not (expected == actual):
                    _fail(path, f"{actual!r:.200} != expected {expected!r:.200}")
            except (RuntimeError, TypeError):
                pass
        if callable(expected) and not isinstance(expected, object.__class__) and hasattr(expected, "__code__"):
            return  # functions: identity differs by construction
        assert_same(dict(vars(expected)), dict(vars(actual)), f"{path}.__dict__", d)
        return
    if expected != actual:
        _fail(path, f"{actual!r:.200} != expected {expected!r:.200}")


def _leaves(obj, out, depth=0):
    if depth > 20:
        return out
    if isinstance(obj, (list, tuple)):
        for o in obj:
            _leaves(o, out, depth + 1)
    elif isinstance(obj, dict):
        for o in obj.values():
            _leaves(o, out, depth + 1)
    else:
        out.append(obj)
    return out


def _aliasing(result, args, kwargs):
    """Which argument objects (by identity, by position among the arguments' leaves) the result returns."""
    everything = list(args) + list(kwargs.values())
    top = [a for a in everything if not isinstance(a, _BUILTIN_SCALARS)]
    for i, a in enumerate(top):
        if result is a:
            return ("whole", i)
    pos = {}
    for i, a in enumerate(_leaves(everything, [])):
        if not isinstance(a, _BUILTIN_SCALARS):
            pos.setdefault(id(a), i)
    return ("leaves", [pos.get(id(leaf)) for leaf in _leaves(result, [])
                       if not isinstance(leaf, _BUILTIN_SCALARS)])


def _compare_outcome(tag, eager, eager_args, got, got_args):
    (ekind, evalue), (ea, ek) = eager, eager_args
    (gkind, gvalue), (ga, gk) = got, got_args
    if ekind == "raised":
        if gkind != "raised":
            raise AssertionError(f"{tag}: eager raised {type(evalue).__name__}: {evalue}, "
                                 f"compiled returned {gvalue!r:.300}")
        if type(evalue) is not type(gvalue) or str(evalue) != str(gvalue):
            raise AssertionError(f"{tag}: eager raised {type(evalue).__name__}: {evalue!s:.300}; compiled raised "
                                 f"{type(gvalue).__name__}: {gvalue!s:.300}\n"
                                 + "".join(traceback.format_exception(gvalue))[-3000:])
    else:
        if gkind == "raised":
            raise AssertionError(f"{tag}: eager returned {evalue!r:.300}; compiled raised "
                                 f"{type(gvalue).__name__}: {gvalue!s:.500}\n"
                                 + "".join(traceback.format_exception(gvalue))[-3000:])
        try:
            assert_same(evalue, gvalue)
        except AssertionError as e:
            raise AssertionError(f"{tag}: WRONG RESULT: {e}") from None
        if _aliasing(evalue, ea, ek) != _aliasing(gvalue, ga, gk):
            raise AssertionError(f"{tag}: WRONG RESULT: aliasing of the result with the arguments differs: "
                                 f"eager {_aliasing(evalue, ea, ek)}, compiled {_aliasing(gvalue, ga, gk)}")
    try:
        assert_same(list(ea), list(ga), "args")
        assert_same(dict(ek), dict(gk), "kwargs")
    except AssertionError as e:
        raise AssertionError(f"{tag}: WRONG FINAL STATE of the arguments: {e}") from None


def _native_report(st):
    lines = []
    for nf in st.get("native_frames", []):
        lines.append(f"  {nf.get('function')} at {nf.get('filename')}:{nf.get('line')}: {nf.get('reason')}\n"
                     f"{nf.get('user_stack', '')}")
    return "cdynamo native frames:\n" + ("\n".join(lines) if lines else "  (none)")


def _dynamo_reference(fn, make_args, eager):
    torch._dynamo.reset()
    torch._dynamo.utils.counters.clear()
    dcnt = torch._dynamo.testing.CompileCounter()
    rec = {"graphs": None, "graph_breaks": 0, "error": None, "break_reasons": []}
    try:
        dfn = None if fn is COMPILE_MODULE else torch.compile(fn, backend=dcnt)
        for _ in range(2):
            a, k = _build(make_args)
            if fn is COMPILE_MODULE:
                dfn, a = torch.compile(a[0], backend=dcnt), a[1:]
            out = _run(dfn, a, k)
            if out[0] == "raised" and eager[0] != "raised":
                rec["error"] = f"{type(out[1]).__name__}: {str(out[1])[:300]}"
        rec["graphs"] = dcnt.frame_count
        c = torch._dynamo.utils.counters
        frames = dict(c.get("frames", {}))
        # A graph break makes a resume function; a frame dynamo gave up on is counted in total, not ok.
        rec["graph_breaks"] = sum(c.get("resumes", {}).values()) + (frames.get("total", 0) - frames.get("ok", 0))
        rec["break_reasons"] = [str(r).strip().splitlines()[0][:200] for r in c.get("unimplemented", {}).keys()]
    except Exception as e:  # noqa: BLE001
        rec["error"] = f"{type(e).__name__}: {str(e)[:300]}"
    finally:
        torch._dynamo.reset()
    return rec


def _compile_module_eager(module, *args, **kwargs):
    return module(*args, **kwargs)


# Pass as fn to compile the module that make_args returns first (cdynamo.compile(module) /
# torch.compile(module)) instead of a function; eager runs module(*rest).
COMPILE_MODULE = _compile_module_eager


_DYNAMO_REFERENCE = os.environ.get("CDYNAMO_SEMANTICS_DYNAMO", "1") != "0"


def check(fn, make_args, *, expect_graphs=1, dynamo_reference=True, world=None):
    """Run fn eagerly and compiled (first call + cache hit); see the module docstring.

    ``world=(reset, snapshot)``: state outside the arguments (globals) that fn changes;
    ``reset()`` runs before every call, ``snapshot()`` after it must equal eager's.
    """
    __tracebackhide__ = True
    _WORLD["reset"], _WORLD["snapshot"] = world if world is not None else (None, None)
    rec = {"nodeid": CURRENT["nodeid"], "expect_graphs": expect_graphs, "stage": "start",
           "cdynamo_graphs": None, "native_reasons": [], "dynamo": None, "failure": None}
    RECORDS.append(rec)
    try:
        _check(fn, make_args, expect_graphs, dynamo_reference and _DYNAMO_REFERENCE, rec)
        rec["stage"] = "passed"
    except BaseException as e:
        rec["failure"] = f"{type(e).__name__}: {str(e)[:2000]}"
        raise
    finally:
        _WORLD["reset"] = _WORLD["snapshot"] = None


@contextlib.contextmanager
def fresh_compilers(current, nodeid):
    """Around one test: clean cdynamo and torch._dynamo caches, torch's global state put back
    afterwards, and current["nodeid"] naming the test for the corpus records."""
    cdynamo.reset()
    torch._dynamo.reset()
    current["nodeid"] = nodeid
    state = global_state()
    try:
        yield
    finally:
        restore_global_state(state)
        current["nodeid"] = None
        cdynamo.reset()
        torch._dynamo.reset()


def global_state():
    """Process-wide torch state a function may change only inside its own `with` blocks."""
    return {
        "grad_enabled": torch.is_grad_enabled(),
        "inference_mode": torch.is_inference_mode_enabled(),
        "autocast_cpu": torch.is_autocast_enabled("cpu"),
        "autocast_cpu_dtype": torch.get_autocast_dtype("cpu"),
        "default_dtype": torch.get_default_dtype(),
    }


def restore_global_state(st):
    torch.set_grad_enabled(st["grad_enabled"])
    torch.set_autocast_enabled("cpu", st["autocast_cpu"])
    torch.set_autocast_dtype("cpu", st["autocast_cpu_dtype"])
    torch.set_default_dtype(st["default_dtype"])


def _check(fn, make_args, expect_graphs, dynamo_reference, rec):
    __tracebackhide__ = True
    before = global_state()
    ea, ek = _build(make_args)
    eager = _run(fn, ea, ek)
    after_eager = global_state()
    world_eager = _WORLD["snapshot"]() if _WORLD["snapshot"] else None
    restore_global_state(before)

    cdynamo.reset()
    cnt = cdynamo.testing.CompileCounter()
    cfn = None if fn is COMPILE_MODULE else cdynamo.compile(fn, backend=cnt)

    problems = []
    st1 = None
    for call in ("first call", "cache-hit call"):
        ga, gk = _build(make_args)
        if fn is COMPILE_MODULE:  # compile the fresh module itself: cdynamo.compile(module)(*rest)
            got = _run(lambda *a, **k: cdynamo.compile(ga[0], backend=cnt)(*a, **k), ga[1:], gk)
        else:
            got = _run(cfn, ga, gk)
        st = cdynamo.stats()
        if call == "first call":
            st1 = st
        rec["native_reasons"] = [nf.get("reason") for nf in st.get("native_frames", [])]
        rec["cdynamo_graphs"] = cnt.frame_count
        rec["stage"] = call
        after = global_state()
        restore_global_state(before)
        world_after = _WORLD["snapshot"]() if _WORLD["snapshot"] else None
        try:
            _compare_outcome(f"compiled ({call})", eager, (ea, ek), got, (ga, gk))
            if after != after_eager:
                raise AssertionError(f"compiled ({call}): WRONG GLOBAL STATE after the call: "
                                     f"{ {k: v for k, v in after.items() if after_eager[k] != v} } "
                                     f"(eager left {after_eager})")
            try:
                assert_same(world_eager, world_after, "globals")
            except AssertionError as e:
                raise AssertionError(f"compiled ({call}): WRONG FINAL STATE of globals: {e}") from None
        except AssertionError as e:
            problems.append(str(e))
            break
    st = cdynamo.stats()
    rec["cdynamo_graphs"] = cnt.frame_count
    rec["native_reasons"] = [nf.get("reason") for nf in st.get("native_frames", [])]
    if not problems and expect_graphs is not None:
        rec["stage"] = "graph-count"
        if st["frames_native"] != 0:
            problems.append(f"{st['frames_native']} frame(s) ran natively (expected the whole function captured)")
        if cnt.frame_count != expect_graphs:
            problems.append(f"CompileCounter.frame_count == {cnt.frame_count} after both calls, "
                            f"expected {expect_graphs}")
        if expect_graphs == 0 and st["frames_captured"] < 1:
            problems.append("no frame was captured (frames_captured == 0): the case would pass by running eagerly")
        if st1 is not None:
            if st["cache_misses"] != st1["cache_misses"] or st["cache_hits"] <= st1["cache_hits"]:
                problems.append(f"second call was not a cache hit (misses {st1['cache_misses']} -> "
                                f"{st['cache_misses']}, hits {st1['cache_hits']} -> {st['cache_hits']}, "
                                f"recompiles {st.get('recompiles')})")
    if not problems and dynamo_reference:
        rec["stage"] = "dynamo-reference"
        d = _dynamo_reference(fn, make_args, eager)
        rec["dynamo"] = d
        if expect_graphs is not None and d["error"] is None and d["graphs"] is not None and d["graph_breaks"] == 0 \
                and cnt.frame_count > d["graphs"]:
            problems.append(f"cdynamo compiled {cnt.frame_count} graphs, torch._dynamo only {d['graphs']}")
    elif dynamo_reference:
        # Still record what dynamo does, for the report (cheap; never fails the case itself).
        rec["dynamo"] = _dynamo_reference(fn, make_args, eager)
    if problems:
        # Outcome problems (wrong result, state, exception) are plain AssertionErrors; a
        # case whose outcome is right but was not captured as expected raises NotCaptured,
        # the only failure a known gap (known_gaps.py) may excuse.
        error = NotCaptured if rec["stage"] in ("graph-count", "dynamo-reference") else AssertionError
        raise error("\n".join(problems) + f"\n(stats: { {k: v for k, v in st.items() if k != 'native_frames'} })\n"
                    + _native_report(st))


# ----------------------------------------------------------------------------- case helpers

def tensors(*shapes, **kw):
    """make_args factory: one random tensor per shape (seeded by check())."""
    return lambda: tuple(torch.randn(*s, **kw) if isinstance(s, tuple) else torch.randn(s, **kw) for s in shapes)


def with_args(*extra, shapes=((4,),)):
    """make_args factory: random tensors of the given shapes followed by constant extras (deep-copied)."""
    return lambda: tuple(torch.randn(*s) for s in shapes) + tuple(copy.deepcopy(e) for e in extra)


class Cases:
    """Collects (fn, make_args, expect_graphs) for pytest.mark.parametrize, ids by function name."""

    def __init__(self):
        self.params = []

    def __call__(self, make_args, expect_graphs=1):
        import pytest

        def deco(fn):
            self.params.append(pytest.param(fn, make_args, expect_graphs, id=fn.__name__))
            return fn
        return deco
