// Dicts made or read in the trace: their methods, their keys (which objects can be one, by
// identity or by value) and their binary operators.
#include <algorithm>
#include <cstring>
#include <string>
#include <unordered_map>

#include "support/check.h"
#include "support/lookup.h"
#include "support/torch_types.h"
#include "trace/engine/outputs.h"
#include "trace/engine/scalars.h"
#include "trace/kinds/dict.h"
#include "trace/kinds/iterator.h"
#include "trace/kinds/object.h"
#include "trace/kinds/object_internal.h"
#include "trace/kinds/set.h"
#include "trace/protocol/attributes.h"
#include "trace/protocol/binary_rules.h"
#include "trace/protocol/calls.h"
#include "trace/protocol/container_methods.h"
#include "trace/protocol/operators.h"
#include "trace/tracer.h"
#include "support/type_dict.h"

namespace cdynamo::trace {

using bytecode::BinaryOp;
using bytecode::Op;

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
    const Dict* from = other->get<Dict>();
    ValuePtr part = from ? nullptr : basePart(other);
    // A dict subclass instance that keeps dict's own iteration is merged from its storage,
    // as CPython's dict_merge does (its keys() and __getitem__ are not called); one that
    // overrides __iter__ (OrderedDict's subclasses too) is read as a mapping, below.
    if (part && part->get<Dict>() && reinterpret_cast<PyTypeObject*>(classOf(other))->tp_iter == PyDict_Type.tp_iter)
      from = part->get<Dict>();
    if (from) {
      for (size_t i = 0; i < from->keys.size(); ++i) {
        Result<ValuePtr> k = keyValueOf(t, from->keys[i].get());
        if (!k) return k;
        if (Done d = storeSubscript(t, self, *k, from->values[i]); !d) return d.stop();
      }
      continue;
    }
    if (isUserObject(other) && (!part || part->get<Dict>())) {
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

Result<ValuePtr> dictCompare(Tracer& t, int op, const ValuePtr& a, const ValuePtr& b, bool unordered) {
  const Dict* x = a->get<Dict>();
  const Dict* y = b->get<Dict>();
  if (!x || !y || (op != Py_EQ && op != Py_NE)) return notHandled();
  PyObject* odict = lookup(Obj::collections_OrderedDict);
  if (!odict) PyErr_Clear();
  auto richcompare = [](const Dict& d) { return reinterpret_cast<PyTypeObject*>(d.type.get())->tp_richcompare; };
  auto isOrdered = [odict](const Dict& d) {
    return odict && PyType_IsSubtype(reinterpret_cast<PyTypeObject*>(d.type.get()),
                                     reinterpret_cast<PyTypeObject*>(odict));
  };
  auto plainCompare = [&](const Dict& d) {
    const auto rc = richcompare(d);
    return rc == PyDict_Type.tp_richcompare || (odict && rc == reinterpret_cast<PyTypeObject*>(odict)->tp_richcompare);
  };
  if (!plainCompare(*x) || !plainCompare(*y)) return notHandled();
  auto answer = [op](bool equal) { return Value::constant((equal == (op == Py_EQ)) ? Py_True : Py_False); };
  if (x->keys.size() != y->keys.size()) return answer(false);
  bool same_order = true;
  for (size_t i = 0; i < x->keys.size(); ++i) {
    int j = y->findKey(x->keys[i].get());
    if (j == -2) return t.raisePython();
    if (j < 0) return answer(false);
    same_order = same_order && static_cast<size_t>(j) == i;
    const ValuePtr& va = x->values[i];
    const ValuePtr& vb = y->values[static_cast<size_t>(j)];
    Result<bool> same = identical(t, va, vb);
    if (!same) return same.stop();
    if (*same) continue;
    Result<ValuePtr> eq = compareOp(t, Py_EQ, va, vb);
    if (!eq) return eq;
    Result<bool> truth = truthValue(t, *eq);
    if (!truth) return truth.stop();
    if (!*truth) return answer(false);
  }
  // Two OrderedDicts are equal only with their keys in the same order (checked after the
  // values, as OrderedDict's comparison runs dict's first).
  if (!unordered && isOrdered(*x) && isOrdered(*y)) return answer(same_order);
  return answer(true);
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
  if (const Tuple* tup = v->get<Tuple>(); tup && !tup->namedtuple) {
    // A plain tuple made in the trace of keys ((device, dtype) pairs the foreach helpers
    // group by): a real tuple of the items' key objects, equal to and hashed as the
    // program's, kept alive with the trace's key objects like a frozenset's.
    Ref tuple = Ref::steal(PyTuple_New(static_cast<Py_ssize_t>(tup->items.size())));
    if (!tuple) return PyErr_Clear(), nullptr;
    for (size_t i = 0; i < tup->items.size(); ++i) {
      PyObject* k = dictKeyOf(t, tup->items[i]);
      if (!k) return nullptr;
      PyTuple_SET_ITEM(tuple.get(), static_cast<Py_ssize_t>(i), Py_NewRef(k));
    }
    if (PyObject_Hash(tuple.get()) == -1) return PyErr_Clear(), nullptr;
    PyObject* key = tuple.get();
    t.keyObjects().emplace(key, std::make_pair(std::move(tuple), v));
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

namespace {

bool isSetLikeView(const ValuePtr& v) {
  const DictView* view = v->get<DictView>();
  return view && view->which != DictView::Values;
}

// Whether `v`, on the left of `op` with a view on the right, leaves the operation to the
// view's reflected slot without a method of its own answering first: a set, a frozenset or
// a view, a list or a tuple (no such operators), or a set subclass instance whose class keeps
// set's operator.
bool defersToView(const ValuePtr& v, bytecode::BinaryOp op) {
  if (isSetLikeView(v) || v->is(Kind::Set) || v->is(Kind::List) || v->is(Kind::Tuple)) return true;
  if (PyObject* c = v->constant()) return PyAnySet_CheckExact(c);
  if (!setPartOf(v)) return false;
  static const struct {
    bytecode::BinaryOp op;
    const char* name;
  } kSlots[] = {{bytecode::BinaryOp::Or, "__or__"},   {bytecode::BinaryOp::And, "__and__"},
                {bytecode::BinaryOp::Subtract, "__sub__"}, {bytecode::BinaryOp::Xor, "__xor__"},
                {bytecode::BinaryOp::InplaceOr, "__ior__"}, {bytecode::BinaryOp::InplaceAnd, "__iand__"},
                {bytecode::BinaryOp::InplaceSubtract, "__isub__"}, {bytecode::BinaryOp::InplaceXor, "__ixor__"}};
  for (const auto& row : kSlots) {
    if (row.op != op) continue;
    Ref name = Ref::steal(PyUnicode_InternFromString(row.name));
    if (!name) return PyErr_Clear(), false;
    PyObject* own = lookupInMro(classOf(v), name.get(), nullptr);
    PyObject* base = PyDict_GetItemWithError(typeDict(&PySet_Type), name.get());
    if (!base) PyErr_Clear();
    return own == base;
  }
  return false;
}

}  // namespace

Result<ValuePtr> dictViewSetOperator(Tracer& t, const BinaryOperands& o) {
  using bytecode::BinaryOp;
  BinaryOp plain;
  switch (o.op) {
    case BinaryOp::Or: case BinaryOp::InplaceOr: plain = BinaryOp::Or; break;
    case BinaryOp::And: case BinaryOp::InplaceAnd: plain = BinaryOp::And; break;
    case BinaryOp::Subtract: case BinaryOp::InplaceSubtract: plain = BinaryOp::Subtract; break;
    case BinaryOp::Xor: case BinaryOp::InplaceXor: plain = BinaryOp::Xor; break;
    default: return notHandled();
  }
  // Keys and items views have no in-place operators: `v |= s` is `v | s`, a new set. A set
  // on the left of a view refuses it (NotImplemented, in place too: the set is unchanged)
  // and the view's reflected slot computes set(left) <op> right.
  if (!isSetLikeView(o.a) && !(isSetLikeView(o.b) && defersToView(o.a, o.op))) return notHandled();
  ValuePtr set_type = Value::callable(reinterpret_cast<PyObject*>(&PySet_Type));
  Result<ValuePtr> left = call(t, set_type, {o.a}, {});
  if (!left) return left;
  Result<ValuePtr> right = call(t, set_type, {o.b}, {});  // any iterable, as set.update takes it
  if (!right) return right;
  return setBinaryOp(t, plain, *left, *right);
}

Result<ValuePtr> dictOrOperator(Tracer& t, const BinaryOperands& o) {
  // dict |= other is dict.update (any mapping or pairs), on the dict itself; d1 | d2 of
  // two plain dicts is a new dict.
  const ValuePtr& a = o.a;
  const ValuePtr& b = o.b;
  if (!a->is(Kind::Dict) || !(o.op == BinaryOp::InplaceOr || (o.op == BinaryOp::Or && b->is(Kind::Dict))))
    return notHandled();
  const Dict& da = a->as<Dict>();
  ValuePtr target = a;
  if (o.op == BinaryOp::Or) {
    // A dict subclass on the right with its own __ror__ answers first (dict | OrderedDict
    // is an OrderedDict).
    if (da.type.get() != reinterpret_cast<PyObject*>(&PyDict_Type) ||
        b->as<Dict>().type.get() != reinterpret_cast<PyObject*>(&PyDict_Type))
      return t.fail("| of a dict subclass is not supported yet");
    std::vector<Ref> keys;
    for (const Ref& k : da.keys) keys.push_back(k.copy());
    target = Value::dict(da.type.get(), std::move(keys), da.values);
  }
  Args args{b};
  Kwargs kwargs;
  Ref update = internedName("update");
  if (!update) return t.failFromPython("dict.update");
  if (Result<ValuePtr> r = callContainerMethod(t, target, update.get(), args, kwargs); !r) return r;
  return target;
}

// The plan of a dict (OrderedDict, defaultdict) made in the trace, its items in order (OutputPlanner::plan).
Done rebuildDict(OutputPlanner& p, const ValuePtr& v, runtime::OutputPlan* out) {
  namespace P = runtime::plan;
  const Dict& d = v->as<Dict>();
  const bool traced_factory = d.factory_value && !d.default_factory;
  P::Dict dict{traced_factory ? Ref::borrow(reinterpret_cast<PyObject*>(&PyDict_Type)) : d.type.copy(),
               d.default_factory.copy(), {}, {}};
  for (const Ref& k : d.keys) dict.keys.push_back(k.copy());
  if (Done done = p.planAll(d.values, &dict.values); !done) return done;
  if (!traced_factory) {
    out->step = std::move(dict);
    return {};
  }
  // A factory made in the trace is rebuilt like any value (a function): the defaultdict
  // is then its type called with it and the items, in their order.
  std::vector<runtime::OutputPlan> args(2);
  if (Done done = p.plan(d.factory_value, &args[0]); !done) return done;
  args[1].step = std::move(dict);
  out->step = P::Call{d.type.copy(), std::move(args)};
  return {};
}

// The plan of a dict view: type(d).keys(d) of the very dict rebuilt (OutputPlanner::plan).
Done rebuildDictView(OutputPlanner& p, const ValuePtr& v, runtime::OutputPlan* out) {
  namespace P = runtime::plan;
  const DictView& view = v->as<DictView>();
  static const char* const kNames[] = {"keys", "values", "items"};
  Ref method = Ref::steal(PyObject_GetAttrString(view.dict->as<Dict>().type.get(), kNames[view.which]));
  if (!method) return p.tracer().failFromPython("a dict view's method");
  std::vector<runtime::OutputPlan> args(1);
  if (Done d = p.plan(view.dict, &args[0]); !d) return d;
  out->step = P::Call{std::move(method), std::move(args)};
  return {};
}

// An attribute of a dict value: a defaultdict's default_factory, its type's methods (called later), AttributeError for another type's.
Result<ValuePtr> dictAttr(Tracer& t, const ValuePtr& obj, PyObject* name) {
  const char* n = PyUnicode_AsUTF8(name);
  if (obj->as<Dict>().type.get() == reinterpret_cast<PyObject*>(&PyDictProxy_Type) &&
      !PyObject_HasAttr(reinterpret_cast<PyObject*>(&PyDictProxy_Type), name))
    return t.raiseNew(PyExc_AttributeError, std::string("'mappingproxy' object has no attribute '") + n + "'");
  if (strcmp(n, "default_factory") == 0) {
    // A defaultdict's factory (its data attribute, not a method): the value the trace
    // holds, the real one (guarded when the dict was read), or None.
    const Dict& d = obj->as<Dict>();
    PyObject* dd_type = lookup(Obj::collections_defaultdict);
    if (!dd_type) return t.failFromPython("collections.defaultdict");
    if (d.type && PyType_Check(d.type.get()) &&
        PyType_IsSubtype(reinterpret_cast<PyTypeObject*>(d.type.get()), reinterpret_cast<PyTypeObject*>(dd_type))) {
      if (d.factory_value) return d.factory_value;
      return d.default_factory ? Value::callable(d.default_factory.get()) : Value::constant(Py_None);
    }
  }
  if (PyObject* type = obj->as<Dict>().type.get(); type && PyType_Check(type) &&
                                                   !_PyType_Lookup(reinterpret_cast<PyTypeObject*>(type), name))
    // Not its class's (move_to_end of a plain dict): AttributeError, as eagerly.
    return t.raiseNew(PyExc_AttributeError, std::string("'") + reinterpret_cast<PyTypeObject*>(type)->tp_name +
                                                "' object has no attribute '" + n + "'");
  return Value::namedMethod(obj, name);  // dict.items, ...: called later
}

}  // namespace cdynamo::trace
