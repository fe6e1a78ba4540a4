#include "guards/guard_program.h"

#include "support/lookup.h"
#include "support/set_table.h"

#include <algorithm>
#include <cstring>
#include <functional>
#include <sstream>
#include <unordered_map>

#include "support/check.h"

namespace cdynamo::guards {
namespace {

// Borrowed contents of a cell, or null when empty.
PyObject* cellContents(PyObject* cell) {
  return PyCell_Check(cell) ? PyCell_GET(cell) : nullptr;
}

// Borrowed object behind a weakref (None when dead, which never equals a live object).
PyObject* deref(const Check& c) { return c.weak ? PyWeakref_GET_OBJECT(c.obj.get()) : c.obj.get(); }
// The name of an expected type, for messages (a class that has died since the compile).
std::string typeName(PyObject* type) {
  return PyType_Check(type) ? reinterpret_cast<PyTypeObject*>(type)->tp_name : std::string("<a class that no longer exists>");
}

std::string reprOf(PyObject* o) {
  Ref r = Ref::steal(PyObject_Repr(o));
  if (!r) {
    PyErr_Clear();
    return "<unprintable>";
  }
  std::string s = PyUnicode_AsUTF8(r.get());
  if (s.size() > 80) s = s.substr(0, 77) + "...";
  return s;
}

// Whether two dict keys (or load names: attribute names, keys of DictItem loads) are the
// same key. Never leaves a Python error set. Keys of different exact types are different (1
// and True, 1 and 1.0 are distinct loads); only value types (str, int, float, bool, bytes,
// complex, range, torch.device, and tuples of them) compare by value: any other key (a tensor, a module, a class,
// a function, a user object) is the same key only as the same object, as it hashes by
// identity; comparing those with == could run user code or, for tensors, compare elements.
bool sameKey(PyObject* a, PyObject* b) {
  if (a == b) return true;
  PyTypeObject* t = Py_TYPE(a);
  if (t != Py_TYPE(b)) return false;
  if (t == &PyUnicode_Type) return PyUnicode_Compare(a, b) == 0;
  if (PyTuple_Check(a)) {  // a tuple, torch.Size or a namedtuple: item by item
    if (PyTuple_GET_SIZE(a) != PyTuple_GET_SIZE(b)) return false;
    for (Py_ssize_t i = 0; i < PyTuple_GET_SIZE(a); ++i)
      if (!sameKey(PyTuple_GET_ITEM(a, i), PyTuple_GET_ITEM(b, i))) return false;
    return true;
  }
  if (t != &PyLong_Type && t != &PyFloat_Type && t != &PyBool_Type && t != &PyBytes_Type && t != &PyComplex_Type &&
      t != &PyRange_Type && strcmp(t->tp_name, "torch.device") != 0)
    return false;
  int r = PyObject_RichCompareBool(a, b, Py_EQ);
  if (r < 0) {
    PyErr_Clear();
    return false;
  }
  return r == 1;
}

}  // namespace

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
      if (kind != LoadKind::Constant && name && l.name && sameKey(name, l.name.get())) return i;
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

namespace {
// The code object of an origin frame (borrowed), or null once it is gone.
PyCodeObject* codeOf(const OriginFrame& f) {
  PyObject* code = PyWeakref_Check(f.code.get()) ? PyWeakref_GetObject(f.code.get()) : f.code.get();
  if (!code || !PyCode_Check(code)) {
    PyErr_Clear();
    return nullptr;
  }
  return reinterpret_cast<PyCodeObject*>(code);
}
}  // namespace

std::string describeOrigin(const Origin& o) {
  std::string out;
  for (const OriginFrame& f : o) {
    PyCodeObject* co = codeOf(f);
    if (!co) continue;  // the code is gone
    const char* file = PyUnicode_AsUTF8(co->co_filename);
    const char* name = PyUnicode_AsUTF8(co->co_qualname);
    if (!file || !name) {
      PyErr_Clear();
      continue;
    }
    int line = PyCode_Addr2Line(co, f.offset * static_cast<int>(sizeof(_Py_CODEUNIT)));
    if (!out.empty()) out += " <- ";
    out += std::string(file) + ":" + std::to_string(line) + " in " + name;
  }
  return out;
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

Ref dictKeysInOrder(PyObject* dict) {
  if (!PyODict_Check(dict)) {
    Ref keys = Ref::steal(PyDict_Keys(dict));
    return keys ? Ref::steal(PyList_AsTuple(keys.get())) : Ref();
  }
  Ref it = Ref::steal(PyODict_Type.tp_iter(dict));
  if (!it) return Ref();
  Ref keys = Ref::steal(PyList_New(0));
  if (!keys) return Ref();
  while (PyObject* key = PyIter_Next(it.get())) {
    Ref held = Ref::steal(key);
    if (PyList_Append(keys.get(), key) < 0) return Ref();
  }
  if (PyErr_Occurred()) return Ref();
  return Ref::steal(PyList_AsTuple(keys.get()));
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

StorageGuard::StorageGuard(std::vector<int> r, std::vector<int> g, std::vector<uint8_t> m)
    : regs(std::move(r)), groups(std::move(g)), mutated(std::move(m)), scratch(regs.size()) {
  for (size_t i = 0; i < regs.size(); ++i) {
    num_mutated += mutated[i] ? 1 : 0;
    for (size_t j = 0; j < i; ++j) all_distinct = all_distinct && groups[i] != groups[j];
  }
}

bool StorageGuard::firstMismatch(const void* const* st, size_t* bad_i, size_t* bad_j) const {
  const size_t n = regs.size();
  for (size_t i = 0; i < n; ++i) {
    if (!mutated[i]) continue;
    for (size_t j = 0; j < n; ++j) {
      if (j == i) continue;
      const bool shares = st[i] != nullptr && st[i] == st[j];
      if (shares != (groups[i] == groups[j])) {
        *bad_i = i;
        *bad_j = j;
        return true;
      }
    }
  }
  return false;
}

bool StorageGuard::relatesAsTraced() const {
  const size_t n = regs.size();
  // Pairwise (mutated x all) while that is cheap, or when some registers shared a storage.
  if (!all_distinct || num_mutated * n <= 1024) {
    for (size_t i = 0; i < n; ++i) {
      if (!scratch[i].mutated) continue;
      for (size_t j = 0; j < n; ++j) {
        if (j == i) continue;
        const bool shares = scratch[i].storage != nullptr && scratch[i].storage == scratch[j].storage;
        if (shares != (groups[i] == groups[j])) return false;
      }
    }
    return true;
  }
  // Every register had its own storage: no storage may now be shared by two registers one
  // of which is mutated (the pairwise rule). Sorted by storage, such registers sit in one
  // run of equal storages.
  std::sort(scratch.begin(), scratch.end(),
            [](const Slot& a, const Slot& b) { return std::less<const void*>()(a.storage, b.storage); });
  for (size_t i = 0; i < n;) {
    size_t k = i + 1;
    bool any_mutated = scratch[i].mutated != 0;
    for (; k < n && scratch[k].storage == scratch[i].storage; ++k)
      if (scratch[k].mutated) any_mutated = true;
    if (scratch[i].storage != nullptr && k - i > 1 && any_mutated) return false;
    i = k;
  }
  return true;
}

bool StorageGuard::relates(const void* const* st) const {
  for (size_t i = 0; i < regs.size(); ++i) scratch[i] = Slot{st[i], mutated[i]};
  return relatesAsTraced();
}

bool StorageGuard::holds(PyObject** r) const {
  for (size_t i = 0; i < regs.size(); ++i) scratch[i] = Slot{tensorStorage(r[regs[i]]), mutated[i]};
  return relatesAsTraced();
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

namespace {
// The same object, or equal objects of the same type (a folded constant).
bool sameConstant(PyObject* a, PyObject* b) {
  if (a == b) return true;
  if (Py_TYPE(a) != Py_TYPE(b)) return false;
  int eq = PyObject_RichCompareBool(a, b, Py_EQ);
  if (eq < 0) PyErr_Clear();
  return eq == 1;
}
}  // namespace

void GuardProgram::checkStateQuery(PyObject* fn, PyObject* args, PyObject* kwargs, PyObject* expected) {
  if (!kwargs) kwargs = Py_None;
  for (const Check& c : checks_) {
    if (c.kind != CheckKind::StateQuery) continue;
    PyObject* q = c.obj.get();
    if (PyTuple_GET_ITEM(q, 0) == fn && sameConstant(PyTuple_GET_ITEM(q, 1), args) &&
        sameConstant(PyTuple_GET_ITEM(q, 2), kwargs))
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

namespace {

uint64_t versionOf(PyObject* dict) { return reinterpret_cast<PyDictObject*>(dict)->ma_version_tag; }

// dict[name] (borrowed; null, maybe with an error set, when absent), through memo.
PyObject* memoLookup(DictMemo& memo, PyObject* dict, PyObject* name) {
  uint64_t tag = versionOf(dict);
  if (dict == memo.dict && tag == memo.tag) return memo.value;
  PyObject* v = PyDict_GetItemWithError(dict, name);
  // Only when the lookup ran no Python code that changed the dict (str keys compare in C;
  // a key of another type may run __eq__): the tag read before it still stands.
  if (v && versionOf(dict) == tag) memo = DictMemo{dict, tag, v};
  return v;
}

// Python's floor division and modulo on int64 (b != 0).
int64_t floorDiv(int64_t a, int64_t b) {
  int64_t q = a / b;
  if ((a % b != 0) && ((a < 0) != (b < 0))) --q;
  return q;
}
int64_t pyMod(int64_t a, int64_t b) {
  int64_t r = a % b;
  if (r != 0 && ((r < 0) != (b < 0))) r += b;
  return r;
}

// Runs a shape program (checked by checkShape); false when an operand is invalid (a size
// that cannot be read, a division by zero): the guard then fails.
bool evalShape(const std::vector<ShapeOp>& ops, PyObject** regs, int64_t* out) {
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

}  // namespace

bool isReadableIterator(PyObject* it) {
  // The iterators of CPython's tuples, lists, ranges, dicts (keys, values, items) and sets:
  // their __reduce__ gives (iter, (items,)[, index]) and consumes nothing.
  static PyTypeObject* types[7] = {};
  static bool made = false;
  if (!made) {
    made = true;
    Ref empties[7] = {Ref::steal(PyTuple_New(0)), Ref::steal(PyList_New(0)), Ref::steal(PyObject_CallFunction(
                          reinterpret_cast<PyObject*>(&PyRange_Type), "i", 0)),
                      Ref::steal(PyDict_New()), Ref(), Ref(), Ref::steal(PySet_New(nullptr))};
    if (empties[3]) {
      empties[4] = Ref::steal(PyObject_CallMethod(empties[3].get(), "values", nullptr));
      empties[5] = Ref::steal(PyObject_CallMethod(empties[3].get(), "items", nullptr));
    }
    for (int i = 0; i < 7; ++i) {
      Ref iter = empties[i] ? Ref::steal(PyObject_GetIter(empties[i].get())) : Ref();
      if (iter) types[i] = Py_TYPE(iter.get());
    }
    PyErr_Clear();
  }
  for (PyTypeObject* t : types)
    if (t && Py_IS_TYPE(it, t)) return true;
  return false;
}

Ref iterRemaining(PyObject* it) {
  if (!isReadableIterator(it)) {
    PyErr_SetString(PyExc_TypeError, "not an iterator whose remaining items can be read");
    return Ref();
  }
  Ref state = Ref::steal(PyObject_CallMethod(it, "__reduce__", nullptr));
  if (!state) return Ref();
  if (!PyTuple_Check(state.get()) || PyTuple_GET_SIZE(state.get()) < 2 ||
      !PyTuple_Check(PyTuple_GET_ITEM(state.get(), 1)) || PyTuple_GET_SIZE(PyTuple_GET_ITEM(state.get(), 1)) != 1) {
    PyErr_SetString(PyExc_TypeError, "unexpected tuple_iterator.__reduce__() result");
    return Ref();
  }
  Ref seq = Ref::steal(PySequence_Tuple(PyTuple_GET_ITEM(PyTuple_GET_ITEM(state.get(), 1), 0)));
  if (!seq) return Ref();
  Py_ssize_t index = 0;
  if (PyTuple_GET_SIZE(state.get()) >= 3) {
    index = PyLong_AsSsize_t(PyTuple_GET_ITEM(state.get(), 2));
    if (index < 0 && PyErr_Occurred()) return Ref();
  }
  return Ref::steal(PyTuple_GetSlice(seq.get(), index, PY_SSIZE_T_MAX));
}

namespace {

int firstVisited(PyObject* obj, void* arg) {
  PyObject** out = static_cast<PyObject**>(arg);
  if (!*out) *out = obj;
  return 0;
}

}  // namespace

PyObject* iterContainer(PyObject* it) {
  if (!isReadableIterator(it)) return nullptr;
  traverseproc traverse = Py_TYPE(it)->tp_traverse;
  if (!traverse) return nullptr;
  PyObject* first = nullptr;
  traverse(it, firstVisited, &first);
  if (!first || !(PyList_CheckExact(first) || PyDict_Check(first) || PyAnySet_Check(first))) return nullptr;
  return first;
}

Py_ssize_t listIteratorIndex(PyObject* it) {
  Ref state = Ref::steal(PyObject_CallMethod(it, "__reduce__", nullptr));
  if (!state) return -1;
  if (!PyTuple_Check(state.get()) || PyTuple_GET_SIZE(state.get()) < 3) {
    PyErr_SetString(PyExc_TypeError, "a list_iterator without an index in its __reduce__()");
    return -1;
  }
  return PyLong_AsSsize_t(PyTuple_GET_ITEM(state.get(), 2));
}

bool GuardProgram::runLoad(const Load& ld, const FrameView& f, PyObject** regs) const {
  PyObject* out = nullptr;
  switch (ld.kind) {
    case LoadKind::Local:
      out = ld.index < f.nfast ? f.fast[ld.index] : nullptr;
      break;
    case LoadKind::Global:
      out = PyDict_GetItemWithError(f.globals, ld.name.get());
      if (!out && !PyErr_Occurred()) out = PyDict_GetItemWithError(f.builtins, ld.name.get());
      break;
    case LoadKind::ClosureCell:
      if (f.closure && ld.index < PyTuple_GET_SIZE(f.closure))
        out = cellContents(PyTuple_GET_ITEM(f.closure, ld.index));
      break;
    case LoadKind::ClosureCellObject:
      if (f.closure && ld.index < PyTuple_GET_SIZE(f.closure)) out = PyTuple_GET_ITEM(f.closure, ld.index);
      break;
    case LoadKind::InstanceDict: {
      PyObject** dictptr = _PyObject_GetDictPtr(regs[ld.base]);
      if (dictptr && *dictptr) out = memoLookup(ld.memo, *dictptr, ld.name.get());
      break;
    }
    case LoadKind::DictItem:
      if (PyDict_Check(regs[ld.base])) out = memoLookup(ld.memo, regs[ld.base], ld.name.get());
      break;
    case LoadKind::TupleItem:
      if (PyTuple_Check(regs[ld.base]) && ld.index < PyTuple_GET_SIZE(regs[ld.base]))
        out = PyTuple_GET_ITEM(regs[ld.base], ld.index);
      break;
    case LoadKind::ListItem:
      if (PyList_Check(regs[ld.base]) && ld.index < PyList_GET_SIZE(regs[ld.base]))
        out = PyList_GET_ITEM(regs[ld.base], ld.index);
      break;
    case LoadKind::Attr:
      out = PyObject_GetAttr(regs[ld.base], ld.name.get());
      break;
    case LoadKind::IterRemaining:
      out = iterRemaining(regs[ld.base]).release();
      break;
    case LoadKind::SetTable:
      if (PySet_CheckExact(regs[ld.base])) out = setTableLayout(regs[ld.base]).release();
      break;
    case LoadKind::IterContainer:
      out = iterContainer(regs[ld.base]);
      break;
    case LoadKind::IterIndex: {
      if (!iterContainer(regs[ld.base]) || !PyList_CheckExact(iterContainer(regs[ld.base]))) break;
      Py_ssize_t index = listIteratorIndex(regs[ld.base]);
      if (index >= 0) out = PyLong_FromSsize_t(index);
      break;
    }
    case LoadKind::ViewDict: {
      PyObject* view = regs[ld.base];
      if (PyDictKeys_Check(view) || PyDictValues_Check(view) || PyDictItems_Check(view))
        out = reinterpret_cast<PyObject*>(reinterpret_cast<_PyDictViewObject*>(view)->dv_dict);
      break;
    }
    case LoadKind::Constant:
      out = ld.name.get();
      break;
    case LoadKind::ClassDict: {
      PyObject* type = ld.index ? PyWeakref_GET_OBJECT(ld.name.get()) : ld.name.get();
      if (PyType_Check(type)) out = reinterpret_cast<PyTypeObject*>(type)->tp_dict;
      break;
    }
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
  switch (c.kind) {
    case CheckKind::Tensor:
      return tensorMatches(c.tensor, v);
    case CheckKind::Type:
      return reinterpret_cast<PyObject*>(Py_TYPE(v)) == deref(c);
    case CheckKind::Identity:
      return v == deref(c);
    case CheckKind::Equals: {
      PyObject* expected = c.obj.get();
      if (v == expected) return true;
      if (Py_TYPE(v) != Py_TYPE(expected)) return false;
      int eq = PyObject_RichCompareBool(v, expected, Py_EQ);
      if (eq < 0) PyErr_Clear();
      return eq == 1;
    }
    case CheckKind::Length: {
      // A tuple or list (subclass) by its C size: a subclass's own __len__ is not what the
      // trace read.
      Py_ssize_t n = PyTuple_Check(v) || PyList_Check(v) ? Py_SIZE(v) : PyObject_Length(v);
      if (n < 0) PyErr_Clear();
      return n == c.index;
    }
    case CheckKind::LengthAtLeast: {
      Py_ssize_t n = PyObject_Length(v);
      if (n < 0) return PyErr_Clear(), false;
      return n >= c.index;
    }
    case CheckKind::DictEmpty:
      return PyDict_Check(v) && PyDict_GET_SIZE(v) == 0;
    case CheckKind::Aliasing:
      return (v == regs[c.index]) == (c.obj.get() == Py_True);
    case CheckKind::Storages:
      return storage_guards_[c.index].holds(regs);
    case CheckKind::NoHooks: {
      // One read of the module's __dict__ for its four hook dicts (a module is called
      // inline only while none of its hooks would run).
      static PyObject* const kHooks[] = {interned(Str::forward_hooks), interned(Str::forward_pre_hooks),
                                         interned(Str::backward_hooks), interned(Str::backward_pre_hooks)};
      PyObject** dictptr = _PyObject_GetDictPtr(v);
      if (!dictptr || !*dictptr) return false;
      PyObject* mdict = *dictptr;
      DictMemo& memo = c.hooks_memo;
      if (mdict != memo.dict || versionOf(mdict) != memo.tag) {
        uint64_t tag = versionOf(mdict);
        PyObject* found[4];
        for (int i = 0; i < 4; ++i) {
          found[i] = PyDict_GetItemWithError(mdict, kHooks[i]);  // interned str keys: no Python code
          if (!found[i] && PyErr_Occurred()) return PyErr_Clear(), false;
          if (found[i] && !PyDict_Check(found[i])) return false;
        }
        for (const Ref& name : c.absent) {  // str keys: no Python code
          if (PyDict_GetItemWithError(mdict, name.get())) return false;
          if (PyErr_Occurred()) return PyErr_Clear(), false;
        }
        memo = DictMemo{mdict, tag, nullptr};
        for (int i = 0; i < 4; ++i) c.hook_dicts[i] = found[i];
      }
      for (PyObject* d : c.hook_dicts)
        if (d && PyDict_GET_SIZE(d) != 0) return false;
      return true;
    }
    case CheckKind::DictKeys: {
      PyObject* keys = c.obj.get();
      if (!PyDict_Check(v) || PyDict_GET_SIZE(v) != PyTuple_GET_SIZE(keys)) return false;
      if (PyODict_Check(v)) {
        // An OrderedDict is walked in its linked order, which move_to_end changes without
        // touching the storage order PyDict_Next sees; the keys were recorded in that order
        // (dictKeysInOrder). Its C iterator runs no Python code, but allocates.
        Ref it = Ref::steal(PyODict_Type.tp_iter(v));
        if (!it) return PyErr_Clear(), false;
        for (Py_ssize_t i = 0; i < PyTuple_GET_SIZE(keys); ++i) {
          Ref k = Ref::steal(PyIter_Next(it.get()));
          if (!k || !sameKey(k.get(), PyTuple_GET_ITEM(keys, i))) return PyErr_Clear(), false;
        }
        return true;
      }
      PyObject *key, *value;
      Py_ssize_t pos = 0, i = 0;
      while (PyDict_Next(v, &pos, &key, &value)) {
        PyObject* expected = PyTuple_GET_ITEM(keys, i++);
        if (!sameKey(key, expected)) return false;
      }
      return true;
    }
    case CheckKind::NoInstanceAttr: {
      PyObject** dictptr = PyDict_CheckExact(v) ? &v : _PyObject_GetDictPtr(v);
      if (!dictptr || !*dictptr) return true;
      PyObject* d = *dictptr;
      DictMemo& memo = c.hooks_memo;
      if (d == memo.dict && versionOf(d) == memo.tag) return true;  // unchanged since it lacked the key
      if (PyDict_GetItemWithError(d, c.obj.get())) return false;  // str key: no Python code
      if (PyErr_Occurred()) return PyErr_Clear(), false;
      memo = DictMemo{d, versionOf(d), nullptr};
      return true;
    }
    case CheckKind::GradMode:
      return gradModeEnabled() == (c.index != 0);
    case CheckKind::Shape: {
      int64_t v = 0;
      return evalShape(c.shape_ops, regs, &v) && v != 0;
    }
    case CheckKind::StateQuery: {
      PyObject* q = c.obj.get();
      PyObject* args = PyTuple_GET_ITEM(q, 1);
      PyObject* kw = PyTuple_GET_ITEM(q, 2);
      // No arguments (the torch state queries of every entry): the vectorcall, no tuple unpacking.
      Ref r = Ref::steal(PyTuple_GET_SIZE(args) == 0 && kw == Py_None
                             ? PyObject_CallNoArgs(PyTuple_GET_ITEM(q, 0))
                             : PyObject_Call(PyTuple_GET_ITEM(q, 0), args, kw == Py_None ? nullptr : kw));
      if (!r) return PyErr_Clear(), false;
      return sameConstant(r.get(), PyTuple_GET_ITEM(q, 3));
    }
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
    CheckKind k = checks_[static_cast<size_t>(s.index)].kind;
    return k != CheckKind::GradMode && k != CheckKind::StateQuery;
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
        if (d == ld.memo.dict && PyDict_Check(d) && versionOf(d) == ld.memo.tag) {
          regs[s.index] = ld.memo.value;
          continue;
        }
      } else if (ld.kind == LoadKind::Local) {
        PyObject* v = ld.index < f.nfast ? f.fast[ld.index] : nullptr;
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
        if (reinterpret_cast<PyObject*>(Py_TYPE(regs[c.reg])) != deref(c)) return false;
        continue;
      case CheckKind::Tensor:
        if (!tensorMatches(c.tensor, regs[c.reg])) return false;
        continue;
      case CheckKind::Shape: {
        const std::vector<ShapeOp>& ops = c.shape_ops;
        if (ops.size() == 3 && ops[0].op == ShapeOpKind::Size && ops[1].op == ShapeOpKind::Size &&
            ops[2].op == ShapeOpKind::Eq) {  // size == size: one call
          if (!tensorSizesEqual(regs[ops[0].reg], static_cast<int>(ops[0].arg), regs[ops[1].reg],
                                static_cast<int>(ops[1].arg)))
            return false;
          continue;
        }
        if (!runCheck(c, regs)) return false;
        continue;
      }
      default:
        if (!runCheck(c, regs)) return false;
    }
  }
  return true;
}

void GuardProgram::release(PyObject** regs) const {
  if (!any_owned_) return;
  for (size_t i = 0; i < loads_.size(); ++i) {
    if (loads_[i].owned()) {
      // why: owned registers are raw slots of the hit path's fixed buffer (no allocation).
      Py_XDECREF(regs[i]);
      regs[i] = nullptr;
    }
  }
}

std::string GuardProgram::describeCheck(const Check& c) const {
  switch (c.kind) {
    case CheckKind::Tensor:
      return c.what + " matches " + describeTensorSpec(c.tensor);
    case CheckKind::Type:
      return "type(" + c.what + ") is " + typeName(deref(c));
    case CheckKind::Identity: {
      PyObject* o = deref(c);
      return c.what + " is " + (o == Py_None ? std::string("None") : "<" + std::string(Py_TYPE(o)->tp_name) + " object>");
    }
    case CheckKind::Equals:
      return c.what + " == " + reprOf(c.obj.get());
    case CheckKind::Length:
      return "len(" + c.what + ") == " + std::to_string(c.index);
    case CheckKind::LengthAtLeast:
      return "len(" + c.what + ") >= " + std::to_string(c.index);
    case CheckKind::DictEmpty:
      return "not " + c.what;
    case CheckKind::DictKeys:
      return "list(" + c.what + ".keys()) == " + reprOf(c.obj.get());
    case CheckKind::NoHooks: {
      std::string text = c.what + " has no module hooks";
      for (const Ref& name : c.absent) text += std::string(", '") + PyUnicode_AsUTF8(name.get()) + "' not in its __dict__";
      return text;
    }
    case CheckKind::Aliasing:
    case CheckKind::Storages:
      return c.what;
    case CheckKind::NoInstanceAttr:
      return "'" + std::string(PyUnicode_AsUTF8(c.obj.get())) + "' not in " + c.what + ".__dict__";
    case CheckKind::GradMode:
      return std::string("torch.is_grad_enabled() == ") + (c.index ? "True" : "False");
    case CheckKind::Shape:
      return c.what;
    case CheckKind::StateQuery:
      return c.what + "(...) == " + reprOf(PyTuple_GET_ITEM(c.obj.get(), 3));
  }
  return "?";
}

std::string GuardProgram::describe() const {
  std::ostringstream s;
  for (const Check& c : checks_)
    if (!c.dropped) s << (c.kind == CheckKind::Shape ? "shape guard: " : "") << describeCheck(c) << "\n";
  return s.str();
}

PyObject* GuardProgram::describeSites() const {
  Ref out = Ref::steal(PyList_New(0));
  if (!out) return nullptr;
  for (const Check& c : checks_) {
    if (c.dropped) continue;
    Ref frames = Ref::steal(PyList_New(0));
    if (!frames) return nullptr;
    for (const OriginFrame& f : c.origin) {
      PyCodeObject* co = codeOf(f);
      if (!co) continue;
      int line = PyCode_Addr2Line(co, f.offset * static_cast<int>(sizeof(_Py_CODEUNIT)));
      Ref frame = Ref::steal(Py_BuildValue("(OiO)", co->co_filename, line, co->co_qualname));
      if (!frame || PyList_Append(frames.get(), frame.get()) < 0) return nullptr;
    }
    std::string text = (c.kind == CheckKind::Shape ? "shape guard: " : "") + describeCheck(c);
    Ref py_text = Ref::steal(PyUnicode_FromStringAndSize(text.data(), static_cast<Py_ssize_t>(text.size())));
    Ref site = py_text ? Ref::steal(PyTuple_Pack(2, py_text.get(), frames.get())) : Ref();
    if (!site || PyList_Append(out.get(), site.get()) < 0) return nullptr;
  }
  return out.release();
}

std::string GuardProgram::explainFailure(const FrameView& f) const {
  std::vector<PyObject*> regs(loads_.size() + 1, nullptr);
  std::string reason;
  for (const Step& s : steps_) {
    if (s.is_load) {
      const Load& ld = loads_[s.index];
      if (!runLoad(ld, f, regs.data())) {
        reason = names_[s.index] + " could not be read";
        break;
      }
      continue;
    }
    const Check& c = checks_[s.index];
    if (runCheck(c, regs.data())) continue;
    PyObject* v = c.reg >= 0 ? regs[c.reg] : nullptr;
    switch (c.kind) {
      case CheckKind::Tensor:
        reason = tensorMismatch(c.tensor, v, c.what);
        break;
      case CheckKind::Equals:
        reason = c.what + " == " + reprOf(c.obj.get()) + ", got " + reprOf(v);
        break;
      case CheckKind::Storages: {
        const StorageGuard& g = storage_guards_[c.index];
        std::vector<const void*> st;
        for (int r : g.regs) st.push_back(tensorStorage(regs[r]));
        size_t i = 0, j = 0;
        if (g.firstMismatch(st.data(), &i, &j)) {
          const bool traced_shared = g.groups[i] == g.groups[j];
          reason = names_[g.regs[i]] + " (mutated by the graph) and " + names_[g.regs[j]] +
                   (traced_shared ? " shared a storage at trace time, now they do not"
                                  : " had separate storages at trace time, now they share one");
        } else {
          reason = c.what;
        }
        break;
      }
      case CheckKind::Type:
        reason = "type of " + c.what + ": expected " + typeName(deref(c)) + ", got " + Py_TYPE(v)->tp_name;
        break;
      case CheckKind::Length:
        reason = "len(" + c.what + ") == " + std::to_string(c.index) + ", got " +
                 std::to_string(PyObject_Length(v));
        PyErr_Clear();
        break;
      case CheckKind::Shape: {
        reason = "shape guard " + c.what + " failed (";
        bool first = true;
        for (const ShapeOp& op : c.shape_ops) {
          if (op.op != ShapeOpKind::Size && op.op != ShapeOpKind::Int) continue;
          std::string term = op.op == ShapeOpKind::Int ? names_[op.reg]
                                                       : names_[op.reg] + ".size()[" + std::to_string(op.arg) + "]";
          if (reason.find(term + " = ") != std::string::npos) continue;
          reason += (first ? "" : ", ") + term + " = " +
                    (op.op == ShapeOpKind::Int ? reprOf(regs[op.reg])
                                               : std::to_string(tensorSize(regs[op.reg], static_cast<int>(op.arg))));
          first = false;
        }
        reason += ")";
        break;
      }
      default:
        reason = "guard failed: " + describeCheck(c);
    }
    // Where the guard came from: built here, from what the trace recorded.
    std::string from = describeOrigin(c.origin);
    if (!from.empty()) reason += " (guard from " + from + ")";
    break;
  }
  release(regs.data());
  return reason;
}

}  // namespace cdynamo::guards
