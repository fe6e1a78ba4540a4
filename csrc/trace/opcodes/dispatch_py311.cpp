// CPython 3.11's opcode dispatch (handlers.h): every base opcode of opcodes_311.def, its
// handler or not traced. Only the build's version of this file is compiled (CMakeLists.txt).
#include "trace/opcodes/handlers.h"

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
    case Op::UNARY_POSITIVE: return opUnaryPositive;
    case Op::UNARY_NEGATIVE: return opUnaryNegative;
    case Op::UNARY_NOT: return opUnaryNot;
    case Op::UNARY_INVERT: return opUnaryInvert;
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
      return opPopJumpIfFalse;
    case Op::POP_JUMP_FORWARD_IF_TRUE:
    case Op::POP_JUMP_BACKWARD_IF_TRUE:
      return opPopJumpIfTrue;
    case Op::POP_JUMP_FORWARD_IF_NONE:
    case Op::POP_JUMP_BACKWARD_IF_NONE:
      return opPopJumpIfNone;
    case Op::POP_JUMP_FORWARD_IF_NOT_NONE:
    case Op::POP_JUMP_BACKWARD_IF_NOT_NONE:
      return opPopJumpIfNotNone;
    case Op::JUMP_IF_FALSE_OR_POP: return opJumpIfFalseOrPop;
    case Op::JUMP_IF_TRUE_OR_POP: return opJumpIfTrueOrPop;
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

}  // namespace cdynamo::trace
