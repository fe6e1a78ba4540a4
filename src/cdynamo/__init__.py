"""cdynamo: TorchDynamo's graph capture, rebuilt in C++.

    import cdynamo
    fn = cdynamo.compile(fn, backend="inductor")       # same keywords as torch.compile
    model = cdynamo.compile(model)                      # nn.Module -> OptimizedModule
    cdynamo.stats()                                     # frames captured / native (with reasons), hits, misses
"""
from . import config, testing
from ._explain import ExplainOutput, explain
from ._logging import set_logs
from .eval_frame import OptimizedModule, cache_entries, compile, reset, stats
from .exc import BackendCompilerFailed, CdynamoError, Unsupported

__all__ = [
    "compile", "reset", "stats", "cache_entries", "explain", "ExplainOutput", "set_logs", "config", "testing",
    "OptimizedModule", "Unsupported", "BackendCompilerFailed", "CdynamoError",
]
__version__ = "0.1.0"
