// Calls: each kind of callable, the call rules, polyfills and autograd.Function.apply (calls.cpp, call_rules.cpp).
// Each operation reports through trace/engine/result.h: Unsupported (the trace stops, with
// its reason), Raised (an exception of the traced program is in flight) and, where said,
// NotHandled.
#pragma once
#include <Python.h>

#include <initializer_list>
#include <string>
#include <utility>
#include <vector>

#include "bytecode/opcodes.h"
#include "graph/graph_builder.h"
#include "trace/engine/result.h"
#include "trace/protocol/callables.h"
#include "trace/values/value.h"

namespace cdynamo::trace {

class Tracer;

Result<ValuePtr> call(Tracer& t, const ValuePtr& fn, Args args, Kwargs kwargs);
// A call of a real callable (Kind::Callable): the callable table, then the call rules
// (call_rules.cpp).
Result<ValuePtr> callCallable(Tracer& t, const ValuePtr& fn, Args args, Kwargs kwargs);
// call_rules.cpp: the rules for callables no table row names (torch functions, user
// classes, exception classes, Python functions, ...), tried in order; Unsupported when none applies.
Result<ValuePtr> callByRules(Tracer& t, const ValuePtr& fn, Args& args, Kwargs& kwargs);
// A functools.lru_cache / functools.cache wrapper (call_rules.cpp); never sets an error.
bool isCacheWrapper(PyObject* f);
// The rebuild function (borrowed) of the polyfill class that stands for iterator type `type`
// (cdynamo._internal.polyfills.itertools.count for itertools.count): it makes a real iterator of that type from
// an instance. Null when `type` has none (a Python error set only when looking it up failed).
PyObject* polyfillRebuild(PyObject* type);
// A callable with a Python version in cdynamo._internal.polyfills (itertools.chain, functools.reduce,
// torch._foreach_pow, the method descriptor torch.Tensor.addcmul_): that version inlined in
// its place; notHandled when it has none, or when the call comes from its own polyfill.
Result<ValuePtr> callPolyfill(Tracer& t, PyObject* f, Args& args, Kwargs& kwargs);
// `cls.apply(*args, **kwargs)` of a torch.autograd.Function subclass (args without cls);
// `target` is the apply being called (Function.apply bound to cls, or the C
// _FunctionBase.apply an override reaches through super()). With no gradient to record it
// is cdynamo._internal.polyfills.autograd_function_apply inlined (forward run under no_grad on a
// stand-in ctx, outputs wrapped as apply wraps them). A call that records a backward is one
// call_function node of `target` when cdynamo._internal.polyfills.autograd_function_refusal finds
// nothing in forward/backward that reaches outside the call; else Unsupported with its reason.
Result<ValuePtr> callAutogradFunctionApply(Tracer& t, PyObject* cls, PyObject* target, Args args, Kwargs kwargs);
// Whether `function` is torch.autograd.Function.apply's function (never sets an error).
bool isAutogradFunctionApply(PyObject* function);
// Borrowed value of `name` in the instance dict of `obj`, or null (objects.cpp).
PyObject* instanceDictItem(PyObject* obj, const char* name);
// Whether `code` is marked by cdynamo.disable, and the reason naming the function.
bool isDisabledCodeObject(PyObject* code);
std::string disabledReason(PyObject* qualname);

}  // namespace cdynamo::trace
