// CPython 3.11 frame hook. This is one of the two places that read CPython's internal
// frame layout (the other is csrc/bytecode); everything downstream sees a FrameView.
#define Py_BUILD_CORE 1
#include <Python.h>
#include <internal/pycore_frame.h>
#undef Py_BUILD_CORE

#include "bytecode/resume.h"
#include "cache/code_cache.h"
#include "frame/eval_frame.h"
#include "graph/fake_autograd.h"
#include "graph/torch_refs.h"
#include "support/lookup.h"
#include "support/pyref.h"
#include "support/stats.h"
#include "support/torch_types.h"
#include "trace/protocol/calls.h"
#include "trace/tracer.h"

#include <chrono>
#include <cstring>
#include <initializer_list>
#include <new>
#include <vector>

#include <pthread.h>

#include <pythread.h>


namespace cdynamo::frame {
namespace {

// The compile configuration of the compiled function running on this thread (borrowed:
// callCompiled's caller holds it), or null when cdynamo is not active here.
thread_local PyObject* tls_config = nullptr;
// Set while a frame that hit its recompile limit runs natively (torch._dynamo's
// skip_code_recursive_on_recompile_limit_hit, RUN_ONLY): the frames it calls use the cache
// entries they have but compile nothing new.
thread_local bool tls_run_only = false;
// Set by compileMiss when it declined because of the recompile limit.
thread_local bool tls_limit_hit = false;
int threads_active = 0;  // guarded by the GIL
unsigned log_channels = 0;
int recompile_limit = 8;             // entries per code object and configuration
int accumulated_recompile_limit = 256;  // entries per code object, all configurations
bool fail_on_recompile_limit_hit = false;
Stance stance = Stance::Default;
Ref& event_sink = *new Ref();  // Note [Python references in statics] (support/pyref.h)

// (path prefix, trace?) rules; the longest matching prefix decides; no match: trace.
std::vector<std::pair<std::string, bool>> file_rules;
std::vector<NativeFrame> native_frames;
std::vector<NativeFrame> graph_breaks;
std::vector<RecompileRecord> recompile_records;

// Clears the thread's compile context for a scope (guards, graphs and the tracer run
// their own Python code, which must not be intercepted).
struct ContextOff {
  PyObject* saved = tls_config;
  ContextOff() { tls_config = nullptr; }
  ~ContextOff() { tls_config = saved; }
};

bool startsWith(const char* s, const std::string& prefix) { return strncmp(s, prefix.c_str(), prefix.size()) == 0; }

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

FrameView viewOf(_PyInterpreterFrame* frame) {
  FrameView v;
  v.code = frame->f_code;
  v.function = reinterpret_cast<PyObject*>(frame->f_func);
  v.fast = frame->localsplus;
  v.nfast = frame->f_code->co_nlocalsplus;
  v.globals = frame->f_globals;
  v.builtins = frame->f_builtins;
  v.closure = frame->f_func ? frame->f_func->func_closure : nullptr;
  return v;
}

void emitLog(const char* channel, const std::string& message) {
  PyObject* mod = lookup(Obj::cdynamo_logging);
  Ref r = mod ? Ref::steal(PyObject_CallMethod(mod, "emit", "ss", channel, message.c_str())) : Ref();
  if (!r) PyErr_Clear();
}

std::string codeName(PyCodeObject* code) {
  const char* q = PyUnicode_AsUTF8(code->co_qualname);
  const char* f = PyUnicode_AsUTF8(code->co_filename);
  PyErr_Clear();
  return std::string(q ? q : "?") + " (" + (f ? f : "?") + ":" + std::to_string(code->co_firstlineno) + ")";
}

void recordNative(cache::CodeExtra* extra, PyCodeObject* code, const trace::Unsupported& u) {
  extra->state = cache::CodeState::Native;
  extra->native_reason = u.reason;
  ++stats().frames_native;
  NativeFrame nf{u.function, u.filename, u.reason, u.user_stack, u.line};
  if (nf.function.empty()) nf.function = codeName(code);
  native_frames.push_back(nf);
  ContextOff off;  // logging runs Python code (a handler may be in traced files): never intercepted
  if (log_channels & kLogGraphBreaks)
    emitLog("graph_breaks", "frame " + codeName(code) + " runs natively: " + u.reason + "\n  at " + u.filename +
                                ":" + std::to_string(u.line) + "\n" + u.user_stack);
}

// Cold: a new entry ends in a graph break. Recorded for explain/stats, and logged.
void recordBreak(PyCodeObject* code, const runtime::CompiledEntry& entry) {
  ContextOff off;  // logging runs Python code: never intercepted (the compile lock is held)
  const runtime::GraphBreakInfo& b = entry.break_info;
  graph_breaks.push_back(NativeFrame{codeName(code), b.filename, b.reason, b.user_stack, b.line});
  if (log_channels & kLogGraphBreaks)
    emitLog("graph_breaks", "Graph break in " + codeName(code) + ": " + b.reason + "\n  at " + b.filename + ":" +
                                std::to_string(b.line) + "\n" + b.user_stack);
  if (log_channels & kLogBytecode) {
    PyObject* mod = lookup(Obj::cdynamo_logging);
    Ref r = mod ? Ref::steal(PyObject_CallMethod(mod, "emit_bytecode", "OOO", code, entry.brk->break_code.get(),
                                                 entry.brk->resume_table.get()))
                : Ref();
    if (!r) PyErr_Clear();
  }
}

// Cold: hands one translation outcome to the event sink (see setEventSink). `entry` is set
// for a captured frame, `u` for one that runs natively; `why` is the recompile reason.
void emitEvent(const char* kind, PyCodeObject* code, const runtime::CompiledEntry* entry,
               const trace::Unsupported* u, const std::string& why, uint64_t ns, size_t num_entries) {
  if (!event_sink) return;
  ContextOff off;
  PyObject *exc_type, *exc_value, *exc_tb;  // an "error" outcome has the user's error pending
  PyErr_Fetch(&exc_type, &exc_value, &exc_tb);
  struct Restore {
    PyObject *t, *v, *tb;
    ~Restore() { PyErr_Restore(t, v, tb); }
  } restore{exc_type, exc_value, exc_tb};
  Ref d = Ref::steal(Py_BuildValue("{s:s,s:O,s:K,s:n}", "kind", kind, "code", code, "translate_ns",
                                   static_cast<unsigned long long>(ns), "num_entries",
                                   static_cast<Py_ssize_t>(num_entries)));
  if (!d) return PyErr_WriteUnraisable(event_sink.get());
  auto set = [&](const char* key, PyObject* value) {  // steals value
    Ref v = Ref::steal(value);
    if (v && PyDict_SetItemString(d.get(), key, v.get()) == 0) return true;
    return false;
  };
  auto where = [](const std::string& reason, const std::string& file, int line, const std::string& fn,
                  const std::string& stack) {
    return Py_BuildValue("{s:s,s:s,s:i,s:s,s:s}", "reason", reason.c_str(), "filename", file.c_str(), "line", line,
                         "function", fn.c_str(), "user_stack", stack.c_str());
  };
  bool ok = set("recompile_reason", why.empty() ? Py_NewRef(Py_None) : PyUnicode_FromString(why.c_str()));
  if (ok && entry) {
    std::string guards = entry->guards.describe();
    ok = set("name", PyUnicode_FromString(entry->name.c_str())) && set("guards", PyUnicode_FromString(guards.c_str())) &&
         set("num_guards", PyLong_FromSsize_t(static_cast<Py_ssize_t>(entry->guards.numChecks()))) &&
         set("graph_module", Py_NewRef(entry->graph_module ? entry->graph_module.get() : Py_None)) &&
         set("guard_sites", entry->guards.describeSites());
    if (ok && entry->brk) {
      const runtime::GraphBreakInfo& b = entry->break_info;
      ok = set("graph_break", where(b.reason, b.filename, b.line, codeName(code), b.user_stack));
    }
  }
  if (ok && u) ok = set("native", where(u->reason, u->filename, u->line, u->function, u->user_stack));
  if (!ok) return PyErr_WriteUnraisable(event_sink.get());
  Ref r = Ref::steal(PyObject_CallOneArg(event_sink.get(), d.get()));
  if (!r) PyErr_WriteUnraisable(event_sink.get());
}

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

void resetNow();

PyObject* evalDefault(PyThreadState* ts, _PyInterpreterFrame* frame, int throw_flag) {
  return _PyEval_EvalFrameDefault(ts, frame, throw_flag);
}

// Note [The compile lock]
// One compile at a time, process-wide (as in TorchDynamo): a translation runs Python code
// (fake tensors, FX, the backend) that may switch threads at any call, the backend is not
// known to be thread-safe (inductor patches global config), and generated code is memoized
// in a process-wide registry (bytecode/resume.cpp) whose updates are not atomic with respect
// to the Python calls they make. Tracing is bound by the GIL anyway, so serializing it costs
// only the overlap of one thread's tracing with another's GIL-free backend work; cache hits
// never take the lock. The lock:
// * is re-entrant on the thread that holds it: a compiled function called while this thread
//   compiles (from a backend, a property or __torch_function__ run during tracing, a
//   dispatch mode) compiles its own frames instead of waiting for itself;
// * is waited for with the GIL released (the holder may need the GIL to finish);
// * is held only while deciding and translating, never while the frame or an entry runs;
// * serializes reset() with translations: reset() from another thread waits for the one in
//   flight; reset() on the thread that holds the lock (inside a backend) is deferred to the
//   moment the outermost hold ends, so no translation ever sees its state cleared under it.
// State owned by the lock's holder: cache entries being added, native/break records, the
// per-code decisions made on a miss. Everything else the hook touches is read under the GIL.
class CompileLock {
 public:
  CompileLock() {
    unsigned long me = PyThread_get_thread_ident();
    if (depth_ > 0 && owner_ == me) {
      ++depth_;
      return;
    }
    if (!lock_) lock_ = PyThread_allocate_lock();
    if (!PyThread_acquire_lock(lock_, NOWAIT_LOCK)) {
      Py_BEGIN_ALLOW_THREADS
      PyThread_acquire_lock(lock_, WAIT_LOCK);
      Py_END_ALLOW_THREADS
    }
    owner_ = me;
    depth_ = 1;
  }
  ~CompileLock() {
    if (depth_ > 1) {
      --depth_;
      return;
    }
    // Still held (depth 1) while a deferred reset runs: destroying entries may run Python
    // code that compiles on this thread, which then re-enters instead of waiting for itself.
    while (reset_pending_) {
      reset_pending_ = false;
      resetNow();
    }
    depth_ = 0;
    owner_ = 0;
    PyThread_release_lock(lock_);
  }
  CompileLock(const CompileLock&) = delete;
  CompileLock& operator=(const CompileLock&) = delete;

