// The checks of torch's global state: grad mode and the state queries the trace folded
// (CHECK rows of guards/guard_kinds.def, both `last`; see guards/kinds/check_kind.h).
#pragma once
#include <Python.h>

#include <string>

#include "guards/kinds/check_kind.h"
#include "guards/tensor_check.h"

namespace cdynamo::guards::checks {

struct GradMode {
  static bool run(const Check& c, PyObject* v, PyObject** regs, const GuardProgram& p) {
    return gradModeEnabled() == (c.index != 0);
  }
  static std::string describe(const Check& c, const GuardProgram& p) {
    return std::string("torch.is_grad_enabled() == ") + (c.index ? "True" : "False");
  }
  static std::string explain(const Check& c, PyObject* v, PyObject** regs, const GuardProgram& p) {
    return kinds::failedCheck(describe(c, p));
  }
};

struct StateQuery {
  static bool run(const Check& c, PyObject* v, PyObject** regs, const GuardProgram& p) {
    if (c.native != NativeQuery::None && nativeQueryHolds(c.native, c.native_expected)) return true;
    PyObject* q = c.obj.get();
    PyObject* args = PyTuple_GET_ITEM(q, 1);
    PyObject* kw = PyTuple_GET_ITEM(q, 2);
    // No arguments (the torch state queries of every entry): the vectorcall, no tuple unpacking.
    Ref r = Ref::steal(PyTuple_GET_SIZE(args) == 0 && kw == Py_None
                           ? PyObject_CallNoArgs(PyTuple_GET_ITEM(q, 0))
                           : PyObject_Call(PyTuple_GET_ITEM(q, 0), args, kw == Py_None ? nullptr : kw));
    if (!r) return PyErr_Clear(), false;
    return kinds::sameConstant(r.get(), PyTuple_GET_ITEM(q, 3));
  }
  static std::string describe(const Check& c, const GuardProgram& p) {
    return c.what + "(...) == " + kinds::reprOf(PyTuple_GET_ITEM(c.obj.get(), 3));
  }
  static std::string explain(const Check& c, PyObject* v, PyObject** regs, const GuardProgram& p) {
    return kinds::failedCheck(describe(c, p));
  }
};

}  // namespace cdynamo::guards::checks
