// Building a guard program, and running it: the hit path. Each kind's own step is in
// guards/kinds/*.h; runLoad and runCheck dispatch to it over the rows of
// guards/guard_kinds.def.
#include "guards/guard_program.h"

#include <algorithm>
#include <unordered_map>

#include "guards/kinds/container_checks.h"
#include "guards/kinds/loads.h"
#include "guards/kinds/object_checks.h"
#include "guards/kinds/state_checks.h"
#include "guards/kinds/tensor_checks.h"
#include "support/check.h"
#include "support/slots.h"

namespace cdynamo::guards {

using kinds::deref;

uint64_t GuardProgram::loadKey(LoadKind kind, int base, int index) {
  uint64_t k = static_cast<uint64_t>(static_cast<uint32_t>(base)) << 32 | static_cast<uint32_t>(index);
  return (k * 0x9E3779B97F4A7C15ull) ^ static_cast<uint64_t>(kind);
}

int GuardProgram::load(LoadKind kind, int base, int index, PyObject* name, std::string what) {
  // Names are attribute names (str) or dict keys (any constant: int keys too); comparing
  // them never leaves an error set.
  std::vector<int>& same_key = loads_by_key_[loadKey(kind, base, index)];
  for (int i : same_key) {
    const Load& l = loads_[static_cast<size_t>(i)];
    if (!l.dropped && l.kind == kind && l.base == base && l.index == index) {
      if (!name && !l.name) return i;
      if (kind == LoadKind::Constant && l.name.get() == name) return i;
      if (kind != LoadKind::Constant && name && l.name && kinds::sameKey(name, l.name.get())) return i;
    }
  }
  CDYNAMO_CHECK(base < static_cast<int>(loads_.size()), "load through an unknown register");
  same_key.push_back(static_cast<int>(loads_.size()));
  loads_.push_back(Load{kind, base, index, Ref::borrow(name)});
  names_.push_back(std::move(what));
  steps_.push_back(Step{true, static_cast<int>(loads_.size() - 1)});
  any_owned_ |= loads_.back().owned();
  return static_cast<int>(loads_.size() - 1);
}

void GuardProgram::weakenOrigin(Origin* o) {
  Origin out;
  for (OriginFrame& f : *o) {
    PyObject* code = f.code.get();
    if (!code) continue;
    if (PyWeakref_Check(code)) {  // a frame of another check's origin: weak already
      out.push_back(OriginFrame{f.code.copy(), f.offset});
      continue;
    }
    Ref* weak = nullptr;
    for (auto& [c, w] : weak_codes_)
      if (c == code) weak = &w;
    if (!weak) {
      Ref w = Ref::steal(PyWeakref_NewRef(code, nullptr));
      if (!w) {
        PyErr_Clear();
        continue;
      }
      weak_codes_.emplace_back(code, std::move(w));
      weak = &weak_codes_.back().second;
    }
    out.push_back(OriginFrame{weak->copy(), f.offset});
  }
  *o = std::move(out);
}

void GuardProgram::addCheck(Check c) {
  if (origin_fn_ && c.origin.empty()) origin_fn_(origin_ctx_, &c.origin);
  if (!c.origin.empty()) weakenOrigin(&c.origin);
  checks_.push_back(std::move(c));
  steps_.push_back(Step{false, static_cast<int>(checks_.size() - 1)});
}

void GuardProgram::checkTensor(int reg, PyObject* tensor, uint64_t dynamic_mask) {
  Check c{CheckKind::Tensor, reg};
  c.tensor.dynamic_mask = dynamic_mask;
  if (!captureTensorSpec(tensor, &c.tensor)) {
    // Metadata that cannot be read cannot be guarded: make the guard always fail.
    PyErr_Clear();
    c.kind = CheckKind::Identity;
    c.obj = Ref::borrow(Py_None);
  }
  c.what = names_[reg];
  addCheck(std::move(c));
}

bool GuardProgram::checkShape(std::vector<ShapeOp> ops, std::string text, Origin origin) {
  int depth = 0;
  for (const ShapeOp& op : ops) {
    switch (op.op) {
      case ShapeOpKind::Const:
        ++depth;
        break;
      case ShapeOpKind::Size:
        if (op.reg < 0 || op.reg >= numRegisters() || op.arg < 0 || loads_[op.reg].dropped) return false;
        ++depth;
        break;
      case ShapeOpKind::Int:
        if (op.reg < 0 || op.reg >= numRegisters() || loads_[op.reg].dropped) return false;
        ++depth;
        break;
      case ShapeOpKind::Not:
        if (depth < 1) return false;
        break;
      default:
        if (depth < 2) return false;
        --depth;
    }
    if (depth > kMaxShapeDepth) return false;
  }
  if (depth != 1) return false;
  if (origin.empty()) {
    // No instruction of the program installed it: a relation duck sizing made (two inputs'
    // sizes one symbol) or a symbol's range (0/1 specialization). It is about the first size
    // or int it reads, so it comes from where the trace read that input (as torch._dynamo
    // names the value's first use): that input's own check's origin.
    for (const ShapeOp& op : ops) {
      if (op.op != ShapeOpKind::Size && op.op != ShapeOpKind::Int) continue;
      for (const Check& k : checks_)
        if (k.reg == op.reg && !k.dropped && !k.origin.empty()) {
          for (const OriginFrame& f : k.origin) origin.push_back(OriginFrame{f.code.copy(), f.offset});
          break;
        }
      break;
    }
  }
  Check c{CheckKind::Shape, -1};
  c.shape_ops = std::move(ops);
  c.what = std::move(text);
  c.origin = std::move(origin);
  addCheck(std::move(c));
  return true;
}

// A weak reference to a heap type (null with no error for a static type, or when one
// cannot be made: the caller then holds the type strongly).
Ref weakTypeRef(PyTypeObject* type) {
  if (!PyType_HasFeature(type, Py_TPFLAGS_HEAPTYPE)) return Ref();
  Ref w = Ref::steal(PyWeakref_NewRef(reinterpret_cast<PyObject*>(type), nullptr));
  if (!w) PyErr_Clear();
  return w;
}

void GuardProgram::checkType(int reg, PyTypeObject* type) {
  Check c{CheckKind::Type, reg};
  c.obj = weakTypeRef(type);
  c.weak = static_cast<bool>(c.obj);
  if (!c.obj) c.obj = Ref::borrow(reinterpret_cast<PyObject*>(type));
  c.what = names_[reg];
  addCheck(std::move(c));
}

void GuardProgram::retype(int reg, PyTypeObject* type) {
  for (Check& c : checks_) {
    if (c.dropped || c.kind != CheckKind::Type || c.reg != reg) continue;
    c.obj = weakTypeRef(type);  // held as checkType holds it
    c.weak = static_cast<bool>(c.obj);
    if (!c.obj) c.obj = Ref::borrow(reinterpret_cast<PyObject*>(type));
  }
}

bool GuardProgram::expired() const {
  for (const Load& l : loads_)
    if (!l.dropped && l.kind == LoadKind::ClassDict && l.index && PyWeakref_GET_OBJECT(l.name.get()) == Py_None)
      return true;
  for (const Check& c : checks_)
    if (!c.dropped && c.weak && PyWeakref_GET_OBJECT(c.obj.get()) == Py_None) return true;
  return false;
}

int GuardProgram::loadClassDict(PyTypeObject* type, std::string what) {
  for (int i : class_dict_loads_) {
    const Load& l = loads_[static_cast<size_t>(i)];
    if (l.dropped) continue;
    PyObject* held = l.index ? PyWeakref_GET_OBJECT(l.name.get()) : l.name.get();
    if (held == reinterpret_cast<PyObject*>(type)) return i;
  }
  Ref held = weakTypeRef(type);
  const int weak = held ? 1 : 0;
  if (!held) held = Ref::borrow(reinterpret_cast<PyObject*>(type));
  class_dict_loads_.push_back(static_cast<int>(loads_.size()));
  loads_.push_back(Load{LoadKind::ClassDict, -1, weak, std::move(held)});
  names_.push_back(std::move(what));
  steps_.push_back(Step{true, static_cast<int>(loads_.size() - 1)});
  return static_cast<int>(loads_.size() - 1);
}

void GuardProgram::checkIdentity(int reg, PyObject* obj) {
  for (const Check& e : checks_)  // the same fact, checked once (class attributes read again and again)
    if (!e.dropped && e.kind == CheckKind::Identity && e.reg == reg && deref(e) == obj) return;
  Check c{CheckKind::Identity, reg};
  // Hold the object weakly when possible so that a cache entry does not keep a model
  // alive; a dead referent reads as None and fails the guard.
  if (obj != Py_None && PyType_SUPPORTS_WEAKREFS(Py_TYPE(obj))) {
    c.obj = Ref::steal(PyWeakref_NewRef(obj, nullptr));
    c.weak = true;
  }
  if (!c.obj) {
    PyErr_Clear();
    c.obj = Ref::borrow(obj);
    c.weak = false;
  }
  c.what = names_[reg];
  addCheck(std::move(c));
}

void GuardProgram::checkEquals(int reg, PyObject* constant) {
  Check c{CheckKind::Equals, reg};
  c.obj = Ref::borrow(constant);
  c.what = names_[reg];
  addCheck(std::move(c));
}

void GuardProgram::checkPredicate(int reg, PyObject* fn, std::string what) {
  Check c{CheckKind::Predicate, reg};
  c.obj = Ref::borrow(fn);
  c.what = std::move(what);
  addCheck(std::move(c));
}

void GuardProgram::checkLengthAtLeast(int reg, Py_ssize_t n) {
  Check c{CheckKind::LengthAtLeast, reg, static_cast<int>(n)};
  c.what = names_[reg];
  addCheck(std::move(c));
}

std::vector<int> GuardProgram::registersUnder(const std::vector<int>& roots) const {
  std::vector<bool> under(loads_.size(), false);
  for (int r : roots) under[r] = true;
  // A load's base is always an earlier register: one pass in order reaches every descendant.
  for (size_t i = 0; i < loads_.size(); ++i)
    if (loads_[i].base >= 0 && under[loads_[i].base]) under[i] = true;
  std::vector<int> out;
  for (size_t i = 0; i < loads_.size(); ++i)
    if (under[i]) out.push_back(static_cast<int>(i));
  return out;
}

void GuardProgram::dropRegisters(const std::vector<int>& roots) {
  std::vector<bool> gone(loads_.size(), false);
  for (int r : registersUnder(roots)) {
    gone[r] = true;
    loads_[r].dropped = true;
  }
  std::vector<Step> kept;
  for (const Step& s : steps_) {
    if (s.is_load) {
      if (gone[s.index]) continue;
    } else {
      Check& c = checks_[s.index];
      bool storage_gone = false;
      if (c.kind == CheckKind::Storages)
        for (int r : storage_guards_[c.index].regs) storage_gone = storage_gone || gone[r];
      if ((c.reg >= 0 && gone[c.reg]) || (c.kind == CheckKind::Aliasing && gone[c.index]) || storage_gone) {
        c.dropped = true;
        continue;
      }
    }
    kept.push_back(s);
  }
  steps_ = std::move(kept);
}

size_t GuardProgram::numChecks() const {
  size_t n = 0;
  for (const Check& c : checks_) n += c.dropped ? 0 : 1;
  return n;
}

void GuardProgram::checkLength(int reg, Py_ssize_t n) {
  for (const Check& done : checks_)  // once per register
    if (!done.dropped && done.kind == CheckKind::Length && done.reg == reg && done.index == n) return;
  Check c{CheckKind::Length, reg, static_cast<int>(n)};
  c.what = names_[reg];
  addCheck(std::move(c));
}

void GuardProgram::checkDictEmpty(int reg) {
  for (const Check& e : checks_)
    if (!e.dropped && e.kind == CheckKind::DictEmpty && e.reg == reg) return;
  Check c{CheckKind::DictEmpty, reg};
  c.what = names_[reg];
  addCheck(std::move(c));
}

void GuardProgram::checkNoInstanceAttr(int reg, PyObject* name) {
  for (const Check& e : checks_)
    if (!e.dropped && e.kind == CheckKind::NoInstanceAttr && e.reg == reg && e.obj.get() == name) return;
  Check c{CheckKind::NoInstanceAttr, reg};
  c.obj = Ref::borrow(name);
  c.what = names_[reg];
  addCheck(std::move(c));
}


void GuardProgram::checkDictKeys(int reg, PyObject* dict) {
  // Once per register: the real dict does not change while a frame is traced.
  for (const Check& done : checks_)
    if (!done.dropped && done.kind == CheckKind::DictKeys && done.reg == reg) return;
  Check c{CheckKind::DictKeys, reg};
  c.obj = dictKeysInOrder(dict);
  if (!c.obj) {
    PyErr_Clear();
    c.kind = CheckKind::Identity;
    c.obj = Ref::borrow(Py_None);
  }
  c.what = names_[reg];
  addCheck(std::move(c));
}

void GuardProgram::checkAliasing(int reg, int other, bool same) {
  Check c{CheckKind::Aliasing, reg, other};
  c.obj = Ref::borrow(same ? Py_True : Py_False);
  c.what = names_[reg] + (same ? " is " : " is not ") + names_[other];
  addCheck(std::move(c));
}

void GuardProgram::checkStorages(std::vector<int> regs, std::vector<int> groups, std::vector<uint8_t> mutated) {
  Check c{CheckKind::Storages, -1, static_cast<int>(storage_guards_.size())};
  std::string mutated_names;
  for (size_t i = 0; i < regs.size(); ++i)
    if (mutated[i]) mutated_names += (mutated_names.empty() ? "" : ", ") + names_[regs[i]];
  c.what = "the storages of the tensor inputs alias as at trace time (mutated by the graph: " + mutated_names + ")";
  storage_guards_.emplace_back(std::move(regs), std::move(groups), std::move(mutated));
  addCheck(std::move(c));
}

void GuardProgram::checkNoModuleHooks(int reg) {
  Check c{CheckKind::NoHooks, reg};
  c.what = names_[reg];
  addCheck(std::move(c));
}

void GuardProgram::checkGradMode(bool enabled) {
  for (const Check& c : checks_)
    if (c.kind == CheckKind::GradMode) return;
  Check c{CheckKind::GradMode, -1, enabled ? 1 : 0};  // read from c10 (gradModeEnabled)
  c.what = "torch.is_grad_enabled()";
  addCheck(std::move(c));
}


void GuardProgram::checkStateQuery(PyObject* fn, PyObject* args, PyObject* kwargs, PyObject* expected) {
  if (!kwargs) kwargs = Py_None;
  for (const Check& c : checks_) {
    if (c.kind != CheckKind::StateQuery) continue;
    PyObject* q = c.obj.get();
    if (PyTuple_GET_ITEM(q, 0) == fn && kinds::sameConstant(PyTuple_GET_ITEM(q, 1), args) &&
        kinds::sameConstant(PyTuple_GET_ITEM(q, 2), kwargs))
      return;
  }
  Check c{CheckKind::StateQuery, -1};
  c.obj = Ref::steal(PyTuple_Pack(4, fn, args, kwargs, expected));
  Ref name = Ref::steal(PyObject_GetAttrString(fn, "__name__"));
  c.what = name && PyUnicode_Check(name.get()) ? PyUnicode_AsUTF8(name.get()) : "a torch state query";
  PyErr_Clear();
  if (!c.obj) {  // cannot hold the query: never match
    PyErr_Clear();
    c.kind = CheckKind::Identity;
    c.obj = Ref::borrow(Py_None);
  }
  addCheck(std::move(c));
}

bool GuardProgram::runLoad(const Load& ld, const FrameView& f, PyObject** regs) const {
  PyObject* out = nullptr;
  switch (ld.kind) {  // one case per LOAD row; a row without its loads:: struct does not compile
#define LOAD(name, owned)                \
  case LoadKind::name:                   \
    out = loads::name::run(ld, f, regs); \
    break;
#include "guards/guard_kinds.def"
  }
  if (!out) {
    PyErr_Clear();
    return false;
  }
  regs[&ld - loads_.data()] = out;
  return true;
}

bool GuardProgram::runCheck(const Check& c, PyObject** regs) const {
  PyObject* v = c.reg >= 0 ? regs[c.reg] : nullptr;
  switch (c.kind) {  // one case per CHECK row; a row without its checks:: struct does not compile
#define CHECK(name, last) \
  case CheckKind::name:   \
    return checks::name::run(c, v, regs, *this);
#include "guards/guard_kinds.def"
  }
  return false;
}

void GuardProgram::finish() {
  std::unordered_map<int, size_t> no_hooks;  // register -> its NoHooks check
  for (size_t i = 0; i < checks_.size(); ++i)
    if (!checks_[i].dropped && checks_[i].kind == CheckKind::NoHooks && checks_[i].reg >= 0)
      no_hooks.emplace(checks_[i].reg, i);
  if (!no_hooks.empty()) {
    std::vector<Step> kept;
    kept.reserve(steps_.size());
    for (const Step& s : steps_) {
      if (!s.is_load) {
        Check& c = checks_[static_cast<size_t>(s.index)];
        auto it = c.kind == CheckKind::NoInstanceAttr ? no_hooks.find(c.reg) : no_hooks.end();
        if (it != no_hooks.end()) {
          checks_[it->second].absent.push_back(c.obj.copy());
          c.dropped = true;  // folded: described and counted with its NoHooks check
          continue;
        }
      }
      kept.push_back(s);
    }
    steps_ = std::move(kept);
  }
  // Stable: the program's own order otherwise. These read no register, and every entry of
  // a code object asks the same: the checks that tell entries apart (a tensor's shape) run
  // first, so an entry that does not match is left before any query of torch's state.
  std::stable_partition(steps_.begin(), steps_.end(), [this](const Step& s) {
    if (s.is_load) return true;
    return !kCheckRunsLast[static_cast<int>(checks_[static_cast<size_t>(s.index)].kind)];
  });
}

bool GuardProgram::run(const FrameView& f, PyObject** regs) const {
  const int nregs = numRegisters();
  for (int i = 0; i < nregs; ++i) regs[i] = nullptr;
  // The commonest steps are done here, without a call: a dict item whose dict is unchanged
  // since the last run (its memo), a local, a type, a tensor. The rest (and every miss of
  // a memo) go through runLoad/runCheck, which do the same for these as well.
  for (const Step& s : steps_) {
    if (s.is_load) {
      const Load& ld = loads_[static_cast<size_t>(s.index)];
      if (ld.kind == LoadKind::DictItem) {
        PyObject* d = regs[ld.base];
        if (d == ld.memo.dict && PyDict_Check(d) && kinds::versionOf(d) == ld.memo.tag) {
          regs[s.index] = ld.memo.value;
          continue;
        }
      } else if (ld.kind == LoadKind::Local) {
        PyObject* v = loads::Local::run(ld, f, regs);
        if (!v) return false;
        regs[s.index] = v;
        continue;
      }
      if (!runLoad(ld, f, regs)) return false;
      continue;
    }
    const Check& c = checks_[static_cast<size_t>(s.index)];
    switch (c.kind) {
      case CheckKind::Type:
        if (!checks::Type::run(c, regs[c.reg], regs, *this)) return false;
        continue;
      case CheckKind::Tensor:
        if (!checks::Tensor::run(c, regs[c.reg], regs, *this)) return false;
        continue;
      case CheckKind::Shape:
        if (!checks::Shape::run(c, nullptr, regs, *this)) return false;
        continue;
      default:  // the other kinds, through the generated dispatch
        if (!runCheck(c, regs)) return false;
    }
  }
  return true;
}

void GuardProgram::release(PyObject** regs) const {
  if (!any_owned_) return;
  for (size_t i = 0; i < loads_.size(); ++i) {
    // The registers are raw slots of the hit path's fixed buffer (no allocation per run).
    if (loads_[i].owned()) clearSlot(regs[i]);
  }
}

}  // namespace cdynamo::guards
