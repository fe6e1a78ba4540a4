// What the graph stage derives once from torch's objects, and small predicates over torch
// values its units share (internal to csrc/graph).
#pragma once
#include <Python.h>

#include "graph/graph_builder.h"
#include "support/pyref.h"

namespace cdynamo::graph {

// What the graph builder derives once from torch's objects (the objects themselves come
// from the process-wide lookup table, support/lookup.h, preloaded by torchRefs()).
struct TorchRefs {
  Ref meta_device;         // torch.device("meta")
  Ref memo_functions;      // set of callables known to return one new tensor
  Ref memo_methods;        // set of Tensor method names known to return one new tensor
  Ref memo_view_methods;   // set of Tensor method names that return a view of the receiver (or a new tensor)
  Ref subclass_kwnames;    // ("dispatch_device", "device_for_backend_keys")
  Ref empty_kwnames;       // ("dtype", "device")
  bool ok = false;
};

// Imported on first use (the hook must not import torch before a trace needs it); null
// with an error set when torch's objects cannot be found.
const TorchRefs* torchRefs();
// Whether `o` is a tensor, or a tuple/list holding one (at any depth).
bool holdsTensor(PyObject* o);
// In-place operations (x.add_(y), x += y, x[i] = y) are kept even when their result is
// unused: they mutate a tensor the rest of the program sees.
bool isMutating(NodeOp op, PyObject* target);
// cdynamo.config.<name> as a bool (None there: torch._dynamo.config.<name>); -1 with an
// error set.
int configFlag(const char* name);
// Whether `o` is a torch.SymInt, SymFloat or SymBool.
bool isSymScalar(PyObject* o, const TorchRefs* t);

}  // namespace cdynamo::graph
