"""Runs one generated program eagerly and under cdynamo.compile, and compares everything.

``check(program, backend)`` executes the program's source twice (two module namespaces,
so global stores are separate), then calls the eager ``f`` and the compiled ``f`` on the
same sequence of argument sets (each built twice from one seed, never shared):

    A (len 4), B (len 4, other values, other n), A again (a cache hit), C (len 3: other shapes),
    D (like A, but y requires grad)

After each call it compares the outcome (result: types all the way down, tensors by value,
dtype, shape and requires_grad, identities with the arguments and among the results; or the
exception's type and message), the arguments' state, the globals G0/GL, stdout and grad mode.
Returns a ``Report``: the first difference (or None), and what cdynamo did (graphs, breaks,
native frames with reasons).
"""
import contextlib
import dataclasses
import io
import math
import re
import time
import types

import torch

import cdynamo  # noqa: E402
import cdynamo.testing

# A frame whose trace has no op and no break runs natively by default, as torch._dynamo
# skips it (config.allow_empty_graphs); the fuzzer's op-less programs would then test
# nothing of the interpreter, so it compiles them, as the test suite does (tests/conftest.py).
cdynamo.config.allow_empty_graphs = True


class Box:
    """The `obj` argument: an object with a tensor and an int attribute."""

    def __init__(self, t, a):
        self.t = t
        self.a = a


def make_args(variant):
    """(x, y, n, lst, dct, obj) of one call; equal for equal variants, never shared."""
    seed, size, n, grad = {"A": (1, 4, 2, False), "B": (2, 4, 3, False), "C": (3, 3, 2, False),
                           "D": (1, 4, 2, True)}[variant]
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(size, generator=g)
    y = torch.randn(size, generator=g)
    if grad:
        y.requires_grad_(True)
    lst = [3, 1, 2] if seed != 2 else [5, 0, 4, 4]
    dct = {"a": 1, "c": 5} if seed != 2 else {"b": 7}
    obj = Box(torch.randn(size, generator=g), 7 + seed)
    return (x, y, n, lst, dct, obj)


CALLS = ["A", "B", "A", "C", "D"]

# CPU seconds an eager call may take before the program is skipped (check below). A generated
# program's eager call takes milliseconds; its compiled call costs about a thousand times an
# eager one's on each list item the program makes (traced, guarded, rebuilt).
EAGER_CPU_LIMIT = 0.25


@dataclasses.dataclass
class Report:
    mismatch: str = None      # what differs, first difference only (None: all equal)
    kind: str = None          # "result", "exception", "args", "globals", "stdout", "grad_mode", "internal"
    call: int = -1
    graphs: int = 0
    breaks: int = 0
    native: list = dataclasses.field(default_factory=list)   # native frame reasons
    break_reasons: list = dataclasses.field(default_factory=list)
    hits: int = 0
    misses: int = 0
    eager_raised: int = 0     # calls that raised eagerly (the program's own exceptions)
    skipped: str = None       # why the program was not compared (too expensive eagerly)


# ---------------------------------------------------------------------------------------- comparison

def _tname(o):
    t = type(o)
    return t.__qualname__ if t.__module__ in ("__fuzz__", __name__) else "%s.%s" % (t.__module__, t.__qualname__)


