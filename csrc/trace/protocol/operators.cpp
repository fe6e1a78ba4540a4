// Operations on symbolic values: Python operators, subscripts, iteration, identity,
// membership and truth. Each is one decision over value kinds: tensors go to the graph,
// constants are computed with the real Python operation (exact semantics), containers are
// rebuilt, user objects call their special methods.
#include <cstring>
#include <string>

#include "support/lookup.h"
#include "support/torch_types.h"
#include "trace/engine/graph_calls.h"
#include "trace/engine/scalars.h"
#include "trace/kinds/containers.h"
#include "trace/kinds/ndarray.h"
#include "trace/kinds/object.h"
#include "trace/kinds/tensor_subclass.h"
#include "trace/protocol/constants.h"
#include "trace/protocol/operators.h"
#include "trace/tracer.h"

namespace cdynamo::trace {

using bytecode::BinaryOp;
using graph::NodeOp;

namespace {

// The operator module's function of each BINARY_OP operator, indexed by its number.
const Obj kBinaryOpFns[] = {
#define B(name, num, symbol, fn) Obj::operator_##fn,
#include CDYNAMO_BINARY_OPS
#undef B
};
const char* const kCompareOps[] = {"lt", "le", "eq", "ne", "gt", "ge"};
const Obj kCompareOpFns[] = {Obj::operator_lt, Obj::operator_le, Obj::operator_eq,
                             Obj::operator_ne, Obj::operator_gt, Obj::operator_ge};

// An interned str for a name made at run time (a special method's name).
Ref internedName(const std::string& name) { return Ref::steal(PyUnicode_InternFromString(name.c_str())); }

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

PyObject* recordedOperator(Tracer& t, PyObject* fn, const ValuePtr& a) {
  if (a->is(Kind::Tensor) && !isScalarValue(t, a)) return fn;
  if (!a->is(Kind::Tensor) && !a->is(Kind::Constant)) return fn;  // containers keep theirs (list += t)
  constexpr int kInplace = static_cast<int>(BinaryOp::InplaceAdd);
  constexpr int kCount = static_cast<int>(sizeof(kBinaryOpFns) / sizeof(kBinaryOpFns[0]));
  for (int i = kInplace; i < kCount; ++i) {
    if (lookup(kBinaryOpFns[i]) != fn) continue;
    PyObject* binary = lookup(kBinaryOpFns[i - kInplace]);
    if (!binary) return PyErr_Clear(), fn;
    return binary;
  }
  return fn;
}

namespace {
bool isNamedTupleValue(const ValuePtr& v) {
  const Tuple* tup = v->get<Tuple>();
  return tup && tup->namedtuple && PyType_HasFeature(reinterpret_cast<PyTypeObject*>(tup->namedtuple.get()), Py_TPFLAGS_HEAPTYPE);
}
}  // namespace

namespace {

// The module a class was defined in is `name` (its __module__).
bool definedIn(PyObject* type, const char* name) {
  PyObject* dict = reinterpret_cast<PyTypeObject*>(type)->tp_dict;
  PyObject* m = dict ? PyDict_GetItemString(dict, "__module__") : nullptr;
  return m && PyUnicode_Check(m) && PyUnicode_CompareWithASCIIString(m, name) == 0;
}

// An object whose subscript makes a type expression: typing's special forms and aliases
// (Callable, Optional, List[int], a TypeVar-parameterized alias), types.GenericAlias and
// types.UnionType (list[int], int | None), and classes whose __class_getitem__ is a C
// function, typing's or collections.abc's (list, dict, type, typing.Generic subclasses,
// collections.abc.Callable). Subscripting them
// builds an alias (cached by typing) and changes nothing else.
bool makesTypeExpression(PyObject* o) {
  if (!o) return false;
  if (o == reinterpret_cast<PyObject*>(&PyType_Type)) return true;  // type[T]: special-cased by PyObject_GetItem
  if (PyType_Check(o)) {
    static PyObject* name = PyUnicode_InternFromString("__class_getitem__");  // immortal once interned
    PyObject* cgi = name ? _PyType_Lookup(reinterpret_cast<PyTypeObject*>(o), name) : nullptr;
    if (!cgi) return false;
    if (PyObject_TypeCheck(cgi, &PyClassMethodDescr_Type) || PyCFunction_Check(cgi)) return true;
    if (Py_IS_TYPE(cgi, &PyClassMethod_Type)) {
      Ref fn = Ref::steal(PyObject_GetAttrString(cgi, "__func__"));
      if (!fn) return PyErr_Clear(), false;
      if (PyCFunction_Check(fn.get())) return true;
      Ref module = Ref::steal(PyObject_GetAttrString(fn.get(), "__module__"));
      if (!module) return PyErr_Clear(), false;
      if (!PyUnicode_Check(module.get())) return false;
      for (const char* m : {"typing", "collections.abc", "_collections_abc"})  // typing.Generic; collections.abc.Callable
        if (PyUnicode_CompareWithASCIIString(module.get(), m) == 0) return true;
      return false;
    }
    return false;
  }
  PyTypeObject* type = Py_TYPE(o);
  if (PyObject_TypeCheck(o, &Py_GenericAliasType) || strcmp(type->tp_name, "types.UnionType") == 0) return true;
  return definedIn(reinterpret_cast<PyObject*>(type), "typing");
}

// The real object of a part of a type expression: constants, classes and functions (guarded
// by identity where read), typing objects (guarded by identity), and tuples and lists of
// them (Callable[[T], R]); null when a part is anything else.
Ref typeExpressionPart(Tracer& t, const ValuePtr& v) {
  if (v->is(Kind::Constant) || v->is(Kind::Callable)) return Ref::borrow(v->real());
  if (const Object* o = v->get<Object>()) {
    if (!makesTypeExpression(o->obj.get()) && !definedIn(reinterpret_cast<PyObject*>(Py_TYPE(o->obj.get())), "typing"))
      return Ref();
    if (v->reg >= 0) t.guards().checkIdentity(v->reg, o->obj.get());
    return Ref::borrow(o->obj.get());
  }
  if (v->is(Kind::Tuple) || v->is(Kind::List)) {
    const std::vector<ValuePtr>& items = *v->elements();
    Ref out = Ref::steal(v->is(Kind::Tuple) ? PyTuple_New(static_cast<Py_ssize_t>(items.size()))
                                            : PyList_New(static_cast<Py_ssize_t>(items.size())));
    if (!out) return PyErr_Clear(), Ref();
    for (size_t i = 0; i < items.size(); ++i) {
      Ref p = typeExpressionPart(t, items[i]);
      if (!p) return Ref();
      if (v->is(Kind::Tuple)) PyTuple_SET_ITEM(out.get(), static_cast<Py_ssize_t>(i), p.release());
      else PyList_SET_ITEM(out.get(), static_cast<Py_ssize_t>(i), p.release());
    }
    return out;
  }
  return Ref();
}

// obj[index] that builds a type expression (annotations evaluated when a function is made,
// `Callable[[T], Any]`): computed for real, as it changes nothing; NotHandled otherwise.
Result<ValuePtr> typeExpressionSubscript(Tracer& t, const ValuePtr& obj, const ValuePtr& index) {
  if (!(obj->is(Kind::Callable) || obj->is(Kind::Object) || obj->is(Kind::Constant)) || !makesTypeExpression(obj->real()))
    return notHandled();
  Ref key = typeExpressionPart(t, index);
  if (!key) return notHandled();
  if (obj->is(Kind::Object) && obj->reg >= 0) t.guards().checkIdentity(obj->reg, obj->real());
  Ref r = Ref::steal(PyObject_GetItem(obj->real(), key.get()));
  if (!r) return t.raisePython();
  if (isConstantObject(r.get())) return Value::constant(r.get());
  if (PyCallable_Check(r.get())) return Value::callable(r.get());
  return Value::object(r.get());  // no source: nothing to guard, never mutated (not owned)
}

// `a | b` that builds a union type (int | None, T | list[int]): computed for real.
Result<ValuePtr> typeUnion(Tracer& t, const ValuePtr& a, const ValuePtr& b) {
  auto typeLike = [](const ValuePtr& v) {
    PyObject* o = v->real();
    return o && (v->is(Kind::Callable) || v->is(Kind::Object)) && (PyType_Check(o) || makesTypeExpression(o));
  };
  if (!typeLike(a) && !typeLike(b)) return notHandled();
  Ref x = typeExpressionPart(t, a), y = typeExpressionPart(t, b);
  if (!x || !y) return notHandled();
  Ref r = Ref::steal(PyNumber_Or(x.get(), y.get()));
  if (!r) return t.raisePython();
  if (isConstantObject(r.get())) return Value::constant(r.get());
  if (PyCallable_Check(r.get())) return Value::callable(r.get());
  return Value::object(r.get());
}

}  // namespace

Result<ValuePtr> binaryOp(Tracer& t, BinaryOp op, const ValuePtr& a, const ValuePtr& b) {
  if (op == BinaryOp::Or) {
    if (Result<ValuePtr> r = typeUnion(t, a, b); !r.notHandled()) return r;
  }
  const char* fn_name = bytecode::binaryOpFunction(op);
  PyObject* fn = lookup(kBinaryOpFns[static_cast<int>(op)]);
  if (!fn) return t.failFromPython("operator lookup");
  if (isNamedTupleValue(a) || isNamedTupleValue(b)) {
    // A namedtuple class's own Python operator (a NamedTuple subclass's __add__) before
    // tuple's: a.__op__(b), then b.__rop__(a).
    std::string name = fn_name;
    if (name.back() == '_') name.pop_back();
    std::string base = bytecode::isInplace(op) ? name.substr(1) : name;
    for (int side = 0; side < 2; ++side) {
      Ref dunder = internedName(side == 0 ? "__" + base + "__" : "__r" + base + "__");
      if (!dunder) return t.failFromPython("a special method's name");
      Result<ValuePtr> r = namedTupleDunder(t, side == 0 ? a : b, dunder.get(), {side == 0 ? b : a});
      if (!r.notHandled() && (!r || (*r)->constant() != Py_NotImplemented)) return r;
    }
  }
  if (isUserObject(a) || isUserObject(b)) {
    // Python-level operators: a.__op__(b), then b.__rop__(a); in-place falls back to binary.
    std::string name = fn_name;
    if (name.back() == '_') name.pop_back();  // and_, or_
    bool inplace = bytecode::isInplace(op);
    std::string base = inplace ? name.substr(1) : name;
    // A method that returns NotImplemented passes the turn to the next candidate.
    auto answered = [](const Result<ValuePtr>& r) {
      if (r.notHandled()) return false;
      return !r || (*r)->constant() != Py_NotImplemented;
    };
    auto tryDunder = [&](const ValuePtr& self, const std::string& dunder, const ValuePtr& other) -> Result<ValuePtr> {
      Ref method = internedName(dunder);
      if (!method) return t.failFromPython("a special method's name");
      return callDunder(t, self, method.get(), {other});
    };
    if (inplace) {
      Result<ValuePtr> r = tryDunder(a, "__" + name + "__", b);
      if (answered(r)) return r;
    }
    Result<ValuePtr> r = tryDunder(a, "__" + base + "__", b);
    if (answered(r)) return r;
    r = tryDunder(b, "__r" + base + "__", a);
    if (answered(r)) return r;
    // Neither answered: + of a list or tuple (a subclass's base) raises its concatenation's
    // error, anything else CPython's "unsupported operand" one, with the types' names.
    PyTypeObject* ta = reinterpret_cast<PyTypeObject*>(typeOf(t, a));
    PyTypeObject* tb = reinterpret_cast<PyTypeObject*>(typeOf(t, b));
    if (!ta || !tb) return t.fail("unsupported operand type(s) for " + base);
    if (base == "add" && (PyType_IsSubtype(ta, &PyList_Type) || PyType_IsSubtype(ta, &PyTuple_Type))) {
      const char* seq = PyType_IsSubtype(ta, &PyList_Type) ? "list" : "tuple";
      return t.raiseNew(PyExc_TypeError, std::string("can only concatenate ") + seq + " (not \"" + tb->tp_name +
                                             "\") to " + seq);
    }
    return t.raiseNew(PyExc_TypeError, std::string("unsupported operand type(s) for ") + bytecode::binaryOpSymbol(op) +
                                           ": '" + ta->tp_name + "' and '" + tb->tp_name + "'");
  }
  if (a->is(Kind::NdArray) || b->is(Kind::NdArray)) return ndarrayOperator(t, fn_name, {a, b});
  if (Result<ValuePtr> r = subclassOperator(t, fn_name, {a, b}); !r.notHandled()) return r;
  // list += iterable and list *= n change the list itself (list.__iadd__/__imul__, also
  // a deque's): every alias of it sees the new items, and the result is the same list.
  if (a->is(Kind::List) && (op == BinaryOp::InplaceAdd || op == BinaryOp::InplaceMultiply)) {
    std::vector<ValuePtr> more;
    Py_ssize_t times = 0;
    if (op == BinaryOp::InplaceAdd) {
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
      if (!n || !PyIndex_Check(n))
        return t.fail("list *= needs an int known at trace time");
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
      if (op != BinaryOp::InplaceAdd && bound >= 0 && size > 0 && copies * size > bound) copies = (bound + size - 1) / size;
      if (op == BinaryOp::InplaceAdd ? !more.empty() : size > 0 && copies != 1) dequeChanged(q);
    }
    if (op == BinaryOp::InplaceAdd) {
      items.insert(items.end(), more.begin(), more.end());
    } else {
      const std::vector<ValuePtr> once = items;
      items.clear();
      for (Py_ssize_t i = 0; i < times; ++i) items.insert(items.end(), once.begin(), once.end());
    }
    keepLastMaxlen(a->as<List>(), &items);
    return a;
  }
  // dict |= other is dict.update (any mapping or pairs), on the dict itself; d1 | d2 of
  // two plain dicts is a new dict.
  if (a->is(Kind::Dict) && (op == BinaryOp::InplaceOr || (op == BinaryOp::Or && b->is(Kind::Dict)))) {
    const Dict& da = a->as<Dict>();
    ValuePtr target = a;
    if (op == BinaryOp::Or) {
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
  if (a->is(Kind::Tensor) || b->is(Kind::Tensor))
    return recordCall(t, NodeOp::CallFunction, recordedOperator(t, fn, a), {a, b}, {});
  if (a->is(Kind::Constant) && b->is(Kind::Constant)) {
    Ref r = Ref::steal(PyObject_CallFunctionObjArgs(fn, a->constant(), b->constant(), nullptr));
    if (!r) return t.raisePython();
    if (!isConstantObject(r.get())) return t.fail("operator on constants returned a non-constant");
    return Value::constant(r.get());
  }
  // set |=, &=, -=, ^= change the set itself (aliases see it), replayed on its shadow so that
  // its table keeps the history a later walk or pop() reads (containers.cpp, Set::shadow).
  // Computing them on fresh real copies, as below, lost both: the walk order and pop()
  // differed from eager's with string hashes (PYTHONHASHSEED=3), and an alias kept the old set.
  if (a->is(Kind::Set) && !a->as<Set>().frozen &&
      (op == BinaryOp::InplaceOr || op == BinaryOp::InplaceAnd || op == BinaryOp::InplaceSubtract ||
       op == BinaryOp::InplaceXor))
    if (Result<ValuePtr> r = setBinaryOp(t, op, a, b); !r.notHandled()) return r;
  // Sets, and a constant with a container of constants ("%s=%d" % (name, n)): compute.
  // (+ and * with a list, tuple or deque value are the sequences' own, below: a constant
  // tuple + a list raises in the trace as eagerly, 3 * deque is a deque value.)
  const bool sequence_op = (op == BinaryOp::Add || op == BinaryOp::Multiply) &&
                           (a->is(Kind::List) || a->is(Kind::Tuple) || b->is(Kind::List) || b->is(Kind::Tuple));
  if ((a->is(Kind::Set) || b->is(Kind::Set) || a->is(Kind::Constant)) && op != BinaryOp::InplaceAdd &&
      op != BinaryOp::InplaceMultiply && !sequence_op) {
    // A set made in the trace is read as its shadow: eager's a ^ b walks a's own table,
    // whose order its history (removals, resizes) decides; a fresh copy of its items walks
    // in another order (fuzzer F5: s ^ {3, 9} after discard/add gave [1, 3] for [3, 1]).
    auto operand = [&](const ValuePtr& v) {
      PyObject* shadow = realSetOperand(v);
      return shadow ? Ref::borrow(shadow) : toPython(t, v);
    };
    Ref pa = operand(a), pb = pa ? operand(b) : Ref();
    if (pa && pb) {
      Ref r = Ref::steal(PyObject_CallFunctionObjArgs(fn, pa.get(), pb.get(), nullptr));
      if (!r) return t.failFromPython(std::string("operator.") + fn_name);
      // The new set's own table is its history from here on (a later walk or pop() reads it);
      // its items are the operands' values where it holds their objects.
      if (ValuePtr v = setFromReal(r.get(), {a, b})) return v;
      Result<ValuePtr> out = fromPython(t, r.get());
      if (out && PySet_CheckExact(r.get()))
        if (Set* s = (*out)->get<Set>(); s && !s->frozen && (*out)->reg < 0) s->shadow = std::move(r);
      return out;
    }
  }
  // Sets holding values made in the trace (tensors): by their members.
  if (a->is(Kind::Set) || b->is(Kind::Set))
    if (Result<ValuePtr> r = setBinaryOp(t, op, a, b); !r.notHandled()) return r;
  std::vector<ValuePtr> left, right;
  if ((op == BinaryOp::Add || op == BinaryOp::InplaceAdd) && sequenceItems(a, &left) && sequenceItems(b, &right)) {
    // list + list, tuple + tuple (a namedtuple's too: a plain tuple), deque + deque; any
    // other pair raises as eagerly (list + tuple, list + deque: once a list).
    const SequenceType ta = sequenceType(a), tb = sequenceType(b);
    if (ta == SequenceType::Other || tb == SequenceType::Other)
      return t.fail(std::string("operator ") + fn_name + " on " + describe(a) + " and " + describe(b) +
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
  // seq * n and n * seq: the sequence's own type (a deque's maxlen kept).
  const bool times_right = (op == BinaryOp::Multiply || op == BinaryOp::InplaceMultiply) && b->is(Kind::Constant) &&
                           PyLong_CheckExact(b->constant()) && !a->is(Kind::Constant) && sequenceItems(a, &left);
  const bool times_left = !times_right && op == BinaryOp::Multiply && a->is(Kind::Constant) &&
                          PyLong_CheckExact(a->constant()) && !b->is(Kind::Constant) && sequenceItems(b, &left);
  if (times_right || times_left) {
    const ValuePtr& seq = times_right ? a : b;
    const SequenceType type = sequenceType(seq);
    if (type == SequenceType::Other)
      return t.fail(std::string("operator ") + fn_name + " on " + describe(a) + " and " + describe(b) +
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
  if (op == BinaryOp::Or && a->is(Kind::Callable) && b->is(Kind::Callable) &&
      Py_IS_TYPE(a->real(), &PyType_Type) && Py_IS_TYPE(b->real(), &PyType_Type)) {  // list | tuple: a types.UnionType, made for real (it runs no user code)
    Ref r = Ref::steal(PyNumber_Or(a->real(), b->real()));
    if (!r) return t.raisePython();
    return Value::of(Object{std::move(r), true});
  }
  return t.fail(std::string("operator ") + fn_name + " on " + describe(a) + " and " +
              describe(b) + " is not supported yet");
}

Result<ValuePtr> unaryOp(Tracer& t, bytecode::Op op, const ValuePtr& a) {
  if (op == bytecode::Op::UNARY_NOT) {
    Result<bool> truth = truthValue(t, a);
    if (!truth) return truth.stop();
    return Value::constant(*truth ? Py_False : Py_True);
  }
  const char* name = op == bytecode::Op::UNARY_NEGATIVE ? "neg" : op == bytecode::Op::UNARY_POSITIVE ? "pos" : "invert";
  if (isUserObject(a)) {
    Ref method = internedName(std::string("__") + name + "__");
    if (!method) return t.failFromPython("a special method's name");
    Result<ValuePtr> r = callDunder(t, a, method.get(), {});
    if (!r.notHandled()) return r;
    return t.fail(std::string("bad operand type for unary ") + name + " (TypeError)");
  }
  PyObject* fn = lookup(op == bytecode::Op::UNARY_NEGATIVE   ? Obj::operator_neg
                        : op == bytecode::Op::UNARY_POSITIVE ? Obj::operator_pos
                                                             : Obj::operator_invert);
  if (!fn) return t.failFromPython("operator lookup");
  if (a->is(Kind::NdArray)) return ndarrayOperator(t, name, {a});
  if (Result<ValuePtr> r = subclassOperator(t, name, {a}); !r.notHandled()) return r;
  if (a->is(Kind::Tensor)) return recordCall(t, NodeOp::CallFunction, fn, {a}, {});
  if (a->is(Kind::Constant)) {
    Ref r = Ref::steal(PyObject_CallOneArg(fn, a->constant()));
    if (!r) return t.failFromPython(std::string("operator.") + name + " on a constant");
    return Value::constant(r.get());
  }
  return t.fail(std::string("unary operator on ") + describe(a) + " is not supported yet");
}

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
        if (eq && eq != object_eq && !PyFunction_Check(eq))
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
  return t.fail(std::string("comparison of ") + describe(a) + " and " + describe(b) +
              " is not supported yet");
}

Done moduleContainerItems(Tracer& t, const ValuePtr& m, std::vector<std::pair<Ref, ValuePtr>>* out) {
  // nn.Sequential / ModuleList / ModuleDict hold their children in _modules; their
  // indexing, len and membership are answered from it, with its keys guarded.
  PyObject** dictptr = _PyObject_GetDictPtr(m->as<Module>().obj.get());
  PyObject* modules = dictptr && *dictptr ? PyDict_GetItemString(*dictptr, "_modules") : nullptr;
  if (!modules || !PyDict_Check(modules)) return t.fail("module without _modules");
  int mreg = t.load(guards::LoadKind::InstanceDict, m->reg, 0, interned(Str::underscore_modules),
                  t.guards().sourceName(m->reg) + "._modules");
  t.guards().checkDictKeys(mreg, modules);
  PyObject *key, *value;
  Py_ssize_t pos = 0;
  while (PyDict_Next(modules, &pos, &key, &value)) {
    int reg = t.load(guards::LoadKind::DictItem, mreg, 0, key,
                   t.guards().sourceName(mreg) + "['" + PyUnicode_AsUTF8(key) + "']");
    Result<ValuePtr> v = t.wrap(value, reg);
    if (!v) return v.stop();
    out->emplace_back(Ref::borrow(key), v.take());
  }
  return {};
}

namespace {

// The container class (torch.nn.Sequential, ModuleList or ModuleDict) whose own `dunder`
// the module's class uses, or null.
PyObject* moduleContainerOwning(PyObject* module, PyObject* dunder) {
  PyObject* found = _PyType_Lookup(Py_TYPE(module), dunder);
  if (!found) return nullptr;
  for (Obj o : {Obj::torch_nn_Sequential, Obj::torch_nn_ModuleList, Obj::torch_nn_ModuleDict}) {
    PyObject* cls = lookup(o);
    if (!cls) {
      PyErr_Clear();
      continue;
    }
    PyObject* own = PyDict_GetItemWithError(reinterpret_cast<PyTypeObject*>(cls)->tp_dict, dunder);
    if (!own) PyErr_Clear();
    if (own && own == found) return cls;
  }
  return nullptr;
}

}  // namespace

bool isModuleContainer(const ValuePtr& m, PyObject* dunder) {
  return m->is(Kind::Module) && moduleContainerOwning(m->real(), dunder) != nullptr;
}

namespace {

// A tensor used as a list or tuple index (its __index__): a TypeError when its dtype or
// size can never give one (a floating or complex tensor, not one element), and its value
// when the trace made it from constants (torch.as_tensor(2): the fake mode keeps such a
// tensor's value, FakeTensor.constant, dropped when it is written to), as torch._dynamo
// reads it. NotHandled otherwise (an index known only when the graph runs).
Result<ValuePtr> tensorIndex(Tracer& t, const ValuePtr& v) {
  const Tensor* tensor = v->get<Tensor>();
  if (!tensor || t.graph().isScalar(tensor->node)) return notHandled();
  PyObject* fake = t.graph().fake(tensor->node);
  Ref fp = Ref::steal(PyObject_CallMethod(fake, "is_floating_point", nullptr));
  Ref cx = fp ? Ref::steal(PyObject_CallMethod(fake, "is_complex", nullptr)) : Ref();
  Ref numel = cx ? Ref::steal(PyObject_CallMethod(fake, "numel", nullptr)) : Ref();
  if (!numel || !PyLong_Check(numel.get())) return t.failFromPython("a tensor used as an index");
  if (fp.get() != Py_False || cx.get() != Py_False || PyLong_AsLong(numel.get()) != 1)
    return t.raiseNew(PyExc_TypeError, "only integer tensors of a single element can be converted to an index");
  static PyObject* const constant_attr = PyUnicode_InternFromString("constant");
  Ref c = Ref::steal(PyObject_GetAttr(fake, constant_attr));
  if (!c) PyErr_Clear();
  if (!c || c.get() == Py_None) return notHandled();
  Ref item = Ref::steal(PyObject_CallMethod(fake, "item", nullptr));  // the fake mode answers from the constant
  Ref index = item ? Ref::steal(PyNumber_Index(item.get())) : Ref();
  if (!index) return t.failFromPython("the value of a tensor index");
  return Value::constant(index.get());
}

}  // namespace

Result<ValuePtr> subscript(Tracer& t, const ValuePtr& obj, const ValuePtr& index) {
  if (obj->is(Kind::NdArray)) return ndarraySubscript(t, obj, index);
  if (Result<ValuePtr> r = subclassOperator(t, "getitem", {obj, index}); !r.notHandled()) return r;
  if (index->is(Kind::Tensor) && (obj->is(Kind::Tuple) || obj->is(Kind::List) || obj->constant())) {
    Result<ValuePtr> i = tensorIndex(t, index);
    if (!i.notHandled()) return i ? subscript(t, obj, *i) : i;
  }
  PyObject* container = obj->is(Kind::Module) ? moduleContainerOwning(obj->real(), interned(Str::dunder_getitem)) : nullptr;
  // A slice of a container is a new container of its class (Sequential, ModuleList): the
  // class's own __getitem__ below builds it in the trace; a list here would be a wrong type.
  if (container && index->is(Kind::Constant)) {
    // ModuleDict's __getitem__ takes names; Sequential's and ModuleList's take positions.
    const bool by_name = container == lookup(Obj::torch_nn_ModuleDict);
    const bool name = index->constant() && PyUnicode_Check(index->constant());
    if (by_name != name)
      return t.fail(std::string(reinterpret_cast<PyTypeObject*>(container)->tp_name) + "[" +
                    (index->constant() ? Py_TYPE(index->constant())->tp_name : "slice") + "] is not supported yet");
    std::vector<std::pair<Ref, ValuePtr>> children;
    if (Done d = moduleContainerItems(t, obj, &children); !d) return d.stop();
    if (name) {
      for (auto& [k, v] : children)
        if (PyUnicode_Compare(k.get(), index->constant()) == 0) return v;
      PyErr_SetObject(PyExc_KeyError, index->constant());
      return t.raisePython();
    }
    std::vector<ValuePtr> mods;
    for (auto& kv : children) mods.push_back(kv.second);
    ValuePtr list = Value::list(std::move(mods));
    return subscript(t, list, index);
  }
  if (obj->is(Kind::Module)) {  // a module class's own __getitem__ (ParameterDict, a user's)
    Result<ValuePtr> r = callModuleDunder(t, obj, interned(Str::dunder_getitem), {index});
    if (!r.notHandled()) return r;
  }
  // Before a typing object's own Python __getitem__: computed for real.
  if (Result<ValuePtr> r = typeExpressionSubscript(t, obj, index); !r.notHandled()) return r;
  if (isUserObject(obj)) {
    Result<ValuePtr> r = callDunder(t, obj, interned(Str::dunder_getitem), {index});
    if (!r.notHandled()) return r;
    return t.fail("object is not subscriptable (TypeError)");
  }
  if (obj->is(Kind::Tensor)) {
    // x[n] with n a symbolic int (a size, an int argument made a symbol): torch.select(x, 0,
    // n) as torch._dynamo records it. Tensor.__getitem__ would take the SymInt's __index__
    // and specialize n (Eq(n, value)): a recompile for every index.
    if (isScalarValue(t, index) && scalarType(t, index) == reinterpret_cast<PyObject*>(&PyLong_Type) &&
        !isScalarValue(t, obj)) {
      Ref dim = Ref::steal(PyObject_CallMethod(t.graph().fake(obj->as<Tensor>().node), "dim", nullptr));
      if (!dim) return t.failFromPython("Tensor.dim()");
      if (PyLong_AsLong(dim.get()) >= 1) {
        PyObject* sel = lookup(Obj::torch_select);
        if (!sel) return t.failFromPython("torch.select lookup");
        Ref zero = Ref::steal(PyLong_FromLong(0));
        if (!zero) return t.failFromPython("index");
        return recordCall(t, NodeOp::CallFunction, sel, {obj, Value::constant(zero.get()), index}, {});
      }
    }
    PyObject* fn = lookup(Obj::operator_getitem);
    if (!fn) return t.failFromPython("operator lookup");
    return recordCall(t, NodeOp::CallFunction, fn, {obj, index}, {});
  }
  const bool sequence = obj->is(Kind::Tuple) || obj->is(Kind::List);
  if (sequence && index->constant()) {
    const std::vector<ValuePtr>& items = *obj->elements();
    PyObject* i = index->constant();
    Py_ssize_t n = static_cast<Py_ssize_t>(items.size());
    if (PyLong_Check(i)) {
      Py_ssize_t k = PyLong_AsSsize_t(i);
      if (k == -1 && PyErr_Occurred()) return t.failFromPython("index");
      if (k < 0) k += n;
      if (k < 0 || k >= n)
        return t.raiseNew(PyExc_IndexError, !obj->is(Kind::List)          ? "tuple index out of range"
                                            : obj->as<List>().deque ? "deque index out of range"
                                                                    : "list index out of range");
      return items[static_cast<size_t>(k)];
    }
  }
  if (obj->is(Kind::Dict)) {
    std::vector<ValuePtr> args{index};
    std::vector<std::pair<Ref, ValuePtr>> kwargs;
    return callContainerMethod(t, obj, interned(Str::dunder_getitem), args, kwargs);
  }
  const bool constant_slice = index->constant() && PySlice_Check(index->constant());  // slice(1, None) made for real
  if (sequence && (index->is(Kind::Slice) || constant_slice)) {
    const std::vector<ValuePtr>& items = *obj->elements();
    Result<Ref> slice = constant_slice ? Result<Ref>(Ref::borrow(index->constant())) : constantSlice(t, index->as<Slice>());
    if (!slice) return slice.stop();
    Py_ssize_t start, stop, step, len;
    if (!*slice ||
        PySlice_GetIndicesEx(slice->get(), static_cast<Py_ssize_t>(items.size()), &start, &stop, &step, &len) < 0)
      return t.failFromPython("slicing a sequence");
    if (const List* l = obj->get<List>(); l && l->deque)
      return t.raiseNew(PyExc_TypeError, "sequence index must be integer, not 'slice'");
    std::vector<ValuePtr> out;
    for (Py_ssize_t k = 0, at = start; k < len; ++k, at += step) out.push_back(items[static_cast<size_t>(at)]);
    if (isSizeValue(obj)) return Value::of(Tuple{std::move(out), obj->as<Tuple>().namedtuple.copy()});
    return Value::sequence(obj->kind(), std::move(out));  // a namedtuple's slice is a tuple
  }
  if (obj->constant() && (index->is(Kind::Constant) || index->is(Kind::Slice))) {
    graph::Arg idx;
    if (Done d = toArg(t, index, &idx); !d) return d.stop();
    Ref key;
    if (index->constant()) {
      key = Ref::borrow(index->constant());
    } else {
      Result<Ref> slice = constantSlice(t, index->as<Slice>());
      if (!slice) return slice.stop();
      key = slice.take();
    }
    Ref r = Ref::steal(key ? PyObject_GetItem(obj->constant(), key.get()) : nullptr);
    if (!r) return t.raisePython();
    if (!isConstantObject(r.get())) return t.fail("subscript of a constant returned a non-constant");
    return Value::constant(r.get());
  }
  return t.fail(std::string("subscript of ") + describe(obj) + " by " + describe(index) +
              " is not supported yet");
}

namespace {

Result<ValuePtr> moduleIter(Tracer& t, const ValuePtr& obj) {
  // nn.Sequential and nn.ModuleList iterate over their submodules (_modules.values()).
  PyObject* m = obj->as<Module>().obj.get();
  PyObject* container = moduleContainerOwning(m, interned(Str::dunder_iter));
  if (!container || container == lookup(Obj::torch_nn_ModuleDict))  // ModuleDict iterates over names
    return t.fail(std::string("iterating a module of type ") + Py_TYPE(m)->tp_name + " is not supported yet");
  PyObject** dictptr = _PyObject_GetDictPtr(m);
  PyObject* modules = dictptr && *dictptr ? PyDict_GetItemString(*dictptr, "_modules") : nullptr;
  if (!modules || !PyDict_Check(modules)) return t.fail("module without _modules");
  int mreg = t.load(guards::LoadKind::InstanceDict, obj->reg, 0, interned(Str::underscore_modules),
                  t.guards().sourceName(obj->reg) + "._modules");
  t.guards().checkLength(mreg, PyDict_GET_SIZE(modules));
  std::vector<ValuePtr> items;
  PyObject *key, *value;
  Py_ssize_t pos = 0;
  while (PyDict_Next(modules, &pos, &key, &value)) {
    if (value == Py_None) continue;
    int reg =
        t.load(guards::LoadKind::DictItem, mreg, 0, key, t.guards().sourceName(mreg) + "['" + PyUnicode_AsUTF8(key) + "']");
    Result<ValuePtr> child = t.wrap(value, reg);
    if (!child) return child;
    items.push_back(child.take());
  }
  return Value::iterator(std::move(items));
}

}  // namespace

Result<ValuePtr> getIter(Tracer& t, const ValuePtr& obj) {
  switch (obj->kind()) {
    case Kind::Iterator:
      return obj;
    case Kind::Object:
    case Kind::NewObject: {
      Result<ValuePtr> r = callDunder(t, obj, interned(Str::dunder_iter), {});
      if (r.notHandled()) {
        PyObject* real = obj->real();
        if (real && Py_TYPE(real)->tp_iter)  // a C type's own iteration (deque, array, ...)
          return t.fail(std::string("iter() of a ") + Py_TYPE(real)->tp_name + " object (a C type's own iterator) is not modelled");
        return t.fail("object is not iterable (TypeError)");
      }
      if (!r) return r;
      // What __iter__ returned is the iterator, never asked for its own __iter__: a user
      // object gives its items through its __next__, one at a time.
      if ((*r)->is(Kind::Iterator)) return r;
      if (isUserObject(*r)) {
        ValuePtr it = Value::iterator({}, typeOf(t, *r));
        it->as<Iterator>().stepper = r.take();
        return it;
      }
      return t.fail(std::string("__iter__ returned ") + describe(*r) + " (TypeError: iter() returned non-iterator)");
    }
    case Kind::Tuple:
      return Value::iterator(*obj->elements(), iteratorTypeFor(t, lookup(Obj::builtins_iter), obj));
    case Kind::List:
      // Lists, dicts and sets are read item by item as they are when each is taken
      // (value.h Iterator::Made::Sequence): the program may change them in between.
      return sequenceIterator(obj, *obj->elements(), iteratorTypeFor(t, lookup(Obj::builtins_iter), obj), 0, false);
    case Kind::Set:
      return sequenceIterator(obj, setIterationOrder(obj->as<Set>()),
                              iteratorTypeFor(t, lookup(Obj::builtins_iter), obj), 0, false);
    case Kind::Dict: {
      std::vector<ValuePtr> keys;
      for (const Ref& k : obj->as<Dict>().keys) {
        Result<ValuePtr> kv = keyValueOf(t, k.get());
        if (!kv) return kv;
        keys.push_back(kv.take());
      }
      return sequenceIterator(obj, std::move(keys), iteratorTypeFor(t, lookup(Obj::builtins_iter), obj),
                              DictView::Keys, false);
    }
    case Kind::Constant: {
      Ref iter = Ref::steal(PyObject_GetIter(obj->constant()));
      // iter(1), for x in None: the TypeError Python raises, raised in the traced program.
      if (!iter) return PyErr_ExceptionMatches(PyExc_TypeError) ? t.raisePython() : t.failFromPython("iterating a constant");
      std::vector<ValuePtr> items;
      while (Ref item = Ref::steal(PyIter_Next(iter.get()))) {
        if (!isConstantObject(item.get())) return t.fail("iterating a constant gave a non-constant");
        items.push_back(Value::constant(item.get()));
      }
      if (PyErr_Occurred()) return t.failFromPython("iterating a constant");
      return Value::iterator(std::move(items), reinterpret_cast<PyObject*>(Py_TYPE(iter.get())));
    }
    case Kind::Module:
      return moduleIter(t, obj);
    case Kind::DictView: {
      // What the dict holds now.
      const DictView& view = obj->as<DictView>();
      const Dict& d = view.dict->as<Dict>();
      std::vector<ValuePtr> items;
      for (size_t i = 0; i < d.keys.size(); ++i) {
        if (view.which == DictView::Values) {
          items.push_back(d.values[i]);
          continue;
        }
        Result<ValuePtr> kv = keyValueOf(t, d.keys[i].get());
        if (!kv) return kv;
        if (view.which == DictView::Keys) items.push_back(kv.take());
        else items.push_back(Value::tuple({kv.take(), d.values[i]}));
      }
      return sequenceIterator(view.dict, std::move(items), iteratorTypeFor(t, lookup(Obj::builtins_iter), obj),
                              view.which, false);
    }
    case Kind::Null:
    case Kind::Tensor:
    case Kind::Slice:
    case Kind::Callable:
    case Kind::BoundMethod:
    case Kind::NamedMethod:
    case Kind::PyModule:
    case Kind::Cell:
    case Kind::Function:
    case Kind::Super:
    case Kind::Partial:
    case Kind::Context:
    case Kind::Namespace:
    case Kind::NdArray:
    case Kind::SubclassTensor:
      break;
  }
  return t.fail(std::string("iterating ") + describe(obj) + " is not supported yet");
}

namespace {
Ref ref_int(long v) { return Ref::steal(PyLong_FromLong(v)); }
}  // namespace

Result<ValuePtr> lenDunderResult(Tracer& t, const ValuePtr& r) {
  if (PyObject* c = r->constant()) {
    if (!PyLong_Check(c))
      return t.raiseNew(PyExc_TypeError, std::string("'") + Py_TYPE(c)->tp_name + "' object cannot be interpreted as an integer");
    int overflow = 0;
    long long n = PyLong_AsLongLongAndOverflow(c, &overflow);
    if (n == -1 && PyErr_Occurred()) return t.failFromPython("__len__()");
    if (overflow > 0) return t.raiseNew(PyExc_OverflowError, "cannot fit 'int' into an index-sized integer");
    if (n < 0 || overflow < 0) return t.raiseNew(PyExc_ValueError, "__len__() should return >= 0");
    if (PyBool_Check(c)) return Value::constant(c == Py_True ? ref_int(1).get() : ref_int(0).get());  // len() gives the int
    return r;
  }
  if (isScalarValue(t, r) && scalarType(t, r) == reinterpret_cast<PyObject*>(&PyLong_Type)) return r;
  return t.fail("__len__() returned a value that is not a known int");
}

namespace {

// The truth of what a class's __bool__ (or __len__) returned, as Python's truth test takes it:
// __bool__ must give a bool (a symbolic one too), else TypeError in the program; __len__ an
// int >= 0 (lenDunderResult).
Result<bool> dunderTruth(Tracer& t, Str dunder, const ValuePtr& r) {
  if (dunder == Str::dunder_len) {
    Result<ValuePtr> n = lenDunderResult(t, r);
    if (!n) return n.stop();
    return truthValue(t, *n);
  }
  PyObject* type = typeOf(t, r);
  if (!type || !PyType_Check(type)) return t.fail("__bool__() returned a value whose type is not known");
  if (type != reinterpret_cast<PyObject*>(&PyBool_Type))
    return t.raiseNew(PyExc_TypeError,
                      std::string("__bool__ should return bool, returned ") + reinterpret_cast<PyTypeObject*>(type)->tp_name);
  return truthValue(t, r);
}

}  // namespace

Result<bool> truthValue(Tracer& t, const ValuePtr& v) {
  switch (v->kind()) {
    case Kind::Constant: {
      int truth = PyObject_IsTrue(v->constant());
      if (truth < 0) return t.failFromPython("truth value of a constant");
      return truth != 0;
    }
    case Kind::Tuple:
    case Kind::List:
    case Kind::Set:
      return !v->elements()->empty();
    case Kind::Dict:
      return !v->as<Dict>().values.empty();
    case Kind::DictView:
      return !v->as<DictView>().dict->as<Dict>().values.empty();
    case Kind::Function:
    case Kind::Cell:
    case Kind::Context:
    case Kind::Namespace:  // no __bool__ or __len__
      return true;
    case Kind::Object:
    case Kind::NewObject: {
      // Python's order: __bool__, then __len__, else true.
      for (Str dunder : {Str::dunder_bool, Str::dunder_len}) {
        Result<ValuePtr> r = callDunder(t, v, interned(dunder), {});
        if (r.notHandled()) continue;
        if (!r) return r.stop();
        return dunderTruth(t, dunder, *r);
      }
      // No __bool__ or __len__ the trace can run: a C type's own (collections.deque,
      // array.array, a C base of the class) still decides, from the object's state. An
      // object from the program is measured for real, its length guarded; otherwise the
      // truth is not known here (taken as true, an empty deque went down the wrong branch).
      PyTypeObject* tp = v->is(Kind::Object) && v->real()
                             ? Py_TYPE(v->real())
                             : v->is(Kind::NewObject) && PyType_Check(v->as<NewObject>().cls.get())
                                   ? reinterpret_cast<PyTypeObject*>(v->as<NewObject>().cls.get())
                                   : nullptr;
      if (!tp) return t.fail("the truth value of " + describe(v) + " is not known to the trace");
      const bool has_bool = tp->tp_as_number && tp->tp_as_number->nb_bool;
      const bool has_len = (tp->tp_as_mapping && tp->tp_as_mapping->mp_length) ||
                           (tp->tp_as_sequence && tp->tp_as_sequence->sq_length);
      if (!has_bool && !has_len) return true;
      if (has_bool || !v->is(Kind::Object) || v->reg < 0)
        return t.fail(std::string("the truth value of a ") + tp->tp_name + " object (a C type's own) is not modelled");
      Py_ssize_t n = PyObject_Length(v->real());  // a C slot: no Python code runs
      if (n < 0) return t.failFromPython("the length of an object");
      t.guards().checkLength(v->reg, n);
      return n != 0;
    }
    case Kind::Super:
    case Kind::Partial:
      return true;
    case Kind::Tensor:
      if (isScalarValue(t, v)) {
        // A symbolic size (or an expression of sizes) has a hint: the branch follows it,
        // and the ShapeEnv records the guard that keeps it so (compiled into the entry's
        // shape guards). An unbacked value read from a tensor has none.
        static Ref& shapes = *new Ref();  // Note [Python references in statics] (support/pyref.h)
        if (!shapes) shapes = Ref::steal(PyImport_ImportModule("cdynamo._shapes"));
        Ref truth = shapes ? Ref::steal(PyObject_CallMethod(shapes.get(), "truth", "O",
                                                            t.graph().fake(v->as<Tensor>().node)))
                           : Ref();
        if (!truth) return t.failFromPython("the truth of a symbolic size");
        if (truth.get() != Py_None) return truth.get() == Py_True;
        return t.fail("control flow depends on a value read from a tensor (Tensor.item()): a data-dependent branch");
      }
      return t.fail("control flow depends on a tensor's value (data-dependent branch)");
    case Kind::NdArray:
      return t.fail("control flow depends on a numpy array's value (data-dependent branch)");
    case Kind::SubclassTensor:
      return t.fail("control flow depends on a tensor subclass instance's value (data-dependent branch)");
    case Kind::Callable:
    case Kind::PyModule:
    case Kind::BoundMethod:
    case Kind::NamedMethod:
      return true;
    case Kind::Module: {
      // As for objects: the class's __bool__, then its __len__ (both traced, their class
      // attributes guarded), else true; a container's length from its guarded children.
      if (isModuleContainer(v, interned(Str::dunder_len)) &&
          !_PyType_Lookup(Py_TYPE(v->real()), interned(Str::dunder_bool))) {  // no __bool__: its length decides
        std::vector<std::pair<Ref, ValuePtr>> children;
        if (Done d = moduleContainerItems(t, v, &children); !d) return d.stop();
        return !children.empty();
      }
      for (Str dunder : {Str::dunder_bool, Str::dunder_len}) {
        Result<ValuePtr> r = callModuleDunder(t, v, interned(dunder), {});
        if (r.notHandled()) continue;
        if (!r) return r.stop();
        return dunderTruth(t, dunder, *r);
      }
      return true;
    }
    case Kind::Slice:
      return true;
    case Kind::Null:
    case Kind::Iterator:
      break;
  }
  return t.fail(std::string("truth value of ") + describe(v));
}

Result<bool> identical(Tracer& t, const ValuePtr& a, const ValuePtr& b) {
  if (a == b) return true;  // the same value: the same object
  if (a->is(Kind::SubclassTensor) || b->is(Kind::SubclassTensor)) return subclassIdentical(t, a, b);
  if (a->real() && b->real()) return a->real() == b->real();
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
  Args a{item};
  Kwargs kw;
  bool mapping = container->is(Kind::Dict) || container->is(Kind::Set);
  if (!mapping && !container->is(Kind::List) && !container->is(Kind::Tuple))
    return t.fail(std::string("`in` on ") + describe(container) + " is not supported yet");
  Result<ValuePtr> c = callContainerMethod(t, container, interned(Str::dunder_contains), a, kw);
  if (!c) return c.stop();
  return PyObject_IsTrue((*c)->constant()) != 0;
}

Done iterate(Tracer& t, const ValuePtr& v, std::vector<ValuePtr>* out) {
  if (Done d = peekItems(t, v, out); !d) return d;
  if (const Iterator* it = v->get<Iterator>())
    return t.iterators().advance(v, it->items.size(), true);  // consuming it exhausts it
  return {};
}

Done peekItems(Tracer& t, const ValuePtr& v, std::vector<ValuePtr>* out) {
  if (Done d = t.iterators().usable(v.get()); !d) return d;
  Result<ValuePtr> got = getIter(t, v);
  if (!got) return got.stop();
  if (Done d = drainUserIterator(t, *got); !d) return d;
  if (Done d = dequeUnchanged(t, *got); !d) return d;
  const Iterator& it = (*got)->as<Iterator>();
  out->assign(it.items.begin() + static_cast<std::ptrdiff_t>(std::min(it.pos, it.items.size())), it.items.end());
  return {};
}

}  // namespace cdynamo::trace
