// The symbolic bytecode interpreter: translates one frame into a cache entry.
//
// The Tracer runs the frame's instructions over symbolic Values (trace/values), records
// tensor operations in a GraphBuilder, and records every input it reads as a guard
// register with checks (GuardProgram). Calls to user functions and nn.Module.forward are
// inlined as nested SymbolicFrames. Anything it cannot model stops the trace with an
// "unsupported" reason and the source location; the frame then runs natively.
//
// The Tracer keeps the frames and the loop; each other concern owns its state in its own
// file: side_effects.h (records, overlays, replay plan), outputs.h (output planning),
// iterators.h (iterator links, input iterators), contexts.h (torch's global-state
// contexts), callables.h (the builtins and special callables table), and the operations
// over values (ops.h). Opcode handlers live in op_*.cpp, registered in interpreter.cpp.
//
// Errors: translate() never lets a Python exception escape except the user-facing ones
// (BackendCompilerFailed, and Unsupported under fullgraph=True). Inside, every operation
// reports its outcome through trace/result.h (Ok, Unsupported, Raised, NotHandled).
#pragma once
#include <Python.h>

#include <memory>
#include <string>
#include <unordered_map>
#include <unordered_set>
#include <vector>

#include "bytecode/instructions.h"
#include "bytecode/resume.h"
#include "graph/graph_builder.h"
#include "guards/guard_program.h"
#include "runtime/compiled_entry.h"
#include "support/check.h"
#include "support/frame_view.h"
#include "trace/engine/frame.h"
#include "trace/engine/outputs.h"
#include "trace/engine/result.h"
#include "trace/engine/side_effects.h"
#include "trace/kinds/context.h"
#include "trace/kinds/iterator.h"
#include "trace/values/value.h"

namespace cdynamo::trace {

// Where tracing stopped and why (for logs, stats, explain and fullgraph errors).
struct Unsupported {
  std::string reason;
  std::string filename;
  int line = 0;
  std::string function;
  std::string user_stack;  // innermost last: "file:line in fn" per inlined frame
  // The trace stopped because an operation of the program raised on fake tensors (its
  // shapes, dtypes or devices do not fit): eager raises there too. Under fullgraph that
  // is cdynamo.exc.TorchRuntimeError (torch._dynamo's class for it), not Unsupported.
  bool fake_call_raised = false;
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
// `shape_memory`: the code object's size memory for automatic dynamic shapes (a dict kept
// by the code cache; see cdynamo/_internal/symbolic_shapes.py), or null.
TranslateResult translate(const FrameView& frame, PyObject* config, PyObject* shape_memory = nullptr);

// Where a re-trace stops for a graph break: the `visit`-th time the root frame reaches
// instruction `index`.
struct BreakTarget {
  int index = -1;
  int visit = 0;
  Unsupported why;  // what stopped the first trace there
};

class Tracer {
 public:
  Tracer(const FrameView& frame, PyObject* config, BreakTarget target = {}, PyObject* shape_memory = nullptr,
         bool with_shape_env = false)
      : root_view_(frame), config_(config), shape_memory_(shape_memory), break_target_(std::move(target)),
        with_shape_env_(with_shape_env) {
    graph_.setLocationSource([this] { return locationId(current_); });
  }
  Tracer(const Tracer&) = delete;
  Tracer& operator=(const Tracer&) = delete;
  TranslateResult run();
  // After a failed run(): the root instruction the failure happened in (index -1 when it
  // did not happen inside an instruction of the root frame).
  BreakTarget failedAt() const;
  // Set when the trace changed the program's state for real so that tracing the frame
  // again from its start sees it (an optimizer's state created on its first step): the
  // failed run is dropped and the frame translated once more.
  bool retrace_requested = false;
  // Set with retrace_requested by an op whose fake implementation needs a ShapeEnv (the
  // while_loop op makes unbacked symbols) in a trace made without one: the frame is traced
  // again with a ShapeEnv of static shapes, as torch._dynamo's traces always have one.
  bool retrace_with_shape_env = false;
  // Whether this trace was asked for such a ShapeEnv (the retry of the above).
  bool withShapeEnv() const { return with_shape_env_; }
  // The bodies of nested compile regions installed so far (invoke_subgraph, speculation.cpp):
  // a later call whose body has the same key names the same subgraph.
  struct RegionBody {
    Ref key;   // cdynamo._internal.subgraph_reuse.body_key of its GraphModule
    int node;  // its get_attr node
    std::string name;  // the attribute, the op's identifier argument
  };
  std::vector<RegionBody> region_bodies;

