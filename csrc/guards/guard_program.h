// Guards as one flat program per cache entry: steps in an array, not a tree of guard objects.
//
// A program is a list of steps run in order against a FrameView. A *load* step puts an
// object into a register (read from the frame's fast locals by index, from globals, from
// a closure cell, or through an earlier register: instance __dict__ entry, dict item,
// tuple item, generic attribute). A *check* step tests a register. Loads that can fail
// (missing key) fail the guard. The same registers then feed the graph inputs, so the
// runtime never reads an input twice.
//
// The fast path (check) allocates nothing and formats nothing; the explainer that says
// which guard failed and why is a separate, cold function used only on a miss.
#pragma once
#include <Python.h>

#include <string>
#include <unordered_map>
#include <vector>

#include "guards/tensor_check.h"
#include "support/frame_view.h"
#include "support/pyref.h"

namespace cdynamo::guards {

// The kinds of steps, one row each in guards/guard_kinds.def (what each one reads and
// tests is said there).
enum class LoadKind : uint8_t {
#define LOAD(name, owned) name,
#include "guards/guard_kinds.def"
};
enum class CheckKind : uint8_t {
#define CHECK(name, last) name,
#include "guards/guard_kinds.def"
};
constexpr int kNumLoadKinds = 0
#define LOAD(name, owned) +1
#include "guards/guard_kinds.def"
    ;
constexpr int kNumCheckKinds = 0
#define CHECK(name, last) +1
#include "guards/guard_kinds.def"
    ;
// Whether a load's register holds a new reference (the table's `owned`).
constexpr bool kLoadOwned[] = {
#define LOAD(name, owned) owned,
#include "guards/guard_kinds.def"
};
static_assert(sizeof(kLoadOwned) / sizeof(kLoadOwned[0]) == kNumLoadKinds, "one row per load kind");
// Whether a check reads torch's global state only and runs after every other step (the
// table's `last`).
constexpr bool kCheckRunsLast[] = {
#define CHECK(name, last) last,
#include "guards/guard_kinds.def"
};
static_assert(sizeof(kCheckRunsLast) / sizeof(kCheckRunsLast[0]) == kNumCheckKinds, "one row per check kind");

// One step of a shape guard's program (cdynamo/_internal/symbolic_shapes.py, same opcodes): a stack machine
// over int64. Const pushes `arg`; Size pushes size `arg` of the tensor in register `reg`
// (its tensor check ran before, so the register holds a tensor of that rank); the others
// pop their operands and push the result, booleans as 0/1.
// Int pushes the value of the Python int in register `reg` (a symbolic int argument; its
// exact-int type check ran before).
enum class ShapeOpKind : uint8_t { Const, Size, Add, Mul, FloorDiv, Mod, Pow, Eq, Ne, Lt, Le, Gt, Ge, And, Or, Not, Max, Min, Int };
struct ShapeOp {
  ShapeOpKind op;
  int reg = -1;
  int64_t arg = 0;
};
constexpr int kMaxShapeDepth = 32;

// The last successful dict lookup of a load or check, keyed by the dict's version tag
// (PEP 509: CPython 3.11 gives every dict a fresh, process-wide unique ma_version_tag when
// it is created and on every change). The same dict with the same tag holds the same items,
// so the value found then is found now, and is alive (the dict still references it). Only
// written while the GIL is held and no Python code runs between the lookup and the write.
struct DictMemo {
  PyObject* dict = nullptr;  // identity only, never dereferenced unless it is the dict in hand
  uint64_t tag = 0;
  PyObject* value = nullptr;  // borrowed from dict
};

struct Load {
  LoadKind kind;
  int base = -1;
  int index = 0;
  Ref name;
  mutable DictMemo memo;  // InstanceDict, DictItem (str keys): the last lookup
  bool dropped = false;   // removed by dropRegisters: never run, never shared again
  bool owned() const { return kLoadOwned[static_cast<int>(kind)]; }
};

// Where a check came from (cold, for recompile reasons): the traced program's instruction
// whose use of the value installed it, innermost frame first, then each frame it was
// inlined from (code object, code-unit offset of the instruction). Empty when the check
// was made outside the program's instructions (the output plan, duck sizing).
struct OriginFrame {
  // The code object; once stored in a program, a weak reference to it (the entry lives in
  // the code's co_extra: a strong one would keep the code, and so the entry, alive forever).
  Ref code;
  int offset = 0;
};
using Origin = std::vector<OriginFrame>;
// "f.py:12 in helper <- f.py:30 in forward" (innermost first); empty for an empty origin.
std::string describeOrigin(const Origin& o);

struct Check {
  // Hot fields first (what a run reads of most checks fits one cache line), cold ones last.
  CheckKind kind;
  int reg = -1;
  int index = 0;
  Ref obj;       // expected type / object / constant (or weakref to it)
  bool weak = false;
  bool dropped = false;  // removed by dropRegisters
  // NoHooks (and NoInstanceAttr): the module __dict__ version at the last pass and the four hook dicts it held
  // then (borrowed from it; alive while that version stands). Their sizes are still read on
  // every call, since adding a hook changes a hook dict, not the module's __dict__.
  mutable DictMemo hooks_memo;
  mutable PyObject* hook_dicts[4] = {nullptr, nullptr, nullptr, nullptr};
  TensorSpec tensor;
  // NoHooks: instance attributes that must be absent from the same __dict__ (the
  // NoInstanceAttr checks of that register folded into it: one memo serves both).
  std::vector<Ref> absent;
  std::vector<ShapeOp> shape_ops;  // Shape
  std::string what;  // the source's readable name, for messages (cold)
  Origin origin;  // see Origin
  // Storages: `index` is its StorageGuard in the program's side table (only that kind has
  // one: every other check stays without its vectors).
};

// What a Storages check compares: the registers, each one's storage group at trace time
// (registers of one group shared a storage then) and whether the graph mutates it;
// all_distinct: every group has one register (the common case: one sort decides).
struct StorageGuard {
  std::vector<int> regs;
  std::vector<int> groups;
  std::vector<uint8_t> mutated;
  size_t num_mutated = 0;
  bool all_distinct = true;
  // One slot per register, reused by every run so that a hit allocates nothing: guard runs
  // hold the GIL, and no Python code runs while the slots are in use (nothing re-enters).
  struct Slot {
    const void* storage;
    uint8_t mutated;
  };
  mutable std::vector<Slot> scratch;

