// Subscripts: obj[index] read, stored and deleted (BINARY_SUBSCR, STORE_SUBSCR,
// DELETE_SUBSCR and their slice forms), over every kind that has items.
#include "support/check.h"
#include "support/lookup.h"
#include "support/torch_types.h"
#include "trace/engine/graph_calls.h"
#include "trace/engine/scalars.h"
#include "trace/kinds/dict.h"
#include "trace/kinds/iterator.h"
#include "trace/kinds/module.h"
#include "trace/kinds/ndarray.h"
#include "trace/kinds/object.h"
#include "trace/kinds/sequence.h"
#include "trace/kinds/tensor_subclass.h"
#include "trace/protocol/constants.h"
#include "trace/protocol/container_methods.h"
#include "trace/protocol/operators.h"
#include "trace/protocol/type_expressions.h"
#include "trace/tracer.h"
#include <algorithm>
#include <cstring>
#include <string>
#include <unordered_map>


namespace cdynamo::trace {

using graph::NodeOp;

using bytecode::BinaryOp;
using bytecode::Op;

Result<Ref> constantSlice(Tracer& t, const Slice& slice) {
  PyObject* parts[3];
  for (int k = 0; k < 3; ++k) {
    parts[k] = slice.parts[static_cast<size_t>(k)]->constant();
    if (!parts[k]) return t.fail("slice bounds must be constants");
  }
  return Ref::steal(PySlice_New(parts[0], parts[1], parts[2]));
}

Done storeSubscript(Tracer& t, const ValuePtr& obj, const ValuePtr& index, const ValuePtr& value) {
  if (isUserObject(obj) && value) {  // obj[k] = v: the class's __setitem__ (or a dict base's)
    Result<ValuePtr> r = callDunder(t, obj, interned(Str::dunder_setitem), {index, value});
    if (!r.notHandled()) return outcomeOf(r);
  }
  if (Done d = t.effects().noteContainerMutation(obj); !d) return d;
  List* list = obj->get<List>();
  if (list && list->deque && index->is(Kind::Slice))  // d[a:b] = ..., del d[a:b]: no slices for a deque
    return t.raiseNew(PyExc_TypeError, "sequence index must be integer, not 'slice'");
  if (list && index->is(Kind::Slice)) {
    Result<Ref> slice = constantSlice(t, index->as<Slice>());
    if (!slice) return slice.stop();
    Py_ssize_t start, stop, step, len;
    if (!*slice || PySlice_GetIndicesEx(slice->get(), static_cast<Py_ssize_t>(list->items.size()), &start, &stop,
                                        &step, &len) < 0)
      return t.raisePython();
    if (step != 1) return t.fail("extended slice assignment is not supported yet");
    std::vector<ValuePtr> repl;
    if (value)
      if (Done d = iterate(t, value, &repl); !d) return d;
    if (stop < start) stop = start;
    list->items.erase(list->items.begin() + start, list->items.begin() + stop);
    list->items.insert(list->items.begin() + start, repl.begin(), repl.end());
    return {};
  }
  if (list && index->constant() && PyLong_Check(index->constant())) {
    Py_ssize_t n = static_cast<Py_ssize_t>(list->items.size());
    Py_ssize_t k = PyLong_AsSsize_t(index->constant());
    if (k < 0) k += n;
    if (k < 0 || k >= n)
      return t.raiseNew(PyExc_IndexError, list->deque ? "deque index out of range" : "list assignment index out of range");
    list->items[static_cast<size_t>(k)] = value;
    return {};
  }
  if (Dict* d = obj->get<Dict>()) {
    PyObject* key = dictKeyOf(t, index);
    if (!key) return t.fail("dict keys must be constants or objects hashed by identity");
    int k = d->findKey(key);
    if (k == -2) return t.failFromPython("dict key comparison");
    if (k >= 0) {
      d->values[static_cast<size_t>(k)] = value;
    } else {
      d->keys.push_back(Ref::borrow(key));
      d->values.push_back(value);
    }
    return {};
  }
  return t.fail(std::string("item assignment on ") + describe(obj) + " is not supported yet");
}


Done deleteItem(Tracer& t, const ValuePtr& obj, const ValuePtr& index) {
  if (obj->is(Kind::List) && index->is(Kind::Slice)) return storeSubscript(t, obj, index, nullptr);  // del xs[a:b]
  if (obj->is(Kind::List) && index->is(Kind::Constant)) {
    // The index is checked here: pop(k), which carries the deletion out, says "pop index out
    // of range" (deque.pop takes no index at all).
    Py_ssize_t k;
    if (!constIntArg({index}, 0, &k)) return t.fail("del of a list item needs a constant int index");
    const Py_ssize_t n = static_cast<Py_ssize_t>(obj->as<List>().items.size());
    if (k < -n || k >= n)
      return t.raiseNew(PyExc_IndexError,
                        obj->as<List>().deque ? "deque index out of range" : "list assignment index out of range");
    return containerCall(t, obj, Str::pop, index);
  }
  if (obj->is(Kind::Dict)) return containerCall(t, obj, Str::pop, index);
  return t.fail(std::string("del on an item of ") + describe(obj) + " is not supported yet");
}

namespace {

// A tensor used as a list or tuple index (its __index__): a TypeError when its dtype or
// size can never give one (a floating or complex tensor, not one element), and its value
// when the trace made it from constants (torch.as_tensor(2): the fake mode keeps such a
// tensor's value, FakeTensor.constant, dropped when it is written to), as torch._dynamo
// reads it. NotHandled otherwise (an index known only when the graph runs).
Result<ValuePtr> tensorIndex(Tracer& t, const ValuePtr& v) {
  const Tensor* tensor = v->get<Tensor>();
  if (!tensor || t.graph().isScalar(tensor->node)) return notHandled();
  PyObject* fake = t.graph().fake(tensor->node);
  Ref fp = Ref::steal(PyObject_CallMethod(fake, "is_floating_point", nullptr));
  Ref cx = fp ? Ref::steal(PyObject_CallMethod(fake, "is_complex", nullptr)) : Ref();
  Ref numel = cx ? Ref::steal(PyObject_CallMethod(fake, "numel", nullptr)) : Ref();
  if (!numel || !PyLong_Check(numel.get())) return t.failFromPython("a tensor used as an index");
  if (fp.get() != Py_False || cx.get() != Py_False || PyLong_AsLong(numel.get()) != 1)
    return t.raiseNew(PyExc_TypeError, "only integer tensors of a single element can be converted to an index");
  static PyObject* const constant_attr = PyUnicode_InternFromString("constant");
  Ref c = Ref::steal(PyObject_GetAttr(fake, constant_attr));
  if (!c) PyErr_Clear();
  if (!c || c.get() == Py_None) return notHandled();
  Ref item = Ref::steal(PyObject_CallMethod(fake, "item", nullptr));  // the fake mode answers from the constant
  Ref index = item ? Ref::steal(PyNumber_Index(item.get())) : Ref();
  if (!index) return t.failFromPython("the value of a tensor index");
  return Value::constant(index.get());
}

}  // namespace

Result<ValuePtr> subscript(Tracer& t, const ValuePtr& obj, const ValuePtr& index) {
  if (obj->is(Kind::NdArray)) return ndarraySubscript(t, obj, index);
  if (Result<ValuePtr> r = subclassOperator(t, "getitem", {obj, index}); !r.notHandled()) return r;
  if (index->is(Kind::Tensor) && (obj->is(Kind::Tuple) || obj->is(Kind::List) || obj->constant())) {
    Result<ValuePtr> i = tensorIndex(t, index);
    if (!i.notHandled()) return i ? subscript(t, obj, *i) : i;
  }
  PyObject* container = obj->is(Kind::Module) ? moduleContainerOwning(obj->real(), interned(Str::dunder_getitem)) : nullptr;
  // A slice of a container is a new container of its class (Sequential, ModuleList): the
  // class's own __getitem__ below builds it in the trace; a list here would be a wrong type.
  if (container && index->is(Kind::Constant)) {
    // ModuleDict's __getitem__ takes names; Sequential's and ModuleList's take positions.
    const bool by_name = container == lookup(Obj::torch_nn_ModuleDict);
    const bool name = index->constant() && PyUnicode_Check(index->constant());
    if (by_name != name)
      return t.fail(std::string(reinterpret_cast<PyTypeObject*>(container)->tp_name) + "[" +
                    (index->constant() ? Py_TYPE(index->constant())->tp_name : "slice") + "] is not supported yet");
    std::vector<std::pair<Ref, ValuePtr>> children;
    if (Done d = moduleContainerItems(t, obj, &children); !d) return d.stop();
    if (name) {
      for (auto& [k, v] : children)
        if (PyUnicode_Compare(k.get(), index->constant()) == 0) return v;
      PyErr_SetObject(PyExc_KeyError, index->constant());
      return t.raisePython();
    }
    std::vector<ValuePtr> mods;
    for (auto& kv : children) mods.push_back(kv.second);
    ValuePtr list = Value::list(std::move(mods));
    return subscript(t, list, index);
  }
  if (obj->is(Kind::Module)) {  // a module class's own __getitem__ (ParameterDict, a user's)
    Result<ValuePtr> r = callModuleDunder(t, obj, interned(Str::dunder_getitem), {index});
    if (!r.notHandled()) return r;
  }
  // Before a typing object's own Python __getitem__: computed for real.
  if (Result<ValuePtr> r = typeExpressionSubscript(t, obj, index); !r.notHandled()) return r;
  if (PyObject* real = obj->is(Kind::Object) ? obj->real() : nullptr; real && isImmutableCObject(real)) {
    // match["minor"]: read now, as the match's other methods are.
    Ref key = toPython(t, index);
    if (!key) return t.fail(std::string("subscript of a ") + Py_TYPE(real)->tp_name + " with a non-constant");
    Ref r = Ref::steal(PyObject_GetItem(real, key.get()));
    if (!r) return t.raisePython();
    return fromPython(t, r.get());
  }
  if (isUserObject(obj)) {
    Result<ValuePtr> r = callDunder(t, obj, interned(Str::dunder_getitem), {index});
    if (!r.notHandled()) return r;
    return t.fail("object is not subscriptable (TypeError)");
  }
  if (obj->is(Kind::Tensor)) {
    // x[n] with n a symbolic int (a size, an int argument made a symbol): torch.select(x, 0,
    // n) as torch._dynamo records it. Tensor.__getitem__ would take the SymInt's __index__
    // and specialize n (Eq(n, value)): a recompile for every index.
    if (isScalarValue(t, index) && scalarType(t, index) == reinterpret_cast<PyObject*>(&PyLong_Type) &&
        !isScalarValue(t, obj)) {
      Ref dim = Ref::steal(PyObject_CallMethod(t.graph().fake(obj->as<Tensor>().node), "dim", nullptr));
      if (!dim) return t.failFromPython("Tensor.dim()");
      if (PyLong_AsLong(dim.get()) >= 1) {
        PyObject* sel = lookup(Obj::torch_select);
        if (!sel) return t.failFromPython("torch.select lookup");
        Ref zero = Ref::steal(PyLong_FromLong(0));
        if (!zero) return t.failFromPython("index");
        return recordCall(t, NodeOp::CallFunction, sel, {obj, Value::constant(zero.get()), index}, {});
      }
    }
    PyObject* fn = lookup(Obj::operator_getitem);
    if (!fn) return t.failFromPython("operator lookup");
    return recordCall(t, NodeOp::CallFunction, fn, {obj, index}, {});
  }
  const bool sequence = obj->is(Kind::Tuple) || obj->is(Kind::List);
  if (sequence && index->constant()) {
    const std::vector<ValuePtr>& items = *obj->elements();
    PyObject* i = index->constant();
    Py_ssize_t n = static_cast<Py_ssize_t>(items.size());
    if (PyLong_Check(i)) {
      Py_ssize_t k = PyLong_AsSsize_t(i);
      if (k == -1 && PyErr_Occurred()) return t.failFromPython("index");
      if (k < 0) k += n;
      if (k < 0 || k >= n)
        return t.raiseNew(PyExc_IndexError, !obj->is(Kind::List)          ? "tuple index out of range"
                                            : obj->as<List>().deque ? "deque index out of range"
                                                                    : "list index out of range");
      return items[static_cast<size_t>(k)];
    }
  }
  if (obj->is(Kind::Dict)) {
    std::vector<ValuePtr> args{index};
    std::vector<std::pair<Ref, ValuePtr>> kwargs;
    return callContainerMethod(t, obj, interned(Str::dunder_getitem), args, kwargs);
  }
  const bool constant_slice = index->constant() && PySlice_Check(index->constant());  // slice(1, None) made for real
  if (sequence && (index->is(Kind::Slice) || constant_slice)) {
    const std::vector<ValuePtr>& items = *obj->elements();
    Result<Ref> slice = constant_slice ? Result<Ref>(Ref::borrow(index->constant())) : constantSlice(t, index->as<Slice>());
    if (!slice) return slice.stop();
    Py_ssize_t start, stop, step, len;
    if (!*slice ||
        PySlice_GetIndicesEx(slice->get(), static_cast<Py_ssize_t>(items.size()), &start, &stop, &step, &len) < 0)
      return t.failFromPython("slicing a sequence");
    if (const List* l = obj->get<List>(); l && l->deque)
      return t.raiseNew(PyExc_TypeError, "sequence index must be integer, not 'slice'");
    std::vector<ValuePtr> out;
    for (Py_ssize_t k = 0, at = start; k < len; ++k, at += step) out.push_back(items[static_cast<size_t>(at)]);
    if (isSizeValue(obj)) return Value::of(Tuple{std::move(out), obj->as<Tuple>().namedtuple.copy()});
    return Value::sequence(obj->kind(), std::move(out));  // a namedtuple's slice is a tuple
  }
  if (obj->constant() && (index->is(Kind::Constant) || index->is(Kind::Slice))) {
    graph::Arg idx;
    if (Done d = toArg(t, index, &idx); !d) return d.stop();
    Ref key;
    if (index->constant()) {
      key = Ref::borrow(index->constant());
    } else {
      Result<Ref> slice = constantSlice(t, index->as<Slice>());
      if (!slice) return slice.stop();
      key = slice.take();
    }
    Ref r = Ref::steal(key ? PyObject_GetItem(obj->constant(), key.get()) : nullptr);
    if (!r) return t.raisePython();
    if (!isConstantObject(r.get())) return t.fail("subscript of a constant returned a non-constant");
    return Value::constant(r.get());
  }
  return t.fail(std::string("subscript of ") + describe(obj) + " by " + describe(index) +
              " is not supported yet");
}

}  // namespace cdynamo::trace
