// Calls: what calling each kind of value does (a graph op, inlined Python, a table row, a
// container or tensor method, a partial, a context manager used as a decorator).
#include <cstring>
#include <string>

#include "support/lookup.h"
#include "support/torch_types.h"
#include "trace/call_rules.h"
#include "trace/disabled.h"
#include "trace/engine/frame.h"
#include "trace/engine/graph_calls.h"
#include "trace/engine/scalars.h"
#include "trace/engine/speculation.h"
#include "trace/kinds/exception.h"
#include "trace/kinds/iterator.h"
#include "trace/kinds/ndarray.h"
#include "trace/kinds/object.h"
#include "trace/kinds/tensor_subclass.h"
#include "trace/protocol/callables.h"
#include "trace/protocol/calls.h"
#include "trace/protocol/constants.h"
#include "trace/protocol/container_methods.h"
#include "trace/protocol/operators.h"
#include "trace/tracer.h"

namespace cdynamo::trace {

using graph::NodeOp;
using guards::LoadKind;

namespace {

DisabledCodeQuery disabled_query = nullptr;

Result<ValuePtr> callModule(Tracer& t, const ValuePtr& module, Args args, Kwargs kwargs);

// send(), throw(), close(), __next__() of a generator made in the trace.
Result<ValuePtr> generatorMethod(Tracer& t, const ValuePtr& self, PyObject* name, Args& args, Kwargs& kwargs) {
  const char* n = PyUnicode_AsUTF8(name);
  auto is = [n](const char* m) { return strcmp(n, m) == 0; };
  if (!kwargs.empty()) return t.fail(std::string("keyword arguments to generator.") + n + "()");
  if (const Iterator& it = self->as<Iterator>(); it.made != Iterator::Made::Generator && it.pos < it.items.size())
    return t.fail(std::string("generator.") + n + "() of a generator whose items were computed ahead (its frame already ran to its end)");
  if (!isGeneratorValue(self) && !is("__next__"))  // a polyfill's generator, standing for another type
    return t.fail(std::string("attribute '") + n + "' of " + describe(self) + " is not supported yet");
  if ((is("send") && args.size() == 1) || (is("__next__") && args.empty())) {
    ValuePtr item;
    if (Done d = t.resumeGenerator(self, args.empty() ? nullptr : args[0], &item); !d) return d.stop();
    if (item) return item;
    return raiseStopIteration(t, self);
  }
  if (is("throw") && !args.empty() && args.size() <= 3) {
    // throw(type), throw(instance), or the older throw(type, value, traceback) that
    // contextlib's __exit__ uses: the exception made as CPython normalizes it.
    ValuePtr exc = args[0];
    const ValuePtr value = args.size() > 1 ? args[1] : nullptr;
    if (args.size() > 2 && !args[2]->isNone()) {
      // A traceback is kept only when it is already the exception's own.
      PyObject* v = value ? value->real() : nullptr;
      Ref own = v && PyExceptionInstance_Check(v) ? Ref::steal(PyException_GetTraceback(v)) : Ref();
      if (!own || own.get() != args[2]->real()) return t.fail("generator.throw() with another exception's traceback");
    }
    if (exc->is(Kind::Callable) && exc->real() && PyExceptionClass_Check(exc->real())) {
      PyObject* v = value ? value->real() : nullptr;
      if (v && PyObject_IsInstance(v, exc->real()) == 1) {
        exc = value;
      } else if (value && !value->isNone()) {
        PyErr_Clear();
        return t.fail("generator.throw(type, value) with a value that is not an instance of the type");
      } else {
        Args none;
        Result<ValuePtr> made = makeException(t, exc->real(), none);
        if (!made) return made;
        exc = made.take();
      }
    } else if (value && !value->isNone()) {
      return t.raiseNew(PyExc_TypeError, "instance exception may not have a separate value");
    }
    if (!exc->real() || !PyExceptionInstance_Check(exc->real()))
      return t.raiseNew(PyExc_TypeError, "exceptions must be classes or instances deriving from BaseException, not " +
                                             std::string(Py_TYPE(exc->real() ? exc->real() : Py_None)->tp_name));
    ValuePtr item;
    if (Done d = t.throwGenerator(self, std::move(exc), &item); !d) return d.stop();
    if (item) return item;
    return raiseStopIteration(t, self);
  }
  if (is("close") && args.empty()) {
    Result<ValuePtr> r = t.closeGenerator(self);
    if (r) t.effects().noteMutation();
    t.effects().noteChangeOf(self.get());
    return r;
  }
  return t.fail(std::string("generator.") + n + "() is not supported yet");
}

// A named method of a container, tensor or context value.
Result<ValuePtr> callNamedMethod(Tracer& t, const NamedMethod& m, Args& args, Kwargs& kwargs) {
  const ValuePtr& self = m.self;
  if (const Iterator* it = self->get<Iterator>(); it && (it->made == Iterator::Made::Generator || isGeneratorValue(self)))
    return generatorMethod(t, self, m.name.get(), args, kwargs);
  if (self->is(Kind::Context)) {
    const char* mname = PyUnicode_AsUTF8(m.name.get());
    if (strcmp(mname, "__exit__") == 0) return t.contexts().exit(self);
    if (strcmp(mname, "__enter__") == 0) return t.contexts().enter(self);
    return t.fail(std::string("context manager method ") + mname + " is not supported");
  }
  if (self->is(Kind::NdArray)) return ndarrayMethod(t, self, m.name.get(), args, kwargs);
  if (self->is(Kind::SubclassTensor)) return subclassTensorMethod(t, self, m.name.get(), args, kwargs);
  if (!self->is(Kind::Tensor)) return callContainerMethod(t, self, m.name.get(), args, kwargs);
  if (PyUnicode_CompareWithASCIIString(m.name.get(), "numpy") == 0) return tensorAsNdarray(t, self, args, kwargs);
  if (PyUnicode_CompareWithASCIIString(m.name.get(), "as_subclass") == 0) return tensorAsSubclass(t, self, args, std::move(kwargs));
  if (PyUnicode_CompareWithASCIIString(m.name.get(), "register_hook") == 0 ||
      PyUnicode_CompareWithASCIIString(m.name.get(), "register_post_accumulate_grad_hook") == 0)
    return tensorRegisterHook(t, self, m.name.get(), args, kwargs);
  // Reading the tensor's value into Python: stops the trace, or (with
  // capture_scalar_outputs) records Tensor.item() as torch._dynamo does (scalars.h).
  static const char* const kValueReads[][2] = {
      {"item", "item"}, {"tolist", "tolist"}, {"__bool__", "bool"}, {"__int__", "int"}, {"__float__", "float"}};
  if (args.empty() && kwargs.empty())
    for (const auto& read : kValueReads)
      if (PyUnicode_CompareWithASCIIString(m.name.get(), read[0]) == 0) return readTensorValue(t, self, read[1]);
  // A tensor method: x.relu(), x.view(2, 3), x.size() (a metadata query answers as a constant).
  args.insert(args.begin(), self);
  // ... or its Python version (x.addcmul_(y, z, value=tensor), which the C method would read
  // with .item()), from the method descriptor of torch.Tensor.
  if (PyObject* tensor_type = lookup(Obj::torch_Tensor)) {
    if (PyObject* descr = _PyType_Lookup(reinterpret_cast<PyTypeObject*>(tensor_type), m.name.get())) {
      Ref hold = Ref::borrow(descr);
      if (Result<ValuePtr> r = callPolyfill(t, descr, args, kwargs); !r.notHandled()) return r;
    }
  } else {
    return t.failFromPython("torch.Tensor");
  }
  return recordCall(t, NodeOp::CallMethod, m.name.get(), args, kwargs);
}

// functools.partial made in the trace, or a function decorated with a context manager.
Result<ValuePtr> callPartial(Tracer& t, const Partial& p, Args& args, Kwargs& kwargs) {
  std::vector<ValuePtr> all = p.args->as<Tuple>().items;
  all.insert(all.end(), args.begin(), args.end());
  std::vector<std::pair<Ref, ValuePtr>> kw;
  const Dict& bound = p.kwargs->as<Dict>();
  for (size_t i = 0; i < bound.keys.size(); ++i) kw.emplace_back(bound.keys[i].copy(), bound.values[i]);
  for (auto& kv : kwargs) {
    bool replaced = false;
    for (auto& existing : kw)
      if (PyUnicode_Compare(existing.first.get(), kv.first.get()) == 0) {
        existing.second = kv.second;
        replaced = true;
      }
    if (!replaced) kw.push_back(std::move(kv));
  }
  if (p.context) {  // a function decorated with a torch context manager
    Result<ValuePtr> ctx = t.contexts().forCall(p.context);
    if (!ctx) return ctx;
    if (Result<ValuePtr> entered = t.contexts().enter(*ctx); !entered) return entered;
    Result<ValuePtr> r = call(t, p.fn, std::move(all), std::move(kw));
    if (!r && r.outcome() != Outcome::Raised) return r;
    ValuePtr pending = t.takePendingException();
    if (Result<ValuePtr> exited = t.contexts().exit(*ctx); !exited) return exited;
    if (pending) return t.raiseValue(std::move(pending));
    return r;
  }
  return call(t, p.fn, std::move(all), std::move(kw));
}

}  // namespace

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

void setDisabledCodeQuery(DisabledCodeQuery query) { disabled_query = query; }
bool isDisabledCode(PyCodeObject* code) { return disabled_query && disabled_query(code); }

Result<ValuePtr> call(Tracer& t, const ValuePtr& fn, Args args, Kwargs kwargs) {
  switch (fn->kind()) {
    case Kind::Module:
      return callModule(t, fn, std::move(args), std::move(kwargs));
    case Kind::NamedMethod:
      return callNamedMethod(t, fn->as<NamedMethod>(), args, kwargs);
    case Kind::BoundMethod: {
      const BoundMethod& m = fn->as<BoundMethod>();
      PyObject* function = m.function.get();
      // A method of a NumPy object from the program (np.random.randn: of the global
      // RandomState) stands for torch._numpy's function of that name.
      if (m.self->is(Kind::Object) && !PyFunction_Check(function) && isNumpyCallable(function))
        return callNumpy(t, function, args, kwargs);
      if (isAutogradFunctionApply(function)) {  // Gelu.apply(x)
        PyObject* cls = m.self->real();
        if (cls && PyType_Check(cls)) {
          Ref target = Ref::steal(PyMethod_New(function, cls));
          if (!target) return t.failFromPython("autograd.Function.apply");
          return callAutogradFunctionApply(t, cls, target.get(), std::move(args), std::move(kwargs));
        }
      }
      args.insert(args.begin(), m.self);
      if (PyFunction_Check(function)) return t.inlineFunction(function, -1, std::move(args), std::move(kwargs));
      return call(t, Value::callable(function), std::move(args), std::move(kwargs));
    }
    case Kind::Function: {
      const Function& p = fn->as<Function>();
      if (isDisabledCodeObject(p.code.get())) return t.fail(disabledReason(p.qualname.get()));
      return t.inlineCode(reinterpret_cast<PyCodeObject*>(p.code.get()), p.globals.get(), p.builtins.get(), nullptr,
                          &p.closure, nullptr, nullptr, p.defaults, p.kwdefaults, -1, std::move(args),
                          std::move(kwargs));
    }
    case Kind::Callable:
      return callCallable(t, fn, std::move(args), std::move(kwargs));
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
      // An operator of torch.ops reached as an object (self inside one of its methods):
      // the operator, not its Python __call__.
      // So is an object a table row names (a higher-order op instance: torch.ops.higher_order.wrap).
      // And an object a call rule names (one torch._dynamo.allow_in_graph marked).
      if (fn->is(Kind::Object) && fn->real() &&
          (isOperatorObject(fn->real()) || findCallable(fn->real()) || callRuleOf(fn->real()) != CallRule::None))
        return callCallable(t, Value::callable(fn->real(), fn->reg), std::move(args), std::move(kwargs));
      Result<ValuePtr> r = callDunder(t, fn, interned(Str::dunder_call), std::move(args));
      if (!r.notHandled()) return r;
      break;
    }
    case Kind::Partial:
      return callPartial(t, fn->as<Partial>(), args, kwargs);
    case Kind::Context: {
      // @torch.no_grad() on a function: a function that enters a fresh copy of the
      // context around each call.
      if (args.size() != 1 || !kwargs.empty()) return t.fail("calling a context manager with these arguments");
      return t.contexts().decorate(fn, args[0]);
    }
    case Kind::Cell:
    case Kind::Super:
    case Kind::Namespace:
    case Kind::DictView:
    case Kind::NdArray:
    case Kind::SubclassTensor:
      break;
  }
  return t.fail(std::string("calling ") + describe(fn) + " is not supported");
}

