// The frame stage's view of a CPython 3.11 _PyInterpreterFrame (frame_internal.h picks this
// file or a later version's; each defines the same names).
#pragma once
// Included by frame_internal.h after <internal/pycore_frame.h>.

namespace cdynamo::frame::layout {

inline PyCodeObject* code(_PyInterpreterFrame* f) { return f->f_code; }
// The function the frame runs (null for frames without one).
inline PyObject* function(_PyInterpreterFrame* f) { return reinterpret_cast<PyObject*>(f->f_func); }
inline PyObject* closure(_PyInterpreterFrame* f) { return f->f_func ? f->f_func->func_closure : nullptr; }
// Whether the frame (running `c`, its code) has run nothing yet (a resumed generator has).
inline bool notStarted(_PyInterpreterFrame* f, PyCodeObject* c) { return f->prev_instr == _PyCode_CODE(c) - 1; }

// On 3.11 the code that called the hook clears and pops the frame after it returns, so a hook
// may return a result without evaluating the frame and has nothing more to do: the function
// installed is the hook itself, not a wrapper around it (the hit path is the same machine
// code as a build that knows only 3.11).
inline void noteEvaluated() {}
template <_PyFrameEvalFunction Eval>
inline constexpr _PyFrameEvalFunction installed = Eval;

}  // namespace cdynamo::frame::layout
