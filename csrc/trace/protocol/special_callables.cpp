// The special callables known by identity (object.__init__/__setattr__, functools.partial,
// collections.deque/namedtuple/defaultdict/OrderedDict, operator.itemgetter/attrgetter,
// inspect.signature, ...): one row each (kSpecialRows), each with the function that traces a
// call of it.
#include <algorithm>
#include <cstring>
#include <string>
#include <unordered_map>

#include "support/lookup.h"
#include "support/torch_types.h"
#include "trace/call_rules.h"
#include "trace/engine/scalars.h"
#include "trace/engine/speculation.h"
#include "trace/kinds/iterator.h"
#include "trace/kinds/namespace.h"
#include "trace/kinds/object.h"
#include "trace/protocol/attributes.h"
#include "trace/protocol/call_rules_internal.h"
#include "trace/protocol/callables.h"
#include "trace/protocol/calls.h"
#include "trace/protocol/constants.h"
#include "trace/protocol/container_methods.h"
#include "trace/protocol/operators.h"
#include "trace/tracer.h"

namespace cdynamo::trace {

using graph::NodeOp;

namespace {
// ---- the special callables (rows of kSpecialRows) ----

// object.__init__(self): a no-op on the objects the trace makes.
Result<ValuePtr> objectInit(Tracer&, PyObject*, const char*, Args&, Kwargs&) { return Value::constant(Py_None); }

// object.__setattr__(self, name, value): how frozen dataclasses set fields.
Result<ValuePtr> objectSetattr(Tracer& t, PyObject* f, const char*, Args& args, Kwargs& kwargs) {
  if (args.size() != 3 || !args[1]->constant() || !PyUnicode_Check(args[1]->constant())) return notHandled();
  if (args[0]->is(Kind::NewObject)) {
    if (Done d = genericSetAttr(t, args[0], args[1]->constant(), args[2]); !d) return d.stop();
    return Value::constant(Py_None);
  }
  // An object from the program (its class's own __setattr__ calling super().__setattr__):
  // replayed after the graph as object.__setattr__, not through the class's __setattr__
  // again; reads later in the trace see the value.
  const ValuePtr& obj = args[0];
  if (obj->is(Kind::Object) && obj->reg >= 0 && !obj->as<Object>().owned) {
    PyObject* descr = _PyType_Lookup(Py_TYPE(obj->real()), args[1]->constant());
    if (descr && Py_TYPE(descr)->tp_descr_set)
      return t.fail("object.__setattr__ of a property or descriptor of an object from outside the trace is not supported yet");
    if (Done d = t.effects().setAttr(obj->reg, args[1]->constant(), args[2], true); !d) return d.stop();
    return Value::constant(Py_None);
  }
  return t.fail("object.__setattr__ on an object from outside the trace (a side effect)");
}

// object.__delattr__(self, name): the generic deletion (a class's own __delattr__ reaching
// it through super()).
Result<ValuePtr> objectDelattr(Tracer& t, PyObject*, const char*, Args& args, Kwargs& kwargs) {
  if (args.size() != 2 || !kwargs.empty() || !args[1]->constant() || !PyUnicode_Check(args[1]->constant())) return notHandled();
  if (Done d = genericDelAttr(t, args[0], args[1]->constant()); !d) return d.stop();
  return Value::constant(Py_None);
}

// object.__getattribute__(self, name): the generic lookup (a class's own __getattribute__
// reaching it through super()).
Result<ValuePtr> objectGetattribute(Tracer& t, PyObject*, const char*, Args& args, Kwargs& kwargs) {
  if (args.size() != 2 || !kwargs.empty() || !args[1]->constant() || !PyUnicode_Check(args[1]->constant())) return notHandled();
  if (!isUserObject(args[0]) && !args[0]->is(Kind::Module)) return notHandled();
  return genericGetAttr(t, args[0], args[1]->constant(), nullptr, false);
}

// inspect.signature(f) of a Python function or a bound method of one, both fixed by their
// guards (the function's identity): computed for real (a bound method's without its first
// parameter, as inspect does). Anything else is traced through inspect.py.
Result<ValuePtr> foldSignature(Tracer& t, PyObject* f, const char*, Args& args, Kwargs& kwargs) {
  PyObject* target = nullptr;
  bool bound = false;
  if (args.size() == 1 && kwargs.empty()) {
    if (const BoundMethod* m = args[0]->get<BoundMethod>()) {
      target = m->function.get();
      bound = true;
    } else if (args[0]->is(Kind::Callable)) {
      target = args[0]->real();
    }
  }
  if (!target || !PyFunction_Check(target)) return t.inlineFunction(f, -1, std::move(args), std::move(kwargs));
  Ref sig = Ref::steal(PyObject_CallOneArg(f, target));
  if (!sig) return t.raisePython();
  if (bound) {  // sig.replace(parameters=tuple(sig.parameters.values())[1:])
    Ref params = Ref::steal(PyObject_GetAttrString(sig.get(), "parameters"));
    Ref values = params ? Ref::steal(PyObject_CallMethod(params.get(), "values", nullptr)) : Ref();
    Ref all = values ? Ref::steal(PySequence_Tuple(values.get())) : Ref();
    if (!all) return t.failFromPython("a bound method's signature");
    if (PyTuple_GET_SIZE(all.get()) == 0) return t.fail("inspect.signature of a method without parameters (ValueError)");
    Ref rest = Ref::steal(PyTuple_GetSlice(all.get(), 1, PyTuple_GET_SIZE(all.get())));
    Ref kw = Ref::steal(PyDict_New());
    Ref replace = Ref::steal(PyObject_GetAttrString(sig.get(), "replace"));
    Ref no_args = Ref::steal(PyTuple_New(0));
    if (!rest || !kw || !replace || !no_args || PyDict_SetItemString(kw.get(), "parameters", rest.get()) < 0)
      return t.failFromPython("a bound method's signature");
    sig = Ref::steal(PyObject_Call(replace.get(), no_args.get(), kw.get()));
    if (!sig) return t.failFromPython("a bound method's signature");
  }
  return t.wrap(sig.get(), -1);
}

// functools.partial(fn, *args, **kwargs) made in the trace.
Result<ValuePtr> makePartial(Tracer& t, PyObject* f, const char*, Args& args, Kwargs& kwargs) {
  if (args.empty()) return t.fail("partial() needs a function (TypeError)");
  ValuePtr kw = Value::emptyDict();
  Dict& d = kw->as<Dict>();
  for (auto& [k, v] : kwargs) {
    d.keys.push_back(k.copy());
    d.values.push_back(v);
  }
  return Value::of(Partial{args[0], Value::tuple(std::vector<ValuePtr>(args.begin() + 1, args.end())), kw, nullptr});
}

// A partial object from the program: immutable (func, args, keywords), guarded by identity.
Result<ValuePtr> callPartialObject(Tracer& t, PyObject* f, const char*, Args& args, Kwargs& kwargs) {
  Ref func = Ref::steal(PyObject_GetAttrString(f, "func"));
  Ref pargs = Ref::steal(PyObject_GetAttrString(f, "args"));
  Ref pkw = Ref::steal(PyObject_GetAttrString(f, "keywords"));
  if (!func || !pargs || !pkw) return t.failFromPython("functools.partial");
  if (!PyTuple_CheckExact(pargs.get()) || !PyDict_CheckExact(pkw.get())) return t.fail("a functools.partial with odd parts");
  // A partial object without a source (one read from the program is a Partial value:
  // Tracer::wrapCallable).
  Result<ValuePtr> fv = t.wrap(func.get(), -1);
  if (!fv) return fv;
  Result<ValuePtr> av = t.wrap(pargs.get(), -1);
  if (!av) return av;
  Result<ValuePtr> kv = t.wrap(pkw.get(), -1);
  if (!kv) return kv;
  std::vector<ValuePtr> all;
  if (PyObject* c = (*av)->constant(); c && PyTuple_Check(c)) {  // arguments that are all constants
    for (Py_ssize_t i = 0; i < PyTuple_GET_SIZE(c); ++i) all.push_back(Value::constant(PyTuple_GET_ITEM(c, i)));
  } else if (const std::vector<ValuePtr>* bound = (*av)->elements()) {
    all.assign(bound->begin(), bound->end());
  } else {
    return t.fail("a functools.partial's arguments");
  }
  const Dict* bound_kw = (*kv)->get<Dict>();
  if (!bound_kw) return t.fail("a functools.partial's keywords");
  all.insert(all.end(), args.begin(), args.end());
  std::vector<std::pair<Ref, ValuePtr>> kw;
  for (size_t i = 0; i < bound_kw->keys.size(); ++i) kw.emplace_back(bound_kw->keys[i].copy(), bound_kw->values[i]);
  for (auto& kv2 : kwargs) {
    for (auto it = kw.begin(); it != kw.end(); ++it)
      if (PyUnicode_Compare(it->first.get(), kv2.first.get()) == 0) {  // a call's keyword replaces the partial's
        kw.erase(it);
        break;
      }
    kw.push_back(std::move(kv2));
  }
  return call(t, *fv, std::move(all), std::move(kw));
}

// collections.deque(iterable, maxlen) made in the trace.
Result<ValuePtr> makeDeque(Tracer& t, PyObject* f, const char*, Args& args, Kwargs& kwargs) {
  ValuePtr q = Value::of(List{{}, Ref::borrow(f), Ref()});
  ValuePtr maxlen = args.size() > 1 ? args[1] : nullptr;
  for (auto& [k, v] : kwargs)
    if (PyUnicode_CompareWithASCIIString(k.get(), "maxlen") == 0) maxlen = v;
  PyObject* max = maxlen ? maxlen->constant() : nullptr;
  if (maxlen && !(max && (max == Py_None || PyLong_Check(max)))) return t.fail("deque maxlen must be a constant int");
  if (max && max != Py_None) q->as<List>().maxlen = Ref::borrow(max);
  if (!args.empty()) {
    std::vector<ValuePtr> a{args[0]};
    std::vector<std::pair<Ref, ValuePtr>> kw;
    if (Result<ValuePtr> r = callContainerMethod(t, q, interned(Str::extend), a, kw); !r) return r;
  }
  return q;
}

// collections.namedtuple(name, fields, ...) on constants: the class made now, for real (as
// torch._dynamo does): making it runs no code of the program and changes nothing but the new
// class. Its __module__ is the calling frame's module, as namedtuple reads it from the caller.
Result<ValuePtr> makeNamedTupleClass(Tracer& t, PyObject* f, const char*, Args& args, Kwargs& kwargs) {
  Ref pargs = toPython(t, Value::tuple(args));
  if (!pargs || !PyTuple_Check(pargs.get())) return notHandled();
  Ref pkwargs = Ref::steal(PyDict_New());
  if (!pkwargs) return t.failFromPython("namedtuple()'s arguments");
  for (const auto& [k, v] : kwargs) {
    Ref p = toPython(t, v);
    if (!p) return notHandled();
    if (PyDict_SetItem(pkwargs.get(), k.get(), p.get()) < 0) return t.failFromPython("namedtuple()'s arguments");
  }
  static PyObject* const module_kw = PyUnicode_InternFromString("module");
  if (!PyDict_Contains(pkwargs.get(), module_kw) && t.current() && t.current()->globals.get()) {
    PyObject* name = PyDict_GetItemWithError(t.current()->globals.get(), interned(Str::dunder_name));
    if (name && PyDict_SetItem(pkwargs.get(), module_kw, name) < 0) return t.failFromPython("namedtuple()'s module");
    if (!name && PyErr_Occurred()) return t.failFromPython("the caller's __name__");
  }
  Ref cls = Ref::steal(PyObject_Call(f, pargs.get(), pkwargs.get()));
  if (!cls) return t.raisePython();  // bad field names: the ValueError eager raises
  return Value::callable(cls.get());
}

// collections.defaultdict(factory, ...) made in the trace.
Result<ValuePtr> makeDefaultdict(Tracer& t, PyObject* f, const char*, Args& args, Kwargs& kwargs) {
  if (args.size() > 2) return raiseConstructorArgumentError(t, f, args.size(), kwargs);
  ValuePtr d = Value::dict(f, {}, {});
  if (!args.empty()) {
    // The factory: a real callable (list, a class, a function of the program), one made in
    // the trace (a lambda: called as a value), or None (missing keys raise KeyError).
    PyObject* real = args[0]->real();
    if (real && real != Py_None) {
      if (!PyCallable_Check(real)) return t.raiseNew(PyExc_TypeError, "first argument must be callable or None");
      d->as<Dict>().default_factory = Ref::borrow(real);
    } else if (!real) {
      Kind k = args[0]->kind();
      if (k != Kind::Function && k != Kind::BoundMethod && k != Kind::Callable)
        return t.fail(std::string("a defaultdict whose factory is a ") + kindName(k) + " made in the trace");
      d->as<Dict>().factory_value = args[0];
    }
    std::vector<ValuePtr> rest(args.begin() + 1, args.end());
    if (Result<ValuePtr> r = callContainerMethod(t, d, interned(Str::update), rest, kwargs); !r) return r;
  }
  return d;
}

// operator.itemgetter(k...) / attrgetter("a.b"): made for real from constants.
Result<ValuePtr> makeGetter(Tracer& t, PyObject* f, const char*, Args& args, Kwargs& kwargs) {
  Ref made = toPython(t, Value::tuple(args));
  if (!made || !kwargs.empty()) return t.fail("itemgetter/attrgetter of non-constants");
  Ref obj = Ref::steal(PyObject_Call(f, made.get(), nullptr));
  if (!obj) return t.raisePython();
  return Value::callable(obj.get());
}

// operator.itemgetter(k...)(obj) / attrgetter("a.b")(obj): their keys are in __reduce__.
Result<ValuePtr> callGetter(Tracer& t, PyObject* f, const char*, Args& args, Kwargs& kwargs) {
  if (args.size() != 1 || !kwargs.empty()) return t.fail("getter called with several arguments");
  Ref red = Ref::steal(PyObject_CallMethod(f, "__reduce__", nullptr));
  if (!red || !PyTuple_Check(red.get()) || PyTuple_GET_SIZE(red.get()) < 2) return t.failFromPython("getter keys");
  PyObject* keys = PyTuple_GET_ITEM(red.get(), 1);
  bool item = isType(reinterpret_cast<PyObject*>(Py_TYPE(f)), Obj::operator_itemgetter);
  std::vector<ValuePtr> got;
  for (Py_ssize_t i = 0; i < PyTuple_GET_SIZE(keys); ++i) {
    PyObject* key = PyTuple_GET_ITEM(keys, i);
    Result<ValuePtr> v = args[0];
    if (item) {
      v = subscript(t, *v, Value::constant(key));
    } else {
      Ref dot = Ref::steal(PyUnicode_FromString("."));
      Ref parts = Ref::steal(dot ? PyUnicode_Split(key, dot.get(), -1) : nullptr);
      if (!parts) return t.failFromPython("attrgetter keys");
      for (Py_ssize_t k = 0; v && k < PyList_GET_SIZE(parts.get()); ++k)
        v = getAttr(t, *v, PyList_GET_ITEM(parts.get(), k));
    }
    if (!v) return v;
    got.push_back(v.take());
  }
  return got.size() == 1 ? got[0] : Value::tuple(std::move(got));
}

// collections.OrderedDict(...) made in the trace.
Result<ValuePtr> makeOrderedDict(Tracer& t, PyObject* f, const char*, Args& args, Kwargs& kwargs) {
  if (args.size() > 1) return raiseConstructorArgumentError(t, f, args.size(), kwargs);
  ValuePtr d = Value::dict(f, {}, {});
  if (Result<ValuePtr> r = callContainerMethod(t, d, interned(Str::update), args, kwargs); !r) return r;
  return d;
}

// A reader of the interpreter's state without arguments (sys.getrecursionlimit): run now,
// folded, and guarded to answer the same on each call (a StateQuery check).
Result<ValuePtr> foldStateReader(Tracer& t, PyObject* f, const char*, Args& args, Kwargs& kwargs) {
  if (!args.empty() || !kwargs.empty()) return notHandled();
  Ref no_args = Ref::steal(PyTuple_New(0));
  Ref r = Ref::steal(no_args ? PyObject_Call(f, no_args.get(), nullptr) : nullptr);
  if (!r) return t.raisePython();
  if (!isConstantObject(r.get())) return t.fail("a state reader returned a non-constant");
  t.guards().checkStateQuery(f, no_args.get(), nullptr, r.get());
  return Value::constant(r.get());
}

// sys.exc_info() / sys.exception(): the exception the traced program handles (the trace's
// own, with the traceback the trace gave it). Where it handles none, the answer is what the
// compiled frame's caller handles: used only when that is nothing, and guarded to stay so.
Result<ValuePtr> handledExceptionQuery(Tracer& t, PyObject* f, const char*, Args& args, Kwargs& kwargs) {
  if (!args.empty() || !kwargs.empty()) return notHandled();
  const bool info = f == lookup(Obj::sys_exc_info);
  ValuePtr exc = t.handledException();
  if (!exc) {
    Ref outer = Ref::steal(PyErr_GetHandledException());
    if (outer && outer.get() != Py_None)
      return t.fail("sys.exc_info() while the compiled frame's caller handles an exception (a different one on each call)");
    PyObject* query = lookup(Obj::sys_exception);
    Ref no_args = Ref::steal(PyTuple_New(0));
    if (!query || !no_args) return t.failFromPython("sys.exception");
    t.guards().checkStateQuery(query, no_args.get(), nullptr, Py_None);
    ValuePtr none = Value::constant(Py_None);
    return info ? Value::tuple({none, none, none}) : none;
  }
  if (!info) return exc;
  PyObject* e = exc->real();
  if (!e || !PyExceptionInstance_Check(e)) return t.fail("sys.exc_info() of an exception the trace cannot read");
  Ref tb = Ref::steal(PyException_GetTraceback(e));
  Result<ValuePtr> tbv = t.wrap(tb ? tb.get() : Py_None, -1);
  if (!tbv) return tbv;
  return Value::tuple({Value::callable(reinterpret_cast<PyObject*>(Py_TYPE(e))), exc, tbv.take()});
}

const std::vector<SpecialRow> kSpecialRows = {
    {Obj::object_init, false, {"object.__init__", objectInit, false}},
    {Obj::object_setattr, false, {"object.__setattr__", objectSetattr, false}},
    {Obj::object_delattr, false, {"object.__delattr__", objectDelattr, false}},
    {Obj::object_getattribute, false, {"object.__getattribute__", objectGetattribute, false}},
    {Obj::functools_partial, false, {"functools.partial", makePartial, false}},
    {Obj::inspect_signature, false, {"inspect.signature", foldSignature, false}},
    {Obj::functools_partial, true, {"functools.partial object", callPartialObject, false}},
    {Obj::collections_deque, false, {"collections.deque", makeDeque, false}},
    {Obj::collections_namedtuple, false, {"collections.namedtuple", makeNamedTupleClass, false}},
    {Obj::collections_defaultdict, false, {"collections.defaultdict", makeDefaultdict, false}},
    {Obj::operator_itemgetter, false, {"operator.itemgetter", makeGetter, false}},
    {Obj::operator_attrgetter, false, {"operator.attrgetter", makeGetter, false}},
    {Obj::operator_itemgetter, true, {"operator.itemgetter object", callGetter, false}},
    {Obj::operator_attrgetter, true, {"operator.attrgetter object", callGetter, false}},
    {Obj::collections_OrderedDict, false, {"collections.OrderedDict", makeOrderedDict, false}},
    {Obj::types_SimpleNamespace, false, {"types.SimpleNamespace", makeNamespace, false}},
    {Obj::sys_getrecursionlimit, false, {"sys.getrecursionlimit", foldStateReader, false}},
    {Obj::sys_exc_info, false, {"sys.exc_info", handledExceptionQuery, false}},
    {Obj::sys_exception, false, {"sys.exception", handledExceptionQuery, false}},
    // Higher-order ops: their callables traced as subgraphs (engine/speculation.cpp).
    {Obj::torch_cond, false, {"torch.cond", callCond, false}},
    {Obj::torch_ops_higher_order_cond, false, {"torch.ops.higher_order.cond", callCond, false}},
    {Obj::torch_utils_checkpoint_checkpoint, false, {"torch.utils.checkpoint.checkpoint", callCheckpoint, false}},
    {Obj::torch_ops_higher_order_wrap, false, {"torch.ops.higher_order.wrap", callWrap, false}},
    {Obj::torch_while_loop, false, {"torch._higher_order_ops.while_loop", callWhileLoop, false}},
    {Obj::torch_hop_map, false, {"torch._higher_order_ops.map", callMap, false}},
    {Obj::torch_hop_scan, false, {"torch._higher_order_ops.scan", callScan, false}},
    {Obj::torch_invoke_subgraph_placeholder, false,
     {"torch.compiler.nested_compile_region", callInvokeSubgraph, false}},
};

}  // namespace
const std::vector<SpecialRow>& specialRows() { return kSpecialRows; }

// A reader of the autograd engine's state called on the engine
// (torch.autograd._is_checkpoint_valid: Variable._execution_engine.is_checkpoint_valid()):
// run now, folded, and guarded to answer the same on each call (a StateQuery check).
Result<ValuePtr> foldEngineQuery(Tracer& t, PyObject* f, Args& args, Kwargs& kwargs) {
  if (!PyObject_TypeCheck(f, &PyMethodDescr_Type) ||
      PyUnicode_CompareWithASCIIString(PyDescr_NAME(f), "is_checkpoint_valid") != 0)
    return notHandled();
  PyObject* engine = lookup(Obj::torch_autograd_execution_engine);
  if (!engine) return t.failFromPython("torch's autograd engine");
  if (PyDescr_TYPE(f) != Py_TYPE(engine) || args.size() != 1 || !kwargs.empty() || args[0]->real() != engine)
    return notHandled();
  Ref engine_args = Ref::steal(PyTuple_Pack(1, engine));
  Ref r = Ref::steal(engine_args ? PyObject_Call(f, engine_args.get(), nullptr) : nullptr);
  if (!r) return t.raisePython();
  if (!isConstantObject(r.get())) return t.fail("an autograd engine query returned a non-constant");
  t.guards().checkStateQuery(f, engine_args.get(), nullptr, r.get());
  return Value::constant(r.get());
}

}  // namespace cdynamo::trace