Result<ValuePtr> callCallable(Tracer& t, const ValuePtr& fn, Args args, Kwargs kwargs) {
  PyObject* f = fn->real();
  // Before anything that looks at the callable's name or module: functools.wraps gives a
  // disabled wrapper the __module__ of what it wraps (a torch function, say). A disabled
  // function the table models itself (torch.utils.checkpoint.checkpoint, which torch wraps
  // in torch._disable_dynamo) goes to its row instead.
  if (PyFunction_Check(f) && isDisabledCodeObject(PyFunction_GET_CODE(f)) && !findCallable(f))
    return t.fail(disabledReason(reinterpret_cast<PyFunctionObject*>(f)->func_qualname));
  // A context the trace models may be a Python function (a contextlib one): before the
  // rules that would inline it.
  if (t.contexts().isContextClass(f)) return t.contexts().make(f, args, kwargs);
  if (CallRule rule = callRuleOf(f); rule != CallRule::None) return applyCallRule(t, rule, f, args, kwargs);
  if (fn->as<Callable>().owned) {  // a C method bound to an object the trace made: run it on constants
    Ref pargs = toPython(t, Value::tuple(args));
    if (!pargs || !kwargs.empty()) return t.fail("a method of an object made in the trace called with non-constants");
    Ref r = Ref::steal(PyObject_Call(f, pargs.get(), nullptr));
    if (!r) return t.raisePython();
    // The object it was bound to, given back (exc.with_traceback(tb) returns exc): still
    // the trace's own object.
    if (PyCFunction_Check(f) && r.get() == PyCFunction_GET_SELF(f) && PyExceptionInstance_Check(r.get()))
      return Value::of(Object{r.copy(), true});
    return fromPython(t, r.get());
  }
  if (anySubclassTensor(args, kwargs)) {  // torch's callables dispatch to the subclass's __torch_function__
    if (Result<ValuePtr> r = callWithSubclassArgs(t, fn, args, kwargs); !r.notHandled()) return r;
  }
  if (const CallableRow* row = findCallable(f)) {
    if (row->builtin) return callBuiltin(t, f, *row, args, kwargs);
    Result<ValuePtr> r = row->handler(t, f, row->name, args, kwargs);
    if (!r.notHandled()) return r;  // a special callable that does not take these arguments: the rules decide
  }
  return callByRules(t, fn, args, kwargs);
}

