// Code generated at a graph break (an instruction the tracer does not support ends the
// graph there instead of the whole frame running natively): the code that runs the
// breaking instruction natively, and the resume functions that continue the frame after
// it and are themselves captured when CPython calls them.
//
// Both are copies of the original code object with a short prologue after RESUME that
// rebuilds the value stack from arguments and jumps to the instruction where execution
// goes on. Keeping the whole original body keeps every exception-table range, loop and
// line number intact: a break inside a try block is still inside it, a loop still loops.
//
// Calling convention (one layout for both, so a frame's locals keep their indices):
//   arguments = co_varnames of the original (all of them, positional; one the frame has
//               not bound is passed as None and deleted by the prologue), then the
//               value-stack slots that do not hold the call convention's NULL (bottom
//               first; NULL slots are pushed by the prologue), then, for a break code
//               only, the continuation factory.
// Generated code has no cell variables: the frame's cells (also arguments captured by
// inner functions) are its first free variables, so the function objects the runtime
// makes for it get closure = (the frame's cells..., the original's closure...). The
// argument slot of a captured argument is unused (passed None).
// A break code runs the breaking instruction and, for each way it can continue (the
// next instruction; the jump target of a conditional jump), calls
// `continuation(k, *locals, *stack)` and returns what that returns: the runtime turns it
// into a call of the k-th resume function (runtime/continuation.h). An exception raised
// by the instruction is handled by the copied body as the original would handle it.
//
// Generated code objects are memoized per (original code, position, layout) while the
// original lives (weak reference) or until clearGenerated() (cdynamo.reset()), so a break
// inside a loop reuses one resume function, whose cache entries then hit.
#pragma once
#include <Python.h>

#include <string>
#include <vector>

#include "support/pyref.h"

namespace cdynamo::bytecode {

// The frame's state at an instruction boundary, as far as generated code needs it.
struct FrameLayout {
  int index = 0;                 // instruction index in the original code (decode() order)
  std::vector<bool> stack_null;  // value stack, bottom first: true where a slot is NULL
  std::vector<bool> unbound;     // one per co_varnames entry: true where the local is unbound
  std::string key() const;
  int passedStack() const;       // number of non-NULL stack slots
};

// Where a generated resume code came from: instruction i of the resume code (for i >=
// prologueEnd) is instruction i - shift of `original`.
struct ResumeOrigin {
  PyCodeObject* original = nullptr;  // borrowed: its resume codes are forgotten when it dies
  int shift = 0;
  int prologueEnd = 0;
};

// The resume function body that continues `orig` at `at`. Null with `error` set (and no
// Python error) when the code cannot be generated.
Ref resumeCode(PyCodeObject* orig, const FrameLayout& at, std::string* error);

// The break code: starts at `at` (the first instruction of the breaking sequence, e.g.
// KW_NAMES/PRECALL before a CALL), runs up to and including instruction `last`, then
// continues through successors[0] (the instruction after `last`) and, for a conditional
// jump, successors[1] (its target).
Ref breakCode(PyCodeObject* orig, const FrameLayout& at, int last, const std::vector<FrameLayout>& successors,
              std::string* error);

// The break code of a break before instruction `at.index` that runs nothing natively: it
// calls the continuation at once, for the resume function at `at` (same layout). Used
// where the instruction itself cannot run as a break (a BEFORE_WITH, a FOR_ITER): the graph
// of what came before is kept, and the rest of the frame goes on from there.
Ref emptyBreakCode(PyCodeObject* orig, const FrameLayout& at, std::string* error);

// The origin of a resume code, or null for any other code object.
const ResumeOrigin* resumeOrigin(PyCodeObject* code);
// Whether `code` is a generated break code (never traced: it is the native part).
bool isBreakCode(PyCodeObject* code);
// Which of `code`'s co_varnames may be read before being written when execution goes on
// at instruction `index` (backward liveness over jumps and exception edges). A dead local
// is not passed to generated code (it would only be guarded and kept alive). Locals are
// all live when the code can read its frame's locals by name (locals(), vars(), eval,
// exec, dir) and the first argument is live when it uses zero-argument super().
std::vector<bool> liveLocals(PyCodeObject* code, int index);
// The localsplus indices of `code`'s cells, in the order they appear in generated code's
// closure.
std::vector<int> cellSlots(PyCodeObject* code);
// Whether cdynamo can generate resume code for `orig` at all; `why` says why not.
bool canResume(PyCodeObject* orig, std::string* why);
// Forgets every generated code object (cdynamo.reset()).
void clearGenerated();

}  // namespace cdynamo::bytecode
