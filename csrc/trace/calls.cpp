// Attribute reads and calls: what a name means on each kind of value, and what calling
// each kind of callable does (graph op, inlined Python, builtin modelled here).
#include <cstring>
#include <string>

#include "support/torch_types.h"
#include "trace/call_rules.h"
#include "trace/disabled.h"
#include "trace/scalars.h"
#include "trace/tracer.h"

namespace cdynamo::trace {

using graph::NodeOp;
using guards::LoadKind;

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

// True when fn.__name__ is one of `names` (cold: trace time only).
template <size_t N>
bool nameIn(PyObject* fn, const char* const (&names)[N]) {
  Ref name = Ref::steal(PyObject_GetAttrString(fn, "__name__"));
  if (!name || !PyUnicode_Check(name.get())) return PyErr_Clear(), false;
  const char* n = PyUnicode_AsUTF8(name.get());
  for (const char* k : names)
    if (strcmp(n, k) == 0) return true;
  return false;
}

// Torch functions without tensor arguments that return plain values and have no effect
// on any state: safe to evaluate once at trace time (grad mode is guarded globally).
bool isPureTorchQuery(PyObject* fn) {
  static const char* const kNames[] = {"is_grad_enabled", "get_default_dtype", "is_tensor", "is_scripting",
                                       "is_floating_point", "is_complex", "result_type",
                                       "promote_types", "can_cast", "is_inference_mode_enabled",
                                       "is_autocast_enabled"};
  return nameIn(fn, kNames);
}

// torch's tensor factories: C functions of the torch namespace that make a new tensor
// from Python values and touch no global state.
bool isTensorFactory(PyObject* fn) {
  static const char* const kNames[] = {"zeros", "ones", "empty", "full", "arange", "linspace", "logspace", "eye",
                                       "tensor", "as_tensor", "scalar_tensor", "zeros_like", "ones_like",
                                       "empty_like", "full_like", "empty_strided", "tril_indices", "triu_indices"};
  if (!PyCFunction_Check(fn)) return false;
  return nameIn(fn, kNames);
}

// torch.compiler.is_compiling() and its aliases: True inside a trace.
bool isCompilingQuery(PyObject* fn) {
  if (!PyFunction_Check(fn)) return false;
  PyObject* name = reinterpret_cast<PyFunctionObject*>(fn)->func_qualname;
  PyObject* mod = reinterpret_cast<PyFunctionObject*>(fn)->func_module;
  if (!name || !mod || !PyUnicode_Check(mod) || PyUnicode_CompareWithASCIIString(name, "is_compiling") != 0)
    return false;
  const char* m = PyUnicode_AsUTF8(mod);
  return m && (strcmp(m, "torch.compiler") == 0 || strncmp(m, "torch._dynamo", 13) == 0 ||
               strcmp(m, "torch._utils") == 0);
}

// The class `name` of module `module` (borrowed, kept for the process), or null.
PyObject* typeObject(const char* module, const char* name) {
  Ref m = Ref::steal(PyImport_ImportModule(module));
  if (!m) return PyErr_Clear(), nullptr;
  PyObject* t = PyObject_GetAttrString(m.get(), name);
  if (!t) PyErr_Clear();
  if (t) Py_DECREF(t);  // the module keeps it alive
  return t;
}

bool isType(PyObject* f, const char* module, const char* name) { return f == typeObject(module, name); }

bool anyTensor(const std::vector<ValuePtr>& args, const std::vector<std::pair<Ref, ValuePtr>>& kwargs) {
  auto has = [](const ValuePtr& v, auto&& self) -> bool {
    if (v->is(Kind::Tensor)) return true;
    for (const ValuePtr& i : v->items)
      if (self(i, self)) return true;
    return false;
  };
  for (const ValuePtr& a : args)
    if (has(a, has)) return true;
  for (const auto& kv : kwargs)
    if (has(kv.second, has)) return true;
  return false;
}

PyObject* builtin(const char* name) {
  PyObject* b = PyEval_GetBuiltins();
  return b ? PyDict_GetItemString(b, name) : nullptr;
}

PyObject* tensorType() {
  static PyObject* t = nullptr;
  if (!t) {
    Ref torch = Ref::steal(PyImport_ImportModule("torch"));
    if (torch) t = PyObject_GetAttrString(torch.get(), "Tensor");  // kept for the process
  }
  return t;
}

// Borrowed value of `name` in the instance dict of `obj`, or null.
PyObject* instanceDictItem(PyObject* obj, const char* name) {
  PyObject** dictptr = _PyObject_GetDictPtr(obj);
  if (!dictptr || !*dictptr) return nullptr;
  return PyDict_GetItemString(*dictptr, name);
}

DisabledCodeQuery disabled_query = nullptr;

// cdynamo.disable marks code objects (the wrapper's code; with recursive=False also the
// function's own code). A call of such code is never traced: the reason names the
// function as the user wrote it (the wrapper carries its __qualname__ through
// functools.wraps).
bool isDisabledCodeObject(PyObject* code) {
  return code && PyCode_Check(code) && isDisabledCode(reinterpret_cast<PyCodeObject*>(code));
}

std::string disabledReason(PyObject* qualname) {
  const char* q = qualname && PyUnicode_Check(qualname) ? PyUnicode_AsUTF8(qualname) : nullptr;
  if (!q) PyErr_Clear();
  return std::string("call to ") + (q ? q : "a function") + ", which is wrapped by cdynamo.disable";
}

}  // namespace

