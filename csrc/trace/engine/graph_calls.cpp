// Operations recorded in the graph: graph arguments, graph calls (run on fake tensors), and
// numbers read from tensors (scalars.h).
#include <cstring>
#include <string>

#include "support/lookup.h"
#include "support/torch_types.h"
#include "trace/engine/graph_calls.h"
#include "trace/engine/scalars.h"
#include "trace/kinds/sequence.h"
#include "trace/protocol/calls.h"
#include "trace/protocol/constants.h"
#include "trace/tracer.h"

namespace cdynamo::trace {

using graph::NodeOp;

namespace {

bool holdsTensorResult(PyObject* o) { return PyTuple_Check(o) || PyList_Check(o); }

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
    Result<ValuePtr> item = recordCall(t, NodeOp::CallMethod, interned(Str::item), {v}, {});
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
  return recordCall(t, NodeOp::CallFunction, target, args, {});
}

Done toArg(Tracer& t, const ValuePtr& v, graph::Arg* out) {
  auto items = [&](graph::Arg::Kind k, const ValuePtr* begin, const ValuePtr* end) -> Done {
    std::vector<graph::Arg> args(static_cast<size_t>(end - begin));
    for (size_t i = 0; i < args.size(); ++i)
      if (Done d = toArg(t, begin[i], &args[i]); !d) return d;
    *out = graph::Arg::ofItems(k, std::move(args));
    return {};
  };
  switch (v->kind()) {
    case Kind::Tensor:
      *out = graph::Arg::ofNode(v->as<Tensor>().node);
      return {};
    case Kind::Constant:
      if (isNumpyConstant(v->constant())) {
        // A NumPy scalar is a Python number to torch (the graph's code cannot name NumPy's
        // types); a NumPy dtype has no meaning to a torch op.
        if (Py_TYPE(Py_TYPE(v->constant())) != &PyType_Type) break;
        Ref item = Ref::steal(PyObject_CallMethod(v->constant(), "item", nullptr));
        if (!item) return t.failFromPython("a NumPy scalar's value");
        *out = graph::Arg::ofConst(item.get());
        return {};
      }
      *out = graph::Arg::ofConst(v->constant());
      return {};
    case Kind::Tuple: {
      const std::vector<ValuePtr>& tuple = v->as<Tuple>().items;
      return items(graph::Arg::Kind::Tuple, tuple.data(), tuple.data() + tuple.size());
    }
    case Kind::List: {
      // torch's argument parser takes lists and tuples, not a deque (TypeError eagerly): the
      // call runs at a break, where it raises as eagerly.
      if (v->as<List>().deque) return t.fail("a deque passed to a torch operation");
      const std::vector<ValuePtr>& l = v->as<List>().items;
      return items(graph::Arg::Kind::List, l.data(), l.data() + l.size());
    }
    case Kind::Slice: {
      const auto& parts = v->as<Slice>().parts;
      return items(graph::Arg::Kind::Slice, parts.data(), parts.data() + parts.size());
    }
    case Kind::Callable: {
      // A legacy tensor type (torch.HalfTensor, torch.cuda.FloatTensor: a torch.tensortype)
      // cannot be held by an FX graph; the ops that take one (Tensor.type) take its
      // qualified name, which is how torch._dynamo records it.
      PyObject* c = v->as<Callable>().obj.get();
      PyObject* float_tensor = lookup(Obj::torch_FloatTensor);
      if (!float_tensor) return t.failFromPython("torch.FloatTensor");
      if (!PyType_Check(c) || Py_TYPE(c) != Py_TYPE(float_tensor)) break;
      Ref module = Ref::steal(PyObject_GetAttr(c, interned(Str::dunder_module)));
      Ref base = module ? Ref::steal(PyObject_GetAttr(c, interned(Str::dunder_name))) : Ref();
      Ref name = base && PyUnicode_Check(module.get()) && PyUnicode_Check(base.get())
                     ? Ref::steal(PyUnicode_FromFormat("%U.%U", module.get(), base.get()))
                     : Ref();
      if (!name) return PyErr_Occurred() ? t.failFromPython("the name of a tensor type") : t.fail("a tensor type without a name");
      *out = graph::Arg::ofConst(name.get());
      return {};
    }
    case Kind::Null:
    case Kind::Iterator:
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
    case Kind::DictView:
    case Kind::NdArray:
    case Kind::SubclassTensor:
    case Kind::NewObject:
    case Kind::Super:
    case Kind::Partial:
    case Kind::Namespace:
      break;
  }
  return t.fail(describe(v) + " cannot be passed to a graph operation");
}

bool isIntValue(Tracer& t, const ValuePtr& v) {
  if (PyObject* c = v->constant()) return PyLong_CheckExact(c);
  if (!v->is(Kind::Tensor)) return false;
  PyObject* fake = t.graph().fake(v->as<Tensor>().node);
  PyObject* symint = lookup(Obj::torch_SymInt);
  if (!symint) return PyErr_Clear(), false;
  return fake && PyObject_TypeCheck(fake, reinterpret_cast<PyTypeObject*>(symint));
}

// x.shape / x.size() / x.stride() of a tensor with symbolic sizes: a tuple whose symbolic
// items are the symbols' placeholders (as torch._dynamo's graphs use them), or a query node
// of the same method (x.size(i), x.stride(i)) for an item that is an expression of them;
// static items stay constants. `query` is the method's interned name.
static Result<ValuePtr> symbolicSizes(Tracer& t, const ValuePtr& tensor, PyObject* sizes, PyObject* query) {
  std::vector<ValuePtr> items;
  bool any = false;
  for (Py_ssize_t i = 0; i < PyTuple_GET_SIZE(sizes); ++i) {
    PyObject* item = PyTuple_GET_ITEM(sizes, i);
    if (PyLong_CheckExact(item)) {
      items.push_back(Value::constant(item));
      continue;
    }
    any = true;
    int node = t.graph().symbolNode(item);
    if (node >= 0) {
      items.push_back(Value::tensor(node));
      continue;
    }
    Ref index = Ref::steal(PyLong_FromSsize_t(i));
    if (!index) return t.failFromPython("a symbolic size");
    Result<ValuePtr> v = recordCall(t, NodeOp::CallMethod, query, {tensor, Value::constant(index.get())}, {});
    if (!v) return v;
    items.push_back(v.take());
  }
  if (!any && isConstantObject(sizes)) return Value::constant(sizes);
  // x.shape and x.size() are a torch.Size (type(), isinstance(), a slice or a + of it, what
  // the program gets back), held as a tuple of its items of that class; x.stride() a tuple.
  if (PyUnicode_CompareWithASCIIString(query, "size") == 0) {
    PyObject* size_type = lookup(Obj::torch_Size);
    if (!size_type) return t.failFromPython("torch.Size");
    return Value::of(Tuple{std::move(items), Ref::borrow(size_type)});
  }
  return Value::tuple(std::move(items));
}

// (sizes, strides, dtype) of a fake tensor, to compare; null with an error set.
static Ref tensorLayout(PyObject* fake) {
  Ref size = Ref::steal(PyObject_CallMethod(fake, "size", nullptr));
  Ref stride = size ? Ref::steal(PyObject_CallMethod(fake, "stride", nullptr)) : Ref();
  Ref dtype = stride ? Ref::steal(PyObject_GetAttrString(fake, "dtype")) : Ref();
  if (!dtype) return Ref();
  return Ref::steal(PyTuple_Pack(3, size.get(), stride.get(), dtype.get()));
}

Result<ValuePtr> recordCall(Tracer& t, NodeOp op, PyObject* target, const std::vector<ValuePtr>& args,
                                    const std::vector<std::pair<Ref, ValuePtr>>& kwargs, bool keep,
                                    PyObject* known_fake) {
  // The autograd engine (Tensor.backward(), torch.autograd.backward/grad, which reach
  // Variable._execution_engine.run_backward) works on the real tensors' autograd graph and
  // sets .grad: nothing a graph node can do (its None result made it a dead query). A graph
  // break, as in torch._dynamo.
  auto autogradEngine = [](PyObject* f) {
    if (PyCFunction_Check(f)) return strcmp(reinterpret_cast<PyCFunctionObject*>(f)->m_ml->ml_name, "run_backward") == 0;
    if (!PyFunction_Check(f)) return false;
    PyObject* name = reinterpret_cast<PyFunctionObject*>(f)->func_name;
    PyObject* mod = reinterpret_cast<PyFunctionObject*>(f)->func_module;
    return mod && PyUnicode_Check(mod) && PyUnicode_Check(name) &&
           (PyUnicode_CompareWithASCIIString(mod, "torch.autograd") == 0 ||
            PyUnicode_CompareWithASCIIString(mod, "torch.autograd.graph") == 0) &&
           (PyUnicode_CompareWithASCIIString(name, "backward") == 0 || PyUnicode_CompareWithASCIIString(name, "grad") == 0 ||
            PyUnicode_CompareWithASCIIString(name, "_engine_run_backward") == 0);
  };
  if ((op == NodeOp::CallMethod && PyUnicode_Check(target) && PyUnicode_CompareWithASCIIString(target, "backward") == 0) ||
      (op != NodeOp::CallMethod && autogradEngine(target)))
    return t.fail("the autograd engine (backward(), torch.autograd.backward/grad) runs outside the graph");
  std::vector<graph::Arg> gargs(args.size());
  for (size_t i = 0; i < args.size(); ++i)
    if (Done d = toArg(t, args[i], &gargs[i]); !d) return d.stop();
  std::vector<std::pair<Ref, graph::Arg>> gkwargs;
  std::vector<std::pair<ValuePtr, Ref>> out_layouts;  // the out= tensors and their layouts before the call
  for (const auto& [k, v] : kwargs) {
    // A tensor made in the graph with requires_grad=True is a new leaf: AOT autograd gives
    // a graph output back without requires_grad. A graph break, as in torch._dynamo.
    if (PyUnicode_CompareWithASCIIString(k.get(), "requires_grad") == 0 && v->is(Kind::Constant) &&
        v->constant() == Py_True)
      return t.fail("a tensor made with requires_grad=True is a new autograd leaf, made outside the graph");
    // out= writes into tensors the trace holds: the node is kept for that effect (the
    // graph builder marks it so), and later reads of those tensors read their nodes, which
    // hold the written values when the graph runs, as after an in-place op. Only into
    // tensors, and only where the write keeps their sizes, strides and dtype (below).
    if (PyUnicode_CompareWithASCIIString(k.get(), "out") == 0 && !v->isNone()) {
      std::vector<ValuePtr> outs;
      if (v->is(Kind::Tensor)) outs.push_back(v);
      else if ((v->is(Kind::Tuple) || v->is(Kind::List)) && !v->elements()->empty()) outs = *v->elements();
      for (const ValuePtr& o : outs)
        if (!o->is(Kind::Tensor) || t.graph().isScalar(o->as<Tensor>().node))
          return t.fail("out= of something other than tensors");
      if (outs.empty()) return t.fail("out= of something other than tensors");
      for (const ValuePtr& o : outs) {
        Ref m = tensorLayout(t.graph().fake(o->as<Tensor>().node));
        if (!m) return t.failFromPython("the layout of an out= tensor");
        out_layouts.emplace_back(o, std::move(m));
      }
    }
    graph::Arg a;
    if (Done d = toArg(t, v, &a); !d) return d.stop();
    gkwargs.emplace_back(k.copy(), std::move(a));
  }
  Ref plain;
  int node = t.graph().addCall(op, target, std::move(gargs), std::move(gkwargs), &plain, keep, known_fake);
  if (node == graph::GraphBuilder::kNoTensorResult) {
    if (t.graph().symbolic() && PyTuple_Check(plain.get()) && !args.empty() && args[0]->is(Kind::Tensor)) {
      // Only a size or stride query can be asked again item by item (once every tuple
      // here was taken for sizes: x.stride()'s items became x.size(i), a wrong result).
      static PyObject* const size_name = PyUnicode_InternFromString("size");
      static PyObject* const stride_name = PyUnicode_InternFromString("stride");
      PyObject* query = nullptr;
      if (op == NodeOp::CallMethod && PyUnicode_Check(target)) {
        if (PyUnicode_Compare(target, size_name) == 0) query = size_name;
        else if (PyUnicode_Compare(target, stride_name) == 0) query = stride_name;
      } else if (op == NodeOp::CallFunction && target == lookup(Obj::builtins_getattr) && args.size() == 2 &&
                 args[1]->constant() && PyUnicode_Check(args[1]->constant()) &&
                 PyUnicode_CompareWithASCIIString(args[1]->constant(), "shape") == 0) {
        query = size_name;  // x.shape
      }
      if (query) return symbolicSizes(t, args[0], plain.get(), query);
      bool plain_ints = true;
      for (Py_ssize_t i = 0; i < PyTuple_GET_SIZE(plain.get()); ++i)
        plain_ints = plain_ints && PyLong_CheckExact(PyTuple_GET_ITEM(plain.get(), i));
      if (!plain_ints)
        return t.fail("an operation returning a tuple of symbolic numbers other than Tensor.size()/stride()/shape");
      // a tuple of plain ints: a constant, as below
    }
    PyObject* size_type = lookup(Obj::torch_Size);
    if (size_type && target == size_type && Py_TYPE(plain.get()) == reinterpret_cast<PyTypeObject*>(size_type) &&
        !isConstantObject(plain.get()) && args.size() == 1 && (args[0]->is(Kind::List) || args[0]->is(Kind::Tuple))) {
      // torch.Size([x.shape[0], 5]) of symbolic sizes: a Size value of those items (its fake
      // result holds the SymInts of the trace, which must never leave it).
      if (ValuePtr size = newSize(t, *args[0]->elements())) return size;
    }
    if (!isConstantObject(plain.get()))
      return t.fail(std::string("operation returned a non-tensor value of type ") + Py_TYPE(plain.get())->tp_name);
    return Value::constant(plain.get());
  }
  // An out= tensor the op resized or retyped (a too small or empty out, as eager allows):
  // its node's fake now describes another tensor than the one its guards and the graph's
  // earlier uses were made for. A graph break (the op runs eagerly), as torch._dynamo does.
  if (node >= 0)
    for (const auto& [o, before] : out_layouts) {
      Ref after = tensorLayout(t.graph().fake(o->as<Tensor>().node));
      if (!after) return t.failFromPython("the layout of an out= tensor");
      int same = PyObject_RichCompareBool(before.get(), after.get(), Py_EQ);
      if (same < 0) return t.failFromPython("the layout of an out= tensor");
      if (!same) return t.fail("an out= tensor whose size, strides or dtype the operation changes");
    }
  if (node < 0) {
    std::string what = op == NodeOp::CallMethod ? std::string("Tensor.") + PyUnicode_AsUTF8(target)
                                                : std::string("a call of ") + Py_TYPE(target)->tp_name;
    if (op != NodeOp::CallMethod) {
      // The op's error is kept aside while its name is read: __name__ may be Python code
      // (a higher-order op's property), which must not run with an error set.
      PyObject *type, *value, *tb;
      PyErr_Fetch(&type, &value, &tb);
      Ref name = Ref::steal(PyObject_GetAttrString(target, "__name__"));
      if (name && PyUnicode_Check(name.get())) what = PyUnicode_AsUTF8(name.get());
      PyErr_Clear();
      PyErr_Restore(type, value, tb);
    }
    return t.failFakeCall("running " + what + " on fake tensors");
  }
  PyObject* fake = t.graph().fake(node);
  if (isTensor(fake)) return Value::tensor(node);
  if (t.graph().isScalar(node)) return Value::tensor(node);  // a number read from a tensor (scalars.h)
  if (!holdsTensorResult(fake)) {
    // A kept call's own result (what the function gave at trace time) is the program's value.
    if (keep && !isConstantObject(fake))
      return t.fail(std::string("an allow_in_graph function returned a ") + Py_TYPE(fake)->tp_name +
                    " (neither tensors nor a constant)");
    return Value::constant(isConstantObject(fake) ? fake : Py_None);
  }
  // A tuple or list of tensors (torch.split, x.chunk, torch.max(x, dim), ...): one
  // getitem node per element, as FX does.
  PyObject* getitem = lookup(Obj::operator_getitem);
  if (!getitem) return t.failFromPython("operator.getitem");
  std::vector<ValuePtr> items;
  for (Py_ssize_t i = 0; i < PySequence_Fast_GET_SIZE(fake); ++i) {
    Ref index = Ref::steal(PyLong_FromSsize_t(i));
    if (!index) return t.failFromPython("indexing a tuple result");
    Ref unused;
    std::vector<graph::Arg> item_args;
    item_args.push_back(graph::Arg::ofNode(node));
    item_args.push_back(graph::Arg::ofConst(index.get()));
    int item = t.graph().addCall(NodeOp::CallFunction, getitem, std::move(item_args), {}, &unused);
    if (item == graph::GraphBuilder::kNoTensorResult) {
      items.push_back(Value::constant(unused.get()));
      continue;
    }
    if (item < 0) return t.failFromPython("indexing a tuple result");
    items.push_back(Value::tensor(item));
  }
  if (PyList_Check(fake)) return Value::list(std::move(items));
  // A structseq (torch.return_types.max: values, indices) keeps its type: fields by name.
  if (!PyTuple_CheckExact(fake)) return Value::of(Tuple{std::move(items), Ref::borrow(reinterpret_cast<PyObject*>(Py_TYPE(fake)))});
  return Value::tuple(std::move(items));
}

Result<bool> sameTensorObject(Tracer& t, const ValuePtr& a, const ValuePtr& b) {
  const int na = a->as<Tensor>().node, nb = b->as<Tensor>().node;
  if (na == nb) return true;
  // The result of min()/max() over tensors is one of its items, chosen by their values
  // (GraphBuilder::markChoice): the same object as `b` when every item is, another when
  // none is; else it depends on the values and the trace cannot tell.
  const graph::GraphBuilder::Choice* ca = t.graph().choiceOf(na);
  const graph::GraphBuilder::Choice* cb = t.graph().choiceOf(nb);
  if (ca || cb) {
    PyObject* fa = t.graph().fake(na);
    if (fa && fa == t.graph().fake(nb)) return true;  // one object (m.float() of a float m is m)
    const ValuePtr& other = ca ? b : a;
    int same = 0;
    for (int c : (ca ? ca : cb)->candidates) {
      Result<bool> r = sameTensorObject(t, Value::tensor(c), other);
      if (!r) return r;
      same += *r ? 1 : 0;
    }
    const size_t n = (ca ? ca : cb)->candidates.size();
    if (same == 0) return false;
    if (static_cast<size_t>(same) == n) return true;
    return t.fail("whether the result of min()/max() over tensors is a given tensor depends on their values "
                  "(eager returns the item that won itself)");
  }
  PyObject* ea = t.exampleOf(na);
  PyObject* eb = t.exampleOf(nb);
  if (!ea || !eb) {
    // A computed tensor is a new object unless its op returned its receiver (x.add_(1),
    // x.requires_grad_(), x.to(x.dtype)): the fake tensors behave as the real ones, so the
    // same fake is the same object.
    PyObject* fa = t.graph().fake(na);
    PyObject* fb = t.graph().fake(nb);
    return fa && fa == fb;
  }
  bool same = ea == eb;
  t.guards().checkAliasing(t.inputRegOf(na), t.inputRegOf(nb), same);
  return same;
}

}  // namespace cdynamo::trace
