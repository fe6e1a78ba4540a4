// Opcode table accessors and the quickened -> base mapping, both generated from the
// checked-in table (CPython does not export its _PyOpcode_Deopt data symbol).
#include <cstdint>

#include "bytecode/opcodes.h"

namespace cdynamo::bytecode {
namespace {

struct Row {
  const char* name = nullptr;
  int caches = 0;
  uint32_t flags = 0;  // bit (c - 'A') for each flag letter c
};

uint32_t flagMask(const char* flags) {
  uint32_t m = 0;
  for (const char* c = flags; *c; ++c) m |= 1u << (*c - 'A');
  return m;
}

struct Table {
  Row rows[256];
  uint8_t deopt[256] = {};
  Table() {
#define X(n, num, c, f, pops, pushes, pushes_if_jump) rows[num] = Row{#n, c, flagMask(f)}, deopt[num] = num;
#define S(n, num, base) deopt[num] = static_cast<uint8_t>(Op::base);
#include CDYNAMO_OPCODE_TABLE
#undef S
#undef X
  }
};

const Table& table() {
  static const Table t;
  return t;
}

}  // namespace

const char* opName(int opcode) {
  if (opcode < 0 || opcode > 255) return nullptr;
  return table().rows[opcode].name;
}
int opCaches(int opcode) { return (opcode < 0 || opcode > 255) ? 0 : table().rows[opcode].caches; }
bool opKnown(int opcode) { return opName(opcode) != nullptr; }
bool opHasFlag(int opcode, char flag) {
  if (opcode < 0 || opcode > 255 || flag < 'A' || flag > 'Z') return false;
  return (table().rows[opcode].flags >> (flag - 'A')) & 1u;
}

int opPops(Op op, int arg) {
  switch (op) {
#define X(n, num, c, f, pops, pushes, pushes_if_jump) \
  case Op::n:                                         \
    return (pops);
#define S(n, num, base)
#include CDYNAMO_OPCODE_TABLE
#undef S
#undef X
  }
  return 0;
}

int opPushes(Op op, int arg, bool jump) {
  switch (op) {
#define X(n, num, c, f, pops, pushes, pushes_if_jump) \
  case Op::n:                                         \
    return jump ? (pushes_if_jump) : (pushes);
#define S(n, num, base)
#include CDYNAMO_OPCODE_TABLE
#undef S
#undef X
  }
  return 0;
}

const char* binaryOpSymbol(BinaryOp op) {
  static const char* const kSymbols[] = {
#define B(name, num, symbol, fn) symbol,
#include CDYNAMO_BINARY_OPS
#undef B
  };
  return kSymbols[static_cast<int>(op)];
}

const char* binaryOpFunction(BinaryOp op) {
  static const char* const kNames[] = {
#define B(name, num, symbol, fn) #fn,
#include CDYNAMO_BINARY_OPS
#undef B
  };
  return kNames[static_cast<int>(op)];
}

int opDeopt(int opcode) {
  if (opcode < 0 || opcode > 255) return opcode;
  int base = table().deopt[opcode];
  return base ? base : opcode;
}

}  // namespace cdynamo::bytecode
