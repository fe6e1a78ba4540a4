// torch.autograd.Function.apply: the forward inlined when no gradient is recorded, one graph
// call of apply when cdynamo's safety check finds nothing in forward/backward that reaches
// outside the call, else a graph break with the reason.
#include <algorithm>
#include <cstring>
#include <string>
#include <unordered_map>

#include "support/lookup.h"
#include "support/torch_types.h"
#include "trace/call_rules.h"
#include "trace/engine/graph_calls.h"
#include "trace/engine/scalars.h"
#include "trace/kinds/iterator.h"
#include "trace/protocol/callables.h"
#include "trace/protocol/calls.h"
#include "trace/tracer.h"

namespace cdynamo::trace {

using graph::NodeOp;

bool isAutogradFunctionApply(PyObject* function) {
  PyObject* apply = lookup(Obj::torch_autograd_Function_apply);
  if (!apply) PyErr_Clear();
  return apply && function == apply;
}

namespace {

// Why apply's forward and backward cannot be one node of the graph (empty: they can); see
// cdynamo._internal.polyfills.autograd_function_refusal. The arguments it checks are the fake
// tensors and the constants; any other argument is a refusal here.
std::string opaqueApplyRefusal(Tracer& t, PyObject* cls, const Args& args, const Kwargs& kwargs) {
  auto python = [&](const ValuePtr& v) -> Ref {
    if (const Tensor* tensor = v->get<Tensor>()) return Ref::borrow(t.graph().fake(tensor->node));
    if (PyObject* c = v->constant()) return Ref::borrow(c);
    return Ref();
  };
  Ref pargs = Ref::steal(PyTuple_New(static_cast<Py_ssize_t>(args.size())));
  Ref pkw = Ref::steal(PyDict_New());
  if (!pargs || !pkw) {
    PyErr_Clear();
    return "out of memory";
  }
  for (size_t i = 0; i < args.size(); ++i) {
    Ref p = python(args[i]);
    if (!p) return "an argument that is not a tensor or a constant";
    PyTuple_SET_ITEM(pargs.get(), static_cast<Py_ssize_t>(i), p.release());
  }
  for (const auto& [k, v] : kwargs) {
    Ref p = python(v);
    if (!p) return "a keyword argument that is not a tensor or a constant";
    if (PyDict_SetItem(pkw.get(), k.get(), p.get()) < 0) {
      PyErr_Clear();
      return "a keyword argument";
    }
  }
  PyObject* check = lookup(Obj::cdynamo_autograd_function_refusal);
  Ref r = check ? Ref::steal(PyObject_CallFunctionObjArgs(check, cls, pargs.get(), pkw.get(), nullptr)) : Ref();
  if (!r) {
    PyErr_Clear();
    return "its check raised";
  }
  if (r.get() == Py_None) return "";
  return PyUnicode_Check(r.get()) ? PyUnicode_AsUTF8(r.get()) : "its check gave no reason";
}

}  // namespace

Result<ValuePtr> callAutogradFunctionApply(Tracer& t, PyObject* cls, PyObject* target, Args args, Kwargs kwargs) {
  PyObject* base = lookup(Obj::torch_C_FunctionBase);
  if (!base) return t.failFromPython("torch._C._FunctionBase");
  if (!PyType_Check(cls) || !PyType_IsSubtype(reinterpret_cast<PyTypeObject*>(cls), reinterpret_cast<PyTypeObject*>(base)))
    return t.fail("autograd.Function.apply bound to something that is not an autograd.Function subclass");
  Ref name = Ref::steal(PyObject_GetAttrString(cls, "__qualname__"));
  std::string what = std::string("torch.autograd.Function.apply of ") + (name && PyUnicode_Check(name.get()) ? PyUnicode_AsUTF8(name.get()) : "a class");
  PyErr_Clear();
  // Autograd records a node when grad mode is on and a tensor argument requires grad (apply's
  // own test, torch/csrc/autograd/python_function.cpp). Its backward would then have to be
  // captured too (torch._dynamo traces it into a higher-order op): not modelled.
  Ref grad = Ref::steal(PyObject_CallNoArgs(lookup(Obj::torch_is_grad_enabled)));
  if (!grad) return t.failFromPython("torch.is_grad_enabled()");
  if (grad.get() == Py_True) {
    for (const ValuePtr& a : args) {
      const Tensor* tensor = a->get<Tensor>();
      if (!tensor) continue;
      Ref rg = Ref::steal(PyObject_GetAttrString(t.graph().fake(tensor->node), "requires_grad"));
      if (!rg) return t.failFromPython("requires_grad of an argument of " + what);
      if (rg.get() == Py_True) {
        std::string refusal = opaqueApplyRefusal(t, cls, args, kwargs);
        if (!refusal.empty())
          return t.fail(what + " recording a backward, not put into the graph: " + refusal);
        PyObject* wrap = lookup(Obj::cdynamo_autograd_function_in_graph);
        Ref node_target = wrap ? Ref::steal(PyObject_CallFunctionObjArgs(wrap, cls, target, nullptr)) : Ref();
        if (!node_target) return t.failFromPython("cdynamo._internal.autograd_function.autograd_function_in_graph");
        return recordCall(t, NodeOp::CallFunction, node_target.get(), args, kwargs);
      }
    }
  }
  // The setup_context form (forward without ctx): apply binds forward's defaults first so
  // that setup_context sees every input; only the plain positional call is modelled.
  Ref setup = Ref::steal(PyObject_GetAttrString(cls, "setup_context"));
  PyObject* plain_setup = lookup(Obj::torch_autograd_SingleLevel_setup_context);
  if (!setup || !plain_setup) return t.failFromPython("setup_context of " + what);
  bool separate_setup = setup.get() != plain_setup;
  if (separate_setup) {
    Ref forward = Ref::steal(PyObject_GetAttrString(cls, "forward"));
    PyObject* code = forward && PyFunction_Check(forward.get()) ? PyFunction_GET_CODE(forward.get()) : nullptr;
    if (!code || !kwargs.empty() ||
        reinterpret_cast<PyCodeObject*>(code)->co_argcount != static_cast<int>(args.size()) ||
        (reinterpret_cast<PyCodeObject*>(code)->co_flags & CO_VARARGS)) {
      PyErr_Clear();
      return t.fail(what + " with setup_context, called with keywords or defaults, is not supported yet");
    }
  }
  PyObject* poly = lookup(Obj::cdynamo_autograd_function_apply);
  if (!poly) return t.failFromPython("cdynamo._internal.autograd_function.autograd_function_apply");
  args.insert(args.begin(), Value::constant(separate_setup ? Py_True : Py_False));
  args.insert(args.begin(), Value::constant(cls));
  return t.inlineFunction(poly, -1, std::move(args), std::move(kwargs));
}

}  // namespace cdynamo::trace
