"""torch.autograd.Function.apply in a trace: without autograd, or checked to go into the graph.

The tracer (its autograd.Function call rule) asks ``autograd_function_refusal`` whether
``cls.apply(...)`` may go into the graph as one call (``autograd_function_in_graph`` makes
that call's target); when no backward is recorded it inlines ``autograd_function_apply``
instead.
"""
import torch


# ---- Tensor.register_hook on a tensor the graph computes ----------------------------------

def hook_or_grad(hook, grad):
    # The body the trace speculates for `t.register_hook(hook)`: what autograd passes on
    # (a hook returning None leaves the gradient as it is).
    r = hook(grad)
    return grad if r is None else r


# ---- torch.autograd.Function.apply without autograd ----------------------------------------

class _FunctionCtx:
    # What forward / setup_context see as ctx when apply records no backward (grad mode off,
    # or no tensor argument requires grad): the calls a ctx takes, without effect.
    # needs_input_grad is the arguments' requires_grad, as apply sets it in any grad mode.
    def __init__(self, needs_input_grad):
        self.needs_input_grad = needs_input_grad
        self.to_save = ()
        self.dirty_tensors = ()
        self.non_differentiable = ()
        self.materialize_grads = True

    def save_for_backward(self, *tensors):
        self.to_save = tensors

    def save_for_forward(self, *tensors):
        self.saved_for_forward = tensors

    @property
    def saved_tensors(self):
        return tuple(self.to_save)

    def mark_dirty(self, *tensors):
        self.dirty_tensors = tensors

    def mark_non_differentiable(self, *tensors):
        self.non_differentiable = tensors

    def set_materialize_grads(self, value):
        self.materialize_grads = value


def autograd_function_apply(cls, separate_setup, *args, **kwargs):
    # cls.apply(*args, **kwargs) when no backward is recorded (the tracer checked): forward
    # runs under no_grad; an output that is one of the inputs (not marked dirty) comes back
    # as a new view of it, the rest as forward returned them (a tuple stays a tuple, any
    # other value is the one output).
    ctx = _FunctionCtx(tuple(isinstance(a, torch.Tensor) and a.requires_grad for a in args))
    with torch.no_grad():
        if separate_setup:
            output = cls.forward(*args, **kwargs)
            cls.setup_context(ctx, args, output)
        else:
            output = cls.forward(ctx, *args, **kwargs)

    def wrap(o):
        if isinstance(o, torch.Tensor):
            for a in args:
                if o is a:
                    for d in ctx.dirty_tensors:
                        if o is d:
                            return o
                    return o.view_as(o)
        return o

    if isinstance(output, tuple):
        return tuple(wrap(o) for o in output)
    return wrap(output)


# ---- torch.autograd.Function.apply recording a backward: the bodies the trace speculates --------
#
# The tracer traces these two as the forward and backward bodies of
# torch.ops.higher_order.autograd_function_apply (protocol/autograd_function.cpp), with grad
# mode off as autograd runs them. The ctx is made inside the forward's body, so what forward
# and setup_context store on it is the body's own; the backward reads it, and whatever
# tensor of the forward it reads (saved tensors, tensors stashed on ctx) becomes a value the
# forward saves for it.

def _output_of(o, args, dirty):
    # An output that is one of the inputs (not marked dirty) comes back as a new view of it,
    # as apply returns it.
    if isinstance(o, torch.Tensor):
        for a in args:
            if isinstance(a, torch.Tensor) and o is a:
                for d in dirty:
                    if o is d:
                        return o
                return o.view_as(o)
    return o


def autograd_function_forward(cls, separate_setup, needs_input_grad, *args):
    ctx = _FunctionCtx(needs_input_grad)
    if separate_setup:
        output = cls.forward(*args)
        cls.setup_context(ctx, args, output)
    else:
        output = cls.forward(ctx, *args)
    if isinstance(output, tuple):
        output = tuple(_output_of(o, args, ctx.dirty_tensors) for o in output)
    else:
        output = _output_of(output, args, ctx.dirty_tensors)
    return ctx, output


