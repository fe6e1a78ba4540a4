// The tensor guard's hot half, reading at::TensorImpl directly: one of the two files that see
// torch's C++ headers (with graph/fake_autograd_torch.cpp; docs/design.md), so that a tensor check costs tens of
// nanoseconds instead of the hundreds the Python API's .shape/.stride() calls cost. It is
// compiled with torch's include paths and ABI flags (CMakeLists.txt) and links libc10 (and libtorch_cpu for
// the torch-function state that nativeQueryHolds reads).
//
// A tensor check is then: exact Python type, one pointer load to the TensorImpl, a compare
// of dispatch keys / dtype / device, sizes and strides compared in place, and
// requires_grad — tens of nanoseconds, no Python attribute access, no allocation.
//
// Layout assumption: every instance of a Python type that subclasses torch._C.TensorBase
// is a THPVariable (torch/csrc/autograd/python_variable.h). captureTensorSpec verifies the
// type is such a subclass, and the check compares the exact type first, so the cast below
// only ever sees THPVariables.
#include <ATen/PythonTorchFunctionTLS.h>
#include <ATen/core/Tensor.h>
#include <c10/core/DefaultDtype.h>
#include <c10/core/impl/LocalDispatchKeySet.h>
#include <c10/core/GradMode.h>
#include <c10/core/TensorImpl.h>
#include <torch/csrc/Dtype.h>
#include <torch/csrc/autograd/python_variable.h>
#include <torch/headeronly/version.h>

#include <string>

#include "guards/tensor_check.h"
#include "support/lookup.h"
#include "support/py_error.h"

