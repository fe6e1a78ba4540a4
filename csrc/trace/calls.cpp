// Calls: what calling each kind of value does (a graph op, inlined Python, a table row, a
// container or tensor method, a partial, a context manager used as a decorator).
#include <cstring>
#include <string>

#include "trace/call_rules.h"
#include "trace/callables.h"
#include "trace/disabled.h"
#include "trace/ops.h"
#include "trace/scalars.h"
#include "trace/tracer.h"

namespace cdynamo::trace {

using graph::NodeOp;
using guards::LoadKind;

namespace {

DisabledCodeQuery disabled_query = nullptr;

Result<ValuePtr> callModule(Tracer& t, const ValuePtr& module, Args args, Kwargs kwargs);

// A named method of a container, tensor or context value.
Result<ValuePtr> callNamedMethod(Tracer& t, const NamedMethod& m, Args& args, Kwargs& kwargs) {
  const ValuePtr& self = m.self;
  if (self->is(Kind::Context)) {
    const char* mname = PyUnicode_AsUTF8(m.name.get());
    if (strcmp(mname, "__exit__") == 0) return t.contexts().exit(self);
    if (strcmp(mname, "__enter__") == 0) return t.contexts().enter(self);
    return t.fail(std::string("context manager method ") + mname + " is not supported");
  }
  if (!self->is(Kind::Tensor)) return callContainerMethod(t, self, m.name.get(), args, kwargs);
  // Reading the tensor's value into Python: stops the trace, or (with
  // capture_scalar_outputs) records Tensor.item() as torch._dynamo does (scalars.h).
  static const char* const kValueReads[][2] = {
      {"item", "item"}, {"tolist", "tolist"}, {"__bool__", "bool"}, {"__int__", "int"}, {"__float__", "float"}};
  if (args.empty() && kwargs.empty())
    for (const auto& read : kValueReads)
      if (PyUnicode_CompareWithASCIIString(m.name.get(), read[0]) == 0) return readTensorValue(t, self, read[1]);
  // A tensor method: x.relu(), x.view(2, 3), x.size() (a metadata query answers as a constant).
  args.insert(args.begin(), self);
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
    const Context& tmpl = p.context->as<Context>();
    std::vector<ValuePtr> ctx_args = tmpl.args;
    std::vector<std::pair<Ref, ValuePtr>> no_kw;
    for (ValuePtr& a : ctx_args)
      if (!a) a = Value::constant(Py_None);
    Result<ValuePtr> ctx = t.contexts().make(tmpl.cls.get(), ctx_args, no_kw);
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
      args.insert(args.begin(), m.self);
      PyObject* function = m.function.get();
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
      return Value::of(Partial{args[0], Value::tuple({}), Value::emptyDict(), fn});
    }
    case Kind::Cell:
    case Kind::Super:
    case Kind::Namespace:
      break;
  }
  return t.fail(std::string("calling a ") + kindName(fn->kind()) + " is not supported");
}

Result<ValuePtr> callCallable(Tracer& t, const ValuePtr& fn, Args args, Kwargs kwargs) {
  PyObject* f = fn->real();
  // Before anything that looks at the callable's name or module: functools.wraps gives a
  // disabled wrapper the __module__ of what it wraps (a torch function, say).
  if (PyFunction_Check(f) && isDisabledCodeObject(PyFunction_GET_CODE(f)))
    return t.fail(disabledReason(reinterpret_cast<PyFunctionObject*>(f)->func_qualname));
  if (CallRule rule = callRuleOf(f); rule != CallRule::None) return applyCallRule(t, rule, f, args, kwargs);
  if (fn->as<Callable>().owned) {  // a C method bound to an object the trace made: run it on constants
    Ref pargs = toPython(t, Value::tuple(args));
    if (!pargs || !kwargs.empty()) return t.fail("a method of an object made in the trace called with non-constants");
    Ref r = Ref::steal(PyObject_Call(f, pargs.get(), nullptr));
    if (!r) return t.raisePython();
    return fromPython(t, r.get());
  }
  if (const CallableRow* row = findCallable(f)) {
    if (row->builtin) return callBuiltin(t, f, *row, args, kwargs);
    Result<ValuePtr> r = row->handler(t, f, row->name, args, kwargs);
    if (!r.notHandled()) return r;  // a special callable that does not take these arguments: the rules decide
  }
  return callByRules(t, fn, args, kwargs);
}

