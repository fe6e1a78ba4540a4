// Type expressions: list[int], int | None, typing generics built from classes in the trace.
#include <cstring>
#include <string>

#include "support/lookup.h"
#include "support/torch_types.h"
#include "trace/engine/scalars.h"
#include "trace/protocol/binary_rules.h"
#include "trace/protocol/type_expressions.h"
#include "trace/tracer.h"
#include "support/type_dict.h"

namespace cdynamo::trace {

using bytecode::BinaryOp;
using graph::NodeOp;

namespace {

// The module a class was defined in is `name` (its __module__).
bool definedIn(PyObject* type, const char* name) {
  PyObject* dict = typeDict(reinterpret_cast<PyTypeObject*>(type));
  PyObject* m = dict ? PyDict_GetItemString(dict, "__module__") : nullptr;
  return m && PyUnicode_Check(m) && PyUnicode_CompareWithASCIIString(m, name) == 0;
}

// An object whose subscript makes a type expression: typing's special forms and aliases
// (Callable, Optional, List[int], a TypeVar-parameterized alias), types.GenericAlias and
// types.UnionType (list[int], int | None), and classes whose __class_getitem__ is a C
// function, typing's or collections.abc's (list, dict, type, typing.Generic subclasses,
// collections.abc.Callable). Subscripting them
// builds an alias (cached by typing) and changes nothing else.
bool makesTypeExpression(PyObject* o) {
  if (!o) return false;
  if (o == reinterpret_cast<PyObject*>(&PyType_Type)) return true;  // type[T]: special-cased by PyObject_GetItem
  if (PyType_Check(o)) {
    static PyObject* name = PyUnicode_InternFromString("__class_getitem__");  // immortal once interned
    PyObject* cgi = name ? _PyType_Lookup(reinterpret_cast<PyTypeObject*>(o), name) : nullptr;
    if (!cgi) return false;
    if (PyObject_TypeCheck(cgi, &PyClassMethodDescr_Type) || PyCFunction_Check(cgi)) return true;
    if (Py_IS_TYPE(cgi, &PyClassMethod_Type)) {
      Ref fn = Ref::steal(PyObject_GetAttrString(cgi, "__func__"));
      if (!fn) return PyErr_Clear(), false;
      // collections.abc's classes (and their subclasses: MutableSet[T] as a base) subscript
      // through classmethod(types.GenericAlias).
      if (PyCFunction_Check(fn.get()) || fn.get() == reinterpret_cast<PyObject*>(&Py_GenericAliasType)) return true;
      Ref module = Ref::steal(PyObject_GetAttrString(fn.get(), "__module__"));
      if (!module) return PyErr_Clear(), false;
      if (!PyUnicode_Check(module.get())) return false;
      for (const char* m : {"typing", "collections.abc", "_collections_abc"})  // typing.Generic; collections.abc.Callable
        if (PyUnicode_CompareWithASCIIString(module.get(), m) == 0) return true;
      return false;
    }
    return false;
  }
  PyTypeObject* type = Py_TYPE(o);
  if (PyObject_TypeCheck(o, &Py_GenericAliasType) || strcmp(type->tp_name, "types.UnionType") == 0) return true;
  return definedIn(reinterpret_cast<PyObject*>(type), "typing");
}

// The real object of a part of a type expression: constants, classes and functions (guarded
// by identity where read), typing objects (guarded by identity), and tuples and lists of
// them (Callable[[T], R]); null when a part is anything else.
Ref typeExpressionPart(Tracer& t, const ValuePtr& v) {
  if (v->is(Kind::Constant) || v->is(Kind::Callable)) return Ref::borrow(v->real());
  if (const Object* o = v->get<Object>()) {
    if (!makesTypeExpression(o->obj.get()) && !definedIn(reinterpret_cast<PyObject*>(Py_TYPE(o->obj.get())), "typing"))
      return Ref();
    if (v->reg >= 0) t.guards().checkIdentity(v->reg, o->obj.get());
    return Ref::borrow(o->obj.get());
  }
  if (v->is(Kind::Tuple) || v->is(Kind::List)) {
    const std::vector<ValuePtr>& items = *v->elements();
    Ref out = Ref::steal(v->is(Kind::Tuple) ? PyTuple_New(static_cast<Py_ssize_t>(items.size()))
                                            : PyList_New(static_cast<Py_ssize_t>(items.size())));
    if (!out) return PyErr_Clear(), Ref();
    for (size_t i = 0; i < items.size(); ++i) {
      Ref p = typeExpressionPart(t, items[i]);
      if (!p) return Ref();
      if (v->is(Kind::Tuple)) PyTuple_SET_ITEM(out.get(), static_cast<Py_ssize_t>(i), p.release());
      else PyList_SET_ITEM(out.get(), static_cast<Py_ssize_t>(i), p.release());
    }
    return out;
  }
  return Ref();
}

}  // namespace
// obj[index] that builds a type expression (annotations evaluated when a function is made,
// `Callable[[T], Any]`): computed for real, as it changes nothing; NotHandled otherwise.
Result<ValuePtr> typeExpressionSubscript(Tracer& t, const ValuePtr& obj, const ValuePtr& index) {
  if (!(obj->is(Kind::Callable) || obj->is(Kind::Object) || obj->is(Kind::Constant)) || !makesTypeExpression(obj->real()))
    return notHandled();
  Ref key = typeExpressionPart(t, index);
  if (!key) return notHandled();
  if (obj->is(Kind::Object) && obj->reg >= 0) t.guards().checkIdentity(obj->reg, obj->real());
  Ref r = Ref::steal(PyObject_GetItem(obj->real(), key.get()));
  if (!r) return t.raisePython();
  if (isConstantObject(r.get())) return Value::constant(r.get());
  if (PyCallable_Check(r.get())) return Value::callable(r.get());
  return Value::object(r.get());  // no source: nothing to guard, never mutated (not owned)
}

// `a | b` that builds a union type (int | None, T | list[int]): computed for real.
Result<ValuePtr> typeUnion(Tracer& t, const ValuePtr& a, const ValuePtr& b) {
  auto typeLike = [](const ValuePtr& v) {
    PyObject* o = v->real();
    return o && (v->is(Kind::Callable) || v->is(Kind::Object)) && (PyType_Check(o) || makesTypeExpression(o));
  };
  if (!typeLike(a) && !typeLike(b)) return notHandled();
  Ref x = typeExpressionPart(t, a), y = typeExpressionPart(t, b);
  if (!x || !y) return notHandled();
  Ref r = Ref::steal(PyNumber_Or(x.get(), y.get()));
  if (!r) return t.raisePython();
  if (isConstantObject(r.get())) return Value::constant(r.get());
  if (PyCallable_Check(r.get())) return Value::callable(r.get());
  return Value::object(r.get());
}

Result<ValuePtr> typeUnionOperator(Tracer& t, const BinaryOperands& o) {
  if (o.op != bytecode::BinaryOp::Or) return notHandled();
  return typeUnion(t, o.a, o.b);
}

Result<ValuePtr> classUnionOperator(Tracer& t, const BinaryOperands& o) {
  // list | tuple: a types.UnionType, made for real (it runs no user code).
  if (o.op != bytecode::BinaryOp::Or || !o.a->is(Kind::Callable) || !o.b->is(Kind::Callable) ||
      !Py_IS_TYPE(o.a->real(), &PyType_Type) || !Py_IS_TYPE(o.b->real(), &PyType_Type))
    return notHandled();
  Ref r = Ref::steal(PyNumber_Or(o.a->real(), o.b->real()));
  if (!r) return t.raisePython();
  return Value::of(Object{std::move(r), true});
}

}  // namespace cdynamo::trace
