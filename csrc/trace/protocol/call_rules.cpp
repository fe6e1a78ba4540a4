// Call rules: how a call of a real callable is traced when no builtin row names it (the
// special callables of the table first, kSpecialRows; then callByRules, in order), and the
// rules the Python package keeps (call_rules.h), consulted before any of them.
#include <algorithm>
#include <cstring>
#include <string>
#include <unordered_map>

#include "support/lookup.h"
#include "support/torch_types.h"
#include "trace/call_rules.h"
#include "trace/engine/graph_calls.h"
#include "trace/engine/scalars.h"
#include "trace/kinds/exception.h"
#include "trace/kinds/iterator.h"
#include "trace/kinds/namespace.h"
#include "trace/kinds/ndarray.h"
#include "trace/kinds/object.h"
#include "trace/kinds/tensor_subclass.h"
#include "trace/protocol/attributes.h"
#include "trace/protocol/callables.h"
#include "trace/protocol/calls.h"
#include "trace/protocol/constants.h"
#include "trace/protocol/container_methods.h"
#include "trace/protocol/operators.h"
#include "trace/tracer.h"

namespace cdynamo::trace {

using graph::NodeOp;

namespace {

// "torch", "torch.nn.functional", "torch._C._nn", ...: functions the graph records.
bool isTorchFunction(PyObject* fn) {
  Ref mod = Ref::steal(PyObject_GetAttrString(fn, "__module__"));
  if (!mod || !PyUnicode_Check(mod.get())) {
    PyErr_Clear();
    // Builtin methods of torch's C classes carry their module on __self__ instead.
    if (PyCFunction_Check(fn)) {
      PyObject* self = PyCFunction_GET_SELF(fn);
      if (self && PyModule_Check(self)) {
        const char* n = PyModule_GetName(self);
        if (!n) return PyErr_Clear(), false;
        return strncmp(n, "torch", 5) == 0;
      }
    }
    return false;
  }
  const char* m = PyUnicode_AsUTF8(mod.get());
  if (strcmp(m, "torch") == 0) return true;
  if (strncmp(m, "torch.", 6) != 0) return false;
  return strncmp(m, "torch._dynamo", 13) != 0 && strncmp(m, "torch.compiler", 14) != 0;
}

// ---- torch callables called without tensor arguments ----
//
// What a torch callable IS decides how such a call is traced (no list of names):
//  * a Python function of torch (torch._assert, torch.jit.is_tracing, F._canonical_mask):
//    traced like user code, so what it calls is decided by these rules in turn;
//  * the override-dispatch entry points (torch._C._has_torch_function*, by identity): a
//    question about the types of their arguments, answered from the traced values;
//  * a module-level C binding named as a reader of state by torch's convention (is_*,
//    has_*, get_*, are_*, after leading underscores: _is_tracing, is_grad_enabled,
//    get_default_dtype, _get_privateuse1_backend_name) on constant arguments: run at
//    trace time, its constant result folded and guarded by asking again on each lookup;
//  * an aten operator (torch._C._jit_get_schemas_for_operator knows aten::<name>):
//    recorded like any op (factories: torch.zeros, torch.rand; dtype queries fold);
//  * any other C binding may change state (torch._C._set_grad_enabled, manual seeds):
//    the graph breaks at the call, named module.name.
bool isType(PyObject* f, Obj o);

enum class TorchKind : unsigned char { PythonHelper, DispatchQuery, StateReader, Operator, Binding };

// "torch._C._is_tracing": __module__ and __name__ (a pybind11 function's __qualname__ is
// the name of its function record, not its own).
std::string torchName(PyObject* fn) {
  std::string out;
  for (const char* attr : {"__module__", "__name__"}) {
    Ref a = Ref::steal(PyObject_GetAttrString(fn, attr));
    const char* s = a && PyUnicode_Check(a.get()) ? PyUnicode_AsUTF8(a.get()) : nullptr;
    if (!s) PyErr_Clear();
    if (!out.empty()) out += ".";
    out += s ? s : "?";
  }
  return out;
}

bool namedAsReader(const char* n) {
  while (*n == '_') ++n;
  for (const char* p : {"is_", "has_", "get_", "are_"})
    if (strncmp(n, p, strlen(p)) == 0) return true;
  return false;
}

bool isAtenOperator(PyObject* name) {
  PyObject* schemas = lookup(Obj::torch_C_schemas_for_operator);
  if (!schemas) return PyErr_Clear(), false;
  Ref op = Ref::steal(PyUnicode_FromFormat("aten::%U", name));
  Ref found = op ? Ref::steal(PyObject_CallOneArg(schemas, op.get())) : Ref();
  if (!found) return PyErr_Clear(), false;
  Py_ssize_t n = PyObject_Length(found.get());
  if (n < 0) PyErr_Clear();
  return n > 0;
}

TorchKind classify(PyObject* fn) {
  if (PyFunction_Check(fn)) return TorchKind::PythonHelper;
  if (isType(fn, Obj::torch_C_has_torch_function) || isType(fn, Obj::torch_C_has_torch_function_unary) ||
      isType(fn, Obj::torch_C_has_torch_function_variadic))
    return TorchKind::DispatchQuery;
  if (!PyCFunction_Check(fn)) return TorchKind::Binding;
  Ref name = Ref::steal(PyObject_GetAttrString(fn, "__name__"));
  if (!name || !PyUnicode_Check(name.get())) return PyErr_Clear(), TorchKind::Binding;
  // Functions of a module (PyMethodDef) or pybind11 bindings (their __self__ is a function
  // record) are bindings; aten ops of torch._C._VariableFunctions have no __self__.
  PyObject* self = PyCFunction_GET_SELF(fn);
  if (self && namedAsReader(PyUnicode_AsUTF8(name.get()))) return TorchKind::StateReader;
  return isAtenOperator(name.get()) ? TorchKind::Operator : TorchKind::Binding;
}

TorchKind torchKindOf(PyObject* fn) {
  // Trace time only; torch's callables live for the process (Note [Python references in statics]).
  static auto& memo = *new std::unordered_map<PyObject*, std::pair<Ref, TorchKind>>();
  auto it = memo.find(fn);
  if (it != memo.end()) return it->second.second;
  TorchKind k = classify(fn);
  memo.emplace(fn, std::make_pair(Ref::borrow(fn), k));
  return k;
}

// torch.compiler.is_compiling(), torch.compiler.is_dynamo_compiling() and their aliases:
// True inside a trace (code that asks takes its compiled branch, as under torch._dynamo).
bool isCompilingQuery(PyObject* fn) {
  if (!PyFunction_Check(fn)) return false;
  PyObject* name = reinterpret_cast<PyFunctionObject*>(fn)->func_qualname;
  PyObject* mod = reinterpret_cast<PyFunctionObject*>(fn)->func_module;
  if (!name || !mod || !PyUnicode_Check(mod) || !PyUnicode_Check(name) ||
      (PyUnicode_CompareWithASCIIString(name, "is_compiling") != 0 &&
       PyUnicode_CompareWithASCIIString(name, "is_dynamo_compiling") != 0))
    return false;
  const char* m = PyUnicode_AsUTF8(mod);
  return m && (strcmp(m, "torch.compiler") == 0 || strncmp(m, "torch._dynamo", 13) == 0 ||
               strcmp(m, "torch._utils") == 0);
}

// Whether `f` is the object `o` of the lookup table (false, no error, when it cannot be found).
bool isType(PyObject* f, Obj o) {
  PyObject* found = lookup(o);
  if (!found) PyErr_Clear();
  return found && f == found;
}

// Whether every tensor among the items of torch.tensor()'s data (lists and tuples in it)
// has one element, known from its fake: eager reads each such tensor as a number, and
// raises for a larger one where torch._refs.tensor would stack it.
bool oneElementTensorItems(Tracer& t, const ValuePtr& v) {
  if (v->is(Kind::Tensor)) {
    if (isScalarValue(t, v)) return true;
    Ref n = Ref::steal(PyObject_CallMethod(t.graph().fake(v->as<Tensor>().node), "numel", nullptr));
    if (!n) return PyErr_Clear(), false;
    return PyLong_CheckExact(n.get()) && PyLong_AsLong(n.get()) == 1;
  }
  if (!v->is(Kind::List) && !v->is(Kind::Tuple)) return true;
  for (const ValuePtr& item : *v->elements())
    if (!oneElementTensorItems(t, item)) return false;
  return true;
}

bool anyTensor(const std::vector<ValuePtr>& args, const std::vector<std::pair<Ref, ValuePtr>>& kwargs) {
  auto has = [](const ValuePtr& v, auto&& self) -> bool {
    if (v->is(Kind::Tensor)) return true;
    bool found = false;
    forEachChild(*v, [&](const ValuePtr& c) { found = found || self(c, self); });
    return found;
  };
  for (const ValuePtr& a : args)
    if (has(a, has)) return true;
  for (const auto& kv : kwargs)
    if (has(kv.second, has)) return true;
  return false;
}


// A C function of the _operator module (operator.add, operator.getitem, ...).
bool isOperatorModuleFunction(PyObject* f) {
  if (!PyCFunction_Check(f) || !PyCFunction_GET_SELF(f) || !PyModule_Check(PyCFunction_GET_SELF(f))) return false;
  const char* m = PyModule_GetName(PyCFunction_GET_SELF(f));
  if (!m) return PyErr_Clear(), false;
  return strcmp(m, "_operator") == 0;
}

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
};

// ---- the rules ----

// A C method of torch's tensor class called through the class with a tensor first
// (torch.Tensor.size(x), torch.Tensor.add_(x, y)): the tensor's own method of that name,
// bound and called, as x.size() would be.
Result<ValuePtr> callTensorMethodDescriptor(Tracer& t, PyObject* f, Args& args, Kwargs& kwargs) {
  if (args.empty() || !args[0]->is(Kind::Tensor) || !PyObject_TypeCheck(f, &PyMethodDescr_Type)) return notHandled();
  PyObject* tensor_type = lookup(Obj::torch_Tensor);
  if (!tensor_type) return t.failFromPython("torch.Tensor");
  if (!PyType_IsSubtype(reinterpret_cast<PyTypeObject*>(tensor_type), PyDescr_TYPE(f))) return notHandled();
  Result<ValuePtr> method = getAttr(t, args[0], PyDescr_NAME(f));
  if (!method) return method;
  Args rest(args.begin() + 1, args.end());
  return call(t, *method, std::move(rest), std::move(kwargs));
}

// tuple.__new__(cls, iterable=()), list.__new__(cls, ...), dict.__new__(cls, ...): the C
// __new__ of a builtin container called directly (a subclass's own __new__ reaching its
// base's through super(), or the program calling it): an empty list or dict, or a tuple of
// the iterable's items, of class `cls` (a NewObject carrying them, or a namedtuple value).
Result<ValuePtr> callContainerNew(Tracer& t, PyObject* f, Args& args, Kwargs& kwargs) {
  if (!PyCFunction_Check(f) || strcmp(reinterpret_cast<PyCFunctionObject*>(f)->m_ml->ml_name, "__new__") != 0)
    return notHandled();
  PyObject* owner = PyCFunction_GET_SELF(f);
  PyTypeObject* base = owner && PyType_Check(owner) ? reinterpret_cast<PyTypeObject*>(owner) : nullptr;
  if (base != &PyTuple_Type && base != &PyList_Type && base != &PyDict_Type) return notHandled();
  PyObject* cls = args.empty() ? nullptr : args[0]->real();
  if (!cls || !PyType_Check(cls) || !PyType_IsSubtype(reinterpret_cast<PyTypeObject*>(cls), base))
    return t.fail(std::string(base->tp_name) + ".__new__(X): X is not a subtype of " + base->tp_name + " (TypeError)");
  if (!kwargs.empty()) return t.fail(std::string(base->tp_name) + ".__new__() with keyword arguments");
  ValuePtr part;
  if (base == &PyTuple_Type) {
    if (args.size() > 2) return t.fail("tuple expected at most 1 argument (TypeError)");
    std::vector<ValuePtr> items;
    if (args.size() == 2)
      if (Done d = iterate(t, args[1], &items); !d) return d.stop();
    part = Value::tuple(std::move(items));
  } else {
    part = base == &PyList_Type ? Value::list({}) : Value::dict(reinterpret_cast<PyObject*>(base), {}, {});
  }
  if (cls == owner) return part;  // tuple.__new__(tuple, xs) is a plain tuple
  if (containerBase(cls) != base)
    return t.fail(std::string(base->tp_name) + ".__new__ of " + reinterpret_cast<PyTypeObject*>(cls)->tp_name +
                  " is not supported yet");
  return newContainerSubclassInstance(t, cls, std::move(part));
}

// A namedtuple class called: its fields by position, keyword, or default.
Result<ValuePtr> makeNamedTuple(Tracer& t, PyObject* f, Args& args, Kwargs& kwargs) {
  PyObject* fields = PyObject_GetAttrString(f, "_fields");
  Ref hold = Ref::steal(fields);
  if (!fields) return t.failFromPython("namedtuple fields");
  Py_ssize_t n = PyTuple_GET_SIZE(fields);
  std::vector<ValuePtr> items(static_cast<size_t>(n));
  if (args.size() > static_cast<size_t>(n)) return t.fail("too many arguments to a namedtuple (TypeError)");
  for (size_t i = 0; i < args.size(); ++i) items[i] = args[i];
  for (auto& [k, v] : kwargs) {
    Py_ssize_t at = -1;
    for (Py_ssize_t i = 0; i < n; ++i)
      if (PyUnicode_Compare(PyTuple_GET_ITEM(fields, i), k.get()) == 0) at = i;
    if (at < 0 || items[static_cast<size_t>(at)]) return t.fail("bad namedtuple keyword (TypeError)");
    items[static_cast<size_t>(at)] = v;
  }
  Ref defaults = Ref::steal(PyObject_GetAttrString(f, "_field_defaults"));
  PyErr_Clear();
  for (Py_ssize_t i = 0; i < n; ++i) {
    if (items[static_cast<size_t>(i)]) continue;
    PyObject* d = defaults && PyDict_Check(defaults.get()) ? PyDict_GetItem(defaults.get(), PyTuple_GET_ITEM(fields, i)) : nullptr;
    if (!d) return t.fail("missing a namedtuple field (TypeError)");
    Result<ValuePtr> w = t.wrap(d, -1);
    if (!w) return w;
    items[static_cast<size_t>(i)] = w.take();
  }
  return Value::of(Tuple{std::move(items), Ref::borrow(f)});
}

// Whether every argument is something a graph op takes: tensors, constants, and tuples,
// lists and slices of them.
bool graphArguments(const Args& args, const Kwargs& kwargs) {
  auto ok = [](const ValuePtr& v, auto&& self) -> bool {
    switch (v->kind()) {
      case Kind::Tensor:
      case Kind::Constant:
        return true;
      case Kind::Tuple:
      case Kind::List:
      case Kind::Slice: {
        bool all = true;
        forEachChild(*v, [&](const ValuePtr& c) { all = all && self(c, self); });
        return all;
      }
      default:
        return false;
    }
  };
  for (const ValuePtr& a : args)
    if (!ok(a, ok)) return false;
  for (const auto& kv : kwargs)
    if (!ok(kv.second, ok)) return false;
  return true;
}

// torch._C._has_torch_function(iterable) / _unary(obj) / _variadic(*args) without tensor
// arguments: whether one of the objects has a __torch_function__ of its own. Constants and
// containers do not; an object of a known (guarded) type answers by its type.
Result<ValuePtr> dispatchQuery(Tracer& t, PyObject* f, Args& args, Kwargs& kwargs) {
  if (!kwargs.empty()) return t.fail(torchName(f) + "() with keyword arguments");
  std::vector<ValuePtr> objs;
  if (isType(f, Obj::torch_C_has_torch_function)) {
    PyObject* c = args.size() == 1 ? args[0]->constant() : nullptr;
    if (c && PyTuple_Check(c)) {  // a tuple of constants
      for (Py_ssize_t i = 0; i < PyTuple_GET_SIZE(c); ++i) objs.push_back(Value::constant(PyTuple_GET_ITEM(c, i)));
    } else {
      const std::vector<ValuePtr>* items = args.size() == 1 ? args[0]->elements() : nullptr;
      if (!items || args[0]->is(Kind::Iterator))
        return t.fail(torchName(f) + "() of something other than a tuple or list");
      objs = *items;
    }
  } else {
    objs = args;
  }
  for (const ValuePtr& o : objs) {
    if (takesPartInDispatch(o)) return Value::constant(Py_True);  // a tensor subclass instance (torch_function.cpp)
    if (o->is(Kind::Tensor) || o->is(Kind::SubclassTensor)) continue;  // a plain tensor, or a subclass that opted out
    PyObject* type = typeOf(t, o);
    if (!type) return t.fail(torchName(f) + "() of a value whose type is not known at trace time");
    int has = PyObject_HasAttrString(type, "__torch_function__");
    if (has) return t.fail(torchName(f) + "() of an object with its own __torch_function__");
  }
  return Value::constant(Py_False);
}

// A reader of torch's global state on constant arguments: run now, folded, guarded.
Result<ValuePtr> readState(Tracer& t, PyObject* f, Args& args, Kwargs& kwargs) {
  Ref pargs = toPython(t, Value::tuple(args));
  Ref pkw;
  if (!kwargs.empty()) {
    pkw = Ref::steal(PyDict_New());
    if (!pkw) return t.failFromPython(torchName(f));
    for (auto& [k, v] : kwargs) {
      Ref pv = toPython(t, v);
      if (!pv) return t.fail(torchName(f) + "() with arguments that are not constants");
      if (PyDict_SetItem(pkw.get(), k.get(), pv.get()) < 0) return t.failFromPython(torchName(f));
    }
  }
  if (!pargs) return t.fail(torchName(f) + "() with arguments that are not constants");
  Ref r = Ref::steal(PyObject_Call(f, pargs.get(), pkw.get()));
  if (!r) return t.raisePython();
  if (!isConstantObject(r.get()))
    return t.fail(torchName(f) + "() returned a " + Py_TYPE(r.get())->tp_name + ", not a constant");
  // Grad mode is guarded for every entry already (Tracer::run).
  if (!isType(f, Obj::torch_is_grad_enabled)) t.guards().checkStateQuery(f, pargs.get(), pkw.get(), r.get());
  return Value::constant(r.get());
}

// A Python function or class of torch.utils, torch.fx or torch.testing (pytree's tree_flatten
// and TreeSpec, fx's map_arg, the comparison pairs behind TestCase.assertEqual): pure Python
// over Python structures, traced like user code, as TorchDynamo inlines these modules.
bool isStructureHelper(PyObject* f) {
  PyObject* m = PyFunction_Check(f) ? PyFunction_GET_MODULE(f)
                : PyType_Check(f) && PyType_HasFeature(reinterpret_cast<PyTypeObject*>(f), Py_TPFLAGS_HEAPTYPE)
                    ? PyDict_GetItemString(reinterpret_cast<PyTypeObject*>(f)->tp_dict, "__module__")
                    : nullptr;
  if (!m || !PyUnicode_Check(m)) return false;
  const char* name = PyUnicode_AsUTF8(m);
  if (!name) return PyErr_Clear(), false;
  return strncmp(name, "torch.utils.", 12) == 0 || strncmp(name, "torch.fx.", 9) == 0 ||
         strncmp(name, "torch.testing.", 14) == 0;
}

// Whether the Python function `f` is what its module's attribute path __qualname__ names
// (torch._tensor.Tensor.split): the graph's code names its targets so. A function made by a
// decorator that copied another's names (functools.wraps in torch._tensor's operator
// wrappers: Tensor.__pow__ says it is TensorBase.pow) is not, and is traced instead.
bool reachableByName(PyObject* f) {
  PyFunctionObject* fo = reinterpret_cast<PyFunctionObject*>(f);
  if (!fo->func_module || !PyUnicode_Check(fo->func_module) || !fo->func_qualname) return false;
  Ref obj = Ref::steal(PyImport_GetModule(fo->func_module));
  if (!obj) return PyErr_Clear(), false;
  Ref parts = Ref::steal(PyUnicode_Split(fo->func_qualname, Ref::steal(PyUnicode_FromString(".")).get(), -1));
  if (!parts) return PyErr_Clear(), false;
  for (Py_ssize_t i = 0; i < PyList_GET_SIZE(parts.get()) && obj; ++i)
    obj = Ref::steal(PyObject_GetAttr(obj.get(), PyList_GET_ITEM(parts.get(), i)));
  if (!obj) return PyErr_Clear(), false;
  return obj.get() == f;
}

// A torch callable: recorded in the graph when it has tensor arguments; without them,
// decided by what it is (torchKindOf).
Result<ValuePtr> callTorchFunction(Tracer& t, const ValuePtr& fn, Args& args, Kwargs& kwargs) {
  PyObject* f = fn->real();
  if (anyTensor(args, kwargs)) {
    switch (torchKindOf(f)) {
      case TorchKind::PythonHelper:
        // A Python function of torch is one graph op (F.relu, F.layer_norm) when the graph
        // can take its arguments; one that takes callables or objects (torch.utils._pytree
        // .tree_map, torch.fx map_aggregate) is traced like user code, as are the helpers of
        // torch.utils and torch.fx, which build structures, not tensors (tree_flatten).
        if (!graphArguments(args, kwargs) || isStructureHelper(f) || !reachableByName(f))
          return t.inlineFunction(f, fn->reg, std::move(args), std::move(kwargs));
        break;
      case TorchKind::Binding:
        // Neither an aten operator nor a reader: a binding of unknown effect
        // (torch._C._dynamo.eval_frame.unsupported). Aten ops of torch._C._VariableFunctions
        // without a schema of that name (torch.from_numpy) are not module bindings.
        if (PyCFunction_Check(f) && PyCFunction_GET_SELF(f))
          return t.fail("call of " + torchName(f) + "(), a torch binding that is not an operator");
        break;
      case TorchKind::DispatchQuery:
      case TorchKind::StateReader:
      case TorchKind::Operator:
        break;
    }
    if (isType(f, Obj::torch_check) && args.size() == 1 && kwargs.empty() && isScalarValue(t, args[0])) {
      // torch._check(cond) of a symbolic size relation that is false for these sizes (its
      // hint): eagerly the call raises. The trace takes the relation's truth (the ShapeEnv
      // guards `not cond`, so the entry holds only for sizes where it fails) and raises
      // torch's own error in the traced program: no graph is left computing only `cond`
      // for a native torch._check to raise on. True or unbacked: recorded as before (the
      // ShapeEnv keeps it as a guard or a runtime assertion).
      static Ref& shapes = *new Ref();  // Note [Python references in statics] (support/pyref.h)
      if (!shapes) shapes = Ref::steal(PyImport_ImportModule("cdynamo._shapes"));
      Ref truth = shapes ? Ref::steal(PyObject_CallMethod(shapes.get(), "truth", "O",
                                                          t.graph().fake(args[0]->as<Tensor>().node)))
                         : Ref();
      if (!truth) return t.failFromPython("the truth of a torch._check condition");
      if (truth.get() == Py_False) {
        Ref r = Ref::steal(PyObject_CallOneArg(f, Py_False));
        if (r) return t.fail("torch._check(False) did not raise");
        return t.raisePython();
      }
    }
    if (isType(f, Obj::torch_tensor)) {
      // torch.tensor(data) whose data holds tensors or symbolic numbers (a list of
      // Tensor.item()s, of 0-d tensors) but is not itself a tensor: the C++ factory reads
      // each item's value, which fake tensors and symbols do not have. torch._refs.tensor
      // builds the same tensor from tensor ops (torch.stack of the items), as
      // torch._dynamo records it; torch.tensor(t) of a tensor t stays itself.
      const ValuePtr* data = !args.empty() ? &args[0] : nullptr;
      for (const auto& [k, v] : kwargs)
        if (PyUnicode_CompareWithASCIIString(k.get(), "data") == 0) data = &v;
      if (data && !((*data)->is(Kind::Tensor) && !isScalarValue(t, *data)) && oneElementTensorItems(t, *data)) {
        PyObject* refs_tensor = lookup(Obj::torch_refs_tensor);
        if (!refs_tensor) return t.failFromPython("torch._refs.tensor");
        return recordCall(t, NodeOp::CallFunction, refs_tensor, args, kwargs);
      }
    }
    return recordCall(t, NodeOp::CallFunction, f, args, kwargs);
  }
  switch (torchKindOf(f)) {
    case TorchKind::PythonHelper:
      return t.inlineFunction(f, fn->reg, std::move(args), std::move(kwargs));
    case TorchKind::DispatchQuery:
      return dispatchQuery(t, f, args, kwargs);
    case TorchKind::StateReader:
      return readState(t, f, args, kwargs);
    case TorchKind::Operator:
      return recordCall(t, NodeOp::CallFunction, f, args, kwargs);
    case TorchKind::Binding:
      break;
  }
  if (isType(f, Obj::torch_set_grad_enabled_C) && args.size() == 1 && kwargs.empty())
    return t.contexts().setGradEnabled(args[0]);
  return t.fail("call of " + torchName(f) + "(), a torch binding that may change state");
}

// A call without arguments of an lru_cache wrapper of a function without parameters whose
// cache holds its result (the one key such a call has): eagerly a cache hit, which runs
// nothing. When that result is a constant the call is that constant, guarded that the cache
// still holds it (a cache_clear() makes the next call run the function, traced then). As
// torch's `is_fx_tracing_warning()` (a log call, cached after its first run).
Result<ValuePtr> cachedResult(Tracer& t, PyObject* f, PyObject* wrapped, Args& args, Kwargs& kwargs) {
  if (!args.empty() || !kwargs.empty() || !PyFunction_Check(wrapped)) return notHandled();
  auto* co = reinterpret_cast<PyCodeObject*>(PyFunction_GET_CODE(wrapped));
  if (co->co_argcount != 0 || co->co_kwonlyargcount != 0 || (co->co_flags & (CO_VARARGS | CO_VARKEYWORDS)))
    return notHandled();
  PyObject* holds = lookup(Obj::cdynamo_lru_cache_holds);
  if (!holds) return t.failFromPython("cdynamo._polyfills.lru_cache_holds");
  Ref probe_args = Ref::steal(PyTuple_Pack(1, f));
  Ref held = probe_args ? Ref::steal(PyObject_Call(holds, probe_args.get(), nullptr)) : Ref();
  if (!held) return t.failFromPython("an lru_cache's cache_info()");
  if (held.get() != Py_True) return notHandled();
  Ref result = Ref::steal(PyObject_CallNoArgs(f));  // a hit: nothing of the program runs
  if (!result) return t.raisePython();
  if (!isConstantObject(result.get())) return notHandled();
  t.guards().checkStateQuery(holds, probe_args.get(), nullptr, Py_True);
  return Value::constant(result.get());
}

// A functools.lru_cache/cache wrapper called: the function it wraps is inlined, skipping
// the cache (as TorchDynamo does, with the same warning): the traced call computes what a
// cache miss would. The wrapped function is read through the wrapper (guarded).
Result<ValuePtr> callCacheWrapper(Tracer& t, const ValuePtr& fn, Args& args, Kwargs& kwargs) {
  PyObject* f = fn->real();
  static PyObject* wrapped_name = PyUnicode_InternFromString("__wrapped__");
  if (!wrapped_name) return t.failFromPython("__wrapped__");
  Ref wrapped = Ref::steal(PyObject_GetAttr(f, wrapped_name));
  if (!wrapped) return t.failFromPython("the function an lru_cache wraps");
  if (Result<ValuePtr> hit = cachedResult(t, f, wrapped.get(), args, kwargs); !hit.notHandled()) return hit;
  if (PyErr_WarnEx(PyExc_UserWarning,
                   "Dynamo detected a call to a `functools.lru_cache`-wrapped function. Dynamo ignores the cache "
                   "wrapper and directly traces the wrapped function. Silent incorrectness is only a *potential* "
                   "risk, not something we have observed.",
                   1) < 0)
    return t.failFromPython("the lru_cache warning");
  int reg = fn->reg >= 0 ? t.load(guards::LoadKind::Attr, fn->reg, 0, wrapped_name, t.guards().sourceName(fn->reg) + ".__wrapped__")
                         : -1;
  Result<ValuePtr> target = t.wrap(wrapped.get(), reg);
  if (!target) return target;
  return call(t, *target, std::move(args), std::move(kwargs));
}

// `fromkeys` of one of CPython's dict types (dict.fromkeys, OrderedDict.fromkeys,
// defaultdict.fromkeys: a classmethod bound to the type): a new dict of that type, every
// key mapped to the one value (None when not given).
Result<ValuePtr> callDictFromkeys(Tracer& t, PyObject* f, Args& args, Kwargs& kwargs) {
  if (!PyCFunction_Check(f)) return notHandled();
  PyObject* type = PyCFunction_GET_SELF(f);
  const char* name = reinterpret_cast<PyCFunctionObject*>(f)->m_ml->ml_name;
  if (!type || !PyType_Check(type) || !PyType_IsSubtype(reinterpret_cast<PyTypeObject*>(type), &PyDict_Type) ||
      PyType_HasFeature(reinterpret_cast<PyTypeObject*>(type), Py_TPFLAGS_HEAPTYPE) || strcmp(name, "fromkeys") != 0)
    return notHandled();
  ValuePtr value = args.size() > 1 ? args[1] : Value::constant(Py_None);
  for (auto& [k, v] : kwargs) {
    if (PyUnicode_CompareWithASCIIString(k.get(), "value") != 0 || args.size() > 1)
      return t.fail("fromkeys() with these keyword arguments");
    value = v;
  }
  if (args.empty() || args.size() > 2) return t.fail("fromkeys() with these arguments");
  std::vector<ValuePtr> keys;
  if (Done d = iterate(t, args[0], &keys); !d) return d.stop();
  ValuePtr d = Value::dict(type, {}, {});
  for (const ValuePtr& k : keys)
    if (Done done = storeSubscript(t, d, k, value); !done) return done.stop();
  return d;
}

// A C function of the standard library with a Python version in cdynamo._polyfills
// (itertools.chain, functools.reduce, ...): that version inlined in its place. A generator's
// result is given the type of the original's iterator (the class, or the class a
// classmethod like chain.from_iterable belongs to).
}  // namespace

