"""cdynamo.compile: wrapping functions and modules so their calls run with the hook on."""
import collections
import functools
import itertools
import os
import sys
import sysconfig
import time
import types
import weakref

import torch

from . import _C, _backends, _events, _rules, _toplevel, config as _config
from ._internal import ddp as _ddp


# What a guard_fail_fn receives (torch._dynamo.types.GuardFail's fields).
GuardFail = collections.namedtuple("GuardFail", ["reason", "orig_code"])


class CompileConfig:
    """What a compiled callable was compiled with; the C++ core reads it on a miss.

    Cache entries belong to one configuration: two wrappers of the same function with
    different backends keep separate entries.
    """

    __slots__ = ("orig_backend", "backend", "fullgraph", "dynamic", "backend_name", "guard_fail_fn", "__weakref__")

    def __init__(self, backend, fullgraph, dynamic, backend_name, guard_fail_fn=None):
        self.orig_backend = backend
        self.backend = _timed(backend)  # what the core calls
        self.fullgraph = bool(fullgraph)
        self.dynamic = dynamic
        self.backend_name = backend_name
        self.guard_fail_fn = guard_fail_fn

    def _guard_failed(self, reason, code):
        # Called by the core on a miss of a frame this configuration compiled before, with
        # the guard failure(s) that made it miss (torch._dynamo's GuardFail(reason, orig_code)).
        self.guard_fail_fn(GuardFail(reason, code))

    def __repr__(self):
        return f"CompileConfig(backend={self.backend_name}, fullgraph={self.fullgraph}, dynamic={self.dynamic})"


class _timed:
    """The backend, timing its calls for stats()["backend_s"] and the run summary.

    A module-level class rather than a closure so that a compiled module (which holds its
    configuration) stays picklable, as torch.compile's are."""

    __slots__ = ("__wrapped__", "__name__")

    def __init__(self, backend):
        self.__wrapped__ = backend
        self.__name__ = getattr(backend, "__name__", type(backend).__name__)

    def __call__(self, gm, example_inputs):
        start = time.perf_counter_ns()
        before = _fx_source_key(gm)
        sources = _fx_source_cache()
        known = len(sources) if sources is not None else 0
        try:
            # A graph traced inside a DDP forward is compiled in pieces, one per gradient
            # bucket, under torch._dynamo.config.optimize_ddp (cdynamo/_internal/ddp.py).
            ddp = _ddp.active_module()
            if ddp is not None:
                return _ddp.split_and_compile(self.__wrapped__, gm, example_inputs, ddp)
            return self.__wrapped__(gm, example_inputs)
        finally:
            _events.add_backend_time(time.perf_counter_ns() - start)
            # The graphs the backend made (AOT autograd's joint, forward and backward graphs:
            # about 20 a compile) go with the graph they were made from: the newest keys,
            # as many as the cache grew by (fewer if some died meanwhile, never another's).
            # Compiles hold the compile lock, so they are this compile's unless another
            # thread's uncompiled code built a GraphModule at the same moment: then that
            # graph's source lines leave tracebacks early, nothing else.
            made = []
            if sources is not None and len(sources) > known:
                made = list(itertools.islice(reversed(sources), len(sources) - known))
            _forget_fx_source_on_death(gm, before, _fx_source_key(gm), *made)

    def __reduce__(self):
        return (_timed, (self.__wrapped__,))


# torch.fx keeps the generated source of every GraphModule forever: GraphModule.recompile
# stores it in torch.fx.graph_module._loader.eval_cache and registers it with linecache under
# a fresh "<eval_with_key>.N" name, and nothing removes either (torch._dynamo grows the same
# way). That is about 1 KB a graph, so compile/reset cycles would grow memory without
# bound; the source of a graph cdynamo traced is dropped when its GraphModule dies (its name
# is never reused, so nothing else can need it).
def _fx_source_key(gm):
    forward = getattr(type(gm), "forward", None)
    code = getattr(forward, "__code__", None)
    return getattr(code, "co_filename", None)


