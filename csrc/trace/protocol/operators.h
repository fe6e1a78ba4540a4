// Operators, subscripts, iteration, truth, membership and identity (operators.cpp).
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
#include "trace/protocol/callables.h"
#include "trace/engine/result.h"
#include "trace/values/value.h"

namespace cdynamo::trace {

class Tracer;

Result<ValuePtr> binaryOp(Tracer& t, bytecode::BinaryOp op, const ValuePtr& a, const ValuePtr& b);
// The operator a graph records for `fn(a, b)`: an in-place operator of the operator module
// (operator.iadd) only when `a` is a tensor; with a number or constant `a` its binary form
// (operator.add), as Python falls back from __iadd__ to __add__/__radd__ (`acc = 0;
// acc += t` is `acc = acc + t`). Any other fn is returned as it is. Borrowed.
PyObject* recordedOperator(Tracer& t, PyObject* fn, const ValuePtr& a);
Result<ValuePtr> unaryOp(Tracer& t, bytecode::Op op, const ValuePtr& a);
Result<ValuePtr> compareOp(Tracer& t, int op, const ValuePtr& a, const ValuePtr& b);
Result<ValuePtr> subscript(Tracer& t, const ValuePtr& obj, const ValuePtr& index);
Result<ValuePtr> getIter(Tracer& t, const ValuePtr& obj);
// Python truth value of a value known at trace time.
Result<bool> truthValue(Tracer& t, const ValuePtr& v);
// What a class's __len__ returned, as len() takes it: an int >= 0 (a bool becomes its int;
// a symbolic int as it is); another type raises TypeError in the program, a negative int
// ValueError; a value of unknown type stops the trace.
Result<ValuePtr> lenDunderResult(Tracer& t, const ValuePtr& r);
// `item in container`.
Result<bool> contains(Tracer& t, const ValuePtr& container, const ValuePtr& item);
// `a is b`.
Result<bool> identical(Tracer& t, const ValuePtr& a, const ValuePtr& b);
// The items an iterable value yields (lists, tuples, dicts' keys, constants, modules),
// consuming an Iterator.
Done iterate(Tracer& t, const ValuePtr& v, std::vector<ValuePtr>* out);
// The items `v` would give, without consuming it when it is an Iterator.
Done peekItems(Tracer& t, const ValuePtr& v, std::vector<ValuePtr>* out);
// Sequential/ModuleList/ModuleDict: the children, read from _modules with its keys guarded.
// An nn.Sequential, ModuleList or ModuleDict whose class keeps that container's own
// special method `dunder` (decided by type: a subclass overriding it is not one).
bool isModuleContainer(const ValuePtr& m, PyObject* dunder);
Done moduleContainerItems(Tracer& t, const ValuePtr& m, std::vector<std::pair<Ref, ValuePtr>>* out);

}  // namespace cdynamo::trace
