// The symbolic bytecode interpreter: translates one frame into a cache entry.
//
// Tracer runs the frame's instructions over symbolic Values (trace/values), records
// tensor operations in a GraphBuilder, and records every input it reads as a guard
// register with checks (GuardProgram). Calls to user functions and nn.Module.forward are
// inlined as nested SymbolicFrames. Anything it cannot model stops the trace with an
// "unsupported" reason and the source location; the frame then runs natively.
//
// Errors: translate() never lets a Python exception escape except the user-facing ones
// (BackendCompilerFailed, and Unsupported under fullgraph=True). Inside, every operation
// reports its outcome through trace/result.h (Ok, Unsupported, Raised, NotHandled).
#pragma once
#include <Python.h>

#include <memory>
#include <string>
#include <unordered_map>
#include <vector>

#include "bytecode/instructions.h"
#include "bytecode/tables.h"
#include "graph/graph_builder.h"
#include "guards/guard_program.h"
#include "runtime/compiled_entry.h"
#include "support/check.h"
#include "support/frame_view.h"
#include "trace/result.h"
#include "trace/values/value.h"

namespace cdynamo::trace {

// One frame being interpreted: the root frame or an inlined call.
struct SymbolicFrame {
  PyCodeObject* code = nullptr;  // borrowed: the function being run (kept by its caller's frame)
  Borrowed globals;              // borrowed from the function
  Borrowed builtins;
  Borrowed closure;              // tuple of cells, or null
  std::vector<bytecode::Instruction> instrs;
  std::vector<ValuePtr> locals;
  std::vector<char> deleted;     // root frame: locals deleted in the trace (not re-read from the frame)
  std::vector<ValuePtr> stack;
  Ref kwnames;                   // set by KW_NAMES for the next CALL
  size_t pc = 0;                 // index into instrs of the instruction being run
  SymbolicFrame* parent = nullptr;
  int depth = 0;
  bool root = false;
  int function_reg = -1;         // guard register of the function (inlined frames), or -1
  bool generator = false;        // a generator run to completion: YIELD_VALUE collects
  std::vector<ValuePtr> yielded;
  // co_exceptiontable, decoded on the first exception raised in this frame.
  std::vector<bytecode::ExceptionTableEntry> handlers;
  bool handlers_decoded = false;
};

// Stack helpers shared by the opcode handlers; underflow is a broken invariant (the
// bytecode's own stack discipline guarantees the items are there).
inline ValuePtr pop(SymbolicFrame& f) {
  CDYNAMO_CHECK(!f.stack.empty(), "symbolic stack underflow");
  ValuePtr v = std::move(f.stack.back());
  f.stack.pop_back();
  return v;
}

inline std::vector<ValuePtr> popN(SymbolicFrame& f, size_t n) {
  CDYNAMO_CHECK(f.stack.size() >= n, "symbolic stack underflow");
  std::vector<ValuePtr> out(f.stack.end() - static_cast<std::ptrdiff_t>(n), f.stack.end());
  f.stack.resize(f.stack.size() - n);
  return out;
}

// Where tracing stopped and why (for logs, stats, explain and fullgraph errors).
struct Unsupported {
  std::string reason;
  std::string filename;
  int line = 0;
  std::string function;
  std::string user_stack;  // innermost last: "file:line in fn" per inlined frame
};

struct TranslateResult {
  std::shared_ptr<runtime::CompiledEntry> entry;  // set on success
  Unsupported unsupported;                        // set when entry is null and no error
  bool error = false;                             // a user-facing Python error is set
};

// Translates the frame seen through `frame` under compile configuration `config`
// (a cdynamo config object: .backend, .fullgraph). Runs with the hook disabled.
//
// Graph breaks (graph_break.cpp): when tracing stops at an instruction of the root frame
// (or inside a call it inlines), the frame is traced again up to that instruction, which
// becomes the break: the graph so far, then the instruction run natively, then a resume
// function for the rest.
TranslateResult translate(const FrameView& frame, PyObject* config);

// Where a re-trace stops for a graph break: the `visit`-th time the root frame reaches
// instruction `index`.
struct BreakTarget {
  int index = -1;
  int visit = 0;
  Unsupported why;  // what stopped the first trace there
};

class Tracer {
 public:
  Tracer(const FrameView& frame, PyObject* config, BreakTarget target = {})
      : root_view_(frame), config_(config), break_target_(std::move(target)) {}
  TranslateResult run();
  // After a failed run(): the root instruction the failure happened in (index -1 when it
  // did not happen inside an instruction of the root frame).
  BreakTarget failedAt() const;

