// The fakes of graph inputs: FakeTensorMode.from_tensor, or the input shortcut
// (graph_builder.h).
#include "graph/graph_builder.h"

#include "graph/fake_autograd.h"
#include "graph/torch_refs.h"
#include "support/lookup.h"

namespace cdynamo::graph {

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
  // Under a ShapeEnv only in a symbolic trace, for the static inputs addSymbolicInput sends
  // here (parameters of at least one dimension).
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
  Ref fake;
  if (symbolic_) {
    // The mode makes symbolic sizes by default: this input's are static (as input_fake
    // makes a parameter's).
    Ref from = Ref::steal(PyObject_GetAttrString(mode_.get(), "from_tensor"));
    Ref args = Ref::steal(PyTuple_Pack(1, real));
    Ref kw = Ref::steal(Py_BuildValue("{s:O}", "static_shapes", Py_True));
    if (!from || !args || !kw) return Ref();
    fake = Ref::steal(PyObject_Call(from.get(), args.get(), kw.get()));
  } else {
    fake = Ref::steal(PyObject_CallMethod(mode_.get(), "from_tensor", "O", real));
  }
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

}  // namespace cdynamo::graph
