"""Backend resolution: the same names and protocol as torch.compile.

A backend is ``backend(gm: torch.fx.GraphModule, example_inputs: list[Tensor]) ->
callable``. Names resolve through torch's own registry, so every backend that works
with torch.compile works here.
"""


def resolve(backend):
    if callable(backend):
        return backend
    if isinstance(backend, str):
        from torch._dynamo.backends.registry import lookup_backend

        return lookup_backend(backend)
    raise TypeError(f"cdynamo: backend must be a name or a callable, not {type(backend).__name__}")