  static void afterForkChild() {
    if (depth_ > 0 && owner_ != PyThread_get_thread_ident()) {
      lock_ = PyThread_allocate_lock();  // the old one stays held by a thread that is gone
      depth_ = 0;
      owner_ = 0;
    }
  }
  static bool heldByThisThread() { return depth_ > 0 && owner_ == PyThread_get_thread_ident(); }
  static void deferReset() { reset_pending_ = true; }

 private:
  // All read and written with the GIL held (the holder keeps them while it waits for the
  // GIL; another thread only compares owner_ with itself).
  static PyThread_type_lock lock_;
  static unsigned long owner_;
  static int depth_;
  static bool reset_pending_;
};
PyThread_type_lock CompileLock::lock_ = nullptr;
unsigned long CompileLock::owner_ = 0;
int CompileLock::depth_ = 0;
bool CompileLock::reset_pending_ = false;

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
  u.function = codeName(frame->f_code);
  recordNative(extra, frame->f_code, u);
  return evalDefault(ts, frame, 0);
}

// torch's global state around a translation (cdynamo/_state.py): the backend may run the
// graph, which sets grad mode and autocast as the program did. Cold path.
PyObject* stateFn(const char* name) {
  static Ref& mod = *new Ref();  // Note [Python references in statics] (support/pyref.h)
  if (!mod) mod = Ref::borrow(lookup(Obj::cdynamo_state));
  return mod ? PyObject_GetAttrString(mod.get(), name) : nullptr;
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

// Cold path, under the compile lock: translate the frame and install the new entry, or
// mark the code native. Returns the entry to run, or null (native, or *error set).
cache::EntryPtr compileMiss(cache::CodeExtra* extra, PyObject* config, const FrameView& view, bool* error) {
  PyCodeObject* code = view.code;
  *error = false;
  ++stats().cache_misses;
  // Entries that guard an object which has died since can never pass again (a function or
  // class made at run time, a module that was freed): dropped, so they neither cost a
  // guard run nor count against the recompile limit.
  for (size_t i = extra->entries.size(); i-- > 0;)
    if (extra->entries[i]->guards.expired()) extra->entries.erase(extra->entries.begin() + static_cast<std::ptrdiff_t>(i));
  // A recompile is a miss on a code object that already has entries for this
  // configuration (entries of other compiled wrappers don't count).
  cache::EntryPtr previous;
  int same_config = 0;
  for (const cache::EntryPtr& e : extra->entries)
    if (e->config.get() == config) {
      if (!previous) previous = e;
      ++same_config;
    }
  // The recompile reason: which guard of each entry of this configuration rejected the
  // call (most recent first). Built here, on a miss, never on a hit.
  std::string why;
  if (previous) {
    ContextOff off;  // reading a guard again may run Python code (reprs, __eq__)
    for (const cache::EntryPtr& e : extra->entries) {
      if (e->config.get() != config) continue;
      std::string r = e->guards.explainFailure(view);
      if (r.empty()) continue;
      if (!why.empty()) why += "\n    - ";
      why += r;
    }
  }
  // torch._dynamo.optimize(guard_fail_fn=...): the configuration hands the reason to it
  // (CompileConfig._guard_failed) before anything is compiled again.
  if (previous && !why.empty()) {
    ContextOff off;  // the user's function is Python code: never intercepted
    Ref fn = Ref::steal(PyObject_GetAttrString(config, "guard_fail_fn"));
    if (!fn) {
      PyErr_Clear();
    } else if (fn.get() != Py_None) {
      Ref r = Ref::steal(PyObject_CallMethod(config, "_guard_failed", "sO", why.c_str(), code));
      if (!r) PyErr_WriteUnraisable(fn.get());
    }
  }
  // set_stance: nothing new is compiled (the frame runs natively, nothing is marked), or
  // a compile is an error.
  if (stance == Stance::EagerOnRecompile) {
    emitEvent("eager_on_recompile", code, nullptr, nullptr, why, 0, extra->entries.size());
    return nullptr;
  }
  if (stance == Stance::FailOnRecompile && (previous || hasTensorInFrame(view))) {
    const char* file = PyUnicode_AsUTF8(code->co_filename);
    const char* name = PyUnicode_AsUTF8(code->co_name);
    PyErr_Clear();
    std::string msg = std::string("Detected recompile when torch.compile stance is 'fail_on_recompile'. filename: '") +
                      (file ? file : "?") + "', function name: '" + (name ? name : "?") +
                      "', line number: " + std::to_string(code->co_firstlineno);
    if (!why.empty()) msg += "\n    triggered by the following guard failure(s):\n    - " + why;
    PyErr_SetString(PyExc_RuntimeError, msg.c_str());
    *error = true;
    return nullptr;
  }
  if (previous) {
    // The recompile policy: past a limit the entries made so far keep running on what they
    // accept; this call (and every later one they do not accept) runs natively.
    const int total = static_cast<int>(extra->entries.size());
    const bool over_specific = same_config >= recompile_limit;
    const bool over_total = total >= accumulated_recompile_limit;
    std::string last = why.substr(0, why.find('\n'));
    if (over_specific || over_total) {
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
        Ref excmod = Ref::borrow(lookup(Obj::cdynamo_exc));
        Ref cls = excmod ? Ref::steal(PyObject_GetAttrString(excmod.get(), "FailOnRecompileLimitHit")) : Ref();
        if (cls) PyErr_SetString(cls.get(), (msg + " (config.fail_on_recompile_limit_hit)").c_str());
        *error = true;
        return nullptr;
      }
      bool warned = false;
      for (PyObject* c : extra->limit_warned) warned |= c == config;
      if (!warned) {
        extra->limit_warned.push_back(config);
        ContextOff off;  // the warnings machinery runs Python code
        if (log_channels & kLogRecompiles) emitLog("recompiles", msg);
        if (PyErr_WarnEx(PyExc_UserWarning, msg.c_str(), 1) < 0) {  // warnings turned into errors
          *error = true;
          return nullptr;
        }
      }
      tls_limit_hit = true;
      return nullptr;
    }
    ++stats().recompiles;
    recompile_records.push_back(RecompileRecord{codeName(code), why, true});
    if (log_channels & kLogRecompiles) {
      ContextOff off;  // logging runs Python code: never intercepted (the compile lock is held)
      emitLog("recompiles", "Recompiling function " + codeName(code) +
                                "\n    triggered by the following guard failure(s):\n    - " + why);
    }
  }
  emitEvent("start", code, nullptr, nullptr, why, 0, extra->entries.size());
  trace::TranslateResult r;
  uint64_t ns;
  {
    ContextOff off;
    Ref pin = Ref::borrow(reinterpret_cast<PyObject*>(code));  // the extra dies with the code
    Ref saved = saveTorchState();
    if (!saved) {  // cannot snapshot torch's state: translating could leave it changed
      *error = true;
      return nullptr;
    }
    auto start = std::chrono::steady_clock::now();
    if (!extra->shape_memory) {
      extra->shape_memory = Ref::steal(PyDict_New());
      if (!extra->shape_memory) {
        *error = true;
        return nullptr;
      }
    }
    try {
      r = trace::translate(view, config, extra->shape_memory.get());
    } catch (const std::bad_alloc&) {
      // Memory ran out in the tracer's own structures (a program growing a list to millions
      // of items, each modelled and guarded): the frame runs natively, where the program
      // meets its own MemoryError, if any, as eagerly; never an abort of the process.
      PyErr_Clear();
      r = trace::TranslateResult{};
      r.unsupported.reason = "out of memory while tracing (std::bad_alloc): the frame runs natively";
      r.unsupported.function = codeName(code);
      const char* file = PyUnicode_AsUTF8(code->co_filename);
      if (!file) PyErr_Clear();
      r.unsupported.filename = file ? file : "?";
      r.unsupported.line = code->co_firstlineno;
    }
    ns = static_cast<uint64_t>(
        std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::steady_clock::now() - start).count());
    stats().translate_ns += ns;
    if (!restoreTorchState(saved.get())) {
      *error = true;
      return nullptr;
    }
  }
  if (r.error) {  // a user-facing error (backend failure, fullgraph)
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
    // As torch._dynamo (InstructionTranslator._return raises SkipFrame: 'No ops traced for
    // the FX graph'): a frame whose trace, first or a recompile, recorded no op and had no
    // graph break runs natively from now on, its entries unused (the frames it calls are
    // still captured); not under fullgraph=True, where the empty graph is the answer, nor
    // with config.allow_empty_graphs (torch._dynamo's flag of that name).
    Ref fullgraph = Ref::steal(PyObject_GetAttrString(config, "fullgraph"));
    int allow_empty = fullgraph ? graph::configFlag("allow_empty_graphs") : -1;
    if (allow_empty < 0) {
      *error = true;
      return nullptr;
    }
    if (fullgraph.get() != Py_True && !allow_empty) {
      trace::Unsupported u;
      u.reason = "no op traced (no graph and no graph break): the frame runs natively from now on, as "
                 "torch._dynamo skips it";
      u.function = codeName(code);
      const char* file = PyUnicode_AsUTF8(code->co_filename);
      if (!file) PyErr_Clear();
      u.filename = file ? file : "?";
      u.line = code->co_firstlineno;
      recordNative(extra, code, u);
      emitEvent("native", code, nullptr, &u, why, ns, extra->entries.size());
      return nullptr;
    }
  }
  ++stats().frames_captured;
  if (r.entry->brk) recordBreak(code, *r.entry);
  extra->state = cache::CodeState::Active;
  extra->entries.insert(extra->entries.begin(), r.entry);
  if (log_channels & kLogGuards) {
    ContextOff off;
    emitLog("guards", "guards of " + r.entry->name + ":\n" + r.entry->guards.describe());
  }
  emitEvent("captured", code, r.entry.get(), nullptr, why, ns, extra->entries.size());
  return r.entry;
}

