// The one instruction table (nothing else lists opcodes): base opcodes of the running
// CPython version, as an enum with names, inline-cache sizes, flags and stack effects. The rows
// live in opcodes_3XX.def (one file per version; this header picks the running one);
// everything else in cdynamo names opcodes through `Op::NAME` and asks the table, never a
// list of its own.
#pragma once
#include <patchlevel.h>  // PY_MINOR_VERSION of the Python being built against

#include <cstdint>

namespace cdynamo::bytecode {

// The table of the version being built against, picked here once; every user of the rows
// includes CDYNAMO_OPCODE_TABLE. What else differs between versions in the bytecode stage is
// behind bytecode/version.h (one version_py3XX.cpp per version, chosen by CMake).
#if PY_MINOR_VERSION == 11
#define CDYNAMO_OPCODE_TABLE "bytecode/opcodes_311.def"
#elif PY_MINOR_VERSION == 12
#define CDYNAMO_OPCODE_TABLE "bytecode/opcodes_312.def"
#else
#error "cdynamo has no opcode table for this Python version"
#endif
#define CDYNAMO_BINARY_OPS "bytecode/binary_ops.def"

enum class Op : uint8_t {
#define X(name, num, caches, flags, pops, pushes, pushes_if_jump) name = num,
#define S(name, num, base)
#include CDYNAMO_OPCODE_TABLE
#undef S
#undef X
};

// Name of a base opcode, or null for numbers that are not one.
const char* opName(int opcode);
// Inline CACHE code units that follow the opcode (3.11: _PyOpcode_Caches of the base op).
int opCaches(int opcode);
// True when `opcode` is a defined base opcode of this version.
bool opKnown(int opcode);
// Table flags (see opcodes_311.def): 'J','B','A','C','N','L','F','H','T','G'.
bool opHasFlag(int opcode, char flag);
inline bool opHasFlag(Op op, char flag) { return opHasFlag(static_cast<int>(op), flag); }
// Whether execution never continues at the next instruction (flag T).
inline bool neverFallsThrough(Op op) { return opHasFlag(op, 'T'); }
// Values the instruction takes off the stack and puts back with argument `arg` (the jump
// taken or not); 0 for unknown opcodes.
int opPops(Op op, int arg);
int opPushes(Op op, int arg, bool jump);
// The stack effect (pushes - pops).
inline int opStackEffect(Op op, int arg, bool jump) { return opPushes(op, arg, jump) - opPops(op, arg); }
// Maps a quickened/specialized opcode to its base opcode (3.11 _PyOpcode_Deopt).
int opDeopt(int opcode);

// BINARY_OP's argument (binary_ops.def): the operator.
enum class BinaryOp : uint8_t {
#define B(name, num, symbol, fn) name = num,
#include CDYNAMO_BINARY_OPS
#undef B
};
constexpr int kNumBinaryOps = 0
#define B(name, num, symbol, fn) +1
#include CDYNAMO_BINARY_OPS
#undef B
    ;
inline bool binaryOpKnown(int arg) { return arg >= 0 && arg < kNumBinaryOps; }
// The operator module's function for `op` ("add", "and_", "iadd", ...).
const char* binaryOpFunction(BinaryOp op);
// The operator as written ("+", "+=", "//").
const char* binaryOpSymbol(BinaryOp op);
// a += b and the other in-place forms.
inline bool isInplace(BinaryOp op) { return op >= BinaryOp::InplaceAdd; }

}  // namespace cdynamo::bytecode
