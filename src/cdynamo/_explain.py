"""cdynamo.explain(fn)(*args, **kwargs): what compiling `fn` captured, and why not more.

Runs `fn` once under cdynamo with a recording backend (graphs run as captured, eagerly)
on a fresh cache, and reports the graphs, the graph breaks and the frames that could not
be captured at all (each counts as one break, as TorchDynamo counts a skipped frame),
with their reasons and source locations, and the guards of each cache entry.
"""
import dataclasses

import torch

from . import _C


@dataclasses.dataclass
class BreakReason:
    reason: str
    filename: str
    lineno: int
    function: str
    user_stack: str

    def __str__(self):
        return f"{self.reason}\n    at {self.filename}:{self.lineno} in {self.function}"


@dataclasses.dataclass
class ExplainOutput:
    graphs: list
    graph_count: int
    graph_break_count: int
    break_reasons: list
    op_count: int
    ops_per_graph: list
    guards: list
    out: object = None
    # Dynamic shapes: per graph, {placeholder: its sizes, symbolic ones by symbol ("(s0, 4)")}
    # for the inputs with a symbolic size and the size symbols themselves; and the shape
    # guards of the cache entries (relations between input sizes, checked on every call).
    symbolic_sizes: list = dataclasses.field(default_factory=list)
    shape_guards: list = dataclasses.field(default_factory=list)

    def __str__(self):
        lines = [f"Graph Count: {self.graph_count}", f"Graph Break Count: {self.graph_break_count}",
                 f"Op Count: {self.op_count}"]
        if self.break_reasons:
            lines.append("Break Reasons:")
            for i, b in enumerate(self.break_reasons, 1):
                lines.append(f"  Break Reason {i}:")
                lines.extend("    " + line for line in str(b).splitlines())
        for i, ops in enumerate(self.ops_per_graph, 1):
            lines.append(f"Ops per Graph {i}: " + ", ".join(ops))
        for i, sizes in enumerate(self.symbolic_sizes, 1):
            if sizes:
                lines.append(f"Symbolic sizes of Graph {i}: " + ", ".join(f"{k} = {v}" for k, v in sizes.items()))
        if self.shape_guards:
            lines.append("Shape Guards:")
            lines.extend("  " + g for g in self.shape_guards)
        if self.guards:
            lines.append("Guards:")
            for text in self.guards:
                lines.extend("  " + g for g in text.strip().splitlines())
        return "\n".join(lines)


def _code_of(fn):
    from .eval_frame import OptimizedModule

    if isinstance(fn, OptimizedModule):
        fn = fn._orig_mod
    fn = getattr(fn, "__wrapped__", fn)
    if isinstance(fn, torch.nn.Module):
        return type(fn).forward.__code__, fn
    return getattr(fn, "__code__", None), fn


def _symbolic_sizes(gm):
    out = {}
    for n in gm.graph.nodes:
        if n.op != "placeholder":
            continue
        v = n.meta.get("example_value")
        if isinstance(v, torch.SymInt):
            out[n.name] = str(v)
        elif isinstance(v, torch.Tensor) and any(isinstance(s, torch.SymInt) for s in v.shape):
            out[n.name] = "(" + ", ".join(str(s) for s in v.shape) + ")"
    return out


SHAPE_PREFIX = "shape guard: "  # how GuardProgram::describe() marks a shape guard's line


def explain(fn, dynamic=None):
    """Returns a function that runs `fn` under cdynamo and returns an ExplainOutput.
    `dynamic` as for compile (True: symbolic sizes from the first compile)."""
    from .eval_frame import compile as _compile

    def run(*args, **kwargs):
        graphs = []

        def recording_backend(gm, example_inputs):
            graphs.append(gm)
            return gm.forward

        code, target = _code_of(fn)
        _C.reset()
        compiled = _compile(target, backend=recording_backend, dynamic=dynamic)
        out = compiled(*args, **kwargs)
        natives = _C.graph_breaks() + _C.native_frames()
        guards = [e["guards"] for e in _C.cache_entries(code)] if code is not None else []
        ops = [[str(n.target if n.op == "call_method" else getattr(n.target, "__name__", n.target))
                for n in g.graph.nodes if "call" in n.op] for g in graphs]
        reasons = [BreakReason(n["reason"], n["filename"], n["line"], n["function"], n["user_stack"]) for n in natives]
        shape_guards = [line.strip()[len(SHAPE_PREFIX):] for text in guards for line in text.splitlines()
                        if line.strip().startswith(SHAPE_PREFIX)]
        return ExplainOutput(graphs=graphs, graph_count=len(graphs), graph_break_count=len(reasons),
                             break_reasons=reasons, op_count=sum(len(o) for o in ops), ops_per_graph=ops,
                             guards=guards, out=out, symbolic_sizes=[_symbolic_sizes(g) for g in graphs],
                             shape_guards=shape_guards)

    return run