def _fx_source_cache():
    cache = getattr(getattr(torch.fx.graph_module, "_loader", None), "eval_cache", None)
    return cache if isinstance(cache, dict) else None


def _forget_fx_source_on_death(gm, *keys):
    cache = _fx_source_cache()
    if cache is None:
        return
    keys = tuple({k for k in keys if isinstance(k, str) and k in cache})
    if keys:
        try:
            weakref.finalize(gm, _forget_fx_source, cache, keys).atexit = False
        except TypeError:  # not weakly referenceable
            pass


def forget_source_on_death(gm):
    """Called by the tracer on every graph module it builds (and again after the runtime
    asserts regenerate its code): graphs no backend sees (no ops, a failed compile, a
    passthrough) would otherwise keep their source for good, a few per generated program."""
    _forget_fx_source_on_death(gm, _fx_source_key(gm))


def _forget_fx_source(cache, keys):
    import linecache
    for key in keys:
        cache.pop(key, None)
        linecache.cache.pop(key, None)


def _file_rules():
    """Which files the hook traces: the longest matching path prefix decides."""
    torch_dir = os.path.dirname(torch.__file__) + os.sep
    here = os.path.dirname(os.path.abspath(__file__)) + os.sep
    rules = [
        (torch_dir, False),  # torch internals run natively (their ops are recorded when called from traced code)
        (os.path.join(torch_dir, "nn", "modules") + os.sep, True),  # nn.Module.forward code is user-level code
        (os.path.join(torch_dir, "nn", "modules", "module.py"), False),  # Module.__call__ machinery
        # An optimizer's step is program-level code too (torch._dynamo compiles torch.optim's
        # frames): its wrappers' frames, resumed after their graph breaks, are captured, so the
        # step's tensor math becomes one graph. The LR schedulers are not (their step reads and
        # writes Python floats only; torch._dynamo skips that file as well).
        (os.path.join(torch_dir, "optim") + os.sep, True),
        (os.path.join(torch_dir, "optim", "lr_scheduler.py"), False),
        (here, False),  # cdynamo itself
        (os.path.join(here, "_toplevel.py"), True),  # but the frame of a compiled C callable
    ]
    for key in ("stdlib", "platstdlib"):
        path = sysconfig.get_paths().get(key)
        if path:
            rules.append((os.path.realpath(path) + os.sep, False))
            rules.append((path + os.sep, False))
    for key in ("purelib", "platlib"):
        path = sysconfig.get_paths().get(key)
        if path:  # third-party packages (timm, transformers, ...) are traced
            rules.append((os.path.realpath(path) + os.sep, True))
            rules.append((path + os.sep, True))
    return rules


_C.set_file_rules(_file_rules())
_config._apply()


class _WrapperModule(torch.nn.Module):
    """A module standing for `_orig_mod` (its state_dict names carry the `_orig_mod.`
    prefix, as torch's wrappers do): attributes it does not have are the wrapped module's."""

    def __getattr__(self, name):
        try:
            return torch.nn.Module.__getattr__(self, name)
        except AttributeError:
            return getattr(self._modules["_orig_mod"], name)


# A compiled module with forward hooks -> the function its calls are traced through.
_hooked_calls = weakref.WeakKeyDictionary()


