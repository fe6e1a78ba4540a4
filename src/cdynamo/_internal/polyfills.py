"""Python versions of C functions of the standard library, traced in their place.

When the traced program calls one of the callables in ``POLYFILLS`` (``itertools.chain``,
``functools.reduce``, ...), the tracer inlines the Python function given here instead: the
C function cannot be traced, its Python equivalent can, and gives the same items in the same
order, calling the program's functions the same number of times. A polyfill that is a
generator gives an iterator of the type of the original (itertools.chain, ...): the tracer
gives its result that type.

The iterators that may never end (count, repeat, cycle) are classes here, not generators:
the tracer runs a generator to its end, but steps an iterator object one item at a time
(its ``__next__`` inlined), so ``zip(range(3), count())`` takes three items and stops. The
traced program sees the original's type; an instance that outlives the trace (returned,
stored) is rebuilt as a real iterator of that type in the same state by the class's
``rebuild`` (a staticmethod taking the instance).
"""
import functools
import itertools
import operator

import torch


def chain_from_iterable(iterables):
    for it in iterables:
        yield from it


# The iterators over other iterators are classes too (see the module docstring): each item
# is taken from the source only when the program takes it, as the C iterators do, so a
# source the program also uses directly (`s = islice(it, 3); next(s); list(it)`) gives the
# program's items in the program's order. Each rebuild() gives the real iterator in the same
# state (through the C type's own __setstate__ where it has one).

class chain:
    def __init__(self, *iterables):
        self.source = iter(iterables)
        self.active = None

    def __iter__(self):
        return self

    def __next__(self):
        while True:
            if self.active is None:
                self.active = iter(next(self.source))  # StopIteration: the end
            try:
                return next(self.active)
            except StopIteration:
                self.active = None

    @staticmethod
    def rebuild(self):
        real = itertools.chain()
        real.__setstate__((self.source,) if self.active is None else (self.source, self.active))
        return real


_ISLICE_STOP = "Stop argument for islice() must be None or an integer: 0 <= x <= sys.maxsize."
_ISLICE_INDEX = "Indices for islice() must be None or an integer: 0 <= x <= sys.maxsize."


def _islice_index(value, message):
    if value is None:
        return None
    try:
        return operator.index(value)
    except TypeError:
        raise ValueError(message) from None


class islice:
    # CPython's islice: `next` is the index of the next item to give, `count` how many the
    # source gave; items before `next` are skipped when the next one is asked for (even
    # past `stop`: islice(it, 3, 3) takes three), and nothing is taken once it has ended.
    def __init__(self, iterable, *args):
        if not args:
            raise TypeError("islice expected at least 2 arguments, got 1")
        if len(args) > 3:
            raise TypeError(f"islice expected at most 4 arguments, got {len(args) + 1}")
        start, step = 0, 1
        if len(args) == 1:
            stop = _islice_index(args[0], _ISLICE_STOP)
        else:
            start = _islice_index(args[0], _ISLICE_INDEX)
            start = 0 if start is None else start
            stop = _islice_index(args[1], _ISLICE_STOP)
            if len(args) == 3:
                step = _islice_index(args[2], _ISLICE_INDEX)
                step = 1 if step is None else step
        if stop is not None and stop < 0:
            raise ValueError(_ISLICE_STOP)
        if start < 0:
            raise ValueError(_ISLICE_INDEX)
        if step < 1:
            raise ValueError("Step for islice() must be a positive integer or None.")
        self.source = iter(iterable)
        self.next = start
        self.stop = stop
        self.step = step
        self.count = 0
        self.ended = False

    def __iter__(self):
        return self

    def __next__(self):
        if self.ended:
            raise StopIteration
        try:
            while self.count < self.next:
                next(self.source)
                self.count += 1
            if self.stop is not None and self.count >= self.stop:
                raise StopIteration
            item = next(self.source)
        except StopIteration:
            self.ended = True
            raise
        self.count += 1
        self.next += self.step
        if self.stop is not None and self.next > self.stop:
            self.next = self.stop
        return item

    @staticmethod
    def rebuild(self):
        if self.ended:
            return itertools.islice((), 0)
        stop = None if self.stop is None else self.stop - self.count
        return itertools.islice(self.source, self.next - self.count, stop, self.step)


class compress:
    def __init__(self, data, selectors):
        self.data = iter(data)
        self.selectors = iter(selectors)

    def __iter__(self):
        return self

    def __next__(self):
        while True:
            d = next(self.data)
            if next(self.selectors):
                return d

    @staticmethod
    def rebuild(self):
        return itertools.compress(self.data, self.selectors)


