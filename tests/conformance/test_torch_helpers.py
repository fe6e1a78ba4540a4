"""torch's Python helpers that take or build structures (docs/conformance.md:
torch-python-helpers): torch.utils._pytree and torch.fx.node's map_aggregate/map_arg are
traced like user code (their functions inlined, their classes such as TreeSpec made in the
trace, torch._C's C versions through cdynamo._internal.polyfills), never recorded as one graph op;
type expressions evaluated at run time (annotations of a function made in the trace,
`Callable[[T], Any] | None`) are computed for real.

Each case is compared with eager on a first call and a cache hit, with torch._dynamo's
graph count (same_as_eager).
"""
import collections
import typing
from collections.abc import Callable

import torch
import torch.fx
import torch.utils._pytree as pytree
from torch.fx.immutable_collections import immutable_dict, immutable_list

from .harness import same_as_eager

T = typing.TypeVar("T")


def two():
    return lambda: (torch.randn(3), torch.randn(2, 3))


# ---------------------------------------------------------------- type expressions

def test_annotations_of_a_function_made_in_the_trace_are_evaluated():
    def fn(a, b):
        def inner(f: Callable[[T], typing.Any] | None, n: list[int], k: type[T]) -> typing.Optional[T]:
            return f(a) if f is not None else None

        return inner(lambda v: v * 2, [1], int) + b
    same_as_eager(fn, two())


def test_type_expressions_as_values():
    def fn(a, b):
        kinds = (typing.Union[int, T], dict[str, int], Callable[[int], T], typing.Callable[..., int])
        return a + len(kinds), kinds
    same_as_eager(fn, two())


# ---------------------------------------------------------------- pytree

def test_tree_flatten_and_unflatten_are_traced_not_recorded():
    def fn(a, b):
        leaves, spec = pytree.tree_flatten({"x": (a, [b]), "n": 2})
        doubled = [v * 2 if isinstance(v, torch.Tensor) else v for v in leaves]
        return pytree.tree_unflatten(doubled, spec), spec.num_leaves
    same_as_eager(fn, two())


def test_tree_map_only_with_a_lambda_over_tensors():
    def fn(a, b, index):
        return pytree.tree_map_only(torch.Tensor, lambda t: t[index], (a, b, "label"))
    same_as_eager(fn, lambda: (torch.randn(4, 2), torch.randn(4, 5), torch.tensor([2])))


# ---------------------------------------------------------------- torch.fx map_aggregate / map_arg

Pair = collections.namedtuple("Pair", "left right")


def test_fx_map_aggregate_keeps_structure_and_immutable_types():
    def fn(a, b):
        out = torch.fx.node.map_aggregate([a, (b, Pair(a, 3)), {"k": b}, slice(1, None)],
                                          lambda v: v * 2 if isinstance(v, torch.Tensor) else v)
        return out, type(out) is immutable_list, type(out[2]) is immutable_dict, type(out[1][1]) is Pair
    same_as_eager(fn, two())


def test_fx_immutable_list_refuses_mutation_in_the_trace():
    def fn(a, b):
        frozen = immutable_list([a, b])
        try:
            frozen.append(a)
        except TypeError:
            pass
        return torch.fx.node.map_aggregate(frozen, lambda v: v + 1)
    same_as_eager(fn, two())


# ---------------------------------------------------------------- readers of torch's state, C properties

def test_autograd_engine_query_is_folded_and_guarded():
    # torch.autograd._is_checkpoint_valid() reads the engine's state: answered at trace
    # time, guarded to answer the same on each call.
    def fn(a, b):
        if torch.autograd._is_checkpoint_valid():
            return a + 1
        return a - 1
    same_as_eager(fn, two())


def test_c_property_of_a_pybind_object_is_read_and_guarded():
    # GuardDebugInfo.result is a pybind11 readonly property (a C getter): read for real,
    # guarded by value, so another object with another result recompiles.
    from torch._C._dynamo.guards import GuardDebugInfo

    def fn(x, info):
        if info.result:
            return torch.cos(x)
        return torch.sin(x)

    import cdynamo
    import cdynamo.testing
    cdynamo.reset()
    cnt = cdynamo.testing.CompileCounter()
    cfn = cdynamo.compile(fn, backend=cnt, fullgraph=True)
    x = torch.randn(4)
    for flag, graphs in ((True, 1), (True, 1), (False, 2), (True, 2)):
        info = GuardDebugInfo(flag, ["a==1"], 0)
        torch.testing.assert_close(cfn(x, info), fn(x, info))
        assert cnt.frame_count == graphs
