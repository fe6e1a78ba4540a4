#include "support/torch_types.h"

#include "support/pyref.h"

namespace cdynamo {
namespace {

// Borrowed attribute of a module, kept alive for the process once found.
PyObject* lookupForever(const char* module, const char* name) {
  Ref m = Ref::steal(PyImport_ImportModule(module));
  if (!m) return nullptr;
  return PyObject_GetAttrString(m.get(), name);  // the reference is kept on purpose
}

struct Types {
  PyObject* tensor = nullptr;
  PyObject* parameter = nullptr;
  PyObject* module = nullptr;
  bool ok = false;
};

const Types& types() {
  static Types t;
  if (!t.ok) {
    t.tensor = lookupForever("torch", "Tensor");
    t.parameter = t.tensor ? lookupForever("torch.nn", "Parameter") : nullptr;
    t.module = t.parameter ? lookupForever("torch.nn", "Module") : nullptr;
    if (!t.module) {
      PyErr_Clear();
      return t;
    }
    t.ok = true;
  }
  return t;
}

}  // namespace

bool isTensor(PyObject* o) {
  const Types& t = types();
  return t.ok && PyObject_TypeCheck(o, reinterpret_cast<PyTypeObject*>(t.tensor));
}

bool isModule(PyObject* o) {
  const Types& t = types();
  return t.ok && PyObject_TypeCheck(o, reinterpret_cast<PyTypeObject*>(t.module));
}

bool isModuleClass(PyObject* cls) {
  const Types& t = types();
  return t.ok && PyType_Check(cls) &&
         PyType_IsSubtype(reinterpret_cast<PyTypeObject*>(cls), reinterpret_cast<PyTypeObject*>(t.module));
}

bool isPlainTensorOrParameter(PyObject* o) {
  const Types& t = types();
  PyObject* type = reinterpret_cast<PyObject*>(Py_TYPE(o));
  return t.ok && (type == t.tensor || type == t.parameter);
}

PyObject* operatorFunction(const char* name) {
  static PyObject* op = nullptr;
  if (!op) {
    op = PyImport_ImportModule("operator");  // kept for the process
    if (!op) return nullptr;
  }
  PyObject* fn = PyObject_GetAttrString(op, name);
  if (fn) Py_DECREF(fn);  // the operator module keeps it alive
  return fn;
}

}  // namespace cdynamo