// Another PEP 523 user's function that was installed when ours went in (torch._dynamo's
// shim, when a cdynamo-compiled function is called inside a torch.compile'd one), or null.
// Frames that are not ours go to it, and it is put back when ours comes out.
_PyFrameEvalFunction previous_eval = nullptr;

// The frame this thread is handing to `previous_eval` right now. The other hook may hand a
// frame it does not want back to the function it replaced, which can be ours (torch._dynamo's
// shim does, when it was put in over us and we then over it): that frame is evaluated by
// CPython instead of being passed on again, or the two hooks would bounce it forever (the
// calls are tail calls: a hang, not a stack overflow).
thread_local _PyInterpreterFrame* tls_passing_on = nullptr;

PyObject* evalOther(PyThreadState* ts, _PyInterpreterFrame* frame, int throw_flag) {
  if (!previous_eval || tls_passing_on == frame) return _PyEval_EvalFrameDefault(ts, frame, throw_flag);
  _PyInterpreterFrame* saved = tls_passing_on;
  tls_passing_on = frame;
  PyObject* result = previous_eval(ts, frame, throw_flag);
  tls_passing_on = saved;
  return result;
}

// Cold: the translation raised (a backend failure; Unsupported under fullgraph=True). A
// KeyboardInterrupt or SystemExit that a backend raised leaves as itself, not wrapped. With
// config.suppress_errors, a backend failure is a warning and the frame runs natively (the
// code stays native, with the reason).
PyObject* compileFailed(PyThreadState* ts, _PyInterpreterFrame* frame, cache::CodeExtra* extra) {
  PyObject *type, *value, *tb;
  PyErr_Fetch(&type, &value, &tb);
  PyErr_NormalizeException(&type, &value, &tb);
  if (tb && value) PyException_SetTraceback(value, tb);
  Ref exc = Ref::steal(value), type_ref = Ref::steal(type), tb_ref = Ref::steal(tb);
  if (!exc) return nullptr;
  ContextOff off;
  Ref excmod = Ref::borrow(lookup(Obj::cdynamo_exc));
  Ref bcf = excmod ? Ref::steal(PyObject_GetAttrString(excmod.get(), "BackendCompilerFailed")) : Ref();
  if (!bcf) return nullptr;
  if (!PyObject_IsInstance(exc.get(), bcf.get())) {
    PyErr_SetObject(reinterpret_cast<PyObject*>(Py_TYPE(exc.get())), exc.get());
    return nullptr;
  }
  Ref cause = Ref::steal(PyException_GetCause(exc.get()));
  if (cause && !PyObject_IsInstance(cause.get(), PyExc_Exception)) {  // KeyboardInterrupt, SystemExit
    PyErr_SetObject(reinterpret_cast<PyObject*>(Py_TYPE(cause.get())), cause.get());
    return nullptr;
  }
  int suppress = graph::configFlag("suppress_errors");
  if (suppress < 0) PyErr_Clear();
  if (suppress <= 0) {
    PyErr_SetObject(reinterpret_cast<PyObject*>(Py_TYPE(exc.get())), exc.get());
    return nullptr;
  }
  auto str = [](PyObject* o) {
    Ref m = Ref::steal(PyObject_Str(o));
    const char* c = m && PyUnicode_Check(m.get()) ? PyUnicode_AsUTF8(m.get()) : nullptr;
    std::string out = c ? c : "?";
    PyErr_Clear();
    return out;
  };
  std::string text = str(exc.get());
  if (cause) text += " (" + std::string(Py_TYPE(cause.get())->tp_name) + ": " + str(cause.get()) + ")";
  if (PyErr_WarnFormat(PyExc_RuntimeWarning, 1, "cdynamo: %s; the frame runs natively (config.suppress_errors)",
                       text.c_str()) < 0)
    return nullptr;  // warnings turned into errors
  {
    CompileLock lock;
    trace::Unsupported u;
    u.reason = "backend compiler failed (config.suppress_errors): " + text;
    u.function = codeName(frame->f_code);
    recordNative(extra, frame->f_code, u);
  }
  return evalDefault(ts, frame, 0);
}

