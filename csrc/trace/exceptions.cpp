// Exceptions raised and caught inside the trace. An exception of the traced program is a
// real exception object (made without running Python code) carried as a value; raising
// it sets it in flight and the frames' exception tables deliver it (runFrame). One that
// escapes the traced frame stops the trace: the frame then runs natively and raises it
// for real, so the user sees exactly CPython's behaviour.
#include <string>

#include "trace/tracer.h"

namespace cdynamo::trace {

std::nullptr_t Tracer::raiseValue(ValuePtr exc) {
  pending_exc_ = std::move(exc);
  return nullptr;
}

std::nullptr_t Tracer::raisePython() {
  PyObject *type, *value, *tb;
  PyErr_Fetch(&type, &value, &tb);
  if (!type) return fail("internal: raisePython without an error");
  PyErr_NormalizeException(&type, &value, &tb);
  Py_XDECREF(type);
  Py_XDECREF(tb);
  Ref exc = Ref::steal(value);
  if (exc) PyException_SetTraceback(exc.get(), Py_None);
  return raiseValue(Value::object(Kind::Object, exc.get()));
}

std::nullptr_t Tracer::raiseNew(PyObject* type, const std::string& message) {
  Ref exc = Ref::steal(PyObject_CallFunction(type, "s", message.c_str()));
  if (!exc) return failFromPython("making an exception");
  return raiseValue(Value::object(Kind::Object, exc.get()));
}

ValuePtr Tracer::makeException(PyObject* cls, std::vector<ValuePtr>& args) {
  // Only classes whose construction is C code: any __init__/__new__ written in Python
  // would run now, at trace time, outside the trace.
  PyObject* mro = reinterpret_cast<PyTypeObject*>(cls)->tp_mro;
  for (Py_ssize_t i = 0; mro && i < PyTuple_GET_SIZE(mro); ++i) {
    PyObject* dict = reinterpret_cast<PyTypeObject*>(PyTuple_GET_ITEM(mro, i))->tp_dict;
    for (const char* m : {"__init__", "__new__"}) {
      PyObject* f = dict ? PyDict_GetItemString(dict, m) : nullptr;
      if (f && PyFunction_Check(f))
        return fail(std::string("an exception class with a Python ") + m + " is not supported yet");
    }
  }
  Ref pargs = Ref::steal(PyTuple_New(static_cast<Py_ssize_t>(args.size())));
  for (size_t i = 0; i < args.size(); ++i) {
    Ref p = toPython(args[i]);
    if (!p) return fail("exception arguments must be constants");
    PyTuple_SET_ITEM(pargs.get(), i, p.release());
  }
  Ref exc = Ref::steal(PyObject_Call(cls, pargs.get(), nullptr));
  if (!exc) return failFromPython("making an exception");
  return Value::object(Kind::Object, exc.get());
}

}  // namespace cdynamo::trace
