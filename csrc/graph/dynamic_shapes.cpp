// Symbolic input sizes (GraphBuilder::setDynamic): the input fakes made with symbolic
// contexts by cdynamo/_internal/symbolic_shapes.py (torch's ShapeEnv and FakeTensorMode.from_tensor), and the
// placeholders of their symbols, as torch._dynamo's graphs carry them.
#include "graph/graph_builder.h"

#include "graph/fake_autograd.h"
#include "graph/torch_refs.h"
#include "support/lookup.h"

namespace cdynamo::graph {
namespace {

PyObject* shapesModule() {
  static Ref& mod = *new Ref();  // Note [Python references in statics] (support/pyref.h)
  if (!mod) mod = Ref::borrow(lookup(Obj::cdynamo_shapes));
  return mod.get();
}

// sym.node.expr (new reference, or null with an error set).
Ref exprOf(PyObject* symint) {
  Ref node = Ref::steal(PyObject_GetAttrString(symint, "node"));
  return node ? Ref::steal(PyObject_GetAttrString(node.get(), "expr")) : Ref();
}

// Whether CDYNAMO_LOGS has the "dynamic" channel (cdynamo._logging); -1 with an error.
int dynamicLogEnabled() {
  static Ref& logging = *new Ref();  // Note [Python references in statics] (support/pyref.h)
  if (!logging) logging = Ref::borrow(lookup(Obj::cdynamo_logging));
  if (!logging) return -1;
  Ref on = Ref::steal(PyObject_CallMethod(logging.get(), "enabled", "s", "dynamic"));
  return on ? PyObject_IsTrue(on.get()) : -1;
}

// What cdynamo._internal.symbolic_shapes.input_fake records of a tensor input in the code object's size memory
// (automatic dynamic, dynamic=None): its sizes, None for a dim that differed from the sizes
// remembered with the same rank.
bool rememberSizes(PyObject* memory, PyObject* real, const std::string& source) {
  Ref shape = Ref::steal(PyObject_GetAttrString(real, "shape"));
  Ref now = shape ? Ref::steal(PySequence_List(shape.get())) : Ref();
  if (!now) return false;
  PyObject* prev = PyDict_GetItemString(memory, source.c_str());  // borrowed; never raises
  if (prev && PyList_Check(prev) && PyList_GET_SIZE(prev) == PyList_GET_SIZE(now.get())) {
    for (Py_ssize_t i = 0; i < PyList_GET_SIZE(prev); ++i) {
      PyObject* p = PyList_GET_ITEM(prev, i);
      int same = p == Py_None ? 0 : PyObject_RichCompareBool(p, PyList_GET_ITEM(now.get(), i), Py_EQ);
      if (same < 0) return false;
      if (!same) {
        if (PyList_SetItem(now.get(), i, Ref::borrow(Py_None).release()) < 0) return false;
      }
    }
  }
  return PyDict_SetItemString(memory, source.c_str(), now.get()) == 0;
}

}  // namespace

int GraphBuilder::addSymbolicInput(PyObject* real, const std::string& name, const std::string& source) {
  PyObject* mod = shapesModule();
  if (!mod) return -1;
  int automatic = configFlag("automatic_dynamic_shapes");
  if (automatic < 0) return -1;
  if (force_param_static_ < 0) force_param_static_ = configFlag("force_parameter_static_shapes");
  if (force_param_static_ < 0) return -1;
  if (force_param_static_ && reinterpret_cast<PyObject*>(Py_TYPE(real)) == lookup(Obj::torch_nn_Parameter)) {
    // A parameter keeps static sizes whatever the compile asks (input_fake, as
    // torch._dynamo's force_parameter_static_shapes): its fake made as in a static trace,
    // by the input shortcut, without input_fake's Python and from_tensor per parameter.
    // Input_fake itself for a 0-d one (from_tensor may give it a constant value) and
    // when the "dynamic" log channel wants its line.
    Ref dim = Ref::steal(PyObject_CallMethod(real, "dim", nullptr));
    long d = dim ? PyLong_AsLong(dim.get()) : -1;
    if (d < 0) return -1;
    if (dyn_log_ < 0) dyn_log_ = dynamicLogEnabled();
    if (dyn_log_ < 0) return -1;
    if (d >= 1 && !dyn_log_) {
      if (dyn_.mode == -1 && dyn_.memory && PyDict_Check(dyn_.memory) && !source.empty() &&
          !rememberSizes(dyn_.memory, real, source))
        return -1;
      return addStaticPlaceholder(real, name);
    }
  }
  PyObject* dynamic = dyn_.mode == 1 ? Py_True : dyn_.mode == 0 ? Py_False : Py_None;
  // A conversion with symbols may reach a storage of an input made by the shortcut.
  std::vector<const void*> related;
  if (!beforeConversion(real, &related)) return -1;
  Ref r = Ref::steal(PyObject_CallMethod(mod, "input_fake", "OOsOOO", mode_.get(), real, source.c_str(), dynamic,
                                         dyn_.memory ? dyn_.memory : Py_None, automatic ? Py_True : Py_False));
  if (!r) return -1;
  if (!PyTuple_Check(r.get()) || PyTuple_GET_SIZE(r.get()) != 2 || !PyList_Check(PyTuple_GET_ITEM(r.get(), 1))) {
    PyErr_SetString(PyExc_TypeError, "cdynamo._internal.symbolic_shapes.input_fake: unexpected result");
    return -1;
  }
  PyObject* syms = PyTuple_GET_ITEM(r.get(), 1);
  if (PyTuple_GET_ITEM(r.get(), 0) == Py_None) {
    // Every size static: the fake of a static trace (inputFake: the input shortcut, or
    // from_tensor with static_shapes=True), no symbol.
    return addStaticPlaceholder(real, name);
  }
  afterConversion(related);
  if (!symbol_nodes_) {
    symbol_nodes_ = Ref::steal(PyDict_New());
    if (!symbol_nodes_) return -1;
  }
  // The new symbols' placeholders first (torch._dynamo puts them before the tensor's),
  // each standing for a size of the tensor placeholder that follows them.
  Node n{NodeOp::Placeholder};
  n.name = uniqueInputName(name);
  n.fake = Ref::borrow(PyTuple_GET_ITEM(r.get(), 0));
  n.real = Ref::borrow(real);
  std::vector<int> fresh;
  for (Py_ssize_t i = 0; i < PyList_GET_SIZE(syms); ++i) {
    PyObject* item = PyList_GET_ITEM(syms, i);
    long dim = PyLong_AsLong(PyTuple_GET_ITEM(item, 0));
    PyObject* sym = PyTuple_GET_ITEM(item, 1);
    if (dim < 0 || dim >= 64) continue;  // never: input_fake gives dims in range
    n.dyn_mask |= uint64_t{1} << dim;
    Ref e = exprOf(sym);
    if (!e) return -1;
    PyObject* known = PyDict_GetItemWithError(symbol_nodes_.get(), e.get());
    if (known) {
      n.uses_syms.push_back(static_cast<int>(PyLong_AsLong(known)));
      continue;
    }
    if (PyErr_Occurred()) return -1;
    Node s{NodeOp::Placeholder};
    Ref text = Ref::steal(PyObject_Str(e.get()));
    const char* t = text ? PyUnicode_AsUTF8(text.get()) : nullptr;
    if (!t) return -1;
    s.name = uniqueInputName(t);
    s.fake = Ref::borrow(sym);
    s.sym_dim = static_cast<int>(dim);
    Ref id = Ref::steal(PyLong_FromLong(numNodes()));
    if (!id || PyDict_SetItem(symbol_nodes_.get(), e.get(), id.get()) < 0) return -1;
    n.uses_syms.push_back(numNodes());
    fresh.push_back(numNodes());
    nodes_.push_back(std::move(s));
  }
  for (int f : fresh) nodes_[f].sym_of = numNodes();  // the tensor's node, pushed next
  nodes_.push_back(std::move(n));
  return numNodes() - 1;
}

int GraphBuilder::addIntInput(PyObject* value, const std::string& name, const std::string& source) {
  // dynamic=False: never a symbol. dynamic=True: a symbol from the first compile (as
  // torch._dynamo's dynamic=True: no 0/1 specialization for ints), unless a trace with it
  // symbolic failed before. dynamic=None: automatic dynamic, once its value changed.
  if (dyn_.mode == 0 || !dyn_.memory || !PyDict_Check(dyn_.memory) || source.empty()) return kNoTensorResult;
  if (dyn_.mode == -1) {
    int automatic = configFlag("automatic_dynamic_shapes");
    if (automatic < 0) return -1;
    if (!automatic) return kNoTensorResult;
  }
  PyObject* mod = shapesModule();
  if (!mod) return -1;
  PyObject* env = symbolic_ && shape_env_ ? shape_env_.get() : Py_None;
  Ref sym = Ref::steal(PyObject_CallMethod(mod, "int_input", "OOsOO", env, value, source.c_str(), dyn_.memory,
                                           dyn_.mode == 1 ? Py_True : Py_False));
  if (!sym) return -1;
  if (sym.get() == Py_None) return kNoTensorResult;
  if (reinterpret_cast<PyObject*>(Py_TYPE(sym.get())) != lookup(Obj::torch_SymInt)) {
    PyErr_SetString(PyExc_TypeError, "cdynamo._internal.symbolic_shapes.int_input: not a SymInt");
    return -1;
  }
  Ref e = exprOf(sym.get());
  if (!e) return -1;
  if (!symbol_nodes_) {
    symbol_nodes_ = Ref::steal(PyDict_New());
    if (!symbol_nodes_) return -1;
  }
  Node n{NodeOp::Placeholder};
  n.name = uniqueInputName(name);
  n.fake = std::move(sym);
  n.int_input = true;
  // A fresh symbol stands for this input from now on (a duck-sized one already has a node).
  if (!PyDict_GetItemWithError(symbol_nodes_.get(), e.get())) {
    if (PyErr_Occurred()) return -1;
    Ref id = Ref::steal(PyLong_FromLong(numNodes()));
    if (!id || PyDict_SetItem(symbol_nodes_.get(), e.get(), id.get()) < 0) return -1;
  }
  int_sources_.push_back(source);
  nodes_.push_back(std::move(n));
  return numNodes() - 1;
}

int GraphBuilder::symbolNode(PyObject* symint) {
  if (!symbol_nodes_) return -1;
  Ref e = exprOf(symint);
  if (!e) return PyErr_Clear(), -1;
  PyObject* known = PyDict_GetItemWithError(symbol_nodes_.get(), e.get());
  if (!known) return PyErr_Clear(), -1;
  return static_cast<int>(PyLong_AsLong(known));
}

}  // namespace cdynamo::graph
