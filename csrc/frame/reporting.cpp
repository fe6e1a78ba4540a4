// What the frame stage records and reports of each translation outcome: the frames that
// run natively, the graph breaks and recompiles compiled, the log channels, the event sink
// (cdynamo._events), and a translation that raised (compileFailed). All cold: nothing here
// runs on a cache hit.
#include "frame/frame_internal.h"

#include "frame/compile_lock.h"
#include "graph/torch_refs.h"
#include "support/lookup.h"
#include "support/pyref.h"
#include "support/stats.h"

namespace cdynamo::frame {
namespace internal {

unsigned log_channels = 0;
std::vector<NativeFrame> native_frames;
std::vector<NativeFrame> graph_breaks;
std::vector<RecompileRecord> recompile_records;

namespace {
Ref& event_sink = *new Ref();  // Note [Python references in statics] (support/pyref.h)
}  // namespace

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
  PyObject* excmod = lookup(Obj::cdynamo_exc);
  Ref bcf = excmod ? Ref::steal(PyObject_GetAttrString(excmod, "BackendCompilerFailed")) : Ref();
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
    u.function = codeName(layout::code(frame));
    recordNative(extra, layout::code(frame), u);
  }
  return evalDefault(ts, frame, 0);
}

}  // namespace internal

using namespace internal;

const std::vector<NativeFrame>& nativeFrames() { return native_frames; }
const std::vector<NativeFrame>& graphBreaks() { return graph_breaks; }
void setLogChannels(unsigned mask) { log_channels = mask; }
const std::vector<RecompileRecord>& recompileRecords() { return recompile_records; }
void setEventSink(PyObject* sink) { event_sink = Ref::borrow(sink); }

}  // namespace cdynamo::frame
