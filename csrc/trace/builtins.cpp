// Python's builtins, modelled on symbolic values. A builtin is recognised by identity
// (never by name). Pure builtins on constants run for real, so their results and errors
// are CPython's own; the others are spelled out over value kinds here.
#include <cstring>
#include <string>

#include "support/lookup.h"
#include "support/torch_types.h"
#include "trace/scalars.h"
#include "trace/tracer.h"

namespace cdynamo::trace {

using graph::NodeOp;

namespace {

// Builtins that are pure functions of constant arguments: evaluated for real.
const char* const kPureOnConstants[] = {
    "abs", "all", "any", "bin", "bool", "callable", "chr", "divmod", "float", "format", "hash", "hex",
    "int", "isinstance", "issubclass", "len", "max", "min", "oct", "ord", "pow", "range", "repr",
    "round", "sorted", "str", "sum", "tuple", "type", "frozenset", "complex", "ascii", "slice"};

const char* builtinName(PyObject* f) {
  static const char* const kKnown[] = {
      "len", "isinstance", "issubclass", "range", "tuple", "list", "dict", "set", "frozenset", "getattr",
      "hasattr", "setattr", "type", "callable", "enumerate", "zip", "reversed", "map", "filter", "sorted",
      "min", "max", "sum", "abs", "all", "any", "int", "float", "bool", "str", "round", "divmod", "pow",
      "iter", "next", "print", "id", "hash", "repr", "chr", "ord", "hex", "bin", "oct", "format",
      "complex", "ascii", "slice", "super", "object", "input", "open", "exec", "eval", "globals", "locals",
      "vars", "delattr"};
  PyObject* b = PyEval_GetBuiltins();
  if (!b) return nullptr;
  for (const char* k : kKnown)
    if (PyDict_GetItemString(b, k) == f) return k;
  return nullptr;
}

}  // namespace

Ref Tracer::toPython(const ValuePtr& v) {
  if (PyObject* r = v->real()) {
    // Objects made in the trace for real (exceptions) have no source and nothing to guard.
    if (v->is(Kind::Constant) || v->is(Kind::Callable) || (v->is(Kind::Object) && v->reg < 0)) return Ref::borrow(r);
    return Ref();
  }
  if (const std::vector<ValuePtr>* items = v->elements()) {
    auto link = iter_links_.find(v.get());
    if (link != iter_links_.end() && link->second.stale) return Ref();  // its items are no longer known
    Ref list = Ref::steal(PyList_New(0));
    if (!list) return PyErr_Clear(), Ref();
    const Iterator* it = v->get<Iterator>();
    for (size_t i = it ? it->pos : 0; i < items->size(); ++i) {
      const ValuePtr& item = (*items)[i];
      Ref p = toPython(item);
      if (!p || PyList_Append(list.get(), p.get()) < 0) return PyErr_Clear(), Ref();
    }
    Ref out = v->is(Kind::Tuple) ? Ref::steal(PyList_AsTuple(list.get()))
              : v->is(Kind::Set)   ? Ref::steal(PySet_New(list.get()))
                                   : std::move(list);
    if (!out) PyErr_Clear();  // unhashable items of a set: not a constant
    return out;
  }
  const Dict* dict = v->get<Dict>();
  if (dict && dict->type.get() == reinterpret_cast<PyObject*>(&PyDict_Type)) {
    Ref d = Ref::steal(PyDict_New());
    if (!d) return PyErr_Clear(), Ref();
    for (size_t i = 0; i < dict->keys.size(); ++i) {
      Ref p = toPython(dict->values[i]);
      if (!p || PyDict_SetItem(d.get(), dict->keys[i].get(), p.get()) < 0) return PyErr_Clear(), Ref();
    }
    return d;
  }
  return Ref();
}

Result<ValuePtr> Tracer::fromPython(PyObject* o) {
  if (isConstantObject(o)) return Value::constant(o);
  if (PyList_CheckExact(o) || PyTuple_CheckExact(o)) {
    std::vector<ValuePtr> items;
    for (Py_ssize_t i = 0; i < PySequence_Fast_GET_SIZE(o); ++i) {
      Result<ValuePtr> item = fromPython(PySequence_Fast_GET_ITEM(o, i));
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
      Result<ValuePtr> item = fromPython(val);
      if (!item) return item;
      keys.push_back(Ref::borrow(k));
      values.push_back(item.take());
    }
    return Value::dict(reinterpret_cast<PyObject*>(&PyDict_Type), std::move(keys), std::move(values));
  }
  if (PyAnySet_CheckExact(o) && !PyFrozenSet_CheckExact(o)) {
    std::vector<ValuePtr> items;
    Ref it = Ref::steal(PyObject_GetIter(o));
    if (!it) return failFromPython("iterating a set");
    while (Ref x = Ref::steal(PyIter_Next(it.get()))) items.push_back(Value::constant(x.get()));
    if (PyErr_Occurred()) return failFromPython("iterating a set");
    return Value::set(std::move(items));
  }
  if (PyType_Check(o) || PyCFunction_Check(o)) return Value::callable(o);
  return fail(std::string("a value of type ") + Py_TYPE(o)->tp_name + " computed from constants");
}

Result<ValuePtr> Tracer::foldConstantCall(PyObject* fn, std::vector<ValuePtr>& args,
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
  } else if (PyType_Check(fn)) {
    static const char* const kImmutable[] = {"int", "float", "str", "bool", "complex", "tuple", "frozenset", "bytes",
                                             "range", "slice", "torch.Size", "torch.finfo", "torch.iinfo",
                                             "torch.device"};
    const char* n = reinterpret_cast<PyTypeObject*>(fn)->tp_name;
    for (const char* k : kImmutable) pure = pure || strcmp(n, k) == 0;
  }
  if (!pure) return notHandled();
  Ref pargs = Ref::steal(PyTuple_New(static_cast<Py_ssize_t>(args.size())));
  if (!pargs) return failFromPython("folding a constant call");
  for (size_t i = 0; i < args.size(); ++i) {
    Ref p = toPython(args[i]);
    if (!p) return notHandled();  // not all constants: the caller decides (tensors go to the graph)
    if (PyFunction_Check(p.get()) || PyMethod_Check(p.get())) return notHandled();  // would run Python code now
    PyTuple_SET_ITEM(pargs.get(), i, p.release());
  }
  Ref kw;
  if (!kwargs.empty()) {
    kw = Ref::steal(PyDict_New());
    if (!kw) return failFromPython("folding a constant call");
    for (auto& [k, v] : kwargs) {
      Ref p = toPython(v);
      if (!p) return notHandled();
      if (PyDict_SetItem(kw.get(), k.get(), p.get()) < 0) return failFromPython("folding a constant call");
    }
  }
  Ref r = Ref::steal(PyObject_Call(fn, pargs.get(), kw.get()));
  if (!r) return raisePython();
  // torch.finfo/iinfo results are immutable records: keep them as constants.
  const char* rt = Py_TYPE(r.get())->tp_name;
  if (strcmp(rt, "torch.finfo") == 0 || strcmp(rt, "torch.iinfo") == 0) return Value::constant(r.get());
  return fromPython(r.get());
}