namespace {

// The module's forward called: one stored on the instance earlier in the trace
// (`mod.forward = f`), one of the instance, or the class's (guarded as a class attribute,
// with the instance guarded not to have one: a forward assigned later is not missed).
Result<ValuePtr> callForward(Tracer& t, const ValuePtr& module, Args args, Kwargs kwargs) {
  PyObject* m = module->as<Module>().obj.get();
  ValuePtr stored = t.effects().overlayAttr(module->reg, interned(Str::forward));
  if (stored && stored != SideEffects::deleted()) return call(t, stored, std::move(args), std::move(kwargs));
  PyObject* own_forward = stored ? nullptr : instanceDictItem(m, "forward");  // deleted in the trace: the class's
  if (own_forward) {
    int reg = t.load(LoadKind::InstanceDict, module->reg, 0, interned(Str::forward),
                   t.guards().sourceName(module->reg) + ".forward");
    Result<ValuePtr> f = t.wrap(own_forward, reg);
    if (!f) return f;
    return call(t, *f, std::move(args), std::move(kwargs));
  }
  PyObject* forward = _PyType_Lookup(Py_TYPE(m), interned(Str::forward));
  if (forward && Py_IS_TYPE(forward, &PyStaticMethod_Type)) {  // @staticmethod forward: called without self
    Ref func = Ref::steal(PyObject_GetAttr(forward, interned(Str::dunder_func)));
    if (!func) return t.failFromPython("a static forward's function");
    if (!PyFunction_Check(func.get())) return t.fail("module forward is a static method of a non-Python function");
    guardClassAttributeOf(t, module, interned(Str::forward));
    return t.inlineFunction(func.get(), -1, std::move(args), std::move(kwargs));
  }
  if (!forward || !PyFunction_Check(forward)) return t.fail("module forward is not a Python function");
  guardClassAttributeOf(t, module, interned(Str::forward));
  args.insert(args.begin(), module);
  return t.inlineFunction(forward, -1, std::move(args), std::move(kwargs));
}

// A hook dict of nn.Module (an OrderedDict id -> hook, or id -> True for the
// *_with_kwargs sets): the module's own (`owner` its register) or a global one of
// torch.nn.modules.module (owner -1). Its keys are guarded; with `hooks`, its hooks are
// read through their keys.
struct HookDict {
  PyObject* dict = nullptr;  // borrowed; null when the module has none
  int reg = -1;
  bool empty() const { return !dict || PyDict_GET_SIZE(dict) == 0; }
  bool has(PyObject* key) const { return dict && PyDict_Contains(dict, key) == 1; }
};

Result<HookDict> hookDict(Tracer& t, const ValuePtr& module, const char* name) {
  HookDict h;
  Ref key = Ref::steal(PyUnicode_InternFromString(name));
  if (!key) return t.failFromPython("a hook dict's name");
  if (module) {
    h.dict = instanceDictItem(module->as<Module>().obj.get(), name);
    if (!h.dict) return h;
    h.reg = t.load(LoadKind::InstanceDict, module->reg, 0, key.get(), t.guards().sourceName(module->reg) + "." + name);
  } else {
    PyObject* mm = lookup(Obj::torch_nn_modules_module);
    if (!mm) return t.failFromPython("torch.nn.modules.module");
    h.dict = PyDict_GetItemWithError(PyModule_GetDict(mm), key.get());
    if (!h.dict) {
      if (PyErr_Occurred()) return t.failFromPython(std::string("torch.nn.modules.module.") + name);
      return h;
    }
    h.reg = t.load(LoadKind::Constant, -1, 0, h.dict, std::string("torch.nn.modules.module.") + name);
  }
  if (!PyDict_Check(h.dict)) return t.fail(std::string("module hook dict ") + name + " is not a dict");
  // Empty (the usual case): guarded empty, so a hook registered later is seen.
  if (PyDict_GET_SIZE(h.dict) == 0) t.guards().checkDictEmpty(h.reg);
  else t.guards().checkDictKeys(h.reg, h.dict);
  return h;
}

// The hooks of `dicts`, in order: (id, hook).
Done hookItems(Tracer& t, const std::vector<HookDict>& dicts, std::vector<std::pair<PyObject*, ValuePtr>>* out) {
  for (const HookDict& h : dicts) {
    if (h.empty()) continue;
    // In the dict's own order (an OrderedDict's: prepend=True moves a hook to its front).
    Ref items = Ref::steal(PyMapping_Items(h.dict));
    if (!items) return t.failFromPython("a module hook dict");
    for (Py_ssize_t i = 0; i < PyList_GET_SIZE(items.get()); ++i) {
      PyObject* kv = PyList_GET_ITEM(items.get(), i);
      PyObject* key = PyTuple_GET_ITEM(kv, 0);
      int reg = t.load(LoadKind::DictItem, h.reg, 0, key, t.guards().sourceName(h.reg) + "[<hook>]");
      Result<ValuePtr> v = t.wrap(PyTuple_GET_ITEM(kv, 1), reg);
      if (!v) return v.stop();
      out->emplace_back(key, v.take());
    }
  }
  return {};
}

ValuePtr kwargsDict(const Kwargs& kwargs) {
  std::vector<Ref> keys;
  std::vector<ValuePtr> values;
  for (const auto& [k, v] : kwargs) {
    keys.push_back(k.copy());
    values.push_back(v);
  }
  return Value::dict(reinterpret_cast<PyObject*>(&PyDict_Type), std::move(keys), std::move(values));
}

// The real object for an argument handed to Python code run at trace time: a tensor's
// fake value, constants and real objects as they are, tuples (namedtuples too), lists and
// dicts of those; null with the trace failed for anything else.
Result<Ref> realArgument(Tracer& t, const ValuePtr& v) {
  if (const Tensor* tensor = v->get<Tensor>()) return Ref::borrow(t.graph().fake(tensor->node));
  if (Ref c = toPython(t, v)) return c;
  if (v->is(Kind::Tuple) || v->is(Kind::List)) {
    const std::vector<ValuePtr>& items = *v->elements();
    Ref list = Ref::steal(PyList_New(static_cast<Py_ssize_t>(items.size())));
    if (!list) return t.failFromPython("a list");
    for (size_t i = 0; i < items.size(); ++i) {
      Result<Ref> item = realArgument(t, items[i]);
      if (!item) return item;
      PyList_SET_ITEM(list.get(), static_cast<Py_ssize_t>(i), item.take().release());
    }
    if (v->is(Kind::List)) {
      if (v->as<List>().deque) return t.fail("a deque handed to Python code run at trace time");
      return list;
    }
    Ref tuple = Ref::steal(PyList_AsTuple(list.get()));
    if (!tuple) return t.failFromPython("a tuple");
    PyObject* nt = v->as<Tuple>().namedtuple.get();
    if (!nt) return tuple;
    // A namedtuple class takes its fields; a C tuple type (structseq, torch.Size) one sequence.
    Ref made = Ref::steal(PyType_HasFeature(reinterpret_cast<PyTypeObject*>(nt), Py_TPFLAGS_HEAPTYPE)
                              ? PyObject_Call(nt, tuple.get(), nullptr)
                              : PyObject_CallOneArg(nt, tuple.get()));
    if (!made) return t.failFromPython("a namedtuple");
    return made;
  }
  if (const Dict* d = v->get<Dict>()) {
    if (d->type.get() != reinterpret_cast<PyObject*>(&PyDict_Type) || d->hasFactory())
      return t.fail("a dict subclass handed to Python code run at trace time");
    Ref out = Ref::steal(PyDict_New());
    if (!out) return t.failFromPython("a dict");
    for (size_t i = 0; i < d->keys.size(); ++i) {
      Result<Ref> item = realArgument(t, d->values[i]);
      if (!item) return item;
      if (PyDict_SetItem(out.get(), d->keys[i].get(), item->get()) < 0) return t.failFromPython("a dict");
    }
    return out;
  }
  if (PyObject* real = v->real()) return Ref::borrow(real);
  return t.fail(describe(v) + " handed to Python code run at trace time");
}

// A lazy module (torch.nn.modules.lazy.LazyModuleMixin) that still has its initialising
// pre-hook: as torch._dynamo does, what that hook does (_infer_parameters: sizes read from
// the arguments, parameters made, the hook removed, the class changed to cls_to_become)
// runs for real now, on the arguments' fake values and outside the trace's fake mode,
// before anything reads the module; the module is then traced as what it has become, its
// type guard following its new class. Eagerly the first call initialises it the same way.
Done initializeLazyModule(Tracer& t, const ValuePtr& module, const Args& args, const Kwargs& kwargs) {
  PyObject* m = module->real();
  PyObject* mixin = lookup(Obj::torch_nn_LazyModuleMixin);
  if (!mixin) return t.failFromPython("torch.nn.modules.lazy.LazyModuleMixin");
  int lazy = PyObject_IsInstance(m, mixin);
  if (lazy < 0) return t.failFromPython("isinstance of a lazy module");
  if (!lazy || !instanceDictItem(m, "_initialize_hook")) return {};
  Result<Ref> real_args = realArgument(t, Value::tuple(args));
  if (!real_args) return real_args.stop();
  Ref real_kwargs = Ref::steal(PyDict_New());
  if (!real_kwargs) return t.failFromPython("a dict");
  for (const auto& [k, v] : kwargs) {
    Result<Ref> item = realArgument(t, v);
    if (!item) return item.stop();
    if (PyDict_SetItem(real_kwargs.get(), k.get(), item->get()) < 0) return t.failFromPython("a dict");
  }
  PyObject* init = lookup(Obj::cdynamo_lazy_initialize);
  if (!init) return t.failFromPython("cdynamo._internal.lazy_modules.initialize");
  Ref r = Ref::steal(PyObject_CallFunctionObjArgs(init, m, real_args->get(), real_kwargs.get(), nullptr));
  if (!r) return t.failFromPython("initialising a lazy module");
  if (instanceDictItem(m, "_initialize_hook")) return t.fail("a lazy module still uninitialised after its initialisation");
  if (module->reg >= 0) t.guards().retype(module->reg, Py_TYPE(m));
  return {};
}

// nn.Module.__call__ (Module._call_impl): the forward pre-hooks, the forward, the forward
// hooks, global ones first, as _call_impl runs them; each hook inlined. The hook dicts'
// keys are guarded (a hook added or removed later recompiles); backward hooks are not
// modelled.
Result<ValuePtr> callModule(Tracer& t, const ValuePtr& module, Args args, Kwargs kwargs) {
  PyObject* m = module->as<Module>().obj.get();
  // A class that overrides __call__ (or _call_impl, which nn.Module.__call__ runs): what
  // the program calls is that, inlined with the module as self (the class is guarded by type).
  PyObject* base = lookup(Obj::torch_nn_Module);
  if (!base) return t.failFromPython("torch.nn.Module");
  for (const char* hook : {"__call__", "_call_impl"}) {
    Ref hook_name = Ref::steal(PyUnicode_InternFromString(hook));
    if (!hook_name) return t.failFromPython("a special method's name");
    PyObject* own = _PyType_Lookup(Py_TYPE(m), hook_name.get());
    PyObject* standard = _PyType_Lookup(reinterpret_cast<PyTypeObject*>(base), hook_name.get());
    if (own == standard) continue;
    PyObject* call_fn = _PyType_Lookup(Py_TYPE(m), interned(Str::dunder_call));
    if (!call_fn || !PyFunction_Check(call_fn)) return t.fail("the module class's __call__ is not a Python function");
    args.insert(args.begin(), module);
    return t.inlineFunction(call_fn, -1, std::move(args), std::move(kwargs));
  }
  if (Done d = initializeLazyModule(t, module, args, kwargs); !d) return d.stop();
  // Quick path: no hook of the module's own (one guard for its four dicts).
  static const char* const kOwn[] = {"_forward_hooks", "_forward_pre_hooks", "_backward_hooks", "_backward_pre_hooks"};
  bool own_hooks = false;
  for (const char* h : kOwn) {
    PyObject* d = instanceDictItem(m, h);
    if (d && (!PyDict_Check(d) || PyDict_GET_SIZE(d) != 0)) own_hooks = true;
  }
  auto get = [&](const ValuePtr& owner, const char* name, HookDict* out) -> Done {
    Result<HookDict> h = hookDict(t, owner, name);
    if (!h) return h.stop();
    *out = *h;
    return {};
  };
  HookDict g_fwd, g_pre, g_bwd, g_bwd_pre, g_fwd_kw;
  if (Done d = get(nullptr, "_global_forward_hooks", &g_fwd); !d) return d.stop();
  if (Done d = get(nullptr, "_global_forward_pre_hooks", &g_pre); !d) return d.stop();
  if (Done d = get(nullptr, "_global_backward_hooks", &g_bwd); !d) return d.stop();
  if (Done d = get(nullptr, "_global_backward_pre_hooks", &g_bwd_pre); !d) return d.stop();
  if (!g_bwd.empty() || !g_bwd_pre.empty()) return t.fail("global module backward hooks are registered (not supported yet)");
  if (!own_hooks) {
    t.guards().checkNoModuleHooks(module->reg);
    if (g_fwd.empty() && g_pre.empty()) return callForward(t, module, std::move(args), std::move(kwargs));
  }
  HookDict fwd, pre, bwd, bwd_pre, pre_kw, fwd_kw;
  if (own_hooks) {
    if (Done d = get(module, "_forward_hooks", &fwd); !d) return d.stop();
    if (Done d = get(module, "_forward_pre_hooks", &pre); !d) return d.stop();
    if (Done d = get(module, "_backward_hooks", &bwd); !d) return d.stop();
    if (Done d = get(module, "_backward_pre_hooks", &bwd_pre); !d) return d.stop();
    if (!bwd.empty() || !bwd_pre.empty()) return t.fail("module has backward hooks (not supported yet)");
    if (Done d = get(module, "_forward_pre_hooks_with_kwargs", &pre_kw); !d) return d.stop();
    if (Done d = get(module, "_forward_hooks_with_kwargs", &fwd_kw); !d) return d.stop();
  }
  if (Done d = get(nullptr, "_global_forward_hooks_with_kwargs", &g_fwd_kw); !d) return d.stop();

  std::vector<std::pair<PyObject*, ValuePtr>> pre_hooks, fwd_hooks;
  if (Done d = hookItems(t, {g_pre, pre}, &pre_hooks); !d) return d.stop();
  if (Done d = hookItems(t, {g_fwd, fwd}, &fwd_hooks); !d) return d.stop();
  ValuePtr kw = kwargsDict(kwargs);
  for (auto& [id, hook] : pre_hooks) {
    if (pre_kw.has(id)) {
      Result<ValuePtr> r = call(t, hook, {module, Value::tuple(args), kw}, {});
      if (!r) return r;
      if ((*r)->isNone()) continue;
      const Tuple* pair = (*r)->get<Tuple>();
      if (!pair || pair->items.size() != 2)
        return t.raiseNew(PyExc_RuntimeError, "forward pre-hook must return None or a tuple of (new_args, new_kwargs)");
      std::vector<ValuePtr> new_args;
      if (Done d = iterate(t, pair->items[0], &new_args); !d) return d.stop();
      if (!pair->items[1]->is(Kind::Dict)) return t.fail("a forward pre-hook's new kwargs are not a dict");
      args = std::move(new_args);
      kw = pair->items[1];
    } else {
      Result<ValuePtr> r = call(t, hook, {module, Value::tuple(args)}, {});
      if (!r) return r;
      if ((*r)->isNone()) continue;
      if (const Tuple* items = (*r)->get<Tuple>()) args = items->items;
      else args = {r.take()};
    }
  }
  Kwargs fkw;
  const Dict& kd = kw->as<Dict>();
  for (size_t i = 0; i < kd.keys.size(); ++i) {
    if (!PyUnicode_Check(kd.keys[i].get())) return t.fail("keyword arguments that are not strings");
    fkw.emplace_back(kd.keys[i].copy(), kd.values[i]);
  }
  Result<ValuePtr> result = callForward(t, module, args, std::move(fkw));
  if (!result) return result;
  ValuePtr out = result.take();
  for (auto& [id, hook] : fwd_hooks) {
    const bool with_kwargs = fwd_kw.has(id) || g_fwd_kw.has(id);
    Result<ValuePtr> r = with_kwargs ? call(t, hook, {module, Value::tuple(args), kw, out}, {})
                                     : call(t, hook, {module, Value::tuple(args), out}, {});
    if (!r) return r;
    if (!(*r)->isNone()) out = r.take();
  }
  return out;
}

}  // namespace

