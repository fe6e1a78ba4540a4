"""cdynamo.install(): every torch.compile in the process goes through cdynamo.

Installed, these names of torch are cdynamo's (uninstall() puts torch's back):

* ``torch.compile`` (so also ``nn.Module.compile()``, which calls it), with torch.compile's
  keywords: ``backend`` (a name from ``torch._dynamo.list_backends()`` or registered with
  ``torch._dynamo.register_backend``, or a callable), ``mode``, ``options``, ``fullgraph``,
  ``dynamic``, ``disable``, ``name``;
* ``torch._dynamo.optimize`` (and ``torch._dynamo.eval_frame.optimize``);
* strict ``torch.export.export`` (``strict=True``): its graph capture step
  (``torch.export._trace._export_to_torch_ir``) is cdynamo's, and ``torch._dynamo.export``
  is ``cdynamo.export_graph`` (see cdynamo/_export.py);
* ``torch._dynamo.reset`` (so also ``torch.compiler.reset``): resets cdynamo, then torch's;
* ``torch._dynamo.allow_in_graph`` / ``torch.compiler.allow_in_graph`` and
  ``assume_constant_result``: registered with cdynamo as well;
* ``torch.compiler.set_stance`` / ``torch._dynamo.set_stance``: torch's stance changes (as a
  call, decorator or context manager) are mirrored into cdynamo's;
* ``torch._dynamo.config``: writes of the recompile policy (``recompile_limit``/
  ``cache_size_limit``, ``accumulated_recompile_limit``, ``fail_on_recompile_limit_hit``),
  including through ``torch._dynamo.config.patch``, are mirrored into ``cdynamo.config``.
  (The other options both have -- ``capture_scalar_outputs``, ``suppress_errors``,
  ``automatic_dynamic_shapes``, ``assume_static_by_default``, ``allow_unspec_int_on_nn_module``,
  and ``optimize_ddp``, read by cdynamo/_internal/ddp.py -- follow torch's
  whether installed or not: see cdynamo/config.py.)

Without install, cdynamo still honours torch's in-code markers (``torch.compiler.disable``,
``torch._dynamo.graph_break()``, ``torch.compiler.is_compiling()``,
``torch.compiler.assume_constant_result``) in the code it compiles.
"""
import contextlib
import functools

import torch

from . import _C, _rules, config as _config
from . import eval_frame as _ef

STANCES = {"default": 0, "force_eager": 1, "eager_on_recompile": 2, "fail_on_recompile": 3}
_stance = "default"
_patches = []  # (owner, attribute, original), in the order applied
_saved_config = None


def installed():
    return bool(_patches)


# ---- stance ------------------------------------------------------------------------------

def _apply_stance(stance, force_backend=None):
    global _stance
    if force_backend is not None:
        raise NotImplementedError("cdynamo: set_stance(force_backend=...) is not supported yet")
    if stance not in STANCES:
        raise NotImplementedError(f"cdynamo: stance {stance!r} is not supported; supported: {', '.join(STANCES)}")
    _C.set_stance(STANCES[stance])
    prior, _stance = _stance, stance
    return prior


def get_stance():
    return _stance


class set_stance(contextlib.ContextDecorator):
    """``cdynamo.set_stance(stance)``: as ``torch.compiler.set_stance``, a call, a
    decorator or a context manager. ``"force_eager"`` runs compiled functions as plain
    Python; ``"eager_on_recompile"`` compiles nothing new (cached entries still run);
    ``"fail_on_recompile"`` raises RuntimeError instead of compiling; ``"default"``."""

    def __init__(self, stance="default", *, force_backend=None):
        self.stance = stance
        self.force_backend = force_backend
        self.prev = _apply_stance(stance, force_backend)

    def __call__(self, fn):
        _apply_stance(self.prev)
        return super().__call__(fn)

    def __enter__(self):
        _apply_stance(self.stance, self.force_backend)
        return self

    def __exit__(self, *exc):
        _apply_stance(self.prev)
        return False


