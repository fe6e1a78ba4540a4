"""The frame cdynamo traces for a compiled callable without Python code of its own.

``cdynamo.compile(c)`` of a callable whose call goes straight to C (a functools.lru_cache
wrapper, a functools.partial, a builtin, a torch operator) compiles ``wrap(c)`` instead, a
Python function that calls it: calling ``c`` itself would leave nothing to trace at the top
(the lru_cache wrapper's Python callee would be traced as the frame, its cache unseen; a
torch operator would run eagerly). Traced through the wrapper, the call is what the tracer
does with ``c`` anywhere else (the cache skipped with its warning, the operator recorded),
as torch._dynamo does for such callables. This file is traced (eval_frame._file_rules).
"""


def wrap(fn):
    def call_compiled_callable(*args, **kwargs):
        return fn(*args, **kwargs)

    # A code object of its own for each callable: its cache entries and recompile limit are
    # that callable's, not shared with every other wrapped one.
    call_compiled_callable.__code__ = call_compiled_callable.__code__.replace(
        co_name=call_compiled_callable.__code__.co_name)
    return call_compiled_callable



def module_caller():
    """The frame a compiled module with forward hooks is traced as (eval_frame.OptimizedModule):
    its call, the hooks and the forward inlined; a code object of its own per compiled module."""

    def call_module(module, *args, **kwargs):
        return module(*args, **kwargs)

    call_module.__code__ = call_module.__code__.replace(co_name=call_module.__code__.co_name)
    return call_module
