// Operations on symbolic values: Python operators, subscripts, iteration and truth.
// Each is one decision over value kinds: tensors go to the graph, constants are computed
// with the real Python operation (exact semantics), containers are rebuilt.
#include <cstring>
#include <string>

#include "support/lookup.h"
#include "support/torch_types.h"
#include "trace/scalars.h"
#include "trace/tracer.h"

namespace cdynamo::trace {

using graph::NodeOp;

namespace {

// BINARY_OP's argument indexes this table (CPython 3.11 NB_* order).
const char* const kBinaryOps[] = {
    "add",  "and_", "floordiv", "lshift", "matmul", "mul",  "mod",       "or_",  "pow",
    "rshift", "sub", "truediv", "xor",
    "iadd", "iand", "ifloordiv", "ilshift", "imatmul", "imul", "imod", "ior", "ipow",
    "irshift", "isub", "itruediv", "ixor"};
const Obj kBinaryOpFns[] = {
    Obj::operator_add,     Obj::operator_and_,      Obj::operator_floordiv, Obj::operator_lshift,
    Obj::operator_matmul,  Obj::operator_mul,       Obj::operator_mod,      Obj::operator_or_,
    Obj::operator_pow,     Obj::operator_rshift,    Obj::operator_sub,      Obj::operator_truediv,
    Obj::operator_xor,     Obj::operator_iadd,      Obj::operator_iand,     Obj::operator_ifloordiv,
    Obj::operator_ilshift, Obj::operator_imatmul,   Obj::operator_imul,     Obj::operator_imod,
    Obj::operator_ior,     Obj::operator_ipow,      Obj::operator_irshift,  Obj::operator_isub,
    Obj::operator_itruediv, Obj::operator_ixor};
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
    PyObject* t = v->constant();
    out->clear();
    for (Py_ssize_t i = 0; i < PyTuple_GET_SIZE(t); ++i) out->push_back(Value::constant(PyTuple_GET_ITEM(t, i)));
    return true;
  }
  return false;
}

bool holdsTensorResult(PyObject* o) {
  return (PyTuple_Check(o) || PyList_Check(o));
}

}  // namespace

// ------------------------------------------------- numbers read from tensors (scalars.h)

bool isScalarValue(Tracer& t, const ValuePtr& v) {
  const Tensor* tensor = v->get<Tensor>();
  return tensor && t.graph().isScalar(tensor->node);
}

PyObject* scalarType(Tracer& t, const ValuePtr& v) {
  const char* n = Py_TYPE(t.graph().fake(v->as<Tensor>().node))->tp_name;
  if (strcmp(n, "SymFloat") == 0) return reinterpret_cast<PyObject*>(&PyFloat_Type);
  if (strcmp(n, "SymBool") == 0) return reinterpret_cast<PyObject*>(&PyBool_Type);
  return reinterpret_cast<PyObject*>(&PyLong_Type);
}

Result<ValuePtr> readTensorValue(Tracer& t, const ValuePtr& v, const char* how) {
  auto is = [how](const char* n) { return strcmp(how, n) == 0; };
  std::string op = is("item") ? "Tensor.item()" : std::string(how) + "() of a tensor";
  std::string reads = is("item") ? " reads a tensor's value" : " reads its value";
  if (is("tolist"))  // torch._dynamo does not capture it either
    return t.fail("Tensor.tolist() reads a tensor's values into Python lists (not capturable)");
  bool scalar = isScalarValue(t, v);
  if (!scalar && !t.graph().capturesScalars())
    return t.fail(op + reads + " (set cdynamo.config.capture_scalar_outputs=True to keep it in the graph)");
  ValuePtr s = v;
  if (!scalar) {
    Result<ValuePtr> item = t.recordCall(NodeOp::CallMethod, interned(Str::item), {v}, {});
    if (!item) return item;
    s = item.take();
  }
  if (is("item")) return s;
  if (s->is(Kind::Constant)) {  // the fake tensor held a constant (torch.tensor(2.0) made in the trace)
    PyTypeObject* type = is("int") ? &PyLong_Type : is("float") ? &PyFloat_Type : &PyBool_Type;
    Ref r = Ref::steal(PyObject_CallOneArg(reinterpret_cast<PyObject*>(type), s->constant()));
    if (!r) return t.raisePython();
    return Value::constant(r.get());
  }
  if (!isScalarValue(t, s)) return t.fail(op + ": Tensor.item() did not give a number");
  // The conversions torch._dynamo records: int() of a float is torch.sym_int, float() of
  // an int torch.sym_float, bool() of a number `!= 0`; of the same type, nothing.
  PyObject* type = scalarType(t, s);
  PyObject* target = nullptr;
  std::vector<ValuePtr> args{s};
  if (is("float")) {
    if (type == reinterpret_cast<PyObject*>(&PyFloat_Type)) return s;
    target = lookup(Obj::torch_sym_float);
  } else if (is("int")) {
    if (type == reinterpret_cast<PyObject*>(&PyLong_Type)) return s;
    target = lookup(Obj::torch_sym_int);
  } else if (is("bool")) {
    if (type == reinterpret_cast<PyObject*>(&PyBool_Type)) return s;
    target = lookup(Obj::operator_ne);
    args.push_back(Value::constant(Ref::steal(PyLong_FromLong(0)).get()));
  } else {
    return t.fail(std::string("reading a tensor's value as ") + how + " is not supported");
  }
  if (!target) return t.failFromPython(op);
  return t.recordCall(NodeOp::CallFunction, target, args, {});
}

