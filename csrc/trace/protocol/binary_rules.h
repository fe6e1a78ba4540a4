// The binary operator protocol: BINARY_OP and a call of the operator module's function
// (operator.add(a, b), operator.iadd(a, b)) are one operation, binaryOp(op, a, b)
// (protocol/operators.h).
//
// Note [The binary operator protocol]
// Python decides `a <op> b` from the operands' types: a class's own __op__ / __rop__ (a
// NotImplemented passes the turn, an in-place operator falls back to the binary one), then
// the C types' own slots. binaryOp tries the rows of one table (kBinaryRules in
// operators.cpp) in that order. Each row is a function of the kind family that owns the
// operands (kinds/*.cpp), and answers NotHandled when they are not its own; the first row
// that answers decides, and when none does the trace stops with the operands' kinds. So a
// kind with operators of its own is one function in its kind file, declared here, and one
// row of the table.
#pragma once
#include <Python.h>

#include "bytecode/opcodes.h"
#include "trace/engine/result.h"
#include "trace/values/value.h"

namespace cdynamo::trace {

class Tracer;

// One binary operation as the rows see it.
struct BinaryOperands {
  bytecode::BinaryOp op;
  const ValuePtr& a;
  const ValuePtr& b;
  PyObject* fn;         // the operator module's function of `op` (operator.add, operator.iadd): borrowed
  const char* fn_name;  // its name: "add", "iadd", "and_"
  bool inplace() const { return bytecode::isInplace(op); }
};

using BinaryRule = Result<ValuePtr> (*)(Tracer& t, const BinaryOperands& o);

// ---- the rows, by the file that owns them, in the table's order ----------------------------
// protocol/type_expressions.cpp: `int | None` and other unions of type-like values.
Result<ValuePtr> typeUnionOperator(Tracer& t, const BinaryOperands& o);
// kinds/sequence.cpp: a namedtuple class's own Python operator, before tuple's.
Result<ValuePtr> namedTupleOperator(Tracer& t, const BinaryOperands& o);
// kinds/dict.cpp: |, &, -, ^ (and their in-place forms, which make a new set) with a keys or
// items view of a dict: set(left) combined with the right operand's items, as the views' C
// slots compute it.
Result<ValuePtr> dictViewSetOperator(Tracer& t, const BinaryOperands& o);
// kinds/object.cpp: user objects' __op__ / __rop__ (and __iop__), and Python's TypeErrors
// when neither answers.
Result<ValuePtr> userObjectOperator(Tracer& t, const BinaryOperands& o);
// kinds/ndarray.cpp: an operand that is a NumPy array.
Result<ValuePtr> ndarrayBinaryOperator(Tracer& t, const BinaryOperands& o);
// kinds/tensor_subclass.cpp: an operand that is a __torch_function__ subclass instance.
Result<ValuePtr> subclassBinaryOperator(Tracer& t, const BinaryOperands& o);
// kinds/sequence.cpp: list += iterable and list *= n (a deque's too), on the list itself.
Result<ValuePtr> listInplaceOperator(Tracer& t, const BinaryOperands& o);
// kinds/dict.cpp: dict |= other (update, in place) and dict | dict.
Result<ValuePtr> dictOrOperator(Tracer& t, const BinaryOperands& o);
// protocol/operators.cpp: an operand that is a tensor or a symbolic number: a graph node.
Result<ValuePtr> tensorBinaryOperator(Tracer& t, const BinaryOperands& o);
// protocol/operators.cpp: two constants: computed with the real operator.
Result<ValuePtr> constantBinaryOperator(Tracer& t, const BinaryOperands& o);
// kinds/set.cpp: set |=, &=, -=, ^= on a set made in the trace (its shadow replays them).
Result<ValuePtr> setInplaceOperator(Tracer& t, const BinaryOperands& o);
// kinds/set.cpp: sets of real objects, and a constant with a container of constants
// ("%s=%d" % (name, n)): computed for real, a set result keeping eager's table.
Result<ValuePtr> realSetOrConstantOperator(Tracer& t, const BinaryOperands& o);
// kinds/set.cpp: sets holding values made in the trace (tensors), by their members.
Result<ValuePtr> setMembersOperator(Tracer& t, const BinaryOperands& o);
// kinds/sequence.cpp: seq + seq of the same sequence type (torch.Size + tuple too).
Result<ValuePtr> sequenceConcatOperator(Tracer& t, const BinaryOperands& o);
// kinds/sequence.cpp: seq * n and n * seq.
Result<ValuePtr> sequenceRepeatOperator(Tracer& t, const BinaryOperands& o);
// protocol/type_expressions.cpp: list | tuple of two classes: a types.UnionType.
Result<ValuePtr> classUnionOperator(Tracer& t, const BinaryOperands& o);

}  // namespace cdynamo::trace