PyObject* Tracer::typeOf(const ValuePtr& v) {
  switch (v->kind()) {
    case Kind::Tensor: {
      if (isScalarValue(*this, v)) return scalarType(*this, v);  // float, int or bool when the graph runs
      auto ex = example_of_node_.find(v->as<Tensor>().node);
      if (ex != example_of_node_.end()) return reinterpret_cast<PyObject*>(Py_TYPE(ex->second.get()));
      PyObject* t = lookup(Obj::torch_Tensor);
      if (!t) PyErr_Clear();
      return t;
    }
    case Kind::Constant:
    case Kind::Callable:
    case Kind::Module:
    case Kind::PyModule:
    case Kind::Object:
      return reinterpret_cast<PyObject*>(Py_TYPE(v->real()));
    case Kind::Tuple: {
      const Tuple& t = v->as<Tuple>();
      return t.namedtuple ? t.namedtuple.get() : reinterpret_cast<PyObject*>(&PyTuple_Type);
    }
    case Kind::List: return reinterpret_cast<PyObject*>(&PyList_Type);
    case Kind::Dict: return v->as<Dict>().type.get();
    case Kind::Set: return reinterpret_cast<PyObject*>(&PySet_Type);
    case Kind::Slice: return reinterpret_cast<PyObject*>(&PySlice_Type);
    case Kind::Function: return reinterpret_cast<PyObject*>(&PyFunction_Type);
    case Kind::NewObject: return v->as<NewObject>().cls.get();
    case Kind::Null:
    case Kind::Iterator:
    case Kind::BoundMethod:
    case Kind::NamedMethod:
    case Kind::Cell:
    case Kind::Context:
    case Kind::Super:
    case Kind::Partial:
      break;
  }
  return nullptr;
}

