"""Symbolic shapes on torch's machinery (cold path; called by the C++ graph builder).

* ``input_fake``: the FakeTensor of a graph input, with the dimensions that are symbolic
  (compile(dynamic=True), marks of torch._dynamo.mark_dynamic / maybe_mark_dynamic /
  mark_static, automatic dynamic from the code object's size memory) made DUCK-sized
  symbols of the trace's ShapeEnv, exactly as torch._dynamo asks FakeTensorMode.from_tensor.
* ``compile_guards``: the ShapeEnv's guards (the relations duck sizing and the ops derived,
  0/1 specialization, branches on sizes, mark_dynamic ranges) as flat integer programs the
  C++ guard program evaluates on every call: no Python on the hit path.
"""
import sympy
import torch
from torch._dynamo.source import ConstantSource
from torch.fx.experimental.symbolic_shapes import DimDynamic, StatelessSymbolicContext
from torch.utils._sympy import functions as _fn

from .. import _logging, config

# Opcodes of a shape program (csrc/guards/guard_program.h ShapeOp); each op is
# (opcode, reg, arg). CONST pushes arg; SIZE pushes size `arg` of the tensor in register reg;
# the others pop their operands and push the result (booleans are 0/1).
# INT pushes the value of the Python int in register reg (a symbolic int argument).
CONST, SIZE, ADD, MUL, FLOORDIV, MOD, POW, EQ, NE, LT, LE, GT, GE, AND, OR, NOT, MAX, MIN, INT = range(19)


def _contiguous_strides(sizes):
    out, running = [], 1
    for s in reversed(sizes):
        out.append(running)
        running *= max(s, 1)
    return tuple(reversed(out))


def _can_be_dynamic(real, source_name):
    # As torch._dynamo (force_parameter_static_shapes, force_nn_module_property_static_shapes):
    # parameters (unless config.force_parameter_static_shapes is False) and module buffers
    # keep static shapes. Symbolic dims need strides the guard can check from the sizes
    # alone (contiguous) and no storage offset.
    if isinstance(real, torch.nn.Parameter) and config.effective("force_parameter_static_shapes"):
        return False
    if "._buffers[" in source_name:
        return False
    # A traceable wrapper subclass (tensor_subclass.py) keeps its sizes: its fake would need
    # symbols for its inner tensors too, which the trace does not make yet.
    if torch.utils._python_dispatch.is_traceable_wrapper_subclass(real):
        return False
    if real.layout != torch.strided or real.storage_offset() != 0:
        return False
    return tuple(real.stride()) == _contiguous_strides(tuple(real.shape))


def marked(real):
    """Whether a tensor carries torch._dynamo.mark_dynamic / maybe_mark_dynamic marks."""
    d = getattr(real, "__dict__", None)
    return bool(d) and bool(d.get("_dynamo_dynamic_indices") or d.get("_dynamo_weak_dynamic_indices"))