def _mirror_stance(original):
    @functools.wraps(original)
    def _set_stance(stance):
        # Refused before torch's state changes, so the two never disagree.
        if getattr(stance, "backend", None) is not None:
            raise NotImplementedError("cdynamo: set_stance(force_backend=...) is not supported yet")
        if stance.stance not in STANCES:
            raise NotImplementedError(f"cdynamo: stance {stance.stance!r} is not supported; "
                                      f"supported: {', '.join(STANCES)}")
        prior = original(stance)
        _apply_stance(stance.stance)
        return prior

    return _set_stance


# ---- torch.compile, optimize, reset -----------------------------------------------------

def torch_compile(model=None, *, fullgraph=False, dynamic=None, backend=None, mode=None, options=None, name=None,
                  disable=False, recompile_limit=None, isolate_recompiles=False, shapes_spec=None):
    """torch.compile, through cdynamo (what ``torch.compile`` is while installed)."""
    if model is None:
        def fn(model):
            if model is None:
                raise RuntimeError("Model can't be None")
            return torch_compile(model, fullgraph=fullgraph, dynamic=dynamic, backend=backend, mode=mode,
                                 options=options, name=name, disable=disable, recompile_limit=recompile_limit,
                                 isolate_recompiles=isolate_recompiles, shapes_spec=shapes_spec)
        return fn
    if mode is not None and options is not None:
        raise RuntimeError("Either mode or options can be specified, but both can't be specified at the same time.")
    if recompile_limit is not None or isolate_recompiles or shapes_spec is not None:
        raise NotImplementedError("cdynamo: torch.compile(recompile_limit=, isolate_recompiles=, shapes_spec=) is not "
                                  "supported yet (cdynamo.config.cache_size_limit is process-wide)")
    if options is not None:
        options = dict(options)
        for key in ("guard_filter_fn", "use_aoti"):
            if options.pop(key, None):
                raise NotImplementedError(f"cdynamo: torch.compile(options={{{key!r}: ...}}) is not supported yet")
        options = options or None
    return _ef.compile(model, backend="inductor" if backend is None else backend, fullgraph=fullgraph,
                       dynamic=dynamic, mode=mode, options=options, disable=disable)


_OPTIMIZE_UNSUPPORTED = ("guard_export_fn", "guard_filter_fn", "package", "recompile_limit",
                         "shapes_spec")


def optimize(backend="inductor", *, nopython=False, dynamic=None, disable=False, error_on_graph_break=None,
             isolate_recompiles=False, guard_fail_fn=None, **kwargs):
    """torch._dynamo.optimize, through cdynamo: returns a decorator."""
    for key in _OPTIMIZE_UNSUPPORTED:
        if kwargs.pop(key, None) is not None:
            raise NotImplementedError(f"cdynamo: torch._dynamo.optimize({key}=...) is not supported yet")
    if kwargs:
        raise TypeError(f"optimize() got unexpected keyword arguments {sorted(kwargs)}")
    if isolate_recompiles:
        raise NotImplementedError("cdynamo: torch._dynamo.optimize(isolate_recompiles=True) is not supported yet")
    if disable:
        return lambda fn: fn

    def decorator(fn):
        return _ef.compile(fn, backend=backend, fullgraph=nopython or bool(error_on_graph_break), dynamic=dynamic,
                           guard_fail_fn=guard_fail_fn)

    return decorator


def _reset_with(original):
    @functools.wraps(original)
    def reset():
        _ef.reset()
        original()

    return reset


def _also(cdynamo_fn, original):
    @functools.wraps(original)
    def both(fn):
        out = original(fn)
        cdynamo_fn(fn)
        return out

    return both


# ---- torch._dynamo.config -> cdynamo.config ---------------------------------------------

def _sync_config():
    dcfg = torch._dynamo.config
    _config.recompile_limit = int(dcfg.recompile_limit)
    _config.accumulated_recompile_limit = int(dcfg.accumulated_recompile_limit)
    _config.fail_on_recompile_limit_hit = bool(dcfg.fail_on_recompile_limit_hit)


