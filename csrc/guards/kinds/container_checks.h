// The checks of containers and modules: lengths, a dict's keys, a module's hooks and
// instance attributes (CHECK rows of guards/guard_kinds.def; see guards/kinds/check_kind.h).
#pragma once
#include <Python.h>

#include <string>

#include "guards/kinds/check_kind.h"
#include "support/lookup.h"

namespace cdynamo::guards::checks {

struct Length {
  static bool run(const Check& c, PyObject* v, PyObject** regs, const GuardProgram& p) {
    // A tuple or list (subclass) by its C size: a subclass's own __len__ is not what the
    // trace read.
    Py_ssize_t n = PyTuple_Check(v) || PyList_Check(v) ? Py_SIZE(v) : PyObject_Length(v);
    if (n < 0) PyErr_Clear();
    return n == c.index;
  }
  static std::string describe(const Check& c, const GuardProgram& p) {
    return "len(" + c.what + ") == " + std::to_string(c.index);
  }
  static std::string explain(const Check& c, PyObject* v, PyObject** regs, const GuardProgram& p) {
    std::string reason = describe(c, p) + ", got " + std::to_string(PyObject_Length(v));
    PyErr_Clear();
    return reason;
  }
};

struct LengthAtLeast {
  static bool run(const Check& c, PyObject* v, PyObject** regs, const GuardProgram& p) {
    Py_ssize_t n = PyObject_Length(v);
    if (n < 0) return PyErr_Clear(), false;
    return n >= c.index;
  }
  static std::string describe(const Check& c, const GuardProgram& p) {
    return "len(" + c.what + ") >= " + std::to_string(c.index);
  }
  static std::string explain(const Check& c, PyObject* v, PyObject** regs, const GuardProgram& p) {
    return kinds::failedCheck(describe(c, p));
  }
};

struct DictEmpty {
  static bool run(const Check& c, PyObject* v, PyObject** regs, const GuardProgram& p) {
    return PyDict_Check(v) && PyDict_GET_SIZE(v) == 0;
  }
  static std::string describe(const Check& c, const GuardProgram& p) { return "not " + c.what; }
  static std::string explain(const Check& c, PyObject* v, PyObject** regs, const GuardProgram& p) {
    return kinds::failedCheck(describe(c, p));
  }
};

struct DictKeys {
  static bool run(const Check& c, PyObject* v, PyObject** regs, const GuardProgram& p) {
    PyObject* keys = c.obj.get();
    if (!PyDict_Check(v) || PyDict_GET_SIZE(v) != PyTuple_GET_SIZE(keys)) return false;
    if (PyODict_Check(v)) {
      // An OrderedDict is walked in its linked order, which move_to_end changes without
      // touching the storage order PyDict_Next sees; the keys were recorded in that order
      // (dictKeysInOrder). Its C iterator runs no Python code, but allocates.
      Ref it = Ref::steal(PyODict_Type.tp_iter(v));
      if (!it) return PyErr_Clear(), false;
      for (Py_ssize_t i = 0; i < PyTuple_GET_SIZE(keys); ++i) {
        Ref k = Ref::steal(PyIter_Next(it.get()));
        if (!k || !kinds::sameKey(k.get(), PyTuple_GET_ITEM(keys, i))) return PyErr_Clear(), false;
      }
      return true;
    }
    PyObject *key, *value;
    Py_ssize_t pos = 0, i = 0;
    while (PyDict_Next(v, &pos, &key, &value)) {
      PyObject* expected = PyTuple_GET_ITEM(keys, i++);
      if (!kinds::sameKey(key, expected)) return false;
    }
    return true;
  }
  static std::string describe(const Check& c, const GuardProgram& p) {
    return "list(" + c.what + ".keys()) == " + kinds::reprOf(c.obj.get());
  }
  static std::string explain(const Check& c, PyObject* v, PyObject** regs, const GuardProgram& p) {
    return kinds::failedCheck(describe(c, p));
  }
};

struct NoHooks {
  // One read of the module's __dict__ for its four hook dicts (a module is called inline
  // only while none of its hooks would run), and for the attributes that must be absent
  // from it (c.absent), remembered while that __dict__'s version stands.
  static bool run(const Check& c, PyObject* v, PyObject** regs, const GuardProgram& p) {
    static PyObject* const kHooks[] = {interned(Str::forward_hooks), interned(Str::forward_pre_hooks),
                                       interned(Str::backward_hooks), interned(Str::backward_pre_hooks)};
    PyObject** dictptr = _PyObject_GetDictPtr(v);
    if (!dictptr || !*dictptr) return false;
    PyObject* mdict = *dictptr;
    DictMemo& memo = c.hooks_memo;
    if (mdict != memo.dict || kinds::versionOf(mdict) != memo.tag) {
      uint64_t tag = kinds::versionOf(mdict);
      PyObject* found[4];
      for (int i = 0; i < 4; ++i) {
        found[i] = PyDict_GetItemWithError(mdict, kHooks[i]);  // interned str keys: no Python code
        if (!found[i] && PyErr_Occurred()) return PyErr_Clear(), false;
        if (found[i] && !PyDict_Check(found[i])) return false;
      }
      for (const Ref& name : c.absent) {  // str keys: no Python code
        if (PyDict_GetItemWithError(mdict, name.get())) return false;
        if (PyErr_Occurred()) return PyErr_Clear(), false;
      }
      memo = DictMemo{mdict, tag, nullptr};
      for (int i = 0; i < 4; ++i) c.hook_dicts[i] = found[i];
    }
    for (PyObject* d : c.hook_dicts)
      if (d && PyDict_GET_SIZE(d) != 0) return false;
    return true;
  }
  static std::string describe(const Check& c, const GuardProgram& p) {
    std::string text = c.what + " has no module hooks";
    for (const Ref& name : c.absent) text += std::string(", '") + PyUnicode_AsUTF8(name.get()) + "' not in its __dict__";
    return text;
  }
  static std::string explain(const Check& c, PyObject* v, PyObject** regs, const GuardProgram& p) {
    return kinds::failedCheck(describe(c, p));
  }
};

struct NoInstanceAttr {
  static bool run(const Check& c, PyObject* v, PyObject** regs, const GuardProgram& p) {
    PyObject** dictptr = PyDict_CheckExact(v) ? &v : _PyObject_GetDictPtr(v);
    if (!dictptr || !*dictptr) return true;
    PyObject* d = *dictptr;
    DictMemo& memo = c.hooks_memo;
    if (d == memo.dict && kinds::versionOf(d) == memo.tag) return true;  // unchanged since it lacked the key
    if (PyDict_GetItemWithError(d, c.obj.get())) return false;  // str key: no Python code
    if (PyErr_Occurred()) return PyErr_Clear(), false;
    memo = DictMemo{d, kinds::versionOf(d), nullptr};
    return true;
  }
  static std::string describe(const Check& c, const GuardProgram& p) {
    return "'" + std::string(PyUnicode_AsUTF8(c.obj.get())) + "' not in " + c.what + ".__dict__";
  }
  static std::string explain(const Check& c, PyObject* v, PyObject** regs, const GuardProgram& p) {
    return kinds::failedCheck(describe(c, p));
  }
};

}  // namespace cdynamo::guards::checks