Result<ValuePtr> callPolyfill(Tracer& t, PyObject* f, Args& args, Kwargs& kwargs) {
  PyObject* table = lookup(Obj::cdynamo_polyfills);
  if (!table || !PyDict_Check(table)) return t.failFromPython("cdynamo._polyfills");
  // C callables only: hashed by identity.
  if (!PyCFunction_Check(f) && !PyType_Check(f) && !PyObject_TypeCheck(f, &PyMethodDescr_Type)) return notHandled();
  PyObject* poly = PyDict_GetItemWithError(table, f);
  if (!poly) {
    PyErr_Clear();
    return notHandled();
  }
  std::vector<PyObject*>& running = t.polyfillsRunning();
  if (std::find(running.begin(), running.end(), f) != running.end()) return notHandled();  // the original
  if (PyType_Check(poly) && PyType_Check(f)) {
    // An iterator that may never end (itertools.count): an instance of the polyfill class,
    // stepped one item at a time through its __next__, standing for an iterator of f's type.
    Result<ValuePtr> obj = newObject(t, poly, std::move(args), std::move(kwargs));
    if (!obj) return obj;
    ValuePtr it = Value::iterator({}, f);
    it->as<Iterator>().stepper = obj.take();
    return it;
  }
  if (!PyFunction_Check(poly)) return t.fail("a polyfill that is not a Python function");
  running.push_back(f);
  Result<ValuePtr> r = t.inlineFunction(poly, -1, std::move(args), std::move(kwargs));
  t.polyfillsRunning().pop_back();
  if (!r) return r;
  if (Iterator* it = (*r)->get<Iterator>(); it && it->type.get() == reinterpret_cast<PyObject*>(&PyGen_Type)) {
    PyObject* owner = PyCFunction_Check(f) ? PyCFunction_GET_SELF(f) : nullptr;
    PyObject* type = PyType_Check(f) ? f : (owner && PyType_Check(owner)) ? owner : nullptr;
    if (type) it->type = Ref::borrow(type);
  }
  return r;
}

