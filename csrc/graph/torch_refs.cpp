#include "graph/torch_refs.h"

#include <cstring>
#include <unordered_map>

#include "support/lookup.h"
#include "support/torch_types.h"

namespace cdynamo::graph {
namespace {

// The lookup-table objects the graph builder uses; all found once torchRefs() succeeded,
// so its users call lookup() without checking.
const Obj kGraphObjects[] = {
    Obj::torch_FakeTensorMode, Obj::torch_fx_Graph, Obj::torch_fx_GraphModule, Obj::torch_nn_Module,
    Obj::torch_FakeTensor, Obj::torch_empty_strided, Obj::torch_C_DisableTorchDispatch, Obj::torch_is_grad_enabled,
    Obj::torch_dtype, Obj::torch_device, Obj::torch_ShapeEnv, Obj::torch_SymInt, Obj::torch_SymFloat,
    Obj::torch_SymBool, Obj::torch_compute_unbacked_bindings, Obj::torch_guards_tracing,
    Obj::torch_guards_TracingContext, Obj::torch_Tensor, Obj::torch_nn_Parameter, Obj::torch_Tensor_make_subclass,
    Obj::torch_C_set_throw_on_mutable_data_ptr, Obj::torch_C_set_warn_deprecated_on_mutable_data_ptr,
    Obj::torch_fx_immutable_dict, Obj::torch_fx_graph_Node, Obj::torch_fx_graph, Obj::torch_C_EnablePythonDispatcher};

// Ops whose fake result is determined by the inputs' metadata and the constant arguments
// (no data-dependent output shapes, no global state besides what effects change) and that
// do nothing besides making it. A result that aliases an input (x.float() returning x,
// dropout(p=0) returning its input, an inplace=True form) is never remembered: memoStore
// checks every result's storage against the inputs'.
const char* const kMemoTorch[] = {
    "add", "sub", "mul", "div", "true_divide", "sin", "cos", "tan", "exp", "exp2", "expm1", "log",
    "log2", "log1p", "sigmoid", "tanh", "relu", "neg", "abs", "sqrt", "rsqrt", "reciprocal",
    "square", "erf", "floor", "ceil", "sign", "matmul", "mm", "bmm", "addmm", "pow", "maximum",
    "minimum", "softmax", "log_softmax", "layer_norm"};
const char* const kMemoOperator[] = {"add", "sub", "mul", "truediv", "floordiv", "matmul", "neg",
                                     "pow", "mod"};
const char* const kMemoFunctional[] = {"linear", "layer_norm", "gelu", "softmax", "log_softmax", "relu", "silu",
                                       "dropout", "scaled_dot_product_attention", "multi_head_attention_forward"};
const char* const kMemoCNN[] = {"linear", "gelu"};
const char* const kMemoMethods[] = {
    "add", "sub", "mul", "div", "true_divide", "sin", "cos", "tan", "exp", "exp2", "expm1", "log",
    "log2", "log1p", "sigmoid", "tanh", "relu", "neg", "abs", "sqrt", "rsqrt", "reciprocal",
    "square", "erf", "floor", "ceil", "sign", "matmul", "mm", "bmm", "pow", "maximum", "minimum",
    "softmax", "log_softmax", "__add__", "__radd__", "__sub__", "__rsub__", "__mul__", "__rmul__",
    "__truediv__", "__rtruediv__", "__matmul__", "__neg__", "__pow__"};

// Methods whose result is a view of the receiver (its layout a function of the receiver's
// and the constants) or, for reshape/contiguous/flatten, a new tensor: memoized as a view of
// the receiver made with as_strided (GraphBuilder::memoStore), in one dispatch.
const char* const kMemoViewMethods[] = {"transpose", "view", "permute", "reshape", "unsqueeze", "squeeze", "t",
                                        "flatten", "unflatten", "expand", "narrow", "select", "swapaxes",
                                        "swapdims", "movedim", "contiguous"};

template <size_t N>
bool addAll(PyObject* set, const char* module, const char* const (&names)[N]) {
  Ref m = Ref::steal(PyImport_ImportModule(module));
  if (!m) return false;
  for (const char* name : names) {
    Ref f = Ref::steal(PyObject_GetAttrString(m.get(), name));
    if (!f) {  // absent in this torch version: simply not memoized
      PyErr_Clear();
      continue;
    }
    if (PySet_Add(set, f.get()) < 0) return false;
  }
  return true;
}

}  // namespace

const TorchRefs* torchRefs() {
  // Leaked on purpose (see Note [Python references in statics] in support/pyref.h).
  static TorchRefs& refs = *new TorchRefs();
  if (!refs.ok) {
    for (Obj o : kGraphObjects)
      if (!lookup(o)) return nullptr;
    refs.meta_device = Ref::steal(PyObject_CallFunction(lookup(Obj::torch_device), "s", "meta"));
    if (!refs.meta_device) return nullptr;
    refs.memo_functions = Ref::steal(PySet_New(nullptr));
    if (!refs.memo_functions || !addAll(refs.memo_functions.get(), "torch", kMemoTorch) ||
        !addAll(refs.memo_functions.get(), "operator", kMemoOperator) ||
        !addAll(refs.memo_functions.get(), "torch.nn.functional", kMemoFunctional) ||
        !addAll(refs.memo_functions.get(), "torch._C._nn", kMemoCNN))
      return nullptr;
    refs.subclass_kwnames = Ref::steal(Py_BuildValue("(ss)", "dispatch_device", "device_for_backend_keys"));
    refs.empty_kwnames = Ref::steal(Py_BuildValue("(ss)", "dtype", "device"));
    if (!refs.subclass_kwnames || !refs.empty_kwnames) return nullptr;
    refs.memo_methods = Ref::steal(PySet_New(nullptr));
    if (!refs.memo_methods) return nullptr;
    for (const char* name : kMemoMethods) {
      Ref method = Ref::steal(PyUnicode_InternFromString(name));
      if (!method || PySet_Add(refs.memo_methods.get(), method.get()) < 0) return nullptr;
    }
    refs.memo_view_methods = Ref::steal(PySet_New(nullptr));
    if (!refs.memo_view_methods) return nullptr;
    for (const char* name : kMemoViewMethods) {
      Ref method = Ref::steal(PyUnicode_InternFromString(name));
      if (!method || PySet_Add(refs.memo_view_methods.get(), method.get()) < 0 ||
          PySet_Add(refs.memo_methods.get(), method.get()) < 0)
        return nullptr;
    }
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

namespace {

// A method or function name that says it changes its first argument: x.add_(), torch.relu_,
// and the special methods that do (x.__setitem__(i, v), x.__iadd__(y): the names ending in
// "_" are not theirs, and a call by name records no node when it returns no tensor).
bool mutatingName(const char* q) {
  size_t n = strlen(q);
  if (n > 1 && q[n - 1] == '_' && q[n - 2] != '_') return true;
  if (n < 5 || strncmp(q, "__", 2) != 0 || strcmp(q + n - 2, "__") != 0) return false;
  static const char* const kInPlace[] = {"__setitem__", "__delitem__", "__iadd__", "__isub__", "__imul__",
                                         "__imatmul__", "__itruediv__", "__ifloordiv__", "__imod__", "__ipow__",
                                         "__ilshift__", "__irshift__", "__iand__", "__ixor__", "__ior__"};
  for (const char* m : kInPlace)
    if (strcmp(q, m) == 0) return true;
  return false;
}

// Whether a schema writes to one of its positional arguments (Tensor(a!) x): an in-place
// op, or a custom op declared with mutates_args. An out= argument is keyword-only.
int writesPositional(PyObject* schema) {
  Ref arguments = Ref::steal(PyObject_GetAttrString(schema, "arguments"));
  if (!arguments || !PyList_Check(arguments.get())) return -1;
  for (Py_ssize_t i = 0; i < PyList_GET_SIZE(arguments.get()); ++i) {
    PyObject* arg = PyList_GET_ITEM(arguments.get(), i);
    Ref kwarg_only = Ref::steal(PyObject_GetAttrString(arg, "kwarg_only"));
    Ref alias = Ref::steal(PyObject_GetAttrString(arg, "alias_info"));
    if (!kwarg_only || !alias) return -1;
    if (kwarg_only.get() == Py_True || alias.get() == Py_None) continue;
    Ref write = Ref::steal(PyObject_GetAttrString(alias.get(), "is_write"));
    if (!write) return -1;
    if (write.get() == Py_True) return 1;
  }
  return 0;
}

// An operator of torch.ops: an overload (torch.ops.aten.add_.Tensor, a custom op's
// .default) mutates when its schema says so; a packet (torch.ops.ns.op), which the
// dispatcher resolves per call, when one of its overloads writes to a positional argument
// (its out= overloads do not count: a call without out= does not reach them). A mutating
// op that returns nothing is kept in the graph for its effect (a custom op with
// mutates_args returns None). Operators live for the process: the answer is kept.
bool operatorMutates(PyObject* target) {
  static auto& memo = *new std::unordered_map<PyObject*, std::pair<Ref, bool>>();
  auto it = memo.find(target);
  if (it != memo.end()) return it->second.second;
  bool mutates = false;
  if (Ref one = Ref::steal(PyObject_GetAttrString(target, "_schema"))) {
    Ref mutable_ = Ref::steal(PyObject_GetAttrString(one.get(), "is_mutable"));
    mutates = mutable_ && PyObject_IsTrue(mutable_.get()) == 1;
  } else {
    PyErr_Clear();
    Ref schemas = Ref::steal(PyObject_GetAttrString(target, "_schemas"));
    PyObject* key;
    PyObject* schema;
    Py_ssize_t pos = 0;
    // Unreadable schemas: taken as mutating, which only keeps the node.
    if (!schemas || !PyDict_Check(schemas.get())) mutates = true;
    while (!mutates && PyDict_Next(schemas.get(), &pos, &key, &schema)) mutates = writesPositional(schema) != 0;
  }
  PyErr_Clear();
  memo.emplace(target, std::make_pair(Ref::borrow(target), mutates));
  return mutates;
}

}  // namespace

bool isMutating(NodeOp op, PyObject* target) {
  if (op == NodeOp::CallMethod) {
    const char* name = PyUnicode_AsUTF8(target);
    return name && mutatingName(name);
  }
  if (isOperatorObject(target)) return operatorMutates(target);
  Ref modname = Ref::steal(PyObject_GetAttrString(target, "__module__"));
  Ref qualname = Ref::steal(PyObject_GetAttrString(target, "__name__"));
  bool mutating = false;
  if (qualname && PyUnicode_Check(qualname.get())) {
    const char* m = modname && PyUnicode_Check(modname.get()) ? PyUnicode_AsUTF8(modname.get()) : "";
    const char* q = PyUnicode_AsUTF8(qualname.get());
    if (strcmp(m, "_operator") == 0 || strcmp(m, "operator") == 0)
      mutating = (q[0] == 'i' && strcmp(q, "is_") != 0 && strcmp(q, "is_not") != 0 &&
                  strcmp(q, "index") != 0 && strcmp(q, "indexOf") != 0 && strcmp(q, "invert") != 0) ||
                 strcmp(q, "setitem") == 0 || strcmp(q, "delitem") == 0;
    else
      mutating = mutatingName(q);  // torch.relu_, torch.Tensor.__setitem__ and friends
  }
  PyErr_Clear();
  return mutating;
}

int configFlag(const char* name) {
  PyObject* config = lookup(Obj::cdynamo_config);
  if (!config) return -1;
  Ref v = Ref::steal(PyObject_GetAttrString(config, name));
  if (v && v.get() == Py_None) {
    // None: as torch._dynamo.config's option of the same name (see config.py), so code
    // written for torch.compile that sets or patches torch's option gets that behaviour.
    PyObject* torch_config = lookup(Obj::torch_dynamo_config);
    v = torch_config ? Ref::steal(PyObject_GetAttrString(torch_config, name)) : Ref();
  }
  return v ? PyObject_IsTrue(v.get()) : -1;
}

bool isSymScalar(PyObject* o, const TorchRefs* t) {
  PyObject* type = reinterpret_cast<PyObject*>(Py_TYPE(o));
  return type == lookup(Obj::torch_SymInt) || type == lookup(Obj::torch_SymFloat) || type == lookup(Obj::torch_SymBool);
}

}  // namespace cdynamo::graph
