#include <Python.h>

#include <algorithm>

#include "bytecode/instructions.h"
#include "support/pyref.h"

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
  // co_code is the de-specialized code with zeroed caches, and on 3.12 also without the
  // INSTRUMENTED_* forms sys.monitoring writes in place (a debugger's or coverage's), which
  // _PyCode_CODE would show. CPython makes it once per code object and keeps it.
  Ref bytes = Ref::steal(PyCode_GetCode(co));
  if (!bytes) {
    PyErr_Clear();
    return {};
  }
  return decode(reinterpret_cast<const uint8_t*>(PyBytes_AS_STRING(bytes.get())),
                static_cast<int>(PyBytes_GET_SIZE(bytes.get()) / 2));
}

int indexAtOffset(const std::vector<Instruction>& instrs, int offset) {
  auto it = std::lower_bound(instrs.begin(), instrs.end(), offset,
                             [](const Instruction& ins, int off) { return ins.start < off; });
  if (it == instrs.end() || it->start != offset) return -1;
  return static_cast<int>(it - instrs.begin());
}

}  // namespace cdynamo::bytecode
