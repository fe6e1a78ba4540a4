// The helpers the call rules' files share (call_rules.cpp, torch_calls.cpp, special_callables.cpp,
// polyfills.cpp, autograd_function.cpp): what kind of torch callable a function is, and
// questions about a call's arguments. Not for other stages of the trace.
#pragma once
#include <Python.h>

#include "trace/engine/result.h"
#include "trace/protocol/callables.h"
#include "trace/values/value.h"

namespace cdynamo::trace {

class Tracer;

// What a torch callable is (the torch callables' comment in call_rules.cpp says what each means).
enum class TorchKind : unsigned char { PythonHelper, DispatchQuery, StateReader, Operator, Binding };

bool anyTensor(const std::vector<ValuePtr>& args, const std::vector<std::pair<Ref, ValuePtr>>& kwargs);

// Whether `f` is the object `o` of the lookup table (false, no error, when it cannot be found).
bool isType(PyObject* f, Obj o);

// Whether every tensor among the items of torch.tensor()'s data (lists and tuples in it)
// has one element, known from its fake: eager reads each such tensor as a number, and
// raises for a larger one where torch._refs.tensor would stack it.
bool oneElementTensorItems(Tracer& t, const ValuePtr& v);

TorchKind torchKindOf(PyObject* fn);

// "torch._C._is_tracing": __module__ and __name__ (a pybind11 function's __qualname__ is
// the name of its function record, not its own).
std::string torchName(PyObject* fn);

// "torch", "torch.nn.functional", "torch._C._nn", ...: functions the graph records.
bool isTorchFunction(PyObject* fn);

// A C function of the _operator module (operator.add, operator.getitem, ...).
bool isOperatorModuleFunction(PyObject* f);

// torch.compiler.is_compiling(), torch.compiler.is_dynamo_compiling() and their aliases:
// True inside a trace (code that asks takes its compiled branch, as under torch._dynamo).
bool isCompilingQuery(PyObject* fn);

// A torch callable: recorded in the graph when it has tensor arguments; without them,
// decided by what it is (torchKindOf).
Result<ValuePtr> callTorchFunction(Tracer& t, const ValuePtr& fn, Args& args, Kwargs& kwargs);

// A Python function or class of torch.utils, torch.fx or torch.testing (pytree's tree_flatten
// and TreeSpec, fx's map_arg, the comparison pairs behind TestCase.assertEqual): pure Python
// over Python structures, traced like user code, as TorchDynamo inlines these modules.
bool isStructureHelper(PyObject* f);
// A Python function or class of the transforms' implementation (torch._functorch, and the
// forward-AD API it drives, torch.autograd.forward_ad): traced like user code, as
// torch._dynamo inlines them, so the bindings they call are modelled one by one (the levels
// they push, the wrappers they make) and the graph holds those, not a function that reads
// the transform's state when the graph runs. Not the predispatch wrappers nor the two
// functions torch._dynamo records as graph calls (_set_tensor_requires_grad, _autograd_grad).
bool isTransformInternals(PyObject* f);

// A function of the math module on a symbolic number (a size, a symbolic int argument, a
// value read from a tensor): a node, as torch._dynamo records it, so the number stays
// symbolic instead of being made the int at hand: torch._sym_<name> where torch has one
// (sqrt, cos, ..., log2: a SymFloat), math.floor/ceil/trunc themselves (a SymInt through the
// number's __floor__ & co.). Run on plain numbers when the graph runs, each is the math
// function (its errors included). NotHandled for anything else (the call is folded with
// the number specialized, as before).
Result<ValuePtr> callMathOnSymbolic(Tracer& t, PyObject* f, Args& args, Kwargs& kwargs);

// A functools.lru_cache/cache wrapper called: the function it wraps is inlined, skipping
// the cache (as TorchDynamo does, with the same warning): the traced call computes what a
// cache miss would. The wrapped function is read through the wrapper (guarded).
Result<ValuePtr> callCacheWrapper(Tracer& t, const ValuePtr& fn, Args& args, Kwargs& kwargs);

// A reader of the autograd engine's state called on the engine
// (torch.autograd._is_checkpoint_valid: Variable._execution_engine.is_checkpoint_valid()):
// run now, folded, and guarded to answer the same on each call (a StateQuery check).
Result<ValuePtr> foldEngineQuery(Tracer& t, PyObject* f, Args& args, Kwargs& kwargs);

}  // namespace cdynamo::trace
