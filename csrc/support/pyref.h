// Ownership of Python references, in the type (docs/design.md, "Ownership in the type").
//
//  * Ref       owns one strong reference; move-only; built only by Ref::steal / Ref::borrow.
//  * Borrowed  a borrowed reference kept beyond one call (a field, a table row): trivially
//              copyable, owns nothing; where it is declared says who keeps the object alive.
//  * PyObject* (raw) is a borrowed reference for the duration of a call: parameters,
//              locals, C API results documented as borrowed.
//
// Raw Py_INCREF / Py_DECREF belong here; anywhere else (type slots, the hit path's
// reference-stealing loops) a `why:` comment on the line or the one before says why.
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

// A borrowed reference held beyond one call. Built explicitly from a raw pointer, or
// implicitly from the Ref that owns the object.
class Borrowed {
 public:
  Borrowed() = default;
  explicit Borrowed(PyObject* o) : p_(o) {}
  Borrowed(const Ref& r) : p_(r.get()) {}  // NOLINT: lending an owned reference
  PyObject* get() const { return p_; }
  explicit operator bool() const { return p_ != nullptr; }
  // A new strong reference to the object.
  Ref ref() const { return Ref::borrow(p_); }
  bool operator==(const Borrowed& o) const { return p_ == o.p_; }
  bool operator!=(const Borrowed& o) const { return p_ != o.p_; }

 private:
  PyObject* p_ = nullptr;
};

// Note [Python references in statics]: a function-local static that holds Ref members
// must be heap-allocated and leaked (`static T& t = *new T();`). C++ runs static
// destructors after Py_Finalize, without the GIL, and a Py_DECREF there aborts the process.


}  // namespace cdynamo