void setDisabledCodeQuery(DisabledCodeQuery query) { disabled_query = query; }
bool isDisabledCode(PyCodeObject* code) { return disabled_query && disabled_query(code); }

ValuePtr Tracer::getAttr(const ValuePtr& obj, PyObject* name) {
  const char* n = PyUnicode_AsUTF8(name);
  switch (obj->kind) {
    case Kind::Tensor: {
      if (isScalarValue(*this, obj))  // a number read from a tensor: not a tensor's attributes
        return fail(std::string("attribute '") + n + "' of a value read from a tensor (Tensor.item()) is not supported yet");
      // The version counter counts in-place changes of the real tensor, before the call
      // too: a fake's (0 for an input) is not it, and nothing guards it.
      if (strcmp(n, "_version") == 0) return fail("Tensor._version (the real tensor's version counter) is not modeled");
      PyObject* tt = tensorType();
      if (!tt) return failFromPython("torch.Tensor");
      PyObject* descr = _PyType_Lookup(reinterpret_cast<PyTypeObject*>(tt), name);
      if (!descr) return fail(std::string("Tensor has no attribute '") + n + "'");
      if (Py_TYPE(descr)->tp_descr_set == nullptr || PyFunction_Check(descr))
        return Value::tensorMethod(obj, name);  // methods: called later as call_method
      // Data attributes: metadata (shape, dtype, ...) answer as constants; tensor-valued
      // ones (x.T, x.mT) become getattr nodes.
      return recordCall(NodeOp::CallFunction, builtin("getattr"), {obj, Value::constant(name)}, {});
    }
    case Kind::Module: {
      if (ValuePtr v = overlayAttr(obj->reg, name)) return v;
      PyObject* m = obj->obj.get();
      PyObject* descr = _PyType_Lookup(Py_TYPE(m), name);
      if (descr && Py_TYPE(descr)->tp_descr_set)
        return fail(std::string("module attribute '") + n + "' is a property or descriptor (not supported yet)");
      if (PyObject* v = instanceDictItem(m, n)) {
        int reg = load(LoadKind::InstanceDict, obj->reg, 0, name, guards().sourceName(obj->reg) + "." + n);
        return wrap(v, reg);
      }
      if (descr) {
        if (PyFunction_Check(descr)) return Value::boundMethod(obj, descr);
        if (isConstantObject(descr)) return Value::constant(descr);
        return fail(std::string("module class attribute '") + n + "' of type " + Py_TYPE(descr)->tp_name);
      }
      static const char* const kDicts[] = {"_parameters", "_buffers", "_modules"};
      for (const char* d : kDicts) {
        PyObject* dict = instanceDictItem(m, d);
        if (!dict || !PyDict_Check(dict)) continue;
        PyObject* v = PyDict_GetItemWithError(dict, name);
        if (!v) {
          if (PyErr_Occurred()) return failFromPython("module attribute");
          continue;
        }
        int dreg = load(LoadKind::InstanceDict, obj->reg, 0, intern(d), guards().sourceName(obj->reg) + "." + d);
        int reg = load(LoadKind::DictItem, dreg, 0, name, guards().sourceName(dreg) + "['" + n + "']");
        return wrap(v, reg);
      }
      return fail(std::string("module has no attribute '") + n + "' (AttributeError)");
    }
    case Kind::PyModule: {
      Ref v = Ref::steal(PyObject_GetAttr(obj->obj.get(), name));
      if (!v) return failFromPython(std::string("module attribute '") + n + "'");
      // torch's own namespaces are assumed stable (as TorchDynamo does); a user module's
      // attributes are guarded through its __dict__.
      const char* modname = PyModule_GetName(obj->obj.get());
      if (!modname) return failFromPython("module name");
      bool torch_ns = strcmp(modname, "torch") == 0 || strncmp(modname, "torch.", 6) == 0;
      int reg = -1;
      if (!torch_ns && obj->reg >= 0)
        reg = load(LoadKind::InstanceDict, obj->reg, 0, name, guards().sourceName(obj->reg) + "." + n);
      return wrap(v.get(), reg);
    }
    case Kind::Object:
    case Kind::NewObject:
    case Kind::Super:
      return objectGetAttr(obj, name);
    case Kind::Constant:
    case Kind::Callable: {
      if (obj->is(Kind::Callable) && PyType_Check(obj->obj.get()) &&
          (reinterpret_cast<PyTypeObject*>(obj->obj.get())->tp_flags & Py_TPFLAGS_HEAPTYPE) &&
          !isModuleClass(obj->obj.get()))
        return objectGetAttr(obj, name);  // attributes of a user class: methods, classmethods, constants
      Ref v = Ref::steal(PyObject_GetAttr(obj->obj.get(), name));
      if (!v) {
        if (PyErr_ExceptionMatches(PyExc_AttributeError)) return raisePython();
        return failFromPython(std::string("attribute '") + n + "'");
      }
      if (isConstantObject(v.get())) return Value::constant(v.get());
      if (obj->is(Kind::Callable) && PyFunction_Check(obj->obj.get()) && PyDict_CheckExact(v.get()))
        return wrap(v.get(), -1);  // a function's __dict__ / __annotations__, read (functools.wraps)
      if (obj->is(Kind::Constant) && PyCallable_Check(v.get()))
        return Value::object(Kind::Callable, v.get());  // a method of an immutable constant
      if (obj->is(Kind::Callable) && PyType_Check(obj->obj.get()) &&
          !PyType_HasFeature(reinterpret_cast<PyTypeObject*>(obj->obj.get()), Py_TPFLAGS_HEAPTYPE) &&
          PyCallable_Check(v.get()))
        return Value::object(Kind::Callable, v.get());  // object.__setattr__, dict.fromkeys, ...
      return fail(std::string("attribute '") + n + "' of a " + kindName(obj->kind) + " is not supported yet");
    }
    case Kind::Tuple:
      if (obj->obj) {  // a namedtuple: fields by position
        Ref fields = Ref::steal(PyObject_GetAttrString(obj->obj.get(), "_fields"));
        if (!fields) return failFromPython("namedtuple fields");
        if (PyUnicode_CompareWithASCIIString(name, "_fields") == 0) return Value::constant(fields.get());
        for (Py_ssize_t i = 0; i < PyTuple_GET_SIZE(fields.get()); ++i)
          if (PyUnicode_Compare(PyTuple_GET_ITEM(fields.get(), i), name) == 0) return obj->items[static_cast<size_t>(i)];
      }
      return Value::namedMethod(obj, name);
    case Kind::List:
    case Kind::Dict:
    case Kind::Set:
      return Value::namedMethod(obj, name);  // list.append, dict.items, ...: called later
    case Kind::Null:
    case Kind::Slice:
    case Kind::Iterator:
    case Kind::Method:
    case Kind::Function:
      return functionAttr(obj, name);
    case Kind::Cell:
    case Kind::Partial:
      break;
    case Kind::Context:
      return Value::namedMethod(obj, name);
  }
  return fail(std::string("attribute '") + n + "' of a " + kindName(obj->kind) + " is not supported yet");
}