class filterfalse:
    def __init__(self, predicate, iterable):
        self.predicate = predicate
        self.source = iter(iterable)

    def __iter__(self):
        return self

    def __next__(self):
        while True:
            x = next(self.source)
            if not (x if self.predicate is None else self.predicate(x)):
                return x

    @staticmethod
    def rebuild(self):
        return itertools.filterfalse(self.predicate, self.source)


class takewhile:
    def __init__(self, predicate, iterable):
        self.predicate = predicate
        self.source = iter(iterable)
        self.stopped = False

    def __iter__(self):
        return self

    def __next__(self):
        if self.stopped:
            raise StopIteration
        x = next(self.source)
        if not self.predicate(x):
            self.stopped = True
            raise StopIteration
        return x

    @staticmethod
    def rebuild(self):
        real = itertools.takewhile(self.predicate, self.source)
        real.__setstate__(self.stopped)
        return real


class dropwhile:
    def __init__(self, predicate, iterable):
        self.predicate = predicate
        self.source = iter(iterable)
        self.started = False

    def __iter__(self):
        return self

    def __next__(self):
        while True:
            x = next(self.source)
            if self.started or not self.predicate(x):
                self.started = True
                return x

    @staticmethod
    def rebuild(self):
        real = itertools.dropwhile(self.predicate, self.source)
        real.__setstate__(self.started)
        return real


class starmap:
    def __init__(self, function, iterable):
        self.function = function
        self.source = iter(iterable)

    def __iter__(self):
        return self

    def __next__(self):
        return self.function(*next(self.source))

    @staticmethod
    def rebuild(self):
        return itertools.starmap(self.function, self.source)


class accumulate:
    def __init__(self, iterable, func=None, *, initial=None):
        self.source = iter(iterable)
        self.func = func
        self.initial = initial
        self.total = None
        self.started = False

    def __iter__(self):
        return self

    def __next__(self):
        if self.initial is not None:
            self.total, self.initial, self.started = self.initial, None, True
            return self.total
        x = next(self.source)
        if not self.started:
            self.total, self.started = x, True
        else:
            self.total = self.total + x if self.func is None else self.func(self.total, x)
        return self.total

    @staticmethod
    def rebuild(self):
        real = itertools.accumulate(self.source, self.func, initial=self.initial)
        if self.started:
            real.__setstate__(self.total)
        return real


class pairwise:
    def __init__(self, iterable):
        self.source = iter(iterable)
        self.started = False
        self.ended = False
        self.previous = None

    def __iter__(self):
        return self

    def __next__(self):
        if self.ended:
            raise StopIteration
        try:
            if not self.started:
                self.previous = next(self.source)
                self.started = True
            b = next(self.source)
        except StopIteration:
            self.ended = True
            raise
        a, self.previous = self.previous, b
        return a, b

    @staticmethod
    def rebuild(self):
        if self.ended:
            return itertools.pairwise(())
        if not self.started:
            return itertools.pairwise(self.source)
        return itertools.pairwise(itertools.chain((self.previous,), self.source))


class zip_longest:
    def __init__(self, *iterables, fillvalue=None):
        self.sources = [iter(it) for it in iterables]
        self.alive = [True] * len(self.sources)
        self.active = len(self.sources)
        self.fillvalue = fillvalue

    def __iter__(self):
        return self

    def __next__(self):
        if not self.active:
            raise StopIteration
        values = []
        for i in range(len(self.sources)):
            if not self.alive[i]:
                values.append(self.fillvalue)
                continue
            try:
                values.append(next(self.sources[i]))
            except StopIteration:
                self.alive[i] = False
                self.active -= 1
                if not self.active:
                    raise
                values.append(self.fillvalue)
        return tuple(values)

    @staticmethod
    def rebuild(self):
        if not self.active:
            return itertools.zip_longest()
        return itertools.zip_longest(*[s if alive else iter(()) for s, alive in zip(self.sources, self.alive)],
                                     fillvalue=self.fillvalue)


def product(*iterables, repeat=1):
    pools = [tuple(pool) for pool in iterables] * repeat
    result = [[]]
    for pool in pools:
        result = [x + [y] for x in result for y in pool]
    for prod in result:
        yield tuple(prod)


