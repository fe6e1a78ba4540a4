#include "trace/values/value.h"

#include <cstring>

namespace cdynamo::trace {

ValuePtr Value::null() {
  auto v = std::make_shared<Value>();
  v->kind = Kind::Null;
  return v;
}

ValuePtr Value::tensor(int node, int reg) {
  auto v = std::make_shared<Value>();
  v->kind = Kind::Tensor;
  v->node = node;
  v->reg = reg;
  return v;
}

ValuePtr Value::constant(PyObject* o, int reg) {
  auto v = std::make_shared<Value>();
  v->kind = Kind::Constant;
  v->obj = Ref::borrow(o);
  v->reg = reg;
  return v;
}

ValuePtr Value::sequence(Kind kind, std::vector<ValuePtr> items, int reg) {
  auto v = std::make_shared<Value>();
  v->kind = kind;
  v->items = std::move(items);
  v->reg = reg;
  return v;
}

ValuePtr Value::object(Kind kind, PyObject* o, int reg) {
  auto v = std::make_shared<Value>();
  v->kind = kind;
  v->obj = Ref::borrow(o);
  v->reg = reg;
  return v;
}

ValuePtr Value::tensorMethod(ValuePtr receiver, PyObject* name) {
  auto v = std::make_shared<Value>();
  v->kind = Kind::Method;
  v->items.push_back(std::move(receiver));
  v->name = Ref::borrow(name);
  return v;
}

ValuePtr Value::boundMethod(ValuePtr receiver, PyObject* function) {
  auto v = std::make_shared<Value>();
  v->kind = Kind::Method;
  v->items.push_back(std::move(receiver));
  v->obj = Ref::borrow(function);
  return v;
}

ValuePtr Value::dict(PyObject* type, std::vector<Ref> keys, std::vector<ValuePtr> values) {
  auto v = std::make_shared<Value>();
  v->kind = Kind::Dict;
  v->obj = Ref::borrow(type);
  v->keys = std::move(keys);
  v->items = std::move(values);
  return v;
}

int Value::findKey(PyObject* key) const {
  for (size_t i = 0; i < keys.size(); ++i) {
    if (keys[i].get() == key) return static_cast<int>(i);
    int eq = PyObject_RichCompareBool(keys[i].get(), key, Py_EQ);
    if (eq < 0) return -2;
    if (eq) return static_cast<int>(i);
  }
  return -1;
}

const char* kindName(Kind k) {
  switch (k) {
    case Kind::Null: return "NULL";
    case Kind::Tensor: return "tensor";
    case Kind::Constant: return "constant";
    case Kind::Tuple: return "tuple";
    case Kind::List: return "list";
    case Kind::Slice: return "slice";
    case Kind::Iterator: return "iterator";
    case Kind::Callable: return "callable";
    case Kind::Method: return "method";
    case Kind::Module: return "nn.Module";
    case Kind::PyModule: return "module";
    case Kind::Dict: return "dict";
    case Kind::Set: return "set";
    case Kind::Cell: return "cell";
    case Kind::Function: return "function";
    case Kind::Object: return "object";
    case Kind::Context: return "context manager";
    case Kind::Partial: return "functools.partial";
    case Kind::NewObject: return "object";
    case Kind::Super: return "super()";
  }
  return "?";
}

bool isConstantObject(PyObject* o) {
  if (o == Py_None || o == Py_Ellipsis || o == Py_NotImplemented) return true;
  PyTypeObject* t = Py_TYPE(o);
  if (t == &PyBool_Type || t == &PyLong_Type || t == &PyFloat_Type || t == &PyUnicode_Type ||
      t == &PyBytes_Type || t == &PyComplex_Type || t == &PyCode_Type)
    return true;
  // torch.dtype / torch.device / torch.layout / torch.memory_format / torch.Size: immutable
  // objects defined by torch; recognised by type name to keep torch out of the hot path.
  const char* n = t->tp_name;
  if (strcmp(n, "torch.dtype") == 0 || strcmp(n, "torch.device") == 0 ||
      strcmp(n, "torch.layout") == 0 || strcmp(n, "torch.memory_format") == 0 ||
      strcmp(n, "torch.Size") == 0)
    return true;
  if (t == &PyRange_Type || t == &PyFrozenSet_Type) return true;
  if (PyTuple_CheckExact(o)) {
    for (Py_ssize_t i = 0; i < PyTuple_GET_SIZE(o); ++i)
      if (!isConstantObject(PyTuple_GET_ITEM(o, i))) return false;
    return true;
  }
  if (PySlice_Check(o)) return true;
  return false;
}

}  // namespace cdynamo::trace
