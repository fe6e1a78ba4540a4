"""The Python helpers cdynamo's C++ core calls; none of them is public API.

Every module here exists for the C++ stages (the tracer, the graph builder, the frame hook)
to call through their lookup table (csrc/support/lookup.def); nothing of the public API
imports them. What stays beside the public modules in cdynamo/ is what the public API is
implemented with, even where C++ calls it too: config (cdynamo.config, read by C++), exc
(the exceptions users catch, raised by C++), _logging (set_logs and CDYNAMO_LOGS, whose
channels C++ asks about), _trace (TORCH_TRACE / ``python -m cdynamo --trace``) and eval_frame
(compile, disable, ...).

* symbolic_shapes: FakeTensors and SymInts of graph inputs, and the shape guards as
  integer programs (the graph builder and the guards)
* frame_rebuild: what the runtime rebuilds of a frame's state at a graph break (functions
  made in the trace, iterators, partials, grad-mode exits)
* numpy_targets: the graph targets of NumPy calls traced as torch._numpy
* tensor_subclass: tensor subclasses with __torch_function__ around a compiled graph
* lazy_modules: the initialisation of a lazy nn.Module met in a trace
* torch_state: torch's global state saved and restored around a translation, and what
  TorchFunctionModes allow (the frame hook)
* node_stack_trace: a graph node's meta["stack_trace"] (the graph builder)
* source_fn_stack: meta["source_fn_stack"] of a finished graph's nodes (the tracer)
* polyfills: Python versions of C callables, traced in their place (one module per
  original module, each registered with ``@polyfill(original)``)
* autograd_function: torch.autograd.Function.apply without autograd, and the check that
  lets it into the graph as one call
"""
