// CPython 3.11 frame hook. This is one of the two places that read CPython's internal
// frame layout (the other is csrc/bytecode); everything downstream sees a FrameView.
#define Py_BUILD_CORE 1
#include <Python.h>
#include <internal/pycore_frame.h>
#undef Py_BUILD_CORE

#include "frame/eval_frame.h"

#include <chrono>
#include <cstring>

#include <pythread.h>

#include "bytecode/resume.h"
#include "cache/code_cache.h"
#include "support/pyref.h"
#include "support/stats.h"
#include "support/torch_types.h"
#include "trace/tracer.h"

namespace cdynamo::frame {
namespace {

// The compile configuration of the compiled function running on this thread (borrowed:
// callCompiled's caller holds it), or null when cdynamo is not active here.
thread_local PyObject* tls_config = nullptr;
int threads_active = 0;  // guarded by the GIL
unsigned log_channels = 0;
int cache_size_limit = 8;
Stance stance = Stance::Default;
PyObject* event_sink = nullptr;  // owned

// (path prefix, trace?) rules; the longest matching prefix decides; no match: trace.
std::vector<std::pair<std::string, bool>> file_rules;
std::vector<NativeFrame> native_frames;
std::vector<NativeFrame> graph_breaks;

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
  Ref mod = Ref::steal(PyImport_ImportModule("cdynamo._logging"));
  Ref r = mod ? Ref::steal(PyObject_CallMethod(mod.get(), "emit", "ss", channel, message.c_str())) : Ref();
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
    Ref mod = Ref::steal(PyImport_ImportModule("cdynamo._logging"));
    Ref r = mod ? Ref::steal(PyObject_CallMethod(mod.get(), "emit_bytecode", "OOO", code, entry.brk->break_code.get(),
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
  if (!d) return PyErr_WriteUnraisable(event_sink);
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
         set("graph_module", Py_NewRef(entry->graph_module ? entry->graph_module.get() : Py_None));
    if (ok && entry->brk) {
      const runtime::GraphBreakInfo& b = entry->break_info;
      ok = set("graph_break", where(b.reason, b.filename, b.line, codeName(code), b.user_stack));
    }
  }
  if (ok && u) ok = set("native", where(u->reason, u->filename, u->line, u->function, u->user_stack));
  if (!ok) return PyErr_WriteUnraisable(event_sink);
  Ref r = Ref::steal(PyObject_CallOneArg(event_sink, d.get()));
  if (!r) PyErr_WriteUnraisable(event_sink);
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

PyObject* evalDefault(PyThreadState* ts, _PyInterpreterFrame* frame, int throw_flag) {
  return _PyEval_EvalFrameDefault(ts, frame, throw_flag);
}

// One compile at a time (as in TorchDynamo): a backend may release the GIL, and two
// threads missing on the same inputs must not both compile. Waiting releases the GIL.
// Held only while deciding and translating, never while user code or a graph runs (a
// native frame may call another compiled function on the same thread).
class CompileLock {
 public:
  CompileLock() {
    if (!lock_) lock_ = PyThread_allocate_lock();
    if (!PyThread_acquire_lock(lock_, NOWAIT_LOCK)) {
      Py_BEGIN_ALLOW_THREADS
      PyThread_acquire_lock(lock_, WAIT_LOCK);
      Py_END_ALLOW_THREADS
    }
  }
  ~CompileLock() { PyThread_release_lock(lock_); }
  CompileLock(const CompileLock&) = delete;
  CompileLock& operator=(const CompileLock&) = delete;

 private:
  static PyThread_type_lock lock_;
};
PyThread_type_lock CompileLock::lock_ = nullptr;

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
  for (size_t i = 0; i < extra->entries.size(); ++i)
    if (extra->entries[i] == entry) extra->entries.erase(extra->entries.begin() + i);
  trace::Unsupported u;
  u.reason = "internal: guards reject the frame they were built from";
  u.function = codeName(frame->f_code);
  recordNative(extra, frame->f_code, u);
  return evalDefault(ts, frame, 0);
}

// Cold path, under the compile lock: translate the frame and install the new entry, or
// mark the code native. Returns the entry to run, or null (native, or *error set).
cache::EntryPtr compileMiss(cache::CodeExtra* extra, PyObject* config, const FrameView& view, bool* error) {
  PyCodeObject* code = view.code;
  *error = false;
  ++stats().cache_misses;
  // A recompile is a miss on a code object that already has entries for this
  // configuration (entries of other compiled wrappers don't count).
  cache::EntryPtr previous;
  int same_config = 0;
  for (const cache::EntryPtr& e : extra->entries)
    if (e->config.get() == config) {
      if (!previous) previous = e;
      ++same_config;
    }
  std::string why;  // the recompile reason, computed only when someone reads it
  if (previous && ((log_channels & kLogRecompiles) || event_sink || stance == Stance::FailOnRecompile)) {
    ContextOff off;
    why = previous->guards.explainFailure(view);
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
    ++stats().recompiles;
    if (log_channels & kLogRecompiles) {
      ContextOff off;  // logging runs Python code: never intercepted (the compile lock is held)
      emitLog("recompiles", "Recompiling function " + codeName(code) +
                                "\n    triggered by the following guard failure:\n    - " + why);
    }
    if (same_config >= cache_size_limit) {
      trace::Unsupported u;
      u.reason = "cache size limit (" + std::to_string(cache_size_limit) + ") reached: too many recompiles";
      u.function = codeName(code);
      recordNative(extra, code, u);
      emitEvent("native", code, nullptr, &u, why, 0, extra->entries.size());
      return nullptr;
    }
  }
  emitEvent("start", code, nullptr, nullptr, why, 0, extra->entries.size());
  trace::TranslateResult r;
  uint64_t ns;
  {
    ContextOff off;
    Ref pin = Ref::borrow(reinterpret_cast<PyObject*>(code));  // the extra dies with the code
    auto start = std::chrono::steady_clock::now();
    r = trace::translate(view, config);
    ns = static_cast<uint64_t>(
        std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::steady_clock::now() - start).count());
    stats().translate_ns += ns;
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

PyObject* evalFrame(PyThreadState* ts, _PyInterpreterFrame* frame, int throw_flag) {
  PyObject* config = tls_config;
  if (!config || throw_flag) return evalDefault(ts, frame, throw_flag);
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

  cache::EntryPtr entry;
  bool error = false;
  {
    CompileLock lock;
    if (extra->state != cache::CodeState::Active) return evalDefault(ts, frame, 0);
    size_t index = 0;
    entry = findEntry(extra, config, view, &index);  // compiled by another thread meanwhile?
    if (entry) {
      ++stats().cache_hits;
    } else {
      entry = compileMiss(extra, config, view, &error);
      if (error) return nullptr;
    }
  }
  if (!entry) return evalDefault(ts, frame, 0);
  return runEntry(ts, frame, extra, entry, view);
}

void installHook() {
  PyInterpreterState* interp = PyThreadState_GetInterpreter(PyThreadState_Get());
  _PyInterpreterState_SetEvalFrameFunc(interp, evalFrame);
}

void uninstallHook() {
  PyInterpreterState* interp = PyThreadState_GetInterpreter(PyThreadState_Get());
  _PyInterpreterState_SetEvalFrameFunc(interp, _PyEval_EvalFrameDefault);
}

}  // namespace

PyObject* callCompiled(PyObject* config, PyObject* fn, PyObject* const* args, size_t nargsf, PyObject* kwnames) {
  if (stance == Stance::ForceEager) return PyObject_Vectorcall(fn, args, nargsf, kwnames);
  PyObject* saved = tls_config;
  tls_config = config;
  if (threads_active++ == 0) installHook();
  PyObject* result = PyObject_Vectorcall(fn, args, nargsf, kwnames);
  if (--threads_active == 0) uninstallHook();
  tls_config = saved;
  return result;
}

PyObject* callDisabled(PyObject* fn, PyObject* const* args, size_t nargsf, PyObject* kwnames) {
  ContextOff off;
  return PyObject_Vectorcall(fn, args, nargsf, kwnames);
}

void setFileRules(std::vector<std::pair<std::string, bool>> rules) { file_rules = std::move(rules); }

void reset() {
  cache::resetAll();
  bytecode::clearGenerated();
  native_frames.clear();
  graph_breaks.clear();
  stats() = Stats{};
}

const std::vector<NativeFrame>& nativeFrames() { return native_frames; }
const std::vector<NativeFrame>& graphBreaks() { return graph_breaks; }
void setLogChannels(unsigned mask) { log_channels = mask; }
void setCacheSizeLimit(int limit) { cache_size_limit = limit; }
void setStance(Stance s) { stance = s; }
void setEventSink(PyObject* sink) {
  Py_XINCREF(sink);
  Py_XSETREF(event_sink, sink);
}

}  // namespace cdynamo::frame
