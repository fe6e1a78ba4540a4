// One frame being interpreted: the root frame or an inlined call (the tracer's
// FrameState: locals, the value stack, the block state CPython keeps in the frame).
#pragma once
#include <Python.h>

#include <vector>

#include "bytecode/instructions.h"
#include "bytecode/tables.h"
#include "support/pyref.h"
#include "trace/values/value.h"

namespace cdynamo::trace {

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
  bool generator = false;        // a generator's frame: YIELD_VALUE pauses it (GeneratorState)
  bool suspended = false;        // set by YIELD_VALUE: runFrame returned the yielded value
  // co_exceptiontable, decoded on the first exception raised in this frame.
  std::vector<bytecode::ExceptionTableEntry> handlers;
  bool handlers_decoded = false;
  // The graph's location id (GraphBuilder::internLocation) of instruction `loc_pc`, the
  // last one a node was recorded in (the callers' instructions stay put while this runs).
  size_t loc_pc = static_cast<size_t>(-1);
  int loc_id = -1;
};

// A generator made in the trace (an Iterator of Made::Generator): its frame, paused at
// f.pc (a YIELD_VALUE) between items, or not started yet. Each item taken resumes it
// under the frame that takes it.
struct GeneratorState {
  SymbolicFrame frame;
  bool started = false;
  bool running = false;   // being resumed (a generator that takes from itself: ValueError)
  bool finished = false;  // returned, raised or closed
  ValuePtr returned;      // its return value once finished (the value of `yield from` it)
  ValuePtr handled_exc;   // the exception it was handling where it paused (its own exc_info), or null
};

// Whether generator frame `f`, paused at f.pc, is inside a try/with block (an entry of its
// exception table covers the yield): closing it (close(), or dropping it) runs its handler.
bool pausedInHandler(const SymbolicFrame& f);

constexpr int kMaxInlineDepth = 64;
constexpr int kMaxInstructions = 1000000;

}  // namespace cdynamo::trace
