// Attributes of functions: those a function from the program keeps in its __dict__
// (guarded), and those of functions made in the trace.
#include <cstring>
#include <string>

#include "support/lookup.h"
#include "support/torch_types.h"
#include "trace/engine/outputs.h"
#include "trace/kinds/iterator.h"
#include "trace/kinds/object.h"
#include "trace/protocol/attributes.h"
#include "trace/protocol/container_methods.h"
#include "trace/tracer.h"

namespace cdynamo::trace {

using guards::LoadKind;

Result<ValuePtr> guardedFunctionAttr(Tracer& t, const ValuePtr& fn, PyObject* name) {
  if (!fn->is(Kind::Callable) || fn->reg < 0 || !PyFunction_Check(fn->real())) return notHandled();
  if (_PyType_Lookup(&PyFunction_Type, name)) return notHandled();  // __name__, __code__, __dict__, ...
  PyObject* dict = reinterpret_cast<PyFunctionObject*>(fn->real())->func_dict;
  const char* n = PyUnicode_AsUTF8(name);
  PyObject* v = dict ? PyDict_GetItemWithError(dict, name) : nullptr;
  if (v) return t.wrap(v, t.load(LoadKind::InstanceDict, fn->reg, 0, name, t.guards().sourceName(fn->reg) + "." + n));
  if (PyErr_Occurred()) return t.failFromPython("a function attribute");
  t.guards().checkNoInstanceAttr(fn->reg, name);
  return t.raiseNew(PyExc_AttributeError, std::string("'function' object has no attribute '") + n + "'");
}

// A made function's __annotations__: the dict CPython's getter makes on first read from the
// (name, value, ...) tuple MAKE_FUNCTION was given, kept so later reads see the same dict.
static Result<ValuePtr> functionAnnotations(Tracer& t, Function& p) {
  if (p.annotations && p.annotations->is(Kind::Dict)) return p.annotations;
  std::vector<Ref> keys;
  std::vector<ValuePtr> values;
  if (p.annotations) {
    const Tuple* pairs = p.annotations->get<Tuple>();
    if (!pairs || pairs->items.size() % 2) return t.fail("a function's annotations are not name, value pairs");
    for (size_t i = 0; i < pairs->items.size(); i += 2) {
      PyObject* key = pairs->items[i]->constant();
      if (!key || !PyUnicode_Check(key)) return t.fail("a function's annotation name is not a constant string");
      keys.push_back(Ref::borrow(key));
      values.push_back(pairs->items[i + 1]);
    }
  }
  p.annotations = Value::dict(reinterpret_cast<PyObject*>(&PyDict_Type), std::move(keys), std::move(values));
  return p.annotations;
}

Result<ValuePtr> functionAttr(Tracer& t, const ValuePtr& fn, PyObject* name) {
  Function& p = fn->as<Function>();
  if (!p.attrs) p.attrs = Value::emptyDict();
  int k = p.attrs->as<Dict>().findKey(name);
  if (k >= 0) return p.attrs->as<Dict>().values[static_cast<size_t>(k)];
  PyCodeObject* co = reinterpret_cast<PyCodeObject*>(p.code.get());
  const char* n = PyUnicode_AsUTF8(name);
  if (strcmp(n, "__name__") == 0) return Value::constant(co->co_name);
  if (strcmp(n, "__qualname__") == 0) return Value::constant(p.qualname.get());
  if (strcmp(n, "__module__") == 0) {
    PyObject* m = PyDict_GetItemString(p.globals.get(), "__name__");
    return Value::constant(m ? m : Py_None);
  }
  if (strcmp(n, "__doc__") == 0) {  // 3.11: a function's first constant is its docstring or None
    PyObject* c0 = PyTuple_GET_SIZE(co->co_consts) ? PyTuple_GET_ITEM(co->co_consts, 0) : Py_None;
    return Value::constant(PyUnicode_Check(c0) ? c0 : Py_None);
  }
  if (strcmp(n, "__dict__") == 0) return p.attrs;
  if (strcmp(n, "__code__") == 0) return Value::constant(p.code.get());  // immutable; what it was made from
  if (strcmp(n, "__defaults__") == 0) return p.defaults ? p.defaults : Value::constant(Py_None);
  if (strcmp(n, "__kwdefaults__") == 0) return p.kwdefaults ? p.kwdefaults : Value::constant(Py_None);
  if (strcmp(n, "__annotations__") == 0) return functionAnnotations(t, p);
  // 3.12: a generic function's type parameters are set by an intrinsic the trace does not
  // run (CALL_INTRINSIC_2), so a function made in the trace has none (functools.wraps reads
  // it). On 3.11 functions have no such attribute: the lookup below raises AttributeError.
  if (strcmp(n, "__type_params__") == 0 && _PyType_Lookup(&PyFunction_Type, name)) return Value::tuple({});
  // Every function has what its type defines (__globals__, __closure__, __get__, ...): not
  // modelled here, which is no AttributeError the program could catch.
  if (_PyType_Lookup(&PyFunction_Type, name))
    return t.fail(std::string("attribute '") + n + "' of a function made in the trace is not supported yet");
  return t.raiseNew(PyExc_AttributeError, std::string("'function' object has no attribute '") + n + "'");
}

// The plan of types.MethodType(function, receiver) (OutputPlanner::plan).
Done rebuildBoundMethod(OutputPlanner& p, const ValuePtr& v, runtime::OutputPlan* out) {
  namespace P = runtime::plan;
  const BoundMethod& m = v->as<BoundMethod>();
  std::vector<runtime::OutputPlan> args(2);
  args[0] = runtime::OutputPlan::constant(m.function.get());
  if (Done d = p.plan(m.self, &args[1]); !d) return d;
  out->step = P::Call{Ref::borrow(reinterpret_cast<PyObject*>(&PyMethod_Type)), std::move(args)};
  return {};
}

// The plan of getattr(receiver, name) (a context manager's __exit__ by its own plan) (OutputPlanner::plan).
Done rebuildNamedMethod(OutputPlanner& p, const ValuePtr& v, runtime::OutputPlan* out) {
  namespace P = runtime::plan;
  const NamedMethod& m = v->as<NamedMethod>();
  if (m.self->is(Kind::Context) && PyUnicode_CompareWithASCIIString(m.name.get(), "__exit__") == 0)
    return p.tracer().contexts().planExit(m.self, out);
  PyObject* getattr = lookup(Obj::builtins_getattr);
  if (!getattr) return p.tracer().failFromPython("builtins.getattr");
  std::vector<runtime::OutputPlan> args(2);
  if (Done d = p.plan(m.self, &args[0]); !d) return d;
  args[1] = runtime::OutputPlan::constant(m.name.get());
  out->step = P::Call{Ref::borrow(getattr), std::move(args)};
  return {};
}

// The plan of functools.partial(fn, *args, **keywords); not a decorated function (a context) (OutputPlanner::plan).
Done rebuildPartial(OutputPlanner& p, const ValuePtr& v, runtime::OutputPlan* out) {
  namespace P = runtime::plan;
  const Partial& part = v->as<Partial>();
  if (part.context) return p.unsupported(v);
  PyObject* rebuild = lookup(Obj::cdynamo_resume_rebuild_partial);
  if (!rebuild) return p.tracer().failFromPython("cdynamo._internal.frame_rebuild.rebuild_partial");
  std::vector<runtime::OutputPlan> args(3);
  if (Done d = p.plan(part.fn, &args[0]); !d) return d;
  if (Done d = p.plan(part.args, &args[1]); !d) return d;
  if (Done d = p.plan(part.kwargs, &args[2]); !d) return d;
  out->step = P::Call{Ref::borrow(rebuild), std::move(args)};
  return {};
}

// An attribute of a container's or tensor's method: __self__, __name__, __qualname__ as its C method answers.
Result<ValuePtr> namedMethodAttr(Tracer& t, const ValuePtr& obj, PyObject* name) {
  const char* n = PyUnicode_AsUTF8(name);
  // The method of a container or tensor value: what its C method answers
  // (assertRaises(TypeError, s.add) reads its __name__).
  const NamedMethod& m = obj->as<NamedMethod>();
  if (strcmp(n, "__self__") == 0) return m.self;
  if (strcmp(n, "__name__") == 0) return Value::constant(m.name.get());
  if (strcmp(n, "__qualname__") == 0) {
    PyTypeObject* owner = containerCType(m.self);
    if (!owner && m.self->is(Kind::Tensor)) owner = reinterpret_cast<PyTypeObject*>(lookup(Obj::torch_Tensor));
    if (!owner) return notHandled();
    Ref q = Ref::steal(PyUnicode_FromFormat("%s.%U", _PyType_Name(owner), m.name.get()));
    if (!q) return t.failFromPython("a method's __qualname__");
    return Value::constant(q.get());
  }
  return notHandled();
}

// An attribute of a Python function bound to a value: the method object's own, the rest read from the function.
Result<ValuePtr> boundMethodAttr(Tracer& t, const ValuePtr& obj, PyObject* name) {
  const char* n = PyUnicode_AsUTF8(name);
  // A Python function bound to a value: the method object's own attributes, the rest
  // read from the function (as a method object forwards them).
  const BoundMethod& m = obj->as<BoundMethod>();
  if (strcmp(n, "__self__") == 0) return m.self;
  if (strcmp(n, "__func__") == 0) return Value::callable(m.function.get());
  if (strcmp(n, "__name__") == 0 || strcmp(n, "__qualname__") == 0 || strcmp(n, "__module__") == 0 ||
      strcmp(n, "__doc__") == 0)
    return getAttr(t, Value::callable(m.function.get()), name);
  return notHandled();
}

}  // namespace cdynamo::trace
