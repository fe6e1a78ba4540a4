// The output-metadata memo (graph_builder.h: a shortcut past running each op on fake
// tensors): keys, what is remembered of a result, and results made again from it.
#include "graph/graph_builder.h"

#include "graph/fake_autograd.h"
#include "graph/torch_refs.h"
#include "support/lookup.h"
#include "support/torch_types.h"

namespace cdynamo::graph {

namespace {

// A constant that may appear in a memo key: compared by type and value.
bool memoConstOk(PyObject* o, const TorchRefs* t) {
  PyTypeObject* tp = Py_TYPE(o);
  if (o == Py_None || tp == &PyBool_Type || tp == &PyLong_Type || tp == &PyFloat_Type ||
      tp == &PyUnicode_Type || reinterpret_cast<PyObject*>(tp) == lookup(Obj::torch_dtype) ||
      reinterpret_cast<PyObject*>(tp) == lookup(Obj::torch_device))
    return true;
  if (tp == &PyTuple_Type) {
    for (Py_ssize_t i = 0; i < PyTuple_GET_SIZE(o); ++i)
      if (!memoConstOk(PyTuple_GET_ITEM(o, i), t)) return false;
    return true;
  }
  return false;
}

// A key part for a constant: (type, value), with tuples made of such parts (1 == 1.0 ==
// True in Python, not in type promotion).
Ref memoConst(PyObject* o) {
  if (PyTuple_CheckExact(o)) {
    Py_ssize_t n = PyTuple_GET_SIZE(o);
    Ref parts = Ref::steal(PyTuple_New(n));
    if (!parts) return Ref();
    for (Py_ssize_t i = 0; i < n; ++i) {
      Ref p = memoConst(PyTuple_GET_ITEM(o, i));
      if (!p) return Ref();
      PyTuple_SET_ITEM(parts.get(), i, p.release());
    }
    return Ref::steal(PyTuple_Pack(2, reinterpret_cast<PyObject*>(&PyTuple_Type), parts.get()));
  }
  return Ref::steal(PyTuple_Pack(2, reinterpret_cast<PyObject*>(Py_TYPE(o)), o));
}

// A shape or stride as a memo key part: the tuple itself when every item is an int, else a
// tuple with each SymInt replaced by its sympy expression, with the ShapeEnv's replacements
// applied (SymNode.expr: a size an op specialized to 64 is 64, as in the tensors made
// later). Equal expressions are equal values for every input the guards admit, whatever
// the ShapeEnv learns later (it only adds replacements). Null without an error for
// anything else.
Ref symTuple(PyObject* seq) {
  if (!PyTuple_Check(seq)) return Ref();
  Py_ssize_t n = PyTuple_GET_SIZE(seq);
  bool symbolic = false;
  for (Py_ssize_t i = 0; i < n && !symbolic; ++i) symbolic = !PyLong_CheckExact(PyTuple_GET_ITEM(seq, i));
  if (!symbolic) return Ref::borrow(seq);
  Ref out = Ref::steal(PyTuple_New(n));
  if (!out) return PyErr_Clear(), Ref();
  for (Py_ssize_t i = 0; i < n; ++i) {
    PyObject* item = PyTuple_GET_ITEM(seq, i);
    Ref part;
    if (PyLong_CheckExact(item)) {
      part = Ref::borrow(item);
    } else if (reinterpret_cast<PyObject*>(Py_TYPE(item)) == lookup(Obj::torch_SymInt)) {
      Ref node = Ref::steal(PyObject_GetAttrString(item, "node"));
      part = node ? Ref::steal(PyObject_GetAttrString(node.get(), "expr")) : Ref();
    }
    if (!part) return PyErr_Clear(), Ref();
    PyTuple_SET_ITEM(out.get(), i, part.release());
  }
  return out;
}

// The storage offset of `view` less that of `base`, its receiver: a function of what a view
// method's memo key holds (the receiver's sizes and strides, the constant arguments), not of
// the receiver's own offset (a view, a transpose: 0; select/narrow: index times a stride).
// So views of q, k and v, three select() results of one tensor at different offsets, share
// one entry. An int when it is one (a SymInt whose expression is a number is made that
// int); null with an error set on failure.
Ref relativeOffset(PyObject* view, PyObject* base) {
  Ref a = Ref::steal(PyObject_CallMethod(view, "storage_offset", nullptr));
  Ref b = a ? Ref::steal(PyObject_CallMethod(base, "storage_offset", nullptr)) : Ref();
  if (!b) return Ref();
  if (a.get() == b.get()) return Ref::steal(PyLong_FromLong(0));
  Ref d = Ref::steal(PyNumber_Subtract(a.get(), b.get()));
  if (!d || PyLong_CheckExact(d.get())) return d;
  Ref node = Ref::steal(PyObject_GetAttrString(d.get(), "node"));
  Ref as_int = node ? Ref::steal(PyObject_CallMethod(node.get(), "maybe_as_int", nullptr)) : Ref();
  if (!as_int) return Ref();
  if (as_int.get() == Py_None) return d;
  return as_int;
}

}  // namespace

Ref GraphBuilder::makeSig(PyObject* dtype, PyObject* device, PyObject* shape, PyObject* stride) {
  Ref sh = symTuple(shape), st = symTuple(stride);
  if (!sh || !st) return Ref();
  Ref sig = Ref::steal(PyTuple_Pack(4, dtype, device, sh.get(), st.get()));
  if (!sig) PyErr_Clear();
  return sig;
}

PyObject* GraphBuilder::nodeSig(int id) {
  Node& n = nodes_[id];
  if (n.sig) return n.sig.get();
  const TorchRefs* t = torchRefs();
  n.sig = Ref::borrow(Py_None);
  n.sig_rg = false;
  PyObject* f = n.fake.get();
  if (t && f && shape_env_ && isSymScalar(f, t)) {
    // A size or a number read from a tensor: its expression (see symTuple).
    Ref node = Ref::steal(PyObject_GetAttrString(f, "node"));
    Ref e = node ? Ref::steal(PyObject_GetAttrString(node.get(), "expr")) : Ref();
    Ref sig = e ? Ref::steal(PyTuple_Pack(2, reinterpret_cast<PyObject*>(Py_TYPE(f)), e.get())) : Ref();
    if (!sig) {
      PyErr_Clear();
      return Py_None;
    }
    n.sig = std::move(sig);
    return n.sig.get();
  }
  if (!t || !f || reinterpret_cast<PyObject*>(Py_TYPE(f)) != lookup(Obj::torch_FakeTensor)) {
    PyErr_Clear();
    return Py_None;
  }
  // A fake tensor holding a constant (torch.tensor([...]) literals) propagates it: not memoized.
  Ref constant = Ref::steal(PyObject_GetAttrString(f, "constant"));
  Ref dtype = Ref::steal(PyObject_GetAttrString(f, "dtype"));
  // FakeTensor.fake_device is what `.device` answers outside kernel invocation, without a
  // dispatch through FakeTensor.__torch_dispatch__ (prim.device) per read.
  Ref device = Ref::steal(PyObject_GetAttrString(f, "fake_device"));
  Ref shape = Ref::steal(PyObject_GetAttrString(f, "shape"));
  Ref stride = Ref::steal(PyObject_CallMethod(f, "stride", nullptr));
  Ref rg = Ref::steal(PyObject_GetAttrString(f, "requires_grad"));
  if (!constant || constant.get() != Py_None || !dtype || !device || !shape || !stride || !rg) {
    PyErr_Clear();
    return Py_None;
  }
  Ref sig = makeSig(dtype.get(), device.get(), shape.get(), stride.get());
  if (!sig) return Py_None;
  n.sig = std::move(sig);
  n.sig_rg = rg.get() == Py_True;
  return n.sig.get();
}

bool GraphBuilder::argSig(const Arg& a, PyObject* out, std::vector<bool>* in_rg) {
  switch (a.kind) {
    case Arg::Kind::Node: {
      PyObject* sig = nodeSig(a.node);
      if (sig == Py_None || PyList_Append(out, sig) < 0) return false;
      in_rg->push_back(nodes_[a.node].sig_rg);
      return true;
    }
    case Arg::Kind::Const: {
      if (!memoConstOk(a.constant.get(), torchRefs())) return false;
      Ref c = memoConst(a.constant.get());
      return c && PyList_Append(out, c.get()) == 0;
    }
    case Arg::Kind::Tuple:
    case Arg::Kind::List: {
      Ref items = Ref::steal(PyList_New(0));
      if (!items) return false;
      for (const Arg& i : a.items)
        if (!argSig(i, items.get(), in_rg)) return false;
      Ref tup = Ref::steal(PyList_AsTuple(items.get()));
      Ref kind = Ref::steal(PyLong_FromLong(static_cast<long>(a.kind)));
      if (!tup || !kind) return false;
      Ref part = Ref::steal(PyTuple_Pack(2, kind.get(), tup.get()));
      return part && PyList_Append(out, part.get()) == 0;
    }
    case Arg::Kind::Slice:
      return false;
  }
  return false;
}

Ref GraphBuilder::memoKey(NodeOp op, PyObject* target, const std::vector<Arg>& args,
                          const std::vector<std::pair<Ref, Arg>>& kwargs, std::vector<bool>* in_rg) {
  const TorchRefs* t = torchRefs();
  if (!t || !mode_) {
    PyErr_Clear();
    return Ref();
  }
  PyObject* allowed = op == NodeOp::CallMethod ? t->memo_methods.get() : t->memo_functions.get();
  if (op == NodeOp::Placeholder) return Ref();
  int known = PySet_Contains(allowed, target);
  if (known != 1) {
    PyErr_Clear();  // unhashable target: not memoized
    return Ref();
  }
  if (!memo_) {
    memo_ = Ref::steal(PyDict_New());
    if (!memo_) {
      PyErr_Clear();
      return Ref();
    }
  }
  Ref grad = Ref::borrow(torchimpl::gradEnabled() ? Py_True : Py_False);
  Ref parts = Ref::steal(PyList_New(0));
  Ref opn = Ref::steal(PyLong_FromLong(static_cast<long>(op)));
  if (!parts || !opn || PyList_Append(parts.get(), opn.get()) < 0 ||
      PyList_Append(parts.get(), target) < 0 || PyList_Append(parts.get(), grad.get()) < 0) {
    PyErr_Clear();
    return Ref();
  }
  for (const Arg& a : args)
    if (!argSig(a, parts.get(), in_rg)) {
      PyErr_Clear();
      return Ref();
    }
  for (const auto& [name, value] : kwargs) {
    // `out=` writes into (and returns) an existing tensor.
    if (PyUnicode_Check(name.get()) && PyUnicode_CompareWithASCIIString(name.get(), "out") == 0)
      return Ref();
    if (PyList_Append(parts.get(), name.get()) < 0 || !argSig(value, parts.get(), in_rg)) {
      PyErr_Clear();
      return Ref();
    }
  }
  Ref key = Ref::steal(PyList_AsTuple(parts.get()));
  if (!key) PyErr_Clear();
  return key;
}

// The spec of a fresh fake result `fake` (see torchimpl::freshResult); false (no error) if
// it is not one.
bool GraphBuilder::specOf(PyObject* fake, FakeSpec* spec) {
  const TorchRefs* t = torchRefs();
  if (!t) return false;
  if (fake == Py_None) {
    spec->none = true;
    return true;
  }
  if (reinterpret_cast<PyObject*>(Py_TYPE(fake)) != lookup(Obj::torch_FakeTensor)) return false;
  Ref view;  // the result itself when it is a view of its base `fake`
  if (torchimpl::isView(fake)) {
    if (!torchimpl::plainView(fake, /*allow_symbolic=*/shape_env_.get() != nullptr)) return false;
    view = Ref::borrow(fake);
    Ref base = Ref::steal(PyObject_GetAttrString(fake, "_base"));
    if (!base || reinterpret_cast<PyObject*>(Py_TYPE(base.get())) != lookup(Obj::torch_FakeTensor)) return false;
    fake = base.get();  // kept alive by `view`
    spec->view = true;
    spec->view_size = Ref::steal(PyObject_GetAttrString(view.get(), "shape"));
    spec->view_stride = Ref::steal(PyObject_CallMethod(view.get(), "stride", nullptr));
    spec->view_offset = Ref::steal(PyObject_CallMethod(view.get(), "storage_offset", nullptr));
    Ref vrg = Ref::steal(PyObject_GetAttrString(view.get(), "requires_grad"));
    Ref brg = Ref::steal(PyObject_GetAttrString(fake, "requires_grad"));
    if (!spec->view_size || !spec->view_stride || !spec->view_offset || !vrg || !brg || vrg.get() != brg.get())
      return false;
  }
  // Under a ShapeEnv sizes may be symbolic: the result is made again from the op's own one
  // (makeFake with spec->like: its layout and storage size copied, not recomputed).
  if (shape_env_) {
    if (!torchimpl::freshSymbolicResult(fake)) return false;
    spec->like = Ref::borrow(fake);
  } else if (!torchimpl::freshResult(fake)) {
    return false;
  }
  Ref dict = Ref::steal(PyObject_GenericGetDict(fake, nullptr));
  if (!dict || !templateDictOk(dict.get(), /*allow_param=*/false)) return false;
  spec->dict = Ref::steal(PyDict_Copy(dict.get()));
  spec->shape = Ref::steal(PyObject_GetAttrString(fake, "shape"));
  spec->stride = Ref::steal(PyObject_CallMethod(fake, "stride", nullptr));
  spec->dtype = Ref::steal(PyObject_GetAttrString(fake, "dtype"));
  spec->device = Ref::steal(PyObject_GetAttrString(fake, "fake_device"));  // see nodeSig
  Ref rg = Ref::steal(PyObject_GetAttrString(fake, "requires_grad"));
  if (!spec->dict || !spec->shape || !spec->stride || !spec->dtype || !spec->device || !rg) return false;
  spec->requires_grad = rg.get() == Py_True;
  Ref device_str = Ref::steal(PyObject_Str(spec->device.get()));
  const char* d = device_str ? PyUnicode_AsUTF8(device_str.get()) : nullptr;
  if (!d) return false;
  spec->device_str = d;
  return true;
}

long long GraphBuilder::tensorVersion(PyObject* tensor) const {
  if (!tensor || !isTensor(tensor)) return -1;
  Ref v = Ref::steal(PyObject_GetAttrString(tensor, "_version"));
  long long out = v ? PyLong_AsLongLong(v.get()) : -1;
  if (out < 0) PyErr_Clear();
  return out;
}

bool GraphBuilder::memoFits(const MemoEntry& entry, const std::vector<bool>& in_rg) {
  if (entry.in_rg.size() != in_rg.size()) return false;
  if (entry.in_rg == in_rg) return true;
  if (entry.alias_arg >= 0 || entry.view_of_receiver) return false;
  // Autograd: a differentiable output requires grad when any differentiable input does
  // (grad mode is in the key), so requiring it is monotone in the set of inputs that do.
  for (size_t i = 0; i < in_rg.size(); ++i) {
    if (entry.out_rg == OutGrad::AllTrue && entry.in_rg[i] && !in_rg[i]) return false;   // needs a superset
    if (entry.out_rg == OutGrad::AllFalse && !entry.in_rg[i] && in_rg[i]) return false;  // needs a subset
    if (entry.out_rg == OutGrad::Mixed) return false;
  }
  return true;
}

void GraphBuilder::memoStore(PyObject* key, PyObject* fake, const Node& n,
                             const std::vector<long long>& versions_before, std::vector<bool> in_rg) {
  // A result that is one of the positional tensor arguments itself, unchanged (dropout in
  // eval mode). Whether an op returns its input depends only on what the key holds
  // (metadata and constant arguments); one that changed it in place (a bumped version
  // counter: relu(inplace=True)) is not remembered, its effect on the fake must happen.
  for (size_t k = 0; k < n.args.size(); ++k) {
    const Arg& a = n.args[k];
    if (a.kind == Arg::Kind::Node && nodes_[a.node].fake.get() == fake) {
      long long before = k < versions_before.size() ? versions_before[k] : -1;
      if (before < 0 || tensorVersion(fake) != before) return;
      MemoEntry entry;
      entry.alias_arg = static_cast<int>(k);
      entry.in_rg = std::move(in_rg);
      pushEntry(key, std::move(entry));
      return;
    }
  }
  const TorchRefs* t = torchRefs();
  if (t && n.op == NodeOp::CallMethod && !n.args.empty() && n.args[0].kind == Arg::Kind::Node &&
      PySet_Contains(t->memo_view_methods.get(), n.target.get()) == 1 &&
      reinterpret_cast<PyObject*>(Py_TYPE(fake)) == lookup(Obj::torch_FakeTensor)) {
    PyErr_Clear();
    PyObject* receiver = nodes_[n.args[0].node].fake.get();
    if (torchimpl::storageId(fake) == torchimpl::storageId(receiver)) {
      // A view of the receiver (of its storage, with the receiver's dtype and grad status).
      if (!torchimpl::plainView(fake, /*allow_symbolic=*/shape_env_.get() != nullptr)) return;
      Ref dt = Ref::steal(PyObject_GetAttrString(fake, "dtype"));
      Ref rdt = Ref::steal(PyObject_GetAttrString(receiver, "dtype"));
      Ref rg = Ref::steal(PyObject_GetAttrString(fake, "requires_grad"));
      Ref rrg = Ref::steal(PyObject_GetAttrString(receiver, "requires_grad"));
      MemoEntry entry;
      entry.view_of_receiver = true;
      entry.view_size = Ref::steal(PyObject_GetAttrString(fake, "shape"));
      entry.view_stride = Ref::steal(PyObject_CallMethod(fake, "stride", nullptr));
      entry.view_offset = relativeOffset(fake, receiver);
      if (!dt || !rdt || !rg || !rrg || !entry.view_size || !entry.view_stride || !entry.view_offset ||
          dt.get() != rdt.get() || rg.get() != rrg.get())
        return PyErr_Clear();
      entry.in_rg = std::move(in_rg);  // exact (out_rg Mixed)
      pushEntry(key, std::move(entry));
      return;
    }
  }
  // Otherwise only fresh tensors: none shares storage with an input or with another output.
  std::vector<PyObject*> inputs;
  for (const Arg& a : n.args) tensorInputs(a, &inputs);
  for (const auto& kv : n.kwargs) tensorInputs(kv.second, &inputs);
  std::vector<const void*> storages;
  for (PyObject* i : inputs) storages.push_back(torchimpl::storageId(i));
  MemoEntry entry;
  entry.tuple = PyTuple_CheckExact(fake);
  Py_ssize_t count = entry.tuple ? PyTuple_GET_SIZE(fake) : 1;
  for (Py_ssize_t i = 0; i < count; ++i) {
    PyObject* o = entry.tuple ? PyTuple_GET_ITEM(fake, i) : fake;
    FakeSpec spec;
    if (!specOf(o, &spec)) {
      PyErr_Clear();
      return;
    }
    if (!spec.none) {
      const void* storage = torchimpl::storageId(o);
      for (const void* s : storages)
        if (s == storage) return;
      storages.push_back(storage);
    }
    entry.outputs.push_back(std::move(spec));
  }
  bool any_true = false, any_false = false;
  for (const FakeSpec& o : entry.outputs)
    if (!o.none) (o.requires_grad ? any_true : any_false) = true;
  entry.out_rg = any_true && any_false ? OutGrad::Mixed : any_true ? OutGrad::AllTrue : OutGrad::AllFalse;
  entry.in_rg = std::move(in_rg);
  pushEntry(key, std::move(entry));
}

void GraphBuilder::pushEntry(PyObject* key, MemoEntry entry) {
  PyObject* head = PyDict_GetItemWithError(memo_.get(), key);
  if (!head && PyErr_Occurred()) return PyErr_Clear();
  entry.next = head ? static_cast<int>(PyLong_AsLong(head)) : -1;
  Ref index = Ref::steal(PyLong_FromSize_t(memo_entries_.size()));
  if (!index || PyDict_SetItem(memo_.get(), key, index.get()) < 0) return PyErr_Clear();
  memo_entries_.push_back(std::move(entry));
}

const GraphBuilder::MemoEntry* GraphBuilder::memoFind(PyObject* key, const std::vector<bool>& in_rg) {
  PyObject* head = PyDict_GetItemWithError(memo_.get(), key);
  if (!head) return PyErr_Clear(), nullptr;
  for (long i = PyLong_AsLong(head); i >= 0; i = memo_entries_[i].next)
    if (memoFits(memo_entries_[i], in_rg)) return &memo_entries_[i];
  return nullptr;
}

int GraphBuilder::memoCheck() {
  if (memo_check_ < 0) memo_check_ = configFlag("memo_check");
  return memo_check_;
}

bool GraphBuilder::checkMemoResult(PyObject* memo_result, PyObject* real_result, PyObject* target) {
  static Ref& mod = *new Ref();  // Note [Python references in statics] (support/pyref.h)
  if (!mod) mod = Ref::borrow(lookup(Obj::cdynamo_shapes));
  if (!mod) return false;
  Ref r = Ref::steal(PyObject_CallMethod(mod.get(), "check_memo_result", "OOO", memo_result, real_result, target));
  return static_cast<bool>(r);
}

void GraphBuilder::tensorInputs(const Arg& a, std::vector<PyObject*>* out) const {
  if (a.kind == Arg::Kind::Node) {
    PyObject* f = nodes_[a.node].fake.get();
    if (f && isTensor(f)) out->push_back(f);
  }
  for (const Arg& i : a.items) tensorInputs(i, out);
}

Ref GraphBuilder::memoMake(const MemoEntry& entry, const Node& n) {
  if (entry.view_of_receiver) {
    if (n.args.empty() || n.args[0].kind != Arg::Kind::Node) {
      PyErr_SetString(PyExc_RuntimeError, "memo entry of a view does not fit the call");
      return Ref();
    }
    PyObject* receiver = nodes_[n.args[0].node].fake.get();
    Ref offset = Ref::steal(PyObject_CallMethod(receiver, "storage_offset", nullptr));
    if (offset && !(PyLong_CheckExact(entry.view_offset.get()) && PyLong_AsLong(entry.view_offset.get()) == 0))
      offset = Ref::steal(PyNumber_Add(offset.get(), entry.view_offset.get()));
    if (!offset) return Ref();
    PyObject* vargs[] = {receiver, entry.view_size.get(), entry.view_stride.get(), offset.get()};
    return Ref::steal(PyObject_VectorcallMethod(interned(Str::as_strided), vargs, 4, nullptr));
  }
  if (entry.alias_arg >= 0) {
    if (static_cast<size_t>(entry.alias_arg) >= n.args.size() || n.args[entry.alias_arg].kind != Arg::Kind::Node) {
      PyErr_SetString(PyExc_RuntimeError, "memo entry of an aliasing op does not fit the call");
      return Ref();
    }
    return nodes_[n.args[entry.alias_arg].node].fake.copy();
  }
  std::vector<PyObject*> inputs;
  for (const Arg& a : n.args) tensorInputs(a, &inputs);
  for (const auto& kv : n.kwargs) tensorInputs(kv.second, &inputs);
  if (!entry.tuple) return makeFake(entry.outputs[0], inputs);
  Ref tuple = Ref::steal(PyTuple_New(static_cast<Py_ssize_t>(entry.outputs.size())));
  if (!tuple) return Ref();
  for (size_t i = 0; i < entry.outputs.size(); ++i) {
    Ref item = entry.outputs[i].none ? Ref::borrow(Py_None) : makeFake(entry.outputs[i], inputs);
    if (!item) return Ref();
    PyTuple_SET_ITEM(tuple.get(), static_cast<Py_ssize_t>(i), item.release());
  }
  return tuple;
}

}  // namespace cdynamo::graph
