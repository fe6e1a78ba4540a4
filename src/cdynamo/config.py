"""Module-level settings, read by cdynamo when it needs them (like torch._dynamo.config)."""

# Cache entries per code object before the frame runs natively (torch._dynamo's
# cache_size_limit). Applied by cdynamo.compile and reset().
cache_size_limit = 8

# Whether Tensor.item() (and int(t), float(t), bool(t) of a one-element tensor) is kept
# in the graph as a symbolic scalar, as torch._dynamo.config.capture_scalar_outputs does.
# Off: such a read stops the trace, naming the operation. Read when a frame is traced,
# so a change applies to frames traced afterwards (cdynamo.reset() re-traces the others).
# Branching on such a value (`if t.item() > 0`) always stops the trace.
capture_scalar_outputs = False

# A backend that fails (raises, or returns something not callable) raises
# cdynamo.BackendCompilerFailed from the compiled call (the backend's error chained as
# __cause__). With suppress_errors, the failure is a RuntimeWarning instead and the frame runs
# natively from then on (cdynamo.stats()["native_frames"] gives the reason), as
# torch._dynamo.config.suppress_errors does. A KeyboardInterrupt or SystemExit raised by a
# backend always propagates as itself; Unsupported under fullgraph=True is never suppressed.
suppress_errors = False
