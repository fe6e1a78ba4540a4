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