class OptimizedModule(_WrapperModule):
    """An nn.Module compiled by cdynamo (the counterpart of torch's OptimizedModule).

    The original module is ``_orig_mod`` (so ``state_dict`` keys carry the ``_orig_mod.``
    prefix, as with torch.compile). It stands for the original one as torch's wrapper does:
    attribute reads, writes and deletes go to it (but for the wrapper's own and its class's
    attributes), ``training`` is its flag, and ``dir()`` lists its attributes first.
    """

    # Names that belong to the wrapper itself, not to the module it wraps.
    _own_attributes = frozenset({"_orig_mod", "_cdynamo_config", "__dict__"})

    def __init__(self, mod, compile_config):
        # nn.Module.__init__ sets `training` through __setattr__; until _orig_mod is there
        # the wrapper's own attributes are its own.
        self.__dict__["_cdynamo_config"] = compile_config
        torch.nn.Module.__init__(self)
        self._orig_mod = mod

    # `self._orig_mod` would miss the instance __dict__ (nn.Module keeps submodules in
    # _modules), format an AttributeError and run two Python __getattr__ frames on every
    # call; reading _modules directly is the same lookup without them.
    # A lazy module still uninitialised (torch.nn.modules.lazy) first initialises itself
    # eagerly, on these arguments, as torch's wrapper does: its initialising pre-hook is
    # then gone and what is compiled is the module it has become.
    def __call__(self, *args, **kwargs):
        mod = self._modules["_orig_mod"]
        d = mod.__dict__
        if "_initialize_hook" in d:
            mod._infer_parameters(mod, args, kwargs)
        if (d.get("_forward_pre_hooks") or d.get("_forward_hooks")) and _config.effective("wrap_top_frame"):
            # The module's forward hooks and its forward are one frame, traced through the
            # call (the trace inlines the hooks as nn.Module.__call__ runs them), as
            # torch._dynamo's wrap_top_frame captures them in one graph; without it, each hook
            # and the forward are frames of their own (its default too). The frame's code is the
            # wrapper's own: the hook dicts' keys are guarded, and modules with hooks of their
            # own would otherwise share one code object's recompile limit.
            call = _hooked_calls.get(self)
            if call is None:
                call = _hooked_calls[self] = _toplevel.module_caller()
            return _C.call_compiled(self._cdynamo_config, call, mod, *args, **kwargs)
        return _C.call_compiled(self._cdynamo_config, mod, *args, **kwargs)

    def forward(self, *args, **kwargs):
        mod = self._modules["_orig_mod"]
        if "_initialize_hook" in mod.__dict__:
            mod._infer_parameters(mod, args, kwargs)
        return _C.call_compiled(self._cdynamo_config, mod, *args, **kwargs)

    def _forwards(self, name):
        """Whether setting/deleting attribute `name` acts on the wrapped module."""
        modules = self.__dict__.get("_modules")
        return (modules is not None and "_orig_mod" in modules and name not in self._own_attributes
                and not hasattr(type(self), name))

    def __setattr__(self, name, value):
        if self._forwards(name):
            setattr(self._modules["_orig_mod"], name, value)
        else:
            torch.nn.Module.__setattr__(self, name, value)

    def __delattr__(self, name):
        if self._forwards(name):
            delattr(self._modules["_orig_mod"], name)
        else:
            torch.nn.Module.__delattr__(self, name)

    @property
    def training(self):
        modules = self.__dict__.get("_modules")
        if modules is not None and "_orig_mod" in modules:
            return modules["_orig_mod"].training
        return self.__dict__.get("_training_before_wrapping", True)

    @training.setter
    def training(self, value):
        modules = self.__dict__.get("_modules")
        if modules is not None and "_orig_mod" in modules:
            modules["_orig_mod"].training = value
        else:  # nn.Module.__init__, before there is a module to mirror
            self.__dict__["_training_before_wrapping"] = value

    def __dir__(self):
        own = self._modules["_orig_mod"].__dir__()
        seen = set(own)
        return own + [a for a in torch.nn.Module.__dir__(self) if a not in seen]

    def __repr__(self):
        return f"OptimizedModule({self._orig_mod!r}, {self._cdynamo_config!r})"


# Code written for torch.compile tells a compiled module by
# isinstance(m, torch._dynamo.eval_frame.OptimizedModule) (to unwrap `_orig_mod`, to skip
# compiling twice). When torch._dynamo is loaded (cdynamo.install() loads it; importing it
# only for this would cost seconds at `import cdynamo`), compiled modules are instances
# of a subclass of both wrappers: every method is cdynamo's (they come first in the MRO and
# reach nn.Module's directly); torch's class contributes only its identity and what it
# adds besides, such as len().
_torch_optimized_module_class = None


