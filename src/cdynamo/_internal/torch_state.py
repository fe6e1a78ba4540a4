"""torch's global (thread-local) state saved before a translation and restored after it.

The hook calls ``save()`` before it translates a frame and ``restore(saved)`` after, on every
path (success, graph break, native, a backend that raised, KeyboardInterrupt): a backend may
run the graph it compiles (aot_eager traces it, a user backend may call it), and the graph
sets grad mode and autocast state as the program did; the program's state after the call
must be what eager execution leaves, whatever the backend did. The CPU RNG is restored as
well (compiling must not consume random numbers the program would have drawn).

Both run with the program's TorchDispatchModes set aside (the compiled call may run inside
one): reading and comparing the RNG state are operators, which such a mode would see and
may answer with anything. ``save()`` also refuses to translate under torch.jit.trace
(RuntimeError, as torch._dynamo).
"""
import torch
from torch.utils._python_dispatch import _disable_current_modes, any_torch_dispatch_mode_on_stack

_DEVICES = ("cpu", "cuda")


def save():
    if torch._C._is_tracing():
        # torch.jit.trace calling a compiled function: the JIT tracer would record the
        # graph's outputs as values it never saw made (with symbolic sizes it crashes in
        # TracingState::getOutput). torch._dynamo refuses the call the same way.
        raise RuntimeError(
            "Detected that you are using FX to torch.jit.trace a dynamo-optimized function. "
            "This is not supported at the moment."
        )
    with _disable_current_modes():
        return _save()


def restore(saved):
    with _disable_current_modes():
        _restore(saved)


def autocast_nesting():
    """Autocast's nesting depth now (torch has no reader of it: one step in and back out,
    which leaves it as it was). A guard of an entry whose trace answered a nesting call."""
    depth = torch.autocast_increment_nesting() - 1
    torch.autocast_decrement_nesting()
    return depth


def _save():
    autocast = []
    for dev in _DEVICES:
        try:
            autocast.append((dev, torch.is_autocast_enabled(dev), torch.get_autocast_dtype(dev)))
        except (RuntimeError, TypeError):  # a device type this build does not know
            pass
    return (torch.is_grad_enabled(), autocast, torch.random.get_rng_state(),
            torch.are_deterministic_algorithms_enabled(), torch.is_autocast_cache_enabled())


def _restore(saved):
    grad, autocast, rng, deterministic, cache = saved
    if torch.is_grad_enabled() != grad:
        torch._C._set_grad_enabled(grad)
    for dev, enabled, dtype in autocast:
        if torch.is_autocast_enabled(dev) != enabled:
            torch.set_autocast_enabled(dev, enabled)
        if torch.get_autocast_dtype(dev) != dtype:
            torch.set_autocast_dtype(dev, dtype)
    if not torch.equal(torch.random.get_rng_state(), rng):
        torch.random.set_rng_state(rng)
    if torch.are_deterministic_algorithms_enabled() != deterministic:
        torch.use_deterministic_algorithms(deterministic)
    if torch.is_autocast_cache_enabled() != cache:
        torch.set_autocast_cache_enabled(cache)


# ---- torch's mode stacks when a frame is called -----------------------------------------
#
# A TorchFunctionMode on the stack when a compiled frame is called runs its
# __torch_function__ on every torch call of the frame, before any tensor subclass's
# (torch._dynamo traces it into the graph; cdynamo does not yet). A torch.device(...)
# context (torch.set_default_device) is such a mode too; it only fills in the device of
# factories, which the trace sees (it runs on the fake tensors under the same mode), so it
# is compiled, and guarded (function_mode_key). With torch function dispatch disabled
# (torch._C.DisableTorchFunction / DisableTorchFunctionSubclass) a tensor subclass's
# __torch_function__ is not called, which the trace does not model. A TorchDispatchMode
# that is not an infra mode and does not ask to ignore compile internals: torch._dynamo runs
# the frame natively, and so does cdynamo.


def _device_context_type():
    try:
        from torch.utils._device import DeviceContext
    except ImportError:
        return None
    return DeviceContext


def function_mode_key():
    """The TorchFunctionMode stack as a constant a guard compares: the device of each
    torch.device context on it, innermost last; None when another mode is on it."""
    device_context = _device_context_type()
    key = []
    for i in range(torch._C._len_torch_function_stack()):
        mode = torch._C._get_function_stack_at(i)
        if device_context is None or type(mode) is not device_context:
            return None
        key.append(str(mode.device))
    return tuple(key)


def mode_refusal():
    """Why a frame called now is not compiled because of torch's mode stacks: None, or
    (reason, whether fullgraph=True must raise it). Read on a cache miss only."""
    if not torch._C._is_torch_function_enabled():
        return ("torch function dispatch is disabled here (torch._C.DisableTorchFunction or "
                "DisableTorchFunctionSubclass): a tensor subclass's __torch_function__ would not run, "
                "which the trace does not model", True)
    if torch._C._len_torch_function_stack() and function_mode_key() is None:
        device_context = _device_context_type()
        names = [type(torch._C._get_function_stack_at(i)).__qualname__
                 for i in range(torch._C._len_torch_function_stack())
                 if type(torch._C._get_function_stack_at(i)) is not device_context]
        return (f"a TorchFunctionMode ({', '.join(names)}) is active: its __torch_function__ runs on every "
                "torch call of the frame, which the trace does not model yet", True)
    if torch._C._len_torch_dispatch_stack() and any_torch_dispatch_mode_on_stack():
        return ("a TorchDispatchMode is active (not an infra mode, and it does not ignore compile "
                "internals): the frame runs natively under it, as with torch._dynamo", False)
    return None


def functorch_state():
    """What a graph that uses functorch's transforms was traced under, as a constant a guard
    compares: the interpreter stack (each level's kind, number and what it was pushed with)
    and the two switches the transforms flip. A level number is baked into the graph
    (_add_batch_dim(x, 0, 1)), and a frame called from inside an eager transform traces on
    that transform's wrapped tensors: another stack is another graph."""
    from torch._functorch.pyfunctorch import coerce_cinterpreter

    stack = torch._C._functorch.get_interpreter_stack() or ()
    return (tuple(coerce_cinterpreter(ci).get_state() for ci in stack),
            torch._C._functorch.get_inplace_requires_grad_allowed(),
            torch._C._is_fwd_grad_enabled())