bool isAutogradFunctionApply(PyObject* function) {
  PyObject* apply = lookup(Obj::torch_autograd_Function_apply);
  if (!apply) PyErr_Clear();
  return apply && function == apply;
}

namespace {

// Why apply's forward and backward cannot be one node of the graph (empty: they can); see
// cdynamo._polyfills.autograd_function_refusal. The arguments it checks are the fake
// tensors and the constants; any other argument is a refusal here.
std::string opaqueApplyRefusal(Tracer& t, PyObject* cls, const Args& args, const Kwargs& kwargs) {
  auto python = [&](const ValuePtr& v) -> Ref {
    if (const Tensor* tensor = v->get<Tensor>()) return Ref::borrow(t.graph().fake(tensor->node));
    if (PyObject* c = v->constant()) return Ref::borrow(c);
    return Ref();
  };
  Ref pargs = Ref::steal(PyTuple_New(static_cast<Py_ssize_t>(args.size())));
  Ref pkw = Ref::steal(PyDict_New());
  if (!pargs || !pkw) {
    PyErr_Clear();
    return "out of memory";
  }
  for (size_t i = 0; i < args.size(); ++i) {
    Ref p = python(args[i]);
    if (!p) return "an argument that is not a tensor or a constant";
    PyTuple_SET_ITEM(pargs.get(), static_cast<Py_ssize_t>(i), p.release());
  }
  for (const auto& [k, v] : kwargs) {
    Ref p = python(v);
    if (!p) return "a keyword argument that is not a tensor or a constant";
    if (PyDict_SetItem(pkw.get(), k.get(), p.get()) < 0) {
      PyErr_Clear();
      return "a keyword argument";
    }
  }
  PyObject* check = lookup(Obj::cdynamo_autograd_function_refusal);
  Ref r = check ? Ref::steal(PyObject_CallFunctionObjArgs(check, cls, pargs.get(), pkw.get(), nullptr)) : Ref();
  if (!r) {
    PyErr_Clear();
    return "its check raised";
  }
  if (r.get() == Py_None) return "";
  return PyUnicode_Check(r.get()) ? PyUnicode_AsUTF8(r.get()) : "its check gave no reason";
}

}  // namespace

