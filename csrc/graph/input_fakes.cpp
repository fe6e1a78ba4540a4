// The fakes of graph inputs: FakeTensorMode.from_tensor, or the input shortcut
// (graph_builder.h).
#include "graph/graph_builder.h"

#include "graph/fake_autograd.h"
#include "graph/torch_refs.h"
#include "support/lookup.h"

namespace cdynamo::graph {

namespace {

// The input templates of every trace so far (kind -> the converted fake's __dict__ with
// "fake_mode" None): what from_tensor sets on a plain leaf depends on its kind and on the
// mode only through "fake_mode" (templateDictOk admits nothing else), so a trace starts
// from them instead of converting the first input of each kind again. Bounded: a kind is
// a (type, dtype, device, requires_grad, dispatch keys) tuple, and few exist.
constexpr Py_ssize_t kMaxSharedTemplates = 256;

PyObject* sharedTemplates() {
  static Ref& dict = *new Ref();  // Note [Python references in statics] (support/pyref.h)
  if (!dict) dict = Ref::steal(PyDict_New());
  return dict.get();
}

// `dict` with its "fake_mode" item set to `mode` (a new dict, same order), or null with an
// error set.
Ref withMode(PyObject* dict, PyObject* mode) {
  Ref out = Ref::steal(PyDict_Copy(dict));
  if (out && PyDict_SetItemString(out.get(), "fake_mode", mode) < 0) return Ref();
  return out;
}

}  // namespace

// Before FakeTensorMode.from_tensor(real): a fake the shortcut made for a storage `real`
// reaches must be in the converter's memos first, so that the conversion aliases it as it
// would have. `related` gets those storages (for afterConversion).
bool GraphBuilder::beforeConversion(PyObject* real, std::vector<const void*>* related) {
  torchimpl::relatedStorages(real, related);
  for (const void* s : *related) {
    auto it = input_storages_.find(s);
    if (it != input_storages_.end() && it->second) {
      if (!registerWithConverter(it->second)) return false;
      it->second = nullptr;
    }
  }
  return true;
}

// After the conversion: the converter knows those storages (a later input reaching one is
// converted too, never made by the shortcut).
void GraphBuilder::afterConversion(const std::vector<const void*>& related) {
  for (const void* s : related) input_storages_.emplace(s, nullptr);
}

// FakeTensorMode.from_tensor(real), or the same made directly (the input shortcut; see the
// header). from_tensor converts each real tensor once and returns that fake for it again;
// the shortcut keeps the same identity for what it makes.
namespace {

// functorch's interpreter stack taken off for the span of a scope, and put back after. A
// frame called inside an eager transform (an eager grad calling a compiled function) runs
// with the transform's level active: the ops that make a plain input's fake would run under
// it, and a grad level wraps every result. A plain input is plain whatever the stack; a
// functorch-wrapped one is converted with the stack in place (the converter takes it off
// and puts the levels back on the fake itself).
class FunctorchStackAside {
 public:
  explicit FunctorchStackAside(PyObject* real) {
    PyObject* peek = lookup(Obj::functorch_peek_interpreter_stack);
    PyObject* is_wrapped = lookup(Obj::functorch_is_wrapped);
    PyObject* pop = lookup(Obj::functorch_pop_layer);
    if (!peek || !is_wrapped || !pop) { ok_ = false; return; }
    Ref top = Ref::steal(PyObject_CallNoArgs(peek));
    if (!top) { ok_ = false; return; }
    if (top.get() == Py_None) return;
    Ref wrapped = Ref::steal(PyObject_CallOneArg(is_wrapped, real));
    if (!wrapped) { ok_ = false; return; }
    if (wrapped.get() == Py_True) return;
    for (;;) {
      Ref t = Ref::steal(PyObject_CallNoArgs(peek));
      if (!t) { ok_ = false; return; }
      if (t.get() == Py_None) break;
      Ref layer = Ref::steal(PyObject_CallNoArgs(pop));
      if (!layer) { ok_ = false; return; }
      layers_.push_back(std::move(layer));
    }
  }
  ~FunctorchStackAside() {
    if (layers_.empty()) return;
    PyObject *type, *value, *tb;
    PyErr_Fetch(&type, &value, &tb);
    PyObject* push = lookup(Obj::functorch_push_layer);
    while (push && !layers_.empty()) {
      Ref r = Ref::steal(PyObject_CallOneArg(push, layers_.back().get()));
      if (!r) PyErr_Clear();
      layers_.pop_back();
    }
    PyErr_Restore(type, value, tb);
  }
  bool ok() const { return ok_; }

