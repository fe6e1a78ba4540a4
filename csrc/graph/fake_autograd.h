// The graph builder's few reads and writes of torch's C++ tensor state (autograd history,
// storage identity, dispatch TLS), kept out of graph_builder.cpp: they are implemented in
// fake_autograd_torch.cpp, the graph stage's one unit compiled against the headers inside
// the torch wheel (as guards/tensor_check_torch.cpp is for the guard stage).
//
// Every PyObject* argument must be an instance of a torch._C.TensorBase subclass (a
// THPVariable); callers check the exact type first. Functions returning bool leave a
// Python error set when they return false, unless documented otherwise.
#pragma once
#include <Python.h>

#include <cstdint>
#include <vector>

namespace cdynamo::graph::torchimpl {

// torch.is_grad_enabled(), without a Python call.
bool gradEnabled();

// torch._C._get_tracing_state() is not None (torch.jit.trace is running on this thread),
// without a Python call.
bool jitTracing();

// Identity of the tensor's storage (its StorageImpl), for alias checks; null when it has none.
const void* storageId(PyObject* t);

// Tensor._is_view().
bool isView(PyObject* t);

// A real tensor that can get its fake counterpart by the input shortcut (see
// GraphBuilder::inputFake): a dense strided leaf that is not a view, starts at offset 0,
// has no .grad, no conjugate/negative bit, no Python dispatch key, is not an inference
// tensor, has at least one element, and whose storage holds exactly its elements. `keys`
// receives its dispatch key set (raw). False without an error when it is not such a tensor.
// (Whether another graph input shares its storage is the caller's to check.)
bool plainLeaf(PyObject* real, uint64_t* keys);

// The storages FakeTensorMode.from_tensor(t) reads and memoizes: t's, and recursively
// those of its view base and of its .grad. Appended to `out` (no duplicates removed).
void relatedStorages(PyObject* t, std::vector<const void*>* out);

// While alive, torch's Python dispatch keys are excluded (as under
// torch._C._DisableTorchDispatch): tensors made or detached inside (a meta tensor, a
// FakeTensor wrapped around it) do not reach the entered FakeTensorMode.
class NoPythonDispatch {
 public:
  NoPythonDispatch();
  ~NoPythonDispatch();
  NoPythonDispatch(const NoPythonDispatch&) = delete;
  NoPythonDispatch& operator=(const NoPythonDispatch&) = delete;

 private:
  void* guards_;
};

// While alive, inference mode is off (torch.inference_mode(False)): MetaConverter makes the
// fake of a tensor that is not an inference tensor so, whatever mode the trace is in.
class NoInferenceMode {
 public:
  NoInferenceMode();
  ~NoInferenceMode();
  NoInferenceMode(const NoInferenceMode&) = delete;
  NoInferenceMode& operator=(const NoInferenceMode&) = delete;

 private:
  void* guard_;
};

// Whether `o`, a fake result just produced by running an op, is one fresh tensor that a
// copy made by GraphBuilder::memoMake reproduces exactly: dense and strided at offset 0, not
// a view, no conjugate/negative bit, static sizes, its storage exactly its elements, and
// either not requiring grad (a leaf) or requiring it through a grad_fn of its own.
// False without an error otherwise.
bool freshResult(PyObject* o);

// Whether `o`, a fake result of an op under a ShapeEnv, is one fresh tensor that
// adoptLayout reproduces: dense and strided, not a view, no conjugate/negative bit, a leaf
// or requiring grad through a grad_fn of its own. Sizes, strides, offset and storage size
// may be symbolic (they are copied, not recomputed). False without an error otherwise.
bool freshSymbolicResult(PyObject* o);

// Gives `fresh`, a meta tensor of `like`'s dtype that only the caller holds, a storage of
// its own with `like`'s (possibly symbolic) byte size and `like`'s sizes, strides and
// storage offset: what empty_strided makes, without computing the storage size from the
// sizes (under a ShapeEnv every such arithmetic step is a Python SymNode call).
bool adoptLayout(PyObject* fresh, PyObject* like);

// Whether `o` is a view (Tensor._is_view()) that as_strided on its base reproduces: strided,
// static sizes (unless `allow_symbolic`: under a ShapeEnv), no conjugate/negative bit.
bool plainView(PyObject* o, bool allow_symbolic = false);

// Whether `o`, a fake input just made by FakeTensorMode.from_tensor, is a leaf in the same
// plain form (dense, strided, offset 0, not a view, storage exactly its elements).
bool plainFakeLeaf(PyObject* o);

// Whether `fake`, the trace's fake of graph input `real`, no longer describes `real` as the
// graph receives it: an in-place op of the trace gave it requires_grad or autograd history
// (x.add_(y) with y requiring grad), or another layout (x.unsqueeze_(0)). Layouts are
// compared as far as they are concrete (symbolic sizes: their number). False for a tensor
// whose metadata cannot be read so.
bool fakeDiffersFromInput(PyObject* fake, PyObject* real);

// Gives `out`, a fresh tensor that does not require grad (a leaf without autograd history),
// the history of an op applied to `inputs`: a grad_fn that is an autograd Error node whose
// next edges are the inputs' gradient edges (what torch's DelayedError / MetaConverter give
// a fake example input). `out` then requires grad and is not a leaf; differentiating
// through it raises `message`.
// `device` is the fake device of `out` ("cpu", "cuda:0"): read from the tensor it would
// cost a dispatch into Python (FakeTensor has a Python-defined device).
bool attachErrorGradFn(PyObject* out, const char* device, PyObject* const* inputs, size_t n, const char* message);

}  // namespace cdynamo::graph::torchimpl
