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


def __getattr__(name):
    # TorchRuntimeError derives from torch._dynamo's class of the same name, so code written
    # for torch.compile catches it; it is made on first use, so that importing cdynamo does
    # not import torch._dynamo.
    if name == "TorchRuntimeError":
        from torch._dynamo.exc import TorchRuntimeError as _Dynamo

        class TorchRuntimeError(CdynamoError, _Dynamo):
            """An operation of the program raised while it ran on fake tensors (its shapes,
            dtypes or devices do not fit) and ``fullgraph=True`` was asked for. Eager raises
            there too. As under torch._dynamo, the message starts "RuntimeError when making fake
            tensor call", then names the operation, the original error and the line."""

        TorchRuntimeError.__module__ = __name__
        TorchRuntimeError.__qualname__ = name
        globals()[name] = TorchRuntimeError
        return TorchRuntimeError
    if name == "ExportUnsupported":
        from torch._dynamo.exc import Unsupported as _DynamoUnsupported

        class ExportUnsupported(Unsupported, _DynamoUnsupported):
            """What torch.export's strict capture by cdynamo raises where the program cannot be
            captured whole: cdynamo's Unsupported (the reason and the line) that is also
            torch._dynamo's, which code written for torch.export catches."""

        ExportUnsupported.__module__ = __name__
        ExportUnsupported.__qualname__ = name
        globals()[name] = ExportUnsupported
        return ExportUnsupported
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
