// Truth and length: bool() of every kind as Python decides it (__bool__, then __len__), and
// what a class's __len__ may return.
#include <cstring>
#include <string>

#include "support/lookup.h"
#include "support/torch_types.h"
#include "trace/engine/scalars.h"
#include "trace/kinds/module.h"
#include "trace/kinds/object.h"
#include "trace/protocol/constants.h"
#include "trace/protocol/operators.h"
#include "trace/tracer.h"

namespace cdynamo::trace {

using bytecode::BinaryOp;
using graph::NodeOp;

namespace {
Ref ref_int(long v) { return Ref::steal(PyLong_FromLong(v)); }
}  // namespace

Result<ValuePtr> lenDunderResult(Tracer& t, const ValuePtr& r) {
  if (PyObject* c = r->constant()) {
    if (!PyLong_Check(c))
      return t.raiseNew(PyExc_TypeError, std::string("'") + Py_TYPE(c)->tp_name + "' object cannot be interpreted as an integer");
    int overflow = 0;
    long long n = PyLong_AsLongLongAndOverflow(c, &overflow);
    if (n == -1 && PyErr_Occurred()) return t.failFromPython("__len__()");
    if (overflow > 0) return t.raiseNew(PyExc_OverflowError, "cannot fit 'int' into an index-sized integer");
    if (n < 0 || overflow < 0) return t.raiseNew(PyExc_ValueError, "__len__() should return >= 0");
    if (PyBool_Check(c)) return Value::constant(c == Py_True ? ref_int(1).get() : ref_int(0).get());  // len() gives the int
    return r;
  }
  if (isScalarValue(t, r) && scalarType(t, r) == reinterpret_cast<PyObject*>(&PyLong_Type)) return r;
  return t.fail("__len__() returned a value that is not a known int");
}

namespace {

// The truth of what a class's __bool__ (or __len__) returned, as Python's truth test takes it:
// __bool__ must give a bool (a symbolic one too), else TypeError in the program; __len__ an
// int >= 0 (lenDunderResult).
Result<bool> dunderTruth(Tracer& t, Str dunder, const ValuePtr& r) {
  if (dunder == Str::dunder_len) {
    Result<ValuePtr> n = lenDunderResult(t, r);
    if (!n) return n.stop();
    return truthValue(t, *n);
  }
  PyObject* type = typeOf(t, r);
  if (!type || !PyType_Check(type)) return t.fail("__bool__() returned a value whose type is not known");
  if (type != reinterpret_cast<PyObject*>(&PyBool_Type))
    return t.raiseNew(PyExc_TypeError,
                      std::string("__bool__ should return bool, returned ") + reinterpret_cast<PyTypeObject*>(type)->tp_name);
  return truthValue(t, r);
}

}  // namespace

Result<bool> truthValue(Tracer& t, const ValuePtr& v) {
  switch (v->kind()) {
    case Kind::Constant: {
      int truth = PyObject_IsTrue(v->constant());
      if (truth < 0) return t.failFromPython("truth value of a constant");
      return truth != 0;
    }
    case Kind::Tuple:
    case Kind::List:
    case Kind::Set:
      return !v->elements()->empty();
    case Kind::Dict:
      return !v->as<Dict>().values.empty();
    case Kind::DictView:
      return !v->as<DictView>().dict->as<Dict>().values.empty();
    case Kind::Function:
    case Kind::Cell:
    case Kind::Context:
    case Kind::Namespace:  // no __bool__ or __len__
      return true;
    case Kind::Object:
    case Kind::NewObject: {
      // Python's order: __bool__, then __len__, else true.
      for (Str dunder : {Str::dunder_bool, Str::dunder_len}) {
        Result<ValuePtr> r = callDunder(t, v, interned(dunder), {});
        if (r.notHandled()) continue;
        if (!r) return r.stop();
        return dunderTruth(t, dunder, *r);
      }
      // No __bool__ or __len__ the trace can run: a C type's own (collections.deque,
      // array.array, a C base of the class) still decides, from the object's state. An
      // object from the program is measured for real, its length guarded; otherwise the
      // truth is not known here (taken as true, an empty deque went down the wrong branch).
      PyTypeObject* tp = v->is(Kind::Object) && v->real()
                             ? Py_TYPE(v->real())
                             : v->is(Kind::NewObject) && PyType_Check(v->as<NewObject>().cls.get())
                                   ? reinterpret_cast<PyTypeObject*>(v->as<NewObject>().cls.get())
                                   : nullptr;
      if (!tp) return t.fail("the truth value of " + describe(v) + " is not known to the trace");
      const bool has_bool = tp->tp_as_number && tp->tp_as_number->nb_bool;
      const bool has_len = (tp->tp_as_mapping && tp->tp_as_mapping->mp_length) ||
                           (tp->tp_as_sequence && tp->tp_as_sequence->sq_length);
      if (!has_bool && !has_len) return true;
      if (has_bool || !v->is(Kind::Object) || v->reg < 0)
        return t.fail(std::string("the truth value of a ") + tp->tp_name + " object (a C type's own) is not modelled");
      Py_ssize_t n = PyObject_Length(v->real());  // a C slot: no Python code runs
      if (n < 0) return t.failFromPython("the length of an object");
      t.guards().checkLength(v->reg, n);
      return n != 0;
    }
    case Kind::Super:
    case Kind::Partial:
      return true;
    case Kind::Tensor:
      if (isScalarValue(t, v)) {
        // A symbolic size (or an expression of sizes) has a hint: the branch follows it,
        // and the ShapeEnv records the guard that keeps it so (compiled into the entry's
        // shape guards). An unbacked value read from a tensor has none.
        PyObject* shapes = lookup(Obj::cdynamo_shapes);
        Ref truth = shapes ? Ref::steal(PyObject_CallMethod(shapes, "truth", "O",
                                                            t.graph().fake(v->as<Tensor>().node)))
                           : Ref();
        if (!truth) return t.failFromPython("the truth of a symbolic size");
        if (truth.get() != Py_None) return truth.get() == Py_True;
        return t.fail("control flow depends on a value read from a tensor (Tensor.item()): a data-dependent branch");
      }
      return t.fail("control flow depends on a tensor's value (data-dependent branch)");
    case Kind::NdArray:
      return t.fail("control flow depends on a numpy array's value (data-dependent branch)");
    case Kind::SubclassTensor:
      return t.fail("control flow depends on a tensor subclass instance's value (data-dependent branch)");
    case Kind::Callable:
    case Kind::PyModule:
    case Kind::BoundMethod:
    case Kind::NamedMethod:
      return true;
    case Kind::Module: {
      // As for objects: the class's __bool__, then its __len__ (both traced, their class
      // attributes guarded), else true; a container's length from its guarded children.
      if (isModuleContainer(v, interned(Str::dunder_len)) &&
          !_PyType_Lookup(Py_TYPE(v->real()), interned(Str::dunder_bool))) {  // no __bool__: its length decides
        std::vector<std::pair<Ref, ValuePtr>> children;
        if (Done d = moduleContainerItems(t, v, &children); !d) return d.stop();
        return !children.empty();
      }
      for (Str dunder : {Str::dunder_bool, Str::dunder_len}) {
        Result<ValuePtr> r = callModuleDunder(t, v, interned(dunder), {});
        if (r.notHandled()) continue;
        if (!r) return r.stop();
        return dunderTruth(t, dunder, *r);
      }
      return true;
    }
    case Kind::Slice:
      return true;
    case Kind::Null:
    case Kind::Iterator:
      break;
  }
  return t.fail(std::string("truth value of ") + describe(v));
}

}  // namespace cdynamo::trace
