// The graph IR (graph_builder.h): inputs, calls run on fake values, effects. The fake mode
// (fake_mode.cpp), the input fakes (input_fakes.cpp), the output-metadata memo (memo.cpp),
// the GraphModule (graph_module.cpp) and the backend call (backend.cpp) are units of their own.
#include "graph/graph_builder.h"

#include "graph/fake_autograd.h"
#include "graph/torch_refs.h"
#include "support/check.h"
#include "support/lookup.h"
#include "support/stats.h"
#include "support/torch_types.h"

namespace cdynamo::graph {

Arg Arg::clone() const {
  Arg a;
  a.kind = kind;
  a.node = node;
  a.constant = constant.copy();
  for (const Arg& i : items) a.items.push_back(i.clone());
  return a;
}

GraphBuilder::~GraphBuilder() { finish(); }

std::string GraphBuilder::uniqueInputName(const std::string& name) {
  if (input_names_.insert(name).second) return name;
  for (int i = 0;; ++i) {
    std::string candidate = name + "_" + std::to_string(i);
    if (input_names_.insert(candidate).second) return candidate;
  }
}

int GraphBuilder::addInput(PyObject* real, const std::string& name, const std::string& source) {
  if (symbolic_) return addSymbolicInput(real, name, source);
  if (dyn_.mode == -1 && dyn_.memory && PyDict_Check(dyn_.memory) && !source.empty()) {
    // Automatic dynamic: the sizes this source had, for the next compile of this code to
    // compare with (cdynamo/_internal/symbolic_shapes.py input_fake reads and updates them from then on).
    Ref shape = Ref::steal(PyObject_GetAttrString(real, "shape"));
    Ref sizes = shape ? Ref::steal(PySequence_List(shape.get())) : Ref();
    if (!sizes || PyDict_SetItemString(dyn_.memory, source.c_str(), sizes.get()) < 0) return -1;
  }
  return addStaticPlaceholder(real, name);
}

int GraphBuilder::addStaticPlaceholder(PyObject* real, const std::string& name) {
  Node n{NodeOp::Placeholder};
  n.name = uniqueInputName(name);
  n.real = Ref::borrow(real);
  n.fake = inputFake(real);
  if (!n.fake) return -1;
  nodes_.push_back(std::move(n));
  return numNodes() - 1;
}

int GraphBuilder::addAttribute(PyObject* real, const std::string& name) {
  Node n{NodeOp::GetAttr};
  n.name = uniqueInputName(name);
  n.real = Ref::borrow(real);
  n.fake = inputFake(real, /*force_static=*/true);
  if (!n.fake) return -1;
  nodes_.push_back(std::move(n));
  return numNodes() - 1;
}

Ref GraphBuilder::materialize(const Arg& a, bool fx, const std::vector<Ref>* fx_nodes) {
  switch (a.kind) {
    case Arg::Kind::Node:
      return fx ? (*fx_nodes)[a.node].copy() : nodes_[a.node].fake.copy();
    case Arg::Kind::Const:
      return a.constant.copy();
    case Arg::Kind::Tuple:
    case Arg::Kind::List: {
      Py_ssize_t n = static_cast<Py_ssize_t>(a.items.size());
      Ref seq = Ref::steal(a.kind == Arg::Kind::Tuple ? PyTuple_New(n) : PyList_New(n));
      if (!seq) return Ref();
      for (Py_ssize_t i = 0; i < n; ++i) {
        Ref item = materialize(a.items[i], fx, fx_nodes);
        if (!item) return Ref();
        if (a.kind == Arg::Kind::Tuple)
          PyTuple_SET_ITEM(seq.get(), i, item.release());
        else
          PyList_SET_ITEM(seq.get(), i, item.release());
      }
      return seq;
    }
    case Arg::Kind::Slice: {
      CDYNAMO_CHECK(a.items.size() == 3, "slice argument needs three parts");
      Ref start = materialize(a.items[0], fx, fx_nodes);
      Ref stop = materialize(a.items[1], fx, fx_nodes);
      Ref step = materialize(a.items[2], fx, fx_nodes);
      if (!start || !stop || !step) return Ref();
      return Ref::steal(PySlice_New(start.get(), stop.get(), step.get()));
    }
  }
  return Ref();
}

int GraphBuilder::internLocation(int parent, PyObject* code, int addr) {
  auto key = std::make_tuple(parent, code, addr);
  auto it = location_ids_.find(key);
  if (it != location_ids_.end()) return it->second;
  int id = static_cast<int>(locations_.size());
  locations_.push_back({parent, Ref::borrow(code), addr});
  location_ids_.emplace(key, id);
  return id;
}

PyObject* GraphBuilder::stackTrace(int loc) {
  if (stack_traces_.size() < locations_.size()) stack_traces_.resize(locations_.size());
  if (stack_traces_[loc]) return stack_traces_[loc].get();
  // cdynamo._trace.format_stack(((code, addr), ...)), outermost first.
  std::vector<int> chain;
  for (int l = loc; l >= 0; l = locations_[l].parent) chain.push_back(l);
  Ref frames = Ref::steal(PyTuple_New(static_cast<Py_ssize_t>(chain.size())));
  if (!frames) return nullptr;
  for (size_t i = 0; i < chain.size(); ++i) {
    const Location& l = locations_[chain[chain.size() - 1 - i]];
    PyObject* item = Py_BuildValue("(Oi)", l.code.get(), l.addr);
    if (!item) return nullptr;
    PyTuple_SET_ITEM(frames.get(), static_cast<Py_ssize_t>(i), item);
  }
  PyObject* format = lookup(Obj::cdynamo_trace_format_stack);
  if (!format) return nullptr;
  stack_traces_[loc] = Ref::steal(PyObject_CallOneArg(format, frames.get()));
  return stack_traces_[loc].get();
}

int GraphBuilder::runtimeAssertsNeeded() {
  if (!shape_env_) return 0;
  if (has_unbacked_) return 1;
  Ref count = Ref::steal(PyObject_GetAttrString(shape_env_.get(), "num_deferred_runtime_asserts"));
  if (!count) return -1;
  Py_ssize_t n = PyLong_AsSsize_t(count.get());
  if (n < 0 && PyErr_Occurred()) return -1;
  return n > 0 ? 1 : 0;
}

int GraphBuilder::rejectChoiceMutation(NodeOp op, PyObject* target, const Node& n) {
  // The tensor an in-place op changes is its first argument (the receiver of x.add_(),
  // operator.iadd's left side, setitem's target); by storage, views included.
  if (choices_.empty() || n.args.empty() || !isMutating(op, target)) return 0;
  std::vector<int> changed;
  argNodes(n.args[0], &changed);
  for (int id : changed) {
    const void* storage = isTensor(nodes_[id].fake.get()) ? torchimpl::storageId(nodes_[id].fake.get()) : nullptr;
    if (storage && std::find(choice_storages_.begin(), choice_storages_.end(), storage) != choice_storages_.end()) {
      PyErr_SetString(PyExc_NotImplementedError,
                      "an in-place change of the result of min()/max() over tensors, of one of its items or of a "
                      "view of them (eager changes the item that won itself)");
      return -1;
    }
  }
  return 0;
}

int GraphBuilder::fromMemo(PyObject* key, const std::vector<bool>& in_rg, Node* n, Ref* memo_result) {
  const MemoEntry* entry = memoFind(key, in_rg);
  if (!entry) return 0;
  n->fake = memoMake(*entry, *n);
  if (!n->fake) {
    PyErr_Clear();  // fall back to running it
  } else if (entry->alias_arg >= 0) {
    n->sig = nodes_[n->args[entry->alias_arg].node].sig.copy();  // the argument's, if known
    n->sig_rg = nodes_[n->args[entry->alias_arg].node].sig_rg;
  } else if (!entry->view_of_receiver && !entry->tuple && !entry->outputs[0].view) {
    // The new node's own signature is known (see nodeSig). Not for a view result: the
    // spec's shape and strides are its base's (nodeSig reads the view's own later).
    const FakeSpec& spec = entry->outputs[0];
    n->sig = makeSig(spec.dtype.get(), spec.device.get(), spec.shape.get(), spec.stride.get());
    n->sig_rg = spec.requires_grad;
  }
  if (n->fake) ++stats().memo_hits;
  int check = n->fake ? memoCheck() : 0;
  if (check < 0) return -1;
  if (check) *memo_result = std::move(n->fake);
  return 0;
}

Ref GraphBuilder::runOnFakes(NodeOp op, PyObject* target, const Node& n, bool python_dispatch) {
  Ref fargs = Ref::steal(PyTuple_New(static_cast<Py_ssize_t>(n.args.size())));
  if (!fargs) return Ref();
  for (size_t i = 0; i < n.args.size(); ++i) {
    Ref v = materialize(n.args[i], false, nullptr);
    if (!v) return Ref();
    PyTuple_SET_ITEM(fargs.get(), i, v.release());
  }
  Ref fkwargs;
  if (!n.kwargs.empty()) {
    fkwargs = Ref::steal(PyDict_New());
    if (!fkwargs) return Ref();
    for (auto& [k, v] : n.kwargs) {
      Ref val = materialize(v, false, nullptr);
      if (!val || PyDict_SetItem(fkwargs.get(), k.get(), val.get()) < 0) return Ref();
    }
  }
  // Under a ShapeEnv, with torch's Python dispatcher on, as torch._dynamo runs every fake
  // op (get_fake_value): the Python decompositions of composite ops (upsample's, used by
  // F.interpolate) apply, which keep sizes symbolic where the C++ composite reads
  // sizes() and specializes them. On for this call only (the object's end restores).
  // Not for the output-metadata memo's ops (`key` set: pointwise ops, views, softmax,
  // norms, linear, matmul, dropout, attention), whose C++ composites work on symbolic
  // sizes: on for them it cost a dynamic TransformerEncoder trace ~5% (callgrind), and
  // it changes only matmul's folding guard and dropout's decomposition among them.
  Ref python_dispatcher;
  if (python_dispatch) {
    PyObject* enable = lookup(Obj::torch_C_EnablePythonDispatcher);
    python_dispatcher = enable ? Ref::steal(PyObject_CallNoArgs(enable)) : Ref();
    if (!python_dispatcher) return Ref();
  }
  Ref result;
  if (op == NodeOp::CallMethod) {
    // target is the method name; args[0] is the receiver.
    CDYNAMO_CHECK(PyTuple_GET_SIZE(fargs.get()) >= 1, "method call without receiver");
    Ref method = Ref::steal(PyObject_GetAttr(PyTuple_GET_ITEM(fargs.get(), 0), target));
    if (!method) return Ref();
    Ref rest = Ref::steal(PyTuple_GetSlice(fargs.get(), 1, PyTuple_GET_SIZE(fargs.get())));
    if (!rest) return Ref();
    result = Ref::steal(PyObject_Call(method.get(), rest.get(), fkwargs.get()));
  } else {
    result = Ref::steal(PyObject_Call(target, fargs.get(), fkwargs.get()));
  }
  if (python_dispatcher) {
    PyObject *type, *value, *tb;  // a pending error survives the object's end
    PyErr_Fetch(&type, &value, &tb);
    python_dispatcher = Ref();
    PyErr_Restore(type, value, tb);
  }
  return result;
}

int GraphBuilder::rejectChoiceView(const Node& n) {
  // A view of the result of min()/max() over tensors (m[()], m.detach(), m.data) is a
  // view of the where() node, where eager's is a view of the item that won: it would
  // leave the frame, or be changed in place, as a view of the wrong tensor. (The result
  // itself, m.float() of a float m, is m: choiceOf.)
  if (choice_results_.empty() || !isTensor(n.fake.get())) return 0;
  const void* storage = torchimpl::storageId(n.fake.get());
  for (int c : choice_results_)
    if (storage && storage == torchimpl::storageId(nodes_[c].fake.get()) && n.fake.get() != nodes_[c].fake.get()) {
      PyErr_SetString(PyExc_NotImplementedError,
                      "a view of the result of min()/max() over tensors (eager's is a view of the item that won)");
      return -1;
    }
  return 0;
}

int GraphBuilder::bindUnbacked(Node* n) {
  // Which new unbacked symbols (Tensor.item()'s) this result binds, as torch._dynamo
  // records them for each node: a backend that re-traces the graph (AOT autograd) needs
  // them, and it consumes the ShapeEnv's pending symbols.
  if (!shape_env_) return 0;
  Ref pending = Ref::steal(PyObject_GetAttrString(shape_env_.get(), "pending_fresh_unbacked_symbols"));
  if (!pending) return -1;
  int any = PyObject_IsTrue(pending.get());
  if (any < 0) return -1;
  if (any) {
    const TorchRefs* t = torchRefs();
    if (!t) return -1;
    n->unbacked_bindings = Ref::steal(PyObject_CallFunctionObjArgs(lookup(Obj::torch_compute_unbacked_bindings),
                                                                   shape_env_.get(), n->fake.get(), nullptr));
    if (!n->unbacked_bindings) return -1;
    if (n->unbacked_bindings.get() == Py_None) n->unbacked_bindings = Ref();
    else has_unbacked_ = true;
  }
  return 0;
}

void GraphBuilder::rememberResult(NodeOp op, PyObject* target, PyObject* key, const Node& n,
                                  const std::vector<long long>& versions_before, std::vector<bool> in_rg) {
  Ref key_after;
  std::vector<bool> rg_after;
  if (shape_env_) {
    // The op may have taught the ShapeEnv replacements (a size specialized by a shape
    // check): the arguments' signatures read again, and the entry stored under that key
    // too, the one tensors made from now on are keyed as.
    std::vector<int> arg_nodes;
    for (const Arg& a : n.args) argNodes(a, &arg_nodes);
    for (const auto& kv : n.kwargs) argNodes(kv.second, &arg_nodes);
    for (int id : arg_nodes) nodes_[id].sig = Ref();
    key_after = memoKey(op, target, n.args, n.kwargs, &rg_after);
    if (key_after) {
      int same = PyObject_RichCompareBool(key_after.get(), key, Py_EQ);
      if (same != 0) key_after = Ref();
      if (same < 0) PyErr_Clear();
    }
  }
  memoStore(key, n.fake.get(), n, versions_before, std::move(in_rg));
  if (key_after) memoStore(key_after.get(), n.fake.get(), n, versions_before, std::move(rg_after));
}

// torch.maximum(a, b, out=c): the call writes into c, whatever reads its result.
static bool writesOut(const Node& n) {
  for (const auto& [name, a] : n.kwargs)
    if (PyUnicode_Check(name.get()) && PyUnicode_CompareWithASCIIString(name.get(), "out") == 0 &&
        !(a.kind == Arg::Kind::Const && a.constant.get() == Py_None))
      return true;
  return false;
}

int GraphBuilder::addCall(NodeOp op, PyObject* target, std::vector<Arg> args,
                          std::vector<std::pair<Ref, Arg>> kwargs, Ref* plain_result, bool keep,
                          PyObject* known_fake) {
  Node n{op};
  if (location_source_) n.loc = location_source_();
  n.target = Ref::borrow(target);
  n.args = std::move(args);
  n.kwargs = std::move(kwargs);
  if (rejectChoiceMutation(op, target, n) < 0) return -1;
  if (known_fake) n.fake = Ref::borrow(known_fake);

  // The memo first: an identical op on identically shaped inputs makes its result directly.
  std::vector<bool> in_rg;
  Ref key = known_fake ? Ref() : memoKey(op, target, n.args, n.kwargs, &in_rg);
  Ref memo_result;  // with config.memo_check: the memo's result, checked against the op's own
  if (key && fromMemo(key.get(), in_rg, &n, &memo_result) < 0) return -1;

  if (key && !n.fake && !memo_result) ++stats().memo_misses;
  std::vector<long long> versions_before;
  bool ran = false;  // the op ran on fakes (a memo candidate when `key` is set)
  if (!n.fake) {
    ran = !memo_result;
    if (key && ran)
      for (const Arg& a : n.args)
        versions_before.push_back(a.kind == Arg::Kind::Node ? tensorVersion(nodes_[a.node].fake.get()) : -1);
    n.fake = runOnFakes(op, target, n, shape_env_ && !key);
    if (memo_result) {
      // The check mode (tests): what the memo made must be what running the op made.
      if (!n.fake || !checkMemoResult(memo_result.get(), n.fake.get(), target)) return -1;
      n.fake = std::move(memo_result);
    }
  }
  if (!n.fake) return -1;
  if (rejectChoiceView(n) < 0 || bindUnbacked(&n) < 0) return -1;
  // Remembered after the ShapeEnv's checks: a result binding fresh unbacked symbols is
  // made by running the op every time (each run binds symbols of its own).
  if (ran && key && !n.unbacked_bindings) rememberResult(op, target, key.get(), n, versions_before, std::move(in_rg));
  n.impure = keep || isMutating(op, target) || writesOut(n);
  if (n.impure) forgetSigsOf(n);
  // A mutation (x[i] = y returns None) is recorded whatever it returns; a pure call with
  // no tensor in its result is a metadata query and leaves no node. A symbolic scalar
  // (Tensor.item() and arithmetic on it, under capture_scalar_outputs) is a node: its
  // value is only known when the graph runs.
  const TorchRefs* t = torchRefs();
  if (!t) return -1;
  if (!n.impure && !holdsTensor(n.fake.get()) && !isSymScalar(n.fake.get(), t)) {
    *plain_result = std::move(n.fake);
    return kNoTensorResult;
  }
  nodes_.push_back(std::move(n));
  return numNodes() - 1;
}

void GraphBuilder::argNodes(const Arg& a, std::vector<int>* out) const {
  if (a.kind == Arg::Kind::Node) out->push_back(a.node);
  for (const Arg& i : a.items) argNodes(i, out);
}

void GraphBuilder::forgetSigsOf(const Node& n) {
  // An op that changes its arguments in place may change their metadata too (unsqueeze_,
  // t_, resize_, requires_grad_): the memo signatures read of every node holding one of
  // those tensors are stale, and would key a later op as the tensor was before.
  std::vector<PyObject*> changed;
  for (const Arg& a : n.args) tensorInputs(a, &changed);
  for (const auto& kv : n.kwargs) tensorInputs(kv.second, &changed);
  if (changed.empty()) return;
  for (Node& other : nodes_) {
    if (!other.sig) continue;
    for (PyObject* c : changed)
      if (other.fake.get() == c) {
        other.sig = Ref();
        break;
      }
  }
}

void GraphBuilder::nameHint(int id, const std::string& name) {
  Node& n = nodes_[id];
  if (n.op == NodeOp::Placeholder || n.hint_at >= 0 || isScalar(id)) return;
  n.hint = name;
  n.hint_at = numNodes();
}

bool GraphBuilder::isScalar(int id) const {
  const TorchRefs* t = torchRefs();
  PyObject* f = nodes_[id].fake.get();
  return t && f && isSymScalar(f, t);
}

int GraphBuilder::addEffect(PyObject* target, std::vector<Arg> args, bool located,
                            std::vector<std::pair<Ref, Arg>> kwargs) {
  Node n{NodeOp::CallFunction};
  if (located && location_source_) n.loc = location_source_();
  n.target = Ref::borrow(target);
  n.args = std::move(args);
  n.kwargs = std::move(kwargs);
  n.impure = true;
  // An effect changes global state that fake results depend on (grad mode, autocast).
  if (memo_) PyDict_Clear(memo_.get());
  memo_entries_.clear();
  Ref fargs = Ref::steal(PyTuple_New(static_cast<Py_ssize_t>(n.args.size())));
  if (!fargs) return -1;
  for (size_t i = 0; i < n.args.size(); ++i) {
    Ref v = materialize(n.args[i], false, nullptr);
    if (!v) return -1;
    PyTuple_SET_ITEM(fargs.get(), i, v.release());
  }
  Ref fkwargs;
  if (!n.kwargs.empty()) {
    fkwargs = Ref::steal(PyDict_New());
    if (!fkwargs) return -1;
    for (const auto& [name, a] : n.kwargs) {
      Ref v = materialize(a, false, nullptr);
      if (!v || PyDict_SetItem(fkwargs.get(), name.get(), v.get()) < 0) return -1;
    }
  }
  n.fake = Ref::steal(PyObject_Call(target, fargs.get(), fkwargs.get()));
  if (!n.fake) return -1;
  nodes_.push_back(std::move(n));
  return numNodes() - 1;
}

}  // namespace cdynamo::graph

namespace cdynamo::graph {

void GraphBuilder::markChoice(int id, std::vector<int> candidates, int index) {
  for (int c : candidates)
    if (const void* s = torchimpl::storageId(nodes_[c].fake.get())) choice_storages_.push_back(s);
  if (const void* s = torchimpl::storageId(nodes_[id].fake.get())) choice_storages_.push_back(s);
  choice_results_.push_back(id);
  choices_[id] = Choice{std::move(candidates), index};
}

const GraphBuilder::Choice* GraphBuilder::choiceOf(int id) const {
  if (choices_.empty()) return nullptr;
  auto it = choices_.find(id);
  if (it != choices_.end()) return &it->second;
  PyObject* fake = nodes_[id].fake.get();
  for (const auto& [node, choice] : choices_)
    if (nodes_[node].fake.get() == fake) return &choice;
  return nullptr;
}

}  // namespace cdynamo::graph
