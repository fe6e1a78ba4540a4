// The extension module cdynamo._C: bindings only (STYLE.md habit 13). Each function here
// forwards to the stage that implements it.
#include <Python.h>

static PyMethodDef methods[] = {
    {nullptr, nullptr, 0, nullptr},
};

static PyModuleDef moduledef = {PyModuleDef_HEAD_INIT, "cdynamo._C", "cdynamo C++ core", -1, methods};

PyMODINIT_FUNC PyInit__C(void) { return PyModule_Create(&moduledef); }
