// Ownership of Python references, in the type (STYLE.md habit 6).
//
//  * Ref      owns one strong reference; move-only; built only by Ref::steal / Ref::borrow.
//  * PyObject* (raw) is a borrowed reference everywhere else in cdynamo.
//
// Raw Py_INCREF / Py_DECREF belong here and in the few hot loops that document why.
#pragma once
#include <Python.h>
#include <utility>

namespace cdynamo {

class Ref {
 public:
  Ref() = default;
  // Takes over a new reference (may be null: the usual "error set" return of the C API).
  static Ref steal(PyObject* o) { return Ref(o); }
  // Adds a reference to a borrowed object (may be null).
  static Ref borrow(PyObject* o) {
    Py_XINCREF(o);
    return Ref(o);
  }
  Ref(const Ref&) = delete;
  Ref& operator=(const Ref&) = delete;
  Ref(Ref&& o) noexcept : p_(o.p_) { o.p_ = nullptr; }
  Ref& operator=(Ref&& o) noexcept {
    if (this != &o) {
      PyObject* old = p_;
      p_ = o.p_;
      o.p_ = nullptr;
      Py_XDECREF(old);
    }
    return *this;
  }
  ~Ref() { Py_XDECREF(p_); }

  PyObject* get() const { return p_; }
  PyObject* operator->() const { return p_; }
  explicit operator bool() const { return p_ != nullptr; }
  // Gives the reference away (to a C API that steals, or to a caller).
  PyObject* release() {
    PyObject* o = p_;
    p_ = nullptr;
    return o;
  }
  Ref copy() const { return borrow(p_); }
  void reset() { Ref tmp(std::move(*this)); }

 private:
  explicit Ref(PyObject* o) : p_(o) {}
  PyObject* p_ = nullptr;
};

// Note [Python references in statics]: a function-local static that holds Ref members
// must be heap-allocated and leaked (`static T& t = *new T();`). C++ runs static
// destructors after Py_Finalize, without the GIL, and a Py_DECREF there aborts the process.

// Interned Python string, created once and kept for the life of the process.
PyObject* intern(const char* s);

}  // namespace cdynamo
