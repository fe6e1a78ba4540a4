// torch's global-state context managers inside a trace: torch.no_grad(), enable_grad(),
// set_grad_enabled(b), inference_mode(mode), autocast(...). Each state change becomes a
// graph node (as in TorchDynamo: torch._C._set_grad_enabled, _enter/_exit_autocast,
// _enter/_exit_inference_mode) and is applied at trace time too, so that fake tensors are
// computed under the same state; whatever is still applied when the trace ends (success
// or not) is undone by restore().
#pragma once
#include <Python.h>

#include <string>
#include <unordered_set>
#include <utility>
#include <vector>

#include "runtime/compiled_entry.h"
#include "trace/engine/result.h"
#include "trace/values/value.h"

namespace cdynamo::trace {

class Tracer;

class Contexts {
 public:
  explicit Contexts(Tracer& t) : t_(t) {}

  // Whether `cls` is one of the context classes above.
  bool isContextClass(PyObject* cls);
  // cls(*args, **kwargs): a Context value (set_grad_enabled applies its mode now).
  Result<ValuePtr> make(PyObject* cls, std::vector<ValuePtr>& args, std::vector<std::pair<Ref, ValuePtr>>& kwargs);
  Result<ValuePtr> enter(const ValuePtr& ctx);
  // ctx(func): func wrapped to run inside a fresh copy of the context on each call.
  Result<ValuePtr> decorate(const ValuePtr& ctx, const ValuePtr& func);
  // The context a call of a function decorated with `tmpl` enters and exits: a fresh copy,
  // or (disable_saved_tensors_hooks, whose state was set when it was made, as torch._dynamo
  // models it) the decorating context itself.
  Result<ValuePtr> forCall(const ValuePtr& tmpl);
  // At a graph break: leaves the state contexts whose `with` blocks the break is inside (their
  // __exit__ on `stack`), innermost first, so the graph ends outside them as torch._dynamo's
  // does; the entry sets their state again (planExit) for the rest of the blocks.
  Done leaveAtBreak(const std::vector<ValuePtr>& stack);
  Result<ValuePtr> exit(const ValuePtr& ctx);
  // The bound __exit__ of a real grad-mode context object (a `with` block continued in a
  // resume function): the same value BEFORE_WITH pushes. NotHandled for any other method.
  Result<ValuePtr> wrapExit(PyObject* self, PyObject* func, int self_reg);
  // The plan rebuilding a grad-mode context's __exit__ at a graph break:
  // cdynamo._internal.frame_rebuild.grad_mode_exit(cls, prev). Unsupported for other contexts.
  Done planExit(const ValuePtr& ctx, runtime::OutputPlan* plan);
  // The plan rebuilding a context object itself (alive at a graph break).
  Done planObject(const ValuePtr& ctx, runtime::OutputPlan* plan);

