// The per-tensor guard: what a graph compiled for one tensor assumes about the next one.
// The hot check (tensorMatches) and the capture read at::TensorImpl directly and live in
// tensor_check_torch.cpp, the one translation unit compiled against torch's C++ headers;
// nothing else in cdynamo includes them. The cold descriptions live in tensor_check.cpp.
#pragma once
#include <Python.h>

#include <cstdint>
#include <string>
#include <vector>

#include "support/pyref.h"

namespace cdynamo::guards {

struct TensorSpec {
  Ref type;     // exact Python type (torch.Tensor, torch.nn.Parameter)
  bool requires_grad = false;
  std::vector<int64_t> sizes;
  std::vector<int64_t> strides;
  // What the fast check compares, read from at::TensorImpl: c10::ScalarType,
  // c10::DeviceType, c10::DeviceIndex, and the tensor's DispatchKeySet (raw), which
  // tells apart inference tensors, conjugate/negative views and the like, as
  // torch._dynamo's TENSOR_MATCH does.
  int scalar_type = -1;
  int device_type = -1;
  int device_index = -1;
  uint64_t dispatch_keys = 0;
  // Dimensions whose size is symbolic in the graph (bit i: dim i; dims >= 64 are never
  // symbolic): their sizes are not compared here (the entry's shape guards constrain them),
  // and the strides must then be the contiguous ones of the sizes in hand, as they were at
  // trace time (the graph's fake strides are those expressions of the symbolic sizes).
  uint64_t dynamic_mask = 0;
  bool dynamic(size_t dim) const { return dim < 64 && ((dynamic_mask >> dim) & 1u); }
  Ref dtype;    // torch.dtype singleton (for descriptions; cold)
  Ref device;   // torch.device (for descriptions; cold)
};

// The strides a contiguous (row-major) tensor of `sizes` has.
std::vector<int64_t> contiguousStrides(const std::vector<int64_t>& sizes);
// Cold: why `strides` (of a tensor of `sizes`) do not satisfy `spec` ("stride of dim 1:
// expected 3, got 1"), or empty.
std::string stridesMismatch(const TensorSpec& spec, const int64_t* sizes, const int64_t* strides);

// Reads the spec of a real tensor. Returns false with a Python error set on failure.
bool captureTensorSpec(PyObject* tensor, TensorSpec* out);
// True when `obj` matches `spec`. Never leaves a Python error set; allocates nothing.
bool tensorMatches(const TensorSpec& spec, PyObject* obj);
// torch.is_grad_enabled(), read from c10's thread-local grad mode (what that function
// returns) without a Python call: every entry's guards ask it.
bool gradModeEnabled();

// torch state queries that every entry asks (the trace guards each on its answer at frame
// start), read from torch's thread-local state in C++ instead of through their Python
// function: four Python calls were a third of a small function's hit. Each reader only
// ever confirms the answer expected (a fast pass); anything else (another answer, a
// state it does not read exactly) is left to the Python function, so a reader can make
// a check pass only where the function would return the same.
enum class NativeQuery : uint8_t {
  None,                 // no reader: always the Python call
  TorchFunctionEnabled, // torch._C._is_torch_function_enabled() is True
  TorchFunctionDepth,   // torch._C._len_torch_function_stack() == expected
  NoAutocast,           // torch._C._is_any_autocast_enabled() is False
  DefaultDtype,         // torch.get_default_dtype() is the dtype whose ScalarType is expected
};
// True only when the state certainly gives the answer `expected` (see NativeQuery); false
// means "ask the Python function". Allocates nothing, never sets a Python error.
bool nativeQueryHolds(NativeQuery q, int64_t expected);
// The ScalarType of a torch.dtype object, or -1 when `obj` is not one.
int dtypeScalarType(PyObject* obj);
// Size `dim` of tensor `obj` (a THPVariable whose tensor check passed), or -1 when it has
// no such dim. Allocates nothing.
int64_t tensorSize(PyObject* obj, int dim);
// tensorSize(a, da) == tensorSize(b, db), both readable (the shape guard `s_i == s_j` of
// two symbolic sizes, the commonest: duck sizing relates every equal size), in one call.
bool tensorSizesEqual(PyObject* a, int da, PyObject* b, int db);
// Identity of the storage (its c10::StorageImpl) of tensor `obj` (a THPVariable whose
// tensor check passed), or null when it has none. Allocates nothing.
const void* tensorStorage(PyObject* obj);
// Cold: why `obj`, read from source `what`, does not match, in the user's terms ("size of
// dim 0 of L['x']: expected 8, got 9"); empty if it does.
std::string tensorMismatch(const TensorSpec& spec, PyObject* obj, const std::string& what);
// Cold: "Tensor(dtype=float32, device=cpu, size=[2, 3], stride=[3, 1], requires_grad=False)".
std::string describeTensorSpec(const TensorSpec& spec);

// tensorMatches reads THPVariable and at::TensorImpl by their layout in the torch whose
// headers this was built against, so the extension refuses to load under another torch:
// ImportError set and false when torch.__version__ is not that version (module init).
bool checkTorchVersion();

namespace detail {
// Cold, for descriptions: c10's name of a raw DispatchKeySet.
std::string dispatchKeysText(uint64_t raw);
}  // namespace detail

}  // namespace cdynamo::guards