namespace {

// os.environ[key] (which os.environ.get, `key in os.environ` and os.getenv all come to):
// the variable read now, folded, and guarded by that variable alone (os.getenv(key)
// answers the same on each call). Traced through, _Environ.__getitem__ reads os.environ's
// whole `_data` dict, which guards every variable of the process: one set later by anyone
// (inductor's compile sets some) would reject the entry. NotHandled for any other
// _Environ (os.environb) and a key that is not a constant str: traced as Python.
Result<ValuePtr> readEnvironVariable(Tracer& t, std::vector<ValuePtr>& args,
                                     std::vector<std::pair<Ref, ValuePtr>>& kwargs) {
  if (args.size() != 2 || !kwargs.empty()) return notHandled();
  PyObject* env = args[0]->real();
  PyObject* key = args[1]->constant();
  if (!env || !key || !PyUnicode_CheckExact(key)) return notHandled();
  PyObject* os = lookup(Obj::os_module);
  PyObject* getenv = lookup(Obj::os_getenv);
  if (!os || !getenv) return t.failFromPython("os.getenv");
  Ref current = Ref::steal(PyObject_GetAttrString(os, "environ"));
  if (!current) return t.failFromPython("os.environ");
  if (current.get() != env) return notHandled();
  Ref query = Ref::steal(PyTuple_Pack(1, key));
  Ref value = query ? Ref::steal(PyObject_Call(getenv, query.get(), nullptr)) : Ref();
  if (!value) return t.raisePython();
  if (value.get() != Py_None && !PyUnicode_CheckExact(value.get())) return notHandled();
  if (args[0]->reg >= 0) t.guards().checkIdentity(args[0]->reg, env);
  t.guards().checkStateQuery(getenv, query.get(), nullptr, value.get());
  if (value.get() == Py_None) {
    PyErr_SetObject(PyExc_KeyError, key);
    return t.raisePython();
  }
  return Value::constant(value.get());
}

// torch._dynamo wraps nn.Module.__init__ (and __setstate__) once it has compiled anything
// (mutation_guard.install_generation_tagging_init): the wrapper calls the original, then
// tags the module in torch._dynamo's own weak registry. That tag is torch._dynamo's
// bookkeeping, not the program's: a module made in cdynamo's trace runs the original.
PyObject* unwrapDynamoGenerationTagging(PyObject* func) {
  PyFunctionObject* fo = reinterpret_cast<PyFunctionObject*>(func);
  PyCodeObject* co = reinterpret_cast<PyCodeObject*>(fo->func_code);
  if (PyUnicode_CompareWithASCIIString(co->co_name, "patched_init") != 0 &&
      PyUnicode_CompareWithASCIIString(co->co_name, "patched_setstate") != 0)
    return func;
  PyObject* module = PyDict_GetItemString(fo->func_globals, "__name__");
  if (!module || !PyUnicode_Check(module) || PyUnicode_CompareWithASCIIString(module, "torch._dynamo.mutation_guard") != 0)
    return func;
  if (!fo->func_closure || PyTuple_GET_SIZE(fo->func_closure) != 1) return func;
  PyObject* original = PyCell_GET(PyTuple_GET_ITEM(fo->func_closure, 0));
  return original && PyFunction_Check(original) ? original : func;
}

// torch._dynamo, on its first compile, wraps every torch.optim optimizer's _init_group in
// its disable (TorchPatcher.patch), and then never honours that wrapper itself: it runs
// _init_group eagerly while tracing the step instead of calling it. cdynamo traces the
// original (the state it creates on the first step is made in the graph and stored in
// opt.state by the replay), so a process that used torch.compile once traces steps as one
// that did not, instead of breaking the graph at every param group's _init_group.
PyObject* unwrapOptimizerInitGroupDisable(PyObject* func) {
  PyFunctionObject* fo = reinterpret_cast<PyFunctionObject*>(func);
  if (!isDisabledCodeObject(fo->func_code) || !fo->func_dict) return func;
  PyObject* original = PyDict_GetItemString(fo->func_dict, "__wrapped__");
  if (!original || !PyFunction_Check(original)) return func;
  PyFunctionObject* of = reinterpret_cast<PyFunctionObject*>(original);
  if (!of->func_name || PyUnicode_CompareWithASCIIString(of->func_name, "_init_group") != 0) return func;
  const char* module = of->func_module && PyUnicode_Check(of->func_module) ? PyUnicode_AsUTF8(of->func_module) : nullptr;
  if (!module) return PyErr_Clear(), func;
  return strncmp(module, "torch.optim.", 12) == 0 ? original : func;
}

// A torch.optim optimizer's _init_group on its first step creates the state it reads
// (exp_avg, step, ...) and appends it to the lists it is given. Traced, that state would be
// made in the graph and the next step would compile again for the state it then finds. As
// torch._dynamo does, _init_group runs for real instead, for every param group, when some
// parameter with a gradient has no state yet (eagerly the step makes the same state before
// it updates anything: it reads only shapes, dtypes and the group's settings), and the
// frame is traced again, now reading that state as inputs. Only torch.optim's own
// _init_group (making missing state is all it does for the effect); the lists given must
// be empty lists made in the trace, as every torch.optim step passes them.
Result<ValuePtr> createOptimizerStateForReal(Tracer& t, PyObject* func, const std::vector<ValuePtr>& args,
                                            const std::vector<std::pair<Ref, ValuePtr>>& kwargs) {
  PyFunctionObject* fo = reinterpret_cast<PyFunctionObject*>(func);
  if (!fo->func_name || PyUnicode_CompareWithASCIIString(fo->func_name, "_init_group") != 0) return notHandled();
  const char* module = fo->func_module && PyUnicode_Check(fo->func_module) ? PyUnicode_AsUTF8(fo->func_module) : nullptr;
  if (!module) return PyErr_Clear(), notHandled();
  if (strncmp(module, "torch.optim.", 12) != 0 || !kwargs.empty() || args.size() < 2) return notHandled();
  const Object* self = args[0]->get<Object>();
  PyObject* optimizer_type = lookup(Obj::torch_optim_Optimizer);
  if (!optimizer_type) return PyErr_Clear(), notHandled();
  if (!self || self->owned || PyObject_IsInstance(self->obj.get(), optimizer_type) != 1) return PyErr_Clear(), notHandled();
  for (size_t i = 2; i < args.size(); ++i) {
    const List* l = args[i]->get<List>();
    if (!l || !l->items.empty() || args[i]->reg >= 0) return notHandled();
  }
  PyObject* helper = lookup(Obj::cdynamo_create_optimizer_state);
  if (!helper) return t.failFromPython("cdynamo._internal.optimizer_state");
  Ref ran = Ref::steal(PyObject_CallFunction(helper, "OOn", func, self->obj.get(), static_cast<Py_ssize_t>(args.size() - 2)));
  if (!ran) return t.failFromPython("the optimizer's _init_group, run to create its state");
  if (ran.get() != Py_True) return notHandled();
  t.retrace_requested = true;
  return t.fail("the optimizer's state was created by its _init_group, run for real; the frame is traced again");
}

// torch.optim's update functions have two variants, picked by their `capturable` keyword.
// The other one is written for eager steps: it reads the step count as a Python number
// (`_get_value`, which keeps it a tensor while compiling) and then branches on it (RAdam's
// rectification, `if rho_t > 5.0`) or passes it where a Python scalar is needed (ASGD's
// `alpha=-eta`): graph breaks inside the loop over the parameters. The capturable variant
// computes the same update with tensor ops only (torch.where for the branch), so a traced
// step passes capturable=True wherever the program passes False to a function of
// torch.optim, as torch._dynamo does (it reads every param group's "capturable" as True).
// The device checks of that variant run only eagerly; the param groups themselves are not
// touched, so eager steps before and after a compiled one are unchanged.
void traceOptimizerUpdateAsCapturable(PyObject* func, std::vector<std::pair<Ref, ValuePtr>>& kwargs) {
  if (kwargs.empty()) return;
  PyFunctionObject* fo = reinterpret_cast<PyFunctionObject*>(func);
  const char* module = fo->func_module && PyUnicode_Check(fo->func_module) ? PyUnicode_AsUTF8(fo->func_module) : nullptr;
  if (!module) return PyErr_Clear();
  if (strncmp(module, "torch.optim.", 12) != 0) return;
  for (auto& [name, value] : kwargs)
    if (PyUnicode_CompareWithASCIIString(name.get(), "capturable") == 0 && value && value->constant() == Py_False)
      value = Value::constant(Py_True);
}

}  // namespace

