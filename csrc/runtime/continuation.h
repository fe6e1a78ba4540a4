// Continuing a frame after a graph break (see bytecode/resume.h for the generated code).
//
// A break code ends by calling `table(k, *locals, *stack)`, where `table` is the break's
// ResumeTable: the call returns a Continuation (resume code k, those arguments) instead
// of calling the resume function itself. The frame that started the chain (the original
// function's) then calls the resume functions one after another in a loop; a resume
// function that breaks again returns its own Continuation to that loop. A break inside a
// loop therefore costs constant stack depth however many iterations run, where nested
// calls would hit the recursion limit.
#pragma once
#include <Python.h>

#include <vector>

#include "support/pyref.h"

namespace cdynamo::runtime {

// A callable `table(k, *args)` returning a Continuation for codes[k]. Null with an error
// set on failure.
Ref makeResumeTable(std::vector<Ref> codes);

bool isContinuation(PyObject* o);

// The tuple of resume code objects of a ResumeTable (new reference; logs and tests).
PyObject* resumeTableCodes(PyObject* table);

// Follows continuations: while `r` is one, calls its resume function, made from its code
// with `globals` and `closure` (the original function's). Steals `r`; returns the final
// result (new reference) or null with an error set.
PyObject* runContinuations(PyObject* r, PyObject* globals, PyObject* closure);

// A function object for `code` with the frame's globals and closure (new reference).
PyObject* makeFunction(PyObject* code, PyObject* globals, PyObject* closure);

}  // namespace cdynamo::runtime
