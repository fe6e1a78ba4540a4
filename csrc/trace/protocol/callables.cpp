// The table of callables known by identity (callables.h), built once per process from the
// rows of builtins.cpp and call_rules.cpp.
#include "trace/protocol/callables.h"

#include <unordered_map>

namespace cdynamo::trace {

namespace {

struct Table {
  std::unordered_map<PyObject*, CallableRow> by_object;    // the callable itself
  std::unordered_map<PyObject*, CallableRow> by_instance;  // the type of the callable
};

// Note [Python references in statics]: the keys are kept alive by the builtins module and
// the lookup cache for the process.
Table build() {
  Table t;
  PyObject* builtins = PyImport_AddModule("builtins");  // borrowed; always loaded
  PyObject* dict = builtins ? PyModule_GetDict(builtins) : nullptr;
  for (const BuiltinRow& b : builtinRows()) {
    PyObject* fn = dict ? PyDict_GetItemString(dict, b.builtin) : nullptr;
    if (!fn) continue;
    CallableRow row = b.row;
    row.builtin = true;
    t.by_object.emplace(fn, row);
  }
  for (const SpecialRow& s : specialRows()) {
    PyObject* o = lookup(s.object);
    if (!o) {  // not importable here: calls of it go to the rules
      PyErr_Clear();
      continue;
    }
    (s.instances ? t.by_instance : t.by_object).emplace(o, s.row);
  }
  PyErr_Clear();
  return t;
}

}  // namespace

const CallableRow* findCallable(PyObject* fn) {
  static const Table table = build();
  auto it = table.by_object.find(fn);
  if (it != table.by_object.end()) return &it->second;
  auto by_type = table.by_instance.find(reinterpret_cast<PyObject*>(Py_TYPE(fn)));
  return by_type == table.by_instance.end() ? nullptr : &by_type->second;
}

}  // namespace cdynamo::trace
