// nn.Module containers (Sequential, ModuleList, ModuleDict): their children, iteration and
// which of their special methods are the container's own.
#include <cstring>
#include <string>

#include "support/lookup.h"
#include "support/torch_types.h"
#include "trace/engine/scalars.h"
#include "trace/kinds/module.h"
#include "trace/tracer.h"
#include "support/type_dict.h"

namespace cdynamo::trace {

using bytecode::BinaryOp;
using graph::NodeOp;

Done moduleContainerItems(Tracer& t, const ValuePtr& m, std::vector<std::pair<Ref, ValuePtr>>* out) {
  // nn.Sequential / ModuleList / ModuleDict hold their children in _modules; their
  // indexing, len and membership are answered from it, with its keys guarded.
  PyObject** dictptr = _PyObject_GetDictPtr(m->as<Module>().obj.get());
  PyObject* modules = dictptr && *dictptr ? PyDict_GetItemString(*dictptr, "_modules") : nullptr;
  if (!modules || !PyDict_Check(modules)) return t.fail("module without _modules");
  int mreg = t.load(guards::LoadKind::InstanceDict, m->reg, 0, interned(Str::underscore_modules),
                  t.guards().sourceName(m->reg) + "._modules");
  t.guards().checkDictKeys(mreg, modules);
  PyObject *key, *value;
  Py_ssize_t pos = 0;
  while (PyDict_Next(modules, &pos, &key, &value)) {
    int reg = t.load(guards::LoadKind::DictItem, mreg, 0, key,
                   t.guards().sourceName(mreg) + "['" + PyUnicode_AsUTF8(key) + "']");
    Result<ValuePtr> v = t.wrap(value, reg);
    if (!v) return v.stop();
    out->emplace_back(Ref::borrow(key), v.take());
  }
  return {};
}

// The container class (torch.nn.Sequential, ModuleList or ModuleDict) whose own `dunder`
// the module's class uses, or null.
PyObject* moduleContainerOwning(PyObject* module, PyObject* dunder) {
  PyObject* found = _PyType_Lookup(Py_TYPE(module), dunder);
  if (!found) return nullptr;
  for (Obj o : {Obj::torch_nn_Sequential, Obj::torch_nn_ModuleList, Obj::torch_nn_ModuleDict}) {
    PyObject* cls = lookup(o);
    if (!cls) {
      PyErr_Clear();
      continue;
    }
    PyObject* own = PyDict_GetItemWithError(typeDict(reinterpret_cast<PyTypeObject*>(cls)), dunder);
    if (!own) PyErr_Clear();
    if (own && own == found) return cls;
  }
  return nullptr;
}

bool isModuleContainer(const ValuePtr& m, PyObject* dunder) {
  return m->is(Kind::Module) && moduleContainerOwning(m->real(), dunder) != nullptr;
}

Result<ValuePtr> moduleIter(Tracer& t, const ValuePtr& obj) {
  // nn.Sequential and nn.ModuleList iterate over their submodules (_modules.values()).
  PyObject* m = obj->as<Module>().obj.get();
  PyObject* container = moduleContainerOwning(m, interned(Str::dunder_iter));
  if (!container || container == lookup(Obj::torch_nn_ModuleDict))  // ModuleDict iterates over names
    return t.fail(std::string("iterating a module of type ") + Py_TYPE(m)->tp_name + " is not supported yet");
  PyObject** dictptr = _PyObject_GetDictPtr(m);
  PyObject* modules = dictptr && *dictptr ? PyDict_GetItemString(*dictptr, "_modules") : nullptr;
  if (!modules || !PyDict_Check(modules)) return t.fail("module without _modules");
  int mreg = t.load(guards::LoadKind::InstanceDict, obj->reg, 0, interned(Str::underscore_modules),
                  t.guards().sourceName(obj->reg) + "._modules");
  t.guards().checkLength(mreg, PyDict_GET_SIZE(modules));
  std::vector<ValuePtr> items;
  PyObject *key, *value;
  Py_ssize_t pos = 0;
  while (PyDict_Next(modules, &pos, &key, &value)) {
    if (value == Py_None) continue;
    int reg =
        t.load(guards::LoadKind::DictItem, mreg, 0, key, t.guards().sourceName(mreg) + "['" + PyUnicode_AsUTF8(key) + "']");
    Result<ValuePtr> child = t.wrap(value, reg);
    if (!child) return child;
    items.push_back(child.take());
  }
  return Value::iterator(std::move(items));
}

}  // namespace cdynamo::trace
