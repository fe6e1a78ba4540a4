// What the bytecode stage does differently per CPython version: one version_py3XX.cpp per
// version defines these (CMake compiles only the build's one), so the assembler, the
// break/resume code and the tracer ask here instead of naming a version's opcodes.
#pragma once
#include <vector>

#include "bytecode/assembler.h"
#include "bytecode/instructions.h"

namespace cdynamo::bytecode {

// The form of relative jump `op` that goes backward (or forward); Op::CACHE (never a jump)
// when the opcode has no such form (FOR_ITER only jumps forward; 3.12's conditional jumps
// have no backward form).
Op jumpForDirection(Op op, bool backward);

// The forward conditional jumps generated code uses (pop the top; jump if true / false).
Op popJumpIfTrue();
Op popJumpIfFalse();

// Emits the call of the callable pair and `argc` arguments on the stack (3.11: PRECALL, CALL).
void emitCall(Assembly& out, int argc, Position pos);

// Whether `ins` pushes a NULL (or the unbound-method half of a pair) below its value: the
// callable-pair loads (LOAD_GLOBAL with bit 0 and the method loads).
bool pushesNullBelow(const Instruction& ins);

// A load that pushes a NULL below its value, rewritten in place to the plain load; returns
// whether it was one. Generated code then pushes the NULL itself.
bool dropNullBelow(AsmInstr* load);

// The first instruction of the sequence that runs natively with the CALL at `idx` when a
// graph break happens there (the call's KW_NAMES, and on 3.11 its PRECALL).
int callSequenceStart(const std::vector<Instruction>& instrs, int idx);

// COMPARE_OP's comparison (Py_LT .. Py_GE) from its argument.
int compareOpOf(int arg);

}  // namespace cdynamo::bytecode
