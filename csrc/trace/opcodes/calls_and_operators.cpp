// Handlers of calls, operators and value-building instructions (handlers.h).
#include <string>

#include "bytecode/version.h"
#include "support/lookup.h"
#include "trace/engine/graph_calls.h"
#include "trace/kinds/iterator.h"
#include "trace/kinds/object.h"
#include "trace/kinds/set.h"
#include "trace/kinds/tensor_subclass.h"
#include "trace/opcodes/handlers.h"
#include "trace/protocol/calls.h"
#include "trace/protocol/operators.h"
#include "trace/tracer.h"

namespace cdynamo::trace {

namespace {

// The value of `r`, placed as the instruction's only output.
Result<Next> give(Result<ValuePtr> r, Values& io) {
  if (!r) return r.stop();
  io.assign(1, r.take());
  return Next::Fall;
}

Result<Next> giveBool(bool b, Values& io) {
  io.assign(1, Value::constant(b ? Py_True : Py_False));
  return Next::Fall;
}

}  // namespace

Result<Next> opKwNames(Tracer&, SymbolicFrame& f, const bytecode::Instruction& ins, Values&) {
  f.kwnames = Ref::borrow(PyTuple_GET_ITEM(f.code->co_consts, ins.arg));
  return Next::Fall;
}

Result<Next> opCall(Tracer& t, SymbolicFrame& f, const bytecode::Instruction& ins, Values& io) {
  // Stack: [callable_or_NULL, self_or_callable, arg1 .. argN] (3.11 convention).
  Args args(io.begin() + 2, io.end());
  ValuePtr fn;
  if (io[0]->is(Kind::Null)) {
    fn = io[1];
  } else {
    fn = io[0];
    args.insert(args.begin(), io[1]);
  }
  Kwargs kwargs;
  if (f.kwnames) {
    Py_ssize_t nk = PyTuple_GET_SIZE(f.kwnames.get());
    size_t npos = args.size() - static_cast<size_t>(nk);
    for (Py_ssize_t k = 0; k < nk; ++k)
      kwargs.emplace_back(Ref::borrow(PyTuple_GET_ITEM(f.kwnames.get(), k)), args[npos + static_cast<size_t>(k)]);
    args.resize(npos);
    f.kwnames.reset();
  }
  return give(call(t, fn, std::move(args), std::move(kwargs)), io);
}

Result<Next> opBinaryOp(Tracer& t, SymbolicFrame&, const bytecode::Instruction& ins, Values& io) {
  if (!bytecode::binaryOpKnown(ins.arg)) return t.fail("unknown BINARY_OP argument " + std::to_string(ins.arg));
  return give(binaryOp(t, static_cast<bytecode::BinaryOp>(ins.arg), io[0], io[1]), io);
}

Result<Next> opUnaryNegative(Tracer& t, SymbolicFrame&, const bytecode::Instruction&, Values& io) {
  return give(unaryOp(t, UnaryOp::Negative, io[0]), io);
}
Result<Next> opUnaryPositive(Tracer& t, SymbolicFrame&, const bytecode::Instruction&, Values& io) {
  return give(unaryOp(t, UnaryOp::Positive, io[0]), io);
}
Result<Next> opUnaryInvert(Tracer& t, SymbolicFrame&, const bytecode::Instruction&, Values& io) {
  return give(unaryOp(t, UnaryOp::Invert, io[0]), io);
}
Result<Next> opUnaryNot(Tracer& t, SymbolicFrame&, const bytecode::Instruction&, Values& io) {
  return give(unaryOp(t, UnaryOp::Not, io[0]), io);
}

Result<Next> opCompareOp(Tracer& t, SymbolicFrame&, const bytecode::Instruction& ins, Values& io) {
  return give(compareOp(t, bytecode::compareOpOf(ins.arg), io[0], io[1]), io);
}

Result<Next> opIsOp(Tracer& t, SymbolicFrame&, const bytecode::Instruction& ins, Values& io) {
  Result<bool> same = identical(t, io[0], io[1]);
  if (!same) return same.stop();
  return giveBool(*same != (ins.arg != 0), io);
}

Result<Next> opContainsOp(Tracer& t, SymbolicFrame&, const bytecode::Instruction& ins, Values& io) {
  // Stack: item, container.
  Result<bool> in = contains(t, io[1], io[0]);
  if (!in) return in.stop();
  return giveBool(*in != (ins.arg != 0), io);
}

Result<Next> opBinarySubscr(Tracer& t, SymbolicFrame&, const bytecode::Instruction&, Values& io) {
  return give(subscript(t, io[0], io[1]), io);
}

Result<Next> opStoreSubscr(Tracer& t, SymbolicFrame&, const bytecode::Instruction&, Values& io) {
  // Stack: value, object, index.
  const ValuePtr& value = io[0];
  const ValuePtr& obj = io[1];
  const ValuePtr& index = io[2];
  if (obj->is(Kind::SubclassTensor) || index->is(Kind::SubclassTensor) || value->is(Kind::SubclassTensor)) {
    Result<ValuePtr> r = subclassOperator(t, "setitem", {obj, index, value});
    if (!r) return r.stop();
  } else if (!obj->is(Kind::Tensor)) {
    if (Done d = storeSubscript(t, obj, index, value); !d) return d.stop();
  } else {
    PyObject* setitem = lookup(Obj::operator_setitem);
    if (!setitem) return t.failFromPython("operator.setitem");
    Result<ValuePtr> r = recordCall(t, graph::NodeOp::CallFunction, setitem, {obj, index, value}, {});
    if (!r) return r.stop();
  }
  io.clear();
  return Next::Fall;
}

Result<Next> opBuildSequence(Tracer&, SymbolicFrame&, const bytecode::Instruction& ins, Values& io) {
  ValuePtr built = ins.op == bytecode::Op::BUILD_TUPLE ? Value::tuple(io) : Value::list(io);
  io.assign(1, std::move(built));
  return Next::Fall;
}

Result<Next> opListToTuple(Tracer& t, SymbolicFrame&, const bytecode::Instruction&, Values& io) {
  const List* list = io[0]->get<List>();
  if (!list) return t.fail("LIST_TO_TUPLE on a non-list");
  io.assign(1, Value::tuple(list->items));
  return Next::Fall;
}

Result<Next> opListExtend(Tracer& t, SymbolicFrame&, const bytecode::Instruction&, Values& io) {
  // LIST_EXTEND i: the list is i below the sequence.
  // What an iterator has left, consuming it.
  std::vector<ValuePtr> items;
  if (Done d = iterate(t, io.back(), &items); !d) return d.stop();
  List& list = io.front()->as<List>();
  for (ValuePtr& v : items) list.items.push_back(std::move(v));
  io.pop_back();
  return Next::Fall;
}

Result<Next> opBuildSlice(Tracer&, SymbolicFrame&, const bytecode::Instruction&, Values& io) {
  if (io.size() == 2) io.push_back(Value::constant(Py_None));
  ValuePtr slice = Value::of(Slice{{io[0], io[1], io[2]}});
  io.assign(1, std::move(slice));
  return Next::Fall;
}

Result<Next> opUnpackSequence(Tracer& t, SymbolicFrame&, const bytecode::Instruction& ins, Values& io) {
  const int arg = ins.arg;
  std::vector<ValuePtr> items;  // what an iterator has left, consuming it
  if (Done d = iterate(t, io[0], &items); !d) return d.stop();
  if (items.size() > static_cast<size_t>(arg))
    return t.raiseNew(PyExc_ValueError, "too many values to unpack (expected " + std::to_string(arg) + ")");
  if (items.size() < static_cast<size_t>(arg))
    return t.raiseNew(PyExc_ValueError, "not enough values to unpack (expected " + std::to_string(arg) + ", got " +
                                            std::to_string(items.size()) + ")");
  io.assign(items.rbegin(), items.rend());
  return Next::Fall;
}

namespace {

// repr() of a list, tuple, plain dict or set made of constants (nested ones too), as Python
// writes it: a set's items in the order walking it meets them (its history decides:
// setIterationOrder), which a real set rebuilt from the items would not keep. Null
// without an error when some part is not such a value (a tensor, an object).
Ref containerRepr(Tracer& t, const ValuePtr& v, int depth = 0) {
  if (depth > 50) return Ref();
  if (PyObject* c = v->constant()) return Ref::steal(PyObject_Repr(c));
  std::vector<ValuePtr> items;
  std::string open, close;
  const Dict* dict = v->get<Dict>();
  if (const Set* s = v->get<Set>()) {
    items = setIterationOrder(*s);
    if (items.empty()) return Ref::steal(PyUnicode_FromString(s->frozen ? "frozenset()" : "set()"));
    open = s->frozen ? "frozenset({" : "{";
    close = s->frozen ? "})" : "}";
  } else if (v->is(Kind::List) && !v->as<List>().deque) {
    items = v->as<List>().items;
    open = "[", close = "]";
  } else if (const Tuple* tu = v->get<Tuple>(); tu && !tu->namedtuple) {
    items = tu->items;
    open = "(", close = items.size() == 1 ? ",)" : ")";
  } else if (dict && dict->type.get() == reinterpret_cast<PyObject*>(&PyDict_Type)) {
    open = "{", close = "}";
  } else {
    return Ref();
  }
  std::string out = open;
  size_t n = dict ? dict->keys.size() : items.size();
  for (size_t i = 0; i < n; ++i) {
    if (i) out += ", ";
    if (dict) {
      Ref k = Ref::steal(PyObject_Repr(dict->keys[i].get()));
      if (!k) return Ref();
      out += PyUnicode_AsUTF8(k.get());
      out += ": ";
    }
    Ref r = containerRepr(t, dict ? dict->values[i] : items[i], depth + 1);
    if (!r) return Ref();
    const char* text = PyUnicode_AsUTF8(r.get());
    if (!text) return Ref();
    out += text;
  }
  out += close;
  return Ref::steal(PyUnicode_FromStringAndSize(out.data(), static_cast<Py_ssize_t>(out.size())));
}

}  // namespace

Result<Next> opFormatValue(Tracer& t, SymbolicFrame&, const bytecode::Instruction& ins, Values& io) {
  // f-string pieces of constants: format with CPython's own conversion rules.
  const int arg = ins.arg;
  Ref spec;
  if ((arg & 0x04) == 0x04) spec = Ref::borrow(io[1]->constant());
  const ValuePtr& v = io[0];
  PyObject* c = v->constant();
  if (!c && !spec) {
    Result<ValuePtr> s = userObjectFormat(t, v, arg & 0x03);
    if (!s.notHandled()) {
      if (!s) return s.stop();
      io.assign(1, s.take());
      return Next::Fall;
    }
  }
  if (!c && !spec && (arg & 0x03) != 3) {
    // A container of constants: f"{s}" and f"{s!r}" are its repr (str and format with an
    // empty spec are repr for these types).
    Ref r = containerRepr(t, v);
    PyErr_Clear();
    if (r) {
      io.assign(1, Value::constant(r.get()));
      return Next::Fall;
    }
  }
  if (!c) return t.fail(std::string("formatting ") + describe(v) + " in an f-string is not supported yet");
  Ref conv;
  switch (arg & 0x03) {
    case 1: conv = Ref::steal(PyObject_Str(c)); break;
    case 2: conv = Ref::steal(PyObject_Repr(c)); break;
    case 3: conv = Ref::steal(PyObject_ASCII(c)); break;
    default: conv = Ref::borrow(c);
  }
  if (!conv) return t.failFromPython("f-string conversion");
  Ref out = Ref::steal(PyObject_Format(conv.get(), spec.get()));
  if (!out) return t.failFromPython("f-string formatting");
  io.assign(1, Value::constant(out.get()));
  return Next::Fall;
}

Result<Next> opBuildString(Tracer& t, SymbolicFrame&, const bytecode::Instruction& ins, Values& io) {
  Ref tuple = Ref::steal(PyTuple_New(ins.arg));
  if (!tuple) return t.failFromPython("BUILD_STRING");
  for (int k = 0; k < ins.arg; ++k) {
    PyObject* part = io[static_cast<size_t>(k)]->constant();
    if (!part || !PyUnicode_Check(part)) return t.fail("BUILD_STRING of non-strings");
    PyTuple_SET_ITEM(tuple.get(), k, Ref::borrow(part).release());
  }
  Ref empty = Ref::steal(PyUnicode_FromString(""));
  Ref joined = Ref::steal(empty ? PyUnicode_Join(empty.get(), tuple.get()) : nullptr);
  if (!joined) return t.failFromPython("BUILD_STRING");
  io.assign(1, Value::constant(joined.get()));
  return Next::Fall;
}

}  // namespace cdynamo::trace
