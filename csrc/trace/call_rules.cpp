#include "trace/call_rules.h"

#include <string>

#include "trace/tracer.h"

namespace cdynamo::trace {
namespace {

PyObject* rules_dict = nullptr;  // owned

std::string qualnameOf(PyObject* fn) {
  Ref name = Ref::steal(PyObject_GetAttrString(fn, "__qualname__"));
  if (!name || !PyUnicode_Check(name.get())) {
    PyErr_Clear();
    return Py_TYPE(fn)->tp_name;
  }
  const char* s = PyUnicode_AsUTF8(name.get());
  if (!s) return PyErr_Clear(), "?";
  return s;
}

}  // namespace

void setCallRules(PyObject* rules) {
  PyObject* keep = rules && PyDict_Check(rules) ? rules : nullptr;
  Py_XINCREF(keep);
  Py_XSETREF(rules_dict, keep);
}

CallRule callRuleOf(PyObject* fn) {
  if (rules_dict && PyDict_GET_SIZE(rules_dict) > 0) {
    PyObject* rule = PyDict_GetItemWithError(rules_dict, fn);  // borrowed
    if (rule && PyLong_Check(rule)) {
      long n = PyLong_AsLong(rule);
      if (n >= 1 && n <= 3) return static_cast<CallRule>(n);
    }
    if (!rule) PyErr_Clear();  // unhashable callables have no rule
  }
  if (PyFunction_Check(fn)) {
    PyObject* dict = reinterpret_cast<PyFunctionObject*>(fn)->func_dict;
    PyObject* mark = dict ? PyDict_GetItemString(dict, "_dynamo_marked_constant") : nullptr;
    if (mark == Py_True) return CallRule::ConstantResult;
  }
  return CallRule::None;
}

ValuePtr applyCallRule(Tracer& t, CallRule rule, PyObject* fn, std::vector<ValuePtr>& args,
                       std::vector<std::pair<Ref, ValuePtr>>& kwargs) {
  switch (rule) {
    case CallRule::GraphBreak: {
      std::string reason = "call to torch._dynamo.graph_break()";
      ValuePtr msg = !args.empty() ? args[0] : (!kwargs.empty() ? kwargs[0].second : nullptr);
      if (msg && msg->is(Kind::Constant) && PyUnicode_Check(msg->obj.get()) && PyUnicode_GET_LENGTH(msg->obj.get()) > 0)
        reason += std::string(": ") + PyUnicode_AsUTF8(msg->obj.get());
      return t.fail(reason);
    }
    case CallRule::InGraph:
      return t.recordCall(graph::NodeOp::CallFunction, fn, args, kwargs);
    case CallRule::ConstantResult: {
      Ref pargs = t.toPython(Value::sequence(Kind::Tuple, args));
      Ref pkw = Ref::steal(PyDict_New());
      if (!pkw) return t.failFromPython("assume_constant_result");
      bool constant = pargs.get() != nullptr;
      for (auto& [k, v] : kwargs) {
        Ref pv = constant ? t.toPython(v) : Ref();
        if (!pv || PyDict_SetItem(pkw.get(), k.get(), pv.get()) < 0) constant = false;
      }
      PyErr_Clear();
      if (!constant)
        return t.fail("call of " + qualnameOf(fn) + " (assume_constant_result) with arguments that are not constants");
      Ref r = Ref::steal(PyObject_Call(fn, pargs.get(), pkw.get()));
      if (!r) return t.raisePython();
      return t.fromPython(r.get());
    }
    case CallRule::None:
      break;
  }
  return t.fail("internal: unknown call rule");
}

}  // namespace cdynamo::trace
