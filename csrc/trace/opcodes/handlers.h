// Opcode handlers: the dispatcher moves the stack, a handler only says what an instruction means.
//
// The dispatcher (interpreter.cpp) gives each handler the values its row of the opcode
// table (bytecode/opcodes_311.def) says the instruction pops, bottom first, in `io`; the
// handler replaces them with the values the instruction pushes and says how execution
// goes on; the dispatcher checks the count against the table and pushes them. A handler
// reads and writes the frame's locals, cells and call state, never its value stack.
// Every base opcode has a handler or is listed as not traced in handlerFor() (an
// exhaustive switch: a new opcode does not compile until it is one or the other). The
// switch is per version (dispatch_py3XX.cpp, with the handlers only that version needs);
// the handlers declared here are shared and never test which opcode they run for when
// versions spell it differently.
#pragma once
#include <vector>

#include "bytecode/instructions.h"
#include "trace/engine/frame.h"
#include "trace/engine/result.h"
#include "trace/values/value.h"

namespace cdynamo::trace {

class Tracer;

// How execution goes on after an instruction.
enum class Next : unsigned char {
  Fall,    // the next instruction (io: the table's pushes)
  Jump,    // the instruction's jump target (io: the table's pushes_if_jump)
  Return,  // the frame returns io[0]
};

using Values = std::vector<ValuePtr>;
using Handler = Result<Next> (*)(Tracer& t, SymbolicFrame& f, const bytecode::Instruction& ins, Values& io);

// The handler of `op`, or null for an opcode the tracer does not trace (dispatch_py3XX.cpp).
Handler handlerFor(bytecode::Op op);

// ---- op_locals.cpp: locals, constants, globals, attributes, imports, the stack ----------
Result<Next> opNothing(Tracer& t, SymbolicFrame& f, const bytecode::Instruction& ins, Values& io);
Result<Next> opLoadFast(Tracer& t, SymbolicFrame& f, const bytecode::Instruction& ins, Values& io);
Result<Next> opStoreFast(Tracer& t, SymbolicFrame& f, const bytecode::Instruction& ins, Values& io);
Result<Next> opDeleteFast(Tracer& t, SymbolicFrame& f, const bytecode::Instruction& ins, Values& io);
Result<Next> opLoadConst(Tracer& t, SymbolicFrame& f, const bytecode::Instruction& ins, Values& io);
Result<Next> opLoadGlobal(Tracer& t, SymbolicFrame& f, const bytecode::Instruction& ins, Values& io);
Result<Next> opStoreGlobal(Tracer& t, SymbolicFrame& f, const bytecode::Instruction& ins, Values& io);
Result<Next> opLoadAttr(Tracer& t, SymbolicFrame& f, const bytecode::Instruction& ins, Values& io);
Result<Next> opLoadMethod(Tracer& t, SymbolicFrame& f, const bytecode::Instruction& ins, Values& io);
Result<Next> opStoreAttr(Tracer& t, SymbolicFrame& f, const bytecode::Instruction& ins, Values& io);
Result<Next> opDeleteAttr(Tracer& t, SymbolicFrame& f, const bytecode::Instruction& ins, Values& io);
Result<Next> opImportName(Tracer& t, SymbolicFrame& f, const bytecode::Instruction& ins, Values& io);
Result<Next> opImportFrom(Tracer& t, SymbolicFrame& f, const bytecode::Instruction& ins, Values& io);
Result<Next> opLoadAssertionError(Tracer& t, SymbolicFrame& f, const bytecode::Instruction& ins, Values& io);
Result<Next> opPushNull(Tracer& t, SymbolicFrame& f, const bytecode::Instruction& ins, Values& io);
Result<Next> opPopTop(Tracer& t, SymbolicFrame& f, const bytecode::Instruction& ins, Values& io);
Result<Next> opCopy(Tracer& t, SymbolicFrame& f, const bytecode::Instruction& ins, Values& io);
Result<Next> opSwap(Tracer& t, SymbolicFrame& f, const bytecode::Instruction& ins, Values& io);

// ---- op_values.cpp: calls, operators, building values --------------------------------
Result<Next> opGetLen(Tracer& t, SymbolicFrame& f, const bytecode::Instruction& ins, Values& io);
Result<Next> opMatchMapping(Tracer& t, SymbolicFrame& f, const bytecode::Instruction& ins, Values& io);
Result<Next> opMatchSequence(Tracer& t, SymbolicFrame& f, const bytecode::Instruction& ins, Values& io);
Result<Next> opMatchKeys(Tracer& t, SymbolicFrame& f, const bytecode::Instruction& ins, Values& io);
Result<Next> opKwNames(Tracer& t, SymbolicFrame& f, const bytecode::Instruction& ins, Values& io);
Result<Next> opCall(Tracer& t, SymbolicFrame& f, const bytecode::Instruction& ins, Values& io);
Result<Next> opBinaryOp(Tracer& t, SymbolicFrame& f, const bytecode::Instruction& ins, Values& io);
Result<Next> opUnaryNegative(Tracer& t, SymbolicFrame& f, const bytecode::Instruction& ins, Values& io);
Result<Next> opUnaryPositive(Tracer& t, SymbolicFrame& f, const bytecode::Instruction& ins, Values& io);
Result<Next> opUnaryInvert(Tracer& t, SymbolicFrame& f, const bytecode::Instruction& ins, Values& io);
Result<Next> opUnaryNot(Tracer& t, SymbolicFrame& f, const bytecode::Instruction& ins, Values& io);
Result<Next> opCompareOp(Tracer& t, SymbolicFrame& f, const bytecode::Instruction& ins, Values& io);
Result<Next> opIsOp(Tracer& t, SymbolicFrame& f, const bytecode::Instruction& ins, Values& io);
Result<Next> opContainsOp(Tracer& t, SymbolicFrame& f, const bytecode::Instruction& ins, Values& io);
Result<Next> opBinarySubscr(Tracer& t, SymbolicFrame& f, const bytecode::Instruction& ins, Values& io);
Result<Next> opStoreSubscr(Tracer& t, SymbolicFrame& f, const bytecode::Instruction& ins, Values& io);
Result<Next> opBuildSequence(Tracer& t, SymbolicFrame& f, const bytecode::Instruction& ins, Values& io);
Result<Next> opListToTuple(Tracer& t, SymbolicFrame& f, const bytecode::Instruction& ins, Values& io);
Result<Next> opListExtend(Tracer& t, SymbolicFrame& f, const bytecode::Instruction& ins, Values& io);
Result<Next> opBuildSlice(Tracer& t, SymbolicFrame& f, const bytecode::Instruction& ins, Values& io);
Result<Next> opUnpackSequence(Tracer& t, SymbolicFrame& f, const bytecode::Instruction& ins, Values& io);
Result<Next> opFormatValue(Tracer& t, SymbolicFrame& f, const bytecode::Instruction& ins, Values& io);
Result<Next> opBuildString(Tracer& t, SymbolicFrame& f, const bytecode::Instruction& ins, Values& io);

// ---- containers.cpp: dict and set displays, comprehension appends, del x[i], *unpacking --
Result<Next> opBuildMap(Tracer& t, SymbolicFrame& f, const bytecode::Instruction& ins, Values& io);
Result<Next> opBuildConstKeyMap(Tracer& t, SymbolicFrame& f, const bytecode::Instruction& ins, Values& io);
Result<Next> opBuildSet(Tracer& t, SymbolicFrame& f, const bytecode::Instruction& ins, Values& io);
Result<Next> opAppend(Tracer& t, SymbolicFrame& f, const bytecode::Instruction& ins, Values& io);
Result<Next> opUpdate(Tracer& t, SymbolicFrame& f, const bytecode::Instruction& ins, Values& io);
Result<Next> opMapAdd(Tracer& t, SymbolicFrame& f, const bytecode::Instruction& ins, Values& io);
Result<Next> opDeleteSubscr(Tracer& t, SymbolicFrame& f, const bytecode::Instruction& ins, Values& io);
Result<Next> opUnpackEx(Tracer& t, SymbolicFrame& f, const bytecode::Instruction& ins, Values& io);

// ---- functions.cpp: cells, closures, functions made in the trace, star-calls ------------
Result<Next> opMakeCell(Tracer& t, SymbolicFrame& f, const bytecode::Instruction& ins, Values& io);
Result<Next> opLoadClosure(Tracer& t, SymbolicFrame& f, const bytecode::Instruction& ins, Values& io);
Result<Next> opLoadDeref(Tracer& t, SymbolicFrame& f, const bytecode::Instruction& ins, Values& io);
Result<Next> opStoreDeref(Tracer& t, SymbolicFrame& f, const bytecode::Instruction& ins, Values& io);
Result<Next> opMakeFunction(Tracer& t, SymbolicFrame& f, const bytecode::Instruction& ins, Values& io);
Result<Next> opCallFunctionEx(Tracer& t, SymbolicFrame& f, const bytecode::Instruction& ins, Values& io);

// ---- op_control.cpp: jumps, loops, returns, generators, exceptions, `with` --------------
Result<Next> opGetIter(Tracer& t, SymbolicFrame& f, const bytecode::Instruction& ins, Values& io);
Result<Next> opForIter(Tracer& t, SymbolicFrame& f, const bytecode::Instruction& ins, Values& io);
Result<Next> opJump(Tracer& t, SymbolicFrame& f, const bytecode::Instruction& ins, Values& io);
Result<Next> opPopJumpIfTrue(Tracer& t, SymbolicFrame& f, const bytecode::Instruction& ins, Values& io);
Result<Next> opPopJumpIfFalse(Tracer& t, SymbolicFrame& f, const bytecode::Instruction& ins, Values& io);
Result<Next> opPopJumpIfNone(Tracer& t, SymbolicFrame& f, const bytecode::Instruction& ins, Values& io);
Result<Next> opPopJumpIfNotNone(Tracer& t, SymbolicFrame& f, const bytecode::Instruction& ins, Values& io);
Result<Next> opJumpIfTrueOrPop(Tracer& t, SymbolicFrame& f, const bytecode::Instruction& ins, Values& io);
Result<Next> opJumpIfFalseOrPop(Tracer& t, SymbolicFrame& f, const bytecode::Instruction& ins, Values& io);
Result<Next> opReturnValue(Tracer& t, SymbolicFrame& f, const bytecode::Instruction& ins, Values& io);
Result<Next> opReturnGenerator(Tracer& t, SymbolicFrame& f, const bytecode::Instruction& ins, Values& io);
Result<Next> opYieldValue(Tracer& t, SymbolicFrame& f, const bytecode::Instruction& ins, Values& io);
Result<Next> opSend(Tracer& t, SymbolicFrame& f, const bytecode::Instruction& ins, Values& io);
Result<Next> opRaiseVarargs(Tracer& t, SymbolicFrame& f, const bytecode::Instruction& ins, Values& io);
Result<Next> opReraise(Tracer& t, SymbolicFrame& f, const bytecode::Instruction& ins, Values& io);
Result<Next> opPushExcInfo(Tracer& t, SymbolicFrame& f, const bytecode::Instruction& ins, Values& io);
Result<Next> opPopExcept(Tracer& t, SymbolicFrame& f, const bytecode::Instruction& ins, Values& io);
Result<Next> opCheckExcMatch(Tracer& t, SymbolicFrame& f, const bytecode::Instruction& ins, Values& io);
Result<Next> opWithExceptStart(Tracer& t, SymbolicFrame& f, const bytecode::Instruction& ins, Values& io);
Result<Next> opBeforeWith(Tracer& t, SymbolicFrame& f, const bytecode::Instruction& ins, Values& io);

}  // namespace cdynamo::trace