ValuePtr Tracer::call(const ValuePtr& fn, std::vector<ValuePtr> args,
                      std::vector<std::pair<Ref, ValuePtr>> kwargs) {
  switch (fn->kind) {
    case Kind::Module:
      return callModule(fn, std::move(args), std::move(kwargs));
    case Kind::Method: {
      const ValuePtr& self = fn->items[0];
      if (!fn->obj) {
        if (self->is(Kind::Context)) {
          const char* m = PyUnicode_AsUTF8(fn->name.get());
          if (strcmp(m, "__exit__") == 0) return exitContext(self);
          if (strcmp(m, "__enter__") == 0) return enterContext(self);
          return fail(std::string("context manager method ") + m + " is not supported");
        }
        if (!self->is(Kind::Tensor)) return callContainerMethod(self, fn->name.get(), args, kwargs);
        // Reading the tensor's value into Python: stops the trace, or (with
        // capture_scalar_outputs) records Tensor.item() as torch._dynamo does (scalars.h).
        static const char* const kValueReads[][2] = {
            {"item", "item"}, {"tolist", "tolist"}, {"__bool__", "bool"}, {"__int__", "int"}, {"__float__", "float"}};
        if (args.empty() && kwargs.empty())
          for (const auto& read : kValueReads)
            if (PyUnicode_CompareWithASCIIString(fn->name.get(), read[0]) == 0) return readTensorValue(*this, self, read[1]);
        // A tensor method: x.relu(), x.view(2, 3), x.size() (a metadata query answers
        // as a constant).
        args.insert(args.begin(), self);
        return recordCall(NodeOp::CallMethod, fn->name.get(), args, kwargs);
      }
      args.insert(args.begin(), self);
      if (PyFunction_Check(fn->obj.get())) return inlineFunction(fn->obj.get(), -1, std::move(args), std::move(kwargs));
      return call(Value::object(Kind::Callable, fn->obj.get()), std::move(args), std::move(kwargs));
    }
    case Kind::Function: {
      const FunctionParts& p = *fn->fn;
      if (isDisabledCodeObject(p.code.get())) return fail(disabledReason(p.qualname.get()));
      return inlineCode(reinterpret_cast<PyCodeObject*>(p.code.get()), p.globals, p.builtins, nullptr, &p.closure,
                        nullptr, nullptr, p.defaults, p.kwdefaults, -1, std::move(args), std::move(kwargs));
    }
    case Kind::Callable: {
      PyObject* f = fn->obj.get();
      // Before anything that looks at the callable's name or module: functools.wraps gives
      // a disabled wrapper the __module__ of what it wraps (a torch function, say).
      if (PyFunction_Check(f) && isDisabledCodeObject(PyFunction_GET_CODE(f)))
        return fail(disabledReason(reinterpret_cast<PyFunctionObject*>(f)->func_qualname));
      if (CallRule rule = callRuleOf(f); rule != CallRule::None) return applyCallRule(*this, rule, f, args, kwargs);
      if (fn->owned) {  // a C method bound to an object the trace made: run it on constants
        Ref pargs = toPython(Value::sequence(Kind::Tuple, args));
        if (!pargs || !kwargs.empty()) return fail("a method of an object made in the trace called with non-constants");
        Ref r = Ref::steal(PyObject_Call(f, pargs.get(), nullptr));
        if (!r) return raisePython();
        return fromPython(r.get());
      }
      bool handled = false;
      ValuePtr r = callBuiltin(f, args, kwargs, &handled);
      if (handled || failed_) return r;
      if (isTorchContextClass(f)) return makeContext(f, args, kwargs);
      if (isCompilingQuery(f)) return Value::constant(Py_True);  // torch.compiler.is_compiling()
      r = foldConstantCall(f, args, kwargs, &handled);
      if (handled || failed_) return r;
      if (PyCFunction_Check(f) && PyCFunction_GET_SELF(f) && PyModule_Check(PyCFunction_GET_SELF(f)) &&
          strcmp(PyModule_GetName(PyCFunction_GET_SELF(f)), "_operator") == 0 && anyTensor(args, kwargs))
        return recordCall(NodeOp::CallFunction, f, args, kwargs);  // operator.add(x, y) on tensors
      if (f == PyDict_GetItemString(PyBaseObject_Type.tp_dict, "__init__")) return Value::constant(Py_None);
      if (f == PyDict_GetItemString(PyBaseObject_Type.tp_dict, "__setattr__") && args.size() == 3 &&
          args[1]->is(Kind::Constant) && PyUnicode_Check(args[1]->obj.get())) {
        // object.__setattr__(self, name, value): how frozen dataclasses set fields.
        if (args[0]->is(Kind::NewObject)) {
          if (!storeSubscript(args[0]->items[0], args[1], args[2])) return nullptr;
          return Value::constant(Py_None);
        }
        return fail("object.__setattr__ on an object from outside the trace (a side effect)");
      }
      if (isType(f, "functools", "partial")) {
        if (args.empty()) return fail("partial() needs a function (TypeError)");
        auto p = std::make_shared<Value>();
        p->kind = Kind::Partial;
        p->items.push_back(args[0]);
        p->items.push_back(Value::sequence(Kind::Tuple, std::vector<ValuePtr>(args.begin() + 1, args.end())));
        ValuePtr kw = Value::dict(reinterpret_cast<PyObject*>(&PyDict_Type), {}, {});
        for (auto& [k, v] : kwargs) {
          kw->keys.push_back(k.copy());
          kw->items.push_back(v);
        }
        p->items.push_back(kw);
        return p;
      }
      if (Py_TYPE(f) == reinterpret_cast<PyTypeObject*>(typeObject("functools", "partial"))) {
        // A partial object from the program: immutable (func, args, keywords), guarded by identity.
        Ref func = Ref::steal(PyObject_GetAttrString(f, "func"));
        Ref pargs = Ref::steal(PyObject_GetAttrString(f, "args"));
        Ref pkw = Ref::steal(PyObject_GetAttrString(f, "keywords"));
        if (!func || !pargs || !pkw) return failFromPython("functools.partial");
        ValuePtr fv = wrap(func.get(), -1);
        if (!fv) return nullptr;
        std::vector<ValuePtr> all;
        for (Py_ssize_t i = 0; i < PyTuple_GET_SIZE(pargs.get()); ++i) {
          ValuePtr a = wrap(PyTuple_GET_ITEM(pargs.get(), i), -1);
          if (!a) return nullptr;
          all.push_back(a);
        }
        all.insert(all.end(), args.begin(), args.end());
        std::vector<std::pair<Ref, ValuePtr>> kw;
        PyObject *k, *v;
        Py_ssize_t pos = 0;
        while (PyDict_Next(pkw.get(), &pos, &k, &v)) {
          ValuePtr w = wrap(v, -1);
          if (!w) return nullptr;
          kw.emplace_back(Ref::borrow(k), w);
        }
        for (auto& kv : kwargs) kw.push_back(std::move(kv));
        return call(fv, std::move(all), std::move(kw));
      }
      if (isNamedTupleClass(f)) {
        PyObject* fields = PyObject_GetAttrString(f, "_fields");
        Ref hold = Ref::steal(fields);
        if (!fields) return failFromPython("namedtuple fields");
        Py_ssize_t n = PyTuple_GET_SIZE(fields);
        std::vector<ValuePtr> items(static_cast<size_t>(n));
        if (args.size() > static_cast<size_t>(n)) return fail("too many arguments to a namedtuple (TypeError)");
        for (size_t i = 0; i < args.size(); ++i) items[i] = args[i];
        for (auto& [k, v] : kwargs) {
          Py_ssize_t at = -1;
          for (Py_ssize_t i = 0; i < n; ++i)
            if (PyUnicode_Compare(PyTuple_GET_ITEM(fields, i), k.get()) == 0) at = i;
          if (at < 0 || items[static_cast<size_t>(at)]) return fail("bad namedtuple keyword (TypeError)");
          items[static_cast<size_t>(at)] = v;
        }
        Ref defaults = Ref::steal(PyObject_GetAttrString(f, "_field_defaults"));
        PyErr_Clear();
        for (Py_ssize_t i = 0; i < n; ++i) {
          if (items[static_cast<size_t>(i)]) continue;
          PyObject* d = defaults && PyDict_Check(defaults.get()) ? PyDict_GetItem(defaults.get(), PyTuple_GET_ITEM(fields, i)) : nullptr;
          if (!d) return fail("missing a namedtuple field (TypeError)");
          items[static_cast<size_t>(i)] = wrap(d, -1);
          if (!items[static_cast<size_t>(i)]) return nullptr;
        }
        ValuePtr t = Value::sequence(Kind::Tuple, std::move(items));
        t->obj = Ref::borrow(f);
        return t;
      }
      if (isType(f, "collections", "deque")) {
        ValuePtr q = Value::sequence(Kind::List, {});
        q->obj = Ref::borrow(f);
        ValuePtr maxlen = args.size() > 1 ? args[1] : nullptr;
        for (auto& [k, v] : kwargs)
          if (PyUnicode_CompareWithASCIIString(k.get(), "maxlen") == 0) maxlen = v;
        if (maxlen && !(maxlen->is(Kind::Constant) && (maxlen->obj.get() == Py_None || PyLong_Check(maxlen->obj.get()))))
          return fail("deque maxlen must be a constant int");
        if (maxlen && maxlen->obj.get() != Py_None) q->ctor_arg = maxlen->obj.copy();
        if (!args.empty()) {
          std::vector<ValuePtr> a{args[0]};
          std::vector<std::pair<Ref, ValuePtr>> kw;
          if (!callContainerMethod(q, intern("extend"), a, kw)) return nullptr;
        }
        return q;
      }
      if (isType(f, "collections", "defaultdict")) {
        ValuePtr d = Value::dict(f, {}, {});
        if (!args.empty()) {
          if (!args[0]->real() || !PyCallable_Check(args[0]->real())) return fail("defaultdict factory must be a callable");
          d->ctor_arg = Ref::borrow(args[0]->real());
          std::vector<ValuePtr> rest(args.begin() + 1, args.end());
          if (!callContainerMethod(d, intern("update"), rest, kwargs)) return nullptr;
        }
        return d;
      }
      if (isType(f, "operator", "itemgetter") || isType(f, "operator", "attrgetter")) {
        Ref made = toPython(Value::sequence(Kind::Tuple, args));
        if (!made || !kwargs.empty()) return fail("itemgetter/attrgetter of non-constants");
        Ref obj = Ref::steal(PyObject_Call(f, made.get(), nullptr));
        if (!obj) return raisePython();
        return Value::object(Kind::Callable, obj.get());
      }
      if (isType(reinterpret_cast<PyObject*>(Py_TYPE(f)), "operator", "itemgetter") ||
          isType(reinterpret_cast<PyObject*>(Py_TYPE(f)), "operator", "attrgetter")) {
        // operator.itemgetter(k...)(obj) / attrgetter("a.b")(obj): their keys are in __reduce__.
        if (args.size() != 1 || !kwargs.empty()) return fail("getter called with several arguments");
        Ref red = Ref::steal(PyObject_CallMethod(f, "__reduce__", nullptr));
        if (!red || !PyTuple_Check(red.get()) || PyTuple_GET_SIZE(red.get()) < 2) return failFromPython("getter keys");
        PyObject* keys = PyTuple_GET_ITEM(red.get(), 1);
        bool item = isType(reinterpret_cast<PyObject*>(Py_TYPE(f)), "operator", "itemgetter");
        std::vector<ValuePtr> got;
        for (Py_ssize_t i = 0; i < PyTuple_GET_SIZE(keys); ++i) {
          PyObject* key = PyTuple_GET_ITEM(keys, i);
          ValuePtr v = args[0];
          if (item) {
            v = subscript(v, Value::constant(key));
          } else {
            Ref parts = Ref::steal(PyUnicode_Split(key, Ref::steal(PyUnicode_FromString(".")).get(), -1));
            for (Py_ssize_t k = 0; v && parts && k < PyList_GET_SIZE(parts.get()); ++k)
              v = getAttr(v, PyList_GET_ITEM(parts.get(), k));
          }
          if (!v) return nullptr;
          got.push_back(v);
        }
        return got.size() == 1 ? got[0] : Value::sequence(Kind::Tuple, std::move(got));
      }
      if (isType(f, "collections", "OrderedDict")) {
        ValuePtr d = Value::dict(f, {}, {});
        if (!callContainerMethod(d, intern("update"), args, kwargs)) return nullptr;
        return d;
      }
      if (PyExceptionClass_Check(f)) {
        if (!kwargs.empty()) return fail("keyword arguments to an exception class");
        return makeException(f, args);
      }
      if (PyType_Check(f) && (reinterpret_cast<PyTypeObject*>(f)->tp_flags & Py_TPFLAGS_HEAPTYPE) &&
          !isTorchFunction(f))
        return newObject(f, std::move(args), std::move(kwargs));
      if (isTorchFunction(f)) {
        if (!anyTensor(args, kwargs)) {
          // Without tensor arguments a torch function is only run at trace time when it is
          // known to be a factory (a graph op: torch.zeros(3), torch.arange(n)) or a pure
          // query; anything else may change global state (torch.set_grad_enabled(False),
          // torch.manual_seed) and must not run here.
          if (isPureTorchQuery(f)) return recordCall(NodeOp::CallFunction, f, args, kwargs);
          // A Python helper of torch (F._none_or_dtype, F._canonical_mask, ...) is traced
          // like user code: its effects, if any, are then modelled instead of run.
          if (PyFunction_Check(f)) return inlineFunction(f, fn->reg, std::move(args), std::move(kwargs));
          if (!isTensorFactory(f)) {
            Ref name = Ref::steal(PyObject_GetAttrString(f, "__qualname__"));
            PyErr_Clear();
            return fail(std::string("torch.") + (name ? PyUnicode_AsUTF8(name.get()) : "?") +
                        "() without tensor arguments is not supported yet");
          }
          ValuePtr out = recordCall(NodeOp::CallFunction, f, args, kwargs);
          if (out && !out->is(Kind::Tensor)) return fail("a tensor factory returned a non-tensor");
          return out;
        }
        return recordCall(NodeOp::CallFunction, f, args, kwargs);
      }
      if (PyFunction_Check(f)) return inlineFunction(f, fn->reg, std::move(args), std::move(kwargs));
      Ref repr = Ref::steal(PyObject_Repr(f));
      std::string what = repr ? PyUnicode_AsUTF8(repr.get()) : "a callable";
      PyErr_Clear();
      return fail("call of " + what + " is not supported yet");
    }
    case Kind::Null:
    case Kind::Tensor:
    case Kind::Constant:
    case Kind::Tuple:
    case Kind::List:
    case Kind::Slice:
    case Kind::Iterator:
    case Kind::PyModule:
    case Kind::Dict:
    case Kind::Set:
    case Kind::Object:
    case Kind::NewObject: {
      bool found = false;
      ValuePtr r = callDunder(fn, "__call__", std::move(args), &found);
      if (found || failed_) return r;
      break;
    }
    case Kind::Partial: {
      std::vector<ValuePtr> all = fn->items[1]->items;
      all.insert(all.end(), args.begin(), args.end());
      std::vector<std::pair<Ref, ValuePtr>> kw;
      const ValuePtr& bound = fn->items[2];
      for (size_t i = 0; i < bound->keys.size(); ++i) kw.emplace_back(bound->keys[i].copy(), bound->items[i]);
      for (auto& kv : kwargs) {
        bool replaced = false;
        for (auto& existing : kw)
          if (PyUnicode_Compare(existing.first.get(), kv.first.get()) == 0) {
            existing.second = kv.second;
            replaced = true;
          }
        if (!replaced) kw.push_back(std::move(kv));
      }
      if (fn->items.size() > 3) {  // a function decorated with a torch context manager
        const ValuePtr& tmpl = fn->items[3];
        std::vector<ValuePtr> ctx_args = tmpl->items;
        std::vector<std::pair<Ref, ValuePtr>> no_kw;
        for (ValuePtr& a : ctx_args)
          if (!a) a = Value::constant(Py_None);
        ValuePtr ctx = makeContext(tmpl->obj.get(), ctx_args, no_kw);
        if (!ctx || !enterContext(ctx)) return nullptr;
        ValuePtr r = call(fn->items[0], std::move(all), std::move(kw));
        if (!r && !exceptionPending()) return nullptr;
        ValuePtr pending = std::move(pending_exc_);
        pending_exc_.reset();
        if (!exitContext(ctx)) return nullptr;
        if (pending) return raiseValue(std::move(pending));
        return r;
      }
      return call(fn->items[0], std::move(all), std::move(kw));
    }
    case Kind::Context: {
      // @torch.no_grad() on a function: a function that enters a fresh copy of the
      // context around each call.
      if (args.size() != 1 || !kwargs.empty()) return fail("calling a context manager with these arguments");
      auto p = std::make_shared<Value>();
      p->kind = Kind::Partial;
      p->items = {args[0], Value::sequence(Kind::Tuple, {}), Value::dict(reinterpret_cast<PyObject*>(&PyDict_Type), {}, {})};
      p->items.push_back(fn);  // items[3]: the context template
      return p;
    }
    case Kind::Cell:
    case Kind::Super:
      break;
  }
  return fail(std::string("calling a ") + kindName(fn->kind) + " is not supported");
}

