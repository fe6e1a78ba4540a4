// CPython 3.11 frame hook. This is one of the two places that read CPython's internal
// frame layout (the other is csrc/bytecode); everything downstream sees a FrameView.
#define Py_BUILD_CORE 1
#include <Python.h>
#include <internal/pycore_frame.h>
#undef Py_BUILD_CORE

#include "frame/eval_frame.h"

#include <cstring>

#include "cache/code_cache.h"
#include "support/pyref.h"
#include "support/stats.h"
#include "trace/tracer.h"

namespace cdynamo::frame {
namespace {

// The compile configuration of the compiled function running on this thread (borrowed:
// callCompiled's caller holds it), or null when cdynamo is not active here.
thread_local PyObject* tls_config = nullptr;
int threads_active = 0;  // guarded by the GIL
unsigned log_channels = 0;
int cache_size_limit = 8;

// (path prefix, trace?) rules; the longest matching prefix decides; no match: trace.
std::vector<std::pair<std::string, bool>> file_rules;
std::vector<NativeFrame> native_frames;

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
  if (log_channels & kLogGraphBreaks)
    emitLog("graph_breaks", "frame " + codeName(code) + " runs natively: " + u.reason + "\n  at " + u.filename +
                                ":" + std::to_string(u.line) + "\n" + u.user_stack);
}

PyObject* evalDefault(PyThreadState* ts, _PyInterpreterFrame* frame, int throw_flag) {
  return _PyEval_EvalFrameDefault(ts, frame, throw_flag);
}

// Cold path: translate the frame and install the new entry (or mark the code native).
PyObject* onMiss(PyThreadState* ts, _PyInterpreterFrame* frame, cache::CodeExtra* extra, PyObject* config,
                 const FrameView& view) {
  PyCodeObject* code = frame->f_code;
  ++stats().cache_misses;
  if (!extra->entries.empty()) {
    ++stats().recompiles;
    if (log_channels & kLogRecompiles) {
      ContextOff off;
      std::string why = extra->entries[0]->guards.explainFailure(view);
      emitLog("recompiles", "recompiling " + codeName(code) + ": " + (why.empty() ? "compiled for another backend" : why));
    }
    if (static_cast<int>(extra->entries.size()) >= cache_size_limit) {
      trace::Unsupported u;
      u.reason = "cache size limit (" + std::to_string(cache_size_limit) + ") reached: too many recompiles";
      u.function = codeName(code);
      recordNative(extra, code, u);
      return evalDefault(ts, frame, 0);
    }
  }
  trace::TranslateResult r;
  {
    ContextOff off;
    Ref pin = Ref::borrow(reinterpret_cast<PyObject*>(code));  // the extra dies with the code
    r = trace::translate(view, config);
  }
  if (r.error) return nullptr;  // a user-facing error (backend failure, fullgraph)
  if (!r.entry) {
    recordNative(extra, code, r.unsupported);
    return evalDefault(ts, frame, 0);
  }
  ++stats().frames_captured;
  extra->state = cache::CodeState::Active;
  cache::EntryPtr entry = r.entry;
  extra->entries.insert(extra->entries.begin(), entry);
  if (log_channels & kLogGuards) emitLog("guards", "guards of " + entry->name + ":\n" + entry->guards.describe());
  bool matched = false;
  PyObject* result;
  {
    ContextOff off;
    result = entry->tryRun(view, &matched);
  }
  if (!matched) {
    // The guards just built reject the frame they were built from: a bug, never a wrong
    // answer. Drop the entry and run the frame natively.
    extra->entries.erase(extra->entries.begin());
    trace::Unsupported u;
    u.reason = "internal: guards reject the frame they were built from";
    u.function = codeName(code);
    recordNative(extra, code, u);
    return evalDefault(ts, frame, 0);
  }
  return result;
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
    extra->state = shouldSkip(code) ? cache::CodeState::Skip : cache::CodeState::Active;
  }
  if (extra->state != cache::CodeState::Active) return evalDefault(ts, frame, throw_flag);
  // A frame that already ran (a resumed generator) is never replaced.
  if (frame->prev_instr != _PyCode_CODE(code) - 1) return evalDefault(ts, frame, throw_flag);
  ++stats().frames_seen;

  FrameView view = viewOf(frame);
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
      return result;
    }
  }
  return onMiss(ts, frame, extra, config, view);
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
  PyObject* saved = tls_config;
  tls_config = config;
  if (threads_active++ == 0) installHook();
  PyObject* result = PyObject_Vectorcall(fn, args, nargsf, kwnames);
  if (--threads_active == 0) uninstallHook();
  tls_config = saved;
  return result;
}

void setFileRules(std::vector<std::pair<std::string, bool>> rules) { file_rules = std::move(rules); }

void reset() {
  cache::resetAll();
  native_frames.clear();
  stats() = Stats{};
}

const std::vector<NativeFrame>& nativeFrames() { return native_frames; }
void setLogChannels(unsigned mask) { log_channels = mask; }
void setCacheSizeLimit(int limit) { cache_size_limit = limit; }

}  // namespace cdynamo::frame
