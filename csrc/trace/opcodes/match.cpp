// Handlers of structural pattern matching (`match` statements; handlers.h): GET_LEN,
// MATCH_MAPPING, MATCH_SEQUENCE, MATCH_KEYS. What a pattern asks of its subject is decided
// from the subject's type as CPython does (the type's Py_TPFLAGS_MAPPING / _SEQUENCE flags)
// and from the values the trace holds.
#include <string>

#include "support/lookup.h"
#include "trace/opcodes/handlers.h"
#include "trace/protocol/calls.h"
#include "trace/protocol/constants.h"
#include "trace/tracer.h"

namespace cdynamo::trace {

namespace {

// Whether the subject's type has `flag` (CPython's test for mapping/sequence patterns);
// Unsupported when its type is not known.
Result<bool> typeHasFlag(Tracer& t, const ValuePtr& subject, unsigned long flag, const char* what) {
  PyObject* type = typeOf(t, subject);
  if (!type || !PyType_Check(type)) return t.fail(std::string("a ") + what + " pattern on " + describe(subject) + " of unknown type");
  return (PyType_GetFlags(reinterpret_cast<PyTypeObject*>(type)) & flag) != 0;
}

}  // namespace

Result<Next> opGetLen(Tracer& t, SymbolicFrame&, const bytecode::Instruction&, Values& io) {
  // Stack: subject -> subject, len(subject).
  PyObject* len = PyDict_GetItemString(PyEval_GetBuiltins(), "len");
  if (!len) return t.fail("builtins.len");
  Result<ValuePtr> n = call(t, Value::callable(len), {io[0]}, {});
  if (!n) return n.stop();
  io.push_back(n.take());
  return Next::Fall;
}

Result<Next> opMatchMapping(Tracer& t, SymbolicFrame&, const bytecode::Instruction&, Values& io) {
  Result<bool> is = typeHasFlag(t, io[0], Py_TPFLAGS_MAPPING, "mapping");
  if (!is) return is.stop();
  io.push_back(Value::constant(*is ? Py_True : Py_False));
  return Next::Fall;
}

Result<Next> opMatchSequence(Tracer& t, SymbolicFrame&, const bytecode::Instruction&, Values& io) {
  Result<bool> is = typeHasFlag(t, io[0], Py_TPFLAGS_SEQUENCE, "sequence");
  if (!is) return is.stop();
  io.push_back(Value::constant(*is ? Py_True : Py_False));
  return Next::Fall;
}

Result<Next> opMatchKeys(Tracer& t, SymbolicFrame&, const bytecode::Instruction&, Values& io) {
  // Stack: subject, keys -> subject, keys, values (a tuple) or None when a key is missing.
  const ValuePtr& subject = io[0];
  PyObject* keys = io[1]->constant();
  const Dict* d = subject->get<Dict>();
  if (!d || !keys || !PyTuple_Check(keys))
    return t.fail(std::string("a mapping pattern on ") + describe(subject) + " is not supported yet");
  if (d->hasFactory()) return t.fail("a mapping pattern on a defaultdict is not supported yet");
  std::vector<ValuePtr> values;
  for (Py_ssize_t i = 0; i < PyTuple_GET_SIZE(keys); ++i) {
    int k = d->findKey(PyTuple_GET_ITEM(keys, i));
    if (k == -2) return t.failFromPython("a mapping pattern's key");
    if (k < 0) {
      io.push_back(Value::constant(Py_None));
      return Next::Fall;
    }
    values.push_back(d->values[static_cast<size_t>(k)]);
  }
  io.push_back(Value::tuple(std::move(values)));
  return Next::Fall;
}

}  // namespace cdynamo::trace
