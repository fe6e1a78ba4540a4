// Driving one translation: set up the root frame, run it, turn the returned value into an
// output plan, build the FX graph and hand it to the backend; and how the trace fails.
#include "graph/fake_autograd.h"
#include "graph/torch_refs.h"
#include "support/lookup.h"
#include "support/stats.h"
#include "support/torch_types.h"
#include "trace/engine/frame.h"
#include "trace/protocol/calls.h"
#include "trace/protocol/constants.h"
#include "trace/tracer.h"

#include <algorithm>
#include <string>
#include <unordered_set>


namespace cdynamo::trace {

namespace {

std::string utf8(PyObject* s) {
  const char* c = s && PyUnicode_Check(s) ? PyUnicode_AsUTF8(s) : nullptr;
  return c ? c : "?";
}

// The pending Python error, normalized, with its traceback attached (null when none).
Ref fetchException() {
  PyObject *type = nullptr, *value = nullptr, *tb = nullptr;
  PyErr_Fetch(&type, &value, &tb);
  if (type) PyErr_NormalizeException(&type, &value, &tb);
  Ref type_ref = Ref::steal(type), value_ref = Ref::steal(value), tb_ref = Ref::steal(tb);
  if (value_ref && tb_ref) PyException_SetTraceback(value_ref.get(), tb_ref.get());
  return value_ref;
}

// Raises cdynamo.exc.<cls>(message), chained to the pending exception if any.
void raiseChained(Obj cls, const std::string& message) {
  Ref cause = fetchException();
  PyObject* exc_type = lookup(cls);
  if (!exc_type) return;
  Ref exc = Ref::steal(PyObject_CallFunction(exc_type, "s", message.c_str()));
  if (!exc) return;
  if (cause) PyException_SetCause(exc.get(), cause.release());
  PyErr_SetObject(exc_type, exc.get());
}

}  // namespace

Stop Tracer::fail(std::string reason) {
  if (!failed_) {
    failed_ = true;
    unsupported_.reason = std::move(reason);
    setLocation(&unsupported_);
    const SymbolicFrame* root = current_;
    while (root && root->parent) root = root->parent;
    if (root && root->root && !stopped_at_break_ && root->pc < root->instrs.size()) {
      fail_index_ = static_cast<int>(root->pc);
      fail_visit_ = root_visits_[root->pc];
    }
  }
  return Stop{Outcome::Unsupported};
}

Stop Tracer::failFakeCall(const std::string& what) {
  const bool first = !failed_;
  Stop stop = failFromPython(what);
  if (first) unsupported_.fake_call_raised = true;
  return stop;
}

BreakTarget Tracer::failedAt() const {
  BreakTarget t;
  t.index = fail_index_;
  t.visit = fail_visit_;
  t.why = unsupported_;
  return t;
}

Stop Tracer::failFromPython(const std::string& what) {
  PyObject *type, *value, *tb;
  PyErr_Fetch(&type, &value, &tb);
  Ref type_ref = Ref::steal(type), value_ref = Ref::steal(value), tb_ref = Ref::steal(tb);
  // A Python MemoryError is the tracer running out of memory as much as a std::bad_alloc
  // is (compile_miss.cpp): said the same way.
  std::string msg = type && PyErr_GivenExceptionMatches(type, PyExc_MemoryError)
                        ? "out of memory while tracing (" + what + ")"
                        : what;
  if (type) {
    msg += ": ";
    msg += reinterpret_cast<PyTypeObject*>(type)->tp_name;
    if (value) {
      Ref s = Ref::steal(PyObject_Str(value));
      if (s) msg += ": " + utf8(s.get());
    }
  }
  PyErr_Clear();
  if (msg.size() > 400) msg = msg.substr(0, 397) + "...";
  return fail(msg);
}

void Tracer::setLocation(Unsupported* u) {
  std::vector<const SymbolicFrame*> chain;
  for (const SymbolicFrame* f = current_; f; f = f->parent) chain.push_back(f);
  std::string stack;
  for (auto it = chain.rbegin(); it != chain.rend(); ++it) {
    const SymbolicFrame* f = *it;
    int offset = f->pc < f->instrs.size() ? f->instrs[f->pc].offset : 0;
    int line = PyCode_Addr2Line(const_cast<PyCodeObject*>(f->code), offset * 2);
    stack += "  " + utf8(f->code->co_filename) + ":" + std::to_string(line) + " in " + utf8(f->code->co_qualname) + "\n";
    u->filename = utf8(f->code->co_filename);
    u->line = line;
    u->function = utf8(f->code->co_qualname);
  }
  if (chain.empty()) {
    u->filename = utf8(root_view_.code->co_filename);
    u->line = root_view_.code->co_firstlineno;
    u->function = utf8(root_view_.code->co_qualname);
  }
  u->user_stack = stack;
}

int Tracer::locationId(SymbolicFrame* f) {
  if (!f) return -1;
  if (f->loc_pc == f->pc) return f->loc_id;
  int parent = locationId(f->parent);
  int offset = f->pc < f->instrs.size() ? f->instrs[f->pc].offset : 0;
  f->loc_id = graph_.internLocation(parent, reinterpret_cast<PyObject*>(f->code), offset * 2);
  f->loc_pc = f->pc;
  return f->loc_id;
}

// torch.fx keeps every GraphModule's generated source for good (linecache and its loader's
// cache, under a fresh name each); cdynamo drops it when the graph module dies
// (eval_frame.forget_source_on_death). Done here, where every graph module is built, so that
// graphs no backend sees (no ops, a failed compile) are covered: a few per generated program
// in a fuzzer run, tens of MB over 100,000 programs.
static bool forgetSourceOnDeath(PyObject* gm) {
  PyObject* eval_frame = lookup(Obj::cdynamo_eval_frame);
  if (!eval_frame) return false;
  return Ref::steal(PyObject_CallMethod(eval_frame, "forget_source_on_death", "O", gm)).get() != nullptr;
}

Done Tracer::compileGraph(bool compile_empty) {
  std::vector<int> inputs_used;
  int op_count = 0;
  Ref gm = graph_.buildGraphModule(outputs_.graphOutputs(), &inputs_used, &op_count);
  if (!gm) return failFromPython("building the FX graph");
  if (!forgetSourceOnDeath(gm.get())) return failFromPython("registering the FX source's removal");
  int asserts = graph_.runtimeAssertsNeeded();
  if (asserts < 0) return failFromPython("the graph's runtime asserts");
  if (asserts) {
    PyObject* shapes = lookup(Obj::cdynamo_shapes);
    Ref ops = shapes ? Ref::steal(PyObject_CallMethod(shapes, "insert_runtime_asserts", "OOs", gm.get(),
                                                      graph_.shapeEnv(), entry_->name.c_str()))
                     : Ref();
    if (!ops) return failFromPython("inserting the graph's runtime asserts");
    op_count = static_cast<int>(PyLong_AsLong(ops.get()));
    if (op_count < 0) return failFromPython("inserting the graph's runtime asserts");
    if (!forgetSourceOnDeath(gm.get())) return failFromPython("registering the FX source's removal");
  }
  // Nothing for a backend to do: no graph, unless `compile_empty`. The output plan may still
  // read graph outputs that are graph inputs (a symbolic size alive at a break is its
  // symbol's placeholder): then the graph module itself returns them, no backend involved
  // (torch._dynamo compiles no graph there either).
  const bool passthrough = op_count == 0 && !compile_empty && !outputs_.graphOutputs().empty();
  entry_->no_ops = op_count == 0 && !compile_empty && !stopped_at_break_;
  if (op_count == 0 && !compile_empty && !passthrough) return {};
  Ref example_inputs = Ref::steal(PyList_New(static_cast<Py_ssize_t>(inputs_used.size())));
  if (!example_inputs) return failFromPython("the graph's example inputs");
  for (size_t i = 0; i < inputs_used.size(); ++i) {
    int node = inputs_used[i];
    int tensor = -1, dim = -1;
    if (graph_.symInputOf(node, &tensor, &dim)) {
      // A symbol's placeholder: the size of its tensor when the entry runs; the backend
      // gets the SymInt as its example (as torch._dynamo gives it).
      entry_->input_regs.push_back(input_reg_of_node_.at(tensor));
      entry_->input_dims.resize(i, -1);
      entry_->input_dims.push_back(dim);
      PyList_SET_ITEM(example_inputs.get(), i, Ref::borrow(graph_.fake(node)).release());
      continue;
    }
    entry_->input_regs.push_back(input_reg_of_node_.at(node));
    if (!entry_->input_dims.empty()) entry_->input_dims.push_back(-1);
    PyList_SET_ITEM(example_inputs.get(), i, example_of_node_.at(node).copy().release());
  }
  if (Done d = guardInputStorages(inputs_used); !d) return d;
  if (passthrough) {
    entry_->compiled = gm.copy();
    entry_->graph_module = std::move(gm);
    return {};
  }
  // A user-facing error (a Python exception raised out of translate()) stops the trace
  // without an unsupported reason.
  auto userError = [this]() {
    user_error_ = true;
    failed_ = true;
    return Stop{Outcome::Unsupported};
  };
  Ref backend = Ref::steal(PyObject_GetAttrString(config_, "backend"));
  if (!backend) return userError();
  ++stats().graphs_compiled;
  Ref compiled = graph_.callBackend(backend.get(), gm.get(), example_inputs.get());
  if (!compiled) {
    raiseChained(Obj::cdynamo_exc_BackendCompilerFailed, "backend compiler failed on the graph of " + entry_->name);
    return userError();
  }
  if (!PyCallable_Check(compiled.get())) {
    raiseChained(Obj::cdynamo_exc_BackendCompilerFailed, "backend returned a non-callable (" +
                                                             std::string(Py_TYPE(compiled.get())->tp_name) + ") for " +
                                                             entry_->name);
    return userError();
  }
  if (!subclass_input_nodes_.empty()) {
    // Its inputs include tensor subclass instances whose __torch_function__ the trace
    // applied already: the graph runs with subclass dispatch off.
    PyObject* plain_call = lookup(Obj::cdynamo_subclass_plain_call);
    compiled = plain_call ? Ref::steal(PyObject_CallOneArg(plain_call, compiled.get())) : Ref();
    if (!compiled) return failFromPython("cdynamo._internal.tensor_subclass.plain_call");
  }
  entry_->compiled = std::move(compiled);
  entry_->graph_module = std::move(gm);
  return {};
}

Done Tracer::guardInputStorages(const std::vector<int>& inputs_used) {
  // A graph that mutates a tensor input computes, once a backend functionalizes it (AOT
  // autograd, inductor), with the aliasing between its inputs it was traced with: an entry
  // traced with two separate tensors must not run when one tensor (or a view of it) comes
  // as both, or the mutation is not seen through the other (torch._dynamo guards the first
  // case by identity; views it misses). The fakes' version counters say which inputs the
  // graph mutated, directly or through a view (views share their base's counter).
  std::vector<int> regs, groups;
  std::vector<uint8_t> mutated;
  std::vector<const void*> storages;
  bool any_mutated = false;
  std::vector<uint8_t> inner;  // an inner tensor of a wrapper subclass input
  // One tensor of the check, in the group of the first one of its storage.
  auto add = [&](int reg, const void* storage, bool was_mutated, bool is_inner) {
    int group = static_cast<int>(storages.size());
    for (size_t k = 0; k < storages.size(); ++k)
      if (storage && storages[k] == storage) {
        group = groups[k];
        break;
      }
    regs.push_back(reg);
    groups.push_back(group);
    mutated.push_back(was_mutated ? 1 : 0);
    storages.push_back(storage);
    inner.push_back(is_inner ? 1 : 0);
  };
  PyObject* parameter_type = lookup(Obj::torch_nn_Parameter);
  for (int node : inputs_used) {
    PyObject* real = exampleOf(node);
    int reg = inputRegOf(node);
    int sym_tensor = -1, sym_dim = -1;
    if (!real || reg < 0 || !isTensor(real) || graph_.symInputOf(node, &sym_tensor, &sym_dim)) continue;
    // An inference tensor has no version counter: taken as mutated (the guard stays sound).
    Ref version = Ref::steal(PyObject_GetAttrString(graph_.fake(node), "_version"));
    if (!version) PyErr_Clear();
    const bool was_mutated = !version || !PyLong_Check(version.get()) || PyLong_AsLong(version.get()) != 0;
    // Parameters the graph only reads are left out, as torch._dynamo leaves them out of
    // its aliasing guard: a model's parameters do not become views of its inputs, and a
    // large model's would make the check slow.
    if (!was_mutated && reinterpret_cast<PyObject*>(Py_TYPE(real)) == parameter_type) continue;
    if (auto w = wrapper_inners_.find(reg); w != wrapper_inners_.end()) {
      // A wrapper subclass input: what can alias another input is its inner tensors (the
      // instance itself has no storage of its own). Each takes part as mutated: what the
      // subclass's ops do to them is not in the fakes' counters the graph sees.
      any_mutated = any_mutated || was_mutated;
      for (const auto& [ireg, itensor] : w->second) add(ireg, graph::torchimpl::storageId(itensor.get()), true, true);
      continue;
    }
    add(reg, graph::torchimpl::storageId(real), was_mutated, false);
    any_mutated = any_mutated || was_mutated;
  }
  // An inner tensor that shares its storage with another input while the graph mutates
  // something: a backend that functionalizes the graph (AOT autograd) does not see that
  // aliasing through the subclass, and writes the mutation back where the other reads it
  // too late (f(t, t.a) doing a.add_(1) then reading t). Not compiled.
  if (any_mutated)
    for (size_t i = 0; i < regs.size(); ++i)
      for (size_t j = 0; j < i; ++j)
        if (groups[i] == groups[j] && (inner[i] || inner[j]))
          return fail("an inner tensor of a tensor subclass input that shares its storage with another input, in a "
                      "graph that mutates an input, is not supported");
  if (any_mutated && regs.size() > 1) guards().checkStorages(std::move(regs), std::move(groups), std::move(mutated));
  return {};
}

Result<ValuePtr> Tracer::traceRoot(SymbolicFrame& root) {
  // Dynamic shapes: the compile's `dynamic`, the code's size memory, and whether an input
  // tensor carries torch._dynamo.mark_dynamic marks (read from its __dict__: no Python runs).
  graph::DynamicConfig dyn;
  Ref dynamic = Ref::steal(PyObject_GetAttrString(config_, "dynamic"));
  if (!dynamic) return failFromPython("the compile's dynamic setting");
  dyn.mode = dynamic.get() == Py_None ? -1 : PyObject_IsTrue(dynamic.get()) == 1 ? 1 : 0;
  dyn.memory = shape_memory_;
  dyn.shape_env = with_shape_env_;
  static PyObject* const kMarks[] = {PyUnicode_InternFromString("_dynamo_dynamic_indices"),
                                     PyUnicode_InternFromString("_dynamo_weak_dynamic_indices")};
  for (int i = 0; i < root_view_.nfast && !dyn.marked_inputs; ++i) {
    PyObject* o = root_view_.fast[i];
    if (!o || !isTensor(o)) continue;
    PyObject** dictptr = _PyObject_GetDictPtr(o);
    if (!dictptr || !*dictptr) continue;
    for (PyObject* k : kMarks)
      if (k && PyDict_GetItemWithError(*dictptr, k)) dyn.marked_inputs = true;
    PyErr_Clear();
  }
  graph_.setDynamic(dyn);
  if (!graph_.begin(fullgraph())) return failFromPython("starting fake tensor mode");
  // Graphs differ with grad mode (autograd recording): every entry is guarded on it.
  PyObject* is_grad_enabled = lookup(Obj::torch_is_grad_enabled);
  Ref enabled = is_grad_enabled ? Ref::steal(PyObject_CallNoArgs(is_grad_enabled)) : Ref();
  if (!enabled) return failFromPython("torch.is_grad_enabled()");
  const bool grad_mode = enabled.get() == Py_True;
  contexts_.setGradModeAtStart(grad_mode);
  guards().checkGradMode(grad_mode);
  // Every entry is guarded on the TorchFunctionMode stack and on torch function dispatch
  // being on: a call under a mode entered since, or with dispatch disabled, is not this
  // entry's (its graph would skip the mode's __torch_function__, or call a subclass's that
  // eagerly does not run). The hook compiles nothing under a mode the trace does not model
  // (frame/compile_miss.cpp modeRefusal); torch.device contexts are compiled, their devices guarded.
  {
    PyObject* len_fn = lookup(Obj::torch_C_len_torch_function_stack);
    PyObject* enabled_fn = lookup(Obj::torch_C_is_torch_function_enabled);
    Ref no_args = Ref::steal(PyTuple_New(0));
    if (!len_fn || !enabled_fn || !no_args) return failFromPython("torch's TorchFunctionMode state");
    Ref tf_enabled = Ref::steal(PyObject_Call(enabled_fn, no_args.get(), nullptr));
    Ref depth = tf_enabled ? Ref::steal(PyObject_Call(len_fn, no_args.get(), nullptr)) : Ref();
    if (!depth) return failFromPython("torch's TorchFunctionMode state");
    guards().checkStateQuery(enabled_fn, no_args.get(), nullptr, tf_enabled.get());
    guards().checkStateQuery(len_fn, no_args.get(), nullptr, depth.get());
    if (tf_enabled.get() != Py_True) return fail("torch function dispatch is disabled (not modelled)");
    const long n = PyLong_AsLong(depth.get());
    if (n == -1 && PyErr_Occurred()) return failFromPython("torch._C._len_torch_function_stack()");
    if (n != 0) {
      PyObject* key_fn = lookup(Obj::cdynamo_state_function_mode_key);
      Ref key = key_fn ? Ref::steal(PyObject_Call(key_fn, no_args.get(), nullptr)) : Ref();
      if (!key) return failFromPython("cdynamo._internal.torch_state.function_mode_key()");
      if (key.get() == Py_None) return fail("a TorchFunctionMode other than torch.device is active (not modelled)");
      guards().checkStateQuery(key_fn, no_args.get(), nullptr, key.get());
    }
    // Called inside a functorch transform (an eager vmap or grad calling a compiled
    // function): its inputs are that transform's wrapped tensors and the levels are baked
    // into the graph, so the entry holds only under the same interpreter stack.
    PyObject* depth_fn = lookup(Obj::functorch_stack_depth);
    Ref depth_now = depth_fn ? Ref::steal(PyObject_Call(depth_fn, no_args.get(), nullptr)) : Ref();
    if (!depth_now) return failFromPython("torch._C._functorch.get_dynamic_layer_stack_depth()");
    contexts_.setFunctorchDepthAtStart(PyLong_AsLong(depth_now.get()));
    PyObject* peek_fn = lookup(Obj::functorch_peek_interpreter_stack);
    Ref peek = peek_fn ? Ref::steal(PyObject_Call(peek_fn, no_args.get(), nullptr)) : Ref();
    if (!peek) return failFromPython("torch._C._functorch.peek_interpreter_stack()");
    if (peek.get() != Py_None) {
      if (!contexts_.noteFunctorchState()) return failFromPython("functorch's interpreter stack");
      contexts_.noteCalledInsideTransform();
    }
    // Autocast: an entry traced under it casts in its graph (AOT autograd bakes the casts
    // in), one traced without it does not; a call under another autocast state is not this
    // entry's. One query when autocast is off (the usual case), the devices' state when on.
    PyObject* any_fn = lookup(Obj::torch_C_is_any_autocast_enabled);
    Ref any = any_fn ? Ref::steal(PyObject_Call(any_fn, no_args.get(), nullptr)) : Ref();
    if (!any) return failFromPython("torch._C._is_any_autocast_enabled()");
    guards().checkStateQuery(any_fn, no_args.get(), nullptr, any.get());
    // The default dtype: factories without a dtype (torch.ones(2), torch.tensor([1.0])) and
    // an integer tensor times a float scalar make tensors of it, and the graph has it baked
    // in as a constant. Every entry is guarded on it, as on grad mode; a frame that sets it
    // itself (torch.set_default_dtype in the trace) is guarded on the value at its start.
    PyObject* dtype_fn = lookup(Obj::torch_get_default_dtype);
    Ref default_dtype = dtype_fn ? Ref::steal(PyObject_Call(dtype_fn, no_args.get(), nullptr)) : Ref();
    if (!default_dtype) return failFromPython("torch.get_default_dtype()");
    guards().checkStateQuery(dtype_fn, no_args.get(), nullptr, default_dtype.get());
    if (any.get() == Py_True) {
      PyObject* enabled_on = lookup(Obj::torch_is_autocast_enabled);
      PyObject* dtype_on = lookup(Obj::torch_get_autocast_dtype);
      if (!enabled_on || !dtype_on) return failFromPython("torch's autocast state");
      for (const char* device : {"cpu", "cuda"}) {
        Ref dev_args = Ref::steal(Py_BuildValue("(s)", device));
        Ref on = dev_args ? Ref::steal(PyObject_Call(enabled_on, dev_args.get(), nullptr)) : Ref();
        if (!on) return failFromPython(std::string("torch.is_autocast_enabled('") + device + "')");
        guards().checkStateQuery(enabled_on, dev_args.get(), nullptr, on.get());
        if (on.get() != Py_True) continue;
        Ref dtype = Ref::steal(PyObject_Call(dtype_on, dev_args.get(), nullptr));
        if (!dtype) return failFromPython(std::string("torch.get_autocast_dtype('") + device + "')");
        guards().checkStateQuery(dtype_on, dev_args.get(), nullptr, dtype.get());
      }
    }
  }
  Result<ValuePtr> ret = runFrame(root);
  contexts_.restore();
  if (ret && PyErr_Occurred()) {  // an internal inconsistency: never compile a graph with an error set
    PyErr_Clear();
    return fail("internal: a Python error was left set by the trace");
  }
  return ret;
}

bool Tracer::closesQuietly(const std::shared_ptr<GeneratorState>& g) {
  const uint64_t mutations = effects_.mutations();
  const int nodes = graph_.numNodes();
  ValuePtr saved_exc = std::move(pending_exc_);
  pending_exc_.reset();
  ValuePtr it = Value::iterator({}, reinterpret_cast<PyObject*>(&PyGen_Type));
  it->as<Iterator>().made = Iterator::Made::Generator;
  it->as<Iterator>().gen = g;
  Result<ValuePtr> r = closeGenerator(it);
  pending_exc_ = std::move(saved_exc);
  return r.ok() && !failed_ && effects_.mutations() == mutations && graph_.numNodes() == nodes;
}

namespace {

// The values the program can still reach from `roots` once the frame has returned: their
// items, attributes, closures and, for a paused generator, its frame's locals and stack.
std::unordered_set<const Value*> reachableFrom(const std::vector<ValuePtr>& roots, std::vector<ValuePtr>* generators,
                                               const Value* opaque = nullptr) {
  std::unordered_set<const Value*> seen;
  std::vector<ValuePtr> todo(roots.rbegin(), roots.rend());
  while (!todo.empty()) {
    ValuePtr v = std::move(todo.back());
    todo.pop_back();
    if (!v || !seen.insert(v.get()).second) continue;
    if (const Iterator* it = v->get<Iterator>(); it && it->made == Iterator::Made::Generator && it->gen)
      generators->push_back(v);
    if (v.get() == opaque) continue;  // its contents not walked
    std::vector<ValuePtr> children;
    forEachChild(*v, [&](const ValuePtr& c) { children.push_back(c); });
    if (const Function* fn = v->get<Function>()) {
      children.insert(children.end(), fn->closure.begin(), fn->closure.end());
      children.push_back(fn->defaults);
      children.push_back(fn->kwdefaults);
      children.push_back(fn->attrs);
    }
    for (auto c = children.rbegin(); c != children.rend(); ++c) todo.push_back(*c);
  }
  return seen;
}

}  // namespace

Done Tracer::settleGenerators(SymbolicFrame& root, const ValuePtr& ret) {
  if (generators_.empty()) return {};
  std::vector<ValuePtr> roots = effects_.storedValues();
  roots.insert(roots.begin(), ret);
  std::vector<ValuePtr> kept_generators;
  std::unordered_set<const Value*> kept = reachableFrom(roots, &kept_generators);

  // 1. The frame's locals go when it returns (in slot order): a generator only they hold,
  // paused inside try/with, is closed then, its handlers and finally blocks run after all
  // the frame did. One held elsewhere as well is left to the check in finishEntry.
  std::vector<std::pair<size_t, ValuePtr>> dropped;  // (the last slot holding it, the generator)
  for (size_t i = 0; i < root.locals.size(); ++i) {
    const ValuePtr& v = root.locals[i];
    const Iterator* it = v ? v->get<Iterator>() : nullptr;
    if (!it || it->made != Iterator::Made::Generator || !it->gen || kept.count(v.get())) continue;
    if (!it->gen->started || it->gen->finished || !pausedInHandler(it->gen->frame)) continue;
    bool again = false;
    for (auto& d : dropped)
      if (d.second == v) {
        d.first = i;
        again = true;
      }
    if (!again) dropped.emplace_back(i, v);
  }
  std::stable_sort(dropped.begin(), dropped.end(), [](const auto& a, const auto& b) { return a.first < b.first; });
  for (auto& [slot, gen] : dropped) {
    (void)slot;
    // Held by some other value of the frame that also goes (a list of generators): the
    // order of those closes is not modeled, left to finishEntry's check.
    bool elsewhere = false;
    for (const ValuePtr& v : root.locals)
      if (v && v != gen && !v->is(Kind::Iterator)) {
        std::vector<ValuePtr> inner;
        if (reachableFrom({v}, &inner).count(gen.get())) elsewhere = true;
      }
    if (elsewhere) continue;
    Result<ValuePtr> closed = closeGenerator(gen);
    if (closed) continue;
    if (closed.outcome() == Outcome::Raised) {
      (void)takePendingException();
      return fail(std::string("a generator (") + PyUnicode_AsUTF8(gen->as<Iterator>().gen->frame.code->co_qualname) +
                  ") dropped where the frame returns raises from its close (Python reports that as unraisable; not "
                  "modeled)");
    }
    return closed.stop();
  }

  // 2. A generator the program keeps (returned, or stored where it outlives the frame)
  // has no real paused frame to rebuild: as torch._dynamo does, it is run to its end now
  // and leaves as a generator over the items it yields. That is the program's result only
  // if running it changes nothing another part of the program sees (its own iteration of
  // containers aside) and it returns no value (a StopIteration value would be lost).
  for (const ValuePtr& v : kept_generators) {
    Iterator& iter = v->as<Iterator>();
    if (iter.ended || !iter.gen || iter.gen->finished) continue;
    // A polyfill's generator stands for another iterator type: left to the planner.
    if (iter.type.get() != reinterpret_cast<PyObject*>(&PyGen_Type)) continue;
    const std::string name = PyUnicode_AsUTF8(iter.gen->frame.code->co_qualname);
    // Running it now moves the iterators it takes from: right only if nothing else holds
    // them (the rest of the program would see them moved before it took from them).
    std::vector<ValuePtr> unused;
    std::unordered_set<const Value*> outside = reachableFrom(roots, &unused, v.get());
    // And it reads state the caller can change before it takes each item (a list or dict
    // from the program, a cell, an object, one the caller also holds): then its items,
    // computed now, would not be the ones the caller gets. Tensors are read as they are
    // now, as torch._dynamo does (an in-place change by the caller is not seen).
    auto mutable_kind = [](const Value* r) {
      switch (r->kind()) {
        case Kind::List:
        case Kind::Dict:
        case Kind::Set:
        case Kind::Cell:
        case Kind::NewObject:
        case Kind::Object:
        case Kind::Namespace:
        case Kind::DictView:
          return true;
        default:
          return false;
      }
    };
    std::vector<ValuePtr> inner;
    for (const ValuePtr& c : generatorValues(*iter.gen))
      for (const Value* r : reachableFrom({c}, &inner)) {
        if (r == v.get()) continue;
        if (r->kind() == Kind::Iterator && (outside.count(r) || r->reg >= 0))
          return fail("a generator (" + name + ") that leaves the frame unfinished takes from an iterator the "
                      "program also holds: it cannot be run ahead and rebuilt as the items it yields");
        if (mutable_kind(r) && !r->constant() && (outside.count(r) || r->reg >= 0 || (r->is(Kind::Cell) && r->as<Cell>().outer)))
          return fail("a generator (" + name + ") that leaves the frame unfinished reads " + kindName(r->kind()) +
                      " the program can change before it takes the items: it cannot be run ahead and rebuilt as "
                      "the items it yields");
      }
    running_ahead_ = true;
    read_live_ahead_ = false;
    const uint64_t changes = effects_.changesBesideMoves();
    const int nodes = graph_.numNodes();
    std::vector<ValuePtr> items;
    for (;;) {
      ValuePtr item;
      Done d = resumeGenerator(v, nullptr, &item);
      running_ahead_ = false;
      if (!d) {
        if (d.outcome() != Outcome::Raised) return d;
        (void)takePendingException();
        return fail("a generator (" + name + ") that leaves the frame unfinished raises when run to its end "
                    "(it would raise where the caller takes that item; not modeled)");
      }
      if (!item) break;
      items.push_back(std::move(item));
      running_ahead_ = true;
    }
    running_ahead_ = false;
    if (read_live_ahead_)
      return fail("a generator (" + name + ") that leaves the frame unfinished reads the program's state (a global, "
                  "an attribute) as it runs: it cannot be run ahead and rebuilt as the items it yields");
    if (effects_.changesBesideMoves() != changes || graph_.anyImpureFrom(nodes))
      return fail("a generator (" + name + ") that leaves the frame unfinished changes state as it runs: it cannot "
                  "be rebuilt as the items it yields (Cannot reconstruct a generator with variable mutations)");
    Iterator& now = v->as<Iterator>();
    if (now.gen && now.gen->returned && !now.gen->returned->isNone())
      return fail("a generator (" + name + ") that leaves the frame unfinished returns a value (its StopIteration "
                  "value would be lost when rebuilt as the items it yields)");
    now.made = Iterator::Made::Ahead;
    now.gen = nullptr;
    now.items = std::move(items);
    now.pos = 0;
    now.ended = false;
  }
  return {};
}

void Tracer::finishEntry(SymbolicFrame& root, Result<ValuePtr>& ret) {
  // The result's plan first: the runtime builds it first (memo slots are filled in order),
  // then the effects' values.
  runtime::OutputPlan plan;
  auto effects = [&]() -> Done {
    iterators_.appendAdvances(&entry_->effects, false);
    if (Done d = effects_.buildReplay(outputs_, &entry_->effects); !d) return d;
    iterators_.appendAdvances(&entry_->effects, true);
    return {};
  };
  if (failed_) {
    return;
  } else if (stopped_at_break_) {
    // The grad-mode changes of `with` blocks that end the graph: the entry sets the mode of
    // the break itself (torch._dynamo exits the blocks in the graph and drops such
    // set/reset pairs, so a graph that only entered a block before breaking is not compiled).
    graph_.dropTrailing(contexts_.gradModeNodes());
    if (buildBreak(root, &plan)) (void)effects();
  } else if (ret.outcome() == Outcome::Raised) {
    // The message names the exception as torch._dynamo's does ("Observed exception"), with
    // its text, so that a fullgraph=True caller sees what was raised.
    PyObject* e = pending_exc_->real();
    // Its message too, where making it runs no Python code (BaseException's own __str__
    // over constant arguments).
    std::string message;
    if (e && PyExceptionInstance_Check(e) &&
        Py_TYPE(e)->tp_str == reinterpret_cast<PyTypeObject*>(PyExc_BaseException)->tp_str) {
      Ref args = Ref::steal(PyObject_GetAttrString(e, "args"));
      Ref text = args && isConstantObject(args.get()) ? Ref::steal(PyObject_Str(e)) : Ref();
      const char* s = text ? PyUnicode_AsUTF8(text.get()) : nullptr;
      if (s && *s) message = std::string(": ") + s;
      PyErr_Clear();
    }
    (void)fail(std::string("an exception (Observed exception ") + (e ? Py_TYPE(e)->tp_name : "?") + message +
               ") escapes the traced frame; it runs natively to raise it");
    // Reported where the program raised it (the frames it was raised in), not where the
    // trace ended: that is the line a user looks for.
    if (const RaiseSite* site = e ? raiseSite(e) : nullptr) {
      unsupported_.reason += "; it was raised at\n" + site->traceback;
      unsupported_.filename = site->where.filename;
      unsupported_.line = site->where.line;
      unsupported_.function = site->where.function;
      unsupported_.user_stack = site->where.user_stack;
    }
  } else if (ret.ok()) {
    if (settleGenerators(root, *ret) && outputs_.plan(*ret, &plan)) (void)effects();
    if (!failed_ && onlySwitchesGradMode()) graph_.dropTrailing(contexts_.gradModeNodes());
  } else {
    (void)fail("internal: the trace ended without a result");
  }
  if (failed_) return;
  // A generator left paused inside try/with is closed when Python drops it (at the latest as
  // this frame ends): GeneratorExit at its yield. Run that close here; a handler that lets
  // it through and changes nothing (collections.abc.Sequence.__iter__'s `except IndexError`)
  // is what dropping it does. One that does anything else is not modeled.
  for (const std::shared_ptr<GeneratorState>& g : generators_)
    if (g->started && !g->finished && pausedInHandler(g->frame) && !closesQuietly(g)) {
      if (failed_) return;
      (void)fail(std::string("a generator (") + PyUnicode_AsUTF8(g->frame.code->co_qualname) +
                 ") paused inside try/with is left unfinished where the trace ends: its finally/__exit__ would run "
                 "when it is dropped (not modeled)");
      return;
    }
  bool late_plans = false;
  if (!outputs_.placeLatePlans(&plan, &entry_->effects, &late_plans)) return;
  entry_->late_plans = late_plans;
  if (runtime::memoReadBeforeBuilt(plan, entry_->effects) >= 0) {
    (void)fail("internal: a value made in the trace would be read back before it is rebuilt");
    return;
  }
  entry_->output = std::move(plan);
  entry_->memo_slots = outputs_.memoSlots();
  // A graph without ops is compiled all the same where torch._dynamo compiles one (graph
  // counts agree): under fullgraph=True, a frame that returns one tensor and changes nothing.
  const bool compile_empty = !stopped_at_break_ && ret.ok() && (*ret)->is(Kind::Tensor) && entry_->effects.empty() &&
                             fullgraph();
  if (!compileGraph(compile_empty)) return;
  // The guards of input iterators' untaken items are dropped first: the shape guards are
  // then stated over the registers that stay (a dropped register is never loaded).
  iterators_.guardInputs(*entry_);
  (void)addShapeGuards();
  guards().finish();
}

// A frame that returns and whose graph would do nothing but switch grad mode (the tail of
// torch.optim's step wrapper after its last deliberate graph break: restore the mode and
// return) is not worth a graph: with the switches dropped the trace has no op, and the
// frame runs natively, which switches the mode itself (torch._dynamo skips such a frame:
// it holds no tensor). Not where an entry with no op is used all the same (fullgraph=True,
// allow_empty_graphs): that entry must still switch the mode, so its graph keeps them.
bool Tracer::onlySwitchesGradMode() {
  if (!graph_.onlyEffectsOf(contexts_.gradModeNodes()) || !outputs_.graphOutputs().empty()) return false;
  if (fullgraph()) return false;
  int allow_empty = graph::configFlag("allow_empty_graphs");
  if (allow_empty < 0) return PyErr_Clear(), false;
  return allow_empty == 0;
}

Done Tracer::addShapeGuards() {
  // After the backend: AOT autograd and inductor may add guards of their own to the ShapeEnv.
  if (!graph_.symbolic()) return {};
  Ref bindings = Ref::steal(PyList_New(0));
  if (!bindings) return failFromPython("shape guards");
  for (int node = 0; node < graph_.numNodes(); ++node) {
    const graph::Node& n = graph_.node(node);
    if (n.op == graph::NodeOp::Placeholder && n.int_input) {
      // A symbolic int argument: its symbol is the int itself (dim -1).
      int reg = inputRegOf(node);
      if (reg < 0 || guards().isDropped(reg)) continue;
      Ref b = Ref::steal(Py_BuildValue("(OiisO)", n.fake.get(), reg, -1, guards().sourceName(reg).c_str(), Py_None));
      if (!b || PyList_Append(bindings.get(), b.get()) < 0) return failFromPython("shape guards");
      continue;
    }
    if (n.op != graph::NodeOp::Placeholder || !n.dyn_mask) continue;
    int reg = inputRegOf(node);
    PyObject* real = exampleOf(node);
    if (reg < 0 || !real || guards().isDropped(reg)) continue;
    Ref shape = Ref::steal(PyObject_GetAttrString(n.fake.get(), "shape"));
    if (!shape) return failFromPython("shape guards");
    for (int d = 0; d < 64; ++d) {
      if (!((n.dyn_mask >> d) & 1u)) continue;
      Ref sym = Ref::steal(PySequence_GetItem(shape.get(), d));
      Ref b = sym ? Ref::steal(Py_BuildValue("(OiisO)", sym.get(), reg, d, guards().sourceName(reg).c_str(), real))
                  : Ref();
      if (!b || PyList_Append(bindings.get(), b.get()) < 0) return failFromPython("shape guards");
    }
  }
  PyObject* shapes = lookup(Obj::cdynamo_shapes);
  if (!shapes) return failFromPython("cdynamo._internal.symbolic_shapes");
  Ref compiled = Ref::steal(PyObject_CallMethod(shapes, "compile_guards", "OO", graph_.shapeEnv(), bindings.get()));
  if (!compiled) return failFromPython("compiling the shape guards");
  Ref seq = Ref::steal(PySequence_Fast(compiled.get(), "shape guards"));
  if (!seq) return failFromPython("shape guards");
  for (Py_ssize_t i = 0; i < PySequence_Fast_GET_SIZE(seq.get()); ++i) {
    PyObject* g = PySequence_Fast_GET_ITEM(seq.get(), i);
    PyObject* text = PyTuple_GetItem(g, 0);
    // (text, ops, index in ShapeEnv.guards or -1): where the program installed it.
    guards::Origin origin;
    if (PyTuple_Check(g) && PyTuple_GET_SIZE(g) >= 3) {
      long index = PyLong_AsLong(PyTuple_GET_ITEM(g, 2));
      if (index == -1 && PyErr_Occurred()) return failFromPython("shape guards");
      if (index >= 0 && static_cast<size_t>(index) < shape_guard_origins_.size())
        for (const guards::OriginFrame& f : shape_guard_origins_[static_cast<size_t>(index)])
          origin.push_back(guards::OriginFrame{f.code.copy(), f.offset});
    }
    Ref ops = text ? Ref::steal(PySequence_Fast(PyTuple_GetItem(g, 1), "shape guard ops")) : Ref();
    const char* t = text ? PyUnicode_AsUTF8(text) : nullptr;
    if (!ops || !t) return failFromPython("shape guards");
    std::vector<guards::ShapeOp> program;
    for (Py_ssize_t k = 0; k < PySequence_Fast_GET_SIZE(ops.get()); ++k) {
      long op = 0, reg = 0;
      long long arg = 0;
      if (!PyArg_ParseTuple(PySequence_Fast_GET_ITEM(ops.get(), k), "llL", &op, &reg, &arg))
        return failFromPython("shape guards");
      if (op < 0 || op > static_cast<long>(guards::ShapeOpKind::Int)) return fail("internal: bad shape guard opcode");
      program.push_back(guards::ShapeOp{static_cast<guards::ShapeOpKind>(op), static_cast<int>(reg), arg});
    }
    if (!guards().checkShape(std::move(program), t, std::move(origin))) return fail(std::string("shape guard ") + t + " is malformed");
  }
  return {};
}

void Tracer::noteStored(const ValuePtr& v, PyObject* name) {
  if (!v) return;
  int node = -1;
  if (const Tensor* t = v->get<Tensor>()) node = t->node;
  else if (const SubclassTensor* st = v->get<SubclassTensor>()) node = st->node;
  else if (const NdArray* a = v->get<NdArray>()) node = a->node;
  if (node < 0) return;
  const char* text = PyUnicode_AsUTF8(name);
  if (!text) {
    PyErr_Clear();  // a name that is not UTF-8 encodable: the node keeps its own
    return;
  }
  graph_.nameHint(node, text);
}

bool Tracer::fullgraph() {
  Ref flag = Ref::steal(PyObject_GetAttrString(config_, "fullgraph"));
  if (!flag) PyErr_Clear();
  return flag && flag.get() == Py_True;
}

namespace {

// "    obj = BadClass()\n": the source text of a line (linecache, stripped), as Python's
// tracebacks show it under the location; empty when it cannot be read.
std::string sourceLine(const std::string& filename, int line) {
  PyObject* linecache = lookup(Obj::linecache_module);
  Ref text = linecache ? Ref::steal(PyObject_CallMethod(linecache, "getline", "si", filename.c_str(), line)) : Ref();
  Ref stripped = text ? Ref::steal(PyObject_CallMethod(text.get(), "strip", nullptr)) : Ref();
  const char* s = stripped && PyUnicode_Check(stripped.get()) ? PyUnicode_AsUTF8(stripped.get()) : nullptr;
  if (!s) {
    PyErr_Clear();
    return "";
  }
  return *s ? std::string("    ") + s + "\n" : "";
}

}  // namespace

TranslateResult Tracer::report() {
  TranslateResult result;
  if (user_error_) {
    result.error = true;
    return result;
  }
  if (!failed_) {
    result.entry = entry_;
    return result;
  }
  result.unsupported = unsupported_;
  Ref fullgraph = Ref::steal(PyObject_GetAttrString(config_, "fullgraph"));
  if (!fullgraph) {
    result.error = true;
    return result;
  }
  if (fullgraph.get() == Py_True) {
    std::string msg = unsupported_.reason + "\n  at " + unsupported_.filename + ":" + std::to_string(unsupported_.line) +
                      " in " + unsupported_.function + "\n" + sourceLine(unsupported_.filename, unsupported_.line) +
                      "  inlined call stack:\n" + unsupported_.user_stack;
    if (unsupported_.fake_call_raised) msg = "RuntimeError when making fake tensor call: " + msg;
    raiseChained(unsupported_.fake_call_raised ? Obj::cdynamo_exc_TorchRuntimeError : Obj::cdynamo_exc_Unsupported, msg);
    result.error = true;
  }
  return result;
}

void Tracer::originOf(void* tracer, guards::Origin* out) {
  for (const SymbolicFrame* f = static_cast<Tracer*>(tracer)->current_; f; f = f->parent)
    if (f->code && f->pc < f->instrs.size())
      out->push_back(guards::OriginFrame{Ref::borrow(reinterpret_cast<PyObject*>(f->code)), f->instrs[f->pc].offset});
}

void Tracer::noteShapeGuards() {
  if (!shape_guard_list_) {
    PyObject* env = graph_.shapeEnv();
    if (!env) return;
    shape_guard_list_ = Ref::steal(PyObject_GetAttrString(env, "guards"));
    if (!shape_guard_list_ || !PyList_Check(shape_guard_list_.get())) {
      PyErr_Clear();
      shape_guard_list_ = Ref::borrow(Py_None);
    }
  }
  if (!PyList_Check(shape_guard_list_.get())) return;
  const size_t n = static_cast<size_t>(PyList_GET_SIZE(shape_guard_list_.get()));
  while (shape_guard_origins_.size() < n) {
    guards::Origin o;
    originOf(this, &o);
    shape_guard_origins_.push_back(std::move(o));
  }
}

TranslateResult Tracer::run() {
  PyCodeObject* co = root_view_.code;
  entry_->name = utf8(co->co_qualname) + " at " + utf8(co->co_filename) + ":" + std::to_string(co->co_firstlineno);
  entry_->config = Ref::borrow(config_);

  SymbolicFrame root;
  root.code = co;
  root.globals = Borrowed(root_view_.globals);
  root.builtins = Borrowed(root_view_.builtins);
  root.closure = Borrowed(root_view_.closure);
  root.instrs = bytecode::decode(co);
  root.locals.resize(co->co_nlocalsplus);
  root.deleted.resize(co->co_nlocalsplus);
  root.root = true;
  root_visits_.assign(root.instrs.size(), 0);

  guards().setOriginSource(&Tracer::originOf, this);
  Result<ValuePtr> ret = traceRoot(root);
  guards().setOriginSource(nullptr, nullptr);
  graph_.finish();
  finishEntry(root, ret);
  return report();
}

int Tracer::inputRegOf(int node) const {
  auto in = input_reg_of_node_.find(node);
  return in == input_reg_of_node_.end() ? -1 : in->second;
}

PyObject* Tracer::exampleOf(int node) const {
  auto ex = example_of_node_.find(node);
  return ex == example_of_node_.end() ? nullptr : ex->second.get();
}

}  // namespace cdynamo::trace