 private:
  std::vector<Ref> layers_;  // innermost first
  bool ok_ = true;
};

}  // namespace

Ref GraphBuilder::inputFake(PyObject* real, bool force_static) {
  FunctorchStackAside aside(real);
  if (!aside.ok()) return Ref();
  return inputFakeNow(real, force_static);
}

Ref GraphBuilder::inputFakeNow(PyObject* real, bool force_static) {
  const TorchRefs* t = torchRefs();
  if (!t) return Ref();
  auto seen = input_fakes_.find(real);
  if (seen != input_fakes_.end()) return seen->second.second.copy();
  PyObject* type = reinterpret_cast<PyObject*>(Py_TYPE(real));
  uint64_t keys = 0;
  Ref kind;
  const void* storage = torchimpl::storageId(real);
  // Static sizes: no ShapeEnv, or an input of a symbolic trace whose sizes all stay static
  // (_shapes.input_fake; converted with static_shapes=True below, no symbol involved).
  if ((!shape_env_ || symbolic_) && (type == lookup(Obj::torch_Tensor) || type == lookup(Obj::torch_nn_Parameter)) && storage &&
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
    PyObject* shared_templates = sharedTemplates();
    if (!shared_templates) return Ref();
    if (!dict && !PyErr_Occurred()) {
      // The first of its kind in this trace: a template of an earlier trace, if any.
      PyObject* shared = PyDict_GetItemWithError(shared_templates, kind.get());
      if (shared) {
        Ref mine = withMode(shared, mode_.get());
        if (!mine || PyDict_SetItem(input_templates_.get(), kind.get(), mine.get()) < 0) return Ref();
        dict = mine.get();  // kept alive by input_templates_
      }
    }
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
      // In a symbolic trace the converter must know it now: a backend converting the real
      // input again (AOT autograd, through the mode) would otherwise get sizes of fresh
      // symbols, duck-sized to the graph's, and guards relating them.
      if (symbolic_) {
        if (!registerWithConverter(real)) return Ref();
        input_storages_[storage] = nullptr;
      }
      return fake;
    }
    if (PyErr_Occurred()) return Ref();
  }
  // from_tensor. The storages it reaches: a fake the shortcut made for one of them must be
  // in the converter's memos first, so that it aliases it as it would have.
  std::vector<const void*> related;
  if (!beforeConversion(real, &related)) return Ref();
  Ref fake;
  if (symbolic_ || (force_static && shape_env_)) {
    // from_tensor(real, static_shapes=True): no symbols. A symbolic trace's mode makes
    // symbolic sizes by default, and this input's stay static; a static tensor with a
    // guarded identity (a graph attribute) never has symbols.
    Ref no_args = Ref::steal(PyTuple_New(1));
    Ref kw = Ref::steal(Py_BuildValue("{s:O}", "static_shapes", Py_True));
    Ref from_tensor = Ref::steal(PyObject_GetAttrString(mode_.get(), "from_tensor"));
    if (!no_args || !kw || !from_tensor) return Ref();
    PyTuple_SET_ITEM(no_args.get(), 0, Py_NewRef(real));
    fake = Ref::steal(PyObject_Call(from_tensor.get(), no_args.get(), kw.get()));
  } else {
    fake = Ref::steal(PyObject_CallMethod(mode_.get(), "from_tensor", "O", real));
  }
  if (!fake) return Ref();
  afterConversion(related);
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
    PyObject* shared_templates = sharedTemplates();
    if (!shared_templates) return Ref();
    if (PyDict_GET_SIZE(shared_templates) < kMaxSharedTemplates) {
      Ref shared = withMode(dict.get(), Py_None);  // holds no mode of this trace
      if (!shared || PyDict_SetItem(shared_templates, kind.get(), shared.get()) < 0) return Ref();
    }
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

}  // namespace cdynamo::graph
