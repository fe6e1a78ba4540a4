// Special methods of user objects and nn.Modules: called by name, str()/repr()/format() of a
// user object, and the binary operator row for user objects (Note [The binary operator protocol]).
#include <cstring>
#include <string>

#include "support/lookup.h"
#include "support/torch_types.h"
#include "trace/kinds/iterator.h"
#include "trace/kinds/object.h"
#include "trace/kinds/object_internal.h"
#include "trace/protocol/binary_rules.h"
#include "trace/protocol/constants.h"
#include "trace/protocol/operators.h"
#include "trace/tracer.h"
#include "support/type_dict.h"

namespace cdynamo::trace {

using guards::LoadKind;

Result<ValuePtr> callDunder(Tracer& t, const ValuePtr& obj, PyObject* name, std::vector<ValuePtr> args) {
  if (!isUserObject(obj)) return notHandled();
  PyObject* fn = lookupInMro(classOf(obj), name, nullptr);
  if (!fn) return notHandled();
  args.insert(args.begin(), obj);
  if (!PyFunction_Check(fn)) {  // a C slot of a container base: on the object's items
    if (!basePart(obj)) {
      // An instance of a container subclass whose items the trace does not hold (read from
      // the program with items it cannot model): its base's C slot would answer from them;
      // taking it as missing would raise "unsupported operand" where eager computes.
      PyTypeObject* base = containerBase(classOf(obj));
      if (base && (PyObject_TypeCheck(fn, &PyWrapperDescr_Type) || PyObject_TypeCheck(fn, &PyMethodDescr_Type)) &&
          PyDescr_TYPE(fn) != &PyBaseObject_Type)
        return t.fail(std::string(PyDescr_TYPE(fn)->tp_name) + "." + PyUnicode_AsUTF8(name) + "() of a " +
                      reinterpret_cast<PyTypeObject*>(classOf(obj))->tp_name +
                      " instance whose items the trace does not hold is not supported yet");
      return notHandled();
    }
    return callBaseMethodAsOperator(t, fn, args);
  }
  return t.inlineFunction(fn, -1, std::move(args), {});
}

// object.__repr__ of an object made in the trace: "<module.Class object at 0x...>" with the
// address of the stand-in that id() gives it (Tracer::standInId), so repr and id agree and
// two objects of the trace have different reprs. The object itself is made only if it
// escapes, at another address: what eager's would be is unknowable at trace time, and any
// address is one eager could give an object that died (the same one on every call too).
Result<ValuePtr> defaultRepr(Tracer& t, const ValuePtr& obj) {
  PyObject* cls = classOf(obj);
  if (!cls || !PyType_Check(cls)) return notHandled();
  PyObject* stand_in = t.standInId(obj);
  if (!stand_in) return t.failFromPython("a stand-in for the object's address");
  PyTypeObject* type = reinterpret_cast<PyTypeObject*>(cls);
  PyObject* mod = PyDict_GetItemWithError(typeDict(type), interned(Str::dunder_module));  // borrowed
  if (!mod && PyErr_Occurred()) return t.failFromPython("the class's __module__");
  Ref qualname = Ref::steal(PyObject_GetAttrString(cls, "__qualname__"));
  if (!qualname) return t.failFromPython("the class's __qualname__");
  Ref s;
  if (mod && PyUnicode_Check(mod) && PyUnicode_CompareWithASCIIString(mod, "builtins") != 0)
    s = Ref::steal(PyUnicode_FromFormat("<%U.%U object at %p>", mod, qualname.get(), stand_in));
  else
    s = Ref::steal(PyUnicode_FromFormat("<%s object at %p>", type->tp_name, stand_in));
  if (!s) return t.failFromPython("the default repr");
  return Value::constant(s.get());
}

Result<ValuePtr> userObjectStr(Tracer& t, const ValuePtr& obj, bool repr) {
  if (!isUserObject(obj)) return notHandled();
  // str() calls the class's __str__; object.__str__ calls repr(), the class's __repr__.
  PyObject* name = interned(repr ? Str::dunder_repr : Str::dunder_str);
  if (!repr) {
    PyObject* own = lookupInMro(classOf(obj), name, nullptr);
    PyObject* base = PyDict_GetItemWithError(typeDict(&PyBaseObject_Type), name);  // borrowed
    if (!own) return notHandled();
    if (own == base) name = interned(Str::dunder_repr);
  }
  Result<ValuePtr> r = callDunder(t, obj, name, {});
  if (r.notHandled() && obj->is(Kind::NewObject)) {
    PyObject* repr_name = interned(Str::dunder_repr);
    PyObject* own = lookupInMro(classOf(obj), repr_name, nullptr);
    if (own && own == PyDict_GetItemWithError(typeDict(&PyBaseObject_Type), repr_name)) return defaultRepr(t, obj);
    if (PyErr_Occurred()) return t.failFromPython("__repr__ lookup");
  }
  if (!r || r.notHandled()) return r;
  PyObject* s = (*r)->constant();
  if (!s || !PyUnicode_Check(s)) {
    PyObject* type = typeOf(t, *r);
    const char* tn = type && PyType_Check(type) ? reinterpret_cast<PyTypeObject*>(type)->tp_name : "?";
    return t.raiseNew(PyExc_TypeError, std::string(repr ? "__repr__" : "__str__") + " returned non-string (type " + tn + ")");
  }
  return r;
}

Result<ValuePtr> userObjectFormat(Tracer& t, const ValuePtr& obj, int conversion) {
  if (!isUserObject(obj)) return notHandled();
  if (conversion == 1 || conversion == 2) return userObjectStr(t, obj, conversion == 2);
  if (conversion != 0) return notHandled();
  // format(obj, "") of a class without its own __format__ is str(obj).
  static PyObject* format_name = PyUnicode_InternFromString("__format__");
  PyObject* own = format_name ? lookupInMro(classOf(obj), format_name, nullptr) : nullptr;
  PyObject* base = format_name ? PyDict_GetItemWithError(typeDict(&PyBaseObject_Type), format_name) : nullptr;
  if (!own || own != base) {
    PyErr_Clear();
    return notHandled();
  }
  return userObjectStr(t, obj, false);
}

Result<ValuePtr> callModuleDunder(Tracer& t, const ValuePtr& module, PyObject* name, std::vector<ValuePtr> args) {
  if (!module->is(Kind::Module)) return notHandled();
  PyObject* cls = reinterpret_cast<PyObject*>(Py_TYPE(module->real()));
  PyObject* fn = lookupInMro(cls, name, nullptr);
  if (!fn || !PyFunction_Check(fn)) return notHandled();
  // Special methods are looked up on the class: the class attribute is guarded (a method
  // patched on the class later recompiles), the instance is not consulted.
  guardClassAttr(t, cls, name, nullptr, fn);
  args.insert(args.begin(), module);
  return t.inlineFunction(fn, -1, std::move(args), {});
}

void guardTypeAttribute(Tracer& t, PyObject* type, PyObject* name) {
  if (PyObject* descr = lookupInMro(type, name, nullptr)) guardClassAttr(t, type, name, nullptr, descr);
}

Result<ValuePtr> userObjectOperator(Tracer& t, const BinaryOperands& o) {
  const ValuePtr& a = o.a;
  const ValuePtr& b = o.b;
  if (!isUserObject(a) && !isUserObject(b)) return notHandled();
  // Python-level operators: a.__op__(b), then b.__rop__(a); in-place falls back to binary.
  std::string name = o.fn_name;
  if (name.back() == '_') name.pop_back();  // and_, or_
  const bool inplace = o.inplace();
  std::string base = inplace ? name.substr(1) : name;
  // A method that returns NotImplemented passes the turn to the next candidate.
  auto answered = [](const Result<ValuePtr>& r) {
    if (r.notHandled()) return false;
    return !r || (*r)->constant() != Py_NotImplemented;
  };
  auto tryDunder = [&](const ValuePtr& self, const std::string& dunder, const ValuePtr& other) -> Result<ValuePtr> {
    Ref method = internedName(dunder);
    if (!method) return t.failFromPython("a special method's name");
    return callDunder(t, self, method.get(), {other});
  };
  if (inplace) {
    Result<ValuePtr> r = tryDunder(a, "__" + name + "__", b);
    if (answered(r)) return r;
  }
  Result<ValuePtr> r = tryDunder(a, "__" + base + "__", b);
  if (answered(r)) return r;
  r = tryDunder(b, "__r" + base + "__", a);
  if (answered(r)) return r;
  // Neither answered: + of a list or tuple (a subclass's base) raises its concatenation's
  // error, anything else CPython's "unsupported operand" one, with the types' names.
  PyTypeObject* ta = reinterpret_cast<PyTypeObject*>(typeOf(t, a));
  PyTypeObject* tb = reinterpret_cast<PyTypeObject*>(typeOf(t, b));
  if (!ta || !tb) return t.fail("unsupported operand type(s) for " + base);
  if (base == "add" && (PyType_IsSubtype(ta, &PyList_Type) || PyType_IsSubtype(ta, &PyTuple_Type))) {
    const char* seq = PyType_IsSubtype(ta, &PyList_Type) ? "list" : "tuple";
    return t.raiseNew(PyExc_TypeError,
                      std::string("can only concatenate ") + seq + " (not \"" + tb->tp_name + "\") to " + seq);
  }
  return t.raiseNew(PyExc_TypeError, std::string("unsupported operand type(s) for ") + bytecode::binaryOpSymbol(o.op) +
                                         ": '" + ta->tp_name + "' and '" + tb->tp_name + "'");
}

}  // namespace cdynamo::trace
