// Driving one translation: set up the root frame, run it, turn the returned value into an
// output plan, build the FX graph and hand it to the backend.
#include "trace/tracer.h"

#include <string>
#include <unordered_set>

#include "support/lookup.h"
#include "support/stats.h"
#include "support/torch_types.h"

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
  std::string msg = what;
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

Done Tracer::buildOutput(const ValuePtr& v, runtime::OutputPlan* plan) {
  using K = runtime::OutputPlan::Kind;
  const bool container = v->is(Kind::List) || v->is(Kind::Dict) || v->is(Kind::Set) || v->is(Kind::Tuple);
  if ((container || v->is(Kind::Iterator)) && v->reg >= 0) {
    // A container or iterator read from the program is handed back as the object itself
    // (its mutations, or what the trace consumed of it, are replayed on it as effects).
    plan->kind = K::Register;
    plan->index = v->reg;
    return {};
  }
  if (v->reg < 0 && (container || v->is(Kind::NewObject) || v->is(Kind::Iterator) || v->is(Kind::Cell) ||
                     v->is(Kind::Function))) {
    // A mutable value made in the trace is one object however often it is reachable.
    auto it = memo_slot_.find(v.get());
    if (it != memo_slot_.end()) {
      plan->kind = K::Memo;
      plan->index = it->second.first;
      return {};
    }
    if (!v->is(Kind::Tuple)) {
      plan->memo = entry_->memo_slots++;
      memo_slot_.emplace(v.get(), std::make_pair(plan->memo, v));
    }
  }
  auto items = [&](const std::vector<ValuePtr>& values) -> Done {
    plan->items.resize(values.size());
    for (size_t i = 0; i < values.size(); ++i)
      if (Done d = buildOutput(values[i], &plan->items[i]); !d) return d;
    return {};
  };
  switch (v->kind) {
    case Kind::Tensor: {
      auto in = input_reg_of_node_.find(v->node);
      if (in != input_reg_of_node_.end()) {
        // An input returned as is: hand back the very same object, as eager does.
        plan->kind = K::Register;
        plan->index = in->second;
        return {};
      }
      plan->kind = K::GraphOutput;
      for (size_t i = 0; i < outputs_.size(); ++i)
        if (outputs_[i] == v->node) {
          plan->index = static_cast<int>(i);
          return {};
        }
      outputs_.push_back(v->node);
      plan->index = static_cast<int>(outputs_.size() - 1);
      return {};
    }
    case Kind::Constant:
      plan->kind = K::Constant;
      plan->constant = v->obj.copy();
      return {};
    case Kind::Tuple:
    case Kind::List:
      plan->kind = v->is(Kind::Tuple) ? K::Tuple : K::List;
      if (v->obj) plan->constant = v->obj.copy();  // a namedtuple class, or deque
      plan->ctor_arg = v->ctor_arg.copy();
      return items(v->items);
    case Kind::Dict:
    case Kind::Set:
      plan->kind = v->is(Kind::Dict) ? K::Dict : K::Set;
      plan->constant = v->obj.copy();
      plan->ctor_arg = v->ctor_arg.copy();
      for (const Ref& k : v->keys) plan->keys.push_back(k.copy());
      return items(v->items);
    case Kind::Module:
    case Kind::Callable:
    case Kind::PyModule:
    case Kind::Object:
      if (v->reg >= 0) {
        plan->kind = K::Register;
        plan->index = v->reg;
        return {};
      }
      if (v->is(Kind::Callable) || v->is(Kind::PyModule)) {  // e.g. type(x): a stable object
        plan->kind = K::Constant;
        plan->constant = v->obj.copy();
        return {};
      }
      break;
    case Kind::NewObject:
      plan->kind = K::NewObject;
      plan->constant = v->obj.copy();
      plan->items.resize(1);
      return buildOutput(v->items[0], &plan->items[0]);
    case Kind::Slice:
    case Kind::Iterator: {
      if (Done d = usableIterator(v.get()); !d) return d;
      // slice(start, stop, step); an iterator becomes iter() over the items it has left.
      plan->kind = K::Call;
      if (v->is(Kind::Slice)) {
        plan->constant = Ref::borrow(reinterpret_cast<PyObject*>(&PySlice_Type));
        return items(v->items);
      }
      PyObject* iter = lookup(Obj::builtins_iter);
      if (!iter) return failFromPython("builtins.iter");
      plan->constant = Ref::borrow(iter);
      std::vector<ValuePtr> rest(v->items.begin() + static_cast<std::ptrdiff_t>(std::min(v->pos, v->items.size())), v->items.end());
      plan->items.resize(1);
      return buildOutput(Value::sequence(Kind::Tuple, std::move(rest)), &plan->items[0]);
    }
    case Kind::Method: {
      const ValuePtr& receiver = v->items[0];
      if (receiver->is(Kind::Context) && !v->obj && PyUnicode_CompareWithASCIIString(v->name.get(), "__exit__") == 0)
        return buildContextExit(receiver, plan);
      plan->kind = K::Call;
      plan->items.resize(2);
      if (v->obj) {  // types.MethodType(function, receiver)
        plan->constant = Ref::borrow(reinterpret_cast<PyObject*>(&PyMethod_Type));
        plan->items[0].kind = K::Constant;
        plan->items[0].constant = v->obj.copy();
        return buildOutput(receiver, &plan->items[1]);
      }
      PyObject* getattr = lookup(Obj::builtins_getattr);
      if (!getattr) return failFromPython("builtins.getattr");
      plan->constant = Ref::borrow(getattr);
      plan->items[1].kind = K::Constant;
      plan->items[1].constant = v->name.copy();
      return buildOutput(receiver, &plan->items[0]);
    }
    case Kind::Cell:
      // A cell made in the trace (a local captured by an inner function).
      if (v->obj) break;  // a cell of an enclosing function: not rebuilt (yet)
      plan->kind = K::Call;
      plan->constant = Ref::borrow(reinterpret_cast<PyObject*>(&PyCell_Type));
      if (!v->items.empty()) {
        plan->items.resize(1);
        return buildOutput(v->items[0], &plan->items[0]);
      }
      return {};
    case Kind::Function: {
      // A function made in the trace: cdynamo._resume.make_function(code, globals,
      // qualname, defaults, kwdefaults, closure, attrs), its cells shared through the memo.
      const FunctionParts& fp = *v->fn;
      PyObject* helper = lookup(Obj::cdynamo_resume_make_function);
      if (!helper) return failFromPython("cdynamo._resume.make_function");
      plan->kind = K::Call;
      plan->constant = Ref::borrow(helper);
      plan->items.resize(7);
      auto constant = [&](size_t i, PyObject* o) {
        plan->items[i].kind = K::Constant;
        plan->items[i].constant = Ref::borrow(o ? o : Py_None);
      };
      auto optional = [&](size_t i, const ValuePtr& part) -> Done {
        if (part) return buildOutput(part, &plan->items[i]);
        constant(i, nullptr);
        return {};
      };
      constant(0, fp.code.get());
      constant(1, fp.globals.get());
      constant(2, fp.qualname.get());
      if (Done d = optional(3, fp.defaults); !d) return d;
      if (Done d = optional(4, fp.kwdefaults); !d) return d;
      plan->items[5].kind = K::Tuple;
      plan->items[5].items.resize(fp.closure.size());
      for (size_t i = 0; i < fp.closure.size(); ++i)
        if (Done d = buildOutput(fp.closure[i], &plan->items[5].items[i]); !d) return d;
      return optional(6, fp.attrs);
    }
    case Kind::Null:
    case Kind::Context:
    case Kind::Super:
    case Kind::Partial:
      break;
  }
  return fail(std::string("returning a ") + kindName(v->kind) + " is not supported yet");
}