namespace {

// nn.Module.__call__: its forward inlined, once no hook would run.
Result<ValuePtr> callModule(Tracer& t, const ValuePtr& module, Args args, Kwargs kwargs) {
  PyObject* m = module->as<Module>().obj.get();
  // Inlining forward skips Module.__call__, which is only right while no hook would run:
  // check now, and guard that the module's own hook dicts stay empty.
  static const char* const kHookDicts[] = {"_forward_hooks", "_forward_pre_hooks", "_backward_hooks",
                                           "_backward_pre_hooks"};
  for (const char* h : kHookDicts) {
    PyObject* d = instanceDictItem(m, h);
    if (d && (!PyDict_Check(d) || PyDict_GET_SIZE(d) != 0))
      return t.fail(std::string("module has ") + h + " (hooks are not supported yet)");
  }
  t.guards().checkNoModuleHooks(module->reg);
  static const char* const kGlobalHooks[] = {"_global_forward_hooks", "_global_forward_pre_hooks",
                                             "_global_backward_hooks", "_global_backward_pre_hooks"};
  PyObject* mm = lookup(Obj::torch_nn_modules_module);
  if (!mm) return t.failFromPython("torch.nn.modules.module");
  for (const char* h : kGlobalHooks) {
    Ref d = Ref::steal(PyObject_GetAttrString(mm, h));
    if (!d) {
      PyErr_Clear();
      continue;
    }
    Py_ssize_t n = PyObject_Length(d.get());
    if (n < 0) return t.failFromPython(std::string("global module hooks (") + h + ")");
    if (n != 0) return t.fail(std::string("global module hooks are registered (") + h + ")");
    // A hook registered later must be seen: the dict (an OrderedDict torch keeps for the
    // process, held by its module) is guarded empty.
    if (PyDict_Check(d.get()))
      t.guards().checkDictEmpty(t.load(LoadKind::Constant, -1, 0, d.get(), std::string("torch.nn.modules.module.") + h));
  }
  if (PyObject* own_forward = instanceDictItem(m, "forward")) {
    int reg = t.load(LoadKind::InstanceDict, module->reg, 0, interned(Str::forward),
                   t.guards().sourceName(module->reg) + ".forward");
    Result<ValuePtr> f = t.wrap(own_forward, reg);
    if (!f) return f;
    return call(t, *f, std::move(args), std::move(kwargs));
  }
  PyObject* forward = _PyType_Lookup(Py_TYPE(m), interned(Str::forward));
  if (!forward || !PyFunction_Check(forward)) return t.fail("module forward is not a Python function");
  guardClassAttributeOf(t, module, interned(Str::forward));
  args.insert(args.begin(), module);
  return t.inlineFunction(forward, -1, std::move(args), std::move(kwargs));
}

}  // namespace

Result<ValuePtr> Tracer::inlineFunction(PyObject* func, int func_reg, std::vector<ValuePtr> args,
                                        std::vector<std::pair<Ref, ValuePtr>> kwargs) {
  PyFunctionObject* fo = reinterpret_cast<PyFunctionObject*>(func);
  if (isDisabledCodeObject(fo->func_code)) return fail(disabledReason(fo->func_qualname));
  return inlineCode(reinterpret_cast<PyCodeObject*>(fo->func_code), fo->func_globals, fo->func_builtins,
                    fo->func_closure, nullptr, fo->func_defaults, fo->func_kwdefaults, nullptr, nullptr, func_reg,
                    std::move(args), std::move(kwargs));
}

}  // namespace cdynamo::trace
