// NumPy in the trace, as torch._dynamo traces it: an ndarray of the program is a tensor in
// the graph (Kind::NdArray, its node), and what the program does to it (a NumPy function,
// an ndarray method, attribute or operator) is recorded as one graph call of a target of
// cdynamo._internal.numpy_targets, which runs torch._numpy's counterpart of it on the tensors viewed as
// arrays. What a NumPy callable stands for is decided by what it is (its module is numpy
// or a submodule, its name is torch._numpy's), not by a list.
#include <cstring>
#include <string>

#include "support/lookup.h"
#include "trace/engine/outputs.h"
#include "trace/engine/graph_calls.h"
#include "trace/engine/scalars.h"
#include "trace/kinds/ndarray.h"
#include "trace/protocol/binary_rules.h"
#include "trace/protocol/calls.h"
#include "trace/protocol/constants.h"
#include "trace/tracer.h"

namespace cdynamo::trace {

using graph::NodeOp;

namespace {

// Calls cdynamo._internal.numpy_targets.<helper>(arg): the graph target, or null (None: it has no
// counterpart; no error) — an error from Python stops the trace.
Result<Ref> numpyTarget(Tracer& t, Obj helper, PyObject* arg) {
  PyObject* fn = lookup(helper);
  if (!fn) return t.failFromPython("cdynamo._internal.numpy_targets");
  Ref r = Ref::steal(PyObject_CallOneArg(fn, arg));
  if (!r) return t.failFromPython("finding torch._numpy's counterpart");
  if (r.get() == Py_None) return Ref();
  return r;
}

// A NumPy dtype or scalar type (np.float64, np.dtype("float")) as the name torch._numpy
// takes for it ("float64"), as torch._dynamo passes them; NotHandled for anything else.
Result<ValuePtr> dtypeAsName(Tracer& t, const ValuePtr& v) {
  PyObject* o = v->real();
  if (!o) return notHandled();
  if (!PyType_Check(o) && !v->is(Kind::Constant) && !v->is(Kind::Object)) return notHandled();
  Result<Ref> name = numpyTarget(t, Obj::cdynamo_numpy_dtype_name, o);
  if (!name) return name.stop();
  if (!*name) return notHandled();
  return Value::constant(name->get());
}

// An argument of a NumPy call as the graph takes it: arrays as their tensors (in tuples
// and lists too), NumPy dtypes by name.
Result<ValuePtr> graphValue(Tracer& t, const ValuePtr& v) {
  if (const NdArray* a = v->get<NdArray>()) return Value::tensor(a->node);
  if (v->is(Kind::Tuple) || v->is(Kind::List)) {
    std::vector<ValuePtr> items;
    for (const ValuePtr& item : *v->elements()) {
      Result<ValuePtr> g = graphValue(t, item);
      if (!g) return g;
      items.push_back(g.take());
    }
    return Value::sequence(v->kind(), std::move(items));
  }
  Result<ValuePtr> dtype = dtypeAsName(t, v);
  if (dtype.notHandled()) return v;
  return dtype;
}

// What a torch._numpy call gave, as the program sees it: tensors are arrays again.
ValuePtr asArrays(Tracer& t, const ValuePtr& v) {
  if (const Tensor* tensor = v->get<Tensor>()) {
    if (isScalarValue(t, v)) return v;
    return Value::of(NdArray{tensor->node});
  }
  if (Tuple* tuple = v->get<Tuple>()) {
    for (ValuePtr& item : tuple->items) item = asArrays(t, item);
    return v;
  }
  if (List* list = v->get<List>()) {
    for (ValuePtr& item : list->items) item = asArrays(t, item);
    return v;
  }
  return v;
}

// Records target(*args, **kwargs) with the arguments as the graph takes them; the result
// as arrays.
Result<ValuePtr> recordNumpy(Tracer& t, PyObject* target, const Args& args, const Kwargs& kwargs) {
  std::vector<ValuePtr> gargs;
  for (const ValuePtr& a : args) {
    Result<ValuePtr> g = graphValue(t, a);
    if (!g) return g;
    gargs.push_back(g.take());
  }
  std::vector<std::pair<Ref, ValuePtr>> gkwargs;
  for (const auto& [k, v] : kwargs) {
    Result<ValuePtr> g = graphValue(t, v);
    if (!g) return g;
    gkwargs.emplace_back(k.copy(), g.take());
  }
  Result<ValuePtr> r = recordCall(t, NodeOp::CallFunction, target, gargs, gkwargs);
  if (!r) return r;
  return asArrays(t, *r);
}


// A NumPy call on constants (np.iinfo(np.int16), np.dtype("float")): computed now by
// torch._numpy when that gives a constant (cdynamo._internal.numpy_targets.fold); NotHandled when an
// argument is not a constant or the call must be recorded (it makes an array, or is random).
Result<ValuePtr> foldNumpy(Tracer& t, PyObject* f, Args& args, Kwargs& kwargs) {
  Ref pargs = toPython(t, Value::tuple(args));
  if (!pargs || !PyTuple_Check(pargs.get())) return notHandled();
  Ref pkwargs = Ref::steal(PyDict_New());
  if (!pkwargs) return t.failFromPython("a NumPy call's keyword arguments");
  for (const auto& [k, v] : kwargs) {
    Ref p = toPython(t, v);
    if (!p) return notHandled();
    if (PyDict_SetItem(pkwargs.get(), k.get(), p.get()) < 0) return t.failFromPython("a NumPy call's keyword arguments");
  }
  PyObject* fold = lookup(Obj::cdynamo_numpy_fold);
  if (!fold) return t.failFromPython("cdynamo._internal.numpy_targets.fold");
  Ref r = Ref::steal(PyObject_CallFunctionObjArgs(fold, f, pargs.get(), pkwargs.get(), nullptr));
  if (!r) return t.raisePython();  // what NumPy (torch._numpy) raises for these arguments
  if (r.get() == Py_None) return notHandled();
  return Value::constant(PyTuple_GET_ITEM(r.get(), 0));
}

}  // namespace

bool isNumpyCallable(PyObject* f) {
  if (PyModule_Check(f)) return false;
  Ref module = Ref::steal(PyObject_GetAttr(f, interned(Str::dunder_module)));
  if (!module) return PyErr_Clear(), false;
  if (!PyUnicode_Check(module.get())) return false;
  const char* m = PyUnicode_AsUTF8(module.get());
  if (!m) return PyErr_Clear(), false;
  return strcmp(m, "numpy") == 0 || strncmp(m, "numpy.", 6) == 0;
}

Result<ValuePtr> callNumpy(Tracer& t, PyObject* f, Args& args, Kwargs& kwargs) {
  if (Result<ValuePtr> folded = foldNumpy(t, f, args, kwargs); !folded.notHandled()) return folded;
  Result<Ref> target = numpyTarget(t, Obj::cdynamo_numpy_function, f);
  if (!target) return target.stop();
  if (!*target) {
    Ref name = Ref::steal(PyObject_GetAttr(f, interned(Str::dunder_name)));
    const char* n = name && PyUnicode_Check(name.get()) ? PyUnicode_AsUTF8(name.get()) : nullptr;
    if (!n) PyErr_Clear();
    return t.fail(std::string("numpy.") + (n ? n : "?") + " has no torch._numpy counterpart (not traced)");
  }
  return recordNumpy(t, target->get(), args, kwargs);
}

Result<ValuePtr> tensorAsNdarray(Tracer& t, const ValuePtr& x, Args& args, Kwargs& kwargs) {
  if (!args.empty() || !kwargs.empty()) return t.fail("Tensor.numpy() with arguments is not supported yet");
  if (isScalarValue(t, x)) return t.fail("numpy() of a number read from a tensor");
  // x.numpy() shares x's memory: a view of it (what torch._dynamo records, x.view_as(x)).
  static PyObject* const view_as = PyUnicode_InternFromString("view_as");
  Result<ValuePtr> view = recordCall(t, NodeOp::CallMethod, view_as, {x, x}, {});
  if (!view) return view;
  if (!(*view)->is(Kind::Tensor)) return t.fail("Tensor.numpy(): the view is not a tensor");
  return Value::of(NdArray{(*view)->as<Tensor>().node});
}

Result<ValuePtr> ndarrayAsTensor(Tracer& t, PyObject* f, Args& args, Kwargs& kwargs) {
  bool any = false;
  for (const ValuePtr& a : args) any = any || a->is(Kind::NdArray);
  for (const auto& kv : kwargs) any = any || kv.second->is(Kind::NdArray);
  if (!any) return notHandled();
  PyObject* from_numpy = lookup(Obj::torch_from_numpy);
  PyObject* as_tensor = lookup(Obj::torch_as_tensor);
  if (!from_numpy || !as_tensor) return t.failFromPython("torch.from_numpy");
  if ((f != from_numpy && f != as_tensor) || args.size() != 1 || !args[0]->is(Kind::NdArray) ||
      (f == from_numpy && !kwargs.empty()))
    return t.fail("a torch function called with a numpy array other than torch.from_numpy/as_tensor(array)");
  // torch.from_numpy(a) shares a's memory: torch.as_tensor of its tensor (as torch._dynamo records it).
  Kwargs kw;
  for (const auto& [k, v] : kwargs) {
    Result<ValuePtr> g = graphValue(t, v);
    if (!g) return g;
    kw.emplace_back(k.copy(), g.take());
  }
  return recordCall(t, NodeOp::CallFunction, as_tensor, {Value::tensor(args[0]->as<NdArray>().node)}, kw);
}

Result<ValuePtr> ndarrayAttr(Tracer& t, const ValuePtr& a, PyObject* name) {
  const char* n = PyUnicode_AsUTF8(name);
  Result<Ref> method = numpyTarget(t, Obj::cdynamo_numpy_method, name);
  if (!method) return method.stop();
  if (*method) return Value::namedMethod(a, name);  // called later (ndarrayMethod)
  Result<Ref> attr = numpyTarget(t, Obj::cdynamo_numpy_attribute, name);
  if (!attr) return attr.stop();
  if (!*attr) return t.fail(std::string("attribute '") + n + "' of a numpy array (not in torch._numpy)");
  return recordNumpy(t, attr->get(), {a}, {});
}

Result<ValuePtr> ndarrayMethod(Tracer& t, const ValuePtr& a, PyObject* name, Args& args, Kwargs& kwargs) {
  Result<Ref> method = numpyTarget(t, Obj::cdynamo_numpy_method, name);
  if (!method) return method.stop();
  if (!*method) return t.fail(std::string("numpy array method ") + PyUnicode_AsUTF8(name) + " (not in torch._numpy)");
  args.insert(args.begin(), a);
  return recordNumpy(t, method->get(), args, kwargs);
}

Result<ValuePtr> ndarrayOperator(Tracer& t, const char* op, Args args) {
  for (const ValuePtr& a : args)
    if (!a->is(Kind::NdArray) && !a->is(Kind::Constant) && !a->is(Kind::Slice) && !a->is(Kind::Tuple))
      return t.fail(std::string("operator ") + op + " between a numpy array and " + describe(a) +
                    " is not supported yet");
  Ref name = Ref::steal(PyUnicode_FromString(op));
  if (!name) return t.failFromPython("an operator's name");
  Result<Ref> target = numpyTarget(t, Obj::cdynamo_numpy_operator, name.get());
  if (!target) return target.stop();
  if (!*target) return t.fail(std::string("operator ") + op + " on a numpy array is not supported yet");
  return recordNumpy(t, target->get(), args, {});
}

Result<ValuePtr> ndarraySubscript(Tracer& t, const ValuePtr& a, const ValuePtr& index) {
  // Indices are constants, slices and tuples of them, or arrays (advanced indexing).
  return ndarrayOperator(t, "getitem", {a, index});
}

Result<ValuePtr> ndarrayBinaryOperator(Tracer& t, const BinaryOperands& o) {
  if (!o.a->is(Kind::NdArray) && !o.b->is(Kind::NdArray)) return notHandled();
  return ndarrayOperator(t, o.fn_name, {o.a, o.b});
}

// The plan of the graph's tensor made an ndarray again (sharing its memory) (OutputPlanner::plan).
Done rebuildNdArray(OutputPlanner& p, const ValuePtr& v, runtime::OutputPlan* out) {
  namespace P = runtime::plan;
  PyObject* to_ndarray = lookup(Obj::cdynamo_numpy_to_ndarray);
  if (!to_ndarray) return p.tracer().failFromPython("cdynamo._internal.numpy_targets.to_ndarray");
  std::vector<runtime::OutputPlan> args(1);
  if (Done d = p.plan(Value::tensor(v->as<NdArray>().node), &args[0]); !d) return d;
  out->step = P::Call{Ref::borrow(to_ndarray), std::move(args)};
  return {};
}

}  // namespace cdynamo::trace