// Cold (a cache miss): whether torch's mode stacks forbid compiling this call
// (cdynamo/_state.py mode_refusal): a TorchFunctionMode other than a torch.device context,
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
    PyErr_SetString(PyExc_SystemError, "cdynamo._state.mode_refusal gave neither None nor (reason, strict)");
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

PyObject* evalFrame(PyThreadState* ts, _PyInterpreterFrame* frame, int throw_flag) {
  PyObject* config = tls_config;
  if (!config) return evalOther(ts, frame, throw_flag);
  // throw_flag: a generator being closed or thrown into. A trace or profile function
  // (debugger, coverage.py, cProfile) must see the lines and calls eager execution has:
  // the frame runs natively, entries untouched.
  if (throw_flag || ts->c_tracefunc || ts->c_profilefunc) return evalDefault(ts, frame, throw_flag);
  PyCodeObject* code = frame->f_code;
  cache::CodeExtra* extra = cache::lookup(code);
  if (!extra || extra->state == cache::CodeState::Unknown) {
    if (!extra) {
      extra = cache::getOrCreate(code);
      if (!extra) return nullptr;
    }
    extra->state = shouldSkip(code) || bytecode::isBreakCode(code) ? cache::CodeState::Skip : cache::CodeState::Active;
  }
  if (extra->state != cache::CodeState::Active) {
    if (extra->context_off) {  // torch.compiler.disable's wrapper: nothing under it is traced
      ContextOff off;
      return evalDefault(ts, frame, throw_flag);
    }
    return evalDefault(ts, frame, throw_flag);
  }
  // A frame that already ran (a resumed generator) is never replaced.
  if (frame->prev_instr != _PyCode_CODE(code) - 1) return evalDefault(ts, frame, throw_flag);
  ++stats().frames_seen;

  FrameView view = viewOf(frame);
  // Hit path: the first entry whose guards pass runs; no allocation, no logging.
  for (size_t i = 0; i < extra->entries.size(); ++i) {
    cache::EntryPtr entry = extra->entries[i];  // held: a compile elsewhere may edit the list
    if (entry->config.get() != config) continue;
    bool matched = false;
    PyObject* result;
    {
      ContextOff off;
      result = entry->tryRun(view, &matched);
    }
    if (matched) {
      ++stats().cache_hits;
      if (i < extra->entries.size() && extra->entries[i] == entry) cache::touch(extra, i);
      // A graph break: the rest of the frame runs with the context on (resume functions
      // are captured).
      if (result && entry->brk) return entry->continueAfterBreak(view, result);
      return result;
    }
  }

  if (tls_run_only) return evalDefault(ts, frame, 0);  // called under a frame past its recompile limit
  if (int refused = modeRefusal(extra, code, config); refused != 0)
    return refused < 0 ? nullptr : evalDefault(ts, frame, 0);
  cache::EntryPtr entry;
  bool error = false;
  tls_limit_hit = false;
  {
    CompileLock lock;
    // Another thread may have compiled these inputs, marked the code native, or reset the
    // cache meanwhile (then the frame runs natively this once).
    if (extra->state == cache::CodeState::Active) {
      size_t index = 0;
      entry = findEntry(extra, config, view, &index);
      if (entry)
        ++stats().cache_hits;
      else
        entry = compileMiss(extra, config, view, &error);
    }
  }  // Released before anything runs: the frame or entry may call compiled functions.
  if (error) return compileFailed(ts, frame, extra);
  if (!entry && tls_limit_hit) {
    tls_limit_hit = false;
    const bool saved = tls_run_only;
    tls_run_only = true;
    PyObject* result = evalDefault(ts, frame, 0);
    tls_run_only = saved;
    return result;
  }
  if (!entry) return evalDefault(ts, frame, 0);
  return runEntry(ts, frame, extra, entry, view);
}

