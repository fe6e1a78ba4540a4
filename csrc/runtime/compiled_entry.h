// A cache entry's artifact and how to run it on a frame (the cache-hit path).
//
// For a frame captured whole, a hit does not evaluate the frame at all: the guard program
// loads the graph inputs into registers, the compiled callable runs on them, and the
// output plan builds the frame's return value from the graph outputs, constants and
// guarded inputs. No Python frame is evaluated and nothing is allocated beyond the
// result: that is where a hit's speed comes from.
#pragma once
#include <Python.h>

#include <memory>
#include <string>
#include <variant>
#include <vector>

#include "guards/guard_program.h"
#include "support/frame_view.h"
#include "support/pyref.h"

namespace cdynamo::runtime {

struct OutputPlan;

// The ways a value is rebuilt after the graph ran, one payload each (OutputPlan::Step).
namespace plan {
struct GraphOutput {
  int index;  // position in the graph's output tuple
};
struct Constant {
  Ref obj;
};
// A guarded input handed back as itself.
struct Register {
  int reg;
};
struct Tuple {
  std::vector<OutputPlan> items;
};
// tuple.__new__(cls, items)
struct NamedTuple {
  Ref cls;
  std::vector<OutputPlan> items;
};
struct List {
  std::vector<OutputPlan> items;
};
// cls(items, maxlen)
struct Deque {
  Ref cls;
  Ref maxlen;  // an int, or null for None
  std::vector<OutputPlan> items;
};
struct Dict {
  Ref type;             // dict (made directly), or a dict class called with no arguments
  Ref default_factory;  // a defaultdict's factory: type(default_factory); or null
  std::vector<Ref> keys;
  std::vector<OutputPlan> values;
};
struct Set {
  std::vector<OutputPlan> items;
  bool frozen = false;  // a frozenset: made from its items once they are built
};
// An object made in the trace that escapes: cls.tp_alloc() with its __dict__ replaced by
// `attrs` (a Dict plan). An instance of a dict/OrderedDict subclass is made by its base's
// tp_new instead and gets `items` (a Dict plan) through the base's own item assignment
// (the class's __init__/__setitem__ do not run again); a list subclass's gets `items` (a
// List plan) by slice assignment; a tuple subclass's is made by tuple's tp_new from
// `items` (a Tuple plan).
struct NewObject {
  Ref cls;
  std::unique_ptr<OutputPlan> attrs;
  Ref base;                           // dict, OrderedDict, tuple or list, or null
  std::unique_ptr<OutputPlan> items;  // with `base`
};
// fn(*args): values rebuilt by a call (a bound method, a slice, an iterator over what is
// left, a context manager's __exit__, a function made in the trace).
struct Call {
  Ref fn;
  std::vector<OutputPlan> args;
};
// The object built earlier for memo slot `slot` (a value made in the trace that is
// reachable more than once is one object, as in the program).
struct Memo {
  int slot;
};
}  // namespace plan

// How the frame's return value (or a stored value) is rebuilt after the graph ran.
struct OutputPlan {
  using Step = std::variant<plan::GraphOutput, plan::Constant, plan::Register, plan::Tuple, plan::NamedTuple,
                            plan::List, plan::Deque, plan::Dict, plan::Set, plan::NewObject, plan::Call, plan::Memo>;
  Step step = plan::Constant{};
  int memo = -1;  // memo slot the built object is recorded in, or -1
  // Built after the effects ran, not with the rest: an iterator rebuilt over a container of
  // the program that the effects give its new contents (it must walk those). Only the root
  // plan of the result or a direct item of a Tuple/List plan of it (the tracer refuses it
  // anywhere else); also set on a Memo plan that reads such an iterator's slot.
  bool after_effects = false;

