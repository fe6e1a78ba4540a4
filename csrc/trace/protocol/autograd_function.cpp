// torch.autograd.Function.apply: the forward inlined when no gradient is recorded; recording
// one, the autograd_function_apply higher-order op over the speculated forward and backward
// (a call with keywords: one graph call of apply when cdynamo's safety check finds nothing in
// forward/backward that reaches outside the call), else a graph break with the reason.
#include <algorithm>
#include <cstring>
#include <string>
#include <unordered_map>

#include "support/lookup.h"
#include "support/torch_types.h"
#include "trace/call_rules.h"
#include "trace/engine/graph_calls.h"
#include "trace/engine/scalars.h"
#include "trace/engine/speculation.h"
#include "trace/protocol/attributes.h"
#include "trace/kinds/iterator.h"
#include "trace/protocol/callables.h"
#include "trace/protocol/calls.h"
#include "trace/tracer.h"

namespace cdynamo::trace {

using graph::NodeOp;

bool isAutogradFunctionApply(PyObject* function) {
  PyObject* apply = lookup(Obj::torch_autograd_Function_apply);
  if (!apply) PyErr_Clear();
  return apply && function == apply;
}

namespace {

// Why apply's forward and backward cannot be one node of the graph (empty: they can); see
// cdynamo._internal.polyfills.autograd_function_refusal. The arguments it checks are the fake
// tensors and the constants; any other argument is a refusal here.
std::string opaqueApplyRefusal(Tracer& t, PyObject* cls, const Args& args, const Kwargs& kwargs) {
  auto python = [&](const ValuePtr& v) -> Ref {
    if (const Tensor* tensor = v->get<Tensor>()) return Ref::borrow(t.graph().fake(tensor->node));
    if (PyObject* c = v->constant()) return Ref::borrow(c);
    return Ref();
  };
  Ref pargs = Ref::steal(PyTuple_New(static_cast<Py_ssize_t>(args.size())));
  Ref pkw = Ref::steal(PyDict_New());
  if (!pargs || !pkw) {
    PyErr_Clear();
    return "out of memory";
  }
  for (size_t i = 0; i < args.size(); ++i) {
    Ref p = python(args[i]);
    if (!p) return "an argument that is not a tensor or a constant";
    PyTuple_SET_ITEM(pargs.get(), static_cast<Py_ssize_t>(i), p.release());
  }
  for (const auto& [k, v] : kwargs) {
    Ref p = python(v);
    if (!p) return "a keyword argument that is not a tensor or a constant";
    if (PyDict_SetItem(pkw.get(), k.get(), p.get()) < 0) {
      PyErr_Clear();
      return "a keyword argument";
    }
  }
  PyObject* check = lookup(Obj::cdynamo_autograd_function_refusal);
  Ref r = check ? Ref::steal(PyObject_CallFunctionObjArgs(check, cls, pargs.get(), pkw.get(), nullptr)) : Ref();
  if (!r) {
    PyErr_Clear();
    return "its check raised";
  }
  if (r.get() == Py_None) return "";
  return PyUnicode_Check(r.get()) ? PyUnicode_AsUTF8(r.get()) : "its check gave no reason";
}

// Grad mode off at trace time only (no graph node) while a body of autograd_function_apply
// is traced: autograd runs forward and backward so, and the op's own node runs them so.
class TraceGradOff {
 public:
  TraceGradOff() {
    Ref r = Ref::steal(PyObject_CallNoArgs(lookup(Obj::torch_is_grad_enabled)));
    prev_ = r.get() == Py_True;
    PyErr_Clear();
    set(false);
  }
  ~TraceGradOff() { set(prev_); }

