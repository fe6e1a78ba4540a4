// Comparison, equality, identity and membership of values: COMPARE_OP, IS_OP, CONTAINS_OP,
// and the equality a container operation needs at trace time.
#include "support/check.h"
#include "support/lookup.h"
#include "support/torch_types.h"
#include "trace/engine/graph_calls.h"
#include "trace/engine/scalars.h"
#include "trace/kinds/dict.h"
#include "trace/kinds/iterator.h"
#include "trace/kinds/module.h"
#include "trace/kinds/ndarray.h"
#include "trace/kinds/object.h"
#include "trace/kinds/sequence.h"
#include "trace/kinds/set.h"
#include "trace/kinds/tensor_subclass.h"
#include "trace/protocol/constants.h"
#include "trace/protocol/container_methods.h"
#include "trace/protocol/operators.h"
#include "trace/tracer.h"
#include <algorithm>
#include <cstring>
#include <string>
#include <unordered_map>


namespace cdynamo::trace {

using graph::NodeOp;

namespace {
// Whether a value is a mutable object made in the trace (distinct from every other one).
bool madeMutable(const ValuePtr& v) {
  switch (v->kind()) {
    case Kind::NewObject:
    case Kind::List:
    case Kind::Dict:
    case Kind::Set:
    case Kind::Namespace:
      return v->reg < 0;
    case Kind::Null:
    case Kind::Tensor:
    case Kind::Constant:
    case Kind::Tuple:
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
    case Kind::Super:
    case Kind::Partial:
    case Kind::Context:
    case Kind::DictView:
    case Kind::NdArray:
    case Kind::SubclassTensor:
      return false;
  }
  return false;
}
}  // namespace

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

}  // namespace
Result<ValuePtr> compareOp(Tracer& t, int op, const ValuePtr& a, const ValuePtr& b) {
  if (op < 0 || op > 5) return t.fail("unknown COMPARE_OP argument");
  PyObject* fn = lookup(kCompareOpFns[op]);
  if (!fn) return t.failFromPython("operator lookup");
  if (isNamedTupleValue(a) || isNamedTupleValue(b)) {
    // A namedtuple class's own Python comparison before tuple's (then the reflected one).
    static const char* const kDunders[] = {"__lt__", "__le__", "__eq__", "__ne__", "__gt__", "__ge__"};
    static const int kSwapped[] = {Py_GT, Py_GE, Py_EQ, Py_NE, Py_LT, Py_LE};
    for (int side = 0; side < 2; ++side) {
      Ref dunder = internedName(kDunders[side == 0 ? op : kSwapped[op]]);
      if (!dunder) return t.failFromPython("a special method's name");
      Result<ValuePtr> r = namedTupleDunder(t, side == 0 ? a : b, dunder.get(), {side == 0 ? b : a});
      if (!r.notHandled() && (!r || (*r)->constant() != Py_NotImplemented)) return r;
    }
  }
  if (isUserObject(a) || isUserObject(b)) {
    // Python's rich comparison: a.__op__(b), then b.__reflected__(a), skipping
    // NotImplemented; != falls back to inverting ==; == and != finally to identity.
    static const char* const kReflected[] = {"gt", "ge", "eq", "ne", "lt", "le"};
    auto isNotImplemented = [](const ValuePtr& v) { return v->constant() == Py_NotImplemented; };
    auto tryDunder = [&](const ValuePtr& self, const char* cmp, const ValuePtr& other) -> Result<ValuePtr> {
      Ref method = internedName(std::string("__") + cmp + "__");
      if (!method) return t.failFromPython("a special method's name");
      return callDunder(t, self, method.get(), {other});
    };
    // a.__op__(b), then b.__reflected__(a); NotHandled when neither answers.
    auto tryPair = [&](int cmp) -> Result<ValuePtr> {
      Result<ValuePtr> r = tryDunder(a, kCompareOps[cmp], b);
      if (!r.notHandled() && (!r || !isNotImplemented(*r))) return r;
      r = tryDunder(b, kReflected[cmp], a);
      if (!r.notHandled() && (!r || !isNotImplemented(*r))) return r;
      return notHandled();
    };
    Result<ValuePtr> r = tryPair(op);
    if (!r.notHandled()) return r;
    if (op == Py_NE) {
      r = tryPair(Py_EQ);
      if (!r.notHandled()) {
        if (!r) return r;
        Result<bool> truth = truthValue(t, *r);
        if (!truth) return truth.stop();
        return Value::constant(*truth ? Py_False : Py_True);
      }
    }
    if (op == Py_EQ || op == Py_NE) {  // identity comparison, as object.__eq__ does
      // ... only when that is what the classes inherit: a C __eq__ (a dict view, a tuple
      // subclass) compares by value, which is not modelled here.
      static PyObject* eq_name = PyUnicode_InternFromString("__eq__");
      PyObject* object_eq = eq_name ? _PyType_Lookup(&PyBaseObject_Type, eq_name) : nullptr;
      for (const ValuePtr& v : {a, b}) {
        PyObject* cls = isUserObject(v) ? typeOf(t, v) : nullptr;
        PyObject* eq = cls && PyType_Check(cls) ? _PyType_Lookup(reinterpret_cast<PyTypeObject*>(cls), eq_name) : nullptr;
        // (A container subclass made in the trace answered through its base's C method.)
        if (eq && eq != object_eq && !PyFunction_Check(eq) && !basePart(v))
          return t.fail(std::string("== on a ") + reinterpret_cast<PyTypeObject*>(cls)->tp_name +
                        " object, whose class compares in C (not modelled)");
      }
      bool same = a == b || (a->real() && a->real() == b->real());
      return Value::constant((same == (op == Py_EQ)) ? Py_True : Py_False);
    }
    return t.fail("comparison of objects without the special method (TypeError)");
  }
  if (a->is(Kind::NdArray) || b->is(Kind::NdArray)) return ndarrayOperator(t, kCompareOps[op], {a, b});
  if (Result<ValuePtr> r = subclassOperator(t, kCompareOps[op], {a, b}); !r.notHandled()) return r;
  if (a->is(Kind::Tensor) || b->is(Kind::Tensor)) return recordCall(t, NodeOp::CallFunction, fn, {a, b}, {});
  if ((op == Py_EQ || op == Py_NE) && (a->is(Kind::Module) || b->is(Kind::Module))) {
    // A module class's own __ne__ / __eq__ (traced; a then b, skipping NotImplemented),
    // else object's: identity.
    if (op == Py_NE) {
      Ref ne = internedName("__ne__");
      if (!ne) return t.failFromPython("a special method's name");
      for (const ValuePtr& v : {a, b}) {
        Result<ValuePtr> r = callModuleDunder(t, v, ne.get(), {v == a ? b : a});
        if (r.notHandled()) continue;
        if (!r || (*r)->constant() != Py_NotImplemented) return r;
      }
    }
    for (const ValuePtr& v : {a, b}) {
      const ValuePtr& other = v == a ? b : a;
      Result<ValuePtr> r = callModuleDunder(t, v, interned(Str::dunder_eq), {other});
      if (r.notHandled()) continue;
      if (!r || (*r)->constant() == Py_NotImplemented) {
        if (!r) return r;
        continue;
      }
      if (op == Py_EQ) return r;
      Result<bool> truth = truthValue(t, *r);
      if (!truth) return truth.stop();
      return Value::constant(*truth ? Py_False : Py_True);
    }
    bool same = a == b || (a->real() && a->real() == b->real());
    return Value::constant((same == (op == Py_EQ)) ? Py_True : Py_False);
  }
  auto valuesView = [](const ValuePtr& v) {  // and iterators: both compare by identity
    const DictView* view = v->get<DictView>();
    return (view && view->which == DictView::Values) || v->is(Kind::Iterator);
  };
  if ((op == Py_EQ || op == Py_NE) && (valuesView(a) || valuesView(b))) {
    // dict.values() views compare by identity (they define no comparison).
    bool same = a == b;
    return Value::constant((same == (op == Py_EQ)) ? Py_True : Py_False);
  }
  Ref pa = toPython(t, a), pb = pa ? toPython(t, b) : Ref();
  if (pa && pb) {
    Ref r = Ref::steal(PyObject_RichCompare(pa.get(), pb.get(), op));
    if (!r) return t.raisePython();
    if (!isConstantObject(r.get())) return t.fail("comparison returned a non-constant");
    return Value::constant(r.get());
  }
  if (Result<ValuePtr> r = dictCompare(t, op, a, b); !r.notHandled()) return r;
  if (a->is(Kind::Set) || b->is(Kind::Set)) {  // sets holding values made in the trace: by their members
    if (Result<ValuePtr> r = setCompare(t, op, a, b); !r.notHandled()) return r;
    // A set is never equal to what is not a set (set.__eq__ answers NotImplemented, then identity).
    if (op == Py_EQ || op == Py_NE) return Value::constant(op == Py_NE ? Py_True : Py_False);
  }
  // A list, a tuple and a deque are never equal to one another (each one's == answers
  // NotImplemented for the others, then identity): deque([x]) == [x] is False.
  // Whether a value's == is list's, deque's or tuple's (a namedtuple class with an __eq__ of
  // its own is asked, not answered here).
  auto plainEq = [](const ValuePtr& v) {
    const Tuple* tup = v->get<Tuple>();
    if (!tup || !tup->namedtuple) return true;
    static PyObject* eq_name = PyUnicode_InternFromString("__eq__");
    return eq_name && _PyType_Lookup(reinterpret_cast<PyTypeObject*>(tup->namedtuple.get()), eq_name) ==
                          _PyType_Lookup(&PyTuple_Type, eq_name);
  };
  auto sequenceClass = [&plainEq](const ValuePtr& v) {
    if (const List* l = v->get<List>()) return l->deque ? 2 : 1;
    return v->is(Kind::Tuple) && plainEq(v) ? 3 : 0;
  };
  if ((op == Py_EQ || op == Py_NE) && sequenceClass(a) && sequenceClass(b) && sequenceClass(a) != sequenceClass(b))
    return Value::constant(op == Py_NE ? Py_True : Py_False);
  // Tuples and lists compared item by item as Python does (identity first, then ==, up to
  // the first difference), when every comparison it needs is known.
  if ((op == Py_EQ || op == Py_NE) && a->kind() == b->kind() && (a->is(Kind::Tuple) || a->is(Kind::List))) {
    const std::vector<ValuePtr>& x = *a->elements();
    const std::vector<ValuePtr>& y = *b->elements();
    // A list (and a deque) of another length differs at once; tuples compare their items up
    // to the shorter length first ((x, 1) == (2,) compares x == 2), then their lengths.
    bool known = plainEq(a) && plainEq(b), equal = a->is(Kind::Tuple) || x.size() == y.size();
    for (size_t i = 0; known && equal && i < x.size() && i < y.size(); ++i) {
      int eq;
      known = sameValue(x[i], y[i], &eq);
      equal = known && eq == 1;
    }
    equal = equal && x.size() == y.size();
    if (known) return Value::constant((equal == (op == Py_EQ)) ? Py_True : Py_False);
  }
  // Otherwise as tuple's and list's own comparison runs: the items up to the first pair
  // that is neither one object nor == (each == traced as the program's, an object's
  // __eq__ included), then that pair compared by `op` (its result as it is), or the
  // lengths when one sequence ran out. Version keys ((1, 2, Infinity) >= (1, 0, x)) and
  // tuples of objects take this.
  auto tupleOrder = [op](const ValuePtr& v) {  // a namedtuple class with its own __lt__ & co. is asked instead
    const Tuple* tup = v->get<Tuple>();
    if (!tup || !tup->namedtuple || op == Py_EQ || op == Py_NE) return true;
    static const char* const kNames[] = {"__lt__", "__le__", "__eq__", "__ne__", "__gt__", "__ge__"};
    Ref name = Ref::steal(PyUnicode_InternFromString(kNames[op]));
    return name && _PyType_Lookup(reinterpret_cast<PyTypeObject*>(tup->namedtuple.get()), name.get()) ==
                       _PyType_Lookup(&PyTuple_Type, name.get());
  };
  auto items = [](const ValuePtr& v, int* cls) {  // a constant tuple's items are constants
    std::vector<ValuePtr> out;
    PyObject* c = v->is(Kind::Constant) ? v->constant() : nullptr;
    if (c && PyTuple_CheckExact(c)) {
      *cls = 3;
      for (Py_ssize_t i = 0; i < PyTuple_GET_SIZE(c); ++i) out.push_back(Value::constant(PyTuple_GET_ITEM(c, i)));
    } else if (v->is(Kind::Tuple) || v->is(Kind::List)) {
      out = *v->elements();
    }
    return out;
  };
  int ka = sequenceClass(a), kb = sequenceClass(b);
  const std::vector<ValuePtr> x = items(a, &ka);
  const std::vector<ValuePtr> y = items(b, &kb);
  if (ka == kb && (ka == 1 || ka == 3) && tupleOrder(a) && tupleOrder(b)) {
    // Lists of other lengths are unequal at once, no item compared (list's own shortcut).
    if (ka == 1 && x.size() != y.size() && (op == Py_EQ || op == Py_NE))
      return Value::constant(op == Py_NE ? Py_True : Py_False);
    size_t i = 0;
    for (; i < x.size() && i < y.size(); ++i) {
      Result<bool> same = identical(t, x[i], y[i]);
      if (!same) return same.stop();
      if (*same) continue;
      Result<ValuePtr> eq = compareOp(t, Py_EQ, x[i], y[i]);
      if (!eq) return eq;
      Result<bool> truth = truthValue(t, *eq);
      if (!truth) return truth.stop();
      if (!*truth) break;
    }
    if (i < x.size() && i < y.size()) {
      if (op == Py_EQ || op == Py_NE) return Value::constant(op == Py_NE ? Py_True : Py_False);
      return compareOp(t, op, x[i], y[i]);
    }
    PyObject* lx = PyLong_FromSize_t(x.size());
    PyObject* ly = PyLong_FromSize_t(y.size());
    Ref rx = Ref::steal(lx), ry = Ref::steal(ly);
    Ref r = rx && ry ? Ref::steal(PyObject_RichCompare(lx, ly, op)) : Ref();
    if (!r) return t.failFromPython("comparing lengths");
    return Value::constant(r.get());
  }
  return t.fail(std::string("comparison of ") + describe(a) + " and " + describe(b) +
              " is not supported yet");
}