  // ---- used by the opcode handlers (interpreter.cpp, calls.cpp, builder.cpp) ----
  // Stops the trace: records the reason (the first one wins) and where the trace was;
  // handlers `return fail(...)`.
  Stop fail(std::string reason);
  // Turns the pending Python error into an unsupported reason (and clears it).
  Stop failFromPython(const std::string& what);
  bool failed() const { return failed_; }

  // Wraps a real Python object read from guard register `reg` (-1: no source, e.g. a
  // constant or default value) into a Value, adding the guards that its use implies.
  Result<ValuePtr> wrap(PyObject* obj, int reg);
  int load(guards::LoadKind kind, int base, int index, PyObject* name, std::string what);
  guards::GuardProgram& guards() { return entry_->guards; }
  graph::GraphBuilder& graph() { return graph_; }

  // Runs a frame to its return; an exception raised in it (Raised) is delivered to the
  // frame's handlers through its exception table, or propagates (Raised) to the caller's
  // CALL instruction.
  Result<ValuePtr> runFrame(SymbolicFrame& f);

  // ---- exceptions raised inside the trace (modelled, never real Python errors) ----
  // Raises the pending Python error as an exception of the traced program.
  Stop raisePython();
  // Raises `type(message)` in the traced program.
  Stop raiseNew(PyObject* type, const std::string& message);
  Stop raiseValue(ValuePtr exc);
  // The exception in flight (set exactly while an outcome is Raised), or null.
  const ValuePtr& pendingException() const { return pending_exc_; }
  // Takes the exception in flight away (to re-raise it after a cleanup).
  ValuePtr takePendingException();
  // An instance of an exception class, made for real when its construction runs no
  // Python code (builtin exceptions and subclasses without __init__/__new__).
  Result<ValuePtr> makeException(PyObject* cls, std::vector<ValuePtr>& args);
  Result<ValuePtr> getAttr(const ValuePtr& obj, PyObject* name);
  Result<ValuePtr> call(const ValuePtr& fn, std::vector<ValuePtr> args, std::vector<std::pair<Ref, ValuePtr>> kwargs);
  Result<ValuePtr> binaryOp(int op, const ValuePtr& a, const ValuePtr& b);
  Result<ValuePtr> unaryOp(bytecode::Op op, const ValuePtr& a);
  Result<ValuePtr> compareOp(int op, const ValuePtr& a, const ValuePtr& b);
  Result<ValuePtr> subscript(const ValuePtr& obj, const ValuePtr& index);
  Result<ValuePtr> getIter(const ValuePtr& obj);
  // iter() of nn.Sequential / nn.ModuleList: their children, guarded.
  Result<ValuePtr> moduleIter(const ValuePtr& module);
  // Python truth value of a value known at trace time.
  Result<bool> truthValue(const ValuePtr& v);

