// The one instruction table (STYLE.md habit 2): base opcodes of the running CPython
// version, as an enum with names and inline-cache sizes. Version-specific rows live in
// opcodes_3XX.def; everything else in cdynamo names opcodes through `Op::NAME`.
#pragma once
#include <cstdint>

namespace cdynamo::bytecode {

enum class Op : uint8_t {
#define X(name, num, caches, flags) name = num,
#define S(name, num, base)
#include "bytecode/opcodes_311.def"
#undef S
#undef X
};

// Name of a base opcode, or "<opcode N>" style null for unknown numbers.
const char* opName(int opcode);
// Inline CACHE code units that follow the opcode (3.11: _PyOpcode_Caches of the base op).
int opCaches(int opcode);
// True when `opcode` is a defined base opcode of this version.
bool opKnown(int opcode);
// Table flags (see opcodes_311.def): 'J','B','A','C','N','L','F','H'.
bool opHasFlag(int opcode, char flag);
// Maps a quickened/specialized opcode to its base opcode (3.11 _PyOpcode_Deopt).
int opDeopt(int opcode);

}  // namespace cdynamo::bytecode
