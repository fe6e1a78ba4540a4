// Calls of torch's callables: what a torch callable is decides how its call is traced (a
// Python function traced, an override-dispatch query answered, a state reader folded, an aten
// operator recorded, any other binding a graph break), and math functions on symbolic numbers.
#include <algorithm>
#include <cstring>
#include <string>
#include <unordered_map>

#include "graph/torch_refs.h"
#include "support/lookup.h"
#include "support/torch_types.h"
#include "trace/call_rules.h"
#include "trace/engine/graph_calls.h"
#include "trace/engine/scalars.h"
#include "trace/kinds/iterator.h"
#include "trace/kinds/tensor_subclass.h"
#include "trace/protocol/call_rules_internal.h"
#include "trace/protocol/callables.h"
#include "trace/protocol/calls.h"
#include "trace/protocol/constants.h"
#include "trace/tracer.h"
#include "support/type_dict.h"

namespace cdynamo::trace {

using graph::NodeOp;

namespace {
// Whether every argument is something a graph op takes: tensors, constants, and tuples,
// lists and slices of them.
bool graphArguments(const Args& args, const Kwargs& kwargs) {
  auto ok = [](const ValuePtr& v, auto&& self) -> bool {
    switch (v->kind()) {
      case Kind::Tensor:
      case Kind::Constant:
        return true;
      case Kind::Tuple:
      case Kind::List:
      case Kind::Slice: {
        bool all = true;
        forEachChild(*v, [&](const ValuePtr& c) { all = all && self(c, self); });
        return all;
      }
      default:
        return false;
    }
  };
  for (const ValuePtr& a : args)
    if (!ok(a, ok)) return false;
  for (const auto& kv : kwargs)
    if (!ok(kv.second, ok)) return false;
  return true;
}

// torch._C._has_torch_function(iterable) / _unary(obj) / _variadic(*args) without tensor
// arguments: whether one of the objects has a __torch_function__ of its own. Constants and
// containers do not; an object of a known (guarded) type answers by its type.
Result<ValuePtr> dispatchQuery(Tracer& t, PyObject* f, Args& args, Kwargs& kwargs) {
  if (!kwargs.empty()) return t.fail(torchName(f) + "() with keyword arguments");
  std::vector<ValuePtr> objs;
  if (isType(f, Obj::torch_C_has_torch_function)) {
    PyObject* c = args.size() == 1 ? args[0]->constant() : nullptr;
    if (c && PyTuple_Check(c)) {  // a tuple of constants
      for (Py_ssize_t i = 0; i < PyTuple_GET_SIZE(c); ++i) objs.push_back(Value::constant(PyTuple_GET_ITEM(c, i)));
    } else {
      const std::vector<ValuePtr>* items = args.size() == 1 ? args[0]->elements() : nullptr;
      if (!items || args[0]->is(Kind::Iterator))
        return t.fail(torchName(f) + "() of something other than a tuple or list");
      objs = *items;
    }
  } else {
    objs = args;
  }
  for (const ValuePtr& o : objs) {
    if (takesPartInDispatch(o)) return Value::constant(Py_True);  // a tensor subclass instance (torch_function.cpp)
    if (o->is(Kind::Tensor) || o->is(Kind::SubclassTensor)) continue;  // a plain tensor, or a subclass that opted out
    PyObject* type = typeOf(t, o);
    if (!type) return t.fail(torchName(f) + "() of a value whose type is not known at trace time");
    int has = PyObject_HasAttrString(type, "__torch_function__");
    if (has) return t.fail(torchName(f) + "() of an object with its own __torch_function__");
  }
  return Value::constant(Py_False);
}

// A reader of torch's global state on constant arguments: run now, folded, guarded.
Result<ValuePtr> readState(Tracer& t, PyObject* f, Args& args, Kwargs& kwargs) {
  Ref pargs = toPython(t, Value::tuple(args));
  Ref pkw;
  if (!kwargs.empty()) {
    pkw = Ref::steal(PyDict_New());
    if (!pkw) return t.failFromPython(torchName(f));
    for (auto& [k, v] : kwargs) {
      Ref pv = toPython(t, v);
      if (!pv) return t.fail(torchName(f) + "() with arguments that are not constants");
      if (PyDict_SetItem(pkw.get(), k.get(), pv.get()) < 0) return t.failFromPython(torchName(f));
    }
  }
  if (!pargs) return t.fail(torchName(f) + "() with arguments that are not constants");
  Ref r = Ref::steal(PyObject_Call(f, pargs.get(), pkw.get()));
  if (!r) return t.raisePython();
  if (!isConstantObject(r.get()))
    return t.fail(torchName(f) + "() returned a " + Py_TYPE(r.get())->tp_name + ", not a constant");
  // Grad mode is guarded for every entry already (Tracer::run).
  if (!isType(f, Obj::torch_is_grad_enabled)) t.guards().checkStateQuery(f, pargs.get(), pkw.get(), r.get());
  return Value::constant(r.get());
}


// Whether the Python function `f` is what its module's attribute path __qualname__ names
// (torch._tensor.Tensor.split): the graph's code names its targets so. A function made by a
// decorator that copied another's names (functools.wraps in torch._tensor's operator
// wrappers: Tensor.__pow__ says it is TensorBase.pow) is not, and is traced instead.
bool reachableByName(PyObject* f) {
  PyFunctionObject* fo = reinterpret_cast<PyFunctionObject*>(f);
  if (!fo->func_module || !PyUnicode_Check(fo->func_module) || !fo->func_qualname) return false;
  Ref obj = Ref::steal(PyImport_GetModule(fo->func_module));
  if (!obj) return PyErr_Clear(), false;
  Ref parts = Ref::steal(PyUnicode_Split(fo->func_qualname, Ref::steal(PyUnicode_FromString(".")).get(), -1));
  if (!parts) return PyErr_Clear(), false;
  for (Py_ssize_t i = 0; i < PyList_GET_SIZE(parts.get()) && obj; ++i)
    obj = Ref::steal(PyObject_GetAttr(obj.get(), PyList_GET_ITEM(parts.get(), i)));
  if (!obj) return PyErr_Clear(), false;
  return obj.get() == f;
}


// functorch's bindings that wrap a tensor for a transform's level or unwrap it
// (_add_batch_dim, _remove_batch_dim, _wrap_for_grad, _unwrap_for_grad): graph calls, as
// torch._dynamo records them, whose example values are what the binding makes of the fake
// tensors under the levels the trace pushed (a batched or grad-tracking fake).
bool isFunctorchWrapper(PyObject* f) {
  for (Obj o : {Obj::functorch_add_batch_dim, Obj::functorch_remove_batch_dim, Obj::functorch_wrap_for_grad,
                Obj::functorch_unwrap_for_grad}) {
    PyObject* b = lookup(o);
    if (!b) PyErr_Clear();
    if (b && b == f) return true;
  }
  return false;
}

}  // namespace

// A torch callable: recorded in the graph when it has tensor arguments; without them,
// decided by what it is (torchKindOf).
Result<ValuePtr> callTorchFunction(Tracer& t, const ValuePtr& fn, Args& args, Kwargs& kwargs) {
  PyObject* f = fn->real();
  // A state setter first, whatever its arguments: a symbolic size is a Tensor-kind value,
  // and vmap's batch size may be one; recorded as an op, the level it pushes would not be
  // popped when the trace ends.
  if (Result<ValuePtr> r = callFunctionModeBinding(t, f, args, kwargs); !r.notHandled()) return r;
  if (Result<ValuePtr> r = t.contexts().callStateSetter(f, args, kwargs); !r.notHandled()) return r;
  // has_torch_function(...) is True while a mode the program entered is on (torch's Python
  // functions then hand themselves to handle_torch_function, which reaches the mode).
  if (t.functionModeActive() && torchKindOf(f) == TorchKind::DispatchQuery) return Value::constant(Py_True);
  if (anyTensor(args, kwargs)) {
    switch (torchKindOf(f)) {
      case TorchKind::PythonHelper:
        // A Python function of torch is one graph op (F.relu, F.layer_norm) when the graph
        // can take its arguments; one that takes callables or objects (torch.utils._pytree
        // .tree_map, torch.fx map_aggregate) is traced like user code, as are the helpers of
        // torch.utils and torch.fx, which build structures, not tensors (tree_flatten).
        if (!graphArguments(args, kwargs) || isStructureHelper(f) || isTransformInternals(f) || !reachableByName(f))
          return t.inlineFunction(f, fn->reg, std::move(args), std::move(kwargs));
        // One node for a function torch hands to a mode (its has_torch_function check): the
        // mode the program entered is handed it first, as eagerly.
        if (t.functionModeActive()) {
          std::vector<ValuePtr> relevant(args.begin(), args.end());
          for (const auto& kv : kwargs) relevant.push_back(kv.second);
          return torchFunctionDispatch(t, f, relevant, std::move(args), std::move(kwargs), true);
        }
        break;
      case TorchKind::Binding:
        // Neither an aten operator nor a reader: a binding of unknown effect
        // (torch._C._dynamo.eval_frame.unsupported). Aten ops of torch._C._VariableFunctions
        // without a schema of that name (torch.from_numpy) are not module bindings.
        if (PyCFunction_Check(f) && PyCFunction_GET_SELF(f) && !isFunctorchWrapper(f))
          return t.fail("call of " + torchName(f) + "(), a torch binding that is not an operator");
        break;
      case TorchKind::DispatchQuery:
      case TorchKind::StateReader:
      case TorchKind::Operator:
        break;
    }
    if (isType(f, Obj::torch_check) && args.size() == 1 && kwargs.empty() && isScalarValue(t, args[0])) {
      // torch._check(cond) of a symbolic size relation that is false for these sizes (its
      // hint): eagerly the call raises. The trace takes the relation's truth (the ShapeEnv
      // guards `not cond`, so the entry holds only for sizes where it fails) and raises
      // torch's own error in the traced program: no graph is left computing only `cond`
      // for a native torch._check to raise on. True or unbacked: recorded as before (the
      // ShapeEnv keeps it as a guard or a runtime assertion).
      PyObject* shapes = lookup(Obj::cdynamo_shapes);
      Ref truth = shapes ? Ref::steal(PyObject_CallMethod(shapes, "truth", "O",
                                                          t.graph().fake(args[0]->as<Tensor>().node)))
                         : Ref();
      if (!truth) return t.failFromPython("the truth of a torch._check condition");
      if (truth.get() == Py_False) {
        Ref r = Ref::steal(PyObject_CallOneArg(f, Py_False));
        if (r) return t.fail("torch._check(False) did not raise");
        return t.raisePython();
      }
    }
    if (isType(f, Obj::torch_tensor)) {
      // torch.tensor(data) whose data holds tensors or symbolic numbers (a list of
      // Tensor.item()s, of 0-d tensors) but is not itself a tensor: the C++ factory reads
      // each item's value, which fake tensors and symbols do not have. torch._refs.tensor
      // builds the same tensor from tensor ops (torch.stack of the items), as
      // torch._dynamo records it; torch.tensor(t) of a tensor t stays itself.
      const ValuePtr* data = !args.empty() ? &args[0] : nullptr;
      for (const auto& [k, v] : kwargs)
        if (PyUnicode_CompareWithASCIIString(k.get(), "data") == 0) data = &v;
      if (data && !((*data)->is(Kind::Tensor) && !isScalarValue(t, *data)) && oneElementTensorItems(t, *data)) {
        PyObject* refs_tensor = lookup(Obj::torch_refs_tensor);
        if (!refs_tensor) return t.failFromPython("torch._refs.tensor");
        return recordCall(t, NodeOp::CallFunction, refs_tensor, args, kwargs);
      }
    }
    Result<ValuePtr> r = recordCall(t, NodeOp::CallFunction, f, args, kwargs);
    // A Python function of torch given tensors that returns None was called for what it
    // does to them or to other objects (torch.nn.utils.vector_to_parameters assigns each
    // parameter's .data): no node is recorded for a result without tensors, so the call
    // would vanish. It runs natively instead (a graph break there), its effects real.
    // (Given only numbers read from tensors or sizes, such a function is a check whose
    // effect is the ShapeEnv's: torch._check(n > 0) records an assertion.)
    auto realTensor = [&](const ValuePtr& v) {
      if (const std::vector<ValuePtr>* items = v->elements())  // a list of tensors
        return std::any_of(items->begin(), items->end(),
                           [&](const ValuePtr& i) { return i->is(Kind::Tensor) && !isScalarValue(t, i); });
      return v->is(Kind::Tensor) && !isScalarValue(t, v);
    };
    bool tensors = std::any_of(args.begin(), args.end(), realTensor) ||
                   std::any_of(kwargs.begin(), kwargs.end(), [&](const auto& kv) { return realTensor(kv.second); });
    if (r && tensors && PyFunction_Check(f) && !graph::isMutating(NodeOp::CallFunction, f) &&
        (*r)->is(Kind::Constant) && (*r)->constant() == Py_None)
      return t.fail("call of " + torchName(f) + "(), a torch function that returned None for tensor arguments: "
                    "what it changed is not a graph value");
    return r;
  }
  if (Result<ValuePtr> r = t.contexts().readSavedTensorsHooksMessage(f, args); !r.notHandled()) return r;
  if (Result<ValuePtr> r = t.contexts().readFunctorchState(f, args); !r.notHandled()) return r;
  switch (torchKindOf(f)) {
    case TorchKind::PythonHelper:
      return t.inlineFunction(f, fn->reg, std::move(args), std::move(kwargs));
    case TorchKind::DispatchQuery:
      return dispatchQuery(t, f, args, kwargs);
    case TorchKind::StateReader:
      return readState(t, f, args, kwargs);
    case TorchKind::Operator:
      return recordCall(t, NodeOp::CallFunction, f, args, kwargs);
    case TorchKind::Binding:
      break;
  }
  if (isType(f, Obj::torch_set_grad_enabled_C) && args.size() == 1 && kwargs.empty())
    return t.contexts().setGradEnabled(args[0]);
  return t.fail("call of " + torchName(f) + "(), a torch binding that may change state");
}

// A Python function or class of torch.utils, torch.fx or torch.testing (pytree's tree_flatten
// and TreeSpec, fx's map_arg, the comparison pairs behind TestCase.assertEqual), of
// torch.distributions (Normal(loc, scale) is an object holding tensors, its log_prob tensor
// code; no graph op makes a distribution), or of the third-party code torch vendors
// (torch._vendor.packaging's Version, which torch.__version__ compares through), or of
// torch.optim (an optimizer's update functions, _single_tensor_sgd and the like, change
// their tensor arguments in place, fill the lists they are given and return None: one node
// for such a call would have no result anyone reads and be dropped): Python over Python
// structures and tensors, traced like user code, as TorchDynamo inlines these modules.
// The module a Python function or a Python class is defined in (its __module__), or null.
static const char* definingModule(PyObject* f) {
  PyObject* m = PyFunction_Check(f) ? PyFunction_GET_MODULE(f)
                : PyType_Check(f) && PyType_HasFeature(reinterpret_cast<PyTypeObject*>(f), Py_TPFLAGS_HEAPTYPE)
                    ? PyDict_GetItemString(typeDict(reinterpret_cast<PyTypeObject*>(f)), "__module__")
                    : nullptr;
  if (!m || !PyUnicode_Check(m)) return nullptr;
  const char* name = PyUnicode_AsUTF8(m);
  if (!name) PyErr_Clear();
  return name;
}

bool isStructureHelper(PyObject* f) {
  const char* name = definingModule(f);
  if (!name) return false;
  return strncmp(name, "torch.utils.", 12) == 0 || strncmp(name, "torch.fx.", 9) == 0 ||
         strncmp(name, "torch.testing.", 14) == 0 || strncmp(name, "torch._vendor.", 14) == 0 ||
         strncmp(name, "torch.distributions.", 20) == 0 || strncmp(name, "torch.optim.", 12) == 0 ||
         strncmp(name, "torch.nn.utils.clip_grad", 24) == 0 ||
         // torch.nn.attention's Python (flex_attention's input checks that return None,
         // BlockMask and its constructors, create_block_mask's vmap over mask_mod): the op
         // flex_attention ends in is a row of its own.
         strncmp(name, "torch.nn.attention.", 19) == 0;
}

bool isTransformInternals(PyObject* f) {
  const char* name = definingModule(f);
  if (!name) return false;
  if (strcmp(name, "torch.autograd.forward_ad") == 0) return true;
  // functional_call's accessor of a module's named members (swapped in, then back).
  if (PyType_Check(f) && strcmp(name, "torch.nn.utils._named_member_accessor") == 0) return true;
  if (strncmp(name, "torch._functorch.", 17) != 0 || strcmp(name, "torch._functorch.predispatch") == 0) return false;
  for (Obj o : {Obj::functorch_set_tensor_requires_grad, Obj::functorch_autograd_grad}) {
    PyObject* g = lookup(o);
    if (!g) PyErr_Clear();
    if (g && g == f) return false;
  }
  return true;
}

// A function of the math module on a symbolic number (a size, a symbolic int argument, a
// value read from a tensor): a node, as torch._dynamo records it, so the number stays
// symbolic instead of being made the int at hand: torch._sym_<name> where torch has one
// (sqrt, cos, ..., log2: a SymFloat), math.floor/ceil/trunc themselves (a SymInt through the
// number's __floor__ & co.). Run on plain numbers when the graph runs, each is the math
// function (its errors included). NotHandled for anything else (the call is folded with
// the number specialized, as before).
Result<ValuePtr> callMathOnSymbolic(Tracer& t, PyObject* f, Args& args, Kwargs& kwargs) {
  if (!PyCFunction_Check(f) || !kwargs.empty() || args.empty()) return notHandled();
  PyObject* self = PyCFunction_GET_SELF(f);
  if (!self || !PyModule_Check(self)) return notHandled();
  const char* module = PyModule_GetName(self);
  if (!module) return t.failFromPython("a math function's module");
  if (strcmp(module, "math") != 0) return notHandled();
  bool symbolic = false;
  for (const ValuePtr& a : args) {
    if (a->is(Kind::Constant)) {
      PyTypeObject* type = Py_TYPE(a->constant());
      if (type != &PyLong_Type && type != &PyFloat_Type) return notHandled();
      continue;
    }
    if (!isScalarValue(t, a)) return notHandled();
    symbolic = true;
  }
  if (!symbolic) return notHandled();
  const char* name = reinterpret_cast<PyCFunctionObject*>(f)->m_ml->ml_name;
  if (args.size() == 1 && (strcmp(name, "floor") == 0 || strcmp(name, "ceil") == 0 || strcmp(name, "trunc") == 0))
    return recordCall(t, NodeOp::CallFunction, f, args, {});
  PyObject* torch = lookup(Obj::torch_module);
  if (!torch) return t.failFromPython("torch");
  Ref sym = Ref::steal(PyObject_GetAttrString(torch, (std::string("_sym_") + name).c_str()));
  if (!sym) {
    PyErr_Clear();
    return notHandled();
  }
  return recordCall(t, NodeOp::CallFunction, sym.get(), args, {});
}

}  // namespace cdynamo::trace
