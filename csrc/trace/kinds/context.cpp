// torch's global-state context managers inside a trace (contexts.h).
#include <cstring>
#include <string>


#include "support/lookup.h"
#include "trace/engine/scalars.h"
#include "trace/kinds/context.h"
#include "trace/protocol/constants.h"
#include "trace/tracer.h"

namespace cdynamo::trace {

namespace {

// Null: the profiler's contexts (torch.profiler.profile/record_function and their
// torch.autograd.profiler twins), which torch._dynamo treats as doing nothing inside a
// graph: no profiling happens in the compiled region, and the graph has no node for them.
// HooksDisabled: torch.autograd.graph.disable_saved_tensors_hooks(message), a contextlib
// function in torch, modelled as torch._dynamo does: the switch is set when it is made and
// put back on exit.
// SdpaKernel: torch.nn.attention.sdpa_kernel(backends, set_priority), another contextlib
// function: the backends are set on entry and those found then are put back on exit.
enum class Ctx { None, NoGrad, EnableGrad, SetGradEnabled, InferenceMode, Autocast, Null, HooksDisabled, SdpaKernel };

// The torch functions the contexts need, all found (false, no error set, otherwise: then
// no class is a context the tracer knows).
bool contextFunctionsFound() {
  static const Obj kNeeded[] = {Obj::torch_no_grad,         Obj::torch_enable_grad,
                                Obj::torch_set_grad_enabled, Obj::torch_inference_mode,
                                Obj::torch_autocast,        Obj::torch_set_grad_enabled_C,
                                Obj::torch_is_grad_enabled, Obj::torch_enter_inference_mode,
                                Obj::torch_exit_inference_mode, Obj::torch_enter_autocast,
                                Obj::torch_exit_autocast};
  for (Obj o : kNeeded)
    if (!lookup(o)) return PyErr_Clear(), false;
  return true;
}

// lookup() of an object contextFunctionsFound() has found.
PyObject* fn(Obj o) { return lookup(o); }

Ctx kindOf(PyObject* cls) {
  if (!contextFunctionsFound()) return Ctx::None;
  if (cls == fn(Obj::torch_no_grad)) return Ctx::NoGrad;
  if (cls == fn(Obj::torch_enable_grad)) return Ctx::EnableGrad;
  if (cls == fn(Obj::torch_set_grad_enabled)) return Ctx::SetGradEnabled;
  if (cls == fn(Obj::torch_inference_mode)) return Ctx::InferenceMode;
  PyObject* amp_autocast = lookup(Obj::torch_amp_autocast);
  if (!amp_autocast) PyErr_Clear();
  if (cls == fn(Obj::torch_autocast) || (amp_autocast && cls == amp_autocast)) return Ctx::Autocast;
  PyObject* hooks = lookup(Obj::torch_disable_saved_tensors_hooks);
  if (!hooks) PyErr_Clear();
  if (hooks && cls == hooks) return Ctx::HooksDisabled;
  PyObject* sdpa = lookup(Obj::torch_sdpa_kernel);
  if (!sdpa) PyErr_Clear();
  if (sdpa && cls == sdpa) return Ctx::SdpaKernel;
  for (Obj o : {Obj::torch_profiler_profile, Obj::torch_profiler_record_function, Obj::torch_autograd_profiler_profile,
                Obj::torch_autograd_profiler_record_function}) {
    PyObject* c = lookup(o);
    if (!c) PyErr_Clear();
    if (c && cls == c) return Ctx::Null;
  }
  return Ctx::None;
}

std::vector<graph::Arg> single(graph::Arg a) {
  std::vector<graph::Arg> v;
  v.push_back(std::move(a));
  return v;
}

bool gradEnabled() {
  Ref r = Ref::steal(PyObject_CallNoArgs(fn(Obj::torch_is_grad_enabled)));
  if (!r) PyErr_Clear();
  return r.get() == Py_True;
}

}  // namespace

bool Contexts::isContextClass(PyObject* cls) { return kindOf(cls) != Ctx::None; }

bool Contexts::setMode(bool mode) {
  if (gradEnabled() == mode) return true;
  int node = t_.graph().addEffect(fn(Obj::torch_set_grad_enabled_C), single(graph::Arg::ofConst(mode ? Py_True : Py_False)),
                                  /*located=*/false);
  if (node < 0) return false;
  grad_mode_nodes_.insert(node);
  return true;
}

Result<ValuePtr> Contexts::setGradEnabled(const ValuePtr& mode) {
  if (!contextFunctionsFound()) return t_.fail("torch._C._set_grad_enabled: torch's grad-mode functions not found");
  PyObject* c = mode->constant();
  if (!c || !PyBool_Check(c)) return t_.fail("torch._C._set_grad_enabled() of something other than a constant bool");
  // Recorded even when the mode is already that: torch._dynamo coalesces only the changes
  // its grad-mode context objects make, not the program's own calls of the binding (its
  // graphs, and the op counts PyTorch's tests check, have them).
  if (t_.graph().addEffect(fn(Obj::torch_set_grad_enabled_C), single(graph::Arg::ofConst(c))) < 0)
    return t_.failFromPython("torch._C._set_grad_enabled");
  return Value::constant(Py_None);
}

bool Contexts::gradMode() { return gradEnabled(); }

Result<ValuePtr> Contexts::wrapExit(PyObject* self, PyObject* func, int self_reg) {
  PyObject* cls = reinterpret_cast<PyObject*>(Py_TYPE(self));
  PyObject* state_exit_cls = lookup(Obj::cdynamo_resume_StateExit);
  if (!state_exit_cls) return t_.failFromPython("cdynamo._internal.frame_rebuild.StateExit");
  if (cls == state_exit_cls) return wrapStateExit(self, func, self_reg);
  Ctx k = kindOf(cls);
  if (k != Ctx::NoGrad && k != Ctx::EnableGrad && k != Ctx::SetGradEnabled) return notHandled();
  Ref exit = Ref::steal(PyObject_GetAttr(cls, interned(Str::dunder_exit)));
  if (!exit) PyErr_Clear();
  if (exit.get() != func) return notHandled();
  PyObject** dict = _PyObject_GetDictPtr(self);
  PyObject* prev = dict && *dict ? PyDict_GetItemString(*dict, "prev") : nullptr;
  if (!prev || !PyBool_Check(prev)) return t_.fail("a grad-mode context's __exit__ before its __enter__");
  if (self_reg >= 0) {
    t_.guards().checkType(self_reg, Py_TYPE(self));
    int prev_reg = t_.load(guards::LoadKind::InstanceDict, self_reg, 0, interned(Str::prev),
                        t_.guards().sourceName(self_reg) + ".prev");
    t_.guards().checkEquals(prev_reg, prev);
  }
  Context ctx{Ref::borrow(cls), {}, -1, prev == Py_True};
  return Value::namedMethod(Value::of(std::move(ctx)), interned(Str::dunder_exit));
}

Result<ValuePtr> Contexts::wrapStateExit(PyObject* self, PyObject* func, int self_reg) {
  // The __exit__ planExit rebuilt for a state context's block (frame_rebuild.StateExit): the
  // same Context again, with the state it restores guarded to stay what this trace saw.
  Ref exit = Ref::steal(PyObject_GetAttr(reinterpret_cast<PyObject*>(Py_TYPE(self)), interned(Str::dunder_exit)));
  if (!exit) return t_.failFromPython("StateExit.__exit__");
  if (exit.get() != func) return notHandled();
  PyObject** dict = _PyObject_GetDictPtr(self);
  PyObject* fields[3] = {nullptr, nullptr, nullptr};
  const Str names[3] = {Str::state_kind, Str::state_target, Str::prev};
  for (int i = 0; i < 3; ++i) {
    fields[i] = dict && *dict ? PyDict_GetItemWithError(*dict, interned(names[i])) : nullptr;
    if (!fields[i]) return PyErr_Occurred() ? t_.failFromPython("StateExit") : t_.fail("a StateExit without its state");
    if (self_reg >= 0) {
      if (i == 0) t_.guards().checkType(self_reg, Py_TYPE(self));
      int reg = t_.load(guards::LoadKind::InstanceDict, self_reg, 0, interned(names[i]),
                        t_.guards().sourceName(self_reg) + "." + PyUnicode_AsUTF8(interned(names[i])));
      t_.guards().checkEquals(reg, fields[i]);
    }
  }
  // The block goes on here: torch._dynamo's resume function enters it again, so its graph
  // starts by setting the state (already in force: the entry set it before the break).
  if (PyUnicode_CompareWithASCIIString(fields[0], "saved_tensors_hooks") == 0) {
    PyObject* hooks = lookup(Obj::torch_disable_saved_tensors_hooks);
    if (!hooks) return t_.failFromPython("torch.autograd.graph.disable_saved_tensors_hooks");
    Context ctx{Ref::borrow(hooks), {Value::constant(fields[1])}, -1, false, Ref::borrow(fields[2])};
    if (Done d = setHooksMessage(fields[1]); !d) return d.stop();
    return Value::namedMethod(Value::of(std::move(ctx)), interned(Str::dunder_exit));
  }
  if (PyUnicode_CompareWithASCIIString(fields[0], "sdpa_kernel") == 0 && PyTuple_Check(fields[1]) &&
      PyTuple_GET_SIZE(fields[1]) == 2 && PyTuple_Check(fields[2]) && PyTuple_GET_SIZE(fields[2]) == 2) {
    PyObject* sdpa = lookup(Obj::torch_sdpa_kernel);
    if (!sdpa) return t_.failFromPython("torch.nn.attention.sdpa_kernel");
    PyObject* backends = PyTuple_GET_ITEM(fields[1], 0);
    PyObject* priority = PyTuple_GET_ITEM(fields[1], 1);
    Context ctx{Ref::borrow(sdpa), {Value::constant(backends), Value::constant(priority)}, -1, false,
                Ref::borrow(PyTuple_GET_ITEM(fields[2], 0))};
    if (Done d = setSdpaBackends(backends, priority == Py_True); !d) return d.stop();
    return Value::namedMethod(Value::of(std::move(ctx)), interned(Str::dunder_exit));
  }
  return t_.fail("a StateExit of an unknown state");
}

Done Contexts::planExit(const ValuePtr& value, runtime::OutputPlan* plan) {
  // The bound __exit__ of a real context object that restores the mode saved on entry:
  // cdynamo._internal.frame_rebuild.grad_mode_exit(cls, prev).
  const Context& ctx = value->as<Context>();
  Ctx k = kindOf(ctx.cls.get());
  if (k == Ctx::Null) {
    PyObject* null_exit = lookup(Obj::cdynamo_resume_null_exit);
    if (!null_exit) return t_.failFromPython("cdynamo._internal.frame_rebuild.null_exit");
    plan->step = runtime::plan::Call{Ref::borrow(null_exit), {}};
    return {};
  }
  // A break inside sdpa_kernel's block is not resumed: on the first call the code after the
  // break saw the backends as they were before the block (not understood yet), so the frame
  // runs natively there, as before.
  if (k == Ctx::SdpaKernel)
    return t_.fail("graph break inside an sdpa_kernel block (not resumed: the frame runs natively)");
  if (k == Ctx::HooksDisabled || k == Ctx::SdpaKernel) {
    // The graph ended outside the block (leaveAtBreak): state_exit sets its state again and
    // gives the __exit__ that restores what the block found.
    PyObject* helper = lookup(Obj::cdynamo_resume_state_exit);
    if (!helper) return t_.failFromPython("cdynamo._internal.frame_rebuild.state_exit");
    Ref kind, target, prev;
    if (k == Ctx::HooksDisabled) {
      kind = Ref::steal(PyUnicode_FromString("saved_tensors_hooks"));
      target = Ref::borrow(ctx.args[0]->constant());
      prev = ctx.saved_state.copy();
    } else {
      if (!ctx.saved_state) return t_.fail("graph break inside an sdpa_kernel block not entered in the trace");
      kind = Ref::steal(PyUnicode_FromString("sdpa_kernel"));
      target = Ref::steal(PyTuple_Pack(2, ctx.args[0]->constant(), ctx.args[1]->constant()));
      prev = Ref::steal(PyTuple_Pack(2, ctx.saved_state.get(), ctx.args[1]->constant()));
    }
    if (!kind || !target || !prev) return t_.failFromPython("state_exit");
    std::vector<runtime::OutputPlan> args(3);
    args[0] = runtime::OutputPlan::constant(kind.get());
    args[1] = runtime::OutputPlan::constant(target.get());
    args[2] = runtime::OutputPlan::constant(prev.get());
    plan->step = runtime::plan::Call{Ref::borrow(helper), std::move(args)};
    return {};
  }
  if (k != Ctx::NoGrad && k != Ctx::EnableGrad && k != Ctx::SetGradEnabled)
    return t_.fail("graph break inside a `with` block of a context manager other than no_grad/enable_grad/set_grad_enabled");
  PyObject* helper = lookup(Obj::cdynamo_resume_grad_mode_exit);
  if (!helper) return t_.failFromPython("cdynamo._internal.frame_rebuild.grad_mode_exit");
  std::vector<runtime::OutputPlan> args(2);
  args[0] = runtime::OutputPlan::constant(ctx.cls.get());
  args[1] = runtime::OutputPlan::constant(ctx.saved_grad_mode ? Py_True : Py_False);
  plan->step = runtime::plan::Call{Ref::borrow(helper), std::move(args)};
  return {};
}

Done Contexts::planObject(const ValuePtr& value, runtime::OutputPlan* plan) {
  // A context object made in the trace and alive at a graph break (not entered, or its
  // `with` block not begun yet): a real one of the same class and state, made without
  // changing the grad mode.
  const Context& ctx = value->as<Context>();
  Ctx k = kindOf(ctx.cls.get());
  // A profiler object (`with profile() as p`, p used later): the trace dropped what it
  // would have recorded, and a stand-in would answer differently; torch._dynamo does not
  // rebuild one either.
  if (k == Ctx::Null) return t_.fail("a profiler context object alive at a graph break (the trace ignores what it records)");
  if (k != Ctx::NoGrad && k != Ctx::EnableGrad && k != Ctx::SetGradEnabled)
    return t_.fail("a context object other than no_grad/enable_grad/set_grad_enabled alive at a graph break");
  PyObject* helper = lookup(Obj::cdynamo_resume_grad_mode_object);
  if (!helper) return t_.failFromPython("cdynamo._internal.frame_rebuild.grad_mode_object");
  std::vector<runtime::OutputPlan> items;
  for (const ValuePtr& a : ctx.args) items.push_back(runtime::OutputPlan::constant(a ? a->constant() : Py_None));
  std::vector<runtime::OutputPlan> args(3);
  args[0] = runtime::OutputPlan::constant(ctx.cls.get());
  args[1] = runtime::OutputPlan::constant(ctx.saved_grad_mode ? Py_True : Py_False);
  args[2].step = runtime::plan::Tuple{std::move(items)};
  plan->step = runtime::plan::Call{Ref::borrow(helper), std::move(args)};
  return {};
}

Result<ValuePtr> Contexts::make(PyObject* cls, std::vector<ValuePtr>& args,
                                std::vector<std::pair<Ref, ValuePtr>>& kwargs) {
  Ctx k = kindOf(cls);
  Context ctx{Ref::borrow(cls), {}, -1, false};
  // The profiler's contexts do nothing in the trace, whatever their arguments.
  if (k == Ctx::Null) return Value::of(std::move(ctx));
  // torch.no_grad(f) / torch.enable_grad(f): the class called on a function is the
  // function decorated by a fresh context (their __new__ does cls()(f)).
  if ((k == Ctx::NoGrad || k == Ctx::EnableGrad) && args.size() == 1 && kwargs.empty() &&
      !args[0]->is(Kind::Constant)) {
    ValuePtr func = args[0];
    return decorate(Value::of(std::move(ctx)), func);
  }
  if (k == Ctx::SdpaKernel) return makeSdpaKernel(std::move(ctx), args, kwargs);
  std::vector<ValuePtr>& items = ctx.args;
  for (const ValuePtr& a : args) {
    if (!a->is(Kind::Constant)) return t_.fail("context manager arguments must be constants");
    items.push_back(a);
  }
  // Keyword arguments, in the order of each constructor's parameters.
  static const char* const kAutocastParams[] = {"device_type", "dtype", "enabled", "cache_enabled"};
  for (auto& [key, val] : kwargs) {
    if (!val->is(Kind::Constant)) return t_.fail("context manager arguments must be constants");
    const char* name = PyUnicode_AsUTF8(key.get());
    size_t pos = SIZE_MAX;
    if (k == Ctx::Autocast) {
      for (size_t i = 0; i < 4; ++i)
        if (strcmp(name, kAutocastParams[i]) == 0) pos = i;
    } else if ((k == Ctx::InferenceMode && strcmp(name, "mode") == 0) ||
               (k == Ctx::SetGradEnabled && strcmp(name, "mode") == 0) ||
               (k == Ctx::HooksDisabled && strcmp(name, "error_message") == 0)) {
      pos = 0;
    }
    if (pos == SIZE_MAX) return t_.fail(std::string("unknown keyword '") + name + "' of a context manager");
    while (items.size() <= pos) items.push_back(nullptr);
    items[pos] = val;
  }
  if (k == Ctx::SetGradEnabled) {
    // set_grad_enabled(b) changes the mode when it is called, with or without `with`.
    if (items.empty() || !items[0]) return t_.fail("set_grad_enabled() needs a mode");
    ctx.saved_grad_mode = gradEnabled();
    int t = PyObject_IsTrue(items[0]->constant());
    if (t < 0) return t_.failFromPython("set_grad_enabled");
    if (!setMode(t != 0)) return t_.failFromPython("set_grad_enabled");
  }
  if (k == Ctx::HooksDisabled) {
    // Made: the switch is set now, and put back on exit to what it is now.
    if (items.size() != 1 || !items[0] || !PyUnicode_Check(items[0]->constant()))
      return t_.fail("disable_saved_tensors_hooks() needs one message string");
    Result<Ref> prev = hooksMessage();
    if (!prev) return prev.stop();
    ctx.saved_state = prev.take();
    if (Done d = setHooksMessage(items[0]->constant()); !d) return d.stop();
  }
  return Value::of(std::move(ctx));
}

Result<ValuePtr> Contexts::makeSdpaKernel(Context ctx, std::vector<ValuePtr>& args,
                                          std::vector<std::pair<Ref, ValuePtr>>& kwargs) {
  // sdpa_kernel(backends, set_priority=False): one SDPBackend or a list of them, kept as a
  // tuple without repeats (as the function does); nothing changes until it is entered.
  ValuePtr backends = args.size() > 0 ? args[0] : nullptr;
  ValuePtr priority = args.size() > 1 ? args[1] : nullptr;
  if (args.size() > 2) return t_.fail("sdpa_kernel() with more than two arguments");
  for (auto& [key, val] : kwargs) {
    if (PyUnicode_CompareWithASCIIString(key.get(), "backends") == 0 && !backends) backends = val;
    else if (PyUnicode_CompareWithASCIIString(key.get(), "set_priority") == 0 && !priority) priority = val;
    else return t_.fail("sdpa_kernel() with these keyword arguments");
  }
  if (!backends) return t_.fail("sdpa_kernel() needs its backends");
  Ref sdpa_backend = Ref::borrow(lookup(Obj::torch_sdpa_backend));
  if (!sdpa_backend) return t_.failFromPython("torch.nn.attention.SDPBackend");
  // The backends: objects of the program (SDPBackend.MATH, read through guarded loads) or
  // constants, alone or in a list.
  std::vector<ValuePtr> given;
  if (backends->is(Kind::List)) {
    given = backends->as<List>().items;
  } else {
    PyObject* one = backends->real();
    int is_backend = one ? PyObject_IsInstance(one, sdpa_backend.get()) : 0;
    if (is_backend < 0) return t_.failFromPython("sdpa_kernel");
    if (!is_backend)
      return t_.fail("sdpa_kernel() of something other than an SDPBackend or a list of them (AssertionError)");
    given.push_back(backends);
  }
  Ref unique = Ref::steal(PyList_New(0));
  if (!unique) return t_.failFromPython("sdpa_kernel");
  for (const ValuePtr& item : given) {
    PyObject* b = item->real();
    if (!b) return t_.fail("sdpa_kernel() of a list holding something other than SDPBackend");
    int is_backend = PyObject_IsInstance(b, sdpa_backend.get());
    if (is_backend < 0) return t_.failFromPython("sdpa_kernel");
    if (!is_backend) return t_.fail("sdpa_kernel() of a list holding something other than SDPBackend");
    int seen = PySequence_Contains(unique.get(), b);
    if (seen < 0) return t_.failFromPython("sdpa_kernel");
    if (!seen && PyList_Append(unique.get(), b) < 0) return t_.failFromPython("sdpa_kernel");
  }
  Ref as_tuple = Ref::steal(PyList_AsTuple(unique.get()));
  PyObject* p = priority ? priority->constant() : Py_False;
  if (!as_tuple || !p) return t_.fail("sdpa_kernel() with a set_priority that is not a constant");
  int on = PyObject_IsTrue(p);
  if (on < 0) return t_.failFromPython("sdpa_kernel");
  ctx.args = {Value::constant(as_tuple.get()), Value::constant(on ? Py_True : Py_False)};
  return Value::of(std::move(ctx));
}

Result<Ref> Contexts::sdpaBackends(bool priority) {
  PyObject* query = lookup(Obj::torch_sdpa_kernel_current);
  if (!query) return t_.failFromPython("torch.nn.attention._cur_sdpa_kernel_backends");
  Ref args = Ref::steal(PyTuple_Pack(1, priority ? Py_True : Py_False));
  Ref r = args ? Ref::steal(PyObject_Call(query, args.get(), nullptr)) : Ref();
  Ref as_tuple = r && PyList_Check(r.get()) ? Ref::steal(PyList_AsTuple(r.get())) : Ref();
  if (!as_tuple) return t_.failFromPython("torch.nn.attention._cur_sdpa_kernel_backends");
  // Read before the trace set them: the caller's, guarded (the list compared).
  if (!sdpa_set_) t_.guards().checkStateQuery(query, args.get(), nullptr, r.get());
  return as_tuple;
}

Done Contexts::setSdpaBackends(PyObject* backends, bool priority) {
  // As torch._dynamo records it: each backend made from its name in the graph, then the
  // setter on the list of them. Applied now (addEffect runs each call for real).
  PyObject* from_string = lookup(Obj::torch_sdpa_backend_from_string);
  PyObject* setter = lookup(Obj::torch_sdpa_kernel_set);
  if (!from_string || !setter) return t_.failFromPython("torch.nn.attention._sdpa_kernel");
  Result<Ref> prev = sdpaBackends(priority);
  if (!prev) return prev.stop();
  std::vector<graph::Arg> items;
  for (Py_ssize_t i = 0; i < PyTuple_GET_SIZE(backends); ++i) {
    Ref name = Ref::steal(PyObject_GetAttrString(PyTuple_GET_ITEM(backends, i), "name"));
    if (!name) return t_.failFromPython("SDPBackend.name");
    int node = t_.graph().addEffect(from_string, single(graph::Arg::ofConst(name.get())), false);
    if (node < 0) return t_.failFromPython("torch.nn.attention._backend_from_string");
    items.push_back(graph::Arg::ofNode(node));
  }
  std::vector<graph::Arg> args;
  args.push_back(graph::Arg::ofItems(graph::Arg::Kind::List, std::move(items)));
  args.push_back(graph::Arg::ofConst(priority ? Py_True : Py_False));
  if (t_.graph().addEffect(setter, std::move(args), false) < 0) return t_.failFromPython("torch.nn.attention._sdpa_kernel");
  Ref prev_list = Ref::steal(PySequence_List(prev->get()));
  Ref undo_args = prev_list ? Ref::steal(PyTuple_Pack(2, prev_list.get(), priority ? Py_True : Py_False)) : Ref();
  if (!undo_args) return t_.failFromPython("sdpa_kernel");
  Undo_ undo;
  undo.fn = Ref::borrow(setter);
  undo.args = std::move(undo_args);
  undo_.push_back(std::move(undo));
  sdpa_set_ = true;
  return {};
}

Result<ValuePtr> Contexts::forCall(const ValuePtr& value) {
  const Context& tmpl = value->as<Context>();
  const Ctx k = kindOf(tmpl.cls.get());
  if (k == Ctx::HooksDisabled) return value;
  if (k == Ctx::SdpaKernel)  // its arguments were checked when it was made: a fresh copy of them
    return Value::of(Context{tmpl.cls.copy(), tmpl.args, -1, false, Ref()});
  std::vector<ValuePtr> ctx_args = tmpl.args;
  std::vector<std::pair<Ref, ValuePtr>> no_kw;
  for (ValuePtr& a : ctx_args)
    if (!a) a = Value::constant(Py_None);
  return make(tmpl.cls.get(), ctx_args, no_kw);
}

Done Contexts::leaveAtBreak(const std::vector<ValuePtr>& stack) {
  for (size_t i = stack.size(); i > 0; --i) {
    const NamedMethod* m = stack[i - 1] ? stack[i - 1]->get<NamedMethod>() : nullptr;
    if (!m || !m->self->is(Kind::Context) || PyUnicode_CompareWithASCIIString(m->name.get(), "__exit__") != 0) continue;
    Ctx k = kindOf(m->self->as<Context>().cls.get());
    if (k != Ctx::HooksDisabled && k != Ctx::SdpaKernel) continue;
    if (Result<ValuePtr> r = exit(m->self); !r) return r.stop();
  }
  return {};
}

Result<ValuePtr> Contexts::decorate(const ValuePtr& value, const ValuePtr& func) {
  const Context& ctx = value->as<Context>();
  // set_grad_enabled(mode)(f) undoes the change its construction made: the mode applies
  // around each call of f only.
  if (kindOf(ctx.cls.get()) == Ctx::SetGradEnabled && !setMode(ctx.saved_grad_mode))
    return t_.failFromPython("set_grad_enabled(mode)(function)");
  return Value::of(Partial{func, Value::tuple({}), Value::emptyDict(), value});
}

Result<ValuePtr> Contexts::enter(const ValuePtr& value) {
  // A `with` in a generator may span a yield: the consumer would then run inside it, which
  // the context stack (one per trace, not per frame) does not model.
  if (t_.inGenerator()) return t_.fail("a context manager inside a generator (it may be open across a yield)");
  Context& ctx = value->as<Context>();
  const Ctx kind = kindOf(ctx.cls.get());
  switch (kind) {
    case Ctx::NoGrad:
    case Ctx::EnableGrad: {
      ctx.saved_grad_mode = gradEnabled();
      if (!setMode(kind == Ctx::EnableGrad)) return t_.failFromPython("no_grad");
      return Value::constant(Py_None);
    }
    case Ctx::SetGradEnabled: {
      // set_grad_enabled.__enter__ sets its mode again: the program may have changed the
      // mode between making the object and entering it.
      int on = ctx.args.empty() || !ctx.args[0] ? -1 : PyObject_IsTrue(ctx.args[0]->constant());
      if (on < 0) return t_.failFromPython("set_grad_enabled");
      if (!setMode(on != 0)) return t_.failFromPython("set_grad_enabled");
      return Value::constant(Py_None);
    }
    case Ctx::InferenceMode: {
      PyObject* mode = ctx.args.empty() || !ctx.args[0] ? Py_True : ctx.args[0]->constant();
      int node = t_.graph().addEffect(fn(Obj::torch_enter_inference_mode), single(graph::Arg::ofConst(mode)), false);
      if (node < 0) return t_.failFromPython("inference_mode");
      ctx.enter_node = node;
      open_.push_back({Ref::borrow(fn(Obj::torch_exit_inference_mode)), Ref::borrow(t_.graph().fake(node))});
      return Value::constant(Py_None);
    }
    case Ctx::Autocast: {
      std::vector<graph::Arg> args;
      for (size_t i = 0; i < 4; ++i)
        args.push_back(graph::Arg::ofConst(i < ctx.args.size() && ctx.args[i] ? ctx.args[i]->constant()
                                           : i == 2 ? Py_True : Py_None));
      int node = t_.graph().addEffect(fn(Obj::torch_enter_autocast), std::move(args), false);
      if (node < 0) return t_.failFromPython("autocast");
      ctx.enter_node = node;
      open_.push_back({Ref::borrow(fn(Obj::torch_exit_autocast)), Ref::borrow(t_.graph().fake(node))});
      return Value::constant(Py_None);
    }
    case Ctx::HooksDisabled: {
      // Set when made; set again only where something changed it since (a decorated
      // function called a second time: its first call's exit put the switch back).
      Result<Ref> now = hooksMessage();
      if (!now) return now.stop();
      int same = PyObject_RichCompareBool(now->get(), ctx.args[0]->constant(), Py_EQ);
      if (same < 0) return t_.failFromPython("disable_saved_tensors_hooks");
      if (!same)
        if (Done d = setHooksMessage(ctx.args[0]->constant()); !d) return d.stop();
      return Value::constant(Py_None);
    }
    case Ctx::SdpaKernel: {
      const bool priority = ctx.args[1]->constant() == Py_True;
      Result<Ref> prev = sdpaBackends(priority);
      if (!prev) return prev.stop();
      ctx.saved_state = prev.take();
      if (Done d = setSdpaBackends(ctx.args[0]->constant(), priority); !d) return d.stop();
      return Value::emptyDict();  // what the generator yields
    }
    case Ctx::Null:
      return value;  // profile.__enter__ and record_function.__enter__ return the object
    case Ctx::None:
      break;
  }
  return t_.fail("entering an unknown context manager");
}

Result<ValuePtr> Contexts::exit(const ValuePtr& value) {
  const Context& ctx = value->as<Context>();
  const Ctx kind = kindOf(ctx.cls.get());
  switch (kind) {
    case Ctx::NoGrad:
    case Ctx::EnableGrad:
    case Ctx::SetGradEnabled:
      if (!setMode(ctx.saved_grad_mode)) return t_.failFromPython("leaving a grad-mode context");
      return Value::constant(Py_None);
    case Ctx::InferenceMode:
    case Ctx::Autocast: {
      PyObject* exit_fn = kind == Ctx::Autocast ? fn(Obj::torch_exit_autocast)
                                                                  : fn(Obj::torch_exit_inference_mode);
      if (t_.graph().addEffect(exit_fn, single(graph::Arg::ofNode(ctx.enter_node)), false) < 0)
        return t_.failFromPython("leaving a context");
      for (size_t i = open_.size(); i > 0; --i)
        if (open_[i - 1].handle.get() == t_.graph().fake(ctx.enter_node)) {
          open_.erase(open_.begin() + static_cast<std::ptrdiff_t>(i - 1));
          break;
        }
      return Value::constant(Py_None);
    }
    case Ctx::HooksDisabled:
      if (Done d = setHooksMessage(ctx.saved_state.get()); !d) return d.stop();
      return Value::constant(Py_None);
    case Ctx::SdpaKernel:
      if (!ctx.saved_state) return t_.fail("leaving an sdpa_kernel block that was not entered");
      if (Done d = setSdpaBackends(ctx.saved_state.get(), ctx.args[1]->constant() == Py_True); !d) return d.stop();
      return Value::constant(Py_None);
    case Ctx::Null:
      return Value::constant(Py_None);
    case Ctx::None:
      break;
  }
  return t_.fail("leaving an unknown context manager");
}

namespace {

// What undoes a setter the trace applied, when the trace ends: the state before it, read
// now (autocast's is restored after every translation already, with grad mode).
//  * Push: a level pushed on functorch's interpreter stack, popped by `pair`;
//  * Pop: a level popped; it cancels the innermost level the trace pushed, or (a level the
//    frame was called under) is pushed again by `pair`, which needs no arguments;
//  * Switch: a flag set; `pair` reads it, and the setter is called again with what it read;
//  * Once: a loader that does its work the first time only (the node is still recorded).
enum class Undo { None, DefaultDtype, HooksMessage, Push, Pop, Switch, Once, Opposite };
// Which transform a functorch level belongs to (a Pop of a vmap level pushed outside the
// frame cannot be undone: pushing it again needs the batch size it had).
// A forward-AD dual level (kDual) is not on functorch's stack but leaks the same way.
enum Family : int { kNoFamily = 0, kGrad, kJvp, kVmap, kDual };

struct SetterRow {
  Obj fn;
  Undo undo;
  Obj pair;
  int family;
  const char* name;
  // `located`: the node has the program's stack trace (torch._dynamo records some of these
  // through handlers of their own that give none; print_readable shows which). `returns`:
  // what it returns is the program's value (autocast's nesting depth), else None.
  bool located = true;
  bool returns = false;
};

constexpr Obj kNoObj = Obj::torch_set_default_dtype;  // `pair` of the rows that have none

const SetterRow kSetters[] = {
    {Obj::torch_set_default_dtype, Undo::DefaultDtype, kNoObj, kNoFamily, "torch.set_default_dtype"},
    {Obj::torch_saved_tensors_hooks_disable, Undo::HooksMessage, kNoObj, kNoFamily, "the saved-tensors-hooks switch"},
    {Obj::torch_saved_tensors_hooks_enable, Undo::HooksMessage, kNoObj, kNoFamily, "the saved-tensors-hooks switch"},
    {Obj::torch_set_autocast_enabled, Undo::None, kNoObj, kNoFamily, "torch.set_autocast_enabled", false},
    {Obj::torch_set_autocast_dtype, Undo::None, kNoObj, kNoFamily, "torch.set_autocast_dtype"},
    {Obj::torch_set_autocast_cache_enabled, Undo::None, kNoObj, kNoFamily, "torch.set_autocast_cache_enabled", false},
    {Obj::torch_clear_autocast_cache, Undo::None, kNoObj, kNoFamily, "torch.clear_autocast_cache"},
    // The autocast nesting depth: undone by the other call of the pair.
    {Obj::torch_autocast_increment_nesting, Undo::Opposite, Obj::torch_autocast_decrement_nesting, kNoFamily,
     "torch.autocast_increment_nesting", false, true},
    {Obj::torch_autocast_decrement_nesting, Undo::Opposite, Obj::torch_autocast_increment_nesting, kNoFamily,
     "torch.autocast_decrement_nesting", false, true},
    // functorch's transforms, as torch/_functorch's Python drives them (the predispatch
    // wrappers are what torch._dynamo's graphs call for vmap and jvp; grad calls the
    // bindings themselves).
    {Obj::functorch_grad_increment, Undo::Push, Obj::functorch_grad_decrement, kGrad, "_grad_increment_nesting"},
    {Obj::functorch_grad_decrement, Undo::Pop, Obj::functorch_grad_increment, kGrad, "_grad_decrement_nesting"},
    {Obj::functorch_jvp_increment, Undo::Push, Obj::functorch_jvp_decrement, kJvp, "_jvp_increment_nesting"},
    {Obj::functorch_jvp_decrement, Undo::Pop, Obj::functorch_jvp_increment, kJvp, "_jvp_decrement_nesting"},
    {Obj::functorch_pd_jvp_increment, Undo::Push, Obj::functorch_jvp_decrement, kJvp, "_jvp_increment_nesting"},
    {Obj::functorch_pd_jvp_decrement, Undo::Pop, Obj::functorch_jvp_increment, kJvp, "_jvp_decrement_nesting"},
    {Obj::functorch_vmap_increment, Undo::Push, Obj::functorch_vmap_decrement, kVmap, "_vmap_increment_nesting"},
    {Obj::functorch_vmap_decrement, Undo::Pop, kNoObj, kVmap, "_vmap_decrement_nesting"},
    {Obj::functorch_pd_vmap_increment, Undo::Push, Obj::functorch_vmap_decrement, kVmap, "_vmap_increment_nesting"},
    {Obj::functorch_pd_vmap_decrement, Undo::Pop, kNoObj, kVmap, "_vmap_decrement_nesting"},
    {Obj::functorch_pd_enter_dual_level, Undo::Push, Obj::torch_C_exit_dual_level, kDual, "_enter_dual_level"},
    {Obj::functorch_pd_exit_dual_level, Undo::Pop, kNoObj, kDual, "_exit_dual_level"},
    {Obj::torch_C_enter_dual_level, Undo::Push, Obj::torch_C_exit_dual_level, kDual, "_enter_dual_level"},
    {Obj::torch_C_exit_dual_level, Undo::Pop, kNoObj, kDual, "_exit_dual_level"},
    {Obj::functorch_set_inplace_requires_grad_allowed, Undo::Switch, Obj::functorch_get_inplace_requires_grad_allowed,
     kNoFamily, "set_inplace_requires_grad_allowed"},
    {Obj::torch_C_set_fwd_grad_enabled, Undo::Switch, Obj::torch_C_is_fwd_grad_enabled, kNoFamily,
     "torch._C._set_fwd_grad_enabled"},
    {Obj::functorch_pd_lazy_load_decompositions, Undo::Once, kNoObj, kNoFamily, "lazy_load_decompositions"},
    {Obj::forward_ad_maybe_load_decompositions, Undo::Once, kNoObj, kNoFamily, "_maybe_load_decompositions"},
};

bool isFunctorchRow(const SetterRow& r) {
  return r.family != kNoFamily || r.undo == Undo::Switch || r.undo == Undo::Once;
}

}  // namespace

bool Contexts::noteFunctorchState() {
  if (functorch_guarded_) return true;
  PyObject* state_fn = lookup(Obj::cdynamo_state_functorch_state);
  Ref no_args = Ref::steal(PyTuple_New(0));
  Ref state = state_fn && no_args ? Ref::steal(PyObject_Call(state_fn, no_args.get(), nullptr)) : Ref();
  if (!state) return false;
  t_.guards().checkStateQuery(state_fn, no_args.get(), nullptr, state.get());
  functorch_guarded_ = true;
  return true;
}

bool Contexts::functorchLevelPushed() const {
  for (const Undo_& u : undo_)
    if (u.family != kNoFamily && u.pushed) return true;
  return false;
}

Result<ValuePtr> Contexts::callStateSetter(PyObject* f, std::vector<ValuePtr>& args,
                                           std::vector<std::pair<Ref, ValuePtr>>& kwargs, bool program_call) {
  const SetterRow* row = nullptr;
  for (const SetterRow& r : kSetters) {
    PyObject* o = lookup(r.fn);
    if (!o) PyErr_Clear();
    if (o && o == f) {
      row = &r;
      break;
    }
  }
  if (!row) return notHandled();
  const std::string name = row->name;
  std::vector<graph::Arg> gargs;
  for (const ValuePtr& a : args) {
    PyObject* c = a->constant();
    if (c) {
      gargs.push_back(graph::Arg::ofConst(c));
      continue;
    }
    // A vmap level's batch size may be symbolic (a size under dynamic shapes): functorch
    // takes a SymInt, and the node takes the size's graph value.
    if (row->family == kVmap && row->undo == Undo::Push && isScalarValue(t_, a)) {
      gargs.push_back(graph::Arg::ofNode(a->as<Tensor>().node));
      continue;
    }
    return t_.fail(name + "() of something other than a constant");
  }
  // Keyword arguments: only _exit_dual_level(level=) takes one.
  std::vector<std::pair<Ref, graph::Arg>> gkwargs;
  for (auto& [k, v] : kwargs) {
    PyObject* c = v->constant();
    if (!c || row->family != kDual) return t_.fail(name + "() with keyword arguments");
    gkwargs.emplace_back(Ref::borrow(k.get()), graph::Arg::ofConst(c));
  }
  // The functorch state the frame was called under is the graph's (the levels it numbers,
  // the switches it flips back): guarded once, before the trace changes it.
  if (isFunctorchRow(*row) && !noteFunctorchState()) return t_.failFromPython("functorch's interpreter stack");
  Undo_ undo;
  undo.family = row->family;
  size_t cancels = SIZE_MAX;  // the undo entry of the level a Pop takes off
  switch (row->undo) {
    case Undo::None:
    case Undo::Once:
      break;
    case Undo::DefaultDtype: {
      Ref prev = Ref::steal(PyObject_CallNoArgs(lookup(Obj::torch_get_default_dtype)));
      if (!prev) return t_.failFromPython("torch.get_default_dtype");
      undo.fn = Ref::borrow(f);
      undo.args = Ref::steal(PyTuple_Pack(1, prev.get()));
      break;
    }
    case Undo::HooksMessage: {
      PyObject* query = lookup(Obj::torch_saved_tensors_hooks_message);
      Ref prev = query ? Ref::steal(PyObject_CallNoArgs(query)) : Ref();
      if (!prev) return t_.failFromPython("the saved-tensors-hooks switch");
      undo.fn = Ref::borrow(lookup(prev.get() == Py_None ? Obj::torch_saved_tensors_hooks_enable
                                                         : Obj::torch_saved_tensors_hooks_disable));
      undo.args = prev.get() == Py_None ? Ref::steal(PyTuple_New(0)) : Ref::steal(PyTuple_Pack(1, prev.get()));
      hooks_message_set_ = true;
      break;
    }
    case Undo::Push:
      undo.fn = Ref::borrow(lookup(row->pair));
      undo.args = Ref::steal(PyTuple_New(0));
      undo.pushed = true;
      break;
    case Undo::Pop: {
      // The innermost level the trace pushed, if any: popping it needs no undo of its own.
      for (size_t i = undo_.size(); i > 0; --i)
        if (undo_[i - 1].pushed) {
          cancels = i - 1;
          break;
        }
      if (cancels == SIZE_MAX) {
        if (row->pair == kNoObj)
          return t_.fail(name + "() popping a vmap level pushed before the frame started (it could not be "
                                "pushed again when the trace ends)");
        undo.fn = Ref::borrow(lookup(row->pair));
        undo.args = Ref::steal(PyTuple_New(0));
      }
      break;
    }
    case Undo::Opposite:  // autocast's nesting depth: the other call of the pair
      undo.fn = Ref::borrow(lookup(row->pair));
      undo.args = Ref::steal(PyTuple_New(0));
      break;
    case Undo::Switch: {
      Ref prev = Ref::steal(PyObject_CallNoArgs(lookup(row->pair)));
      if (!prev) return t_.failFromPython(name);
      undo.fn = Ref::borrow(f);
      undo.args = Ref::steal(PyTuple_Pack(1, prev.get()));
      break;
    }
  }
  const bool needs_undo = row->undo != Undo::None && row->undo != Undo::Once && cancels == SIZE_MAX;
  if (needs_undo && (!undo.fn || !undo.args)) return t_.failFromPython(name);
  if (row->returns && !nesting_changed_) {
    // The depth the trace answers with depends on the caller's: guarded, as read before
    // the trace's first change of it.
    PyObject* depth_now = lookup(Obj::cdynamo_state_autocast_nesting);
    Ref depth = depth_now ? Ref::steal(PyObject_CallNoArgs(depth_now)) : Ref();
    Ref none = Ref::steal(PyTuple_New(0));
    if (!depth || !none) return t_.failFromPython("autocast's nesting depth");
    t_.guards().checkStateQuery(depth_now, none.get(), nullptr, depth.get());
    nesting_changed_ = true;
  }
  // addEffect runs the setter for real (its result is the node's value): applied now.
  int node = t_.graph().addEffect(f, std::move(gargs), program_call && row->located, std::move(gkwargs));
  if (node < 0) return t_.raisePython();
  if (row->family == kDual && row->undo == Undo::Push) {
    // The dual level is left by its number: _exit_dual_level(level=n).
    undo.kwargs = Ref::steal(PyDict_New());
    if (!undo.kwargs || PyDict_SetItemString(undo.kwargs.get(), "level", t_.graph().fake(node)) < 0)
      return t_.failFromPython(name);
  }
  if (cancels != SIZE_MAX) undo_.erase(undo_.begin() + static_cast<std::ptrdiff_t>(cancels));
  if (needs_undo) undo_.push_back(std::move(undo));
  PyObject* result = t_.graph().fake(node);
  // The nesting bindings answer the level they pushed or popped, autocast's the depth: a
  // constant of this entry (the state it runs under is guarded). torch._dynamo answers with
  // what the trace saw too: a program that branches on it is answered as of the trace.
  if (result != Py_None && !((row->family != kNoFamily || row->returns) && PyLong_CheckExact(result)))
    return t_.fail(name + "() returned something other than None");
  return Value::constant(result);
}

Result<ValuePtr> Contexts::readFunctorchState(PyObject* f, std::vector<ValuePtr>& args) {
  static const Obj kReaders[] = {Obj::functorch_stack_depth, Obj::functorch_maybe_current_level,
                                 Obj::functorch_current_level, Obj::functorch_get_inplace_requires_grad_allowed,
                                 Obj::torch_C_is_fwd_grad_enabled};
  bool known = false;
  for (Obj o : kReaders) {
    PyObject* r = lookup(o);
    if (!r) PyErr_Clear();
    if (r && r == f) known = true;
  }
  if (!known) return notHandled();
  if (!args.empty()) return t_.fail("a functorch state reader called with arguments");
  // What these answer follows from the state the frame started with (guarded as a whole)
  // and the changes the trace made since: folded without a guard of their own, which would
  // compare the state at the frame's start with what the trace made of it.
  if (!noteFunctorchState()) return t_.failFromPython("functorch's interpreter stack");
  Ref r = Ref::steal(PyObject_CallNoArgs(f));
  if (!r) return t_.raisePython();
  return Value::constant(r.get());
}

Result<ValuePtr> Contexts::readSavedTensorsHooksMessage(PyObject* f, std::vector<ValuePtr>& args) {
  PyObject* query = lookup(Obj::torch_saved_tensors_hooks_message);
  if (!query) PyErr_Clear();
  if (!query || f != query) return notHandled();
  if (!args.empty()) return t_.fail("_saved_tensors_hooks_get_disabled_error_message() with arguments");
  Result<Ref> r = hooksMessage();
  if (!r) return r.stop();
  return Value::constant(r->get());
}

Result<Ref> Contexts::hooksMessage() {
  PyObject* query = lookup(Obj::torch_saved_tensors_hooks_message);
  if (!query) return t_.failFromPython("the saved-tensors-hooks switch");
  Ref r = Ref::steal(PyObject_CallNoArgs(query));
  if (!r) return t_.failFromPython("the saved-tensors-hooks switch");
  // Read before the trace changed it: the message the frame was called with, guarded.
  // After: what the trace set (the same on every call of the entry).
  if (!hooks_message_set_) {
    Ref none = Ref::steal(PyTuple_New(0));
    if (!none) return t_.failFromPython("the saved-tensors-hooks switch");
    t_.guards().checkStateQuery(query, none.get(), nullptr, r.get());
  }
  return r;
}

Done Contexts::setHooksMessage(PyObject* message) {
  const bool enable = message == Py_None;
  PyObject* setter = lookup(enable ? Obj::torch_saved_tensors_hooks_enable : Obj::torch_saved_tensors_hooks_disable);
  if (!setter) return t_.failFromPython("the saved-tensors-hooks switch");
  std::vector<ValuePtr> args;
  if (!enable) args.push_back(Value::constant(message));
  std::vector<std::pair<Ref, ValuePtr>> no_kw;
  Result<ValuePtr> r = callStateSetter(setter, args, no_kw, /*program_call=*/false);
  if (!r) return r.stop();
  return {};
}

void Contexts::restore() {
  PyObject *type, *value, *tb;
  PyErr_Fetch(&type, &value, &tb);  // kept across the calls below, restored at the end
  // In reverse: a functorch level the trace left pushed (it ended early, or the program
  // does not pop it) is popped here, or every later op of the process would run under it.
  while (!undo_.empty()) {
    Undo_ u = std::move(undo_.back());
    undo_.pop_back();
    Ref r = Ref::steal(PyObject_Call(u.fn.get(), u.args.get(), u.kwargs.get()));
    if (!r) PyErr_Clear();
  }
  if (functorch_depth_at_start_ >= 0) {
    PyObject* depth_fn = lookup(Obj::functorch_stack_depth);
    PyObject* undo_to = lookup(Obj::functorch_undo_to_depth);
    Ref depth = depth_fn ? Ref::steal(PyObject_CallNoArgs(depth_fn)) : Ref();
    long now = depth ? PyLong_AsLong(depth.get()) : -1;
    if (now > functorch_depth_at_start_ && undo_to) {
      Ref to = Ref::steal(PyLong_FromLong(functorch_depth_at_start_));
      Ref r = to ? Ref::steal(PyObject_CallOneArg(undo_to, to.get())) : Ref();
      if (!r) PyErr_Clear();
    }
    if (!depth || !undo_to) PyErr_Clear();
  }
  while (!open_.empty()) {
    Open c = std::move(open_.back());
    open_.pop_back();
    Ref r = Ref::steal(PyObject_CallOneArg(c.exit_fn.get(), c.handle.get()));
    if (!r) PyErr_Clear();
  }
  if (contextFunctionsFound()) {
    Ref r = Ref::steal(PyObject_CallOneArg(fn(Obj::torch_set_grad_enabled_C), grad_mode_at_start_ ? Py_True : Py_False));
    if (!r) PyErr_Clear();
  }
  PyErr_Restore(type, value, tb);
}

}  // namespace cdynamo::trace