Result<bool> identical(Tracer& t, const ValuePtr& a, const ValuePtr& b) {
  if (a == b) return true;  // the same value: the same object
  if (a->is(Kind::SubclassTensor) || b->is(Kind::SubclassTensor)) return subclassIdentical(t, a, b);
  if (a->real() && b->real()) {
    // A function the program passes in is guarded by its code (Tracer::wrap): on another
    // call it may be another function of that code, which `is` tells apart. Compared with
    // another object that is not a constant, its identity is what the answer depends on.
    if (!a->constant() && !b->constant())
      for (const ValuePtr* v : {&a, &b})
        if ((*v)->reg >= 0 && PyFunction_Check((*v)->real())) t.guards().checkIdentity((*v)->reg, (*v)->real());
    return a->real() == b->real();
  }
  // An object made in the trace is new: no other value (another one made, or one read from
  // the program) is that object.
  if (madeMutable(a) || madeMutable(b)) return false;
  // Two tuples one of whose items differ are two objects (one object has the same items).
  const Tuple* ta = a->get<Tuple>();
  const Tuple* tb = b->get<Tuple>();
  if (ta && tb) {
    if (ta->items.size() != tb->items.size()) return false;
    for (size_t i = 0; i < ta->items.size(); ++i) {
      const ValuePtr& x = ta->items[i];
      const ValuePtr& y = tb->items[i];
      if (x == y) continue;
      if (x->is(Kind::Tensor) || y->is(Kind::Tensor)) continue;  // not decided by a tensor
      Result<bool> same = identical(t, x, y);
      if (same && !*same) return false;
      if (!same) return same;
    }
  }
  if (a->is(Kind::Tensor) && b->is(Kind::Tensor)) {
    if (isScalarValue(t, a) || isScalarValue(t, b))
      return t.fail("identity of a number read from a tensor is not known at trace time");
    return sameTensorObject(t, a, b);
  }
  if (a->constant() || b->constant()) return false;  // a constant is never the same object as a tensor or container
  // A tensor is never a module, class, function or user object read from the program.
  if ((a->is(Kind::Tensor) && b->real() && !isTensor(b->real())) || (b->is(Kind::Tensor) && a->real() && !isTensor(a->real())))
    return false;
  return t.fail(std::string("`is` between ") + describe(a) + " and " + describe(b));
}

