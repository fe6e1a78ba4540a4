"""Errors cdynamo raises to its users."""


class CdynamoError(RuntimeError):
    """Base class of cdynamo's errors."""


class Unsupported(CdynamoError):
    """A frame could not be captured whole and ``fullgraph=True`` was asked for.

    The message names the reason, the user's source file and line, and the chain of
    inlined calls that led there.
    """


class BackendCompilerFailed(CdynamoError):
    """The backend raised while compiling a graph, or returned something not callable.

    The backend's own exception is chained as ``__cause__``.
    """


class FailOnRecompileLimitHit(CdynamoError):
    """A call would recompile a function past ``config.recompile_limit`` (or
    ``accumulated_recompile_limit``) while ``config.fail_on_recompile_limit_hit`` is set.
    The message names the function, the limit and the guard that failed."""