namespace cdynamo::guards {
namespace {

// torch._C.TensorBase, looked up once through Python (so that this unit needs no symbol
// of libtorch_python). Borrowed for the life of the process: torch._C is never unloaded.
PyObject* tensorBaseType() {
  static PyObject* type = [] () -> PyObject* {
    Ref mod = Ref::borrow(lookup(Obj::torch_C));
    if (!mod) return nullptr;
    return PyObject_GetAttrString(mod.get(), "TensorBase");  // kept for the process
  }();
  return type;
}

inline c10::TensorImpl* implOf(PyObject* obj) {
  return reinterpret_cast<THPVariable*>(obj)->cdata.unsafeGetTensorImpl();
}

}  // namespace

bool captureTensorSpec(PyObject* t, TensorSpec* out) {
  PyObject* base = tensorBaseType();
  if (!base) return false;
  int is_tensor = PyObject_IsInstance(t, base);
  if (is_tensor < 0) return false;
  if (!is_tensor) {
    PyErr_Format(PyExc_TypeError, "expected a torch.Tensor, got %s", Py_TYPE(t)->tp_name);
    return false;
  }
  // Python objects kept for descriptions only (cold). Read with subclass dispatch off: a
  // tensor subclass's __torch_function__ would run for each (user code, at guard-making time).
  static PyObject* const plain_types[2] = {[] () -> PyObject* {
    Ref mod = Ref::borrow(lookup(Obj::torch_module));
    PyObject* r = mod ? PyObject_GetAttrString(mod.get(), "Tensor") : nullptr;  // kept for the process
    if (!r) PyErr_Clear();
    return r;
  }(), [] () -> PyObject* {
    Ref mod = Ref::borrow(lookup(Obj::torch_nn));
    PyObject* r = mod ? PyObject_GetAttrString(mod.get(), "Parameter") : nullptr;
    if (!r) PyErr_Clear();
    return r;
  }()};
  Ref disabled;
  PyObject* exact = reinterpret_cast<PyObject*>(Py_TYPE(t));
  if (exact != plain_types[0] && exact != plain_types[1]) {
    Ref mod = Ref::borrow(lookup(Obj::torch_C));
    Ref cls = mod ? Ref::steal(PyObject_GetAttrString(mod.get(), "DisableTorchFunctionSubclass")) : Ref();
    disabled = cls ? Ref::steal(PyObject_CallNoArgs(cls.get())) : Ref();
    Ref entered = disabled ? Ref::steal(PyObject_CallMethod(disabled.get(), "__enter__", nullptr)) : Ref();
    if (!entered) return false;
  }
  out->dtype = Ref::steal(PyObject_GetAttrString(t, "dtype"));
  out->device = out->dtype ? Ref::steal(PyObject_GetAttrString(t, "device")) : Ref();
  if (disabled) {
    // The error of a failed read (if any) waits while __exit__ runs; an error of __exit__
    // replaces it.
    FetchedError pending = FetchedError::fetch();
    Ref exited = Ref::steal(PyObject_CallMethod(disabled.get(), "__exit__", "OOO", Py_None, Py_None, Py_None));
    if (!exited) return false;
    pending.restore();
  }
  if (!out->dtype || !out->device) return false;
  try {
    const at::Tensor& tensor = reinterpret_cast<THPVariable*>(t)->cdata;
    if (!tensor.defined()) {
      PyErr_SetString(PyExc_TypeError, "undefined tensor");
      return false;
    }
    c10::TensorImpl* impl = tensor.unsafeGetTensorImpl();
    // sizes()/strides() throw for layouts without them (sparse, nested) and for symbolic
    // shapes: such a tensor gets no tensor check (the caller makes the guard fail).
    c10::IntArrayRef sizes = impl->sizes();
    c10::IntArrayRef strides = impl->strides();
    out->sizes.assign(sizes.begin(), sizes.end());
    out->strides.assign(strides.begin(), strides.end());
    out->scalar_type = static_cast<int>(c10::typeMetaToScalarType(impl->dtype()));
    c10::Device device = impl->device();
    out->device_type = static_cast<int>(device.type());
    out->device_index = static_cast<int>(device.index());
    out->requires_grad = impl->requires_grad();
    out->dispatch_keys = impl->key_set().raw_repr();
  } catch (const std::exception& e) {
    PyErr_Format(PyExc_RuntimeError, "cannot read tensor metadata: %s", e.what());
    return false;
  } catch (...) {
    PyErr_SetString(PyExc_RuntimeError, "cannot read tensor metadata");
    return false;
  }
  out->type = Ref::borrow(reinterpret_cast<PyObject*>(Py_TYPE(t)));
  return true;
}

bool tensorMatches(const TensorSpec& spec, PyObject* t) {
  if (reinterpret_cast<PyObject*>(Py_TYPE(t)) != spec.type.get()) return false;
  try {
    const c10::TensorImpl* impl = implOf(t);
    if (impl == nullptr) return false;
    if (impl->key_set().raw_repr() != spec.dispatch_keys) return false;
    if (static_cast<int>(c10::typeMetaToScalarType(impl->dtype())) != spec.scalar_type) return false;
    if (spec.dynamic_mask == 0) {
      // Sizes and strides side by side, one pass, no early exit per element: the common
      // tensors have 1-4 dims and every one is compared anyway on a hit.
      c10::IntArrayRef sizes = impl->sizes();
      const size_t n = spec.sizes.size();
      if (sizes.size() != n) return false;
      const int64_t* now_sizes = sizes.data();
      const int64_t* now_strides = impl->strides().data();
      const int64_t* sizes_then = spec.sizes.data();
      const int64_t* strides_then = spec.strides.data();
      int64_t differ = 0;
      for (size_t i = 0; i < n; ++i) differ |= (now_sizes[i] ^ sizes_then[i]) | (now_strides[i] ^ strides_then[i]);
      if (differ != 0) return false;
    } else {
      // Symbolic dims: the other sizes as captured, the strides contiguous for the sizes in
      // hand (what the graph's fake strides say in terms of the symbols).
      c10::IntArrayRef sizes = impl->sizes();
      c10::IntArrayRef strides = impl->strides();
      const size_t n = spec.sizes.size();
      if (sizes.size() != n) return false;
      int64_t running = 1;
      for (size_t i = n; i-- > 0;) {
        if (!spec.dynamic(i) && sizes[i] != spec.sizes[i]) return false;
        if (strides[i] != running) return false;
        running *= sizes[i] > 1 ? sizes[i] : 1;
      }
    }
    c10::Device device = impl->device();
    if (static_cast<int>(device.type()) != spec.device_type ||
        static_cast<int>(device.index()) != spec.device_index)
      return false;
    return impl->requires_grad() == spec.requires_grad;
  } catch (...) {
    return false;
  }
}

int64_t tensorSize(PyObject* t, int dim) {
  if (t == nullptr) return -1;
  try {
    const c10::TensorImpl* impl = implOf(t);
    if (impl == nullptr || dim < 0 || dim >= impl->dim()) return -1;
    return impl->sizes()[dim];
  } catch (...) {
    return -1;
  }
}

bool tensorSizesEqual(PyObject* a, int da, PyObject* b, int db) {
  if (a == nullptr || b == nullptr) return false;
  try {
    const c10::TensorImpl* ia = implOf(a);
    const c10::TensorImpl* ib = implOf(b);
    if (ia == nullptr || ib == nullptr || da < 0 || db < 0 || da >= ia->dim() || db >= ib->dim()) return false;
    return ia->sizes()[da] == ib->sizes()[db];
  } catch (...) {
    return false;
  }
}

const void* tensorStorage(PyObject* t) {
  if (t == nullptr) return nullptr;
  try {
    const c10::TensorImpl* impl = implOf(t);
    if (impl == nullptr || !impl->has_storage()) return nullptr;
    return impl->storage().unsafeGetStorageImpl();
  } catch (...) {
    return nullptr;
  }
}

bool checkTorchVersion() {
  Ref torch = Ref::borrow(lookup(Obj::torch_module));
  if (!torch) return false;
  Ref version = Ref::steal(PyObject_GetAttrString(torch.get(), "__version__"));
  if (!version) return false;
  Ref text = Ref::steal(PyObject_Str(version.get()));  // torch.__version__ is a TorchVersion (a str subclass)
  const char* v = text ? PyUnicode_AsUTF8(text.get()) : nullptr;
  if (!v) return false;
  std::string running(v);
  std::string release = running.substr(0, running.find('+'));  // "2.13.0+cpu" -> "2.13.0"
  if (release == TORCH_VERSION) return true;
  PyErr_Format(PyExc_ImportError,
               "cdynamo's extension was built against torch %s but torch %s is installed; its tensor guards "
               "read torch's C++ objects by that version's layout. Rebuild it (make build) or install torch==%s.",
               TORCH_VERSION, running.c_str(), TORCH_VERSION);
  return false;
}

namespace detail {
std::string dispatchKeysText(uint64_t raw) {
  try {
    return c10::toString(c10::DispatchKeySet(c10::DispatchKeySet::RAW, raw));
  } catch (...) {
    return "?";
  }
}
}  // namespace detail

bool gradModeEnabled() { return c10::GradMode::is_enabled(); }

bool nativeQueryHolds(NativeQuery q, int64_t expected) {
  try {
    switch (q) {
      case NativeQuery::None:
        return false;
      case NativeQuery::TorchFunctionEnabled:
        return at::impl::PythonTorchFunctionTLS::get_disabled_state() == at::impl::TorchFunctionDisabledState::ENABLED;
      case NativeQuery::TorchFunctionDepth:
        return at::impl::PythonTorchFunctionTLS::stack_len() == expected;
      case NativeQuery::NoAutocast: {
        // Autocast on a device is its Autocast key not excluded on this thread: every one
        // excluded means none is on (what the query answers False to).
        const c10::DispatchKeySet excluded = c10::impl::tls_local_dispatch_key_set().excluded_;
        return (excluded & c10::autocast_dispatch_keyset) == c10::autocast_dispatch_keyset;
      }
      case NativeQuery::DefaultDtype:
        return static_cast<int64_t>(c10::get_default_dtype_as_scalartype()) == expected;
    }
  } catch (...) {
  }
  return false;
}

int dtypeScalarType(PyObject* obj) {
  static PyObject* const dtype_type = [] () -> PyObject* {
    Ref mod = Ref::borrow(lookup(Obj::torch_module));
    PyObject* r = mod ? PyObject_GetAttrString(mod.get(), "dtype") : nullptr;  // kept for the process
    if (!r) PyErr_Clear();
    return r;
  }();
  if (!dtype_type || reinterpret_cast<PyObject*>(Py_TYPE(obj)) != dtype_type) return -1;
  return static_cast<int>(reinterpret_cast<THPDtype*>(obj)->scalar_type);
}

}  // namespace cdynamo::guards
