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

Done Tracer::buildOutputs(const std::vector<ValuePtr>& values, std::vector<runtime::OutputPlan>* out) {
  out->resize(values.size());
  for (size_t i = 0; i < values.size(); ++i)
    if (Done d = buildOutput(values[i], &(*out)[i]); !d) return d;
  return {};
}

Done Tracer::buildOutput(const ValuePtr& v, runtime::OutputPlan* plan) {
  namespace P = runtime::plan;
  // A container or iterator read from the program is handed back as the object itself
  // (its mutations, or what the trace consumed of it, are replayed on it as effects); one
  // made in the trace is one object however often it is reachable (the memo).
  bool container = false, made_once = false;
  switch (v->kind()) {
    case Kind::List:
    case Kind::Dict:
    case Kind::Set:
    case Kind::Tuple:
    case Kind::Iterator:
      container = true;
      made_once = true;
      break;
    case Kind::NewObject:
    case Kind::Cell:
    case Kind::Function:
      made_once = true;
      break;
    case Kind::Null:
    case Kind::Tensor:
    case Kind::Constant:
    case Kind::Slice:
    case Kind::Callable:
    case Kind::BoundMethod:
    case Kind::NamedMethod:
    case Kind::Module:
    case Kind::PyModule:
    case Kind::Object:
    case Kind::Super:
    case Kind::Partial:
    case Kind::Context:
      break;
  }
  if (container && v->reg >= 0) {
    *plan = P::Register{v->reg};
    return {};
  }
  if (made_once && v->reg < 0) {
    auto it = memo_slot_.find(v.get());
    if (it != memo_slot_.end()) {
      *plan = P::Memo{it->second.first};
      return {};
    }
    if (!v->is(Kind::Tuple)) {
      plan->memo = entry_->memo_slots++;
      memo_slot_.emplace(v.get(), std::make_pair(plan->memo, v));
    }
  }
  switch (v->kind()) {
    case Kind::Tensor: {
      const int node = v->as<Tensor>().node;
      auto in = input_reg_of_node_.find(node);
      if (in != input_reg_of_node_.end()) {
        // An input returned as is: hand back the very same object, as eager does.
        plan->step = P::Register{in->second};
        return {};
      }
      for (size_t i = 0; i < outputs_.size(); ++i)
        if (outputs_[i] == node) {
          plan->step = P::GraphOutput{static_cast<int>(i)};
          return {};
        }
      outputs_.push_back(node);
      plan->step = P::GraphOutput{static_cast<int>(outputs_.size() - 1)};
      return {};
    }
    case Kind::Constant:
      plan->step = P::Constant{v->as<Constant>().obj.copy()};
      return {};
    case Kind::Tuple: {
      const Tuple& t = v->as<Tuple>();
      std::vector<runtime::OutputPlan> items;
      if (Done d = buildOutputs(t.items, &items); !d) return d;
      if (t.namedtuple)
        plan->step = P::NamedTuple{t.namedtuple.copy(), std::move(items)};
      else
        plan->step = P::Tuple{std::move(items)};
      return {};
    }
    case Kind::List: {
      const List& l = v->as<List>();
      std::vector<runtime::OutputPlan> items;
      if (Done d = buildOutputs(l.items, &items); !d) return d;
      if (l.deque)
        plan->step = P::Deque{l.deque.copy(), l.maxlen.copy(), std::move(items)};
      else
        plan->step = P::List{std::move(items)};
      return {};
    }
    case Kind::Dict: {
      const Dict& d = v->as<Dict>();
      P::Dict out{d.type.copy(), d.default_factory.copy(), {}, {}};
      for (const Ref& k : d.keys) out.keys.push_back(k.copy());
      if (Done done = buildOutputs(d.values, &out.values); !done) return done;
      plan->step = std::move(out);
      return {};
    }
    case Kind::Set: {
      std::vector<runtime::OutputPlan> items;
      if (Done d = buildOutputs(v->as<Set>().items, &items); !d) return d;
      plan->step = P::Set{std::move(items)};
      return {};
    }
    case Kind::Module:
    case Kind::Callable:
    case Kind::PyModule:
    case Kind::Object:
      if (v->reg >= 0) {
        plan->step = P::Register{v->reg};
        return {};
      }
      if (v->is(Kind::Callable) || v->is(Kind::PyModule)) {  // e.g. type(x): a stable object
        plan->step = P::Constant{Ref::borrow(v->real())};
        return {};
      }
      break;
    case Kind::NewObject: {
      const NewObject& o = v->as<NewObject>();
      auto attrs = std::make_unique<runtime::OutputPlan>();
      if (Done d = buildOutput(o.attrs, attrs.get()); !d) return d;
      plan->step = P::NewObject{o.cls.copy(), std::move(attrs)};
      return {};
    }
    case Kind::Slice: {
      // slice(start, stop, step)
      const Slice& sl = v->as<Slice>();
      std::vector<runtime::OutputPlan> parts;
      if (Done d = buildOutputs({sl.parts.begin(), sl.parts.end()}, &parts); !d) return d;
      plan->step = P::Call{Ref::borrow(reinterpret_cast<PyObject*>(&PySlice_Type)), std::move(parts)};
      return {};
    }
    case Kind::Iterator: {
      // iter() over the items it has left.
      if (Done d = usableIterator(v.get()); !d) return d;
      const Iterator& it = v->as<Iterator>();
      PyObject* iter = lookup(Obj::builtins_iter);
      if (!iter) return failFromPython("builtins.iter");
      std::vector<ValuePtr> rest(it.items.begin() + static_cast<std::ptrdiff_t>(std::min(it.pos, it.items.size())),
                                 it.items.end());
      std::vector<runtime::OutputPlan> args(1);
      if (Done d = buildOutput(Value::tuple(std::move(rest)), &args[0]); !d) return d;
      plan->step = P::Call{Ref::borrow(iter), std::move(args)};
      return {};
    }
    case Kind::BoundMethod: {  // types.MethodType(function, receiver)
      const BoundMethod& m = v->as<BoundMethod>();
      std::vector<runtime::OutputPlan> args(2);
      args[0] = runtime::OutputPlan::constant(m.function.get());
      if (Done d = buildOutput(m.self, &args[1]); !d) return d;
      plan->step = P::Call{Ref::borrow(reinterpret_cast<PyObject*>(&PyMethod_Type)), std::move(args)};
      return {};
    }
    case Kind::NamedMethod: {  // getattr(receiver, name)
      const NamedMethod& m = v->as<NamedMethod>();
      if (m.self->is(Kind::Context) && PyUnicode_CompareWithASCIIString(m.name.get(), "__exit__") == 0)
        return buildContextExit(m.self, plan);
      PyObject* getattr = lookup(Obj::builtins_getattr);
      if (!getattr) return failFromPython("builtins.getattr");
      std::vector<runtime::OutputPlan> args(2);
      if (Done d = buildOutput(m.self, &args[0]); !d) return d;
      args[1] = runtime::OutputPlan::constant(m.name.get());
      plan->step = P::Call{Ref::borrow(getattr), std::move(args)};
      return {};
    }
    case Kind::Cell: {
      // A cell made in the trace (a local captured by an inner function).
      const Cell& c = v->as<Cell>();
      if (c.outer) break;  // a cell of an enclosing function: not rebuilt (yet)
      std::vector<runtime::OutputPlan> args;
      if (c.contents) {
        args.resize(1);
        if (Done d = buildOutput(c.contents, &args[0]); !d) return d;
      }
      plan->step = P::Call{Ref::borrow(reinterpret_cast<PyObject*>(&PyCell_Type)), std::move(args)};
      return {};
    }
    case Kind::Function: {
      // A function made in the trace: cdynamo._resume.make_function(code, globals,
      // qualname, defaults, kwdefaults, closure, attrs), its cells shared through the memo.
      const Function& fp = v->as<Function>();
      PyObject* helper = lookup(Obj::cdynamo_resume_make_function);
      if (!helper) return failFromPython("cdynamo._resume.make_function");
      std::vector<runtime::OutputPlan> args(7);
      auto optional = [&](size_t i, const ValuePtr& part) -> Done {
        if (part) return buildOutput(part, &args[i]);
        args[i] = runtime::OutputPlan::constant(Py_None);
        return {};
      };
      args[0] = runtime::OutputPlan::constant(fp.code.get());
      args[1] = runtime::OutputPlan::constant(fp.globals.get());
      args[2] = runtime::OutputPlan::constant(fp.qualname.get());
      if (Done d = optional(3, fp.defaults); !d) return d;
      if (Done d = optional(4, fp.kwdefaults); !d) return d;
      std::vector<runtime::OutputPlan> cells;
      if (Done d = buildOutputs(fp.closure, &cells); !d) return d;
      args[5] = P::Tuple{std::move(cells)};
      if (Done d = optional(6, fp.attrs); !d) return d;
      plan->step = P::Call{Ref::borrow(helper), std::move(args)};
      return {};
    }
    case Kind::Null:
    case Kind::Context:
    case Kind::Super:
    case Kind::Partial:
      break;
  }
  return fail(std::string("returning a ") + kindName(v->kind()) + " is not supported yet");
}

