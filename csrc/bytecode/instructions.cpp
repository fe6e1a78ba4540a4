#define Py_BUILD_CORE 1
#include <Python.h>
#include <internal/pycore_code.h>

#include <algorithm>

#include "bytecode/instructions.h"

namespace cdynamo::bytecode {

int Instruction::jumpTarget() const {
  // 3.11 relative jumps count from the instruction after the caches.
  if (opHasFlag(static_cast<int>(op), 'B')) return next - arg;
  return next + arg;
}

std::vector<Instruction> decode(const uint8_t* code, int nunits) {
  std::vector<Instruction> out;
  out.reserve(nunits);
  int extended = 0;
  int start = -1;
  for (int i = 0; i < nunits;) {
    int raw = code[2 * i];
    int arg = code[2 * i + 1];
    int op = opDeopt(raw);
    if (start < 0) start = i;
    if (op == static_cast<int>(Op::EXTENDED_ARG)) {
      extended = (extended | arg) << 8;
      i += 1;
      continue;
    }
    Instruction ins;
    ins.offset = i;
    ins.start = start;
    ins.op = static_cast<Op>(op);
    ins.arg = extended | arg;
    ins.next = i + 1 + opCaches(op);
    out.push_back(ins);
    extended = 0;
    start = -1;
    i = ins.next;
  }
  return out;
}

std::vector<Instruction> decode(PyCodeObject* co) {
  const uint8_t* code = reinterpret_cast<const uint8_t*>(_PyCode_CODE(co));
  int nunits = static_cast<int>(Py_SIZE(co));
  return decode(code, nunits);
}

int indexAtOffset(const std::vector<Instruction>& instrs, int offset) {
  auto it = std::lower_bound(instrs.begin(), instrs.end(), offset,
                             [](const Instruction& ins, int off) { return ins.start < off; });
  if (it == instrs.end() || it->start != offset) return -1;
  return static_cast<int>(it - instrs.begin());
}

}  // namespace cdynamo::bytecode
