// The load kinds (the LOAD rows of guards/guard_kinds.def): how each one reads its object
// (internal to csrc/guards; GuardProgram::runLoad dispatches here).
//
// run(ld, f, regs): the object the load puts into its register, or null when it cannot be
// read (a Python error may then be set; the caller clears it and fails the guard). An owned
// kind (the table's `owned`) returns a new reference, the others a borrowed one. A load
// through a register (ld.base) finds it filled: its load ran before.
#pragma once
#include <Python.h>

#include "guards/guard_program.h"
#include "guards/kinds/check_kind.h"
#include "support/set_table.h"
#include "support/type_dict.h"

namespace cdynamo::guards::loads {

struct Local {
  static PyObject* run(const Load& ld, const FrameView& f, PyObject** regs) {
    return ld.index < f.nfast ? f.fast[ld.index] : nullptr;
  }
};

struct Global {
  static PyObject* run(const Load& ld, const FrameView& f, PyObject** regs) {
    PyObject* out = PyDict_GetItemWithError(f.globals, ld.name.get());
    if (!out && !PyErr_Occurred()) out = PyDict_GetItemWithError(f.builtins, ld.name.get());
    return out;
  }
};

struct ClosureCell {
  static PyObject* run(const Load& ld, const FrameView& f, PyObject** regs) {
    if (!f.closure || ld.index >= PyTuple_GET_SIZE(f.closure)) return nullptr;
    PyObject* cell = PyTuple_GET_ITEM(f.closure, ld.index);
    return PyCell_Check(cell) ? PyCell_GET(cell) : nullptr;  // null: an empty cell
  }
};

struct ClosureCellObject {
  static PyObject* run(const Load& ld, const FrameView& f, PyObject** regs) {
    return f.closure && ld.index < PyTuple_GET_SIZE(f.closure) ? PyTuple_GET_ITEM(f.closure, ld.index) : nullptr;
  }
};

struct InstanceDict {
  static PyObject* run(const Load& ld, const FrameView& f, PyObject** regs) {
    PyObject** dictptr = _PyObject_GetDictPtr(regs[ld.base]);
    return dictptr && *dictptr ? kinds::memoLookup(ld.memo, *dictptr, ld.name.get()) : nullptr;
  }
};

struct DictItem {
  static PyObject* run(const Load& ld, const FrameView& f, PyObject** regs) {
    return PyDict_Check(regs[ld.base]) ? kinds::memoLookup(ld.memo, regs[ld.base], ld.name.get()) : nullptr;
  }
};

struct TupleItem {
  static PyObject* run(const Load& ld, const FrameView& f, PyObject** regs) {
    PyObject* t = regs[ld.base];
    return PyTuple_Check(t) && ld.index < PyTuple_GET_SIZE(t) ? PyTuple_GET_ITEM(t, ld.index) : nullptr;
  }
};

struct ListItem {
  static PyObject* run(const Load& ld, const FrameView& f, PyObject** regs) {
    PyObject* l = regs[ld.base];
    return PyList_Check(l) && ld.index < PyList_GET_SIZE(l) ? PyList_GET_ITEM(l, ld.index) : nullptr;
  }
};

struct Attr {
  static PyObject* run(const Load& ld, const FrameView& f, PyObject** regs) {
    return PyObject_GetAttr(regs[ld.base], ld.name.get());
  }
};

struct IterRemaining {
  static PyObject* run(const Load& ld, const FrameView& f, PyObject** regs) {
    return iterRemaining(regs[ld.base]).release();
  }
};

struct Constant {
  static PyObject* run(const Load& ld, const FrameView& f, PyObject** regs) { return ld.name.get(); }
};

struct ViewDict {
  static PyObject* run(const Load& ld, const FrameView& f, PyObject** regs) {
    PyObject* view = regs[ld.base];
    if (!PyDictKeys_Check(view) && !PyDictValues_Check(view) && !PyDictItems_Check(view)) return nullptr;
    return reinterpret_cast<PyObject*>(reinterpret_cast<_PyDictViewObject*>(view)->dv_dict);
  }
};

struct ClassDict {
  static PyObject* run(const Load& ld, const FrameView& f, PyObject** regs) {
    PyObject* type = ld.index ? PyWeakref_GET_OBJECT(ld.name.get()) : ld.name.get();
    return PyType_Check(type) ? typeDict(reinterpret_cast<PyTypeObject*>(type)) : nullptr;
  }
};

struct SetTable {
  static PyObject* run(const Load& ld, const FrameView& f, PyObject** regs) {
    return PySet_CheckExact(regs[ld.base]) ? setTableLayout(regs[ld.base]).release() : nullptr;
  }
};

struct IterContainer {
  static PyObject* run(const Load& ld, const FrameView& f, PyObject** regs) { return iterContainer(regs[ld.base]); }
};

struct IterIndex {
  static PyObject* run(const Load& ld, const FrameView& f, PyObject** regs) {
    if (!iterContainer(regs[ld.base]) || !PyList_CheckExact(iterContainer(regs[ld.base]))) return nullptr;
    Py_ssize_t index = listIteratorIndex(regs[ld.base]);
    return index >= 0 ? PyLong_FromSsize_t(index) : nullptr;
  }
};

}  // namespace cdynamo::guards::loads