  // containers.cpp: container opcodes and methods of lists, dicts, sets and tuples.
  Done runContainerOpcode(SymbolicFrame& f, const bytecode::Instruction& ins);
  Result<ValuePtr> callContainerMethod(const ValuePtr& self, PyObject* name, std::vector<ValuePtr>& args,
                                       std::vector<std::pair<Ref, ValuePtr>>& kwargs);
  Done storeSubscript(const ValuePtr& obj, const ValuePtr& index, const ValuePtr& value);
  // The real slice of a Slice of constants (Unsupported otherwise; null with an error set
  // if making it failed).
  Result<Ref> constantSlice(const Slice& slice);
  // functions.cpp: closures, functions made in the trace, star-calls.
  Done runFunctionOpcode(SymbolicFrame& f, const bytecode::Instruction& ins);
  Result<ValuePtr> inlineCode(PyCodeObject* co, PyObject* globals, PyObject* builtins, PyObject* real_closure,
                              const std::vector<ValuePtr>* closure_cells, PyObject* defaults, PyObject* kwdefaults,
                              const ValuePtr& defaults_value, const ValuePtr& kwdefaults_value, int func_reg,
                              std::vector<ValuePtr> args, std::vector<std::pair<Ref, ValuePtr>> kwargs);
  // context.cpp: torch's grad-mode, inference-mode and autocast context managers.
  // Entering and leaving them records the state change in the graph and applies it at
  // trace time (so fake tensors see it); restoreGlobalState() undoes what is left.
  bool isTorchContextClass(PyObject* cls);
  Result<ValuePtr> makeContext(PyObject* cls, std::vector<ValuePtr>& args,
                               std::vector<std::pair<Ref, ValuePtr>>& kwargs);
  Result<ValuePtr> enterContext(const ValuePtr& ctx);
  // The bound __exit__ of a real grad-mode context object (a `with` block continued in a
  // resume function): the same Value BEFORE_WITH pushes. NotHandled for any other method.
  Result<ValuePtr> wrapContextExit(PyObject* self, PyObject* func, int self_reg);
  Result<ValuePtr> exitContext(const ValuePtr& ctx);
  void restoreGlobalState();
  // objects.cpp: user-defined classes — objects read from the program (Object), objects
  // made in the trace (NewObject), super(), and Python-level dunder methods.
  Result<ValuePtr> objectGetAttr(const ValuePtr& obj, PyObject* name);
  // hasattr() on an Object read from the program (guarded either way).
  Result<bool> objectHasAttr(const ValuePtr& obj, PyObject* name);
  Result<ValuePtr> newObject(PyObject* cls, std::vector<ValuePtr> args, std::vector<std::pair<Ref, ValuePtr>> kwargs);
  Done storeAttr(const ValuePtr& obj, PyObject* name, const ValuePtr& value);
  // Calls the Python-level special method `name` (a str) of a user object's class;
  // NotHandled (nothing done) when the class has none.
  Result<ValuePtr> callDunder(const ValuePtr& obj, PyObject* name, std::vector<ValuePtr> args);
  Result<ValuePtr> makeSuper(std::vector<ValuePtr>& args);
  // Attributes of a function made in the trace: its name, module, doc, and those set on it.
  Result<ValuePtr> functionAttr(const ValuePtr& fn, PyObject* name);
  // A class made by collections.namedtuple (a tuple subclass with _fields).
  static bool isNamedTupleClass(PyObject* cls);
  bool isUserObject(const ValuePtr& v) const {
    return v->is(Kind::Object) || v->is(Kind::NewObject);
  }
  // builtins.cpp: a call of one of Python's builtins; NotHandled when `fn` is not one the
  // tracer models.
  Result<ValuePtr> callBuiltin(PyObject* fn, std::vector<ValuePtr>& args,
                               std::vector<std::pair<Ref, ValuePtr>>& kwargs);
  // The items an iterable value yields (lists, tuples, dicts' keys, constants, modules).
  Done iterate(const ValuePtr& v, std::vector<ValuePtr>* out);
  // The items `v` would give, without consuming it when it is an Iterator.
  Done peekItems(const ValuePtr& v, std::vector<ValuePtr>* out);
  // The real Python object for a value made only of constants (constants, and tuples,
  // lists, dicts and sets of them), or null (no error set) when it holds anything else.
  Ref toPython(const ValuePtr& v);
  // The value for a real Python object made only of constants.
  Result<ValuePtr> fromPython(PyObject* o);
  // Calls a pure C function (math, operator, a method of an immutable constant, an
  // immutable type) for real when every argument is made of constants; NotHandled when
  // `fn` is not one or an argument is not made of constants.
  Result<ValuePtr> foldConstantCall(PyObject* fn, std::vector<ValuePtr>& args,
                                    std::vector<std::pair<Ref, ValuePtr>>& kwargs);
  // Sequential/ModuleList/ModuleDict: the children, read from _modules with its keys guarded.
  bool isModuleContainer(const ValuePtr& m);
  Done moduleContainerItems(const ValuePtr& m, std::vector<std::pair<Ref, ValuePtr>>* out);
  // Whether two tensor values are the same Python object. Graph inputs compare their
  // objects at trace time, guarded (aliasing can change).
  Result<bool> sameTensorObject(const ValuePtr& a, const ValuePtr& b);
  // Python type of a value (borrowed), or null.
  PyObject* typeOf(const ValuePtr& v);

  // Records a graph call; `target` is a callable, or a method name with op CallMethod.
  // Returns the result Value: a tensor node, a tuple of them, or a constant when the
  // operation only reads metadata (static shapes).
  Result<ValuePtr> recordCall(graph::NodeOp op, PyObject* target, const std::vector<ValuePtr>& args,
                              const std::vector<std::pair<Ref, ValuePtr>>& kwargs);
  // Converts a value into a graph argument (Unsupported when it cannot be one).
  Done toArg(const ValuePtr& v, graph::Arg* out);

