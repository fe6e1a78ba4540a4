// Whether a type is a class made by a class statement (or type(name, bases, dict)), as
// opposed to a type written in C. Py_TPFLAGS_HEAPTYPE does not say it: C extensions make
// heap types too (PyType_FromSpec), and on 3.12 the standard library's own C types moved
// to them (collections.deque and defaultdict, itertools, functools.partial, ...). Every
// class that type.__new__ makes has its deallocator (subtype_dealloc, which CPython does
// not export): it is read once from a class made for the purpose.
#pragma once
#include <Python.h>

namespace cdynamo {

inline bool isPythonClass(PyTypeObject* type) {
  if (!PyType_HasFeature(type, Py_TPFLAGS_HEAPTYPE)) return false;
  static destructor python_dealloc = [] {
    PyObject* cls = PyObject_CallFunction(reinterpret_cast<PyObject*>(&PyType_Type), "s()N", "_cdynamo_probe", PyDict_New());
    destructor d = cls ? reinterpret_cast<PyTypeObject*>(cls)->tp_dealloc : nullptr;
    Py_XDECREF(cls);
    PyErr_Clear();
    return d;
  }();
  // Without the probe (it cannot fail short of running out of memory) every heap type counts,
  // as before there was a probe.
  return !python_dealloc || type->tp_dealloc == python_dealloc;
}

}  // namespace cdynamo
