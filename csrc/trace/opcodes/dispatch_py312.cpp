// CPython 3.12's opcode dispatch (handlers.h): every base opcode of opcodes_312.def, its
// handler or not traced, and the handlers of what 3.12 adds or spells differently. Only the
// build's version of this file is compiled (CMakeLists.txt).
#include <string>

#include "trace/kinds/iterator.h"
#include "trace/opcodes/handlers.h"
#include "trace/protocol/attributes.h"
#include "trace/protocol/calls.h"
#include "trace/tracer.h"

namespace cdynamo::trace {

using bytecode::Op;

namespace {

// The instruction with its argument shifted down to the name index (LOAD_ATTR: arg >> 1,
// LOAD_SUPER_ATTR: arg >> 2), for the shared handlers that read the name from the argument.
bytecode::Instruction withNameIndex(const bytecode::Instruction& ins, int shift) {
  bytecode::Instruction plain = ins;
  plain.arg = ins.arg >> shift;
  return plain;
}

// LOAD_ATTR; with bit 0 set, the method form (LOAD_METHOD of 3.11): [NULL, bound attribute].
Result<Next> opLoadAttr312(Tracer& t, SymbolicFrame& f, const bytecode::Instruction& ins, Values& io) {
  const bytecode::Instruction plain = withNameIndex(ins, 1);
  return (ins.arg & 1) ? opLoadMethod(t, f, plain, io) : opLoadAttr(t, f, plain, io);
}

// super().name / super(C, self).name. Stack: the global `super`, the class, self. CPython
// calls the `super` it loaded with the class and self (whatever the form written: the
// zero-argument form loads __class__ and the first argument itself), then looks the name up.
Result<Next> opLoadSuperAttr(Tracer& t, SymbolicFrame& f, const bytecode::Instruction& ins, Values& io) {
  Result<ValuePtr> sup = call(t, io[0], {io[1], io[2]}, {});
  if (!sup) return sup.stop();
  Values attr{sup.take()};
  const bytecode::Instruction plain = withNameIndex(ins, 2);
  Result<Next> r = (ins.arg & 1) ? opLoadMethod(t, f, plain, attr) : opLoadAttr(t, f, plain, attr);
  if (!r) return r;
  io = std::move(attr);
  return r;
}

// An inlined comprehension saves its loop variable (NULL when unbound) and clears it; the
// STORE_FAST after the loop puts the saved value back (opStoreFast unbinds on a NULL).
Result<Next> opLoadFastAndClear(Tracer& t, SymbolicFrame& f, const bytecode::Instruction& ins, Values& io) {
  const int arg = ins.arg;
  ValuePtr v = f.locals[static_cast<size_t>(arg)];
  if (!v && f.root && !f.deleted[static_cast<size_t>(arg)]) {
    Result<ValuePtr> r = t.loadRootLocal(f, arg);
    if (!r && !r.notHandled()) return r.stop();
    if (r) v = r.take();
  }
  f.locals[static_cast<size_t>(arg)] = nullptr;
  if (f.root) f.deleted[static_cast<size_t>(arg)] = 1;
  io.assign(1, v ? std::move(v) : Value::null());
  return Next::Fall;
}

// x[a:b]: the slice and the subscript BUILD_SLICE and BINARY_SUBSCR make. Stack: container,
// start, stop.
Result<Next> opBinarySlice(Tracer& t, SymbolicFrame& f, const bytecode::Instruction& ins, Values& io) {
  Values bounds{io[1], io[2]};
  if (Result<Next> r = opBuildSlice(t, f, ins, bounds); !r) return r;
  Values sub{io[0], bounds[0]};
  Result<Next> r = opBinarySubscr(t, f, ins, sub);
  if (!r) return r;
  io = std::move(sub);
  return r;
}

// x[a:b] = v. Stack: value, container, start, stop.
Result<Next> opStoreSlice(Tracer& t, SymbolicFrame& f, const bytecode::Instruction& ins, Values& io) {
  Values bounds{io[2], io[3]};
  if (Result<Next> r = opBuildSlice(t, f, ins, bounds); !r) return r;
  Values store{io[0], io[1], bounds[0]};
  Result<Next> r = opStoreSubscr(t, f, ins, store);
  if (!r) return r;
  io.clear();
  return r;
}

Result<Next> opReturnConst(Tracer&, SymbolicFrame& f, const bytecode::Instruction& ins, Values& io) {
  io.assign(1, Value::constant(PyTuple_GET_ITEM(f.code->co_consts, ins.arg)));
  return Next::Return;
}

// The intrinsics 3.11 had opcodes for: +x and the tuple of a starred display; and the
// handler 3.12 puts around every generator body. The others (print in the REPL, import *,
// async generators' wrap, type parameters) stop the trace.
Result<Next> opCallIntrinsic1(Tracer& t, SymbolicFrame& f, const bytecode::Instruction& ins, Values& io) {
  constexpr int kStopIterationError = 3, kUnaryPositive = 5, kListToTuple = 6;
  if (ins.arg == kUnaryPositive) return opUnaryPositive(t, f, ins, io);
  if (ins.arg == kListToTuple) return opListToTuple(t, f, ins, io);
  if (ins.arg == kStopIterationError) {
    // A generator's outer handler: an exception leaving its body goes on as it is, but a
    // StopIteration would become RuntimeError("generator raised StopIteration").
    PyObject* e = io[0]->real();
    if (!e || !PyExceptionInstance_Check(e)) return t.fail("a generator's exception made in the trace");
    if (PyErr_GivenExceptionMatches(e, PyExc_StopAsyncIteration))
      return t.fail("an async generator raising StopAsyncIteration is not supported yet");
    if (!PyErr_GivenExceptionMatches(e, PyExc_StopIteration)) return Next::Fall;  // io[0] stays
    Ref err = Ref::steal(PyObject_CallFunction(PyExc_RuntimeError, "s", "generator raised StopIteration"));
    if (!err) return t.failFromPython("making an exception");
    PyException_SetCause(err.get(), Ref::borrow(e).release());
    PyException_SetContext(err.get(), Ref::borrow(e).release());
    io.assign(1, Value::object(err.get()));
    return Next::Fall;
  }
  return t.fail("CALL_INTRINSIC_1 " + std::to_string(ins.arg) + " is not supported yet");
}

// The loop's end: FOR_ITER jumps to the END_FOR after the body with the iterator and a
// stand-in for the item, which END_FOR pops (opcodes_312.def).
Result<Next> opForIter312(Tracer& t, SymbolicFrame& f, const bytecode::Instruction& ins, Values& io) {
  const ValuePtr it = io[0];
  Result<Next> r = opForIter(t, f, ins, io);
  if (r && *r == Next::Jump) io = {it, Value::null()};
  return r;
}

Result<Next> opEndFor(Tracer&, SymbolicFrame&, const bytecode::Instruction&, Values& io) {
  io.clear();
  return Next::Fall;
}

// The handler around a `yield from`'s yield, reached by an exception thrown in at the yield
// that the subiterator did not swallow (stack: subiterator, last sent value, exception): a
// StopIteration would be the expression's value; anything else goes on unwinding.
Result<Next> opCleanupThrow(Tracer& t, SymbolicFrame&, const bytecode::Instruction&, Values& io) {
  PyObject* e = io[2]->real();
  if (e && PyErr_GivenExceptionMatches(e, PyExc_StopIteration))
    return t.fail("a StopIteration thrown into `yield from` is not supported yet");
  return t.raiseValue(io[2]);
}

// `yield from`'s end keeps the receiver below the result for END_SEND to drop.
Result<Next> opSend312(Tracer& t, SymbolicFrame& f, const bytecode::Instruction& ins, Values& io) {
  const ValuePtr receiver = io[0];
  Result<Next> r = opSend(t, f, ins, io);
  if (r && *r == Next::Jump) io.insert(io.begin(), receiver);
  return r;
}

Result<Next> opEndSend(Tracer&, SymbolicFrame&, const bytecode::Instruction&, Values& io) {
  ValuePtr result = io[1];
  io.assign(1, std::move(result));
  return Next::Fall;
}

}  // namespace

// Every base opcode: its handler, or not traced (the trace stops there, naming it; the
// frame runs natively, or breaks before it). tools/opcode_coverage.py and
// tests/test_opcode_coverage.py read the `case Op::NAME:` labels as the handled set.
Handler handlerFor(Op op) {
  using NotTraced = Op;
  switch (op) {
    case Op::NOP:
    case Op::RESUME:
    case Op::CACHE:
    case Op::EXTENDED_ARG:
    case Op::COPY_FREE_VARS:  // free variables are read lazily from the closure
      return opNothing;
    case Op::LOAD_FAST:
    case Op::LOAD_FAST_CHECK:  // unbound: the trace stops (UnboundLocalError), as for LOAD_FAST
      return opLoadFast;
    case Op::LOAD_FAST_AND_CLEAR: return opLoadFastAndClear;
    case Op::STORE_FAST: return opStoreFast;
    case Op::DELETE_FAST: return opDeleteFast;
    case Op::LOAD_CONST: return opLoadConst;
    case Op::LOAD_GLOBAL: return opLoadGlobal;
    case Op::STORE_GLOBAL: return opStoreGlobal;
    case Op::LOAD_ATTR: return opLoadAttr312;
    case Op::LOAD_SUPER_ATTR: return opLoadSuperAttr;
    case Op::STORE_ATTR: return opStoreAttr;
    case Op::DELETE_ATTR: return opDeleteAttr;
    case Op::IMPORT_NAME: return opImportName;
    case Op::IMPORT_FROM: return opImportFrom;
    case Op::LOAD_ASSERTION_ERROR: return opLoadAssertionError;
    case Op::PUSH_NULL: return opPushNull;
    case Op::POP_TOP: return opPopTop;
    case Op::COPY: return opCopy;
    case Op::SWAP: return opSwap;
    case Op::KW_NAMES: return opKwNames;
    case Op::CALL: return opCall;
    case Op::BINARY_OP: return opBinaryOp;
    case Op::CALL_INTRINSIC_1: return opCallIntrinsic1;
    case Op::UNARY_NEGATIVE: return opUnaryNegative;
    case Op::UNARY_NOT: return opUnaryNot;
    case Op::UNARY_INVERT: return opUnaryInvert;
    case Op::COMPARE_OP: return opCompareOp;
    case Op::IS_OP: return opIsOp;
    case Op::CONTAINS_OP: return opContainsOp;
    case Op::BINARY_SUBSCR: return opBinarySubscr;
    case Op::STORE_SUBSCR: return opStoreSubscr;
    case Op::BINARY_SLICE: return opBinarySlice;
    case Op::STORE_SLICE: return opStoreSlice;
    case Op::BUILD_TUPLE:
    case Op::BUILD_LIST:
      return opBuildSequence;
    case Op::LIST_EXTEND: return opListExtend;
    case Op::BUILD_SLICE: return opBuildSlice;
    case Op::UNPACK_SEQUENCE: return opUnpackSequence;
    case Op::FORMAT_VALUE: return opFormatValue;
    case Op::BUILD_STRING: return opBuildString;
    case Op::BUILD_MAP: return opBuildMap;
    case Op::BUILD_CONST_KEY_MAP: return opBuildConstKeyMap;
    case Op::BUILD_SET: return opBuildSet;
    case Op::LIST_APPEND:
    case Op::SET_ADD:
      return opAppend;
    case Op::SET_UPDATE:
    case Op::DICT_UPDATE:
    case Op::DICT_MERGE:
      return opUpdate;
    case Op::MAP_ADD: return opMapAdd;
    case Op::DELETE_SUBSCR: return opDeleteSubscr;
    case Op::UNPACK_EX: return opUnpackEx;
    case Op::MAKE_CELL: return opMakeCell;
    case Op::LOAD_CLOSURE: return opLoadClosure;
    case Op::LOAD_DEREF: return opLoadDeref;
    case Op::STORE_DEREF:
    case Op::DELETE_DEREF:
      return opStoreDeref;
    case Op::MAKE_FUNCTION: return opMakeFunction;
    case Op::CALL_FUNCTION_EX: return opCallFunctionEx;
    case Op::GET_ITER:
    case Op::GET_YIELD_FROM_ITER:
      return opGetIter;
    case Op::FOR_ITER: return opForIter312;
    case Op::END_FOR: return opEndFor;
    case Op::JUMP_FORWARD:
    case Op::JUMP_BACKWARD:
    case Op::JUMP_BACKWARD_NO_INTERRUPT:
      return opJump;
    case Op::POP_JUMP_IF_FALSE: return opPopJumpIfFalse;
    case Op::POP_JUMP_IF_TRUE: return opPopJumpIfTrue;
    case Op::POP_JUMP_IF_NONE: return opPopJumpIfNone;
    case Op::POP_JUMP_IF_NOT_NONE: return opPopJumpIfNotNone;
    case Op::RETURN_VALUE: return opReturnValue;
    case Op::RETURN_CONST: return opReturnConst;
    case Op::RETURN_GENERATOR: return opReturnGenerator;
    case Op::YIELD_VALUE: return opYieldValue;
    case Op::SEND: return opSend312;
    case Op::END_SEND: return opEndSend;
    case Op::CLEANUP_THROW: return opCleanupThrow;
    case Op::RAISE_VARARGS: return opRaiseVarargs;
    case Op::RERAISE: return opReraise;
    case Op::PUSH_EXC_INFO: return opPushExcInfo;
    case Op::POP_EXCEPT: return opPopExcept;
    case Op::CHECK_EXC_MATCH: return opCheckExcMatch;
    case Op::WITH_EXCEPT_START: return opWithExceptStart;
    case Op::BEFORE_WITH: return opBeforeWith;
    case Op::GET_LEN: return opGetLen;
    case Op::MATCH_MAPPING: return opMatchMapping;
    case Op::MATCH_SEQUENCE: return opMatchSequence;
    case Op::MATCH_KEYS: return opMatchKeys;
    // Not traced: pattern matching, async, class bodies and module-level name lookups,
    // star imports, except* groups.
    case NotTraced::MATCH_CLASS:
    case NotTraced::CHECK_EG_MATCH:
    case NotTraced::CALL_INTRINSIC_2:  // except* groups, type parameters
    case NotTraced::LOAD_LOCALS:
    case NotTraced::LOAD_FROM_DICT_OR_GLOBALS:
    case NotTraced::LOAD_FROM_DICT_OR_DEREF:
    case NotTraced::INTERPRETER_EXIT:
    case NotTraced::RESERVED:
    case NotTraced::GET_AITER:
    case NotTraced::GET_ANEXT:
    case NotTraced::BEFORE_ASYNC_WITH:
    case NotTraced::END_ASYNC_FOR:
    case NotTraced::GET_AWAITABLE:
    case NotTraced::LOAD_BUILD_CLASS:
    case NotTraced::SETUP_ANNOTATIONS:
    case NotTraced::STORE_NAME:
    case NotTraced::DELETE_NAME:
    case NotTraced::LOAD_NAME:
    case NotTraced::DELETE_GLOBAL:
      return nullptr;
  }
  return nullptr;
}

}  // namespace cdynamo::trace