Done Tracer::toArg(const ValuePtr& v, graph::Arg* out) {
  auto items = [&](graph::Arg::Kind k, const ValuePtr* begin, const ValuePtr* end) -> Done {
    std::vector<graph::Arg> args(static_cast<size_t>(end - begin));
    for (size_t i = 0; i < args.size(); ++i)
      if (Done d = toArg(begin[i], &args[i]); !d) return d;
    *out = graph::Arg::ofItems(k, std::move(args));
    return {};
  };
  switch (v->kind()) {
    case Kind::Tensor:
      *out = graph::Arg::ofNode(v->as<Tensor>().node);
      return {};
    case Kind::Constant:
      *out = graph::Arg::ofConst(v->constant());
      return {};
    case Kind::Tuple: {
      const std::vector<ValuePtr>& t = v->as<Tuple>().items;
      return items(graph::Arg::Kind::Tuple, t.data(), t.data() + t.size());
    }
    case Kind::List: {
      const std::vector<ValuePtr>& l = v->as<List>().items;
      return items(graph::Arg::Kind::List, l.data(), l.data() + l.size());
    }
    case Kind::Slice: {
      const auto& parts = v->as<Slice>().parts;
      return items(graph::Arg::Kind::Slice, parts.data(), parts.data() + parts.size());
    }
    case Kind::Null:
    case Kind::Iterator:
    case Kind::Callable:
    case Kind::BoundMethod:
    case Kind::NamedMethod:
    case Kind::Module:
    case Kind::PyModule:
    case Kind::Dict:
    case Kind::Set:
    case Kind::Cell:
    case Kind::Function:
    case Kind::Object:
    case Kind::Context:
    case Kind::NewObject:
    case Kind::Super:
    case Kind::Partial:
      break;
  }
  return fail(std::string("a ") + kindName(v->kind()) + " cannot be passed to a graph operation");
}

