// A type's own attribute dict, borrowed. On 3.12 a static builtin type (object, tuple,
// BaseException, ...) keeps its dict per interpreter and its tp_dict is null; only
// PyType_GetDict finds it. The dict lives as long as the type (the interpreter holds
// builtin types' dicts), so the reference PyType_GetDict returns is dropped at once.
#pragma once
#include <Python.h>

namespace cdynamo {

inline PyObject* typeDict(PyTypeObject* type) {
#if PY_VERSION_HEX >= 0x030C0000
  PyObject* dict = PyType_GetDict(type);
  Py_XDECREF(dict);  // why: borrowed, the type keeps it (see above)
  return dict;
#else
  return type->tp_dict;
#endif
}

}  // namespace cdynamo