def input_fake(mode, real, source_name, dynamic, memory, automatic):
    """(fake, [(dim, SymInt)]) for graph input `real` read from `source_name`.

    `dynamic` is the compile's setting (True, False or None); `memory` the code object's
    {source name: sizes seen, None where they differed} (automatic dynamic), updated here."""
    sizes = tuple(real.shape)
    n = len(sizes)
    dyn = [False] * n
    why = [""] * n
    unbacked = [False] * n
    if memory is not None and dynamic is None:
        prev = memory.get(source_name)
        if prev is not None and len(prev) == n:
            now = [None if p is None or p != s else s for p, s in zip(prev, sizes)]
            if automatic:
                dyn = [v is None for v in now]
                why = [f"automatic dynamic (was {p})" if v is None else "" for p, v in zip(prev, now)]
                if config.effective("automatic_dynamic_shapes_mark_as") == "unbacked":
                    # Sizes that changed get symbols without a value: no 0/1 specialization
                    # and no guard on them (torch's DimDynamic.UNBACKED).
                    unbacked = [v is None for v in now]
        else:
            now = list(sizes)
        memory[source_name] = now
    if dynamic is True:
        dyn = [True] * n
        why = ["dynamic=True"] * n
        unbacked = [False] * n
    d = getattr(real, "__dict__", None) or {}
    for i in set(d.get("_dynamo_dynamic_indices", ())) | set(d.get("_dynamo_weak_dynamic_indices", ())):
        if 0 <= i < n:
            dyn[i], why[i] = True, "mark_dynamic"
    for i in d.get("_dynamo_static_indices", ()):
        if 0 <= i < n:
            dyn[i] = unbacked[i] = False
    log = _logging.enabled("dynamic")
    if any(dyn) and not _can_be_dynamic(real, source_name):
        if log:
            _logging.emit("dynamic", f"{source_name} keeps static sizes {list(sizes)}: a parameter, a buffer, or not "
                                     "contiguous from offset 0 (symbolic sizes need strides the guard derives)")
        dyn = [False] * n
    if not any(dyn):
        # Every size static (parameters, buffers): the fake torch makes under an all-STATIC
        # context has plain int sizes, strides and offset and no symbol; made without the
        # ShapeEnv it is the same fake, without the symbolic machinery's cost per tensor.
        # None: the graph builder makes it as in a static trace (from_tensor with
        # static_shapes=True, or its input shortcut).
        return None, []
    kinds = [DimDynamic.UNBACKED if u and x else DimDynamic.DUCK if x else DimDynamic.STATIC for x, u in zip(dyn, unbacked)]
    ctx = StatelessSymbolicContext(dynamic_sizes=kinds,
                                   constraint_sizes=[None] * n)
    fake = mode.from_tensor(real, source=ConstantSource(source_name), symbolic_context=ctx)
    syms = [(i, s) for i, s in enumerate(fake.shape) if isinstance(s, torch.SymInt) and s.node.expr.is_Symbol]
    if log:
        made = dict(syms)
        for i in range(n):
            if not dyn[i]:
                continue
            if i in made:
                _logging.emit("dynamic", f"{source_name}.size()[{i}] = {sizes[i]} is symbol {made[i]} ({why[i]})")
            else:
                _logging.emit("dynamic", f"{source_name}.size()[{i}] = {sizes[i]} stays static ({why[i]}, but sizes 0 "
                                         "and 1 are specialized)")
    return fake, syms


def int_input(shape_env, value, source_name, memory, always=False):
    """Automatic dynamic for a Python int argument (dynamic=None): the SymInt it becomes, or
    None while it stays a constant. `memory` (the code object's, see input_fake) keeps under
    "int:" + source the value the first compile saw, None once it changed, "static" when
    a trace with it symbolic failed (it is then specialized for good, as torch._dynamo
    specializes an int the program needs as a constant). Without a ShapeEnv (a first,
    static compile) only the value is recorded. Unlike a size, a 0 or 1 that comes after
    the value changed is a symbol too (torch._dynamo's unspecialized ints are not 0/1
    specialized): a counter counting up from 0 gets two graphs, not three. `always`
    (dynamic=True): a symbol from the first compile on, unless specialized for good."""
    key = "int:" + source_name
    # A source seen before as something other than an int (a tensor: its sizes are kept
    # under the plain source name) has changed too, as torch._dynamo's frame state says:
    # `f(x, y)` called with a tensor y, then an int, makes the int a symbol at once.
    prev = memory.get(key, "a tensor" if source_name in memory else value)
    if prev == "static":
        return None
    if always:
        why = "dynamic=True"
    elif prev is not None and prev == value:
        memory[key] = value
        return None
    else:
        why = f"automatic dynamic (was {prev})"
        memory[key] = None
    if shape_env is None:
        return None
    from torch.fx.experimental.symbolic_shapes import DimDynamic
    sym = shape_env.create_unspecified_symint_and_symbol(value, ConstantSource(source_name), DimDynamic.DYNAMIC)
    if _logging.enabled("dynamic"):
        _logging.emit("dynamic", f"{source_name} = {value} is symbol {sym} ({why})")
    return sym


def specialize_ints(memory, sources, reason=""):
    """A trace with these int arguments symbolic failed (`reason`, when it says): they stay
    constants from now on."""
    for s in sources:
        memory["int:" + s] = "static"
        if _logging.enabled("dynamic"):
            _logging.emit("dynamic", f"{s} is specialized: the trace with it symbolic did not complete"
                                     + (f" ({reason})" if reason else ""))


