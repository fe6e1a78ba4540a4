"""The one table of polyfills the tracer reads: original callable -> its Python version.

Each polyfill module registers its functions and classes where it defines them, with
``@polyfill(original)``. The tracer looks a C callable up in ``POLYFILLS`` by identity
(cdynamo._internal.polyfills imports every polyfill module, so importing it fills the table),
and for an iterator class asks its polyfill class for ``rebuild``.
"""

POLYFILLS = {}


def polyfill(original):
    """Registers the decorated function or class as the Python version of `original`."""

    def register(fn):
        if original in POLYFILLS:
            raise RuntimeError(f"two polyfills for {original!r}: {POLYFILLS[original]!r} and {fn!r}")
        POLYFILLS[original] = fn
        return fn

    return register
