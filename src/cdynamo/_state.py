"""torch's global (thread-local) state saved before a translation and restored after it.

The hook calls ``save()`` before it translates a frame and ``restore(saved)`` after, on every
path (success, graph break, native, a backend that raised, KeyboardInterrupt): a backend may
run the graph it compiles (aot_eager traces it, a user backend may call it), and the graph
sets grad mode and autocast state as the program did; the program's state after the call
must be what eager execution leaves, whatever the backend did. The CPU RNG is restored as
well (compiling must not consume random numbers the program would have drawn).

Both run with the program's TorchDispatchModes set aside (the compiled call may run inside
one): reading and comparing the RNG state are operators, which such a mode would see and
may answer with anything.
"""
import torch
from torch.utils._python_dispatch import _disable_current_modes, any_torch_dispatch_mode_on_stack

_DEVICES = ("cpu", "cuda")


def save():
    with _disable_current_modes():
        return _save()


def restore(saved):
    with _disable_current_modes():
        _restore(saved)


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


def dispatch_mode_active():
    """Whether a TorchDispatchMode of the program is on the stack (what makes torch._dynamo
    run a frame natively: not an infra mode such as FakeTensorMode, nor one whose class says
    ignore_compile_internals()). A mode is off the stack while its own __torch_dispatch__
    runs, so a compiled function called from there compiles."""
    return torch._C._len_torch_dispatch_stack() > 0 and any_torch_dispatch_mode_on_stack()
