// Attribute reads: what a name means on each kind of value (one switch over kinds).
#include <cstring>
#include <string>

#include "support/lookup.h"
#include "support/torch_types.h"
#include "trace/engine/graph_calls.h"
#include "trace/engine/scalars.h"
#include "trace/kinds/namespace.h"
#include "trace/kinds/ndarray.h"
#include "trace/kinds/object.h"
#include "trace/kinds/tensor_subclass.h"
#include "trace/protocol/attributes.h"
#include "trace/protocol/calls.h"
#include "trace/protocol/constants.h"
#include "trace/protocol/container_methods.h"
#include "trace/tracer.h"

namespace cdynamo::trace {

using graph::NodeOp;
using guards::LoadKind;

Result<ValuePtr> getAttr(Tracer& t, const ValuePtr& obj, PyObject* name) {
  const char* n = PyUnicode_AsUTF8(name);
  if ((obj->is(Kind::Tuple) || obj->is(Kind::List) || obj->is(Kind::Dict) || obj->is(Kind::Set) ||
       obj->is(Kind::DictView) || obj->is(Kind::Iterator)) &&
      strcmp(n, "__class__") == 0) {
    // A container's class, as type(x) answers (a namedtuple's, a torch.Size's, a deque's, a
    // dict view's, an iterator's): object's __class__ descriptor, not a method to call later
    // (view.__class__.__name__ was the method's name, '__class__').
    PyObject* type = typeOf(t, obj);
    if (!type) return t.fail("the class of a container");
    return Value::callable(type);
  }
  switch (obj->kind()) {
    case Kind::Tensor: {
      if (isScalarValue(t, obj))  // a number read from a tensor: not a tensor's attributes
        return t.fail(std::string("attribute '") + n + "' of a value read from a tensor (Tensor.item()) is not supported yet");
      // The version counter counts in-place changes of the real tensor, before the call
      // too: a fake's (0 for an input) is not it, and nothing guards it.
      if (strcmp(n, "_version") == 0) return t.fail("Tensor._version (the real tensor's version counter) is not modeled");
      if (strcmp(n, "__class__") == 0) {  // its type, as type(x) answers
        PyObject* type = typeOf(t, obj);
        if (!type) return t.fail("the class of a tensor");
        return Value::callable(type);
      }
      PyObject* tt = lookup(Obj::torch_Tensor);
      if (!tt) return t.failFromPython("torch.Tensor");
      PyObject* descr = _PyType_Lookup(reinterpret_cast<PyTypeObject*>(tt), name);
      if (!descr) return t.fail(std::string("Tensor has no attribute '") + n + "'");
      if (Py_TYPE(descr)->tp_descr_set == nullptr || PyFunction_Check(descr))
        return Value::namedMethod(obj, name);  // methods: called later as call_method
      // The result of min()/max() over tensors stands for the item that won (markChoice):
      // what the where() node it is computed as answers alike (metadata, values) is read
      // from it; state of the object itself (.grad, ._base, ...) breaks the graph.
      if (t.graph().choiceOf(obj->as<Tensor>().node)) {
        static const char* const kValueAttrs[] = {"shape", "dtype", "device", "ndim", "requires_grad", "is_leaf",
                                                  "grad_fn", "layout", "T", "mT", "H", "mH", "real", "imag", "data",
                                                  "is_cuda", "is_cpu", "is_meta", "is_sparse", "is_quantized",
                                                  "itemsize", "nbytes", "is_nested"};
        bool value_attr = false;
        for (const char* a : kValueAttrs) value_attr = value_attr || strcmp(n, a) == 0;
        if (!value_attr)
          return t.fail(std::string("Tensor.") + n + " of the result of min()/max() over tensors (the state of the item "
                        "that won, which the trace computes as a new tensor)");
      }
      // Data attributes: metadata (shape, dtype, ...) answer as constants; tensor-valued
      // ones (x.T, x.mT) become getattr nodes.
      PyObject* getattr = lookup(Obj::builtins_getattr);
      if (!getattr) return t.failFromPython("builtins.getattr");
      return recordCall(t, NodeOp::CallFunction, getattr, {obj, Value::constant(name)}, {});
    }
    case Kind::PyModule: {
      PyObject* module = obj->as<PyModule>().obj.get();
      // A global of that module stored earlier in the trace (STORE_GLOBAL in one of its
      // functions, recorded against its globals dict, which is the module's __dict__).
      if (t.effects().anyAttrOverlay()) {
        int dreg = t.load(LoadKind::Constant, -1, 0, PyModule_GetDict(module), "globals");
        if (ValuePtr v = t.effects().overlayAttr(dreg, name)) {
          if (v == SideEffects::deleted()) return t.fail("a module attribute deleted in the trace");
          return v;
        }
      }
      Ref v = Ref::steal(PyObject_GetAttr(module, name));
      if (!v) return t.failFromPython(std::string("module attribute '") + n + "'");
      // torch's own namespaces are assumed stable (as TorchDynamo does); a user module's
      // attributes are guarded through its __dict__.
      const char* modname = PyModule_GetName(module);
      if (!modname) return t.failFromPython("module name");
      bool torch_ns = strcmp(modname, "torch") == 0 || strncmp(modname, "torch.", 6) == 0;
      int reg = -1;
      if (!torch_ns && obj->reg >= 0)
        reg = t.load(LoadKind::InstanceDict, obj->reg, 0, name, t.guards().sourceName(obj->reg) + "." + n);
      return t.wrap(v.get(), reg);
    }
    case Kind::Module:
    case Kind::Object:
    case Kind::NewObject:
    case Kind::Super:
      return objectGetAttr(t, obj, name);  // the descriptor protocol (objects.cpp)
    case Kind::Constant:
    case Kind::Callable: {
      PyObject* o = obj->real();
      const bool callable = obj->is(Kind::Callable);
      if (callable && PyType_Check(o) && (reinterpret_cast<PyTypeObject*>(o)->tp_flags & Py_TPFLAGS_HEAPTYPE))
        return objectGetAttr(t, obj, name);  // attributes of a user class (module classes too): the descriptor protocol
      if (callable && PyFunction_Check(o)) {
        // The function's __dict__ read as a dict earlier in the trace: its entries are
        // that value's (what the trace stored into it included).
        PyObject** dictptr = _PyObject_GetDictPtr(o);
        ValuePtr d = dictptr && *dictptr ? t.wrappedValueOf(*dictptr) : nullptr;
        if (d && d->is(Kind::Dict)) {
          int k = d->as<Dict>().findKey(name);
          if (k == -2) return t.failFromPython("a function attribute");
          if (k >= 0) return d->as<Dict>().values[static_cast<size_t>(k)];
        }
      }
      if (Result<ValuePtr> fa = guardedFunctionAttr(t, obj, name); !fa.notHandled()) return fa;
      Ref v = Ref::steal(PyObject_GetAttr(o, name));
      if (!v) {
        if (PyErr_ExceptionMatches(PyExc_AttributeError)) return t.raisePython();
        return t.failFromPython(std::string("attribute '") + n + "'");
      }
      if (isConstantObject(v.get())) return Value::constant(v.get());
      if (!callable && PyMethod_Check(v.get()) && PyMethod_GET_SELF(v.get()) == o)
        return Value::boundMethod(obj, PyMethod_GET_FUNCTION(v.get()));  // a Python method of an enum member: inlined
      if (callable && (PyFunction_Check(o) || isCacheWrapper(o)) && PyDict_CheckExact(v.get())) {
        // A function's (or an lru_cache wrapper's) __dict__ / __annotations__
        // (functools.wraps reads them): with its source, so what the program stores into
        // it is replayed on the real dict.
        if (obj->reg < 0) return t.fail(std::string("the ") + n + " of a function without a source is not supported yet");
        return t.wrap(v.get(), t.load(LoadKind::Attr, obj->reg, 0, name, t.guards().sourceName(obj->reg) + "." + n));
      }
      if (!callable && PyCallable_Check(v.get()))
        return Value::callable(v.get());  // a method of an immutable constant
      if (callable && PyType_Check(o) && !PyType_HasFeature(reinterpret_cast<PyTypeObject*>(o), Py_TPFLAGS_HEAPTYPE) &&
          PyCallable_Check(v.get()))
        return Value::callable(v.get());  // object.__setattr__, dict.fromkeys, ...
      return t.fail(std::string("attribute '") + n + "\' of " + describe(obj) + " is not supported yet");
    }
    case Kind::Tuple: {
      const Tuple& tuple = obj->as<Tuple>();
      if (tuple.namedtuple) {  // a namedtuple (or a structseq: its __match_args__): fields by position
        Ref fields = Ref::steal(PyObject_GetAttrString(tuple.namedtuple.get(), "_fields"));
        if (!fields) {
          PyErr_Clear();
          fields = Ref::steal(PyObject_GetAttrString(tuple.namedtuple.get(), "__match_args__"));
        }
        // A C tuple type without fields (torch.Size): none; its methods are the class's, below.
        if (!fields && !PyType_HasFeature(reinterpret_cast<PyTypeObject*>(tuple.namedtuple.get()), Py_TPFLAGS_HEAPTYPE)) {
          PyErr_Clear();
          fields = Ref::steal(PyTuple_New(0));
        }
        if (!fields || !PyTuple_Check(fields.get())) return t.failFromPython("namedtuple fields");
        if (PyUnicode_CompareWithASCIIString(name, "_fields") == 0) return Value::constant(fields.get());
        for (Py_ssize_t i = 0; i < PyTuple_GET_SIZE(fields.get()); ++i)
          if (PyUnicode_Compare(PyTuple_GET_ITEM(fields.get(), i), name) == 0) return tuple.items[static_cast<size_t>(i)];
        if (tuple.attrs) {  // its __dict__ (attributes set in the trace) before its class's
          const Dict& attrs = tuple.attrs->as<Dict>();
          int k = attrs.findKey(name);
          if (k == -2) return t.failFromPython("attribute lookup");
          if (k >= 0) return attrs.values[static_cast<size_t>(k)];
        }
        // The class's own methods, static/class methods and properties (namedtuple's
        // _replace, _asdict, ... and tuple's methods stay the container's).
        if (n[0] != '_' && PyType_HasFeature(reinterpret_cast<PyTypeObject*>(tuple.namedtuple.get()), Py_TPFLAGS_HEAPTYPE))
          if (Result<ValuePtr> r = namedTupleClassAttr(t, obj, tuple.namedtuple.get(), name); !r.notHandled()) return r;
      }
      PyTypeObject* type = reinterpret_cast<PyTypeObject*>(tuple.namedtuple ? tuple.namedtuple.get() : reinterpret_cast<PyObject*>(&PyTuple_Type));
      if (!_PyType_Lookup(type, name)) {  // not its class's: its __dict__'s, or absent
        if (obj->reg >= 0 && type->tp_dictoffset != 0)
          return t.fail(std::string("attribute '") + n + "' of the __dict__ of a " + type->tp_name +
                        " from the program is not supported yet");
        return t.raiseNew(PyExc_AttributeError, std::string("'") + type->tp_name + "' object has no attribute '" + n + "'");
      }
      return Value::namedMethod(obj, name);
    }
    case Kind::Set:
      if (obj->as<Set>().frozen && !PyObject_HasAttr(reinterpret_cast<PyObject*>(&PyFrozenSet_Type), name))
        return t.raiseNew(PyExc_AttributeError, std::string("'frozenset' object has no attribute '") + n + "'");
      return Value::namedMethod(obj, name);  // set.add, ...: called later
    case Kind::Dict:
      if (obj->as<Dict>().type.get() == reinterpret_cast<PyObject*>(&PyDictProxy_Type) &&
          !PyObject_HasAttr(reinterpret_cast<PyObject*>(&PyDictProxy_Type), name))
        return t.raiseNew(PyExc_AttributeError, std::string("'mappingproxy' object has no attribute '") + n + "'");
      if (strcmp(n, "default_factory") == 0) {
        // A defaultdict's factory (its data attribute, not a method): the value the trace
        // holds, the real one (guarded when the dict was read), or None.
        const Dict& d = obj->as<Dict>();
        PyObject* dd_type = lookup(Obj::collections_defaultdict);
        if (!dd_type) return t.failFromPython("collections.defaultdict");
        if (d.type && PyType_Check(d.type.get()) &&
            PyType_IsSubtype(reinterpret_cast<PyTypeObject*>(d.type.get()), reinterpret_cast<PyTypeObject*>(dd_type))) {
          if (d.factory_value) return d.factory_value;
          return d.default_factory ? Value::callable(d.default_factory.get()) : Value::constant(Py_None);
        }
      }
      if (PyObject* type = obj->as<Dict>().type.get(); type && PyType_Check(type) &&
                                                       !_PyType_Lookup(reinterpret_cast<PyTypeObject*>(type), name))
        // Not its class's (move_to_end of a plain dict): AttributeError, as eagerly.
        return t.raiseNew(PyExc_AttributeError, std::string("'") + reinterpret_cast<PyTypeObject*>(type)->tp_name +
                                                    "' object has no attribute '" + n + "'");
      return Value::namedMethod(obj, name);  // dict.items, ...: called later
    case Kind::List: {
      const List& l = obj->as<List>();
      PyTypeObject* type = reinterpret_cast<PyTypeObject*>(l.deque ? l.deque.get() : reinterpret_cast<PyObject*>(&PyList_Type));
      if (!_PyType_Lookup(type, name))  // appendleft of a list, sort of a deque
        return t.raiseNew(PyExc_AttributeError, std::string("'") + type->tp_name + "' object has no attribute '" + n + "'");
      return Value::namedMethod(obj, name);  // list.append, ...: called later
    }
    case Kind::Function:
      return functionAttr(t, obj, name);
    case Kind::Context:
      return Value::namedMethod(obj, name);
    case Kind::Namespace:
      return namespaceGetAttr(t, obj, name);
    case Kind::DictView:
      return Value::namedMethod(obj, name);  // isdisjoint, ...: called later (unsupported there)
    case Kind::NdArray:
      return ndarrayAttr(t, obj, name);
    case Kind::SubclassTensor:
      return subclassTensorAttr(t, obj, name);
    case Kind::Iterator:
      // A generator's methods (calls.cpp generatorMethod), called later.
      if (obj->as<Iterator>().made == Iterator::Made::Generator &&
          (strcmp(n, "send") == 0 || strcmp(n, "close") == 0 || strcmp(n, "throw") == 0 || strcmp(n, "__next__") == 0))
        return Value::namedMethod(obj, name);
      if (strcmp(n, "__iter__") == 0 || strcmp(n, "__next__") == 0)
        return Value::namedMethod(obj, name);  // it.__iter__() (itself), it.__next__(): called later
      break;
    case Kind::NamedMethod: {
      // The method of a container or tensor value: what its C method answers
      // (assertRaises(TypeError, s.add) reads its __name__).
      const NamedMethod& m = obj->as<NamedMethod>();
      if (strcmp(n, "__self__") == 0) return m.self;
      if (strcmp(n, "__name__") == 0) return Value::constant(m.name.get());
      if (strcmp(n, "__qualname__") == 0) {
        PyTypeObject* owner = containerCType(m.self);
        if (!owner && m.self->is(Kind::Tensor)) owner = reinterpret_cast<PyTypeObject*>(lookup(Obj::torch_Tensor));
        if (!owner) break;
        Ref q = Ref::steal(PyUnicode_FromFormat("%s.%U", _PyType_Name(owner), m.name.get()));
        if (!q) return t.failFromPython("a method's __qualname__");
        return Value::constant(q.get());
      }
      break;
    }
    case Kind::BoundMethod: {
      // A Python function bound to a value: the method object's own attributes, the rest
      // read from the function (as a method object forwards them).
      const BoundMethod& m = obj->as<BoundMethod>();
      if (strcmp(n, "__self__") == 0) return m.self;
      if (strcmp(n, "__func__") == 0) return Value::callable(m.function.get());
      if (strcmp(n, "__name__") == 0 || strcmp(n, "__qualname__") == 0 || strcmp(n, "__module__") == 0 ||
          strcmp(n, "__doc__") == 0)
        return getAttr(t, Value::callable(m.function.get()), name);
      break;
    }
    case Kind::Null:
    case Kind::Slice:
    case Kind::Cell:
    case Kind::Partial:
      break;
  }
  return t.fail(std::string("attribute '") + n + "\' of " + describe(obj) + " is not supported yet");
}

}  // namespace cdynamo::trace