void installHook() {
  PyInterpreterState* interp = PyThreadState_GetInterpreter(PyThreadState_Get());
  _PyFrameEvalFunction current = _PyInterpreterState_GetEvalFrameFunc(interp);
  if (current == evalFrame) return;  // still in (see uninstallHook)
  previous_eval = current == _PyEval_EvalFrameDefault ? nullptr : current;
  _PyInterpreterState_SetEvalFrameFunc(interp, evalFrame);
}

void uninstallHook() {
  PyInterpreterState* interp = PyThreadState_GetInterpreter(PyThreadState_Get());
  // Someone installed their function over ours (torch._dynamo does, and puts ours back when
  // it is done): leave theirs; ours, once back, passes every frame on until the next time
  // the last compiled call ends.
  if (_PyInterpreterState_GetEvalFrameFunc(interp) != evalFrame) return;
  _PyInterpreterState_SetEvalFrameFunc(interp, previous_eval ? previous_eval : _PyEval_EvalFrameDefault);
  previous_eval = nullptr;
}

// Compiled calls in progress on this thread (the share of threads_active it owns).
thread_local int tls_calls = 0;

// In the child of os.fork() only the forking thread lives on: locks and counts held by the
// others are dropped (pthread_atfork; the child has the GIL of the thread that forked).
void afterForkChild() {
  CompileLock::afterForkChild();
  threads_active = tls_calls;
}

