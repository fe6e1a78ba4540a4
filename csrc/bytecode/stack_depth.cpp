// co_stacksize of symbolic code: the maximum value-stack depth over all paths.
//
// Depths propagate along three kinds of edges from the first instruction (depth 0):
//  * fall-through: depth + effect(jump=0), except after an instruction that never falls
//    through (flag T of the opcode table: unconditional jumps, RETURN_VALUE, RAISE_VARARGS,
//    RERAISE);
//  * a jump: depth + effect(jump=1) at the target;
//  * an exception: every instruction inside an exception range may raise, and the
//    handler starts at range.depth + lasti + 1 -- the interpreter pops to `depth`, pushes
//    the raising offset when `lasti`, then the exception (ceval's exception_unwind). The
//    3.11 compiler writes the table's depth as handler start depth - 1 - lasti, so the
//    two agree, and so does the maximum it stores in co_stacksize.
// The effects come from the opcode table (opcodes.h: pops and pushes per argument and
// way out), so this file holds no per-opcode knowledge. The table takes a call's arguments
// at CALL, where CPython's compiler counts them at PRECALL: the depth between the two is
// then higher by the argument count, which the depth before PRECALL already was, so the
// maximum is the compiler's.
// Valid bytecode reaches each instruction with one depth, never below the depth of an
// exception range covering it; anything else means the code is broken and is reported
// instead of being averaged away.
#include <climits>
#include <string>

#include "bytecode/assembler.h"

namespace cdynamo::bytecode {
bool computeStackSize(const Assembly& a, int* stackSize, std::string* error) {
  const int n = static_cast<int>(a.instrs.size());
  *stackSize = 0;
  if (n == 0) return true;
  auto labelIndex = [&](int label) {
    return (label >= 0 && label < static_cast<int>(a.labelAt.size())) ? a.labelAt[label] : -1;
  };
  // Handlers covering each instruction (an instruction may raise into each of them).
  std::vector<std::vector<int>> handlersOf(n);
  for (size_t h = 0; h < a.handlers.size(); ++h) {
    int s = labelIndex(a.handlers[h].start), e = labelIndex(a.handlers[h].end);
    int t = labelIndex(a.handlers[h].handler);
    if (s < 0 || e < 0 || t < 0 || t >= n || e > n) {
      if (error) *error = "exception range with an unbound label";
      return false;
    }
    for (int i = s; i < e; ++i) handlersOf[i].push_back(static_cast<int>(h));
  }

  std::vector<int> depth(n, -1);
  std::vector<int> work;
  int maxDepth = 0;
  std::string problem;
  int problemAt = -1;
  // Records the depth at which `to` is entered; false on a conflict.
  auto reach = [&](int from, int to, int d) {
    if (d > maxDepth) maxDepth = d;
    if (to >= n) {
      problem = "execution falls off the end of the code";
    } else if (d < 0) {
      problem = "stack depth goes negative";
    } else if (depth[to] < 0) {
      depth[to] = d;
      work.push_back(to);
      return true;
    } else if (depth[to] == d) {
      return true;
    } else {
      problem = "instruction " + std::to_string(to) + " reached with depths " +
                std::to_string(depth[to]) + " and " + std::to_string(d);
    }
    problemAt = from;
    return false;
  };

  depth[0] = 0;
  work.push_back(0);
  while (!work.empty()) {
    int i = work.back();
    work.pop_back();
    const AsmInstr& ins = a.instrs[i];
    const int op = static_cast<int>(ins.op);
    const int d = depth[i];
    const bool jump = opHasFlag(op, 'J');
    for (int h : handlersOf[i]) {
      const AsmHandler& hd = a.handlers[h];
      // Unwinding pops down to hd.depth; it cannot pop items that are not there.
      if (hd.depth > d) {
        problem = "exception range depth " + std::to_string(hd.depth) +
                  " above the stack depth " + std::to_string(d);
        problemAt = i;
        break;
      }
      if (!reach(i, a.labelAt[hd.handler], hd.depth + (hd.lasti ? 1 : 0) + 1)) break;
    }
    if (problemAt >= 0) break;
    if (!opKnown(op)) {
      problem = "no stack effect known for the opcode";
      problemAt = i;
      break;
    }
    // A jump's argument is its label here; no jump's effect depends on its argument.
    const int arg = jump ? 0 : ins.arg;
    const int effect = opStackEffect(ins.op, arg, false);
    if (jump) {
      const int jumpEffect = opStackEffect(ins.op, arg, true);
      int target = labelIndex(ins.label);
      if (target < 0 || target >= n) {
        problem = "jump to an unbound label";
        problemAt = i;
        break;
      }
      if (!reach(i, target, d + jumpEffect)) break;
    }
    if (neverFallsThrough(ins.op)) {
      if (d + effect > maxDepth) maxDepth = d + effect;
      if (d + effect < 0) {
        problem = "stack depth goes negative";
        problemAt = i;
        break;
      }
      continue;
    }
    if (!reach(i, i + 1, d + effect)) break;
  }
  if (problemAt >= 0) {
    if (error) {
      const char* name = opName(static_cast<int>(a.instrs[problemAt].op));
      *error = problem + " (at instruction " + std::to_string(problemAt) + " " +
               (name ? name : "?") + ")";
    }
    return false;
  }
  *stackSize = maxDepth;
  return true;
}

}  // namespace cdynamo::bytecode
