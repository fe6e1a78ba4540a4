// types.SimpleNamespace made in the trace (Kind::Namespace) (namespace.cpp).
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

Result<ValuePtr> makeNamespace(Tracer& t, PyObject* fn, const char* name, Args& args, Kwargs& kwargs);
Result<ValuePtr> namespaceGetAttr(Tracer& t, const ValuePtr& ns, PyObject* name);
// Whether getattr(ns, name) finds something: one of its attributes or its class's.
bool namespaceHasAttr(const ValuePtr& ns, PyObject* name);
Done namespaceSetAttr(Tracer& t, const ValuePtr& ns, PyObject* name, const ValuePtr& value);

}  // namespace cdynamo::trace