_MIRRORED = {"recompile_limit", "cache_size_limit", "accumulated_recompile_limit", "fail_on_recompile_limit_hit"}


def _mirror_config_class(cls):
    class Mirrored(cls):
        def __setattr__(self, name, value):
            super().__setattr__(name, value)
            if name in _MIRRORED:
                _sync_config()

    Mirrored.__name__ = Mirrored.__qualname__ = cls.__name__
    return Mirrored


# ---- install / uninstall ----------------------------------------------------------------

def _set(owner, name, value):
    if name == "__class__":  # a module's class (torch's config modules refuse other writes)
        object.__setattr__(owner, name, value)
    else:
        setattr(owner, name, value)


def _patch(owner, name, value):
    _patches.append((owner, name, getattr(owner, name, _MISSING)))
    _set(owner, name, value)


_MISSING = object()


def install():
    """Route every torch.compile / nn.Module.compile / torch._dynamo.optimize /
    torch._dynamo.reset in the process through cdynamo (see the module docstring).
    Installing twice is a no-op."""
    global _saved_config
    if _patches:
        return
    _rules.ensure_torch_rules()
    import torch._dynamo
    import torch._dynamo.decorators as decorators
    import torch._dynamo.eval_frame as dyn_eval_frame
    import torch.compiler

    try:
        _patch(torch, "compile", torch_compile)
        _patch(torch._dynamo, "optimize", optimize)
        _patch(dyn_eval_frame, "optimize", optimize)
        _patch(torch._dynamo, "reset", _reset_with(torch._dynamo.reset))
        _patch(torch._dynamo, "allow_in_graph", _also(_rules.allow_in_graph, torch._dynamo.allow_in_graph))
        _patch(torch.compiler, "allow_in_graph", _also(_rules.allow_in_graph, torch.compiler.allow_in_graph))
        _patch(torch._dynamo, "assume_constant_result",
               _also(_rules.assume_constant_result, torch._dynamo.assume_constant_result))
        _patch(torch.compiler, "assume_constant_result",
               _also(_rules.assume_constant_result, torch.compiler.assume_constant_result))
        import torch.export._trace as export_trace

        from . import _export
        # torch.export.export(..., strict=True): the graph capture step is cdynamo's.
        _patch(export_trace, "_export_to_torch_ir", _export._export_to_torch_ir_with(export_trace._export_to_torch_ir))
        _patch(torch._dynamo, "export", _export._dynamo_export_with(torch._dynamo.export))
        _patch(dyn_eval_frame, "export", _export._dynamo_export_with(dyn_eval_frame.export))
        _patch(decorators, "_set_stance", _mirror_stance(decorators._set_stance))
        _patch(dyn_eval_frame, "_set_stance", _mirror_stance(dyn_eval_frame._set_stance))
        cfg = torch._dynamo.config
        _saved_config = (_config.recompile_limit, _config.accumulated_recompile_limit,
                         _config.fail_on_recompile_limit_hit)
        _patch(cfg, "__class__", _mirror_config_class(type(cfg)))
        _sync_config()
        stance = dyn_eval_frame._stance
        if stance.stance != "default":
            _apply_stance(stance.stance, stance.backend)
    except BaseException:
        uninstall()
        raise


def uninstall():
    """Put torch's own functions back (the cache and the stance go back to default)."""
    global _saved_config
    while _patches:
        owner, name, original = _patches.pop()
        if original is _MISSING:
            delattr(owner, name)
        else:
            _set(owner, name, original)
    if _saved_config is not None:
        (_config.recompile_limit, _config.accumulated_recompile_limit,
         _config.fail_on_recompile_limit_hit) = _saved_config
        _saved_config = None
    _apply_stance("default")


@contextlib.contextmanager
def installed_scope():
    """``with cdynamo.installed_scope(): ...`` installs for the block."""
    was = installed()
    install()
    try:
        yield
    finally:
        if not was:
            uninstall()