Result<bool> Tracer::sameTensorObject(const ValuePtr& a, const ValuePtr& b) {
  const int na = a->as<Tensor>().node, nb = b->as<Tensor>().node;
  if (na == nb) return true;
  auto ia = example_of_node_.find(na), ib = example_of_node_.find(nb);
  if (ia == example_of_node_.end() || ib == example_of_node_.end()) return false;  // a computed tensor is new
  bool same = ia->second.get() == ib->second.get();
  guards().checkAliasing(input_reg_of_node_.at(na), input_reg_of_node_.at(nb), same);
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
    return fail(std::string("mutating a ") + kindName(c->kind()) + " from outside the trace is not supported yet");
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
  using E = runtime::SideEffect;
  for (const InputIterator& in : input_iterators_) {
    const Iterator& it = in.value->as<Iterator>();
    if (it.pos == 0) continue;
    entry_->effects.push_back(E{in.value->reg, E::Advance{static_cast<Py_ssize_t>(std::min(it.pos, it.items.size()))}});
  }
  for (const PendingEffect& e : effects_) {
    runtime::OutputPlan value;
    if (e.kind == PendingEffect::Kind::Container) {
      // The container's final contents, as a fresh list/set/dict to copy from.
      ValuePtr copy;
      if (const List* l = e.value->get<List>()) {
        copy = Value::list(l->items);
      } else if (const Set* st = e.value->get<Set>()) {
        copy = Value::set(st->items);
      } else {
        const Dict& d = e.value->as<Dict>();
        std::vector<Ref> keys;
        for (const Ref& k : d.keys) keys.push_back(k.copy());
        copy = Value::dict(reinterpret_cast<PyObject*>(&PyDict_Type), std::move(keys), d.values);
      }
      if (Done d = buildOutput(copy, &value); !d) return d;
    } else if (Done d = buildOutput(e.value, &value); !d) {
      return d;
    }
    E out{e.reg, E::SetCell{}};
    switch (e.kind) {
      case PendingEffect::Kind::SetAttr: out.what = E::SetAttr{e.name.copy(), std::move(value)}; break;
      case PendingEffect::Kind::SetItem: out.what = E::SetItem{e.name.copy(), std::move(value)}; break;
      case PendingEffect::Kind::SetCell: out.what = E::SetCell{std::move(value)}; break;
      case PendingEffect::Kind::Container:
        if (e.value->is(Kind::List))
          out.what = E::ReplaceList{std::move(value)};
        else if (e.value->is(Kind::Set))
          out.what = E::ReplaceSet{std::move(value)};
        else
          out.what = E::ReplaceDict{std::move(value)};
        break;
    }
    entry_->effects.push_back(std::move(out));
  }
  return {};
}