  // ---- failure (tracer.cpp) ----
  // Stops the trace: records the reason (the first one wins) and where the trace was;
  // handlers `return t.fail(...)`.
  Stop fail(std::string reason);
  // Turns the pending Python error into an unsupported reason (and clears it).
  Stop failFromPython(const std::string& what);
  // failFromPython for an operation that raised while it ran on fake tensors.
  Stop failFakeCall(const std::string& what);
  bool failed() const { return failed_; }
  // Puts `prefix` in front of the recorded reason (a higher-order op naming itself in front
  // of what stopped its body).
  void prefixFailure(const std::string& prefix) {
    if (failed_ && !user_error_) unsupported_.reason = prefix + unsupported_.reason;
  }

  // ---- exceptions of the traced program (exceptions.cpp; modelled, never real errors) ----
  // Raises the pending Python error as an exception of the traced program.
  Stop raisePython();
  // Raises `type(message)` in the traced program.
  Stop raiseNew(PyObject* type, const std::string& message);
  // Sets the handled exception as `exc`'s __context__, as CPython does at a raise (never
  // at a re-raise or when an exception propagates out of a call). False when the context
  // would be what the compiled frame's caller handles: failOuterHandled() then.
  bool chainToHandled(PyObject* exc);
  Stop failOuterHandled();
  Stop raiseValue(ValuePtr exc);
  // The exception in flight passes through frame `f` at its current instruction: a
  // traceback entry for it goes in front of its __traceback__, as CPython's error path
  // adds one per frame (a re-raise adds none). The first entry also records where it was
  // raised, for the report when it escapes the traced frame.
  Done noteTraceback(SymbolicFrame& f);
  // Where the exception `exc` was first raised in the trace, or null.
  struct RaiseSite {
    Ref exc;
    Unsupported where;
    std::string traceback;  // the frames, outermost first, as Python's tracebacks list them
  };
  const RaiseSite* raiseSite(PyObject* exc) const;
  // The exception in flight (set exactly while an outcome is Raised), or null.
  const ValuePtr& pendingException() const { return pending_exc_; }
  // Takes the exception in flight away (to re-raise it after a cleanup).
  ValuePtr takePendingException();
  // The exception being handled (sys.exc_info()), or null; set by PUSH_EXC_INFO.
  const ValuePtr& handledException() const { return current_exc_; }
  void setHandledException(ValuePtr exc) { current_exc_ = std::move(exc); }

  // ---- reading the program's inputs (builder.cpp) ----
  // Wraps a real Python object read from guard register `reg` (-1: no source, e.g. a
  // constant or default value) into a Value, adding the guards that its use implies.
  // The items of a dict (or of a dict subclass instance) read from the program, its keys
  // guarded, each value read through its key; `type` is the Dict value's type.
  Result<ValuePtr> wrapDictItems(PyObject* obj, int reg, PyObject* type);
  Result<ValuePtr> wrap(PyObject* obj, int reg);
  int load(guards::LoadKind kind, int base, int index, PyObject* name, std::string what);
  // Root argument `index` as the frame was entered; NotHandled when it is not an argument
  // bound at entry.
  Result<ValuePtr> loadRootLocal(SymbolicFrame& f, int index);
  // The guard register of argument `index` of the root frame (a Local load, nothing
  // checked), or -1 when it is not an argument or not bound.
  int rootLocalRegister(SymbolicFrame& f, int index);
  Result<ValuePtr> loadGlobal(SymbolicFrame& f, PyObject* name);
  // The guard register of graph input `node`, or -1 when `node` is not a graph input.
  int inputRegOf(int node) const;
  // The real tensor of graph input `node` (borrowed), or null.
  PyObject* exampleOf(int node) const;
  // Whether graph input `node` is an instance of a tensor subclass (its example is a plain
  // tensor of its data; the object itself is the register's).
  bool isSubclassInput(int node) const { return subclass_input_nodes_.count(node) > 0; }
  // That object (borrowed), or null.
  PyObject* subclassInputObject(int node) const {
    auto it = subclass_input_nodes_.find(node);
    return it == subclass_input_nodes_.end() ? nullptr : it->second.get();
  }
  // Classes whose __dict__ (a mappingproxy, objects.cpp) the trace read: the dict value is
  // a copy of the class's items, so a later store to such a class would not show in it.
  std::unordered_set<PyObject*> class_dicts_read;
  // Guard register -> the value wrapped from it (one per source).
  const std::unordered_map<int, ValuePtr>& wrappedValues() const { return wrapped_; }
  // The value a mutable object from the program was wrapped as (one per object), or null.
  ValuePtr wrappedValueOf(PyObject* obj) const {
    auto it = wrapped_objects_.find(obj);
    return it == wrapped_objects_.end() ? nullptr : it->second;
  }
  const std::unordered_map<PyObject*, ValuePtr>& wrappedObjects() const { return wrapped_objects_; }
  // id() of a value made in the trace (builtins.cpp): the id of an object kept for it
  // while the trace runs, so distinct values have distinct ids, none an id of a live
  // object of the program.
  PyObject* standInId(const ValuePtr& v);