 private:
  static void set(bool on) {
    Ref r = Ref::steal(PyObject_CallOneArg(lookup(Obj::torch_set_grad_enabled_C), on ? Py_True : Py_False));
    if (!r) PyErr_Clear();
  }
  bool prev_ = true;
};

Ref intList(const std::vector<int>& v) {
  Ref l = Ref::steal(PyList_New(static_cast<Py_ssize_t>(v.size())));
  if (!l) return l;
  for (size_t i = 0; i < v.size(); ++i) {
    PyObject* n = PyLong_FromLong(v[i]);
    if (!n) return Ref();
    PyList_SET_ITEM(l.get(), static_cast<Py_ssize_t>(i), n);
  }
  return l;
}

// The nodes of the tensors in a tuple value (ctx.to_save, ctx.non_differentiable).
bool tensorNodesOf(Tracer&, const ValuePtr& v, std::vector<int>* out) {
  if (PyObject* c = v->constant()) return PyTuple_Check(c);  // a tuple of constants: no tensor
  if (!v->is(Kind::Tuple) && !v->is(Kind::List)) return false;
  for (const ValuePtr& item : *v->elements())
    if (item->is(Kind::Tensor)) out->push_back(item->as<Tensor>().node);
  return true;
}

// cls.apply(*args) recording a backward, as torch._dynamo traces it:
// torch.ops.higher_order.autograd_function_apply(fwd_body_k, bwd_body_k, *tensor_args,
// *lifted, non_differentiable_idx=[..], saved_for_backward_idx=[..]), whose node runs the two
// bodies as an autograd.Function of its own (AOT autograd sees the forward's ops and the
// user's backward). Both bodies are speculated (engine/speculation.cpp) with grad mode off:
// the forward (cdynamo._internal.autograd_function.autograd_function_forward) makes the ctx,
// runs forward (or forward then setup_context); the backward then runs over stand-ins of
// the output gradients and that ctx, before the forward's nodes leave the frame's graph, so
// that every forward value it reads (ctx.saved_tensors, a tensor stashed on ctx, a free
// value of the frame) is found: those are the values the forward saves for it (its
// second output tuple, the backward's inputs after the gradients). The backward's result
// is the gradient of each tensor argument (None for the others and for the lifted values).
// What it cannot capture (a graph break or a side effect in either body, mark_dirty,
// set_materialize_grads(False), forward results other than tensors and constants) is
// Unsupported: the call runs natively at a graph break, as torch._dynamo falls back.
Result<ValuePtr> callAutogradFunctionHop(Tracer& t, PyObject* cls, const std::string& what, bool separate_setup,
                                         const Args& args) {
  graph::GraphBuilder& g = t.graph();
  PyObject* fwd_fn = lookup(Obj::cdynamo_autograd_function_forward);
  PyObject* bwd_fn = lookup(Obj::cdynamo_autograd_function_backward);
  PyObject* hop = lookup(Obj::torch_ops_higher_order_autograd_function_apply);
  if (!fwd_fn || !bwd_fn || !hop) return t.failFromPython(what);
  for (Obj o : {Obj::torch_autograd_Function_jvp, Obj::torch_autograd_Function_vjp}) {
    PyObject* base = lookup(o);
    Ref own = Ref::steal(PyObject_GetAttrString(cls, o == Obj::torch_autograd_Function_jvp ? "jvp" : "vjp"));
    if (!base || !own) return t.failFromPython(what);
    Ref base_fn = Ref::steal(PyObject_GetAttrString(base, "__func__"));
    PyErr_Clear();
    Ref own_fn = Ref::steal(PyObject_GetAttrString(own.get(), "__func__"));
    PyErr_Clear();
    PyObject* a = own_fn ? own_fn.get() : own.get();
    PyObject* b = base_fn ? base_fn.get() : base;
    if (a != b) return t.fail(what + " defines its own " + (o == Obj::torch_autograd_Function_jvp ? "jvp" : "vjp") +
                              ", which is not traced");
  }
  // The tensor arguments (the op's first operands) and needs_input_grad, as apply sets it.
  std::vector<int> inputs;
  std::vector<size_t> input_pos;
  Ref needs = Ref::steal(PyTuple_New(static_cast<Py_ssize_t>(args.size())));
  if (!needs) return t.failFromPython(what);
  for (size_t i = 0; i < args.size(); ++i) {
    PyObject* rg = Py_False;
    Ref hold;
    if (const Tensor* tensor = args[i]->get<Tensor>(); tensor && !g.isScalar(tensor->node)) {
      if (std::find(inputs.begin(), inputs.end(), tensor->node) != inputs.end())
        return t.fail(what + ": a duplicate tensor input (one tensor passed twice) is not supported");
      inputs.push_back(tensor->node);
      input_pos.push_back(i);
      hold = Ref::steal(PyObject_GetAttrString(g.fake(tensor->node), "requires_grad"));
      if (!hold) return t.failFromPython(what);
      rg = hold.get();
    }
    PyTuple_SET_ITEM(needs.get(), static_cast<Py_ssize_t>(i), Py_NewRef(rg));
  }

  // The forward, its nodes left in the frame's graph until the backward is traced.
  Args fargs = {Value::constant(cls), Value::constant(separate_setup ? Py_True : Py_False), Value::constant(needs.get())};
  fargs.insert(fargs.end(), args.begin(), args.end());
  int fwd_first = 0;
  ValuePtr fres;
  {
    TraceGradOff off;
    if (Done d = speculateCall(t, what + " (forward)", Value::callable(fwd_fn), std::move(fargs), {}, &fwd_first, &fres); !d)
      return d.stop();
  }
  const std::vector<ValuePtr>* pair = fres->elements();
  if (!pair || pair->size() != 2) return t.fail(what + ": internal: the forward's body returned no (ctx, output)");
  ValuePtr ctx = (*pair)[0], output = (*pair)[1];
  const bool single = output->is(Kind::Tensor);
  std::vector<ValuePtr> out_items = single ? std::vector<ValuePtr>{output} : std::vector<ValuePtr>();
  if (!single) {
    if (!output->is(Kind::Tuple) || output->as<Tuple>().namedtuple)
      return t.fail(what + ": its forward returns something other than a tensor or a tuple, not traced");
    out_items = output->as<Tuple>().items;
  }
  std::vector<int> out_nodes;
  // Its results: tensors, and constants (a list of them, made by forward, included) that
  // come back as they are.
  auto constantLike = [](const ValuePtr& o) {
    if (o->is(Kind::Constant)) return true;
    if (!o->is(Kind::List) || o->reg >= 0) return false;
    for (const ValuePtr& item : *o->elements())
      if (!item->is(Kind::Constant)) return false;
    return true;
  };
  for (const ValuePtr& o : out_items) {
    if (o->is(Kind::Tensor) && !g.isScalar(o->as<Tensor>().node)) out_nodes.push_back(o->as<Tensor>().node);
    else if (!constantLike(o)) return t.fail(what + ": its forward returns a " + describe(o) + ", not traced");
  }
  if (out_nodes.empty()) return t.fail(what + ": its forward returns no tensor");
  auto ctxAttr = [&](const char* name) -> Result<ValuePtr> {
    Ref n = Ref::steal(PyUnicode_InternFromString(name));
    return getAttr(t, ctx, n.get());
  };
  Result<ValuePtr> dirty = ctxAttr("dirty_tensors");
  if (!dirty) return dirty;
  std::vector<int> dirty_nodes;
  PyObject* dirty_const = (*dirty)->constant();
  if (!tensorNodesOf(t, *dirty, &dirty_nodes) || !dirty_nodes.empty() ||
      (dirty_const ? PyTuple_GET_SIZE(dirty_const) != 0 : !(*dirty)->elements()->empty()))
    return t.fail(what + ": its forward marks an input dirty (an in-place change), not traced");
  Result<ValuePtr> materialize = ctxAttr("materialize_grads");
  if (!materialize) return materialize;
  if ((*materialize)->constant() != Py_True)
    return t.fail(what + ": its forward calls set_materialize_grads(False), not traced");
  Result<ValuePtr> nondiff = ctxAttr("non_differentiable");
  if (!nondiff) return nondiff;
  std::vector<int> nondiff_nodes, to_save_nodes;
  if (!tensorNodesOf(t, *nondiff, &nondiff_nodes)) return t.fail(what + ": ctx.non_differentiable is not a tuple");
  Result<ValuePtr> to_save = ctxAttr("to_save");
  if (!to_save) return to_save;
  if (!tensorNodesOf(t, *to_save, &to_save_nodes)) return t.fail(what + ": ctx.saved tensors are not a tuple");
  std::vector<int> nondiff_idx;
  for (size_t k = 0; k < out_nodes.size(); ++k)
    if (std::find(nondiff_nodes.begin(), nondiff_nodes.end(), out_nodes[k]) != nondiff_nodes.end())
      nondiff_idx.push_back(static_cast<int>(k));

  // The backward over stand-ins of the output gradients (None for a constant output).
  std::vector<int> grad_nodes;
  Args bargs = {Value::constant(cls), ctx};
  for (const ValuePtr& o : out_items) {
    if (!o->is(Kind::Tensor)) {
      bargs.push_back(Value::constant(Py_None));
      continue;
    }
    Result<ValuePtr> s = standIn(t, what, o, false);
    if (!s) return s;
    grad_nodes.push_back((*s)->as<Tensor>().node);
    bargs.push_back(*s);
  }
  int bwd_first = 0;
  ValuePtr bres;
  {
    TraceGradOff off;
    if (Done d = speculateCall(t, what + " (backward)", Value::callable(bwd_fn), std::move(bargs), {}, &bwd_first, &bres);
        !d)
      return d.stop();
  }
  std::vector<ValuePtr> user_grads;
  if (bres->is(Kind::Tuple)) user_grads = bres->as<Tuple>().items;
  else user_grads = {bres};
  if (user_grads.size() < args.size())
    return t.fail(what + ": its backward returns fewer gradients than forward takes inputs (eager raises)");
  for (size_t i = args.size(); i < user_grads.size(); ++i)
    if (!user_grads[i]->isNone()) return t.fail(what + ": its backward returns more gradients than forward takes inputs");
  std::vector<int> bwd_out;
  for (size_t pos : input_pos) {
    const ValuePtr& gv = user_grads[pos];
    if (gv->isNone()) bwd_out.push_back(-1);
    else if (gv->is(Kind::Tensor) && !g.isScalar(gv->as<Tensor>().node)) bwd_out.push_back(gv->as<Tensor>().node);
    else return t.fail(what + ": its backward returns a " + describe(gv) + " as a gradient, not traced");
  }
  for (size_t i = 0; i < user_grads.size() && i < args.size(); ++i)
    if (!args[i]->is(Kind::Tensor) && !user_grads[i]->isNone())
      return t.fail(what + ": its backward returns a gradient for an argument that is not a tensor");
  std::vector<int> bwd_body, saved, bwd_real_out;
  g.moveToSubgraph(bwd_first, &bwd_body);
  for (int o : bwd_out)
    if (o >= 0) bwd_real_out.push_back(o);
  if (!g.bodyInputs(bwd_body, bwd_real_out, grad_nodes, &saved)) return t.failFromPython(what);

  // The forward's body: its results, then what the backward reads.
  std::vector<int> fwd_body, fwd_lifted;
  g.moveToSubgraph(fwd_first, &fwd_body);
  std::vector<int> fwd_out = out_nodes;
  fwd_out.insert(fwd_out.end(), saved.begin(), saved.end());
  if (!g.bodyInputs(fwd_body, fwd_out, inputs, &fwd_lifted)) return t.failFromPython(what);
  std::vector<int> saved_idx;
  for (size_t k = 0; k < saved.size(); ++k)
    if (std::find(to_save_nodes.begin(), to_save_nodes.end(), saved[k]) != to_save_nodes.end())
      saved_idx.push_back(static_cast<int>(k));
  auto none = [](int) { return std::string(); };
  Subgraph fsg{fwd_body, fwd_out, fwd_lifted, nullptr};
  Result<int> fwd_id = installSubgraph(t, what, fsg, inputs, fwd_lifted, "fwd_body", none,
                                       graph::GraphBuilder::OutputForm::Split, nullptr, out_nodes.size());
  if (!fwd_id) return fwd_id.stop();
  for (size_t k = 0; k < fwd_lifted.size(); ++k) bwd_out.push_back(-1);  // the lifted values get no gradient
  Subgraph bsg{bwd_body, bwd_out, saved, nullptr};
  Result<int> bwd_id = installSubgraph(t, what, bsg, grad_nodes, saved, "bwd_body", none);
  if (!bwd_id) return bwd_id.stop();

  Args call_args = {Value::tensor(*fwd_id), Value::tensor(*bwd_id)};
  for (int n : inputs) call_args.push_back(Value::tensor(n));
  for (int n : fwd_lifted) call_args.push_back(Value::tensor(n));
  Ref nd = intList(nondiff_idx), sv = intList(saved_idx);
  Ref k1 = Ref::steal(PyUnicode_FromString("non_differentiable_idx"));
  Ref k2 = Ref::steal(PyUnicode_FromString("saved_for_backward_idx"));
  if (!nd || !sv || !k1 || !k2) return t.failFromPython(what);
  auto listValue = [](PyObject* l) {
    std::vector<ValuePtr> items;
    for (Py_ssize_t i = 0; i < PyList_GET_SIZE(l); ++i) items.push_back(Value::constant(PyList_GET_ITEM(l, i)));
    return Value::list(std::move(items));
  };
  Kwargs kw;
  kw.emplace_back(k1.copy(), listValue(nd.get()));
  kw.emplace_back(k2.copy(), listValue(sv.get()));
  Result<ValuePtr> r = recordCall(t, NodeOp::CallFunction, hop, call_args, kw);
  if (!r) return r;
  const std::vector<ValuePtr>* items = (*r)->elements();
  if (!items || items->size() != out_nodes.size()) return t.fail(what + ": the op's result does not match the forward's");
  if (single) return (*items)[0];
  std::vector<ValuePtr> result;
  size_t next = 0;
  for (const ValuePtr& o : out_items) result.push_back(o->is(Kind::Tensor) ? (*items)[next++] : o);
  return Value::tuple(std::move(result));
}

}  // namespace

Result<ValuePtr> callAutogradFunctionApply(Tracer& t, PyObject* cls, PyObject* target, Args args, Kwargs kwargs) {
  PyObject* base = lookup(Obj::torch_C_FunctionBase);
  if (!base) return t.failFromPython("torch._C._FunctionBase");
  if (!PyType_Check(cls) || !PyType_IsSubtype(reinterpret_cast<PyTypeObject*>(cls), reinterpret_cast<PyTypeObject*>(base)))
    return t.fail("autograd.Function.apply bound to something that is not an autograd.Function subclass");
  Ref name = Ref::steal(PyObject_GetAttrString(cls, "__qualname__"));
  std::string what = std::string("torch.autograd.Function.apply of ") + (name && PyUnicode_Check(name.get()) ? PyUnicode_AsUTF8(name.get()) : "a class");
  PyErr_Clear();
  // Autograd records a node when grad mode is on and a tensor argument requires grad (apply's
  // own test, torch/csrc/autograd/python_function.cpp). Its backward would then have to be
  // captured too (torch._dynamo traces it into a higher-order op): not modelled.
  Ref grad = Ref::steal(PyObject_CallNoArgs(lookup(Obj::torch_is_grad_enabled)));
  if (!grad) return t.failFromPython("torch.is_grad_enabled()");
  Ref setup = Ref::steal(PyObject_GetAttrString(cls, "setup_context"));
  PyObject* plain_setup = lookup(Obj::torch_autograd_SingleLevel_setup_context);
  if (!setup || !plain_setup) return t.failFromPython("setup_context of " + what);
  const bool separate_setup = setup.get() != plain_setup;
  // The setup_context form (forward without ctx): apply binds forward's defaults first so
  // that setup_context sees every input; only the plain positional call is modelled.
  bool plain_call = kwargs.empty();
  if (separate_setup && plain_call) {
    Ref forward = Ref::steal(PyObject_GetAttrString(cls, "forward"));
    PyObject* code = forward && PyFunction_Check(forward.get()) ? PyFunction_GET_CODE(forward.get()) : nullptr;
    plain_call = code && reinterpret_cast<PyCodeObject*>(code)->co_argcount == static_cast<int>(args.size()) &&
                 !(reinterpret_cast<PyCodeObject*>(code)->co_flags & CO_VARARGS);
    PyErr_Clear();
  }
  if (grad.get() == Py_True) {
    for (const ValuePtr& a : args) {
      const Tensor* tensor = a->get<Tensor>();
      if (!tensor) continue;
      Ref rg = Ref::steal(PyObject_GetAttrString(t.graph().fake(tensor->node), "requires_grad"));
      if (!rg) return t.failFromPython("requires_grad of an argument of " + what);
      if (rg.get() == Py_True) {
        // An autograd.Function marked allow_in_graph is one call of apply in the graph, as
        // torch._dynamo puts it; so is one whose forward changes an input in place (the
        // op's body cannot), when the check below allows it.
        bool opaque = callRuleOf(cls) == CallRule::InGraph;
        if (!opaque) {
          Ref changes = Ref::steal(PyObject_CallOneArg(lookup(Obj::cdynamo_autograd_forward_changes_inputs), cls));
          if (!changes) return t.failFromPython("cdynamo._internal.autograd_function.forward_changes_inputs");
          opaque = changes.get() == Py_True;
        }
        if (plain_call && !opaque) return callAutogradFunctionHop(t, cls, what, separate_setup, args);
        std::string refusal = opaqueApplyRefusal(t, cls, args, kwargs);
        if (!refusal.empty())
          return t.fail(what + " recording a backward, not put into the graph: " + refusal);
        PyObject* wrap = lookup(Obj::cdynamo_autograd_function_in_graph);
        Ref node_target = wrap ? Ref::steal(PyObject_CallFunctionObjArgs(wrap, cls, target, nullptr)) : Ref();
        if (!node_target) return t.failFromPython("cdynamo._internal.autograd_function.autograd_function_in_graph");
        return recordCall(t, NodeOp::CallFunction, node_target.get(), args, kwargs);
      }
    }
  }
  if (separate_setup && !plain_call)
    return t.fail(what + " with setup_context, called with keywords or defaults, is not supported yet");
  PyObject* poly = lookup(Obj::cdynamo_autograd_function_apply);
  if (!poly) return t.failFromPython("cdynamo._internal.autograd_function.autograd_function_apply");
  args.insert(args.begin(), Value::constant(separate_setup ? Py_True : Py_False));
  args.insert(args.begin(), Value::constant(cls));
  return t.inlineFunction(poly, -1, std::move(args), std::move(kwargs));
}

}  // namespace cdynamo::trace