Result<ValuePtr> Tracer::callBuiltin(PyObject* f, std::vector<ValuePtr>& args,
                                     std::vector<std::pair<Ref, ValuePtr>>& kwargs) {
  if (!PyCFunction_Check(f) && !PyType_Check(f)) return notHandled();
  const char* which = builtinName(f);
  if (!which) return notHandled();
  auto is = [which](const char* n) { return strcmp(which, n) == 0; };
  auto constInt = [](long v) { return Value::constant(Ref::steal(PyLong_FromLong(v)).get()); };

  if (is("print") || is("input") || is("open") || is("exec") || is("eval"))
    return fail(std::string(which) + "() has effects outside the program");
  if (is("id")) return fail("id() depends on object addresses, unknown at trace time");
  if (is("super")) return makeSuper(args);
  if (is("object") && args.empty() && kwargs.empty()) return newObject(f, {}, {});
  if (is("setattr") && args.size() == 3 && args[1]->constant() && PyUnicode_Check(args[1]->constant())) {
    if (Done d = storeAttr(args[0], args[1]->constant(), args[2]); !d) return d.stop();
    return Value::constant(Py_None);
  }
  if (is("globals") || is("locals") || is("vars") || is("object") || is("delattr") || is("setattr"))
    return fail(std::string(which) + "() is not supported yet");

  // Pure builtins of values made of constants (key=len included): the real thing.
  for (const char* p : kPureOnConstants) {
    if (!is(p)) continue;
    Ref pargs = Ref::steal(PyTuple_New(static_cast<Py_ssize_t>(args.size())));
    if (!pargs) return failFromPython(std::string(which) + "()");
    bool materialized = true;
    for (size_t i = 0; i < args.size() && materialized; ++i) {
      Ref a = toPython(args[i]);
      if (!a || (args[i]->is(Kind::Callable) && !PyCFunction_Check(a.get()) && !PyType_Check(a.get()))) {
        materialized = false;
        break;
      }
      PyTuple_SET_ITEM(pargs.get(), i, a.release());
    }
    Ref kw;
    if (materialized && !kwargs.empty()) {
      kw = Ref::steal(PyDict_New());
      if (!kw) return failFromPython(std::string(which) + "()");
      for (auto& [k, v] : kwargs) {
        Ref a = toPython(v);
        if (!a || (v->is(Kind::Callable) && !PyCFunction_Check(a.get()) && !PyType_Check(a.get()))) {
          materialized = false;
          break;
        }
        if (PyDict_SetItem(kw.get(), k.get(), a.get()) < 0) return failFromPython(std::string(which) + "()");
      }
    }
    if (!materialized) break;
    Ref r = Ref::steal(PyObject_Call(f, pargs.get(), kw.get()));
    if (!r) return raisePython();
    for (const ValuePtr& a : args)  // consumed, as the real call did
      if (const Iterator* it = a->get<Iterator>())
        if (Done d = advanceIterator(a, it->items.size(), true); !d) return d.stop();
    return fromPython(r.get());
  }

  if (is("len") && args.size() == 1 && kwargs.empty()) {
    const ValuePtr& v = args[0];
    Result<ValuePtr> r = callDunder(v, interned(Str::dunder_len), {});
    if (!r.notHandled()) return r;
    if (v->is(Kind::Tuple) || v->is(Kind::List) || v->is(Kind::Set))
      return constInt(static_cast<long>(v->elements()->size()));
    if (const Dict* d = v->get<Dict>()) return constInt(static_cast<long>(d->values.size()));
    if (v->is(Kind::Tensor)) return recordCall(NodeOp::CallFunction, f, args, {});
    if (isModuleContainer(v)) {
      std::vector<std::pair<Ref, ValuePtr>> children;
      if (Done d = moduleContainerItems(v, &children); !d) return d.stop();
      return constInt(static_cast<long>(children.size()));
    }
  }
  if ((is("isinstance") || is("issubclass")) && args.size() == 2) {
    PyObject* cls = args[1]->real();
    Ref cls_tuple;
    if (const Tuple* classes = args[1]->get<Tuple>()) {
      cls_tuple = Ref::steal(PyTuple_New(static_cast<Py_ssize_t>(classes->items.size())));
      if (!cls_tuple) return failFromPython(std::string(which) + "()");
      for (size_t i = 0; i < classes->items.size(); ++i) {
        PyObject* c = classes->items[i]->real();
        if (!c) return fail("isinstance() with a non-class");
        PyTuple_SET_ITEM(cls_tuple.get(), i, Ref::borrow(c).release());
      }
      cls = cls_tuple.get();
    }
    if (!cls) return fail(std::string(which) + "() with a non-class");
    int r;
    if (is("issubclass")) {
      if (!args[0]->real()) return fail("issubclass() of a non-class");
      r = PyObject_IsSubclass(args[0]->real(), cls);
    } else if (args[0]->real()) {
      r = PyObject_IsInstance(args[0]->real(), cls);
    } else {
      PyObject* t = typeOf(args[0]);
      if (!t) return fail("isinstance() of a value whose type is not known");
      r = PyObject_IsSubclass(t, cls);
    }
    if (r < 0) return failFromPython(std::string(which) + "()");
    return Value::constant(r ? Py_True : Py_False);
  }
  if (is("type") && args.size() == 1) {
    PyObject* t = typeOf(args[0]);
    if (!t) return fail("type() of a value whose type is not known");
    return Value::callable(t);
  }
  if (is("callable") && args.size() == 1) {
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
  if ((is("tuple") || is("list") || is("set") || is("frozenset")) && args.size() <= 1 && kwargs.empty()) {
    std::vector<ValuePtr> items;
    if (!args.empty())
      if (Done d = iterate(args[0], &items); !d) return d.stop();
    if (is("tuple")) return Value::tuple(std::move(items));
    if (is("list")) return Value::list(std::move(items));
    ValuePtr s = Value::set({});
    std::vector<ValuePtr> a(1);
    std::vector<std::pair<Ref, ValuePtr>> kw;
    for (const ValuePtr& v : items) {
      a[0] = v;
      if (Result<ValuePtr> r = callContainerMethod(s, interned(Str::add), a, kw); !r) return r;
    }
    if (is("frozenset")) {
      Ref fs = Ref::steal(PyFrozenSet_New(nullptr));
      if (!fs) return failFromPython("frozenset()");
      for (const ValuePtr& v : s->as<Set>().items) {
        if (!v->real()) return fail("frozenset() of values made in the trace (tensors) is not supported yet");
        if (PySet_Add(fs.get(), v->real()) < 0) return failFromPython("frozenset()");
      }
      return Value::constant(fs.get());
    }
    return s;
  }
  if (is("dict")) {
    ValuePtr d = Value::dict(f, {}, {});
    if (Result<ValuePtr> r = callContainerMethod(d, interned(Str::update), args, kwargs); !r) return r;
    return d;
  }
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
      if (args[0]->is(Kind::Object)) {
        Result<bool> has = objectHasAttr(args[0], attr_name);
        if (!has) return has.stop();
        if (!*has) return args[2];
      } else if (args[0]->real()) {
        int has = PyObject_HasAttr(args[0]->real(), attr_name);
        if (!has) return args[2];
      } else if (const NewObject* o = args[0]->get<NewObject>()) {
        if (!newObjectHas(*o)) return args[2];
      }
    }
    return getAttr(args[0], attr_name);
  }
  if (is("hasattr") && args.size() == 2 && attr_name) {
    if (args[0]->is(Kind::Object)) {
      Result<bool> has = objectHasAttr(args[0], attr_name);
      if (!has) return has.stop();
      return Value::constant(*has ? Py_True : Py_False);
    }
    PyObject* probe = args[0]->real();
    if (const Tensor* t = args[0]->get<Tensor>())
      probe = isScalarValue(*this, args[0]) ? scalarType(*this, args[0]) : graph_.fake(t->node);
    if (const NewObject* o = args[0]->get<NewObject>()) return Value::constant(newObjectHas(*o) ? Py_True : Py_False);
    if (!probe) return fail("hasattr() on a value that cannot be probed");
    int r = PyObject_HasAttr(probe, attr_name);
    return Value::constant(r ? Py_True : Py_False);
  }
  if (is("iter") && args.size() == 1) return getIter(args[0]);
  if (is("next") && (args.size() == 1 || args.size() == 2)) {
    const ValuePtr& it = args[0];
    const Iterator* iter = it->get<Iterator>();
    if (!iter) return fail("next() of a non-iterator");
    if (iter->pos < iter->items.size()) {
      ValuePtr item = iter->items[iter->pos];
      if (Done d = advanceIterator(it, iter->pos + 1, false); !d) return d.stop();
      return item;
    }
    if (Done d = advanceIterator(it, iter->pos, true); !d) return d.stop();
    if (args.size() == 2) return args[1];
    PyErr_SetNone(PyExc_StopIteration);
    return raisePython();
  }
  if (is("enumerate") && !args.empty() && args.size() <= 2) {
    std::vector<ValuePtr> items;
    if (Done d = peekItems(args[0], &items); !d) return d.stop();  // an iterator is consumed as the result is
    long start = 0;
    if (args.size() == 2) {
      if (!args[1]->is(Kind::Constant)) return fail("enumerate() start must be a constant");
      start = PyLong_AsLong(args[1]->constant());
    }
    for (auto& [k, v] : kwargs) {
      if (PyUnicode_CompareWithASCIIString(k.get(), "start") != 0 || !v->is(Kind::Constant)) return fail("enumerate() keyword");
      start = PyLong_AsLong(v->constant());
    }
    std::vector<ValuePtr> pairs;
    for (size_t i = 0; i < items.size(); ++i) pairs.push_back(Value::tuple({constInt(start + static_cast<long>(i)), items[i]}));
    ValuePtr it = Value::iterator(std::move(pairs));
    if (args[0]->is(Kind::Iterator)) {
      std::vector<size_t> consumed(items.size());
      for (size_t k = 0; k < items.size(); ++k) consumed[k] = k + 1;
      linkIterator(it, {args[0]}, std::move(consumed), {items.size()}, {true});
    }
    return it;
  }
  if (is("zip") && kwargs.size() <= 1) {
    bool strict = false;
    for (auto& [k, v] : kwargs) {
      if (PyUnicode_CompareWithASCIIString(k.get(), "strict") != 0 || !v->is(Kind::Constant)) return fail("zip() keyword");
      strict = PyObject_IsTrue(v->constant()) == 1;
    }
    std::vector<std::vector<ValuePtr>> seqs(args.size());
    size_t n = SIZE_MAX;
    for (size_t i = 0; i < args.size(); ++i) {
      if (Done d = peekItems(args[i], &seqs[i]); !d) return d.stop();  // iterators are consumed as the result is
      if (strict && n != SIZE_MAX && seqs[i].size() != n) return fail("zip(strict=True) of unequal lengths (ValueError)");
      n = std::min(n, seqs[i].size());
    }
    if (args.empty()) n = 0;
    std::vector<ValuePtr> rows;
    for (size_t k = 0; k < n; ++k) {
      std::vector<ValuePtr> row;
      for (auto& s : seqs) row.push_back(s[k]);
      rows.push_back(Value::tuple(std::move(row)));
    }
    ValuePtr it = Value::iterator(std::move(rows));
    linkLockstep(it, args, 0, seqs, n, strict);
    return it;
  }
  if (is("reversed") && args.size() == 1) {
    std::vector<ValuePtr> items;
    if (args[0]->is(Kind::Iterator)) return fail("reversed() of an iterator (TypeError)");
    if (Done d = iterate(args[0], &items); !d) return d.stop();
    return Value::iterator(std::vector<ValuePtr>(items.rbegin(), items.rend()));
  }
  if ((is("map") || is("filter")) && args.size() >= 2) {
    if (is("filter") && args.size() != 2) return fail("filter() takes two arguments (TypeError)");
    std::vector<std::vector<ValuePtr>> seqs(args.size() - 1);
    size_t n = SIZE_MAX;
    for (size_t i = 1; i < args.size(); ++i) {
      if (Done d = peekItems(args[i], &seqs[i - 1]); !d) return d.stop();  // iterators are consumed as the result is
      n = std::min(n, seqs[i - 1].size());
    }
    std::vector<size_t> kept;  // filter: the source index of each item kept
    // The function runs for every item now; the real map/filter run it as items are taken.
    const uint64_t mutations_before = mutations_;
    const int nodes_before = graph_.numNodes();
    std::vector<ValuePtr> results;
    for (size_t k = 0; k < n; ++k) {
      std::vector<ValuePtr> row;
      for (auto& s : seqs) row.push_back(s[k]);
      if (is("map")) {
        Result<ValuePtr> r = call(args[0], std::move(row), {});
        if (!r) return r;
        results.push_back(r.take());
      } else {
        ValuePtr keep = row[0];
        Result<bool> t = false;
        if (args[0]->isNone()) {
          t = truthValue(keep);
        } else {
          Result<ValuePtr> r = call(args[0], std::move(row), {});
          if (!r) return r;
          t = truthValue(*r);
        }
        if (!t) return t.stop();
        if (*t) {
          results.push_back(keep);
          kept.push_back(k);
        }
      }
    }
    ValuePtr it = Value::iterator(std::move(results));
    if (mutations_ != mutations_before || graph_.anyImpureFrom(nodes_before))
      return fail(std::string(is("map") ? "map()" : "filter()") +
                  " with a function that changes state: it runs lazily, item by item, in Python "
                  "(not modeled)");
    if (is("map")) {
      linkLockstep(it, args, 1, seqs, n, false);
    } else if (args[1]->is(Kind::Iterator)) {
      std::vector<size_t> consumed;
      for (size_t k : kept) consumed.push_back(k + 1);  // up to the item kept
      linkIterator(it, {args[1]}, std::move(consumed), {n}, {true});
    }
    return it;
  }
  if (is("sum") && !args.empty() && args.size() <= 2) {
    std::vector<ValuePtr> items;
    if (Done d = iterate(args[0], &items); !d) return d.stop();
    Result<ValuePtr> acc = args.size() == 2 ? args[1] : constInt(0);
    for (auto& [k, v] : kwargs) {
      if (PyUnicode_CompareWithASCIIString(k.get(), "start") != 0) return fail("sum() keyword");
      acc = v;
    }
    for (const ValuePtr& v : items) {
      acc = binaryOp(0, *acc, v);  // NB_ADD
      if (!acc) return acc;
    }
    return acc;
  }
  if ((is("min") || is("max") || is("sorted") || is("all") || is("any")) && !args.empty() && kwargs.empty()) {
    std::vector<ValuePtr> items;
    if (args.size() == 1) {
      if (Done d = iterate(args[0], &items); !d) return d.stop();
    } else {
      items = args;
    }
    if (is("all") || is("any")) {
      bool want = is("any");
      for (const ValuePtr& v : items) {
        Result<bool> t = truthValue(v);
        if (!t) return t.stop();
        if (*t == want) return Value::constant(want ? Py_True : Py_False);
      }
      return Value::constant(want ? Py_False : Py_True);
    }
    bool constants = true;
    for (const ValuePtr& v : items) constants = constants && v->is(Kind::Constant);
    if (constants) {
      std::vector<ValuePtr> one{Value::tuple(items)};
      Ref tup = Ref::steal(PyTuple_New(static_cast<Py_ssize_t>(items.size())));
      if (!tup) return failFromPython(std::string(which) + "()");
      for (size_t i = 0; i < items.size(); ++i) PyTuple_SET_ITEM(tup.get(), i, Ref::borrow(items[i]->constant()).release());
      std::vector<ValuePtr> cargs{Value::constant(tup.get())};
      std::vector<std::pair<Ref, ValuePtr>> nokw;
      return callBuiltin(f, cargs, nokw);
    }
    return fail(std::string(which) + "() over tensors depends on their values");
  }
  if ((is("float") || is("int") || is("bool")) && args.size() == 1 && kwargs.empty() && args[0]->is(Kind::Tensor))
    return readTensorValue(*this, args[0], which);  // scalars.h
  if ((is("abs") || is("pow") || is("divmod") || is("round") || is("float") || is("int") || is("bool")) &&
      !args.empty() && args[0]->is(Kind::Tensor)) {
    if (is("abs")) {
      PyObject* abs = lookup(Obj::operator_abs);
      if (!abs) return failFromPython("operator.abs");
      return recordCall(NodeOp::CallFunction, abs, args, {});
    }
    if (is("pow") && args.size() == 2) return binaryOp(8, args[0], args[1]);  // NB_POWER
    if (is("round") && args.size() == 1) return recordCall(NodeOp::CallFunction, f, args, {});
    return fail(std::string(which) + "() of a tensor reads its value (data-dependent)");
  }
  if (is("str") && args.size() == 1 && args[0]->is(Kind::Tensor))
    return fail("str() of a tensor reads its value");
  return fail(std::string(which) + "() with these arguments is not supported yet");
}

}  // namespace cdynamo::trace
