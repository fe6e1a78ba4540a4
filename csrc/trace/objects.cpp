// User-defined classes. An object read from the program (Kind::Object) is guarded by its
// exact type and read live (instance __dict__ entries become guard loads); an object made
// in the trace (Kind::NewObject) keeps its attributes as values and is rebuilt if it
// escapes. Attribute lookup follows Python: data descriptors of the class (property),
// then the instance, then the class (methods, staticmethod, classmethod, constants).
#include <cstring>
#include <string>

#include "support/lookup.h"
#include "support/torch_types.h"
#include "trace/ops.h"
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

Result<bool> objectHasAttr(Tracer& t, const ValuePtr& obj, PyObject* name) {
  if (t.effects().overlayAttr(obj->reg, name)) return true;  // stored earlier in the trace
  if (ValuePtr aliased = aliasedInstanceDict(t, obj)) {
    int k = aliased->as<Dict>().findKey(name);
    if (k == -2) return t.failFromPython("hasattr");
    if (k >= 0) return true;
    return lookupInMro(classOf(obj), name, nullptr) != nullptr;
  }
  PyObject* o = obj->real();
  PyObject** dictptr = _PyObject_GetDictPtr(o);
  PyObject* dict = dictptr ? *dictptr : nullptr;
  if (dict && PyDict_GetItemWithError(dict, name)) {
    if (obj->reg >= 0)  // guarded present: the load fails when the key is gone
      t.load(LoadKind::InstanceDict, obj->reg, 0, name, t.guards().sourceName(obj->reg) + "." + PyUnicode_AsUTF8(name));
    return true;
  }
  if (PyErr_Occurred()) return t.failFromPython("hasattr");
  if (lookupInMro(classOf(obj), name, nullptr)) return true;  // the class is guarded by type
  if (!dict) return PyObject_HasAttr(o, name) == 1;  // no instance dict: only the type decides
  // Absent: the instance dict's exact keys are guarded (an attribute added later must
  // not be missed).
  if (obj->reg >= 0) {
    int d = t.load(LoadKind::Attr, obj->reg, 0, interned(Str::dunder_dict), t.guards().sourceName(obj->reg) + ".__dict__");
    t.guards().checkDictKeys(d, dict);
  }
  return false;
}