def same(a, b, path, memo_a, memo_b):
    """First difference between a and b as a string, or None. memo_*: id -> path (identities)."""
    if _tname(a) != _tname(b):
        return "%s: type %s vs %s" % (path, _tname(a), _tname(b))
    if isinstance(a, (list, dict, set, torch.Tensor, types.SimpleNamespace)) or hasattr(a, "__dict__") and not callable(a):
        pa, pb = memo_a.get(id(a)), memo_b.get(id(b))
        if pa != pb:
            return "%s: identity %s vs %s" % (path, pa, pb)
        if pa is not None:
            return None
        memo_a[id(a)] = path
        memo_b[id(b)] = path
    if isinstance(a, torch.Tensor):
        if a.dtype != b.dtype or a.shape != b.shape or a.requires_grad != b.requires_grad:
            return "%s: tensor %s%s rg=%s vs %s%s rg=%s" % (path, a.dtype, tuple(a.shape), a.requires_grad, b.dtype,
                                                            tuple(b.shape), b.requires_grad)
        da, db = a.detach(), b.detach()
        if da.is_floating_point():
            ok = torch.allclose(da, db, rtol=1e-5, atol=1e-6, equal_nan=True)
        else:
            ok = torch.equal(da, db)
        return None if ok else "%s: tensor values %s vs %s" % (path, da.tolist(), db.tolist())
    if isinstance(a, float):
        if math.isnan(a) and math.isnan(b) or a == b or math.isclose(a, b, rel_tol=1e-6):
            return None
        return "%s: %r vs %r" % (path, a, b)
    if isinstance(a, (list, tuple)):
        if len(a) != len(b):
            return "%s: len %d vs %d (%r vs %r)" % (path, len(a), len(b), a, b)
        for i, (u, v) in enumerate(zip(a, b)):
            d = same(u, v, "%s[%d]" % (path, i), memo_a, memo_b)
            if d:
                return d
        return None
    if isinstance(a, dict):
        if list(a.keys()) != list(b.keys()):
            return "%s: keys %r vs %r" % (path, list(a.keys()), list(b.keys()))
        for k in a:
            d = same(a[k], b[k], "%s[%r]" % (path, k), memo_a, memo_b)
            if d:
                return d
        return None
    if isinstance(a, (set, frozenset)):
        return None if a == b else "%s: %r vs %r" % (path, a, b)
    if isinstance(a, BaseException):
        return None if str(a) == str(b) else "%s: exception %r vs %r" % (path, a, b)
    if hasattr(a, "__dict__") and not callable(a) and not isinstance(a, types.ModuleType):
        return same(vars(a), vars(b), path + ".__dict__", memo_a, memo_b)
    if callable(a):
        return None  # functions made by the program: compared by type only
    return None if a == b else "%s: %r vs %r" % (path, a, b)


def _register(o, path, memo):
    """Records the identities of the objects reachable from an argument (a returned argument
    or part of one must be that very object)."""
    if not isinstance(o, (list, dict, torch.Tensor, Box)) or id(o) in memo:
        return
    memo[id(o)] = path
    if isinstance(o, list):
        for i, v in enumerate(o):
            _register(v, "%s[%d]" % (path, i), memo)
    elif isinstance(o, dict):
        for k, v in o.items():
            _register(v, "%s[%r]" % (path, k), memo)
    elif isinstance(o, Box):
        for k, v in vars(o).items():
            _register(v, "%s.%s" % (path, k), memo)


def _norm_stdout(s):
    # A tensor's repr names its grad_fn (a compiled graph's is CompiledFunctionBackward, as
    # with torch._dynamo) and, when that name makes the line too long, puts it on a line of
    # its own: both are the backend's, not the program's.
    s = re.sub(r"grad_fn=<\w+>", "grad_fn=<...>", s)
    return re.sub(r",\n\s*grad_fn=<\.\.\.>", ", grad_fn=<...>", s)


def _same_message(a, b):
    """Whether two exceptions of one type say the same. RecursionError's text says where the
    limit was hit: a frame entered through the PEP 523 hook is a C call ("... while calling a
    Python object"), as under torch._dynamo; the depth, not the wording, is the behaviour."""
    if isinstance(a, RecursionError):
        return str(a).startswith("maximum recursion depth exceeded") and str(b).startswith(
            "maximum recursion depth exceeded")
    return str(a) == str(b)


def _outcome(fn, args):
    buf = io.StringIO()
    start = time.process_time()
    with contextlib.redirect_stdout(buf):
        try:
            out = ("ok", fn(*args))
        except Exception as e:  # noqa: BLE001 - the program's exception is the result compared
            out = ("raised", e)
    return out, _norm_stdout(buf.getvalue()), torch.is_grad_enabled(), time.process_time() - start


def _namespace(program):
    ns = {"__name__": "__fuzz__"}
    exec(compile(program.source, "<fuzz>", "exec"), ns)
    return ns


def _backend(name):
    if name == "count":
        return cdynamo.testing.CompileCounter()
    return name


