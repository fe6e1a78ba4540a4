// Raw PyObject* members of the structs CPython allocates for our types (tp_alloc /
// PyObject_New run no C++ constructor, so such a struct holds raw pointers, not Refs):
// each owns one strong reference, given back in the type's tp_clear or tp_dealloc.
#pragma once
#include <Python.h>

namespace cdynamo {

// Empties an owned slot, then gives its reference back (as Py_CLEAR: code the release
// runs, a destructor or a GC callback, already sees the slot empty). The slot may be null.
inline void clearSlot(PyObject*& slot) { Py_CLEAR(slot); }

}  // namespace cdynamo
