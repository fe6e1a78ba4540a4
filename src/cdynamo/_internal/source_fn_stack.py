"""meta["source_fn_stack"] of a finished graph's nodes, as torch._dynamo records it.

Each call node gets the list of (name, target) pairs of the calls it sits inside: the
higher-order op nodes whose body graph holds it, outermost first, then itself. Tools read
it to tell which user-level call a node came from (quantization, export, tests that
compare the stacks torch.compile records).
"""
import torch.fx

_CALLS = ("call_function", "call_method", "call_module")


def _target(gm, node):
    if node.op == "call_module":
        try:
            return type(gm.get_submodule(node.target))
        except AttributeError:
            return node.target
    return node.target


def annotate(gm, prefix=()):
    """Sets meta["source_fn_stack"] on the call nodes of `gm` and of the body graphs its
    higher-order op nodes run (reached through the get_attr nodes they take)."""
    for node in gm.graph.nodes:
        if node.op not in _CALLS:
            continue
        here = list(prefix) + [(node.name, _target(gm, node))]
        node.meta.setdefault("source_fn_stack", here)
        for arg in node.args:
            if isinstance(arg, torch.fx.Node) and arg.op == "get_attr":
                body = getattr(gm, arg.target, None)
                if isinstance(body, torch.fx.GraphModule):
                    annotate(body, here[:-1] + [(node.name, node.target)])
    return gm
