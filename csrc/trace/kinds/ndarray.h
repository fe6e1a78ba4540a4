// NumPy arrays as tensors, NumPy calls as torch._numpy calls (Kind::NdArray) (ndarray.cpp).
// Each operation reports through trace/engine/result.h: Unsupported (the trace stops, with
// its reason), Raised (an exception of the traced program is in flight) and, where said,
// NotHandled.
#pragma once
#include <Python.h>

#include <initializer_list>
#include <string>
#include <utility>
#include <vector>

#include "bytecode/opcodes.h"
#include "graph/graph_builder.h"
#include "trace/engine/result.h"
#include "trace/protocol/callables.h"
#include "trace/values/value.h"

namespace cdynamo::trace {

class Tracer;

// A callable of module numpy (or a submodule): np.mean, np.linalg.norm, a ufunc, np.random.randn.
bool isNumpyCallable(PyObject* f);
// Records the torch._numpy counterpart of NumPy callable `f` (Unsupported when it has none).
Result<ValuePtr> callNumpy(Tracer& t, PyObject* f, Args& args, Kwargs& kwargs);
// x.numpy() of a tensor x: an NdArray sharing its memory.
Result<ValuePtr> tensorAsNdarray(Tracer& t, const ValuePtr& x, Args& args, Kwargs& kwargs);
// torch.from_numpy(a) / torch.as_tensor(a) of an NdArray; NotHandled when no argument is
// an NdArray (Unsupported for other torch calls given one).
Result<ValuePtr> ndarrayAsTensor(Tracer& t, PyObject* f, Args& args, Kwargs& kwargs);
Result<ValuePtr> ndarrayAttr(Tracer& t, const ValuePtr& a, PyObject* name);
Result<ValuePtr> ndarrayMethod(Tracer& t, const ValuePtr& a, PyObject* name, Args& args, Kwargs& kwargs);
// operator `op` (the operator module's name: "add", "neg", "lt", ...) with an NdArray operand.
Result<ValuePtr> ndarrayOperator(Tracer& t, const char* op, Args args);
Result<ValuePtr> ndarraySubscript(Tracer& t, const ValuePtr& a, const ValuePtr& index);

}  // namespace cdynamo::trace