 private:
  // containers.cpp: the methods of each container kind; NotHandled for a name it does not have.
  Result<ValuePtr> namedTupleMethod(const ValuePtr& self, const char* name,
                                    std::vector<std::pair<Ref, ValuePtr>>& kwargs);
  Result<ValuePtr> dequeMethod(const ValuePtr& self, const char* name, std::vector<ValuePtr>& args);
  Result<ValuePtr> sequenceMethod(const ValuePtr& self, const char* name, std::vector<ValuePtr>& args,
                                  std::vector<std::pair<Ref, ValuePtr>>& kwargs);
  Result<ValuePtr> sortConstants(std::vector<ValuePtr>& items, std::vector<std::pair<Ref, ValuePtr>>& kwargs);
  Result<ValuePtr> dictMethod(const ValuePtr& self, const char* name, std::vector<ValuePtr>& args,
                              std::vector<std::pair<Ref, ValuePtr>>& kwargs);
  Result<ValuePtr> dictUpdate(const ValuePtr& self, std::vector<ValuePtr>& args,
                              std::vector<std::pair<Ref, ValuePtr>>& kwargs);
  Result<ValuePtr> setMethod(const ValuePtr& self, const char* name, std::vector<ValuePtr>& args);
  Result<ValuePtr> inlineFunction(PyObject* func, int func_reg, std::vector<ValuePtr> args,
                                  std::vector<std::pair<Ref, ValuePtr>> kwargs);
  Result<ValuePtr> callModule(const ValuePtr& module, std::vector<ValuePtr> args,
                              std::vector<std::pair<Ref, ValuePtr>> kwargs);
  Result<ValuePtr> loadGlobal(SymbolicFrame& f, PyObject* name);
  // Root argument `index` as the frame was entered; NotHandled when it is not an argument
  // bound at entry.
  Result<ValuePtr> loadRootLocal(SymbolicFrame& f, int index);
  Done buildOutput(const ValuePtr& v, runtime::OutputPlan* plan);
  Done buildOutputs(const std::vector<ValuePtr>& values, std::vector<runtime::OutputPlan>* out);
  Done compileGraph();
  void setLocation(Unsupported* u);
  // graph_break.cpp: turns the state at the break target into the entry's break plan
  // and the break code's arguments.
  Done buildBreak(SymbolicFrame& root, runtime::OutputPlan* args);
  Done buildContextExit(const ValuePtr& ctx, runtime::OutputPlan* plan);

  FrameView root_view_;
  PyObject* config_;
  std::shared_ptr<runtime::CompiledEntry> entry_ = std::make_shared<runtime::CompiledEntry>();
  graph::GraphBuilder graph_;
  std::unordered_map<int, ValuePtr> wrapped_;     // guard register -> value (one per source)
  std::unordered_map<PyObject*, ValuePtr> wrapped_objects_;  // mutable object -> its value (aliases)
  std::unordered_map<int, int> input_reg_of_node_;  // placeholder node -> guard register
  std::unordered_map<int, Ref> example_of_node_;    // placeholder node -> real tensor
  std::vector<int> outputs_;                         // graph output node ids
  // Value made in the trace -> output memo slot (the map holds the value: a temporary's
  // address must not be reused while it is a key).
  std::unordered_map<const Value*, std::pair<int, ValuePtr>> memo_slot_;
  SymbolicFrame* current_ = nullptr;
  bool failed_ = false;
  bool user_error_ = false;
  Unsupported unsupported_;
  int instructions_run_ = 0;
  BreakTarget break_target_;
  std::vector<int> root_visits_;   // root instruction index -> times reached
  int fail_index_ = -1;            // root instruction running when fail() was first called
  int fail_visit_ = 0;
  bool stopped_at_break_ = false;
  bool grad_mode_at_break_ = true;
  ValuePtr pending_exc_;        // the exception in flight (outcome Raised), or null
  ValuePtr current_exc_;        // the exception being handled (sys.exc_info()), or null
  // Runs `f` until it returns (Ok: its value), raises out of it (Raised) or fails. The root
  // frame reaching the break target returns Ok with the Null value instead, its state
  // intact (stopped_at_break_).
  Result<ValuePtr> runInstructions(SymbolicFrame& f);
  // Starts the fake mode and grad-mode guard, runs the root frame, undoes global state.
  Result<ValuePtr> traceRoot(SymbolicFrame& root);

