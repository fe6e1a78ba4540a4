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