Result<ValuePtr> Tracer::recordCall(NodeOp op, PyObject* target, const std::vector<ValuePtr>& args,
                                    const std::vector<std::pair<Ref, ValuePtr>>& kwargs) {
  std::vector<graph::Arg> gargs(args.size());
  for (size_t i = 0; i < args.size(); ++i)
    if (Done d = toArg(args[i], &gargs[i]); !d) return d.stop();
  std::vector<std::pair<Ref, graph::Arg>> gkwargs;
  for (const auto& [k, v] : kwargs) {
    // out= writes into a tensor the trace holds as another value: the write would be a
    // node nothing reads (dropped) and later reads would see the old value.
    if (PyUnicode_CompareWithASCIIString(k.get(), "out") == 0 && !v->isNone())
      return fail("a torch operation with out= is not supported yet");
    graph::Arg a;
    if (Done d = toArg(v, &a); !d) return d.stop();
    gkwargs.emplace_back(k.copy(), std::move(a));
  }
  Ref plain;
  int node = graph_.addCall(op, target, std::move(gargs), std::move(gkwargs), &plain);
  if (node == graph::GraphBuilder::kNoTensorResult) {
    if (!isConstantObject(plain.get()))
      return fail(std::string("operation returned a non-tensor value of type ") + Py_TYPE(plain.get())->tp_name);
    return Value::constant(plain.get());
  }
  if (node < 0) {
    std::string what = op == NodeOp::CallMethod ? std::string("Tensor.") + PyUnicode_AsUTF8(target)
                                                : std::string("a call of ") + Py_TYPE(target)->tp_name;
    if (op != NodeOp::CallMethod) {
      Ref name = Ref::steal(PyObject_GetAttrString(target, "__name__"));
      if (name && PyUnicode_Check(name.get())) what = PyUnicode_AsUTF8(name.get());
      else PyErr_Clear();
    }
    return failFromPython("running " + what + " on fake tensors");
  }
  if (inGenerator() && graph_.node(node).impure)
    return fail("an in-place tensor operation inside a generator that is run in place");
  PyObject* fake = graph_.fake(node);
  if (isTensor(fake)) return Value::tensor(node);
  if (graph_.isScalar(node)) return Value::tensor(node);  // a number read from a tensor (scalars.h)
  if (!holdsTensorResult(fake)) return Value::constant(isConstantObject(fake) ? fake : Py_None);
  // A tuple or list of tensors (torch.split, x.chunk, torch.max(x, dim), ...): one
  // getitem node per element, as FX does.
  PyObject* getitem = lookup(Obj::operator_getitem);
  if (!getitem) return failFromPython("operator.getitem");
  std::vector<ValuePtr> items;
  for (Py_ssize_t i = 0; i < PySequence_Fast_GET_SIZE(fake); ++i) {
    Ref index = Ref::steal(PyLong_FromSsize_t(i));
    if (!index) return failFromPython("indexing a tuple result");
    Ref unused;
    std::vector<graph::Arg> item_args;
    item_args.push_back(graph::Arg::ofNode(node));
    item_args.push_back(graph::Arg::ofConst(index.get()));
    int item = graph_.addCall(NodeOp::CallFunction, getitem, std::move(item_args), {}, &unused);
    if (item == graph::GraphBuilder::kNoTensorResult) {
      items.push_back(Value::constant(unused.get()));
      continue;
    }
    if (item < 0) return failFromPython("indexing a tuple result");
    items.push_back(Value::tensor(item));
  }
  return PyList_Check(fake) ? Value::list(std::move(items)) : Value::tuple(std::move(items));
}