  // Objects the trace uses as dict keys by identity (containers.cpp dictKeyOf) -> their values.
  std::unordered_map<PyObject*, std::pair<Ref, ValuePtr>>& keyObjects() { return key_objects_; }

  // ---- frames (interpreter.cpp, functions.cpp) ----
  // Runs a frame to its return; an exception raised in it (Raised) is delivered to the
  // frame's handlers through its exception table, or propagates (Raised) to the caller's
  // CALL instruction.
  Result<ValuePtr> runFrame(SymbolicFrame& f);
  // Inlines a call of code `co` (a Python function: real_closure and real defaults; or a
  // function made in the trace: closure_cells and defaults as values).
  Result<ValuePtr> inlineCode(PyCodeObject* co, PyObject* globals, PyObject* builtins, PyObject* real_closure,
                              const std::vector<ValuePtr>* closure_cells, PyObject* defaults, PyObject* kwdefaults,
                              const ValuePtr& defaults_value, const ValuePtr& kwdefaults_value, int func_reg,
                              std::vector<ValuePtr> args, std::vector<std::pair<Ref, ValuePtr>> kwargs);
  // Inlines a call of the Python function `func` (read from guard register func_reg, or -1).
  Result<ValuePtr> inlineFunction(PyObject* func, int func_reg, std::vector<ValuePtr> args,
                                  std::vector<std::pair<Ref, ValuePtr>> kwargs);
  // The frame being run (the innermost), or null.
  SymbolicFrame* current() const { return current_; }
  // Runs generator `it` (an Iterator of Made::Generator) to its next yield, `sent` (null:
  // None) the value of the yield it is paused at: *item is the value yielded, or null once
  // it returned (its return value kept in its GeneratorState) or when it had ended.
  Done resumeGenerator(const ValuePtr& it, const ValuePtr& sent, ValuePtr* item);
  // generator.throw(exc): raises `exc` (an exception instance) at the yield generator `it`
  // is paused at (into its subiterator first, under `yield from`; GeneratorExit closes
  // that one): *item is what it yields next, or null once it returned; an exception it
  // lets out is raised here. One not started or ended raises `exc` as it is.
  Done throwGenerator(const ValuePtr& it, ValuePtr exc, ValuePtr* item);
  // generator.close(): GeneratorExit at its yield; None when it lets that through or
  // returns, RuntimeError when it yields again, and what it raises otherwise.
  Result<ValuePtr> closeGenerator(const ValuePtr& it);
  // A generator's frame is running (resumed by the item being taken).
  bool inGenerator() const { return generator_depth_ > 0; }
  // The callables whose polyfill is being inlined (innermost last): a call of one of them
  // from there is a call of the original (a polyfill that handles some arguments only).
  std::vector<PyObject*>& polyfillsRunning() { return polyfills_running_; }

  // The program stored `v` into the local (or root-frame cell) `name`: a tensor's node is
  // named after it (GraphBuilder::nameHint).
  void noteStored(const ValuePtr& v, PyObject* name);

