// Python's builtins, modelled on symbolic values. A builtin is recognised by identity
// (never by name). Pure builtins on constants run for real, so their results and errors
// are CPython's own; the others are spelled out over value kinds here.
#include <cstring>
#include <string>

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
  if (v->is(Kind::Tuple) || v->is(Kind::List) || v->is(Kind::Set) || v->is(Kind::Iterator)) {
    auto link = iter_links_.find(v.get());
    if (link != iter_links_.end() && link->second.stale) return Ref();  // its items are no longer known
    Ref list = Ref::steal(PyList_New(0));
    for (size_t i = v->is(Kind::Iterator) ? v->pos : 0; i < v->items.size(); ++i) {
      const ValuePtr& item = v->items[i];
      Ref p = toPython(item);
      if (!p) return Ref();
      PyList_Append(list.get(), p.get());
    }
    if (v->is(Kind::Tuple)) return Ref::steal(PyList_AsTuple(list.get()));
    if (v->is(Kind::Set)) return Ref::steal(PySet_New(list.get()));
    return list;
  }
  if (v->is(Kind::Dict) && v->obj.get() == reinterpret_cast<PyObject*>(&PyDict_Type)) {
    Ref d = Ref::steal(PyDict_New());
    for (size_t i = 0; i < v->keys.size(); ++i) {
      Ref p = toPython(v->items[i]);
      if (!p) return Ref();
      PyDict_SetItem(d.get(), v->keys[i].get(), p.get());
    }
    return d;
  }
  return Ref();
}

ValuePtr Tracer::fromPython(PyObject* o) {
  if (isConstantObject(o)) return Value::constant(o);
  if (PyList_CheckExact(o) || PyTuple_CheckExact(o)) {
    std::vector<ValuePtr> items;
    for (Py_ssize_t i = 0; i < PySequence_Fast_GET_SIZE(o); ++i) {
      ValuePtr item = fromPython(PySequence_Fast_GET_ITEM(o, i));
      if (!item) return nullptr;
      items.push_back(std::move(item));
    }
    return Value::sequence(PyList_CheckExact(o) ? Kind::List : Kind::Tuple, std::move(items));
  }
  if (PyDict_CheckExact(o)) {
    std::vector<Ref> keys;
    std::vector<ValuePtr> values;
    PyObject *k, *val;
    Py_ssize_t pos = 0;
    while (PyDict_Next(o, &pos, &k, &val)) {
      ValuePtr item = fromPython(val);
      if (!item) return nullptr;
      keys.push_back(Ref::borrow(k));
      values.push_back(std::move(item));
    }
    return Value::dict(reinterpret_cast<PyObject*>(&PyDict_Type), std::move(keys), std::move(values));
  }
  if (PyAnySet_CheckExact(o) && !PyFrozenSet_CheckExact(o)) {
    std::vector<ValuePtr> items;
    Ref it = Ref::steal(PyObject_GetIter(o));
    while (PyObject* x = PyIter_Next(it.get())) {
      items.push_back(Value::constant(x));
      Py_DECREF(x);
    }
    return Value::sequence(Kind::Set, std::move(items));
  }
  if (PyType_Check(o) || PyCFunction_Check(o)) return Value::object(Kind::Callable, o);
  return fail(std::string("a value of type ") + Py_TYPE(o)->tp_name + " computed from constants");
}