def specialize_int(value):
    """int() of a backed SymInt (its ShapeEnv records the guard Eq(symbol, value)), or None
    when it has no hint (an unbacked value read from a tensor)."""
    if not value.node.has_hint():
        return None
    return int(value)


def truth(value):
    """bool() of a backed SymBool/SymInt/SymFloat (records the guard in its ShapeEnv), or
    None when it has no hint (an unbacked value read from a tensor)."""
    if not value.node.has_hint():
        return None
    return bool(value)


_FLIPPED = {sympy.StrictLessThan: sympy.StrictGreaterThan, sympy.StrictGreaterThan: sympy.StrictLessThan,
            sympy.LessThan: sympy.GreaterThan, sympy.GreaterThan: sympy.LessThan, sympy.Eq: sympy.Eq, sympy.Ne: sympy.Ne}


def _int_relation(e):
    """A comparison of an int expression with a number that is not an int, as torch states
    it (`ToFloat(s0) < 2.5` for `n < 2.5` or max(n, 2.5)), as the same relation over ints
    (`s0 < 3`), which the integer guard program evaluates exactly; None for anything else."""
    lhs, rhs, rel = e.lhs, e.rhs, type(e)
    if isinstance(lhs, _fn.ToFloat) and rhs.is_number and rhs.is_real:
        x, c = lhs.args[0], rhs
    elif isinstance(rhs, _fn.ToFloat) and lhs.is_number and lhs.is_real:
        x, c, rel = rhs.args[0], lhs, _FLIPPED.get(rel)
    else:
        return None
    if rel is None or not (c.is_finite or c.is_Integer):
        return None
    low, high = sympy.Integer(sympy.floor(c)), sympy.Integer(sympy.ceiling(c))
    if rel is sympy.StrictGreaterThan:
        return sympy.StrictGreaterThan(x, low, evaluate=False)
    if rel is sympy.GreaterThan:
        return sympy.GreaterThan(x, high, evaluate=False)
    if rel is sympy.StrictLessThan:
        return sympy.StrictLessThan(x, high, evaluate=False)
    if rel is sympy.LessThan:
        return sympy.LessThan(x, low, evaluate=False)
    if rel is sympy.Eq:
        return sympy.Eq(x, low, evaluate=False) if low == high else sympy.false
    return sympy.Ne(x, low, evaluate=False) if low == high else sympy.true


class _Compiler:
    def __init__(self, where):
        self.where = where  # symbol -> (reg, dim, source text)

    def __call__(self, e):
        ops = []
        self.emit(e, ops)
        return ops

    def emit(self, e, ops):
        if e is sympy.true or e is True:
            ops.append((CONST, 0, 1))
        elif e is sympy.false or e is False:
            ops.append((CONST, 0, 0))
        elif e.is_Integer:
            ops.append((CONST, 0, int(e)))
        elif e.is_Symbol:
            if e not in self.where:
                raise NotImplementedError(f"a shape guard on {e}, which no graph input's size gives")
            reg, dim, _ = self.where[e]
            ops.append((SIZE, reg, dim) if dim >= 0 else (INT, reg, 0))
        elif e.is_Add or e.is_Mul or isinstance(e, (sympy.Max, sympy.Min, sympy.And, sympy.Or)):
            op = ADD if e.is_Add else MUL if e.is_Mul else MAX if isinstance(e, sympy.Max) else \
                MIN if isinstance(e, sympy.Min) else AND if isinstance(e, sympy.And) else OR
            args = e.args
            self.emit(args[0], ops)
            for a in args[1:]:
                self.emit(a, ops)
                ops.append((op, 0, 0))
        elif e.is_Pow:
            base, exp = e.args
            if not (exp.is_Integer and int(exp) >= 0):
                raise NotImplementedError(f"shape guard term {e} (not an integer power)")
            self.emit(base, ops)
            self.emit(exp, ops)
            ops.append((POW, 0, 0))
        elif isinstance(e, _fn.FloorDiv):
            self.emit(e.args[0], ops)
            self.emit(e.args[1], ops)
            ops.append((FLOORDIV, 0, 0))
        elif isinstance(e, (sympy.Mod, _fn.Mod, _fn.PythonMod)):
            self.emit(e.args[0], ops)
            self.emit(e.args[1], ops)
            ops.append((MOD, 0, 0))
        elif isinstance(e, sympy.Not):
            self.emit(e.args[0], ops)
            ops.append((NOT, 0, 0))
        elif isinstance(e, sympy.core.relational.Relational) and _int_relation(e) is not None:
            self.emit(_int_relation(e), ops)
        elif isinstance(e, sympy.core.relational.Relational):
            rel = {sympy.Eq: EQ, sympy.Ne: NE, sympy.StrictLessThan: LT, sympy.LessThan: LE,
                   sympy.StrictGreaterThan: GT, sympy.GreaterThan: GE}.get(type(e))
            if rel is None:
                raise NotImplementedError(f"shape guard relation {type(e).__name__}")
            self.emit(e.lhs, ops)
            self.emit(e.rhs, ops)
            ops.append((rel, 0, 0))
        else:
            raise NotImplementedError(f"shape guard term {type(e).__name__} ({e})")