  // ---- the parts ----
  guards::GuardProgram& guards() { return entry_->guards; }
  graph::GraphBuilder& graph() { return graph_; }
  SideEffects& effects() { return effects_; }
  Iterators& iterators() { return iterators_; }
  OutputPlanner& outputs() { return outputs_; }
  Contexts& contexts() { return contexts_; }

 private:
  // interpreter.cpp: runs `f` until it returns (Ok: its value), raises out of it (Raised)
  // or fails. The root frame reaching the break target returns Ok with the Null value
  // instead, its state intact (stopped_at_break_).
  Result<ValuePtr> runInstructions(SymbolicFrame& f);
  // Delivers the exception in flight at f.pc to f's handler; NotHandled when f has none.
  Done deliverException(SymbolicFrame& f);
  // inlining.cpp: runs generator `it`'s frame from where it stands (resumed or at a
  // handler) to its next yield, return or raise, under the frame that asked.
  Done runGenerator(const ValuePtr& it, ValuePtr* item);
  // tracer.cpp
  Result<ValuePtr> traceRoot(SymbolicFrame& root);
  void finishEntry(SymbolicFrame& root, Result<ValuePtr>& ret);
  // Closes paused generator `g` as dropping it does (GeneratorExit at its yield): whether
  // that lets the exception through (or returns) and changes nothing the trace records.
  bool closesQuietly(const std::shared_ptr<GeneratorState>& g);
  // Where the root frame returns `ret`: closes the generators only its locals held (as
  // Python drops them), and runs those the program keeps to their end (rebuilt as the
  // items they yield), or fails where that would not be the program's result.
  Done settleGenerators(SymbolicFrame& root, const ValuePtr& ret);
  bool fullgraph();  // the compile asked for fullgraph=True
  bool onlySwitchesGradMode();  // see finishEntry
  Done compileGraph(bool compile_empty);
  // The guard on how the graph's tensor inputs share storages, when it mutates one of them
  // (GuardProgram::checkStorages). tracer.cpp.
  Done guardInputStorages(const std::vector<int>& inputs_used);
  TranslateResult report();
  void setLocation(Unsupported* u);
  // The graph location (file, line, inlined callers) of the instruction `f` runs.
  int locationId(SymbolicFrame* f);
  // graph_break.cpp: turns the state at the break target into the entry's break plan and
  // the break code's arguments.
  Done buildBreak(SymbolicFrame& root, runtime::OutputPlan* args);
  Done breakArguments(SymbolicFrame& f, PyCodeObject* orig, bool in_resume_code, bytecode::FrameLayout* at,
                      std::vector<runtime::OutputPlan>* items, int* ncells);
  // builder.cpp
  Result<ValuePtr> wrapContainer(PyObject* obj, int reg);
  // The parts of wrap() for a tensor, an instance of a user class and a dict view passed in.
  Result<ValuePtr> wrapTensorInput(PyObject* obj, int reg);
  Result<ValuePtr> wrapUserObject(PyObject* obj, int reg);
  Result<ValuePtr> wrapDictView(PyObject* obj, int reg);
  Result<ValuePtr> wrapIntInput(PyObject* obj, int reg);
  // An instance of a torch.Tensor subclass (torch_function.cpp's SubclassTensor): a graph
  // input of its plain tensor, guarded by its exact class and its __torch_function__.
  Result<ValuePtr> wrapSubclassTensor(PyObject* obj, int reg);
  Result<ValuePtr> wrapWrapperSubclassInput(PyObject* obj, int reg);
  Result<ValuePtr> subclassInputAgain(PyObject* obj, int reg);
  // The guards of a traceable wrapper subclass instance in `reg` (and of its inner tensors).
  Done guardWrapperSubclass(PyObject* obj, int reg, int outer_reg, int depth);
  Result<ValuePtr> wrapCallable(PyObject* obj, int reg);

