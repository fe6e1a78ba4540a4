// Python's builtins, modelled on symbolic values: the builtin rows of the callable table
// (callables.h), recognised by identity, never by name. Pure builtins on constants run for
// real, so their results and errors are CPython's own; the others have a handler here.
#include <algorithm>
#include <cstring>
#include <string>

#include "support/lookup.h"
#include "trace/engine/graph_calls.h"
#include "trace/engine/scalars.h"
#include "trace/kinds/iterator.h"
#include "trace/kinds/module.h"
#include "trace/kinds/namespace.h"
#include "trace/kinds/ndarray.h"
#include "trace/kinds/object.h"
#include "trace/kinds/set.h"
#include "trace/protocol/attributes.h"
#include "trace/protocol/builtins_internal.h"
#include "trace/protocol/callables.h"
#include "trace/protocol/calls.h"
#include "trace/protocol/constants.h"
#include "trace/protocol/container_methods.h"
#include "trace/protocol/operators.h"
#include "trace/tracer.h"

namespace cdynamo::trace {

using graph::NodeOp;
using guards::LoadKind;

namespace {



// print(), input(), open(), exec(), eval(): effects outside the program.
Result<ValuePtr> builtinEffects(Tracer& t, PyObject*, const char* which, Args&, Kwargs&) {
  return t.fail(std::string(which) + "() has effects outside the program");
}

}  // namespace

PyObject* Tracer::standInId(const ValuePtr& v) {
  for (const auto& [value, obj] : stand_in_ids_)
    if (value == v) return obj.get();
  Ref obj = Ref::steal(PyBaseObject_Type.tp_alloc(&PyBaseObject_Type, 0));
  if (!obj) return nullptr;
  stand_in_ids_.emplace_back(v, std::move(obj));
  return stand_in_ids_.back().second.get();
}

namespace {

// id(x): an object read from the program has its real id, under a guard of its identity;
// a constant of the code and an object the trace made for real, theirs; a value made in
// the trace (a container, an object, a function) a stand-in that is the same for the
// same value, as a memo keyed by id() (copy.deepcopy) needs. A tensor's id would tie the
// entry to one tensor object.
Result<ValuePtr> builtinId(Tracer& t, PyObject*, const char*, Args& args, Kwargs& kwargs) {
  if (args.size() != 1 || !kwargs.empty()) return notHandled();
  const ValuePtr& v = args[0];
  if (v->is(Kind::Tensor)) return t.fail("id() of a tensor depends on which tensor object is passed");
  PyObject* obj = v->real();
  if (!obj && v->reg >= 0) {  // a container read from the program: the object it was wrapped from
    for (const auto& [o, wrapped] : t.wrappedObjects())
      if (wrapped == v) obj = o;
    if (!obj) return t.fail(std::string("id() of ") + describe(v) + " read from the program");
  }
  if (obj && v->reg >= 0) t.guards().checkIdentity(v->reg, obj);
  if (!obj) obj = t.standInId(v);
  if (!obj) return t.failFromPython("id()");
  Ref id = Ref::steal(PyLong_FromVoidPtr(obj));
  if (!id) return t.failFromPython("id()");
  return Value::constant(id.get());
}

Result<ValuePtr> builtinSuper(Tracer& t, PyObject*, const char*, Args& args, Kwargs&) { return makeSuper(t, args); }

// delattr(obj, name) with a constant name (objects.cpp deleteAttr).
Result<ValuePtr> builtinDelattr(Tracer& t, PyObject*, const char*, Args& args, Kwargs& kwargs) {
  PyObject* name = args.size() == 2 && kwargs.empty() ? args[1]->constant() : nullptr;
  if (!name || !PyUnicode_Check(name)) return t.fail("delattr() with a name that is not a constant string");
  if (Done d = deleteAttr(t, args[0], name); !d) return d.stop();
  return Value::constant(Py_None);
}

// globals(), locals(), vars(): not modelled.
Result<ValuePtr> builtinUnsupported(Tracer& t, PyObject*, const char* which, Args&, Kwargs&) {
  return t.fail(std::string(which) + "() is not supported yet");
}

Result<ValuePtr> builtinObject(Tracer& t, PyObject* f, const char* which, Args& args, Kwargs& kwargs) {
  if (args.empty() && kwargs.empty()) return newObject(t, f, {}, {});
  return builtinUnsupported(t, f, which, args, kwargs);
}

Result<ValuePtr> builtinSetattr(Tracer& t, PyObject* f, const char* which, Args& args, Kwargs& kwargs) {
  if (args.size() == 3 && args[1]->constant() && PyUnicode_Check(args[1]->constant())) {
    if (Done d = storeAttr(t, args[0], args[1]->constant(), args[2]); !d) return d.stop();
    return Value::constant(Py_None);
  }
  return builtinUnsupported(t, f, which, args, kwargs);
}

// len(): a container's size, a user object's __len__, a tensor's (a graph op), a module container's children.
// range() of symbolic ints (x.shape[0] under dynamic shapes, an int argument made a
// symbol): range needs their values, so each is specialized to the int it stands for, as
// torch._dynamo specializes it; int() of the SymInt makes its ShapeEnv record the guard
// (Eq(s, value)), which becomes one of the entry's shape guards. NotHandled when no
// argument is a symbolic int.
Result<ValuePtr> builtinRange(Tracer& t, PyObject* f, const char* which, Args& args, Kwargs& kwargs) {
  if (!kwargs.empty()) return notHandled();
  bool any = false;
  Args values;
  for (const ValuePtr& a : args) {
    if (!isScalarValue(t, a) || scalarType(t, a) != reinterpret_cast<PyObject*>(&PyLong_Type)) {
      values.push_back(a);
      continue;
    }
    PyObject* shapes = lookup(Obj::cdynamo_shapes);
    Ref v = shapes ? Ref::steal(PyObject_CallMethod(shapes, "specialize_int", "O",
                                                    t.graph().fake(a->as<Tensor>().node)))
                   : Ref();
    if (!v) return t.failFromPython("specializing a symbolic int for range()");
    if (v.get() == Py_None) return t.fail("range() of a value read from a tensor (Tensor.item())");
    values.push_back(Value::constant(v.get()));
    any = true;
  }
  if (!any) return notHandled();
  return runPure(t, f, which, values, kwargs);
}

Result<ValuePtr> builtinLen(Tracer& t, PyObject* f, const char* which, Args& args, Kwargs& kwargs) {
  auto is = [which](const char* n) { return strcmp(which, n) == 0; };
  if (!(is("len") && args.size() == 1 && kwargs.empty())) return notHandled();
  const ValuePtr& v = args[0];
  Result<ValuePtr> r = callDunder(t, v, interned(Str::dunder_len), {});
  if (!r.notHandled()) return r ? lenDunderResult(t, *r) : r;
  if (v->is(Kind::Module) && !isModuleContainer(v, interned(Str::dunder_len))) {  // a module class's own __len__
    r = callModuleDunder(t, v, interned(Str::dunder_len), {});
    if (!r.notHandled()) return r ? lenDunderResult(t, *r) : r;
  }
  if (v->is(Kind::Tuple) || v->is(Kind::List) || v->is(Kind::Set))
    return constInt(static_cast<long>(v->elements()->size()));
  if (const Dict* d = v->get<Dict>()) return constInt(static_cast<long>(d->values.size()));
  if (const DictView* view = v->get<DictView>()) return constInt(static_cast<long>(view->dict->as<Dict>().values.size()));
  if (v->is(Kind::Tensor)) {
    // Under a ShapeEnv the length is size 0 as x.shape[0] gives it (its symbol), as
    // torch._dynamo answers len(x): running len() on the fake would specialize it (Python's
    // len() makes Tensor.__len__'s SymInt an int, guarded to the size at hand). A 0-d
    // tensor goes to len() itself, which raises eager's TypeError.
    if (t.graph().symbolic() && !isScalarValue(t, v)) {
      Ref dim = Ref::steal(PyObject_CallMethod(t.graph().fake(v->get<Tensor>()->node), "dim", nullptr));
      if (!dim) return t.failFromPython("len() of a tensor");
      if (PyLong_AsLong(dim.get()) >= 1) {
        static PyObject* const size_name = PyUnicode_InternFromString("size");
        Result<ValuePtr> sizes = recordCall(t, NodeOp::CallMethod, size_name, {v}, {});
        if (!sizes) return sizes;
        if ((*sizes)->is(Kind::Tuple)) return (*sizes)->elements()->at(0);
        if ((*sizes)->is(Kind::Constant) && PyTuple_Check((*sizes)->constant()))
          return Value::constant(PyTuple_GET_ITEM((*sizes)->constant(), 0));
        return t.fail("len() of a tensor: its sizes are not a tuple");
      }
    }
    return recordCall(t, NodeOp::CallFunction, f, args, {});
  }
  if (isModuleContainer(v, interned(Str::dunder_len))) {
    std::vector<std::pair<Ref, ValuePtr>> children;
    if (Done d = moduleContainerItems(t, v, &children); !d) return d.stop();
    return constInt(static_cast<long>(children.size()));
  }
  return notHandled();
}

namespace {

// Whether `cls` (a class or a tuple of them) has one whose metaclass defines its own
// __instancecheck__ (not type's).
bool ownInstanceCheck(PyObject* cls) {
  if (PyTuple_Check(cls)) {
    for (Py_ssize_t i = 0; i < PyTuple_GET_SIZE(cls); ++i)
      if (ownInstanceCheck(PyTuple_GET_ITEM(cls, i))) return true;
    return false;
  }
  if (!PyType_Check(cls) || Py_TYPE(cls) == &PyType_Type) return false;
  static PyObject* const name = PyUnicode_InternFromString("__instancecheck__");
  PyObject* own = _PyType_Lookup(Py_TYPE(cls), name);
  PyObject* base = _PyType_Lookup(&PyType_Type, name);
  return own && own != base;
}

// The program's own object behind a tensor value read from an input (its register holds
// it), or null (a tensor the graph computes).
PyObject* instanceFromProgram(Tracer& t, const ValuePtr& v) {
  if (v->reg < 0) return nullptr;
  if (const Tensor* x = v->get<Tensor>()) return t.inputRegOf(x->node) == v->reg ? t.exampleOf(x->node) : nullptr;
  return nullptr;
}

}  // namespace

// isinstance() / issubclass() against a class or a tuple of them.
Result<ValuePtr> builtinIsinstance(Tracer& t, PyObject* f, const char* which, Args& args, Kwargs& kwargs) {
  auto is = [which](const char* n) { return strcmp(which, n) == 0; };
  if (!((is("isinstance") || is("issubclass")) && args.size() == 2)) return notHandled();
  PyObject* cls = args[1]->real();
  Ref cls_tuple;
  if (const Tuple* classes = args[1]->get<Tuple>()) {
    cls_tuple = Ref::steal(PyTuple_New(static_cast<Py_ssize_t>(classes->items.size())));
    if (!cls_tuple) return t.failFromPython(std::string(which) + "()");
    for (size_t i = 0; i < classes->items.size(); ++i) {
      PyObject* c = classes->items[i]->real();
      if (!c) return t.fail("isinstance() with a non-class");
      PyTuple_SET_ITEM(cls_tuple.get(), i, Ref::borrow(c).release());
    }
    cls = cls_tuple.get();
  }
  if (!cls) return t.fail(std::string(which) + "() with a non-class");
  int r;
  if (is("issubclass")) {
    if (!args[0]->real()) return t.fail("issubclass() of a value that is not a class is unsupported");
    r = PyObject_IsSubclass(args[0]->real(), cls);
  } else if (args[0]->real()) {
    r = PyObject_IsInstance(args[0]->real(), cls);
  } else if (PyObject* example = instanceFromProgram(t, args[0]); example && ownInstanceCheck(cls)) {
    // A metaclass with its own __instancecheck__ may answer from the instance rather than
    // its type (nn.Parameter and nn.Buffer read a flag the tensor carries): the answer is
    // the real object's, guarded to stay the same.
    r = PyObject_IsInstance(example, cls);
    if (r < 0) return t.failFromPython("isinstance()");
    PyObject* make = lookup(Obj::cdynamo_instance_check);
    Ref check = make ? Ref::steal(PyObject_CallFunctionObjArgs(make, cls, r ? Py_True : Py_False, nullptr)) : Ref();
    if (!check) return t.failFromPython("isinstance()");
    t.guards().checkPredicate(args[0]->reg, check.get(),
                              std::string("isinstance(") + t.guards().sourceName(args[0]->reg) + ", ...) is " +
                                  (r ? "True" : "False"));
  } else {
    PyObject* type = typeOf(t, args[0]);
    if (!type) return t.fail("isinstance() of a value whose type is not known");
    r = PyObject_IsSubclass(type, cls);
  }
  if (r < 0) return t.failFromPython(std::string(which) + "()");
  return Value::constant(r ? Py_True : Py_False);
  
}

// type(): the type a value has when the graph runs.
Result<ValuePtr> builtinType(Tracer& t, PyObject* f, const char* which, Args& args, Kwargs& kwargs) {
  auto is = [which](const char* n) { return strcmp(which, n) == 0; };
  if (!(is("type") && args.size() == 1)) return notHandled();
  PyObject* type = typeOf(t, args[0]);
  if (!type) return t.fail("type() of a value whose type is not known");
  return Value::callable(type);
  
}

// callable().
Result<ValuePtr> builtinCallable(Tracer& t, PyObject* f, const char* which, Args& args, Kwargs& kwargs) {
  auto is = [which](const char* n) { return strcmp(which, n) == 0; };
  if (!(is("callable") && args.size() == 1)) return notHandled();
  const ValuePtr& v = args[0];
  bool c = v->is(Kind::Callable) || v->is(Kind::BoundMethod) || v->is(Kind::NamedMethod) ||
           v->is(Kind::Function) || v->is(Kind::Module) || (v->real() && PyCallable_Check(v->real()));
  if (const NewObject* o = v->get<NewObject>()) {
    Ref call = Ref::steal(PyObject_GetAttrString(o->cls.get(), "__call__"));
    PyErr_Clear();
    c = call.get() != nullptr;
  }
  return Value::constant(c ? Py_True : Py_False);
  
}

// vars(obj): the __dict__ of an object (one value with its attributes: objects.cpp,
// namespaces.cpp). vars() without an argument (the frame's locals) is not modelled.
Result<ValuePtr> builtinVars(Tracer& t, PyObject*, const char*, Args& args, Kwargs& kwargs) {
  if (args.size() != 1 || !kwargs.empty()) return notHandled();
  const ValuePtr& v = args[0];
  if (v->is(Kind::Namespace) || v->is(Kind::NewObject) || v->is(Kind::Object)) return getAttr(t, v, interned(Str::dunder_dict));
  // A constant (an int, a str, a tuple of them): its type gives instances no __dict__, so
  // vars() raises its TypeError, as eagerly.
  if (v->is(Kind::Constant) && !PyType_HasFeature(Py_TYPE(v->real()), Py_TPFLAGS_HEAPTYPE) &&
      Py_TYPE(v->real())->tp_dictoffset == 0)
    return t.raiseNew(PyExc_TypeError, "vars() argument must have __dict__ attribute");
  return notHandled();
}

// tuple() / list() / set() / frozenset() of an iterable.
Result<ValuePtr> builtinCollection(Tracer& t, PyObject* f, const char* which, Args& args, Kwargs& kwargs) {
  auto is = [which](const char* n) { return strcmp(which, n) == 0; };
  if (!((is("tuple") || is("list") || is("set") || is("frozenset")) && args.size() <= 1 && kwargs.empty())) return notHandled();
  if (is("frozenset")) {
    if (!args.empty()) return makeFrozenSet(t, args[0]);
    Ref empty = Ref::steal(PyFrozenSet_New(nullptr));
    if (!empty) return t.failFromPython("frozenset()");
    return Value::constant(empty.get());
  }
  if (is("set") && !args.empty())
    if (PyObject* shadow = realSetOperand(args[0])) {
      // set(s) of a set made in the trace copies its real table, as eagerly (containers.cpp).
      Ref real = Ref::steal(PySet_New(shadow));
      if (!real) PyErr_Clear();
      if (ValuePtr v = real ? setFromReal(real.get(), {args[0]}) : nullptr) return v;
    }
  std::vector<ValuePtr> items;
  if (!args.empty())
    if (Done d = iterate(t, args[0], &items); !d) return d.stop();
  if (is("tuple")) return Value::tuple(std::move(items));
  if (is("list")) return Value::list(std::move(items));
  ValuePtr s = Value::set({});
  std::vector<ValuePtr> a(1);
  std::vector<std::pair<Ref, ValuePtr>> kw;
  for (const ValuePtr& v : items) {
    a[0] = v;
    if (Result<ValuePtr> r = callContainerMethod(t, s, interned(Str::add), a, kw); !r) return r;
  }
  return s;
}

// dict(...).
Result<ValuePtr> builtinDict(Tracer& t, PyObject* f, const char* which, Args& args, Kwargs& kwargs) {
  auto is = [which](const char* n) { return strcmp(which, n) == 0; };
  if (!(is("dict"))) return notHandled();
  if (args.size() > 1) return raiseConstructorArgumentError(t, f, args.size(), kwargs);
  ValuePtr d = Value::dict(f, {}, {});
  if (Result<ValuePtr> r = callContainerMethod(t, d, interned(Str::update), args, kwargs); !r) return r;
  return d;
  
}

// getattr(obj, name[, default]) / hasattr(obj, name) with a constant name.
Result<ValuePtr> builtinAttribute(Tracer& t, PyObject*, const char* which, Args& args, Kwargs&) {
  auto is = [which](const char* n) { return strcmp(which, n) == 0; };
  PyObject* attr_name = args.size() >= 2 ? args[1]->constant() : nullptr;
  if (attr_name && !PyUnicode_Check(attr_name)) attr_name = nullptr;
  // A NewObject's attribute: in its __dict__ or its class.
  auto newObjectHas = [&](const NewObject& o) {
    return o.attrs->as<Dict>().findKey(attr_name) >= 0 || PyObject_HasAttr(o.cls.get(), attr_name);
  };
  if (is("getattr") && (args.size() == 2 || args.size() == 3) && attr_name) {
    if (args.size() == 3) {
      // With a default, an absent attribute is not an error: only constants' and
      // modules' attributes can be probed without tracing a read.
      if (probesByLookup(args[0])) {
        Result<ValuePtr> v = getAttr(t, args[0], attr_name);
        if (v || !takeAttributeError(t, v)) return v;
        return args[2];
      } else if (args[0]->real()) {
        int has = PyObject_HasAttr(args[0]->real(), attr_name);
        if (!has) return args[2];
      } else if (const NewObject* o = args[0]->get<NewObject>()) {
        if (!newObjectHas(*o)) return args[2];
      } else if (args[0]->is(Kind::Namespace)) {
        if (!namespaceHasAttr(args[0], attr_name)) return args[2];
      } else if (const Tuple* tup = args[0]->get<Tuple>(); tup && tup->namedtuple && args[0]->reg < 0) {
        // A namedtuple made in the trace: its fields, its __dict__, its class.
        bool has = PyObject_HasAttr(tup->namedtuple.get(), attr_name) ||
                   (tup->attrs && tup->attrs->as<Dict>().findKey(attr_name) >= 0);
        if (!has) return args[2];
      }
    }
    return getAttr(t, args[0], attr_name);
  }
  if (is("hasattr") && args.size() == 2 && attr_name) {
    if (probesByLookup(args[0])) {
      Result<bool> has = objectHasAttr(t, args[0], attr_name);
      if (!has) return has.stop();
      return Value::constant(*has ? Py_True : Py_False);
    }
    PyObject* probe = args[0]->real();
    if (args[0]->is(Kind::Tensor)) {
      if (isScalarValue(t, args[0])) {
        probe = scalarType(t, args[0]);
      } else {
        // The tensor's class (pinned by the tensor check or known from the op that made
        // it), then its own __dict__: never the fake tensor, whose class has attributes
        // of its own (fake_mode, ...) and whose __dict__ is not the real one's.
        PyObject* type = typeOf(t, args[0]);
        if (!type || !PyType_Check(type)) return t.fail("hasattr() on a tensor of unknown class");
        PyTypeObject* tp = reinterpret_cast<PyTypeObject*>(type);
        if (_PyType_Lookup(tp, interned(Str::dunder_getattr)))
          return t.fail("hasattr() on a tensor whose class defines __getattr__ is not supported yet");
        if (_PyType_Lookup(tp, attr_name)) return Value::constant(Py_True);
        // A tensor made in the trace has no attribute of its own (setting one is not
        // traced); a graph input is guarded to keep (or still lack) the one it has.
        int node = args[0]->as<Tensor>().node;
        int reg = t.inputRegOf(node);
        if (reg < 0) return Value::constant(Py_False);
        PyObject* real = t.isSubclassInput(node) ? t.subclassInputObject(node) : t.exampleOf(node);
        if (!real) return t.fail("hasattr() on a tensor input whose object is unknown");
        PyObject** dictptr = _PyObject_GetDictPtr(real);
        PyObject* own = dictptr && *dictptr ? PyDict_GetItemWithError(*dictptr, attr_name) : nullptr;
        if (!own && PyErr_Occurred()) return t.failFromPython("hasattr() on a tensor");
        if (own) {
          t.load(LoadKind::InstanceDict, reg, 0, attr_name, t.guards().sourceName(reg) + "." + PyUnicode_AsUTF8(attr_name));
          return Value::constant(Py_True);
        }
        t.guards().checkNoInstanceAttr(reg, attr_name);
        return Value::constant(Py_False);
      }
    }
    if (const NewObject* o = args[0]->get<NewObject>()) return Value::constant(newObjectHas(*o) ? Py_True : Py_False);
    if (args[0]->is(Kind::Namespace)) return Value::constant(namespaceHasAttr(args[0], attr_name) ? Py_True : Py_False);
    if (!probe) {
      // A value made in the trace (a partial, a function, a list, a namedtuple...): its
      // type's attributes, and a function's own.
      PyObject* type = typeOf(t, args[0]);
      if (!type || !PyType_Check(type)) return t.fail("hasattr() on a value that cannot be probed");
      bool has = _PyType_Lookup(reinterpret_cast<PyTypeObject*>(type), attr_name) != nullptr;
      if (!has && args[0]->is(Kind::Tuple) && args[0]->reg >= 0 && reinterpret_cast<PyTypeObject*>(type)->tp_dictoffset != 0)
        return t.fail("hasattr() on the __dict__ of a tuple subclass instance from the program is not supported yet");
      if (const Function* f = args[0]->get<Function>(); f && f->attrs) has = has || f->attrs->as<Dict>().findKey(attr_name) >= 0;
      if (const Tuple* tup = args[0]->get<Tuple>(); tup && tup->attrs) has = has || tup->attrs->as<Dict>().findKey(attr_name) >= 0;
      return Value::constant(has ? Py_True : Py_False);
    }
    if (Result<ValuePtr> fa = guardedFunctionAttr(t, args[0], attr_name); !fa.notHandled()) {
      if (fa) return Value::constant(Py_True);
      if (!takeAttributeError(t, fa)) return fa.stop();
      return Value::constant(Py_False);
    }
    int r = PyObject_HasAttr(probe, attr_name);
    return Value::constant(r ? Py_True : Py_False);
  }
  return notHandled();
}

// format(obj) / format(obj, ""): a user object's __format__, object's being str(obj).
Result<ValuePtr> builtinFormat(Tracer& t, PyObject*, const char*, Args& args, Kwargs& kwargs) {
  if (args.empty() || args.size() > 2 || !kwargs.empty()) return notHandled();
  if (args.size() == 2) {
    PyObject* spec = args[1]->constant();
    if (!spec || !PyUnicode_Check(spec) || PyUnicode_GET_LENGTH(spec) != 0) return notHandled();
  }
  return userObjectFormat(t, args[0], 0);
}

Result<ValuePtr> builtinIter(Tracer& t, PyObject*, const char*, Args& args, Kwargs&) {
  if (args.size() == 1) return getIter(t, args[0]);
  return notHandled();
}

// float() / int() / bool() / abs() / pow() / divmod() / round() / str() of a tensor: a value
// read from it (scalars.h), a graph op, or a data-dependent read that stops the trace.
Result<ValuePtr> builtinOfTensor(Tracer& t, PyObject* f, const char* which, Args& args, Kwargs& kwargs) {
  auto is = [which](const char* n) { return strcmp(which, n) == 0; };
  if (is("bool") && args.size() == 1 && kwargs.empty() && !args[0]->is(Kind::Tensor)) {
    Result<bool> truth = truthValue(t, args[0]);  // __bool__, __len__, a container's size, ...
    if (!truth) return truth.stop();
    return Value::constant(*truth ? Py_True : Py_False);
  }
  if (args.size() == 1 && kwargs.empty() && args[0]->is(Kind::NdArray)) {
    if (is("abs")) return ndarrayOperator(t, "abs", {args[0]});
    if (is("float") || is("int") || is("bool")) return t.fail(std::string(which) + "() of a numpy array reads its value (data-dependent)");
  }
  if ((is("str") || is("repr")) && args.size() == 1 && kwargs.empty())
    if (Result<ValuePtr> s = userObjectStr(t, args[0], is("repr")); !s.notHandled()) return s;
  if (args.empty() || !args[0]->is(Kind::Tensor)) return notHandled();
  if (is("str")) {
    if (args.size() == 1) return t.fail("str() of a tensor reads its value");
    return notHandled();
  }
  if ((is("float") || is("int") || is("bool")) && args.size() == 1 && kwargs.empty())
    return readTensorValue(t, args[0], which);  // scalars.h
  if (is("abs")) {
    PyObject* abs = lookup(Obj::operator_abs);
    if (!abs) return t.failFromPython("operator.abs");
    return recordCall(t, NodeOp::CallFunction, abs, args, {});
  }
  if (is("pow") && args.size() == 2) return binaryOp(t, bytecode::BinaryOp::Power, args[0], args[1]);
  if (is("round") && args.size() == 1) return recordCall(t, NodeOp::CallFunction, f, args, {});
  return t.fail(std::string(which) + "() of a tensor reads its value (data-dependent)");
  
}

// Every builtin the tracer knows, by name; pure ones run for real on constants first.
const std::vector<BuiltinRow> kBuiltinRows = {
    {"abs", {"abs", builtinOfTensor, true}},
    {"all", {"all", builtinReduce, true}},
    {"any", {"any", builtinReduce, true}},
    {"ascii", {"ascii", nullptr, true}},
    {"bin", {"bin", nullptr, true}},
    {"bool", {"bool", builtinOfTensor, true}},
    {"callable", {"callable", builtinCallable, true}},
    {"chr", {"chr", nullptr, true}},
    {"complex", {"complex", nullptr, true}},
    {"delattr", {"delattr", builtinDelattr, false}},
    {"dict", {"dict", builtinDict, false}},
    {"divmod", {"divmod", builtinOfTensor, true}},
    {"enumerate", {"enumerate", builtinEnumerate, false}},
    {"eval", {"eval", builtinEffects, false}},
    {"exec", {"exec", builtinEffects, false}},
    {"filter", {"filter", builtinMapFilter, false}},
    {"float", {"float", builtinOfTensor, true}},
    {"format", {"format", builtinFormat, true}},
    {"frozenset", {"frozenset", builtinCollection, true}},
    {"getattr", {"getattr", builtinAttribute, false}},
    {"globals", {"globals", builtinUnsupported, false}},
    {"hasattr", {"hasattr", builtinAttribute, false}},
    {"hash", {"hash", nullptr, true}},
    {"hex", {"hex", nullptr, true}},
    {"id", {"id", builtinId, false}},
    {"input", {"input", builtinEffects, false}},
    {"int", {"int", builtinOfTensor, true}},
    {"isinstance", {"isinstance", builtinIsinstance, true}},
    {"issubclass", {"issubclass", builtinIsinstance, true}},
    {"iter", {"iter", builtinIter, false}},
    {"len", {"len", builtinLen, true}},
    {"list", {"list", builtinCollection, false}},
    {"locals", {"locals", builtinUnsupported, false}},
    {"map", {"map", builtinMapFilter, false}},
    {"max", {"max", builtinReduce, true}},
    {"min", {"min", builtinReduce, true}},
    {"next", {"next", builtinNext, false}},
    {"object", {"object", builtinObject, false}},
    {"oct", {"oct", nullptr, true}},
    {"open", {"open", builtinEffects, false}},
    {"ord", {"ord", nullptr, true}},
    {"pow", {"pow", builtinOfTensor, true}},
    {"print", {"print", builtinEffects, false}},
    {"range", {"range", builtinRange, true}},
    {"repr", {"repr", builtinOfTensor, true}},
    {"reversed", {"reversed", builtinReversed, false}},
    {"round", {"round", builtinOfTensor, true}},
    {"set", {"set", builtinCollection, false}},
    {"setattr", {"setattr", builtinSetattr, false}},
    {"slice", {"slice", nullptr, true}},
    {"sorted", {"sorted", builtinReduce, true}},
    {"str", {"str", builtinOfTensor, true}},
    {"sum", {"sum", builtinSum, true}},
    {"super", {"super", builtinSuper, false}},
    {"tuple", {"tuple", builtinCollection, true}},
    {"type", {"type", builtinType, true}},
    {"vars", {"vars", builtinVars, false}},
    {"zip", {"zip", builtinZip, false}},
};

}  // namespace

const std::vector<BuiltinRow>& builtinRows() { return kBuiltinRows; }

// Whether the builtin `f` takes no keyword arguments at all: a C function without
// METH_KEYWORDS, or a type whose text signature has positional-only parameters only
// (`(function, iterable, /)`). False when it takes some or it cannot be told.
bool takesNoKeywords(PyObject* f) {
  if (PyCFunction_Check(f)) return (PyCFunction_GET_FLAGS(f) & METH_KEYWORDS) == 0;
  if (!PyType_Check(f)) return false;
  Ref sig = Ref::steal(PyObject_GetAttrString(f, "__text_signature__"));
  if (!sig || !PyUnicode_Check(sig.get())) {
    PyErr_Clear();
    return false;
  }
  Py_ssize_t n = PyUnicode_GET_LENGTH(sig.get());
  return n >= 2 && PyUnicode_Tailmatch(sig.get(), Ref::steal(PyUnicode_FromString("/)")).get(), 0, n, 1) == 1;
}

Result<ValuePtr> callBuiltin(Tracer& t, PyObject* f, const CallableRow& row, Args& args, Kwargs& kwargs) {
  // A keyword CPython rejects is the program's TypeError, whatever the handler would accept.
  if (!kwargs.empty() && takesNoKeywords(f))
    return t.raiseNew(PyExc_TypeError, std::string(row.name) + "() takes no keyword arguments");
  if (row.pure) {
    Result<ValuePtr> r = runPure(t, f, row.name, args, kwargs);
    if (!r.notHandled()) return r;
  }
  if (row.handler) {
    Result<ValuePtr> r = row.handler(t, f, row.name, args, kwargs);
    if (!r.notHandled()) return r;
  }
  return t.fail(std::string(row.name) + "() with these arguments is not supported yet");
}

ValuePtr constInt(long v) { return Value::constant(Ref::steal(PyLong_FromLong(v)).get()); }

// A pure builtin called for real on arguments made of constants (key=len included);
// NotHandled when one is not.
Result<ValuePtr> runPure(Tracer& t, PyObject* f, const char* which, Args& args, Kwargs& kwargs) {
  Ref pargs = Ref::steal(PyTuple_New(static_cast<Py_ssize_t>(args.size())));
  if (!pargs) return t.failFromPython(std::string(which) + "()");
  bool materialized = true;
  // An iterator argument is a real iterator of its type over the items it has left; its
  // counter says afterwards how many the call took.
  std::vector<Ref> counters(args.size());
  for (size_t i = 0; i < args.size() && materialized; ++i) {
    if (const Iterator* it = args[i]->get<Iterator>()) {
      Ref items = it->lazy() ? Ref() : toPython(t, Value::tuple(std::vector<ValuePtr>(
                                                         it->items.begin() + static_cast<std::ptrdiff_t>(std::min(it->pos, it->items.size())),
                                                         it->items.end())));
      Ref pair = items && !t.iterators().stale(args[i].get()) ? realIterator(it->type.get(), items.get()) : Ref();
      if (!pair) {
        materialized = false;
        break;
      }
      counters[i] = Ref::borrow(PyTuple_GET_ITEM(pair.get(), 1));
      PyTuple_SET_ITEM(pargs.get(), i, Ref::borrow(PyTuple_GET_ITEM(pair.get(), 0)).release());
      continue;
    }
    Ref a = toPython(t, args[i]);
    if (!a || (args[i]->is(Kind::Callable) && !PyCFunction_Check(a.get()) && !PyType_Check(a.get()))) {
      materialized = false;
      break;
    }
    PyTuple_SET_ITEM(pargs.get(), i, a.release());
  }
  Ref kw;
  if (materialized && !kwargs.empty()) {
    kw = Ref::steal(PyDict_New());
    if (!kw) return t.failFromPython(std::string(which) + "()");
    for (auto& [k, v] : kwargs) {
      Ref a = toPython(t, v);
      if (!a || (v->is(Kind::Callable) && !PyCFunction_Check(a.get()) && !PyType_Check(a.get()))) {
        materialized = false;
        break;
      }
      if (PyDict_SetItem(kw.get(), k.get(), a.get()) < 0) return t.failFromPython(std::string(which) + "()");
    }
  }
  if (!materialized) return notHandled();
  // What the call takes of an iterator argument, read from its counter.
  auto itemsLeft = [](PyObject* counter) -> Py_ssize_t {
    Py_ssize_t n = PyObject_LengthHint(counter, -1);
    if (n < 0) PyErr_Clear();
    return n;
  };
  std::vector<Py_ssize_t> left_before(args.size(), -1);
  for (size_t i = 0; i < args.size(); ++i)
    if (counters[i]) left_before[i] = itemsLeft(counters[i].get());
  Ref r = Ref::steal(PyObject_Call(f, pargs.get(), kw.get()));
  if (!r) return t.raisePython();
  for (size_t i = 0; i < args.size(); ++i) {  // consumed as the real call did
    const Iterator* it = args[i]->get<Iterator>();
    if (!it || !counters[i]) continue;
    Py_ssize_t before = left_before[i], after = itemsLeft(counters[i].get());
    if (before < 0 || after < 0 || after > before)
      return t.fail(std::string(which) + "() of an iterator: what it took is not known");
    const size_t taken = static_cast<size_t>(before - after);
    // Taking every item means the call also saw its end (sum, list, sorted, ...).
    if (taken == 0 && after != 0) continue;
    if (Done d = t.iterators().advance(args[i], it->pos + taken, after == 0); !d) return d.stop();
  }
  return fromPython(t, r.get());
}

}  // namespace cdynamo::trace
