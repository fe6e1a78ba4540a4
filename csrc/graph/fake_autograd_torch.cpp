// See fake_autograd.h. The graph stage's only unit built against torch's C++ headers
// (CMakeLists.txt gives it the wheel's include paths and links libtorch_cpu + libc10; the
// process has them loaded already, since tracing runs under torch's FakeTensorMode).
//
// Layout assumption, as in guards/tensor_check_torch.cpp: every object passed here is an
// instance of a torch._C.TensorBase subclass, i.e. a THPVariable; callers compare exact
// types (FakeTensor, torch.Tensor, nn.Parameter) before calling.
#include <ATen/core/Tensor.h>
#include <c10/core/Allocator.h>
#include <c10/core/Storage.h>
#include <c10/core/GradMode.h>
#include <c10/core/InferenceMode.h>
#include <c10/core/impl/LocalDispatchKeySet.h>
#include <torch/csrc/autograd/function.h>
#include <torch/csrc/autograd/functions/basic_ops.h>
#include <torch/csrc/autograd/functions/utils.h>
#include <torch/csrc/autograd/python_variable.h>
#include <torch/csrc/jit/frontend/tracer.h>

#include "graph/fake_autograd.h"

namespace cdynamo::graph::torchimpl {
namespace {

inline const at::Tensor& var(PyObject* obj) { return reinterpret_cast<THPVariable*>(obj)->cdata; }

// What torch._C._DisableTorchDispatch excludes (torch/csrc/utils/disable_torch_function.h).
struct DispatchGuards {
  c10::impl::ExcludeDispatchKeyGuard guard{
      c10::DispatchKeySet({c10::DispatchKey::Python, c10::DispatchKey::PreDispatch})};
  c10::impl::ExcludeDispatchKeyGuard tls_snapshot{c10::DispatchKey::PythonTLSSnapshot};
};

// Dense, strided, static, offset 0, storage holding exactly the elements.
bool plainLayout(c10::TensorImpl* impl) {
  if (impl->layout() != c10::kStrided || !impl->has_storage() || impl->is_conj() || impl->is_neg() ||
      impl->_is_zerotensor() || impl->is_nested() || impl->has_symbolic_sizes_strides())
    return false;
  if (impl->storage_offset() != 0 || impl->numel() == 0) return false;
  int64_t extent = 1;
  c10::IntArrayRef sizes = impl->sizes(), strides = impl->strides();
  for (size_t i = 0; i < sizes.size(); ++i) extent += (sizes[i] - 1) * strides[i];
  return impl->storage().nbytes() == static_cast<size_t>(extent) * impl->itemsize();
}

}  // namespace

bool gradEnabled() { return c10::GradMode::is_enabled(); }

bool jitTracing() { return torch::jit::tracer::isTracing(); }

const void* storageId(PyObject* t) {
  const at::Tensor& v = var(t);
  if (!v.defined() || !v.unsafeGetTensorImpl()->has_storage()) return nullptr;
  return v.unsafeGetTensorImpl()->storage().unsafeGetStorageImpl();
}

bool isView(PyObject* t) {
  const at::Tensor& v = var(t);
  return v.defined() && v.is_view();
}

bool plainLeaf(PyObject* real, uint64_t* keys) {
  try {
    const at::Tensor& v = var(real);
    if (!v.defined()) return false;
    c10::TensorImpl* impl = v.unsafeGetTensorImpl();
    if (impl->is_python_dispatch() || impl->is_inference() || !plainLayout(impl)) return false;
    if (!v.is_leaf() || v.is_view() || v.grad().defined()) return false;
    *keys = impl->key_set().raw_repr();
    return true;
  } catch (const std::exception&) {
    return false;  // e.g. sizes() of a tensor without them: not a plain tensor
  }
}

namespace {
void collectStorages(const at::Tensor& v, std::vector<const void*>* out, int depth) {
  if (!v.defined() || depth > 8) return;
  c10::TensorImpl* impl = v.unsafeGetTensorImpl();
  if (impl->has_storage()) out->push_back(impl->storage().unsafeGetStorageImpl());
  if (v.is_view()) collectStorages(at::Tensor(v._base()), out, depth + 1);
  // TensorImpl::grad(): TensorBase::grad() warns when read on a non-leaf (MetaConverter reads
  // it with the warning suppressed).
  collectStorages(impl->grad(), out, depth + 1);
}
}  // namespace

void relatedStorages(PyObject* t, std::vector<const void*>* out) {
  try {
    collectStorages(var(t), out, 0);
  } catch (const std::exception&) {
  }
}

NoInferenceMode::NoInferenceMode() : guard_(new c10::InferenceMode(false)) {}
NoInferenceMode::~NoInferenceMode() { delete static_cast<c10::InferenceMode*>(guard_); }

NoPythonDispatch::NoPythonDispatch() : guards_(new DispatchGuards()) {}
NoPythonDispatch::~NoPythonDispatch() { delete static_cast<DispatchGuards*>(guards_); }

bool freshResult(PyObject* o) {
  try {
    const at::Tensor& v = var(o);
    if (!v.defined()) return false;
    c10::TensorImpl* impl = v.unsafeGetTensorImpl();
    if (!plainLayout(impl) || v.is_view()) return false;
    if (v.requires_grad()) return !v.is_leaf();
    return v.is_leaf();
  } catch (const std::exception&) {
    return false;
  }
}

bool freshSymbolicResult(PyObject* o) {
  try {
    const at::Tensor& v = var(o);
    if (!v.defined() || v.is_view()) return false;
    c10::TensorImpl* impl = v.unsafeGetTensorImpl();
    if (impl->layout() != c10::kStrided || !impl->has_storage() || impl->is_conj() || impl->is_neg() ||
        impl->_is_zerotensor() || impl->is_nested())
      return false;
    if (v.requires_grad()) return !v.is_leaf();
    return v.is_leaf();
  } catch (const std::exception&) {
    return false;
  }
}

bool adoptLayout(PyObject* fresh, PyObject* like) {
  try {
    const at::Tensor& src = var(like);
    const at::Tensor& dst = var(fresh);
    c10::TensorImpl* from = src.unsafeGetTensorImpl();
    c10::TensorImpl* to = dst.unsafeGetTensorImpl();
    TORCH_CHECK(to->dtype() == from->dtype() && to->device_type() == c10::kMeta, "adoptLayout: not a meta tensor of the dtype");
    // As empty_strided on meta makes it: a resizable storage of the meta allocator, here of
    // the template's (possibly symbolic) byte size, so nothing is computed from the sizes.
    to->set_storage_keep_dtype(
        c10::Storage(c10::Storage::use_byte_size_t(), from->storage().sym_nbytes(), c10::GetAllocator(c10::kMeta), true));
    to->set_sizes_and_strides(from->sym_sizes(), from->sym_strides(), from->sym_storage_offset());
    return true;
  } catch (const std::exception& e) {
    PyErr_SetString(PyExc_RuntimeError, e.what());
    return false;
  }
}

bool attachErrorGradFn(PyObject* out, const char* device, PyObject* const* inputs, size_t n, const char* message) {
  try {
    torch::autograd::edge_list edges;
    edges.reserve(n);
    for (size_t i = 0; i < n; ++i) {
      const at::Tensor& in = var(inputs[i]);
      // As collect_next_edges: an edge per input, empty for one that does not require grad.
      if (in.defined())
        edges.push_back(torch::autograd::impl::gradient_edge(in));
      else
        edges.emplace_back();
    }
    auto node = c10::make_intrusive<torch::autograd::Error>(message, std::move(edges));
    // set_history(out, node), with out's input metadata made from what is known here
    // rather than from out.options(), whose device() would dispatch into Python.
    const at::Tensor& o = var(out);
    c10::TensorImpl* impl = o.unsafeGetTensorImpl();
    TORCH_CHECK(torch::autograd::isDifferentiableType(c10::typeMetaToScalarType(impl->dtype())), "Autograd not support dtype: ",
                c10::typeMetaToScalarType(impl->dtype()));
    at::TensorOptions options =
        at::TensorOptions().dtype(impl->dtype()).device(c10::Device(std::string(device))).layout(c10::kStrided);
    uint32_t output_nr = node->add_input_metadata(options, impl->sym_sizes(), impl->is_python_dispatch(),
                                                  /*is_nested=*/false, std::nullopt);
    torch::autograd::impl::set_gradient_edge(o, {node, output_nr});
    return true;
  } catch (const std::exception& e) {
    PyErr_SetString(PyExc_RuntimeError, e.what());
    return false;
  }
}

bool plainView(PyObject* o, bool allow_symbolic) {
  try {
    const at::Tensor& v = var(o);
    if (!v.defined() || !v.is_view()) return false;
    c10::TensorImpl* impl = v.unsafeGetTensorImpl();
    return impl->layout() == c10::kStrided && impl->has_storage() && !impl->is_conj() && !impl->is_neg() &&
           !impl->_is_zerotensor() && !impl->is_nested() && (allow_symbolic || !impl->has_symbolic_sizes_strides());
  } catch (const std::exception&) {
    return false;
  }
}

bool fakeDiffersFromInput(PyObject* fake, PyObject* real) {
  try {
    const at::Tensor& f = var(fake);
    const at::Tensor& r = var(real);
    if (!f.defined() || !r.defined()) return false;
    if (f.requires_grad() != r.requires_grad() || f.is_leaf() != r.is_leaf()) return true;
    c10::TensorImpl* fi = f.unsafeGetTensorImpl();
    c10::TensorImpl* ri = r.unsafeGetTensorImpl();
    if (fi->layout() != c10::kStrided || ri->layout() != c10::kStrided) return false;
    if (fi->dim() != ri->dim()) return true;
    if (fi->has_symbolic_sizes_strides() || ri->has_symbolic_sizes_strides()) return false;
    return fi->sizes() != ri->sizes() || fi->strides() != ri->strides() ||
           fi->storage_offset() != ri->storage_offset();
  } catch (const std::exception&) {
    return false;
  }
}

bool plainFakeLeaf(PyObject* o) {
  try {
    const at::Tensor& v = var(o);
    return v.defined() && plainLayout(v.unsafeGetTensorImpl()) && !v.is_view() && v.is_leaf();
  } catch (const std::exception&) {
    return false;
  }
}

}  // namespace cdynamo::graph::torchimpl