def _depth(ops):
    depth = best = 0
    for op, _, _ in ops:
        depth += 1 if op in (CONST, SIZE) else 0 if op == NOT else -1
        best = max(best, depth)
    return best


def compile_guards(shape_env, bindings):
    """[(text, ops[, index])] for the guards an entry needs about its symbolic sizes (index: of
    a ShapeEnv guard, in shape_env.guards).

    `bindings`: (SymInt, reg, dim, source name, real tensor) for every symbolic size of a
    graph input, in input order. Raises NotImplementedError for a guard the program cannot
    express (the frame then is not captured, with that reason)."""
    where = {}
    out = []

    def size(reg, dim):
        return (SIZE, reg, dim) if dim >= 0 else (INT, reg, 0)

    for s, reg, dim, name, real in bindings:
        # The symbol the size was made as (the trace may have replaced it since: s0 == 3
        # specializes it, s1 == s0 unifies; the guards say so in terms of the symbols).
        e = getattr(s.node, "_expr", None)
        if e is None or not e.is_Symbol:
            e = s.node.expr
        src = f"{name}.size()[{dim}]" if dim >= 0 else name  # dim -1: an int argument itself
        if e in where:  # duck sizing: one symbol for equal sizes; the entry needs them equal
            r2, d2, src2 = where[e]
            out.append((f"{src} == {src2}", [size(reg, dim), size(r2, d2), (EQ, 0, 0)]))
        else:
            where[e] = (reg, dim, src)
        for r in (getattr(real, "_dynamo_dynamic_range", ()) or ()) if dim >= 0 else ():
            if r.dim != dim:
                continue
            if r.min is not None:
                out.append((f"{src} >= {r.min}", [size(reg, dim), (CONST, 0, int(r.min)), (GE, 0, 0)]))
            if r.max is not None:
                out.append((f"{src} <= {r.max}", [size(reg, dim), (CONST, 0, int(r.max)), (LE, 0, 0)]))
    compile_expr = _Compiler(where)
    names = {e: sympy.Symbol(src) for e, (_, _, src) in where.items()}
    for index, g in enumerate(shape_env.guards):
        ops = compile_expr(g.expr)
        out.append((str(g.expr.xreplace(names)), ops, index))  # index: the trace knows where it came from
    # The ranges after the guards they usually come from: a miss then names the guard (and
    # where the program installed it) rather than the range it implied.
    for e, (reg, dim, src) in where.items():
        vr = shape_env.var_to_range.get(e)
        if vr is None:
            continue
        lower, upper = vr.lower, vr.upper
        if getattr(lower, "is_Integer", False) and int(lower) > 0:
            out.append((f"{src} >= {int(lower)}", [size(reg, dim), (CONST, 0, int(lower)), (GE, 0, 0)]))
        if getattr(upper, "is_Integer", False):
            out.append((f"{src} <= {int(upper)}", [size(reg, dim), (CONST, 0, int(upper)), (LE, 0, 0)]))
    if _logging.enabled("dynamic"):
        for text, *_ in out:
            _logging.emit("dynamic", f"shape guard: {text}")
    for text, ops, *_ in out:
        if _depth(ops) > 32:
            raise NotImplementedError(f"shape guard {text} is too deep for the guard program")
    return out


