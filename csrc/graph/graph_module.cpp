// The torch.fx.GraphModule of the live nodes (GraphBuilder::buildGraphModule), with the FX
// nodes made as Graph.create_node makes them and the forward's source from fx_codegen.h.
#include "graph/graph_builder.h"

#include <cctype>

#include "graph/fx_codegen.h"
#include "graph/fx_namespace.h"
#include "graph/torch_refs.h"
#include "support/lookup.h"

namespace cdynamo::graph {

namespace {

// Adds nodes to a fresh torch.fx.Graph as Graph.create_node does, with its Python steps done
// here: the names given (see nodeNames), the same Node objects, inserted at the end,
// registered in the find_nodes table, counted; the graph's _Namespace is left in the state
// the names were made in (finish). What create_node does besides is for
// cases that never arise here (an owning module with create-node hooks: the graph has no
// owner yet) or is only a warning (raw SymInt/SymFloat/SymBool arguments: such a node goes
// through create_node itself). Falls back to create_node altogether when the Graph
// does not have the internals this relies on (another torch version).
class FxNodeMaker {
 public:
  bool init(PyObject* graph) {
    graph_ = graph;
    create_node_ = Ref::steal(PyObject_GetAttrString(graph, "create_node"));
    if (!create_node_) return false;
    PyObject* fx = lookup(Obj::torch_fx_graph);
    if (!fx) return false;
    node_cls_ = Ref::borrow(lookup(Obj::torch_fx_graph_Node));
    if (!node_cls_) return false;
    immutable_dict_ = Ref::borrow(lookup(Obj::torch_fx_immutable_dict));
    if (!immutable_dict_) return false;
    namespace_ = Ref::steal(PyObject_GetAttrString(graph, "_graph_namespace"));
    Ref table = namespace_ ? Ref::steal(PyObject_GetAttrString(graph, "_find_nodes_lookup_table")) : Ref();
    if (namespace_) {
      used_ = Ref::steal(PyObject_GetAttrString(namespace_.get(), "_used_names"));
      base_count_ = Ref::steal(PyObject_GetAttrString(namespace_.get(), "_base_count"));
      obj_to_name_ = Ref::steal(PyObject_GetAttrString(namespace_.get(), "_obj_to_name"));
    }
    insert_ = Ref::steal(PyObject_GetAttrString(graph, "_insert"));
    table_insert_ = table ? Ref::steal(PyObject_GetAttrString(table.get(), "insert")) : Ref();
    // Graph._insert is root.prepend, i.e. root._prepend (NodeBase, C): called directly.
    // _FindNodesLookupTable.insert(n) is table[(n.op, n.target or None)][n] = None (table a
    // defaultdict): done here when the table is of that exact class.
    Ref root = Ref::steal(PyObject_GetAttrString(graph, "_root"));
    Ref prepend = Ref::steal(PyObject_GetAttrString(node_cls_.get(), "prepend"));
    if (root && prepend && insert_ && PyMethod_Check(insert_.get()) && PyMethod_GET_SELF(insert_.get()) == root.get() &&
        PyMethod_GET_FUNCTION(insert_.get()) == prepend.get())
      root_prepend_ = Ref::steal(PyObject_GetAttrString(root.get(), "_prepend"));
    Ref table_cls = Ref::borrow(lookup(Obj::torch_fx_graph_FindNodesLookupTable));
    if (table && table_cls && reinterpret_cast<PyObject*>(Py_TYPE(table.get())) == table_cls.get())
      table_dict_ = Ref::steal(PyObject_GetAttrString(table.get(), "table"));
    Ref defaultdict = Ref::borrow(lookup(Obj::collections_defaultdict));
    if (table_dict_ && (!defaultdict || !PyObject_TypeCheck(table_dict_.get(), reinterpret_cast<PyTypeObject*>(
                                                                                 defaultdict.get()))))
      table_dict_ = Ref();
    target_to_str_ = Ref::steal(PyObject_GetAttrString(graph, "_target_to_str"));
    illegal_ = Ref::steal(PyObject_GetAttrString(fx, "_illegal_names"));
    Ref len = Ref::steal(PyObject_GetAttrString(graph, "_len"));
    fast_ = used_ && PySet_CheckExact(used_.get()) && base_count_ && PyDict_CheckExact(base_count_.get()) &&
            obj_to_name_ && PyDict_CheckExact(obj_to_name_.get()) && insert_ && table_insert_ && target_to_str_ &&
            illegal_ && PyDict_Check(illegal_.get()) && len && PyLong_CheckExact(len.get()) &&
            PyLong_AsLong(len.get()) == 0;
    PyErr_Clear();  // a missing internal: the slow path
    return true;
  }

