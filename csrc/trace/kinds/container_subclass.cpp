// Instances of classes of the program derived from dict, list or tuple (and namedtuple classes):
// made in the trace (their own __new__ or the base's), and their base's C methods called on
// their items (dict.get(sub, k), list.append(sub, x)).
#include <cstring>
#include <string>

#include "support/lookup.h"
#include "support/python_class.h"
#include "support/torch_types.h"
#include "trace/kinds/iterator.h"
#include "trace/kinds/dict.h"
#include "trace/kinds/object.h"
#include "trace/kinds/object_internal.h"
#include "trace/kinds/set.h"
#include "trace/protocol/constants.h"
#include "trace/protocol/container_methods.h"
#include "trace/protocol/operators.h"
#include "graph/torch_refs.h"
#include "trace/engine/graph_calls.h"
#include "trace/kinds/tensor_subclass.h"
#include "trace/tracer.h"
#include "support/type_dict.h"

namespace cdynamo::trace {

using bytecode::BinaryOp;
using guards::LoadKind;

// The Python __new__ a class defines (found in its MRO before its builtin base's), unwrapped
// from its staticmethod, or null when instances are made by the base's (or a namedtuple's
// generated) __new__.
PyObject* ownPythonNew(PyObject* cls) {
  PyObject* owner = nullptr;
  PyObject* mro = reinterpret_cast<PyTypeObject*>(cls)->tp_mro;
  for (Py_ssize_t i = 0; mro && i < PyTuple_GET_SIZE(mro); ++i) {
    PyObject* dict = typeDict(reinterpret_cast<PyTypeObject*>(PyTuple_GET_ITEM(mro, i)));
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
  while (type && isPythonClass(type)) type = type->tp_base;
  if (type == &PyDict_Type || type == &PyTuple_Type || type == &PyList_Type || type == &PySet_Type ||
      type == &PyFrozenSet_Type)
    return type;
  PyObject* odict = lookup(Obj::collections_OrderedDict);
  if (!odict) return PyErr_Clear(), nullptr;
  return type == reinterpret_cast<PyTypeObject*>(odict) ? type : nullptr;
}

ValuePtr basePart(const ValuePtr& v) {
  if (const NewObject* o = v->get<NewObject>()) return o->base;
  if (const Object* o = v->get<Object>()) return o->base;
  return nullptr;
}

// A class's Python __init__ run on `obj`, as type.__call__ runs it after __new__: inlined
// with `obj` first; a result other than None is CPython's TypeError, refused here.
static Done inlinePythonInit(Tracer& t, PyObject* init, const ValuePtr& obj, Args args, Kwargs kwargs) {
  args.insert(args.begin(), obj);
  Result<ValuePtr> r = t.inlineFunction(init, -1, std::move(args), std::move(kwargs));
  if (!r) return r.stop();
  if (!(*r)->isNone()) return t.fail("__init__() should return None (TypeError)");
  return {};
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
  const bool instance = made_cls && PyType_Check(made_cls) &&
                        PyType_IsSubtype(reinterpret_cast<PyTypeObject*>(made_cls), reinterpret_cast<PyTypeObject*>(cls));
  if (instance && init && PyFunction_Check(init)) {
    if (Done d = inlinePythonInit(t, init, *made, std::move(args), std::move(kwargs)); !d) return d.stop();
  } else if (instance && init && init != objectSlot("__init__")) {
    // The C __init__ of a list, dict or set base fills what the class's __new__ made
    // (list.__init__(iterable), dict.__init__(mapping, **kw), set.__init__(iterable)).
    if (!basePart(*made)) return t.fail(std::string("creating an instance of ") + reinterpret_cast<PyTypeObject*>(cls)->tp_name +
                                        ": a C __init__ of an object whose items the trace does not hold");
    args.insert(args.begin(), *made);
    Result<ValuePtr> r = callBaseMethod(t, init, args, kwargs);
    if (r.notHandled()) return t.fail(std::string("creating an instance of ") +
                                      reinterpret_cast<PyTypeObject*>(cls)->tp_name + ": its base's C __init__");
    if (!r) return r;
  }
  return made;
}

Result<ValuePtr> newContainerSubclassInstance(Tracer& t, PyObject* cls, ValuePtr part) {
  PyTypeObject* base = containerBase(cls);
  const bool set_base = base == &PySet_Type || base == &PyFrozenSet_Type;
  if (!base || (base == &PyTuple_Type) != part->is(Kind::Tuple) || (base == &PyList_Type) != part->is(Kind::List) ||
      (base == &PyDict_Type) != part->is(Kind::Dict) || set_base != part->is(Kind::Set) ||
      (set_base && (base == &PyFrozenSet_Type) != part->as<Set>().frozen))
    return t.fail(std::string("making an instance of ") + reinterpret_cast<PyTypeObject*>(cls)->tp_name + " from a " +
                  kindName(part->kind()));
  if (isNamedTupleClass(cls)) {  // a namedtuple class's instance is a Tuple value of that class
    part->as<Tuple>().namedtuple = Ref::borrow(cls);
    return part;
  }
  return Value::of(NewObject{Ref::borrow(cls), Value::emptyDict(), std::move(part)});
}

namespace {

// cls(*args) for a subclass of set or frozenset made by its base's C __new__, as type.__call__
// runs it: frozenset.__new__ takes the items (at most one positional argument; keywords are
// left to __init__), set.__new__ makes it empty and set.__init__ fills it. A Python __init__
// of the class is inlined instead of the base's (its super().__init__ reaches set's).
Result<ValuePtr> newSetSubclassInstance(Tracer& t, PyObject* cls, bool frozen, Args args, Kwargs kwargs) {
  const char* tn = reinterpret_cast<PyTypeObject*>(cls)->tp_name;
  ValuePtr part;
  if (frozen) {
    if (args.size() > 1)
      return t.raiseNew(PyExc_TypeError, std::string(tn) + " expected at most 1 argument, got " + std::to_string(args.size()));
    Result<ValuePtr> made = makeSetPart(t, args.empty() ? nullptr : args[0], true);
    if (!made) return made;
    part = made.take();
  } else {
    part = Value::set({});
  }
  ValuePtr obj = Value::of(NewObject{Ref::borrow(cls), Value::emptyDict(), part});
  PyObject* init = lookupInMro(cls, interned(Str::dunder_init), nullptr);
  if (init && PyFunction_Check(init)) {
    if (Done d = inlinePythonInit(t, init, obj, std::move(args), std::move(kwargs)); !d) return d.stop();
    return obj;
  }
  if (init != lookupInMro(reinterpret_cast<PyObject*>(frozen ? &PyFrozenSet_Type : &PySet_Type), interned(Str::dunder_init),
                          nullptr))
    return t.fail(std::string("creating an instance of ") + tn + ": __init__ is a " + Py_TYPE(init)->tp_name);
  if (frozen) return obj;  // object.__init__: the items came with __new__
  if (!kwargs.empty()) return t.raiseNew(PyExc_TypeError, std::string(tn) + "() takes no keyword arguments");
  if (args.size() > 1)
    return t.raiseNew(PyExc_TypeError, std::string(tn) + " expected at most 1 argument, got " + std::to_string(args.size()));
  Result<ValuePtr> r = setMethod(t, part, "__init__", args);
  if (!r) return r;
  return obj;
}

}  // namespace

Result<ValuePtr> newObject(Tracer& t, PyObject* cls, std::vector<ValuePtr> args,
                                   std::vector<std::pair<Ref, ValuePtr>> kwargs) {
  const char* tn = reinterpret_cast<PyTypeObject*>(cls)->tp_name;
  // A traceable wrapper subclass made from tensors (TwoTensor(a, b)): one graph call of the
  // class, as torch._dynamo records it; its fake is the class's __new__/__init__ run on
  // fakes, and the graph makes the real instance when it runs.
  if (wrapperSubclassModelled(cls)) return recordCall(t, graph::NodeOp::CallFunction, cls, args, kwargs);
  // The context a contextlib.contextmanager function makes: with config
  // enable_trace_contextlib off (cdynamo's, or torch._dynamo's where cdynamo's is None) it
  // is not traced, as torch._dynamo stops there (the call making it breaks the graph).
  if (strcmp(tn, "contextlib._GeneratorContextManager") == 0 || strcmp(tn, "_GeneratorContextManager") == 0) {
    Ref module = Ref::steal(PyObject_GetAttr(cls, interned(Str::dunder_module)));
    if (module && PyUnicode_Check(module.get()) && PyUnicode_CompareWithASCIIString(module.get(), "contextlib") == 0) {
      int on = graph::configFlag("enable_trace_contextlib");
      if (on < 0) PyErr_Clear();
      if (on == 0)
        return t.fail("a contextlib.contextmanager context, not traced: config.enable_trace_contextlib is False");
    }
    PyErr_Clear();
  }
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
      if (Done d = inlinePythonInit(t, init, *made, std::move(args), std::move(kwargs)); !d) return d.stop();
    } else if (init && init != objectSlot("__init__")) {
      return t.fail(std::string("creating an instance of ") + tn + ": __init__ is a " + Py_TYPE(init)->tp_name);
    }
    return made;
  }
  if ((base == &PySet_Type || base == &PyFrozenSet_Type) && base_new)
    return newSetSubclassInstance(t, cls, base == &PyFrozenSet_Type, std::move(args), std::move(kwargs));
  ValuePtr part = !base_new                ? nullptr
                  : base == &PyList_Type   ? Value::list({})
                                           : Value::dict(reinterpret_cast<PyObject*>(base), {}, {});
  ValuePtr obj = Value::of(NewObject{Ref::borrow(cls), Value::emptyDict(), part});
  PyObject* init = lookupInMro(cls, interned(Str::dunder_init), nullptr);
  if (init && PyFunction_Check(init)) {
    if (Done d = inlinePythonInit(t, init, obj, std::move(args), std::move(kwargs)); !d) return d.stop();
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
    PyObject* dict = typeDict(reinterpret_cast<PyTypeObject*>(PyTuple_GET_ITEM(mro, i)));
    for (const char* n : {"__slots__", "__getnewargs_ex__", "__getnewargs__"})
      if (dict && PyDict_GetItemString(dict, n))
        return t.fail(std::string("object.__reduce_ex__() of a class with ") + n);
  }
  Result<ValuePtr> state = genericGetAttr(t, self, interned(Str::dunder_dict), nullptr, false);
  if (!state) return state;
  if (!(*state)->is(Kind::Dict)) return t.fail("object.__reduce_ex__(): an instance __dict__ that is not modelled");
  PyObject* copyreg = lookup(Obj::copyreg_module);
  Ref newobj = Ref::steal(copyreg ? PyObject_GetAttrString(copyreg, "__newobj__") : nullptr);
  if (!newobj) return t.failFromPython("copyreg.__newobj__");
  ValuePtr none = Value::constant(Py_None);
  return Value::tuple({Value::callable(newobj.get()), Value::tuple({Value::callable(cls)}),
                       (*state)->as<Dict>().keys.empty() ? none : state.take(), none, none});
}

