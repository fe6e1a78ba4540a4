// Attribute reads: what a name means on each kind of value (one switch over kinds).
#include <cstring>
#include <string>

#include "support/lookup.h"
#include "support/torch_types.h"
#include "trace/engine/scalars.h"
#include "trace/kinds/namespace.h"
#include "trace/kinds/ndarray.h"
#include "trace/kinds/object.h"
#include "trace/kinds/tensor_subclass.h"
#include "trace/protocol/attributes.h"
#include "trace/protocol/calls.h"
#include "trace/protocol/constants.h"
#include "trace/tracer.h"

namespace cdynamo::trace {

using graph::NodeOp;
using guards::LoadKind;

Result<ValuePtr> getAttr(Tracer& t, const ValuePtr& obj, PyObject* name) {
  const char* n = PyUnicode_AsUTF8(name);
  if ((obj->is(Kind::Tuple) || obj->is(Kind::List) || obj->is(Kind::Dict) || obj->is(Kind::Set) ||
       obj->is(Kind::DictView) || obj->is(Kind::Iterator)) &&
      strcmp(n, "__class__") == 0) {
    // A container's class, as type(x) answers (a namedtuple's, a torch.Size's, a deque's, a
    // dict view's, an iterator's): object's __class__ descriptor, not a method to call later
    // (view.__class__.__name__ was the method's name, '__class__').
    PyObject* type = typeOf(t, obj);
    if (!type) return t.fail("the class of a container");
    return Value::callable(type);
  }
  Result<ValuePtr> r = notHandled();
  switch (obj->kind()) {
    case Kind::Tensor:
      if (Result<ValuePtr> m = tensorAttrUnderMode(t, obj, name); !m.notHandled()) return m;
      r = tensorAttr(t, obj, name);
      break;
    case Kind::PyModule:
      r = pyModuleAttr(t, obj, name);
      break;
    case Kind::Module:
    case Kind::Object:
    case Kind::NewObject:
    case Kind::Super:
      return objectGetAttr(t, obj, name);  // the descriptor protocol (objects.cpp)
    case Kind::Constant:
    case Kind::Callable:
      r = realObjectAttr(t, obj, name);
      break;
    case Kind::Tuple:
      r = tupleAttr(t, obj, name);
      break;
    case Kind::Set:
      r = setValueAttr(t, obj, name);
      break;
    case Kind::Dict:
      r = dictAttr(t, obj, name);
      break;
    case Kind::List:
      r = listAttr(t, obj, name);
      break;
    case Kind::Function:
      return functionAttr(t, obj, name);
    case Kind::Context:
      return Value::namedMethod(obj, name);
    case Kind::Namespace:
      return namespaceGetAttr(t, obj, name);
    case Kind::DictView:
      return Value::namedMethod(obj, name);  // isdisjoint, ...: called later (unsupported there)
    case Kind::NdArray:
      return ndarrayAttr(t, obj, name);
    case Kind::SubclassTensor:
      return subclassTensorAttr(t, obj, name);
    case Kind::Iterator:
      r = iteratorAttr(t, obj, name);
      break;
    case Kind::NamedMethod:
      r = namedMethodAttr(t, obj, name);
      break;
    case Kind::BoundMethod:
      r = boundMethodAttr(t, obj, name);
      break;
    case Kind::Null:
    case Kind::Slice:
    case Kind::Cell:
    case Kind::Partial:
      break;
  }
  if (!r.notHandled()) return r;
  return t.fail(std::string("attribute '") + n + "\' of " + describe(obj) + " is not supported yet");
}

// An attribute of a Python module: a global stored in the trace, or the module's attribute, guarded through its __dict__ (torch's namespaces are taken as stable).
Result<ValuePtr> pyModuleAttr(Tracer& t, const ValuePtr& obj, PyObject* name) {
  const char* n = PyUnicode_AsUTF8(name);
  PyObject* module = obj->as<PyModule>().obj.get();
  // A global of that module stored earlier in the trace (STORE_GLOBAL in one of its
  // functions, recorded against its globals dict, which is the module's __dict__).
  if (t.effects().anyAttrOverlay()) {
    int dreg = t.load(LoadKind::Constant, -1, 0, PyModule_GetDict(module), "globals");
    if (ValuePtr v = t.effects().overlayAttr(dreg, name)) {
      if (v == SideEffects::deleted()) return t.fail("a module attribute deleted in the trace");
      return v;
    }
  }
  Ref v = Ref::steal(PyObject_GetAttr(module, name));
  if (!v) return t.failFromPython(std::string("module attribute '") + n + "'");
  // torch's own namespaces are assumed stable (as TorchDynamo does); a user module's
  // attributes are guarded through its __dict__.
  const char* modname = PyModule_GetName(module);
  if (!modname) return t.failFromPython("module name");
  bool torch_ns = strcmp(modname, "torch") == 0 || strncmp(modname, "torch.", 6) == 0;
  int reg = -1;
  if (!torch_ns && obj->reg >= 0)
    reg = t.load(LoadKind::InstanceDict, obj->reg, 0, name, t.guards().sourceName(obj->reg) + "." + n);
  return t.wrap(v.get(), reg);
}

// An attribute of a constant or a real callable (a function, a class, a C callable): read for real, guarded through the function's __dict__ where it has one.
Result<ValuePtr> realObjectAttr(Tracer& t, const ValuePtr& obj, PyObject* name) {
  const char* n = PyUnicode_AsUTF8(name);
  PyObject* o = obj->real();
  const bool callable = obj->is(Kind::Callable);
  if (callable && PyType_Check(o) && (reinterpret_cast<PyTypeObject*>(o)->tp_flags & Py_TPFLAGS_HEAPTYPE))
    return objectGetAttr(t, obj, name);  // attributes of a user class (module classes too): the descriptor protocol
  if (callable && PyFunction_Check(o)) {
    // The function's __dict__ read as a dict earlier in the trace: its entries are
    // that value's (what the trace stored into it included).
    PyObject** dictptr = _PyObject_GetDictPtr(o);
    ValuePtr d = dictptr && *dictptr ? t.wrappedValueOf(*dictptr) : nullptr;
    if (d && d->is(Kind::Dict)) {
      int k = d->as<Dict>().findKey(name);
      if (k == -2) return t.failFromPython("a function attribute");
      if (k >= 0) return d->as<Dict>().values[static_cast<size_t>(k)];
    }
  }
  if (Result<ValuePtr> fa = guardedFunctionAttr(t, obj, name); !fa.notHandled()) return fa;
  Ref v = Ref::steal(PyObject_GetAttr(o, name));
  if (!v) {
    if (PyErr_ExceptionMatches(PyExc_AttributeError)) return t.raisePython();
    return t.failFromPython(std::string("attribute '") + n + "'");
  }
  if (isConstantObject(v.get())) return Value::constant(v.get());
  if (callable && isOperatorObject(o)) {
    // torch.ops.ns.op.overload: the packet makes its overloads on first use (its
    // __getattr__, run here as eagerly) and keeps them; each is an operator of its own,
    // guarded by identity through the packet where the packet has a source.
    if (isOperatorObject(v.get())) {
      int reg = obj->reg >= 0 ? t.load(LoadKind::Attr, obj->reg, 0, name, t.guards().sourceName(obj->reg) + "." + n) : -1;
      return t.wrap(v.get(), reg);
    }
    // Its other attributes (op.name(), op._schema, packet.overloads()) are an object's.
    return objectGetAttr(t, Value::object(o, obj->reg), name);
  }
  if (!callable && PyMethod_Check(v.get()) && PyMethod_GET_SELF(v.get()) == o)
    return Value::boundMethod(obj, PyMethod_GET_FUNCTION(v.get()));  // a Python method of an enum member: inlined
  if (callable && (PyFunction_Check(o) || isCacheWrapper(o)) && PyDict_CheckExact(v.get())) {
    // A function's (or an lru_cache wrapper's) __dict__ / __annotations__
    // (functools.wraps reads them): with its source, so what the program stores into
    // it is replayed on the real dict.
    if (obj->reg < 0) return t.fail(std::string("the ") + n + " of a function without a source is not supported yet");
    return t.wrap(v.get(), t.load(LoadKind::Attr, obj->reg, 0, name, t.guards().sourceName(obj->reg) + "." + n));
  }
  if (!callable && PyCallable_Check(v.get()))
    return Value::callable(v.get());  // a method of an immutable constant
  if (callable && PyType_Check(o) && !PyType_HasFeature(reinterpret_cast<PyTypeObject*>(o), Py_TPFLAGS_HEAPTYPE) &&
      PyCallable_Check(v.get()))
    return Value::callable(v.get());  // object.__setattr__, dict.fromkeys, ...
  return t.fail(std::string("attribute '") + n + "\' of " + describe(obj) + " is not supported yet");
}

}  // namespace cdynamo::trace