Result<bool> Tracer::sameTensorObject(const ValuePtr& a, const ValuePtr& b) {
  if (a->node == b->node) return true;
  auto ia = example_of_node_.find(a->node), ib = example_of_node_.find(b->node);
  if (ia == example_of_node_.end() || ib == example_of_node_.end()) return false;  // a computed tensor is new
  bool same = ia->second.get() == ib->second.get();
  guards().checkAliasing(input_reg_of_node_.at(a->node), input_reg_of_node_.at(b->node), same);
  return same;
}

Done Tracer::recordEffect(PendingEffect e) {
  ++mutations_;
  if (generator_depth_ > 0)
    return fail("a side effect inside a generator that is run in place (its order against the consumer would change)");
  effects_.push_back(std::move(e));
  return {};
}

Done Tracer::noteContainerMutation(const ValuePtr& c) {
  ++mutations_;
  if (c->reg < 0) return {};  // made in the trace: nothing to replay
  if (!c->is(Kind::List) && !c->is(Kind::Dict) && !c->is(Kind::Set))
    return fail(std::string("mutating a ") + kindName(c->kind) + " from outside the trace is not supported yet");
  for (const PendingEffect& e : effects_)
    if (e.kind == PendingEffect::Kind::Container && e.value == c) return {};
  return recordEffect({PendingEffect::Kind::Container, c->reg, Ref(), c});
}