def forward_changes_inputs(cls):
    """Whether forward (or setup_context) visibly changes an input in place (ctx.mark_dirty,
    an op's out= argument): the higher-order op's body cannot, so apply goes into the graph
    as one call when the check below allows it."""
    import dis

    for name in ("forward", "setup_context"):
        fn = getattr(cls, name, None)
        fn = getattr(fn, "__func__", fn)
        code = getattr(fn, "__code__", None)
        if code is None:
            continue
        if "mark_dirty" in code.co_names:
            return True
        for ins in dis.get_instructions(code):
            # 3.11's dis does not resolve KW_NAMES: its argument indexes co_consts
            if ins.opname == "KW_NAMES" and ins.arg is not None and ins.arg < len(code.co_consts):
                names = code.co_consts[ins.arg]
                if isinstance(names, tuple) and "out" in names:
                    return True
    return False


def autograd_function_backward(cls, ctx, *grads):
    return cls.backward(ctx, *grads)


# ---- torch.autograd.Function.apply recording a backward -------------------------------------
#
# With autograd recording, cdynamo puts `cls.apply` into the graph as one call: the graph
# runs it as eagerly (forward, ctx, backward all torch's), AOTAutograd traces through it
# (the backward lands in the backward graph). The one thing that differs from eager is that
# the trace runs forward once on fake tensors to learn its outputs (and AOTAutograd runs
# forward and backward on its own tensors). So forward, setup_context and backward, and the
# Python functions they call, must not touch anything outside the call: the check below
# reads their bytecode and refuses anything that could (a global store, a closure, an
# import, a global that is not a module, a function, a class or a constant, a builtin not
# known to be pure, an attribute set on anything but ctx). Arguments must be tensors or
# constants. The reason it returns is the graph break's.

_PURE_BUILTINS = frozenset([
    "len", "isinstance", "issubclass", "range", "min", "max", "abs", "tuple", "list", "dict", "set", "frozenset",
    "zip", "enumerate", "sum", "any", "all", "int", "float", "bool", "str", "hasattr", "getattr", "sorted",
    "reversed", "round", "divmod", "pow", "type", "slice", "map", "filter", "iter", "next", "hash", "id",
    "callable", "repr", "format", "complex", "object", "super", "NotImplemented", "Ellipsis", "None",
    "True", "False", "ValueError", "TypeError", "RuntimeError", "AssertionError", "NotImplementedError",
    "IndexError", "KeyError", "AttributeError", "StopIteration",
])
_STATE_NAMES = frozenset(["manual_seed", "seed", "initial_seed", "set_rng_state", "fork_rng", "register_buffer",
                          "register_parameter", "register_hook", "write", "save", "load", "use_deterministic_algorithms"])
_CTX_SETTERS = frozenset(["set_materialize_grads"])


def _state_changing(name):
    if name in _CTX_SETTERS:
        return False
    return name in _STATE_NAMES or name.startswith(("set_", "_set_")) or "seed" in name
_REFUSED_OPS = frozenset([
    "STORE_GLOBAL", "DELETE_GLOBAL", "STORE_DEREF", "DELETE_DEREF", "LOAD_DEREF", "LOAD_CLASSDEREF",
    "LOAD_CLOSURE", "IMPORT_NAME", "IMPORT_FROM", "IMPORT_STAR", "STORE_NAME", "DELETE_NAME", "YIELD_VALUE",
    "GET_AWAITABLE", "SETUP_ANNOTATIONS",
])


def _torch_module(name):
    return bool(name) and (name == "torch" or name.startswith("torch.") or name == "math")


def _constant_like(v):
    if v is None or isinstance(v, (bool, int, float, complex, str, bytes, torch.dtype, torch.device,
                                   torch.memory_format, torch.layout, torch.Size)):
        return True
    return isinstance(v, (tuple, frozenset)) and all(_constant_like(x) for x in v)


