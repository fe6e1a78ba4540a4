"""Module-level settings, read by cdynamo when it needs them (like torch._dynamo.config)."""
import sys as _sys
import types as _types

# Options that torch._dynamo.config also has (capture_scalar_outputs, suppress_errors,
# automatic_dynamic_shapes, assume_static_by_default, allow_unspec_int_on_nn_module, force_parameter_static_shapes,
# automatic_dynamic_shapes_mark_as, allow_empty_graphs) are None by default: None means
# "as torch._dynamo.config's option of that name" (same defaults), read where the option is
# used, so code written for torch.compile that sets torch's option -- or a test that patches
# it -- gets the same behaviour from cdynamo. True or False set here wins over torch's.
# effective(name) gives the value in force.
#
# The recompile policy (torch._dynamo's names and defaults). A code object keeps at most
# `recompile_limit` cache entries per compile configuration, and `accumulated_recompile_limit`
# over all configurations. Past a limit the entries it has still run on the inputs they
# guard; a call none of them accepts runs natively (correct, not compiled), with one
# warning per code object and configuration naming the function, the limit and the guard
# that failed last. With `fail_on_recompile_limit_hit` that call raises
# cdynamo.FailOnRecompileLimitHit instead. `cache_size_limit` is the old name of
# `recompile_limit` (the same setting). Setting one applies at once.
recompile_limit = 8
accumulated_recompile_limit = 256
fail_on_recompile_limit_hit = False

# Whether Tensor.item() (and int(t), float(t), bool(t) of a one-element tensor) is kept
# in the graph as a symbolic scalar, as torch._dynamo.config.capture_scalar_outputs does.
# Off: such a read stops the trace, naming the operation. Read when a frame is traced,
# so a change applies to frames traced afterwards (cdynamo.reset() re-traces the others).
# Branching on such a value (`if t.item() > 0`) always stops the trace.
capture_scalar_outputs = None

# A frame whose trace records no op and ends without a graph break: off (torch._dynamo's
# default), it runs natively from then on, as torch._dynamo skips it; on, it keeps its cache
# entry (a graph is compiled only once the trace has ops, a symbolic size's arithmetic
# included). The test suite turns it on, so that programs without tensor ops still test the
# interpreter (tests/conftest.py).
allow_empty_graphs = None

# A backend that fails (raises, or returns something not callable) raises
# cdynamo.BackendCompilerFailed from the compiled call (the backend's error chained as
# __cause__). With suppress_errors, the failure is a RuntimeWarning instead and the frame runs
# natively from then on (cdynamo.stats()["native_frames"] gives the reason), as
# torch._dynamo.config.suppress_errors does. A KeyboardInterrupt or SystemExit raised by a
# backend always propagates as itself; Unsupported under fullgraph=True is never suppressed.
suppress_errors = None

# cdynamo.compile(module) of a module with forward hooks of its own: with this True its call
# (hooks and forward) is traced as one frame, one graph; by default the hooks and the forward
# are frames of their own, as torch._dynamo.config.wrap_top_frame (False there too).
wrap_top_frame = None

# Automatic dynamic shapes (compile(dynamic=None), the default): the first compile of a
# frame is static; when a later compile of it sees a tensor dimension with another size
# than before (or a Python int argument with another value, see allow_unspec_int_on_nn_module), that
# dimension is symbolic from then on, so later sizes hit one entry. As torch._dynamo's
# automatic_dynamic_shapes. Read when a frame is traced.
automatic_dynamic_shapes = None

# Python ints read from an argument (the argument itself, or an attribute, item or key under
# it) take part in automatic dynamic; those read under an nn.Module (its attributes, a
# submodule's) stay constants, recompiling when they change, unless this is True. As
# torch._dynamo.config.allow_unspec_int_on_nn_module (False there too). Read when a frame is
# traced.
allow_unspec_int_on_nn_module = None

# Under compile(dynamic=None), the default: True, the first compile of a frame is static and
# automatic dynamic makes a size symbolic once it changes; False, sizes are symbolic from the
# first compile, as under dynamic=True (torch._dynamo's compile(dynamic=True) is this setting).
# As torch._dynamo.config.assume_static_by_default. Read when a frame is traced.
assume_static_by_default = None

# Whether nn.Parameters keep static sizes (True, torch's default) or take part in dynamic
# shapes like any tensor input (False: a Parameter argument whose size changed is symbolic
# after the recompile, as torch._dynamo.config.force_parameter_static_shapes). Read when a
# frame is traced.
force_parameter_static_shapes = None

# What automatic dynamic makes a size that changed: "dynamic" (a backed symbol: the trace
# may branch on it, guarded) or "unbacked" (a symbol without a value: no 0/1
# specialization and no guard on it, so sizes 0 and 1 hit the same entry; a branch on it
# stops the trace), as torch._dynamo.config.automatic_dynamic_shapes_mark_as. Read when a
# frame is traced.
automatic_dynamic_shapes_mark_as = None

# Whether the contexts of contextlib.contextmanager functions are traced (their generator
# run in place), as torch._dynamo.config.enable_trace_contextlib: False makes the call that
# makes such a context a graph break (the frame goes on natively from there). Contexts
# cdynamo models (disable_saved_tensors_hooks, sdpa_kernel) are modelled either way.
enable_trace_contextlib = None

# Sizes 0 and 1 are never made symbolic (torch's 0/1 specialization); the other sizes
# of one trace that are equal get one symbol (duck sizing), as torch._dynamo does.
specialize_int = True

# A check mode for the output-metadata memo (the tests turn it on): every result the memo
# makes is compared with what running the op on fake tensors gives (sizes and strides as
# expressions, storage offset, dtype, device, requires_grad, leaf and view status); a
# difference raises cdynamo.exc.InternalError naming the op. Read once per trace. Off by
# default: it runs every memoized op twice.
memo_check = False


class _Config(_types.ModuleType):
    """The module's class: the recompile policy's settings reach the C++ core when set."""

    # Read through the class, not self: assigning __class__ (a test shim swapping the
    # module's class) runs this __setattr__ and then looks names up on the new class.
    _POLICY = ("recompile_limit", "accumulated_recompile_limit", "fail_on_recompile_limit_hit")

    @property
    def cache_size_limit(self):
        return self.recompile_limit

    @cache_size_limit.setter
    def cache_size_limit(self, value):
        self.recompile_limit = value

    def __setattr__(self, name, value):
        if name in _Config._POLICY:
            if name == "fail_on_recompile_limit_hit":
                value = bool(value)
            else:
                value = int(value)
                if value < 0:
                    raise ValueError(f"cdynamo.config.{name} must be >= 0, got {value}")
        super().__setattr__(name, value)
        if name in _Config._POLICY:
            _apply()


def effective(name):
    """The value in force of option `name`: cdynamo's own, or torch._dynamo.config's where
    cdynamo's is None (see the top of this module). A module function, not a method: it
    must survive a test shim swapping the module's class."""
    value = getattr(_sys.modules[__name__], name)
    if value is None:
        import torch._dynamo.config as torch_config
        value = getattr(torch_config, name)
    return value


def _apply():
    """Hands the recompile policy to the C++ core. A module function (not a method of the
    module's class), so it stays reachable when a test shim swaps the module's class."""
    _C = _sys.modules.get("cdynamo._C")
    if _C is not None:
        cfg = _sys.modules[__name__]
        _C.set_recompile_policy(cfg.recompile_limit, cfg.accumulated_recompile_limit,
                                cfg.fail_on_recompile_limit_hit)


_sys.modules[__name__].__class__ = _Config