Result<ValuePtr> callAutogradFunctionApply(Tracer& t, PyObject* cls, PyObject* target, Args args, Kwargs kwargs) {
  PyObject* base = lookup(Obj::torch_C_FunctionBase);
  if (!base) return t.failFromPython("torch._C._FunctionBase");
  if (!PyType_Check(cls) || !PyType_IsSubtype(reinterpret_cast<PyTypeObject*>(cls), reinterpret_cast<PyTypeObject*>(base)))
    return t.fail("autograd.Function.apply bound to something that is not an autograd.Function subclass");
  Ref name = Ref::steal(PyObject_GetAttrString(cls, "__qualname__"));
  std::string what = std::string("torch.autograd.Function.apply of ") + (name && PyUnicode_Check(name.get()) ? PyUnicode_AsUTF8(name.get()) : "a class");
  PyErr_Clear();
  // Autograd records a node when grad mode is on and a tensor argument requires grad (apply's
  // own test, torch/csrc/autograd/python_function.cpp). Its backward would then have to be
  // captured too (torch._dynamo traces it into a higher-order op): not modelled.
  Ref grad = Ref::steal(PyObject_CallNoArgs(lookup(Obj::torch_is_grad_enabled)));
  if (!grad) return t.failFromPython("torch.is_grad_enabled()");
  if (grad.get() == Py_True) {
    for (const ValuePtr& a : args) {
      const Tensor* tensor = a->get<Tensor>();
      if (!tensor) continue;
      Ref rg = Ref::steal(PyObject_GetAttrString(t.graph().fake(tensor->node), "requires_grad"));
      if (!rg) return t.failFromPython("requires_grad of an argument of " + what);
      if (rg.get() == Py_True) {
        std::string refusal = opaqueApplyRefusal(t, cls, args, kwargs);
        if (!refusal.empty())
          return t.fail(what + " recording a backward, not put into the graph: " + refusal);
        PyObject* wrap = lookup(Obj::cdynamo_autograd_function_in_graph);
        Ref node_target = wrap ? Ref::steal(PyObject_CallFunctionObjArgs(wrap, cls, target, nullptr)) : Ref();
        if (!node_target) return t.failFromPython("cdynamo._polyfills.autograd_function_in_graph");
        return recordCall(t, NodeOp::CallFunction, node_target.get(), args, kwargs);
      }
    }
  }
  // The setup_context form (forward without ctx): apply binds forward's defaults first so
  // that setup_context sees every input; only the plain positional call is modelled.
  Ref setup = Ref::steal(PyObject_GetAttrString(cls, "setup_context"));
  PyObject* plain_setup = lookup(Obj::torch_autograd_SingleLevel_setup_context);
  if (!setup || !plain_setup) return t.failFromPython("setup_context of " + what);
  bool separate_setup = setup.get() != plain_setup;
  if (separate_setup) {
    Ref forward = Ref::steal(PyObject_GetAttrString(cls, "forward"));
    PyObject* code = forward && PyFunction_Check(forward.get()) ? PyFunction_GET_CODE(forward.get()) : nullptr;
    if (!code || !kwargs.empty() ||
        reinterpret_cast<PyCodeObject*>(code)->co_argcount != static_cast<int>(args.size()) ||
        (reinterpret_cast<PyCodeObject*>(code)->co_flags & CO_VARARGS)) {
      PyErr_Clear();
      return t.fail(what + " with setup_context, called with keywords or defaults, is not supported yet");
    }
  }
  PyObject* poly = lookup(Obj::cdynamo_autograd_function_apply);
  if (!poly) return t.failFromPython("cdynamo._polyfills.autograd_function_apply");
  args.insert(args.begin(), Value::constant(separate_setup ? Py_True : Py_False));
  args.insert(args.begin(), Value::constant(cls));
  return t.inlineFunction(poly, -1, std::move(args), std::move(kwargs));
}