  StorageGuard(std::vector<int> regs, std::vector<int> groups, std::vector<uint8_t> mutated);
  // Hot: whether the tensors in the program's registers `r` (r[regs[i]]) relate as at trace
  // time. Allocates nothing.
  bool holds(PyObject** r) const;
  // The same decision for given storages (storage[i]: register regs[i]'s now; null for a
  // tensor without one, which shares nothing): every pair with a mutated member shares a
  // storage exactly when it did at trace time.
  bool relates(const void* const* storage) const;
  // Cold: the first pair (i, j), one of them mutated, that relates otherwise; false if none.
  bool firstMismatch(const void* const* storage, size_t* bad_i, size_t* bad_j) const;

 private:
  bool relatesAsTraced() const;  // decides on the filled scratch slots (may reorder them)
};

// A new tuple of the items the tuple_iterator `it` has left, without consuming them (from
// its __reduce__: (iter, (seq,), index), or (iter, ((),)) once exhausted). Null with a
// Python error set when `it` is not a tuple_iterator or the read fails.
Ref iterRemaining(PyObject* it);
// Whether iterRemaining can read `it` (an iterator of a tuple, list, range, dict or set).
bool isReadableIterator(PyObject* it);
// The list, dict or set that a list_iterator, dict iterator (keys, values, items) or
// set_iterator `it` reads (borrowed: the iterator holds it), found through its type's
// tp_traverse (the container is the first object it visits); null, without an error, for
// an exhausted one (it has let its container go) or another kind of iterator.
PyObject* iterContainer(PyObject* it);
// The index of list_iterator `it` (the next item it reads), or -1 with a Python error.
Py_ssize_t listIteratorIndex(PyObject* it);
// A new tuple of the keys of `dict` in the order iterating it meets them: an OrderedDict's
// (or a subclass's) linked order (move_to_end changes it, not the dict's storage order,
// which PyDict_Next walks), read through OrderedDict's own C iterator (a subclass's
// __iter__ never runs); any other dict's storage order. Null with a Python error set
// when the walk fails.
Ref dictKeysInOrder(PyObject* dict);

class GuardProgram {
 public:
  // Adds a load and returns its register; identical loads share one register.
  // `what` is a readable name of the source, e.g. "L['x']" or "G['torch']".
  int load(LoadKind kind, int base, int index, PyObject* name, std::string what);
  // A ClassDict load of `type` (shared with an earlier one of the same class). Classes made
  // at run time are held weakly: an entry whose guards read a class must not keep it
  // alive (the class's methods' code objects own the entry: a cycle gc cannot see).
  int loadClassDict(PyTypeObject* type, std::string what);
  const std::string& sourceName(int reg) const { return names_[reg]; }
  // The side record of a Storages check (its Check::index).
  const StorageGuard& storageGuard(int index) const { return storage_guards_[static_cast<size_t>(index)]; }

