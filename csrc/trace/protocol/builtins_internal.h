// The builtins' files share these (builtins.cpp, builtins_iteration.cpp, builtins_reduction.cpp):
// the rows' handlers each file defines for kBuiltinRows, and two helpers. Not for other files.
#pragma once
#include <Python.h>

#include "trace/engine/result.h"
#include "trace/protocol/callables.h"
#include "trace/values/value.h"

namespace cdynamo::trace {

class Tracer;

ValuePtr constInt(long v);

// A pure builtin called for real on arguments made of constants (key=len included);
// NotHandled when one is not.
Result<ValuePtr> runPure(Tracer& t, PyObject* f, const char* which, Args& args, Kwargs& kwargs);

// next(it[, default]).
Result<ValuePtr> builtinNext(Tracer& t, PyObject* f, const char* which, Args& args, Kwargs& kwargs);

// enumerate(iterable[, start]): its items computed now, its source consumed as they are taken (iterators.h).
Result<ValuePtr> builtinEnumerate(Tracer& t, PyObject* f, const char* which, Args& args, Kwargs& kwargs);

// zip(*iterables[, strict]): items computed now, sources consumed in lockstep.
Result<ValuePtr> builtinZip(Tracer& t, PyObject* f, const char* which, Args& args, Kwargs& kwargs);

// reversed() of a sequence.
Result<ValuePtr> builtinReversed(Tracer& t, PyObject* f, const char* which, Args& args, Kwargs& kwargs);

Result<ValuePtr> builtinMapFilter(Tracer& t, PyObject* f, const char* which, Args& args, Kwargs& kwargs);

// sum(iterable[, start]): the items added with the + operator.
Result<ValuePtr> builtinSum(Tracer& t, PyObject* f, const char* which, Args& args, Kwargs& kwargs);

Result<ValuePtr> builtinReduce(Tracer& t, PyObject* f, const char* which, Args& args, Kwargs& kwargs);

}  // namespace cdynamo::trace
