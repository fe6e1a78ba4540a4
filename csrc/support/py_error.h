// Python exceptions held by C++ code: taken out of the thread's error state, kept while other
// Python code runs, then raised again or dropped. The raw reference counting of the C API's
// fetch/restore pair lives here, so a caller never pairs a PyErr_Fetch with three decrefs.
#pragma once
#include <Python.h>

#include "support/pyref.h"

namespace cdynamo {

// The error that was set when it was made (PyErr_Fetch; none when no error was set), owned:
// restore() sets it again, and it is dropped with the object otherwise.
class FetchedError {
 public:
  FetchedError() = default;  // no error
  static FetchedError fetch() {
    PyObject *type = nullptr, *value = nullptr, *tb = nullptr;
    PyErr_Fetch(&type, &value, &tb);
    return FetchedError(Ref::steal(type), Ref::steal(value), Ref::steal(tb));
  }
  // Whether an error was set.
  explicit operator bool() const { return static_cast<bool>(type_); }
  // The exception's type (borrowed; null when none was set).
  PyObject* type() const { return type_.get(); }
  // Sets the error again (nothing when none was set); the object holds nothing after.
  void restore() {
    if (type_) PyErr_Restore(type_.release(), value_.release(), tb_.release());
  }

 private:
  FetchedError(Ref type, Ref value, Ref tb) : type_(std::move(type)), value_(std::move(value)), tb_(std::move(tb)) {}
  Ref type_, value_, tb_;
};

// The __context__ of exception `exc` (borrowed: the exception holds it), or null.
inline PyObject* exceptionContext(PyObject* exc) {
  Ref ctx = Ref::steal(PyException_GetContext(exc));
  return ctx.get();  // still alive: `exc` keeps its own reference
}

}  // namespace cdynamo