PyObject* polyfillRebuild(PyObject* type) {
  if (!type || !PyType_Check(type)) return nullptr;
  PyObject* table = lookup(Obj::cdynamo_polyfills);
  if (!table || !PyDict_Check(table)) return nullptr;
  PyObject* poly = PyDict_GetItemWithError(table, type);  // borrowed
  if (!poly || !PyType_Check(poly)) return nullptr;
  Ref rebuild = Ref::steal(PyObject_GetAttrString(poly, "rebuild"));
  // The class keeps the function alive (through its staticmethod): borrowed from there.
  return rebuild ? rebuild.get() : nullptr;
}

bool isCacheWrapper(PyObject* f) {
  PyObject* type = lookup(Obj::functools_lru_cache_wrapper);
  if (!type) {
    PyErr_Clear();
    return false;
  }
  return reinterpret_cast<PyObject*>(Py_TYPE(f)) == type;
}

const std::vector<SpecialRow>& specialRows() { return kSpecialRows; }

// A function of the math module on a symbolic number (a size, a symbolic int argument, a
// value read from a tensor): a node, as torch._dynamo records it, so the number stays
// symbolic instead of being made the int at hand: torch._sym_<name> where torch has one
// (sqrt, cos, ..., log2: a SymFloat), math.floor/ceil/trunc themselves (a SymInt through the
// number's __floor__ & co.). Run on plain numbers when the graph runs, each is the math
// function (its errors included). NotHandled for anything else (the call is folded with
// the number specialized, as before).
Result<ValuePtr> callMathOnSymbolic(Tracer& t, PyObject* f, Args& args, Kwargs& kwargs) {
  if (!PyCFunction_Check(f) || !kwargs.empty() || args.empty()) return notHandled();
  PyObject* self = PyCFunction_GET_SELF(f);
  if (!self || !PyModule_Check(self)) return notHandled();
  const char* module = PyModule_GetName(self);
  if (!module) return t.failFromPython("a math function's module");
  if (strcmp(module, "math") != 0) return notHandled();
  bool symbolic = false;
  for (const ValuePtr& a : args) {
    if (a->is(Kind::Constant)) {
      PyTypeObject* type = Py_TYPE(a->constant());
      if (type != &PyLong_Type && type != &PyFloat_Type) return notHandled();
      continue;
    }
    if (!isScalarValue(t, a)) return notHandled();
    symbolic = true;
  }
  if (!symbolic) return notHandled();
  const char* name = reinterpret_cast<PyCFunctionObject*>(f)->m_ml->ml_name;
  if (args.size() == 1 && (strcmp(name, "floor") == 0 || strcmp(name, "ceil") == 0 || strcmp(name, "trunc") == 0))
    return recordCall(t, NodeOp::CallFunction, f, args, {});
  PyObject* torch = lookup(Obj::torch_module);
  if (!torch) return t.failFromPython("torch");
  Ref sym = Ref::steal(PyObject_GetAttrString(torch, (std::string("_sym_") + name).c_str()));
  if (!sym) {
    PyErr_Clear();
    return notHandled();
  }
  return recordCall(t, NodeOp::CallFunction, sym.get(), args, {});
}