  // Whether node names can be made here (nodeNames): FX's candidate names and illegal names are known.
  bool naming() const { return target_to_str_ && illegal_ && PyDict_Check(illegal_.get()); }
  PyObject* illegalNames() const { return illegal_.get(); }

  // A node like graph.create_node(op, target, args, kwargs, name); `name` null: FX names
  // it (only when !naming()). New reference or null.
  Ref make(Str op, PyObject* target, PyObject* args, PyObject* kwargs, bool plain_args, PyObject* name) {
    PyObject* op_str = interned(op);
    if (!op_str) return Ref();
    if (!fast_ || !plain_args || !name) {
      PyObject* argv[] = {op_str, target, args, kwargs, name ? name : Py_None};
      return Ref::steal(PyObject_Vectorcall(create_node_.get(), argv, 5, nullptr));
    }
    // create_node: `if not kwargs: kwargs = immutable_dict()` (args here are always a tuple).
    Ref empty_kwargs;
    if (PyDict_GET_SIZE(kwargs) == 0) {
      empty_kwargs = Ref::steal(PyObject_CallNoArgs(immutable_dict_.get()));
      if (!empty_kwargs) return Ref();
      kwargs = empty_kwargs.get();
    }
    PyObject* argv[] = {graph_, name, op_str, target, args, kwargs};
    Ref node = Ref::steal(PyObject_Vectorcall(node_cls_.get(), argv, 6, nullptr));
    if (!node) return Ref();
    // _Namespace.associate_name_with_obj, Graph._insert, _FindNodesLookupTable.insert.
    PyObject* existing = PyDict_SetDefault(obj_to_name_.get(), node.get(), name);
    if (!existing) return Ref();
    if (existing != name) {
      PyErr_SetString(PyExc_AssertionError, "obj is already associated");
      return Ref();
    }
    Ref r = Ref::steal(PyObject_CallOneArg((root_prepend_ ? root_prepend_ : insert_).get(), node.get()));
    if (!r) return Ref();
    if (table_dict_) {
      bool call = op == Str::call_function;
      Ref key = Ref::steal(PyTuple_Pack(2, op_str, call ? target : Py_None));
      Ref sub = key ? Ref::steal(PyObject_GetItem(table_dict_.get(), key.get())) : Ref();
      if (!sub || PyObject_SetItem(sub.get(), node.get(), Py_None) < 0) return Ref();
    } else {
      r = Ref::steal(PyObject_CallOneArg(table_insert_.get(), node.get()));
      if (!r) return Ref();
    }
    ++made_;
    return node;
  }

  // Graph._len += the nodes made here; the namespace's used names and base counts become
  // those of `names` (where the names were made), so names FX makes later (the output node,
  // a pass adding nodes) are made as on torch._dynamo's graph.
  bool finish(const FxNamespace& names) {
    if (fast_) {
      for (const std::string& u : names.used()) {
        Ref k = Ref::steal(PyUnicode_FromStringAndSize(u.data(), static_cast<Py_ssize_t>(u.size())));
        if (!k || PySet_Add(used_.get(), k.get()) < 0) return false;
      }
      for (const auto& [base, num] : names.baseCounts()) {
        Ref k = Ref::steal(PyUnicode_FromStringAndSize(base.data(), static_cast<Py_ssize_t>(base.size())));
        Ref v = Ref::steal(PyLong_FromLongLong(num));
        if (!k || !v || PyDict_SetItem(base_count_.get(), k.get(), v.get()) < 0) return false;
      }
    }
    if (!made_) return true;
    Ref len = Ref::steal(PyObject_GetAttrString(graph_, "_len"));
    if (!len) return false;
    Ref n = Ref::steal(PyLong_FromSsize_t(PyLong_AsSsize_t(len.get()) + made_));
    return n && PyObject_SetAttrString(graph_, "_len", n.get()) == 0;
  }

  // Graph._target_to_str(target), once per target (only when naming()).
  Ref candidateFor(PyObject* target) {
    auto it = candidates_.find(target);
    if (it != candidates_.end()) return it->second.second.copy();
    Ref c = Ref::steal(PyObject_CallOneArg(target_to_str_.get(), target));
    if (!c) return Ref();
    candidates_.emplace(target, std::make_pair(Ref::borrow(target), c.copy()));
    return c;
  }

