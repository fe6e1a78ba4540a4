#include "graph/graph_builder.h"

#include <cstring>

#include "support/check.h"
#include "support/torch_types.h"

namespace cdynamo::graph {
namespace {

struct TorchRefs {
  Ref fake_mode_cls;   // FakeTensorMode
  Ref fx_graph_cls;    // torch.fx.Graph
  Ref graph_module_cls;
  Ref module_cls;      // torch.nn.Module
  bool ok = false;
};

Ref attrOf(const char* module, const char* name) {
  Ref m = Ref::steal(PyImport_ImportModule(module));
  if (!m) return Ref();
  return Ref::steal(PyObject_GetAttrString(m.get(), name));
}

// Imported on first use (the hook must not import torch before a trace needs it).
const TorchRefs* torchRefs() {
  // Leaked on purpose (see Note [Python references in statics] in support/pyref.h).
  static TorchRefs& refs = *new TorchRefs();
  if (!refs.ok) {
    refs.fake_mode_cls = attrOf("torch._subclasses.fake_tensor", "FakeTensorMode");
    if (!refs.fake_mode_cls) return nullptr;
    refs.fx_graph_cls = attrOf("torch.fx", "Graph");
    if (!refs.fx_graph_cls) return nullptr;
    refs.graph_module_cls = attrOf("torch.fx", "GraphModule");
    if (!refs.graph_module_cls) return nullptr;
    refs.module_cls = attrOf("torch.nn", "Module");
    if (!refs.module_cls) return nullptr;
    refs.ok = true;
  }
  return &refs;
}

bool holdsTensor(PyObject* o) {
  if (isTensor(o)) return true;
  if (PyTuple_Check(o) || PyList_Check(o)) {
    for (Py_ssize_t i = 0; i < PySequence_Fast_GET_SIZE(o); ++i)
      if (holdsTensor(PySequence_Fast_GET_ITEM(o, i))) return true;
  }
  return false;
}

// In-place operations (x.add_(y), x += y, x[i] = y) are kept even when their result is
// unused: they mutate a tensor the rest of the program sees.
bool isMutating(NodeOp op, PyObject* target) {
  if (op == NodeOp::CallMethod) {
    const char* name = PyUnicode_AsUTF8(target);
    size_t n = name ? strlen(name) : 0;
    return n > 1 && name[n - 1] == '_' && name[n - 2] != '_';
  }
  PyObject* modname = PyObject_GetAttrString(target, "__module__");
  PyObject* qualname = PyObject_GetAttrString(target, "__name__");
  bool mutating = false;
  if (modname && qualname && PyUnicode_Check(modname) && PyUnicode_Check(qualname)) {
    const char* m = PyUnicode_AsUTF8(modname);
    const char* q = PyUnicode_AsUTF8(qualname);
    size_t n = strlen(q);
    if (strcmp(m, "_operator") == 0 || strcmp(m, "operator") == 0)
      mutating = (q[0] == 'i' && strcmp(q, "is_") != 0 && strcmp(q, "is_not") != 0 &&
                  strcmp(q, "index") != 0 && strcmp(q, "indexOf") != 0 && strcmp(q, "invert") != 0) ||
                 strcmp(q, "setitem") == 0 || strcmp(q, "delitem") == 0;
    else
      mutating = n > 1 && q[n - 1] == '_' && q[n - 2] != '_';  // torch.relu_ and friends
  }
  PyErr_Clear();
  Py_XDECREF(modname);
  Py_XDECREF(qualname);
  return mutating;
}

}  // namespace

Arg Arg::clone() const {
  Arg a;
  a.kind = kind;
  a.node = node;
  a.constant = constant.copy();
  for (const Arg& i : items) a.items.push_back(i.clone());
  return a;
}

GraphBuilder::~GraphBuilder() { finish(); }

bool GraphBuilder::begin() {
  const TorchRefs* t = torchRefs();
  if (!t) return false;
  mode_ = Ref::steal(PyObject_CallNoArgs(t->fake_mode_cls.get()));
  if (!mode_) return false;
  Ref r = Ref::steal(PyObject_CallMethod(mode_.get(), "__enter__", nullptr));
  if (!r) return false;
  entered_ = true;
  return true;
}

void GraphBuilder::finish() {
  if (!entered_) return;
  entered_ = false;
  // Keep a pending exception (if any) across __exit__.
  PyObject *type, *value, *tb;
  PyErr_Fetch(&type, &value, &tb);
  Ref r = Ref::steal(PyObject_CallMethod(mode_.get(), "__exit__", "OOO", Py_None, Py_None, Py_None));
  if (!r) PyErr_Clear();
  PyErr_Restore(type, value, tb);
}

int GraphBuilder::addInput(PyObject* real, const std::string& name) {
  Node n{NodeOp::Placeholder};
  n.name = name;
  n.fake = Ref::steal(PyObject_CallMethod(mode_.get(), "from_tensor", "O", real));
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

int GraphBuilder::addCall(NodeOp op, PyObject* target, std::vector<Arg> args,
                          std::vector<std::pair<Ref, Arg>> kwargs, Ref* plain_result) {
  Node n{op};
  n.target = Ref::borrow(target);
  n.args = std::move(args);
  n.kwargs = std::move(kwargs);

  // Run the call on fake values.
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
    for (auto& [k, v] : n.kwargs) {
      Ref val = materialize(v, false, nullptr);
      if (!val || PyDict_SetItem(fkwargs.get(), k.get(), val.get()) < 0) return -1;
    }
  }
  if (op == NodeOp::CallMethod) {
    // target is the method name; args[0] is the receiver.
    CDYNAMO_CHECK(PyTuple_GET_SIZE(fargs.get()) >= 1, "method call without receiver");
    Ref method = Ref::steal(PyObject_GetAttr(PyTuple_GET_ITEM(fargs.get(), 0), target));
    if (!method) return -1;
    Ref rest = Ref::steal(PyTuple_GetSlice(fargs.get(), 1, PyTuple_GET_SIZE(fargs.get())));
    if (!rest) return -1;
    n.fake = Ref::steal(PyObject_Call(method.get(), rest.get(), fkwargs.get()));
  } else {
    n.fake = Ref::steal(PyObject_Call(target, fargs.get(), fkwargs.get()));
  }
  if (!n.fake) return -1;
  n.impure = isMutating(op, target);
  // A mutation (x[i] = y returns None) is recorded whatever it returns; a pure call with
  // no tensor in its result is a metadata query and leaves no node.
  if (!n.impure && !holdsTensor(n.fake.get())) {
    *plain_result = std::move(n.fake);
    return kNoTensorResult;
  }
  nodes_.push_back(std::move(n));
  return numNodes() - 1;
}

int GraphBuilder::addEffect(PyObject* target, std::vector<Arg> args) {
  Node n{NodeOp::CallFunction};
  n.target = Ref::borrow(target);
  n.args = std::move(args);
  n.impure = true;
  Ref fargs = Ref::steal(PyTuple_New(static_cast<Py_ssize_t>(n.args.size())));
  if (!fargs) return -1;
  for (size_t i = 0; i < n.args.size(); ++i) {
    Ref v = materialize(n.args[i], false, nullptr);
    if (!v) return -1;
    PyTuple_SET_ITEM(fargs.get(), i, v.release());
  }
  n.fake = Ref::steal(PyObject_Call(target, fargs.get(), nullptr));
  if (!n.fake) return -1;
  nodes_.push_back(std::move(n));
  return numNodes() - 1;
}

Ref GraphBuilder::buildGraphModule(const std::vector<int>& outputs, std::vector<int>* inputs_used,
                                   int* op_count) {
  const TorchRefs* t = torchRefs();
  if (!t) return Ref();

  // Liveness: everything reachable from the outputs, plus impure nodes and their inputs.
  std::vector<char> live(nodes_.size(), 0);
  std::vector<int> work(outputs.begin(), outputs.end());
  for (int i = 0; i < numNodes(); ++i)
    if (nodes_[i].impure) work.push_back(i);
  auto visitArg = [&](const Arg& a, auto&& self) -> void {
    if (a.kind == Arg::Kind::Node) work.push_back(a.node);
    for (const Arg& i : a.items) self(i, self);
  };
  while (!work.empty()) {
    int id = work.back();
    work.pop_back();
    if (live[id]) continue;
    live[id] = 1;
    for (const Arg& a : nodes_[id].args) visitArg(a, visitArg);
    for (const auto& kv : nodes_[id].kwargs) visitArg(kv.second, visitArg);
  }

  Ref graph = Ref::steal(PyObject_CallNoArgs(t->fx_graph_cls.get()));
  if (!graph) return Ref();
  std::vector<Ref> fx_nodes(nodes_.size());
  PyObject* meta_key = intern("meta");
  PyObject* example_key = intern("example_value");
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
      fxn = Ref::steal(PyObject_CallMethod(graph.get(), "placeholder", "s", n.name.c_str()));
      inputs_used->push_back(i);
    } else {
      Ref fargs = Ref::steal(PyTuple_New(static_cast<Py_ssize_t>(n.args.size())));
      if (!fargs) return Ref();
      for (size_t k = 0; k < n.args.size(); ++k) {
        Ref v = materialize(n.args[k], true, &fx_nodes);
        if (!v) return Ref();
        PyTuple_SET_ITEM(fargs.get(), k, v.release());
      }
      Ref fkwargs = Ref::steal(PyDict_New());
      if (!fkwargs) return Ref();
      for (const auto& [k, v] : n.kwargs) {
        Ref val = materialize(v, true, &fx_nodes);
        if (!val || PyDict_SetItem(fkwargs.get(), k.get(), val.get()) < 0) return Ref();
      }
      const char* method = n.op == NodeOp::CallMethod ? "call_method" : "call_function";
      fxn = Ref::steal(PyObject_CallMethod(graph.get(), method, "OOO", n.target.get(), fargs.get(),
                                           fkwargs.get()));
      ++*op_count;
    }
    if (!fxn) return Ref();
    Ref meta = Ref::steal(PyObject_GetAttr(fxn.get(), meta_key));
    if (!meta || PyDict_SetItem(meta.get(), example_key, n.fake.get()) < 0) return Ref();
    fx_nodes[i] = std::move(fxn);
  }
  Ref outs = Ref::steal(PyTuple_New(static_cast<Py_ssize_t>(outputs.size())));
  if (!outs) return Ref();
  for (size_t k = 0; k < outputs.size(); ++k)
    PyTuple_SET_ITEM(outs.get(), k, fx_nodes[outputs[k]].copy().release());
  Ref out = Ref::steal(PyObject_CallMethod(graph.get(), "output", "(O)", outs.get()));
  if (!out) return Ref();
  Ref root = Ref::steal(PyObject_CallNoArgs(t->module_cls.get()));
  if (!root) return Ref();
  return Ref::steal(PyObject_CallFunctionObjArgs(t->graph_module_cls.get(), root.get(), graph.get(), nullptr));
}

}  // namespace cdynamo::graph