Result<bool> contains(Tracer& t, const ValuePtr& container, const ValuePtr& item) {
  if (isModuleContainer(container, interned(Str::dunder_contains)) && item->is(Kind::Constant)) {  // ModuleDict: by name
    std::vector<std::pair<Ref, ValuePtr>> children;
    if (Done d = moduleContainerItems(t, container, &children); !d) return d.stop();
    bool r = false;
    for (auto& kv : children) r = r || PyObject_RichCompareBool(kv.first.get(), item->constant(), Py_EQ) == 1;
    return r;
  }
  if (isUserObject(container)) {
    Result<ValuePtr> c = callDunder(t, container, interned(Str::dunder_contains), {item});
    if (c.notHandled()) return t.fail("`in` on an object without __contains__ is not supported yet");
    if (!c) return c.stop();
    return truthValue(t, *c);
  }
  if (container->is(Kind::Constant) && (item->is(Kind::Constant) || realComparable(item, true))) {  // a frozenset of functions, a tuple of classes
    int r = PySequence_Contains(container->constant(), item->real());
    if (r < 0) return t.failFromPython("`in` on constants");
    return r != 0;
  }
  if (const DictView* view = container->get<DictView>()) {
    if (view->which == DictView::Keys) return contains(t, view->dict, item);
    std::vector<ValuePtr> items;  // values and items: Python compares them in order
    if (Done d = peekItems(t, container, &items); !d) return d.stop();
    return contains(t, Value::list(std::move(items)), item);
  }
  if (container->is(Kind::Iterator)) {
    // An iterator has no __contains__: Python takes its items up to the first that is the
    // item or equals it (identity first, then ==), leaving the rest untaken.
    for (;;) {
      ValuePtr x;
      if (Done d = nextItem(t, container, &x); !d) return d.stop();
      if (!x) return false;
      if (x == item || (x->real() && x->real() == item->real())) return true;
      Result<ValuePtr> eq = compareOp(t, Py_EQ, x, item);
      if (!eq) return eq.stop();
      Result<bool> truth = truthValue(t, *eq);
      if (!truth) return truth.stop();
      if (*truth) return true;
    }
  }
  Args a{item};
  Kwargs kw;
  bool mapping = container->is(Kind::Dict) || container->is(Kind::Set);
  if (!mapping && !container->is(Kind::List) && !container->is(Kind::Tuple))
    return t.fail(std::string("`in` on ") + describe(container) + " is not supported yet");
  Result<ValuePtr> c = callContainerMethod(t, container, interned(Str::dunder_contains), a, kw);
  if (!c) return c.stop();
  return PyObject_IsTrue((*c)->constant()) != 0;
}

}  // namespace cdynamo::trace
