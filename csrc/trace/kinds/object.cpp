// User-defined classes. An object read from the program (Kind::Object) is guarded by its
// exact type and read live (instance __dict__ entries become guard loads); an object made
// in the trace (Kind::NewObject) keeps its attributes as values and is rebuilt if it
// escapes. Attribute lookup follows Python: data descriptors of the class (property),
// then the instance, then the class (methods, staticmethod, classmethod, constants).
#include <cstring>
#include <string>

#include "support/lookup.h"
#include "support/torch_types.h"
#include "trace/kinds/iterator.h"
#include "trace/kinds/namespace.h"
#include "trace/kinds/object.h"
#include "trace/kinds/set.h"
#include "trace/protocol/attributes.h"
#include "trace/protocol/binary_rules.h"
#include "trace/protocol/calls.h"
#include "trace/protocol/constants.h"
#include "trace/protocol/container_methods.h"
#include "trace/protocol/operators.h"
#include "trace/tracer.h"

namespace cdynamo::trace {

using guards::LoadKind;

namespace {

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
    PyObject* dict = reinterpret_cast<PyTypeObject*>(PyTuple_GET_ITEM(mro, i))->tp_dict;
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
                                                      PyDict_GetItemString(PyBaseObject_Type.tp_dict, "__new__");
}

// A Python class whose instances object.__new__ makes: no builtin base below its Python
// classes (its own Python __new__ or not), not abstract.
bool madeByObjectNew(PyObject* cls) {
  PyTypeObject* type = reinterpret_cast<PyTypeObject*>(cls);
  if (!(type->tp_flags & Py_TPFLAGS_HEAPTYPE) || (type->tp_flags & Py_TPFLAGS_IS_ABSTRACT)) return false;
  PyTypeObject* solid = type;
  while (solid && (solid->tp_flags & Py_TPFLAGS_HEAPTYPE)) solid = solid->tp_base;
  return solid == &PyBaseObject_Type;
}

// Whether the exception in flight is an AttributeError.
bool isAttributeError(Tracer& t) {
  const ValuePtr& e = t.pendingException();
  PyObject* type = e ? typeOf(t, e) : nullptr;
  return type && PyType_Check(type) &&
         PyType_IsSubtype(reinterpret_cast<PyTypeObject*>(type), reinterpret_cast<PyTypeObject*>(PyExc_AttributeError));
}

}  // namespace

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

PyObject* objectSlot(const char* name) { return PyDict_GetItemString(PyBaseObject_Type.tp_dict, name); }

// The class in `type`'s MRO (after `after`) whose __dict__ holds `name` (borrowed), or null.
PyObject* ownerInMro(PyObject* type, PyObject* name, PyObject* after) {
  PyObject* mro = reinterpret_cast<PyTypeObject*>(type)->tp_mro;
  if (!mro) return nullptr;
  Py_ssize_t start = 0;
  if (after)
    for (Py_ssize_t i = 0; i < PyTuple_GET_SIZE(mro); ++i)
      if (PyTuple_GET_ITEM(mro, i) == after) start = i + 1;
  for (Py_ssize_t i = start; i < PyTuple_GET_SIZE(mro); ++i) {
    PyObject* dict = reinterpret_cast<PyTypeObject*>(PyTuple_GET_ITEM(mro, i))->tp_dict;
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
    if (!c->tp_dict) continue;
    int cd = t.guards().loadClassDict(c, std::string(c->tp_name) + ".__dict__");
    t.guards().checkNoInstanceAttr(cd, name);
  }
  PyTypeObject* ot = reinterpret_cast<PyTypeObject*>(owner);
  int d = t.guards().loadClassDict(ot, std::string(ot->tp_name) + ".__dict__");
  return t.load(LoadKind::DictItem, d, 0, name, t.guards().sourceName(d) + "['" + PyUnicode_AsUTF8(name) + "']");
}