def runtime_assert_symbols(shape_env):
    """The symbols the ShapeEnv's deferred runtime asserts are about (a frozenset)."""
    out = set()
    for asserts in shape_env.deferred_runtime_asserts.values():
        for ra in asserts:
            out |= ra.expr.free_symbols
    return frozenset(out)


def insert_runtime_asserts(gm, shape_env, name):
    """torch's pass that torch._dynamo runs on every graph (torch.fx.passes.runtime_assert):
    the ShapeEnv's deferred runtime asserts (torch._check of a value read from a tensor, the
    relation an op assumed between unbacked sizes: Eq(u0, u1) for `x + y` of two nonzero()
    results) and the ranges of unbacked symbols become aten._assert_scalar nodes, each
    placed once the graph has bound its symbols. Returns the graph's op count afterwards.

    An assert whose symbols the graph never binds (a size of an input the graph does not
    take) would be dropped by the pass: NotImplementedError instead, and the frame is not
    captured with that reason rather than run without the check."""
    from torch.fx.experimental.symbolic_shapes import free_symbols
    from torch.fx.passes.runtime_assert import insert_deferred_runtime_asserts

    bound = set()
    for node in gm.graph.nodes:
        if node.op == "placeholder":
            bound |= free_symbols(node.meta.get("example_value"))
        bindings = node.meta.get("unbacked_bindings")
        if bindings:
            bound |= set(bindings)
    for asserts in shape_env.deferred_runtime_asserts.values():
        for ra in asserts:
            missing = ra.expr.free_symbols - bound
            if missing:
                raise NotImplementedError(
                    f"a runtime check ({ra.expr}) on {', '.join(sorted(map(str, missing)))}, which the graph does not "
                    "take as an input")
    insert_deferred_runtime_asserts(gm, shape_env, name)
    gm.recompile()
    return sum(1 for n in gm.graph.nodes if n.op in ("call_function", "call_method", "call_module"))


# config.memo_check: the differences found (op, what differs), for the tests to assert
# none; each also raises in the trace that found it.
memo_check_failures = []


def _meta(t):
    if t is None:
        return None
    if not isinstance(t, torch.Tensor):
        return ("value", type(t).__name__, str(t))
    return (str(tuple(t.shape)), str(t.stride()), str(t.storage_offset()), t.dtype, str(t.device),
            t.requires_grad, t.is_leaf, t._is_view(), type(t).__name__)


def check_memo_result(memo, real, target):
    """config.memo_check: the memo's result `memo` must have the metadata of `real`, the
    op's own result on the same fakes. Raises RuntimeError on a difference."""
    def flat(r):
        return [_meta(x) for x in r] if isinstance(r, tuple) else [_meta(r)]
    a, b = flat(memo), flat(real)
    if a != b:
        what = f"memo check: {getattr(target, '__name__', target)!s}: memo made {a}, the op makes {b}"
        memo_check_failures.append(what)
        raise RuntimeError("cdynamo internal error: " + what)
    return True


def entry_fake(mode, real, fake):
    """A fake of graph input `real` as the graph receives it, registered in `mode`'s converter
    for a backend that converts `real` again through the trace's mode (AOT autograd under the
    TracingContext the graph builder gives it): `fake`, the trace's own, took what the graph's
    in-place ops did to it (requires grad after x.add_(y), another shape after unsqueeze_).

    A fake of concrete layout is converted again from `real` (the storage memo keeps it an
    alias of the other fakes of that storage); a symbolic one keeps its sizes (symbols of the
    trace) and gets `real`'s autograd state: an alias of it without history."""
    converter = mode.fake_tensor_converter
    concrete = not any(isinstance(s, torch.SymInt) for s in (*fake.shape, *fake.stride(), fake.storage_offset()))
    if concrete:
        meta = converter.meta_converter
        tid = meta.describer.lookup_tensor.get(real)
        if tid is not None:
            meta.tensor_memo.pop(tid, None)
        return mode.from_tensor(real, static_shapes=True)
    with torch.no_grad():
        fresh = fake.detach()
    fresh.requires_grad_(real.requires_grad)
    converter.set_tensor_memo(real, fresh)
    return fresh
