// The miss path of the frame hook: which code objects are traced at all, whether torch's
// modes let this call compile, compiling a frame on a cache miss (the recompile reason,
// the stance and the recompile policy, the translation with torch's state kept, the new
// entry recorded), and running the entry found or made. Cold: a cache hit never gets here.
#include "frame/frame_internal.h"

#include "frame/compile_lock.h"
#include "graph/torch_refs.h"
#include "support/lookup.h"
#include "support/pyref.h"
#include "support/stats.h"
#include "support/torch_types.h"

#include <chrono>
#include <cstring>
#include <new>
#include <vector>

namespace cdynamo::frame {
namespace internal {
namespace {

int recompile_limit = 8;             // entries per code object and configuration
int accumulated_recompile_limit = 256;  // entries per code object, all configurations
bool fail_on_recompile_limit_hit = false;

// (path prefix, trace?) rules; the longest matching prefix decides; no match: trace.
std::vector<std::pair<std::string, bool>> file_rules;

bool startsWith(const char* s, const std::string& prefix) { return strncmp(s, prefix.c_str(), prefix.size()) == 0; }

}  // namespace

// Cold: is this code object never to be traced?
bool shouldSkip(PyCodeObject* code) {
  if (code->co_flags & (CO_GENERATOR | CO_COROUTINE | CO_ASYNC_GENERATOR | CO_ITERABLE_COROUTINE)) return true;
  const char* file = PyUnicode_AsUTF8(code->co_filename);
  if (!file) {
    PyErr_Clear();
    return true;
  }
  if (file[0] == '<' && strncmp(file, "<frozen", 7) == 0) return true;
  size_t best = 0;
  bool trace = true;
  for (const auto& [prefix, traced] : file_rules) {
    if (prefix.size() > best && startsWith(file, prefix)) {
      best = prefix.size();
      trace = traced;
    }
  }
  return !trace;
}

// The first entry of `config` whose guards pass, or null.
cache::EntryPtr findEntry(cache::CodeExtra* extra, PyObject* config, const FrameView& view, size_t* index) {
  for (size_t i = 0; i < extra->entries.size(); ++i) {
    cache::EntryPtr entry = extra->entries[i];  // held: a compile elsewhere may edit the list
    if (entry->config.get() != config) continue;
    bool ok;
    {
      ContextOff off;
      ok = entry->matches(view);
    }
    if (ok) {
      *index = i;
      return entry;
    }
  }
  return nullptr;
}

// Runs `entry` on the frame; falls back to native evaluation (and drops the entry) if its
// guards reject the frame, which only a bug in guard building could cause.
PyObject* runEntry(PyThreadState* ts, _PyInterpreterFrame* frame, cache::CodeExtra* extra,
                   const cache::EntryPtr& entry, const FrameView& view) {
  bool matched = false;
  PyObject* result;
  {
    ContextOff off;
    result = entry->tryRun(view, &matched);
  }
  if (matched) return result && entry->brk ? entry->continueAfterBreak(view, result) : result;
  trace::Unsupported u;
  u.reason = "internal: guards reject the frame they were built from";
  {
    // Which guard (cold: a bug in guard building, or the backend changed what was guarded).
    ContextOff off;
    std::string which = entry->guards.explainFailure(view);
    if (PyErr_Occurred()) PyErr_Clear();
    if (!which.empty()) u.reason += ": " + which;
  }
  for (size_t i = 0; i < extra->entries.size(); ++i)
    if (extra->entries[i] == entry) extra->entries.erase(extra->entries.begin() + i);
  u.function = codeName(layout::code(frame));
  recordNative(extra, layout::code(frame), u);
  return evalDefault(ts, frame, 0);
}

namespace {

// Cold: whether a frame holds a tensor or a module in its locals (directly, or one level
// down in a list, tuple or dict), as torch._dynamo's has_tensor_in_frame decides whether
// fail_on_recompile applies to it.
bool hasTensorInFrame(const FrameView& view) {
  ContextOff off;  // isinstance may run Python code (torch.Tensor's metaclass)
  auto direct = [](PyObject* o) { return o && (isTensor(o) || isModule(o)); };
  for (int i = 0; i < view.nfast; ++i) {
    PyObject* o = view.fast[i];
    if (!o) continue;
    if (direct(o)) return true;
    if (PyList_Check(o) || PyTuple_Check(o)) {
      Ref seq = Ref::steal(PySequence_Fast(o, ""));
      if (!seq) return PyErr_Clear(), false;
      for (Py_ssize_t k = 0; k < PySequence_Fast_GET_SIZE(seq.get()); ++k)
        if (direct(PySequence_Fast_GET_ITEM(seq.get(), k))) return true;
    } else if (PyDict_Check(o)) {
      PyObject *key, *value;
      Py_ssize_t pos = 0;
      while (PyDict_Next(o, &pos, &key, &value))
        if (direct(value)) return true;
    }
  }
  return false;
}

// torch's global state around a translation (cdynamo/_internal/torch_state.py): the backend may run the
// graph, which sets grad mode and autocast as the program did. Cold path.
PyObject* stateFn(const char* name) {
  PyObject* mod = lookup(Obj::cdynamo_state);
  return mod ? PyObject_GetAttrString(mod, name) : nullptr;
}

Ref saveTorchState() {
  Ref fn = Ref::steal(stateFn("save"));
  return fn ? Ref::steal(PyObject_CallNoArgs(fn.get())) : Ref();
}

// Restores the snapshot; keeps the error in flight, if any (the translation's). False with
// an error set when restoring itself failed and no error was in flight.
bool restoreTorchState(PyObject* saved) {
  PyObject *type, *value, *tb;
  PyErr_Fetch(&type, &value, &tb);
  Ref fn = Ref::steal(stateFn("restore"));
  Ref r = fn ? Ref::steal(PyObject_CallOneArg(fn.get(), saved)) : Ref();
  if (type) {
    if (!r) PyErr_Clear();
    PyErr_Restore(type, value, tb);
    return true;
  }
  return static_cast<bool>(r);
}

// An Unsupported naming the code object's own function, file and first line (a frame
// that runs natively for `reason`).
trace::Unsupported unsupportedAt(PyCodeObject* code, std::string reason) {
  trace::Unsupported u;
  u.reason = std::move(reason);
  u.function = codeName(code);
  const char* file = PyUnicode_AsUTF8(code->co_filename);
  if (!file) PyErr_Clear();
  u.filename = file ? file : "?";
  u.line = code->co_firstlineno;
  return u;
}

// Entries that guard an object which has died since can never pass again (a function or
// class made at run time, a module that was freed): dropped, so they neither cost a
// guard run nor count against the recompile limit.
void dropExpiredEntries(cache::CodeExtra* extra) {
  for (size_t i = extra->entries.size(); i-- > 0;)
    if (extra->entries[i]->guards.expired()) extra->entries.erase(extra->entries.begin() + static_cast<std::ptrdiff_t>(i));
}

// The entries of one configuration before a miss: the most recent (null: the miss is a
// first compile, not a recompile) and how many. Entries of other compiled wrappers don't
// count.
struct SameConfig {
  cache::EntryPtr previous;
  int count = 0;
};

SameConfig sameConfigEntries(const cache::CodeExtra* extra, PyObject* config) {
  SameConfig same;
  for (const cache::EntryPtr& e : extra->entries)
    if (e->config.get() == config) {
      if (!same.previous) same.previous = e;
      ++same.count;
    }
  return same;
}

// The recompile reason: which guard of each entry of this configuration rejected the
// call (most recent first), one per line. Built on a miss, never on a hit.
std::string recompileReason(const cache::CodeExtra* extra, PyObject* config, const FrameView& view) {
  std::string why;
  ContextOff off;  // reading a guard again may run Python code (reprs, __eq__)
  for (const cache::EntryPtr& e : extra->entries) {
    if (e->config.get() != config) continue;
    std::string r = e->guards.explainFailure(view);
    if (r.empty()) continue;
    if (!why.empty()) why += "\n    - ";
    why += r;
  }
  return why;
}

// torch._dynamo.optimize(guard_fail_fn=...): the configuration hands the reason to it
// (CompileConfig._guard_failed) before anything is compiled again. Raises nothing: the
// function's errors are reported as unraisable.
void reportGuardFailure(PyObject* config, const std::string& why, PyCodeObject* code) {
  ContextOff off;  // the user's function is Python code: never intercepted
  Ref fn = Ref::steal(PyObject_GetAttrString(config, "guard_fail_fn"));
  if (!fn) {
    PyErr_Clear();
  } else if (fn.get() != Py_None) {
    Ref r = Ref::steal(PyObject_CallMethod(config, "_guard_failed", "sO", why.c_str(), code));
    if (!r) PyErr_WriteUnraisable(fn.get());
  }
}

// What a miss does: translate the frame, or instead run it natively (LimitHit: because of
// the recompile limit), or raise (Error: the error is set).
enum class MissStep { Translate, Native, LimitHit, Error };

// set_stance: nothing new is compiled (Native: the frame runs natively, nothing is
// marked), or a compile is an error (Error, RuntimeError set); Translate otherwise.
MissStep applyStance(const cache::CodeExtra* extra, const FrameView& view, bool recompile, const std::string& why) {
  PyCodeObject* code = view.code;
  if (stance == Stance::EagerOnRecompile) {
    emitEvent("eager_on_recompile", code, nullptr, nullptr, why, 0, extra->entries.size());
    return MissStep::Native;
  }
  if (stance == Stance::FailOnRecompile && (recompile || hasTensorInFrame(view))) {
    const char* file = PyUnicode_AsUTF8(code->co_filename);
    const char* name = PyUnicode_AsUTF8(code->co_name);
    PyErr_Clear();
    std::string msg = std::string("Detected recompile when torch.compile stance is 'fail_on_recompile'. filename: '") +
                      (file ? file : "?") + "', function name: '" + (name ? name : "?") +
                      "', line number: " + std::to_string(code->co_firstlineno);
    if (!why.empty()) msg += "\n    triggered by the following guard failure(s):\n    - " + why;
    PyErr_SetString(PyExc_RuntimeError, msg.c_str());
    return MissStep::Error;
  }
  return MissStep::Translate;
}

// A recompile past a limit (the code object's `same_config` entries of this
// configuration, or all its entries): recorded and handed to the event sink, then raised
// as cdynamo.FailOnRecompileLimitHit under config.fail_on_recompile_limit_hit (Error), or
// warned once per code object and configuration (LimitHit; Error when warnings are errors).
MissStep refuseOverLimit(cache::CodeExtra* extra, PyObject* config, PyCodeObject* code, int same_config,
                         bool over_specific, const std::string& why) {
  std::string last = why.substr(0, why.find('\n'));
  std::string limit = over_specific ? "config.recompile_limit (" + std::to_string(recompile_limit) + ")"
                                    : "config.accumulated_recompile_limit (" +
                                          std::to_string(accumulated_recompile_limit) + ")";
  std::string msg = "cdynamo: " + codeName(code) + " hit " + limit + "; calls its " + std::to_string(same_config) +
                    " cache entries do not accept run natively. Last failing guard: " +
                    (last.empty() ? std::string("?") : last);
  recompile_records.push_back(RecompileRecord{codeName(code), why, false});
  emitEvent("recompile_limit", code, nullptr, nullptr, why, 0, extra->entries.size());
  if (fail_on_recompile_limit_hit) {
    ContextOff off;
    PyObject* excmod = lookup(Obj::cdynamo_exc);
    Ref cls = excmod ? Ref::steal(PyObject_GetAttrString(excmod, "FailOnRecompileLimitHit")) : Ref();
    if (cls) PyErr_SetString(cls.get(), (msg + " (config.fail_on_recompile_limit_hit)").c_str());
    return MissStep::Error;
  }
  bool warned = false;
  for (PyObject* c : extra->limit_warned) warned |= c == config;
  if (!warned) {
    extra->limit_warned.push_back(config);
    ContextOff off;  // the warnings machinery runs Python code
    if (log_channels & kLogRecompiles) emitLog("recompiles", msg);
    if (PyErr_WarnEx(PyExc_UserWarning, msg.c_str(), 1) < 0) return MissStep::Error;  // warnings turned into errors
  }
  return MissStep::LimitHit;
}

// The recompile policy, on a recompile: past a limit the entries made so far keep running
// on what they accept; this call (and every later one they do not accept) runs natively
// (refuseOverLimit). Within the limits the recompile is counted, recorded and logged
// (Translate).
MissStep applyRecompilePolicy(cache::CodeExtra* extra, PyObject* config, PyCodeObject* code, int same_config,
                              const std::string& why) {
  const int total = static_cast<int>(extra->entries.size());
  const bool over_specific = same_config >= recompile_limit;
  const bool over_total = total >= accumulated_recompile_limit;
  if (over_specific || over_total) return refuseOverLimit(extra, config, code, same_config, over_specific, why);
  ++stats().recompiles;
  recompile_records.push_back(RecompileRecord{codeName(code), why, true});
  if (log_channels & kLogRecompiles) {
    ContextOff off;  // logging runs Python code: never intercepted (the compile lock is held)
    emitLog("recompiles", "Recompiling function " + codeName(code) +
                              "\n    triggered by the following guard failure(s):\n    - " + why);
  }
  return MissStep::Translate;
}

// Translates the frame into *r, with the compile context off and torch's global state
// saved before and restored after; *ns: the time it took. Memory running out in the tracer
// gives an Unsupported result. False with an error set when torch's state could not be
// saved or restored, or the code's size memory could not be made.
bool translateFrame(cache::CodeExtra* extra, PyObject* config, const FrameView& view, trace::TranslateResult* r,
                    uint64_t* ns) {
  PyCodeObject* code = view.code;
  ContextOff off;
  Ref pin = Ref::borrow(reinterpret_cast<PyObject*>(code));  // the extra dies with the code
  Ref saved = saveTorchState();
  if (!saved) return false;  // cannot snapshot torch's state: translating could leave it changed
  auto start = std::chrono::steady_clock::now();
  if (!extra->shape_memory) {
    extra->shape_memory = Ref::steal(PyDict_New());
    if (!extra->shape_memory) return false;
  }
  try {
    *r = trace::translate(view, config, extra->shape_memory.get());
  } catch (const std::bad_alloc&) {
    // Memory ran out in the tracer's own structures (a program growing a list to millions
    // of items, each modelled and guarded): the frame runs natively, where the program
    // meets its own MemoryError, if any, as eagerly; never an abort of the process.
    PyErr_Clear();
    *r = trace::TranslateResult{};
    r->unsupported = unsupportedAt(code, "out of memory while tracing (std::bad_alloc): the frame runs natively");
  }
  *ns = static_cast<uint64_t>(
      std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::steady_clock::now() - start).count());
  stats().translate_ns += *ns;
  return restoreTorchState(saved.get());
}

// As torch._dynamo (InstructionTranslator._return raises SkipFrame: 'No ops traced for
// the FX graph'): a frame whose trace, first or a recompile, recorded no op and had no
// graph break runs natively from now on, its entries unused (the frames it calls are
// still captured); not under fullgraph=True, where the empty graph is the answer, nor
// with config.allow_empty_graphs (torch._dynamo's flag of that name).
// 1: the code is marked native (recorded); 0: the empty entry is used; -1: an error is set.
int declineEmptyTrace(cache::CodeExtra* extra, PyObject* config, PyCodeObject* code, const std::string& why,
                      uint64_t ns) {
  Ref fullgraph = Ref::steal(PyObject_GetAttrString(config, "fullgraph"));
  int allow_empty = fullgraph ? graph::configFlag("allow_empty_graphs") : -1;
  if (allow_empty < 0) return -1;
  if (fullgraph.get() == Py_True || allow_empty) return 0;
  trace::Unsupported u = unsupportedAt(code,
                                       "no op traced (no graph and no graph break): the frame runs natively from now "
                                       "on, as torch._dynamo skips it");
  recordNative(extra, code, u);
  emitEvent("native", code, nullptr, &u, why, ns, extra->entries.size());
  return 1;
}

// Installs a captured frame's new entry first in the code's list, recorded (a graph
// break), logged and handed to the event sink; returns it.
cache::EntryPtr installEntry(cache::CodeExtra* extra, PyCodeObject* code, const cache::EntryPtr& entry,
                             const std::string& why, uint64_t ns) {
  ++stats().frames_captured;
  if (entry->brk) recordBreak(code, *entry);
  extra->state = cache::CodeState::Active;
  extra->entries.insert(extra->entries.begin(), entry);
  if (log_channels & kLogGuards) {
    ContextOff off;
    emitLog("guards", "guards of " + entry->name + ":\n" + entry->guards.describe());
  }
  emitEvent("captured", code, entry.get(), nullptr, why, ns, extra->entries.size());
  return entry;
}

// What a translation gives: its new entry, installed; or null, when it raised (*error:
// a user-facing error, a backend failure or fullgraph) or the frame runs natively (the
// code marked native, recorded).
cache::EntryPtr acceptTranslation(cache::CodeExtra* extra, PyObject* config, PyCodeObject* code,
                                  trace::TranslateResult& r, const std::string& why, uint64_t ns, bool* error) {
  if (r.error) {
    emitEvent("error", code, nullptr, nullptr, why, ns, extra->entries.size());
    *error = true;
    return nullptr;
  }
  if (!r.entry) {
    recordNative(extra, code, r.unsupported);
    emitEvent("native", code, nullptr, &r.unsupported, why, ns, extra->entries.size());
    return nullptr;
  }
  if (r.entry->no_ops) {
    const int declined = declineEmptyTrace(extra, config, code, why, ns);
    if (declined != 0) {
      *error = declined < 0;
      return nullptr;
    }
  }
  return installEntry(extra, code, r.entry, why, ns);
}

}  // namespace

// A miss: the recompile reason (on a recompile), the stance and the recompile policy
// decide whether to translate; the translation's entry is installed, or the code marked.
cache::EntryPtr compileMiss(cache::CodeExtra* extra, PyObject* config, const FrameView& view, bool* error,
                            bool* limit_hit) {
  PyCodeObject* code = view.code;
  *error = false;
  *limit_hit = false;
  ++stats().cache_misses;
  dropExpiredEntries(extra);
  // A recompile is a miss on a code object that already has entries for this configuration.
  const SameConfig same = sameConfigEntries(extra, config);
  const bool recompile = same.previous != nullptr;
  const std::string why = recompile ? recompileReason(extra, config, view) : std::string();
  if (recompile && !why.empty()) reportGuardFailure(config, why, code);
  MissStep step = applyStance(extra, view, recompile, why);
  if (step == MissStep::Translate && recompile) step = applyRecompilePolicy(extra, config, code, same.count, why);
  if (step != MissStep::Translate) {
    *error = step == MissStep::Error;
    *limit_hit = step == MissStep::LimitHit;
    return nullptr;
  }
  emitEvent("start", code, nullptr, nullptr, why, 0, extra->entries.size());
  trace::TranslateResult r;
  uint64_t ns = 0;
  if (!translateFrame(extra, config, view, &r, &ns)) {
    *error = true;
    return nullptr;
  }
  return acceptTranslation(extra, config, code, r, why, ns, error);
}

// Cold (a cache miss): whether torch's mode stacks forbid compiling this call
// (cdynamo/_internal/torch_state.py mode_refusal): a TorchFunctionMode other than a torch.device context,
// torch function dispatch disabled, or a TorchDispatchMode. The frame then runs natively
// this once and nothing is marked: the modes are the caller's state, not the code's (the
// entries' guards already reject calls under other mode stacks: tracer.cpp). The reason is
// recorded with the native frames, once per code object and reason. Under fullgraph=True a
// function mode is an Unsupported error (torch._dynamo would trace it); a dispatch mode is
// not (torch._dynamo runs such frames natively whatever fullgraph says).
// 1: run natively; 0: compile; -1: an error is set.
int modeRefusal(cache::CodeExtra* extra, PyCodeObject* code, PyObject* config) {
  ContextOff off;  // the query is Python code: never intercepted
  PyObject* query = lookup(Obj::cdynamo_state_mode_refusal);
  Ref r = query ? Ref::steal(PyObject_CallNoArgs(query)) : Ref();
  if (!r) return -1;
  if (r.get() == Py_None) return 0;
  if (!PyTuple_Check(r.get()) || PyTuple_GET_SIZE(r.get()) != 2 || !PyUnicode_Check(PyTuple_GET_ITEM(r.get(), 0))) {
    PyErr_SetString(PyExc_SystemError, "cdynamo._internal.torch_state.mode_refusal gave neither None nor (reason, strict)");
    return -1;
  }
  const char* reason = PyUnicode_AsUTF8(PyTuple_GET_ITEM(r.get(), 0));
  if (!reason) return -1;
  const int strict = PyObject_IsTrue(PyTuple_GET_ITEM(r.get(), 1));
  if (strict < 0) return -1;
  if (strict) {
    Ref fullgraph = Ref::steal(PyObject_GetAttrString(config, "fullgraph"));
    if (!fullgraph) return -1;
    if (fullgraph.get() == Py_True) {
      PyObject* unsupported = lookup(Obj::cdynamo_exc_Unsupported);
      if (!unsupported) return -1;
      PyErr_Format(unsupported, "%s (called in %s)", reason, codeName(code).c_str());
      return -1;
    }
  }
  if (!strict) emitEvent("dispatch_mode", code, nullptr, nullptr, "", 0, extra->entries.size());  // counted by the summary
  if (extra->mode_reported != reason) {
    extra->mode_reported = reason;
    CompileLock lock;
    NativeFrame nf{codeName(code), "", std::string("this call runs natively: ") + reason, "", code->co_firstlineno};
    Ref file = Ref::borrow(code->co_filename);
    if (PyUnicode_Check(file.get()))
      if (const char* f = PyUnicode_AsUTF8(file.get())) nf.filename = f;
    PyErr_Clear();
    native_frames.push_back(nf);
    if (log_channels & kLogGraphBreaks)
      emitLog("graph_breaks", "frame " + codeName(code) + " runs natively this call: " + reason);
  }
  return 1;
}

}  // namespace internal

using namespace internal;

void setFileRules(std::vector<std::pair<std::string, bool>> rules) { file_rules = std::move(rules); }
void setCacheSizeLimit(int limit) { recompile_limit = limit; }
void setRecompilePolicy(int limit, int accumulated, bool fail_on_hit) {
  recompile_limit = limit;
  accumulated_recompile_limit = accumulated;
  fail_on_recompile_limit_hit = fail_on_hit;
}

}  // namespace cdynamo::frame
