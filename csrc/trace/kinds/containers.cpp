// Lists, tuples, dicts and sets made in the trace: their methods, item assignment, and the
// opcodes that build and update them (handlers.h).
// Containers read from the program's inputs are not mutated here (that is a side effect
// to replay, which comes with graph breaks): such a mutation stops the trace.
#include <algorithm>
#include <cstring>
#include <string>
#include <unordered_map>

#include "support/check.h"
#include "support/lookup.h"
#include "support/torch_types.h"
#include "trace/engine/graph_calls.h"
#include "trace/engine/scalars.h"
#include "trace/kinds/containers.h"
#include "trace/kinds/object.h"
#include "trace/opcodes/handlers.h"
#include "trace/protocol/attributes.h"
#include "trace/protocol/calls.h"
#include "trace/protocol/constants.h"
#include "trace/protocol/operators.h"
#include "trace/tracer.h"

namespace cdynamo::trace {

using bytecode::BinaryOp;
using bytecode::Op;

bool realComparable(const ValuePtr& v, bool hashed) {
  if (!(v->is(Kind::Constant) || v->is(Kind::Callable) || v->is(Kind::PyModule)) || !v->real()) return false;
  PyTypeObject* type = Py_TYPE(v->real());
  PyObject* eq = _PyType_Lookup(type, interned(Str::dunder_eq));
  if (!eq || PyFunction_Check(eq)) return false;
  if (hashed) {
    PyObject* hash = _PyType_Lookup(type, interned(Str::dunder_hash));
    if (!hash || PyFunction_Check(hash)) return false;
  }
  return true;
}

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
    // Tuples compare their items up to the shorter length before their lengths (no early
    // out, unlike lists): (x, 1) == (2,) compares x == 2 first.
    const size_t n = std::min(static_cast<size_t>(PyTuple_GET_SIZE(ctup)), tup->items.size());
    for (size_t i = 0; i < n; ++i) {
      int item_eq;
      if (!sameValue(tup->items[i], Value::constant(PyTuple_GET_ITEM(ctup, static_cast<Py_ssize_t>(i))), &item_eq))
        return false;
      if (!item_eq) return *eq = 0, true;
    }
    return *eq = static_cast<size_t>(PyTuple_GET_SIZE(ctup)) == tup->items.size(), true;
  }
  // A constant never equals a module or a function made in the trace (their == is
  // identity); against a container or an object, it is not known here.
  auto identityOnly = [](const ValuePtr& v) { return v->is(Kind::Module) || v->is(Kind::Function) || v->is(Kind::Cell); };
  if ((a->constant() && identityOnly(b)) || (b->constant() && identityOnly(a))) return *eq = 0, true;
  // Two objects read from the program whose classes keep object's __eq__: equal when they
  // are one object, which their guards fix (each is guarded by type, two of one type by
  // aliasing: Tracer::wrap).
  // Constants, classes and functions, Python modules: objects whose identity the guards
  // fix (or that are immutable); when both classes' == is C code (a class's metaclass
  // keeping type.__eq__, a function's identity), it is compared for real.
  if (realComparable(a) && realComparable(b)) {
    *eq = PyObject_RichCompareBool(a->real(), b->real(), Py_EQ);
    if (*eq < 0) return PyErr_Clear(), false;
    return true;
  }
  const Object* oa = a->get<Object>();
  const Object* ob = b->get<Object>();
  if (oa && ob && a->reg >= 0 && b->reg >= 0 &&
      Py_TYPE(oa->obj.get())->tp_richcompare == PyBaseObject_Type.tp_richcompare &&
      Py_TYPE(ob->obj.get())->tp_richcompare == PyBaseObject_Type.tp_richcompare)
    return *eq = oa->obj.get() == ob->obj.get(), true;
  return false;
}

