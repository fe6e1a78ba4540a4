// Sets and frozensets made in the trace (Kind::Set; set.cpp): items, methods, operators and the
// real set that keeps eager execution's table.
#pragma once
#include <Python.h>

#include <initializer_list>
#include <string>
#include <utility>
#include <vector>

#include "bytecode/opcodes.h"
#include "trace/protocol/callables.h"
#include "trace/engine/result.h"
#include "trace/values/value.h"

namespace cdynamo::trace {

class Tracer;

// Sets and frozensets made in the trace (their items constants, modules, tensors by
// identity, frozensets of those). The order a walk of set `s` meets its items in: Python's
// (from the items' hashes) when they are all real objects, else the order they were added.
std::vector<ValuePtr> setIterationOrder(const Set& s);
// The real set an operation of the program would read for the set value `v` made in the
// trace: its shadow (Set::shadow, the same table eager execution's set has, history and
// all), made on first need; borrowed; null when there is none (an item without a real
// object, a set from the program, not a Set).
PyObject* realSetOperand(const ValuePtr& v);
// A mutable set value for `real`, a set computed for real from `operands` (at least one a set
// made in the trace, read through realSetOperand): its items are the operands' values for the
// objects it holds, its shadow `real` itself. Null when it holds an object none stands for.
ValuePtr setFromReal(PyObject* real, std::initializer_list<ValuePtr> operands);
// The Set value holding the items of `v`: `v` itself when it is one, the items of an
// instance of a set or frozenset subclass made in the trace (its base part), else null.
const ValuePtr* setPartOf(const ValuePtr& v);
// A Set value (never a constant, even when frozen and of constants) of the items of
// `iterable` (empty when null), as set's or frozenset's C __new__/__init__ take them: the
// items of an instance of a subclass made in the trace.
Result<ValuePtr> makeSetPart(Tracer& t, const ValuePtr& iterable, bool frozen);
// frozenset(iterable): a constant when its items are constants, else a frozen Set.
Result<ValuePtr> makeFrozenSet(Tracer& t, const ValuePtr& iterable);
// a | b, a & b, a - b, a ^ b (and the in-place forms, which change a set itself) of two
// sets or frozensets; NotHandled when either is not one.
Result<ValuePtr> setBinaryOp(Tracer& t, bytecode::BinaryOp op, const ValuePtr& a, const ValuePtr& b);
// a <op> b (COMPARE_OP's order: <, <=, ==, !=, >, >=) of two sets or frozensets by their
// members; NotHandled when either is not one.
Result<ValuePtr> setCompare(Tracer& t, int op, const ValuePtr& a, const ValuePtr& b);

// The methods of a set or frozenset value by name; NotHandled when it has none here.
Result<ValuePtr> setMethod(Tracer& t, const ValuePtr& self, const char* n, Args& args);

// The shadow of a set changed in the trace (Set::shadow) when it holds exactly the set's
// items, all constants: a copy of its table is then the set as eager has it (borrowed). Null
// otherwise (never changed, no shadow, or other items).
PyObject* shadowOfConstants(const Set& s);

}  // namespace cdynamo::trace
