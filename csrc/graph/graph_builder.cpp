#include "graph/graph_builder.h"

#include <cctype>
#include <cstring>
#include <optional>

#include "graph/fake_autograd.h"
#include "graph/fx_codegen.h"
#include "support/check.h"
#include "support/lookup.h"
#include "support/torch_types.h"

namespace cdynamo::graph {
namespace {

// What the graph builder derives once from torch's objects (the objects themselves come
// from the process-wide lookup table, support/lookup.h, preloaded by torchRefs()).
struct TorchRefs {
  Ref meta_device;         // torch.device("meta")
  Ref memo_functions;      // set of callables known to return one new tensor
  Ref memo_methods;        // set of Tensor method names known to return one new tensor
  Ref subclass_kwnames;    // ("dispatch_device", "device_for_backend_keys")
  Ref empty_kwnames;       // ("dtype", "device")
  bool ok = false;
};

// The lookup-table objects the graph builder uses; all found once torchRefs() succeeded,
// so its users call lookup() without checking.
const Obj kGraphObjects[] = {
    Obj::torch_FakeTensorMode, Obj::torch_fx_Graph, Obj::torch_fx_GraphModule, Obj::torch_nn_Module,
    Obj::torch_FakeTensor, Obj::torch_empty_strided, Obj::torch_C_DisableTorchDispatch, Obj::torch_is_grad_enabled,
    Obj::torch_dtype, Obj::torch_device, Obj::torch_ShapeEnv, Obj::torch_SymInt, Obj::torch_SymFloat,
    Obj::torch_SymBool, Obj::torch_compute_unbacked_bindings, Obj::torch_guards_tracing,
    Obj::torch_guards_TracingContext, Obj::torch_Tensor, Obj::torch_nn_Parameter, Obj::torch_Tensor_make_subclass,
    Obj::torch_C_set_throw_on_mutable_data_ptr, Obj::torch_C_set_warn_deprecated_on_mutable_data_ptr,
    Obj::torch_fx_immutable_dict, Obj::torch_fx_graph_Node, Obj::torch_fx_graph};

// Ops whose fake result is determined by the inputs' metadata and the constant arguments
// (no data-dependent output shapes, no global state besides what effects change) and that
// do nothing besides making it. A result that aliases an input (x.float() returning x,
// dropout(p=0) returning its input, an inplace=True form) is never remembered: memoStore
// checks every result's storage against the inputs'.
const char* const kMemoTorch[] = {
    "add", "sub", "mul", "div", "true_divide", "sin", "cos", "tan", "exp", "exp2", "expm1", "log",
    "log2", "log1p", "sigmoid", "tanh", "relu", "neg", "abs", "sqrt", "rsqrt", "reciprocal",
    "square", "erf", "floor", "ceil", "sign", "matmul", "mm", "bmm", "addmm", "pow", "maximum",
    "minimum", "softmax", "log_softmax", "layer_norm"};
const char* const kMemoOperator[] = {"add", "sub", "mul", "truediv", "floordiv", "matmul", "neg",
                                     "pow", "mod"};
const char* const kMemoFunctional[] = {"linear", "layer_norm", "gelu", "softmax", "log_softmax", "relu", "silu",
                                       "dropout", "scaled_dot_product_attention", "multi_head_attention_forward"};
const char* const kMemoCNN[] = {"linear", "gelu"};
const char* const kMemoMethods[] = {
    "add", "sub", "mul", "div", "true_divide", "sin", "cos", "tan", "exp", "exp2", "expm1", "log",
    "log2", "log1p", "sigmoid", "tanh", "relu", "neg", "abs", "sqrt", "rsqrt", "reciprocal",
    "square", "erf", "floor", "ceil", "sign", "matmul", "mm", "bmm", "pow", "maximum", "minimum",
    "softmax", "log_softmax", "__add__", "__radd__", "__sub__", "__rsub__", "__mul__", "__rmul__",
    "__truediv__", "__rtruediv__", "__matmul__", "__neg__", "__pow__"};

template <size_t N>
bool addAll(PyObject* set, const char* module, const char* const (&names)[N]) {
  Ref m = Ref::steal(PyImport_ImportModule(module));
  if (!m) return false;
  for (const char* name : names) {
    Ref f = Ref::steal(PyObject_GetAttrString(m.get(), name));
    if (!f) {  // absent in this torch version: simply not memoized
      PyErr_Clear();
      continue;
    }
    if (PySet_Add(set, f.get()) < 0) return false;
  }
  return true;
}

// Imported on first use (the hook must not import torch before a trace needs it).
const TorchRefs* torchRefs() {
  // Leaked on purpose (see Note [Python references in statics] in support/pyref.h).
  static TorchRefs& refs = *new TorchRefs();
  if (!refs.ok) {
    for (Obj o : kGraphObjects)
      if (!lookup(o)) return nullptr;
    refs.meta_device = Ref::steal(PyObject_CallFunction(lookup(Obj::torch_device), "s", "meta"));
    if (!refs.meta_device) return nullptr;
    refs.memo_functions = Ref::steal(PySet_New(nullptr));
    if (!refs.memo_functions || !addAll(refs.memo_functions.get(), "torch", kMemoTorch) ||
        !addAll(refs.memo_functions.get(), "operator", kMemoOperator) ||
        !addAll(refs.memo_functions.get(), "torch.nn.functional", kMemoFunctional) ||
        !addAll(refs.memo_functions.get(), "torch._C._nn", kMemoCNN))
      return nullptr;
    refs.subclass_kwnames = Ref::steal(Py_BuildValue("(ss)", "dispatch_device", "device_for_backend_keys"));
    refs.empty_kwnames = Ref::steal(Py_BuildValue("(ss)", "dtype", "device"));
    if (!refs.subclass_kwnames || !refs.empty_kwnames) return nullptr;
    refs.memo_methods = Ref::steal(PySet_New(nullptr));
    if (!refs.memo_methods) return nullptr;
    for (const char* name : kMemoMethods) {
      Ref method = Ref::steal(PyUnicode_InternFromString(name));
      if (!method || PySet_Add(refs.memo_methods.get(), method.get()) < 0) return nullptr;
    }
    refs.ok = true;
  }
  return &refs;
}

bool holdsTensor(PyObject* o) {
  if (isTensor(o)) return true;
  if (PyTuple_Check(o) || PyList_Check(o)) {
    for (Py_ssize_t i = 0; i < PySequence_Fast_GET_SIZE(o); ++i)
      if (holdsTensor(PySequence_Fast_GET_ITEM(o, i))) return true;
  }
  return false;
}

// In-place operations (x.add_(y), x += y, x[i] = y) are kept even when their result is
// unused: they mutate a tensor the rest of the program sees.
bool isMutating(NodeOp op, PyObject* target) {
  if (op == NodeOp::CallMethod) {
    const char* name = PyUnicode_AsUTF8(target);
    size_t n = name ? strlen(name) : 0;
    return n > 1 && name[n - 1] == '_' && name[n - 2] != '_';
  }
  Ref modname = Ref::steal(PyObject_GetAttrString(target, "__module__"));
  Ref qualname = Ref::steal(PyObject_GetAttrString(target, "__name__"));
  bool mutating = false;
  if (modname && qualname && PyUnicode_Check(modname.get()) && PyUnicode_Check(qualname.get())) {
    const char* m = PyUnicode_AsUTF8(modname.get());
    const char* q = PyUnicode_AsUTF8(qualname.get());
    size_t n = strlen(q);
    if (strcmp(m, "_operator") == 0 || strcmp(m, "operator") == 0)
      mutating = (q[0] == 'i' && strcmp(q, "is_") != 0 && strcmp(q, "is_not") != 0 &&
                  strcmp(q, "index") != 0 && strcmp(q, "indexOf") != 0 && strcmp(q, "invert") != 0) ||
                 strcmp(q, "setitem") == 0 || strcmp(q, "delitem") == 0;
    else
      mutating = n > 1 && q[n - 1] == '_' && q[n - 2] != '_';  // torch.relu_ and friends
  }
  PyErr_Clear();
  return mutating;
}

}  // namespace

Arg Arg::clone() const {
  Arg a;
  a.kind = kind;
  a.node = node;
  a.constant = constant.copy();
  for (const Arg& i : items) a.items.push_back(i.clone());
  return a;
}

GraphBuilder::~GraphBuilder() { finish(); }

namespace {

// cdynamo.config.<name> as a bool; -1 with an error set.
int configFlag(const char* name) {
  PyObject* config = lookup(Obj::cdynamo_config);
  if (!config) return -1;
  Ref v = Ref::steal(PyObject_GetAttrString(config, name));
  return v ? PyObject_IsTrue(v.get()) : -1;
}

bool isSymScalar(PyObject* o, const TorchRefs* t) {
  PyObject* type = reinterpret_cast<PyObject*>(Py_TYPE(o));
  return type == lookup(Obj::torch_SymInt) || type == lookup(Obj::torch_SymFloat) || type == lookup(Obj::torch_SymBool);
}

}  // namespace

bool GraphBuilder::begin() {
  const TorchRefs* t = torchRefs();
  if (!t) return false;
  int capture = configFlag("capture_scalar_outputs");
  if (capture < 0) return false;
  capture_scalars_ = capture == 1;
  if (capture_scalars_) {
    // As torch._dynamo does with capture_scalar_outputs: a ShapeEnv that allows scalar
    // outputs (Tensor.item() -> an unbacked symbol). Inputs stay static: this version
    // has no dynamic shapes, and the tensor guards pin every size.
    shape_env_ = Ref::steal(PyObject_CallNoArgs(lookup(Obj::torch_ShapeEnv)));
    if (!shape_env_) return false;
    Ref kw = Ref::steal(Py_BuildValue("{s:O,s:O}", "shape_env", shape_env_.get(), "static_shapes", Py_True));
    Ref no_args = Ref::steal(PyTuple_New(0));
    if (!kw || !no_args) return false;
    mode_ = Ref::steal(PyObject_Call(lookup(Obj::torch_FakeTensorMode), no_args.get(), kw.get()));
  } else {
    mode_ = Ref::steal(PyObject_CallNoArgs(lookup(Obj::torch_FakeTensorMode)));
  }
  if (!mode_) return false;
  Ref allow = Ref::steal(PyObject_GetAttrString(mode_.get(), "_allow_unsafe_data_ptr_access"));
  if (!allow) return false;
  allow_data_ptr_ = PyObject_IsTrue(allow.get()) == 1;
  Ref r = Ref::steal(PyObject_CallMethod(mode_.get(), "__enter__", nullptr));
  if (!r) return false;
  entered_ = true;
  return true;
}

void GraphBuilder::finish() {
  if (!entered_) return;
  entered_ = false;
  // Keep a pending exception (if any) across __exit__.
  PyObject *type, *value, *tb;
  PyErr_Fetch(&type, &value, &tb);
  Ref r = Ref::steal(PyObject_CallMethod(mode_.get(), "__exit__", "OOO", Py_None, Py_None, Py_None));
  if (!r) PyErr_Clear();
  PyErr_Restore(type, value, tb);
}

int GraphBuilder::addInput(PyObject* real, const std::string& name) {
  Node n{NodeOp::Placeholder};
  n.name = name;
  n.fake = inputFake(real);
  if (!n.fake) return -1;
  nodes_.push_back(std::move(n));
  return numNodes() - 1;
}

// FakeTensorMode.from_tensor(real), or the same made directly (the input shortcut; see the
// header). from_tensor converts each real tensor once and returns that fake for it again;
// the shortcut keeps the same identity for what it makes.
Ref GraphBuilder::inputFake(PyObject* real) {
  const TorchRefs* t = torchRefs();
  if (!t) return Ref();
  auto seen = input_fakes_.find(real);
  if (seen != input_fakes_.end()) return seen->second.second.copy();
  PyObject* type = reinterpret_cast<PyObject*>(Py_TYPE(real));
  uint64_t keys = 0;
  Ref kind;
  const void* storage = torchimpl::storageId(real);
  if (!shape_env_ && (type == lookup(Obj::torch_Tensor) || type == lookup(Obj::torch_nn_Parameter)) && storage &&
      !input_storages_.count(storage) && torchimpl::plainLeaf(real, &keys)) {
    Ref dtype = Ref::steal(PyObject_GetAttrString(real, "dtype"));
    Ref device = Ref::steal(PyObject_GetAttrString(real, "device"));
    Ref rg = Ref::steal(PyObject_GetAttrString(real, "requires_grad"));
    Ref key_set = Ref::steal(PyLong_FromUnsignedLongLong(keys));
    if (!dtype || !device || !rg || !key_set) return Ref();
    kind = Ref::steal(PyTuple_Pack(5, type, dtype.get(), device.get(), rg.get(), key_set.get()));
    if (!kind) return Ref();
    if (!input_templates_) {
      input_templates_ = Ref::steal(PyDict_New());
      if (!input_templates_) return Ref();
    }
    PyObject* dict = PyDict_GetItemWithError(input_templates_.get(), kind.get());
    if (dict) {
      FakeSpec spec;
      spec.shape = Ref::steal(PyObject_GetAttrString(real, "shape"));
      spec.stride = Ref::steal(PyObject_CallMethod(real, "stride", nullptr));
      spec.dtype = std::move(dtype);
      spec.device = std::move(device);
      spec.dict = Ref::borrow(dict);
      if (!spec.shape || !spec.stride) return Ref();
      Ref fake = makeFake(spec, {}, /*input=*/true, rg.get() == Py_True);
      if (!fake) return Ref();
      input_fakes_.emplace(real, std::make_pair(Ref::borrow(real), fake.copy()));
      input_storages_.emplace(storage, real);
      return fake;
    }
    if (PyErr_Occurred()) return Ref();
  }
  // from_tensor. The storages it reaches: a fake the shortcut made for one of them must be
  // in the converter's memos first, so that it aliases it as it would have.
  std::vector<const void*> related;
  torchimpl::relatedStorages(real, &related);
  for (const void* s : related) {
    auto it = input_storages_.find(s);
    if (it != input_storages_.end() && it->second) {
      if (!registerWithConverter(it->second)) return Ref();
      it->second = nullptr;
    }
  }
  Ref fake = Ref::steal(PyObject_CallMethod(mode_.get(), "from_tensor", "O", real));
  if (!fake) return Ref();
  for (const void* s : related) input_storages_.emplace(s, nullptr);
  if (!kind) return fake;
  // The first of its kind: remember its attributes if the shortcut makes the same thing
  // (a FakeTensor leaf of this mode in the same plain form; its requires_grad is the real one's).
  if (reinterpret_cast<PyObject*>(Py_TYPE(fake.get())) != lookup(Obj::torch_FakeTensor) ||
      !torchimpl::plainFakeLeaf(fake.get()))
    return fake;
  Ref dict = Ref::steal(PyObject_GenericGetDict(fake.get(), nullptr));
  if (!dict) return Ref();
  if (templateDictOk(dict.get(), /*allow_param=*/true)) {
    Ref copy = Ref::steal(PyDict_Copy(dict.get()));
    if (!copy || PyDict_SetItem(input_templates_.get(), kind.get(), copy.get()) < 0) return Ref();
  }
  return fake;
}

// What FakeTensorConverter.from_real_tensor records for a plain leaf it converts: the fake
// in its tensor memo, the fake's storage in the MetaConverter's storage memo (both keyed by
// the describer's ids of the real tensor and storage).
bool GraphBuilder::registerWithConverter(PyObject* real) {
  auto it = input_fakes_.find(real);
  if (it == input_fakes_.end()) return true;
  PyObject* fake = it->second.second.get();
  Ref converter = Ref::steal(PyObject_GetAttrString(mode_.get(), "fake_tensor_converter"));
  if (!converter) return false;
  Ref r = Ref::steal(PyObject_CallMethod(converter.get(), "set_tensor_memo", "OO", real, fake));
  if (!r) return false;
  Ref meta = Ref::steal(PyObject_GetAttrString(converter.get(), "meta_converter"));
  Ref describer = meta ? Ref::steal(PyObject_GetAttrString(meta.get(), "describer")) : Ref();
  Ref real_storage = Ref::steal(PyObject_CallMethod(real, "untyped_storage", nullptr));
  Ref fake_storage = Ref::steal(PyObject_CallMethod(fake, "untyped_storage", nullptr));
  if (!describer || !real_storage || !fake_storage) return false;
  Ref sid = Ref::steal(PyObject_CallMethod(describer.get(), "get_storage_id", "O", real_storage.get()));
  Ref memo = sid ? Ref::steal(PyObject_GetAttrString(meta.get(), "storage_memo")) : Ref();
  return memo && PyObject_SetItem(memo.get(), sid.get(), fake_storage.get()) == 0;
}

Ref GraphBuilder::materialize(const Arg& a, bool fx, const std::vector<Ref>* fx_nodes) {
  switch (a.kind) {
    case Arg::Kind::Node:
      return fx ? (*fx_nodes)[a.node].copy() : nodes_[a.node].fake.copy();
    case Arg::Kind::Const:
      return a.constant.copy();
    case Arg::Kind::Tuple:
    case Arg::Kind::List: {
      Py_ssize_t n = static_cast<Py_ssize_t>(a.items.size());
      Ref seq = Ref::steal(a.kind == Arg::Kind::Tuple ? PyTuple_New(n) : PyList_New(n));
      if (!seq) return Ref();
      for (Py_ssize_t i = 0; i < n; ++i) {
        Ref item = materialize(a.items[i], fx, fx_nodes);
        if (!item) return Ref();
        if (a.kind == Arg::Kind::Tuple)
          PyTuple_SET_ITEM(seq.get(), i, item.release());
        else
          PyList_SET_ITEM(seq.get(), i, item.release());
      }
      return seq;
    }
    case Arg::Kind::Slice: {
      CDYNAMO_CHECK(a.items.size() == 3, "slice argument needs three parts");
      Ref start = materialize(a.items[0], fx, fx_nodes);
      Ref stop = materialize(a.items[1], fx, fx_nodes);
      Ref step = materialize(a.items[2], fx, fx_nodes);
      if (!start || !stop || !step) return Ref();
      return Ref::steal(PySlice_New(start.get(), stop.get(), step.get()));
    }
  }
  return Ref();
}

int GraphBuilder::addCall(NodeOp op, PyObject* target, std::vector<Arg> args,
                          std::vector<std::pair<Ref, Arg>> kwargs, Ref* plain_result) {
  Node n{op};
  n.target = Ref::borrow(target);
  n.args = std::move(args);
  n.kwargs = std::move(kwargs);

  // The memo first: an identical op on identically shaped inputs makes its result directly.
  Ref key = memoKey(op, target, n.args, n.kwargs);
  if (key) {
    PyObject* index = PyDict_GetItemWithError(memo_.get(), key.get());
    if (index) {
      const MemoEntry& entry = memo_entries_[PyLong_AsSize_t(index)];
      n.fake = memoMake(entry, n);
      if (!n.fake) {
        PyErr_Clear();  // fall back to running it
      } else if (entry.alias_arg >= 0) {
        n.sig = nodes_[n.args[entry.alias_arg].node].sig.copy();  // the argument's, if known
      } else if (!entry.tuple) {
        // The new node's own signature is known (see nodeSig).
        const FakeSpec& spec = entry.outputs[0];
        n.sig = Ref::steal(PyTuple_Pack(5, spec.dtype.get(), spec.device.get(), spec.shape.get(), spec.stride.get(),
                                        spec.requires_grad ? Py_True : Py_False));
        if (!n.sig) PyErr_Clear();
      }
    } else if (PyErr_Occurred()) {
      PyErr_Clear();
      key = Ref();
    }
  }

  if (!n.fake) {
    std::vector<long long> versions_before;
    if (key)
      for (const Arg& a : n.args)
        versions_before.push_back(a.kind == Arg::Kind::Node ? tensorVersion(nodes_[a.node].fake.get()) : -1);
    // Run the call on fake values.
    Ref fargs = Ref::steal(PyTuple_New(static_cast<Py_ssize_t>(n.args.size())));
    if (!fargs) return -1;
    for (size_t i = 0; i < n.args.size(); ++i) {
      Ref v = materialize(n.args[i], false, nullptr);
      if (!v) return -1;
      PyTuple_SET_ITEM(fargs.get(), i, v.release());
    }
    Ref fkwargs;
    if (!n.kwargs.empty()) {
      fkwargs = Ref::steal(PyDict_New());
      if (!fkwargs) return -1;
      for (auto& [k, v] : n.kwargs) {
        Ref val = materialize(v, false, nullptr);
        if (!val || PyDict_SetItem(fkwargs.get(), k.get(), val.get()) < 0) return -1;
      }
    }
    if (op == NodeOp::CallMethod) {
      // target is the method name; args[0] is the receiver.
      CDYNAMO_CHECK(PyTuple_GET_SIZE(fargs.get()) >= 1, "method call without receiver");
      Ref method = Ref::steal(PyObject_GetAttr(PyTuple_GET_ITEM(fargs.get(), 0), target));
      if (!method) return -1;
      Ref rest = Ref::steal(PyTuple_GetSlice(fargs.get(), 1, PyTuple_GET_SIZE(fargs.get())));
      if (!rest) return -1;
      n.fake = Ref::steal(PyObject_Call(method.get(), rest.get(), fkwargs.get()));
    } else {
      n.fake = Ref::steal(PyObject_Call(target, fargs.get(), fkwargs.get()));
    }
    if (n.fake && key) memoStore(key.get(), n.fake.get(), n, versions_before);
  }
  if (!n.fake) return -1;
  if (shape_env_) {
    // A deferred runtime assert (torch._check(s > 0), or `s >= 0` assumed by an op using
    // s as a size) would have to become a graph node checked on every call; until it is,
    // such a call is not captured (never silently dropped).
    Ref count = Ref::steal(PyObject_GetAttrString(shape_env_.get(), "num_deferred_runtime_asserts"));
    if (!count) return -1;
    Py_ssize_t n_asserts = PyLong_AsSsize_t(count.get());
    if (n_asserts < 0 && PyErr_Occurred()) return -1;
    if (n_asserts != runtime_asserts_) {
      runtime_asserts_ = n_asserts;
      PyErr_SetString(PyExc_NotImplementedError,
                      "it makes an assumption about a value read from a tensor (Tensor.item()) that would need a "
                      "runtime check in the graph (not supported yet)");
      return -1;
    }    // Which new unbacked symbols (Tensor.item()'s) this result binds, as torch._dynamo
    // records them for each node: a backend that re-traces the graph (AOT autograd) needs
    // them, and it consumes the ShapeEnv's pending symbols.
    Ref pending = Ref::steal(PyObject_GetAttrString(shape_env_.get(), "pending_fresh_unbacked_symbols"));
    if (!pending) return -1;
    int any = PyObject_IsTrue(pending.get());
    if (any < 0) return -1;
    if (any) {
      const TorchRefs* t = torchRefs();
      if (!t) return -1;
      n.unbacked_bindings = Ref::steal(PyObject_CallFunctionObjArgs(lookup(Obj::torch_compute_unbacked_bindings),
                                                                    shape_env_.get(), n.fake.get(), nullptr));
      if (!n.unbacked_bindings) return -1;
      if (n.unbacked_bindings.get() == Py_None) n.unbacked_bindings = Ref();
    }
  }
  n.impure = isMutating(op, target);
  // A mutation (x[i] = y returns None) is recorded whatever it returns; a pure call with
  // no tensor in its result is a metadata query and leaves no node. A symbolic scalar
  // (Tensor.item() and arithmetic on it, under capture_scalar_outputs) is a node: its
  // value is only known when the graph runs.
  const TorchRefs* t = torchRefs();
  if (!t) return -1;
  if (!n.impure && !holdsTensor(n.fake.get()) && !isSymScalar(n.fake.get(), t)) {
    *plain_result = std::move(n.fake);
    return kNoTensorResult;
  }
  nodes_.push_back(std::move(n));
  return numNodes() - 1;
}

bool GraphBuilder::isScalar(int id) const {
  const TorchRefs* t = torchRefs();
  PyObject* f = nodes_[id].fake.get();
  return t && f && isSymScalar(f, t);
}

// ----------------------------------------------------------------------------- memo

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

}  // namespace

