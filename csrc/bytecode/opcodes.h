// The one instruction table (STYLE.md habit 2): base opcodes of the running CPython
// version, as an enum with names, inline-cache sizes, flags and stack effects. The rows
// live in opcodes_3XX.def (one file per version; this header picks the running one);
// everything else in cdynamo names opcodes through `Op::NAME` and asks the table, never a
// list of its own.
#pragma once
#include <cstdint>

namespace cdynamo::bytecode {

#define CDYNAMO_OPCODE_TABLE "bytecode/opcodes_311.def"

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

}  // namespace cdynamo::bytecode
