// What the downstream stages (guards, runtime, trace) may see of a frame: a plain view
// filled by csrc/frame/ from CPython's version-specific frame layout. Everything is
// borrowed and valid only while the frame is being evaluated.
#pragma once
#include <Python.h>

namespace cdynamo {

struct FrameView {
  PyCodeObject* code = nullptr;
  PyObject* function = nullptr;   // the PyFunctionObject being called
  PyObject* const* fast = nullptr;  // localsplus: arguments, locals, cells (raw values at entry)
  int nfast = 0;
  PyObject* globals = nullptr;    // dict
  PyObject* builtins = nullptr;   // dict
  PyObject* closure = nullptr;    // tuple of cells, or null
};

}  // namespace cdynamo