Result<ValuePtr> Tracer::binaryOp(int op, const ValuePtr& a, const ValuePtr& b) {
  if (op < 0 || op >= static_cast<int>(sizeof(kBinaryOps) / sizeof(kBinaryOps[0])))
    return fail("unknown BINARY_OP argument " + std::to_string(op));
  PyObject* fn = lookup(kBinaryOpFns[op]);
  if (!fn) return failFromPython("operator lookup");
  if (isUserObject(a) || isUserObject(b)) {
    // Python-level operators: a.__op__(b), then b.__rop__(a); in-place falls back to binary.
    std::string name = kBinaryOps[op];
    if (name.back() == '_') name.pop_back();  // and_, or_
    bool inplace = op >= 13;
    std::string base = inplace ? name.substr(1) : name;
    // A method that returns NotImplemented passes the turn to the next candidate.
    auto answered = [](const Result<ValuePtr>& r) {
      if (r.notHandled()) return false;
      return !r || (*r)->constant() != Py_NotImplemented;
    };
    auto tryDunder = [&](const ValuePtr& self, const std::string& dunder, const ValuePtr& other) -> Result<ValuePtr> {
      Ref method = internedName(dunder);
      if (!method) return failFromPython("a special method's name");
      return callDunder(self, method.get(), {other});
    };
    if (inplace) {
      Result<ValuePtr> r = tryDunder(a, "__" + name + "__", b);
      if (answered(r)) return r;
    }
    Result<ValuePtr> r = tryDunder(a, "__" + base + "__", b);
    if (answered(r)) return r;
    r = tryDunder(b, "__r" + base + "__", a);
    if (answered(r)) return r;
    return raiseNew(PyExc_TypeError, "unsupported operand type(s) for " + base);
  }
  if (a->is(Kind::Tensor) || b->is(Kind::Tensor)) return recordCall(NodeOp::CallFunction, fn, {a, b}, {});
  if (a->is(Kind::Constant) && b->is(Kind::Constant)) {
    Ref r = Ref::steal(PyObject_CallFunctionObjArgs(fn, a->constant(), b->constant(), nullptr));
    if (!r) return raisePython();
    if (!isConstantObject(r.get())) return fail("operator on constants returned a non-constant");
    return Value::constant(r.get());
  }
  // Sets, and a constant with a container of constants ("%s=%d" % (name, n)): compute.
  if ((a->is(Kind::Set) || b->is(Kind::Set) || a->is(Kind::Constant)) && op != 13 && op != 18) {
    Ref pa = toPython(a), pb = pa ? toPython(b) : Ref();
    if (pa && pb) {
      Ref r = Ref::steal(PyObject_CallFunctionObjArgs(fn, pa.get(), pb.get(), nullptr));
      if (!r) return failFromPython(std::string("operator.") + kBinaryOps[op]);
      return fromPython(r.get());
    }
  }
  std::vector<ValuePtr> left, right;
  const int kAdd = 0, kMul = 5, kIAdd = 13, kIMul = 18;
  if ((op == kAdd || op == kIAdd) && sequenceItems(a, &left) && sequenceItems(b, &right) &&
      (a->is(Kind::Constant) || b->is(Kind::Constant) || a->kind() == b->kind())) {
    if (op == kIAdd && a->is(Kind::List)) return fail("in-place list += is not supported yet");
    left.insert(left.end(), right.begin(), right.end());
    Kind k = a->is(Kind::List) || b->is(Kind::List) ? Kind::List : Kind::Tuple;
    return Value::sequence(k, std::move(left));
  }
  if ((op == kMul || op == kIMul) && sequenceItems(a, &left) && b->is(Kind::Constant) &&
      PyLong_CheckExact(b->constant()) && !a->is(Kind::Constant)) {
    long n = PyLong_AsLong(b->constant());
    std::vector<ValuePtr> out;
    for (long i = 0; i < n; ++i) out.insert(out.end(), left.begin(), left.end());
    return Value::sequence(a->kind(), std::move(out));
  }
  return fail(std::string("operator ") + kBinaryOps[op] + " on " + kindName(a->kind()) + " and " +
              kindName(b->kind()) + " is not supported yet");
}

Result<ValuePtr> Tracer::unaryOp(bytecode::Op op, const ValuePtr& a) {
  if (op == bytecode::Op::UNARY_NOT) {
    Result<bool> t = truthValue(a);
    if (!t) return t.stop();
    return Value::constant(*t ? Py_False : Py_True);
  }
  const char* name = op == bytecode::Op::UNARY_NEGATIVE ? "neg" : op == bytecode::Op::UNARY_POSITIVE ? "pos" : "invert";
  if (isUserObject(a)) {
    Ref method = internedName(std::string("__") + name + "__");
    if (!method) return failFromPython("a special method's name");
    Result<ValuePtr> r = callDunder(a, method.get(), {});
    if (!r.notHandled()) return r;
    return fail(std::string("bad operand type for unary ") + name + " (TypeError)");
  }
  PyObject* fn = lookup(op == bytecode::Op::UNARY_NEGATIVE   ? Obj::operator_neg
                        : op == bytecode::Op::UNARY_POSITIVE ? Obj::operator_pos
                                                             : Obj::operator_invert);
  if (!fn) return failFromPython("operator lookup");
  if (a->is(Kind::Tensor)) return recordCall(NodeOp::CallFunction, fn, {a}, {});
  if (a->is(Kind::Constant)) {
    Ref r = Ref::steal(PyObject_CallOneArg(fn, a->constant()));
    if (!r) return failFromPython(std::string("operator.") + name + " on a constant");
    return Value::constant(r.get());
  }
  return fail(std::string("unary operator on a ") + kindName(a->kind()) + " is not supported yet");
}

