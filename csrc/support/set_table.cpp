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
  // The entries are copied (each key's reference taken) into a heap buffer first, then the
  // target is emptied (its items may run code when released: a __del__), then the buffer
  // becomes its table, or is copied into its smalltable (PySet_Clear leaves it there, zeroed)
  // when the source's table is that small. PyMem_New is what set_table_resize allocates with.
  // Dummy entries share the one dummy object and hold no reference to it (setobject.c).
  setentry* table = PyMem_New(setentry, static_cast<size_t>(size));
  if (!table) {
    PyErr_NoMemory();
    return -1;
  }
  auto owns = [](const setentry& e) { return e.key && e.key != _PySet_Dummy; };
  for (Py_ssize_t i = 0; i < size; ++i) {
    table[i] = src->table[i];
    if (owns(table[i])) Py_INCREF(table[i].key);  // why: the entry's own
  }
  if (PySet_Clear(target) < 0) {
    for (Py_ssize_t i = 0; i < size; ++i)
      if (owns(table[i])) Py_DECREF(table[i].key);  // why: undo the above
    PyMem_Free(table);
    return -1;
  }
  if (size <= PySet_MINSIZE) {
    for (Py_ssize_t i = 0; i < size; ++i) dst->smalltable[i] = table[i];
    PyMem_Free(table);
  } else {
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
