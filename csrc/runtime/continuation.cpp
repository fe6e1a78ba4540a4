#include "runtime/continuation.h"

#include "support/slots.h"

#include <structmember.h>

namespace cdynamo::runtime {
namespace {

struct ContinuationObject {
  PyObject_HEAD
  PyObject* code;  // the resume code to run
  PyObject* args;  // tuple
};

void continuationDealloc(PyObject* self) {
  auto* c = reinterpret_cast<ContinuationObject*>(self);
  // A type's raw members own their references; dealloc gives them back.
  clearSlot(c->code);
  clearSlot(c->args);
  Py_TYPE(self)->tp_free(self);
}

PyTypeObject ContinuationType = [] {
  PyTypeObject t{PyVarObject_HEAD_INIT(nullptr, 0)};
  t.tp_name = "cdynamo._C.Continuation";
  t.tp_basicsize = sizeof(ContinuationObject);
  t.tp_dealloc = continuationDealloc;
  t.tp_flags = Py_TPFLAGS_DEFAULT;
  t.tp_doc = "A request to continue a frame in a resume function (internal).";
  return t;
}();

struct ResumeTableObject {
  PyObject_HEAD
  PyObject* codes;  // tuple of resume code objects
  vectorcallfunc vectorcall;
};

void tableDealloc(PyObject* self) {
  // A type's raw members own their references; dealloc gives them back.
  clearSlot(reinterpret_cast<ResumeTableObject*>(self)->codes);
  Py_TYPE(self)->tp_free(self);
}

// table(k, *args) -> Continuation(codes[k], args)
PyObject* tableCall(PyObject* self, PyObject* const* args, size_t nargsf, PyObject* kwnames) {
  auto* t = reinterpret_cast<ResumeTableObject*>(self);
  Py_ssize_t n = PyVectorcall_NARGS(nargsf);
  if (n < 1 || kwnames || !PyLong_Check(args[0])) {
    PyErr_SetString(PyExc_TypeError, "cdynamo resume table: bad call");
    return nullptr;
  }
  Py_ssize_t k = PyLong_AsSsize_t(args[0]);
  if (k < 0 || k >= PyTuple_GET_SIZE(t->codes)) {
    PyErr_SetString(PyExc_IndexError, "cdynamo resume table: no such resume point");
    return nullptr;
  }
  Ref tuple = Ref::steal(PyTuple_New(n - 1));
  if (!tuple) return nullptr;
  for (Py_ssize_t i = 1; i < n; ++i) PyTuple_SET_ITEM(tuple.get(), i - 1, Ref::borrow(args[i]).release());
  auto* c = PyObject_New(ContinuationObject, &ContinuationType);
  if (!c) return nullptr;
  c->code = Ref::borrow(PyTuple_GET_ITEM(t->codes, k)).release();
  c->args = tuple.release();
  return reinterpret_cast<PyObject*>(c);
}

PyTypeObject ResumeTableType = [] {
  PyTypeObject t{PyVarObject_HEAD_INIT(nullptr, 0)};
  t.tp_name = "cdynamo._C.ResumeTable";
  t.tp_basicsize = sizeof(ResumeTableObject);
  t.tp_dealloc = tableDealloc;
  t.tp_flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_HAVE_VECTORCALL;
  t.tp_vectorcall_offset = offsetof(ResumeTableObject, vectorcall);
  t.tp_call = PyVectorcall_Call;
  t.tp_doc = "The resume functions of one graph break (internal).";
  return t;
}();

bool ready() {
  static bool ok = PyType_Ready(&ContinuationType) == 0 && PyType_Ready(&ResumeTableType) == 0;
  return ok;
}

}  // namespace

Ref makeResumeTable(std::vector<Ref> codes) {
  if (!ready()) return Ref();
  Ref tuple = Ref::steal(PyTuple_New(static_cast<Py_ssize_t>(codes.size())));
  if (!tuple) return Ref();
  for (size_t i = 0; i < codes.size(); ++i) PyTuple_SET_ITEM(tuple.get(), static_cast<Py_ssize_t>(i), codes[i].release());
  auto* t = PyObject_New(ResumeTableObject, &ResumeTableType);
  if (!t) return Ref();
  t->codes = tuple.release();
  t->vectorcall = tableCall;
  return Ref::steal(reinterpret_cast<PyObject*>(t));
}

bool isContinuation(PyObject* o) { return Py_IS_TYPE(o, &ContinuationType); }

PyObject* resumeTableCodes(PyObject* table) {
  if (!ready() || !Py_IS_TYPE(table, &ResumeTableType)) {
    PyErr_SetString(PyExc_TypeError, "expected a cdynamo resume table");
    return nullptr;
  }
  return Ref::borrow(reinterpret_cast<ResumeTableObject*>(table)->codes).release();
}

PyObject* makeFunction(PyObject* code, PyObject* globals, PyObject* closure) {
  Ref fn = Ref::steal(PyFunction_New(code, globals));
  if (fn && closure && PyFunction_SetClosure(fn.get(), closure) < 0) return nullptr;
  return fn.release();
}

PyObject* runContinuations(PyObject* result, PyObject* globals, PyObject* closure) {
  Ref r = Ref::steal(result);
  while (r && isContinuation(r.get())) {
    auto* c = reinterpret_cast<ContinuationObject*>(r.get());
    Ref fn = Ref::steal(makeFunction(c->code, globals, closure));
    r = Ref::steal(fn ? PyObject_Call(fn.get(), c->args, nullptr) : nullptr);
  }
  return r.release();
}

}  // namespace cdynamo::runtime