  // Adds a check of register `reg` against `value` observed at trace time.
  // Returns false with a Python error set only on allocation failures.
  // `dynamic_mask`: the dims whose sizes are symbolic (TensorSpec::dynamic_mask).
  void checkTensor(int reg, PyObject* tensor, uint64_t dynamic_mask = 0);
  // A relation between symbolic sizes (`text` says it in the user's terms, for messages):
  // its program must evaluate to non-zero. False (nothing added) when the program is
  // malformed or deeper than kMaxShapeDepth.
  bool checkShape(std::vector<ShapeOp> ops, std::string text, Origin origin = {});
  // While set, every check added gets its Origin from fn(ctx, &origin) (the tracer's
  // current instruction and the frames it is inlined from); null: none. The caller clears
  // it before `ctx` goes away.
  using OriginFn = void (*)(void* ctx, Origin* out);
  void setOriginSource(OriginFn fn, void* ctx) {
    origin_fn_ = fn;
    origin_ctx_ = ctx;
  }
  void checkType(int reg, PyTypeObject* type);
  // The type checks of `reg` now expect `type`: for an object whose class the trace itself
  // changed for real, before anything else read it (a lazy module become its cls_to_become).
  void retype(int reg, PyTypeObject* type);
  void checkIdentity(int reg, PyObject* obj);
  void checkEquals(int reg, PyObject* constant);
  // fn(reg) must return True; `what` says the question in the user's terms.
  void checkPredicate(int reg, PyObject* fn, std::string what);
  void checkLength(int reg, Py_ssize_t n);
  void checkLengthAtLeast(int reg, Py_ssize_t n);
  // Removes the loads of `roots`, everything loaded through them, and every check of those
  // registers (the registers stay allocated and are never loaded). For the guards of values
  // the trace turned out not to use (the items an input iterator had left past those it
  // took); the caller makes sure nothing else reads those registers.
  void dropRegisters(const std::vector<int>& roots);
  // Once the program is complete: folds each NoInstanceAttr check into the NoHooks check of
  // the same register (both read the module's __dict__, one version memo serves both), and
  // moves the checks of torch's global state (grad mode, the state queries) after every
  // other step.
  void finish();
  // Every register a load of `roots` (transitively) makes, `roots` included.
  std::vector<int> registersUnder(const std::vector<int>& roots) const;
  void checkDictEmpty(int reg);
  void checkDictKeys(int reg, PyObject* dict);
  void checkNoInstanceAttr(int reg, PyObject* name);
  void checkNoModuleHooks(int reg);
  void checkAliasing(int reg, int other, bool same);
  // The graph mutates some of its tensor inputs (mutated[i]): a backend that
  // functionalizes it (AOT autograd, inductor) computes with the aliasing it saw, so the
  // entry runs only while every pair (one of them mutated) shares a storage exactly when it
  // did at trace time (groups[i]: register i's storage at trace time, as a group number).
  // Two distinct tensors passed as one, or a view of one input passed as another, recompile.
  void checkStorages(std::vector<int> regs, std::vector<int> groups, std::vector<uint8_t> mutated);
  void checkGradMode(bool enabled);
  // fn(*args, **kwargs) (a reader of global state: torch._C._is_tracing()) still returns
  // `expected`. `kwargs` may be null. Identical queries are checked once.
  void checkStateQuery(PyObject* fn, PyObject* args, PyObject* kwargs, PyObject* expected);