Result<ValuePtr> Tracer::compareOp(int op, const ValuePtr& a, const ValuePtr& b) {
  if (op < 0 || op > 5) return fail("unknown COMPARE_OP argument");
  PyObject* fn = lookup(kCompareOpFns[op]);
  if (!fn) return failFromPython("operator lookup");
  if (isUserObject(a) || isUserObject(b)) {
    // Python's rich comparison: a.__op__(b), then b.__reflected__(a), skipping
    // NotImplemented; != falls back to inverting ==; == and != finally to identity.
    static const char* const kReflected[] = {"gt", "ge", "eq", "ne", "lt", "le"};
    auto isNotImplemented = [](const ValuePtr& v) { return v->constant() == Py_NotImplemented; };
    auto tryDunder = [&](const ValuePtr& self, const char* cmp, const ValuePtr& other) -> Result<ValuePtr> {
      Ref method = internedName(std::string("__") + cmp + "__");
      if (!method) return failFromPython("a special method's name");
      return callDunder(self, method.get(), {other});
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
        Result<bool> t = truthValue(*r);
        if (!t) return t.stop();
        return Value::constant(*t ? Py_False : Py_True);
      }
    }
    if (op == Py_EQ || op == Py_NE) {  // identity comparison, as object.__eq__ does
      bool same = a == b || (a->real() && a->real() == b->real());
      return Value::constant((same == (op == Py_EQ)) ? Py_True : Py_False);
    }
    return fail("comparison of objects without the special method (TypeError)");
  }
  if (a->is(Kind::Tensor) || b->is(Kind::Tensor)) return recordCall(NodeOp::CallFunction, fn, {a, b}, {});
  Ref pa = toPython(a), pb = pa ? toPython(b) : Ref();
  if (pa && pb) {
    Ref r = Ref::steal(PyObject_RichCompare(pa.get(), pb.get(), op));
    if (!r) return raisePython();
    if (!isConstantObject(r.get())) return fail("comparison returned a non-constant");
    return Value::constant(r.get());
  }
  return fail(std::string("comparison of ") + kindName(a->kind()) + " and " + kindName(b->kind()) +
              " is not supported yet");
}

Done Tracer::moduleContainerItems(const ValuePtr& m, std::vector<std::pair<Ref, ValuePtr>>* out) {
  // nn.Sequential / ModuleList / ModuleDict hold their children in _modules; their
  // indexing, len and membership are answered from it, with its keys guarded.
  PyObject** dictptr = _PyObject_GetDictPtr(m->as<Module>().obj.get());
  PyObject* modules = dictptr && *dictptr ? PyDict_GetItemString(*dictptr, "_modules") : nullptr;
  if (!modules || !PyDict_Check(modules)) return fail("module without _modules");
  int mreg = load(guards::LoadKind::InstanceDict, m->reg, 0, interned(Str::underscore_modules),
                  guards().sourceName(m->reg) + "._modules");
  guards().checkDictKeys(mreg, modules);
  PyObject *key, *value;
  Py_ssize_t pos = 0;
  while (PyDict_Next(modules, &pos, &key, &value)) {
    int reg = load(guards::LoadKind::DictItem, mreg, 0, key,
                   guards().sourceName(mreg) + "['" + PyUnicode_AsUTF8(key) + "']");
    Result<ValuePtr> v = wrap(value, reg);
    if (!v) return v.stop();
    out->emplace_back(Ref::borrow(key), v.take());
  }
  return {};
}

bool Tracer::isModuleContainer(const ValuePtr& m) {
  if (!m->is(Kind::Module)) return false;
  for (PyObject* t = reinterpret_cast<PyObject*>(Py_TYPE(m->as<Module>().obj.get())); t;
       t = reinterpret_cast<PyObject*>(reinterpret_cast<PyTypeObject*>(t)->tp_base)) {
    const char* n = reinterpret_cast<PyTypeObject*>(t)->tp_name;
    if (strcmp(n, "Sequential") == 0 || strcmp(n, "ModuleList") == 0 || strcmp(n, "ModuleDict") == 0) return true;
    if (t == reinterpret_cast<PyObject*>(&PyBaseObject_Type)) break;
  }
  return false;
}