PyObject* GraphBuilder::nodeSig(int id) {
  Node& n = nodes_[id];
  if (n.sig) return n.sig.get();
  const TorchRefs* t = torchRefs();
  n.sig = Ref::borrow(Py_None);
  PyObject* f = n.fake.get();
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
  Ref sig = Ref::steal(PyTuple_Pack(5, dtype.get(), device.get(), shape.get(), stride.get(), rg.get()));
  if (!sig) {
    PyErr_Clear();
    return Py_None;
  }
  n.sig = std::move(sig);
  return n.sig.get();
}

bool GraphBuilder::argSig(const Arg& a, PyObject* out) {
  switch (a.kind) {
    case Arg::Kind::Node: {
      PyObject* sig = nodeSig(a.node);
      return sig != Py_None && PyList_Append(out, sig) == 0;
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
        if (!argSig(i, items.get())) return false;
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
                          const std::vector<std::pair<Ref, Arg>>& kwargs) {
  const TorchRefs* t = torchRefs();
  if (!t || !mode_ || shape_env_) {
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
    if (!argSig(a, parts.get())) {
      PyErr_Clear();
      return Ref();
    }
  for (const auto& [name, value] : kwargs) {
    // `out=` writes into (and returns) an existing tensor.
    if (PyUnicode_Check(name.get()) && PyUnicode_CompareWithASCIIString(name.get(), "out") == 0)
      return Ref();
    if (PyList_Append(parts.get(), name.get()) < 0 || !argSig(value, parts.get())) {
      PyErr_Clear();
      return Ref();
    }
  }
  Ref key = Ref::steal(PyList_AsTuple(parts.get()));
  if (!key) PyErr_Clear();
  return key;
}

bool GraphBuilder::templateDictOk(PyObject* dict, bool allow_param) const {
  // The attributes FakeTensor.__new__ sets: this mode, the fake device, and Nones (no
  // propagated constant, no real tensor, empty memos); an input may be a parameter.
  // makeFake stores them with setattr: a name that is a class attribute of FakeTensor (a
  // descriptor would take the store) is refused.
  const TorchRefs* t = torchRefs();
  if (!t) return PyErr_Clear(), false;
  PyObject *k, *v;
  Py_ssize_t pos = 0;
  while (PyDict_Next(dict, &pos, &k, &v)) {
    if (!PyUnicode_Check(k)) return false;
    if (_PyType_Lookup(reinterpret_cast<PyTypeObject*>(lookup(Obj::torch_FakeTensor)), k)) return false;
    if (PyUnicode_CompareWithASCIIString(k, "fake_mode") == 0) {
      if (v != mode_.get()) return false;
    } else if (PyUnicode_CompareWithASCIIString(k, "_fake_device") == 0) {
      continue;
    } else if (allow_param && PyUnicode_CompareWithASCIIString(k, "_is_param") == 0) {
      if (v != Py_True) return false;
    } else if (v != Py_None) {
      return false;
    }
  }
  return true;
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
    if (!torchimpl::plainView(fake)) return false;
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
  if (!torchimpl::freshResult(fake)) return false;
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

void GraphBuilder::memoStore(PyObject* key, PyObject* fake, const Node& n,
                             const std::vector<long long>& versions_before) {
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
      Ref index = Ref::steal(PyLong_FromSize_t(memo_entries_.size()));
      if (!index || PyDict_SetItem(memo_.get(), key, index.get()) < 0) {
        PyErr_Clear();
        return;
      }
      memo_entries_.push_back(std::move(entry));
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
  Ref index = Ref::steal(PyLong_FromSize_t(memo_entries_.size()));
  if (!index || PyDict_SetItem(memo_.get(), key, index.get()) < 0) {
    PyErr_Clear();
    return;
  }
  memo_entries_.push_back(std::move(entry));
}

void GraphBuilder::tensorInputs(const Arg& a, std::vector<PyObject*>* out) const {
  if (a.kind == Arg::Kind::Node) {
    PyObject* f = nodes_[a.node].fake.get();
    if (f && isTensor(f)) out->push_back(f);
  }
  for (const Arg& i : a.items) tensorInputs(i, out);
}

Ref GraphBuilder::makeFake(const FakeSpec& spec, const std::vector<PyObject*>& grad_inputs, bool input,
                           bool input_requires_grad) {
  const TorchRefs* t = torchRefs();
  if (!t) return Ref();
  // What FakeTensor.__new__ does, without its Python: an empty meta tensor with the
  // metadata, made a FakeTensor by Tensor._make_subclass, with the attributes of the op's
  // own result. All with the mode's dispatch off (it is entered for the trace).
  Ref fake;
  {
    std::optional<torchimpl::NoInferenceMode> not_inference;
    if (input) not_inference.emplace();
    torchimpl::NoPythonDispatch no_dispatch;
    PyObject* eargs[] = {spec.shape.get(), spec.stride.get(), spec.dtype.get(), t->meta_device.get()};
    Ref elem = Ref::steal(PyObject_Vectorcall(lookup(Obj::torch_empty_strided), eargs, 2, t->empty_kwnames.get()));
    if (!elem) return Ref();
    PyObject* sargs[] = {lookup(Obj::torch_FakeTensor), elem.get(), input_requires_grad ? Py_True : Py_False, Py_True,
                         spec.device.get()};
    fake = Ref::steal(PyObject_Vectorcall(lookup(Obj::torch_Tensor_make_subclass), sargs, 3, t->subclass_kwnames.get()));
    if (!fake) return Ref();
    Ref flag = Ref::steal(PyObject_CallOneArg(
        lookup(allow_data_ptr_ ? Obj::torch_C_set_warn_deprecated_on_mutable_data_ptr
                               : Obj::torch_C_set_throw_on_mutable_data_ptr),
        fake.get()));
    if (!flag) return Ref();
    // Attribute by attribute, in the template's order (the order FakeTensor.__init__ sets
    // them): the instance keeps CPython's key-sharing dict, ~300 bytes, where filling a
    // materialized __dict__ with PyDict_Update made a combined one of ~830 per fake (and the
    // GraphModule keeps one per node). templateDictOk admits only names FakeTensor has no
    // class attribute for, so this stores exactly what the update stored.
    PyObject *key, *value;
    Py_ssize_t pos = 0;
    while (PyDict_Next(spec.dict.get(), &pos, &key, &value))
      if (PyObject_GenericSetAttr(fake.get(), key, value) < 0) return Ref();
    if (spec.requires_grad &&
        !torchimpl::attachErrorGradFn(fake.get(), spec.device_str.c_str(), grad_inputs.data(), grad_inputs.size(),
                                      "cdynamo: differentiating through a fake tensor made by the graph builder's "
                                      "output-metadata memo"))
      return Ref();
  }
  if (!spec.view) return fake;
  // The view, made by the fake mode itself (one dispatch instead of the op's many): a
  // FakeTensor sharing the base's storage, an autograd view of it.
  PyObject* vargs[] = {fake.get(), spec.view_size.get(), spec.view_stride.get(), spec.view_offset.get()};
  return Ref::steal(PyObject_VectorcallMethod(interned(Str::as_strided), vargs, 4, nullptr));
}

Ref GraphBuilder::memoMake(const MemoEntry& entry, const Node& n) {
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

int GraphBuilder::addEffect(PyObject* target, std::vector<Arg> args) {
  Node n{NodeOp::CallFunction};
  n.target = Ref::borrow(target);
  n.args = std::move(args);
  n.impure = true;
  // An effect changes global state that fake results depend on (grad mode, autocast).
  if (memo_) PyDict_Clear(memo_.get());
  memo_entries_.clear();
  Ref fargs = Ref::steal(PyTuple_New(static_cast<Py_ssize_t>(n.args.size())));
  if (!fargs) return -1;
  for (size_t i = 0; i < n.args.size(); ++i) {
    Ref v = materialize(n.args[i], false, nullptr);
    if (!v) return -1;
    PyTuple_SET_ITEM(fargs.get(), i, v.release());
  }
  n.fake = Ref::steal(PyObject_Call(target, fargs.get(), nullptr));
  if (!n.fake) return -1;
  nodes_.push_back(std::move(n));
  return numNodes() - 1;
}

Ref GraphBuilder::callBackend(PyObject* backend, PyObject* gm, PyObject* example_inputs) {
  if (!shape_env_) return Ref::steal(PyObject_CallFunctionObjArgs(backend, gm, example_inputs, nullptr));
  const TorchRefs* t = torchRefs();
  if (!t) return Ref();
  Ref context = Ref::steal(PyObject_CallOneArg(lookup(Obj::torch_guards_TracingContext), mode_.get()));
  Ref manager = context ? Ref::steal(PyObject_CallOneArg(lookup(Obj::torch_guards_tracing), context.get())) : Ref();
  Ref entered = manager ? Ref::steal(PyObject_CallMethod(manager.get(), "__enter__", nullptr)) : Ref();
  if (!entered) return Ref();
  Ref result = Ref::steal(PyObject_CallFunctionObjArgs(backend, gm, example_inputs, nullptr));
  // Leave the context on every path, keeping the backend's error (if any) as the one set.
  PyObject *type, *value, *tb;
  PyErr_Fetch(&type, &value, &tb);
  Ref exited = Ref::steal(PyObject_CallMethod(manager.get(), "__exit__", "OOO", Py_None, Py_None, Py_None));
  if (!exited) {
    if (type) PyErr_Clear();
    else return Ref();  // leaving failed after a success: report that
  }
  PyErr_Restore(type, value, tb);
  return result;
}

namespace {

// Adds nodes to a fresh torch.fx.Graph as Graph.create_node does, with its Python steps done
// here: the same node names (Graph._target_to_str of the target, made unique by the
// graph's _Namespace, whose state is kept the same), the same Node objects, inserted at the
// end, registered in the find_nodes table, counted. What create_node does besides is for
// cases that never arise here (an owning module with create-node hooks: the graph has no
// owner yet) or is only a warning (raw SymInt/SymFloat/SymBool arguments: such a node goes
// through create_node itself). Falls back to create_node altogether when the Graph
// does not have the internals this relies on (another torch version).
class FxNodeMaker {
 public:
  bool init(PyObject* graph) {
    graph_ = graph;
    create_node_ = Ref::steal(PyObject_GetAttrString(graph, "create_node"));
    if (!create_node_) return false;
    PyObject* fx = lookup(Obj::torch_fx_graph);
    if (!fx) return false;
    node_cls_ = Ref::borrow(lookup(Obj::torch_fx_graph_Node));
    if (!node_cls_) return false;
    immutable_dict_ = Ref::borrow(lookup(Obj::torch_fx_immutable_dict));
    if (!immutable_dict_) return false;
    namespace_ = Ref::steal(PyObject_GetAttrString(graph, "_graph_namespace"));
    Ref table = namespace_ ? Ref::steal(PyObject_GetAttrString(graph, "_find_nodes_lookup_table")) : Ref();
    if (namespace_) {
      used_ = Ref::steal(PyObject_GetAttrString(namespace_.get(), "_used_names"));
      base_count_ = Ref::steal(PyObject_GetAttrString(namespace_.get(), "_base_count"));
      obj_to_name_ = Ref::steal(PyObject_GetAttrString(namespace_.get(), "_obj_to_name"));
    }
    insert_ = Ref::steal(PyObject_GetAttrString(graph, "_insert"));
    table_insert_ = table ? Ref::steal(PyObject_GetAttrString(table.get(), "insert")) : Ref();
    // Graph._insert is root.prepend, i.e. root._prepend (NodeBase, C): called directly.
    // _FindNodesLookupTable.insert(n) is table[(n.op, n.target or None)][n] = None (table a
    // defaultdict): done here when the table is of that exact class.
    Ref root = Ref::steal(PyObject_GetAttrString(graph, "_root"));
    Ref prepend = Ref::steal(PyObject_GetAttrString(node_cls_.get(), "prepend"));
    if (root && prepend && insert_ && PyMethod_Check(insert_.get()) && PyMethod_GET_SELF(insert_.get()) == root.get() &&
        PyMethod_GET_FUNCTION(insert_.get()) == prepend.get())
      root_prepend_ = Ref::steal(PyObject_GetAttrString(root.get(), "_prepend"));
    Ref table_cls = Ref::borrow(lookup(Obj::torch_fx_graph_FindNodesLookupTable));
    if (table && table_cls && reinterpret_cast<PyObject*>(Py_TYPE(table.get())) == table_cls.get())
      table_dict_ = Ref::steal(PyObject_GetAttrString(table.get(), "table"));
    Ref defaultdict = Ref::borrow(lookup(Obj::collections_defaultdict));
    if (table_dict_ && (!defaultdict || !PyObject_TypeCheck(table_dict_.get(), reinterpret_cast<PyTypeObject*>(
                                                                                 defaultdict.get()))))
      table_dict_ = Ref();
    target_to_str_ = Ref::steal(PyObject_GetAttrString(graph, "_target_to_str"));
    illegal_ = Ref::steal(PyObject_GetAttrString(fx, "_illegal_names"));
    Ref len = Ref::steal(PyObject_GetAttrString(graph, "_len"));
    fast_ = used_ && PySet_CheckExact(used_.get()) && base_count_ && PyDict_CheckExact(base_count_.get()) &&
            obj_to_name_ && PyDict_CheckExact(obj_to_name_.get()) && insert_ && table_insert_ && target_to_str_ &&
            illegal_ && PyDict_Check(illegal_.get()) && len && PyLong_CheckExact(len.get()) &&
            PyLong_AsLong(len.get()) == 0;
    PyErr_Clear();  // a missing internal: the slow path
    return true;
  }

  // A node like graph.create_node(op, target, args, kwargs); new reference or null.
  Ref make(Str op, PyObject* target, PyObject* args, PyObject* kwargs, bool plain_args) {
    PyObject* op_str = interned(op);
    if (!op_str) return Ref();
    if (!fast_ || !plain_args) {
      PyObject* argv[] = {op_str, target, args, kwargs};
      return Ref::steal(PyObject_Vectorcall(create_node_.get(), argv, 4, nullptr));
    }
    // create_node: `if not kwargs: kwargs = immutable_dict()` (args here are always a tuple).
    Ref empty_kwargs;
    if (PyDict_GET_SIZE(kwargs) == 0) {
      empty_kwargs = Ref::steal(PyObject_CallNoArgs(immutable_dict_.get()));
      if (!empty_kwargs) return Ref();
      kwargs = empty_kwargs.get();
    }
    Ref candidate = candidateFor(target);
    if (!candidate) return Ref();
    Ref name = uniqueName(candidate.get());
    if (!name) return Ref();
    PyObject* argv[] = {graph_, name.get(), op_str, target, args, kwargs};
    Ref node = Ref::steal(PyObject_Vectorcall(node_cls_.get(), argv, 6, nullptr));
    if (!node) return Ref();
    // _Namespace.associate_name_with_obj, Graph._insert, _FindNodesLookupTable.insert.
    PyObject* existing = PyDict_SetDefault(obj_to_name_.get(), node.get(), name.get());
    if (!existing) return Ref();
    if (existing != name.get()) {
      PyErr_SetString(PyExc_AssertionError, "obj is already associated");
      return Ref();
    }
    Ref r = Ref::steal(PyObject_CallOneArg((root_prepend_ ? root_prepend_ : insert_).get(), node.get()));
    if (!r) return Ref();
    if (table_dict_) {
      bool call = op == Str::call_function;
      Ref key = Ref::steal(PyTuple_Pack(2, op_str, call ? target : Py_None));
      Ref sub = key ? Ref::steal(PyObject_GetItem(table_dict_.get(), key.get())) : Ref();
      if (!sub || PyObject_SetItem(sub.get(), node.get(), Py_None) < 0) return Ref();
    } else {
      r = Ref::steal(PyObject_CallOneArg(table_insert_.get(), node.get()));
      if (!r) return Ref();
    }
    ++made_;
    return node;
  }

  // Graph._len += the nodes made here.
  bool finish() {
    if (!made_) return true;
    Ref len = Ref::steal(PyObject_GetAttrString(graph_, "_len"));
    if (!len) return false;
    Ref n = Ref::steal(PyLong_FromSsize_t(PyLong_AsSsize_t(len.get()) + made_));
    return n && PyObject_SetAttrString(graph_, "_len", n.get()) == 0;
  }

 private:
  // Graph._target_to_str(target), once per target.
  Ref candidateFor(PyObject* target) {
    auto it = candidates_.find(target);
    if (it != candidates_.end()) return it->second.second.copy();
    Ref c = Ref::steal(PyObject_CallOneArg(target_to_str_.get(), target));
    if (!c) return Ref();
    candidates_.emplace(target, std::make_pair(Ref::borrow(target), c.copy()));
    return c;
  }

  // _Namespace.create_name(candidate, None) on the namespace's own state.
  Ref uniqueName(PyObject* candidate) {
    Py_ssize_t len = 0;
    const char* s = PyUnicode_AsUTF8AndSize(candidate, &len);
    if (!s) return Ref();
    // _name_regex: ^([a-zA-Z_][0-9a-zA-Z_]*?)(?:_(\d+))?$ ; a candidate it does not match is
    // sanitized by create_name itself.
    bool ok = len > 0 && (std::isalpha(static_cast<unsigned char>(s[0])) || s[0] == '_');
    for (Py_ssize_t i = 0; ok && i < len; ++i)
      ok = std::isalnum(static_cast<unsigned char>(s[i])) || s[i] == '_';
    if (!ok || !PyUnicode_IS_ASCII(candidate)) {
      Ref create = Ref::steal(PyObject_GetAttrString(namespace_.get(), "create_name"));
      return create ? Ref::steal(PyObject_CallFunctionObjArgs(create.get(), candidate, Py_None, nullptr)) : Ref();
    }
    // The lazy base with an optional "_<digits>" suffix: the suffix starts at the last '_'
    // when every character after it is a digit (at least one) and the base is not empty.
    Py_ssize_t split = -1;
    for (Py_ssize_t i = len - 1; i > 0; --i) {
      if (s[i] == '_') {
        if (i < len - 1) split = i;
        break;
      }
      if (!std::isdigit(static_cast<unsigned char>(s[i]))) break;
    }
    Ref base = split < 0 ? Ref::borrow(candidate) : Ref::steal(PyUnicode_FromStringAndSize(s, split));
    if (!base) return Ref();
    Ref name = Ref::borrow(candidate);
    long long num = 0;
    int in_use = PySet_Contains(used_.get(), candidate);
    if (in_use < 0) return Ref();
    if (split < 0 || in_use) {
      PyObject* count = PyDict_GetItemWithError(base_count_.get(), base.get());
      if (!count && PyErr_Occurred()) return Ref();
      num = count ? PyLong_AsLongLong(count) : 0;
      if (num == -1 && PyErr_Occurred()) return Ref();
      PyObject* illegal = PyDict_GetItemWithError(illegal_.get(), candidate);
      if (!illegal && PyErr_Occurred()) return Ref();
      if (illegal && illegal != Py_None) {
        ++num;
        name = Ref::steal(PyUnicode_FromFormat("%U_%lld", base.get(), num));
        if (!name) return Ref();
      }
    } else {
      Ref digits = Ref::steal(PyUnicode_FromStringAndSize(s + split + 1, len - split - 1));
      Ref value = digits ? Ref::steal(PyLong_FromUnicodeObject(digits.get(), 10)) : Ref();
      if (!value) return Ref();
      num = PyLong_AsLongLong(value.get());
      if (num == -1 && PyErr_Occurred()) return Ref();  // beyond 64 bits: not made here
    }
    for (;;) {
      int used = PySet_Contains(used_.get(), name.get());
      if (used < 0) return Ref();
      if (!used) break;
      ++num;
      name = Ref::steal(PyUnicode_FromFormat("%U_%lld", base.get(), num));
      if (!name) return Ref();
    }
    Ref count = Ref::steal(PyLong_FromLongLong(num));
    if (!count || PySet_Add(used_.get(), name.get()) < 0 || PyDict_SetItem(base_count_.get(), base.get(), count.get()) < 0)
      return Ref();
    return name;
  }

  PyObject* graph_ = nullptr;
  bool fast_ = false;
  Py_ssize_t made_ = 0;
  Ref root_prepend_, table_dict_;  // fast forms of insert_ / table_insert_, when they apply
  Ref create_node_, node_cls_, immutable_dict_, namespace_, used_, base_count_, obj_to_name_, insert_, table_insert_, target_to_str_,
      illegal_;
  std::unordered_map<PyObject*, std::pair<Ref, Ref>> candidates_;  // target -> (target, candidate name)
};

// Whether an argument tree holds no raw symbolic number (create_node warns about those).
bool plainArg(const Arg& a, const TorchRefs* t) {
  if (a.kind == Arg::Kind::Const && a.constant && isSymScalar(a.constant.get(), t)) return false;
  for (const Arg& i : a.items)
    if (!plainArg(i, t)) return false;
  return true;
}

}  // namespace

Ref GraphBuilder::buildGraphModule(const std::vector<int>& outputs, std::vector<int>* inputs_used,
                                   int* op_count) {
  const TorchRefs* t = torchRefs();
  if (!t) return Ref();

  // Liveness: everything reachable from the outputs, plus impure nodes and their inputs.
  std::vector<char> live(nodes_.size(), 0);
  std::vector<int> work(outputs.begin(), outputs.end());
  for (int i = 0; i < numNodes(); ++i)
    if (nodes_[i].impure) work.push_back(i);
  auto visitArg = [&](const Arg& a, auto&& self) -> void {
    if (a.kind == Arg::Kind::Node) work.push_back(a.node);
    for (const Arg& i : a.items) self(i, self);
  };
  while (!work.empty()) {
    int id = work.back();
    work.pop_back();
    if (live[id]) continue;
    live[id] = 1;
    for (const Arg& a : nodes_[id].args) visitArg(a, visitArg);
    for (const auto& kv : nodes_[id].kwargs) visitArg(kv.second, visitArg);
  }

  Ref graph = Ref::steal(PyObject_CallNoArgs(lookup(Obj::torch_fx_Graph)));
  if (!graph) return Ref();
  FxNodeMaker maker;
  if (!maker.init(graph.get())) return Ref();
  Ref no_args = Ref::steal(PyTuple_New(0));
  if (!no_args) return Ref();
  std::vector<Ref> fx_nodes(nodes_.size());
  std::vector<PyObject*> order;  // the FX nodes in graph order (kept alive by fx_nodes / out)
  PyObject* meta_key = interned(Str::meta);
  PyObject* example_key = interned(Str::example_value);
  *op_count = 0;
  inputs_used->clear();
  // Two passes: placeholders first (backends expect graph inputs before any call, and a
  // parameter may be first read mid-trace), then the calls in program order.
  for (int pass = 0; pass < 2; ++pass)
  for (int i = 0; i < numNodes(); ++i) {
    if (!live[i]) continue;
    const Node& n = nodes_[i];
    if ((n.op == NodeOp::Placeholder) != (pass == 0)) continue;
    Ref fxn;
    if (n.op == NodeOp::Placeholder) {
      // graph.placeholder(name): create_node("placeholder", name, args=(), kwargs={}).
      Ref name = Ref::steal(PyUnicode_FromStringAndSize(n.name.data(), static_cast<Py_ssize_t>(n.name.size())));
      Ref kw = Ref::steal(PyDict_New());
      if (!name || !kw) return Ref();
      fxn = maker.make(Str::placeholder, name.get(), no_args.get(), kw.get(), true);
      inputs_used->push_back(i);
    } else {
      Ref fargs = Ref::steal(PyTuple_New(static_cast<Py_ssize_t>(n.args.size())));
      if (!fargs) return Ref();
      bool plain = true;
      for (size_t k = 0; k < n.args.size(); ++k) {
        Ref v = materialize(n.args[k], true, &fx_nodes);
        if (!v) return Ref();
        PyTuple_SET_ITEM(fargs.get(), k, v.release());
        plain = plain && plainArg(n.args[k], t);
      }
      Ref fkwargs = Ref::steal(PyDict_New());
      if (!fkwargs) return Ref();
      for (const auto& [k, v] : n.kwargs) {
        Ref val = materialize(v, true, &fx_nodes);
        if (!val || PyDict_SetItem(fkwargs.get(), k.get(), val.get()) < 0) return Ref();
        plain = plain && plainArg(v, t);
      }
      fxn = maker.make(n.op == NodeOp::CallMethod ? Str::call_method : Str::call_function, n.target.get(), fargs.get(),
                       fkwargs.get(), plain);
      ++*op_count;
    }
    if (!fxn) return Ref();
    Ref meta = Ref::steal(PyObject_GetAttr(fxn.get(), meta_key));
    if (!meta || PyDict_SetItem(meta.get(), example_key, n.fake.get()) < 0) return Ref();
    if (n.unbacked_bindings && PyDict_SetItemString(meta.get(), "unbacked_bindings", n.unbacked_bindings.get()) < 0)
      return Ref();
    order.push_back(fxn.get());
    fx_nodes[i] = std::move(fxn);
  }
  if (!maker.finish()) return Ref();
  Ref outs = Ref::steal(PyTuple_New(static_cast<Py_ssize_t>(outputs.size())));
  if (!outs) return Ref();
  for (size_t k = 0; k < outputs.size(); ++k)
    PyTuple_SET_ITEM(outs.get(), k, fx_nodes[outputs[k]].copy().release());
  Ref out = Ref::steal(PyObject_CallMethod(graph.get(), "output", "(O)", outs.get()));
  if (!out) return Ref();
  order.push_back(out.get());
  Ref root = Ref::steal(PyObject_CallNoArgs(lookup(Obj::torch_nn_Module)));
  if (!root) return Ref();
  // The forward's source generated here when FX would generate the same (fx_codegen.h).
  Ref code = fxcodegen::precompute(graph.get(), order);
  if (code) return fxcodegen::construct(lookup(Obj::torch_fx_GraphModule), root.get(), graph.get(), code.get());
  if (PyErr_Occurred()) return Ref();
  return Ref::steal(PyObject_CallFunctionObjArgs(lookup(Obj::torch_fx_GraphModule), root.get(), graph.get(), nullptr));
}

}  // namespace cdynamo::graph