  int numRegisters() const { return static_cast<int>(loads_.size()); }
  // The register `reg` is loaded from (-1 for a frame local, global, constant).
  int baseOf(int reg) const { return loads_[reg].base; }
  LoadKind kindOf(int reg) const { return loads_[reg].kind; }
  bool isDropped(int reg) const { return loads_[reg].dropped; }
  size_t numChecks() const;  // not counting dropped ones

  // Runs the program. `regs` must have numRegisters() slots; on return every loaded slot
  // holds its object (owned slots must be given back with release()). Never leaves a
  // Python error set; returns false on the first failed step.
  bool run(const FrameView& frame, PyObject** regs) const;
  void release(PyObject** regs) const;

  // Cold: the first failing guard, as a sentence ("tensor L['x'] size mismatch at
  // index 0: expected 4, got 5"). Empty when everything passes.
  std::string explainFailure(const FrameView& frame) const;
  // Cold: one line per check.
  std::string describe() const;
  // Cold: [(check text, ((filename, line, function), ...)), ...], one per check, its
  // origin innermost first (empty when the check has none; a frame whose code has died is
  // left out). New reference, or null with an error set.
  PyObject* describeSites() const;
  // Whether an object the program holds weakly (an identity-checked object, a class) has
  // died: the program can never pass again (a new object at the same address is not it).
  bool expired() const;

 private:
  struct Step {
    bool is_load;
    int index;  // into loads_ or checks_
  };
  void addCheck(Check c);  // appends a check and its step
  bool runLoad(const Load& ld, const FrameView& f, PyObject** regs) const;
  bool runCheck(const Check& c, PyObject** regs) const;
  std::string describeCheck(const Check& c) const;
  // Why check `c` failed on the registers `regs` (it did).
  std::string explainCheck(const Check& c, PyObject** regs) const;

  std::vector<Load> loads_;
  // The loads by (kind, base, index) hash, so that load() finds an equal load without a walk
  // over all of them (a trace reading every item of a list of 10^5 items made guard building
  // quadratic); candidates are compared in full. And the ClassDict loads, for loadClassDict.
  static uint64_t loadKey(LoadKind kind, int base, int index);
  std::unordered_map<uint64_t, std::vector<int>> loads_by_key_;
  std::vector<int> class_dict_loads_;
  std::vector<std::string> names_;
  std::vector<Check> checks_;
  std::vector<StorageGuard> storage_guards_;  // Storages checks' side records (Check::index)
  std::vector<Step> steps_;
  bool any_owned_ = false;
  OriginFn origin_fn_ = nullptr;
  void* origin_ctx_ = nullptr;
  std::vector<std::pair<PyObject*, Ref>> weak_codes_;  // code -> its weakref, one per distinct code
  void weakenOrigin(Origin* o);
};

}  // namespace cdynamo::guards
