// types.SimpleNamespace made in the trace (Kind::Namespace): an object that is nothing but
// its attributes. They live in a plain Dict value keyed by name, which is also what
// `ns.__dict__` / `vars(ns)` return, so a write through either is seen by the other. If the
// namespace escapes the frame it is rebuilt as SimpleNamespace with that dict
// (outputs.cpp). A SimpleNamespace read from the program is an Object like any other.
#include <string>

#include "support/lookup.h"
#include "trace/engine/outputs.h"
#include "trace/kinds/namespace.h"
#include "trace/protocol/operators.h"
#include "trace/tracer.h"

namespace cdynamo::trace {

Result<ValuePtr> makeNamespace(Tracer& t, PyObject* fn, const char*, Args& args, Kwargs& kwargs) {
  // 3.11's SimpleNamespace takes keywords only (a mapping positional came in 3.13).
  if (!args.empty()) return t.raiseNew(PyExc_TypeError, "no positional arguments expected");
  ValuePtr attrs = Value::emptyDict();
  for (auto& [key, value] : kwargs)
    if (Done d = storeSubscript(t, attrs, Value::constant(key.get()), value); !d) return d.stop();
  return Value::of(Namespace{std::move(attrs)});
}

Result<ValuePtr> namespaceGetAttr(Tracer& t, const ValuePtr& ns, PyObject* name) {
  const ValuePtr& attrs = ns->as<Namespace>().attrs;
  if (PyUnicode_CompareWithASCIIString(name, "__dict__") == 0) return attrs;
  PyObject* type = lookup(Obj::types_SimpleNamespace);
  if (!type) return t.failFromPython("types.SimpleNamespace");
  if (PyUnicode_CompareWithASCIIString(name, "__class__") == 0) return Value::callable(type);
  const Dict& d = attrs->as<Dict>();
  int k = d.findKey(name);
  if (k == -2) return t.failFromPython("a namespace attribute");
  if (k >= 0) return d.values[static_cast<size_t>(k)];
  // The class's own attributes (its methods) are not modelled: stop rather than guess.
  if (PyObject_HasAttr(type, name))
    return t.fail(std::string("attribute '") + PyUnicode_AsUTF8(name) + "' of types.SimpleNamespace is not supported yet");
  return t.raiseNew(PyExc_AttributeError,
                    std::string("'types.SimpleNamespace' object has no attribute '") + PyUnicode_AsUTF8(name) + "'");
}

bool namespaceHasAttr(const ValuePtr& ns, PyObject* name) {
  if (ns->as<Namespace>().attrs->as<Dict>().findKey(name) >= 0) return true;
  PyObject* type = lookup(Obj::types_SimpleNamespace);
  bool has = type && PyObject_HasAttr(type, name);
  PyErr_Clear();
  return has;
}

Done namespaceSetAttr(Tracer& t, const ValuePtr& ns, PyObject* name, const ValuePtr& value) {
  if (PyUnicode_CompareWithASCIIString(name, "__dict__") == 0 || PyUnicode_CompareWithASCIIString(name, "__class__") == 0)
    return t.fail("replacing a namespace's __dict__ or __class__ is not supported yet");
  return storeSubscript(t, ns->as<Namespace>().attrs, Value::constant(name), value);
}

// The plan of a types.SimpleNamespace made in the trace: its attributes (OutputPlanner::plan).
Done rebuildNamespace(OutputPlanner& p, const ValuePtr& v, runtime::OutputPlan* out) {
  namespace P = runtime::plan;
  PyObject* type = lookup(Obj::types_SimpleNamespace);
  if (!type) return p.tracer().failFromPython("types.SimpleNamespace");
  auto attrs = std::make_unique<runtime::OutputPlan>();
  if (Done d = p.plan(v->as<Namespace>().attrs, attrs.get()); !d) return d;
  out->step = P::NewObject{Ref::borrow(type), std::move(attrs)};
  return {};
}

}  // namespace cdynamo::trace