 private:
  PyObject* graph_ = nullptr;
  bool fast_ = false;
  Py_ssize_t made_ = 0;
  Ref root_prepend_, table_dict_;  // fast forms of insert_ / table_insert_, when they apply
  Ref create_node_, node_cls_, immutable_dict_, namespace_, used_, base_count_, obj_to_name_, insert_, table_insert_, target_to_str_,
      illegal_;
  std::unordered_map<PyObject*, std::pair<Ref, Ref>> candidates_;  // target -> (target, candidate name)
};

// The entries of a graph input's __dict__ that torch._dynamo copies into its placeholder's
// meta["tensor_dict"] (no tensors: they would make reference cycles).
Ref tensorDict(PyObject* tensor) {
  Ref out = Ref::steal(PyDict_New());
  if (!out) return Ref();
  PyObject** dictptr = _PyObject_GetDictPtr(tensor);
  if (!dictptr || !*dictptr) return out;
  for (const char* key : {"_dynamo_static_input_type", "tag"}) {
    PyObject* v = PyDict_GetItemString(*dictptr, key);
    if (v && PyDict_SetItemString(out.get(), key, v) < 0) return Ref();
  }
  return out;
}

// Whether an argument tree holds no raw symbolic number (create_node warns about those).
bool plainArg(const Arg& a, const TorchRefs* t) {
  if (a.kind == Arg::Kind::Const && a.constant && isSymScalar(a.constant.get(), t)) return false;
  for (const Arg& i : a.items)
    if (!plainArg(i, t)) return false;
  return true;
}

// The FX node of call or get_attr node `n` (materialize(arg): its FX form), as
// Graph.create_node makes it. A get_attr's object (a tensor, or a subgraph's GraphModule)
// becomes an attribute of `root`, which GraphModule copies over (a Parameter as a parameter,
// another tensor as a buffer, a module as a submodule), the same object: the graph reads it live.
template <class Materialize>
Ref emitNode(FxNodeMaker& maker, const Node& n, const TorchRefs* t, PyObject* root, PyObject* no_args,
             PyObject* fx_name, Materialize&& materialize) {
  if (n.op == NodeOp::GetAttr) {
    const std::string& attr = n.attr.empty() ? n.name : n.attr;
    Ref name = Ref::steal(PyUnicode_FromStringAndSize(attr.data(), static_cast<Py_ssize_t>(attr.size())));
    Ref kw = Ref::steal(PyDict_New());
    if (!name || !kw || PyObject_SetAttr(root, name.get(), n.real.get()) < 0) return Ref();
    return maker.make(Str::get_attr, name.get(), no_args, kw.get(), false, fx_name);
  }
  Ref fargs = Ref::steal(PyTuple_New(static_cast<Py_ssize_t>(n.args.size())));
  if (!fargs) return Ref();
  bool plain = true;
  for (size_t k = 0; k < n.args.size(); ++k) {
    Ref v = materialize(n.args[k]);
    if (!v) return Ref();
    PyTuple_SET_ITEM(fargs.get(), k, v.release());
    plain = plain && plainArg(n.args[k], t);
  }
  Ref fkwargs = Ref::steal(PyDict_New());
  if (!fkwargs) return Ref();
  for (const auto& [k, v] : n.kwargs) {
    Ref val = materialize(v);
    if (!val || PyDict_SetItem(fkwargs.get(), k.get(), val.get()) < 0) return Ref();
    plain = plain && plainArg(v, t);
  }
  return maker.make(n.op == NodeOp::CallMethod ? Str::call_method : Str::call_function, n.target.get(), fargs.get(),
                    fkwargs.get(), plain, fx_name);
}

// Adds `delta` to uses[m] for every node m that node `n` reads (its arguments, nested in
// tuples and lists, and its keyword arguments): the use counts of the liveness passes.
template <class Uses>
void countUses(const Node& n, int delta, Uses& uses) {
  auto countArg = [&](const Arg& a, auto&& self) -> void {
    if (a.kind == Arg::Kind::Node) uses[a.node] += delta;
    for (const Arg& i : a.items) self(i, self);
  };
  for (const Arg& a : n.args) countArg(a, countArg);
  for (const auto& kv : n.kwargs) countArg(kv.second, countArg);
}

}  // namespace

bool GraphBuilder::keepAssertedReads(std::vector<int>* uses) {
  // A value read from a tensor that a deferred runtime assert is about (torch._check(
  // t.item() > 0), read by nothing else) stays: the assert placed after it needs its symbol.
  PyObject* shapes = lookup(Obj::cdynamo_shapes);
  Ref syms = shapes ? Ref::steal(PyObject_CallMethod(shapes, "runtime_assert_symbols", "O", shape_env_.get()))
                    : Ref();
  if (!syms) return false;
  for (int i = 0; i < numNodes(); ++i) {
    PyObject* bindings = nodes_[i].unbacked_bindings.get();
    if (!bindings || !PyDict_Check(bindings)) continue;
    PyObject *sym, *path;
    Py_ssize_t pos = 0;
    while (PyDict_Next(bindings, &pos, &sym, &path)) {
      int in = PySequence_Contains(syms.get(), sym);
      if (in < 0) return false;
      if (in) {
        ++(*uses)[i];
        break;
      }
    }
  }
  return true;
}

bool GraphBuilder::liveNodes(const std::vector<int>& outputs, const TorchRefs* t, std::vector<char>* out) {
  // Liveness, by torch._dynamo's rule: every recorded call stays in the graph, used or not
  // (a dead `x + 1` is compiled and counted), except the calls that only read something
  // out of another node: an unused operator.getitem, an unused size/stride/storage_offset/
  // item method call on a tensor, and an unused call computing a symbolic number from
  // symbolic numbers and constants, and the trace's own bookkeeping (markBookkeeping). One pass from the last node back, so a chain of them
  // (item() read only by unused arithmetic) goes as a whole. Placeholders are kept when a
  // kept node or an output uses them.
  std::vector<int> uses(nodes_.size(), 0);
  auto countNode = [&](const Node& n, int delta) { countUses(n, delta, uses); };
  for (const Node& n : nodes_)
    if (!n.moved) countNode(n, 1);  // a subgraph's body is not this graph's
  for (int o : outputs)
    if (o >= 0) ++uses[o];
  if (has_unbacked_ && !keepAssertedReads(&uses)) return false;
  PyObject* getitem = lookup(Obj::operator_getitem);
  if (!getitem) return false;
  auto symArg = [&](const Arg& a) {
    if (a.kind == Arg::Kind::Node) return isScalar(a.node);
    if (a.kind != Arg::Kind::Const || !a.constant) return false;
    PyObject* c = a.constant.get();
    return PyLong_Check(c) || PyFloat_Check(c) || isSymScalar(c, t);  // bool is an int
  };
  auto readsOnly = [&](const Node& n) {
    if (n.impure) return false;
    if (n.op == NodeOp::CallFunction && n.target.get() == getitem) return true;
    if (n.op == NodeOp::CallMethod && !n.args.empty() && n.args[0].kind == Arg::Kind::Node &&
        PyUnicode_Check(n.target.get())) {
      for (const char* m : {"size", "stride", "storage_offset", "item"})
        if (PyUnicode_CompareWithASCIIString(n.target.get(), m) == 0) return !isScalar(n.args[0].node);
    }
    if (n.op != NodeOp::CallFunction || !n.fake || !isSymScalar(n.fake.get(), t)) return false;
    for (const Arg& a : n.args)
      if (!symArg(a)) return false;
    for (const auto& kv : n.kwargs)
      if (!symArg(kv.second)) return false;
    return true;
  };
  std::vector<char>& live = *out;
  live.assign(nodes_.size(), 0);
  for (int i = numNodes() - 1; i >= 0; --i) {
    const Node& n = nodes_[i];
    if (n.moved) continue;
    if (n.op == NodeOp::Placeholder) {
      live[i] = uses[i] > 0;
    } else if (uses[i] == 0 && (readsOnly(n) || bookkeeping_.count(i))) {
      countNode(n, -1);
    } else {
      live[i] = 1;
    }
  }
  // A symbol's placeholder lives with every live input whose sizes mention it (backends
  // bind the symbols of the inputs' metadata from those placeholders).
  for (int i = 0; i < numNodes(); ++i)
    if (live[i])
      for (int s : nodes_[i].uses_syms) live[s] = 1;
  return true;
}

bool GraphBuilder::setNodeMeta(PyObject* fxn, const Node& n) {
  Ref meta = Ref::steal(PyObject_GetAttr(fxn, interned(Str::meta)));
  if (!meta) return false;
  // A subgraph's get_attr has no example value (torch._dynamo sets none).
  if (!n.submodule && PyDict_SetItem(meta.get(), interned(Str::example_value), n.fake.get()) < 0) return false;
  if (n.unbacked_bindings && PyDict_SetItemString(meta.get(), "unbacked_bindings", n.unbacked_bindings.get()) < 0)
    return false;
  if (n.real) {
    // meta["tensor_dict"]: the tensor's marks as torch._dynamo copies them (a static input's
    // _dynamo_static_input_type, a tag), read now so marks made in the trace are in.
    Ref tensor_dict = tensorDict(n.real.get());
    if (!tensor_dict || PyDict_SetItemString(meta.get(), "tensor_dict", tensor_dict.get()) < 0) return false;
  }
  if (n.loc >= 0) {
    PyObject* trace = stackTrace(n.loc);
    if (!trace || (trace != Py_None && PyDict_SetItemString(meta.get(), "stack_trace", trace) < 0)) return false;
  }
  return true;
}

Ref GraphBuilder::buildGraphModule(const std::vector<int>& outputs, std::vector<int>* inputs_used,
                                   int* op_count) {
  const TorchRefs* t = torchRefs();
  if (!t) return Ref();
  std::vector<char> live;
  if (!liveNodes(outputs, t, &live)) return Ref();
  // A value computed inside a subgraph exists only there: the graph may read it only
  // through the higher-order op's outputs. Reaching it otherwise (a body that left a tensor
  // in a container the trace made) has no graph to compute it in.
  auto escapes = [&](const Arg& a, auto&& self) -> bool {
    if (a.kind == Arg::Kind::Node && nodes_[a.node].moved) return true;
    for (const Arg& i : a.items)
      if (self(i, self)) return true;
    return false;
  };
  bool escaped = false;
  for (int o : outputs) escaped = escaped || nodes_[o].moved;
  for (int i = 0; i < numNodes() && !escaped; ++i) {
    if (!live[i]) continue;
    for (const Arg& a : nodes_[i].args) escaped = escaped || escapes(a, escapes);
    for (const auto& kv : nodes_[i].kwargs) escaped = escaped || escapes(kv.second, escapes);
  }
  if (escaped) {
    PyErr_SetString(PyExc_NotImplementedError,
                    "a value computed inside the body of a higher-order op (torch.cond, checkpoint, ...) is used "
                    "outside it other than through the op's outputs");
    return Ref();
  }

  Ref graph = Ref::steal(PyObject_CallNoArgs(lookup(Obj::torch_fx_Graph)));
  if (!graph) return Ref();
  FxNodeMaker maker;
  if (!maker.init(graph.get())) return Ref();
  Ref no_args = Ref::steal(PyTuple_New(0));
  if (!no_args) return Ref();
  // The nodes' names, as torch._dynamo's graph gets them while it grows: each node is named
  // from its target when it is made (Graph._target_to_str, made unique), inputs first, then
  // the calls in program order, and a node the program stores into a local is renamed
  // after it at that point (nameHint), so `y = x + 1` is the node `y`, and a later `add`
  // still counts the name `add` as taken. Dead calls took their names too (torch._dynamo
  // removes them only at the end); the trace's own bookkeeping nodes never existed there.
  FxNamespace names(maker.naming() ? maker.illegalNames() : nullptr);
  std::vector<Ref> node_names(nodes_.size());
  if (maker.naming()) {
    auto name = [&](PyObject* target, int i) {
      Ref candidate = maker.candidateFor(target);
      const char* text = candidate ? PyUnicode_AsUTF8(candidate.get()) : nullptr;
      std::string made;
      if (!text || !names.create(text, nullptr, &made)) return false;
      node_names[i] = Ref::steal(PyUnicode_FromStringAndSize(made.data(), static_cast<Py_ssize_t>(made.size())));
      return static_cast<bool>(node_names[i]);
    };
    // A subgraph body's nodes (moved) are named in the body's own graph, not here.
    auto named = [&](int i) {
      return nodes_[i].op != NodeOp::Placeholder && !nodes_[i].moved && (live[i] || !bookkeeping_.count(i));
    };
    // The renames in the order they were made (hint_at grows with the trace).
    std::vector<int> renames;
    for (int i = 0; i < numNodes(); ++i)
      if (nodes_[i].hint_at >= 0 && named(i)) renames.push_back(i);
    std::stable_sort(renames.begin(), renames.end(),
                     [&](int a, int b) { return nodes_[a].hint_at < nodes_[b].hint_at; });
    size_t next_rename = 0;
    auto renameUpTo = [&](int time) {
      for (; next_rename < renames.size() && nodes_[renames[next_rename]].hint_at <= time; ++next_rename) {
        const Node& n = nodes_[renames[next_rename]];
        Ref& current = node_names[renames[next_rename]];
        // Node._rename: nothing when the node already has that name.
        if (PyUnicode_CompareWithASCIIString(current.get(), n.hint.c_str()) == 0) continue;
        std::string made;
        if (!names.create(n.hint, nullptr, &made)) return false;
        current = Ref::steal(PyUnicode_FromStringAndSize(made.data(), static_cast<Py_ssize_t>(made.size())));
        if (!current) return false;
      }
      return true;
    };
    bool ok = true;
    for (int i = 0; ok && i < numNodes(); ++i)
      if (nodes_[i].op == NodeOp::Placeholder) {
        Ref target = Ref::steal(PyUnicode_FromStringAndSize(nodes_[i].name.data(),
                                                            static_cast<Py_ssize_t>(nodes_[i].name.size())));
        ok = target && name(target.get(), i);
      }
    for (int i = 0; ok && i < numNodes(); ++i) {
      ok = renameUpTo(i);
      if (!ok || !named(i)) continue;
      const Node& n = nodes_[i];
      if (n.op == NodeOp::GetAttr) {
        Ref target = Ref::steal(PyUnicode_FromStringAndSize(n.name.data(), static_cast<Py_ssize_t>(n.name.size())));
        ok = target && name(target.get(), i);
      } else {
        ok = name(n.target.get(), i);
      }
    }
    if (!ok || !renameUpTo(numNodes())) {
      if (!PyErr_Occurred()) PyErr_SetString(PyExc_RuntimeError, "a graph node name could not be made");
      return Ref();
    }
  }
  Ref root = Ref::steal(PyObject_CallNoArgs(lookup(Obj::torch_nn_Module)));
  if (!root) return Ref();
  std::vector<Ref> fx_nodes(nodes_.size());
  std::vector<PyObject*> order;  // the FX nodes in graph order (kept alive by fx_nodes / out)
  *op_count = 0;
  inputs_used->clear();
  // Two passes: placeholders first (backends expect graph inputs before any call, and a
  // parameter may be first read mid-trace), then the calls in program order.
  for (int pass = 0; pass < 2; ++pass)
  for (int i = 0; i < numNodes(); ++i) {
    if (!live[i]) continue;
    const Node& n = nodes_[i];
    if ((n.op == NodeOp::Placeholder) != (pass == 0)) continue;
    Ref fxn;
    if (n.op == NodeOp::Placeholder) {
      // graph.placeholder(name): create_node("placeholder", name, args=(), kwargs={}).
      Ref name = Ref::steal(PyUnicode_FromStringAndSize(n.name.data(), static_cast<Py_ssize_t>(n.name.size())));
      Ref kw = Ref::steal(PyDict_New());
      if (!name || !kw) return Ref();
      fxn = maker.make(Str::placeholder, name.get(), no_args.get(), kw.get(), true, node_names[i].get());
      inputs_used->push_back(i);
    } else {
      fxn = emitNode(maker, n, t, root.get(), no_args.get(), node_names[i].get(),
                     [&](const Arg& a) { return materialize(a, true, &fx_nodes); });
      if (n.op != NodeOp::GetAttr) ++*op_count;
    }
    if (!fxn) return Ref();
    if (!setNodeMeta(fxn.get(), n)) return Ref();
    order.push_back(fxn.get());
    fx_nodes[i] = std::move(fxn);
  }
  if (!maker.finish(names)) return Ref();
  Ref outs = Ref::steal(PyTuple_New(static_cast<Py_ssize_t>(outputs.size())));
  if (!outs) return Ref();
  for (size_t k = 0; k < outputs.size(); ++k)
    PyTuple_SET_ITEM(outs.get(), k, fx_nodes[outputs[k]].copy().release());
  Ref out = Ref::steal(PyObject_CallMethod(graph.get(), "output", "(O)", outs.get()));
  if (!out) return Ref();
  order.push_back(out.get());
  // The forward's source generated here when FX would generate the same (fx_codegen.h).
  Ref code = fxcodegen::precompute(graph.get(), order);
  if (code) return fxcodegen::construct(lookup(Obj::torch_fx_GraphModule), root.get(), graph.get(), code.get());
  if (PyErr_Occurred()) return Ref();
  return Ref::steal(PyObject_CallFunctionObjArgs(lookup(Obj::torch_fx_GraphModule), root.get(), graph.get(), nullptr));
}

int GraphBuilder::addSubmodule(PyObject* gm, const std::string& base) {
  int& count = submodule_counts_[base];
  Node n{NodeOp::GetAttr};
  n.name = base + "_" + std::to_string(count++);
  n.real = Ref::borrow(gm);
  n.fake = Ref::borrow(gm);
  n.submodule = true;
  if (location_source_) n.loc = location_source_();
  nodes_.push_back(std::move(n));
  return numNodes() - 1;
}

int GraphBuilder::addSubmoduleAlias(int of, const std::string& base) {
  const Node& target = nodes_[static_cast<size_t>(of)];
  Node n{NodeOp::GetAttr};
  n.name = base + "_" + std::to_string(submodule_counts_[base]++);
  n.attr = target.attr.empty() ? target.name : target.attr;
  n.real = target.real.copy();
  n.fake = target.fake.copy();
  n.submodule = true;
  if (location_source_) n.loc = location_source_();
  nodes_.push_back(std::move(n));
  return numNodes() - 1;
}

void GraphBuilder::moveToSubgraph(int first, std::vector<int>* body) {
  body->clear();
  for (int i = first; i < numNodes(); ++i) {
    Node& n = nodes_[static_cast<size_t>(i)];
    if (n.moved || n.op == NodeOp::Placeholder || (n.op == NodeOp::GetAttr && !n.submodule)) continue;
    n.moved = true;
    body->push_back(i);
  }
}

bool GraphBuilder::bodyInputs(const std::vector<int>& body, const std::vector<int>& outputs,
                              const std::vector<int>& skip, std::vector<int>* out) const {
  std::unordered_set<int> inside(body.begin(), body.end());
  std::unordered_set<int> seen(skip.begin(), skip.end());
  bool ok = true;
  auto visit = [&](int id) {
    if (inside.count(id) || seen.count(id)) return;
    if (nodes_[id].moved) ok = false;  // computed inside another subgraph
    seen.insert(id);
    out->push_back(id);
  };
  auto visitArg = [&](const Arg& a, auto&& self) -> void {
    if (a.kind == Arg::Kind::Node) visit(a.node);
    for (const Arg& i : a.items) self(i, self);
  };
  for (int b : body) {
    for (const Arg& a : nodes_[b].args) visitArg(a, visitArg);
    for (const auto& kv : nodes_[b].kwargs) visitArg(kv.second, visitArg);
  }
  for (int o : outputs) visit(o);
  if (!ok)
    PyErr_SetString(PyExc_NotImplementedError,
                    "the body of a higher-order op reads a value computed inside another one's body");
  return ok;
}

Ref GraphBuilder::buildSubgraph(const std::vector<int>& body, const std::vector<int>& inputs,
                                const std::vector<std::string>& names, const std::vector<int>& outputs,
                                OutputForm form, size_t split) {
  const TorchRefs* t = torchRefs();
  if (!t) return Ref();
  // Liveness inside the body, by the rule of the frame's graph: every call stays but the
  // unused reads of another node's parts (getitem) and the trace's bookkeeping.
  PyObject* getitem = lookup(Obj::operator_getitem);
  if (!getitem) return Ref();
  std::unordered_map<int, int> uses;
  auto countNode = [&](const Node& n, int delta) { countUses(n, delta, uses); };
  for (int b : body) countNode(nodes_[b], 1);
  for (int o : outputs)
    if (o >= 0) ++uses[o];
  std::unordered_set<int> dead;
  for (auto it = body.rbegin(); it != body.rend(); ++it) {
    const Node& n = nodes_[*it];
    bool reads_only = n.op == NodeOp::CallFunction && n.target.get() == getitem;
    if (uses[*it] == 0 && !n.impure && (reads_only || bookkeeping_.count(*it))) {
      countNode(n, -1);
      dead.insert(*it);
    }
  }

  Ref graph = Ref::steal(PyObject_CallNoArgs(lookup(Obj::torch_fx_Graph)));
  if (!graph) return Ref();
  FxNodeMaker maker;
  if (!maker.init(graph.get())) return Ref();
  Ref no_args = Ref::steal(PyTuple_New(0));
  Ref root = Ref::steal(PyObject_CallNoArgs(lookup(Obj::torch_nn_Module)));
  if (!no_args || !root) return Ref();
  std::unordered_map<int, Ref> fx;
  std::vector<PyObject*> order;  // the FX nodes in graph order, for the forward's source (fx_codegen.h)
  for (size_t k = 0; k < inputs.size(); ++k) {
    Ref name = Ref::steal(PyUnicode_FromStringAndSize(names[k].data(), static_cast<Py_ssize_t>(names[k].size())));
    Ref kw = Ref::steal(PyDict_New());
    if (!name || !kw) return Ref();
    Ref fxn = maker.make(Str::placeholder, name.get(), no_args.get(), kw.get(), true, nullptr);
    if (!fxn) return Ref();
    order.push_back(fxn.get());
    Ref meta = Ref::steal(PyObject_GetAttr(fxn.get(), interned(Str::meta)));
    if (!meta || PyDict_SetItem(meta.get(), interned(Str::example_value), nodes_[inputs[k]].fake.get()) < 0) return Ref();
    fx[inputs[k]] = std::move(fxn);
  }
  auto mat = [&](const Arg& a, auto&& self) -> Ref {
    if (a.kind == Arg::Kind::Node) {
      auto it = fx.find(a.node);
      if (it != fx.end()) return it->second.copy();
      PyErr_SetString(PyExc_RuntimeError, "a subgraph reads a node it has no input for");
      return Ref();
    }
    if (a.kind == Arg::Kind::Const) return a.constant.copy();
    if (a.kind == Arg::Kind::Slice) {
      Ref parts[3];
      for (int i = 0; i < 3; ++i)
        if (!(parts[i] = self(a.items[static_cast<size_t>(i)], self))) return Ref();
      return Ref::steal(PySlice_New(parts[0].get(), parts[1].get(), parts[2].get()));
    }
    Py_ssize_t n = static_cast<Py_ssize_t>(a.items.size());
    Ref seq = Ref::steal(a.kind == Arg::Kind::Tuple ? PyTuple_New(n) : PyList_New(n));
    if (!seq) return Ref();
    for (Py_ssize_t i = 0; i < n; ++i) {
      Ref item = self(a.items[static_cast<size_t>(i)], self);
      if (!item) return Ref();
      if (a.kind == Arg::Kind::Tuple) PyTuple_SET_ITEM(seq.get(), i, item.release());
      else PyList_SET_ITEM(seq.get(), i, item.release());
    }
    return seq;
  };
  for (int b : body) {
    if (dead.count(b)) continue;
    const Node& n = nodes_[b];
    // A body's nodes are named by FX (null name) in the subgraph's own namespace.
    Ref fxn = emitNode(maker, n, t, root.get(), no_args.get(), nullptr, [&](const Arg& a) { return mat(a, mat); });
    if (!fxn || !setNodeMeta(fxn.get(), n)) return Ref();
    order.push_back(fxn.get());
    fx[b] = std::move(fxn);
  }
  FxNamespace body_names(nullptr);  // FX named the body's nodes itself
  if (!maker.finish(body_names)) return Ref();
  Ref outs = Ref::steal(PyTuple_New(static_cast<Py_ssize_t>(outputs.size())));
  if (!outs) return Ref();
  for (size_t k = 0; k < outputs.size(); ++k) {
    if (outputs[k] < 0) {
      PyTuple_SET_ITEM(outs.get(), k, Py_NewRef(Py_None));
      continue;
    }
    auto it = fx.find(outputs[k]);
    if (it == fx.end()) {
      PyErr_SetString(PyExc_RuntimeError, "a subgraph's output is not computed in it");
      return Ref();
    }
    PyTuple_SET_ITEM(outs.get(), k, it->second.copy().release());
  }
  if (form == OutputForm::Split) {
    Ref first = Ref::steal(PyTuple_GetSlice(outs.get(), 0, static_cast<Py_ssize_t>(split)));
    Ref rest = Ref::steal(PyTuple_GetSlice(outs.get(), static_cast<Py_ssize_t>(split), PY_SSIZE_T_MAX));
    if (!first || !rest) return Ref();
    outs = Ref::steal(PyTuple_Pack(2, first.get(), rest.get()));
  } else if (form == OutputForm::Single && outputs.size() == 1) outs = Ref::borrow(PyTuple_GET_ITEM(outs.get(), 0));
  else if (form == OutputForm::List) outs = Ref::steal(PySequence_List(outs.get()));
  if (!outs) return Ref();
  Ref out = Ref::steal(PyObject_CallMethod(graph.get(), "output", "(O)", outs.get()));
  if (!out) return Ref();
  order.push_back(out.get());
  // The forward's source generated here, as for the frame's graph (a checkpointed model has a
  // body per layer: FX's own generation was a quarter of its tracing).
  Ref code = fxcodegen::precompute(graph.get(), order);
  if (code) return fxcodegen::construct(lookup(Obj::torch_fx_GraphModule), root.get(), graph.get(), code.get());
  if (PyErr_Occurred()) return Ref();
  return Ref::steal(PyObject_CallFunctionObjArgs(lookup(Obj::torch_fx_GraphModule), root.get(), graph.get(), nullptr));
}

}  // namespace cdynamo::graph
