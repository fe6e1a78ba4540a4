// Sets and frozensets made in the trace: their items, their methods, their operators and
// the real set (the shadow) that keeps eager execution's table for walks and pop().
#include <algorithm>
#include <cstring>
#include <string>
#include <unordered_map>

#include "support/check.h"
#include "support/lookup.h"
#include "support/set_table.h"
#include "support/torch_types.h"
#include "trace/engine/graph_calls.h"
#include "trace/engine/outputs.h"
#include "trace/engine/scalars.h"
#include "trace/kinds/iterator.h"
#include "trace/kinds/set.h"
#include "trace/protocol/attributes.h"
#include "trace/protocol/binary_rules.h"
#include "trace/protocol/constants.h"
#include "trace/protocol/operators.h"
#include "trace/tracer.h"

namespace cdynamo::trace {

using bytecode::BinaryOp;
using bytecode::Op;

namespace {
// ---- sets made in the trace --------------------------------------------------------------
// A set holds constants, modules and tensors (hashed and compared by identity: two graph
// inputs are one object exactly when they alias at trace time, which a guard then pins),
// and frozensets of those (equal when their members are). Lookups answer as Python's do.

// The items of a set-like value (a Set, or a constant set/frozenset as constants); false
// when `v` is not one.
bool setLikeItems(const ValuePtr& v, std::vector<ValuePtr>* out) {
  if (const ValuePtr* part = setPartOf(v)) {
    *out = (*part)->as<Set>().items;
    return true;
  }
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
  if (const ValuePtr* part = setPartOf(v)) return (*part)->as<Set>().frozen;
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
  // A set subclass with its own __eq__ or __hash__ is hashed and compared by them, which the
  // lookup by members does not run.
  auto ownEquality = [](const ValuePtr& x) {
    const NewObject* o = x->get<NewObject>();
    if (!o || !o->base || !o->base->is(Kind::Set)) return false;
    PyTypeObject* base = o->base->as<Set>().frozen ? &PyFrozenSet_Type : &PySet_Type;
    PyTypeObject* cls = reinterpret_cast<PyTypeObject*>(o->cls.get());
    for (Str name : {Str::dunder_eq, Str::dunder_hash})
      if (_PyType_Lookup(cls, interned(name)) != _PyType_Lookup(base, interned(name))) return true;
    return false;
  };
  if (ownEquality(v)) return t.fail("an instance of a set subclass with its own __eq__ or __hash__ as a set item");
  if (setPartOf(v) || (v->constant() && PyAnySet_Check(v->constant()))) {
    setLikeItems(v, &members);
    for (size_t i = 0; i < items.size(); ++i) {
      std::vector<ValuePtr> other;
      if (ownEquality(items[i])) return t.fail("a set holding an instance of a set subclass with its own __eq__ or __hash__");
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
  // Tuples made in the trace (holding tensors, objects, or constants not folded into one
  // constant tuple) and constant tuples: hashed and compared by their items, each as a set
  // item is (a tensor by identity).
  auto tupleItems = [](const ValuePtr& x, std::vector<ValuePtr>* out) {
    if (const Tuple* tup = x->get<Tuple>()) {
      *out = tup->items;
      return true;
    }
    PyObject* c = x->constant();
    if (!c || !PyTuple_CheckExact(c)) return false;
    out->clear();
    for (Py_ssize_t k = 0; k < PyTuple_GET_SIZE(c); ++k) out->push_back(Value::constant(PyTuple_GET_ITEM(c, k)));
    return true;
  };
  bool tuple_items = false;
  for (const ValuePtr& item : items) tuple_items = tuple_items || item->is(Kind::Tuple);
  std::vector<ValuePtr> mine;
  if ((v->is(Kind::Tuple) || tuple_items) && tupleItems(v, &mine)) {
    for (const ValuePtr& x : {v})
      if (const Tuple* tup = x->get<Tuple>(); tup && tup->namedtuple)
        for (Str name : {Str::dunder_eq, Str::dunder_hash})
          if (_PyType_Lookup(reinterpret_cast<PyTypeObject*>(tup->namedtuple.get()), interned(name)) !=
              _PyType_Lookup(&PyTuple_Type, interned(name)))
            return t.fail("a namedtuple with its own __eq__ or __hash__ as a set item is not supported yet");
    for (size_t i = 0; i < items.size(); ++i) {
      if (items[i] == v) return static_cast<long>(i);
      std::vector<ValuePtr> other;
      if (!tupleItems(items[i], &other) || other.size() != mine.size()) continue;
      if (const Tuple* tup = items[i]->get<Tuple>(); tup && tup->namedtuple)
        for (Str name : {Str::dunder_eq, Str::dunder_hash})
          if (_PyType_Lookup(reinterpret_cast<PyTypeObject*>(tup->namedtuple.get()), interned(name)) !=
              _PyType_Lookup(&PyTuple_Type, interned(name)))
            return t.fail("a set holding a namedtuple with its own __eq__ or __hash__");
      bool same = true;
      for (size_t k = 0; same && k < other.size(); ++k) {
        Result<long> at = setIndex(t, {other[k]}, mine[k]);
        if (!at) return at.stop();
        same = *at == 0;
      }
      if (same) return static_cast<long>(i);
    }
    return -1;
  }
  if (const NewObject* no = v->get<NewObject>(); no && !no->base) {
    // An instance made in the trace of a class keeping object's __eq__ and __hash__: hashed
    // by identity, equal only to itself (walked in the order it was added, as a tensor is:
    // its hash is its address).
    PyTypeObject* cls = reinterpret_cast<PyTypeObject*>(no->cls.get());
    for (Str name : {Str::dunder_eq, Str::dunder_hash})
      if (_PyType_Lookup(cls, interned(name)) != _PyType_Lookup(&PyBaseObject_Type, interned(name)))
        return t.fail(describe(v) + " (a class with its own __eq__ or __hash__) as a set item is not supported yet");
    for (size_t i = 0; i < items.size(); ++i)
      if (items[i] == v) return static_cast<long>(i);
    return -1;
  }
  if (v->is(Kind::List) || v->is(Kind::Dict))
    return t.raiseNew(PyExc_TypeError, std::string("unhashable type: '") + (v->is(Kind::List) ? "list" : "dict") + "'");
  // A class or function compares and hashes in C (realComparable): as its real object.
  PyObject* o = v->is(Kind::Module) || (v->is(Kind::Callable) && realComparable(v, true)) ? v->real() : v->constant();
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
  if (const ValuePtr* part = setPartOf(v); part && !(*part)->as<Set>().frozen) {
    // An instance of a set subclass: unhashable unless its class defines __hash__ (not modelled).
    PyTypeObject* cls = reinterpret_cast<PyTypeObject*>(v->as<NewObject>().cls.get());
    PyObject* hash = _PyType_Lookup(cls, interned(Str::dunder_hash));
    if (hash && hash != Py_None) return t.fail("an instance of a set subclass with its own __hash__ as a set item");
    return t.raiseNew(PyExc_TypeError,
                      std::string("unhashable type: '") + cls->tp_name + "'");
  }
  if (v->is(Kind::List) || v->is(Kind::Dict))
    return t.raiseNew(PyExc_TypeError, std::string("unhashable type: '") + (v->is(Kind::List) ? "list" : "dict") + "'");
  if (const Tuple* tup = v->get<Tuple>())  // a tuple hashes its items
    for (const ValuePtr& item : tup->items)
      if (Done d = checkHashable(t, item); !d) return d;
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

}  // namespace
namespace {

// The methods that read a set (membership, copies, union and the other combinations, the
// predicates, the operators' special methods by name); NotHandled for the others.
Result<ValuePtr> setReadingMethod(Tracer& t, const ValuePtr& self, const char* n, std::vector<ValuePtr>& args) {
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
  return notHandled();
}

// The methods that change a set (add, discard, remove, pop, clear, update and the other
// in-place combinations, __init__), replayed on its shadow; NotHandled for the others.
Result<ValuePtr> setChangingMethod(Tracer& t, const ValuePtr& self, const char* n, std::vector<ValuePtr>& args) {
  auto is = [n](const char* m) { return strcmp(n, m) == 0; };
  Set& set = self->as<Set>();
  std::vector<ValuePtr>& items = set.items;
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

Result<ValuePtr> setMethod(Tracer& t, const ValuePtr& self, const char* n, std::vector<ValuePtr>& args) {
  if (Result<ValuePtr> r = setReadingMethod(t, self, n, args); !r.notHandled()) return r;
  return setChangingMethod(t, self, n, args);
}

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

const ValuePtr* setPartOf(const ValuePtr& v) {
  if (v->is(Kind::Set)) return &v;
  const NewObject* o = v->get<NewObject>();
  return o && o->base && o->base->is(Kind::Set) ? &o->base : nullptr;
}

Result<ValuePtr> makeSetPart(Tracer& t, const ValuePtr& iterable, bool frozen) {
  std::vector<ValuePtr> items;
  if (iterable)
    if (Done d = setItemsOf(t, iterable, &items); !d) return d.stop();
  return frozen ? Value::frozenSet(std::move(items)) : Value::set(std::move(items));
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

Result<ValuePtr> setInplaceOperator(Tracer& t, const BinaryOperands& o) {
  // set |=, &=, -=, ^= change the set itself (aliases see it), replayed on its shadow so that
  // its table keeps the history a later walk or pop() reads (Set::shadow). Computing them on
  // fresh real copies, as realSetOrConstantOperator does, lost both: the walk order and pop()
  // differed from eager's with string hashes (PYTHONHASHSEED=3), and an alias kept the old set.
  if (!o.a->is(Kind::Set) || o.a->as<Set>().frozen ||
      !(o.op == BinaryOp::InplaceOr || o.op == BinaryOp::InplaceAnd || o.op == BinaryOp::InplaceSubtract ||
        o.op == BinaryOp::InplaceXor))
    return notHandled();
  return setBinaryOp(t, o.op, o.a, o.b);
}

Result<ValuePtr> realSetOrConstantOperator(Tracer& t, const BinaryOperands& o) {
  // Sets, and a constant with a container of constants ("%s=%d" % (name, n)): compute.
  // (+ and * with a list, tuple or deque value are the sequences' own rows: a constant
  // tuple + a list raises in the trace as eagerly, 3 * deque is a deque value.)
  const ValuePtr& a = o.a;
  const ValuePtr& b = o.b;
  const bool sequence_op = (o.op == BinaryOp::Add || o.op == BinaryOp::Multiply) &&
                           (a->is(Kind::List) || a->is(Kind::Tuple) || b->is(Kind::List) || b->is(Kind::Tuple));
  if (!(a->is(Kind::Set) || b->is(Kind::Set) || a->is(Kind::Constant)) || o.op == BinaryOp::InplaceAdd ||
      o.op == BinaryOp::InplaceMultiply || sequence_op)
    return notHandled();
  // A set made in the trace is read as its shadow: eager's a ^ b walks a's own table,
  // whose order its history (removals, resizes) decides; a fresh copy of its items walks
  // in another order (s ^ {3, 9} after discard/add gave [1, 3] for [3, 1]).
  auto operand = [&](const ValuePtr& v) {
    PyObject* shadow = realSetOperand(v);
    return shadow ? Ref::borrow(shadow) : toPython(t, v);
  };
  Ref pa = operand(a), pb = pa ? operand(b) : Ref();
  if (!pa || !pb) return notHandled();
  Ref r = Ref::steal(PyObject_CallFunctionObjArgs(o.fn, pa.get(), pb.get(), nullptr));
  // Real sets and constants, which run no Python code: a TypeError (set - 1) is eager's own.
  if (!r && PyErr_ExceptionMatches(PyExc_TypeError)) return t.raisePython();
  if (!r) return t.failFromPython(std::string("operator.") + o.fn_name);
  // The new set's own table is its history from here on (a later walk or pop() reads it);
  // its items are the operands' values where it holds their objects.
  if (ValuePtr v = setFromReal(r.get(), {a, b})) return v;
  Result<ValuePtr> out = fromPython(t, r.get());
  if (out && PySet_CheckExact(r.get()))
    if (Set* s = (*out)->get<Set>(); s && !s->frozen && (*out)->reg < 0) s->shadow = std::move(r);
  return out;
}

Result<ValuePtr> setMembersOperator(Tracer& t, const BinaryOperands& o) {
  // Sets holding values made in the trace (tensors): by their members.
  if (!o.a->is(Kind::Set) && !o.b->is(Kind::Set)) return notHandled();
  return setBinaryOp(t, o.op, o.a, o.b);
}

// The shadow of a set changed in the trace (Set::shadow) when it holds exactly the set's
// items, all constants: a copy of its table is then the set as eager has it. Null otherwise
// (never changed: a set built from the items in order is the same; no shadow: the order is
// rebuilt from the items).
PyObject* shadowOfConstants(const Set& s) {
  if (s.frozen || s.shadow_lost || !s.shadow || !PySet_CheckExact(s.shadow.get())) return nullptr;
  if (static_cast<size_t>(PySet_GET_SIZE(s.shadow.get())) != s.items.size()) return nullptr;
  for (const ValuePtr& item : s.items) {
    if (!item->is(Kind::Constant)) return nullptr;
    int in = PySet_Contains(s.shadow.get(), item->constant());
    if (in != 1) return in < 0 ? (PyErr_Clear(), nullptr) : nullptr;
  }
  return s.shadow.get();
}


// The plan of a set made in the trace: a copy of its shadow's table when it was changed, else built from its items (OutputPlanner::plan).
Done rebuildSet(OutputPlanner& p, const ValuePtr& v, runtime::OutputPlan* out) {
  namespace P = runtime::plan;
  if (PyObject* shadow = shadowOfConstants(v->as<Set>())) {
    // Changed in the trace: its shadow has eager's table (dummies, pop's finger), which
    // a set built afresh from the items would not (support/set_table.h). Each run hands
    // out its own copy of a private snapshot of it.
    Ref snapshot = copySetTable(shadow);
    PyObject* copier = snapshot ? setTableCopier() : nullptr;
    if (!copier) return p.tracer().failFromPython("copying a set's table");
    std::vector<runtime::OutputPlan> args;
    args.push_back(runtime::OutputPlan::constant(snapshot.get()));
    out->step = P::Call{Ref::borrow(copier), std::move(args)};
    return {};
  }
  std::vector<runtime::OutputPlan> items;
  if (Done d = p.planAll(v->as<Set>().items, &items); !d) return d;
  out->step = P::Set{std::move(items), v->as<Set>().frozen};
  return {};
}

// An attribute of a set value: its methods (called later), AttributeError for a frozenset's missing ones.
Result<ValuePtr> setValueAttr(Tracer& t, const ValuePtr& obj, PyObject* name) {
  const char* n = PyUnicode_AsUTF8(name);
  if (obj->as<Set>().frozen && !PyObject_HasAttr(reinterpret_cast<PyObject*>(&PyFrozenSet_Type), name))
    return t.raiseNew(PyExc_AttributeError, std::string("'frozenset' object has no attribute '") + n + "'");
  return Value::namedMethod(obj, name);  // set.add, ...: called later
}

}  // namespace cdynamo::trace
