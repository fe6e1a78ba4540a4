// Reading containers and iterators as a guard does: without consuming an iterator and
// without running a container's own Python methods (declared in guards/guard_program.h).
#include "guards/guard_program.h"

namespace cdynamo::guards {

Ref dictKeysInOrder(PyObject* dict) {
  if (!PyODict_Check(dict)) {
    Ref keys = Ref::steal(PyDict_Keys(dict));
    return keys ? Ref::steal(PyList_AsTuple(keys.get())) : Ref();
  }
  Ref it = Ref::steal(PyODict_Type.tp_iter(dict));
  if (!it) return Ref();
  Ref keys = Ref::steal(PyList_New(0));
  if (!keys) return Ref();
  while (PyObject* key = PyIter_Next(it.get())) {
    Ref held = Ref::steal(key);
    if (PyList_Append(keys.get(), key) < 0) return Ref();
  }
  if (PyErr_Occurred()) return Ref();
  return Ref::steal(PyList_AsTuple(keys.get()));
}

bool isReadableIterator(PyObject* it) {
  // The iterators of CPython's tuples, lists, ranges, dicts (keys, values, items) and sets:
  // their __reduce__ gives (iter, (items,)[, index]) and consumes nothing.
  static PyTypeObject* types[7] = {};
  static bool made = false;
  if (!made) {
    made = true;
    Ref empties[7] = {Ref::steal(PyTuple_New(0)), Ref::steal(PyList_New(0)), Ref::steal(PyObject_CallFunction(
                          reinterpret_cast<PyObject*>(&PyRange_Type), "i", 0)),
                      Ref::steal(PyDict_New()), Ref(), Ref(), Ref::steal(PySet_New(nullptr))};
    if (empties[3]) {
      empties[4] = Ref::steal(PyObject_CallMethod(empties[3].get(), "values", nullptr));
      empties[5] = Ref::steal(PyObject_CallMethod(empties[3].get(), "items", nullptr));
    }
    for (int i = 0; i < 7; ++i) {
      Ref iter = empties[i] ? Ref::steal(PyObject_GetIter(empties[i].get())) : Ref();
      if (iter) types[i] = Py_TYPE(iter.get());
    }
    PyErr_Clear();
  }
  for (PyTypeObject* t : types)
    if (t && Py_IS_TYPE(it, t)) return true;
  return false;
}

Ref iterRemaining(PyObject* it) {
  if (!isReadableIterator(it)) {
    PyErr_SetString(PyExc_TypeError, "not an iterator whose remaining items can be read");
    return Ref();
  }
  Ref state = Ref::steal(PyObject_CallMethod(it, "__reduce__", nullptr));
  if (!state) return Ref();
  if (!PyTuple_Check(state.get()) || PyTuple_GET_SIZE(state.get()) < 2 ||
      !PyTuple_Check(PyTuple_GET_ITEM(state.get(), 1)) || PyTuple_GET_SIZE(PyTuple_GET_ITEM(state.get(), 1)) != 1) {
    PyErr_SetString(PyExc_TypeError, "unexpected tuple_iterator.__reduce__() result");
    return Ref();
  }
  Ref seq = Ref::steal(PySequence_Tuple(PyTuple_GET_ITEM(PyTuple_GET_ITEM(state.get(), 1), 0)));
  if (!seq) return Ref();
  Py_ssize_t index = 0;
  // The index of the next item; 3.12's range iterator gives None with a range of what is
  // left (its start moved on) instead.
  if (PyTuple_GET_SIZE(state.get()) >= 3 && PyTuple_GET_ITEM(state.get(), 2) != Py_None) {
    index = PyLong_AsSsize_t(PyTuple_GET_ITEM(state.get(), 2));
    if (index < 0 && PyErr_Occurred()) return Ref();
  }
  return Ref::steal(PyTuple_GetSlice(seq.get(), index, PY_SSIZE_T_MAX));
}

namespace {

int firstVisited(PyObject* obj, void* arg) {
  PyObject** out = static_cast<PyObject**>(arg);
  if (!*out) *out = obj;
  return 0;
}

}  // namespace

PyObject* iterContainer(PyObject* it) {
  if (!isReadableIterator(it)) return nullptr;
  traverseproc traverse = Py_TYPE(it)->tp_traverse;
  if (!traverse) return nullptr;
  PyObject* first = nullptr;
  traverse(it, firstVisited, &first);
  if (!first || !(PyList_CheckExact(first) || PyDict_Check(first) || PyAnySet_Check(first))) return nullptr;
  return first;
}

Py_ssize_t listIteratorIndex(PyObject* it) {
  Ref state = Ref::steal(PyObject_CallMethod(it, "__reduce__", nullptr));
  if (!state) return -1;
  if (!PyTuple_Check(state.get()) || PyTuple_GET_SIZE(state.get()) < 3) {
    PyErr_SetString(PyExc_TypeError, "a list_iterator without an index in its __reduce__()");
    return -1;
  }
  return PyLong_AsSsize_t(PyTuple_GET_ITEM(state.get(), 2));
}

}  // namespace cdynamo::guards