  OutputPlan() = default;
  template <class S>
  OutputPlan(S s) : step(std::move(s)) {}  // NOLINT: a plan is its step
  static OutputPlan constant(PyObject* o) { return plan::Constant{Ref::borrow(o)}; }
};

// A side effect replayed after the graph ran, in program order, on the object in guard
// register `reg`.
struct SideEffect {
  struct SetAttr {  // setattr(target, name, value); object.__setattr__ when generic
    Ref name;
    OutputPlan value;
    bool generic = false;
  };
  struct SetItem {  // target[key] = value (a globals dict)
    Ref key;
    OutputPlan value;
  };
  struct DelAttr {  // delattr(target, name); object.__delattr__ when generic
    DelAttr(Ref n, bool g) : name(std::move(n)), generic(g) {}
    Ref name;
    bool generic;
  };
  struct SetCell {  // target.cell_contents = value
    OutputPlan value;
  };
  struct ReplaceList {  // target[:] = contents (a List plan)
    OutputPlan contents;
  };
  struct ReplaceDict {  // target.clear(); target.update(contents) (a Dict plan)
    OutputPlan contents;
  };
  struct ReplaceSet {  // target.clear(); target |= contents (a Set plan)
    OutputPlan contents;
  };
  struct Advance {  // next(target) `count` times: an iterator passed in, advanced past what the trace consumed
    Py_ssize_t count;
    // Instead: target.__setstate__(count), a list_iterator set to the index it reached in its
    // list (-1: exhausted, as it is once it has seen its end).
    bool set_index = false;
  };
  struct CallMethod {  // target.name(value), its result dropped
    Ref name;
    OutputPlan value;
  };
  using What = std::variant<SetAttr, SetItem, DelAttr, SetCell, ReplaceList, ReplaceDict, ReplaceSet, Advance, CallMethod>;
  int reg = -1;
  What what;
};

// The plan of the value an effect stores, or null (Advance and DelAttr store none).
const OutputPlan* storedValue(const SideEffect& e);
// The first memo slot that the result or an effect's value reads before the plan that
// fills it has been built (in the order CompiledEntry::run builds them), or -1. The
// tracer refuses such plans: at run time they could only raise.
int memoReadBeforeBuilt(const OutputPlan& output, const std::vector<SideEffect>& effects);

// What a frame with a graph break does after its graph: the output plan built the break
// code's arguments (locals, then the stack); the runtime sets the grad mode the traced
// program had at the break, then calls the break code (bytecode/resume.h), which runs
// the breaking instruction natively and continues in a resume function.
struct BreakPlan {
  Ref break_code;
  Ref resume_table;         // runtime/continuation.h
  Ref set_grad_enabled;     // torch._C._set_grad_enabled
  bool grad_mode = true;    // torch.is_grad_enabled() at the break
  // The frame's cells, rebuilt as the last `ncells` arguments: generated code gets them
  // (then the frame's closure) as its closure. A resume function's cells already are.
  int ncells = 0;
  // The frame is itself a resume function: its continuation goes back to the loop of the
  // frame that started the chain (continuation.h) instead of being followed here.
  bool in_resume_code = false;
};

// Why a frame has a graph break, where, and through which inlined calls (for logs,
// explain and stats).
struct GraphBreakInfo {
  std::string reason;
  std::string filename;
  int line = 0;
  std::string user_stack;
};

struct CompiledEntry {
  guards::GuardProgram guards;
  std::vector<int> input_regs;  // guard registers passed to the graph, in order
  // Parallel to input_regs: -1 passes the register's object; d >= 0 passes size d of the
  // tensor in it (a symbolic size's placeholder, as an int). Empty: all -1.
  std::vector<int> input_dims;
  Ref compiled;                 // the backend's callable; null when the frame had no graph
  OutputPlan output;
  std::vector<SideEffect> effects;
  int memo_slots = 0;           // OutputPlan memo slots used by output, effects
  Ref config;                   // the compile configuration (backend) this entry belongs to
  Ref graph_module;             // the traced GraphModule (kept for explain and debugging)
  std::string name;             // "fn at file:line", for messages
  std::shared_ptr<const BreakPlan> brk;  // set when the frame ends in a graph break
  GraphBreakInfo break_info;
  // The trace recorded no op (no graph, or one that only returns its inputs) and ends
  // without a graph break: torch._dynamo skips such a frame for good (SkipFrame, 'No ops
  // traced'), and so does compileMiss unless the configuration is fullgraph.
  bool no_ops = false;
  // The output holds plans built after the effects (OutputPlan::after_effects).
  bool late_plans = false;

  // After tryRun() returned the break code's arguments (stolen): runs the break code with
  // the frame's globals and closure, then any continuations; returns the frame's result.
  // Runs with the compile context on: the resume functions it calls are captured.
  PyObject* continueAfterBreak(const FrameView& frame, PyObject* args) const;

  // Runs the guards against `frame`. When they pass, sets *matched, runs the graph and
  // returns the frame's result (new reference, or null with the graph's error set).
  // When they fail, *matched = false and null is returned with no error set.
  PyObject* tryRun(const FrameView& frame, bool* matched) const;
  // Runs the guards only (cold: a second look after waiting for the compile lock).
  bool matches(const FrameView& frame) const;

};

}  // namespace cdynamo::runtime
