// Attribute reads and calls: what a name means on each kind of value, and what calling
// each kind of callable does (graph op, inlined Python, builtin modelled here).
#include <cstring>
#include <string>

#include "support/torch_types.h"
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

// Torch functions without tensor arguments that return plain values and have no effect
// on any state: safe to evaluate once at trace time (grad mode is guarded globally).
bool isPureTorchQuery(PyObject* fn) {
  static const char* const kNames[] = {"is_grad_enabled", "get_default_dtype", "is_tensor",
                                       "is_floating_point", "is_complex", "result_type",
                                       "promote_types", "can_cast", "is_inference_mode_enabled",
                                       "is_autocast_enabled"};
  Ref name = Ref::steal(PyObject_GetAttrString(fn, "__name__"));
  if (!name || !PyUnicode_Check(name.get())) return PyErr_Clear(), false;
  const char* n = PyUnicode_AsUTF8(name.get());
  for (const char* k : kNames)
    if (strcmp(n, k) == 0) return true;
  return false;
}

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

}  // namespace

ValuePtr Tracer::getAttr(const ValuePtr& obj, PyObject* name) {
  const char* n = PyUnicode_AsUTF8(name);
  switch (obj->kind) {
    case Kind::Tensor: {
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
    case Kind::Constant:
    case Kind::Callable: {
      Ref v = Ref::steal(PyObject_GetAttr(obj->obj.get(), name));
      if (!v) return failFromPython(std::string("attribute '") + n + "'");
      if (isConstantObject(v.get())) return Value::constant(v.get());
      if (obj->is(Kind::Constant) && PyCallable_Check(v.get()))
        return Value::object(Kind::Callable, v.get());  // a method of an immutable constant
      return fail(std::string("attribute '") + n + "' of a " + kindName(obj->kind) + " is not supported yet");
    }
    case Kind::Null:
    case Kind::Tuple:
    case Kind::List:
    case Kind::Slice:
    case Kind::Iterator:
    case Kind::Method:
      break;
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
        // A tensor method: x.relu(), x.view(2, 3), x.size() (a metadata query answers
        // as a constant).
        args.insert(args.begin(), self);
        return recordCall(NodeOp::CallMethod, fn->name.get(), args, kwargs);
      }
      args.insert(args.begin(), self);
      return inlineFunction(fn->obj.get(), -1, std::move(args), std::move(kwargs));
    }
    case Kind::Callable: {
      PyObject* f = fn->obj.get();
      bool handled = false;
      ValuePtr r = callBuiltin(f, args, kwargs, &handled);
      if (handled || failed_) return r;
      if (isTorchFunction(f)) {
        if (!anyTensor(args, kwargs)) {
          // Factories (torch.zeros(3), torch.arange(n)) are graph ops; plain queries are
          // evaluated now; anything else may touch global state.
          ValuePtr out = recordCall(NodeOp::CallFunction, f, args, kwargs);
          if (out && out->is(Kind::Constant) && !isPureTorchQuery(f))
            return fail("torch function without tensor arguments returned a non-tensor (it may have effects)");
          return out;
        }
        return recordCall(NodeOp::CallFunction, f, args, kwargs);
      }
      if (PyFunction_Check(f)) return inlineFunction(f, fn->reg, std::move(args), std::move(kwargs));
      if (PyCFunction_Check(f) && PyCFunction_GET_SELF(f) && isConstantObject(PyCFunction_GET_SELF(f))) {
        // A method of an immutable constant ("{}".format, size.numel): evaluate it.
        Ref pargs = Ref::steal(PyTuple_New(static_cast<Py_ssize_t>(args.size())));
        for (size_t i = 0; i < args.size(); ++i) {
          if (!args[i]->is(Kind::Constant)) return fail("method of a constant called with a non-constant argument");
          PyTuple_SET_ITEM(pargs.get(), i, args[i]->obj.copy().release());
        }
        if (!kwargs.empty()) return fail("keyword arguments to a method of a constant");
        Ref r = Ref::steal(PyObject_Call(f, pargs.get(), nullptr));
        if (!r) return failFromPython("method of a constant");
        if (!isConstantObject(r.get())) return fail("method of a constant returned a non-constant");
        return Value::constant(r.get());
      }
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
      break;
  }
  return fail(std::string("calling a ") + kindName(fn->kind) + " is not supported");
}