ValuePtr Tracer::callModule(const ValuePtr& module, std::vector<ValuePtr> args,
                            std::vector<std::pair<Ref, ValuePtr>> kwargs) {
  PyObject* m = module->obj.get();
  // Inlining forward skips Module.__call__, which is only right while no hook would run:
  // check now, and guard that the module's own hook dicts stay empty.
  static const char* const kHookDicts[] = {"_forward_hooks", "_forward_pre_hooks", "_backward_hooks",
                                           "_backward_pre_hooks"};
  for (const char* h : kHookDicts) {
    PyObject* d = instanceDictItem(m, h);
    if (d && (!PyDict_Check(d) || PyDict_GET_SIZE(d) != 0))
      return fail(std::string("module has ") + h + " (hooks are not supported yet)");
  }
  guards().checkNoModuleHooks(module->reg);
  static const char* const kGlobalHooks[] = {"_global_forward_hooks", "_global_forward_pre_hooks",
                                             "_global_backward_hooks", "_global_backward_pre_hooks"};
  Ref mm = Ref::steal(PyImport_ImportModule("torch.nn.modules.module"));
  if (!mm) return failFromPython("torch.nn.modules.module");
  for (const char* h : kGlobalHooks) {
    Ref d = Ref::steal(PyObject_GetAttrString(mm.get(), h));
    if (!d) {
      PyErr_Clear();
      continue;
    }
    if (PyObject_Length(d.get()) != 0) return fail(std::string("global module hooks are registered (") + h + ")");
  }
  if (PyObject* own_forward = instanceDictItem(m, "forward")) {
    int reg = load(LoadKind::InstanceDict, module->reg, 0, intern("forward"), guards().sourceName(module->reg) + ".forward");
    ValuePtr f = wrap(own_forward, reg);
    if (!f) return nullptr;
    return call(f, std::move(args), std::move(kwargs));
  }
  PyObject* forward = _PyType_Lookup(Py_TYPE(m), intern("forward"));
  if (!forward || !PyFunction_Check(forward)) return fail("module forward is not a Python function");
  args.insert(args.begin(), module);
  return inlineFunction(forward, -1, std::move(args), std::move(kwargs));
}

ValuePtr Tracer::inlineFunction(PyObject* func, int func_reg, std::vector<ValuePtr> args,
                                std::vector<std::pair<Ref, ValuePtr>> kwargs) {
  PyFunctionObject* fo = reinterpret_cast<PyFunctionObject*>(func);
  if (isDisabledCodeObject(fo->func_code)) return fail(disabledReason(fo->func_qualname));
  return inlineCode(reinterpret_cast<PyCodeObject*>(fo->func_code), fo->func_globals, fo->func_builtins,
                    fo->func_closure, nullptr, fo->func_defaults, fo->func_kwdefaults, nullptr, nullptr, func_reg,
                    std::move(args), std::move(kwargs));
}

}  // namespace cdynamo::trace