// nn.Module.__call__'s own first test (Module._call_impl), in C: a module whose class keeps
// nn.Module's __call__, not compiled by torch.compile (_compiled_call_impl None), outside
// torch.jit tracing, with no hook of its own and no global one, runs self.forward(*args,
// **kwargs) and nothing else. The compiled call then calls forward itself: the same call,
// without nn.Module.__call__'s two Python frames (~0.5 us of each call of a compiled module).
// The four hook dicts `names` of `dict`, from `memo` while the dict is unchanged (its version
// tag: the same dict holds the same dict objects; their sizes are read on every call, as
// registering a hook changes a hook dict, not `dict`). False when one is missing or is not
// a dict. Under the GIL.
struct HookDictsMemo {
  PyObject* dict = nullptr;  // identity only
  uint64_t tag = 0;
  PyObject* hooks[4] = {};   // borrowed from dict while its tag stands
};

bool hookDictsEmpty(PyObject* dict, std::initializer_list<Str> names, HookDictsMemo* memo) {
  const uint64_t tag = reinterpret_cast<PyDictObject*>(dict)->ma_version_tag;
  if (dict != memo->dict || tag != memo->tag) {
    PyObject* found[4] = {};
    int i = 0;
    for (Str name : names) {
      PyObject* hooks = PyDict_GetItemWithError(dict, interned(name));  // str keys: no Python code
      if (!hooks || !PyDict_Check(hooks)) return PyErr_Clear(), false;
      found[i++] = hooks;
    }
    *memo = HookDictsMemo{dict, tag, {found[0], found[1], found[2], found[3]}};
  }
  for (PyObject* hooks : memo->hooks)
    if (PyDict_GET_SIZE(hooks) != 0) return false;
  return true;
}

