// The opcode loop: the dispatcher pops what the opcode table declares, runs the opcode's
// handler (handlers.h), checks and pushes what it gives, and delivers exceptions of the
// traced program through the frames' 3.11 exception tables.
#include <string>

#include "support/check.h"
#include "support/py_error.h"
#include "support/stats.h"
#include "trace/opcodes/handlers.h"
#include "trace/tracer.h"

namespace cdynamo::trace {

using bytecode::Op;

// Every base opcode: its handler, or not traced (the trace stops there, naming it; the
// frame runs natively, or breaks before it). tools/opcode_coverage.py and
// tests/test_opcode_coverage.py read the `case Op::NAME:` labels as the handled set.
Handler handlerFor(Op op) {
  using NotTraced = Op;
  switch (op) {
    case Op::NOP:
    case Op::RESUME:
    case Op::PRECALL:
    case Op::CACHE:
    case Op::EXTENDED_ARG:
    case Op::COPY_FREE_VARS:  // free variables are read lazily from the closure
      return opNothing;
    case Op::LOAD_FAST: return opLoadFast;
    case Op::STORE_FAST: return opStoreFast;
    case Op::DELETE_FAST: return opDeleteFast;
    case Op::LOAD_CONST: return opLoadConst;
    case Op::LOAD_GLOBAL: return opLoadGlobal;
    case Op::STORE_GLOBAL: return opStoreGlobal;
    case Op::LOAD_ATTR: return opLoadAttr;
    case Op::LOAD_METHOD: return opLoadMethod;
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
    case Op::UNARY_POSITIVE:
    case Op::UNARY_NEGATIVE:
    case Op::UNARY_NOT:
    case Op::UNARY_INVERT:
      return opUnary;
    case Op::COMPARE_OP: return opCompareOp;
    case Op::IS_OP: return opIsOp;
    case Op::CONTAINS_OP: return opContainsOp;
    case Op::BINARY_SUBSCR: return opBinarySubscr;
    case Op::STORE_SUBSCR: return opStoreSubscr;
    case Op::BUILD_TUPLE:
    case Op::BUILD_LIST:
      return opBuildSequence;
    case Op::LIST_TO_TUPLE: return opListToTuple;
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
    case Op::FOR_ITER: return opForIter;
    case Op::JUMP_FORWARD:
    case Op::JUMP_BACKWARD:
    case Op::JUMP_BACKWARD_NO_INTERRUPT:
      return opJump;
    case Op::POP_JUMP_FORWARD_IF_FALSE:
    case Op::POP_JUMP_BACKWARD_IF_FALSE:
    case Op::POP_JUMP_FORWARD_IF_TRUE:
    case Op::POP_JUMP_BACKWARD_IF_TRUE:
      return opPopJumpIfBool;
    case Op::POP_JUMP_FORWARD_IF_NONE:
    case Op::POP_JUMP_BACKWARD_IF_NONE:
    case Op::POP_JUMP_FORWARD_IF_NOT_NONE:
    case Op::POP_JUMP_BACKWARD_IF_NOT_NONE:
      return opPopJumpIfNone;
    case Op::JUMP_IF_FALSE_OR_POP:
    case Op::JUMP_IF_TRUE_OR_POP:
      return opJumpIfOrPop;
    case Op::RETURN_VALUE: return opReturnValue;
    case Op::RETURN_GENERATOR: return opReturnGenerator;
    case Op::YIELD_VALUE: return opYieldValue;
    case Op::SEND: return opSend;
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
    case NotTraced::PREP_RERAISE_STAR:
    case NotTraced::GET_AITER:
    case NotTraced::GET_ANEXT:
    case NotTraced::BEFORE_ASYNC_WITH:
    case NotTraced::END_ASYNC_FOR:
    case NotTraced::GET_AWAITABLE:
    case NotTraced::ASYNC_GEN_WRAP:
    case NotTraced::PRINT_EXPR:
    case NotTraced::LOAD_BUILD_CLASS:
    case NotTraced::IMPORT_STAR:
    case NotTraced::SETUP_ANNOTATIONS:
    case NotTraced::STORE_NAME:
    case NotTraced::DELETE_NAME:
    case NotTraced::LOAD_NAME:
    case NotTraced::DELETE_GLOBAL:
    case NotTraced::LOAD_CLASSDEREF:
      return nullptr;
  }
  return nullptr;
}

Done Tracer::deliverException(SymbolicFrame& f) {
  if (!f.handlers_decoded) {
    PyObject* table = f.code->co_exceptiontable;
    if (!bytecode::decodeExceptionTable(reinterpret_cast<const uint8_t*>(PyBytes_AS_STRING(table)),
                                        static_cast<size_t>(PyBytes_GET_SIZE(table)), &f.handlers))
      return fail("malformed exception table");
    f.handlers_decoded = true;
  }
  int offset = f.instrs[f.pc].offset;
  const bytecode::ExceptionTableEntry* handler = nullptr;
  for (const auto& e : f.handlers)
    if (offset >= e.start && offset < e.end) {
      handler = &e;
      break;
    }
  if (!handler) return notHandled();  // propagates to the caller
  int idx = bytecode::indexAtOffset(f.instrs, handler->target);
  if (idx < 0 || f.stack.size() < static_cast<size_t>(handler->depth)) return fail("bad exception handler");
  f.stack.resize(static_cast<size_t>(handler->depth));
  if (handler->lasti) f.stack.push_back(Value::constant(Ref::steal(PyLong_FromLong(offset)).get()));
  f.stack.push_back(std::move(pending_exc_));
  pending_exc_.reset();
  f.pc = static_cast<size_t>(idx);
  return {};
}

Result<ValuePtr> Tracer::runFrame(SymbolicFrame& f) {
  for (;;) {
    Result<ValuePtr> r = runInstructions(f);
    if (r.outcome() != Outcome::Raised || failed_) return r;
    CDYNAMO_CHECK(pending_exc_ != nullptr, "a Raised outcome without an exception in flight");
    if (Done tb = noteTraceback(f); !tb) return tb.stop();
    // An exception in flight at f.pc: this frame's handler (3.11 exception table), if any.
    Done delivered = deliverException(f);
    if (delivered.notHandled()) return r;
    if (!delivered) return delivered.stop();
  }
}

Result<ValuePtr> Tracer::runInstructions(SymbolicFrame& f) {
  SymbolicFrame* saved = current_;
  current_ = &f;
  struct Restore {
    Tracer* t;
    SymbolicFrame* saved;
    ~Restore() { t->current_ = saved; }
  } restore{this, saved};

  Values io;
  while (f.pc < f.instrs.size()) {
    if (++instructions_run_ > kMaxInstructions) return fail("trace is too long (instruction budget exhausted)");
    if (f.root) {
      int visit = ++root_visits_[f.pc];
      if (static_cast<int>(f.pc) == break_target_.index && visit == break_target_.visit) {
        // The graph break: stop before this instruction with the state intact. A Python
        // error left set by the trace so far (an internal inconsistency) would surface in
        // the Python code that builds and compiles the graph: no break then.
        if (PyErr_Occurred()) {
          FetchedError left = FetchedError::fetch();
          std::string name = left ? reinterpret_cast<PyTypeObject*>(left.type())->tp_name : "?";
          return fail(std::string("internal: a Python error (") + name + ") was left set before the graph break");
        }
        stopped_at_break_ = true;
        grad_mode_at_break_ = contexts_.gradMode();
        return Value::null();
      }
    }
    const bytecode::Instruction& ins = f.instrs[f.pc];
    Handler handler = handlerFor(ins.op);
    if (!handler)
      return fail(std::string("opcode ") + bytecode::opName(static_cast<int>(ins.op)) + " is not supported yet");
    // The inputs stay on the stack while the handler runs (an exception unwinds to its
    // handler's depth from the stack as it was before the instruction).
    const size_t pops = static_cast<size_t>(bytecode::opPops(ins.op, ins.arg));
    CDYNAMO_CHECK(f.stack.size() >= pops, "symbolic stack underflow");
    io.assign(f.stack.end() - static_cast<std::ptrdiff_t>(pops), f.stack.end());
    // Returns and raises leave the loop: they count as run when they start.
    const bool leaves = bytecode::neverFallsThrough(ins.op) && !bytecode::opHasFlag(ins.op, 'J');
    if (leaves) ++opcodeCounts()[static_cast<int>(ins.op)];
    Result<Next> next = handler(*this, f, ins, io);
    if (graph_.symbolic()) noteShapeGuards();  // the guards this instruction made the ShapeEnv add
    if (!next) return next.stop();
    // Every handler returns the Stop that fail() gave it; this only keeps a handler that
    // reported failure and still produced a value from going on.
    if (failed_) return Stop{Outcome::Unsupported};
    if (!leaves) ++opcodeCounts()[static_cast<int>(ins.op)];
    f.stack.resize(f.stack.size() - pops);
    if (*next == Next::Return) {
      CDYNAMO_CHECK(io.size() == 1, "a return without its value");
      return std::move(io[0]);
    }
    const bool jump = *next == Next::Jump;
    CDYNAMO_CHECK(io.size() == static_cast<size_t>(bytecode::opPushes(ins.op, ins.arg, jump)),
                  "a handler pushed other than its opcode table row says");
    for (ValuePtr& v : io) f.stack.push_back(std::move(v));
    if (!jump) {
      f.pc += 1;
      continue;
    }
    int target = bytecode::indexAtOffset(f.instrs, ins.jumpTarget());
    if (target < 0) return fail("jump to an offset that is not an instruction start");
    f.pc = static_cast<size_t>(target);
  }
  return fail("fell off the end of the code object");
}

}  // namespace cdynamo::trace
