"""torch's global (thread-local) state saved before a translation and restored after it.

The hook calls ``save()`` before it translates a frame and ``restore(saved)`` after, on every
path (success, graph break, native, a backend that raised, KeyboardInterrupt): a backend may
run the graph it compiles (aot_eager traces it, a user backend may call it), and the graph
sets grad mode and autocast state as the program did; the program's state after the call
must be what eager execution leaves, whatever the backend did. The CPU RNG is restored as
well (compiling must not consume random numbers the program would have drawn).
``save()`` also refuses to translate under torch.jit.trace (RuntimeError, as torch._dynamo).
"""
import torch

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
    autocast = []
    for dev in _DEVICES:
        try:
            autocast.append((dev, torch.is_autocast_enabled(dev), torch.get_autocast_dtype(dev)))
        except (RuntimeError, TypeError):  # a device type this build does not know
            pass
    return (torch.is_grad_enabled(), autocast, torch.random.get_rng_state(),
            torch.are_deterministic_algorithms_enabled(), torch.is_autocast_cache_enabled())


def restore(saved):
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
