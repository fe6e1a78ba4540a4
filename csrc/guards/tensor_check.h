// The per-tensor guard: what a graph compiled for one tensor assumes about the next one.
// Isolated so that it can later read at::TensorImpl directly (DESIGN.md) without the rest
// of the guards depending on torch's C++ headers.
#pragma once
#include <Python.h>

#include <cstdint>
#include <string>
#include <vector>

#include "support/pyref.h"

namespace cdynamo::guards {

struct TensorSpec {
  Ref type;     // exact Python type (torch.Tensor, torch.nn.Parameter)
  Ref dtype;    // torch.dtype singleton
  Ref device;   // torch.device
  bool requires_grad = false;
  std::vector<int64_t> sizes;
  std::vector<int64_t> strides;
};

// Reads the spec of a real tensor. Returns false with a Python error set on failure.
bool captureTensorSpec(PyObject* tensor, TensorSpec* out);
// True when `obj` matches `spec`. Never leaves a Python error set.
bool tensorMatches(const TensorSpec& spec, PyObject* obj);
// Cold: why `obj` does not match (empty if it does).
std::string tensorMismatch(const TensorSpec& spec, PyObject* obj);
// Cold: "Tensor(dtype=float32, device=cpu, size=[2, 3], stride=[3, 1], requires_grad=False)".
std::string describeTensorSpec(const TensorSpec& spec);

}  // namespace cdynamo::guards
