// The extension module cdynamo._C: bindings only, no logic of its own. Each function here
// converts its arguments, forwards to the stage that implements it, and converts back.
#include <Python.h>
#include <structmember.h>

#include <string>
#include <vector>

#include "bytecode/opcodes.h"
#include "cache/code_cache.h"
#include "frame/eval_frame.h"
#include "graph/fake_propagation.h"
#include "guards/tensor_check.h"
#include "runtime/continuation.h"
#include "support/pyref.h"
#include "support/slots.h"
#include "support/stats.h"
#include "trace/call_rules.h"
#include "trace/disabled.h"
#include "trace/protocol/calls.h"

using cdynamo::Ref;
using cdynamo::clearSlot;

namespace {

// ---- CompiledFunction: what cdynamo.compile(fn) returns --------------------------------
// A callable wrapper that runs `fn` with the compile context on; vectorcall keeps the
// wrapper's own cost to a C call. Binds like a function when used as a method.
struct CompiledFunction {
  PyObject_HEAD
  PyObject* fn;
  PyObject* config;
  PyObject* dict;
  PyObject* weakrefs;
  vectorcallfunc vectorcall;
};

PyObject* compiledCall(PyObject* self, PyObject* const* args, size_t nargsf, PyObject* kwnames) {
  auto* cf = reinterpret_cast<CompiledFunction*>(self);
  return cdynamo::frame::callCompiled(cf->config, cf->fn, args, nargsf, kwnames);
}

PyObject* compiledNew(PyTypeObject* type, PyObject* args, PyObject* kwargs) {
  PyObject *fn, *config;
  static const char* kw[] = {"fn", "config", nullptr};
  if (!PyArg_ParseTupleAndKeywords(args, kwargs, "OO", const_cast<char**>(kw), &fn, &config)) return nullptr;
  if (!PyCallable_Check(fn)) {
    PyErr_SetString(PyExc_TypeError, "cdynamo: compile() needs a callable");
    return nullptr;
  }
  auto* self = reinterpret_cast<CompiledFunction*>(type->tp_alloc(type, 0));
  if (!self) return nullptr;
  self->fn = Ref::borrow(fn).release();
  self->config = Ref::borrow(config).release();
  self->vectorcall = compiledCall;
  return reinterpret_cast<PyObject*>(self);
}

int compiledTraverse(PyObject* self, visitproc visit, void* arg) {
  auto* cf = reinterpret_cast<CompiledFunction*>(self);
  Py_VISIT(cf->fn);
  Py_VISIT(cf->config);
  Py_VISIT(cf->dict);
  return 0;
}

int compiledClear(PyObject* self) {
  auto* cf = reinterpret_cast<CompiledFunction*>(self);
  // tp_clear breaks cycles through the type's raw members.
  clearSlot(cf->fn);
  clearSlot(cf->config);
  clearSlot(cf->dict);
  return 0;
}

void compiledDealloc(PyObject* self) {
  PyObject_GC_UnTrack(self);
  auto* cf = reinterpret_cast<CompiledFunction*>(self);
  if (cf->weakrefs) PyObject_ClearWeakRefs(self);
  compiledClear(self);
  Py_TYPE(self)->tp_free(self);
}

PyObject* compiledGet(PyObject* self, PyObject* obj, PyObject* type) {
  if (obj == nullptr || obj == Py_None) return Ref::borrow(self).release();
  return PyMethod_New(self, obj);
}

PyMemberDef compiledMembers[] = {
    {"_torchdynamo_orig_callable", T_OBJECT, offsetof(CompiledFunction, fn), READONLY, "the original callable"},
    {"_cdynamo_config", T_OBJECT, offsetof(CompiledFunction, config), READONLY, "compile configuration"},
    {"__vectorcalloffset__", T_PYSSIZET, offsetof(CompiledFunction, vectorcall), READONLY, nullptr},
    {"__dictoffset__", T_PYSSIZET, offsetof(CompiledFunction, dict), READONLY, nullptr},
    {"__weaklistoffset__", T_PYSSIZET, offsetof(CompiledFunction, weakrefs), READONLY, nullptr},
    {nullptr}};

PyGetSetDef compiledGetSet[] = {
    {"__dict__", PyObject_GenericGetDict, PyObject_GenericSetDict, nullptr, nullptr},
    {nullptr}};

PyType_Slot compiledSlots[] = {
    {Py_tp_getset, compiledGetSet},
    {Py_tp_new, reinterpret_cast<void*>(compiledNew)},
    {Py_tp_dealloc, reinterpret_cast<void*>(compiledDealloc)},
    {Py_tp_traverse, reinterpret_cast<void*>(compiledTraverse)},
    {Py_tp_clear, reinterpret_cast<void*>(compiledClear)},
    {Py_tp_call, reinterpret_cast<void*>(PyVectorcall_Call)},
    {Py_tp_descr_get, reinterpret_cast<void*>(compiledGet)},
    {Py_tp_members, compiledMembers},
    {Py_tp_doc, const_cast<char*>("A function compiled by cdynamo: calls run with the frame hook on.")},
    {0, nullptr}};

PyType_Spec compiledSpec = {"cdynamo._C.CompiledFunction", sizeof(CompiledFunction), 0,
                            Py_TPFLAGS_DEFAULT | Py_TPFLAGS_HAVE_GC | Py_TPFLAGS_HAVE_VECTORCALL |
                                Py_TPFLAGS_METHOD_DESCRIPTOR,
                            compiledSlots};

// ---- module functions ------------------------------------------------------------------

PyObject* py_call_compiled(PyObject*, PyObject* const* args, Py_ssize_t nargs, PyObject* kwnames) {
  // call_compiled(config, fn, *args, **kwargs)
  if (nargs < 2) {
    PyErr_SetString(PyExc_TypeError, "call_compiled(config, fn, *args, **kwargs)");
    return nullptr;
  }
  return cdynamo::frame::callCompiled(args[0], args[1], args + 2, static_cast<size_t>(nargs - 2), kwnames);
}

PyObject* py_call_disabled(PyObject*, PyObject* const* args, Py_ssize_t nargs, PyObject* kwnames) {
  // call_disabled(fn, *args, **kwargs)
  if (nargs < 1) {
    PyErr_SetString(PyExc_TypeError, "call_disabled(fn, *args, **kwargs)");
    return nullptr;
  }
  return cdynamo::frame::callDisabled(args[0], args + 1, static_cast<size_t>(nargs - 1), kwnames);
}

PyObject* py_mark_disabled(PyObject*, PyObject* args) {
  PyObject* code;
  int context_off = 0;
  if (!PyArg_ParseTuple(args, "O!|p:mark_disabled", &PyCode_Type, &code, &context_off)) return nullptr;
  if (!cdynamo::cache::markDisabled(reinterpret_cast<PyCodeObject*>(code), context_off != 0)) return nullptr;
  Py_RETURN_NONE;
}

PyObject* py_is_disabled(PyObject*, PyObject* code) {
  if (!PyCode_Check(code)) {
    PyErr_SetString(PyExc_TypeError, "is_disabled(code)");
    return nullptr;
  }
  return PyBool_FromLong(cdynamo::cache::isDisabled(reinterpret_cast<PyCodeObject*>(code)));
}

PyObject* py_set_file_rules(PyObject*, PyObject* arg) {
  Ref seq = Ref::steal(PySequence_Fast(arg, "set_file_rules([(prefix, traced), ...])"));
  if (!seq) return nullptr;
  std::vector<std::pair<std::string, bool>> rules;
  for (Py_ssize_t i = 0; i < PySequence_Fast_GET_SIZE(seq.get()); ++i) {
    const char* prefix;
    int traced;
    if (!PyArg_ParseTuple(PySequence_Fast_GET_ITEM(seq.get(), i), "sp", &prefix, &traced)) return nullptr;
    rules.emplace_back(prefix, traced != 0);
  }
  cdynamo::frame::setFileRules(std::move(rules));
  Py_RETURN_NONE;
}

PyObject* py_reset(PyObject*, PyObject*) {
  cdynamo::frame::reset();
  Py_RETURN_NONE;
}

PyObject* py_stats(PyObject*, PyObject*) {
  const cdynamo::Stats& s = cdynamo::stats();
  return Py_BuildValue("{s:K,s:K,s:K,s:K,s:K,s:K,s:K,s:K,s:K,s:K,s:K,s:n}", "frames_seen", s.frames_seen, "frames_captured",
                       s.frames_captured, "frames_native", s.frames_native, "graphs_compiled", s.graphs_compiled,
                       "graph_breaks", s.graph_breaks,
                       "cache_hits", s.cache_hits, "cache_misses", s.cache_misses, "recompiles", s.recompiles, "translate_ns", s.translate_ns,
                       "memo_hits", s.memo_hits, "memo_misses", s.memo_misses,
                       "cache_entries", static_cast<Py_ssize_t>(cdynamo::cache::numEntries()));
}

PyObject* framesToList(const std::vector<cdynamo::frame::NativeFrame>& frames) {
  Ref list = Ref::steal(PyList_New(0));
  if (!list) return nullptr;
  for (const auto& f : frames) {
    Ref d = Ref::steal(Py_BuildValue("{s:s,s:s,s:i,s:s,s:s}", "function", f.function.c_str(), "filename",
                                     f.filename.c_str(), "line", f.line, "reason", f.reason.c_str(), "user_stack",
                                     f.user_stack.c_str()));
    if (!d || PyList_Append(list.get(), d.get()) < 0) return nullptr;
  }
  return list.release();
}

PyObject* py_native_frames(PyObject*, PyObject*) { return framesToList(cdynamo::frame::nativeFrames()); }
PyObject* py_graph_breaks(PyObject*, PyObject*) { return framesToList(cdynamo::frame::graphBreaks()); }

PyObject* py_resume_codes(PyObject*, PyObject* table) { return cdynamo::runtime::resumeTableCodes(table); }

PyObject* py_cache_entries(PyObject*, PyObject* code) {
  if (!PyCode_Check(code)) {
    PyErr_SetString(PyExc_TypeError, "cache_entries(code)");
    return nullptr;
  }
  Ref list = Ref::steal(PyList_New(0));
  if (!list) return nullptr;
  cdynamo::cache::CodeExtra* extra = cdynamo::cache::lookup(reinterpret_cast<PyCodeObject*>(code));
  if (!extra) return list.release();
  for (const auto& e : extra->entries) {
    std::string guards = e->guards.describe();
    PyObject* gm = e->graph_module ? e->graph_module.get() : Py_None;
    Ref d = Ref::steal(Py_BuildValue("{s:s,s:s,s:O,s:n,s:O,s:n}", "name", e->name.c_str(), "guards", guards.c_str(),
                                     "graph_module", gm, "num_guards", static_cast<Py_ssize_t>(e->guards.numChecks()),
                                     "backend_config", e->config.get(), "side_effects",
                                     static_cast<Py_ssize_t>(e->effects.size())));
    if (!d || PyList_Append(list.get(), d.get()) < 0) return nullptr;
  }
  return list.release();
}

PyObject* py_opcode_counts(PyObject*, PyObject*) {
  Ref d = Ref::steal(PyDict_New());
  if (!d) return nullptr;
  for (int op = 0; op < 256; ++op) {
    const char* name = cdynamo::bytecode::opName(op);
    if (!name) continue;
    Ref n = Ref::steal(PyLong_FromUnsignedLongLong(cdynamo::opcodeCounts()[op]));
    if (!n || PyDict_SetItemString(d.get(), name, n.get()) < 0) return nullptr;
  }
  return d.release();
}

PyObject* py_set_log_channels(PyObject*, PyObject* arg) {
  unsigned long mask = PyLong_AsUnsignedLong(arg);
  if (PyErr_Occurred()) return nullptr;
  cdynamo::frame::setLogChannels(static_cast<unsigned>(mask));
  Py_RETURN_NONE;
}

PyObject* py_set_cache_size_limit(PyObject*, PyObject* arg) {
  long n = PyLong_AsLong(arg);
  if (PyErr_Occurred()) return nullptr;
  cdynamo::frame::setCacheSizeLimit(static_cast<int>(n));
  Py_RETURN_NONE;
}

PyObject* py_set_recompile_policy(PyObject*, PyObject* args) {
  int limit = 0, accumulated = 0, fail = 0;
  if (!PyArg_ParseTuple(args, "iip", &limit, &accumulated, &fail)) return nullptr;
  cdynamo::frame::setRecompilePolicy(limit, accumulated, fail != 0);
  Py_RETURN_NONE;
}

PyObject* py_recompile_reasons(PyObject*, PyObject*) {
  Ref list = Ref::steal(PyList_New(0));
  if (!list) return nullptr;
  for (const auto& r : cdynamo::frame::recompileRecords()) {
    Ref d = Ref::steal(Py_BuildValue("{s:s,s:s,s:O}", "function", r.function.c_str(), "reason", r.reason.c_str(),
                                     "compiled", r.compiled ? Py_True : Py_False));
    if (!d || PyList_Append(list.get(), d.get()) < 0) return nullptr;
  }
  return list.release();
}

PyObject* py_set_stance(PyObject*, PyObject* arg) {
  long n = PyLong_AsLong(arg);
  if (PyErr_Occurred()) return nullptr;
  if (n < 0 || n > 3) {
    PyErr_SetString(PyExc_ValueError, "set_stance(0..3)");
    return nullptr;
  }
  cdynamo::frame::setStance(static_cast<cdynamo::frame::Stance>(n));
  Py_RETURN_NONE;
}

PyObject* py_set_event_sink(PyObject*, PyObject* sink) {
  if (sink != Py_None && !PyCallable_Check(sink)) {
    PyErr_SetString(PyExc_TypeError, "set_event_sink(callable or None)");
    return nullptr;
  }
  cdynamo::frame::setEventSink(sink == Py_None ? nullptr : sink);
  Py_RETURN_NONE;
}

PyObject* py_set_call_rules(PyObject*, PyObject* rules) {
  if (rules != Py_None && !PyDict_Check(rules)) {
    PyErr_SetString(PyExc_TypeError, "set_call_rules(dict or None)");
    return nullptr;
  }
  cdynamo::trace::setCallRules(rules);
  Py_RETURN_NONE;
}

PyObject* py_in_fake_propagation(PyObject*, PyObject*) {
  return PyBool_FromLong(cdynamo::graph::inFakePropagation());
}

PyMethodDef methods[] = {
    {"call_compiled", reinterpret_cast<PyCFunction>(reinterpret_cast<void (*)(void)>(py_call_compiled)),
     METH_FASTCALL | METH_KEYWORDS, "call_compiled(config, fn, *args, **kwargs): call with the frame hook on"},
    {"call_disabled", reinterpret_cast<PyCFunction>(reinterpret_cast<void (*)(void)>(py_call_disabled)),
     METH_FASTCALL | METH_KEYWORDS, "call_disabled(fn, *args, **kwargs): call with no compile context (cdynamo.disable)"},
    {"mark_disabled", py_mark_disabled, METH_VARARGS,
     "mark_disabled(code, context_off=False): never trace this code (with context_off, nor what its frames call); "
     "survives reset()"},
    {"is_disabled", py_is_disabled, METH_O, "is_disabled(code): whether mark_disabled was applied"},
    {"set_file_rules", py_set_file_rules, METH_O, "set_file_rules([(path_prefix, traced), ...]): longest prefix wins"},
    {"reset", py_reset, METH_NOARGS, "drop every cache entry, per-code decision and counter"},
    {"stats", py_stats, METH_NOARGS, "counters since the last reset"},
    {"native_frames", py_native_frames, METH_NOARGS, "frames that ran natively, with reasons"},
    {"graph_breaks", py_graph_breaks, METH_NOARGS, "graph breaks compiled, with reasons"},
    {"resume_codes", py_resume_codes, METH_O, "the resume code objects of a break's resume table"},
    {"cache_entries", py_cache_entries, METH_O, "cache_entries(code): the entries of a code object"},
    {"opcode_counts", py_opcode_counts, METH_NOARGS, "opcode name -> times the interpreter completed it"},
    {"set_log_channels", py_set_log_channels, METH_O, "set the CDYNAMO_LOGS bit mask"},
    {"set_cache_size_limit", py_set_cache_size_limit, METH_O, "entries per code object before running natively"},
    {"set_recompile_policy", py_set_recompile_policy, METH_VARARGS,
     "set_recompile_policy(recompile_limit, accumulated_recompile_limit, fail_on_recompile_limit_hit)"},
    {"recompile_reasons", py_recompile_reasons, METH_NOARGS, "recompiles since the last reset, with the failing guards"},
    {"set_stance", py_set_stance, METH_O, "0 default, 1 force_eager, 2 eager_on_recompile, 3 fail_on_recompile"},
    {"set_call_rules", py_set_call_rules, METH_O,
     "set_call_rules(dict): {callable: rule} the tracer consults (1 graph break, 2 in graph, 3 constant result)"},
    {"set_event_sink", py_set_event_sink, METH_O, "set_event_sink(fn or None): fn(dict) per translation outcome"},
    {"in_fake_propagation", py_in_fake_propagation, METH_NOARGS,
     "whether this thread is running a trace's ops on fake tensors (not its backend)"},
    {nullptr, nullptr, 0, nullptr},
};

PyModuleDef moduledef = {PyModuleDef_HEAD_INIT, "cdynamo._C", "cdynamo C++ core", -1, methods};

}  // namespace

PyMODINIT_FUNC PyInit__C(void) {
  if (!cdynamo::guards::checkTorchVersion()) return nullptr;
  Ref m = Ref::steal(PyModule_Create(&moduledef));
  if (!m) return nullptr;
  // The tracer asks the code cache which code cdynamo.disable marked (see trace/disabled.h).
  cdynamo::trace::setDisabledCodeQuery([](PyCodeObject* code) { return cdynamo::cache::isDisabled(code); });
  cdynamo::frame::installForkHandler();
  Ref type = Ref::steal(PyType_FromSpec(&compiledSpec));
  if (!type || PyModule_AddObjectRef(m.get(), "CompiledFunction", type.get()) < 0) return nullptr;
  return m.release();
}