def _optimized_module_class():
    global _torch_optimized_module_class
    eval_frame = sys.modules.get("torch._dynamo.eval_frame")
    torch_cls = getattr(eval_frame, "OptimizedModule", None) if eval_frame is not None else None
    if not isinstance(torch_cls, type) or not issubclass(torch_cls, torch.nn.Module):
        return OptimizedModule
    if _torch_optimized_module_class is None or _torch_optimized_module_class.__bases__[1] is not torch_cls:
        _torch_optimized_module_class = type("OptimizedModule", (OptimizedModule, torch_cls), {
            "__module__": __name__,
            "__qualname__": "_TorchOptimizedModule",  # what pickle looks up (module __getattr__ below)
            "__doc__": OptimizedModule.__doc__,
            # Pickled and copied as an nn.Module (torch's __reduce__/__setstate__ rebuild
            # torch's own wrapper state).
            "__reduce__": object.__reduce__,
            "__getstate__": torch.nn.Module.__getstate__,
            "__setstate__": torch.nn.Module.__setstate__,
        })
    return _torch_optimized_module_class


def __getattr__(name):
    # A pickled compiled module names its class; unpickling it makes the class again
    # (loading torch._dynamo for it).
    if name == "_TorchOptimizedModule":
        import torch._dynamo.eval_frame  # noqa: F401

        return _optimized_module_class()
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


# One configuration per (backend, fullgraph, dynamic): cache entries belong to a
# configuration, so two wrappers compiled with the same backend share entries, as
# torch.compile's do (its cache entries are matched by backend).
_configs = weakref.WeakValueDictionary()


def _config_for(backend, fullgraph, dynamic, name, guard_fail_fn=None):
    key = (id(backend), bool(fullgraph), dynamic, id(guard_fail_fn))
    cfg = _configs.get(key)
    if cfg is None or cfg.orig_backend is not backend or cfg.guard_fail_fn is not guard_fail_fn:
        cfg = CompileConfig(backend, fullgraph, dynamic, name, guard_fail_fn)
        _configs[key] = cfg
    return cfg


def _make_backend(backend, mode, options, dynamic):
    if backend == "inductor" and (mode is not None or options is not None):
        return torch._TorchCompileInductorWrapper(mode, options, dynamic)
    if mode is not None or options is not None:
        # As torch.compile does: the backend is called with mode=/options= keywords.
        return torch._TorchCompileWrapper(backend, mode, options, dynamic)
    return _backends.resolve(backend)


def compile(model=None, *, backend="inductor", fullgraph=False, dynamic=None, mode=None, options=None,
            disable=False, guard_fail_fn=None):
    """Compile a function or nn.Module; the same keywords as torch.compile.

    Usable as ``@cdynamo.compile``, ``@cdynamo.compile(backend=...)`` or
    ``cdynamo.compile(fn_or_module, ...)``. ``backend`` is a name from torch's backend
    registry or a callable ``backend(gm, example_inputs) -> callable``. With
    ``fullgraph=True`` a frame that cannot be captured whole raises cdynamo.Unsupported.
    ``dynamic``: None (automatic: the first compile is static; a dimension whose size changed
    is symbolic from the recompile on), True (symbolic from the first compile, sizes 0 and 1
    specialized), False (static, but for dims marked with mark_dynamic).
    ``guard_fail_fn`` (torch._dynamo.optimize's): called with a ``GuardFail(reason,
    orig_code)`` when a frame compiled before misses its cache entries and is compiled again.
    """
    if model is None:
        return functools.partial(compile, backend=backend, fullgraph=fullgraph, dynamic=dynamic, mode=mode,
                                 options=options, disable=disable, guard_fail_fn=guard_fail_fn)
    if disable:
        return model
    if mode is not None and options is not None:
        raise RuntimeError("Either mode or options can be specified, but both can't be specified at the same time.")
    _rules.ensure_torch_rules()
    name = backend if isinstance(backend, str) else getattr(backend, "__name__", type(backend).__name__)
    cfg = _config_for(_make_backend(backend, mode, options, dynamic), fullgraph, dynamic, name, guard_fail_fn)
    if isinstance(model, torch.nn.Module):
        return _optimized_module_class()(model, cfg)
    if not callable(model):
        raise TypeError(f"cdynamo.compile: expected a function or nn.Module, got {type(model).__name__}")
    run = _toplevel.wrap(model) if _calls_c_first(model) else model
    compiled = _C.CompiledFunction(run, cfg)
    functools.update_wrapper(compiled, model)
    return compiled


