// Exceptions made in the trace (exception.cpp).
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

// An instance of an exception class, made for real when its construction runs no Python
// code (builtin exceptions and subclasses without __new__; a Python __init__ is traced).
Result<ValuePtr> makeException(Tracer& t, PyObject* cls, Args& args, Kwargs kwargs = {});

}  // namespace cdynamo::trace
