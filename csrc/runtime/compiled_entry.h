// A cache entry's artifact and how to run it on a frame (the cache-hit path).
//
// For a frame captured whole, a hit does not evaluate the frame at all: the guard program
// loads the graph inputs into registers, the compiled callable runs on them, and the
// output plan builds the frame's return value from the graph outputs, constants and
// guarded inputs (DESIGN.md "Where the speed comes from").
#pragma once
#include <Python.h>

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
  enum class Kind : uint8_t { GraphOutput, Constant, Register, Tuple, List, Dict, Set, NewObject };
  Kind kind = Kind::Constant;
  int index = 0;     // GraphOutput: position in the graph's output tuple; Register: guard register
  Ref constant;      // Constant; Dict: the dict type (dict, OrderedDict)
  std::vector<OutputPlan> items;  // Tuple / List / Set items; Dict values
  std::vector<Ref> keys;          // Dict keys
  Ref ctor_arg;                   // List: a deque class in `constant`, maxlen here; Dict: a defaultdict factory
};

// A side effect replayed after the graph ran, in program order.
struct SideEffect {
  enum class Kind : uint8_t {
    SetAttr,      // setattr(regs[reg], name, value)
    SetItem,      // regs[reg][name] = value (a globals dict)
    SetCell,      // regs[reg].cell_contents = value
    ReplaceList,  // regs[reg][:] = value (a List plan)
    ReplaceDict,  // regs[reg].clear(); regs[reg].update(value) (a Dict plan)
  };
  Kind kind;
  int reg = -1;
  Ref name;
  OutputPlan value;
};

struct CompiledEntry {
  guards::GuardProgram guards;
  std::vector<int> input_regs;  // guard registers passed to the graph, in order
  Ref compiled;                 // the backend's callable; null when the frame had no graph
  OutputPlan output;
  std::vector<SideEffect> effects;
  Ref config;                   // the compile configuration (backend) this entry belongs to
  Ref graph_module;             // the traced GraphModule (kept for explain and debugging)
  std::string name;             // "fn at file:line", for messages

  // Runs the guards against `frame`. When they pass, sets *matched, runs the graph and
  // returns the frame's result (new reference, or null with the graph's error set).
  // When they fail, *matched = false and null is returned with no error set.
  PyObject* tryRun(const FrameView& frame, bool* matched) const;
  // Runs the guards only (cold: a second look after waiting for the compile lock).
  bool matches(const FrameView& frame) const;

};

}  // namespace cdynamo::runtime