Result<ValuePtr> Tracer::subscript(const ValuePtr& obj, const ValuePtr& index) {
  if (isModuleContainer(obj) && (index->is(Kind::Constant) || index->is(Kind::Slice))) {
    std::vector<std::pair<Ref, ValuePtr>> children;
    if (Done d = moduleContainerItems(obj, &children); !d) return d.stop();
    if (index->constant() && PyUnicode_Check(index->constant())) {
      for (auto& [k, v] : children)
        if (PyUnicode_Compare(k.get(), index->constant()) == 0) return v;
      PyErr_SetObject(PyExc_KeyError, index->constant());
      return raisePython();
    }
    std::vector<ValuePtr> mods;
    for (auto& kv : children) mods.push_back(kv.second);
    ValuePtr list = Value::list(std::move(mods));
    return subscript(list, index);
  }
  if (isUserObject(obj)) {
    Result<ValuePtr> r = callDunder(obj, interned(Str::dunder_getitem), {index});
    if (!r.notHandled()) return r;
    return fail("object is not subscriptable (TypeError)");
  }
  if (obj->is(Kind::Tensor)) {
    PyObject* fn = lookup(Obj::operator_getitem);
    if (!fn) return failFromPython("operator lookup");
    return recordCall(NodeOp::CallFunction, fn, {obj, index}, {});
  }
  const bool sequence = obj->is(Kind::Tuple) || obj->is(Kind::List);
  if (sequence && index->constant()) {
    const std::vector<ValuePtr>& items = *obj->elements();
    PyObject* i = index->constant();
    Py_ssize_t n = static_cast<Py_ssize_t>(items.size());
    if (PyLong_Check(i)) {
      Py_ssize_t k = PyLong_AsSsize_t(i);
      if (k == -1 && PyErr_Occurred()) return failFromPython("index");
      if (k < 0) k += n;
      if (k < 0 || k >= n)
        return raiseNew(PyExc_IndexError, obj->is(Kind::List) ? "list index out of range" : "tuple index out of range");
      return items[static_cast<size_t>(k)];
    }
  }
  if (obj->is(Kind::Dict)) {
    std::vector<ValuePtr> args{index};
    std::vector<std::pair<Ref, ValuePtr>> kwargs;
    return callContainerMethod(obj, interned(Str::dunder_getitem), args, kwargs);
  }
  if (sequence && index->is(Kind::Slice)) {
    const std::vector<ValuePtr>& items = *obj->elements();
    Result<Ref> slice = constantSlice(index->as<Slice>());
    if (!slice) return slice.stop();
    Py_ssize_t start, stop, step, len;
    if (!*slice ||
        PySlice_GetIndicesEx(slice->get(), static_cast<Py_ssize_t>(items.size()), &start, &stop, &step, &len) < 0)
      return failFromPython("slicing a sequence");
    std::vector<ValuePtr> out;
    for (Py_ssize_t k = 0, at = start; k < len; ++k, at += step) out.push_back(items[static_cast<size_t>(at)]);
    return Value::sequence(obj->kind(), std::move(out));
  }
  if (obj->constant() && (index->is(Kind::Constant) || index->is(Kind::Slice))) {
    graph::Arg idx;
    if (Done d = toArg(index, &idx); !d) return d.stop();
    Ref key;
    if (index->constant()) {
      key = Ref::borrow(index->constant());
    } else {
      Result<Ref> slice = constantSlice(index->as<Slice>());
      if (!slice) return slice.stop();
      key = slice.take();
    }
    Ref r = Ref::steal(key ? PyObject_GetItem(obj->constant(), key.get()) : nullptr);
    if (!r) return raisePython();
    if (!isConstantObject(r.get())) return fail("subscript of a constant returned a non-constant");
    return Value::constant(r.get());
  }
  return fail(std::string("subscript of a ") + kindName(obj->kind()) + " by a " + kindName(index->kind()) +
              " is not supported yet");
}

Result<ValuePtr> Tracer::getIter(const ValuePtr& obj) {
  switch (obj->kind()) {
    case Kind::Iterator:
      return obj;
    case Kind::Object:
    case Kind::NewObject: {
      Result<ValuePtr> r = callDunder(obj, interned(Str::dunder_iter), {});
      if (r.notHandled()) return fail("object is not iterable (TypeError)");
      if (!r) return r;
      return getIter(*r);
    }
    case Kind::Tuple:
    case Kind::List:
    case Kind::Set:
      return Value::iterator(*obj->elements());
    case Kind::Dict: {
      std::vector<ValuePtr> keys;
      for (const Ref& k : obj->as<Dict>().keys) keys.push_back(Value::constant(k.get()));
      return Value::iterator(std::move(keys));
    }
    case Kind::Constant: {
      Ref iter = Ref::steal(PyObject_GetIter(obj->constant()));
      if (!iter) return failFromPython("iterating a constant");
      std::vector<ValuePtr> items;
      while (Ref item = Ref::steal(PyIter_Next(iter.get()))) {
        if (!isConstantObject(item.get())) return fail("iterating a constant gave a non-constant");
        items.push_back(Value::constant(item.get()));
      }
      if (PyErr_Occurred()) return failFromPython("iterating a constant");
      return Value::iterator(std::move(items));
    }
    case Kind::Module:
      return moduleIter(obj);
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
      break;
  }
  return fail(std::string("iterating a ") + kindName(obj->kind()) + " is not supported yet");
}

