#include "trace/values/value.h"

#include <cstring>

#include "support/lookup.h"

namespace cdynamo::trace {

ValuePtr Value::sequence(Kind kind, std::vector<ValuePtr> items, int reg) {
  switch (kind) {
    case Kind::Tuple: return tuple(std::move(items), reg);
    case Kind::List: return list(std::move(items), reg);
    case Kind::Set: return set(std::move(items), reg);
    case Kind::Iterator: return iterator(std::move(items), reg);
    case Kind::Null:
    case Kind::Tensor:
    case Kind::Constant:
    case Kind::Slice:
    case Kind::Callable:
    case Kind::BoundMethod:
    case Kind::NamedMethod:
    case Kind::Module:
    case Kind::PyModule:
    case Kind::Dict:
    case Kind::Cell:
    case Kind::Function:
    case Kind::Object:
    case Kind::NewObject:
    case Kind::Super:
    case Kind::Partial:
    case Kind::Context:
    case Kind::Namespace:
    case Kind::DictView:
    case Kind::NdArray:
    case Kind::SubclassTensor:
      break;
  }
  CDYNAMO_CHECK(false, "Value::sequence of a kind that is not a sequence");
  return nullptr;
}

PyObject* Value::real() const {
  switch (kind()) {
    case Kind::Constant: return as<Constant>().obj.get();
    case Kind::Callable: return as<Callable>().obj.get();
    case Kind::Module: return as<Module>().obj.get();
    case Kind::PyModule: return as<PyModule>().obj.get();
    case Kind::Object: return as<Object>().obj.get();
    case Kind::Null:
    case Kind::Tensor:
    case Kind::Tuple:
    case Kind::List:
    case Kind::Slice:
    case Kind::Iterator:
    case Kind::BoundMethod:
    case Kind::NamedMethod:
    case Kind::Dict:
    case Kind::Set:
    case Kind::Cell:
    case Kind::Function:
    case Kind::NewObject:
    case Kind::Super:
    case Kind::Partial:
    case Kind::Context:
    case Kind::Namespace:
    case Kind::DictView:
    case Kind::NdArray:
    case Kind::SubclassTensor:
      return nullptr;
  }
  return nullptr;
}

const std::vector<ValuePtr>* Value::elements() const {
  switch (kind()) {
    case Kind::Tuple: return &as<Tuple>().items;
    case Kind::List: return &as<List>().items;
    case Kind::Set: return &as<Set>().items;
    case Kind::Iterator: return &as<Iterator>().items;
    case Kind::Null:
    case Kind::Tensor:
    case Kind::Constant:
    case Kind::Slice:
    case Kind::Callable:
    case Kind::BoundMethod:
    case Kind::NamedMethod:
    case Kind::Module:
    case Kind::PyModule:
    case Kind::Dict:
    case Kind::Cell:
    case Kind::Function:
    case Kind::Object:
    case Kind::NewObject:
    case Kind::Super:
    case Kind::Partial:
    case Kind::Context:
    case Kind::Namespace:
    case Kind::DictView:
    case Kind::NdArray:
    case Kind::SubclassTensor:
      return nullptr;
  }
  return nullptr;
}

int Dict::findKey(PyObject* key) const {
  // As a dict looks a key up: equal hashes first, then identity, then ==. (Keys hashed by
  // identity, like tensors, are then never compared with their __eq__.)
  Py_hash_t hash = PyObject_Hash(key);
  if (hash == -1) return -2;
  for (size_t i = 0; i < keys.size(); ++i) {
    if (keys[i].get() == key) return static_cast<int>(i);
    Py_hash_t h = PyObject_Hash(keys[i].get());
    if (h == -1) return -2;
    if (h != hash) continue;
    int eq = PyObject_RichCompareBool(keys[i].get(), key, Py_EQ);
    if (eq < 0) return -2;
    if (eq) return static_cast<int>(i);
  }
  return -1;
}

const char* kindName(Kind k) {
  switch (k) {
#define KIND(name, text) \
  case Kind::name:       \
    return text;
#include "trace/values/kinds.def"
#undef KIND
  }
  return "?";
}

std::string describe(const ValuePtr& v) {
  if (!v) return "a NULL";
  if (v->is(Kind::Object) || v->is(Kind::Constant)) {
    PyObject* o = v->is(Kind::Object) ? v->as<Object>().obj.get() : v->as<Constant>().obj.get();
    if (o) return std::string(v->is(Kind::Object) ? "an object" : "a constant") + " of type " + Py_TYPE(o)->tp_name;
  }
  if (v->is(Kind::NewObject) && v->as<NewObject>().cls && PyType_Check(v->as<NewObject>().cls.get()))
    return std::string("an object of class ") + reinterpret_cast<PyTypeObject*>(v->as<NewObject>().cls.get())->tp_name;
  const char* name = kindName(v->kind());
  const bool vowel = strchr("aeiouAEIOU", name[0]) != nullptr || strncmp(name, "nn.", 3) == 0;
  return std::string(vowel ? "an " : "a ") + name;
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
      strcmp(n, "torch.layout") == 0 || strcmp(n, "torch.memory_format") == 0)
    return true;
  if (strcmp(n, "torch.Size") == 0) {
    // Of plain ints only: the Size a fake op returns under dynamic shapes holds SymInts of
    // the trace (torch.Size([x.shape[0], 5]) was kept as a constant and returned them).
    for (Py_ssize_t i = 0; i < PyTuple_GET_SIZE(o); ++i)
      if (!PyLong_CheckExact(PyTuple_GET_ITEM(o, i))) return false;
    return true;
  }
  if (t == &PyRange_Type || t == &PyFrozenSet_Type) return true;
  if (strncmp(n, "numpy.", 6) == 0) return isNumpyConstant(o);
  if (PyTuple_CheckExact(o)) {
    for (Py_ssize_t i = 0; i < PyTuple_GET_SIZE(o); ++i)
      if (!isConstantObject(PyTuple_GET_ITEM(o, i))) return false;
    return true;
  }
  if (PySlice_Check(o)) return true;
  return isEnumMember(o);
}

