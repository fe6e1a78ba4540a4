// The checks of one object: its type, its identity, its value, and whether two inputs are
// one object (CHECK rows of guards/guard_kinds.def; see guards/kinds/check_kind.h).
#pragma once
#include <Python.h>

#include <string>

#include "guards/kinds/check_kind.h"

namespace cdynamo::guards::checks {

struct Type {
  static bool run(const Check& c, PyObject* v, PyObject** regs, const GuardProgram& p) {
    return reinterpret_cast<PyObject*>(Py_TYPE(v)) == kinds::deref(c);
  }
  static std::string describe(const Check& c, const GuardProgram& p) {
    return "type(" + c.what + ") is " + kinds::typeName(kinds::deref(c));
  }
  static std::string explain(const Check& c, PyObject* v, PyObject** regs, const GuardProgram& p) {
    return "type of " + c.what + ": expected " + kinds::typeName(kinds::deref(c)) + ", got " + Py_TYPE(v)->tp_name;
  }
};

struct Identity {
  static bool run(const Check& c, PyObject* v, PyObject** regs, const GuardProgram& p) {
    return v == kinds::deref(c);
  }
  static std::string describe(const Check& c, const GuardProgram& p) {
    PyObject* o = kinds::deref(c);
    return c.what + " is " + (o == Py_None ? std::string("None") : "<" + std::string(Py_TYPE(o)->tp_name) + " object>");
  }
  static std::string explain(const Check& c, PyObject* v, PyObject** regs, const GuardProgram& p) {
    return kinds::failedCheck(describe(c, p));
  }
};

struct Equals {
  static bool run(const Check& c, PyObject* v, PyObject** regs, const GuardProgram& p) {
    PyObject* expected = c.obj.get();
    if (v == expected) return true;
    if (Py_TYPE(v) != Py_TYPE(expected)) return false;
    int eq = PyObject_RichCompareBool(v, expected, Py_EQ);
    if (eq < 0) PyErr_Clear();
    return eq == 1;
  }
  static std::string describe(const Check& c, const GuardProgram& p) {
    return c.what + " == " + kinds::reprOf(c.obj.get());
  }
  static std::string explain(const Check& c, PyObject* v, PyObject** regs, const GuardProgram& p) {
    return c.what + " == " + kinds::reprOf(c.obj.get()) + ", got " + kinds::reprOf(v);
  }
};

struct Predicate {
  static bool run(const Check& c, PyObject* v, PyObject** regs, const GuardProgram& p) {
    PyObject* r = PyObject_CallOneArg(c.obj.get(), v);
    if (!r) return PyErr_Clear(), false;
    bool ok = r == Py_True;
    Py_DECREF(r);
    return ok;
  }
  static std::string describe(const Check& c, const GuardProgram& p) { return c.what; }
  static std::string explain(const Check& c, PyObject* v, PyObject** regs, const GuardProgram& p) {
    return kinds::failedCheck(describe(c, p));
  }
};

struct Aliasing {
  static bool run(const Check& c, PyObject* v, PyObject** regs, const GuardProgram& p) {
    return (v == regs[c.index]) == (c.obj.get() == Py_True);
  }
  static std::string describe(const Check& c, const GuardProgram& p) { return c.what; }
  static std::string explain(const Check& c, PyObject* v, PyObject** regs, const GuardProgram& p) {
    return kinds::failedCheck(describe(c, p));
  }
};

}  // namespace cdynamo::guards::checks
