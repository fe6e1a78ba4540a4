// Python numbers read from tensors: Tensor.item(), int(t), float(t), bool(t), tolist().
//
// Without cdynamo.config.capture_scalar_outputs each such read stops the trace, with a
// reason naming the operation. With it, Tensor.item() is recorded as torch._dynamo records
// it: a call_method node whose fake result is an unbacked SymInt/SymFloat/SymBool from the
// fake mode's ShapeEnv (graph/graph_builder.cpp).
//
// Representation: such a scalar is a Kind::Tensor value whose node's fake result is the
// symbolic scalar (GraphBuilder::isScalar), not a new Value kind. Arithmetic, comparisons
// and torch calls on it then go to the graph through the same paths as tensors, and FX
// records them (operator.mul(x, item), torch.sym_int(item), ...). The places where a
// tensor and a number behave differently check isScalarValue: its type (float, int or
// bool, for isinstance/type), its attributes (not a tensor's), its truth (a data-
// dependent branch: the trace stops), set membership (by value, unknown), and returning
// it (it is a graph output like a tensor; the backend returns the number).
#pragma once
#include "trace/tracer.h"

namespace cdynamo::trace {

// Whether `v` is a scalar read from a tensor (see above).
bool isScalarValue(Tracer& t, const ValuePtr& v);

// The Python type a scalar value has when the graph runs (float, int or bool; borrowed).
PyObject* scalarType(Tracer& t, const ValuePtr& v);

// Reads the value of tensor (or scalar) `v` as Python does for `how`: "item"
// (Tensor.item()), "int", "float", "bool" (the builtins, or Tensor.__int__ and friends) or
// "tolist". Returns the scalar value (a graph node, or a constant when the fake tensor
// holds one), or Unsupported with a reason naming the operation.
Result<ValuePtr> readTensorValue(Tracer& t, const ValuePtr& v, const char* how);

}  // namespace cdynamo::trace