bool callsForwardOnly(PyObject* fn) {
  PyObject* module_type = lookup(Obj::torch_nn_Module);
  PyObject* module_call = module_type ? lookup(Obj::torch_nn_Module_call) : nullptr;
  PyObject* module_globals_owner = module_call ? lookup(Obj::torch_nn_modules_module) : nullptr;
  if (!module_globals_owner) return PyErr_Clear(), false;
  if (!PyType_Check(module_type) || !PyObject_TypeCheck(fn, reinterpret_cast<PyTypeObject*>(module_type))) return false;
  if (_PyType_Lookup(Py_TYPE(fn), interned(Str::dunder_call)) != module_call) return false;
  PyObject** dictptr = _PyObject_GetDictPtr(fn);
  if (!dictptr || !*dictptr || !PyModule_Check(module_globals_owner)) return false;
  // Set on the instance by Module.compile(); nn.Module's class attribute (None) otherwise.
  PyObject* compiled_impl = PyDict_GetItemWithError(*dictptr, interned(Str::compiled_call_impl));
  if (!compiled_impl && PyErr_Occurred()) return PyErr_Clear(), false;
  if (!compiled_impl) compiled_impl = _PyType_Lookup(Py_TYPE(fn), interned(Str::compiled_call_impl));
  if (compiled_impl != Py_None) return false;
  static HookDictsMemo own_memo, global_memo;
  if (!hookDictsEmpty(*dictptr, {Str::forward_hooks, Str::forward_pre_hooks, Str::backward_hooks, Str::backward_pre_hooks},
                      &own_memo))
    return false;
  if (!hookDictsEmpty(PyModule_GetDict(module_globals_owner),
                      {Str::global_forward_hooks, Str::global_forward_pre_hooks, Str::global_backward_hooks,
                       Str::global_backward_pre_hooks},
                      &global_memo))
    return false;
  return !graph::torchimpl::jitTracing();
}