def _code_refusal(fn, where, depth, seen):
    import builtins
    import dis
    import types

    if fn in seen:
        return None
    seen.add(fn)
    code = fn.__code__
    if code.co_freevars:
        return f"{where} is a closure"
    if code.co_flags & 0x2A0:  # generator, coroutine, async generator
        return f"{where} is a generator or coroutine"
    instructions = list(dis.get_instructions(code))
    for i, ins in enumerate(instructions):
        op = ins.opname
        if op in _REFUSED_OPS:
            return f"{where} uses {op}"
        if op in ("STORE_ATTR", "DELETE_ATTR"):
            before = instructions[i - 1] if i else None
            # ctx.attr = value: the ctx is forward's / setup_context's / backward's first argument
            if depth > 0 or before is None or before.opname != "LOAD_FAST" or before.arg != 0:
                return f"{where} sets attribute {ins.argval!r} of something other than ctx"
        if op in ("LOAD_ATTR", "LOAD_METHOD") and _state_changing(ins.argval):
            return f"{where} reads {ins.argval!r}, which may change state outside the call"
        if op == "LOAD_GLOBAL":
            name = ins.argval
            g = fn.__globals__
            if name in g:
                v = g[name]
            elif hasattr(builtins, name):
                if name not in _PURE_BUILTINS:
                    return f"{where} calls builtin {name}()"
                continue
            else:
                return f"{where} reads global {name!r}, which is not defined"
            if isinstance(v, types.ModuleType):
                if not (v.__name__ == "math" or v.__name__ == "torch" or v.__name__.startswith("torch.")):
                    return f"{where} uses module {v.__name__}"
            elif _constant_like(v):
                continue
            elif isinstance(v, type):
                # builtins' and torch's classes, and autograd.Functions (their apply is this
                # same path); a class of the program could run anything when called
                mod = v.__module__ or ""
                if not (mod == "builtins" or mod == "torch" or mod.startswith("torch.")
                        or issubclass(v, torch.autograd.Function)):
                    return f"{where} uses class {v.__qualname__}, which cdynamo cannot check"
            elif isinstance(v, types.FunctionType) and _torch_module(v.__module__):
                continue  # torch's own Python functions (torch.nn.functional.gelu, ...)
            elif isinstance(v, types.FunctionType):
                if depth >= 4:
                    return f"{where} calls functions nested too deep to check"
                reason = _code_refusal(v, f"{v.__qualname__} (called by {where})", depth + 1, seen)
                if reason:
                    return reason
            elif isinstance(v, (types.BuiltinFunctionType, types.BuiltinMethodType)) or callable(v):
                mod = getattr(v, "__module__", None) or ""
                if not (mod == "math" or mod == "torch" or mod.startswith("torch.")):
                    return f"{where} calls {name}, which cdynamo cannot check"
                if _state_changing(name):
                    return f"{where} calls {name}, which may change state outside the call"
            else:
                return f"{where} reads global {name!r} of type {type(v).__name__}"
    return None


def autograd_function_refusal(cls, args, kwargs):
    """Why `cls.apply(*args, **kwargs)` cannot go into the graph as one call (None: it can)."""
    for a in list(args) + list(kwargs.values()):
        if not isinstance(a, torch.Tensor) and not _constant_like(a):
            return f"an argument of type {type(a).__name__} (only tensors and constants are checked)"
    if getattr(cls, "jvp", None) is not getattr(torch.autograd.Function, "jvp", None):
        return "it defines jvp (forward-mode AD is not checked)"
    base = torch.autograd.function._SingleLevelFunction
    seen = set()
    for name in ("forward", "setup_context", "backward"):
        fn = getattr(cls, name, None)
        if name == "setup_context" and fn is base.setup_context:
            continue
        if not isinstance(fn, type(autograd_function_refusal)):
            return f"its {name} is not a Python function"
        reason = _code_refusal(fn, f"{cls.__qualname__}.{name}", 0, seen)
        if reason:
            return reason
    return None


def autograd_function_in_graph(cls, apply):
    # The graph's target for `apply` (bound to cls): a plain function of this module, so
    # that torch.fx's code generator holds it as an object of the graph's globals (it
    # would spell a bound method of torch's by a qualified name that does not import).
    def call(*args, **kwargs):
        return apply(*args, **kwargs)

    call.__name__ = f"{cls.__name__}_apply"
    call.__qualname__ = f"{cls.__qualname__}.apply"
    return call
