// The PEP 523 frame hook: its install and uninstall, the thread's compile context, and the
// hit path (callCompiled, evalFrame: a code object's cached entry runs without the frame
// being evaluated). A miss goes to compile_miss.cpp. This stage and csrc/bytecode are the
// only places that read CPython's internal frame layout; everything downstream sees a
// FrameView.
#include "frame/frame_internal.h"

#include "bytecode/resume.h"
#include "cache/code_cache.h"
#include "frame/compile_lock.h"
#include "frame/eval_frame.h"
#include "graph/fake_autograd.h"
#include "graph/torch_refs.h"
#include "support/lookup.h"
#include "support/pyref.h"
#include "support/stats.h"

#include <initializer_list>
#include <vector>

#include <pthread.h>

namespace cdynamo::frame {
namespace internal {

Stance stance = Stance::Default;

namespace {
// The compile configuration of the compiled function running on this thread (borrowed:
// callCompiled's caller holds it), or null when cdynamo is not active here.
thread_local PyObject* tls_config = nullptr;
// Set while a frame that hit its recompile limit runs natively (torch._dynamo's
// skip_code_recursive_on_recompile_limit_hit, RUN_ONLY): the frames it calls use the cache
// entries they have but compile nothing new.
thread_local bool tls_run_only = false;
int threads_active = 0;  // guarded by the GIL
}  // namespace

ContextOff::ContextOff() : saved_(tls_config) { tls_config = nullptr; }
ContextOff::~ContextOff() { tls_config = saved_; }

namespace {

FrameView viewOf(_PyInterpreterFrame* frame) {
  FrameView v;
  v.code = layout::code(frame);
  v.function = layout::function(frame);
  v.fast = frame->localsplus;
  v.nfast = v.code->co_nlocalsplus;
  v.globals = frame->f_globals;
  v.builtins = frame->f_builtins;
  v.closure = layout::closure(frame);
  return v;
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
  layout::noteEvaluated();  // the other hook evaluates (or clears) it
  if (!previous_eval || tls_passing_on == frame) return _PyEval_EvalFrameDefault(ts, frame, throw_flag);
  _PyInterpreterFrame* saved = tls_passing_on;
  tls_passing_on = frame;
  PyObject* result = previous_eval(ts, frame, throw_flag);
  tls_passing_on = saved;
  return result;
}

PyObject* evalFrame(PyThreadState* ts, _PyInterpreterFrame* frame, int throw_flag) {
  PyObject* config = tls_config;
  if (!config) return evalOther(ts, frame, throw_flag);
  // throw_flag: a generator being closed or thrown into. A trace or profile function
  // (debugger, coverage.py, cProfile) must see the lines and calls eager execution has:
  // the frame runs natively, entries untouched.
  if (throw_flag || ts->c_tracefunc || ts->c_profilefunc) return evalDefault(ts, frame, throw_flag);
  PyCodeObject* code = layout::code(frame);
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
  if (!layout::notStarted(frame, code)) return evalDefault(ts, frame, throw_flag);
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
  bool error = false, limit_hit = false;
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
        entry = compileMiss(extra, config, view, &error, &limit_hit);
    }
  }  // Released before anything runs: the frame or entry may call compiled functions.
  if (error) return compileFailed(ts, frame, extra);
  if (!entry && limit_hit) {
    const bool saved = tls_run_only;
    tls_run_only = true;
    PyObject* result = evalDefault(ts, frame, 0);
    tls_run_only = saved;
    return result;
  }
  if (!entry) return evalDefault(ts, frame, 0);
  return runEntry(ts, frame, extra, entry, view);
}

// The function installed: evalFrame inside the version's eval-frame protocol
// (frame_layout_3XX.h; on 3.11 evalFrame itself).
constexpr _PyFrameEvalFunction kHook = layout::installed<evalFrame>;

void installHook() {
  PyInterpreterState* interp = PyThreadState_GetInterpreter(PyThreadState_Get());
  _PyFrameEvalFunction current = _PyInterpreterState_GetEvalFrameFunc(interp);
  if (current == kHook) return;  // still in (see uninstallHook)
  previous_eval = current == _PyEval_EvalFrameDefault ? nullptr : current;
  _PyInterpreterState_SetEvalFrameFunc(interp, kHook);
}

void uninstallHook() {
  PyInterpreterState* interp = PyThreadState_GetInterpreter(PyThreadState_Get());
  // Someone installed their function over ours (torch._dynamo does, and puts ours back when
  // it is done): leave theirs; ours, once back, passes every frame on until the next time
  // the last compiled call ends.
  if (_PyInterpreterState_GetEvalFrameFunc(interp) != kHook) return;
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
}  // namespace internal

using namespace internal;

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

void setStance(Stance s) { stance = s; }

}  // namespace cdynamo::frame
