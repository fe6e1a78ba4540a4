// The PEP 523 frame hook and the compile context it serves.
//
// The hook is installed (per interpreter) only while at least one thread runs a compiled
// function, and acts only on threads whose thread-local compile context is set; all other
// frames go straight to CPython's default evaluator. Inside, it consults the code
// object's cache (csrc/cache), runs a matching entry without evaluating the frame, or
// translates the frame (csrc/trace) on a miss. The context is cleared while guards,
// compiled graphs and the tracer run, so their own Python code is never intercepted.
#pragma once
#include <Python.h>

#include <string>
#include <vector>

namespace cdynamo::frame {

// Calls fn(*args, **kwnames) with the compile context `config` active on this thread;
// restores the previous context and hook state on every path. Vectorcall convention.
PyObject* callCompiled(PyObject* config, PyObject* fn, PyObject* const* args, size_t nargsf,
                       PyObject* kwnames);

// Calls fn(*args, **kwnames) with no compile context on this thread (cdynamo.disable with
// recursive=True): fn and everything it calls run as plain Python, except a compiled
// function called inside, which sets its own context. Restores the context on every path.
PyObject* callDisabled(PyObject* fn, PyObject* const* args, size_t nargsf, PyObject* kwnames);

// Which files are traced: (co_filename prefix, traced?) rules where the longest matching
// prefix decides and no match means traced (e.g. torch/ skipped, torch/nn/modules/
// traced, torch/nn/modules/module.py skipped). Set once by the Python package.
void setFileRules(std::vector<std::pair<std::string, bool>> rules);

// Drops every cache entry and every per-code decision. Waits for a compile in flight on
// another thread; called while this thread compiles (from a backend), it is done when that
// compile ends (Note [The compile lock] in compile_lock.h).
void reset();

// Makes the child of os.fork() drop the compile lock and call counts of the threads that
// did not survive the fork. Called once at import.
void installForkHandler();

// A frame that could not be captured and ran natively.
struct NativeFrame {
  std::string function, filename, reason, user_stack;
  int line = 0;
};
const std::vector<NativeFrame>& nativeFrames();
// Graph breaks compiled since the last reset (one per break entry), same fields.
const std::vector<NativeFrame>& graphBreaks();

// Log channels (bit mask), set from CDYNAMO_LOGS by the Python package.
enum LogChannel : unsigned {
  kLogRecompiles = 1u << 0,
  kLogGraphBreaks = 1u << 1,
  kLogGuards = 1u << 2,
  kLogGraphCode = 1u << 3,
  kLogBytecode = 1u << 4,
};
void setLogChannels(unsigned mask);
void setCacheSizeLimit(int limit);
// The recompile policy (cdynamo.config): at most `recompile_limit` entries per code object
// and configuration, `accumulated_limit` over all configurations; past either, a miss runs
// natively (one warning per code object and configuration) or, with `fail_on_hit`, raises
// cdynamo.FailOnRecompileLimitHit. Entries already made keep running.
void setRecompilePolicy(int recompile_limit, int accumulated_limit, bool fail_on_hit);

// A recompile (or a miss refused by the policy) and why: the guard of each entry of the
// same configuration that rejected the call, in the user's terms.
struct RecompileRecord {
  std::string function;  // "f (file:line)"
  std::string reason;
  bool compiled = true;  // false: past the recompile limit, the call ran natively
};
const std::vector<RecompileRecord>& recompileRecords();

// torch.compiler.set_stance's stances, as torch._dynamo implements them: ForceEager calls
// compiled functions as plain Python; EagerOnRecompile compiles nothing new (a miss runs
// natively, cached entries still run); FailOnRecompile raises RuntimeError on a miss of a
// frame that has a tensor or module in its locals (or already has entries).
enum class Stance : int { Default = 0, ForceEager = 1, EagerOnRecompile = 2, FailOnRecompile = 3 };
void setStance(Stance stance);

// A Python callable (or null) called on the cold path, with the compile context off, with
// one dict per translation outcome (cdynamo._events: the run summary, the structured trace
// and the capture report read it). Errors it raises are reported as unraisable.
void setEventSink(PyObject* sink);

}  // namespace cdynamo::frame