def _calls_c_first(fn):
    """Whether calling ``fn`` runs C code before any Python frame of the program (an
    lru_cache wrapper, a partial, a builtin): such a callable is compiled through
    cdynamo._toplevel."""
    if isinstance(fn, type) or _own_code(fn) is not None:
        return False
    call = getattr(type(fn), "__call__", None)
    return not isinstance(call, types.FunctionType)


def _innermost(fn):
    """What a cdynamo (or torch) compiled wrapper wraps: disable(compile(f)) disables f."""
    while True:
        if isinstance(fn, OptimizedModule):
            fn = fn._orig_mod
        elif isinstance(fn, DisabledModule):
            fn = fn._orig_mod
        elif getattr(fn, "_torchdynamo_orig_callable", None) is not None and not isinstance(fn, torch.nn.Module):
            fn = fn._torchdynamo_orig_callable
        else:
            return fn


def _own_code(fn):
    """The code object that runs when `fn` is called, when it is plain Python (else None)."""
    fn = getattr(fn, "__func__", fn)  # a bound method
    code = getattr(fn, "__code__", None)
    return code if isinstance(code, type(_own_code.__code__)) else None


def disable(fn=None, recursive=True):
    """Never trace ``fn``: the counterpart of ``torch._dynamo.disable``.

    Usable as ``@cdynamo.disable``, ``@cdynamo.disable(recursive=False)`` or
    ``cdynamo.disable(fn)``; returns a wrapper (``functools.wraps``) that calls ``fn``
    natively. With ``recursive=True`` nothing under the call is traced (the compile
    context is off while ``fn`` runs; a function compiled explicitly and called inside
    still is). With ``recursive=False`` only ``fn``'s own frame is skipped: its code object
    is marked, so every call of that code runs natively, and the functions it calls are
    still captured. A traced frame that calls a disabled function stops there, with the
    reason "call to <qualname>, which is wrapped by cdynamo.disable". The marks survive
    ``cdynamo.reset()``.

    ``cdynamo.disable(module)`` returns a module (as torch's does: the original is
    ``_orig_mod``) whose calls run the original module natively, hooks included; put it
    where the original was (``model.block = cdynamo.disable(model.block)``).
    """
    if fn is None:
        return functools.partial(disable, recursive=recursive)
    fn = _innermost(fn)
    if isinstance(fn, torch.nn.Module):
        if not recursive:
            raise NotImplementedError("cdynamo.disable(module, recursive=False): disable the methods it "
                                      "should not trace instead")
        return DisabledModule(fn)
    if isinstance(fn, type):
        raise TypeError("cdynamo.disable: expected a function, method or nn.Module instance, got the class "
                        f"{fn.__qualname__} (disable its methods instead)")
    if not callable(fn):
        raise TypeError(f"cdynamo.disable: expected a callable, got {type(fn).__name__}")
    return _disabled_wrapper(fn, recursive)