namespace {


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
// Calls C method `name` of `type` for real with placeholders for `args` and `kwargs`, on an
// empty instance, to raise the TypeError Python raises for arguments the method refuses
// (its argument parsing fails before it does anything); the caller knows they are refused.
Result<ValuePtr> raiseArgumentError(Tracer& t, PyTypeObject* type, PyObject* name, const std::vector<ValuePtr>& args,
                                    const std::vector<std::pair<Ref, ValuePtr>>& kwargs);

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

// Whether `v` reads the very items of the list or deque value `self`: `self` itself, or an
// instance of a list/deque subclass whose items are `self` (a.extend(a) called through a
// subclass method sees `a` as the instance and `self` as its base). list.extend and
// deque.extend copy such an argument before adding to it; taking it item by item would
// never reach its end.
bool readsItemsOf(const ValuePtr& v, const ValuePtr& self) {
  if (v == self) return true;
  if (const Object* o = v->get<Object>()) return o->base == self;
  if (const NewObject* o = v->get<NewObject>()) return o->base == self;
  return false;
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
      dequeChanged(q);
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
      Result<ValuePtr> source = readsItemsOf(args[0], self) ? Value::list(items) : getIter(t, args[0]);
      if (!source) return source;
      Done d = forEachItem(t, *source, [&](ValuePtr m) -> Done {
        dequeChanged(self->as<List>());
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
      dequeChanged(q);
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
    dequeChanged(q);
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
    // index(value, start, stop): the bounds as slice indices (negative ones count from the
    // end, then clip to the sequence).
    Py_ssize_t sz = static_cast<Py_ssize_t>(items.size()), bounds[2] = {0, sz};
    for (size_t b = 1; is("index") && b < args.size() && b < 3; ++b) {
      Ref index = toPython(t, args[b]);
      if (!index) return t.fail(".index() bounds must be known at trace time");
      if (!_PyEval_SliceIndexNotNone(index.get(), &bounds[b - 1])) return t.raisePython();
      Py_ssize_t& v = bounds[b - 1];
      if (v < 0) v = std::max<Py_ssize_t>(0, v + sz);
      v = std::min(v, sz);
    }
    for (size_t i = static_cast<size_t>(bounds[0]); i < items.size() && static_cast<Py_ssize_t>(i) < bounds[1]; ++i) {
      int eq;
      if (!sameValue(items[i], args[0], &eq)) return t.fail(std::string(".") + n + "() needs comparisons known at trace time");
      if (eq && is("index")) return Value::constant(Ref::steal(longOf(static_cast<Py_ssize_t>(i))).get());
      count += eq;
    }
    if (is("index")) {
      Ref r = toPython(t, args[0]);
      Ref s = r ? Ref::steal(PyObject_Repr(r.get())) : Ref();
      PyErr_Clear();
      if (!list) return t.raiseNew(PyExc_ValueError, "tuple.index(x): x not in tuple");
      return t.raiseNew(PyExc_ValueError, std::string(s ? PyUnicode_AsUTF8(s.get()) : "value") +
                                              (self->as<List>().deque ? " is not in deque" : " is not in list"));
    }
    return Value::constant(Ref::steal(longOf(count)).get());
  }
  if (!list && is("numel") && args.empty() && isSizeValue(self)) {
    // torch.Size.numel(): the product of the sizes (symbolic ones multiply in the graph).
    ValuePtr product = Value::constant(Ref::steal(PyLong_FromLong(1)).get());
    for (const ValuePtr& item : items) {
      Result<ValuePtr> r = binaryOp(t, bytecode::BinaryOp::Multiply, product, item);
      if (!r) return r;
      product = r.take();
    }
    return product;
  }
  if (!list) return t.fail(std::string("tuple has no method .") + n + "()");
  if (is("copy")) return Value::list(items);
  if (Done d = t.effects().noteContainerMutation(self); !d) return d.stop();
  if (is("append") && args.size() == 1) {
    items.push_back(args[0]);
    return Value::constant(Py_None);
  }
  if (is("extend") && args.size() == 1) {
    // A list or tuple, or the list itself (through a subclass instance too), is copied
    // first (l.extend(l) doubles it); any other iterable is taken item by item, each
    // appended before the next is taken (as list.extend does).
    const bool own = readsItemsOf(args[0], self);
    if (own || args[0]->is(Kind::List) || args[0]->is(Kind::Tuple)) {
      std::vector<ValuePtr> more = own ? items : *args[0]->elements();
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
    dequeChanged(self->as<List>());  // del d[k] of a deque
    ValuePtr v = items[static_cast<size_t>(k)];
    items.erase(items.begin() + k);
    return v;
  }
  if (is("remove") && args.size() == 1) {
    for (size_t i = 0; i < items.size(); ++i) {
      int eq;
      if (!sameValue(items[i], args[0], &eq)) return t.fail("list.remove needs comparisons known at trace time");
      if (eq) {
        dequeChanged(self->as<List>());
        items.erase(items.begin() + static_cast<std::ptrdiff_t>(i));
        return Value::constant(Py_None);
      }
    }
    if (!self->as<List>().deque) return t.raiseNew(PyExc_ValueError, "list.remove(x): x not in list");
    Ref r = toPython(t, args[0]);
    Ref s = r ? Ref::steal(PyObject_Repr(r.get())) : Ref();
    PyErr_Clear();
    return t.raiseNew(PyExc_ValueError, std::string(s ? PyUnicode_AsUTF8(s.get()) : "value") + " is not in deque");
  }
  if (is("clear")) {
    if (!items.empty()) dequeChanged(self->as<List>());
    items.clear();
    return Value::constant(Py_None);
  }
  if (is("reverse")) {  // a deque's reverse() is not counted as a change (its iterators go on)
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
    if (is("__getitem__") && dict.hasFactory()) {  // defaultdict: the factory makes the value
      if (Done d = t.effects().noteContainerMutation(self); !d) return d.stop();
      ValuePtr factory = dict.factory_value ? dict.factory_value : Value::callable(dict.default_factory.get());
      Result<ValuePtr> v = call(t, factory, {}, {});
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
    PyObject* copy_type = dict.type.get() == reinterpret_cast<PyObject*>(&PyDictProxy_Type)
                              ? reinterpret_cast<PyObject*>(&PyDict_Type)  // mappingproxy.copy(): a dict
                              : dict.type.get();
    ValuePtr copy = Value::dict(copy_type, std::move(kcopy), values);
    copy->as<Dict>().default_factory = dict.default_factory.copy();  // a defaultdict's copy keeps its factory
    copy->as<Dict>().factory_value = dict.factory_value;
    return copy;
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
    bool last = true;
    if (args.size() > 1) {  // move_to_end(key, last): any value, by its truth
      Result<bool> truth = truthValue(t, args[1]);
      if (!truth) return truth.stop();
      last = *truth;
    }
    keys.insert(last ? keys.end() : keys.begin(), std::move(kk));
    values.insert(last ? values.end() : values.begin(), v);
    return Value::constant(Py_None);
  }
  if (is("popitem")) {
    bool last = true;
    if (!args.empty()) {  // OrderedDict.popitem(last): any value, by its truth
      Result<bool> truth = truthValue(t, args[0]);
      if (!truth) return truth.stop();
      last = *truth;
    }
    if (keys.empty()) {
      bool ordered = PyType_Check(dict.type.get()) &&
                     PyType_IsSubtype(reinterpret_cast<PyTypeObject*>(dict.type.get()), &PyODict_Type);
      return t.raiseNew(PyExc_KeyError, ordered ? "dictionary is empty" : "popitem(): dictionary is empty");
    }
    size_t at = last ? keys.size() - 1 : 0;
    Result<ValuePtr> kv = keyValueOf(t, keys[at].get());
    if (!kv) return kv;
    ValuePtr pair = Value::tuple({kv.take(), values[at]});
    keys.erase(keys.begin() + static_cast<long>(at));
    values.erase(values.begin() + static_cast<long>(at));
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
  if (args.size() > 1) {  // update(E=None, /, **F): no signature to read it from
    PyTypeObject* type = containerCType(self);
    return raiseArgumentError(t, type ? type : &PyDict_Type, interned(Str::update), args, kwargs);
  }
  for (const ValuePtr& other : args) {
    if (const Dict* from = other->get<Dict>()) {
      for (size_t i = 0; i < from->keys.size(); ++i) {
        Result<ValuePtr> k = keyValueOf(t, from->keys[i].get());
        if (!k) return k;
        if (Done d = storeSubscript(t, self, *k, from->values[i]); !d) return d.stop();
      }
      continue;
    }
    if (isUserObject(other) && !basePart(other)) {
      // A mapping object (dict(m), d.update(m), {**m}, f(**m)): Python reads it through its
      // keys() and m[key] when it has a keys attribute, else as a sequence of pairs.
      Result<ValuePtr> keys_fn = getAttr(t, other, interned(Str::keys));
      if (keys_fn) {
        Result<ValuePtr> keys = call(t, *keys_fn, {}, {});
        if (!keys) return keys;
        std::vector<ValuePtr> ks;
        if (Done d = iterate(t, *keys, &ks); !d) return d.stop();
        for (const ValuePtr& k : ks) {
          Result<ValuePtr> v = subscript(t, other, k);
          if (!v) return v;
          if (Done d = storeSubscript(t, self, k, *v); !d) return d.stop();
        }
        continue;
      }
      if (!takeAttributeError(t, keys_fn)) return keys_fn;
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

// ---- sets made in the trace --------------------------------------------------------------
// A set holds constants, modules and tensors (hashed and compared by identity: two graph
// inputs are one object exactly when they alias at trace time, which a guard then pins),
// and frozensets of those (equal when their members are). Lookups answer as Python's do.

// The items of a set-like value (a Set, or a constant set/frozenset as constants); false
// when `v` is not one.
bool setLikeItems(const ValuePtr& v, std::vector<ValuePtr>* out) {
  if (const Set* s = v->get<Set>()) {
    *out = s->items;
    return true;
  }
  PyObject* c = v->constant();
  if (!c || !PyAnySet_Check(c)) return false;
  out->clear();
  Ref it = Ref::steal(PyObject_GetIter(c));
  if (!it) return PyErr_Clear(), false;
  while (Ref x = Ref::steal(PyIter_Next(it.get()))) out->push_back(Value::constant(x.get()));
  if (PyErr_Occurred()) return PyErr_Clear(), false;
  return true;
}

bool isFrozenSetLike(const ValuePtr& v) {
  if (const Set* s = v->get<Set>()) return s->frozen;
  return v->constant() && PyFrozenSet_Check(v->constant());
}

// A set (or frozenset) value of `items`: a frozenset of constants only is a constant.
Result<ValuePtr> makeSet(Tracer& t, std::vector<ValuePtr> items, bool frozen) {
  if (!frozen) return Value::set(std::move(items));
  bool constants = true;
  for (const ValuePtr& v : items) constants = constants && v->is(Kind::Constant);
  if (!constants) return Value::frozenSet(std::move(items));
  Ref fs = Ref::steal(PyFrozenSet_New(nullptr));
  if (!fs) return t.failFromPython("frozenset()");
  for (const ValuePtr& v : items)
    if (PySet_Add(fs.get(), v->constant()) < 0) return t.failFromPython("frozenset()");
  return Value::constant(fs.get());
}

Result<long> setIndex(Tracer& t, const std::vector<ValuePtr>& items, const ValuePtr& v);

// Whether two lists of set items hold the same members.
Result<bool> sameMembers(Tracer& t, const std::vector<ValuePtr>& a, const std::vector<ValuePtr>& b) {
  if (a.size() != b.size()) return false;
  for (const ValuePtr& v : a) {
    Result<long> k = setIndex(t, b, v);
    if (!k) return k.stop();
    if (*k < 0) return false;
  }
  return true;
}

// Where `v` is among a set's `items` (Python's lookup: identity, then == among items of
// equal hash), -1 when absent. `v` may be a set (a lookup converts it to a frozenset).
Result<long> setIndex(Tracer& t, const std::vector<ValuePtr>& items, const ValuePtr& v) {
  if (isScalarValue(t, v))
    return t.fail("a value read from a tensor (Tensor.item()) as a set item: its hash is its value, known only at run time");
  std::vector<ValuePtr> members;
  if (v->is(Kind::Set) || (v->constant() && PyAnySet_Check(v->constant()))) {
    setLikeItems(v, &members);
    for (size_t i = 0; i < items.size(); ++i) {
      std::vector<ValuePtr> other;
      if (!setLikeItems(items[i], &other)) continue;  // a set equals only a set
      Result<bool> same = sameMembers(t, members, other);
      if (!same) return same.stop();
      if (*same) return static_cast<long>(i);
    }
    return -1;
  }
  if (v->is(Kind::Tensor)) {
    for (size_t i = 0; i < items.size(); ++i) {
      if (!items[i]->is(Kind::Tensor)) continue;  // a tensor hashes by identity: only itself is equal
      Result<bool> same = sameTensorObject(t, items[i], v);
      if (!same) return same.stop();
      if (*same) return static_cast<long>(i);
    }
    return -1;
  }
  if (v->is(Kind::List) || v->is(Kind::Dict))
    return t.raiseNew(PyExc_TypeError, std::string("unhashable type: '") + (v->is(Kind::List) ? "list" : "dict") + "'");
  PyObject* o = v->is(Kind::Module) ? v->real() : v->constant();
  if (!o) return t.fail(describe(v) + " as a set item is not supported yet");
  if (!v->is(Kind::Module) && PyObject_Hash(o) == -1) return t.raisePython();  // unhashable: TypeError
  for (size_t i = 0; i < items.size(); ++i) {
    PyObject* item = items[i]->real();
    if (!item) continue;  // a tensor or a frozenset holding one: never equal to a constant or a module
    if (item == o) return static_cast<long>(i);
    if (v->is(Kind::Module) || items[i]->is(Kind::Module)) continue;  // compared by identity
    int eq = PyObject_RichCompareBool(item, o, Py_EQ);
    if (eq < 0) return t.failFromPython("set lookup");
    if (eq) return static_cast<long>(i);
  }
  return -1;
}

// Each of `items` toggled in `result` (removed when a member, else added), in order: how
// Python's symmetric_difference_update changes a set in place.
Done setToggle(Tracer& t, const std::vector<ValuePtr>& items, std::vector<ValuePtr>* result) {
  for (const ValuePtr& v : items) {
    Result<long> k = setIndex(t, *result, v);
    if (!k) return k.stop();
    if (*k >= 0)
      result->erase(result->begin() + *k);
    else
      result->push_back(v);
  }
  return {};
}

// Whether `v` may be added to a set: hashable (a mutable set is not: TypeError).
Done checkHashable(Tracer& t, const ValuePtr& v) {
  if (const Set* s = v->get<Set>(); s && !s->frozen) return t.raiseNew(PyExc_TypeError, "unhashable type: 'set'");
  if (v->is(Kind::List) || v->is(Kind::Dict))
    return t.raiseNew(PyExc_TypeError, std::string("unhashable type: '") + (v->is(Kind::List) ? "list" : "dict") + "'");
  return {};
}

// Adds `v` to `items` unless a member equal to it is there.
Done setAdd(Tracer& t, std::vector<ValuePtr>& items, const ValuePtr& v) {
  if (Done d = checkHashable(t, v); !d) return d;
  Result<long> k = setIndex(t, items, v);
  if (!k) return k.stop();
  if (*k < 0) items.push_back(v);
  return {};
}

// The items of an iterable argument of a set method, as a set would hold them.
Done setItemsOf(Tracer& t, const ValuePtr& other, std::vector<ValuePtr>* out) {
  std::vector<ValuePtr> all;
  if (Done d = iterate(t, other, &all); !d) return d;
  out->clear();
  for (const ValuePtr& m : all)
    if (Done d = setAdd(t, *out, m); !d) return d;
  return {};
}

// The set operations on item lists, in the order Python's build their results.
enum class SetOp { Union, Intersection, Difference, SymmetricDifference };

Done setCombine(Tracer& t, SetOp op, const std::vector<ValuePtr>& a, const std::vector<ValuePtr>& b,
                std::vector<ValuePtr>* out) {
  out->clear();
  switch (op) {
    case SetOp::Union:
      *out = a;
      for (const ValuePtr& v : b)
        if (Done d = setAdd(t, *out, v); !d) return d;
      return {};
    case SetOp::Intersection: {
      // Python walks the smaller set and keeps its items found in the larger one.
      const bool swap = b.size() > a.size();
      const std::vector<ValuePtr>& walk = swap ? a : b;
      const std::vector<ValuePtr>& in = swap ? b : a;
      for (const ValuePtr& v : walk) {
        Result<long> k = setIndex(t, in, v);
        if (!k) return k.stop();
        if (*k >= 0)
          if (Done d = setAdd(t, *out, v); !d) return d;
      }
      return {};
    }
    case SetOp::Difference:
      for (const ValuePtr& v : a) {
        Result<long> k = setIndex(t, b, v);
        if (!k) return k.stop();
        if (*k < 0) out->push_back(v);
      }
      return {};
    case SetOp::SymmetricDifference: {
      *out = b;  // a copy of the other set, then each item of this one toggled in it
      for (const ValuePtr& v : a) {
        Result<long> k = setIndex(t, *out, v);
        if (!k) return k.stop();
        if (*k >= 0)
          out->erase(out->begin() + *k);
        else
          out->push_back(v);
      }
      return {};
    }
  }
  return {};
}

// Whether every member of `a` is in `b`.
Result<bool> setIsSubset(Tracer& t, const std::vector<ValuePtr>& a, const std::vector<ValuePtr>& b) {
  for (const ValuePtr& v : a) {
    Result<long> k = setIndex(t, b, v);
    if (!k) return k.stop();
    if (*k < 0) return false;
  }
  return true;
}

// The real set replaying `set`'s changes (Set::shadow), made from its items in the order
// they were added on first need: what a set built in the trace is (BUILD_SET and set() of
// a list add them in order). Null when an item has no real object (a tensor made in the trace).
PyObject* setShadow(Set& set) {
  if (set.shadow_lost) return nullptr;
  if (set.shadow) return set.shadow.get();
  Ref real = Ref::steal(PySet_New(nullptr));
  if (!real) return PyErr_Clear(), set.shadow_lost = true, nullptr;
  for (const ValuePtr& v : set.items) {
    PyObject* o = v->real();
    if (!o || v->is(Kind::Tensor) || PySet_Add(real.get(), o) < 0) return PyErr_Clear(), set.shadow_lost = true, nullptr;
  }
  set.shadow = std::move(real);
  return set.shadow.get();
}

// Runs `method`(*args) on the shadow of `set` for real, after the trace made the same change
// to its items; the shadow is given up when an argument has no real object.
void replayOnShadow(Tracer& t, Set& set, const char* method, const std::vector<ValuePtr>& args) {
  PyObject* shadow = setShadow(set);
  if (!shadow) return;
  Ref real_args = Ref::steal(PyTuple_New(static_cast<Py_ssize_t>(args.size())));
  if (!real_args) return PyErr_Clear(), set.shadow = Ref(), set.shadow_lost = true, void();
  for (size_t i = 0; i < args.size(); ++i) {
    Ref a;
    if (Set* other = args[i]->get<Set>(); other && args[i]->reg < 0) {
      if (PyObject* o = setShadow(*other)) a = Ref::borrow(o);
    } else if (!args[i]->is(Kind::Tensor)) {
      a = toPython(t, args[i]);
    }
    if (!a) return PyErr_Clear(), set.shadow = Ref(), set.shadow_lost = true, void();
    PyTuple_SET_ITEM(real_args.get(), static_cast<Py_ssize_t>(i), a.release());
  }
  Ref fn = Ref::steal(PyObject_GetAttrString(shadow, method));
  Ref r = fn ? Ref::steal(PyObject_Call(fn.get(), real_args.get(), nullptr)) : Ref();
  if (!r || static_cast<size_t>(PySet_GET_SIZE(shadow)) != set.items.size()) {
    PyErr_Clear();
    set.shadow = Ref();
    set.shadow_lost = true;
  }
}

// A real object standing for an argument of a set operation computed for real on a set's
// shadow: a set made in the trace (its shadow), a constant, or a list, tuple or set whose
// items are real objects that hash and compare without running Python code. Null otherwise.
Ref realSetArgument(Tracer& t, const ValuePtr& v) {
  if (PyObject* shadow = realSetOperand(v)) return Ref::borrow(shadow);
  if (v->is(Kind::Constant)) return Ref::borrow(v->constant());
  if (!(v->is(Kind::List) || v->is(Kind::Tuple) || v->is(Kind::Set))) return Ref();
  for (const ValuePtr& e : *v->elements())
    if (!realComparable(e, true)) return Ref();
  Ref r = toPython(t, v);
  if (!r) PyErr_Clear();
  return r;
}

// set method `n` (copy, union, intersection, difference, symmetric_difference) of a set made
// in the trace, run for real on its shadow when every argument has a real stand-in; null
// when it cannot be (the item-list computation then serves).
ValuePtr setMethodOnShadow(Tracer& t, const ValuePtr& self, const char* n, const std::vector<ValuePtr>& args) {
  PyObject* shadow = realSetOperand(self);
  if (!shadow) return nullptr;
  for (const ValuePtr& v : self->as<Set>().items)
    if (!realComparable(v, true)) return nullptr;  // the real call would run the program's __eq__
  Ref real_args = Ref::steal(PyTuple_New(static_cast<Py_ssize_t>(args.size())));
  if (!real_args) return PyErr_Clear(), nullptr;
  for (size_t i = 0; i < args.size(); ++i) {
    Ref a = realSetArgument(t, args[i]);
    if (!a) return nullptr;
    PyTuple_SET_ITEM(real_args.get(), static_cast<Py_ssize_t>(i), a.release());
  }
  Ref method = Ref::steal(PyObject_GetAttrString(shadow, n));
  Ref r = method ? Ref::steal(PyObject_Call(method.get(), real_args.get(), nullptr)) : Ref();
  if (!r) return PyErr_Clear(), nullptr;  // the item-list path raises Python's error
  ValuePtr out;
  switch (args.size()) {
    case 0: out = setFromReal(r.get(), {self}); break;
    case 1: out = setFromReal(r.get(), {self, args[0]}); break;
    default: {
      // Several arguments (s.union(a, b)): each operand's items looked up in turn.
      std::vector<ValuePtr> all = self->as<Set>().items;
      for (const ValuePtr& a : args)
        if (const std::vector<ValuePtr>* e = a->elements()) all.insert(all.end(), e->begin(), e->end());
      out = setFromReal(r.get(), {Value::list(std::move(all))});
    }
  }
  return out;
}

Result<ValuePtr> setMethod(Tracer& t, const ValuePtr& self, const char* n, std::vector<ValuePtr>& args) {
  auto is = [n](const char* m) { return strcmp(n, m) == 0; };
  Set& set = self->as<Set>();
  std::vector<ValuePtr>& items = set.items;
  auto boolean = [](bool b) { return Value::constant(b ? Py_True : Py_False); };
  if (is("__contains__") && args.size() == 1) {
    Result<long> k = setIndex(t, items, args[0]);
    if (!k) return k.stop();
    return boolean(*k >= 0);
  }
  if (is("copy") && args.empty() && set.frozen) return self;
  if (is("copy") && args.empty())
    if (ValuePtr real = setMethodOnShadow(t, self, n, args)) return real;
  if (is("copy") && args.empty()) return Value::of(Set{items, false});
  static const std::pair<const char*, SetOp> kCombining[] = {{"union", SetOp::Union},
                                                             {"intersection", SetOp::Intersection},
                                                             {"difference", SetOp::Difference},
                                                             {"symmetric_difference", SetOp::SymmetricDifference}};
  for (const auto& [name, op] : kCombining) {
    if (!is(name)) continue;
    if (op == SetOp::SymmetricDifference && args.size() != 1)
      return t.raiseNew(PyExc_TypeError, "symmetric_difference() takes exactly one argument");
    if (ValuePtr real = setMethodOnShadow(t, self, n, args)) return real;
    std::vector<ValuePtr> result = items, other, next;
    for (const ValuePtr& arg : args) {
      if (Done d = setItemsOf(t, arg, &other); !d) return d.stop();
      if (Done d = setCombine(t, op, result, other, &next); !d) return d.stop();
      result.swap(next);
    }
    return makeSet(t, std::move(result), set.frozen);
  }
  std::vector<ValuePtr> scratch;
  if ((is("issuperset") || is("isdisjoint")) && args.size() == 1 && !setLikeItems(args[0], &scratch)) {
    // Over an iterable that is not a set, Python takes its items one at a time and stops at
    // the first that decides (a generator's frame keeps the rest untaken, its side effects
    // not yet run): isdisjoint at the first member, issuperset at the first non-member.
    Result<ValuePtr> it = getIter(t, args[0]);
    if (!it) return it;
    const bool disjoint = is("isdisjoint");
    while (true) {
      ValuePtr v;
      if (Done d = nextItem(t, *it, &v); !d) return d.stop();
      if (!v) return boolean(true);
      Result<long> k = setIndex(t, items, v);
      if (!k) return k.stop();
      if ((*k >= 0) == disjoint) return boolean(false);
    }
  }
  if ((is("issubset") || is("issuperset") || is("isdisjoint")) && args.size() == 1) {
    std::vector<ValuePtr> other;
    if (Done d = setItemsOf(t, args[0], &other); !d) return d.stop();
    if (is("isdisjoint")) {
      std::vector<ValuePtr> common;
      if (Done d = setCombine(t, SetOp::Intersection, items, other, &common); !d) return d.stop();
      return boolean(common.empty());
    }
    Result<bool> r = is("issubset") ? setIsSubset(t, items, other) : setIsSubset(t, other, items);
    if (!r) return r.stop();
    return boolean(*r);
  }
  // The operators' special methods called by name (s.__or__(t), s.__ior__(t)).
  static const std::pair<const char*, BinaryOp> kDunders[] = {
      {"__or__", BinaryOp::Or},          {"__and__", BinaryOp::And},          {"__sub__", BinaryOp::Subtract},
      {"__xor__", BinaryOp::Xor},        {"__ior__", BinaryOp::InplaceOr},    {"__iand__", BinaryOp::InplaceAnd},
      {"__isub__", BinaryOp::InplaceSubtract}, {"__ixor__", BinaryOp::InplaceXor}};
  for (const auto& [name, op] : kDunders)
    if (is(name) && args.size() == 1 && !(set.frozen && bytecode::isInplace(op))) {
      Result<ValuePtr> r = setBinaryOp(t, op, self, args[0]);
      if (r.notHandled()) return Value::constant(Py_NotImplemented);
      return r;
    }
  static const char* const kMutating[] = {"add", "discard", "remove", "pop", "clear", "update", "__init__",
                                          "intersection_update", "difference_update", "symmetric_difference_update"};
  bool mutating = false;
  for (const char* m : kMutating) mutating = mutating || is(m);
  if (!mutating) return notHandled();
  if (set.frozen && !is("__init__"))
    return t.raiseNew(PyExc_AttributeError, std::string("'frozenset' object has no attribute '") + n + "'");
  if (set.frozen) return Value::constant(Py_None);  // frozenset.__init__ is object's: it changes nothing
  if (Done d = t.effects().noteContainerMutation(self); !d) return d.stop();
  if (is("add") && args.size() == 1) {
    setShadow(set);  // made before the change: from the items it held
    if (Done d = setAdd(t, items, args[0]); !d) return d.stop();
    replayOnShadow(t, set, n, args);
    return Value::constant(Py_None);
  }
  if ((is("discard") || is("remove")) && args.size() == 1) {
    Result<long> k = setIndex(t, items, args[0]);
    if (!k) return k.stop();
    if (*k >= 0) {
      setShadow(set);
      items.erase(items.begin() + *k);
      replayOnShadow(t, set, "discard", args);
    } else if (is("remove")) {
      Ref key = toPython(t, args[0]);
      if (!key) return t.raiseNew(PyExc_KeyError, "set.remove(): the item is not in the set");
      PyErr_SetObject(PyExc_KeyError, key.get());
      return t.raisePython();
    }
    return Value::constant(Py_None);
  }
  if (is("pop") && args.empty()) {
    if (items.empty()) return t.raiseNew(PyExc_KeyError, "pop from an empty set");
    if (PyObject* shadow = setShadow(set)) {
      // Python's pop takes the entry at its finger (where the last pop left off): the
      // shadow's own pop says which.
      Ref popped = Ref::steal(PyObject_CallMethod(shadow, "pop", nullptr));
      if (!popped) {
        PyErr_Clear();
        set.shadow = Ref();
        set.shadow_lost = true;
      } else {
        for (size_t i = 0; i < items.size(); ++i)
          if (items[i]->real() == popped.get()) {
            ValuePtr v = items[i];
            items.erase(items.begin() + static_cast<std::ptrdiff_t>(i));
            return v;
          }
        set.shadow = Ref();
        set.shadow_lost = true;
      }
    }
    ValuePtr first = setIterationOrder(set).front();  // the first item a walk of the set meets
    for (size_t i = 0; i < items.size(); ++i)
      if (items[i] == first) {
        items.erase(items.begin() + static_cast<std::ptrdiff_t>(i));
        break;
      }
    return first;
  }
  if (is("clear") && args.empty()) {
    items.clear();
    set.shadow = Ref();  // a cleared set starts a fresh table
    set.shadow_lost = false;
    return Value::constant(Py_None);
  }
  if (is("__init__") && args.size() <= 1) {  // set.__init__(iterable=()): emptied, then filled
    std::vector<ValuePtr> more;
    if (!args.empty())
      if (Done d = setItemsOf(t, args[0], &more); !d) return d.stop();
    items = std::move(more);
    set.shadow = Ref();
    set.shadow_lost = false;
    return Value::constant(Py_None);
  }
  SetOp op = SetOp::Union;
  if (is("intersection_update")) op = SetOp::Intersection;
  else if (is("difference_update")) op = SetOp::Difference;
  else if (is("symmetric_difference_update")) op = SetOp::SymmetricDifference;
  else if (!is("update")) return notHandled();
  if (op == SetOp::SymmetricDifference && args.size() != 1)
    return t.raiseNew(PyExc_TypeError, "symmetric_difference_update() takes exactly one argument");
  std::vector<ValuePtr> result = items, other, next;
  for (const ValuePtr& arg : args) {
    if (Done d = setItemsOf(t, arg, &other); !d) return d.stop();
    if (op == SetOp::SymmetricDifference) {
      // Python toggles each item of the other set in this one, in place.
      if (Done d = setToggle(t, other, &result); !d) return d.stop();
      continue;
    }
    if (Done d = setCombine(t, op, result, other, &next); !d) return d.stop();
    result.swap(next);
  }
  setShadow(set);
  items = std::move(result);
  replayOnShadow(t, set, n, args);
  return Value::constant(Py_None);
}

}  // namespace

// The value of a mutable set computed for real from operands that include a set made in the
// trace (s.copy(), s.union(...), set(s), s | t): its items are the operands' own values where
// the real set holds their real objects (constants otherwise), and the real set is its
// shadow, so that it walks, and pops, in eager's order. A set built afresh from the items
// walks in another order once the operand had a history (removals leave dummies; fuzzer F5
// and its siblings). Null when the real set holds an object no operand's value stands for.
ValuePtr setFromReal(PyObject* real, std::initializer_list<ValuePtr> operands) {
  if (!PySet_CheckExact(real)) return nullptr;
  std::vector<ValuePtr> items;
  Py_ssize_t pos = 0;
  PyObject* key;
  Py_hash_t hash;
  while (_PySet_NextEntry(real, &pos, &key, &hash)) {
    ValuePtr found;
    for (const ValuePtr& operand : operands) {
      const std::vector<ValuePtr>* from = operand ? operand->elements() : nullptr;
      if (!from) continue;
      for (const ValuePtr& v : *from)
        if (v->real() == key) {
          found = v;
          break;
        }
      if (found) break;
    }
    if (!found && isConstantObject(key)) found = Value::constant(key);
    if (!found) return nullptr;
    items.push_back(std::move(found));
  }
  ValuePtr out = Value::set(std::move(items));
  out->as<Set>().shadow = Ref::borrow(real);
  return out;
}

PyObject* realSetOperand(const ValuePtr& v) {
  Set* s = v->get<Set>();
  // A set read from the program has a copy of its table from the start (builder.cpp); one
  // without (read another way, or cleared since) would get a fresh table here, not its own.
  if (!s || s->frozen || (v->reg >= 0 && !s->shadow)) return nullptr;
  PyObject* shadow = setShadow(*s);
  if (!shadow || static_cast<size_t>(PySet_GET_SIZE(shadow)) != s->items.size()) return nullptr;
  return shadow;
}

std::vector<ValuePtr> setIterationOrder(const Set& s) {
  // Python walks a set in the order of its table, which the items' hashes decide: a set of
  // real objects (constants, modules, whose hashes are the same on every call the guards
  // admit) is rebuilt for real to read it. A set holding a tensor is walked in the order
  // its items were added (a tensor's hash is its address, another one on each call).
  if (s.items.size() < 2) return s.items;
  if (s.shadow && static_cast<size_t>(PySet_GET_SIZE(s.shadow.get())) == s.items.size()) {
    // Changed in the trace: its shadow has the history (Set::shadow).
    std::vector<ValuePtr> out;
    Py_ssize_t pos = 0;
    PyObject* key;
    Py_hash_t hash;
    while (_PySet_NextEntry(s.shadow.get(), &pos, &key, &hash))
      for (const ValuePtr& v : s.items)
        if (v->real() == key) {
          out.push_back(v);
          break;
        }
    if (out.size() == s.items.size()) return out;
  }
  Ref real = Ref::steal(PySet_New(nullptr));
  if (!real) return PyErr_Clear(), s.items;
  for (const ValuePtr& v : s.items) {
    PyObject* o = v->real();
    if (!o || PySet_Add(real.get(), o) < 0) return PyErr_Clear(), s.items;
  }
  std::vector<ValuePtr> out;
  Ref it = Ref::steal(PyObject_GetIter(real.get()));
  if (!it) return PyErr_Clear(), s.items;
  while (Ref o = Ref::steal(PyIter_Next(it.get())))
    for (const ValuePtr& v : s.items)
      if (v->real() == o.get()) {
        out.push_back(v);
        break;
      }
  if (PyErr_Occurred() || out.size() != s.items.size()) return PyErr_Clear(), s.items;
  return out;
}

Result<ValuePtr> makeFrozenSet(Tracer& t, const ValuePtr& iterable) {
  if (const Set* s = iterable->get<Set>(); s && s->frozen) return iterable;  // frozenset(fs) is fs
  if (iterable->constant() && PyFrozenSet_CheckExact(iterable->constant())) return iterable;
  if (PyObject* shadow = realSetOperand(iterable)) {
    // Of a set made in the trace: copied from its real table, as eager copies it (in its
    // walk order, or slot by slot), when every item is a constant.
    bool constants = true;
    for (const ValuePtr& v : iterable->as<Set>().items) constants = constants && v->is(Kind::Constant);
    Ref real = constants ? Ref::steal(PyFrozenSet_New(shadow)) : Ref();
    if (real) return Value::constant(real.get());
    PyErr_Clear();
  }
  std::vector<ValuePtr> items;
  if (Done d = setItemsOf(t, iterable, &items); !d) return d.stop();
  return makeSet(t, std::move(items), true);
}

Result<ValuePtr> setBinaryOp(Tracer& t, BinaryOp op, const ValuePtr& a, const ValuePtr& b) {
  std::vector<ValuePtr> x, y, result;
  if (!setLikeItems(a, &x) || !setLikeItems(b, &y)) return notHandled();
  SetOp which;
  switch (op) {
    case BinaryOp::Or:
    case BinaryOp::InplaceOr: which = SetOp::Union; break;
    case BinaryOp::And:
    case BinaryOp::InplaceAnd: which = SetOp::Intersection; break;
    case BinaryOp::Subtract:
    case BinaryOp::InplaceSubtract: which = SetOp::Difference; break;
    case BinaryOp::Xor:
    case BinaryOp::InplaceXor: which = SetOp::SymmetricDifference; break;
    default: return notHandled();
  }
  Set* target = bytecode::isInplace(op) ? a->get<Set>() : nullptr;
  if (target && target->frozen) target = nullptr;  // frozenset |= ...: a new frozenset
  if (target && which == SetOp::SymmetricDifference) {  // toggled in place, as Python does
    result = x;
    if (Done d = setToggle(t, y, &result); !d) return d.stop();
  } else if (Done d = setCombine(t, which, x, y, &result); !d) {
    return d.stop();
  }
  if (target) {  // the set itself changes: every alias sees it
    if (Done d = t.effects().noteContainerMutation(a); !d) return d.stop();
    setShadow(*target);
    target->items = std::move(result);
    static const char* const kInPlace[] = {"__ior__", "__iand__", "__isub__", "__ixor__"};
    replayOnShadow(t, *target, kInPlace[static_cast<int>(which)], {b});
    return a;
  }
  return makeSet(t, std::move(result), isFrozenSetLike(a));
}

Result<ValuePtr> setCompare(Tracer& t, int op, const ValuePtr& a, const ValuePtr& b) {
  std::vector<ValuePtr> x, y;
  if (!setLikeItems(a, &x) || !setLikeItems(b, &y)) return notHandled();
  bool r = false;
  Result<bool> sub = true, sup = true;
  if (op == Py_LT || op == Py_LE || op == Py_EQ || op == Py_NE) {
    sub = setIsSubset(t, x, y);
    if (!sub) return sub.stop();
  }
  if (op == Py_GT || op == Py_GE) {
    sup = setIsSubset(t, y, x);
    if (!sup) return sup.stop();
  }
  switch (op) {
    case Py_LT: r = *sub && x.size() < y.size(); break;
    case Py_LE: r = *sub; break;
    case Py_EQ: r = *sub && x.size() == y.size(); break;
    case Py_NE: r = !(*sub && x.size() == y.size()); break;
    case Py_GT: r = *sup && y.size() < x.size(); break;
    case Py_GE: r = *sup; break;
    default: return notHandled();
  }
  return Value::constant(r ? Py_True : Py_False);
}

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
  if (list && list->deque && index->is(Kind::Slice))  // d[a:b] = ..., del d[a:b]: no slices for a deque
    return t.raiseNew(PyExc_TypeError, "sequence index must be integer, not 'slice'");
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
    if (k < 0 || k >= n)
      return t.raiseNew(PyExc_IndexError, list->deque ? "deque index out of range" : "list assignment index out of range");
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
  return t.fail(std::string("item assignment on ") + describe(obj) + " is not supported yet");
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
  if (const Set* s = v->get<Set>(); s && s->frozen) {
    // A frozenset made in the trace holding tensors (by identity) or constants: the key is
    // a real frozenset of the members' key objects (each guarded as a key of its own), equal
    // to, and hashed as, the one the program makes. Kept alive with the trace's key objects.
    Ref fs = Ref::steal(PyFrozenSet_New(nullptr));
    if (!fs) return PyErr_Clear(), nullptr;
    for (const ValuePtr& item : s->items) {
      PyObject* k = dictKeyOf(t, item);
      if (!k || PySet_Add(fs.get(), k) < 0) return PyErr_Clear(), nullptr;
    }
    PyObject* key = fs.get();
    t.keyObjects().emplace(key, std::make_pair(std::move(fs), v));
    return key;
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

PyTypeObject* containerCType(const ValuePtr& self) {
  PyTypeObject* type = nullptr;
  if (const List* l = self->get<List>())
    type = l->deque ? reinterpret_cast<PyTypeObject*>(l->deque.get()) : &PyList_Type;
  else if (self->is(Kind::Tuple))
    type = &PyTuple_Type;
  else if (const Dict* d = self->get<Dict>())
    type = PyType_Check(d->type.get()) ? reinterpret_cast<PyTypeObject*>(d->type.get()) : &PyDict_Type;
  else if (const Set* s = self->get<Set>())
    type = s->frozen ? &PyFrozenSet_Type : &PySet_Type;
  while (type && PyType_HasFeature(type, Py_TPFLAGS_HEAPTYPE)) type = type->tp_base;
  return type;
}

namespace {

// What a C method's __text_signature__ says of the arguments it takes; `known` false when
// it has none (D.update([E, ]**F), set.union(*others) as documented in prose).
struct Arity {
  bool known = false;
  size_t min = 0, max = 0;  // positional arguments
  bool varargs = false;     // *args: any number past max
  bool keywords = false;    // some parameter can be passed by keyword
  // The positional parameters in order; keyword_from: the first one that may also be
  // passed by keyword (those after "/").
  std::vector<std::string> names;
  size_t keyword_from = SIZE_MAX;
};

Arity parseTextSignature(const char* sig) {
  // "($self, key, default=<unrepresentable>, /)", "($self, /, *, key=None, reverse=False)"
  Arity a;
  std::string s(sig);
  if (s.size() < 2 || s.front() != '(' || s.back() != ')') return a;
  s = s.substr(1, s.size() - 2);
  size_t pos = 0;
  bool keyword_only = false;
  std::vector<std::pair<std::string, bool>> params;  // (name, has default), before "/"
  bool after_slash = false;
  while (pos <= s.size()) {
    size_t comma = s.find(", ", pos);
    std::string p = s.substr(pos, comma == std::string::npos ? std::string::npos : comma - pos);
    pos = comma == std::string::npos ? s.size() + 1 : comma + 2;
    if (p.empty() || p[0] == '$') continue;
    if (p == "/") {
      after_slash = true;
      continue;
    }
    if (p == "*") {
      keyword_only = true;
      continue;
    }
    if (p.rfind("**", 0) == 0) {
      a.keywords = true;
      continue;
    }
    if (p[0] == '*') {
      a.varargs = true;
      keyword_only = true;
      continue;
    }
    bool has_default = p.find('=') != std::string::npos;
    if (keyword_only) {
      a.keywords = true;
      if (!has_default) return Arity{};  // a required keyword: leave it to the handlers
      continue;
    }
    if (after_slash) {
      a.keywords = true;
      a.keyword_from = std::min(a.keyword_from, a.max);
    }
    a.names.push_back(p.substr(0, p.find('=')));
    a.max += 1;
    if (!has_default) a.min = a.max;
  }
  a.known = true;
  return a;
}

Arity methodArity(PyTypeObject* type, PyObject* name) {
  // Per (type, method name), parsed once: the types are CPython's own (never freed).
  static std::unordered_map<std::string, Arity> cache;
  std::string key = std::string(type->tp_name) + "." + PyUnicode_AsUTF8(name);
  auto found = cache.find(key);
  if (found != cache.end()) return found->second;
  Arity a;
  PyObject* descr = _PyType_Lookup(type, name);  // borrowed; runs no Python code
  if (descr && (Py_IS_TYPE(descr, &PyMethodDescr_Type) || Py_IS_TYPE(descr, &PyWrapperDescr_Type))) {
    Ref sig = Ref::steal(PyObject_GetAttrString(descr, "__text_signature__"));
    if (sig && PyUnicode_Check(sig.get())) a = parseTextSignature(PyUnicode_AsUTF8(sig.get()));
    PyErr_Clear();
  }
  if (!a.known && descr && Py_IS_TYPE(descr, &PyMethodDescr_Type)) {
    // No signature: the calling convention still says (dict.keys, set.add, set.union).
    int flags = reinterpret_cast<PyMethodDescrObject*>(descr)->d_method->ml_flags &
                (METH_VARARGS | METH_KEYWORDS | METH_NOARGS | METH_O | METH_FASTCALL | METH_METHOD);
    if (flags == METH_NOARGS) {
      a.known = true;
    } else if (flags == METH_O) {
      a.known = true;
      a.min = a.max = 1;
    } else if (flags == METH_VARARGS) {
      a.known = true;
      a.varargs = true;
    }
  }
  cache.emplace(std::move(key), a);
  return a;
}

// A call of a container's C method with arguments its signature refuses raises Python's
// own TypeError (the method is called for real, with placeholders, on an empty instance
// of its type: argument parsing fails before the method does anything); NotHandled when
// the arguments fit, or the signature is not known.
Result<ValuePtr> raiseOnBadArity(Tracer& t, const ValuePtr& self, PyObject* name, const std::vector<ValuePtr>& args,
                                 const std::vector<std::pair<Ref, ValuePtr>>& kwargs) {
  PyTypeObject* type = containerCType(self);
  if (!type) return notHandled();
  Arity a = methodArity(type, name);
  if (!a.known) return notHandled();
  bool bad = args.size() < a.min || (!a.varargs && args.size() > a.max) || (!kwargs.empty() && !a.keywords);
  if (!bad) return notHandled();
  return raiseArgumentError(t, type, name, args, kwargs);
}

Result<ValuePtr> raiseArgumentError(Tracer& t, PyTypeObject* type, PyObject* name, const std::vector<ValuePtr>& args,
                                    const std::vector<std::pair<Ref, ValuePtr>>& kwargs) {
  Ref instance;
  if (type == &PyDictProxy_Type) {
    Ref empty = Ref::steal(PyDict_New());
    if (empty) instance = Ref::steal(PyDictProxy_New(empty.get()));
  } else {
    instance = Ref::steal(PyObject_CallNoArgs(reinterpret_cast<PyObject*>(type)));
  }
  if (!instance) return t.failFromPython("making an empty container to check a call's arguments");
  // The descriptor called with the instance first, as a method call does (the message
  // then names it "set.union()", as Python's).
  Ref method = Ref::borrow(_PyType_Lookup(type, name));
  if (!method) method = Ref::steal(PyObject_GetAttr(reinterpret_cast<PyObject*>(type), name));
  Ref pos = Ref::steal(PyTuple_New(static_cast<Py_ssize_t>(args.size() + 1)));
  Ref kw = Ref::steal(PyDict_New());
  if (!method || !pos || !kw) return t.failFromPython("checking a call's arguments");
  PyTuple_SET_ITEM(pos.get(), 0, Py_NewRef(instance.get()));
  for (size_t i = 0; i < args.size(); ++i) PyTuple_SET_ITEM(pos.get(), static_cast<Py_ssize_t>(i + 1), Py_NewRef(Py_None));
  for (const auto& [k, v] : kwargs)
    if (PyDict_SetItem(kw.get(), k.get(), Py_None) < 0) return t.failFromPython("checking a call's arguments");
  Ref r = Ref::steal(PyObject_Call(method.get(), pos.get(), kwargs.empty() ? nullptr : kw.get()));
  if (r) return t.fail(std::string("the arguments of ") + type->tp_name + "." + PyUnicode_AsUTF8(name) +
                       "() do not match its signature, yet it accepted them");
  if (!PyErr_ExceptionMatches(PyExc_TypeError))
    return t.failFromPython("checking a call's arguments");
  return t.raisePython();
}

// Keyword arguments of a C method that its signature lets pass by position
// (od.move_to_end(k, last=False), od.popitem(last=False)) moved into `args`, when they fill
// the positions right after the positional ones; the others stay in `kwargs`.
void keywordsToPositions(const ValuePtr& self, PyObject* name, std::vector<ValuePtr>& args,
                         std::vector<std::pair<Ref, ValuePtr>>& kwargs) {
  PyTypeObject* type = containerCType(self);
  if (!type || kwargs.empty()) return;
  Arity a = methodArity(type, name);
  if (!a.known) return;
  for (size_t i = args.size(); i < a.names.size() && i >= a.keyword_from && !kwargs.empty(); ++i) {
    auto found = std::find_if(kwargs.begin(), kwargs.end(), [&](const std::pair<Ref, ValuePtr>& kw) {
      return PyUnicode_Check(kw.first.get()) && a.names[i] == PyUnicode_AsUTF8(kw.first.get());
    });
    if (found == kwargs.end()) return;
    args.push_back(found->second);
    kwargs.erase(found);
  }
}

}  // namespace

Stop raiseConstructorArgumentError(Tracer& t, PyObject* type, size_t nargs, const Kwargs& kwargs) {
  Ref pos = Ref::steal(PyTuple_New(static_cast<Py_ssize_t>(nargs)));
  Ref kw = Ref::steal(PyDict_New());
  if (!pos || !kw) return t.failFromPython("checking a call's arguments");
  for (size_t i = 0; i < nargs; ++i) PyTuple_SET_ITEM(pos.get(), static_cast<Py_ssize_t>(i), Py_NewRef(Py_None));
  for (const auto& [k, v] : kwargs)
    if (PyDict_SetItem(kw.get(), k.get(), Py_None) < 0) return t.failFromPython("checking a call's arguments");
  Ref r = Ref::steal(PyObject_Call(type, pos.get(), kwargs.empty() ? nullptr : kw.get()));
  if (r || !PyErr_ExceptionMatches(PyExc_TypeError)) {
    PyErr_Clear();
    return t.fail("a container type accepted arguments it was expected to refuse");
  }
  return t.raisePython();
}

Result<ValuePtr> callContainerMethod(Tracer& t, const ValuePtr& self, PyObject* name, std::vector<ValuePtr>& args,
                                     std::vector<std::pair<Ref, ValuePtr>>& kwargs) {
  if (Result<ValuePtr> r = raiseOnBadArity(t, self, name, args, kwargs); !r.notHandled()) return r;
  return applyContainerMethod(t, self, name, args, kwargs);
}

Result<ValuePtr> applyContainerMethod(Tracer& t, const ValuePtr& self, PyObject* name, std::vector<ValuePtr>& args,
                                      std::vector<std::pair<Ref, ValuePtr>>& kwargs) {
  const char* n = PyUnicode_AsUTF8(name);
  auto is = [n](const char* m) { return strcmp(n, m) == 0; };
  if (self->is(Kind::Dict)) keywordsToPositions(self, name, args, kwargs);
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
    case Kind::SubclassTensor:
      break;
  }
  if (!r.notHandled()) return r;
  if (n[0] == '_' && n[1] == '_' && (self->is(Kind::List) || self->is(Kind::Tuple) || self->is(Kind::Dict) ||
                                     self->is(Kind::Set))) {
    // A special method called by name (l.__getitem__(2), d.__iter__(), s.__sub__(q)): the
    // C type's method, as a call through the class would run it (callBaseMethod).
    if (PyTypeObject* type = containerCType(self))
      if (PyObject* descr = _PyType_Lookup(type, name)) {
        Ref hold = Ref::borrow(descr);
        Args with_self{self};
        with_self.insert(with_self.end(), args.begin(), args.end());
        Result<ValuePtr> b = callBaseMethod(t, descr, with_self, kwargs);
        if (!b.notHandled()) return b;
      }
  }
  if (self->is(Kind::DictView) && strcmp(n, "__iter__") == 0 && args.empty() && kwargs.empty()) return getIter(t, self);
  if (self->is(Kind::Iterator) && args.empty() && kwargs.empty()) {
    if (strcmp(n, "__iter__") == 0) return self;  // an iterator is its own
    if (strcmp(n, "__next__") == 0) {
      ValuePtr item;
      if (Done d = nextItem(t, self, &item); !d) return d.stop();
      if (!item) return raiseStopIteration(t, self);
      return item;
    }
  }
  return t.fail(std::string(kindName(self->kind())) + "." + n + "() is not supported yet");
}

namespace {

// Calls method `name` of container `self` with one argument, for an opcode.
Done containerCall(Tracer& t, const ValuePtr& self, Str name, const ValuePtr& arg) {
  Args a{arg};
  Kwargs kw;
  return outcomeOf(applyContainerMethod(t, self, interned(name), a, kw));
}

}  // namespace

Done deleteItem(Tracer& t, const ValuePtr& obj, const ValuePtr& index) {
  if (obj->is(Kind::List) && index->is(Kind::Slice)) return storeSubscript(t, obj, index, nullptr);  // del xs[a:b]
  if (obj->is(Kind::List) && index->is(Kind::Constant)) {
    // The index is checked here: pop(k), which carries the deletion out, says "pop index out
    // of range" (deque.pop takes no index at all).
    Py_ssize_t k;
    if (!constIntArg({index}, 0, &k)) return t.fail("del of a list item needs a constant int index");
    const Py_ssize_t n = static_cast<Py_ssize_t>(obj->as<List>().items.size());
    if (k < -n || k >= n)
      return t.raiseNew(PyExc_IndexError,
                        obj->as<List>().deque ? "deque index out of range" : "list assignment index out of range");
    return containerCall(t, obj, Str::pop, index);
  }
  if (obj->is(Kind::Dict)) return containerCall(t, obj, Str::pop, index);
  return t.fail(std::string("del on an item of ") + describe(obj) + " is not supported yet");
}

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
  if (Done done = deleteItem(t, io[0], io[1]); !done) return done.stop();
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