  FrameView root_view_;
  PyObject* config_;
  PyObject* shape_memory_ = nullptr;  // borrowed: the code cache holds it (translate())
  Done addShapeGuards();             // tracer.cpp: the ShapeEnv's guards into the guard program
  // Guard provenance (tracer.cpp): the current instruction and the frames it is inlined
  // from, for each check as it is added (GuardProgram::setOriginSource) and for each
  // ShapeEnv guard as it appears (noteShapeGuards, after every instruction of a symbolic trace).
  static void originOf(void* tracer, guards::Origin* out);
  void noteShapeGuards();
  std::vector<guards::Origin> shape_guard_origins_;  // by index in the ShapeEnv's guards
  Ref shape_guard_list_;                            // ShapeEnv.guards (a list), once read
  std::shared_ptr<runtime::CompiledEntry> entry_ = std::make_shared<runtime::CompiledEntry>();
  graph::GraphBuilder graph_;
  SideEffects effects_{*this};
  Iterators iterators_{*this};
  OutputPlanner outputs_{*this};
  Contexts contexts_{*this};

  // Inputs read (builder.cpp).
  std::unordered_map<int, ValuePtr> wrapped_;                // guard register -> value (one per source)
  std::unordered_map<PyObject*, ValuePtr> wrapped_objects_;  // mutable object -> its value (aliases)
  std::unordered_map<PyObject*, ValuePtr> wrapped_tensors_;  // tensor input -> its value (one placeholder)
  // Objects whose wrap() is under way (their items are being wrapped): a container that
  // holds itself, directly or through others (l.append(l), d["self"] = d), is met again
  // before its value exists; wrap() then stops the trace instead of recursing forever.
  std::unordered_set<PyObject*> wrapping_;
  std::unordered_set<int> module_regs_;                      // registers holding an nn.Module
  std::unordered_map<int, Ref> subclass_input_nodes_;        // placeholder of a tensor subclass instance -> it
  // register of a wrapper subclass input -> its plain inner tensors (at every nesting
  // level), each with the register it is guarded through (guardInputStorages)
  std::unordered_map<int, std::vector<std::pair<int, Ref>>> wrapper_inners_;
  // A parameter, or a tensor read from a module's attributes, is marked a static input
  // (tensor._dynamo_static_input_type = "unguarded", unless marked already), as torch._dynamo
  // marks them: backends (cudagraphs) read the mark from the placeholder's meta["tensor_dict"].
  Done markStaticInput(PyObject* tensor, int reg);
  // Inductor's parameter freezing is on for this trace (torch._inductor.config.freezing,
  // grad mode off): 1/0, -1 with an error set. Read once per trace.
  int parameterFreezing();
  int freezing_ = -1;
  std::unordered_map<int, int> input_reg_of_node_;           // placeholder node -> guard register
  std::unordered_map<int, Ref> example_of_node_;             // placeholder node -> real tensor
  std::vector<std::pair<ValuePtr, Ref>> stand_in_ids_;       // standInId: value -> the object whose id it has
  std::unordered_map<PyObject*, std::pair<Ref, ValuePtr>> key_objects_;  // dict keys by identity -> values

  // The frames and the loop.
  SymbolicFrame* current_ = nullptr;
  int instructions_run_ = 0;
  int generator_depth_ = 0;
  // settleGenerators: a kept generator is being run to its end; whether it read the
  // program's state live meanwhile (wrap).
  bool running_ahead_ = false;
  bool read_live_ahead_ = false;
  // Every generator made in the trace: one paused inside try/with where the trace ends is
  // closed then in Python (its handler runs), which the trace does not model (finishEntry).
  std::vector<std::shared_ptr<GeneratorState>> generators_;
  std::vector<PyObject*> polyfills_running_;  // borrowed: the callables of POLYFILLS (alive in it)
  ValuePtr pending_exc_;  // the exception in flight (outcome Raised), or null
  ValuePtr current_exc_;  // the exception being handled (sys.exc_info()), or null
  std::vector<RaiseSite> raise_sites_;  // noteTraceback: where each exception was first raised
  Ref traceback_frame_;  // the frame object the traceback entries made in the trace point at

  // Failure, and the graph break it may become.
  bool failed_ = false;
  bool user_error_ = false;
  Unsupported unsupported_;
  BreakTarget break_target_;
  bool with_shape_env_ = false;
  std::vector<int> root_visits_;  // root instruction index -> times reached
  int fail_index_ = -1;           // root instruction running when fail() was first called
  int fail_visit_ = 0;
  bool stopped_at_break_ = false;
  bool grad_mode_at_break_ = true;
};

}  // namespace cdynamo::trace