def permutations(iterable, r=None):
    pool = tuple(iterable)
    n = len(pool)
    r = n if r is None else r
    if r > n:
        return
    indices = list(range(n))
    cycles = list(range(n, n - r, -1))
    yield tuple(pool[i] for i in indices[:r])
    while n:
        for i in reversed(range(r)):
            cycles[i] -= 1
            if cycles[i] == 0:
                indices[i:] = indices[i + 1:] + indices[i:i + 1]
                cycles[i] = n - i
            else:
                j = cycles[i]
                indices[i], indices[-j] = indices[-j], indices[i]
                yield tuple(pool[i] for i in indices[:r])
                break
        else:
            return


def combinations(iterable, r):
    pool = tuple(iterable)
    n = len(pool)
    if r > n:
        return
    indices = list(range(r))
    yield tuple(pool[i] for i in indices)
    while True:
        for i in reversed(range(r)):
            if indices[i] != i + n - r:
                break
        else:
            return
        indices[i] += 1
        for j in range(i + 1, r):
            indices[j] = indices[j - 1] + 1
        yield tuple(pool[i] for i in indices)


def methodcaller(name, /, *args, **kwargs):
    # operator.methodcaller: a callable calling obj.<name>(*args, **kwargs). The tracer
    # cannot make the C object from values it holds (tensors among the arguments), so the
    # object is this closure, as torch._dynamo models it; it calls the same method with
    # the same arguments, and raises methodcaller's TypeError for a name that is no str.
    if not isinstance(name, str):
        raise TypeError("method name must be a string")

    def caller(obj, /):
        return getattr(obj, name)(*args, **kwargs)

    return caller


def reduce(function, iterable, *initial):
    if len(initial) > 1:
        raise TypeError(f"reduce expected at most 3 arguments, got {2 + len(initial)}")
    it = iter(iterable)
    if initial:
        value = initial[0]
    else:
        try:
            value = next(it)
        except StopIteration:
            raise TypeError("reduce() of empty iterable with no initial value") from None
    for element in it:
        value = function(value, element)
    return value


def lru_cache_holds(wrapper):
    # Whether a functools.lru_cache wrapper of a function without parameters has cached its
    # result: the guard of a call traced as a cache hit (call_rules.cpp callCacheWrapper).
    return wrapper.cache_info().currsize > 0


class count:
    def __init__(self, start=0, step=1):
        self.next_value = start
        self.step = step

    def __iter__(self):
        return self

    def __next__(self):
        value = self.next_value
        self.next_value = value + self.step
        return value

    @staticmethod
    def rebuild(self):
        return itertools.count(self.next_value, self.step)


class repeat:
    def __init__(self, object, times=None):
        self.object = object
        self.times = None if times is None else max(times, 0)

    def __iter__(self):
        return self

    def __next__(self):
        if self.times is not None:
            if self.times <= 0:
                raise StopIteration
            self.times -= 1
        return self.object

    @staticmethod
    def rebuild(self):
        if self.times is None:
            return itertools.repeat(self.object)
        return itertools.repeat(self.object, self.times)


class cycle:
    def __init__(self, iterable):
        self.source = iter(iterable)
        self.saved = []
        self.index = 0
        self.exhausted = False

    def __iter__(self):
        return self

    def __next__(self):
        if not self.exhausted:
            try:
                item = next(self.source)
            except StopIteration:
                self.exhausted = True
            else:
                self.saved.append(item)
                return item
        if not self.saved:
            raise StopIteration
        item = self.saved[self.index]
        self.index = (self.index + 1) % len(self.saved)
        return item

    @staticmethod
    def rebuild(self):
        if self.exhausted:
            return itertools.cycle(self.saved[self.index:] + self.saved[:self.index])
        # What the source has left, then what was taken of it: a real cycle saves both in
        # that order, which is the order this one repeats them in.
        return itertools.cycle(itertools.chain(self.source, self.saved))


# ---- torch operators whose C binding reads a tensor argument as a Python number
#
# A 0-d tensor passed where the operator's schema takes a Scalar is read with .item() by
# the binding (a data-dependent read: no graph can hold it). Where another overload or a
# composition of operators takes the tensor itself and computes the same, these call it;
# every other call goes to the original (a call of the original from its own polyfill is
# the C function itself). As torch._dynamo does for the same operators.

def _same_dtype(scalar, tensors):
    return all(isinstance(t, torch.Tensor) and t.dtype == scalar.dtype and t.device == scalar.device
               for t in tensors)


def _foreach_lerp_(*args, **kwargs):
    if len(args) == 3 and not kwargs and isinstance(args[2], torch.Tensor) and args[2].dim() == 0 \
            and _same_dtype(args[2], args[0]):
        self, end, weight = args
        return torch._foreach_lerp_(self, end, [weight] * len(self))  # the List overload
    return torch._foreach_lerp_(*args, **kwargs)


