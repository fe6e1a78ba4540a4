// Sequences: lists, tuples (namedtuples too), deques and torch.Size values made or read in the trace:
// their methods and their binary operators (rows of the operator protocol, protocol/binary_rules.h).
// Containers read from the program are not changed here (that is a side effect to replay).
#include <algorithm>
#include <cstring>
#include <string>
#include <unordered_map>

#include "support/check.h"
#include "support/lookup.h"
#include "support/torch_types.h"
#include "trace/engine/outputs.h"
#include "trace/engine/scalars.h"
#include "trace/kinds/iterator.h"
#include "trace/kinds/object.h"
#include "trace/kinds/sequence.h"
#include "trace/protocol/attributes.h"
#include "trace/protocol/binary_rules.h"
#include "trace/protocol/calls.h"
#include "trace/protocol/constants.h"
#include "trace/protocol/operators.h"
#include "trace/tracer.h"

namespace cdynamo::trace {

using bytecode::BinaryOp;
using bytecode::Op;

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

namespace {
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

// item == v as a list's or tuple's methods compare them (PyObject_RichCompareBool:
// identity, then item.__eq__(v) and the reflected one): known at trace time, or, when either
// is an instance of a class of the program, by its class's own __eq__ (inlined) and the
// truth of what it returns. Fails with `what` when neither can decide.
Result<bool> itemEquals(Tracer& t, const ValuePtr& item, const ValuePtr& v, const char* what) {
  int eq;
  if (sameValue(item, v, &eq)) return eq != 0;
  if (!isUserObject(item) && !isUserObject(v)) return t.fail(what);
  if (item == v || (item->real() && item->real() == v->real())) return true;
  Result<ValuePtr> r = compareOp(t, Py_EQ, item, v);
  if (!r) return r.stop();
  return truthValue(t, *r);
}

}  // namespace
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
    for (size_t i = 0; i < items.size(); ++i) {
      Result<bool> eq = itemEquals(t, items[i], args[0], "`in` needs comparisons known at trace time");
      if (!eq) return eq.stop();
      if (*eq) return Value::constant(Py_True);
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
      const std::string what = std::string(".") + n + "() needs comparisons known at trace time";
      Result<bool> equal = itemEquals(t, items[i], args[0], what.c_str());
      if (!equal) return equal.stop();
      const int eq = *equal ? 1 : 0;
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
      Result<bool> eq = itemEquals(t, items[i], args[0], "list.remove needs comparisons known at trace time");
      if (!eq) return eq.stop();
      if (*eq) {
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
  if (is("sort")) {
    bool constants = true;
    for (const ValuePtr& v : items) constants = constants && v->constant();
    for (auto& [k, v] : kwargs) constants = constants && v->constant();
    if (constants) return sortConstants(t, items, kwargs);
    return sortValues(t, self, kwargs);
  }
  return notHandled();
}

namespace {
// key(a) < key(b) as list.sort asks it: for real between constants, else by the operator
// protocol (a class's own __lt__ inlined) and the truth of its answer.
Result<bool> sortLess(Tracer& t, const ValuePtr& a, const ValuePtr& b) {
  if (a->constant() && b->constant()) {
    int lt = PyObject_RichCompareBool(a->constant(), b->constant(), Py_LT);
    if (lt < 0) return t.failFromPython("list.sort comparing its keys");
    return lt == 1;
  }
  if (!isUserObject(a) && !isUserObject(b)) return t.fail("list.sort by keys whose order depends on their values");
  Result<ValuePtr> r = compareOp(t, Py_LT, a, b);
  if (!r) return r.stop();
  return truthValue(t, *r);
}
}  // namespace

Result<ValuePtr> sortValues(Tracer& t, const ValuePtr& self, Kwargs& kwargs) {
  // list.sort(key=..., reverse=...) of items that are not all constants, or with a key
  // function: as CPython does it, the list is empty while the keys are computed (each
  // item's key once, in order; an exception there leaves the list as it was), then a stable
  // sort by `<` on the keys (reverse: reversed, sorted, reversed back, which keeps equal
  // items in order). A comparison that raises stops the trace: the list is then left in
  // the sort's own intermediate order.
  ValuePtr key;
  bool reverse = false;
  for (auto& [k, v] : kwargs) {
    if (PyUnicode_CompareWithASCIIString(k.get(), "key") == 0) {
      key = v->isNone() ? nullptr : v;
    } else if (PyUnicode_CompareWithASCIIString(k.get(), "reverse") == 0) {
      Result<bool> r = v->constant() ? truthValue(t, v) : Result<bool>(t.fail("list.sort(reverse=) not a constant"));
      if (!r) return r.stop();
      reverse = *r;
    } else {
      return t.raiseNew(PyExc_TypeError,
                        std::string("'") + PyUnicode_AsUTF8(k.get()) + "' is an invalid keyword argument for sort()");
    }
  }
  std::vector<ValuePtr>& items = *self->elements();
  std::vector<ValuePtr> saved = std::move(items);
  items.clear();
  std::vector<ValuePtr> keys;
  for (const ValuePtr& v : saved) {
    if (!key) {
      keys.push_back(v);
      continue;
    }
    Result<ValuePtr> k = call(t, key, {v}, {});
    if (!k) {
      *self->elements() = std::move(saved);
      return k;
    }
    keys.push_back(k.take());
  }
  if (!self->elements()->empty()) return t.fail("list modified during sort (ValueError)");
  std::vector<size_t> sorted;
  if (Done d = stableSortOrder(t, keys, reverse, &sorted); !d) return d.stop();
  std::vector<ValuePtr> out;
  for (size_t i : sorted) out.push_back(saved[i]);
  *self->elements() = std::move(out);
  return Value::constant(Py_None);
}

Done stableSortOrder(Tracer& t, const std::vector<ValuePtr>& keys, bool reverse, std::vector<size_t>* sorted) {
  std::vector<size_t> order(keys.size());
  for (size_t i = 0; i < order.size(); ++i) order[i] = reverse ? order.size() - 1 - i : i;
  // A stable insertion of each item after every one not greater than it: the order a
  // stable sort gives (the number and order of comparisons differ from timsort's).
  sorted->clear();
  for (size_t i : order) {
    size_t lo = 0, hi = sorted->size();
    while (lo < hi) {  // the first position whose key is greater than keys[i]
      size_t mid = (lo + hi) / 2;
      Result<bool> less = sortLess(t, keys[i], keys[(*sorted)[mid]]);
      if (!less) return t.fail("a comparison in a sort stopped: the list would be left in the sort's own order");
      if (*less) hi = mid;
      else lo = mid + 1;
    }
    sorted->insert(sorted->begin() + static_cast<std::ptrdiff_t>(lo), i);
  }
  if (reverse) std::reverse(sorted->begin(), sorted->end());
  return {};
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

namespace {
// The items of a sequence value (tuple/list value, or a constant tuple such as a
// torch.Size) as values; false when `v` is not one.
bool sequenceItems(const ValuePtr& v, std::vector<ValuePtr>* out) {
  if (v->is(Kind::Tuple) || v->is(Kind::List)) {
    *out = *v->elements();
    return true;
  }
  if (v->constant() && PyTuple_Check(v->constant())) {
    PyObject* tuple = v->constant();
    out->clear();
    for (Py_ssize_t i = 0; i < PyTuple_GET_SIZE(tuple); ++i) out->push_back(Value::constant(PyTuple_GET_ITEM(tuple, i)));
    return true;
  }
  return false;
}

// Which builtin sequence a value of sequenceItems is, for + and *: they combine only with
// their own type, and a repeat or concatenation keeps it (a deque's maxlen too).
// A torch.Size adds and repeats into a Size (with a tuple on either side).
enum class SequenceType { List, Tuple, Deque, Size, Other };

SequenceType sequenceType(const ValuePtr& v) {
  if (const List* l = v->get<List>()) return l->deque ? SequenceType::Deque : SequenceType::List;
  if (isSizeValue(v)) return SequenceType::Size;
  if (const Tuple* tp = v->get<Tuple>()) {
    // A namedtuple adds tuples as tuple does; another tuple subclass (a structseq is fine,
    // it has no + of its own) may define its own: not modelled here.
    if (!tp->namedtuple) return SequenceType::Tuple;
    PyTypeObject* type = reinterpret_cast<PyTypeObject*>(tp->namedtuple.get());
    return type->tp_as_number && type->tp_as_number->nb_add ? SequenceType::Other : SequenceType::Tuple;
  }
  if (PyObject* c = v->constant(); c && PyTuple_Check(c)) {
    // A constant tuple subclass with its own + or * (torch.Size: a Size) is not a tuple here.
    PyTypeObject* type = Py_TYPE(c);
    if (type != &PyTuple_Type && type->tp_as_number && (type->tp_as_number->nb_add || type->tp_as_number->nb_multiply))
      return SequenceType::Other;
    return SequenceType::Tuple;
  }
  return SequenceType::Other;
}

const char* sequenceTypeName(SequenceType type) {
  return type == SequenceType::List ? "list" : type == SequenceType::Deque ? "deque" : "tuple";
}

// A bounded deque keeps the last maxlen of `items` (nothing to do for a list or an
// unbounded deque).
void keepLastMaxlen(const List& l, std::vector<ValuePtr>* items) {
  if (!l.deque || !l.maxlen) return;
  const long maxlen = PyLong_AsLong(l.maxlen.get());
  if (maxlen >= 0 && static_cast<long>(items->size()) > maxlen) items->erase(items->begin(), items->end() - maxlen);
}

// A new deque of `like`'s type and maxlen holding `items` (the last maxlen of them): what
// deque + deque and deque * n make.
ValuePtr newDequeLike(const List& like, std::vector<ValuePtr> items) {
  keepLastMaxlen(like, &items);
  return Value::of(List{std::move(items), like.deque.copy(), like.maxlen.copy()});
}


}  // namespace

// A torch.Size value of `items` when all are ints (constant or symbolic), else null.
ValuePtr newSize(Tracer& t, std::vector<ValuePtr> items) {
  for (const ValuePtr& item : items)
    if (!isIntValue(t, item)) return nullptr;
  return Value::of(Tuple{std::move(items), Ref::borrow(lookup(Obj::torch_Size))});
}

// A torch.Size value: a symbolic x.shape (a Tuple of that class) or a constant Size.
bool isSizeValue(const ValuePtr& v) {
  PyObject* size_type = lookup(Obj::torch_Size);
  if (!size_type) return PyErr_Clear(), false;
  if (const Tuple* tp = v->get<Tuple>()) return tp->namedtuple.get() == size_type;
  PyObject* c = v->constant();
  return c && Py_TYPE(c) == reinterpret_cast<PyTypeObject*>(size_type);
}

bool isNamedTupleValue(const ValuePtr& v) {
  const Tuple* tup = v->get<Tuple>();
  return tup && tup->namedtuple && PyType_HasFeature(reinterpret_cast<PyTypeObject*>(tup->namedtuple.get()), Py_TPFLAGS_HEAPTYPE);
}

Result<ValuePtr> namedTupleOperator(Tracer& t, const BinaryOperands& o) {
  if (!isNamedTupleValue(o.a) && !isNamedTupleValue(o.b)) return notHandled();
  // A namedtuple class's own Python operator (a NamedTuple subclass's __add__) before
  // tuple's: a.__op__(b), then b.__rop__(a).
  std::string name = o.fn_name;
  if (name.back() == '_') name.pop_back();
  std::string base = o.inplace() ? name.substr(1) : name;
  for (int side = 0; side < 2; ++side) {
    Ref dunder = internedName(side == 0 ? "__" + base + "__" : "__r" + base + "__");
    if (!dunder) return t.failFromPython("a special method's name");
    Result<ValuePtr> r = namedTupleDunder(t, side == 0 ? o.a : o.b, dunder.get(), {side == 0 ? o.b : o.a});
    if (!r.notHandled() && (!r || (*r)->constant() != Py_NotImplemented)) return r;
  }
  return notHandled();
}

Result<ValuePtr> listInplaceOperator(Tracer& t, const BinaryOperands& o) {
  // list += iterable and list *= n change the list itself (list.__iadd__/__imul__, also
  // a deque's): every alias of it sees the new items, and the result is the same list.
  const ValuePtr& a = o.a;
  const ValuePtr& b = o.b;
  if (!a->is(Kind::List) || (o.op != BinaryOp::InplaceAdd && o.op != BinaryOp::InplaceMultiply)) return notHandled();
  std::vector<ValuePtr> more;
  Py_ssize_t times = 0;
  if (o.op == BinaryOp::InplaceAdd) {
    const Iterator* lazy_it = b->get<Iterator>();
    if (lazy_it && lazy_it->lazy()) {
      // An iterator made item by item (a lazy map reading the list): appended one at a
      // time, as list.extend does, each item seeing the ones before.
      if (a->as<List>().deque) return t.fail("deque += an iterator made item by item is not supported yet");
      if (Done d = t.effects().noteContainerMutation(a); !d) return d.stop();
      Done d = forEachItem(t, b, [&](ValuePtr m) -> Done {
        a->elements()->push_back(std::move(m));
        return {};
      });
      if (!d) return d.stop();
      return a;
    }
    if (Done d = iterate(t, b, &more); !d) return d.stop();
  } else {
    PyObject* n = b->constant();
    if (!n || !PyIndex_Check(n)) return t.fail("list *= needs an int known at trace time");
    times = PyNumber_AsSsize_t(n, PyExc_OverflowError);
    if (times == -1 && PyErr_Occurred()) return t.raisePython();
  }
  if (Done d = t.effects().noteContainerMutation(a); !d) return d.stop();
  std::vector<ValuePtr>& items = *a->elements();
  {
    // What a deque counts as a change: items added, a clear (*= 0) of a non-empty one, a
    // repeat that adds (n >= 2, fewer when a maxlen bounds it to one copy).
    List& q = a->as<List>();
    const long bound = q.maxlen ? PyLong_AsLong(q.maxlen.get()) : -1;
    const Py_ssize_t size = static_cast<Py_ssize_t>(items.size());
    Py_ssize_t copies = times;
    if (o.op != BinaryOp::InplaceAdd && bound >= 0 && size > 0 && copies * size > bound) copies = (bound + size - 1) / size;
    if (o.op == BinaryOp::InplaceAdd ? !more.empty() : size > 0 && copies != 1) dequeChanged(q);
  }
  if (o.op == BinaryOp::InplaceAdd) {
    items.insert(items.end(), more.begin(), more.end());
  } else {
    const std::vector<ValuePtr> once = items;
    items.clear();
    for (Py_ssize_t i = 0; i < times; ++i) items.insert(items.end(), once.begin(), once.end());
  }
  keepLastMaxlen(a->as<List>(), &items);
  return a;
}

Result<ValuePtr> sequenceConcatOperator(Tracer& t, const BinaryOperands& o) {
  const ValuePtr& a = o.a;
  const ValuePtr& b = o.b;
  std::vector<ValuePtr> left, right;
  if ((o.op != BinaryOp::Add && o.op != BinaryOp::InplaceAdd) || !sequenceItems(a, &left) || !sequenceItems(b, &right))
    return notHandled();
  // list + list, tuple + tuple (a namedtuple's too: a plain tuple), deque + deque; any
  // other pair raises as eagerly (list + tuple, list + deque: once a list).
  const SequenceType ta = sequenceType(a), tb = sequenceType(b);
  if (ta == SequenceType::Other || tb == SequenceType::Other)
    return t.fail(std::string("operator ") + o.fn_name + " on " + describe(a) + " and " + describe(b) +
                  " is not supported yet");
  const bool tuples = (ta == SequenceType::Tuple || ta == SequenceType::Size) &&
                      (tb == SequenceType::Tuple || tb == SequenceType::Size);
  if (tuples && (ta == SequenceType::Size || tb == SequenceType::Size)) {
    // torch.Size's + takes a tuple on either side and makes a Size.
    left.insert(left.end(), right.begin(), right.end());
    if (ValuePtr size = newSize(t, std::move(left))) return size;
    return t.fail("a torch.Size concatenated with a tuple of other than ints is not supported yet");
  }
  // The name eager's TypeError shows (a deque "collections.deque", a namedtuple its class's).
  PyObject* type_b = typeOf(t, b);
  if ((ta == SequenceType::Size || ta != tb) && !type_b) return t.fail("the type of a sequence");
  const std::string name_b = type_b ? reinterpret_cast<PyTypeObject*>(type_b)->tp_name : "";
  if (ta == SequenceType::Size)  // torch.Size's own message, for anything but a tuple
    return t.raiseNew(PyExc_TypeError, "can only concatenate tuple (not " + name_b + ") to torch.Size");
  if (ta != tb)
    return t.raiseNew(PyExc_TypeError, std::string("can only concatenate ") + sequenceTypeName(ta) + " (not \"" +
                                           name_b + "\") to " + sequenceTypeName(ta));
  left.insert(left.end(), right.begin(), right.end());
  if (ta == SequenceType::Deque) return newDequeLike(a->as<List>(), std::move(left));  // a copy of a, extended
  return Value::sequence(ta == SequenceType::List ? Kind::List : Kind::Tuple, std::move(left));
}

Result<ValuePtr> sequenceRepeatOperator(Tracer& t, const BinaryOperands& o) {
  // seq * n and n * seq: the sequence's own type (a deque's maxlen kept).
  const ValuePtr& a = o.a;
  const ValuePtr& b = o.b;
  std::vector<ValuePtr> left;
  const bool times_right = (o.op == BinaryOp::Multiply || o.op == BinaryOp::InplaceMultiply) &&
                           b->is(Kind::Constant) && PyLong_CheckExact(b->constant()) && !a->is(Kind::Constant) &&
                           sequenceItems(a, &left);
  const bool times_left = !times_right && o.op == BinaryOp::Multiply && a->is(Kind::Constant) &&
                          PyLong_CheckExact(a->constant()) && !b->is(Kind::Constant) && sequenceItems(b, &left);
  if (!times_right && !times_left) return notHandled();
  const ValuePtr& seq = times_right ? a : b;
  const SequenceType type = sequenceType(seq);
  if (type == SequenceType::Other)
    return t.fail(std::string("operator ") + o.fn_name + " on " + describe(a) + " and " + describe(b) +
                  " is not supported yet");
  long n = PyLong_AsLong((times_right ? b : a)->constant());
  if (n == -1 && PyErr_Occurred()) return t.raisePython();
  std::vector<ValuePtr> out;
  for (long i = 0; i < n; ++i) out.insert(out.end(), left.begin(), left.end());
  if (type == SequenceType::Deque) return newDequeLike(seq->as<List>(), std::move(out));
  if (type == SequenceType::Size) {
    if (ValuePtr size = newSize(t, std::move(out))) return size;
    return t.fail("a torch.Size of other than ints");
  }
  return Value::sequence(type == SequenceType::List ? Kind::List : Kind::Tuple, std::move(out));
}

// The plan of a tuple or namedtuple made in the trace (a namedtuple with attributes made by tuple.__new__, then given its __dict__) (OutputPlanner::plan).
Done rebuildTuple(OutputPlanner& p, const ValuePtr& v, runtime::OutputPlan* out) {
  namespace P = runtime::plan;
  const Tuple& t = v->as<Tuple>();
  std::vector<runtime::OutputPlan> items;
  if (Done d = p.planAll(t.items, &items); !d) return d;
  if (t.namedtuple && t.attrs) {  // made by tuple.__new__ from its items, then given its __dict__
    auto attrs = std::make_unique<runtime::OutputPlan>();
    if (Done d = p.plan(t.attrs, attrs.get()); !d) return d;
    out->step = P::NewObject{t.namedtuple.copy(), std::move(attrs),
                             Ref::borrow(reinterpret_cast<PyObject*>(&PyTuple_Type)),
                             std::make_unique<runtime::OutputPlan>(P::Tuple{std::move(items)})};
  } else if (t.namedtuple)
    out->step = P::NamedTuple{t.namedtuple.copy(), std::move(items)};
  else
    out->step = P::Tuple{std::move(items)};
  return {};
}

// The plan of a list or deque made in the trace (OutputPlanner::plan).
Done rebuildList(OutputPlanner& p, const ValuePtr& v, runtime::OutputPlan* out) {
  namespace P = runtime::plan;
  const List& l = v->as<List>();
  std::vector<runtime::OutputPlan> items;
  if (Done d = p.planAll(l.items, &items); !d) return d;
  if (l.deque)
    out->step = P::Deque{l.deque.copy(), l.maxlen.copy(), std::move(items)};
  else
    out->step = P::List{std::move(items)};
  return {};
}

// An attribute of a tuple value: a namedtuple's fields by position, its __dict__, its class's own methods and properties, else tuple's methods.
Result<ValuePtr> tupleAttr(Tracer& t, const ValuePtr& obj, PyObject* name) {
  const char* n = PyUnicode_AsUTF8(name);
  const Tuple& tuple = obj->as<Tuple>();
  if (tuple.namedtuple) {  // a namedtuple (or a structseq: its __match_args__): fields by position
    Ref fields = Ref::steal(PyObject_GetAttrString(tuple.namedtuple.get(), "_fields"));
    if (!fields) {
      PyErr_Clear();
      fields = Ref::steal(PyObject_GetAttrString(tuple.namedtuple.get(), "__match_args__"));
    }
    // A C tuple type without fields (torch.Size): none; its methods are the class's, below.
    if (!fields && !PyType_HasFeature(reinterpret_cast<PyTypeObject*>(tuple.namedtuple.get()), Py_TPFLAGS_HEAPTYPE)) {
      PyErr_Clear();
      fields = Ref::steal(PyTuple_New(0));
    }
    if (!fields || !PyTuple_Check(fields.get())) return t.failFromPython("namedtuple fields");
    if (PyUnicode_CompareWithASCIIString(name, "_fields") == 0) return Value::constant(fields.get());
    for (Py_ssize_t i = 0; i < PyTuple_GET_SIZE(fields.get()); ++i)
      if (PyUnicode_Compare(PyTuple_GET_ITEM(fields.get(), i), name) == 0) return tuple.items[static_cast<size_t>(i)];
    if (tuple.attrs) {  // its __dict__ (attributes set in the trace) before its class's
      const Dict& attrs = tuple.attrs->as<Dict>();
      int k = attrs.findKey(name);
      if (k == -2) return t.failFromPython("attribute lookup");
      if (k >= 0) return attrs.values[static_cast<size_t>(k)];
    }
    // The class's own methods, static/class methods and properties (namedtuple's
    // _replace, _asdict, ... and tuple's methods stay the container's).
    if (n[0] != '_' && PyType_HasFeature(reinterpret_cast<PyTypeObject*>(tuple.namedtuple.get()), Py_TPFLAGS_HEAPTYPE))
      if (Result<ValuePtr> r = namedTupleClassAttr(t, obj, tuple.namedtuple.get(), name); !r.notHandled()) return r;
  }
  PyTypeObject* type = reinterpret_cast<PyTypeObject*>(tuple.namedtuple ? tuple.namedtuple.get() : reinterpret_cast<PyObject*>(&PyTuple_Type));
  if (!_PyType_Lookup(type, name)) {  // not its class's: its __dict__'s, or absent
    if (obj->reg >= 0 && type->tp_dictoffset != 0)
      return t.fail(std::string("attribute '") + n + "' of the __dict__ of a " + type->tp_name +
                    " from the program is not supported yet");
    return t.raiseNew(PyExc_AttributeError, std::string("'") + type->tp_name + "' object has no attribute '" + n + "'");
  }
  return Value::namedMethod(obj, name);
}

// An attribute of a list or deque value: its type's methods (called later), AttributeError for another type's.
Result<ValuePtr> listAttr(Tracer& t, const ValuePtr& obj, PyObject* name) {
  const char* n = PyUnicode_AsUTF8(name);
  const List& l = obj->as<List>();
  PyTypeObject* type = reinterpret_cast<PyTypeObject*>(l.deque ? l.deque.get() : reinterpret_cast<PyObject*>(&PyList_Type));
  if (!_PyType_Lookup(type, name))  // appendleft of a list, sort of a deque
    return t.raiseNew(PyExc_AttributeError, std::string("'") + type->tp_name + "' object has no attribute '" + n + "'");
  return Value::namedMethod(obj, name);  // list.append, ...: called later
}

}  // namespace cdynamo::trace
