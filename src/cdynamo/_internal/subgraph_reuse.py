"""When two calls of a nested compile region may share one subgraph (invoke_subgraph).

torch.compiler.nested_compile_region asks for one compiled body reused by every call of the
region. The tracer traces each call (its guards are the frame's), then asks ``body_key`` of the
GraphModule it made: two bodies with equal keys compute the same function of their inputs, so
the later call's op names the earlier body. The key is the graph's structure with nodes numbered
instead of named: per placeholder the metadata of its example value (sizes, strides, dtype,
device, requires_grad), per call its target, arguments and keywords, per nested submodule that
submodule's own key. Constants in the graph are part of it, so a body that baked in another
number is another body.
"""
import torch
from torch.fx import GraphModule, Node
from torch.fx.node import map_aggregate


def _value_key(v):
    if isinstance(v, torch.Tensor):
        # Sizes as text: comparing symbolic sizes with == would ask the ShapeEnv (a guard).
        return ("T", tuple(map(str, v.shape)), tuple(map(str, v.stride())), v.dtype, v.device, v.requires_grad)
    if isinstance(v, (torch.SymInt, torch.SymFloat, torch.SymBool)):
        return ("S", type(v).__name__)
    return ("C", type(v).__name__, repr(v))


def body_key(gm):
    index = {}
    parts = []
    for i, n in enumerate(gm.graph.nodes):
        index[n] = i

        def arg(a):
            if isinstance(a, Node):
                return ("N", index[a])
            return _value_key(a) if not isinstance(a, (torch.dtype, torch.device, torch.memory_format, torch.layout)) else a

        if n.op == "placeholder":
            parts.append(("placeholder", _value_key(n.meta.get("example_value"))))
        elif n.op == "get_attr":
            sub = getattr(gm, n.target)
            parts.append(("get_attr", body_key(sub) if isinstance(sub, GraphModule) else ("object", id(sub))))
        else:
            target = n.target if n.op != "call_method" else str(n.target)
            args = tuple(map_aggregate(n.args, arg))
            kwargs = tuple(sorted((k, map_aggregate(v, arg)) for k, v in n.kwargs.items()))
            parts.append((n.op, target, args, kwargs))
    return tuple(parts)