// fn.forward(*args, **kwargs) (vectorcall arguments of fn's call).
PyObject* callForward(PyObject* fn, PyObject* const* args, size_t nargsf, PyObject* kwnames) {
  const size_t nargs = static_cast<size_t>(PyVectorcall_NARGS(nargsf));
  const size_t total = nargs + (kwnames ? static_cast<size_t>(PyTuple_GET_SIZE(kwnames)) : 0);
  PyObject* inline_buf[8];
  std::vector<PyObject*> heap;
  PyObject** buf = inline_buf;
  if (total + 1 > 8) {
    heap.resize(total + 1);
    buf = heap.data();
  }
  buf[0] = fn;
  for (size_t i = 0; i < total; ++i) buf[i + 1] = args[i];
  return PyObject_VectorcallMethod(interned(Str::forward), buf, nargs + 1, kwnames);
}

}  // namespace

PyObject* callCompiled(PyObject* config, PyObject* fn, PyObject* const* args, size_t nargsf, PyObject* kwnames) {
  if (stance == Stance::ForceEager) return PyObject_Vectorcall(fn, args, nargsf, kwnames);
  PyObject* saved = tls_config;
  const bool saved_run_only = tls_run_only;  // a compiled function called inside compiles as it needs
  tls_config = config;
  tls_run_only = false;
  ++tls_calls;
  if (threads_active++ == 0) installHook();
  PyObject* result = callsForwardOnly(fn) ? callForward(fn, args, nargsf, kwnames)
                                          : PyObject_Vectorcall(fn, args, nargsf, kwnames);
  if (--threads_active == 0) uninstallHook();
  --tls_calls;
  tls_config = saved;
  tls_run_only = saved_run_only;
  return result;
}

PyObject* callDisabled(PyObject* fn, PyObject* const* args, size_t nargsf, PyObject* kwnames) {
  ContextOff off;
  return PyObject_Vectorcall(fn, args, nargsf, kwnames);
}

void installForkHandler() {
  static bool done = false;
  if (!done) done = pthread_atfork(nullptr, nullptr, afterForkChild) == 0;
}

void setFileRules(std::vector<std::pair<std::string, bool>> rules) { file_rules = std::move(rules); }

namespace {

// Under the compile lock (Note [The compile lock]). Generated break and resume code is a
// pure memo of code generation and stays (it dies with its original code object): an entry
// still running on another thread keeps calling its break code, which must stay known as
// such (bytecode::isBreakCode) or the hook would trace it as a user function.
void resetNow() {
  cache::resetAll();
  native_frames.clear();
  graph_breaks.clear();
  recompile_records.clear();
  stats() = Stats{};
}

}  // namespace

void reset() {
  if (CompileLock::heldByThisThread()) {  // called from a backend or during tracing
    CompileLock::deferReset();
    return;
  }
  CompileLock lock;
  resetNow();
}

const std::vector<NativeFrame>& nativeFrames() { return native_frames; }
const std::vector<NativeFrame>& graphBreaks() { return graph_breaks; }
void setLogChannels(unsigned mask) { log_channels = mask; }
void setCacheSizeLimit(int limit) { recompile_limit = limit; }
void setRecompilePolicy(int limit, int accumulated, bool fail_on_hit) {
  recompile_limit = limit;
  accumulated_recompile_limit = accumulated;
  fail_on_recompile_limit_hit = fail_on_hit;
}
const std::vector<RecompileRecord>& recompileRecords() { return recompile_records; }
void setStance(Stance s) { stance = s; }
void setEventSink(PyObject* sink) { event_sink = Ref::borrow(sink); }

}  // namespace cdynamo::frame
