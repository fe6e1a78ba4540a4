// torch's Python types that the tracer and graph builder test against (support/lookup.h:
// looked up once, on first use; importing torch is never done by the hook itself).
#pragma once
#include <Python.h>

namespace cdynamo {

// isinstance(o, torch.Tensor). False (and no error) if torch cannot be imported.
bool isTensor(PyObject* o);
// isinstance(o, torch.nn.Module).
bool isModule(PyObject* o);
// issubclass(cls, torch.nn.Module) for a type `cls`.
bool isModuleClass(PyObject* cls);
// type(o) is torch.Tensor or torch.nn.Parameter.
bool isPlainTensorOrParameter(PyObject* o);
// An operator of torch.ops: an OpOverloadPacket (torch.ops.ns.op) or an OpOverload
// (torch.ops.ns.op.overload), whatever library defined it (aten, torch.library.custom_op,
// a torch.library.Library, a C++ extension loaded at import). False (and no error) if
// torch cannot be imported.
bool isOperatorObject(PyObject* o);

}  // namespace cdynamo
