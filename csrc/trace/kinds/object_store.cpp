// Storing and deleting attributes: setattr/delattr on user objects, modules and objects made
// in the trace (their class's own __setattr__/__delattr__ inlined, a property's setter and
// deleter, the generic forms otherwise), as STORE_ATTR and DELETE_ATTR run them.
#include <cstring>
#include <string>

#include "support/lookup.h"
#include "support/torch_types.h"
#include "trace/kinds/iterator.h"
#include "trace/kinds/namespace.h"
#include "trace/kinds/object.h"
#include "trace/kinds/object_internal.h"
#include "trace/protocol/attributes.h"
#include "trace/protocol/calls.h"
#include "trace/protocol/constants.h"
#include "trace/protocol/container_methods.h"
#include "trace/protocol/operators.h"
#include "trace/tracer.h"

namespace cdynamo::trace {

using guards::LoadKind;

Done genericSetAttr(Tracer& t, const ValuePtr& obj, PyObject* name, const ValuePtr& value) {
  const NewObject* o = obj->get<NewObject>();
  if (!o) return t.fail("object.__setattr__ of an object from outside the trace");
  PyObject* descr = lookupInMro(o->cls.get(), name, nullptr);
  if (descr && PyObject_TypeCheck(descr, &PyProperty_Type)) {
    Ref fset = Ref::steal(PyObject_GetAttrString(descr, "fset"));
    if (!fset || fset.get() == Py_None) return PyErr_Clear(), t.fail("can't set attribute (AttributeError)");
    return outcomeOf(call(t, Value::callable(fset.get()), {obj, value}, {}));
  }
  if (descr && Py_TYPE(descr)->tp_descr_set && !Py_IS_TYPE(descr, &PyMemberDescr_Type) &&
      PyUnicode_CompareWithASCIIString(name, "__dict__") != 0)
    return t.fail(std::string("setting attribute '") + PyUnicode_AsUTF8(name) + "' (a " + Py_TYPE(descr)->tp_name +
                  ") of an object made in the trace is not supported yet");
  return storeSubscript(t, o->attrs, Value::constant(name), value);
}

namespace {

PyObject* delattrName() {
  static PyObject* name = PyUnicode_InternFromString("__delattr__");  // immortal once interned
  return name;
}

// Whether the object from the program in `obj` has its own attribute `name` as the trace
// sees it (stored or deleted in the trace, else its __dict__; for a module also its
// parameters, buffers and submodules), its presence or absence guarded.
Result<bool> hasOwnAttr(Tracer& t, const ValuePtr& obj, PyObject* name) {
  if (ValuePtr v = t.effects().overlayAttr(obj->reg, name)) return v != SideEffects::deleted();
  if (obj->is(Kind::Module)) {
    Result<ValuePtr> r = moduleDictsAttr(t, obj, name);
    if (!r.notHandled()) {
      if (!r) return r.stop();
      return true;
    }
  }
  PyObject** dictptr = _PyObject_GetDictPtr(obj->real());
  PyObject* v = dictptr && *dictptr ? PyDict_GetItemWithError(*dictptr, name) : nullptr;
  if (!v && PyErr_Occurred()) return t.failFromPython("an instance attribute");
  if (v) {
    t.load(LoadKind::InstanceDict, obj->reg, 0, name, t.guards().sourceName(obj->reg) + "." + PyUnicode_AsUTF8(name));
    return true;
  }
  return false;
}

Done noSuchAttr(Tracer& t, PyObject* cls, PyObject* name) {
  return t.raiseNew(PyExc_AttributeError, std::string("'") + reinterpret_cast<PyTypeObject*>(cls)->tp_name +
                                              "' object has no attribute '" + PyUnicode_AsUTF8(name) + "'");
}

}  // namespace

Done genericDelAttr(Tracer& t, const ValuePtr& obj, PyObject* name) {
  if (const NewObject* o = obj->get<NewObject>()) {
    PyObject* cls = o->cls.get();
    PyObject* descr = lookupInMro(cls, name, nullptr);
    if (descr && PyObject_TypeCheck(descr, &PyProperty_Type)) {
      Ref fdel = Ref::steal(PyObject_GetAttrString(descr, "fdel"));
      if (!fdel || fdel.get() == Py_None) return PyErr_Clear(), t.fail("can't delete attribute (AttributeError)");
      return outcomeOf(call(t, Value::callable(fdel.get()), {obj}, {}));
    }
    if (descr && Py_TYPE(descr)->tp_descr_set)
      return t.fail(std::string("deleting attribute '") + PyUnicode_AsUTF8(name) + "' (a " + Py_TYPE(descr)->tp_name +
                    ") of an object made in the trace is not supported yet");
    if (o->attrs->as<Dict>().findKey(name) < 0) return noSuchAttr(t, cls, name);
    Args key{Value::constant(name)};
    Kwargs none;
    return outcomeOf(callContainerMethod(t, o->attrs, interned(Str::pop), key, none));
  }
  // An object from the program: recorded and replayed after the graph as
  // object.__delattr__; reads later in the trace see it gone.
  const Object* po = obj->get<Object>();
  if (!po || po->owned || obj->reg < 0 || basePart(obj))
    return t.fail(std::string("deleting an attribute of ") + describe(obj) + " is not supported yet");
  PyObject* cls = reinterpret_cast<PyObject*>(Py_TYPE(obj->real()));
  PyObject* descr = lookupInMro(cls, name, nullptr);
  if (descr && PyObject_TypeCheck(descr, &PyProperty_Type)) {
    Ref fdel = Ref::steal(PyObject_GetAttrString(descr, "fdel"));
    if (!fdel || fdel.get() == Py_None) return PyErr_Clear(), t.fail("can't delete attribute (AttributeError)");
    guardClassAttr(t, cls, name, nullptr, descr);
    return outcomeOf(call(t, Value::callable(fdel.get()), {obj}, {}));
  }
  if (descr && Py_TYPE(descr)->tp_descr_set)
    return t.fail(std::string("deleting attribute '") + PyUnicode_AsUTF8(name) + "' (a " + Py_TYPE(descr)->tp_name +
                  ") of an object from outside the trace is not supported yet");
  if (descr) guardClassAttr(t, cls, name, nullptr, descr);  // a plain class attribute: it stays readable
  if (ValuePtr aliased = aliasedInstanceDict(t, obj)) {  // its __dict__ is a value of the trace: deleted there
    if (aliased->as<Dict>().findKey(name) < 0) return noSuchAttr(t, cls, name);
    Args key{Value::constant(name)};
    Kwargs none;
    return outcomeOf(callContainerMethod(t, aliased, interned(Str::pop), key, none));
  }
  Result<bool> has = hasOwnAttr(t, obj, name);
  if (!has) return has.stop();
  if (!*has) {
    guardNotInInstance(t, obj, name);
    return noSuchAttr(t, cls, name);
  }
  return t.effects().delAttr(obj->reg, name, true);
}

Done deleteAttr(Tracer& t, const ValuePtr& obj, PyObject* name) {
  PyObject* cls = obj->is(Kind::NewObject) ? obj->as<NewObject>().cls.get()
                  : (obj->is(Kind::Object) || obj->is(Kind::Module)) && obj->real()
                      ? reinterpret_cast<PyObject*>(Py_TYPE(obj->real()))
                      : nullptr;
  if (!cls) return t.fail(std::string("deleting an attribute of ") + describe(obj) + " is not supported yet");
  PyObject* own = lookupInMro(cls, delattrName(), nullptr);
  if (obj->is(Kind::Module)) {
    // nn.Module.__delattr__ (a parameter, buffer, submodule or instance attribute removed)
    // replayed after the graph as delattr, as stores to modules are replayed as setattr;
    // reads later in the trace see the attribute gone.
    PyObject* module = lookup(Obj::torch_nn_Module);
    if (!module) return t.failFromPython("torch.nn.Module");
    if (obj->reg < 0 || own != lookupInMro(module, delattrName(), nullptr))
      return t.fail("delattr() on a module whose class has its own __delattr__ is not supported yet");
    guardClassAttr(t, cls, delattrName(), nullptr, own);
    if (Done d = checkModuleStateNotRead(t, obj); !d) return d;
    Result<bool> has = hasOwnAttr(t, obj, name);
    if (!has) return has.stop();
    if (!*has) return t.fail("delattr() of a module attribute it does not have (AttributeError)");
    return t.effects().delAttr(obj->reg, name, false);
  }
  if (own && own != objectSlot("__delattr__")) {  // the class's own __delattr__ decides: inlined
    if (!PyFunction_Check(own))
      return t.fail(std::string("a class whose __delattr__ is a ") + Py_TYPE(own)->tp_name + " is not supported yet");
    if (obj->reg >= 0) guardClassAttr(t, cls, delattrName(), nullptr, own);
    return outcomeOf(t.inlineFunction(own, -1, {obj, Value::constant(name)}, {}));
  }
  return genericDelAttr(t, obj, name);
}

namespace {

// exc.__cause__ / __context__ / __suppress_context__ = v on an exception the program passed
// in: BaseException's setters' checks made here (their TypeErrors raised in the trace), the
// store replayed after the graph, and later reads in the trace see it (setting __cause__
// also sets __suppress_context__, as the setter does). NotHandled for other names.
Done storeExceptionLink(Tracer& t, const ValuePtr& obj, PyObject* name, const ValuePtr& value) {
  const bool cause = PyUnicode_CompareWithASCIIString(name, "__cause__") == 0;
  const bool context = PyUnicode_CompareWithASCIIString(name, "__context__") == 0;
  const bool suppress = PyUnicode_CompareWithASCIIString(name, "__suppress_context__") == 0;
  if (PyUnicode_CompareWithASCIIString(name, "__traceback__") == 0)
    return t.fail("setting __traceback__ of an exception from outside the trace is not supported yet");
  if (!cause && !context && !suppress) return notHandled();
  PyObject* v = value->real();
  if (suppress) {
    if (!v || !PyBool_Check(v)) return t.raiseNew(PyExc_TypeError, "attribute value type must be bool");
    return t.effects().setAttr(obj->reg, name, value);
  }
  if (!v || (v != Py_None && !PyExceptionInstance_Check(v)))
    return t.raiseNew(PyExc_TypeError, cause ? "exception cause must be None or derive from BaseException"
                                             : "exception context must be None or derive from BaseException");
  if (Done d = t.effects().setAttr(obj->reg, name, value); !d) return d;
  if (!cause) return {};
  Ref key = Ref::steal(PyUnicode_FromString("__suppress_context__"));
  if (!key) return t.failFromPython("__suppress_context__");
  return t.effects().setAttr(obj->reg, key.get(), Value::constant(Py_True));
}

}  // namespace

Done storeAttr(Tracer& t, const ValuePtr& obj, PyObject* name, const ValuePtr& value) {
  if (obj->is(Kind::Namespace)) return namespaceSetAttr(t, obj, name, value);
  const Object* owned = obj->get<Object>();
  if (owned && owned->owned) {  // e.g. self.code = code in an exception's __init__
    Ref v = toPython(t, value);
    if (!v) return t.fail("storing a non-constant on an object made in the trace");
    if (PyObject_SetAttr(owned->obj.get(), name, v.get()) < 0) return t.raisePython();
    return {};
  }
  if (Function* fn = obj->get<Function>()) {  // attributes of a function made in the trace (functools.wraps)
    if (!fn->attrs) fn->attrs = Value::emptyDict();
    if (PyUnicode_CompareWithASCIIString(name, "__dict__") == 0) return t.fail("replacing a function's __dict__");
    return storeSubscript(t, fn->attrs, Value::constant(name), value);
  }
  if (const NewObject* o = obj->get<NewObject>()) {
    // A class's own __setattr__ decides every store: inlined (its super().__setattr__ is
    // object.__setattr__, genericSetAttr).
    PyObject* setattr = lookupInMro(o->cls.get(), interned(Str::dunder_setattr), nullptr);
    if (setattr && setattr != objectSlot("__setattr__")) {
      if (!PyFunction_Check(setattr))
        return t.fail(std::string("a class whose __setattr__ is a ") + Py_TYPE(setattr)->tp_name + " is not supported yet");
      return outcomeOf(t.inlineFunction(setattr, -1, {obj, Value::constant(name), value}, {}));
    }
    return genericSetAttr(t, obj, name, value);
  }
  if (Tuple* tup = obj->get<Tuple>(); tup && tup->namedtuple && obj->reg < 0) {
    // A namedtuple made in the trace, as object.__setattr__ treats it: a data descriptor of
    // its class decides (a field's getter refuses), else its __dict__ when the class gives
    // instances one (a subclass without __slots__).
    PyTypeObject* cls = reinterpret_cast<PyTypeObject*>(tup->namedtuple.get());
    PyObject* setattr = lookupInMro(tup->namedtuple.get(), interned(Str::dunder_setattr), nullptr);
    if (setattr != objectSlot("__setattr__"))
      return t.fail(std::string("a namedtuple class with its own __setattr__ is not supported yet"));
    PyObject* descr = lookupInMro(tup->namedtuple.get(), name, nullptr);
    if (descr && Py_TYPE(descr)->tp_descr_set) {
      if (PyObject_TypeCheck(descr, &PyProperty_Type) || PyObject_HasAttrString(descr, "__get__"))
        if (strcmp(Py_TYPE(descr)->tp_name, "_collections._tuplegetter") == 0)
          return t.raiseNew(PyExc_AttributeError, "can't set attribute");
      return t.fail(std::string("setting a descriptor of a namedtuple (") + Py_TYPE(descr)->tp_name + ") is not supported yet");
    }
    if (cls->tp_dictoffset == 0)
      return t.raiseNew(PyExc_AttributeError, std::string("'") + cls->tp_name + "' object has no attribute '" +
                                                  PyUnicode_AsUTF8(name) + "'");
    if (!tup->attrs) tup->attrs = Value::emptyDict();
    return storeSubscript(t, tup->attrs, Value::constant(name), value);
  }
  bool user_class = obj->is(Kind::Callable) && PyType_Check(obj->real()) &&
                    PyType_HasFeature(reinterpret_cast<PyTypeObject*>(obj->real()), Py_TPFLAGS_HEAPTYPE);
  if (user_class && t.class_dicts_read.count(obj->real()))
    return t.fail("setting an attribute of a class whose __dict__ the trace read is not supported yet");
  if (obj->is(Kind::Object) && obj->reg >= 0 && PyExceptionInstance_Check(obj->real()))
    if (Done d = storeExceptionLink(t, obj, name, value); !d.notHandled()) return d;
  if ((obj->is(Kind::Object) || obj->is(Kind::Module) || user_class) && obj->reg >= 0) {
    PyObject* cls = reinterpret_cast<PyObject*>(Py_TYPE(obj->real()));
    PyObject* descr = lookupInMro(cls, name, nullptr);
    if (descr && Py_TYPE(descr)->tp_descr_set && !obj->is(Kind::Callable))
      return t.fail("setting a property or descriptor of an object from outside the trace is not supported yet");
    if (obj->is(Kind::Object)) {
      PyObject* setattr = lookupInMro(cls, interned(Str::dunder_setattr), nullptr);
      if (setattr != objectSlot("__setattr__")) {
        // Its own __setattr__ decides: inlined; its object.__setattr__ is replayed as such.
        if (!setattr || !PyFunction_Check(setattr))
          return t.fail("a class with its own C __setattr__ is not supported yet");
        guardClassAttr(t, cls, interned(Str::dunder_setattr), nullptr, setattr);
        return outcomeOf(t.inlineFunction(setattr, -1, {obj, Value::constant(name), value}, {}));
      }
    }
    if (obj->is(Kind::Object) && !descr)
      if (ValuePtr aliased = aliasedInstanceDict(t, obj)) return storeSubscript(t, aliased, Value::constant(name), value);
    // Replayed after the graph with setattr (Module.__setattr__ included); reads later in
    // the trace see the new value.
    if (obj->is(Kind::Module))
      if (Done d = checkModuleStateNotRead(t, obj); !d) return d;
    return t.effects().setAttr(obj->reg, name, value);
  }
  if (obj->is(Kind::Tensor) && PyUnicode_CompareWithASCIIString(name, "grad") == 0)
    return storeTensorGrad(t, obj, value);
  return t.fail(std::string("setting an attribute of ") + describe(obj) +
              " that exists outside the trace is not supported yet");
}

}  // namespace cdynamo::trace