namespace {

void registersIn(const runtime::OutputPlan& p, std::unordered_set<int>* out) {
  namespace P = runtime::plan;
  auto all = [&](const std::vector<runtime::OutputPlan>& items) {
    for (const runtime::OutputPlan& item : items) registersIn(item, out);
  };
  struct {
    std::unordered_set<int>* out;
    decltype(all)& items;
    void operator()(const P::Register& r) const { out->insert(r.reg); }
    void operator()(const P::GraphOutput&) const {}
    void operator()(const P::Constant&) const {}
    void operator()(const P::Memo&) const {}
    void operator()(const P::Tuple& t) const { items(t.items); }
    void operator()(const P::NamedTuple& t) const { items(t.items); }
    void operator()(const P::List& l) const { items(l.items); }
    void operator()(const P::Deque& d) const { items(d.items); }
    void operator()(const P::Dict& d) const { items(d.values); }
    void operator()(const P::Set& s) const { items(s.items); }
    void operator()(const P::NewObject& n) const { registersIn(*n.attrs, out); }
    void operator()(const P::Call& c) const { items(c.args); }
  } visitor{out, all};
  std::visit(visitor, p.step);
}

}  // namespace

void Tracer::guardInputIterators() {
  if (input_iterators_.empty()) return;
  // The registers the entry reads besides its guards: graph inputs, outputs, effects.
  std::unordered_set<int> read(entry_->input_regs.begin(), entry_->input_regs.end());
  registersIn(entry_->output, &read);
  for (const runtime::SideEffect& e : entry_->effects) {
    read.insert(e.reg);
    if (const runtime::OutputPlan* stored = runtime::storedValue(e)) registersIn(*stored, &read);
  }
  for (const InputIterator& in : input_iterators_) {
    const ValuePtr& it = in.value;
    const Iterator& iter = it->as<Iterator>();
    const size_t taken = std::min(iter.pos, in.item_regs.size());
    std::vector<int> untaken(in.item_regs.begin() + static_cast<std::ptrdiff_t>(taken), in.item_regs.end());
    bool unread = !iter.ended;
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