Result<ValuePtr> Tracer::inlineFunction(PyObject* func, int func_reg, std::vector<ValuePtr> args,
                                        std::vector<std::pair<Ref, ValuePtr>> kwargs) {
  if (func == lookup(Obj::os_Environ_getitem)) {
    Result<ValuePtr> r = readEnvironVariable(*this, args, kwargs);
    if (!r.notHandled()) return r;
  }
  if (PyObject* original = unwrapDynamoGenerationTagging(func); original != func) {
    func = original;
    func_reg = -1;  // the wrapper's closure holds it for as long as the wrapper is installed
  }
  if (PyObject* original = unwrapOptimizerInitGroupDisable(func); original != func) {
    func = original;
    func_reg = -1;  // as above: the wrapper, guarded as the class attribute, holds it
  }
  if (Result<ValuePtr> r = createOptimizerStateForReal(*this, func, args, kwargs); !r.notHandled()) return r;
  traceOptimizerUpdateAsCapturable(func, kwargs);
  if (Result<ValuePtr> r = callDefaultTorchFunction(*this, func, args, kwargs); !r.notHandled()) return r;
  if (Result<ValuePtr> r = foldPurePythonFunction(*this, func, args, kwargs); !r.notHandled()) return r;
  PyFunctionObject* fo = reinterpret_cast<PyFunctionObject*>(func);
  if (isDisabledCodeObject(fo->func_code)) return fail(disabledReason(fo->func_qualname));
  return inlineCode(reinterpret_cast<PyCodeObject*>(fo->func_code), fo->func_globals, fo->func_builtins,
                    fo->func_closure, nullptr, fo->func_defaults, fo->func_kwdefaults, nullptr, nullptr, func_reg,
                    std::move(args), std::move(kwargs));
}

}  // namespace cdynamo::trace
