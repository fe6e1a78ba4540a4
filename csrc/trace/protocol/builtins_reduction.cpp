// The builtins that reduce or order items: sum(), sorted(), min() and max() over tensors,
// symbolic numbers and constants, functools.reduce-like folds (rows of kBuiltinRows in
// builtins.cpp).
#include <algorithm>
#include <cstring>
#include <string>

#include "support/lookup.h"
#include "trace/engine/graph_calls.h"
#include "trace/engine/scalars.h"
#include "trace/kinds/iterator.h"
#include "trace/protocol/builtins_internal.h"
#include "trace/protocol/callables.h"
#include "trace/protocol/calls.h"
#include "trace/protocol/constants.h"
#include "trace/protocol/operators.h"
#include "trace/kinds/sequence.h"
#include "trace/kinds/object.h"
#include "trace/tracer.h"

namespace cdynamo::trace {

using graph::NodeOp;
using guards::LoadKind;

namespace {

// min() / max() / sorted() of constants (run for real), all() / any() by truth value.
// sorted(iterable, *, key=None, reverse=False): the key of each item computed in the trace
// (key called on each item in order, as sorted does), the order decided by the real sort of
// the keys (stable, Python's own comparisons), which must be constants; the items may be anything.
Result<ValuePtr> builtinSorted(Tracer& t, PyObject* f, Args& args, Kwargs& kwargs) {
  if (args.size() != 1) return t.raiseNew(PyExc_TypeError, "sorted expected 1 argument");
  ValuePtr key;
  ValuePtr reverse = Value::constant(Py_False);
  for (auto& [k, v] : kwargs) {
    if (PyUnicode_CompareWithASCIIString(k.get(), "key") == 0) key = v;
    else if (PyUnicode_CompareWithASCIIString(k.get(), "reverse") == 0) reverse = v;
    else return t.raiseNew(PyExc_TypeError, std::string("'") + PyUnicode_AsUTF8(k.get()) + "' is an invalid keyword argument for sort()");
  }
  if (key && key->isNone()) key = nullptr;
  if (!reverse->is(Kind::Constant)) return t.fail("sorted(reverse=) that is not a constant");
  std::vector<ValuePtr> items;
  if (Done d = iterate(t, args[0], &items); !d) return d.stop();
  Ref keys = Ref::steal(PyList_New(0));
  if (!keys) return t.failFromPython("sorted()");
  std::vector<ValuePtr> key_values;
  bool real_keys = true;
  for (const ValuePtr& item : items) {
    ValuePtr k = item;
    if (key) {
      Result<ValuePtr> r = call(t, key, {item}, {});
      if (!r) return r;
      k = r.take();
    }
    key_values.push_back(k);
    if (!real_keys) continue;
    Ref real = isUserObject(k) ? Ref() : toPython(t, k);
    if (!real) {
      PyErr_Clear();
      real_keys = false;  // instances of the program's classes: compared by their own __lt__
      continue;
    }
    if (PyList_Append(keys.get(), real.get()) < 0) return t.failFromPython("sorted()");
  }
  if (!real_keys) {
    Result<bool> rev = truthValue(t, reverse);
    if (!rev) return rev.stop();
    std::vector<size_t> order;
    if (Done d = stableSortOrder(t, key_values, *rev, &order); !d) return d.stop();
    std::vector<ValuePtr> out;
    for (size_t i : order) out.push_back(items[i]);
    return Value::list(std::move(out));
  }
  // The order: sorted(range(n), key=keys.__getitem__, reverse=reverse), run for real.
  Ref indices = Ref::steal(PyObject_CallFunction(reinterpret_cast<PyObject*>(&PyRange_Type), "n",
                                                 static_cast<Py_ssize_t>(items.size())));
  Ref getitem = keys ? Ref::steal(PyObject_GetAttrString(keys.get(), "__getitem__")) : Ref();
  Ref pkw = Ref::steal(PyDict_New());
  if (!indices || !getitem || !pkw || PyDict_SetItemString(pkw.get(), "key", getitem.get()) < 0 ||
      PyDict_SetItemString(pkw.get(), "reverse", reverse->constant()) < 0)
    return t.failFromPython("sorted()");
  Ref pargs = Ref::steal(PyTuple_Pack(1, indices.get()));
  if (!pargs) return t.failFromPython("sorted()");
  Ref order = Ref::steal(PyObject_Call(f, pargs.get(), pkw.get()));
  if (!order) return t.raisePython();  // keys that do not compare: the TypeError eager raises
  std::vector<ValuePtr> out;
  for (Py_ssize_t i = 0; i < PyList_GET_SIZE(order.get()); ++i)
    out.push_back(items[static_cast<size_t>(PyLong_AsSsize_t(PyList_GET_ITEM(order.get(), i)))]);
  return Value::list(std::move(out));
}

// min() / max() over 0-d tensors of one dtype. Python's max keeps the first item and takes
// each later one that compares greater (min: less), so a pair is torch.where(b > a, b, a)
// (b < a for min), folded from the left: eager's value and dtype, NaN and ties included.
// Eager returns that item itself: the graph also computes which item won (the same fold
// over the items' positions, torch.where(b > a, i, k)), and the result is a choice
// (GraphBuilder::markChoice): its value is the where() node's, and where the object
// matters it is the winning item itself (rebuilt from the graph's outputs; an identity test
// or an in-place change breaks the graph). Not modelled (NotHandled): an item that requires
// grad (see below), a larger tensor (eager's comparison raises), tensors of different
// dtypes, bool or complex ones, and a number among the items (eager returns the number
// itself when it wins: a type no graph gives).
Result<ValuePtr> minMaxOfTensors(Tracer& t, bool is_max, const std::vector<ValuePtr>& items) {
  if (items.size() == 1 && items[0]->is(Kind::Tensor)) return items[0];  // one item: never compared
  if (items.size() < 2) return notHandled();
  PyObject* bool_dtype = lookup(Obj::torch_bool);
  PyObject* where = lookup(Obj::torch_where);
  PyObject* compare = lookup(is_max ? Obj::operator_gt : Obj::operator_lt);
  if (!bool_dtype || !where || !compare) return t.failFromPython("min()/max() of tensors");
  Ref dtype;
  std::vector<int> nodes;
  for (const ValuePtr& v : items) {
    const Tensor* tensor = v->get<Tensor>();
    if (!tensor || isScalarValue(t, v)) return notHandled();
    PyObject* fake = t.graph().fake(tensor->node);
    Ref d = Ref::steal(PyObject_GetAttrString(fake, "dtype"));
    Ref dim = d ? Ref::steal(PyObject_CallMethod(fake, "dim", nullptr)) : Ref();
    Ref cx = dim ? Ref::steal(PyObject_GetAttrString(d.get(), "is_complex")) : Ref();
    if (!cx) return t.failFromPython("min()/max() of tensors");
    if (PyLong_AsLong(dim.get()) != 0 || cx.get() == Py_True || d.get() == bool_dtype) return notHandled();
    // An item that takes part in autograd: where() would send the losing items a zero
    // gradient (their .grad zeros) where eager's max, returning the winner itself, leaves
    // them out of the backward graph (.grad None). Not modelled.
    Ref rg = Ref::steal(PyObject_GetAttrString(fake, "requires_grad"));
    if (!rg) return t.failFromPython("min()/max() of tensors");
    if (rg.get() == Py_True) return notHandled();
    if (dtype && dtype.get() != d.get()) return notHandled();
    dtype = std::move(d);
    nodes.push_back(tensor->node);
  }
  ValuePtr acc = items[0];
  ValuePtr index = constInt(0);
  for (size_t i = 1; i < items.size(); ++i) {
    Result<ValuePtr> takes = recordCall(t, graph::NodeOp::CallFunction, compare, {items[i], acc}, {});
    if (!takes) return takes;
    Result<ValuePtr> r = recordCall(t, graph::NodeOp::CallFunction, where, {*takes, items[i], acc}, {});
    if (!r) return r;
    Result<ValuePtr> won =
        recordCall(t, graph::NodeOp::CallFunction, where, {takes.take(), constInt(static_cast<long>(i)), index}, {});
    if (!won) return won;
    acc = r.take();
    index = won.take();
    if (const Tensor* w = index->get<Tensor>()) t.graph().markBookkeeping(w->node);
  }
  const Tensor* out = acc->get<Tensor>();
  const Tensor* which = index->get<Tensor>();
  if (!out || !which) return t.fail("min()/max() of tensors: where() did not give tensors");
  t.graph().markChoice(out->node, std::move(nodes), which->node);
  return acc;
}

// min() / max() of numbers some of which are symbolic (a size, a symbolic int argument, a
// Tensor.item()): torch.sym_max / torch.sym_min folded from the left, as torch._dynamo
// records them, so the result stays symbolic and no guard fixes which item won (for ints
// only the value matters, not which object won). Floats too, all of them floats: run on
// numbers, torch.sym_max(a, b) is max(a, b), the same order (NaN kept where max keeps it).
// NotHandled unless every item is a constant or a scalar of the graph of one type, int
// (not bool: max(True, 0) is True) or float -- max(3, 2.5) is the int 3, which sym_max
// would make 3.0 -- and one is symbolic.
Result<ValuePtr> minMaxOfSymbolic(Tracer& t, bool is_max, const std::vector<ValuePtr>& items) {
  if (items.size() < 2) return notHandled();
  bool symbolic = false;
  PyTypeObject* type = nullptr;
  for (const ValuePtr& v : items) {
    PyTypeObject* item_type;
    if (v->is(Kind::Constant)) {
      item_type = Py_TYPE(v->constant());
    } else {
      if (!isScalarValue(t, v)) return notHandled();
      item_type = reinterpret_cast<PyTypeObject*>(scalarType(t, v));
      symbolic = true;
    }
    if ((item_type != &PyLong_Type && item_type != &PyFloat_Type) || (type && item_type != type)) return notHandled();
    type = item_type;
  }
  if (!symbolic) return notHandled();
  PyObject* target = lookup(is_max ? Obj::torch_sym_max : Obj::torch_sym_min);
  if (!target) return t.failFromPython("torch.sym_max");
  ValuePtr acc = items[0];
  for (size_t i = 1; i < items.size(); ++i) {
    Result<ValuePtr> r = recordCall(t, graph::NodeOp::CallFunction, target, {acc, items[i]}, {});
    if (!r) return r;
    acc = r.take();
  }
  return acc;
}

// min() / max() of numbers, some symbolic, that minMaxOfSymbolic leaves (a SymBool such as
// `x.shape[0] > 3`, ints mixed with floats): Python's own fold, each later item taken when it
// compares greater (min: less) than the one kept, every comparison's truth fixed by a shape
// guard as a branch on it is. The result is the very item eager returns, of its type
// (max(True, 0) is True, max(3, 2.5) the int 3). A SymBool item is made its truth first
// (it compares as the bool it is). NotHandled if an item is not a number.
Result<ValuePtr> minMaxOfNumbers(Tracer& t, bool is_max, std::vector<ValuePtr> items) {
  if (items.size() < 2) return notHandled();
  for (ValuePtr& v : items) {
    if (v->is(Kind::Constant)) {
      PyTypeObject* type = Py_TYPE(v->constant());
      if (type != &PyLong_Type && type != &PyFloat_Type && type != &PyBool_Type) return notHandled();
      continue;
    }
    if (!isScalarValue(t, v)) return notHandled();
    if (scalarType(t, v) == reinterpret_cast<PyObject*>(&PyBool_Type)) {
      Result<bool> truth = truthValue(t, v);
      if (!truth) return truth.stop();
      v = Value::constant(*truth ? Py_True : Py_False);
    }
  }
  ValuePtr acc = items[0];
  for (size_t i = 1; i < items.size(); ++i) {
    Result<ValuePtr> takes = compareOp(t, is_max ? Py_GT : Py_LT, items[i], acc);
    if (!takes) return takes;
    Result<bool> truth = truthValue(t, *takes);
    if (!truth) return truth.stop();
    if (*truth) acc = items[i];
  }
  return acc;
}


}  // namespace
// sum(iterable[, start]): the items added with the + operator.
Result<ValuePtr> builtinSum(Tracer& t, PyObject* f, const char* which, Args& args, Kwargs& kwargs) {
  auto is = [which](const char* n) { return strcmp(which, n) == 0; };
  if (!(is("sum") && !args.empty() && args.size() <= 2)) return notHandled();
  std::vector<ValuePtr> items;
  if (Done d = iterate(t, args[0], &items); !d) return d.stop();
  Result<ValuePtr> acc = args.size() == 2 ? args[1] : constInt(0);
  for (auto& [k, v] : kwargs) {
    if (PyUnicode_CompareWithASCIIString(k.get(), "start") != 0) return t.fail("sum() keyword");
    acc = v;
  }
  for (const ValuePtr& v : items) {
    acc = binaryOp(t, bytecode::BinaryOp::Add, *acc, v);
    if (!acc) return acc;
  }
  return acc;
  
}

Result<ValuePtr> builtinReduce(Tracer& t, PyObject* f, const char* which, Args& args, Kwargs& kwargs) {
  auto is = [which](const char* n) { return strcmp(which, n) == 0; };
  if (is("sorted")) return builtinSorted(t, f, args, kwargs);
  if (!((is("min") || is("max") || is("sorted") || is("all") || is("any")) && !args.empty() && kwargs.empty())) return notHandled();
  if ((is("all") || is("any")) && args.size() == 1) {
    // Item by item, stopping at the first that decides: what is left of an iterator (or a
    // generator's frame) stays untaken, as in Python.
    const bool want = is("any");
    Result<ValuePtr> it = getIter(t, args[0]);
    if (!it) return it;
    while (true) {
      ValuePtr v;
      if (Done d = nextItem(t, *it, &v); !d) return d.stop();
      if (!v) return Value::constant(want ? Py_False : Py_True);
      Result<bool> truth = truthValue(t, v);
      if (!truth) return truth.stop();
      if (*truth == want) return Value::constant(want ? Py_True : Py_False);
    }
  }
  std::vector<ValuePtr> items;
  if (args.size() == 1) {
    if (Done d = iterate(t, args[0], &items); !d) return d.stop();
  } else {
    items = args;
  }
  if (is("all") || is("any")) {
    bool want = is("any");
    for (const ValuePtr& v : items) {
      Result<bool> truth = truthValue(t, v);
      if (!truth) return truth.stop();
      if (*truth == want) return Value::constant(want ? Py_True : Py_False);
    }
    return Value::constant(want ? Py_False : Py_True);
  }
  bool constants = true;
  for (const ValuePtr& v : items) constants = constants && v->is(Kind::Constant);
  if (constants) {
    std::vector<ValuePtr> one{Value::tuple(items)};
    Ref tup = Ref::steal(PyTuple_New(static_cast<Py_ssize_t>(items.size())));
    if (!tup) return t.failFromPython(std::string(which) + "()");
    for (size_t i = 0; i < items.size(); ++i) PyTuple_SET_ITEM(tup.get(), i, Ref::borrow(items[i]->constant()).release());
    std::vector<ValuePtr> cargs{Value::constant(tup.get())};
    std::vector<std::pair<Ref, ValuePtr>> nokw;
    Result<ValuePtr> r = runPure(t, f, which, cargs, nokw);
    if (!r.notHandled()) return r;
  }
  if (is("min") || is("max")) {
    Result<ValuePtr> sym = minMaxOfSymbolic(t, is("max"), items);
    if (!sym.notHandled()) return sym;
    Result<ValuePtr> r = minMaxOfTensors(t, is("max"), items);
    if (!r.notHandled()) return r;
    Result<ValuePtr> n = minMaxOfNumbers(t, is("max"), items);
    if (!n.notHandled()) return n;
    bool objects = false;
    for (const ValuePtr& v : items) objects = objects || isUserObject(v);
    if (objects) {
      // Instances of the program's classes: Python's fold, the first item kept and each
      // later one taken when it compares greater (min: less) by the class's own methods.
      if (items.empty()) return t.raiseNew(PyExc_ValueError, std::string(which) + "() arg is an empty sequence");
      ValuePtr best = items[0];
      for (size_t i = 1; i < items.size(); ++i) {
        Result<ValuePtr> c = compareOp(t, is("max") ? Py_GT : Py_LT, items[i], best);
        if (!c) return c;
        Result<bool> truth = truthValue(t, *c);
        if (!truth) return truth.stop();
        if (*truth) best = items[i];
      }
      return best;
    }
  }
  return t.fail(std::string(which) + "() over tensors depends on their values");
}

}  // namespace cdynamo::trace
