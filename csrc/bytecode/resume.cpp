// Resume and break code generation (see resume.h for the calling convention).
#include "bytecode/resume.h"

#include <unordered_map>
#include <unordered_set>

#include "bytecode/assembler.h"
#include "bytecode/instructions.h"
#include "bytecode/version.h"

namespace cdynamo::bytecode {
namespace {

// Generated code objects, per original code object. An original is held through a weak
// reference whose callback forgets what was generated for it, so generated code lives
// exactly as long as the function it was made for (or until clearGenerated()).
struct PerOriginal {
  Ref weak;
  std::unordered_map<std::string, Ref> codes;  // layout key -> generated code
  std::vector<std::vector<bool>> liveIn;       // instruction -> live co_varnames (liveLocals)
};

struct Registry {
  std::unordered_map<PyCodeObject*, PerOriginal> byOriginal;
  std::unordered_map<PyCodeObject*, ResumeOrigin> origins;  // resume code -> origin
  std::unordered_set<PyCodeObject*> breaks;
};

// Leaked on purpose: Note [Python references in statics].
Registry& registry() {
  static Registry& r = *new Registry();
  return r;
}

void forget(PyCodeObject* orig) {
  Registry& r = registry();
  auto it = r.byOriginal.find(orig);
  if (it == r.byOriginal.end()) return;
  PerOriginal gone = std::move(it->second);
  r.byOriginal.erase(it);
  for (auto& [key, code] : gone.codes) {
    auto* c = reinterpret_cast<PyCodeObject*>(code.get());
    r.origins.erase(c);
    r.breaks.erase(c);
  }
  // `gone` is destroyed here, after the registry is consistent (a code object's death
  // may run other callbacks).
}

PyObject* forgetCallback(PyObject* self, PyObject* /*weakref*/) {
  forget(static_cast<PyCodeObject*>(PyLong_AsVoidPtr(self)));
  Py_RETURN_NONE;
}

PyMethodDef forgetDef = {"cdynamo_forget_generated_code", forgetCallback, METH_O, nullptr};

// The generated codes of `orig`, made on first use (null with a Python error on failure).
PerOriginal* perOriginal(PyCodeObject* orig) {
  Registry& r = registry();
  auto it = r.byOriginal.find(orig);
  if (it != r.byOriginal.end()) return &it->second;
  Ref key = Ref::steal(PyLong_FromVoidPtr(orig));
  Ref callback = key ? Ref::steal(PyCFunction_New(&forgetDef, key.get())) : Ref();
  Ref weak = callback ? Ref::steal(PyWeakref_NewRef(reinterpret_cast<PyObject*>(orig), callback.get())) : Ref();
  if (!weak) return nullptr;
  PerOriginal& p = r.byOriginal[orig];
  p.weak = std::move(weak);
  return &p;
}

std::string utf8(PyObject* s);

bool fail(std::string* error, std::string msg) {
  if (error) *error = std::move(msg);
  return false;
}

std::string utf8(PyObject* s) {
  const char* c = s && PyUnicode_Check(s) ? PyUnicode_AsUTF8(s) : nullptr;
  if (!c) PyErr_Clear();
  return c ? c : "?";
}

// Instructions whose argument is an index into localsplus past co_varnames (cells and
// free variables): they move when names are added to co_varnames.
bool indexesCells(Op op) { return opHasFlag(static_cast<int>(op), 'F'); }

// What every generated code needs: the original's symbolic form and its entry point.
struct Original {
  PyCodeObject* code;
  Assembly asm_;
  int resumeIndex = -1;  // index of the RESUME that ends the frame set-up
  int nvarnames = 0;
  // localsplus index -> cell ordinal (cells of this frame, arguments captured by inner
  // functions included), or -1; and the free variables' first index.
  std::vector<int> cellOrdinal;
  int ncells = 0;
  int firstFree = 0;
  bool hasCopyFreeVars = false;
  std::vector<std::string> cellNames, freeNames;
};

bool loadOriginal(PyCodeObject* co, Original* o, std::string* error) {
  o->code = co;
  if (!disassemble(co, &o->asm_, error)) return false;
  for (size_t i = 0; i < o->asm_.instrs.size(); ++i)
    if (o->asm_.instrs[i].op == Op::RESUME) {
      o->resumeIndex = static_cast<int>(i);
      break;
    }
  if (o->resumeIndex < 0) return fail(error, "code without RESUME");
  o->nvarnames = co->co_nlocals;
  o->cellOrdinal.assign(static_cast<size_t>(co->co_nlocalsplus), -1);
  o->firstFree = co->co_nlocalsplus - co->co_nfreevars;
  const char* kinds = PyBytes_AS_STRING(co->co_localspluskinds);
  for (int i = 0; i < co->co_nlocalsplus; ++i) {
    std::string name = utf8(PyTuple_GET_ITEM(co->co_localsplusnames, i));
    if (kinds[i] & 0x40) {  // CO_FAST_CELL
      o->cellOrdinal[static_cast<size_t>(i)] = o->ncells++;
      o->cellNames.push_back(name);
    } else if (i >= o->firstFree) {
      o->freeNames.push_back(name);
    }
  }
  for (const AsmInstr& ins : o->asm_.instrs)
    if (ins.op == Op::COPY_FREE_VARS) o->hasCopyFreeVars = true;
  return true;
}

// The names, argument count and constants a generated code adds to the original's.
struct Layout {
  std::vector<std::string> extraNames;  // names added after co_varnames
  int argcount = 0;
  std::vector<PyObject*> extraConsts;   // borrowed; appended to co_consts
};

// Generated code has no cell variables: the original's cells (arguments captured by inner
// functions too) become its first free variables, so the break code and every resume
// function share the frame's cells through their closure (cells, then the original's
// free variables). The index of cell or free slot `i` of the original in that layout.
int remapCellSlot(const Original& o, int i, int added) {
  int base = o.nvarnames + added;
  int k = o.cellOrdinal[static_cast<size_t>(i)];
  if (k >= 0) return base + k;
  return base + o.ncells + (i - o.firstFree);
}

// The copy of the original: its instructions (cell/free indices remapped, the names
// `shift` added before them; MAKE_CELL gone, COPY_FREE_VARS copying cells too) with `prologue` emitted right after RESUME, `inlineTail`
// right after instruction `last` (if >= 0), and `endTail` appended. `prologue` receives
// a label bound to original instruction `entry`. Instruction `last`, if a jump, is
// retargeted to `jumpLabel` (which `endTail` binds). `afterEach(out, ins)` runs after
// every copied instruction (the break code's handlers clear its first-pass flag there).
template <typename Prologue, typename Inline, typename End, typename AfterEach>
Assembly copyWithInsertions(const Original& o, int shift, int entry, int last, bool retarget, Prologue prologue,
                            Inline inlineTail, End endTail, AfterEach afterEach) {
  const Assembly& a = o.asm_;
  const size_t n = a.instrs.size();
  Assembly out;
  out.labelAt.assign(a.labelAt.size(), -1);
  out.handlers = a.handlers;
  const int entryLabel = out.newLabel();
  const int jumpLabel = retarget ? out.newLabel() : -1;
  std::vector<int> newIndex(n + 1, -1);
  for (size_t i = 0; i < n; ++i) {
    AsmInstr ins = a.instrs[i];
    if (ins.op == Op::MAKE_CELL) {
      // The cells come from the closure. The first MAKE_CELL copies them when the
      // original had no free variables (and so no COPY_FREE_VARS).
      bool first = !o.hasCopyFreeVars && (i == 0 || a.instrs[i - 1].op != Op::MAKE_CELL);
      ins.op = first ? Op::COPY_FREE_VARS : Op::NOP;
      ins.arg = first ? o.ncells : 0;
    } else if (ins.op == Op::COPY_FREE_VARS) {
      ins.arg += o.ncells;
    } else if (indexesCells(ins.op)) {
      ins.arg = remapCellSlot(o, ins.arg, shift);
    }
    if (static_cast<int>(i) == last && retarget) ins.label = jumpLabel;
    newIndex[i] = static_cast<int>(out.instrs.size());
    out.instrs.push_back(ins);
    afterEach(out, ins);
    if (static_cast<int>(i) == o.resumeIndex) prologue(out, entryLabel);
    if (static_cast<int>(i) == last) inlineTail(out);
  }
  newIndex[n] = static_cast<int>(out.instrs.size());
  endTail(out, jumpLabel);
  for (size_t l = 0; l < a.labelAt.size(); ++l)
    if (a.labelAt[l] >= 0) out.labelAt[l] = newIndex[static_cast<size_t>(a.labelAt[l])];
  out.labelAt[static_cast<size_t>(entryLabel)] = newIndex[static_cast<size_t>(entry)];
  return out;
}

Ref tupleOfStrings(PyObject* base, const std::vector<std::string>& extra) {
  Py_ssize_t n = PyTuple_GET_SIZE(base);
  Ref t = Ref::steal(PyTuple_New(n + static_cast<Py_ssize_t>(extra.size())));
  if (!t) return Ref();
  for (Py_ssize_t i = 0; i < n; ++i) {
    PyTuple_SET_ITEM(t.get(), i, Ref::borrow(PyTuple_GET_ITEM(base, i)).release());
  }
  for (size_t i = 0; i < extra.size(); ++i) {
    PyObject* s = PyUnicode_InternFromString(extra[i].c_str());
    if (!s) return Ref();
    PyTuple_SET_ITEM(t.get(), n + static_cast<Py_ssize_t>(i), s);
  }
  return t;
}

Ref makeCode(const Original& o, const Assembly& a, const Layout& layout, const std::string& name,
             const std::string& qualname, std::string* error) {
  PyCodeObject* orig = o.code;
  AssembledCode parts;
  if (!assemble(a, orig->co_firstlineno, &parts, error)) return Ref();
  Ref origNames = Ref::steal(PyCode_GetVarnames(orig));
  if (!origNames) return Ref();
  Ref varnames = tupleOfStrings(origNames.get(), layout.extraNames);
  Py_ssize_t nconsts = PyTuple_GET_SIZE(orig->co_consts);
  Ref consts = Ref::steal(PyTuple_New(nconsts + static_cast<Py_ssize_t>(layout.extraConsts.size())));
  if (!varnames || !consts) return Ref();
  for (Py_ssize_t i = 0; i < nconsts; ++i) {
    PyTuple_SET_ITEM(consts.get(), i, Ref::borrow(PyTuple_GET_ITEM(orig->co_consts, i)).release());
  }
  for (size_t i = 0; i < layout.extraConsts.size(); ++i)
    PyTuple_SET_ITEM(consts.get(), nconsts + static_cast<Py_ssize_t>(i), Ref::borrow(layout.extraConsts[i]).release());
  Ref noNames = Ref::steal(PyTuple_New(0));
  if (!noNames) return Ref();
  std::vector<std::string> freeNames = o.cellNames;
  freeNames.insert(freeNames.end(), o.freeNames.begin(), o.freeNames.end());
  Ref freevars = tupleOfStrings(noNames.get(), freeNames);
  Ref extra = Ref::steal(PyDict_New());
  if (!extra || !freevars) return Ref();
  int flags = orig->co_flags & ~(CO_VARARGS | CO_VARKEYWORDS);
  struct Field {
    const char* key;
    Ref value;
  } fields[] = {
      {"co_varnames", std::move(varnames)},
      {"co_cellvars", Ref::borrow(noNames.get())},
      {"co_freevars", std::move(freevars)},
      {"co_consts", std::move(consts)},
      {"co_argcount", Ref::steal(PyLong_FromLong(layout.argcount))},
      {"co_posonlyargcount", Ref::steal(PyLong_FromLong(0))},
      {"co_kwonlyargcount", Ref::steal(PyLong_FromLong(0))},
      {"co_nlocals", Ref::steal(PyLong_FromSsize_t(orig->co_nlocals + static_cast<Py_ssize_t>(layout.extraNames.size())))},
      {"co_flags", Ref::steal(PyLong_FromLong(flags))},
      {"co_name", Ref::steal(PyUnicode_FromString(name.c_str()))},
      {"co_qualname", Ref::steal(PyUnicode_FromString(qualname.c_str()))},
  };
  for (Field& f : fields)
    if (!f.value || PyDict_SetItemString(extra.get(), f.key, f.value.get()) < 0) return Ref();
  Ref code = buildCode(reinterpret_cast<PyObject*>(orig), parts, orig->co_firstlineno, extra.get());
  if (!code) {
    PyObject *t, *v, *tb;
    PyErr_Fetch(&t, &v, &tb);
    Ref type = Ref::steal(t), value = Ref::steal(v), trace = Ref::steal(tb);
    Ref s = Ref::steal(value ? PyObject_Str(value.get()) : nullptr);
    PyErr_Clear();
    fail(error, "building the code object: " + (s ? utf8(s.get()) : std::string("?")));
  }
  return code;
}

std::string slotName(int s) { return "___stack" + std::to_string(s); }

// The names added for a frame whose stack is `at`: one argument per non-NULL slot.
// Returns the local index of each slot's argument (-1 for NULL slots).
std::vector<int> addStackArgs(const Original& o, const FrameLayout& at, Layout* layout) {
  std::vector<int> local(at.stack_null.size(), -1);
  for (size_t s = 0; s < at.stack_null.size(); ++s) {
    if (at.stack_null[s]) continue;
    local[s] = o.nvarnames + static_cast<int>(layout->extraNames.size());
    layout->extraNames.push_back(slotName(static_cast<int>(s)));
  }
  return local;
}

// Prologue: delete unbound locals, push the stack (NULLs and arguments), jump to `target`.
void emitPrologue(Assembly& out, const FrameLayout& at, const std::vector<int>& slotLocal, int targetLabel,
                  Position pos) {
  for (size_t i = 0; i < at.unbound.size(); ++i)
    if (at.unbound[i]) out.emit(Op::DELETE_FAST, static_cast<int>(i), pos);
  for (size_t s = 0; s < at.stack_null.size(); ++s) {
    if (at.stack_null[s])
      out.emit(Op::PUSH_NULL, 0, pos);
    else
      out.emit(Op::LOAD_FAST, slotLocal[s], pos);
  }
  out.emitJump(Op::JUMP_FORWARD, targetLabel, pos);
}

int lineOf(const Original& o, int index) {
  int line = o.asm_.instrs[static_cast<size_t>(index)].pos.line;
  return line >= 0 ? line : o.code->co_firstlineno;
}

}  // namespace

std::string FrameLayout::key() const {
  std::string k = std::to_string(index) + ":";
  for (bool b : stack_null) k += b ? 'N' : 'v';
  k += ":";
  for (bool b : unbound) k += b ? 'u' : 'b';
  return k;
}

int FrameLayout::passedStack() const {
  int n = 0;
  for (bool b : stack_null) n += b ? 0 : 1;
  return n;
}

namespace {

// Backward liveness of co_varnames over the instruction graph (fall-through, jumps,
// exception-table edges), to a fixed point.
std::vector<std::vector<bool>> computeLiveness(PyCodeObject* co) {
  std::vector<Instruction> ins = decode(co);
  const size_t n = ins.size();
  const size_t nv = static_cast<size_t>(co->co_nlocals);
  std::vector<std::vector<bool>> live(n, std::vector<bool>(nv, false));
  // Reading locals by name, or super() reading the first argument.
  bool allLive = false, firstLive = false;
  for (Py_ssize_t i = 0; i < PyTuple_GET_SIZE(co->co_names); ++i) {
    const char* name = PyUnicode_AsUTF8(PyTuple_GET_ITEM(co->co_names, i));
    if (!name) {
      PyErr_Clear();
      continue;
    }
    std::string s = name;
    if (s == "locals" || s == "vars" || s == "eval" || s == "exec" || s == "dir" || s == "_getframe") allLive = true;
    if (s == "super") firstLive = true;
  }
  if (allLive) {
    for (auto& l : live) l.assign(nv, true);
    return live;
  }
  std::vector<ExceptionTableEntry> table;
  decodeExceptionTable(reinterpret_cast<const uint8_t*>(PyBytes_AS_STRING(co->co_exceptiontable)),
                       static_cast<size_t>(PyBytes_GET_SIZE(co->co_exceptiontable)), &table);
  std::vector<std::vector<int>> succ(n);
  for (size_t i = 0; i < n; ++i) {
    Op op = ins[i].op;
    bool falls = !neverFallsThrough(op);
    if (falls && i + 1 < n) succ[i].push_back(static_cast<int>(i + 1));
    if (opHasFlag(static_cast<int>(op), 'J')) {
      int t = indexAtOffset(ins, ins[i].jumpTarget());
      if (t >= 0) succ[i].push_back(t);
    }
    for (const ExceptionTableEntry& e : table)
      if (ins[i].offset >= e.start && ins[i].offset < e.end) {
        int t = indexAtOffset(ins, e.target);
        if (t >= 0) succ[i].push_back(t);
        break;
      }
  }
  for (bool changed = true; changed;) {
    changed = false;
    for (size_t k = n; k > 0; --k) {
      size_t i = k - 1;
      std::vector<bool> out(nv, false);
      for (int s : succ[i])
        for (size_t v = 0; v < nv; ++v) out[v] = out[v] || live[static_cast<size_t>(s)][v];
      const int a = ins[i].arg;
      // Every instruction on a local but STORE_FAST reads it: DELETE_FAST too (deleting an
      // unbound local raises), and 3.12's LOAD_FAST_CHECK and LOAD_FAST_AND_CLEAR.
      if (opHasFlag(ins[i].op, 'L') && static_cast<size_t>(a) < nv)
        out[static_cast<size_t>(a)] = ins[i].op != Op::STORE_FAST;
      if (firstLive && nv > 0) out[0] = true;
      if (out != live[i]) {
        live[i] = std::move(out);
        changed = true;
      }
    }
  }
  return live;
}

}  // namespace

std::vector<bool> liveLocals(PyCodeObject* code, int index) {
  PerOriginal* p = perOriginal(code);
  if (!p) {
    PyErr_Clear();
    return std::vector<bool>(static_cast<size_t>(code->co_nlocals), true);
  }
  if (p->liveIn.empty()) p->liveIn = computeLiveness(code);
  if (index < 0 || static_cast<size_t>(index) >= p->liveIn.size())
    return std::vector<bool>(static_cast<size_t>(code->co_nlocals), true);
  return p->liveIn[static_cast<size_t>(index)];
}

std::vector<int> cellSlots(PyCodeObject* code) {
  std::vector<int> out;
  const char* kinds = PyBytes_AS_STRING(code->co_localspluskinds);
  for (int i = 0; i < code->co_nlocalsplus; ++i)
    if (kinds[i] & 0x40) out.push_back(i);  // CO_FAST_CELL
  return out;
}

bool canResume(PyCodeObject* orig, std::string* why) {
  if (orig->co_flags & (CO_GENERATOR | CO_COROUTINE | CO_ASYNC_GENERATOR | CO_ITERABLE_COROUTINE))
    return fail(why, "graph break in a generator or coroutine");
  if (resumeOrigin(orig) == nullptr && isBreakCode(orig)) return fail(why, "graph break in generated code");
  return true;
}

Ref resumeCode(PyCodeObject* orig, const FrameLayout& at, std::string* error) {
  Registry& r = registry();
  PerOriginal* memo = perOriginal(orig);
  if (!memo) {
    PyErr_Clear();
    return fail(error, "the code object cannot be weakly referenced"), Ref();
  }
  std::string key = "R/" + at.key();
  auto it = memo->codes.find(key);
  if (it != memo->codes.end()) return it->second.copy();
  Original o;
  if (!loadOriginal(orig, &o, error)) return Ref();
  if (at.index <= o.resumeIndex || at.index >= static_cast<int>(o.asm_.instrs.size()))
    return fail(error, "resume point outside the function body"), Ref();
  if (static_cast<int>(at.unbound.size()) != o.nvarnames) return fail(error, "layout does not match co_varnames"), Ref();
  Layout layout;
  std::vector<int> slotLocal = addStackArgs(o, at, &layout);
  layout.argcount = o.nvarnames + static_cast<int>(layout.extraNames.size());
  Position pos = o.asm_.instrs[static_cast<size_t>(at.index)].pos;
  int prologueLength = 0;
  Assembly out = copyWithInsertions(
      o, static_cast<int>(layout.extraNames.size()), at.index, -1, false,
      [&](Assembly& dst, int entryLabel) {
        size_t before = dst.instrs.size();
        emitPrologue(dst, at, slotLocal, entryLabel, pos);
        prologueLength = static_cast<int>(dst.instrs.size() - before);
      },
      [](Assembly&) {}, [](Assembly&, int) {}, [](Assembly&, const AsmInstr&) {});
  int line = lineOf(o, at.index);
  std::string name = "cdynamo_resume_in_" + utf8(orig->co_name) + "_at_" + std::to_string(line);
  std::string qualname = utf8(orig->co_qualname) + ".<resume at line " + std::to_string(line) + ">";
  Ref code = makeCode(o, out, layout, name, qualname, error);
  if (!code) return Ref();
  auto* rc = reinterpret_cast<PyCodeObject*>(code.get());
  // The prologue sits right after RESUME; instructions after it are the original's.
  r.origins[rc] = ResumeOrigin{orig, prologueLength, o.resumeIndex + 1 + prologueLength};
  memo->codes.emplace(key, code.copy());
  return code;
}

namespace {

// A load that pushes a NULL below its value (bytecode/version.h dropNullBelow) runs as
// the plain load followed by PUSH_NULL; SWAP 2. The successor's layout has that NULL.

// The break code's epilogue for successor `k` (layout `s`): pops the stack into the
// temporaries `temp`, then returns ___continuation(k, live locals..., stack...), the
// call that resumes the frame in resume function k. Constants: noneConst is None,
// noneConst + 1 + k is the int k.
void emitBreakEpilogue(Assembly& out, const FrameLayout& s, size_t k, const std::vector<int>& temp,
                       int continuationLocal, int noneConst, Position breakPos) {
  for (size_t i = s.stack_null.size(); i > 0; --i) out.emit(Op::STORE_FAST, temp[i - 1], breakPos);
  out.emit(Op::PUSH_NULL, 0, breakPos);
  out.emit(Op::LOAD_FAST, continuationLocal, breakPos);
  out.emit(Op::LOAD_CONST, noneConst + 1 + static_cast<int>(k), breakPos);
  for (size_t i = 0; i < s.unbound.size(); ++i)
    out.emit(s.unbound[i] ? Op::LOAD_CONST : Op::LOAD_FAST, s.unbound[i] ? noneConst : static_cast<int>(i), breakPos);
  for (size_t i = 0; i < s.stack_null.size(); ++i)
    if (!s.stack_null[i]) out.emit(Op::LOAD_FAST, temp[i], breakPos);
  int argc = 1 + static_cast<int>(s.unbound.size()) + s.passedStack();
  emitCall(out, argc, breakPos);
  out.emit(Op::RETURN_VALUE, 0, breakPos);
}

}  // namespace

Ref breakCode(PyCodeObject* orig, const FrameLayout& at, int last, const std::vector<FrameLayout>& successors,
              std::string* error) {
  Registry& r = registry();
  PerOriginal* memo = perOriginal(orig);
  if (!memo) {
    PyErr_Clear();
    return fail(error, "the code object cannot be weakly referenced"), Ref();
  }
  std::string key = "B/" + at.key() + "/" + std::to_string(last);
  for (const FrameLayout& s : successors) key += "/" + s.key();
  auto it = memo->codes.find(key);
  if (it != memo->codes.end()) return it->second.copy();
  Original o;
  if (!loadOriginal(orig, &o, error)) return Ref();
  const int n = static_cast<int>(o.asm_.instrs.size());
  if (at.index <= o.resumeIndex || last < at.index || last >= n || successors.empty() || successors.size() > 2)
    return fail(error, "break point outside the function body"), Ref();
  bool isJump = opHasFlag(static_cast<int>(o.asm_.instrs[static_cast<size_t>(last)].op), 'J');
  if (isJump != (successors.size() == 2)) return fail(error, "successors do not match the breaking instruction"), Ref();

  Layout layout;
  std::vector<int> slotLocal = addStackArgs(o, at, &layout);
  const int continuationLocal = o.nvarnames + static_cast<int>(layout.extraNames.size());
  layout.extraNames.push_back("___continuation");
  layout.argcount = o.nvarnames + static_cast<int>(layout.extraNames.size());
  // Temporaries for the stack at each successor (the epilogue pops the stack into them).
  size_t maxDepth = 0;
  for (const FrameLayout& s : successors) maxDepth = std::max(maxDepth, s.stack_null.size());
  std::vector<int> temp(maxDepth);
  for (size_t s = 0; s < maxDepth; ++s) {
    temp[s] = o.nvarnames + static_cast<int>(layout.extraNames.size());
    layout.extraNames.push_back("___tmp" + std::to_string(s));
  }
  // Note [The break code's first pass]: the break code is a copy of the whole function in
  // which the breaking instruction leads to the epilogues. It runs that instruction once,
  // from the prologue; if the instruction raises and a handler of the copy catches the
  // exception, the rest of the frame runs natively in the copy, and a loop can bring it
  // back to the breaking instruction with a stack of its own (LOAD_METHOD's [method, self]
  // where the trace had [NULL, bound method]): going to the epilogue then called the
  // continuation with the wrong values (a list "called"). A flag set by the prologue and
  // cleared by every handler's first instruction sends only the first pass there; later
  // passes go on with the original code.
  const int firstPassLocal = o.nvarnames + static_cast<int>(layout.extraNames.size());
  layout.extraNames.push_back("___first_pass");
  const int noneConst = static_cast<int>(PyTuple_GET_SIZE(orig->co_consts));
  layout.extraConsts.push_back(Py_None);
  Ref k0 = Ref::steal(PyLong_FromLong(0)), k1 = Ref::steal(PyLong_FromLong(1));
  layout.extraConsts.push_back(k0.get());
  layout.extraConsts.push_back(k1.get());
  const int trueConst = noneConst + 3, falseConst = noneConst + 4;
  layout.extraConsts.push_back(Py_True);
  layout.extraConsts.push_back(Py_False);

  const bool null_below = dropNullBelow(&o.asm_.instrs[static_cast<size_t>(last)]);
  Position breakPos = o.asm_.instrs[static_cast<size_t>(last)].pos;
  auto epilogue = [&](Assembly& out, size_t k) {
    emitBreakEpilogue(out, successors[k], k, temp, continuationLocal, noneConst, breakPos);
  };

  Position pos = o.asm_.instrs[static_cast<size_t>(at.index)].pos;
  // The epilogues go after the whole body, outside every exception range: inside one
  // (a `with` or `try` body) the handler's stack depth would not hold once the epilogue
  // has popped the stack. The breaking instruction jumps (or falls through a jump) there.
  int fallLabel = -1;
  // Where the breaking instruction goes when it is not the first pass: on to the next
  // instruction, or, for a jump taken, to its original target.
  const int targetLabel = isJump ? o.asm_.instrs[static_cast<size_t>(last)].label : -1;
  Assembly out = copyWithInsertions(
      o, static_cast<int>(layout.extraNames.size()), at.index, last, isJump,
      [&](Assembly& dst, int entryLabel) {
        dst.emit(Op::LOAD_CONST, trueConst, pos);
        dst.emit(Op::STORE_FAST, firstPassLocal, pos);
        emitPrologue(dst, at, slotLocal, entryLabel, pos);
      },
      [&](Assembly& dst) {
        if (null_below) {
          dst.emit(Op::PUSH_NULL, 0, breakPos);
          dst.emit(Op::SWAP, 2, breakPos);
        }
        fallLabel = dst.newLabel();
        dst.emit(Op::LOAD_FAST, firstPassLocal, breakPos);
        dst.emitJump(popJumpIfTrue(), fallLabel, breakPos);
      },
      [&](Assembly& dst, int jumpLabel) {
        dst.bind(fallLabel);
        epilogue(dst, 0);
        if (!isJump) return;
        dst.bind(jumpLabel);
        dst.emit(Op::LOAD_FAST, firstPassLocal, breakPos);
        if (jumpForDirection(popJumpIfFalse(), /*backward=*/true) != Op::CACHE) {
          dst.emitJump(popJumpIfFalse(), targetLabel, breakPos);
        } else {
          // No backward conditional jump (3.12): the first pass jumps over an unconditional
          // jump back to the original target.
          const int firstPass = dst.newLabel();
          dst.emitJump(popJumpIfTrue(), firstPass, breakPos);
          dst.emitJump(Op::JUMP_FORWARD, targetLabel, breakPos);
          dst.bind(firstPass);
        }
        epilogue(dst, 1);
      },
      [&](Assembly& dst, const AsmInstr& ins) {
        if (ins.op != Op::PUSH_EXC_INFO) return;
        dst.emit(Op::LOAD_CONST, falseConst, ins.pos);
        dst.emit(Op::STORE_FAST, firstPassLocal, ins.pos);
      });
  std::string name = utf8(orig->co_name);
  std::string qualname = utf8(orig->co_qualname);
  Ref code = makeCode(o, out, layout, name, qualname, error);
  if (!code) return Ref();
  r.breaks.insert(reinterpret_cast<PyCodeObject*>(code.get()));
  memo->codes.emplace(key, code.copy());
  return code;
}

Ref emptyBreakCode(PyCodeObject* orig, const FrameLayout& at, std::string* error) {
  Registry& r = registry();
  PerOriginal* memo = perOriginal(orig);
  if (!memo) {
    PyErr_Clear();
    return fail(error, "the code object cannot be weakly referenced"), Ref();
  }
  std::string key = "E/" + at.key();
  auto it = memo->codes.find(key);
  if (it != memo->codes.end()) return it->second.copy();
  Original o;
  if (!loadOriginal(orig, &o, error)) return Ref();
  if (at.index <= o.resumeIndex || at.index >= static_cast<int>(o.asm_.instrs.size()))
    return fail(error, "break point outside the function body"), Ref();
  if (static_cast<int>(at.unbound.size()) != o.nvarnames) return fail(error, "layout does not match co_varnames"), Ref();
  Layout layout;
  std::vector<int> slotLocal = addStackArgs(o, at, &layout);
  const int continuationLocal = o.nvarnames + static_cast<int>(layout.extraNames.size());
  layout.extraNames.push_back("___continuation");
  layout.argcount = o.nvarnames + static_cast<int>(layout.extraNames.size());
  std::vector<int> temp(at.stack_null.size());
  for (size_t s = 0; s < temp.size(); ++s) {
    temp[s] = o.nvarnames + static_cast<int>(layout.extraNames.size());
    layout.extraNames.push_back("___tmp" + std::to_string(s));
  }
  const int noneConst = static_cast<int>(PyTuple_GET_SIZE(orig->co_consts));
  layout.extraConsts.push_back(Py_None);
  Ref k0 = Ref::steal(PyLong_FromLong(0));
  if (!k0) return fail(error, "out of memory"), Ref();
  layout.extraConsts.push_back(k0.get());
  Position pos = o.asm_.instrs[static_cast<size_t>(at.index)].pos;
  // The prologue rebuilds the stack, and the epilogue of the one successor (the same
  // instruction, the same layout) hands it on at once; the copied body after it is never
  // reached, but keeps the code's names, constants and line table those of the original.
  Assembly out = copyWithInsertions(
      o, static_cast<int>(layout.extraNames.size()), at.index, -1, false,
      [&](Assembly& dst, int) {
        const int handOn = dst.newLabel();
        emitPrologue(dst, at, slotLocal, handOn, pos);
        dst.bind(handOn);
        emitBreakEpilogue(dst, at, 0, temp, continuationLocal, noneConst, pos);
      },
      [](Assembly&) {}, [](Assembly&, int) {}, [](Assembly&, const AsmInstr&) {});
  Ref code = makeCode(o, out, layout, utf8(orig->co_name), utf8(orig->co_qualname), error);
  if (!code) return Ref();
  r.breaks.insert(reinterpret_cast<PyCodeObject*>(code.get()));
  memo->codes.emplace(key, code.copy());
  return code;
}

const ResumeOrigin* resumeOrigin(PyCodeObject* code) {
  Registry& r = registry();
  if (r.origins.empty()) return nullptr;
  auto it = r.origins.find(code);
  return it == r.origins.end() ? nullptr : &it->second;
}

bool isBreakCode(PyCodeObject* code) {
  Registry& r = registry();
  return !r.breaks.empty() && r.breaks.count(code) > 0;
}

void clearGenerated() {
  Registry& r = registry();
  std::vector<PyCodeObject*> originals;
  for (auto& [orig, p] : r.byOriginal) originals.push_back(orig);
  for (PyCodeObject* orig : originals) forget(orig);
}

}  // namespace cdynamo::bytecode