ValuePtr Tracer::overlayAttr(int reg, PyObject* name) {
  if (reg < 0 || attr_overlay_.empty()) return nullptr;
  const char* n = PyUnicode_AsUTF8(name);
  for (auto it = attr_overlay_.rbegin(); it != attr_overlay_.rend(); ++it)
    if (it->first.first == reg && it->first.second == n) return it->second;
  return nullptr;
}

void Tracer::setOverlayAttr(int reg, PyObject* name, ValuePtr value) {
  attr_overlay_.push_back({{reg, PyUnicode_AsUTF8(name)}, std::move(value)});
}

Done Tracer::buildEffects() {
  using K = runtime::SideEffect::Kind;
  for (const InputIterator& in : input_iterators_) {
    const ValuePtr& it = in.value;
    if (it->pos == 0) continue;
    runtime::SideEffect out;
    out.kind = K::Advance;
    out.reg = it->reg;
    out.value.kind = runtime::OutputPlan::Kind::Constant;
    out.value.constant = Ref::steal(PyLong_FromSize_t(std::min(it->pos, it->items.size())));
    if (!out.value.constant) return failFromPython("an iterator's advance count");
    entry_->effects.push_back(std::move(out));
  }
  for (const PendingEffect& e : effects_) {
    runtime::SideEffect out;
    out.reg = e.reg;
    out.name = e.name.copy();
    switch (e.kind) {
      case PendingEffect::Kind::SetAttr: out.kind = K::SetAttr; break;
      case PendingEffect::Kind::SetItem: out.kind = K::SetItem; break;
      case PendingEffect::Kind::SetCell: out.kind = K::SetCell; break;
      case PendingEffect::Kind::Container:
        out.kind = e.value->is(Kind::List) ? K::ReplaceList : e.value->is(Kind::Set) ? K::ReplaceSet : K::ReplaceDict;
        break;
    }
    if (e.kind == PendingEffect::Kind::Container) {
      // The container's final contents, as a fresh list/dict to copy from.
      ValuePtr copy = e.value->is(Kind::List) || e.value->is(Kind::Set) ? Value::sequence(e.value->kind, e.value->items)
                                                                          : nullptr;
      if (!copy) {
        std::vector<Ref> keys;
        for (const Ref& k : e.value->keys) keys.push_back(k.copy());
        copy = Value::dict(reinterpret_cast<PyObject*>(&PyDict_Type), std::move(keys), e.value->items);
      }
      if (Done d = buildOutput(copy, &out.value); !d) return d;
    } else if (Done d = buildOutput(e.value, &out.value); !d) {
      return d;
    }
    entry_->effects.push_back(std::move(out));
  }
  return {};
}

namespace {

void registersIn(const runtime::OutputPlan& p, std::unordered_set<int>* out) {
  if (p.kind == runtime::OutputPlan::Kind::Register) out->insert(p.index);
  for (const runtime::OutputPlan& item : p.items) registersIn(item, out);
}

}  // namespace

void Tracer::guardInputIterators() {
  if (input_iterators_.empty()) return;
  // The registers the entry reads besides its guards: graph inputs, outputs, effects.
  std::unordered_set<int> read(entry_->input_regs.begin(), entry_->input_regs.end());
  registersIn(entry_->output, &read);
  for (const runtime::SideEffect& e : entry_->effects) {
    read.insert(e.reg);
    registersIn(e.value, &read);
  }
  for (const InputIterator& in : input_iterators_) {
    const ValuePtr& it = in.value;
    const size_t taken = std::min(it->pos, in.item_regs.size());
    std::vector<int> untaken(in.item_regs.begin() + static_cast<std::ptrdiff_t>(taken), in.item_regs.end());
    bool unread = !it->ended;
    std::vector<int> under = guards().registersUnder(untaken);
    std::unordered_set<int> under_set(under.begin(), under.end());
    std::unordered_set<const Value*> under_values;
    for (int r : under) {
      unread = unread && !read.count(r);
      auto w = wrapped_.find(r);
      if (w != wrapped_.end()) under_values.insert(w->second.get());
    }
    // An untaken item that is also reached through another source (one object passed twice)
    // is one traced value: what the trace read of it may be guarded through the item's
    // registers, so those stay.
    for (const auto& [reg, value] : wrapped_)
      if (!under_set.count(reg) && under_values.count(value.get())) unread = false;
    if (unread) {
      // The trace took `taken` items and did not see the end: any iterator with at least
      // those items (each guarded as it was used) behaves the same here.
      guards().dropRegisters(untaken);
      if (taken > 0) guards().checkLengthAtLeast(in.items_reg, static_cast<Py_ssize_t>(taken));
    } else {
      guards().checkLength(in.items_reg, static_cast<Py_ssize_t>(in.item_regs.size()));
    }
  }
}

