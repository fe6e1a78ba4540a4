// Call rules: how a call of a real callable is traced when no builtin row names it (the
// special callables of the table first, kSpecialRows; then callByRules, in order), and the
// rules the Python package keeps (call_rules.h), consulted before any of them.
#include <algorithm>
#include <cstring>
#include <string>
#include <unordered_map>

#include "support/lookup.h"
#include "support/python_class.h"
#include "support/torch_types.h"
#include "trace/call_rules.h"
#include "trace/engine/graph_calls.h"
#include "trace/engine/scalars.h"
#include "trace/kinds/exception.h"
#include "trace/kinds/iterator.h"
#include "trace/kinds/ndarray.h"
#include "trace/kinds/object.h"
#include "trace/kinds/set.h"
#include "trace/kinds/tensor_subclass.h"
#include "trace/protocol/attributes.h"
#include "trace/protocol/call_rules_internal.h"
#include "trace/protocol/callables.h"
#include "trace/protocol/calls.h"
#include "trace/protocol/constants.h"
#include "trace/protocol/operators.h"
#include "trace/tracer.h"
#include "support/type_dict.h"

namespace cdynamo::trace {

using graph::NodeOp;

namespace {


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
//    recorded like any op (factories: torch.zeros, torch.rand; dtype queries fold), as is
//    an operator object of torch.ops of any namespace (torch.ops.aten.sin.default, a
//    torch.library custom op);
//  * any other C binding may change state (torch._C._set_grad_enabled, manual seeds):
//    the graph breaks at the call, named module.name.



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
  // An operator of torch.ops (aten's, or one a library defined: torch.library.custom_op, a
  // Library's define, an extension's TORCH_LIBRARY) is one graph op whatever its
  // namespace: its schema and its fake kernel (register_fake, a Meta kernel) say what it
  // takes and makes, and the dispatcher runs it when the graph runs.
  if (isOperatorObject(fn)) return TorchKind::Operator;
  if (!PyCFunction_Check(fn)) return TorchKind::Binding;
  Ref name = Ref::steal(PyObject_GetAttrString(fn, "__name__"));
  if (!name || !PyUnicode_Check(name.get())) return PyErr_Clear(), TorchKind::Binding;
  // Functions of a module (PyMethodDef) or pybind11 bindings (their __self__ is a function
  // record) are bindings; aten ops of torch._C._VariableFunctions have no __self__.
  PyObject* self = PyCFunction_GET_SELF(fn);
  if (self && namedAsReader(PyUnicode_AsUTF8(name.get()))) return TorchKind::StateReader;
  return isAtenOperator(name.get()) ? TorchKind::Operator : TorchKind::Binding;
}







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
  if (base != &PyTuple_Type && base != &PyList_Type && base != &PyDict_Type && base != &PySet_Type &&
      base != &PyFrozenSet_Type)
    return notHandled();
  PyObject* cls = args.empty() ? nullptr : args[0]->real();
  if (!cls || !PyType_Check(cls) || !PyType_IsSubtype(reinterpret_cast<PyTypeObject*>(cls), base))
    return t.fail(std::string(base->tp_name) + ".__new__(X): X is not a subtype of " + base->tp_name + " (TypeError)");
  if (!kwargs.empty()) return t.fail(std::string(base->tp_name) + ".__new__() with keyword arguments");
  ValuePtr part;
  if (base == &PySet_Type || base == &PyFrozenSet_Type) {
    // set.__new__ makes an empty set whatever it is given (set.__init__ fills it);
    // frozenset.__new__ takes the items (at most one iterable).
    const bool frozen = base == &PyFrozenSet_Type;
    if (frozen && args.size() > 2)
      return t.raiseNew(PyExc_TypeError, std::string(reinterpret_cast<PyTypeObject*>(cls)->tp_name) +
                                             " expected at most 1 argument, got " + std::to_string(args.size() - 1));
    if (frozen && cls == owner) return args.size() == 2 ? makeFrozenSet(t, args[1]) : makeFrozenSet(t, Value::tuple({}));
    Result<ValuePtr> made = makeSetPart(t, frozen && args.size() == 2 ? args[1] : nullptr, frozen);
    if (!made) return made;
    part = made.take();
    if (cls == owner) return part;
  } else if (base == &PyTuple_Type) {
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

// `fromkeys` of one of CPython's dict types (dict.fromkeys, OrderedDict.fromkeys,
// defaultdict.fromkeys: a classmethod bound to the type): a new dict of that type, every
// key mapped to the one value (None when not given).
Result<ValuePtr> callDictFromkeys(Tracer& t, PyObject* f, Args& args, Kwargs& kwargs) {
  if (!PyCFunction_Check(f)) return notHandled();
  PyObject* type = PyCFunction_GET_SELF(f);
  const char* name = reinterpret_cast<PyCFunctionObject*>(f)->m_ml->ml_name;
  if (!type || !PyType_Check(type) || !PyType_IsSubtype(reinterpret_cast<PyTypeObject*>(type), &PyDict_Type) ||
      isPythonClass(reinterpret_cast<PyTypeObject*>(type)) || strcmp(name, "fromkeys") != 0)
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

// A C function of the standard library with a Python version in cdynamo._internal.polyfills
// (itertools.chain, functools.reduce, ...): that version inlined in its place. A generator's
// result is given the type of the original's iterator (the class, or the class a
// classmethod like chain.from_iterable belongs to).
}  // namespace

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
  // operator.add(a, b), operator.iadd(a, b), operator.lt(a, b), operator.neg(a), ...: the same
  // operation as BINARY_OP, COMPARE_OP and UNARY_* (Note [The binary operator protocol]),
  // whatever the operands' kinds.
  if (bytecode::BinaryOp op; args.size() == 2 && kwargs.empty() && binaryOperatorOf(f, &op))
    return binaryOp(t, op, args[0], args[1]);
  if (int op; args.size() == 2 && kwargs.empty() && compareOperatorOf(f, &op)) return compareOp(t, op, args[0], args[1]);
  if (UnaryOp op; args.size() == 1 && kwargs.empty() && unaryOperatorOf(f, &op)) return unaryOp(t, op, args[0]);
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
      (!isTorchFunction(f) || isStructureHelper(f) || isTransformInternals(f) ||
       isModuleClass(f)))  // torch.nn.Softmax(dim=-1)
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
  if (Py_IS_TYPE(f, &Py_GenericAliasType)) {
    // dict[str, Any]() and list[int](xs): types.GenericAlias calls its origin (and sets
    // __orig_class__ where the instance takes attributes, which a builtin's does not).
    Ref origin = Ref::steal(PyObject_GetAttrString(f, "__origin__"));
    if (!origin) return t.failFromPython("a generic alias's origin");
    if (PyType_Check(origin.get()) &&
        PyType_HasFeature(reinterpret_cast<PyTypeObject*>(origin.get()), Py_TPFLAGS_HEAPTYPE))
      return t.fail("a types.GenericAlias of a Python class called is not supported yet");
    return call(t, Value::callable(origin.get()), std::move(args), std::move(kwargs));
  }
  if (PyType_HasFeature(Py_TYPE(f), Py_TPFLAGS_HEAPTYPE)) {
    // A typing alias of a generic class called (Box[int](x)), as typing's __call__ does it:
    // the class called, then the instance's __orig_class__ set to the alias where the
    // instance takes attributes. The alias's own fields are in its __dict__ (no Python runs).
    PyObject* module = PyDict_GetItemString(typeDict(Py_TYPE(f)), "__module__");
    PyObject** dictptr = _PyObject_GetDictPtr(f);
    PyObject* fields = dictptr ? *dictptr : nullptr;
    PyObject* origin = fields && PyDict_Check(fields) ? PyDict_GetItemString(fields, "__origin__") : nullptr;
    PyObject* inst = fields && PyDict_Check(fields) ? PyDict_GetItemString(fields, "_inst") : nullptr;
    if (module && PyUnicode_Check(module) && PyUnicode_CompareWithASCIIString(module, "typing") == 0 && origin &&
        PyType_Check(origin) && PyType_HasFeature(reinterpret_cast<PyTypeObject*>(origin), Py_TPFLAGS_HEAPTYPE)) {
      if (inst != Py_True) return t.fail("call of a typing alias that cannot be instantiated (TypeError)");
      Ref hold = Ref::borrow(origin);
      Result<ValuePtr> made = call(t, Value::callable(origin), std::move(args), std::move(kwargs));
      if (!made) return made;
      const NewObject* o = (*made)->get<NewObject>();
      if (o && PyType_Check(o->cls.get()) && reinterpret_cast<PyTypeObject*>(o->cls.get())->tp_dictoffset != 0) {
        static PyObject* orig_class = PyUnicode_InternFromString("__orig_class__");
        PyObject* setattr = _PyType_Lookup(reinterpret_cast<PyTypeObject*>(o->cls.get()), interned(Str::dunder_setattr));
        if (setattr != _PyType_Lookup(&PyBaseObject_Type, interned(Str::dunder_setattr)))
          return t.fail("a typing alias's __orig_class__ set through a class's own __setattr__");
        if (Done d = storeAttr(t, *made, orig_class, fn); !d) return d.stop();
      } else if (!(*made)->is(Kind::NewObject)) {
        return t.fail("a typing alias called for an instance the trace does not make as an object");
      }
      return made;
    }
  }
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

// torch._dynamo.allow_in_graph(fn) keeps fn's id in torch._dynamo's own registry (torch code
// marks its callables so: compiled autograd's backward ops, which run C++ functions the trace
// cannot follow). cdynamo honours the mark as it honours torch._dynamo.disable: the call is one
// node of the graph. Only read once torch._dynamo's rules are loaded (nothing to honour before).
bool markedByTorchAllowInGraph(PyObject* fn) {
  static PyObject* const name = PyUnicode_InternFromString("torch._dynamo.trace_rules");
  PyObject* modules = PyImport_GetModuleDict();
  PyObject* mod = modules ? PyDict_GetItemWithError(modules, name) : nullptr;  // borrowed
  if (!mod) {
    PyErr_Clear();
    return false;
  }
  Ref ids = Ref::steal(PyObject_GetAttrString(mod, "_allowed_callable_ids"));
  Ref key = ids ? Ref::steal(PyLong_FromVoidPtr(fn)) : Ref();
  int found = key ? PySequence_Contains(ids.get(), key.get()) : -1;
  if (found < 0) PyErr_Clear();
  return found == 1;
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
  if (markedByTorchAllowInGraph(fn)) return CallRule::InGraph;
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
      return recordCall(t, NodeOp::CallFunction, fn, args, kwargs, /*keep=*/true);
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

TorchKind torchKindOf(PyObject* fn) {
  // Trace time only; torch's callables live for the process (Note [Python references in statics]).
  static auto& memo = *new std::unordered_map<PyObject*, std::pair<Ref, TorchKind>>();
  auto it = memo.find(fn);
  if (it != memo.end()) return it->second.second;
  TorchKind k = classify(fn);
  memo.emplace(fn, std::make_pair(Ref::borrow(fn), k));
  return k;
}

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

// A C function of the _operator module (operator.add, operator.getitem, ...).
bool isOperatorModuleFunction(PyObject* f) {
  if (!PyCFunction_Check(f) || !PyCFunction_GET_SELF(f) || !PyModule_Check(PyCFunction_GET_SELF(f))) return false;
  const char* m = PyModule_GetName(PyCFunction_GET_SELF(f));
  if (!m) return PyErr_Clear(), false;
  return strcmp(m, "_operator") == 0;
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

}  // namespace cdynamo::trace