ValuePtr Tracer::callBuiltin(PyObject* f, std::vector<ValuePtr>& args,
                             std::vector<std::pair<Ref, ValuePtr>>& kwargs, bool* handled) {
  *handled = false;
  if (!PyCFunction_Check(f) && !PyType_Check(f)) return nullptr;
  PyObject* builtins = PyEval_GetBuiltins();
  if (!builtins) return nullptr;
  // Identify the builtin by identity, never by name.
  const char* which = nullptr;
  static const char* const kKnown[] = {"len", "isinstance", "range", "tuple", "list", "getattr", "print"};
  for (const char* k : kKnown)
    if (PyDict_GetItemString(builtins, k) == f) which = k;
  if (!which) return nullptr;
  *handled = true;
  if (strcmp(which, "print") == 0) return fail("print() has effects outside the program");
  if (!kwargs.empty()) return fail(std::string(which) + "() with keyword arguments is not supported yet");
  if (strcmp(which, "len") == 0 && args.size() == 1) {
    const ValuePtr& v = args[0];
    if (v->is(Kind::Tuple) || v->is(Kind::List))
      return Value::constant(Ref::steal(PyLong_FromSize_t(v->items.size())).get());
    if (v->is(Kind::Tensor)) return recordCall(NodeOp::CallFunction, f, args, {});
    if (v->is(Kind::Constant) || v->is(Kind::Module)) {
      Py_ssize_t n = PyObject_Length(v->obj.get());
      if (n < 0) return failFromPython("len()");
      return Value::constant(Ref::steal(PyLong_FromSsize_t(n)).get());
    }
  } else if (strcmp(which, "isinstance") == 0 && args.size() == 2 && args[1]->obj) {
    const ValuePtr& v = args[0];
    PyObject* cls = args[1]->obj.get();
    PyObject* probe = nullptr;
    Ref holder;
    if (v->is(Kind::Tensor)) {
      auto ex = example_of_node_.find(v->node);
      probe = ex != example_of_node_.end() ? ex->second.get() : graph_.fake(v->node);
      if (ex == example_of_node_.end()) {
        // A computed tensor is a plain torch.Tensor (the fake tensor's class is internal).
        int r = PyObject_IsSubclass(tensorType(), cls);
        if (r < 0) return failFromPython("isinstance()");
        return Value::constant(r ? Py_True : Py_False);
      }
    } else if (v->obj) {
      probe = v->obj.get();
    } else if (v->is(Kind::Tuple) || v->is(Kind::List)) {
      holder = Ref::steal(v->is(Kind::Tuple) ? PyTuple_New(0) : PyList_New(0));
      probe = holder.get();
    }
    if (probe) {
      int r = PyObject_IsInstance(probe, cls);
      if (r < 0) return failFromPython("isinstance()");
      return Value::constant(r ? Py_True : Py_False);
    }
  } else if (strcmp(which, "range") == 0) {
    Ref pargs = Ref::steal(PyTuple_New(static_cast<Py_ssize_t>(args.size())));
    for (size_t i = 0; i < args.size(); ++i) {
      if (!args[i]->is(Kind::Constant)) return fail("range() of a non-constant");
      PyTuple_SET_ITEM(pargs.get(), i, args[i]->obj.copy().release());
    }
    Ref r = Ref::steal(PyObject_Call(f, pargs.get(), nullptr));
    if (!r) return failFromPython("range()");
    return Value::constant(r.get());
  } else if ((strcmp(which, "tuple") == 0 || strcmp(which, "list") == 0) && args.size() <= 1) {
    Kind k = which[0] == 't' ? Kind::Tuple : Kind::List;
    if (args.empty()) return Value::sequence(k, {});
    ValuePtr it = getIter(args[0]);
    if (!it) return nullptr;
    return Value::sequence(k, std::vector<ValuePtr>(it->items.begin() + it->pos, it->items.end()));
  } else if (strcmp(which, "getattr") == 0 && args.size() == 2 && args[1]->is(Kind::Constant) &&
             PyUnicode_Check(args[1]->obj.get())) {
    return getAttr(args[0], args[1]->obj.get());
  }
  return fail(std::string(which) + "() with these arguments is not supported yet");
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
    if (!d) continue;
    if (!PyDict_Check(d) || PyDict_GET_SIZE(d) != 0) return fail(std::string("module has ") + h + " (hooks are not supported yet)");
    int reg = load(LoadKind::InstanceDict, module->reg, 0, intern(h), guards().sourceName(module->reg) + "." + h);
    guards().checkDictEmpty(reg);
  }
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
  PyCodeObject* co = reinterpret_cast<PyCodeObject*>(fo->func_code);
  if (co->co_flags & (CO_GENERATOR | CO_COROUTINE | CO_ASYNC_GENERATOR | CO_ITERABLE_COROUTINE))
    return fail("inlining a generator or coroutine function is not supported yet");
  int depth = current_ ? current_->depth + 1 : 1;
  if (depth > kMaxInlineDepth) return fail("inlining is too deep (recursion limit)");
  if (co->co_flags & CO_VARKEYWORDS) return fail("inlining a function with **kwargs is not supported yet");

  SymbolicFrame f;
  f.code = co;
  f.globals = fo->func_globals;
  f.builtins = fo->func_builtins;
  f.closure = fo->func_closure;
  f.instrs = bytecode::decode(co);
  f.locals.resize(co->co_nlocalsplus);
  f.parent = current_;
  f.depth = depth;
  f.function_reg = func_reg;

  // Bind arguments the way CPython does (positional, keywords, defaults, *args).
  const int nparams = co->co_argcount;
  const int nkwonly = co->co_kwonlyargcount;
  size_t npos = std::min(args.size(), static_cast<size_t>(nparams));
  for (size_t i = 0; i < npos; ++i) f.locals[i] = args[i];
  if (args.size() > static_cast<size_t>(nparams)) {
    if (!(co->co_flags & CO_VARARGS)) return fail("too many positional arguments (TypeError)");
    f.locals[nparams + nkwonly] = Value::sequence(Kind::Tuple, std::vector<ValuePtr>(args.begin() + nparams, args.end()));
  } else if (co->co_flags & CO_VARARGS) {
    f.locals[nparams + nkwonly] = Value::sequence(Kind::Tuple, {});
  }
  for (auto& [k, v] : kwargs) {
    int slot = -1;
    for (int i = co->co_posonlyargcount; i < nparams + nkwonly; ++i)
      if (PyUnicode_Compare(PyTuple_GET_ITEM(co->co_localsplusnames, i), k.get()) == 0) slot = i;
    if (slot < 0) return fail(std::string("unexpected keyword argument '") + PyUnicode_AsUTF8(k.get()) + "' (TypeError)");
    if (f.locals[slot]) return fail("multiple values for an argument (TypeError)");
    f.locals[slot] = v;
  }
  PyObject* defaults = fo->func_defaults;
  Py_ssize_t ndefaults = defaults ? PyTuple_GET_SIZE(defaults) : 0;
  for (int i = 0; i < nparams; ++i) {
    if (f.locals[i]) continue;
    Py_ssize_t d = i - (nparams - ndefaults);
    if (d < 0) return fail("missing a required argument (TypeError)");
    ValuePtr v = wrap(PyTuple_GET_ITEM(defaults, d), -1);
    if (!v) return nullptr;
    f.locals[i] = v;
  }
  for (int i = nparams; i < nparams + nkwonly; ++i) {
    if (f.locals[i]) continue;
    PyObject* kwd = fo->func_kwdefaults;
    PyObject* v = kwd ? PyDict_GetItemWithError(kwd, PyTuple_GET_ITEM(co->co_localsplusnames, i)) : nullptr;
    if (!v) return fail("missing a required keyword-only argument (TypeError)");
    ValuePtr w = wrap(v, -1);
    if (!w) return nullptr;
    f.locals[i] = w;
  }
  ValuePtr r = runFrame(f);
  return r;
}

}  // namespace cdynamo::trace