def check(program, backend="count"):
    """Runs `program` eagerly and compiled over CALLS; returns a Report (see module doc)."""
    rep = Report()
    cdynamo.reset()
    eager_ns = _namespace(program)
    comp_ns = _namespace(program)
    eager_f = eager_ns[program.fn_name]
    compiled_f = cdynamo.compile(comp_ns[program.fn_name], backend=_backend(backend))
    for ci, variant in enumerate(CALLS):
        ea = make_args(variant)
        ca = make_args(variant)
        e_out, e_stdout, e_grad, e_cpu = _outcome(eager_f, ea)
        rep.call = ci
        if e_cpu > EAGER_CPU_LIMIT:
            # `for w in list(lst): lst += lst` grows a list to 10^8 items in seconds of
            # eager time; the compiled call then traces, guards and rebuilds every item
            # (microseconds each, as torch._dynamo does) and outlives the worker's timeout
            # (seeds 95001, 97000-97002). Not comparable in a worker's time: skipped, counted
            # apart, not a finding.
            rep.skipped = "eager call took %.1f s of CPU" % e_cpu
            torch.set_grad_enabled(True)
            break
        if e_out[0] == "raised" and isinstance(e_out[1], MemoryError):
            # A program whose eager run outgrows the worker's address-space limit (run.py;
            # `l0 += l0` in nested loops doubles a list billions of times): too expensive to
            # compare, not a finding. Without the limit it took the machine's memory and the
            # worker was killed (seed 93004).
            rep.eager_raised += 1
            rep.skipped = "eager run raised MemoryError"
            torch.set_grad_enabled(True)
            break
        c_out, c_stdout, c_grad, _ = _outcome(compiled_f, ca)
        torch.set_grad_enabled(True)
        if e_out[0] == "raised":
            rep.eager_raised += 1
        diff = None
        if e_out[0] != c_out[0]:
            kind = "exception"
            diff = "eager %s, compiled %s" % (_describe(e_out), _describe(c_out))
        elif e_out[0] == "raised":
            kind = "exception"
            if type(e_out[1]) is not type(c_out[1]) or not _same_message(e_out[1], c_out[1]):
                diff = "eager %s, compiled %s" % (_describe(e_out), _describe(c_out))
        else:
            kind = "result"
            memo_e, memo_c = {}, {}
            for i, (a, b) in enumerate(zip(ea, ca)):
                _register(a, "arg%d" % i, memo_e)
                _register(b, "arg%d" % i, memo_c)
            diff = same(e_out[1], c_out[1], "result", memo_e, memo_c)
        if diff is None:
            kind = "args"
            diff = same(list(ea), list(ca), "args", {}, {})
        if diff is None:
            kind = "globals"
            diff = same([eager_ns["G0"], eager_ns["GL"]], [comp_ns["G0"], comp_ns["GL"]], "globals", {}, {})
        if diff is None and e_stdout != c_stdout:
            kind = "stdout"
            diff = "stdout %r vs %r" % (e_stdout, c_stdout)
        if diff is None and e_grad != c_grad:
            kind = "grad_mode"
            diff = "grad mode after the call %s vs %s" % (e_grad, c_grad)
        if diff is not None:
            rep.mismatch = "call %d (%s): %s" % (ci, variant, diff)
            rep.kind = kind
            break
    s = cdynamo.stats()
    rep.graphs = s["graphs_compiled"]
    rep.breaks = s["graph_breaks"]
    rep.hits = s["cache_hits"]
    rep.misses = s["cache_misses"]
    rep.native = [f["reason"] for f in s["native_frames"]]
    rep.break_reasons = [f["reason"] for f in s["graph_break_reasons"]]
    return rep


def _describe(out):
    if out[0] == "ok":
        r = repr(out[1])
        return "returned " + (r if len(r) < 300 else r[:300] + "...")
    e = out[1]
    text = "raised %s(%r)" % (type(e).__name__, str(e)[:300])
    if e.__cause__ is not None:
        # A backend's failure (BackendCompilerFailed) is told apart by its cause: known.py
        # matches limits of the backend shared with torch._dynamo on the cause's text.
        c = e.__cause__
        text += " from %s(%r)" % (type(c).__name__, str(c)[:300])
    return text