// The class attribute, guarded to stay this very object.
void guardClassAttr(Tracer& t, PyObject* type, PyObject* name, PyObject* after, PyObject* descr) {
  int reg = classAttrReg(t, type, name, after);
  if (reg >= 0) t.guards().checkIdentity(reg, descr);
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
    guardClassAttr(t, cls, name, after, descr);
    if (!self) return Value::callable(descr);
    return Value::boundMethod(self, descr);
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
  static PyObject* descr = PyDict_GetItemString(PyType_Type.tp_dict, "__dict__");
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
      if (!ct->tp_dict) return realAttr();
      for (const auto& [reg, value] : t.wrappedValues())  // stores pending on the class: the dict does not show them yet
        if (value->real() == cls && t.effects().anyAttrOverlayOf(reg))
          return t.fail("a class's __dict__ read after the trace set its attributes is not supported yet");
      t.class_dicts_read.insert(cls);
      int d = t.guards().loadClassDict(ct, std::string(ct->tp_name) + ".__dict__");
      return t.wrapDictItems(ct->tp_dict, d, reinterpret_cast<PyObject*>(&PyDictProxy_Type));
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

// The instance has no attribute `name` of its own, guarded (a class attribute read through
// it is not shadowed; an absent attribute stays absent).
void guardNotInInstance(Tracer& t, const ValuePtr& self, PyObject* name) {
  if (self->reg < 0 || !self->real() || (!self->is(Kind::Object) && !self->is(Kind::Module))) return;
  // Deleted in the trace: the real instance still has it when the guards run (its
  // presence was guarded where the deletion found it).
  if (t.effects().attrDeleted(self->reg, name)) return;
  t.guards().checkNoInstanceAttr(self->reg, name);
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
    for (Str d : kDicts) {  // absent from each, guarded
      if (!instanceDictItem(self->real(), PyUnicode_AsUTF8(interned(d)))) continue;
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
  PyObject* in_tuple = PyDict_GetItemWithError(PyTuple_Type.tp_dict, name);
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

// The Python __new__ a class defines (found in its MRO before its builtin base's), unwrapped
// from its staticmethod, or null when instances are made by the base's (or a namedtuple's
// generated) __new__.
PyObject* ownPythonNew(PyObject* cls) {
  PyObject* owner = nullptr;
  PyObject* mro = reinterpret_cast<PyTypeObject*>(cls)->tp_mro;
  for (Py_ssize_t i = 0; mro && i < PyTuple_GET_SIZE(mro); ++i) {
    PyObject* dict = reinterpret_cast<PyTypeObject*>(PyTuple_GET_ITEM(mro, i))->tp_dict;
    if (dict && PyDict_GetItemWithError(dict, interned(Str::dunder_new))) {
      owner = dict;
      break;
    }
    PyErr_Clear();
  }
  if (!owner) return nullptr;
  // A namedtuple class's own dict holds its generated __new__ next to _fields.
  if (PyDict_GetItemWithError(owner, interned(Str::dunder_fields))) return nullptr;
  PyErr_Clear();
  PyObject* fn = PyDict_GetItemWithError(owner, interned(Str::dunder_new));
  if (!fn) return PyErr_Clear(), nullptr;
  if (Py_IS_TYPE(fn, &PyStaticMethod_Type)) {
    Ref inner = Ref::steal(PyObject_GetAttrString(fn, "__func__"));
    if (!inner) return PyErr_Clear(), nullptr;
    fn = inner.get();  // the staticmethod in the class dict keeps it alive
  }
  return PyFunction_Check(fn) ? fn : nullptr;
}

PyTypeObject* containerBase(PyObject* cls) {
  PyTypeObject* type = reinterpret_cast<PyTypeObject*>(cls);
  while (type && PyType_HasFeature(type, Py_TPFLAGS_HEAPTYPE)) type = type->tp_base;
  if (type == &PyDict_Type || type == &PyTuple_Type || type == &PyList_Type) return type;
  PyObject* odict = lookup(Obj::collections_OrderedDict);
  if (!odict) return PyErr_Clear(), nullptr;
  return type == reinterpret_cast<PyTypeObject*>(odict) ? type : nullptr;
}

ValuePtr basePart(const ValuePtr& v) {
  if (const NewObject* o = v->get<NewObject>()) return o->base;
  if (const Object* o = v->get<Object>()) return o->base;
  return nullptr;
}

// cls(*args) for a subclass of a builtin container (or a namedtuple class) with its own
// Python __new__: that __new__ inlined (its super().__new__ reaches the base's C __new__ or
// the namedtuple's generated one), then a Python __init__ when the result is an instance.
Result<ValuePtr> newThroughOwnNew(Tracer& t, PyObject* cls, PyObject* own_new, Args args, Kwargs kwargs) {
  Args new_args = args;
  new_args.insert(new_args.begin(), Value::callable(cls));
  Kwargs new_kwargs;
  for (const auto& [k, v] : kwargs) new_kwargs.emplace_back(k.copy(), v);
  Result<ValuePtr> made = t.inlineFunction(own_new, -1, std::move(new_args), std::move(new_kwargs));
  if (!made) return made;
  PyObject* made_cls = typeOf(t, *made);
  PyObject* init = lookupInMro(cls, interned(Str::dunder_init), nullptr);
  if (made_cls && PyType_Check(made_cls) &&
      PyType_IsSubtype(reinterpret_cast<PyTypeObject*>(made_cls), reinterpret_cast<PyTypeObject*>(cls)) && init &&
      PyFunction_Check(init)) {
    args.insert(args.begin(), *made);
    Result<ValuePtr> r = t.inlineFunction(init, -1, std::move(args), std::move(kwargs));
    if (!r) return r;
    if (!(*r)->isNone()) return t.fail("__init__() should return None (TypeError)");
  }
  return made;
}

Result<ValuePtr> newContainerSubclassInstance(Tracer& t, PyObject* cls, ValuePtr part) {
  PyTypeObject* base = containerBase(cls);
  if (!base || (base == &PyTuple_Type) != part->is(Kind::Tuple) || (base == &PyList_Type) != part->is(Kind::List) ||
      (base == &PyDict_Type) != part->is(Kind::Dict))
    return t.fail(std::string("making an instance of ") + reinterpret_cast<PyTypeObject*>(cls)->tp_name + " from a " +
                  kindName(part->kind()));
  if (isNamedTupleClass(cls)) {  // a namedtuple class's instance is a Tuple value of that class
    part->as<Tuple>().namedtuple = Ref::borrow(cls);
    return part;
  }
  return Value::of(NewObject{Ref::borrow(cls), Value::emptyDict(), std::move(part)});
}

Result<ValuePtr> newObject(Tracer& t, PyObject* cls, std::vector<ValuePtr> args,
                                   std::vector<std::pair<Ref, ValuePtr>> kwargs) {
  const char* tn = reinterpret_cast<PyTypeObject*>(cls)->tp_name;
  // A subclass of dict/OrderedDict made with the base's own __new__: its items are a Dict
  // value (the base part), its attributes another.
  PyTypeObject* base = containerBase(cls);
  if (base) {
    if (PyObject* own_new = ownPythonNew(cls)) return newThroughOwnNew(t, cls, own_new, std::move(args), std::move(kwargs));
  }
  bool base_new = base && lookupInMro(cls, interned(Str::dunder_new), nullptr) ==
                              lookupInMro(reinterpret_cast<PyObject*>(base), interned(Str::dunder_new), nullptr);
  PyObject* own_new = !base && madeByObjectNew(cls) ? ownPythonNew(cls) : nullptr;
  if (!isPlainPythonClass(cls) && !base_new && !own_new)
    return t.fail(std::string("creating an instance of ") + tn + " (custom __new__ or a builtin base) is not supported yet");
  // An nn.Module made in the trace is an object of its class like any other: nn.Module's
  // __init__ and __setattr__ are inlined (its _parameters, _modules, hook dicts are values
  // of the trace), calling it inlines Module.__call__, and it is rebuilt with its __dict__
  // if it escapes. A parameter made in the trace stops it (torch.nn.Parameter()).
  PyObject* meta = reinterpret_cast<PyObject*>(Py_TYPE(cls));
  if (lookupInMro(meta, interned(Str::dunder_call), nullptr) !=
      lookupInMro(reinterpret_cast<PyObject*>(&PyType_Type), interned(Str::dunder_call), nullptr))
    return t.fail(std::string("creating an instance of ") + tn + ", whose metaclass has its own __call__, is not supported yet");
  if (own_new) {
    // A Python __new__ of the class's own, as type.__call__ runs it: inlined with the class
    // first (its object.__new__(cls) / super().__new__(cls) makes the instance), then
    // __init__ when what it returned is an instance of the class.
    PyObject* init = lookupInMro(cls, interned(Str::dunder_init), nullptr);
    if (init && !PyFunction_Check(init) && init != objectSlot("__init__"))
      return t.fail(std::string("creating an instance of ") + tn + ": __init__ is a " + Py_TYPE(init)->tp_name);
    return newThroughOwnNew(t, cls, own_new, std::move(args), std::move(kwargs));
  }
  if (base == &PyTuple_Type && base_new) {
    // tuple.__new__(cls, iterable=()): the items are fixed when it is made.
    if (!kwargs.empty() || args.size() > 1) return t.fail(std::string(tn) + "() with these arguments (TypeError)");
    std::vector<ValuePtr> items;
    if (!args.empty())
      if (Done d = iterate(t, args[0], &items); !d) return d.stop();
    Result<ValuePtr> made = newContainerSubclassInstance(t, cls, Value::tuple(std::move(items)));
    if (!made) return made;
    PyObject* init = lookupInMro(cls, interned(Str::dunder_init), nullptr);
    if (init && PyFunction_Check(init)) {
      args.insert(args.begin(), *made);
      Result<ValuePtr> r = t.inlineFunction(init, -1, std::move(args), std::move(kwargs));
      if (!r) return r;
      if (!(*r)->isNone()) return t.fail("__init__() should return None (TypeError)");
    } else if (init && init != objectSlot("__init__")) {
      return t.fail(std::string("creating an instance of ") + tn + ": __init__ is a " + Py_TYPE(init)->tp_name);
    }
    return made;
  }
  ValuePtr part = !base_new                ? nullptr
                  : base == &PyList_Type   ? Value::list({})
                                           : Value::dict(reinterpret_cast<PyObject*>(base), {}, {});
  ValuePtr obj = Value::of(NewObject{Ref::borrow(cls), Value::emptyDict(), part});
  PyObject* init = lookupInMro(cls, interned(Str::dunder_init), nullptr);
  if (init && PyFunction_Check(init)) {
    args.insert(args.begin(), obj);
    Result<ValuePtr> r = t.inlineFunction(init, -1, std::move(args), std::move(kwargs));
    if (!r) return r;
    if (!(*r)->isNone())
      return t.fail("__init__() should return None (TypeError)");
  } else if (part && init == lookupInMro(reinterpret_cast<PyObject*>(base), interned(Str::dunder_init), nullptr)) {
    if (!args.empty() || !kwargs.empty()) {  // dict.__init__(mapping, **kw): update; list.__init__(iterable): extend
      if (part->is(Kind::List) && (args.size() != 1 || !kwargs.empty()))
        return t.fail(std::string(tn) + "() with these arguments (TypeError)");
      Result<ValuePtr> r =
          callContainerMethod(t, part, interned(part->is(Kind::List) ? Str::extend : Str::update), args, kwargs);
      if (!r) return r;
    }
  } else if (init && init != objectSlot("__init__")) {
    return t.fail(std::string("creating an instance of ") + tn + ": __init__ is a " + Py_TYPE(init)->tp_name);
  } else if (!args.empty() || !kwargs.empty()) {
    return t.fail(std::string(tn) + "() takes no arguments (TypeError)");
  }
  return obj;
}

namespace {

// object.__reduce_ex__(self, protocol >= 2) of an instance of a plain Python class that
// keeps object's __reduce__ and __getstate__ and defines no __getnewargs(_ex)__ nor
// __slots__ (what copy.copy/deepcopy call): (copyreg.__newobj__, (cls,), state, None, None),
// `state` the instance's __dict__ itself, or None when it is empty, as CPython's
// reduce_newobj gives.
Result<ValuePtr> objectReduceEx(Tracer& t, Args& args, Kwargs& kwargs) {
  PyObject* protocol = args.size() == 2 ? args[1]->constant() : nullptr;
  if (!kwargs.empty() || !protocol || !PyLong_Check(protocol) || PyLong_AsLong(protocol) < 2)
    return PyErr_Clear(), t.fail("object.__reduce_ex__() with a protocol below 2 or not a constant");
  const ValuePtr& self = args[0];
  if (!isUserObject(self) || basePart(self)) return t.fail("object.__reduce_ex__() of a builtin or container instance");
  PyObject* cls = classOf(self);
  if (!isPlainPythonClass(cls)) return t.fail("object.__reduce_ex__() of an instance with a builtin base");
  for (const char* n : {"__reduce__", "__getstate__"}) {
    Ref name = Ref::steal(PyUnicode_InternFromString(n));
    if (!name) return t.failFromPython("object.__reduce_ex__()");
    PyObject* descr = lookupInMro(cls, name.get(), nullptr);
    if (descr != objectSlot(n)) return t.fail(std::string("object.__reduce_ex__() of a class with its own ") + n);
    guardClassAttr(t, cls, name.get(), nullptr, descr);
  }
  PyObject* mro = reinterpret_cast<PyTypeObject*>(cls)->tp_mro;
  for (Py_ssize_t i = 0; mro && i < PyTuple_GET_SIZE(mro); ++i) {
    PyObject* dict = reinterpret_cast<PyTypeObject*>(PyTuple_GET_ITEM(mro, i))->tp_dict;
    for (const char* n : {"__slots__", "__getnewargs_ex__", "__getnewargs__"})
      if (dict && PyDict_GetItemString(dict, n))
        return t.fail(std::string("object.__reduce_ex__() of a class with ") + n);
  }
  Result<ValuePtr> state = genericGetAttr(t, self, interned(Str::dunder_dict), nullptr, false);
  if (!state) return state;
  if (!(*state)->is(Kind::Dict)) return t.fail("object.__reduce_ex__(): an instance __dict__ that is not modelled");
  Ref copyreg = Ref::steal(PyImport_ImportModule("copyreg"));
  Ref newobj = Ref::steal(copyreg ? PyObject_GetAttrString(copyreg.get(), "__newobj__") : nullptr);
  if (!newobj) return t.failFromPython("copyreg.__newobj__");
  ValuePtr none = Value::constant(Py_None);
  return Value::tuple({Value::callable(newobj.get()), Value::tuple({Value::callable(cls)}),
                       (*state)->as<Dict>().keys.empty() ? none : state.take(), none, none});
}

// A C method of tuple or list called on a subclass instance whose items are `part` (a Tuple
// or List value): the container's operation on them. Comparisons and + take the other
// operand's items when it is a tuple (list) too, and answer NotImplemented otherwise, as
// tuple's C slots do.
Result<ValuePtr> sequenceBaseMethod(Tracer& t, const ValuePtr& part, PyTypeObject* owner, PyObject* name, Args& rest,
                                    Kwargs& kwargs) {
  const char* n = PyUnicode_AsUTF8(name);
  auto is = [n](const char* m) { return strcmp(n, m) == 0; };
  const Kind kind = part->kind();
  // The other operand as a plain tuple/list value, or null when it is not one.
  auto sameKindItems = [&](const ValuePtr& other) -> ValuePtr {
    PyObject* c = other->constant();
    if (kind == Kind::Tuple && c && PyTuple_Check(c)) {  // a tuple of constants
      std::vector<ValuePtr> items;
      for (Py_ssize_t i = 0; i < PyTuple_GET_SIZE(c); ++i) items.push_back(Value::constant(PyTuple_GET_ITEM(c, i)));
      return Value::tuple(std::move(items));
    }
    if (other->is(kind)) {
      if (kind == Kind::List && other->as<List>().deque) return nullptr;  // a deque is no list
      if (kind == Kind::Tuple && other->as<Tuple>().namedtuple) return Value::tuple(other->as<Tuple>().items);
      return other;
    }
    ValuePtr p = basePart(other);
    return p && p->is(kind) ? p : nullptr;
  };
  static const char* const kCompare[] = {"__lt__", "__le__", "__eq__", "__ne__", "__gt__", "__ge__"};
  for (int op = 0; op < 6; ++op) {
    if (!is(kCompare[op])) continue;
    if (rest.size() != 1 || !kwargs.empty()) return t.fail(std::string(n) + "() takes one argument (TypeError)");
    ValuePtr other = sameKindItems(rest[0]);
    if (!other) return Value::constant(Py_NotImplemented);
    return compareOp(t, op, kind == Kind::Tuple ? Value::tuple(*part->elements()) : part, other);
  }
  if (!kwargs.empty() && !(kind == Kind::List && is("sort")))
    return t.fail(std::string("keyword arguments to ") + owner->tp_name + "." + n + "()");
  if (is("__len__") && rest.empty()) return Value::constant(Ref::steal(PyLong_FromSize_t(part->elements()->size())).get());
  if (is("__getitem__") && rest.size() == 1) return subscript(t, part, rest[0]);
  if (is("__contains__") && rest.size() == 1) {
    Result<bool> r = contains(t, part, rest[0]);
    if (!r) return r.stop();
    return Value::constant(*r ? Py_True : Py_False);
  }
  if (is("__iter__") && rest.empty()) return getIter(t, part);
  if (is("__add__") && rest.size() == 1) {
    ValuePtr other = sameKindItems(rest[0]);
    if (!other) return Value::constant(Py_NotImplemented);
    std::vector<ValuePtr> items = *part->elements();
    items.insert(items.end(), other->elements()->begin(), other->elements()->end());
    return Value::sequence(kind, std::move(items));
  }
  if (kind == Kind::List) {
    if (is("__setitem__") && rest.size() == 2) {
      if (Done d = storeSubscript(t, part, rest[0], rest[1]); !d) return d.stop();
      return Value::constant(Py_None);
    }
    if (is("__delitem__") && rest.size() == 1) {
      if (Done d = deleteItem(t, part, rest[0]); !d) return d.stop();
      return Value::constant(Py_None);
    }
    if (is("__init__")) {  // list.__init__(iterable=()): its items replaced
      if (rest.size() > 1) return t.fail("list expected at most 1 argument (TypeError)");
      std::vector<ValuePtr> items;
      if (!rest.empty())
        if (Done d = iterate(t, rest[0], &items); !d) return d.stop();
      if (Done d = t.effects().noteContainerMutation(part); !d) return d.stop();
      part->as<List>().items = std::move(items);
      return Value::constant(Py_None);
    }
  }
  if (n[0] == '_') return t.fail(std::string(owner->tp_name) + "." + n + "() of a subclass instance is not supported yet");
  return callContainerMethod(t, part, name, rest, kwargs);
}

// A set's or frozenset's C method called by name on a Set value (set.__sub__(p, q),
// s.__iter__(), frozenset.__eq__(p, p)): the operator it stands for, NotImplemented where
// Python's gives that (a comparison or operator with an operand that is not a set).
Result<ValuePtr> setBaseMethod(Tracer& t, const ValuePtr& part, PyTypeObject* owner, PyObject* name, Args& rest,
                               Kwargs& kwargs) {
  const char* n = PyUnicode_AsUTF8(name);
  auto is = [n](const char* m) { return strcmp(n, m) == 0; };
  if (!kwargs.empty()) return t.fail(std::string("keyword arguments to ") + owner->tp_name + "." + n + "()");
  auto setLike = [](const ValuePtr& v) {
    return v->is(Kind::Set) || (v->constant() && PyAnySet_Check(v->constant()));
  };
  static const char* const kCompare[] = {"__lt__", "__le__", "__eq__", "__ne__", "__gt__", "__ge__"};
  for (int op = 0; op < 6; ++op) {
    if (!is(kCompare[op]) || rest.size() != 1) continue;
    if (!setLike(rest[0])) return Value::constant(Py_NotImplemented);
    return setCompare(t, op, part, rest[0]);
  }
  static const std::pair<const char*, bytecode::BinaryOp> kBinary[] = {
      {"__or__", bytecode::BinaryOp::Or}, {"__and__", bytecode::BinaryOp::And},
      {"__sub__", bytecode::BinaryOp::Subtract}, {"__xor__", bytecode::BinaryOp::Xor}};
  for (const auto& [bname, op] : kBinary) {
    if (!is(bname) || rest.size() != 1) continue;
    if (!setLike(rest[0])) return Value::constant(Py_NotImplemented);
    return setBinaryOp(t, op, part, rest[0]);
  }
  if (is("__len__") && rest.empty())
    return Value::constant(Ref::steal(PyLong_FromSize_t(part->as<Set>().items.size())).get());
  if (is("__iter__") && rest.empty()) return getIter(t, part);
  if (n[0] == '_' && n[1] == '_' && !is("__contains__") && !is("__ior__") && !is("__iand__") && !is("__isub__") &&
      !is("__ixor__"))
    return t.fail(std::string(owner->tp_name) + "." + n + "() is not supported yet");
  return callContainerMethod(t, part, name, rest, kwargs);
}

}  // namespace

Result<ValuePtr> callBaseMethod(Tracer& t, PyObject* fn, Args& args, Kwargs& kwargs) {
  if (fn == objectSlot("__reduce_ex__") && !args.empty()) return objectReduceEx(t, args, kwargs);
  if (args.size() == 2 && kwargs.empty() &&
      fn == PyDict_GetItemString(reinterpret_cast<PyTypeObject*>(PyExc_BaseException)->tp_dict, "with_traceback")) {
    // exc.with_traceback(None) (unittest's assertRaises does it on leaving) of an exception
    // the trace raised (no source: an object of the trace's own that nothing outside saw
    // yet, whose traceback is the tracer's, not the program's) is done for real.
    const Object* o = args[0]->get<Object>();
    if (o && args[0]->reg < 0 && PyExceptionInstance_Check(o->obj.get()) && args[1]->constant() == Py_None) {
      if (PyException_SetTraceback(o->obj.get(), Py_None) < 0) return t.failFromPython("with_traceback");
      return args[0];
    }
    return notHandled();
  }
  if (fn == objectSlot("__new__") && args.size() == 1 && kwargs.empty()) {
    // object.__new__(cls) (copyreg.__newobj__, a class's own __new__): a new instance of a
    // plain Python class, __init__ not called.
    PyObject* cls = args[0]->is(Kind::Callable) ? args[0]->real() : nullptr;
    if (!cls || !PyType_Check(cls) || !madeByObjectNew(cls) || isModuleClass(cls) || containerBase(cls))
      return t.fail("object.__new__() of a class that is not a plain Python class");
    return Value::of(NewObject{Ref::borrow(cls), Value::emptyDict(), nullptr});
  }
  if (args.empty() || !(PyObject_TypeCheck(fn, &PyMethodDescr_Type) || PyObject_TypeCheck(fn, &PyWrapperDescr_Type)))
    return notHandled();
  ValuePtr part = basePart(args[0]);
  PyTypeObject* owner = PyDescr_TYPE(fn);
  PyObject* ptype = nullptr;
  if (part) {
    ptype = part->is(Kind::Dict)    ? part->as<Dict>().type.get()
            : part->is(Kind::Tuple) ? reinterpret_cast<PyObject*>(&PyTuple_Type)
                                    : reinterpret_cast<PyObject*>(&PyList_Type);
  } else if (args[0]->is(Kind::List) || args[0]->is(Kind::Tuple) || args[0]->is(Kind::Dict) || args[0]->is(Kind::Set)) {
    // A container value itself (dict.values(d), list.__iter__(l), set.__sub__(p, q), or
    // l.__getitem__(2) routed here by callContainerMethod): its own C type's methods.
    part = args[0];
    ptype = reinterpret_cast<PyObject*>(containerCType(part));
  } else if (PyObject* c = args[0]->constant(); c && PyAnySet_CheckExact(c)) {
    // A set or frozenset of constants (frozenset.__or__(frozenset([1]), q)): as a Set value.
    std::vector<ValuePtr> items;
    Ref it = Ref::steal(PyObject_GetIter(c));
    if (!it) return t.failFromPython("iterating a set");
    while (Ref x = Ref::steal(PyIter_Next(it.get()))) items.push_back(Value::constant(x.get()));
    if (PyErr_Occurred()) return t.failFromPython("iterating a set");
    part = PyFrozenSet_CheckExact(c) ? Value::frozenSet(std::move(items)) : Value::set(std::move(items));
    ptype = reinterpret_cast<PyObject*>(Py_TYPE(c));
  } else if (PyObject* c = args[0]->constant(); c && PyTuple_CheckExact(c)) {
    std::vector<ValuePtr> items;  // a tuple of constants (tuple.__add__((1,), q))
    for (Py_ssize_t i = 0; i < PyTuple_GET_SIZE(c); ++i) items.push_back(Value::constant(PyTuple_GET_ITEM(c, i)));
    part = Value::tuple(std::move(items));
    ptype = reinterpret_cast<PyObject*>(&PyTuple_Type);
  }
  if (!part || !ptype) return notHandled();
  if (!PyType_IsSubtype(reinterpret_cast<PyTypeObject*>(ptype), owner) || owner == &PyBaseObject_Type) return notHandled();
  PyObject* name = PyDescr_NAME(fn);
  const char* n = PyUnicode_AsUTF8(name);
  auto is = [n](const char* m) { return strcmp(n, m) == 0; };
  Args rest(args.begin() + 1, args.end());
  if (part->is(Kind::Set)) return setBaseMethod(t, part, owner, name, rest, kwargs);
  if (!part->is(Kind::Dict)) return sequenceBaseMethod(t, part, owner, name, rest, kwargs);
  static const char* const kMutating[] = {"__setitem__", "__delitem__", "__init__", "update", "pop", "popitem",
                                          "setdefault", "clear", "move_to_end"};
  bool mutating = false;
  for (const char* m : kMutating) mutating = mutating || is(m);
  // Mutations of an object from the program are replayed on it with dict's C functions,
  // which would bypass an OrderedDict's own order.
  if (mutating && args[0]->is(Kind::Object) && reinterpret_cast<PyTypeObject*>(ptype) != &PyDict_Type)
    return t.fail(std::string("mutating an OrderedDict subclass from outside the trace (") + n + ") is not supported yet");
  if (!kwargs.empty() && !is("update") && !is("__init__"))
    return t.fail(std::string("keyword arguments to ") + owner->tp_name + "." + n + "()");
  if (is("__setitem__") && rest.size() == 2) {
    if (Done d = storeSubscript(t, part, rest[0], rest[1]); !d) return d.stop();
    return Value::constant(Py_None);
  }
  if (is("__getitem__") && rest.size() == 1) return subscript(t, part, rest[0]);
  if (is("__delitem__") && rest.size() == 1) {
    Result<ValuePtr> r = applyContainerMethod(t, part, interned(Str::pop), rest, kwargs);
    if (!r) return r;
    return Value::constant(Py_None);
  }
  if (is("__contains__") && rest.size() == 1) {
    Result<bool> r = contains(t, part, rest[0]);
    if (!r) return r.stop();
    return Value::constant(*r ? Py_True : Py_False);
  }
  if (is("__len__") && rest.empty()) {
    Ref n_items = Ref::steal(PyLong_FromSsize_t(static_cast<Py_ssize_t>(part->as<Dict>().keys.size())));
    if (!n_items) return t.failFromPython("len");
    return Value::constant(n_items.get());
  }
  if (is("__iter__") && rest.empty()) return getIter(t, part);
  if (is("__init__")) {
    if (rest.empty() && kwargs.empty()) return Value::constant(Py_None);
    Result<ValuePtr> r = callContainerMethod(t, part, interned(Str::update), rest, kwargs);
    if (!r) return r;
    return Value::constant(Py_None);
  }
  if (n[0] == '_') return t.fail(std::string(owner->tp_name) + "." + n + "() of a subclass instance is not supported yet");
  return callContainerMethod(t, part, name, rest, kwargs);
}

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
  if (strcmp(n, "__annotations__") == 0) return Value::dict(reinterpret_cast<PyObject*>(&PyDict_Type), {}, {});
  // Every function has what its type defines (__globals__, __closure__, __get__, ...): not
  // modelled here, which is no AttributeError the program could catch.
  if (_PyType_Lookup(&PyFunction_Type, name))
    return t.fail(std::string("attribute '") + n + "' of a function made in the trace is not supported yet");
  return t.raiseNew(PyExc_AttributeError, std::string("'function' object has no attribute '") + n + "'");
}

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
  return t.fail(std::string("setting an attribute of ") + describe(obj) +
              " that exists outside the trace is not supported yet");
}

Result<ValuePtr> callDunder(Tracer& t, const ValuePtr& obj, PyObject* name, std::vector<ValuePtr> args) {
  if (!isUserObject(obj)) return notHandled();
  PyObject* fn = lookupInMro(classOf(obj), name, nullptr);
  if (!fn) return notHandled();
  args.insert(args.begin(), obj);
  if (!PyFunction_Check(fn)) {  // a C slot of a dict base: on the object's items
    if (!basePart(obj)) return notHandled();
    Kwargs none;
    return callBaseMethod(t, fn, args, none);
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
  PyObject* mod = PyDict_GetItemWithError(type->tp_dict, interned(Str::dunder_module));  // borrowed
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
    PyObject* base = PyDict_GetItemWithError(PyBaseObject_Type.tp_dict, name);  // borrowed
    if (!own) return notHandled();
    if (own == base) name = interned(Str::dunder_repr);
  }
  Result<ValuePtr> r = callDunder(t, obj, name, {});
  if (r.notHandled() && obj->is(Kind::NewObject)) {
    PyObject* repr_name = interned(Str::dunder_repr);
    PyObject* own = lookupInMro(classOf(obj), repr_name, nullptr);
    if (own && own == PyDict_GetItemWithError(PyBaseObject_Type.tp_dict, repr_name)) return defaultRepr(t, obj);
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
  PyObject* base = format_name ? PyDict_GetItemWithError(PyBaseObject_Type.tp_dict, format_name) : nullptr;
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
