"""Module-level settings, read by cdynamo when it needs them (like torch._dynamo.config)."""

# Cache entries per code object before the frame runs natively (torch._dynamo's
# cache_size_limit). Applied by cdynamo.compile and reset().
cache_size_limit = 8