Result<ValuePtr> Tracer::moduleIter(const ValuePtr& obj) {
  // nn.Sequential and nn.ModuleList iterate over their submodules (_modules.values()).
  PyObject* m = obj->as<Module>().obj.get();
  PyObject* type = reinterpret_cast<PyObject*>(Py_TYPE(m));
  Ref iter_fn = Ref::steal(PyObject_GetAttrString(type, "__iter__"));
  Ref qualname = iter_fn ? Ref::steal(PyObject_GetAttrString(iter_fn.get(), "__qualname__")) : Ref();
  PyErr_Clear();
  const char* q = qualname && PyUnicode_Check(qualname.get()) ? PyUnicode_AsUTF8(qualname.get()) : "";
  if (strcmp(q, "Sequential.__iter__") != 0 && strcmp(q, "ModuleList.__iter__") != 0)
    return fail(std::string("iterating a module of type ") + Py_TYPE(m)->tp_name + " is not supported yet");
  PyObject** dictptr = _PyObject_GetDictPtr(m);
  PyObject* modules = dictptr && *dictptr ? PyDict_GetItemString(*dictptr, "_modules") : nullptr;
  if (!modules || !PyDict_Check(modules)) return fail("module without _modules");
  int mreg = load(guards::LoadKind::InstanceDict, obj->reg, 0, interned(Str::underscore_modules),
                  guards().sourceName(obj->reg) + "._modules");
  guards().checkLength(mreg, PyDict_GET_SIZE(modules));
  std::vector<ValuePtr> items;
  PyObject *key, *value;
  Py_ssize_t pos = 0;
  while (PyDict_Next(modules, &pos, &key, &value)) {
    if (value == Py_None) continue;
    int reg =
        load(guards::LoadKind::DictItem, mreg, 0, key, guards().sourceName(mreg) + "['" + PyUnicode_AsUTF8(key) + "']");
    Result<ValuePtr> child = wrap(value, reg);
    if (!child) return child;
    items.push_back(child.take());
  }
  return Value::iterator(std::move(items));
}

Result<bool> Tracer::truthValue(const ValuePtr& v) {
  switch (v->kind()) {
    case Kind::Constant: {
      int t = PyObject_IsTrue(v->constant());
      if (t < 0) return failFromPython("truth value of a constant");
      return t != 0;
    }
    case Kind::Tuple:
    case Kind::List:
    case Kind::Set:
      return !v->elements()->empty();
    case Kind::Dict:
      return !v->as<Dict>().values.empty();
    case Kind::Function:
    case Kind::Cell:
    case Kind::Context:
      return true;
    case Kind::Object:
    case Kind::NewObject: {
      // Python's order: __bool__, then __len__, else true.
      for (Str dunder : {Str::dunder_bool, Str::dunder_len}) {
        Result<ValuePtr> r = callDunder(v, interned(dunder), {});
        if (r.notHandled()) continue;
        if (!r) return r.stop();
        return truthValue(*r);
      }
      return true;
    }
    case Kind::Super:
    case Kind::Partial:
      return true;
    case Kind::Tensor:
      if (isScalarValue(*this, v))
        return fail("control flow depends on a value read from a tensor (Tensor.item()): a data-dependent branch");
      return fail("control flow depends on a tensor's value (data-dependent branch)");
    case Kind::Callable:
    case Kind::PyModule:
    case Kind::BoundMethod:
    case Kind::NamedMethod:
      return true;
    case Kind::Module: {
      int t = PyObject_IsTrue(v->real());
      if (t < 0) return failFromPython("truth value of a module");
      return t != 0;
    }
    case Kind::Slice:
      return true;
    case Kind::Null:
    case Kind::Iterator:
      break;
  }
  return fail(std::string("truth value of a ") + kindName(v->kind()));
}

}  // namespace cdynamo::trace
