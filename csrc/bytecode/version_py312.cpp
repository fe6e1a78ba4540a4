// The bytecode stage's CPython 3.12 answers (bytecode/version.h).
#include "bytecode/version.h"

namespace cdynamo::bytecode {

// Only the unconditional jump has both directions; every conditional jump goes forward.
Op jumpForDirection(Op op, bool backward) {
  if (op == Op::JUMP_FORWARD || op == Op::JUMP_BACKWARD) return backward ? Op::JUMP_BACKWARD : Op::JUMP_FORWARD;
  bool isBackward = opHasFlag(static_cast<int>(op), 'B');
  return isBackward == backward ? op : Op::CACHE;
}

Op popJumpIfTrue() { return Op::POP_JUMP_IF_TRUE; }
Op popJumpIfFalse() { return Op::POP_JUMP_IF_FALSE; }

void emitCall(Assembly& out, int argc, Position pos) { out.emit(Op::CALL, argc, pos); }

bool pushesNullBelow(const Instruction& ins) {
  return (ins.op == Op::LOAD_GLOBAL || ins.op == Op::LOAD_ATTR || ins.op == Op::LOAD_SUPER_ATTR) && (ins.arg & 1);
}

// The method forms run as the attribute load (bit 0 cleared): [NULL, attr] is what the
// method form pushes for an attribute that is not a method, and a bound method called that
// way behaves as [method, self].
bool dropNullBelow(AsmInstr* load) {
  if ((load->op == Op::LOAD_GLOBAL || load->op == Op::LOAD_ATTR || load->op == Op::LOAD_SUPER_ATTR) &&
      (load->arg & 1)) {
    load->arg &= ~1;
    return true;
  }
  return false;
}

int callSequenceStart(const std::vector<Instruction>& instrs, int idx) {
  if (idx > 0 && instrs[static_cast<size_t>(idx - 1)].op == Op::KW_NAMES) return idx - 1;
  return idx;
}

// The comparison sits above four bits the specializer uses.
int compareOpOf(int arg) { return arg >> 4; }

}  // namespace cdynamo::bytecode
