// Type expressions built in the trace (type_expressions.cpp): list[int], dict[str, int],
// typing generics, and int | None, made for real from classes (they run no user code).
#pragma once
#include <Python.h>

#include "trace/engine/result.h"
#include "trace/values/value.h"

namespace cdynamo::trace {

class Tracer;

// cls[index] of a class that makes type expressions (a builtin generic, a typing alias, a
// class with __class_getitem__ from the standard library); NotHandled for any other subscript.
Result<ValuePtr> typeExpressionSubscript(Tracer& t, const ValuePtr& obj, const ValuePtr& index);
// a | b of two type-like values (classes, None, type expressions): a types.UnionType or a
// typing.Union; NotHandled otherwise.
Result<ValuePtr> typeUnion(Tracer& t, const ValuePtr& a, const ValuePtr& b);

}  // namespace cdynamo::trace
