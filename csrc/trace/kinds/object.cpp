// User-defined classes. An object read from the program (Kind::Object) is guarded by its
// exact type and read live (instance __dict__ entries become guard loads); an object made
// in the trace (Kind::NewObject) keeps its attributes as values and is rebuilt if it
// escapes. Attribute lookup follows Python: data descriptors of the class (property),
// then the instance, then the class (methods, staticmethod, classmethod, constants).
#include <cstring>
#include <string>

#include "support/lookup.h"
#include "support/python_class.h"
#include "support/torch_types.h"
#include "trace/engine/outputs.h"
#include "trace/kinds/iterator.h"
#include "trace/kinds/object.h"
#include "trace/kinds/object_internal.h"
#include "trace/kinds/set.h"
#include "trace/protocol/attributes.h"
#include "trace/protocol/calls.h"
#include "trace/protocol/constants.h"
#include "trace/tracer.h"
#include "support/type_dict.h"

namespace cdynamo::trace {

using guards::LoadKind;

namespace {





// Whether the exception in flight is an AttributeError.
bool isAttributeError(Tracer& t) {
  const ValuePtr& e = t.pendingException();
  PyObject* type = e ? typeOf(t, e) : nullptr;
  return type && PyType_Check(type) &&
         PyType_IsSubtype(reinterpret_cast<PyTypeObject*>(type), reinterpret_cast<PyTypeObject*>(PyExc_AttributeError));
}

}  // namespace


PyObject* instanceDictItem(PyObject* obj, const char* name) {
  PyObject** dictptr = _PyObject_GetDictPtr(obj);
  if (!dictptr || !*dictptr) return nullptr;
  return PyDict_GetItemString(*dictptr, name);
}

bool isNamedTupleClass(PyObject* cls) {
  if (!PyType_Check(cls) || !PyType_IsSubtype(reinterpret_cast<PyTypeObject*>(cls), &PyTuple_Type)) return false;
  PyObject* fields = lookupInMro(cls, interned(Str::dunder_fields), nullptr);
  return fields && PyTuple_Check(fields);
}

Result<ValuePtr> makeSuper(Tracer& t, std::vector<ValuePtr>& args) {
  SymbolicFrame* f = t.current();
  if (!f) return t.fail("super() outside a frame");
  ValuePtr self, cls;
  if (args.size() == 2) {
    cls = args[0];
    self = args[1];
  } else if (args.empty()) {
    // Zero-argument super(): the frame's first argument and its __class__ cell.
    PyCodeObject* co = f->code;
    if (co->co_argcount == 0) return t.fail("super(): no arguments (RuntimeError)");
    self = f->locals[0];
    if (!self && f->root && !f->deleted[0]) {  // a root argument not read yet
      Result<ValuePtr> r = t.loadRootLocal(*f, 0);
      if (!r && !r.notHandled()) return r;
      if (r) self = r.take();
    }
    if (self && self->is(Kind::Cell)) self = self->as<Cell>().contents;
    for (int i = 0; i < co->co_nlocalsplus; ++i) {
      if (PyUnicode_CompareWithASCIIString(PyTuple_GET_ITEM(co->co_localsplusnames, i), "__class__") != 0) continue;
      ValuePtr slot = f->locals[i];
      if (slot && slot->is(Kind::Cell) && slot->as<Cell>().contents) {
        cls = slot->as<Cell>().contents;
      } else if (f->closure) {
        int j = i - (co->co_nlocalsplus - co->co_nfreevars);
        if (j >= 0 && j < PyTuple_GET_SIZE(f->closure.get())) {
          PyObject* c = PyCell_GET(PyTuple_GET_ITEM(f->closure.get(), j));
          if (c) cls = Value::callable(c);
        }
      }
    }
    if (!self || !cls) return t.fail("super(): __class__ cell not found (RuntimeError)");
  } else {
    return t.fail("super() with one argument is not supported");
  }
  if (!cls->real() || !PyType_Check(cls->real())) return t.fail("super() of a non-class");
  return Value::of(Super{Ref::borrow(cls->real()), self});
}

bool probesByLookup(const ValuePtr& v) {
  return isUserObject(v) || v->is(Kind::Module) || v->is(Kind::Super) ||
         (v->is(Kind::Callable) && PyType_Check(v->real()) &&
          PyType_HasFeature(reinterpret_cast<PyTypeObject*>(v->real()), Py_TPFLAGS_HEAPTYPE));
}

bool takeAttributeError(Tracer& t, const Result<ValuePtr>& r) {
  if (r.outcome() != Outcome::Raised || !isAttributeError(t)) return false;
  t.takePendingException();
  return true;
}

Result<bool> objectHasAttr(Tracer& t, const ValuePtr& obj, PyObject* name) {
  // hasattr() is getattr() with AttributeError meaning False: the same lookup (descriptors,
  // __getattribute__, __getattr__), with the same guards, absence included.
  Result<ValuePtr> r = getAttr(t, obj, name);
  if (r) return true;
  if (!takeAttributeError(t, r)) return r.stop();
  return false;
}

namespace {


// The class in `type`'s MRO (after `after`) whose __dict__ holds `name` (borrowed), or null.
PyObject* ownerInMro(PyObject* type, PyObject* name, PyObject* after) {
  PyObject* mro = reinterpret_cast<PyTypeObject*>(type)->tp_mro;
  if (!mro) return nullptr;
  Py_ssize_t start = 0;
  if (after)
    for (Py_ssize_t i = 0; i < PyTuple_GET_SIZE(mro); ++i)
      if (PyTuple_GET_ITEM(mro, i) == after) start = i + 1;
  for (Py_ssize_t i = start; i < PyTuple_GET_SIZE(mro); ++i) {
    PyObject* dict = typeDict(reinterpret_cast<PyTypeObject*>(PyTuple_GET_ITEM(mro, i)));
    if (dict && PyDict_GetItemWithError(dict, name)) return PyTuple_GET_ITEM(mro, i);
    PyErr_Clear();
  }
  return nullptr;
}

// The register of class attribute `name` read live from the __dict__ of the class that
// defines it: the guards see a class attribute replaced or deleted (the class itself is
// guarded by the reader, by type or identity).
int classAttrReg(Tracer& t, PyObject* type, PyObject* name, PyObject* after) {
  PyObject* owner = ownerInMro(type, name, after);
  if (!owner) return -1;
  // The classes before the owner in the MRO still lack it (a subclass that later defines
  // the name would shadow what the trace resolved).
  PyObject* mro = reinterpret_cast<PyTypeObject*>(type)->tp_mro;
  bool started = after == nullptr;
  for (Py_ssize_t i = 0; mro && i < PyTuple_GET_SIZE(mro) && PyTuple_GET_ITEM(mro, i) != owner; ++i) {
    PyTypeObject* c = reinterpret_cast<PyTypeObject*>(PyTuple_GET_ITEM(mro, i));
    if (!started) {
      started = reinterpret_cast<PyObject*>(c) == after;
      continue;
    }
    if (!typeDict(c)) continue;
    int cd = t.guards().loadClassDict(c, std::string(c->tp_name) + ".__dict__");
    t.guards().checkNoInstanceAttr(cd, name);
  }
  PyTypeObject* ot = reinterpret_cast<PyTypeObject*>(owner);
  int d = t.guards().loadClassDict(ot, std::string(ot->tp_name) + ".__dict__");
  return t.load(LoadKind::DictItem, d, 0, name, t.guards().sourceName(d) + "['" + PyUnicode_AsUTF8(name) + "']");
}


// A property's getter as a value to call: a function or C callable by identity; a callable
// object (a class with __call__) as the object, its attributes read through a source of its
// own (the property, fixed by the class attribute guard, fixes which object it is).
Result<ValuePtr> getterValue(Tracer& t, PyObject* fget) {
  if (PyFunction_Check(fget) || PyCFunction_Check(fget) || PyType_Check(fget) ||
      !PyType_HasFeature(Py_TYPE(fget), Py_TPFLAGS_HEAPTYPE))
    return Value::callable(fget);
  int reg = t.load(LoadKind::Constant, -1, 0, fget, std::string("<property getter ") + Py_TYPE(fget)->tp_name + ">");
  return t.wrap(fget, reg);
}

// The __get__ of a descriptor whose class is a Python class (borrowed), or null.
PyObject* pythonDescrGet(PyObject* descr) {
  PyTypeObject* dt = Py_TYPE(descr);
  if (!PyType_HasFeature(dt, Py_TPFLAGS_HEAPTYPE)) return nullptr;
  PyObject* get = lookupInMro(reinterpret_cast<PyObject*>(dt), interned(Str::dunder_get), nullptr);
  return get && PyFunction_Check(get) ? get : nullptr;
}

// A class attribute that is not a descriptor (no __get__): the value itself, read live
// through the class dict and wrapped by what it is (an int, an enum member, a registry).
Result<ValuePtr> plainClassAttr(Tracer& t, PyObject* type, PyObject* name, PyObject* after, PyObject* value) {
  return t.wrap(value, classAttrReg(t, type, name, after));
}

// `descr.__get__(self_or_None, cls)` of a descriptor of a Python class: inlined.
Result<ValuePtr> inlineDescrGet(Tracer& t, PyObject* get, PyObject* type, PyObject* name, PyObject* after, PyObject* descr,
                                ValuePtr self, PyObject* cls) {
  Result<ValuePtr> d = plainClassAttr(t, type, name, after, descr);
  if (!d) return d;
  return t.inlineFunction(get, -1, {d.take(), std::move(self), Value::callable(cls)}, {});
}

Stop noAttribute(Tracer& t, PyObject* cls, const char* n, bool of_class) {
  const char* tn = reinterpret_cast<PyTypeObject*>(cls)->tp_name;
  if (of_class) return t.raiseNew(PyExc_AttributeError, std::string("type object '") + tn + "' has no attribute '" + n + "'");
  return t.raiseNew(PyExc_AttributeError, std::string("'") + tn + "' object has no attribute '" + n + "'");
}

// A non-data descriptor or plain value found on the class, read through an instance
// (`self` is the receiver) or through the class (`self` null).
Result<ValuePtr> bindClassAttr(Tracer& t, const ValuePtr& self, const ValuePtr& cls_value, PyObject* cls, PyObject* name,
                               PyObject* after, PyObject* descr) {
  const char* n = PyUnicode_AsUTF8(name);
  if (PyFunction_Check(descr)) {  // a method: bound to the instance; through the class, the function
    // Kept with its register: its defaults are read (and guarded) through it when used.
    int reg = classAttrReg(t, cls, name, after);
    if (reg >= 0) t.guards().checkIdentity(reg, descr);
    if (!self) return Value::callable(descr, reg);
    return Value::boundMethod(self, descr, reg);
  }
  if (isCacheWrapper(descr)) {  // functools.lru_cache on a method: it binds like the function it wraps
    guardClassAttr(t, cls, name, after, descr);
    if (!self) return Value::callable(descr);
    return Value::boundMethod(self, descr);
  }
  if (Py_IS_TYPE(descr, &PyStaticMethod_Type)) {
    guardClassAttr(t, cls, name, after, descr);
    Ref fn = Ref::steal(PyObject_GetAttrString(descr, "__func__"));
    if (!fn) return t.failFromPython("staticmethod");
    Result<ValuePtr> f = t.wrap(fn.get(), -1);
    if (!f) return f;
    return f;
  }
  if (Py_IS_TYPE(descr, &PyClassMethod_Type)) {
    guardClassAttr(t, cls, name, after, descr);
    Ref fn = Ref::steal(PyObject_GetAttrString(descr, "__func__"));
    if (!fn) return t.failFromPython("classmethod");
    if (!PyFunction_Check(fn.get())) return t.fail(std::string("classmethod '") + n + "' of a non-function");
    return Value::boundMethod(cls_value ? cls_value : Value::callable(cls), fn.get());
  }
  if (PyObject* get = pythonDescrGet(descr))
    return inlineDescrGet(t, get, cls, name, after, descr, self ? self : Value::constant(Py_None), cls);
  if (!Py_TYPE(descr)->tp_descr_get) return plainClassAttr(t, cls, name, after, descr);
  if (!self) {
    // A C descriptor read through the class: its __get__(None, cls) is C code that returns
    // the descriptor itself (property, method/wrapper/member descriptors) or binds it to
    // the class (classmethod_descriptor: dict.fromkeys).
    Ref v = Ref::steal(Py_TYPE(descr)->tp_descr_get(descr, nullptr, cls));
    if (!v) return t.raisePython();
    if (v.get() == descr) return plainClassAttr(t, cls, name, after, descr);
    guardClassAttr(t, cls, name, after, descr);
    if (isConstantObject(v.get())) return Value::constant(v.get());
    return Value::callable(v.get());
  }
  if (descr == objectSlot("__init__")) return Value::callable(descr);  // object.__init__: a no-op on our objects
  const Object* owned = self->get<Object>();
  if (owned && owned->owned) {
    // A C method of an object the trace made (BaseException.__init__ through super()):
    // bound and later called for real, on constants only.
    Ref bound = Ref::steal(Py_TYPE(descr)->tp_descr_get(descr, owned->obj.get(), cls));
    if (!bound) return t.failFromPython("binding a method");
    return Value::of(Callable{std::move(bound), true});
  }
  if (PyObject_TypeCheck(descr, &PyMethodDescr_Type) || PyObject_TypeCheck(descr, &PyWrapperDescr_Type)) {
    // A C method of a builtin base (object.__getattribute__/__setattr__, dict.get, ...):
    // called later with the receiver first, as the class would call it.
    guardClassAttr(t, cls, name, after, descr);
    return Value::boundMethod(self, descr);
  }
  return t.fail(std::string("class attribute '") + n + "' of type " + Py_TYPE(descr)->tp_name + " is not supported yet");
}

// type.__dict__['__dict__'] (borrowed): what `cls.__dict__` reads for any class whose
// metaclass does not define __dict__ itself.
PyObject* typeDictDescriptor() {
  static PyObject* descr = PyDict_GetItemString(typeDict(&PyType_Type), "__dict__");
  return descr;
}

// Attributes of a class (Cls.attr, type(self).attr, cls.attr in a classmethod): the
// metaclass's data descriptors, then the class's MRO with __get__(None, cls), then the
// metaclass's own attributes (type's __name__, __mro__, ...).
Result<ValuePtr> classGetAttr(Tracer& t, const ValuePtr& cls_value, PyObject* name, PyObject* after) {
  const char* n = PyUnicode_AsUTF8(name);
  PyObject* cls = cls_value->real();
  PyObject* meta = reinterpret_cast<PyObject*>(Py_TYPE(cls));
  PyObject* meta_descr = lookupInMro(meta, name, nullptr);
  // type's own C attributes (__name__, __qualname__, __mro__, __bases__, __dict__, __doc__,
  // __class__, ...): read for real.
  auto realAttr = [&]() -> Result<ValuePtr> {
    Ref v = Ref::steal(PyObject_GetAttr(cls, name));
    if (!v) {
      if (PyErr_ExceptionMatches(PyExc_AttributeError)) return t.raisePython();
      return t.failFromPython(std::string("attribute '") + n + "' of a class");
    }
    if (isConstantObject(v.get())) return Value::constant(v.get());
    if (PyTuple_CheckExact(v.get())) return t.wrap(v.get(), -1);  // __mro__, __bases__: classes
    if (PyType_Check(v.get())) return Value::callable(v.get());
    return t.fail(std::string("attribute '") + n + "' of a class (" + Py_TYPE(v.get())->tp_name + ") is not supported yet");
  };
  if (meta_descr && Py_TYPE(meta_descr)->tp_descr_set) {  // a data descriptor of the metaclass wins
    if (PyObject_TypeCheck(meta_descr, &PyProperty_Type)) {
      Ref fget = Ref::steal(PyObject_GetAttrString(meta_descr, "fget"));
      if (!fget || fget.get() == Py_None) return PyErr_Clear(), t.fail(std::string("property '") + n + "' has no getter");
      guardClassAttr(t, meta, name, nullptr, meta_descr);
      Result<ValuePtr> fget_value = getterValue(t, fget.get());
      if (!fget_value) return fget_value;
      return call(t, fget_value.take(), {cls_value}, {});
    }
    if (pythonDescrGet(meta_descr))
      return t.fail(std::string("metaclass attribute '") + n + "' of type " + Py_TYPE(meta_descr)->tp_name + " is not supported yet");
    if (!after && meta_descr == typeDictDescriptor()) {
      // cls.__dict__ (type's own getset descriptor): a mappingproxy of the class dict. The
      // dict, read through the class-dict register (its keys guarded, each value read
      // through its key), as a dict value whose type is mappingproxy: read-only (a store
      // raises TypeError, dict's mutating methods do not exist on it), handed back as a
      // new mappingproxy of the very class dict, as each `cls.__dict__` is.
      PyTypeObject* ct = reinterpret_cast<PyTypeObject*>(cls);
      if (!typeDict(ct)) return realAttr();
      for (const auto& [reg, value] : t.wrappedValues())  // stores pending on the class: the dict does not show them yet
        if (value->real() == cls && t.effects().anyAttrOverlayOf(reg))
          return t.fail("a class's __dict__ read after the trace set its attributes is not supported yet");
      t.class_dicts_read.insert(cls);
      int d = t.guards().loadClassDict(ct, std::string(ct->tp_name) + ".__dict__");
      return t.wrapDictItems(typeDict(ct), d, reinterpret_cast<PyObject*>(&PyDictProxy_Type));
    }
    if (!after) return realAttr();
  }
  if (PyObject* descr = lookupInMro(cls, name, after)) return bindClassAttr(t, nullptr, cls_value, cls, name, after, descr);
  if (after) return noAttribute(t, cls, n, true);
  if (meta_descr && PyFunction_Check(meta_descr)) {  // a method of the metaclass
    guardClassAttr(t, meta, name, nullptr, meta_descr);
    return Value::boundMethod(cls_value, meta_descr);
  }
  if (meta_descr && pythonDescrGet(meta_descr))
    return t.fail(std::string("metaclass attribute '") + n + "' of type " + Py_TYPE(meta_descr)->tp_name + " is not supported yet");
  if (!meta_descr) {
    PyObject* getattr = lookupInMro(meta, interned(Str::dunder_getattr), nullptr);
    if (getattr && PyFunction_Check(getattr)) return t.inlineFunction(getattr, -1, {cls_value, Value::constant(name)}, {});
    return noAttribute(t, cls, n, true);
  }
  return realAttr();
}



// A module's parameter, buffer and submodule dicts and its __dict__ hold what setattr and
// delattr change. Stores and deletions on a module from the program are replayed as
// setattr/delattr after the graph (the trace sees them through overlays), so the trace may
// not also read one of those dicts whole (named_parameters(), children(), vars()): it
// would see them stale, or its own copy would go stale.
bool isModuleStateDict(PyObject* name) {
  for (const char* n : {"_parameters", "_buffers", "_modules", "__dict__"})
    if (PyUnicode_CompareWithASCIIString(name, n) == 0) return true;
  return false;
}


bool isModuleGetattr(PyObject* fn) {
  PyObject* module = lookup(Obj::torch_nn_Module);
  if (!module) return PyErr_Clear(), false;
  return fn == lookupInMro(module, interned(Str::dunder_getattr), nullptr);
}

}  // namespace

void guardClassAttributeOf(Tracer& t, const ValuePtr& self, PyObject* name) {
  PyObject* real = self->real();
  if (self->reg < 0 || !real) return;
  PyObject* type = reinterpret_cast<PyObject*>(Py_TYPE(real));
  PyObject* descr = lookupInMro(type, name, nullptr);
  if (!descr) return;
  guardNotInInstance(t, self, name);
  guardClassAttr(t, type, name, nullptr, descr);
}

// object.__getattribute__(self, name) (Python's generic lookup) on an instance: data
// descriptors of the class, the instance's own attributes, the class's other attributes,
// and __getattr__ last.
Result<ValuePtr> genericGetAttr(Tracer& t, const ValuePtr& self, PyObject* name, PyObject* after, bool with_getattr) {
  const char* n = PyUnicode_AsUTF8(name);
  PyObject* cls = nullptr;
  if (self->is(Kind::Module)) cls = reinterpret_cast<PyObject*>(Py_TYPE(self->real()));
  else if (isUserObject(self)) cls = classOf(self);
  if (!cls) return t.fail(std::string("attribute '") + n + "\' of " + describe(self) + " is not supported yet");
  PyObject* descr = lookupInMro(cls, name, after);
  if (descr && Py_TYPE(descr)->tp_descr_set) {  // a data descriptor: it wins over the instance
    if (PyObject_TypeCheck(descr, &PyProperty_Type)) {
      Ref fget = Ref::steal(PyObject_GetAttrString(descr, "fget"));
      if (!fget || fget.get() == Py_None) return PyErr_Clear(), t.fail(std::string("property '") + n + "' has no getter");
      guardClassAttr(t, cls, name, after, descr);
      PyObject* getter = PyInstanceMethod_Check(fget.get()) ? PyInstanceMethod_GET_FUNCTION(fget.get()) : fget.get();
      if (PyCFunction_Check(getter) && self->real() && self->reg >= 0 && !self->is(Kind::Module)) {
        // A C getter (a pybind11 readonly field, GuardDebugInfo.result): C code, read for
        // real and guarded, as getset descriptors are.
        Ref v = Ref::steal(PyObject_GetAttr(self->real(), name));
        if (!v) {
          if (PyErr_ExceptionMatches(PyExc_AttributeError)) return t.raisePython();
          return t.failFromPython(std::string("attribute '") + n + "'");
        }
        return t.wrap(v.get(), t.load(LoadKind::Attr, self->reg, 0, name, t.guards().sourceName(self->reg) + "." + n));
      }
      Result<ValuePtr> fget_value = getterValue(t, fget.get());
      if (!fget_value) return fget_value;
      return call(t, fget_value.take(), {self}, {});
    }
    if (descr == objectSlot("__class__")) return Value::callable(cls);  // the type, guarded by the reader
    if (PyObject* get = pythonDescrGet(descr)) return inlineDescrGet(t, get, cls, name, after, descr, self, cls);
    if (const NewObject* o = self->get<NewObject>()) {
      if (PyUnicode_CompareWithASCIIString(name, "__dict__") == 0) return o->attrs;
      if (Py_IS_TYPE(descr, &PyMemberDescr_Type)) {  // a __slots__ member: kept with the attributes
        const Dict& attrs = o->attrs->as<Dict>();
        int k = attrs.findKey(name);
        if (k >= 0) return attrs.values[static_cast<size_t>(k)];
        return noAttribute(t, cls, n, false);
      }
      return t.fail(std::string("attribute '") + n + "' (a " + Py_TYPE(descr)->tp_name + ") of an object made in the trace");
    }
    if (!self->real()) return t.fail(std::string("attribute '") + n + "\' of " + describe(self));
    // __slots__ members and C getset descriptors (an exception's args): C code, read for
    // real and guarded when the object comes from the program.
    Ref v = Ref::steal(PyObject_GetAttr(self->real(), name));
    if (!v) {
      if (PyErr_ExceptionMatches(PyExc_AttributeError)) return t.raisePython();
      return t.failFromPython(std::string("attribute '") + n + "'");
    }
    int reg = self->reg >= 0 ? t.load(LoadKind::Attr, self->reg, 0, name, t.guards().sourceName(self->reg) + "." + n) : -1;
    return t.wrap(v.get(), reg);
  }
  // An attribute of an object from the program deleted earlier in the trace: the instance
  // (and a module's parameters, buffers and submodules) no longer has it.
  const bool deleted = !after && t.effects().attrDeleted(self->reg, name);
  if (!after && self->is(Kind::Module) && isModuleStateDict(name) && t.effects().anyAttrOverlayOf(self->reg))
    return t.fail(std::string("reading a module's ") + n + " after the trace set or deleted its attributes is not supported yet");
  if (!after && !deleted) {  // the instance's own attributes (super() skips them)
    if (const NewObject* o = self->get<NewObject>()) {
      if (PyUnicode_CompareWithASCIIString(name, "__dict__") == 0) return o->attrs;
      const Dict& attrs = o->attrs->as<Dict>();
      int k = attrs.findKey(name);
      if (k >= 0) return attrs.values[static_cast<size_t>(k)];
    } else if (self->real()) {
      PyObject** dictptr = _PyObject_GetDictPtr(self->real());
      if (ValuePtr aliased = aliasedInstanceDict(t, self)) {
        const Dict& attrs = aliased->as<Dict>();
        int k = attrs.findKey(name);
        if (k == -2) return t.failFromPython("an attribute");
        if (k >= 0) return attrs.values[static_cast<size_t>(k)];
      } else if (dictptr && *dictptr) {
        PyObject* v = PyDict_GetItemWithError(*dictptr, name);
        if (v) {
          int reg = self->reg >= 0 ? t.load(LoadKind::InstanceDict, self->reg, 0, name, t.guards().sourceName(self->reg) + "." + n) : -1;
          return t.wrap(v, reg);
        }
        if (PyErr_Occurred()) return t.failFromPython("an instance attribute");
      }
    }
  }
  if (descr) {
    if (!after) guardNotInInstance(t, self, name);
    return bindClassAttr(t, self, nullptr, cls, name, after, descr);
  }
  if (!with_getattr) {
    if (!after) guardNotInInstance(t, self, name);
    return noAttribute(t, cls, n, false);
  }
  PyObject* getattr = lookupInMro(cls, interned(Str::dunder_getattr), nullptr);
  if (self->is(Kind::Module) && (!getattr || isModuleGetattr(getattr))) {  // nn.Module.__getattr__
    if (deleted) return noAttribute(t, cls, n, false);
    Result<ValuePtr> r = moduleDictsAttr(t, self, name);
    if (!r.notHandled()) return r;
    guardNotInInstance(t, self, name);
    static const Str kDicts[] = {Str::underscore_parameters, Str::underscore_buffers, Str::underscore_modules};
    for (Str d : kDicts) {  // absent from each, guarded (a dict the trace holds guards its own keys)
      PyObject* dict = instanceDictItem(self->real(), PyUnicode_AsUTF8(interned(d)));
      if (!dict || t.wrappedValueOf(dict)) continue;
      int dreg = t.load(LoadKind::InstanceDict, self->reg, 0, interned(d),
                        t.guards().sourceName(self->reg) + "." + PyUnicode_AsUTF8(interned(d)));
      t.guards().checkNoInstanceAttr(dreg, name);
    }
    return noAttribute(t, cls, n, false);
  }
  guardNotInInstance(t, self, name);
  if (getattr && PyFunction_Check(getattr))
    return t.inlineFunction(getattr, -1, {self, Value::constant(name)}, {});
  return noAttribute(t, cls, n, false);
}

Result<ValuePtr> objectGetAttr(Tracer& t, const ValuePtr& obj, PyObject* name) {
  ValuePtr stored = t.effects().overlayAttr(obj->reg, name);
  if (stored && stored != SideEffects::deleted()) return stored;
  if (const Super* sup = obj->get<Super>()) {
    if (sup->self->is(Kind::Callable) && PyType_Check(sup->self->real()))  // super() in a classmethod
      return classGetAttr(t, sup->self, name, sup->after.get());
    return genericGetAttr(t, sup->self, name, sup->after.get(), false);
  }
  if (obj->is(Kind::Callable) && PyType_Check(obj->real())) return classGetAttr(t, obj, name, nullptr);
  PyObject* cls = obj->is(Kind::Module) ? reinterpret_cast<PyObject*>(Py_TYPE(obj->real()))
                                        : isUserObject(obj) ? classOf(obj) : nullptr;
  if (cls) {
    // A class's own __getattribute__ decides every read: inlined (its
    // super().__getattribute__ is the generic lookup); __getattr__ when it raises
    // AttributeError.
    PyObject* ga = lookupInMro(cls, interned(Str::dunder_getattribute), nullptr);
    // A C __getattribute__ (a slot wrapper in the dict of every C base, e.g. BaseException)
    // is the generic lookup when its type's slot is.
    bool generic = !ga || ga == objectSlot("__getattribute__") ||
                   (PyObject_TypeCheck(ga, &PyWrapperDescr_Type) &&
                    PyDescr_TYPE(ga)->tp_getattro == PyObject_GenericGetAttr);
    if (!generic && !PyFunction_Check(ga) && obj->is(Kind::Object) && obj->reg >= 0 && !obj->as<Object>().owned &&
        !basePart(obj)) {
      // A C __getattribute__ of a builtin base (typing's and other C types'): C code, read
      // for real and guarded.
      if (stored) return t.fail("an attribute deleted in the trace, read through a C __getattribute__");
      const char* n = PyUnicode_AsUTF8(name);
      Ref v = Ref::steal(PyObject_GetAttr(obj->real(), name));
      if (!v) {
        if (PyErr_ExceptionMatches(PyExc_AttributeError)) return t.raisePython();
        return t.failFromPython(std::string("attribute '") + n + "'");
      }
      return t.wrap(v.get(), t.load(LoadKind::Attr, obj->reg, 0, name, t.guards().sourceName(obj->reg) + "." + n));
    }
    if (!generic) {
      if (!PyFunction_Check(ga))
        return t.fail(std::string("a class whose __getattribute__ is a ") + Py_TYPE(ga)->tp_name + " is not supported yet");
      guardClassAttr(t, cls, interned(Str::dunder_getattribute), nullptr, ga);
      Result<ValuePtr> r = t.inlineFunction(ga, -1, {obj, Value::constant(name)}, {});
      PyObject* getattr = lookupInMro(cls, interned(Str::dunder_getattr), nullptr);
      if (r || !getattr || !PyFunction_Check(getattr) || !takeAttributeError(t, r)) return r;
      return t.inlineFunction(getattr, -1, {obj, Value::constant(name)}, {});
    }
  }
  return genericGetAttr(t, obj, name, nullptr, true);
}

Result<ValuePtr> namedTupleClassAttr(Tracer& t, const ValuePtr& self, PyObject* cls, PyObject* name) {
  PyObject* descr = lookupInMro(cls, name, nullptr);
  if (!descr) return notHandled();
  // Only what a class above tuple defines (tuple's own C methods stay the container's).
  PyObject* in_tuple = PyDict_GetItemWithError(typeDict(&PyTuple_Type), name);
  if (in_tuple == descr) return notHandled();
  if (PyErr_Occurred()) return t.failFromPython("tuple attribute lookup");
  if (PyObject_TypeCheck(descr, &PyProperty_Type)) {  // a property of the class: its getter on the tuple
    Ref fget = Ref::steal(PyObject_GetAttrString(descr, "fget"));
    if (!fget || fget.get() == Py_None)
      return PyErr_Clear(), t.fail(std::string("property '") + PyUnicode_AsUTF8(name) + "' has no getter");
    guardClassAttr(t, cls, name, nullptr, descr);
    Result<ValuePtr> fget_value = getterValue(t, fget.get());
    if (!fget_value) return fget_value;
    return call(t, fget_value.take(), {self}, {});
  }
  return bindClassAttr(t, self, nullptr, cls, name, nullptr, descr);
}

Result<ValuePtr> namedTupleDunder(Tracer& t, const ValuePtr& self, PyObject* name, std::vector<ValuePtr> args) {
  const Tuple* tup = self->get<Tuple>();
  if (!tup || !tup->namedtuple) return notHandled();
  PyObject* cls = tup->namedtuple.get();
  PyObject* fn = lookupInMro(cls, name, nullptr);
  if (!fn || !PyFunction_Check(fn)) return notHandled();  // tuple's C slot: the container's operation
  guardClassAttr(t, cls, name, nullptr, fn);
  args.insert(args.begin(), self);
  return t.inlineFunction(fn, -1, std::move(args), {});
}

PyObject* classOf(const ValuePtr& v) {
  if (const NewObject* o = v->get<NewObject>()) return o->cls.get();
  return reinterpret_cast<PyObject*>(Py_TYPE(v->real()));
}

// Looks `name` up in the MRO of `type`, starting after `after` (super()) when given.
// Borrowed, or null.
PyObject* lookupInMro(PyObject* type, PyObject* name, PyObject* after) {
  PyObject* mro = reinterpret_cast<PyTypeObject*>(type)->tp_mro;
  if (!mro) return nullptr;
  Py_ssize_t start = 0;
  if (after) {
    for (Py_ssize_t i = 0; i < PyTuple_GET_SIZE(mro); ++i)
      if (PyTuple_GET_ITEM(mro, i) == after) start = i + 1;
  }
  for (Py_ssize_t i = start; i < PyTuple_GET_SIZE(mro); ++i) {
    PyObject* dict = typeDict(reinterpret_cast<PyTypeObject*>(PyTuple_GET_ITEM(mro, i)));
    PyObject* v = dict ? PyDict_GetItemWithError(dict, name) : nullptr;
    if (v) return v;
    PyErr_Clear();
  }
  return nullptr;
}

bool isPlainPythonClass(PyObject* cls) {
  PyTypeObject* type = reinterpret_cast<PyTypeObject*>(cls);
  if (!(type->tp_flags & Py_TPFLAGS_HEAPTYPE)) return false;
  // Instances made with object.__new__ and no metaclass magic.
  return type->tp_new == PyBaseObject_Type.tp_new || lookupInMro(cls, interned(Str::dunder_new), nullptr) ==
                                                      PyDict_GetItemString(typeDict(&PyBaseObject_Type), "__new__");
}

// A Python class whose instances object.__new__ makes: no builtin base below its Python
// classes (its own Python __new__ or not), not abstract.
bool madeByObjectNew(PyObject* cls) {
  PyTypeObject* type = reinterpret_cast<PyTypeObject*>(cls);
  if (!(type->tp_flags & Py_TPFLAGS_HEAPTYPE) || (type->tp_flags & Py_TPFLAGS_IS_ABSTRACT)) return false;
  PyTypeObject* solid = type;
  while (solid && isPythonClass(solid)) solid = solid->tp_base;
  return solid == &PyBaseObject_Type;
}

PyObject* objectSlot(const char* name) { return PyDict_GetItemString(typeDict(&PyBaseObject_Type), name); }

// The class attribute, guarded to stay this very object.
void guardClassAttr(Tracer& t, PyObject* type, PyObject* name, PyObject* after, PyObject* descr) {
  int reg = classAttrReg(t, type, name, after);
  if (reg >= 0) t.guards().checkIdentity(reg, descr);
}

// The instance has no attribute `name` of its own, guarded (a class attribute read through
// it is not shadowed; an absent attribute stays absent).
void guardNotInInstance(Tracer& t, const ValuePtr& self, PyObject* name) {
  if (self->reg < 0 || !self->real() || (!self->is(Kind::Object) && !self->is(Kind::Module))) return;
  // Deleted in the trace: the real instance still has it when the guards run (its
  // presence was guarded where the deletion found it).
  if (t.effects().attrDeleted(self->reg, name)) return;
  t.guards().checkNoInstanceAttr(self->reg, name);
}

Done checkModuleStateNotRead(Tracer& t, const ValuePtr& module) {
  PyObject** dictptr = _PyObject_GetDictPtr(module->real());
  if (!dictptr || !*dictptr) return {};
  if (t.wrappedValueOf(*dictptr)) return t.fail("setattr/delattr on a module whose __dict__ the trace has read");
  for (const char* n : {"_parameters", "_buffers", "_modules"}) {
    PyObject* d = PyDict_GetItemString(*dictptr, n);
    if (d && t.wrappedValueOf(d))
      return t.fail(std::string("setattr/delattr on a module whose ") + n + " the trace has read whole");
  }
  return {};
}

// Module instance attributes that nn.Module's __getattr__ finds: parameters, buffers,
// submodules. NotHandled when none has `name`.
Result<ValuePtr> moduleDictsAttr(Tracer& t, const ValuePtr& obj, PyObject* name) {
  PyObject* m = obj->real();
  const char* n = PyUnicode_AsUTF8(name);
  static const Str kDicts[] = {Str::underscore_parameters, Str::underscore_buffers, Str::underscore_modules};
  for (Str d : kDicts) {
    const char* dname = PyUnicode_AsUTF8(interned(d));
    PyObject* dict = instanceDictItem(m, dname);
    if (!dict || !PyDict_Check(dict)) continue;
    // The program has read this dict as a dict (functional_call's accessor swaps tensors in
    // through module._parameters[name] = t): the trace's value holds its items now, which a
    // read of the real dict would miss.
    if (ValuePtr traced = t.wrappedValueOf(dict); traced && traced->is(Kind::Dict)) {
      const Dict& items = traced->as<Dict>();
      int k = items.findKey(name);
      if (k == -2) return t.failFromPython("module attribute");
      if (k >= 0) return items.values[static_cast<size_t>(k)];
      continue;
    }
    PyObject* v = PyDict_GetItemWithError(dict, name);
    if (!v) {
      if (PyErr_Occurred()) return t.failFromPython("module attribute");
      continue;
    }
    int dreg = t.load(LoadKind::InstanceDict, obj->reg, 0, interned(d), t.guards().sourceName(obj->reg) + "." + dname);
    int reg = t.load(LoadKind::DictItem, dreg, 0, name, t.guards().sourceName(dreg) + "['" + n + "']");
    return t.wrap(v, reg);
  }
  return notHandled();
}

// The Dict value the trace holds for the instance dict of `obj` (an Object from the
// program) when the program read it as a dict (obj.__dict__, vars(obj) before a break), or
// null. Attribute reads and stores of `obj` then go through that value, so a write through
// one view is seen through the other; on later calls the guard checks that the dict still
// is the object's __dict__.
ValuePtr aliasedInstanceDict(Tracer& t, const ValuePtr& obj) {
  PyObject** dictptr = _PyObject_GetDictPtr(obj->real());
  if (!dictptr || !*dictptr) return nullptr;
  ValuePtr d = t.wrappedValueOf(*dictptr);
  if (!d || !d->is(Kind::Dict) || d->reg < 0) return nullptr;
  if (obj->reg >= 0) {
    int dreg = t.load(LoadKind::Attr, obj->reg, 0, interned(Str::dunder_dict), t.guards().sourceName(obj->reg) + ".__dict__");
    if (dreg != d->reg) t.guards().checkAliasing(d->reg, dreg, true);
  }
  return d;
}

// The plan of a module, callable, Python module or object: the object read from the program itself, or one made for real in the trace (OutputPlanner::plan).
namespace {

// Whether `exc` (and the exceptions it chains to) can be made again from what it holds:
// constant arguments and attributes, and a class whose construction runs no Python code
// beyond an __init__ whose effect is its __dict__ (so the copy needs only that __dict__).
// Its traceback, the trace's own, is dropped (a fresh object has none until raised).
bool rebuildableException(PyObject* exc, int depth, std::string* why) {
  if (depth > 16) return *why = "a chain of exceptions too long", false;
  PyTypeObject* cls = Py_TYPE(exc);
  PyObject* init = nullptr;
  PyTypeObject* c_base = nullptr;
  for (Py_ssize_t i = 0; cls->tp_mro && i < PyTuple_GET_SIZE(cls->tp_mro); ++i) {
    PyTypeObject* k = reinterpret_cast<PyTypeObject*>(PyTuple_GET_ITEM(cls->tp_mro, i));
    PyObject* f = typeDict(k) ? PyDict_GetItemString(typeDict(k), "__init__") : nullptr;
    if (f && !init) init = f;
    if (PyDict_GetItemString(typeDict(k), "__new__") && PyFunction_Check(PyDict_GetItemString(typeDict(k), "__new__")))
      return *why = "an exception class with a Python __new__", false;
    if (!c_base && !(k->tp_flags & Py_TPFLAGS_HEAPTYPE)) c_base = k;
  }
  // A Python __init__ over a C base whose own initialiser stores more than .args (OSError,
  // StopIteration.value, ...) leaves C state that the __dict__ does not hold.
  if (init && PyFunction_Check(init) && c_base &&
      c_base->tp_init != reinterpret_cast<PyTypeObject*>(PyExc_BaseException)->tp_init &&
      c_base != reinterpret_cast<PyTypeObject*>(PyExc_Exception))
    return *why = std::string("an exception whose Python __init__ runs over ") + c_base->tp_name, false;
  Ref args = Ref::steal(PyObject_GetAttrString(exc, "args"));
  if (!args || !isConstantObject(args.get())) return PyErr_Clear(), *why = "an exception with non-constant arguments", false;
  PyObject** dictptr = _PyObject_GetDictPtr(exc);
  if (dictptr && *dictptr) {
    PyObject *k, *val;
    Py_ssize_t pos = 0;
    while (PyDict_Next(*dictptr, &pos, &k, &val))
      if (!isConstantObject(val)) return *why = "an exception with a non-constant attribute", false;
  }
  PyException_SetTraceback(exc, Py_None);
  for (PyObject* link : {PyException_GetContext(exc), PyException_GetCause(exc)}) {
    Ref owned = Ref::steal(link);
    if (link && link != exc && !rebuildableException(link, depth + 1, why)) return false;
  }
  return true;
}

}  // namespace

// An exception the trace made, returned: made anew on each call from a copy kept as the
// plan's constant (frame_rebuild.rebuild_exception), as eager makes a new one each call.
Done rebuildException(OutputPlanner& p, PyObject* exc, runtime::OutputPlan* out) {
  namespace P = runtime::plan;
  std::string why;
  if (!rebuildableException(exc, 0, &why)) return p.tracer().fail("returning " + why + " is not supported yet");
  PyObject* rebuild = lookup(Obj::cdynamo_resume_rebuild_exception);
  if (!rebuild) return p.tracer().failFromPython("rebuild_exception");
  std::vector<runtime::OutputPlan> args;
  args.push_back(runtime::OutputPlan::constant(exc));
  out->step = P::Call{Ref::borrow(rebuild), std::move(args)};
  return {};
}

Done rebuildProgramObject(OutputPlanner& p, const ValuePtr& v, runtime::OutputPlan* out) {
  namespace P = runtime::plan;
  if (v->reg >= 0) {
    out->step = P::Register{v->reg};
    return {};
  }
  if (v->is(Kind::Callable) || v->is(Kind::PyModule)) {  // e.g. type(x): a stable object
    out->step = P::Constant{Ref::borrow(v->real())};
    return {};
  }
  if (v->is(Kind::Object) && !v->as<Object>().owned &&
      strcmp(Py_TYPE(v->real())->tp_name, "types.UnionType") == 0) {
    // A union type made in the trace (int | None): made again from its members as eager
    // makes it, a new object each call (or_(or_(a, b), c)); they are classes, aliases
    // and type variables, which outlive the trace.
    Ref members = Ref::steal(PyObject_GetAttrString(v->real(), "__args__"));
    PyObject* or_ = lookup(Obj::operator_or_);
    if (!members || !or_ || !PyTuple_Check(members.get()) || PyTuple_GET_SIZE(members.get()) < 2)
      return p.tracer().failFromPython("the members of a union type");
    runtime::OutputPlan acc = runtime::OutputPlan::constant(PyTuple_GET_ITEM(members.get(), 0));
    for (Py_ssize_t i = 1; i < PyTuple_GET_SIZE(members.get()); ++i) {
      std::vector<runtime::OutputPlan> args;
      args.push_back(std::move(acc));
      args.push_back(runtime::OutputPlan::constant(PyTuple_GET_ITEM(members.get(), i)));
      acc = P::Call{Ref::borrow(or_), std::move(args)};
    }
    *out = std::move(acc);
    return {};
  }
  if (v->is(Kind::Object) && v->as<Object>().owned && PyExceptionInstance_Check(v->real()))
    return rebuildException(p, v->real(), out);
  return p.unsupported(v);
}

// The plan of an instance made in the trace: its class, its items (a container subclass) and its attributes (OutputPlanner::plan).
Done rebuildNewObject(OutputPlanner& p, const ValuePtr& v, runtime::OutputPlan* out) {
  namespace P = runtime::plan;
  // Planned in the order the runtime builds them (items, then attributes): a value
  // reachable from both (a ModelOutput's field is an item and an attribute) is built
  // in full where it is reached first and read from the memo after.
  const NewObject& o = v->as<NewObject>();
  std::unique_ptr<runtime::OutputPlan> items;
  Ref base_type;
  if (o.base && o.base->is(Kind::Dict)) {  // a dict subclass instance: its items, rebuilt as a plain dict first
    const Dict& part = o.base->as<Dict>();
    P::Dict dict{Ref::borrow(reinterpret_cast<PyObject*>(&PyDict_Type)), Ref(), {}, {}};
    for (const Ref& k : part.keys) dict.keys.push_back(k.copy());
    if (Done d = p.planAll(part.values, &dict.values); !d) return d;
    items = std::make_unique<runtime::OutputPlan>(std::move(dict));
    base_type = part.type.copy();
  } else if (o.base && o.base->is(Kind::Set)) {  // a set or frozenset subclass instance: its items as a plain one
    const Set& part = o.base->as<Set>();
    std::vector<runtime::OutputPlan> parts;
    if (Done d = p.planAll(setIterationOrder(part), &parts); !d) return d;
    items = std::make_unique<runtime::OutputPlan>(P::Set{std::move(parts), part.frozen});
    base_type = Ref::borrow(reinterpret_cast<PyObject*>(part.frozen ? &PyFrozenSet_Type : &PySet_Type));
  } else if (o.base) {  // a tuple or list subclass instance: its items as a plain tuple or list
    std::vector<runtime::OutputPlan> parts;
    if (Done d = p.planAll(*o.base->elements(), &parts); !d) return d;
    bool tuple = o.base->is(Kind::Tuple);
    items = tuple ? std::make_unique<runtime::OutputPlan>(P::Tuple{std::move(parts)})
                  : std::make_unique<runtime::OutputPlan>(P::List{std::move(parts)});
    base_type = Ref::borrow(reinterpret_cast<PyObject*>(tuple ? &PyTuple_Type : &PyList_Type));
  }
  auto attrs = std::make_unique<runtime::OutputPlan>();
  if (Done d = p.plan(o.attrs, attrs.get()); !d) return d;
  out->step = P::NewObject{o.cls.copy(), std::move(attrs), std::move(base_type), std::move(items)};
  return {};
}

}  // namespace cdynamo::trace
