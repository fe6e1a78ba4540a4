// The checks of tensors: one tensor's metadata, relations between input sizes (shape
// guards), and the aliasing of the inputs' storages (CHECK rows of guards/guard_kinds.def;
// see guards/kinds/check_kind.h).
#pragma once
#include <Python.h>

#include <string>
#include <vector>

#include "guards/kinds/check_kind.h"
#include "guards/tensor_check.h"

namespace cdynamo::guards {
namespace kinds {

// Python's floor division and modulo on int64 (b != 0).
inline int64_t floorDiv(int64_t a, int64_t b) {
  int64_t q = a / b;
  if ((a % b != 0) && ((a < 0) != (b < 0))) --q;
  return q;
}
inline int64_t pyMod(int64_t a, int64_t b) {
  int64_t r = a % b;
  if (r != 0 && ((r < 0) != (b < 0))) r += b;
  return r;
}

// Runs a shape program (checked by checkShape); false when an operand is invalid (a size
// that cannot be read, a division by zero): the guard then fails.
inline bool evalShape(const std::vector<ShapeOp>& ops, PyObject** regs, int64_t* out) {
  int64_t st[kMaxShapeDepth + 1];
  int sp = 0;
  for (const ShapeOp& op : ops) {
    if (op.op == ShapeOpKind::Const) {
      st[sp++] = op.arg;
      continue;
    }
    if (op.op == ShapeOpKind::Size) {
      if (!regs[op.reg]) return false;  // never: checkShape refuses registers that are not loaded
      int64_t v = tensorSize(regs[op.reg], static_cast<int>(op.arg));
      if (v < 0) return false;
      st[sp++] = v;
      continue;
    }
    if (op.op == ShapeOpKind::Int) {
      PyObject* v = regs[op.reg];
      if (!v || !PyLong_CheckExact(v)) return false;
      int overflow = 0;
      long long x = PyLong_AsLongLongAndOverflow(v, &overflow);
      if (overflow || (x == -1 && PyErr_Occurred())) {
        PyErr_Clear();
        return false;
      }
      st[sp++] = x;
      continue;
    }
    if (op.op == ShapeOpKind::Not) {
      st[sp - 1] = st[sp - 1] == 0;
      continue;
    }
    int64_t b = st[--sp];
    int64_t& a = st[sp - 1];
    switch (op.op) {
      case ShapeOpKind::Add: a = a + b; break;
      case ShapeOpKind::Mul: a = a * b; break;
      case ShapeOpKind::FloorDiv:
        if (b == 0) return false;
        a = floorDiv(a, b);
        break;
      case ShapeOpKind::Mod:
        if (b == 0) return false;
        a = pyMod(a, b);
        break;
      case ShapeOpKind::Pow: {
        int64_t r = 1;
        for (int64_t i = 0; i < b && i < 64; ++i) r *= a;
        a = r;
        break;
      }
      case ShapeOpKind::Eq: a = a == b; break;
      case ShapeOpKind::Ne: a = a != b; break;
      case ShapeOpKind::Lt: a = a < b; break;
      case ShapeOpKind::Le: a = a <= b; break;
      case ShapeOpKind::Gt: a = a > b; break;
      case ShapeOpKind::Ge: a = a >= b; break;
      case ShapeOpKind::And: a = (a != 0) && (b != 0); break;
      case ShapeOpKind::Or: a = (a != 0) || (b != 0); break;
      case ShapeOpKind::Max: a = a > b ? a : b; break;
      case ShapeOpKind::Min: a = a < b ? a : b; break;
      case ShapeOpKind::Const:
      case ShapeOpKind::Size:
      case ShapeOpKind::Int:
      case ShapeOpKind::Not:
        break;
    }
  }
  *out = st[0];
  return true;
}

// Whether a shape program evaluates to non-zero. Kept out of line: the hit path's loop
// (GuardProgram::run) then needs no stack slot for the result.
[[gnu::noinline]] inline bool shapeHolds(const std::vector<ShapeOp>& ops, PyObject** regs) {
  int64_t result = 0;
  return evalShape(ops, regs, &result) && result != 0;
}

}  // namespace kinds

namespace checks {

struct Tensor {
  static bool run(const Check& c, PyObject* v, PyObject** regs, const GuardProgram& p) {
    return tensorMatches(c.tensor, v);
  }
  static std::string describe(const Check& c, const GuardProgram& p) {
    return c.what + " matches " + describeTensorSpec(c.tensor);
  }
  static std::string explain(const Check& c, PyObject* v, PyObject** regs, const GuardProgram& p) {
    return tensorMismatch(c.tensor, v, c.what);
  }
};

struct Shape {
  // The commonest relation, size == size (duck sizing relates every pair of equal sizes),
  // in one call; any other through the stack machine.
  static bool run(const Check& c, PyObject* v, PyObject** regs, const GuardProgram& p) {
    const std::vector<ShapeOp>& ops = c.shape_ops;
    if (ops.size() == 3 && ops[0].op == ShapeOpKind::Size && ops[1].op == ShapeOpKind::Size &&
        ops[2].op == ShapeOpKind::Eq)
      return tensorSizesEqual(regs[ops[0].reg], static_cast<int>(ops[0].arg), regs[ops[1].reg],
                              static_cast<int>(ops[1].arg));
    return kinds::shapeHolds(ops, regs);
  }
  static std::string describe(const Check& c, const GuardProgram& p) { return "shape guard: " + c.what; }
  // "shape guard <relation> failed (<each size or int it reads> = <its value now>, ...)".
  static std::string explain(const Check& c, PyObject* v, PyObject** regs, const GuardProgram& p) {
    std::string reason = "shape guard " + c.what + " failed (";
    bool first = true;
    for (const ShapeOp& op : c.shape_ops) {
      if (op.op != ShapeOpKind::Size && op.op != ShapeOpKind::Int) continue;
      const std::string& name = p.sourceName(op.reg);
      std::string term = op.op == ShapeOpKind::Int ? name : name + ".size()[" + std::to_string(op.arg) + "]";
      if (reason.find(term + " = ") != std::string::npos) continue;
      reason += (first ? "" : ", ") + term + " = " +
                (op.op == ShapeOpKind::Int ? kinds::reprOf(regs[op.reg])
                                           : std::to_string(tensorSize(regs[op.reg], static_cast<int>(op.arg))));
      first = false;
    }
    return reason + ")";
  }
};

struct Storages {
  static bool run(const Check& c, PyObject* v, PyObject** regs, const GuardProgram& p) {
    return p.storageGuard(c.index).holds(regs);
  }
  static std::string describe(const Check& c, const GuardProgram& p) { return c.what; }
  // The first pair (one of them mutated) whose storages relate otherwise than at trace time.
  static std::string explain(const Check& c, PyObject* v, PyObject** regs, const GuardProgram& p) {
    const StorageGuard& g = p.storageGuard(c.index);
    std::vector<const void*> st;
    for (int r : g.regs) st.push_back(tensorStorage(regs[r]));
    size_t i = 0, j = 0;
    if (!g.firstMismatch(st.data(), &i, &j)) return c.what;
    const bool traced_shared = g.groups[i] == g.groups[j];
    return p.sourceName(g.regs[i]) + " (mutated by the graph) and " + p.sourceName(g.regs[j]) +
           (traced_shared ? " shared a storage at trace time, now they do not"
                          : " had separate storages at trace time, now they share one");
  }
};

}  // namespace checks
}  // namespace cdynamo::guards