Result<ValuePtr> objectGetAttr(Tracer& t, const ValuePtr& obj, PyObject* name) {
  const char* n = PyUnicode_AsUTF8(name);
  if (ValuePtr v = t.effects().overlayAttr(obj->reg, name)) return v;
  ValuePtr self = obj;
  PyObject* after = nullptr;
  if (const Super* sup = obj->get<Super>()) {
    self = sup->self;
    after = sup->after.get();
  }
  PyObject* cls = nullptr;
  if (self->is(Kind::Module)) cls = reinterpret_cast<PyObject*>(Py_TYPE(self->real()));
  else if (isUserObject(self)) cls = classOf(self);
  else if (self->is(Kind::Callable) && PyType_Check(self->real())) cls = self->real();  // classmethod's cls
  if (!cls) return t.fail(std::string("super() of a ") + kindName(self->kind()));
  if (!obj->is(Kind::Super) && !self->is(Kind::Callable)) {
    if (PyUnicode_CompareWithASCIIString(name, "__class__") == 0) return Value::callable(cls);
    if (PyUnicode_CompareWithASCIIString(name, "__dict__") == 0 && self->is(Kind::NewObject))
      return self->as<NewObject>().attrs;
  }
  PyObject* descr = lookupInMro(cls, name, after);

  if (descr && PyObject_TypeCheck(descr, &PyProperty_Type)) {
    Ref fget = Ref::steal(PyObject_GetAttrString(descr, "fget"));
    if (!fget || fget.get() == Py_None) return PyErr_Clear(), t.fail(std::string("property '") + n + "' has no getter");
    return call(t, Value::callable(fget.get()), {self}, {});
  }
  if (!obj->is(Kind::Super)) {
    if (const NewObject* o = self->get<NewObject>()) {
      const Dict& attrs = o->attrs->as<Dict>();
      int k = attrs.findKey(name);
      if (k >= 0) return attrs.values[static_cast<size_t>(k)];
    } else if (self->is(Kind::Object)) {
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
        PyErr_Clear();
      }
      if (descr && Py_TYPE(descr)->tp_descr_set && Py_TYPE(descr)->tp_descr_get) {
        // __slots__ members and other data descriptors: read through getattr.
        Ref v = Ref::steal(PyObject_GetAttr(self->real(), name));
        if (!v) return t.failFromPython(std::string("attribute '") + n + "'");
        int reg = self->reg >= 0 ? t.load(LoadKind::Attr, self->reg, 0, name, t.guards().sourceName(self->reg) + "." + n) : -1;
        return t.wrap(v.get(), reg);
      }
    }
  }
  if (!descr) {
    if (PyUnicode_CompareWithASCIIString(name, "__class__") == 0) return Value::callable(cls);
    if (PyUnicode_CompareWithASCIIString(name, "__name__") == 0 && self->is(Kind::Callable)) {
      Ref class_name = Ref::steal(PyObject_GetAttr(cls, name));
      if (!class_name) return t.failFromPython("a class's __name__");
      return Value::constant(class_name.get());
    }
    if (self->is(Kind::Callable))
      return t.raiseNew(PyExc_AttributeError, std::string("type object '") + reinterpret_cast<PyTypeObject*>(cls)->tp_name +
                                                "' has no attribute '" + n + "'");
    return t.raiseNew(PyExc_AttributeError, std::string("'") + reinterpret_cast<PyTypeObject*>(cls)->tp_name +
                                              "' object has no attribute '" + n + "'");
  }
  if (PyFunction_Check(descr)) {
    if (self->is(Kind::Callable)) return Value::callable(descr);  // Class.method: plain function
    return Value::boundMethod(self, descr);
  }
  if (isCacheWrapper(descr)) {  // functools.lru_cache on a method: it binds like the function it wraps
    if (self->is(Kind::Callable)) return Value::callable(descr);
    return Value::boundMethod(self, descr);
  }
  if (Py_IS_TYPE(descr, &PyStaticMethod_Type)) {
    Ref fn = Ref::steal(PyObject_GetAttrString(descr, "__func__"));
    if (!fn) return t.failFromPython("staticmethod");
    return Value::callable(fn.get());
  }
  if (Py_IS_TYPE(descr, &PyClassMethod_Type)) {
    Ref fn = Ref::steal(PyObject_GetAttrString(descr, "__func__"));
    if (!fn) return t.failFromPython("classmethod");
    return Value::boundMethod(Value::callable(cls), fn.get());
  }
  if (descr == PyDict_GetItemString(PyBaseObject_Type.tp_dict, "__init__"))
    return Value::callable(descr);  // object.__init__: a no-op on our objects
  const Object* owned = self->get<Object>();
  if (owned && owned->owned && Py_TYPE(descr)->tp_descr_get) {
    // A C method of an object the trace made (BaseException.__init__ through super()):
    // bound and later called for real, on constants only.
    Ref bound = Ref::steal(Py_TYPE(descr)->tp_descr_get(descr, owned->obj.get(), cls));
    if (!bound) return t.failFromPython("binding a method");
    return Value::of(Callable{std::move(bound), true});
  }
  if (isConstantObject(descr) || PyType_Check(descr)) return t.wrap(descr, -1);
  if (PyList_CheckExact(descr) || PyDict_CheckExact(descr) || PyTuple_CheckExact(descr)) {
    // A container on the class (a registry): read live through the class, guarded.
    int creg = t.load(LoadKind::Constant, -1, 0, cls, std::string(reinterpret_cast<PyTypeObject*>(cls)->tp_name));
    int reg = t.load(LoadKind::Attr, creg, 0, name, t.guards().sourceName(creg) + "." + n);
    return t.wrap(descr, reg);
  }
  return t.fail(std::string("class attribute '") + n + "' of type " + Py_TYPE(descr)->tp_name + " is not supported yet");
}

