// Reading, storing and deleting attributes: Python's attribute protocol over value kinds (attributes.cpp).
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

Result<ValuePtr> getAttr(Tracer& t, const ValuePtr& obj, PyObject* name);
Done storeAttr(Tracer& t, const ValuePtr& obj, PyObject* name, const ValuePtr& value);
// delattr(obj, name) of an object made in the trace or read from the program: its class's
// own __delattr__ inlined, a property's deleter, or the attribute removed (from the
// object's __dict__ value when made in the trace; a recorded effect replayed after the
// graph when from the program, nn.Module's __delattr__ included). AttributeError if absent.
Done deleteAttr(Tracer& t, const ValuePtr& obj, PyObject* name);
// object.__delattr__(obj, name): the generic deletion, the class's own __delattr__ skipped.
Done genericDelAttr(Tracer& t, const ValuePtr& obj, PyObject* name);
// Attributes of a function made in the trace: its name, module, doc, and those set on it.
Result<ValuePtr> functionAttr(Tracer& t, const ValuePtr& fn, PyObject* name);

}  // namespace cdynamo::trace