  // torch._C._set_grad_enabled(mode) called by the program (a user context manager's
  // __enter__/__exit__, a contextlib generator): the same state change as the grad-mode
  // contexts make, recorded even when the mode is already that (as torch._dynamo does).
  // Returns None, as the binding does.
  Result<ValuePtr> setGradEnabled(const ValuePtr& mode);
  // A setter of torch's global state called by the program outside any context object
  // (torch.set_default_dtype, torch.set_autocast_enabled/_dtype/_cache_enabled, the
  // saved-tensors-hooks switch), as torch._dynamo records them: a graph node, applied now
  // so fake tensors see it, undone when the trace ends. NotHandled for other callables.
  // `program_call` false: a context modelled here sets the state (its node has no stack trace).
  Result<ValuePtr> callStateSetter(PyObject* f, std::vector<ValuePtr>& args,
                                   std::vector<std::pair<Ref, ValuePtr>>& kwargs, bool program_call = true);
  // A reader of functorch's state (get_dynamic_layer_stack_depth, maybe_current_level,
  // current_level, get_inplace_requires_grad_allowed, torch._C._is_fwd_grad_enabled): its
  // answer now, folded. NotHandled for other callables.
  Result<ValuePtr> readFunctorchState(PyObject* f, std::vector<ValuePtr>& args);
  // Guards the functorch state the frame runs under (the interpreter stack and its two
  // switches), once per trace; called before the trace first reads or changes it, and at
  // the start of a frame called inside a transform. False with an error set on failure.
  bool noteFunctorchState();
  // Whether a functorch level the trace pushed is still on the stack: a graph break there
  // would resume with the level pushed by a graph, which nothing pops if the resumed code
  // fails, so the frame runs natively instead.
  bool functorchLevelPushed() const;
  // The frame was called inside a transform (functorch's stack not empty at its start):
  // torch._dynamo runs such a frame natively rather than break its graph, as the resumed
  // code would be compiled again on the transform's wrapped tensors.
  void noteCalledInsideTransform() { inside_transform_ = true; }
  bool calledInsideTransform() const { return inside_transform_; }
  // torch._C._autograd._saved_tensors_hooks_get_disabled_error_message(): the message in
  // force, guarded as a state query unless the trace itself set it. NotHandled for others.
  Result<ValuePtr> readSavedTensorsHooksMessage(PyObject* f, std::vector<ValuePtr>& args);
  // disable_saved_tensors_hooks: the message in force (None: hooks enabled), guarded as a
  // state query unless the trace set it; and setting it (a graph node, applied now).
  Result<Ref> hooksMessage();
  Done setHooksMessage(PyObject* message);
  // sdpa_kernel: the enabled attention backends (a tuple; in priority order with
  // `priority`), guarded as a state query unless the trace set them; and setting them
  // (nodes as torch._dynamo records them, applied now, undone when the trace ends).
  Result<Ref> sdpaBackends(bool priority);
  Done setSdpaBackends(PyObject* backends, bool priority);
  // torch.is_grad_enabled() now.
  bool gradMode();
  // The grad mode the trace started with (restored at the end).
  void setGradModeAtStart(bool enabled) { grad_mode_at_start_ = enabled; }
  // The depth of functorch's interpreter stack when the trace started: restore() pops what
  // is above it, whatever pushed it (the last line of defence against a level left pushed).
  void setFunctorchDepthAtStart(long depth) { functorch_depth_at_start_ = depth; }
  // Whether an inference_mode or autocast block entered in the trace is still open.
  bool anyOpen() const { return !open_.empty(); }
  // The __exit__ that BEFORE_WITH pushed for a context manager the program defines (a
  // class with __enter__/__exit__, a contextlib generator): torch._dynamo resumes a frame
  // after a graph break only inside `with` blocks of the contexts it models, and runs the
  // frame natively when the break is inside such a block (the calls it makes are then
  // captured as frames of their own). Graph counts follow it.
  void noteProgramWith(const ValuePtr& exit) { program_exits_.push_back(exit); }
  bool isProgramWithExit(const ValuePtr& v) const {
    for (const ValuePtr& e : program_exits_)
      if (e == v) return true;
    return false;
  }
  // The grad-mode nodes the contexts made (not the program's own calls of the binding).
  const std::unordered_set<int>& gradModeNodes() const { return grad_mode_nodes_; }
  // Undoes what the trace applied and did not undo itself.
  void restore();

 private:
  struct Open {
    Ref exit_fn;  // real function undoing the state change
    Ref handle;   // its argument (the enter function's result)
  };
  // Sets grad mode to `mode` at trace time and in the graph; nothing when the mode is
  // already that (TorchDynamo coalesces grad-mode changes the same way: the graph runs
  // under the grad mode it was traced in, guarded, so a change to the mode in force is a
  // no-op node). False with an error set when the call failed.
  bool setMode(bool mode);
  Result<ValuePtr> wrapStateExit(PyObject* self, PyObject* func, int self_reg);
  Result<ValuePtr> makeSdpaKernel(Context ctx, std::vector<ValuePtr>& args,
                                  std::vector<std::pair<Ref, ValuePtr>>& kwargs);
  Tracer& t_;
  std::vector<Open> open_;  // entered at trace time, not yet exited
  bool grad_mode_at_start_ = true;
  std::unordered_set<int> grad_mode_nodes_;
  std::vector<ValuePtr> program_exits_;
  // What restore() calls, in reverse, to undo the state setters the trace applied.
  struct Undo_ {
    Ref fn;              // called with `args` when the trace ends
    Ref args;
    Ref kwargs;          // a dict, or null
    int family = 0;      // the transform of a functorch level, 0 for other state
    bool pushed = false;  // a level the trace pushed (a later pop of it cancels this entry)
  };
  std::vector<Undo_> undo_;
  bool functorch_guarded_ = false;
  bool inside_transform_ = false;
  long functorch_depth_at_start_ = -1;  // noteFunctorchState() has guarded the state
  bool hooks_message_set_ = false;         // the trace changed the saved-tensors-hooks switch
  bool sdpa_set_ = false;                  // the trace set the attention backends
  bool nesting_changed_ = false;           // the trace changed autocast's nesting depth (guarded before)
};

}  // namespace cdynamo::trace
