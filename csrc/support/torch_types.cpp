#include "support/torch_types.h"

#include "support/lookup.h"

namespace cdynamo {
namespace {

// torch.Tensor, torch.nn.Parameter and torch.nn.Module, once torch can be imported
// (false, and no error set, before that: no object is a tensor then).
bool typesFound() {
  if (lookup(Obj::torch_Tensor) && lookup(Obj::torch_nn_Parameter) && lookup(Obj::torch_nn_Module)) return true;
  PyErr_Clear();
  return false;
}

PyTypeObject* type(Obj o) { return reinterpret_cast<PyTypeObject*>(lookup(o)); }

}  // namespace

bool isTensor(PyObject* o) { return typesFound() && PyObject_TypeCheck(o, type(Obj::torch_Tensor)); }

bool isOperatorObject(PyObject* o) {
  PyObject* packet = lookup(Obj::torch_ops_OpOverloadPacket);
  PyObject* overload = packet ? lookup(Obj::torch_ops_OpOverload) : nullptr;
  if (!overload) return PyErr_Clear(), false;
  return PyObject_TypeCheck(o, reinterpret_cast<PyTypeObject*>(packet)) ||
         PyObject_TypeCheck(o, reinterpret_cast<PyTypeObject*>(overload));
}

bool isModule(PyObject* o) { return typesFound() && PyObject_TypeCheck(o, type(Obj::torch_nn_Module)); }

bool isModuleClass(PyObject* cls) {
  return typesFound() && PyType_Check(cls) &&
         PyType_IsSubtype(reinterpret_cast<PyTypeObject*>(cls), type(Obj::torch_nn_Module));
}

bool isPlainTensorOrParameter(PyObject* o) {
  return typesFound() && (Py_TYPE(o) == type(Obj::torch_Tensor) || Py_TYPE(o) == type(Obj::torch_nn_Parameter));
}

}  // namespace cdynamo
