// Operators: the binary operator protocol (binaryOp over the rows of kBinaryRules, Note [The
// binary operator protocol] in binary_rules.h) with its two rows that belong to no kind family
// (tensors go to the graph, constants are computed with the real operator), the operator a
// graph records for an in-place form, and the unary operators.
#include <cstring>
#include <string>

#include "support/lookup.h"
#include "support/torch_types.h"
#include "trace/engine/graph_calls.h"
#include "trace/engine/scalars.h"
#include "trace/kinds/iterator.h"
#include "trace/kinds/ndarray.h"
#include "trace/kinds/object.h"
#include "trace/kinds/tensor_subclass.h"
#include "trace/protocol/binary_rules.h"
#include "trace/protocol/operators.h"
#include "trace/tracer.h"

namespace cdynamo::trace {

using bytecode::BinaryOp;
using graph::NodeOp;

PyObject* recordedOperator(Tracer& t, PyObject* fn, const ValuePtr& a) {
  if (a->is(Kind::Tensor) && !isScalarValue(t, a)) return fn;
  if (!a->is(Kind::Tensor) && !a->is(Kind::Constant)) return fn;  // containers keep theirs (list += t)
  constexpr int kInplace = static_cast<int>(BinaryOp::InplaceAdd);
  constexpr int kCount = static_cast<int>(sizeof(kBinaryOpFns) / sizeof(kBinaryOpFns[0]));
  for (int i = kInplace; i < kCount; ++i) {
    if (lookup(kBinaryOpFns[i]) != fn) continue;
    PyObject* binary = lookup(kBinaryOpFns[i - kInplace]);
    if (!binary) return PyErr_Clear(), fn;
    return binary;
  }
  return fn;
}

Result<ValuePtr> tensorBinaryOperator(Tracer& t, const BinaryOperands& o) {
  if (!o.a->is(Kind::Tensor) && !o.b->is(Kind::Tensor)) return notHandled();
  return recordCall(t, NodeOp::CallFunction, recordedOperator(t, o.fn, o.a), {o.a, o.b}, {});
}

Result<ValuePtr> constantBinaryOperator(Tracer& t, const BinaryOperands& o) {
  if (!o.a->is(Kind::Constant) || !o.b->is(Kind::Constant)) return notHandled();
  Ref r = Ref::steal(PyObject_CallFunctionObjArgs(o.fn, o.a->constant(), o.b->constant(), nullptr));
  if (!r) return t.raisePython();
  if (!isConstantObject(r.get())) return t.fail("operator on constants returned a non-constant");
  return Value::constant(r.get());
}

namespace {

// Python's order for a binary operator (Note [The binary operator protocol]): a class's own
// special methods before the C types' slots, tensors before constants, a set's in-place
// form before the real computation, sequences' own + and * last.
const BinaryRule kBinaryRules[] = {
    typeUnionOperator,        namedTupleOperator,     dictViewSetOperator,        userObjectOperator,
    ndarrayBinaryOperator,    subclassBinaryOperator, listInplaceOperator,        dictOrOperator,
    tensorBinaryOperator,     constantBinaryOperator, setInplaceOperator,         realSetOrConstantOperator,
    setMembersOperator,       sequenceConcatOperator, sequenceRepeatOperator,     classUnionOperator,
};

}  // namespace

Result<ValuePtr> binaryOp(Tracer& t, BinaryOp op, const ValuePtr& a, const ValuePtr& b) {
  PyObject* fn = lookup(kBinaryOpFns[static_cast<int>(op)]);
  if (!fn) return t.failFromPython("operator lookup");
  const BinaryOperands operands{op, a, b, fn, bytecode::binaryOpFunction(op)};
  for (BinaryRule rule : kBinaryRules)
    if (Result<ValuePtr> r = rule(t, operands); !r.notHandled()) return r;
  return t.fail(std::string("operator ") + operands.fn_name + " on " + describe(a) + " and " + describe(b) +
                " is not supported yet");
}

namespace {

// Where `fn` stands in a table of operator-module functions, or -1 (a function torch or
// Python does not provide is skipped).
template <size_t N>
int indexOfFunction(const Obj (&table)[N], PyObject* fn) {
  for (size_t i = 0; i < N; ++i) {
    PyObject* candidate = lookup(table[i]);
    if (!candidate) {
      PyErr_Clear();
      continue;
    }
    if (candidate == fn) return static_cast<int>(i);
  }
  return -1;
}

}  // namespace

bool binaryOperatorOf(PyObject* fn, BinaryOp* op) {
  const int i = indexOfFunction(kBinaryOpFns, fn);
  if (i < 0) return false;
  *op = static_cast<BinaryOp>(i);
  return true;
}

Result<ValuePtr> unaryOp(Tracer& t, UnaryOp op, const ValuePtr& a) {
  if (op == UnaryOp::Not) {
    Result<bool> truth = truthValue(t, a);
    if (!truth) return truth.stop();
    return Value::constant(*truth ? Py_False : Py_True);
  }
  const char* name = op == UnaryOp::Negative ? "neg" : op == UnaryOp::Positive ? "pos" : "invert";
  if (isUserObject(a)) {
    Ref method = internedName(std::string("__") + name + "__");
    if (!method) return t.failFromPython("a special method's name");
    Result<ValuePtr> r = callDunder(t, a, method.get(), {});
    if (!r.notHandled()) return r;
    return t.fail(std::string("bad operand type for unary ") + name + " (TypeError)");
  }
  PyObject* fn = lookup(op == UnaryOp::Negative   ? Obj::operator_neg
                        : op == UnaryOp::Positive ? Obj::operator_pos
                                                  : Obj::operator_invert);
  if (!fn) return t.failFromPython("operator lookup");
  if (a->is(Kind::NdArray)) return ndarrayOperator(t, name, {a});
  if (Result<ValuePtr> r = subclassOperator(t, name, {a}); !r.notHandled()) return r;
  if (a->is(Kind::Tensor)) return recordCall(t, NodeOp::CallFunction, fn, {a}, {});
  if (a->is(Kind::Constant)) {
    Ref r = Ref::steal(PyObject_CallOneArg(fn, a->constant()));
    if (!r) return t.failFromPython(std::string("operator.") + name + " on a constant");
    return Value::constant(r.get());
  }
  return t.fail(std::string("unary operator on ") + describe(a) + " is not supported yet");
}

bool compareOperatorOf(PyObject* fn, int* op) {
  const int i = indexOfFunction(kCompareOpFns, fn);
  if (i < 0) return false;
  *op = i;  // Py_LT .. Py_GE, COMPARE_OP's order
  return true;
}

bool unaryOperatorOf(PyObject* fn, UnaryOp* op) {
  static const Obj kUnaryFns[] = {Obj::operator_neg, Obj::operator_pos, Obj::operator_invert};
  static const UnaryOp kUnaryOps[] = {UnaryOp::Negative, UnaryOp::Positive, UnaryOp::Invert};
  const int i = indexOfFunction(kUnaryFns, fn);
  if (i < 0) return false;
  *op = kUnaryOps[i];
  return true;
}

}  // namespace cdynamo::trace
