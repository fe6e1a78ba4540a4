// What the files of the frame stage share among themselves (not an interface of the stage:
// eval_frame.h is). The stage is split by role:
//   eval_frame.cpp    the hook, its install/uninstall, the thread's compile context and the
//                     hit path (callCompiled, evalFrame);
//   compile_miss.cpp  the miss path: which code is traced, compiling a frame, recording the
//                     new entry, running it;
//   compile_lock.cpp  the compile lock and reset();
//   reporting.cpp     what is recorded and reported of each outcome (native frames, graph
//                     breaks, recompiles, logs, the event sink, a failed compile).
// Like csrc/bytecode, this stage reads CPython's internal frame layout; everything
// downstream sees a FrameView.
#pragma once
#define Py_BUILD_CORE 1
#include <Python.h>
#include <internal/pycore_frame.h>
#undef Py_BUILD_CORE

// The frame layout and the eval-frame protocol of the version being built against.
#if PY_MINOR_VERSION == 11
#include "frame/frame_layout_311.h"
#elif PY_MINOR_VERSION == 12
#include "frame/frame_layout_312.h"
#else
#error "cdynamo has no frame layout for this Python version"
#endif

#include "cache/code_cache.h"
#include "frame/eval_frame.h"
#include "support/frame_view.h"
#include "trace/tracer.h"

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

namespace cdynamo::frame::internal {

// Clears the thread's compile context for a scope (guards, graphs and the tracer run
// their own Python code, which must not be intercepted). Defined beside the context
// (eval_frame.cpp), where the hit path inlines it.
class ContextOff {
 public:
  ContextOff();
  ~ContextOff();
  ContextOff(const ContextOff&) = delete;
  ContextOff& operator=(const ContextOff&) = delete;

 private:
  PyObject* saved_;
};

// Every path that hands the hook's frame to CPython goes through here (or evalOther), so the
// version's protocol knows the frame was evaluated (Note [The callee clears the frame]).
inline PyObject* evalDefault(PyThreadState* ts, _PyInterpreterFrame* frame, int throw_flag) {
  layout::noteEvaluated();
  return _PyEval_EvalFrameDefault(ts, frame, throw_flag);
}

// ---- eval_frame.cpp --------------------------------------------------------------------
extern Stance stance;

// ---- compile_miss.cpp ------------------------------------------------------------------
// Cold: is this code object never to be traced (generators, frozen modules, file rules)?
bool shouldSkip(PyCodeObject* code);
// The first entry of `config` whose guards pass (its index in *index), or null.
cache::EntryPtr findEntry(cache::CodeExtra* extra, PyObject* config, const FrameView& view, size_t* index);
// Cold path, under the compile lock: translate the frame and install the new entry, or
// mark the code native. Returns the entry to run, or null: the frame runs natively
// (*limit_hit: because of the recompile limit), or *error is set with a Python error.
cache::EntryPtr compileMiss(cache::CodeExtra* extra, PyObject* config, const FrameView& view, bool* error,
                            bool* limit_hit);
// Runs a newly found or compiled `entry` on the frame (a new reference, or null with an
// error set); falls back to native evaluation, dropping the entry, if its guards reject it.
PyObject* runEntry(PyThreadState* ts, _PyInterpreterFrame* frame, cache::CodeExtra* extra,
                   const cache::EntryPtr& entry, const FrameView& view);
// Cold (a cache miss): whether torch's mode stacks forbid compiling this call.
// 1: run natively; 0: compile; -1: an error is set.
int modeRefusal(cache::CodeExtra* extra, PyCodeObject* code, PyObject* config);

// ---- reporting.cpp ---------------------------------------------------------------------
extern unsigned log_channels;
extern std::vector<NativeFrame> native_frames;
extern std::vector<NativeFrame> graph_breaks;
extern std::vector<RecompileRecord> recompile_records;

// "qualname (file:line)" of a code object; never raises.
std::string codeName(PyCodeObject* code);
// Hands a message to cdynamo._logging's channel; clears any error.
void emitLog(const char* channel, const std::string& message);
// Marks the code native for `u`'s reason, recorded and logged.
void recordNative(cache::CodeExtra* extra, PyCodeObject* code, const trace::Unsupported& u);
// Cold: a new entry ends in a graph break. Recorded for explain/stats, and logged.
void recordBreak(PyCodeObject* code, const runtime::CompiledEntry& entry);
// Cold: hands one translation outcome to the event sink (see setEventSink). `entry` is set
// for a captured frame, `u` for one that runs natively; `why` is the recompile reason.
// Keeps the error in flight, if any; its own errors are reported as unraisable.
void emitEvent(const char* kind, PyCodeObject* code, const runtime::CompiledEntry* entry,
               const trace::Unsupported* u, const std::string& why, uint64_t ns, size_t num_entries);
// Cold: the translation raised; the frame's result (natively, with config.suppress_errors)
// or null with the error to raise set.
PyObject* compileFailed(PyThreadState* ts, _PyInterpreterFrame* frame, cache::CodeExtra* extra);

}  // namespace cdynamo::frame::internal
