#include "support/set_table.h"

namespace cdynamo {

namespace {

bool exactSets(PyObject* a, PyObject* b) {
  if (PySet_CheckExact(a) && PySet_CheckExact(b)) return true;
  PyErr_SetString(PyExc_TypeError, "cdynamo: a set's table can only be copied between sets");
  return false;
}

}  // namespace

int assignSetTable(PyObject* target, PyObject* source) {
  if (!exactSets(target, source)) return -1;
  if (target == source) return 0;
  auto* dst = reinterpret_cast<PySetObject*>(target);
  auto* src = reinterpret_cast<PySetObject*>(source);
  const Py_ssize_t size = src->mask + 1;
  setentry* table = dst->smalltable;
  if (size > PySet_MINSIZE) {
    table = PyMem_New(setentry, static_cast<size_t>(size));  // what set_table_resize allocates with
    if (!table) {
      PyErr_NoMemory();
      return -1;
    }
  }
  // Empty the target first (its items may run code when released: a __del__), keeping its
  // smalltable when the new table lives there; then copy the entries. Dummy entries share
  // the one dummy object and hold no reference to it (setobject.c).
  if (table == dst->smalltable) {
    setentry* scratch = PyMem_New(setentry, static_cast<size_t>(size));
    if (!scratch) {
      PyErr_NoMemory();
      return -1;
    }
    for (Py_ssize_t i = 0; i < size; ++i) {
      scratch[i] = src->table[i];
      if (scratch[i].key && scratch[i].key != _PySet_Dummy) Py_INCREF(scratch[i].key);  // why: the entry's own
    }
    if (PySet_Clear(target) < 0) {
      for (Py_ssize_t i = 0; i < size; ++i)
        if (scratch[i].key && scratch[i].key != _PySet_Dummy) Py_DECREF(scratch[i].key);  // why: undo the above
      PyMem_Free(scratch);
      return -1;
    }
    // PySet_Clear left the target on its zeroed smalltable.
    for (Py_ssize_t i = 0; i < size; ++i) dst->smalltable[i] = scratch[i];
    PyMem_Free(scratch);
  } else {
    for (Py_ssize_t i = 0; i < size; ++i) {
      table[i] = src->table[i];
      if (table[i].key && table[i].key != _PySet_Dummy) Py_INCREF(table[i].key);  // why: the entry's own
    }
    if (PySet_Clear(target) < 0) {
      for (Py_ssize_t i = 0; i < size; ++i)
        if (table[i].key && table[i].key != _PySet_Dummy) Py_DECREF(table[i].key);  // why: undo the above
      PyMem_Free(table);
      return -1;
    }
    dst->table = table;
  }
  dst->mask = src->mask;
  dst->fill = src->fill;
  dst->used = src->used;
  dst->finger = src->finger;
  dst->hash = -1;
  return 0;
}

Ref copySetTable(PyObject* set) {
  if (!PySet_CheckExact(set)) {
    PyErr_SetString(PyExc_TypeError, "cdynamo: a set's table can only be copied from a set");
    return Ref();
  }
  Ref out = Ref::steal(PySet_New(nullptr));
  if (!out || assignSetTable(out.get(), set) < 0) return Ref();
  return out;
}

Ref setTableLayout(PyObject* set) {
  if (!PySet_CheckExact(set)) {
    PyErr_SetString(PyExc_TypeError, "cdynamo: the table layout of a set only");
    return Ref();
  }
  auto* so = reinterpret_cast<PySetObject*>(set);
  const Py_ssize_t size = so->mask + 1;
  Ref keys = Ref::steal(PyList_New(0));
  Ref types = Ref::steal(PyList_New(0));
  Ref slots = Ref::steal(PyList_New(0));
  Ref dummies = Ref::steal(PyList_New(0));
  if (!keys || !types || !slots || !dummies) return Ref();
  for (Py_ssize_t i = 0; i < size; ++i) {
    PyObject* key = so->table[i].key;
    if (!key) continue;
    Ref index = Ref::steal(PyLong_FromSsize_t(i));
    if (!index) return Ref();
    if (key == _PySet_Dummy) {
      if (PyList_Append(dummies.get(), index.get()) < 0) return Ref();
      continue;
    }
    if (PyList_Append(slots.get(), index.get()) < 0 || PyList_Append(keys.get(), key) < 0 ||
        PyList_Append(types.get(), reinterpret_cast<PyObject*>(Py_TYPE(key))) < 0)
      return Ref();
  }
  Ref k = Ref::steal(PyList_AsTuple(keys.get()));
  Ref t = Ref::steal(PyList_AsTuple(types.get()));
  Ref s = Ref::steal(PyList_AsTuple(slots.get()));
  Ref d = Ref::steal(PyList_AsTuple(dummies.get()));
  if (!k || !t || !s || !d) return Ref();
  return Ref::steal(Py_BuildValue("(nnnnOOOO)", so->mask, so->fill, so->used, so->finger, s.get(), d.get(), t.get(),
                                  k.get()));
}

namespace {

PyObject* copierImpl(PyObject*, PyObject* set) { return copySetTable(set).release(); }

PyMethodDef copierDef = {"cdynamo_copy_set_table", copierImpl, METH_O,
                         "cdynamo_copy_set_table(s): a set with a copy of s's table (walks and pops as s)"};

}  // namespace

PyObject* setTableCopier() {
  static PyObject* fn = PyCFunction_New(&copierDef, nullptr);  // made once, kept for the process
  if (!fn && !PyErr_Occurred()) PyErr_SetString(PyExc_RuntimeError, "cdynamo: cannot make the set copier");
  return fn;
}

}  // namespace cdynamo
