// The bytecode stage's CPython 3.11 answers (bytecode/version.h).
#include "bytecode/version.h"

namespace cdynamo::bytecode {

Op jumpForDirection(Op op, bool backward) {
  struct Pair {
    Op forward, backward;
  };
  static const Pair pairs[] = {
      {Op::JUMP_FORWARD, Op::JUMP_BACKWARD},
      {Op::POP_JUMP_FORWARD_IF_FALSE, Op::POP_JUMP_BACKWARD_IF_FALSE},
      {Op::POP_JUMP_FORWARD_IF_TRUE, Op::POP_JUMP_BACKWARD_IF_TRUE},
      {Op::POP_JUMP_FORWARD_IF_NONE, Op::POP_JUMP_BACKWARD_IF_NONE},
      {Op::POP_JUMP_FORWARD_IF_NOT_NONE, Op::POP_JUMP_BACKWARD_IF_NOT_NONE},
  };
  for (const Pair& p : pairs) {
    if (op == p.forward || op == p.backward) return backward ? p.backward : p.forward;
  }
  bool isBackward = opHasFlag(static_cast<int>(op), 'B');
  return isBackward == backward ? op : Op::CACHE;
}

Op popJumpIfTrue() { return Op::POP_JUMP_FORWARD_IF_TRUE; }
Op popJumpIfFalse() { return Op::POP_JUMP_FORWARD_IF_FALSE; }

void emitCall(Assembly& out, int argc, Position pos) {
  out.emit(Op::PRECALL, argc, pos);
  out.emit(Op::CALL, argc, pos);
}

bool pushesNullBelow(const Instruction& ins) {
  return ins.op == Op::LOAD_METHOD || (ins.op == Op::LOAD_GLOBAL && (ins.arg & 1));
}

// LOAD_METHOD runs as LOAD_ATTR: [NULL, attr] is what LOAD_METHOD pushes for an attribute
// that is not a method, and a bound method called that way behaves as [method, self].
bool dropNullBelow(AsmInstr* load) {
  if (load->op == Op::LOAD_METHOD) {
    load->op = Op::LOAD_ATTR;
    return true;
  }
  if (load->op == Op::LOAD_GLOBAL && (load->arg & 1)) {
    load->arg &= ~1;
    return true;
  }
  return false;
}

int callSequenceStart(const std::vector<Instruction>& instrs, int idx) {
  int first = idx;
  if (first > 0 && instrs[static_cast<size_t>(first - 1)].op == Op::PRECALL) first -= 1;
  if (first > 0 && instrs[static_cast<size_t>(first - 1)].op == Op::KW_NAMES) first -= 1;
  return first;
}

int compareOpOf(int arg) { return arg; }

}  // namespace cdynamo::bytecode
