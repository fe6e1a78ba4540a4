// The frame stage's view of a CPython 3.12 _PyInterpreterFrame (frame_internal.h picks this
// file; frame_layout_311.h defines the same names for 3.11).
#pragma once
// Included by frame_internal.h after <internal/pycore_frame.h>.

#include "support/check.h"

namespace cdynamo::frame::layout {

inline PyCodeObject* code(_PyInterpreterFrame* f) { return f->f_code; }
// The function the frame runs (f_funcobj; null or not a function for frames without one).
inline PyObject* function(_PyInterpreterFrame* f) {
  return f->f_funcobj && PyFunction_Check(f->f_funcobj) ? f->f_funcobj : nullptr;
}
inline PyObject* closure(_PyInterpreterFrame* f) {
  PyObject* fn = function(f);
  return fn ? reinterpret_cast<PyFunctionObject*>(fn)->func_closure : nullptr;
}
// Whether the frame has run nothing yet and belongs to the thread: only such a frame may be
// answered without being evaluated, and clearUnevaluated can clear it (a frame object made
// for it before it ran would need the frame copied into it first).
inline bool notStarted(_PyInterpreterFrame* f, PyCodeObject* c) {
  return f->prev_instr == _PyCode_CODE(c) - 1 && f->owner == FRAME_OWNED_BY_THREAD && !f->frame_obj;
}

// Note [The callee clears the frame]: on 3.12 the frame a hook receives is cleared and popped
// by the function that evaluates it (_PyEval_EvalFrameDefault, on its way out), not by the
// caller: a hook that returns without evaluating it (a cache hit, an error) must clear it
// itself, or its references and its stack space leak. `hook` wraps the hook: every handing
// of the frame to an evaluator marks it evaluated (noteEvaluated, through the pointer the
// innermost hook call owns), and a frame left unmarked is cleared as CPython would: its
// locals and stack, f_locals, the function and the code dropped, then its space popped off
// the thread's data stack (freeing the chunk it began, as _PyThreadState_PopFrame does).
// The frame was never linked as the thread's current frame, so nothing sees it meanwhile.
inline thread_local bool* tls_evaluated = nullptr;

inline void noteEvaluated() {
  if (tls_evaluated) *tls_evaluated = true;
}

inline void clearUnevaluated(PyThreadState* ts, _PyInterpreterFrame* frame) {
  CDYNAMO_CHECK(frame->owner == FRAME_OWNED_BY_THREAD && frame->frame_obj == nullptr,
                "an unevaluated frame the hook cannot clear");
  for (int i = 0; i < frame->stacktop; i++) Py_XDECREF(frame->localsplus[i]);
  Py_XDECREF(frame->f_locals);
  Py_DECREF(frame->f_funcobj);
  Py_DECREF(frame->f_code);
  PyObject** base = reinterpret_cast<PyObject**>(frame);
  _PyStackChunk* chunk = ts->datastack_chunk;
  if (base == &chunk->data[0]) {
    _PyStackChunk* previous = chunk->previous;
    ts->datastack_top = &previous->data[previous->top];
    ts->datastack_chunk = previous;
    ts->datastack_limit = reinterpret_cast<PyObject**>(reinterpret_cast<char*>(previous) + previous->size);
    PyObjectArenaAllocator arena;
    PyObject_GetArenaAllocator(&arena);
    arena.free(arena.ctx, chunk, chunk->size);
  } else {
    ts->datastack_top = base;
  }
}

template <PyObject* (*Eval)(PyThreadState*, _PyInterpreterFrame*, int)>
PyObject* hook(PyThreadState* ts, _PyInterpreterFrame* frame, int throw_flag) {
  bool evaluated = false;
  bool* saved = tls_evaluated;
  tls_evaluated = &evaluated;
  PyObject* result = Eval(ts, frame, throw_flag);
  tls_evaluated = saved;
  if (!evaluated) clearUnevaluated(ts, frame);
  return result;
}

// The function installed: the hook inside the protocol above.
template <_PyFrameEvalFunction Eval>
inline constexpr _PyFrameEvalFunction installed = hook<Eval>;

}  // namespace cdynamo::frame::layout