Done Tracer::compileGraph() {
  std::vector<int> inputs_used;
  int op_count = 0;
  Ref gm = graph_.buildGraphModule(outputs_, &inputs_used, &op_count);
  if (!gm) return failFromPython("building the FX graph");
  if (op_count == 0) return {};  // nothing for a backend to do: no graph
  Ref example_inputs = Ref::steal(PyList_New(static_cast<Py_ssize_t>(inputs_used.size())));
  if (!example_inputs) return failFromPython("the graph's example inputs");
  for (size_t i = 0; i < inputs_used.size(); ++i) {
    int node = inputs_used[i];
    entry_->input_regs.push_back(input_reg_of_node_.at(node));
    PyList_SET_ITEM(example_inputs.get(), i, example_of_node_.at(node).copy().release());
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
  entry_->compiled = std::move(compiled);
  entry_->graph_module = std::move(gm);
  return {};
}

Result<ValuePtr> Tracer::traceRoot(SymbolicFrame& root) {
  if (!graph_.begin()) return failFromPython("starting fake tensor mode");
  // Graphs differ with grad mode (autograd recording): every entry is guarded on it.
  PyObject* is_grad_enabled = lookup(Obj::torch_is_grad_enabled);
  Ref enabled = is_grad_enabled ? Ref::steal(PyObject_CallNoArgs(is_grad_enabled)) : Ref();
  if (!enabled) return failFromPython("torch.is_grad_enabled()");
  grad_mode_at_start_ = enabled.get() == Py_True;
  guards().checkGradMode(grad_mode_at_start_);
  Result<ValuePtr> ret = runFrame(root);
  restoreGlobalState();
  return ret;
}

TranslateResult Tracer::run() {
  TranslateResult result;
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

  Result<ValuePtr> ret = traceRoot(root);
  graph_.finish();
  runtime::OutputPlan plan;
  if (failed_) {
    // reported below
  } else if (stopped_at_break_) {
    if (buildBreak(root, &plan)) (void)buildEffects();
  } else if (ret.outcome() == Outcome::Raised) {
    PyObject* e = pending_exc_->real();
    (void)fail(std::string("an exception (") + (e ? Py_TYPE(e)->tp_name : "?") +
               ") escapes the traced frame; it runs natively to raise it");
  } else if (ret.ok()) {
    // The result's plan first: the runtime builds it first (memo slots are filled in order).
    if (buildOutput(*ret, &plan)) (void)buildEffects();
  } else {
    (void)fail("internal: the trace ended without a result");
  }
  if (!failed_) {
    entry_->output = std::move(plan);
    (void)compileGraph();
  }
  if (!failed_) guardInputIterators();
  if (user_error_) {
    result.error = true;
    return result;
  }
  if (failed_) {
    result.unsupported = unsupported_;
    Ref fullgraph = Ref::steal(PyObject_GetAttrString(config_, "fullgraph"));
    if (!fullgraph) {
      result.error = true;
      return result;
    }
    if (fullgraph.get() == Py_True) {
      std::string msg = unsupported_.reason + "\n  at " + unsupported_.filename + ":" +
                        std::to_string(unsupported_.line) + " in " + unsupported_.function +
                        "\n  inlined call stack:\n" + unsupported_.user_stack;
      raiseChained(Obj::cdynamo_exc_Unsupported, msg);
      result.error = true;
    }
    return result;
  }
  result.entry = entry_;
  return result;
}

}  // namespace cdynamo::trace