Result<ValuePtr> callByRules(Tracer& t, const ValuePtr& fn, Args& args, Kwargs& kwargs) {
  PyObject* f = fn->real();
  if (t.contexts().isContextClass(f)) return t.contexts().make(f, args, kwargs);
  if (isCompilingQuery(f)) return Value::constant(Py_True);  // torch.compiler.is_compiling()
  if (isType(f, Obj::torch_C_log_api_usage_once)) return Value::constant(Py_None);  // usage logging (nn.Module.__init__)
  if (Result<ValuePtr> q = foldEngineQuery(t, f, args, kwargs); !q.notHandled()) return q;
  if (Result<ValuePtr> b = callBaseMethod(t, f, args, kwargs); !b.notHandled()) return b;  // dict.get(sub, k)
  if (Result<ValuePtr> poly = callPolyfill(t, f, args, kwargs); !poly.notHandled()) return poly;
  if (Result<ValuePtr> made = callDictFromkeys(t, f, args, kwargs); !made.notHandled()) return made;
  if (Result<ValuePtr> made = callContainerNew(t, f, args, kwargs); !made.notHandled()) return made;
  if (Result<ValuePtr> m = callTensorMethodDescriptor(t, f, args, kwargs); !m.notHandled()) return m;
  // operator.add(a, b), operator.iadd(a, b), ...: the same operation as BINARY_OP (Note [The
  // binary operator protocol]), whatever the operands' kinds.
  if (bytecode::BinaryOp op; args.size() == 2 && kwargs.empty() && binaryOperatorOf(f, &op))
    return binaryOp(t, op, args[0], args[1]);
  Result<ValuePtr> r = foldConstantCall(t, f, args, kwargs);
  if (!r.notHandled()) return r;
  if (Result<ValuePtr> m = callMathOnSymbolic(t, f, args, kwargs); !m.notHandled()) return m;
  if (isOperatorModuleFunction(f) && anyTensor(args, kwargs))
    return recordCall(t, NodeOp::CallFunction, args.empty() ? f : recordedOperator(t, f, args[0]), args,
                      kwargs);  // operator.add(x, y) on tensors
  if (isNamedTupleClass(f)) {
    // A subclass of a namedtuple with its own __new__: that __new__ decides (its
    // super().__new__ is the namedtuple's).
    if (PyObject* own_new = ownPythonNew(f)) {
      Args new_args = args;
      new_args.insert(new_args.begin(), fn);
      return t.inlineFunction(own_new, -1, std::move(new_args), std::move(kwargs));
    }
    return makeNamedTuple(t, f, args, kwargs);
  }
  if (isNumpyCallable(f)) return callNumpy(t, f, args, kwargs);
  if (PyExceptionClass_Check(f)) {
    return makeException(t, f, args, std::move(kwargs));
  }
  if (PyType_Check(f) && (reinterpret_cast<PyTypeObject*>(f)->tp_flags & Py_TPFLAGS_HEAPTYPE) &&
      (!isTorchFunction(f) || isStructureHelper(f) || isModuleClass(f)))  // torch.nn.Softmax(dim=-1)
    return newObject(t, f, std::move(args), std::move(kwargs));
  if (isCacheWrapper(f)) return callCacheWrapper(t, fn, args, kwargs);
  if (PyCFunction_Check(f) && PyCFunction_GET_SELF(f) && PyType_Check(PyCFunction_GET_SELF(f)) &&
      strcmp(reinterpret_cast<PyCFunctionObject*>(f)->m_ml->ml_name, "apply") == 0) {
    // _FunctionBase.apply bound to a class (super().apply(...) in an override of apply)
    PyObject* base = lookup(Obj::torch_C_FunctionBase);
    if (!base) return t.failFromPython("torch._C._FunctionBase");
    PyObject* cls = PyCFunction_GET_SELF(f);
    if (PyType_IsSubtype(reinterpret_cast<PyTypeObject*>(cls), reinterpret_cast<PyTypeObject*>(base)))
      return callAutogradFunctionApply(t, cls, f, std::move(args), std::move(kwargs));
  }
  if (isTorchFunction(f)) {
    if (Result<ValuePtr> r = ndarrayAsTensor(t, f, args, kwargs); !r.notHandled()) return r;
    return callTorchFunction(t, fn, args, kwargs);
  }
  if (PyFunction_Check(f)) return t.inlineFunction(f, fn->reg, std::move(args), std::move(kwargs));
  Ref repr = Ref::steal(PyObject_Repr(f));
  std::string what = repr ? PyUnicode_AsUTF8(repr.get()) : "a callable";
  PyErr_Clear();
  return t.fail("call of " + what + " is not supported yet");
}

