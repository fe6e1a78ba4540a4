// Decoding a code object's instruction stream into base instructions.
//
// Offsets are in code units (2 bytes), as in CPython 3.11's jump arguments and exception
// table. EXTENDED_ARG prefixes are folded into the following instruction's argument;
// CACHE units are skipped. The running form of the code (quickened) is mapped back to
// base opcodes, so the result is the same before and after specialization.
#pragma once
#include <Python.h>

#include <vector>

#include "bytecode/opcodes.h"

namespace cdynamo::bytecode {

struct Instruction {
  int offset = 0;      // code unit index of the opcode itself (after its EXTENDED_ARGs)
  int start = 0;       // code unit index of the first EXTENDED_ARG prefix (== offset if none)
  Op op = Op::NOP;     // base opcode
  int arg = 0;         // full argument, EXTENDED_ARG folded in
  int next = 0;        // code unit index of the following instruction (after caches)

  // Target of a relative jump, in code units (valid for 'J' instructions).
  int jumpTarget() const;
};

// Decodes a raw code-unit array (pairs of opcode, arg bytes) of `nunits` units.
std::vector<Instruction> decode(const uint8_t* code, int nunits);
// Decodes `co`'s current instructions (its quickened form, mapped back to base opcodes).
std::vector<Instruction> decode(PyCodeObject* co);

// Index into `instrs` of the instruction starting at code unit `offset` (its first
// EXTENDED_ARG or the opcode itself), or -1.
int indexAtOffset(const std::vector<Instruction>& instrs, int offset);

}  // namespace cdynamo::bytecode
