"""torch's own C helpers of torch.fx that take the program's callables, in Python."""
import torch
import torch._C
import torch.fx.immutable_collections as _fx_immutable
import torch.fx.node as _fx_node

from .registry import polyfill


@polyfill(torch._C._fx_map_aggregate)
def fx_map_aggregate(a, fn):
    # torch._C._fx_map_aggregate (torch.fx.node.map_aggregate): `fn` called on each leaf of
    # nested tuples, lists, dicts and slices, depth first in order; lists come back as
    # fx's immutable_list, dicts as immutable_dict, namedtuples as their own class.
    if isinstance(a, tuple):
        parts = [fx_map_aggregate(item, fn) for item in a]
        return type(a)(*parts) if hasattr(a, "_fields") else tuple(parts)
    if isinstance(a, list):
        return _fx_immutable.immutable_list([fx_map_aggregate(item, fn) for item in a])
    if isinstance(a, dict):
        return _fx_immutable.immutable_dict([(k, fx_map_aggregate(v, fn)) for k, v in a.items()])
    if isinstance(a, slice):
        return slice(fx_map_aggregate(a.start, fn), fx_map_aggregate(a.stop, fn), fx_map_aggregate(a.step, fn))
    return fn(a)


@polyfill(torch._C._fx_map_arg)
def fx_map_arg(a, fn):
    # torch._C._fx_map_arg (torch.fx.node.map_arg): the same walk, `fn` called on fx Nodes only.
    return fx_map_aggregate(a, lambda leaf: fn(leaf) if isinstance(leaf, _fx_node.Node) else leaf)
