// Lists, tuples, dicts and sets made in the trace: their methods, item assignment, and the
// opcodes that build and update them (handlers.h).
// Containers read from the program's inputs are not mutated here (that is a side effect
// to replay, which comes with graph breaks): such a mutation stops the trace.
#include <algorithm>
#include <cstring>
#include <string>

#include "support/check.h"
#include "support/lookup.h"
#include "support/torch_types.h"
#include "trace/handlers.h"
#include "trace/ops.h"
#include "trace/scalars.h"
#include "trace/tracer.h"

namespace cdynamo::trace {

using bytecode::Op;

bool sameValue(const ValuePtr& a, const ValuePtr& b, int* eq) {
  const Tensor* ta = a->get<Tensor>();
  const Tensor* tb = b->get<Tensor>();
  if (a == b || (ta && tb && ta->node == tb->node)) return *eq = 1, true;
  if (a->constant() && b->constant()) {
    *eq = PyObject_RichCompareBool(a->constant(), b->constant(), Py_EQ);
    return *eq >= 0;
  }
  // A tuple made in the trace against a constant tuple: item by item.
  const Tuple* tup = a->get<Tuple>() ? a->get<Tuple>() : b->get<Tuple>();
  PyObject* ctup = a->get<Tuple>() ? b->constant() : a->constant();
  if (tup && !tup->namedtuple && ctup && PyTuple_CheckExact(ctup)) {
    if (static_cast<size_t>(PyTuple_GET_SIZE(ctup)) != tup->items.size()) return *eq = 0, true;
    for (size_t i = 0; i < tup->items.size(); ++i) {
      int item_eq;
      if (!sameValue(tup->items[i], Value::constant(PyTuple_GET_ITEM(ctup, static_cast<Py_ssize_t>(i))), &item_eq))
        return false;
      if (!item_eq) return *eq = 0, true;
    }
    return *eq = 1, true;
  }
  // A constant never equals a module or a function made in the trace (their == is
  // identity); against a container or an object, it is not known here.
  auto identityOnly = [](const ValuePtr& v) { return v->is(Kind::Module) || v->is(Kind::Function) || v->is(Kind::Cell); };
  if ((a->constant() && identityOnly(b)) || (b->constant() && identityOnly(a))) return *eq = 0, true;
  // Two objects read from the program whose classes keep object's __eq__: equal when they
  // are one object, which their guards fix (each is guarded by type, two of one type by
  // aliasing: Tracer::wrap).
  const Object* oa = a->get<Object>();
  const Object* ob = b->get<Object>();
  if (oa && ob && a->reg >= 0 && b->reg >= 0 &&
      Py_TYPE(oa->obj.get())->tp_richcompare == PyBaseObject_Type.tp_richcompare &&
      Py_TYPE(ob->obj.get())->tp_richcompare == PyBaseObject_Type.tp_richcompare)
    return *eq = oa->obj.get() == ob->obj.get(), true;
  return false;
}

namespace {

bool isHashableConstant(const ValuePtr& v) { return v->constant() && PyObject_Hash(v->constant()) != -1; }

// Set members the trace can compare: hashable constants, and modules (hashed and compared
// by identity, as nn.Module does: named_modules() keeps a set of them).
bool isSetMember(const ValuePtr& v) {
  if (v->is(Kind::Module) || v->is(Kind::Tensor)) return true;
  if (isHashableConstant(v)) return true;
  PyErr_Clear();
  return false;
}

PyObject* longOf(Py_ssize_t n) { return PyLong_FromSsize_t(n); }


// The constant int argument `i`, if it is one.
bool constIntArg(const std::vector<ValuePtr>& args, size_t i, Py_ssize_t* out) {
  PyObject* c = i < args.size() ? args[i]->constant() : nullptr;
  if (!c || !PyLong_Check(c)) return false;
  *out = PyLong_AsSsize_t(c);
  return true;
}

Result<ValuePtr> sortConstants(Tracer& t, std::vector<ValuePtr>& items, std::vector<std::pair<Ref, ValuePtr>>& kwargs);
Result<ValuePtr> dictUpdate(Tracer& t, const ValuePtr& self, std::vector<ValuePtr>& args,
                            std::vector<std::pair<Ref, ValuePtr>>& kwargs);

Result<ValuePtr> namedTupleMethod(Tracer& t, const ValuePtr& self, const char* n,
                                          std::vector<std::pair<Ref, ValuePtr>>& kwargs) {
  auto is = [n](const char* m) { return strcmp(n, m) == 0; };
  const Tuple& nt = self->as<Tuple>();
  if (!nt.namedtuple || !(is("_replace") || is("_asdict"))) return notHandled();
  Ref fields = Ref::steal(PyObject_GetAttrString(nt.namedtuple.get(), "_fields"));
  if (!fields) return t.failFromPython("namedtuple fields");
  if (is("_asdict")) {
    std::vector<Ref> keys;
    for (Py_ssize_t i = 0; i < PyTuple_GET_SIZE(fields.get()); ++i)
      keys.push_back(Ref::borrow(PyTuple_GET_ITEM(fields.get(), i)));
    return Value::dict(reinterpret_cast<PyObject*>(&PyDict_Type), std::move(keys), nt.items);
  }
  Tuple replaced{nt.items, nt.namedtuple.copy()};
  for (auto& [k, v] : kwargs) {
    bool found = false;
    for (Py_ssize_t i = 0; i < PyTuple_GET_SIZE(fields.get()); ++i)
      if (PyUnicode_Compare(PyTuple_GET_ITEM(fields.get(), i), k.get()) == 0) {
        replaced.items[static_cast<size_t>(i)] = v;
        found = true;
      }
    if (!found) return t.fail("_replace() got an unexpected field (ValueError)");
  }
  return Value::of(std::move(replaced));
}

Result<ValuePtr> dequeMethod(Tracer& t, const ValuePtr& self, const char* n, std::vector<ValuePtr>& args) {
  auto is = [n](const char* m) { return strcmp(n, m) == 0; };
  List& q = self->as<List>();
  if (!q.deque) return notHandled();
  std::vector<ValuePtr>& items = q.items;
  long maxlen = q.maxlen ? PyLong_AsLong(q.maxlen.get()) : -1;
  auto trim = [&](bool from_left) {
    while (maxlen >= 0 && static_cast<long>(items.size()) > maxlen)
      items.erase(from_left ? items.begin() : items.end() - 1);
  };
  if (is("append") || is("appendleft") || is("extend") || is("extendleft") || is("pop") || is("popleft")) {
    if (Done d = t.effects().noteContainerMutation(self); !d) return d.stop();
    if ((is("append") || is("appendleft")) && args.size() == 1) {
      if (is("append")) {
        items.push_back(args[0]);
        trim(true);
      } else {
        items.insert(items.begin(), args[0]);
        trim(false);
      }
      return Value::constant(Py_None);
    }
    if ((is("extend") || is("extendleft")) && args.size() == 1) {
      // Item by item, as deque does: a lazy iterator's next item sees the ones added.
      Result<ValuePtr> source = args[0] == self ? Value::list(items) : getIter(t, args[0]);
      if (!source) return source;
      Done d = forEachItem(t, *source, [&](ValuePtr m) -> Done {
        if (is("extend")) {
          items.push_back(std::move(m));
          trim(true);
        } else {
          items.insert(items.begin(), std::move(m));
          trim(false);
        }
        return {};
      });
      if (!d) return d.stop();
      return Value::constant(Py_None);
    }
    if ((is("pop") || is("popleft")) && args.empty()) {
      if (items.empty()) return t.raiseNew(PyExc_IndexError, "pop from an empty deque");
      ValuePtr v = is("pop") ? items.back() : items.front();
      items.erase(is("pop") ? items.end() - 1 : items.begin());
      return v;
    }
  }
  if (is("insert") && args.size() == 2) {
    Py_ssize_t k, sz = static_cast<Py_ssize_t>(items.size());
    if (!constIntArg(args, 0, &k)) return t.fail("deque.insert needs a constant index");
    if (maxlen >= 0 && sz >= maxlen) return t.raiseNew(PyExc_IndexError, "deque already at its maximum size");
    if (Done d = t.effects().noteContainerMutation(self); !d) return d.stop();
    if (k < 0) k = std::max<Py_ssize_t>(0, k + sz);
    k = std::min(k, sz);
    items.insert(items.begin() + k, args[1]);
    return Value::constant(Py_None);
  }
  if (is("copy") && args.empty()) return Value::of(List{items, q.deque.copy(), q.maxlen.copy()});
  if (is("insert") || is("sort") || is("copy")) return t.fail(std::string("deque.") + n + "() is not supported yet");
  return notHandled();  // the methods it shares with list
}

Result<ValuePtr> sequenceMethod(Tracer& t, const ValuePtr& self, const char* n, std::vector<ValuePtr>& args,
                                        std::vector<std::pair<Ref, ValuePtr>>& kwargs) {
  auto is = [n](const char* m) { return strcmp(n, m) == 0; };
  const bool list = self->is(Kind::List);
  std::vector<ValuePtr>& items = *self->elements();
  if (is("__contains__") && args.size() == 1) {
    // Python's order: identity, then ==, item by item, up to the first match.
    for (const ValuePtr& item : items) {
      int eq;
      if (!sameValue(item, args[0], &eq)) return t.fail("`in` needs comparisons known at trace time");
      if (eq) return Value::constant(Py_True);
    }
    return Value::constant(Py_False);
  }
  if (is("index") || is("count")) {
    if (args.empty()) return t.fail("missing argument");
    Py_ssize_t count = 0;
    for (size_t i = 0; i < items.size(); ++i) {
      int eq;
      if (!sameValue(items[i], args[0], &eq)) return t.fail(std::string(".") + n + "() needs comparisons known at trace time");
      if (eq && is("index")) return Value::constant(Ref::steal(longOf(static_cast<Py_ssize_t>(i))).get());
      count += eq;
    }
    if (is("index")) {
      Ref r = toPython(t, args[0]);
      Ref s = r ? Ref::steal(PyObject_Repr(r.get())) : Ref();
      PyErr_Clear();
      return t.raiseNew(PyExc_ValueError,
                      std::string(s ? PyUnicode_AsUTF8(s.get()) : "value") + (list ? " is not in list" : " is not in tuple"));
    }
    return Value::constant(Ref::steal(longOf(count)).get());
  }
  if (!list) return t.fail(std::string("tuple has no method .") + n + "()");
  if (is("copy")) return Value::list(items);
  if (Done d = t.effects().noteContainerMutation(self); !d) return d.stop();
  if (is("append") && args.size() == 1) {
    items.push_back(args[0]);
    return Value::constant(Py_None);
  }
  if (is("extend") && args.size() == 1) {
    // A list or tuple is copied first (l.extend(l) doubles it); any other iterable is
    // taken item by item, each appended before the next is taken (as list.extend does).
    if (args[0]->is(Kind::List) || args[0]->is(Kind::Tuple)) {
      std::vector<ValuePtr> more = *args[0]->elements();
      items.insert(items.end(), more.begin(), more.end());
      return Value::constant(Py_None);
    }
    Result<ValuePtr> source = getIter(t, args[0]);
    if (!source) return source;
    Done d = forEachItem(t, *source, [&](ValuePtr m) -> Done {
      self->elements()->push_back(std::move(m));
      return {};
    });
    if (!d) return d.stop();
    return Value::constant(Py_None);
  }
  if (is("insert") && args.size() == 2) {
    Py_ssize_t k, sz = static_cast<Py_ssize_t>(items.size());
    if (!constIntArg(args, 0, &k)) return t.fail("list.insert needs a constant index");
    if (k < 0) k = std::max<Py_ssize_t>(0, k + sz);
    k = std::min(k, sz);
    items.insert(items.begin() + k, args[1]);
    return Value::constant(Py_None);
  }
  if (is("pop") && args.size() <= 1) {
    Py_ssize_t k = -1, sz = static_cast<Py_ssize_t>(items.size());
    if (!args.empty() && !constIntArg(args, 0, &k)) return t.fail("list.pop needs a constant index");
    if (sz == 0) return t.raiseNew(PyExc_IndexError, "pop from empty list");
    if (k < 0) k += sz;
    if (k < 0 || k >= sz) return t.raiseNew(PyExc_IndexError, "pop index out of range");
    ValuePtr v = items[static_cast<size_t>(k)];
    items.erase(items.begin() + k);
    return v;
  }
  if (is("remove") && args.size() == 1) {
    for (size_t i = 0; i < items.size(); ++i) {
      int eq;
      if (!sameValue(items[i], args[0], &eq)) return t.fail("list.remove needs comparisons known at trace time");
      if (eq) {
        items.erase(items.begin() + static_cast<std::ptrdiff_t>(i));
        return Value::constant(Py_None);
      }
    }
    return t.raiseNew(PyExc_ValueError, "list.remove(x): x not in list");
  }
  if (is("clear")) {
    items.clear();
    return Value::constant(Py_None);
  }
  if (is("reverse")) {
    std::reverse(items.begin(), items.end());
    return Value::constant(Py_None);
  }
  if (is("sort")) return sortConstants(t, items, kwargs);
  return notHandled();
}

Result<ValuePtr> sortConstants(Tracer& t, std::vector<ValuePtr>& items, std::vector<std::pair<Ref, ValuePtr>>& kwargs) {
  // Sort constants with Python's own sort (same order, same errors).
  Ref tmp = Ref::steal(PyList_New(0));
  Ref kw = Ref::steal(PyDict_New());
  if (!tmp || !kw) return t.failFromPython("list.sort");
  for (const ValuePtr& v : items) {
    if (!v->constant()) return t.fail("list.sort on non-constants is not supported");
    if (PyList_Append(tmp.get(), v->constant()) < 0) return t.failFromPython("list.sort");
  }
  for (auto& [k, v] : kwargs) {
    if (!v->constant()) return t.fail("list.sort(key=...) with a function is not supported yet");
    if (PyDict_SetItem(kw.get(), k.get(), v->constant()) < 0) return t.failFromPython("list.sort");
  }
  Ref sort = Ref::steal(PyObject_GetAttrString(tmp.get(), "sort"));
  Ref empty = Ref::steal(PyTuple_New(0));
  Ref r = Ref::steal(sort && empty ? PyObject_Call(sort.get(), empty.get(), kw.get()) : nullptr);
  if (!r) return t.failFromPython("list.sort");
  for (Py_ssize_t i = 0; i < PyList_GET_SIZE(tmp.get()); ++i)
    items[static_cast<size_t>(i)] = Value::constant(PyList_GET_ITEM(tmp.get(), i));
  return Value::constant(Py_None);
}

Result<ValuePtr> dictMethod(Tracer& t, const ValuePtr& self, const char* n, std::vector<ValuePtr>& args,
                                    std::vector<std::pair<Ref, ValuePtr>>& kwargs) {
  auto is = [n](const char* m) { return strcmp(n, m) == 0; };
  Dict& dict = self->as<Dict>();
  std::vector<Ref>& keys = dict.keys;
  std::vector<ValuePtr>& values = dict.values;
  auto keyOf = [&](size_t i) -> PyObject* { return i < args.size() ? dictKeyOf(t, args[i]) : nullptr; };
  if ((is("keys") || is("values") || is("items")) && args.empty() && kwargs.empty())
    return Value::of(DictView{self, is("keys") ? DictView::Keys : is("values") ? DictView::Values : DictView::Items});
  if (is("get") || is("__getitem__") || is("__contains__")) {
    PyObject* key = keyOf(0);
    if (!key) return t.fail("dict lookups need keys the trace can hash (constants, or objects hashed by identity)");
    int k = dict.findKey(key);
    if (k == -2) return t.failFromPython("dict key comparison");
    if (is("__contains__")) return Value::constant(k >= 0 ? Py_True : Py_False);
    if (k >= 0) return values[static_cast<size_t>(k)];
    if (is("__getitem__") && dict.default_factory) {  // defaultdict: the factory makes the value
      if (Done d = t.effects().noteContainerMutation(self); !d) return d.stop();
      Result<ValuePtr> v = call(t, Value::callable(dict.default_factory.get()), {}, {});
      if (!v) return v;
      keys.push_back(Ref::borrow(key));
      values.push_back(*v);
      return v;
    }
    if (is("__getitem__")) {
      PyErr_SetObject(PyExc_KeyError, key);
      return t.raisePython();
    }
    return args.size() > 1 ? args[1] : Value::constant(Py_None);
  }
  if (is("copy")) {
    std::vector<Ref> kcopy;
    for (const Ref& k : keys) kcopy.push_back(k.copy());
    return Value::dict(dict.type.get(), std::move(kcopy), values);
  }
  if (Done d = t.effects().noteContainerMutation(self); !d) return d.stop();
  if (is("setdefault") || is("pop") || is("move_to_end")) {
    if (is("move_to_end") && args.empty()) return notHandled();
    PyObject* key = keyOf(0);
    if (!key) return t.fail("dict keys must be constants or objects hashed by identity");
    int k = dict.findKey(key);
    if (k == -2) return t.failFromPython("dict key comparison");
    if (is("setdefault")) {
      if (k >= 0) return values[static_cast<size_t>(k)];
      ValuePtr v = args.size() > 1 ? args[1] : Value::constant(Py_None);
      keys.push_back(Ref::borrow(key));
      values.push_back(v);
      return v;
    }
    if (k < 0) {
      if (is("pop") && args.size() > 1) return args[1];
      PyErr_SetObject(PyExc_KeyError, key);
      return t.raisePython();
    }
    ValuePtr v = values[static_cast<size_t>(k)];
    Ref kk = std::move(keys[static_cast<size_t>(k)]);
    keys.erase(keys.begin() + k);
    values.erase(values.begin() + k);
    if (is("pop")) return v;
    bool last = args.size() < 2 || PyObject_IsTrue(args[1]->constant());
    keys.insert(last ? keys.end() : keys.begin(), std::move(kk));
    values.insert(last ? values.end() : values.begin(), v);
    return Value::constant(Py_None);
  }
  if (is("popitem")) {
    if (keys.empty()) return t.fail("popitem(): dictionary is empty (KeyError)");
    Result<ValuePtr> kv = keyValueOf(t, keys.back().get());
    if (!kv) return kv;
    ValuePtr pair = Value::tuple({kv.take(), values.back()});
    keys.pop_back();
    values.pop_back();
    return pair;
  }
  if (is("clear")) {
    keys.clear();
    values.clear();
    return Value::constant(Py_None);
  }
  if (is("update")) return dictUpdate(t, self, args, kwargs);
  return notHandled();
}

Result<ValuePtr> dictUpdate(Tracer& t, const ValuePtr& self, std::vector<ValuePtr>& args,
                                    std::vector<std::pair<Ref, ValuePtr>>& kwargs) {
  for (const ValuePtr& other : args) {
    if (const Dict* from = other->get<Dict>()) {
      for (size_t i = 0; i < from->keys.size(); ++i) {
        Result<ValuePtr> k = keyValueOf(t, from->keys[i].get());
        if (!k) return k;
        if (Done d = storeSubscript(t, self, *k, from->values[i]); !d) return d.stop();
      }
      continue;
    }
    std::vector<ValuePtr> pairs;
    if (Done d = iterate(t, other, &pairs); !d) return d.stop();
    for (const ValuePtr& p : pairs) {
      std::vector<ValuePtr> kv;
      if (!iterate(t, p, &kv) || kv.size() != 2) return t.fail("dict update sequence element is not a pair");
      if (Done s = storeSubscript(t, self, kv[0], kv[1]); !s) return s.stop();
    }
  }
  for (auto& [k, v] : kwargs)
    if (Done d = storeSubscript(t, self, Value::constant(k.get()), v); !d) return d.stop();
  return Value::constant(Py_None);
}

Result<ValuePtr> setMethod(Tracer& t, const ValuePtr& self, const char* n, std::vector<ValuePtr>& args) {
  auto is = [n](const char* m) { return strcmp(n, m) == 0; };
  std::vector<ValuePtr>& items = self->as<Set>().items;
  // Constants (and modules, by identity) already in the set; tensors are compared below.
  auto contains = [&](PyObject* o) -> int {
    for (const ValuePtr& v : items) {
      PyObject* item = v->real();
      if (!item) continue;  // a tensor: never equal to a constant or module
      if (item == o) return 1;
      if (v->is(Kind::Module) || !PyObject_TypeCheck(o, &PyBaseObject_Type)) continue;
      int eq = PyObject_RichCompareBool(item, o, Py_EQ);
      if (eq != 0) return eq;
    }
    return 0;
  };
  // Tensors are hashed by identity: two graph inputs are the same object exactly when
  // they alias at trace time (shared parameters), which a guard then pins.
  auto containsTensor = [&](const ValuePtr& tensor) -> int {
    for (const ValuePtr& v : items) {
      if (!v->is(Kind::Tensor)) continue;
      Result<bool> same = sameTensorObject(t, v, tensor);
      if (*same) return 1;
    }
    return 0;
  };
  auto member = [&](const ValuePtr& v) { return v->is(Kind::Tensor) ? containsTensor(v) : contains(v->real()); };
  // A number read from a tensor hashes and compares by its value, unknown until the graph runs.
  if (!args.empty() && isScalarValue(t, args[0]))
    return t.fail("a value read from a tensor (Tensor.item()) as a set item: its hash is its value, known only at run time");
  if (is("__contains__")) {
    if (args.size() != 1 || !isSetMember(args[0])) return t.fail("set membership needs a constant, module or tensor");
    int c = member(args[0]);
    if (c < 0) return t.failFromPython("set membership");
    return Value::constant(c ? Py_True : Py_False);
  }
  if (is("copy")) return Value::set(items);
  if (Done d = t.effects().noteContainerMutation(self); !d) return d.stop();
  if (is("add") && args.size() == 1) {
    if (!isSetMember(args[0])) return t.fail("set items must be constants, modules or tensors");
    int c = member(args[0]);
    if (c < 0) return t.failFromPython("set add");
    if (!c) items.push_back(args[0]);
    return Value::constant(Py_None);
  }
  if (is("__init__") && args.size() <= 1) {  // set.__init__(iterable=()): emptied, then filled
    std::vector<ValuePtr> more;
    if (!args.empty())
      if (Done d = iterate(t, args[0], &more); !d) return d.stop();
    items.clear();
    for (const ValuePtr& m : more) {
      if (!isSetMember(m)) return t.fail("set items must be constants, modules or tensors");
      int c = member(m);
      if (c < 0) return t.failFromPython("set.__init__");
      if (!c) items.push_back(m);
    }
    return Value::constant(Py_None);
  }
  if (is("update") && !args.empty()) {
    for (const ValuePtr& other : args) {
      std::vector<ValuePtr> more;
      if (Done d = iterate(t, other, &more); !d) return d.stop();
      for (const ValuePtr& m : more) {
        std::vector<ValuePtr> a{m};
        std::vector<std::pair<Ref, ValuePtr>> kw;
        if (Result<ValuePtr> r = callContainerMethod(t, self, interned(Str::add), a, kw); !r) return r;
      }
    }
    return Value::constant(Py_None);
  }
  if ((is("discard") || is("remove")) && !args.empty()) {
    if (!isHashableConstant(args[0])) return PyErr_Clear(), t.fail("set items must be constants");
    for (size_t i = 0; i < items.size(); ++i) {
      PyObject* item = items[i]->real();
      if (!item) continue;  // a tensor is never equal to a constant
      int eq = PyObject_RichCompareBool(item, args[0]->constant(), Py_EQ);
      if (eq < 0) return t.failFromPython("set remove");
      if (eq) {
        items.erase(items.begin() + static_cast<std::ptrdiff_t>(i));
        return Value::constant(Py_None);
      }
    }
    if (is("remove")) return t.fail("KeyError in set.remove");
    return Value::constant(Py_None);
  }
  if (is("clear")) {
    items.clear();
    return Value::constant(Py_None);
  }
  return notHandled();
}

}  // namespace

Result<Ref> constantSlice(Tracer& t, const Slice& slice) {
  PyObject* parts[3];
  for (int k = 0; k < 3; ++k) {
    parts[k] = slice.parts[static_cast<size_t>(k)]->constant();
    if (!parts[k]) return t.fail("slice bounds must be constants");
  }
  return Ref::steal(PySlice_New(parts[0], parts[1], parts[2]));
}

Done storeSubscript(Tracer& t, const ValuePtr& obj, const ValuePtr& index, const ValuePtr& value) {
  if (isUserObject(obj) && value) {  // obj[k] = v: the class's __setitem__ (or a dict base's)
    Result<ValuePtr> r = callDunder(t, obj, interned(Str::dunder_setitem), {index, value});
    if (!r.notHandled()) return outcomeOf(r);
  }
  if (Done d = t.effects().noteContainerMutation(obj); !d) return d;
  List* list = obj->get<List>();
  if (list && index->is(Kind::Slice)) {
    Result<Ref> slice = constantSlice(t, index->as<Slice>());
    if (!slice) return slice.stop();
    Py_ssize_t start, stop, step, len;
    if (!*slice || PySlice_GetIndicesEx(slice->get(), static_cast<Py_ssize_t>(list->items.size()), &start, &stop,
                                        &step, &len) < 0)
      return t.raisePython();
    if (step != 1) return t.fail("extended slice assignment is not supported yet");
    std::vector<ValuePtr> repl;
    if (value)
      if (Done d = iterate(t, value, &repl); !d) return d;
    if (stop < start) stop = start;
    list->items.erase(list->items.begin() + start, list->items.begin() + stop);
    list->items.insert(list->items.begin() + start, repl.begin(), repl.end());
    return {};
  }
  if (list && index->constant() && PyLong_Check(index->constant())) {
    Py_ssize_t n = static_cast<Py_ssize_t>(list->items.size());
    Py_ssize_t k = PyLong_AsSsize_t(index->constant());
    if (k < 0) k += n;
    if (k < 0 || k >= n) return t.fail("list assignment index out of range (IndexError)");
    list->items[static_cast<size_t>(k)] = value;
    return {};
  }
  if (Dict* d = obj->get<Dict>()) {
    PyObject* key = dictKeyOf(t, index);
    if (!key) return t.fail("dict keys must be constants or objects hashed by identity");
    int k = d->findKey(key);
    if (k == -2) return t.failFromPython("dict key comparison");
    if (k >= 0) {
      d->values[static_cast<size_t>(k)] = value;
    } else {
      d->keys.push_back(Ref::borrow(key));
      d->values.push_back(value);
    }
    return {};
  }
  return t.fail(std::string("item assignment on a ") + kindName(obj->kind()) + " is not supported yet");
}

bool isIdentityKey(PyObject* o) {
  if (isTensor(o)) return true;
  PyTypeObject* ty = Py_TYPE(o);
  return ty->tp_hash == PyBaseObject_Type.tp_hash &&
         (ty->tp_richcompare == PyBaseObject_Type.tp_richcompare || ty->tp_richcompare == PyType_Type.tp_richcompare);
}

PyObject* dictKeyOf(Tracer& t, const ValuePtr& v) {
  if (PyObject* c = v->constant()) {
    if (PyObject_Hash(c) == -1) return PyErr_Clear(), nullptr;
    return c;
  }
  PyObject* obj = nullptr;
  int reg = v->reg;
  if (const Tensor* tensor = v->get<Tensor>()) {
    obj = t.exampleOf(tensor->node);  // a graph input: the tensor the program passed
    reg = t.inputRegOf(tensor->node);
  } else if (const Object* o = v->get<Object>()) {
    if (!o->owned) obj = o->obj.get();  // one the trace made exists only at trace time
  } else if (v->is(Kind::Module) || v->is(Kind::Callable)) {
    obj = v->real();
  }
  if (!obj || !isIdentityKey(obj)) return nullptr;
  // The key is this very object: on later calls its source must give it again. A callable
  // without a source (a class attribute, a builtin) is fixed by the guards that found it.
  if (reg >= 0)
    t.guards().checkIdentity(reg, obj);
  else if (!v->is(Kind::Callable))
    return nullptr;
  t.keyObjects().emplace(obj, std::make_pair(Ref::borrow(obj), v));
  return obj;
}

Result<ValuePtr> keyValueOf(Tracer& t, PyObject* key) {
  if (isConstantObject(key)) return Value::constant(key);
  auto& known = t.keyObjects();
  if (auto it = known.find(key); it != known.end()) return it->second.second;
  // A key of a dict read from the program (its keys are guarded by identity there).
  Ref r = Ref::steal(PyObject_Repr(key));
  if (!r) PyErr_Clear();
  int reg = t.load(guards::LoadKind::Constant, -1, 0, key, std::string("<dict key ") + (r ? PyUnicode_AsUTF8(r.get()) : "?") + ">");
  Result<ValuePtr> v = t.wrap(key, reg);
  if (!v) return v;
  known.emplace(key, std::make_pair(Ref::borrow(key), *v));
  return v;
}

Result<ValuePtr> callContainerMethod(Tracer& t, const ValuePtr& self, PyObject* name, std::vector<ValuePtr>& args,
                                             std::vector<std::pair<Ref, ValuePtr>>& kwargs) {
  const char* n = PyUnicode_AsUTF8(name);
  auto is = [n](const char* m) { return strcmp(n, m) == 0; };
  if (!kwargs.empty() && !(self->is(Kind::List) && is("sort")) && !(self->is(Kind::Dict) && is("update")) &&
      !(self->is(Kind::Tuple) && is("_replace")))
    return t.fail(std::string("keyword arguments to .") + n + "() are not supported yet");
  Result<ValuePtr> r = notHandled();
  switch (self->kind()) {
    case Kind::Tuple:
      r = namedTupleMethod(t, self, n, kwargs);
      if (r.notHandled()) r = sequenceMethod(t, self, n, args, kwargs);
      break;
    case Kind::List:
      r = dequeMethod(t, self, n, args);
      if (r.notHandled()) r = sequenceMethod(t, self, n, args, kwargs);
      break;
    case Kind::Dict:
      r = dictMethod(t, self, n, args, kwargs);
      break;
    case Kind::Set:
      r = setMethod(t, self, n, args);
      break;
    case Kind::Null:
    case Kind::Tensor:
    case Kind::Constant:
    case Kind::Slice:
    case Kind::Iterator:
    case Kind::Callable:
    case Kind::BoundMethod:
    case Kind::NamedMethod:
    case Kind::Module:
    case Kind::PyModule:
    case Kind::Cell:
    case Kind::Function:
    case Kind::Object:
    case Kind::NewObject:
    case Kind::Super:
    case Kind::Partial:
    case Kind::Context:
    case Kind::Namespace:
    case Kind::DictView:
    case Kind::NdArray:
      break;
  }
  if (!r.notHandled()) return r;
  return t.fail(std::string(kindName(self->kind())) + "." + n + "() is not supported yet");
}

namespace {

// Calls method `name` of container `self` with one argument, for an opcode.
Done containerCall(Tracer& t, const ValuePtr& self, Str name, const ValuePtr& arg) {
  Args a{arg};
  Kwargs kw;
  return outcomeOf(callContainerMethod(t, self, interned(name), a, kw));
}

}  // namespace

Result<Next> opBuildMap(Tracer& t, SymbolicFrame&, const bytecode::Instruction& ins, Values& io) {
  ValuePtr d = Value::emptyDict();
  for (size_t i = 0; i < static_cast<size_t>(ins.arg); ++i)
    if (Done done = storeSubscript(t, d, io[2 * i], io[2 * i + 1]); !done) return done.stop();
  io.assign(1, std::move(d));
  return Next::Fall;
}

Result<Next> opBuildConstKeyMap(Tracer& t, SymbolicFrame&, const bytecode::Instruction& ins, Values& io) {
  // Stack: the values, then the tuple of keys.
  PyObject* keys = io.back()->constant();
  ValuePtr d = Value::emptyDict();
  for (int i = 0; i < ins.arg; ++i)
    if (Done done = storeSubscript(t, d, Value::constant(PyTuple_GET_ITEM(keys, i)), io[static_cast<size_t>(i)]);
        !done)
      return done.stop();
  io.assign(1, std::move(d));
  return Next::Fall;
}

Result<Next> opBuildSet(Tracer& t, SymbolicFrame&, const bytecode::Instruction&, Values& io) {
  ValuePtr s = Value::set({});
  for (const ValuePtr& v : io)
    if (Done d = containerCall(t, s, Str::add, v); !d) return d.stop();
  io.assign(1, std::move(s));
  return Next::Fall;
}

Result<Next> opAppend(Tracer& t, SymbolicFrame&, const bytecode::Instruction& ins, Values& io) {
  // LIST_APPEND i / SET_ADD i: the container is i below the value.
  ValuePtr v = std::move(io.back());
  io.pop_back();
  if (Done d = containerCall(t, io.front(), ins.op == Op::LIST_APPEND ? Str::append : Str::add, v); !d)
    return d.stop();
  return Next::Fall;
}

Result<Next> opUpdate(Tracer& t, SymbolicFrame&, const bytecode::Instruction& ins, Values& io) {
  // SET_UPDATE i / DICT_UPDATE i / DICT_MERGE i: the container is i below the value.
  ValuePtr v = std::move(io.back());
  io.pop_back();
  const ValuePtr& target = io.front();
  const Dict* from = v->get<Dict>();
  const Dict* into = target->get<Dict>();
  if (ins.op == Op::DICT_MERGE && from && into) {
    for (const Ref& k : from->keys) {
      int found = into->findKey(k.get());
      if (found == -2) return t.failFromPython("dict merge");
      if (found >= 0) return t.fail("got multiple values for a keyword argument (TypeError)");
    }
  }
  if (Done d = containerCall(t, target, Str::update, v); !d) return d.stop();
  return Next::Fall;
}

Result<Next> opMapAdd(Tracer& t, SymbolicFrame&, const bytecode::Instruction&, Values& io) {
  // MAP_ADD i: the dict is i below the key and value.
  ValuePtr value = std::move(io.back());
  io.pop_back();
  ValuePtr key = std::move(io.back());
  io.pop_back();
  if (Done d = storeSubscript(t, io.front(), key, value); !d) return d.stop();
  return Next::Fall;
}

Result<Next> opDeleteSubscr(Tracer& t, SymbolicFrame&, const bytecode::Instruction&, Values& io) {
  const ValuePtr& obj = io[0];
  const ValuePtr& index = io[1];
  Done done;
  if (obj->is(Kind::Dict) || (obj->is(Kind::List) && index->is(Kind::Constant)))
    done = containerCall(t, obj, Str::pop, index);
  else if (obj->is(Kind::List) && index->is(Kind::Slice))
    done = storeSubscript(t, obj, index, nullptr);  // del xs[a:b]
  else
    return t.fail(std::string("del on an item of a ") + kindName(obj->kind()) + " is not supported yet");
  if (!done) return done.stop();
  io.clear();
  return Next::Fall;
}

Result<Next> opUnpackEx(Tracer& t, SymbolicFrame&, const bytecode::Instruction& ins, Values& io) {
  std::vector<ValuePtr> items;
  if (Done d = iterate(t, io[0], &items); !d) return d.stop();
  const size_t before = static_cast<size_t>(ins.arg & 0xFF), after = static_cast<size_t>(ins.arg >> 8);
  if (items.size() < before + after) return t.fail("not enough values to unpack (ValueError)");
  std::vector<ValuePtr> middle(items.begin() + static_cast<std::ptrdiff_t>(before),
                               items.end() - static_cast<std::ptrdiff_t>(after));
  io.clear();
  for (size_t i = 0; i < after; ++i) io.push_back(items[items.size() - 1 - i]);
  io.push_back(Value::list(std::move(middle)));
  for (size_t i = before; i > 0; --i) io.push_back(items[i - 1]);
  return Next::Fall;
}

}  // namespace cdynamo::trace
