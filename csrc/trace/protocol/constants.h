// Python's builtins and the constant values: the real object of a value and back, folding of pure calls, the type of a value (builtins.cpp, constants.cpp).
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

// A call of one of Python's builtins: `row` is its table row.
Result<ValuePtr> callBuiltin(Tracer& t, PyObject* fn, const CallableRow& row, Args& args, Kwargs& kwargs);
// The real Python object for a value made only of constants (constants, and tuples, lists,
// dicts and sets of them), or null (no error set) when it holds anything else.
Ref toPython(Tracer& t, const ValuePtr& v);
// A compiled regular expression or a match of one (re.Pattern, re.Match): C objects that
// never change once made, so their methods on constants are folded, as str's are; one read
// from the program is guarded by identity.
bool isImmutableCObject(PyObject* o);
// Whether a value is an int: a constant int or a symbolic one (a SymInt of the graph).
bool isIntValue(Tracer& t, const ValuePtr& v);
// (a real iterator of Python type `type` (may be null) over `items` (a sequence), an
// iterator whose length hint counts the items left as the first is used), or null (no
// error set).
Ref realIterator(PyObject* type, PyObject* items);
// The value for a real Python object made only of constants.
Result<ValuePtr> fromPython(Tracer& t, PyObject* o);
// Calls a pure C function (math, operator, a method of an immutable constant, an immutable
// type) for real when every argument is made of constants; NotHandled when `fn` is not one
// or an argument is not made of constants.
Result<ValuePtr> foldConstantCall(Tracer& t, PyObject* fn, Args& args, Kwargs& kwargs);
// Python type of a value (borrowed), or null when it is not known.
PyObject* typeOf(Tracer& t, const ValuePtr& v);

}  // namespace cdynamo::trace