// ---- the rules the Python package keeps (call_rules.h) ----

namespace {

Ref& rules_dict = *new Ref();  // Note [Python references in statics] (support/pyref.h)

std::string qualnameOf(PyObject* fn) {
  Ref name = Ref::steal(PyObject_GetAttrString(fn, "__qualname__"));
  if (!name || !PyUnicode_Check(name.get())) {
    PyErr_Clear();
    return Py_TYPE(fn)->tp_name;
  }
  const char* s = PyUnicode_AsUTF8(name.get());
  if (!s) return PyErr_Clear(), "?";
  return s;
}

}  // namespace

void setCallRules(PyObject* rules) { rules_dict = Ref::borrow(rules && PyDict_Check(rules) ? rules : nullptr); }

CallRule callRuleOf(PyObject* fn) {
  if (rules_dict && PyDict_GET_SIZE(rules_dict.get()) > 0) {
    PyObject* rule = PyDict_GetItemWithError(rules_dict.get(), fn);  // borrowed
    if (rule && PyLong_Check(rule)) {
      long n = PyLong_AsLong(rule);
      if (n >= 1 && n <= 3) return static_cast<CallRule>(n);
    }
    if (!rule) PyErr_Clear();  // unhashable callables have no rule
  }
  if (PyFunction_Check(fn)) {
    PyObject* dict = reinterpret_cast<PyFunctionObject*>(fn)->func_dict;
    PyObject* mark = dict ? PyDict_GetItemString(dict, "_dynamo_marked_constant") : nullptr;
    if (mark == Py_True) return CallRule::ConstantResult;
  }
  return CallRule::None;
}

