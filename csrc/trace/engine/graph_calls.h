// Operations recorded in the graph: calls, their arguments, tensor identity (graph_calls.cpp).
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

// Records a graph call; `target` is a callable, or a method name with op CallMethod.
// Returns the result Value: a tensor node, a tuple of them, or a constant when the
// operation only reads metadata (static shapes).
// `keep`: the call stays in the graph whatever it returns (allow_in_graph: it may act when
// the graph runs, a None result included). `known_fake`: the result's fake, when the caller
// knows it already (GraphBuilder::addCall).
Result<ValuePtr> recordCall(Tracer& t, graph::NodeOp op, PyObject* target, const Args& args, const Kwargs& kwargs,
                            bool keep = false, PyObject* known_fake = nullptr);
// Converts a value into a graph argument (Unsupported when it cannot be one).
Done toArg(Tracer& t, const ValuePtr& v, graph::Arg* out);
// Whether two tensor values are the same Python object. Graph inputs compare their objects
// at trace time, guarded (aliasing can change).
Result<bool> sameTensorObject(Tracer& t, const ValuePtr& a, const ValuePtr& b);

}  // namespace cdynamo::trace