def _foreach_lerp(*args, **kwargs):
    if len(args) == 3 and not kwargs and isinstance(args[2], torch.Tensor) and args[2].dim() == 0 \
            and _same_dtype(args[2], args[0]):
        self, end, weight = args
        return torch._foreach_lerp(self, end, [weight] * len(self))
    return torch._foreach_lerp(*args, **kwargs)


def _foreach_pow(*args, **kwargs):
    if len(args) == 2 and not kwargs and isinstance(args[0], torch.Tensor) and args[0].dim() == 0 \
            and isinstance(args[1], (list, tuple)) and _same_dtype(args[0], args[1]):
        base, exponents = args
        return torch._foreach_pow([base] * len(exponents), exponents)  # the List overload
    return torch._foreach_pow(*args, **kwargs)


def _tensor_value(kwargs):
    value = kwargs.get("value")
    # a 0-d tensor only: the binding refuses others (TypeError), and so does the original here
    return value if len(kwargs) == 1 and isinstance(value, torch.Tensor) and value.dim() == 0 else None


def _addcmul_(self, *args, **kwargs):
    # self + value * tensor1 * tensor2, in that order
    value = _tensor_value(kwargs)
    if len(args) == 2 and value is not None:
        return self.add_(value * args[0] * args[1])
    return self.addcmul_(*args, **kwargs)


def _addcmul(self, *args, **kwargs):
    value = _tensor_value(kwargs)
    if len(args) == 2 and value is not None:
        return self + value * args[0] * args[1]
    return self.addcmul(*args, **kwargs)


def _torch_addcmul(*args, **kwargs):
    value = _tensor_value(kwargs)
    if len(args) == 3 and value is not None:
        return args[0] + value * args[1] * args[2]
    return torch.addcmul(*args, **kwargs)


POLYFILLS = {
    itertools.chain: chain,
    itertools.chain.from_iterable: chain_from_iterable,
    itertools.islice: islice,
    itertools.compress: compress,
    itertools.filterfalse: filterfalse,
    itertools.takewhile: takewhile,
    itertools.dropwhile: dropwhile,
    itertools.starmap: starmap,
    itertools.accumulate: accumulate,
    itertools.pairwise: pairwise,
    itertools.zip_longest: zip_longest,
    itertools.product: product,
    itertools.permutations: permutations,
    itertools.combinations: combinations,
    functools.reduce: reduce,
    operator.methodcaller: methodcaller,
    itertools.count: count,
    itertools.repeat: repeat,
    itertools.cycle: cycle,
    torch._foreach_lerp_: _foreach_lerp_,
    torch._foreach_lerp: _foreach_lerp,
    torch._foreach_pow: _foreach_pow,
    torch.addcmul: _torch_addcmul,
    torch.Tensor.addcmul_: _addcmul_,
    torch.Tensor.addcmul: _addcmul,
}


# ---- torch's own C helpers that take the program's callables -------------------------------

def fx_map_aggregate(a, fn):
    # torch._C._fx_map_aggregate (torch.fx.node.map_aggregate): `fn` called on each leaf of
    # nested tuples, lists, dicts and slices, depth first in order; lists come back as
    # fx's immutable_list, dicts as immutable_dict, namedtuples as their own class.
    if isinstance(a, tuple):
        parts = [fx_map_aggregate(item, fn) for item in a]
        return type(a)(*parts) if hasattr(a, "_fields") else tuple(parts)
    if isinstance(a, list):
        return _fx_immutable.immutable_list([fx_map_aggregate(item, fn) for item in a])
    if isinstance(a, dict):
        return _fx_immutable.immutable_dict([(k, fx_map_aggregate(v, fn)) for k, v in a.items()])
    if isinstance(a, slice):
        return slice(fx_map_aggregate(a.start, fn), fx_map_aggregate(a.stop, fn), fx_map_aggregate(a.step, fn))
    return fn(a)


def fx_map_arg(a, fn):
    # torch._C._fx_map_arg (torch.fx.node.map_arg): the same walk, `fn` called on fx Nodes only.
    return fx_map_aggregate(a, lambda leaf: fn(leaf) if isinstance(leaf, _fx_node.Node) else leaf)


def _torch_polyfills():
    global _fx_immutable, _fx_node
    try:
        import torch._C
        import torch.fx.immutable_collections as _fx_immutable
        import torch.fx.node as _fx_node
    except ImportError:
        return {}
    return {torch._C._fx_map_aggregate: fx_map_aggregate, torch._C._fx_map_arg: fx_map_arg}


POLYFILLS.update(_torch_polyfills())


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