  // Side effects on objects that exist outside the trace, replayed after the graph runs
  // (in program order; mutated containers get their final contents). Reads later in the
  // trace see the new values through the overlays.
  struct PendingEffect {
    enum class Kind : uint8_t { SetAttr, SetItem, SetCell, Container };
    Kind kind;
    int reg;         // guard register of the target object (dict for SetItem, cell for SetCell)
    Ref name;        // attribute name / dict key
    ValuePtr value;  // the value stored, or the mutated container
  };
  std::vector<PendingEffect> effects_;
  // Iterators passed in (tuple_iterators: what a resume function gets for a for loop cut by
  // a break), modeled over the items they had left; what the trace consumed of each
  // (its pos) is replayed on the real one as an Advance effect.
  struct InputIterator {
    ValuePtr value;
    int items_reg;               // the guard register of the tuple of items it had left
    std::vector<int> item_regs;  // one per item
  };
  std::vector<InputIterator> input_iterators_;
  // Once the entry is complete: each input iterator is guarded on what the trace took of
  // it, not on everything it had left. Its length is checked exactly only when the trace
  // saw its end (else only that it has at least the items taken), and the guards of items
  // past those are dropped when nothing in the entry reads them.
  void guardInputIterators();
  // Iterators that zip/enumerate/map/filter made over other iterators. Their items are
  // computed when they are made, but the real objects are lazy: each item taken from the
  // derived iterator takes its share from the sources, and only then (IterLink::consumed).
  struct IterLink {
    ValuePtr derived;
    std::vector<ValuePtr> sources;
    std::vector<size_t> start;          // each source's pos when the derived one was made
    std::vector<size_t> consumed;       // consumed[k]: items every source gave once item k was taken
    std::vector<size_t> consumed_at_end;  // per source, once the derived one's end was observed
    std::vector<bool> ended_at_end;     // ... and whether that source's own end was
    // A source was consumed directly before the derived iterator was exhausted: its
    // precomputed items no longer are what the real one would give, so any later use of it
    // fails the trace (until then, e.g. a loop left with `break`, nothing is wrong).
    bool stale = false;
  };
  std::unordered_map<const Value*, IterLink> iter_links_;
  // Bumped by every change the trace makes to state a later step could observe (container
  // and object mutations, recorded effects, cell stores, iterator moves): map()/filter()
  // call their function when they are made, which is right only if those calls change
  // nothing (then taking fewer items than were computed is unobservable).
  uint64_t mutations_ = 0;
  // Moves iterator `it` to `pos` (`ended`: its end was observed), its sources with it; the
  // derived iterators not yet exhausted that take from `it` go stale.
  Done advanceIterator(const ValuePtr& it, size_t pos, bool ended);
  // Unsupported when `it` is a derived iterator gone stale (IterLink::stale).
  Done usableIterator(const Value* it);
  void syncSources(const Value* derived);
  // The link of zip/map over args[first:] (items `seqs`, `n` results): one item of each per
  // result; at the end each argument is tried in order until one has none left (strict:
  // all are read to their end).
  void linkLockstep(const ValuePtr& derived, const std::vector<ValuePtr>& args, size_t first,
                    const std::vector<std::vector<ValuePtr>>& seqs, size_t n, bool strict);
  // Registers `derived`, made from `sources` (Iterators, at their current pos); see IterLink.
  void linkIterator(const ValuePtr& derived, std::vector<ValuePtr> sources, std::vector<size_t> consumed,
                    std::vector<size_t> consumed_at_end, std::vector<bool> ended_at_end);
  // Generators are run to completion where they are called; that is only the program's
  // order of events while the generator itself changes nothing outside the trace.
  int generator_depth_ = 0;
 public:
  // Records a side effect to replay (Unsupported inside a generator run in place).
  Done recordEffect(PendingEffect e);
  bool inGenerator() const { return generator_depth_ > 0; }
 private:
  std::vector<std::pair<std::pair<int, std::string>, ValuePtr>> attr_overlay_;  // (reg, name) -> value
  std::unordered_map<PyObject*, ValuePtr> cell_overlay_;  // real cell -> value stored in the trace
 public:
  // Records a mutation of a container read from the program (no-op for containers made
  // in the trace); Unsupported when it cannot be replayed.
  Done noteContainerMutation(const ValuePtr& container);
  // The value last stored to attribute `name` of the object in register `reg`, or null.
  ValuePtr overlayAttr(int reg, PyObject* name);
  void setOverlayAttr(int reg, PyObject* name, ValuePtr value);
 private:
  Done buildEffects();
  bool grad_mode_at_start_ = true;
 public:
  bool currentGradMode();
 private:
  struct OpenContext {
    Ref exit_fn;   // real function undoing the state change
    Ref handle;    // its argument (the enter function's result)
  };
  std::vector<OpenContext> open_contexts_;  // entered at trace time, not yet exited
};

constexpr int kMaxInlineDepth = 64;
constexpr int kMaxInstructions = 1000000;

}  // namespace cdynamo::trace
