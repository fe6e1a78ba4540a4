// What the guard kinds' functions share (internal to csrc/guards): the shape of a check
// kind's struct, and the small helpers several kinds use.
//
// A check kind (a CHECK row of guards/guard_kinds.def) is a struct of static functions:
//
//   struct Name {
//     // Hot (GuardProgram::run, runCheck): whether the check passes. `v` is regs[c.reg]
//     // (null when the kind reads no register). Never leaves a Python error set.
//     static bool run(const Check& c, PyObject* v, PyObject** regs, const GuardProgram& p);
//     // Cold: the check as one line of GuardProgram::describe.
//     static std::string describe(const Check& c, const GuardProgram& p);
//     // Cold: why it failed (run returned false on these registers), in the user's terms.
//     static std::string explain(const Check& c, PyObject* v, PyObject** regs, const GuardProgram& p);
//   };
//
// The functions are defined in the family headers (object_checks.h, tensor_checks.h,
// container_checks.h, state_checks.h), inline, so that the dispatch in runCheck compiles to
// the same jump table over inlined bodies a hand-written switch would: a kind costs no
// call of its own on the hit path.
#pragma once
#include <Python.h>

#include <cstring>
#include <string>

#include "guards/guard_program.h"

namespace cdynamo::guards::kinds {

// Borrowed object behind a check's weakref (None when dead, which never equals a live
// object), or the object itself when it is held strongly.
inline PyObject* deref(const Check& c) { return c.weak ? PyWeakref_GET_OBJECT(c.obj.get()) : c.obj.get(); }

// A dict's version tag (PEP 509, see DictMemo).
inline uint64_t versionOf(PyObject* dict) { return reinterpret_cast<PyDictObject*>(dict)->ma_version_tag; }

// dict[name] (borrowed; null, maybe with an error set, when absent), through memo.
inline PyObject* memoLookup(DictMemo& memo, PyObject* dict, PyObject* name) {
  uint64_t tag = versionOf(dict);
  if (dict == memo.dict && tag == memo.tag) return memo.value;
  PyObject* v = PyDict_GetItemWithError(dict, name);
  // Only when the lookup ran no Python code that changed the dict (str keys compare in C;
  // a key of another type may run __eq__): the tag read before it still stands.
  if (v && versionOf(dict) == tag) memo = DictMemo{dict, tag, v};
  return v;
}

// The same object, or equal objects of the same type (a folded constant). Never leaves a
// Python error set.
inline bool sameConstant(PyObject* a, PyObject* b) {
  if (a == b) return true;
  if (Py_TYPE(a) != Py_TYPE(b)) return false;
  int eq = PyObject_RichCompareBool(a, b, Py_EQ);
  if (eq < 0) PyErr_Clear();
  return eq == 1;
}

// Whether two dict keys (or load names: attribute names, keys of DictItem loads) are the
// same key. Never leaves a Python error set. Keys of different exact types are different (1
// and True, 1 and 1.0 are distinct loads); only value types (str, int, float, bool, bytes,
// complex, range, torch.device, and tuples of them) compare by value: any other key (a
// tensor, a module, a class, a function, a user object) is the same key only as the same
// object, as it hashes by identity; comparing those with == could run user code or, for
// tensors, compare elements.
inline bool sameKey(PyObject* a, PyObject* b) {
  if (a == b) return true;
  PyTypeObject* t = Py_TYPE(a);
  if (t != Py_TYPE(b)) return false;
  if (t == &PyUnicode_Type) return PyUnicode_Compare(a, b) == 0;
  if (PyTuple_Check(a)) {  // a tuple, torch.Size or a namedtuple: item by item
    if (PyTuple_GET_SIZE(a) != PyTuple_GET_SIZE(b)) return false;
    for (Py_ssize_t i = 0; i < PyTuple_GET_SIZE(a); ++i)
      if (!sameKey(PyTuple_GET_ITEM(a, i), PyTuple_GET_ITEM(b, i))) return false;
    return true;
  }
  if (t != &PyLong_Type && t != &PyFloat_Type && t != &PyBool_Type && t != &PyBytes_Type && t != &PyComplex_Type &&
      t != &PyRange_Type && strcmp(t->tp_name, "torch.device") != 0)
    return false;
  int r = PyObject_RichCompareBool(a, b, Py_EQ);
  if (r < 0) {
    PyErr_Clear();
    return false;
  }
  return r == 1;
}

// Cold, for messages (guard_describe.cpp).
// The name of an expected type (or of a class that has died since the compile).
std::string typeName(PyObject* type);
// repr(o), cut to 80 characters; "<unprintable>" when repr fails (no error left set).
std::string reprOf(PyObject* o);
// The explanation of a kind with nothing more to say than what it checks.
std::string failedCheck(const std::string& description);

}  // namespace cdynamo::guards::kinds