Result<ValuePtr> applyCallRule(Tracer& t, CallRule rule, PyObject* fn, Args& args, Kwargs& kwargs) {
  switch (rule) {
    case CallRule::GraphBreak: {
      std::string reason = "call to torch._dynamo.graph_break()";
      ValuePtr msg = !args.empty() ? args[0] : (!kwargs.empty() ? kwargs[0].second : nullptr);
      PyObject* text = msg ? msg->constant() : nullptr;
      if (text && PyUnicode_Check(text) && PyUnicode_GET_LENGTH(text) > 0)
        reason += std::string(": ") + PyUnicode_AsUTF8(text);
      return t.fail(reason);
    }
    case CallRule::InGraph:
      return recordCall(t, NodeOp::CallFunction, fn, args, kwargs);
    case CallRule::ConstantResult: {
      Ref pargs = toPython(t, Value::tuple(args));
      Ref pkw = Ref::steal(PyDict_New());
      if (!pkw) return t.failFromPython("assume_constant_result");
      bool constant = pargs.get() != nullptr;
      for (auto& [k, v] : kwargs) {
        Ref pv = constant ? toPython(t, v) : Ref();
        if (!pv || PyDict_SetItem(pkw.get(), k.get(), pv.get()) < 0) constant = false;
      }
      PyErr_Clear();
      if (!constant)
        return t.fail("call of " + qualnameOf(fn) + " (assume_constant_result) with arguments that are not constants");
      Ref r = Ref::steal(PyObject_Call(fn, pargs.get(), pkw.get()));
      if (!r) return t.raisePython();
      return fromPython(t, r.get());
    }
    case CallRule::None:
      break;
  }
  return t.fail("internal: unknown call rule");
}

bool isTorchCallable(PyObject* fn) { return isTorchFunction(fn); }

}  // namespace cdynamo::trace
