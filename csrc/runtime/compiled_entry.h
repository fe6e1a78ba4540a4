// A cache entry's artifact and how to run it on a frame (the cache-hit path).
//
// For a frame captured whole, a hit does not evaluate the frame at all: the guard program
// loads the graph inputs into registers, the compiled callable runs on them, and the
// output plan builds the frame's return value from the graph outputs, constants and
// guarded inputs (DESIGN.md "Where the speed comes from").
#pragma once
#include <Python.h>

#include <memory>
#include <string>
#include <vector>

#include "guards/guard_program.h"
#include "support/frame_view.h"
#include "support/pyref.h"

namespace cdynamo::runtime {

// How the frame's return value is rebuilt after the graph ran.
struct OutputPlan {
  // NewObject: an object made in the trace that escapes: object.__new__(constant) with
  // its __dict__ updated from items[0] (a Dict plan).
  // Call: constant(*items), for values rebuilt by a call (a bound method, a slice, an
  // iterator over what is left, a context manager's __exit__).
  // Memo: the object built earlier for memo slot `index` (a value made in the trace that
  // is reachable more than once is one object, as in the program).
  enum class Kind : uint8_t { GraphOutput, Constant, Register, Tuple, List, Dict, Set, NewObject, Call, Memo };
  Kind kind = Kind::Constant;
  int index = 0;     // GraphOutput: position in the graph's output tuple; Register: guard register
  Ref constant;      // Constant; Dict: the dict type (dict, OrderedDict)
  std::vector<OutputPlan> items;  // Tuple / List / Set items; Dict values
  std::vector<Ref> keys;          // Dict keys
  Ref ctor_arg;                   // List: a deque class in `constant`, maxlen here; Dict: a defaultdict factory
  int memo = -1;                  // memo slot the built object is recorded in, or -1
};

// A side effect replayed after the graph ran, in program order.
struct SideEffect {
  enum class Kind : uint8_t {
    SetAttr,      // setattr(regs[reg], name, value)
    SetItem,      // regs[reg][name] = value (a globals dict)
    SetCell,      // regs[reg].cell_contents = value
    ReplaceList,  // regs[reg][:] = value (a List plan)
    ReplaceDict,  // regs[reg].clear(); regs[reg].update(value) (a Dict plan)
    ReplaceSet,   // regs[reg].clear(); regs[reg] |= value (a Set plan)
    Advance,      // next(regs[reg]) `value` times (a Constant plan: an int): an iterator passed
                  // in, advanced past what the trace consumed of it
  };
  Kind kind;
  int reg = -1;
  Ref name;
  OutputPlan value;
};

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
  Ref compiled;                 // the backend's callable; null when the frame had no graph
  OutputPlan output;
  std::vector<SideEffect> effects;
  int memo_slots = 0;           // OutputPlan memo slots used by output, effects
  Ref config;                   // the compile configuration (backend) this entry belongs to
  Ref graph_module;             // the traced GraphModule (kept for explain and debugging)
  std::string name;             // "fn at file:line", for messages
  std::shared_ptr<const BreakPlan> brk;  // set when the frame ends in a graph break
  GraphBreakInfo break_info;

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