bool isNumpyConstant(PyObject* o) {
  // A NumPy dtype (np.dtype("float64")): its type's metaclass is NumPy's, by name.
  if (strcmp(Py_TYPE(Py_TYPE(o))->tp_name, "numpy._DTypeMeta") == 0) return true;
  // A NumPy scalar (np.float32(1.5), np.int64(3)): an instance of numpy.generic, immutable.
  if (strncmp(Py_TYPE(o)->tp_name, "numpy.", 6) != 0) return false;
  PyObject* generic = lookup(Obj::numpy_generic);
  if (!generic) return PyErr_Clear(), false;
  return PyObject_TypeCheck(o, reinterpret_cast<PyTypeObject*>(generic));
}

bool isEnumMember(PyObject* o) {
  // A member of an enum.Enum class (the class's metaclass derives from EnumMeta): a
  // singleton made when its class was, immutable (EnumMeta refuses reassigning members),
  // compared by identity unless its class says otherwise; a constant like an int.
  PyTypeObject* meta = Py_TYPE(Py_TYPE(o));
  if (meta == &PyType_Type || !PyType_HasFeature(Py_TYPE(o), Py_TPFLAGS_HEAPTYPE)) return false;
  PyObject* enum_meta = lookup(Obj::enum_EnumMeta);
  if (!enum_meta) {
    PyErr_Clear();
    return false;
  }
  if (!PyType_IsSubtype(meta, reinterpret_cast<PyTypeObject*>(enum_meta))) return false;
  // The class itself is an instance of EnumMeta too; a member is an instance of the class
  // found in the class's own member map.
  return !PyType_Check(o);
}

}  // namespace cdynamo::trace