// A C method of tuple or list called on a subclass instance whose items are `part` (a Tuple
// or List value): the container's operation on them. Comparisons and + take the other
// operand's items when it is a tuple (list) too, and answer NotImplemented otherwise, as
// tuple's C slots do.
Result<ValuePtr> sequenceBaseMethod(Tracer& t, const ValuePtr& self, const ValuePtr& part, PyTypeObject* owner,
                                    PyObject* name, Args& rest, Kwargs& kwargs, bool as_operator) {
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
  // The binary slots' wrappers take exactly one argument.
  static const char* const kBinary[] = {"__add__", "__mul__", "__rmul__", "__iadd__", "__imul__"};
  for (const char* b : kBinary)
    if (is(b) && rest.size() != 1)
      return t.raiseNew(PyExc_TypeError, "expected 1 argument, got " + std::to_string(rest.size()));
  const char* kind_name = kind == Kind::Tuple ? "tuple" : "list";
  if (is("__add__")) {
    ValuePtr other = sameKindItems(rest[0]);
    // Concatenation is the sequence slot, which raises; the operator protocol reaches it
    // only after the other operand's __radd__ had its turn.
    if (!other && as_operator) return Value::constant(Py_NotImplemented);
    if (!other) {
      PyObject* type = typeOf(t, rest[0]);
      if (!type || !PyType_Check(type)) return t.fail("the type of an operand of +");
      return t.raiseNew(PyExc_TypeError, std::string("can only concatenate ") + kind_name + " (not \"" +
                                             reinterpret_cast<PyTypeObject*>(type)->tp_name + "\") to " + kind_name);
    }
    std::vector<ValuePtr> items = *part->elements();
    items.insert(items.end(), other->elements()->begin(), other->elements()->end());
    return Value::sequence(kind, std::move(items));
  }
  if (is("__mul__") || is("__rmul__") || (kind == Kind::List && (is("__iadd__") || is("__imul__")))) {
    // seq * n (n * seq), list += iterable, list *= n: the operators on the items; the
    // in-place ones change them and give back the instance itself.
    const bool repeat = !is("__iadd__");
    PyObject* n_obj = rest[0]->constant();
    if (repeat && (!n_obj || !PyIndex_Check(n_obj))) {
      if (!rest[0]->is(Kind::Constant) && !isUserObject(rest[0]) && !rest[0]->is(Kind::Tensor)) {
        PyObject* type = typeOf(t, rest[0]);
        if (type && PyType_Check(type))
          return t.raiseNew(PyExc_TypeError, std::string("'") + reinterpret_cast<PyTypeObject*>(type)->tp_name +
                                                 "' object cannot be interpreted as an integer");
      }
      if (!n_obj) return t.fail(std::string(owner->tp_name) + "." + n + "() by a count not known at trace time");
      return t.raiseNew(PyExc_TypeError,
                        std::string("'") + Py_TYPE(n_obj)->tp_name + "' object cannot be interpreted as an integer");
    }
    const BinaryOp op = is("__iadd__")   ? BinaryOp::InplaceAdd
                        : is("__imul__") ? BinaryOp::InplaceMultiply
                                         : BinaryOp::Multiply;
    Result<ValuePtr> r = binaryOp(t, op, part, rest[0]);
    if (!r || !bytecode::isInplace(op)) return r;
    return self;
  }
  if (kind == Kind::List) {
    // The item slots' wrappers check their argument counts.
    if (is("__delitem__") && rest.size() != 1)
      return t.raiseNew(PyExc_TypeError, "expected 1 argument, got " + std::to_string(rest.size()));
    if (is("__setitem__") && rest.size() != 2)
      return t.raiseNew(PyExc_TypeError, "expected 2 arguments, got " + std::to_string(rest.size()));
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

// A set's or frozenset's C method called by name on a Set value or on an instance of a
// subclass whose items it holds (`self`; set.__sub__(p, q), s.__iter__(), frozenset.__eq__(p,
// p)): the operator it stands for, NotImplemented where Python's gives that (a comparison or
// operator with an operand that is not a set). The in-place operators change the items and
// return `self` itself, as set's do.
Result<ValuePtr> setBaseMethod(Tracer& t, const ValuePtr& self, const ValuePtr& part, PyTypeObject* owner, PyObject* name,
                               Args& rest, Kwargs& kwargs) {
  const char* n = PyUnicode_AsUTF8(name);
  auto is = [n](const char* m) { return strcmp(n, m) == 0; };
  if (!kwargs.empty()) return t.fail(std::string("keyword arguments to ") + owner->tp_name + "." + n + "()");
  auto setLike = [](const ValuePtr& v) { return setPartOf(v) || (v->constant() && PyAnySet_Check(v->constant())); };
  static const char* const kCompare[] = {"__lt__", "__le__", "__eq__", "__ne__", "__gt__", "__ge__"};
  for (int op = 0; op < 6; ++op) {
    if (!is(kCompare[op]) || rest.size() != 1) continue;
    if (!setLike(rest[0])) return Value::constant(Py_NotImplemented);
    return setCompare(t, op, part, rest[0]);
  }
  struct BinaryName {
    const char* name;
    bytecode::BinaryOp op;
    bool reflected;
  };
  static const BinaryName kBinary[] = {
      {"__or__", bytecode::BinaryOp::Or, false},         {"__and__", bytecode::BinaryOp::And, false},
      {"__sub__", bytecode::BinaryOp::Subtract, false},  {"__xor__", bytecode::BinaryOp::Xor, false},
      {"__ror__", bytecode::BinaryOp::Or, true},         {"__rand__", bytecode::BinaryOp::And, true},
      {"__rsub__", bytecode::BinaryOp::Subtract, true},  {"__rxor__", bytecode::BinaryOp::Xor, true},
      {"__ior__", bytecode::BinaryOp::InplaceOr, false}, {"__iand__", bytecode::BinaryOp::InplaceAnd, false},
      {"__isub__", bytecode::BinaryOp::InplaceSubtract, false}, {"__ixor__", bytecode::BinaryOp::InplaceXor, false}};
  for (const auto& [bname, op, reflected] : kBinary) {
    if (!is(bname) || rest.size() != 1) continue;
    if (!setLike(rest[0])) return Value::constant(Py_NotImplemented);
    if (bytecode::isInplace(op)) {
      if (part->as<Set>().frozen) break;  // frozenset has no in-place operators
      Result<ValuePtr> r = setBinaryOp(t, op, part, rest[0]);
      if (!r) return r;
      return self;
    }
    // The result is a plain set (frozenset) whatever the subclass, as set's C code makes it;
    // a reflected one takes the type of its left operand, the other one.
    return reflected ? setBinaryOp(t, op, rest[0], part) : setBinaryOp(t, op, part, rest[0]);
  }
  if (is("__len__") && rest.empty())
    return Value::constant(Ref::steal(PyLong_FromSize_t(part->as<Set>().items.size())).get());
  if (is("__iter__") && rest.empty()) return getIter(t, part);
  if (is("__repr__") && rest.empty()) {
    // set's repr: its items' reprs in its walk order, inside {}; a subclass's wrapped in its
    // class's name, an empty one as Name() (set(), CustomSet()). Items that are constants only.
    PyObject* type = typeOf(t, self);
    if (!type || !PyType_Check(type)) return t.fail("the type of a set");
    std::string inner;
    for (const ValuePtr& item : setIterationOrder(part->as<Set>())) {
      PyObject* c = item->constant();
      if (!c) return t.fail("repr() of a set holding " + describe(item) + " is not supported yet");
      Ref r = Ref::steal(PyObject_Repr(c));
      const char* s = r ? PyUnicode_AsUTF8(r.get()) : nullptr;
      if (!s) return t.failFromPython("repr() of a set item");
      inner += (inner.empty() ? "" : ", ") + std::string(s);
    }
    PyTypeObject* tp = reinterpret_cast<PyTypeObject*>(type);
    std::string out = inner.empty()  ? std::string(tp->tp_name) + "()"
                      : tp == &PySet_Type ? "{" + inner + "}"
                                          : std::string(tp->tp_name) + "({" + inner + "})";
    Ref s = Ref::steal(PyUnicode_FromStringAndSize(out.data(), static_cast<Py_ssize_t>(out.size())));
    if (!s) return t.failFromPython("repr() of a set");
    return Value::constant(s.get());
  }
  if (n[0] == '_' && n[1] == '_' && !is("__contains__") && !is("__init__"))
    return t.fail(std::string(owner->tp_name) + "." + n + "() is not supported yet");
  return callContainerMethod(t, part, name, rest, kwargs);
}

}  // namespace

namespace {
Result<ValuePtr> baseMethod(Tracer& t, PyObject* fn, Args& args, Kwargs& kwargs, bool as_operator);
}  // namespace

Result<ValuePtr> callBaseMethod(Tracer& t, PyObject* fn, Args& args, Kwargs& kwargs) {
  return baseMethod(t, fn, args, kwargs, false);
}

Result<ValuePtr> callBaseMethodAsOperator(Tracer& t, PyObject* fn, Args& args) {
  Kwargs none;
  return baseMethod(t, fn, args, none, true);
}

namespace {
Result<ValuePtr> baseMethod(Tracer& t, PyObject* fn, Args& args, Kwargs& kwargs, bool as_operator) {
  if (fn == objectSlot("__reduce_ex__") && !args.empty()) return objectReduceEx(t, args, kwargs);
  if (args.size() == 2 && kwargs.empty() &&
      fn == PyDict_GetItemString(typeDict(reinterpret_cast<PyTypeObject*>(PyExc_BaseException)), "with_traceback")) {
    // exc.with_traceback(tb) of an exception the trace made (no source: nothing outside saw
    // it yet), with None or a traceback the trace made (a real one, see noteTraceback): done
    // for real; anything else given raises its TypeError for real.
    const Object* o = args[0]->get<Object>();
    PyObject* tb = args[1]->real();
    if (o && args[0]->reg < 0 && PyExceptionInstance_Check(o->obj.get()) && tb &&
        (tb == Py_None || (PyTraceBack_Check(tb) && args[1]->reg < 0))) {
      Ref r = Ref::steal(PyObject_CallMethod(o->obj.get(), "with_traceback", "O", tb));
      if (!r) return t.raisePython();
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
            : part->is(Kind::Set)   ? reinterpret_cast<PyObject*>(containerCType(part))
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
  if (part->is(Kind::Set)) return setBaseMethod(t, args[0], part, owner, name, rest, kwargs);
  if (!part->is(Kind::Dict)) return sequenceBaseMethod(t, args[0], part, owner, name, rest, kwargs, as_operator);
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
  if ((is("__eq__") || is("__ne__")) && rest.size() == 1) {
    // dict.__eq__(a, b) compares the items; OrderedDict.__eq__ their order too. Anything
    // but a dict on the other side: NotImplemented, as the slot wrapper returns it.
    ValuePtr other = rest[0]->is(Kind::Dict) ? rest[0] : basePart(rest[0]);
    if (!other || !other->is(Kind::Dict)) return Value::constant(Py_NotImplemented);
    Result<ValuePtr> r = dictCompare(t, is("__eq__") ? Py_EQ : Py_NE, part, other, owner == &PyDict_Type);
    if (!r.notHandled()) return r;
  }
  if (is("__init__")) {
    if (rest.empty() && kwargs.empty()) return Value::constant(Py_None);
    Result<ValuePtr> r = callContainerMethod(t, part, interned(Str::update), rest, kwargs);
    if (!r) return r;
    return Value::constant(Py_None);
  }
  if (n[0] == '_') return t.fail(std::string(owner->tp_name) + "." + n + "() of a subclass instance is not supported yet");
  return callContainerMethod(t, part, name, rest, kwargs);
}

}  // namespace

}  // namespace cdynamo::trace