Result<ValuePtr> newObject(Tracer& t, PyObject* cls, std::vector<ValuePtr> args,
                                   std::vector<std::pair<Ref, ValuePtr>> kwargs) {
  if (!isPlainPythonClass(cls))
    return t.fail(std::string("creating an instance of ") + reinterpret_cast<PyTypeObject*>(cls)->tp_name +
                " (custom __new__ or a builtin base) is not supported yet");
  if (isModuleClass(cls)) return t.fail("creating an nn.Module inside the trace is not supported yet");
  ValuePtr obj = Value::of(NewObject{Ref::borrow(cls), Value::emptyDict()});
  PyObject* init = lookupInMro(cls, interned(Str::dunder_init), nullptr);
  if (init && PyFunction_Check(init)) {
    args.insert(args.begin(), obj);
    Result<ValuePtr> r = t.inlineFunction(init, -1, std::move(args), std::move(kwargs));
    if (!r) return r;
    if (!(*r)->isNone())
      return t.fail("__init__() should return None (TypeError)");
  } else if (!args.empty() || !kwargs.empty()) {
    return t.fail(std::string(reinterpret_cast<PyTypeObject*>(cls)->tp_name) + "() takes no arguments (TypeError)");
  }
  return obj;
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
  if (strcmp(n, "__annotations__") == 0) return Value::dict(reinterpret_cast<PyObject*>(&PyDict_Type), {}, {});
  return t.raiseNew(PyExc_AttributeError, std::string("'function' object has no attribute '") + n + "'");
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
    PyObject* descr = lookupInMro(o->cls.get(), name, nullptr);
    if (descr && PyObject_TypeCheck(descr, &PyProperty_Type)) {
      Ref fset = Ref::steal(PyObject_GetAttrString(descr, "fset"));
      if (!fset || fset.get() == Py_None) return PyErr_Clear(), t.fail("can't set attribute (AttributeError)");
      return outcomeOf(call(t, Value::callable(fset.get()), {obj, value}, {}));
    }
    if (lookupInMro(o->cls.get(), interned(Str::dunder_setattr), nullptr) !=
        PyDict_GetItemString(PyBaseObject_Type.tp_dict, "__setattr__"))
      return t.fail("a class with its own __setattr__ is not supported yet");
    return storeSubscript(t, o->attrs, Value::constant(name), value);
  }
  bool user_class = obj->is(Kind::Callable) && PyType_Check(obj->real()) &&
                    PyType_HasFeature(reinterpret_cast<PyTypeObject*>(obj->real()), Py_TPFLAGS_HEAPTYPE);
  if ((obj->is(Kind::Object) || obj->is(Kind::Module) || user_class) && obj->reg >= 0) {
    PyObject* cls = reinterpret_cast<PyObject*>(Py_TYPE(obj->real()));
    PyObject* descr = lookupInMro(cls, name, nullptr);
    if (descr && Py_TYPE(descr)->tp_descr_set && !obj->is(Kind::Callable))
      return t.fail("setting a property or descriptor of an object from outside the trace is not supported yet");
    if (obj->is(Kind::Object) && lookupInMro(cls, interned(Str::dunder_setattr), nullptr) !=
                                     PyDict_GetItemString(PyBaseObject_Type.tp_dict, "__setattr__"))
      return t.fail("a class with its own __setattr__ is not supported yet");
    if (obj->is(Kind::Object) && !descr)
      if (ValuePtr aliased = aliasedInstanceDict(t, obj)) return storeSubscript(t, aliased, Value::constant(name), value);
    // Replayed after the graph with setattr (Module.__setattr__ included); reads later in
    // the trace see the new value.
    return t.effects().setAttr(obj->reg, name, value);
  }
  return t.fail(std::string("setting an attribute of a ") + kindName(obj->kind()) +
              " that exists outside the trace is not supported yet");
}

Result<ValuePtr> callDunder(Tracer& t, const ValuePtr& obj, PyObject* name, std::vector<ValuePtr> args) {
  if (!isUserObject(obj)) return notHandled();
  PyObject* fn = lookupInMro(classOf(obj), name, nullptr);
  if (!fn || !PyFunction_Check(fn)) return notHandled();
  args.insert(args.begin(), obj);
  return t.inlineFunction(fn, -1, std::move(args), {});
}

}  // namespace cdynamo::trace