ValuePtr Tracer::foldConstantCall(PyObject* fn, std::vector<ValuePtr>& args,
                                  std::vector<std::pair<Ref, ValuePtr>>& kwargs, bool* handled) {
  *handled = false;
  // Which callables are pure functions of their arguments.
  bool pure = false;
  if (PyCFunction_Check(fn)) {
    PyObject* self = PyCFunction_GET_SELF(fn);
    if (self && PyModule_Check(self)) {
      const char* m = PyModule_GetName(self);
      if (!m) return PyErr_Clear(), nullptr;
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
  if (!pure) return nullptr;
  Ref pargs = Ref::steal(PyTuple_New(static_cast<Py_ssize_t>(args.size())));
  for (size_t i = 0; i < args.size(); ++i) {
    Ref p = toPython(args[i]);
    if (!p) return nullptr;  // not all constants: the caller decides (tensors go to the graph)
    if (PyFunction_Check(p.get()) || PyMethod_Check(p.get())) return nullptr;  // would run Python code now
    PyTuple_SET_ITEM(pargs.get(), i, p.release());
  }
  Ref kw;
  if (!kwargs.empty()) {
    kw = Ref::steal(PyDict_New());
    for (auto& [k, v] : kwargs) {
      Ref p = toPython(v);
      if (!p) return nullptr;
      PyDict_SetItem(kw.get(), k.get(), p.get());
    }
  }
  *handled = true;
  Ref r = Ref::steal(PyObject_Call(fn, pargs.get(), kw.get()));
  if (!r) return raisePython();
  // torch.finfo/iinfo results are immutable records: keep them as constants.
  const char* rt = Py_TYPE(r.get())->tp_name;
  if (strcmp(rt, "torch.finfo") == 0 || strcmp(rt, "torch.iinfo") == 0) return Value::constant(r.get());
  return fromPython(r.get());
}

PyObject* Tracer::typeOf(const ValuePtr& v) {
  switch (v->kind) {
    case Kind::Tensor: {
      if (isScalarValue(*this, v)) return scalarType(*this, v);  // float, int or bool when the graph runs
      auto ex = example_of_node_.find(v->node);
      if (ex != example_of_node_.end()) return reinterpret_cast<PyObject*>(Py_TYPE(ex->second.get()));
      Ref torch = Ref::steal(PyImport_ImportModule("torch"));
      Ref t = torch ? Ref::steal(PyObject_GetAttrString(torch.get(), "Tensor")) : Ref();
      return t.get();  // torch.Tensor lives as long as torch
    }
    case Kind::Constant:
    case Kind::Callable:
    case Kind::Module:
    case Kind::PyModule:
    case Kind::Object:
      return reinterpret_cast<PyObject*>(Py_TYPE(v->obj.get()));
    case Kind::Tuple: return v->obj ? v->obj.get() : reinterpret_cast<PyObject*>(&PyTuple_Type);
    case Kind::List: return reinterpret_cast<PyObject*>(&PyList_Type);
    case Kind::Dict: return v->obj.get();
    case Kind::Set: return reinterpret_cast<PyObject*>(&PySet_Type);
    case Kind::Slice: return reinterpret_cast<PyObject*>(&PySlice_Type);
    case Kind::Function: return reinterpret_cast<PyObject*>(&PyFunction_Type);
    case Kind::Null:
    case Kind::Iterator:
    case Kind::NewObject:
      return v->obj.get();
    case Kind::Method:
    case Kind::Cell:
    case Kind::Context:
    case Kind::Super:
    case Kind::Partial:
      break;
  }
  return nullptr;
}

ValuePtr Tracer::callBuiltin(PyObject* f, std::vector<ValuePtr>& args,
                             std::vector<std::pair<Ref, ValuePtr>>& kwargs, bool* handled) {
  *handled = false;
  if (!PyCFunction_Check(f) && !PyType_Check(f)) return nullptr;
  const char* which = builtinName(f);
  if (!which) return nullptr;
  *handled = true;
  auto is = [which](const char* n) { return strcmp(which, n) == 0; };
  auto constInt = [](long v) { return Value::constant(Ref::steal(PyLong_FromLong(v)).get()); };

  if (is("print") || is("input") || is("open") || is("exec") || is("eval"))
    return fail(std::string(which) + "() has effects outside the program");
  if (is("id")) return fail("id() depends on object addresses, unknown at trace time");
  if (is("super")) return makeSuper(args);
  if (is("object") && args.empty() && kwargs.empty()) return newObject(f, {}, {});
  if (is("setattr") && args.size() == 3 && args[1]->is(Kind::Constant) && PyUnicode_Check(args[1]->obj.get())) {
    if (!storeAttr(args[0], args[1]->obj.get(), args[2])) return nullptr;
    return Value::constant(Py_None);
  }
  if (is("globals") || is("locals") || is("vars") || is("object") || is("delattr") || is("setattr"))
    return fail(std::string(which) + "() is not supported yet");

  // Pure builtins of values made of constants (key=len included): the real thing.
  for (const char* p : kPureOnConstants) {
    if (!is(p)) continue;
    Ref pargs = Ref::steal(PyTuple_New(static_cast<Py_ssize_t>(args.size())));
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
      for (auto& [k, v] : kwargs) {
        Ref a = toPython(v);
        if (!a || (v->is(Kind::Callable) && !PyCFunction_Check(a.get()) && !PyType_Check(a.get()))) {
          materialized = false;
          break;
        }
        PyDict_SetItem(kw.get(), k.get(), a.get());
      }
    }
    if (!materialized) break;
    Ref r = Ref::steal(PyObject_Call(f, pargs.get(), kw.get()));
    if (!r) return raisePython();
    for (const ValuePtr& a : args)  // consumed, as the real call did
      if (a->is(Kind::Iterator) && !advanceIterator(a, a->items.size(), true)) return nullptr;
    return fromPython(r.get());
  }

  if (is("len") && args.size() == 1 && kwargs.empty()) {
    const ValuePtr& v = args[0];
    bool found = false;
    ValuePtr r = callDunder(v, "__len__", {}, &found);
    if (found) return r;
    if (v->is(Kind::Tuple) || v->is(Kind::List) || v->is(Kind::Dict) || v->is(Kind::Set))
      return constInt(static_cast<long>(v->items.size()));
    if (v->is(Kind::Tensor)) return recordCall(NodeOp::CallFunction, f, args, {});
    if (isModuleContainer(v)) {
      std::vector<std::pair<Ref, ValuePtr>> children;
      if (!moduleContainerItems(v, &children)) return nullptr;
      return constInt(static_cast<long>(children.size()));
    }
  }
  if ((is("isinstance") || is("issubclass")) && args.size() == 2) {
    PyObject* cls = args[1]->obj.get();
    Ref cls_tuple;
    if (args[1]->is(Kind::Tuple)) {
      cls_tuple = Ref::steal(PyTuple_New(static_cast<Py_ssize_t>(args[1]->items.size())));
      for (size_t i = 0; i < args[1]->items.size(); ++i) {
        if (!args[1]->items[i]->obj) return fail("isinstance() with a non-class");
        PyTuple_SET_ITEM(cls_tuple.get(), i, args[1]->items[i]->obj.copy().release());
      }
      cls = cls_tuple.get();
    }
    if (!cls) return fail(std::string(which) + "() with a non-class");
    int r;
    if (is("issubclass")) {
      if (!args[0]->obj) return fail("issubclass() of a non-class");
      r = PyObject_IsSubclass(args[0]->obj.get(), cls);
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
    return Value::object(Kind::Callable, t);
  }
  if (is("callable") && args.size() == 1) {
    const ValuePtr& v = args[0];
    bool c = v->is(Kind::Callable) || v->is(Kind::Method) || v->is(Kind::Function) || v->is(Kind::Module) ||
             (v->real() && PyCallable_Check(v->real()));
    if (v->is(Kind::NewObject)) {
      Ref call = Ref::steal(PyObject_GetAttrString(v->obj.get(), "__call__"));
      PyErr_Clear();
      c = call.get() != nullptr;
    }
    return Value::constant(c ? Py_True : Py_False);
  }
  if ((is("tuple") || is("list") || is("set") || is("frozenset")) && args.size() <= 1 && kwargs.empty()) {
    std::vector<ValuePtr> items;
    if (!args.empty() && !iterate(args[0], &items)) return nullptr;
    if (is("tuple")) return Value::sequence(Kind::Tuple, std::move(items));
    if (is("list")) return Value::sequence(Kind::List, std::move(items));
    ValuePtr s = Value::sequence(Kind::Set, {});
    std::vector<ValuePtr> a(1);
    std::vector<std::pair<Ref, ValuePtr>> kw;
    for (const ValuePtr& v : items) {
      a[0] = v;
      if (!callContainerMethod(s, intern("add"), a, kw)) return nullptr;
    }
    if (is("frozenset")) {
      Ref fs = Ref::steal(PyFrozenSet_New(nullptr));
      for (const ValuePtr& v : s->items) PySet_Add(fs.get(), v->obj.get());
      return Value::constant(fs.get());
    }
    return s;
  }
  if (is("dict")) {
    ValuePtr d = Value::dict(f, {}, {});
    if (!callContainerMethod(d, intern("update"), args, kwargs)) return nullptr;
    return d;
  }
  if (is("getattr") && (args.size() == 2 || args.size() == 3) && args[1]->is(Kind::Constant) &&
      PyUnicode_Check(args[1]->obj.get())) {
    if (args.size() == 3) {
      // With a default, an absent attribute is not an error: only constants' and
      // modules' attributes can be probed without tracing a read.
      if (args[0]->is(Kind::Object)) {
        int has = objectHasAttr(args[0], args[1]->obj.get());
        if (has < 0) return nullptr;
        if (!has) return args[2];
      } else if (args[0]->real()) {
        int has = PyObject_HasAttr(args[0]->real(), args[1]->obj.get());
        if (!has) return args[2];
      } else if (args[0]->is(Kind::NewObject)) {
        int has = args[0]->items[0]->findKey(args[1]->obj.get()) >= 0 ||
                  PyObject_HasAttr(args[0]->obj.get(), args[1]->obj.get());
        if (!has) return args[2];
      }
    }
    return getAttr(args[0], args[1]->obj.get());
  }
  if (is("hasattr") && args.size() == 2 && args[1]->is(Kind::Constant) && PyUnicode_Check(args[1]->obj.get())) {
    if (args[0]->is(Kind::Object)) {
      int has = objectHasAttr(args[0], args[1]->obj.get());
      if (has < 0) return nullptr;
      return Value::constant(has ? Py_True : Py_False);
    }
    PyObject* probe = args[0]->real();
    if (args[0]->is(Kind::Tensor))
      probe = isScalarValue(*this, args[0]) ? scalarType(*this, args[0]) : graph_.fake(args[0]->node);
    if (args[0]->is(Kind::NewObject)) {
      bool has = args[0]->items[0]->findKey(args[1]->obj.get()) >= 0 ||
                 PyObject_HasAttr(args[0]->obj.get(), args[1]->obj.get());
      return Value::constant(has ? Py_True : Py_False);
    }
    if (!probe) return fail("hasattr() on a value that cannot be probed");
    int r = PyObject_HasAttr(probe, args[1]->obj.get());
    return Value::constant(r ? Py_True : Py_False);
  }
  if (is("iter") && args.size() == 1) return getIter(args[0]);
  if (is("next") && (args.size() == 1 || args.size() == 2)) {
    const ValuePtr& it = args[0];
    if (!it->is(Kind::Iterator)) return fail("next() of a non-iterator");
    if (it->pos < it->items.size()) {
      ValuePtr item = it->items[it->pos];
      if (!advanceIterator(it, it->pos + 1, false)) return nullptr;
      return item;
    }
    if (!advanceIterator(it, it->pos, true)) return nullptr;
    if (args.size() == 2) return args[1];
    PyErr_SetNone(PyExc_StopIteration);
    return raisePython();
  }
  if (is("enumerate") && !args.empty() && args.size() <= 2) {
    std::vector<ValuePtr> items;
    if (!peekItems(args[0], &items)) return nullptr;  // an iterator is consumed as the result is
    long start = 0;
    if (args.size() == 2) {
      if (!args[1]->is(Kind::Constant)) return fail("enumerate() start must be a constant");
      start = PyLong_AsLong(args[1]->obj.get());
    }
    for (auto& [k, v] : kwargs) {
      if (PyUnicode_CompareWithASCIIString(k.get(), "start") != 0 || !v->is(Kind::Constant)) return fail("enumerate() keyword");
      start = PyLong_AsLong(v->obj.get());
    }
    auto it = std::make_shared<Value>();
    it->kind = Kind::Iterator;
    for (size_t i = 0; i < items.size(); ++i)
      it->items.push_back(Value::sequence(Kind::Tuple, {constInt(start + static_cast<long>(i)), items[i]}));
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
      strict = PyObject_IsTrue(v->obj.get()) == 1;
    }
    std::vector<std::vector<ValuePtr>> seqs(args.size());
    size_t n = SIZE_MAX;
    for (size_t i = 0; i < args.size(); ++i) {
      if (!peekItems(args[i], &seqs[i])) return nullptr;  // iterators are consumed as the result is
      if (strict && n != SIZE_MAX && seqs[i].size() != n) return fail("zip(strict=True) of unequal lengths (ValueError)");
      n = std::min(n, seqs[i].size());
    }
    if (args.empty()) n = 0;
    auto it = std::make_shared<Value>();
    it->kind = Kind::Iterator;
    for (size_t k = 0; k < n; ++k) {
      std::vector<ValuePtr> row;
      for (auto& s : seqs) row.push_back(s[k]);
      it->items.push_back(Value::sequence(Kind::Tuple, std::move(row)));
    }
    linkLockstep(it, args, 0, seqs, n, strict);
    return it;
  }
  if (is("reversed") && args.size() == 1) {
    std::vector<ValuePtr> items;
    if (args[0]->is(Kind::Iterator)) return fail("reversed() of an iterator (TypeError)");
    if (!iterate(args[0], &items)) return nullptr;
    auto it = std::make_shared<Value>();
    it->kind = Kind::Iterator;
    it->items.assign(items.rbegin(), items.rend());
    return it;
  }
  if ((is("map") || is("filter")) && args.size() >= 2) {
    if (is("filter") && args.size() != 2) return fail("filter() takes two arguments (TypeError)");
    std::vector<std::vector<ValuePtr>> seqs(args.size() - 1);
    size_t n = SIZE_MAX;
    for (size_t i = 1; i < args.size(); ++i) {
      if (!peekItems(args[i], &seqs[i - 1])) return nullptr;  // iterators are consumed as the result is
      n = std::min(n, seqs[i - 1].size());
    }
    std::vector<size_t> kept;  // filter: the source index of each item kept
    // The function runs for every item now; the real map/filter run it as items are taken.
    const uint64_t mutations_before = mutations_;
    const int nodes_before = graph_.numNodes();
    auto it = std::make_shared<Value>();
    it->kind = Kind::Iterator;
    for (size_t k = 0; k < n; ++k) {
      std::vector<ValuePtr> row;
      for (auto& s : seqs) row.push_back(s[k]);
      if (is("map")) {
        ValuePtr r = call(args[0], std::move(row), {});
        if (!r) return nullptr;
        it->items.push_back(std::move(r));
      } else {
        ValuePtr keep = row[0];
        int t;
        if (args[0]->is(Kind::Constant) && args[0]->obj.get() == Py_None) {
          t = truthValue(keep);
        } else {
          ValuePtr r = call(args[0], std::move(row), {});
          if (!r) return nullptr;
          t = truthValue(r);
        }
        if (t < 0) return nullptr;
        if (t) {
          it->items.push_back(keep);
          kept.push_back(k);
        }
      }
    }
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
    if (!iterate(args[0], &items)) return nullptr;
    ValuePtr acc = args.size() == 2 ? args[1] : constInt(0);
    for (auto& [k, v] : kwargs) {
      if (PyUnicode_CompareWithASCIIString(k.get(), "start") != 0) return fail("sum() keyword");
      acc = v;
    }
    for (const ValuePtr& v : items) {
      acc = binaryOp(0, acc, v);  // NB_ADD
      if (!acc) return nullptr;
    }
    return acc;
  }
  if ((is("min") || is("max") || is("sorted") || is("all") || is("any")) && !args.empty() && kwargs.empty()) {
    std::vector<ValuePtr> items;
    if (args.size() == 1) {
      if (!iterate(args[0], &items)) return nullptr;
    } else {
      items = args;
    }
    if (is("all") || is("any")) {
      bool want = is("any");
      for (const ValuePtr& v : items) {
        int t = truthValue(v);
        if (t < 0) return nullptr;
        if ((t != 0) == want) return Value::constant(want ? Py_True : Py_False);
      }
      return Value::constant(want ? Py_False : Py_True);
    }
    bool constants = true;
    for (const ValuePtr& v : items) constants = constants && v->is(Kind::Constant);
    if (constants) {
      std::vector<ValuePtr> one{Value::sequence(Kind::Tuple, items)};
      Ref tup = Ref::steal(PyTuple_New(static_cast<Py_ssize_t>(items.size())));
      for (size_t i = 0; i < items.size(); ++i) PyTuple_SET_ITEM(tup.get(), i, items[i]->obj.copy().release());
      std::vector<ValuePtr> cargs{Value::constant(tup.get())};
      std::vector<std::pair<Ref, ValuePtr>> nokw;
      return callBuiltin(f, cargs, nokw, handled);
    }
    return fail(std::string(which) + "() over tensors depends on their values");
  }
  if ((is("float") || is("int") || is("bool")) && args.size() == 1 && kwargs.empty() && args[0]->is(Kind::Tensor))
    return readTensorValue(*this, args[0], which);  // scalars.h
  if ((is("abs") || is("pow") || is("divmod") || is("round") || is("float") || is("int") || is("bool")) &&
      !args.empty() && args[0]->is(Kind::Tensor)) {
    if (is("abs")) return recordCall(NodeOp::CallFunction, operatorFunction("abs"), args, {});
    if (is("pow") && args.size() == 2) return binaryOp(8, args[0], args[1]);  // NB_POWER
    if (is("round") && args.size() == 1) return recordCall(NodeOp::CallFunction, f, args, {});
    return fail(std::string(which) + "() of a tensor reads its value (data-dependent)");
  }
  if (is("str") && args.size() == 1 && args[0]->is(Kind::Tensor))
    return fail("str() of a tensor reads its value");
  return fail(std::string(which) + "() with these arguments is not supported yet");
}

}  // namespace cdynamo::trace