def _disabled_wrapper(fn, recursive):
    """The wrapper disable() returns for a callable `fn` (see disable)."""
    if recursive:
        def cdynamo_disabled(*args, **kwargs):
            return _C.call_disabled(fn, *args, **kwargs)
    else:
        # fn's own frame is skipped through its code; what it calls is traced as usual.
        # (A callable without Python code of its own, a C function or an object with
        # __call__, is only covered through the wrapper.)
        code = _own_code(fn)
        if code is not None:
            _C.mark_disabled(code)

        def cdynamo_disabled(*args, **kwargs):
            return fn(*args, **kwargs)
    # A module's __dict__ (parameters, submodules) is not copied onto the wrapper.
    functools.update_wrapper(cdynamo_disabled, fn, updated=() if isinstance(fn, torch.nn.Module) else ("__dict__",))
    if not hasattr(fn, "__qualname__"):
        cdynamo_disabled.__qualname__ = type(fn).__qualname__  # a callable object: name its class
    # The wrapper's frame is never traced either, and a trace that calls it stops with the
    # reason naming fn (by the __qualname__ copied above). Both wrapper codes are marked
    # once each; marking again is a no-op.
    _C.mark_disabled(cdynamo_disabled.__code__)
    cdynamo_disabled._cdynamo_disable_recursive = bool(recursive)
    return cdynamo_disabled


class DisabledModule(_WrapperModule):
    """What ``cdynamo.disable(module)`` returns: calling it runs the original module
    (``_orig_mod``) natively, its hooks included; a traced frame that calls it stops there.

    ``forward`` is an instance attribute (a disabled wrapper of the original module), which
    is where a trace looks first when it calls a module. Attribute reads fall through to
    the original module, and ``state_dict`` keys carry the ``_orig_mod.`` prefix, as with
    torch's ``torch._dynamo.disable(module)``.
    """

    def __init__(self, mod):
        super().__init__()
        self._orig_mod = mod
        forward = _disabled_wrapper(mod, True)  # wraps the module's __call__: its hooks run as they would
        forward.__qualname__ = f"{type(mod).__qualname__}.forward"
        self.__dict__["forward"] = forward

    def __repr__(self):
        return f"DisabledModule({self._orig_mod!r})"


def reset():
    """Drop every cache entry, every per-code decision and all counters (not the marks of
    cdynamo.disable: those are the user's decisions). The history behind the run summary,
    the structured trace and the capture report (cdynamo._events) is kept."""
    _events.fold_stats()
    _C.reset()
    _config._apply()


def stats():
    """Counters since the last reset, plus the frames that ran natively and why.

    ``frontend_s``: time spent translating frames, less ``backend_s``, the time in the
    backends' compile calls."""
    s = _C.stats()
    backend_ns = _events.backend_ns_since_reset()
    s["backend_s"] = backend_ns / 1e9
    s["frontend_s"] = max(0, s.pop("translate_ns") - backend_ns) / 1e9
    s["native_frames"] = _C.native_frames()
    s["graph_break_reasons"] = _C.graph_breaks()
    s["recompile_reasons"] = _C.recompile_reasons()
    return s


def cache_entries(fn):
    """The cache entries of a function's (or module's forward's) code object: guards, graph."""
    if isinstance(fn, OptimizedModule):
        fn = fn._orig_mod
    fn = getattr(fn, "__wrapped__", fn)
    code = getattr(fn, "__code__", None)
    if code is None and isinstance(fn, torch.nn.Module):
        code = type(fn).forward.__code__
    if code is None:
        raise TypeError("cache_entries: expected a function or a module")
    return _C.cache_entries(code)


def mark_dynamic(t, index, *, min=None, max=None):
    """Makes dim(s) `index` of tensor `t` symbolic from the first compile that sees it
    (optionally within [min, max], guarded); the same mark as torch._dynamo.mark_dynamic,
    which cdynamo honours too."""
    import torch._dynamo

    torch._dynamo.mark_dynamic(t, index, min=min, max=max)


def maybe_mark_dynamic(t, index):
    """As mark_dynamic, but the trace may still specialize the dim (torch._dynamo's)."""
    import torch._dynamo

    torch._dynamo.maybe_mark_dynamic(t, index)


def mark_static(t, index=None):
    """Keeps dim(s) `index` of `t` static even under dynamic=True or automatic dynamic."""
    import torch._dynamo

    torch._dynamo.mark_static(t, index)
