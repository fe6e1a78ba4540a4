"""cdynamo: TorchDynamo's graph capture, rebuilt in C++.

    import cdynamo
    fn = cdynamo.compile(fn, backend="inductor")       # same keywords as torch.compile
    model = cdynamo.compile(model)                      # nn.Module -> OptimizedModule
    @cdynamo.disable                                    # never traced (torch._dynamo.disable)
    cdynamo.stats()                                     # frames captured / native (with reasons), hits, misses
    cdynamo.install()                                   # torch.compile & co. go through cdynamo (CDYNAMO=1)
    cdynamo.report("capture.html")                      # the user's source, line by line: graphs, breaks, guards
"""
import os as _os

from . import config, testing
from ._events import summary
from ._explain import ExplainOutput, explain
from ._export import export, export_graph
from ._install import get_stance, install, installed, installed_scope, set_stance, uninstall
from ._logging import set_logs
from ._report import report
from ._rules import allow_in_graph, assume_constant_result, disallow_in_graph
from .eval_frame import (DisabledModule, OptimizedModule, cache_entries, compile, disable, mark_dynamic, mark_static,
                         maybe_mark_dynamic, reset, stats)
from .exc import BackendCompilerFailed, CdynamoError, FailOnRecompileLimitHit, Unsupported

__all__ = [
    "compile", "export", "export_graph", "disable", "reset", "stats", "cache_entries", "explain", "ExplainOutput", "set_logs", "config", "testing",
    "OptimizedModule", "DisabledModule", "Unsupported", "BackendCompilerFailed", "CdynamoError",
    "FailOnRecompileLimitHit", "mark_dynamic", "mark_static", "maybe_mark_dynamic",
    "install", "uninstall", "installed", "installed_scope", "set_stance", "get_stance", "allow_in_graph",
    "disallow_in_graph", "assume_constant_result", "summary", "report",
]
__version__ = "0.1.0"


def _from_environment():
    trace_dir = _os.environ.get("CDYNAMO_TRACE") or _os.environ.get("TORCH_TRACE")
    if trace_dir:
        from . import _trace

        _trace.enable(trace_dir)
    if _os.environ.get("CDYNAMO", "") == "1":
        install()


_from_environment()
