"""cdynamo: TorchDynamo's graph capture, rebuilt in C++.

    import cdynamo
    fn = cdynamo.compile(fn, backend="inductor")       # same keywords as torch.compile
    model = cdynamo.compile(model)                      # nn.Module -> OptimizedModule
    @cdynamo.disable                                    # never traced (torch._dynamo.disable)
    cdynamo.stats()                                     # frames captured / native (with reasons), hits, misses
"""
from . import config, testing
from ._explain import ExplainOutput, explain
from ._logging import set_logs
from .eval_frame import DisabledModule, OptimizedModule, cache_entries, compile, disable, reset, stats
from .exc import BackendCompilerFailed, CdynamoError, Unsupported

__all__ = [
    "compile", "disable", "reset", "stats", "cache_entries", "explain", "ExplainOutput", "set_logs", "config", "testing",
    "OptimizedModule", "DisabledModule", "Unsupported", "BackendCompilerFailed", "CdynamoError",
]
__version__ = "0.1.0"
