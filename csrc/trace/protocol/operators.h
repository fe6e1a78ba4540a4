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
#include "trace/engine/result.h"
#include "trace/kinds/iterator.h"
#include "trace/protocol/callables.h"
#include "trace/values/value.h"

namespace cdynamo::trace {

class Tracer;

Result<ValuePtr> binaryOp(Tracer& t, bytecode::BinaryOp op, const ValuePtr& a, const ValuePtr& b);
// The operator a graph records for `fn(a, b)`: an in-place operator of the operator module
// (operator.iadd) only when `a` is a tensor; with a number or constant `a` its binary form
// (operator.add), as Python falls back from __iadd__ to __add__/__radd__ (`acc = 0;
// acc += t` is `acc = acc + t`). Any other fn is returned as it is. Borrowed.
PyObject* recordedOperator(Tracer& t, PyObject* fn, const ValuePtr& a);
// The unary operators, whatever opcode spells them (3.12 makes +x a CALL_INTRINSIC_1).
enum class UnaryOp : unsigned char { Negative, Positive, Invert, Not };
Result<ValuePtr> unaryOp(Tracer& t, UnaryOp op, const ValuePtr& a);
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

// Equality of two values as Python would decide it (identity first), when it can be known
// at trace time: true with *eq set (0 or 1), false when it cannot be known.
bool sameValue(const ValuePtr& a, const ValuePtr& b, int* eq);
// Whether `v` may be compared (and, with `hashed`, hashed) as its real object without running
// Python code or depending on an unguarded identity: a constant, a class or function, a
// Python module, whose type's __eq__ (and __hash__) are not Python functions.
bool realComparable(const ValuePtr& v, bool hashed = false);
Done storeSubscript(Tracer& t, const ValuePtr& obj, const ValuePtr& index, const ValuePtr& value);
// del obj[index] of a list, deque (a slice of a list) or dict value, as DELETE_SUBSCR and
// __delitem__ do it: an index out of range raises the IndexError of the item deletion
// ("list assignment index out of range", "deque index out of range"), not pop's.
Done deleteItem(Tracer& t, const ValuePtr& obj, const ValuePtr& index);
// The real slice of a Slice of constants (Unsupported otherwise; null with an error set if
// making it failed).
Result<Ref> constantSlice(Tracer& t, const Slice& slice);

// The operator module's function of each BINARY_OP operator, indexed by its number.
inline const Obj kBinaryOpFns[] = {
#define B(name, num, symbol, fn) Obj::operator_##fn,
#include CDYNAMO_BINARY_OPS
#undef B
};
// COMPARE_OP's operators in its argument order (Py_LT .. Py_GE): names and functions.
inline const char* const kCompareOps[] = {"lt", "le", "eq", "ne", "gt", "ge"};
inline const Obj kCompareOpFns[] = {Obj::operator_lt, Obj::operator_le, Obj::operator_eq,
                                    Obj::operator_ne, Obj::operator_gt, Obj::operator_ge};
// An interned str for a name made at run time (a special method's name); null with an
// error set on failure.
inline Ref internedName(const std::string& name) { return Ref::steal(PyUnicode_InternFromString(name.c_str())); }

// Whether `fn` is the operator module's function of a binary operator (operator.add,
// operator.iadd, ...), and which (never sets an error): a call of it is binaryOp.
bool binaryOperatorOf(PyObject* fn, bytecode::BinaryOp* op);

// Whether `fn` is the operator module's function of a comparison (operator.lt .. operator.ge;
// *op in COMPARE_OP's order) or of a unary operator (operator.neg, pos, invert), never setting
// an error: a call of it is compareOp / unaryOp, as the opcode is.
bool compareOperatorOf(PyObject* fn, int* op);
bool unaryOperatorOf(PyObject* fn, UnaryOp* op);

}  // namespace cdynamo::trace
