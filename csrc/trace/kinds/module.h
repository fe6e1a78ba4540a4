// nn.Module containers: Sequential, ModuleList and ModuleDict (module.cpp).
#pragma once
#include <Python.h>

#include <initializer_list>
#include <string>
#include <utility>
#include <vector>

#include "bytecode/opcodes.h"
#include "trace/engine/result.h"
#include "trace/values/value.h"

namespace cdynamo::trace {

class Tracer;

// Sequential/ModuleList/ModuleDict: the children, read from _modules with its keys guarded.
// An nn.Sequential, ModuleList or ModuleDict whose class keeps that container's own
// special method `dunder` (decided by type: a subclass overriding it is not one).
bool isModuleContainer(const ValuePtr& m, PyObject* dunder);
Done moduleContainerItems(Tracer& t, const ValuePtr& m, std::vector<std::pair<Ref, ValuePtr>>* out);

// iter() of an nn.Sequential or nn.ModuleList: its submodules (_modules.values(), keys guarded).
Result<ValuePtr> moduleIter(Tracer& t, const ValuePtr& obj);

// The container class (torch.nn.Sequential, ModuleList or ModuleDict) whose own special
// method `dunder` the class of `module` uses (borrowed), or null.
PyObject* moduleContainerOwning(PyObject* module, PyObject* dunder);

}  // namespace cdynamo::trace
