// Layout of a symbolic Assembly into co_code and its side tables (CPython 3.11).
//
// Note [EXTENDED_ARG fixed point]: a jump's argument is the distance to its target in
// code units, and that distance counts the EXTENDED_ARG prefixes of the instructions in
// between (and, for a backward jump, its own), so adding a prefix to one jump can push
// another jump's argument past 255. We start every jump without prefixes and only ever
// add prefixes; every distance is a sum of instruction sizes, so distances only grow and
// the loop stops at the least fixed point -- the same one CPython's compiler reaches,
// which is why disassemble()+assemble() reproduces the compiler's bytes exactly.
#include "bytecode/assembler.h"

#include <algorithm>
#include <string>

#include "bytecode/version.h"
#include "support/check.h"

namespace cdynamo::bytecode {
namespace {

bool fail(std::string* error, std::string msg) {
  if (error) *error = std::move(msg);
  return false;
}

std::string at(const Assembly& a, size_t i) {
  return std::string(" (instruction ") + std::to_string(i) + " " +
         (opName(static_cast<int>(a.instrs[i].op)) ? opName(static_cast<int>(a.instrs[i].op))
                                                    : "?") +
         ")";
}

bool isJump(Op op) { return opHasFlag(static_cast<int>(op), 'J'); }

// EXTENDED_ARG prefixes needed to hold `arg` (one per extra byte).
int prefixesFor(int arg) {
  if (arg > 0xffffff) return 3;
  if (arg > 0xffff) return 2;
  if (arg > 0xff) return 1;
  return 0;
}

// Checks labels and arguments; fills the direction-resolved opcode of every instruction.
bool validate(const Assembly& a, std::vector<Op>* ops, std::string* error) {
  const int n = static_cast<int>(a.instrs.size());
  auto labelIndex = [&](int label, int* idx) {
    if (label < 0 || label >= static_cast<int>(a.labelAt.size())) return false;
    *idx = a.labelAt[label];
    return *idx >= 0 && *idx <= n;
  };
  ops->resize(n);
  for (int i = 0; i < n; ++i) {
    const AsmInstr& ins = a.instrs[i];
    int num = static_cast<int>(ins.op);
    if (!opKnown(num) || ins.op == Op::CACHE || ins.op == Op::EXTENDED_ARG) {
      return fail(error, "opcode not allowed in symbolic code" + at(a, i));
    }
    (*ops)[i] = ins.op;
    if (!isJump(ins.op)) {
      if (ins.arg < 0) return fail(error, "negative argument" + at(a, i));
      continue;
    }
    int target;
    if (!labelIndex(ins.label, &target) || target == n) {
      return fail(error, "jump to an unbound label or past the last instruction" + at(a, i));
    }
    // A jump to itself counts back from its own next instruction: backward.
    Op resolved = jumpForDirection(ins.op, target <= i);
    if (resolved == Op::CACHE) return fail(error, "jump has no variant for this direction" + at(a, i));
    (*ops)[i] = resolved;
  }
  for (const AsmHandler& h : a.handlers) {
    int s, e, t;
    if (!labelIndex(h.start, &s) || !labelIndex(h.end, &e) || !labelIndex(h.handler, &t) ||
        t == n) {
      return fail(error, "exception range with an unbound label");
    }
    if (e < s) return fail(error, "exception range ends before it starts");
    if (h.depth < 0) return fail(error, "exception range with negative depth");
  }
  return true;
}

// Sizes and offsets to the fixed point of Note [EXTENDED_ARG fixed point]; fills the
// final arguments of jumps into `args`.
void layout(const Assembly& a, const std::vector<Op>& ops, std::vector<int>* prefixes,
            std::vector<int>* args, std::vector<int>* unitOf) {
  const size_t n = a.instrs.size();
  prefixes->assign(n, 0);
  args->resize(n);
  for (size_t i = 0; i < n; ++i) {
    (*args)[i] = isJump(ops[i]) ? 0 : a.instrs[i].arg;
    (*prefixes)[i] = prefixesFor((*args)[i]);
  }
  unitOf->assign(n + 1, 0);
  for (bool changed = true; changed;) {
    changed = false;
    int unit = 0;
    for (size_t i = 0; i < n; ++i) {
      (*unitOf)[i] = unit;
      unit += (*prefixes)[i] + 1 + opCaches(static_cast<int>(ops[i]));
    }
    (*unitOf)[n] = unit;
    for (size_t i = 0; i < n; ++i) {
      if (!isJump(ops[i])) continue;
      int target = (*unitOf)[a.labelAt[a.instrs[i].label]];
      int next = (*unitOf)[i + 1];  // relative jumps count from after the caches
      int arg = opHasFlag(static_cast<int>(ops[i]), 'B') ? next - target : target - next;
      (*args)[i] = arg;
      int need = prefixesFor(arg);
      if (need > (*prefixes)[i]) {
        (*prefixes)[i] = need;
        changed = true;
      }
    }
  }
}

void emitCode(const std::vector<Op>& ops, const std::vector<int>& prefixes,
              const std::vector<int>& args, std::string* code) {
  for (size_t i = 0; i < ops.size(); ++i) {
    // Prefixes carry the high bytes, most significant first. By the fixed point the
    // count is exactly what the argument needs (distances never shrink).
    for (int p = prefixes[i]; p > 0; --p) {
      code->push_back(static_cast<char>(Op::EXTENDED_ARG));
      code->push_back(static_cast<char>((args[i] >> (8 * p)) & 0xff));
    }
    code->push_back(static_cast<char>(ops[i]));
    code->push_back(static_cast<char>(args[i] & 0xff));
    code->append(2 * opCaches(static_cast<int>(ops[i])), '\0');
  }
}

bool buildExceptionTable(const Assembly& a, const std::vector<int>& unitOf, std::string* out,
                         std::string* error) {
  std::vector<ExceptionTableEntry> entries;
  for (const AsmHandler& h : a.handlers) {
    ExceptionTableEntry e;
    e.start = unitOf[a.labelAt[h.start]];
    e.end = unitOf[a.labelAt[h.end]];
    e.target = unitOf[a.labelAt[h.handler]];
    e.depth = h.depth;
    e.lasti = h.lasti;
    if (e.end > e.start) entries.push_back(e);  // an empty range protects nothing
  }
  // The interpreter takes the first entry containing the raising offset; entries must be
  // ordered and disjoint for that to mean what the ranges say.
  std::stable_sort(entries.begin(), entries.end(),
                   [](const ExceptionTableEntry& x, const ExceptionTableEntry& y) {
                     return x.start < y.start;
                   });
  for (size_t i = 1; i < entries.size(); ++i) {
    if (entries[i].start < entries[i - 1].end) {
      return fail(error, "overlapping exception ranges at code unit " +
                             std::to_string(entries[i].start));
    }
  }
  if (!encodeExceptionTable(entries, out)) return fail(error, "exception table not encodable");
  return true;
}

}  // namespace

int Assembly::newLabel() {
  labelAt.push_back(-1);
  return static_cast<int>(labelAt.size()) - 1;
}

void Assembly::bind(int label) {
  CDYNAMO_CHECK(label >= 0 && label < static_cast<int>(labelAt.size()), "bind of an unknown label");
  labelAt[label] = static_cast<int>(instrs.size());
}

void Assembly::emit(Op op, int arg, Position pos) {
  AsmInstr ins;
  ins.op = op;
  ins.arg = arg;
  ins.pos = pos;
  instrs.push_back(ins);
}

void Assembly::emitJump(Op op, int label, Position pos) {
  AsmInstr ins;
  ins.op = op;
  ins.label = label;
  ins.pos = pos;
  instrs.push_back(ins);
}

void Assembly::addHandler(int start, int end, int handler, int depth, bool lasti) {
  handlers.push_back(AsmHandler{start, end, handler, depth, lasti});
}

bool assemble(const Assembly& a, int firstLineNo, AssembledCode* out, std::string* error) {
  std::vector<Op> ops;
  if (!validate(a, &ops, error)) return false;
  std::vector<int> prefixes, args;
  *out = AssembledCode();
  layout(a, ops, &prefixes, &args, &out->unitOf);
  emitCode(ops, prefixes, args, &out->code);
  if (!buildExceptionTable(a, out->unitOf, &out->exceptionTable, error)) return false;

  std::vector<LocationRun> runs;
  runs.reserve(ops.size());
  for (size_t i = 0; i < ops.size(); ++i) {
    runs.push_back(LocationRun{out->unitOf[i + 1] - out->unitOf[i], a.instrs[i].pos});
    if (!positionEncodable(a.instrs[i].pos)) {
      return fail(error, "position not representable in a 3.11 location table" + at(a, i));
    }
  }
  if (!encodeLocationTable(runs, firstLineNo, &out->lineTable)) {
    return fail(error, "location table not encodable");
  }
  return computeStackSize(a, &out->stackSize, error);
}

}  // namespace cdynamo::bytecode
