// Tensor subclasses with __torch_function__ (Kind::SubclassTensor) (tensor_subclass.cpp).
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

// Whether an argument (or an item of a tuple or list argument) is a SubclassTensor.
bool anySubclassTensor(const Args& args, const Kwargs& kwargs);
// A SubclassTensor whose class takes part in __torch_function__ dispatch.
bool takesPartInDispatch(const ValuePtr& v);
// Whether instances of tensor subclass `cls` are modelled (no __torch_dispatch__ of its own,
// not an nn.Parameter subclass).
bool subclassModelled(PyObject* cls);
// Whether `cls` is a traceable wrapper subclass (__tensor_flatten__ and a __torch_dispatch__
// of its own): its instances are graph inputs and values as they are (Kind::Tensor whose
// fake is an instance of it).
bool wrapperSubclass(PyObject* cls);
// ... and whether the trace models it: its __torch_function__ is torch.Tensor's (or torch's
// disabled one), so each torch op on it is one graph op that its __torch_dispatch__ runs.
bool wrapperSubclassModelled(PyObject* cls);
// torch's override dispatch of `func` (a torch function, a Tensor method descriptor, a
// tensor property's getter) over the classes of the SubclassTensors among `relevant`: each
// class's __torch_function__ inlined (torch.Tensor's modelled) until one does not return
// NotImplemented; with none, func run on the plain tensors. kwargs_as_dict: hand kwargs
// over as a dict even when empty (handle_torch_function does; C dispatch hands None).
Result<ValuePtr> torchFunctionDispatch(Tracer& t, PyObject* func, const std::vector<ValuePtr>& relevant, Args args,
                                       Kwargs kwargs, bool kwargs_as_dict);
// torch.Tensor.__torch_function__(cls, func, types, args, kwargs) (args/kwargs as passed to it).
Result<ValuePtr> defaultTorchFunction(Tracer& t, PyObject* cls, Args& args, Kwargs& kwargs);
// A call of the function under torch.Tensor.__torch_function__'s classmethod (what
// super().__torch_function__ reaches), the class first: modelled; NotHandled for any other.
Result<ValuePtr> callDefaultTorchFunction(Tracer& t, PyObject* func, Args& args, Kwargs& kwargs);
// `func` called with subclass dispatch off: on the plain tensors of the SubclassTensors
// among the arguments; a result that is one of them (x.add_(1)) is that argument again.
Result<ValuePtr> runWithoutSubclassDispatch(Tracer& t, PyObject* func, Args args, Kwargs kwargs);
// torch's _convert(ret, cls): tensors made instances of cls (tuples and lists item by item).
Result<ValuePtr> convertToSubclass(Tracer& t, const ValuePtr& v, PyObject* cls);
// x.as_subclass(cls) of a plain tensor (or, with dispatch off, of a subclass instance).
Result<ValuePtr> tensorAsSubclass(Tracer& t, const ValuePtr& self, Args args, Kwargs kwargs);
// A call with SubclassTensor arguments of one of torch's callables (dispatched, or traced
// when it is Python); NotHandled for every other callable.
Result<ValuePtr> callWithSubclassArgs(Tracer& t, const ValuePtr& fn, Args& args, Kwargs& kwargs);
// An operator (the operator module's name: "add", "iadd", "lt", "neg", "getitem", "setitem")
// with a SubclassTensor operand: torch.Tensor's special method, dispatched; NotHandled
// when no operand is one.
Result<ValuePtr> subclassOperator(Tracer& t, const char* op, Args operands);
Result<ValuePtr> subclassTensorMethod(Tracer& t, const ValuePtr& self, PyObject* name, Args& args, Kwargs& kwargs);
Result<ValuePtr> subclassTensorAttr(Tracer& t, const ValuePtr& obj, PyObject* name);
// `a is b` where one of them is a SubclassTensor.
Result<bool> subclassIdentical(Tracer& t, const ValuePtr& a, const ValuePtr& b);
// A torch callable by its module (torch, torch.nn.functional, torch._tensor; not torch._dynamo).
bool isTorchCallable(PyObject* fn);

}  // namespace cdynamo::trace
