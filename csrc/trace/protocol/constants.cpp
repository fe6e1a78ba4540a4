// What Python sees of symbolic values: the real objects of values made of constants and
// back, calls of pure C functions on constants, and a value's type.
#include <cstring>
#include <string>
#include <unordered_set>

#include "support/lookup.h"
#include "trace/engine/scalars.h"
#include "trace/kinds/iterator.h"
#include "trace/protocol/calls.h"
#include "trace/protocol/constants.h"
#include "trace/protocol/container_methods.h"
#include "trace/protocol/operators.h"
#include "trace/tracer.h"

namespace cdynamo::trace {

Ref realIterator(PyObject* type, PyObject* items) {
  Ref rest = Ref::steal(PySequence_Tuple(items));
  PyObject* make = lookup(Obj::cdynamo_resume_real_iterator);
  Ref pair = rest && make ? Ref::steal(PyObject_CallFunctionObjArgs(make, type ? type : Py_None, rest.get(), nullptr))
                          : Ref();
  if (!pair || !PyTuple_Check(pair.get()) || PyTuple_GET_SIZE(pair.get()) != 2) {
    PyErr_Clear();
    return Ref();
  }
  return pair;
}

bool isImmutableCObject(PyObject* o) {
  // _sre's types, made immutable (no attribute of theirs can be set): a class of the
  // same name cannot pass for them.
  PyTypeObject* type = Py_TYPE(o);
  if (!PyType_HasFeature(type, Py_TPFLAGS_IMMUTABLETYPE)) return false;
  return strcmp(type->tp_name, "re.Pattern") == 0 || strcmp(type->tp_name, "re.Match") == 0;
}

Ref toPython(Tracer& t, const ValuePtr& v) {
  if (PyObject* r = v->real()) {
    // Objects made in the trace for real (exceptions) have no source and nothing to guard;
    // an immutable C object from the program is guarded by identity where it is read.
    if (v->is(Kind::Constant) || v->is(Kind::Callable) || (v->is(Kind::Object) && v->reg < 0)) return Ref::borrow(r);
    if (v->is(Kind::Object) && isImmutableCObject(r)) return Ref::borrow(r);
    return Ref();
  }
  // A container that holds itself (`lst[1] = lst`, `d["me"] = d`) has no constant form;
  // converting its items recursed without end (a crash: the C stack ran out).
  static thread_local std::unordered_set<const Value*> converting;
  if (!converting.insert(v.get()).second) return Ref();
  struct Leave {
    const Value* v;
    ~Leave() { converting.erase(v); }
  } leave{v.get()};
  if (const std::vector<ValuePtr>* items = v->elements()) {
    if (t.iterators().stale(v.get())) return Ref();  // its items are no longer known
    if (const Iterator* it = v->get<Iterator>(); it && it->lazy()) return Ref();  // not known ahead
    Ref list = Ref::steal(PyList_New(0));
    if (!list) return PyErr_Clear(), Ref();
    const Iterator* it = v->get<Iterator>();
    for (size_t i = it ? it->pos : 0; i < items->size(); ++i) {
      const ValuePtr& item = (*items)[i];
      Ref p = toPython(t, item);
      if (!p || PyList_Append(list.get(), p.get()) < 0) return PyErr_Clear(), Ref();
    }
    if (it) {
      // An iterator of the same type over the items it has left (what type(), isinstance()
      // and the consumers see), and its counter (realIterator).
      Ref pair = realIterator(it->type.get(), list.get());
      Ref real = pair ? Ref::borrow(PyTuple_GET_ITEM(pair.get(), 0)) : Ref();
      return real;
    }
    if (const Tuple* tup = v->get<Tuple>(); tup && tup->namedtuple) {
      // An instance of its namedtuple class (type(), isinstance(), repr() see it), made as
      // _make makes one (tuple.__new__, the class's own __new__ not run); a structseq
      // (torch.return_types) from its items. One with attributes of its own is no constant.
      if (tup->attrs) return Ref();
      PyObject* cls = tup->namedtuple.get();
      Ref items = Ref::steal(PyList_AsTuple(list.get()));
      Ref args = items ? Ref::steal(PyTuple_Pack(1, items.get())) : Ref();
      Ref out;
      if (args)
        out = PyType_HasFeature(reinterpret_cast<PyTypeObject*>(cls), Py_TPFLAGS_HEAPTYPE)
                  ? Ref::steal(PyTuple_Type.tp_new(reinterpret_cast<PyTypeObject*>(cls), args.get(), nullptr))
                  : Ref::steal(PyObject_Call(cls, args.get(), nullptr));
      if (!out) PyErr_Clear();
      return out;
    }
    if (const List* l = v->get<List>(); l && l->deque) {
      // A deque (with its maxlen), not a list: what type() and repr() see.
      Ref out = Ref::steal(PyObject_CallFunctionObjArgs(l->deque.get(), list.get(),
                                                        l->maxlen ? l->maxlen.get() : Py_None, nullptr));
      if (!out) PyErr_Clear();
      return out;
    }
    Ref out = v->is(Kind::Tuple) ? Ref::steal(PyList_AsTuple(list.get()))
              : v->is(Kind::Set)   ? Ref::steal(v->as<Set>().frozen ? PyFrozenSet_New(list.get()) : PySet_New(list.get()))
                                   : std::move(list);
    if (!out) PyErr_Clear();  // unhashable items of a set: not a constant
    return out;
  }
  const Dict* dict = v->get<Dict>();
  if (dict && dict->type.get() == reinterpret_cast<PyObject*>(&PyDict_Type)) {
    Ref d = Ref::steal(PyDict_New());
    if (!d) return PyErr_Clear(), Ref();
    for (size_t i = 0; i < dict->keys.size(); ++i) {
      Ref p = toPython(t, dict->values[i]);
      if (!p || PyDict_SetItem(d.get(), dict->keys[i].get(), p.get()) < 0) return PyErr_Clear(), Ref();
    }
    return d;
  }
  if (const DictView* view = v->get<DictView>()) {
    // A real view of a dict of the same keys (and, for values/items, the same constant
    // values): what a pure builtin (len, sorted, set, comparisons) reads of it.
    const Dict& d = view->dict->as<Dict>();
    // A dict of CPython's own type of it (OrderedDict views are odict_keys, ...).
    PyObject* type = d.type.get();
    if (!type || !PyType_Check(type) || PyType_HasFeature(reinterpret_cast<PyTypeObject*>(type), Py_TPFLAGS_HEAPTYPE))
      type = reinterpret_cast<PyObject*>(&PyDict_Type);
    Ref real = Ref::steal(PyObject_CallNoArgs(type));
    if (!real) return PyErr_Clear(), Ref();
    for (size_t i = 0; i < d.keys.size(); ++i) {
      Ref p = view->which == DictView::Keys ? Ref::borrow(Py_None) : toPython(t, d.values[i]);
      if (!p || PyObject_SetItem(real.get(), d.keys[i].get(), p.get()) < 0) return PyErr_Clear(), Ref();
    }
    static const char* const kNames[] = {"keys", "values", "items"};
    Ref r = Ref::steal(PyObject_CallMethod(real.get(), kNames[view->which], nullptr));
    if (!r) PyErr_Clear();
    return r;
  }
  return Ref();
}

Result<ValuePtr> fromPython(Tracer& t, PyObject* o) {
  if (isConstantObject(o)) return Value::constant(o);
  if (PyList_CheckExact(o) || PyTuple_CheckExact(o)) {
    std::vector<ValuePtr> items;
    for (Py_ssize_t i = 0; i < PySequence_Fast_GET_SIZE(o); ++i) {
      Result<ValuePtr> item = fromPython(t, PySequence_Fast_GET_ITEM(o, i));
      if (!item) return item;
      items.push_back(item.take());
    }
    return PyList_CheckExact(o) ? Value::list(std::move(items)) : Value::tuple(std::move(items));
  }
  if (PyDict_CheckExact(o)) {
    std::vector<Ref> keys;
    std::vector<ValuePtr> values;
    PyObject *k, *val;
    Py_ssize_t pos = 0;
    while (PyDict_Next(o, &pos, &k, &val)) {
      Result<ValuePtr> item = fromPython(t, val);
      if (!item) return item;
      keys.push_back(Ref::borrow(k));
      values.push_back(item.take());
    }
    return Value::dict(reinterpret_cast<PyObject*>(&PyDict_Type), std::move(keys), std::move(values));
  }
  if (PyAnySet_CheckExact(o) && !PyFrozenSet_CheckExact(o)) {
    std::vector<ValuePtr> items;
    Ref it = Ref::steal(PyObject_GetIter(o));
    if (!it) return t.failFromPython("iterating a set");
    while (Ref x = Ref::steal(PyIter_Next(it.get()))) items.push_back(Value::constant(x.get()));
    if (PyErr_Occurred()) return t.failFromPython("iterating a set");
    return Value::set(std::move(items));
  }
  if (PyType_Check(o) || PyCFunction_Check(o)) return Value::callable(o);
  if (isImmutableCObject(o)) return Value::object(o, -1);  // pattern.fullmatch("1.2"): a match
  if (PyIter_Check(o) && !PyType_HasFeature(Py_TYPE(o), Py_TPFLAGS_HEAPTYPE)) {
    // An iterator of CPython's own made from constants (range(5).__iter__()): its items,
    // taken now (nothing else holds it), as an iterator of its type.
    constexpr Py_ssize_t kMaxItems = 100000;
    std::vector<ValuePtr> items;
    while (Ref x = Ref::steal(PyIter_Next(o))) {
      if (static_cast<Py_ssize_t>(items.size()) >= kMaxItems) return t.fail("an iterator of more than 100000 items");
      Result<ValuePtr> item = fromPython(t, x.get());
      if (!item) return item;
      items.push_back(item.take());
    }
    if (PyErr_Occurred()) return t.failFromPython("iterating an iterator made from constants");
    return Value::iterator(std::move(items), reinterpret_cast<PyObject*>(Py_TYPE(o)));
  }
  return t.fail(std::string("a value of type ") + Py_TYPE(o)->tp_name + " computed from constants");
}

namespace {

// The real positional tuple and keyword dict of a call whose arguments are all made of
// constants. Leaves *pargs null (no error set) when one is not, or is a Python function or
// method: calling it for real would run Python code now, outside the trace.
Done constantArguments(Tracer& t, Args& args, Kwargs& kwargs, Ref* pargs, Ref* kw) {
  auto real = [&](const ValuePtr& v) {
    Ref p = toPython(t, v);
    if (p && (PyFunction_Check(p.get()) || PyMethod_Check(p.get()))) return Ref();
    return p;
  };
  Ref tuple = Ref::steal(PyTuple_New(static_cast<Py_ssize_t>(args.size())));
  if (!tuple) return t.failFromPython("folding a constant call");
  for (size_t i = 0; i < args.size(); ++i) {
    Ref p = real(args[i]);
    if (!p) return {};
    PyTuple_SET_ITEM(tuple.get(), i, p.release());
  }
  if (!kwargs.empty()) {
    *kw = Ref::steal(PyDict_New());
    if (!*kw) return t.failFromPython("folding a constant call");
    for (auto& [k, v] : kwargs) {
      Ref p = real(v);
      if (!p) return {};
      if (PyDict_SetItem(kw->get(), k.get(), p.get()) < 0) return t.failFromPython("folding a constant call");
    }
  }
  *pargs = std::move(tuple);
  return {};
}

}  // namespace

Result<ValuePtr> foldConstantCall(Tracer& t, PyObject* fn, std::vector<ValuePtr>& args,
                                          std::vector<std::pair<Ref, ValuePtr>>& kwargs) {
  // Which callables are pure functions of their arguments.
  bool pure = false;
  if (PyCFunction_Check(fn)) {
    PyObject* self = PyCFunction_GET_SELF(fn);
    if (self && PyModule_Check(self)) {
      const char* m = PyModule_GetName(self);
      if (!m) return PyErr_Clear(), notHandled();
      pure = strcmp(m, "math") == 0 || strcmp(m, "cmath") == 0 || strcmp(m, "_operator") == 0;
    } else if (self && (isConstantObject(self) || PyUnicode_Check(self))) {
      pure = true;  // a method of an immutable constant: "a.b".split, (1, 2).index, size.numel
    }
  } else if (strcmp(Py_TYPE(fn)->tp_name, "method-wrapper") == 0) {
    Ref self = Ref::steal(PyObject_GetAttrString(fn, "__self__"));
    PyErr_Clear();
    pure = self && isConstantObject(self.get());  // "ab".__len__
  } else if (PyObject_TypeCheck(fn, &PyMethodDescr_Type) && !args.empty() && args[0]->real() &&
             isImmutableCObject(args[0]->real()) && PyObject_TypeCheck(args[0]->real(), PyDescr_TYPE(fn))) {
    pure = true;  // re.Pattern.fullmatch(pattern, "1.2"), re.Match.group(m, "release")
  } else if (PyType_Check(fn)) {
    static const char* const kImmutable[] = {"int", "float", "str", "bool", "complex", "tuple", "frozenset", "bytes",
                                             "range", "slice", "torch.Size", "torch.finfo", "torch.iinfo",
                                             "torch.device"};
    const char* n = reinterpret_cast<PyTypeObject*>(fn)->tp_name;
    for (const char* k : kImmutable) pure = pure || strcmp(n, k) == 0;
  }
  if (!pure) return notHandled();
  // These take an iterable one item at a time and stop at the first that decides: a lazy
  // iterator must keep the rest (and a generator not run ahead). A frozenset's predicates
  // are the set methods' (containers.cpp); operator.contains/indexOf are left to the rules.
  if (PyCFunction_Check(fn) && args.size() == 1) {
    PyObject* self = PyCFunction_GET_SELF(fn);
    const char* name = reinterpret_cast<PyCFunctionObject*>(fn)->m_ml->ml_name;
    if (self && PyAnySet_Check(self) && (strcmp(name, "isdisjoint") == 0 || strcmp(name, "issuperset") == 0)) {
      std::vector<ValuePtr> items;
      Ref it = Ref::steal(PyObject_GetIter(self));
      if (!it) return t.failFromPython("iterating a set");
      while (Ref x = Ref::steal(PyIter_Next(it.get()))) items.push_back(Value::constant(x.get()));
      if (PyErr_Occurred()) return t.failFromPython("iterating a set");
      Ref method = Ref::steal(PyUnicode_FromString(name));
      if (!method) return t.failFromPython("a method name");
      return callContainerMethod(t, Value::frozenSet(std::move(items)), method.get(), args, kwargs);
    }
  }
  if (PyCFunction_Check(fn) && !args.empty())
    if (args[0]->is(Kind::Iterator)) {
      const char* name = reinterpret_cast<PyCFunctionObject*>(fn)->m_ml->ml_name;
      PyObject* self = PyCFunction_GET_SELF(fn);
      if (self && PyModule_Check(self) && (strcmp(name, "contains") == 0 || strcmp(name, "indexOf") == 0))
        return notHandled();
    }
  // An iterator argument is taken whole by these C functions ("".join(map(f, xs))): one
  // made item by item is run to its end first, in order.
  for (const ValuePtr& a : args)
    if (const Iterator* it = a->get<Iterator>(); it && it->lazy())
      if (Done d = drainUserIterator(t, a); !d) return d.stop();
  Ref pargs, kw;
  // Not all constants: the caller decides (tensors go to the graph).
  if (Done d = constantArguments(t, args, kwargs, &pargs, &kw); !d) return d.stop();
  if (!pargs) return notHandled();
  Ref r = Ref::steal(PyObject_Call(fn, pargs.get(), kw.get()));
  if (!r) return t.raisePython();
  for (const ValuePtr& a : args)  // what the call took of an iterator argument: all of it
    if (const Iterator* it = a->get<Iterator>())
      if (Done d = t.iterators().advance(a, it->items.size(), true); !d) return d.stop();
  // torch.finfo/iinfo results are immutable records: keep them as constants.
  const char* rt = Py_TYPE(r.get())->tp_name;
  if (strcmp(rt, "torch.finfo") == 0 || strcmp(rt, "torch.iinfo") == 0) return Value::constant(r.get());
  return fromPython(t, r.get());
}

namespace {

// The pure functions of Python-written standard modules: module name, then the names of
// its module-level functions whose result is a function of their arguments only. Their
// Python bodies read module state the trace cannot model (re's cache is keyed by
// (type, pattern, flags) tuples), so they are run for real on constants instead of traced.
struct PureModuleFunctions {
  const char* module;
  const char* const* names;
};
const char* const kReFunctions[] = {"compile", "match", "fullmatch", "search", "sub", "subn", "split",
                                    "findall", "finditer", "escape", nullptr};
const PureModuleFunctions kPurePythonFunctions[] = {{"re", kReFunctions}};

bool isPurePythonFunction(PyObject* func) {
  if (!PyFunction_Check(func)) return false;
  PyFunctionObject* fo = reinterpret_cast<PyFunctionObject*>(func);
  PyObject* module = PyDict_GetItemString(fo->func_globals, "__name__");
  if (!module || !PyUnicode_Check(module)) return false;
  for (const PureModuleFunctions& row : kPurePythonFunctions) {
    if (PyUnicode_CompareWithASCIIString(module, row.module) != 0) continue;
    for (const char* const* n = row.names; *n; ++n)
      if (PyUnicode_CompareWithASCIIString(fo->func_qualname, *n) == 0) {
        // The module's own function, not one that took its name.
        PyObject* own = PyDict_GetItem(fo->func_globals, fo->func_qualname);
        return own == func;
      }
  }
  return false;
}

}  // namespace

Result<ValuePtr> foldPurePythonFunction(Tracer& t, PyObject* func, Args& args, Kwargs& kwargs) {
  if (!isPurePythonFunction(func)) return notHandled();
  Ref pargs, kw;
  // Not all constants (or re.sub's repl, Python code): traced as the Python it is.
  if (Done d = constantArguments(t, args, kwargs, &pargs, &kw); !d) return d.stop();
  if (!pargs) return notHandled();
  Ref r = Ref::steal(PyObject_Call(func, pargs.get(), kw.get()));
  if (!r) return t.raisePython();  // re.error for a bad pattern: raised in the trace, as eagerly
  return fromPython(t, r.get());
}

PyObject* typeOf(Tracer& t, const ValuePtr& v) {
  switch (v->kind()) {
    case Kind::Tensor: {
      if (isScalarValue(t, v)) return scalarType(t, v);  // float, int or bool when the graph runs
      if (PyObject* example = t.exampleOf(v->as<Tensor>().node)) return reinterpret_cast<PyObject*>(Py_TYPE(example));
      PyObject* tensor = lookup(Obj::torch_Tensor);
      if (!tensor) PyErr_Clear();
      return tensor;
    }
    case Kind::Constant:
    case Kind::Callable:
    case Kind::Module:
    case Kind::PyModule:
    case Kind::Object:
      return reinterpret_cast<PyObject*>(Py_TYPE(v->real()));
    case Kind::Tuple: {
      const Tuple& tuple = v->as<Tuple>();
      return tuple.namedtuple ? tuple.namedtuple.get() : reinterpret_cast<PyObject*>(&PyTuple_Type);
    }
    case Kind::List: {  // a deque's class for a deque (type(), isinstance())
      const List& l = v->as<List>();
      return l.deque ? l.deque.get() : reinterpret_cast<PyObject*>(&PyList_Type);
    }
    case Kind::Dict: return v->as<Dict>().type.get();
    case Kind::Set: return reinterpret_cast<PyObject*>(v->as<Set>().frozen ? &PyFrozenSet_Type : &PySet_Type);
    case Kind::Slice: return reinterpret_cast<PyObject*>(&PySlice_Type);
    case Kind::Function: return reinterpret_cast<PyObject*>(&PyFunction_Type);
    case Kind::NewObject: return v->as<NewObject>().cls.get();
    case Kind::BoundMethod:  // a Python function bound (types.MethodType), or a C method of a builtin base bound
      return reinterpret_cast<PyObject*>(PyFunction_Check(v->as<BoundMethod>().function.get()) ? &PyMethod_Type
                                                                                              : &PyCFunction_Type);
    case Kind::NamedMethod: return reinterpret_cast<PyObject*>(&PyCFunction_Type);  // list.append, x.relu
    case Kind::Partial: {
      if (v->as<Partial>().context) return nullptr;  // a function decorated with a context manager
      PyObject* partial = lookup(Obj::functools_partial);
      if (!partial) PyErr_Clear();
      return partial;
    }
    case Kind::Namespace: {
      PyObject* type = lookup(Obj::types_SimpleNamespace);
      if (!type) PyErr_Clear();
      return type;
    }
    case Kind::Iterator: return v->as<Iterator>().type.get();  // null when not known
    case Kind::DictView: return dictViewType(v);
    case Kind::NdArray: {
      PyObject* type = lookup(Obj::numpy_ndarray);
      if (!type) PyErr_Clear();
      return type;
    }
    case Kind::SubclassTensor: return v->as<SubclassTensor>().cls.get();
    case Kind::Null:
    case Kind::Cell:
    case Kind::Context:
    case Kind::Super:
      break;
  }
  return nullptr;
}

}  // namespace cdynamo::trace
