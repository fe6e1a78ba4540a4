// Subgraph speculation and the higher-order ops built on it (torch.cond,
// torch.utils.checkpoint.checkpoint).
//
// Note [Subgraph speculation]
// A higher-order op takes a Python callable and runs it in a way of its own (cond picks a
// branch by a value only known when the graph runs; checkpoint runs its function again in
// the backward). The graph cannot inline such a callable: it needs it as a graph of its own,
// a submodule the op's node names. Speculation makes that graph with the tracer that is
// already running, so nothing about the body is special-cased:
//
//  * The callable is called like any other (protocol/calls.cpp `call`: a function, a lambda,
//    a bound method, an nn.Module, a functools.partial), its arguments the very values the
//    frame holds. Its operations are recorded in the frame's graph builder, after the nodes
//    the frame made so far, over the same fake mode and ShapeEnv; the guards its reads need
//    are the frame's guards, added as they are read.
//  * When it returns, the nodes recorded since it was called that compute something (calls,
//    and the get_attr nodes of subgraphs nested in it) are moved out of the frame's graph
//    (GraphBuilder::moveToSubgraph): they are the body. Placeholders made meanwhile (a
//    global tensor, a parameter the body read first) stay in the frame's graph.
//  * The body's inputs are the tensors the op passes it explicitly (its operands, the
//    function's tensor arguments), then every other node of the frame's graph the body reads
//    (GraphBuilder::bodyInputs): free tensors, whether from closure cells, globals, module
//    parameters and buffers, or values the frame computed. Those are lifted: the op's node
//    passes them as extra operands, in that order, as torch._dynamo lifts free variables.
//  * The op's node is then recorded like any torch call: run on fakes, torch's own fake
//    implementation of the op runs the body GraphModule, so the result's metadata (and the
//    check that cond's branches agree) is torch's. An op that runs its body once and returns
//    its result (checkpoint, wrap) takes fresh fakes like the body's outputs instead
//    (cdynamo/_internal/hop_results.py says when it cannot): running the body on fakes
//    again cost most of the tracing of a checkpointed model.
//
// What a body may not do, because the op runs it apart from the frame (never, once, twice,
// in the backward) while the trace would replay its effects once after the graph: change
// state outside it (an attribute, a global, a cell, a container the frame sees: any change
// the side-effect records count), change a tensor it did not make in place, or change
// torch's global state. Nor may it stop the trace (a graph break, an unsupported operation,
// an exception it lets out): the op call is then Unsupported with the body's reason, a graph
// break at the call (the op runs natively there) or, under fullgraph=True, the user's error.
// A value the body computed stays inside it: the frame reads the body's results only through
// the op's outputs, and one that escapes another way (left in a container) fails the trace
// when the graph is built, never a wrong result.
#include "trace/engine/speculation.h"

#include <algorithm>
#include <cctype>
#include <unordered_set>

#include "support/lookup.h"
#include "trace/engine/frame.h"
#include "trace/engine/graph_calls.h"
#include "trace/protocol/calls.h"
#include "trace/tracer.h"

namespace cdynamo::trace {

using graph::NodeOp;

namespace {

// The body's tensors in order, by walking what it returned (tensors, tuples and lists of
// them); false on anything else.
bool flattenOutputs(Tracer& t, const ValuePtr& v, std::vector<int>* out) {
  if (v->is(Kind::Tensor)) {
    out->push_back(v->as<Tensor>().node);
    return true;
  }
  if (v->is(Kind::Tuple) || v->is(Kind::List)) {
    for (const ValuePtr& item : *v->elements())
      if (!flattenOutputs(t, item, out)) return false;
    return true;
  }
  return false;
}

// The shape of a body's result, to compare two branches: "T" a tensor, "(..)" a tuple,
// "[..]" a list.
std::string shapeOf(const ValuePtr& v) {
  if (v->is(Kind::Tensor)) return "T";
  std::string s = v->is(Kind::List) ? "[" : "(";
  for (const ValuePtr& item : *v->elements()) s += shapeOf(item) + ",";
  return s + (v->is(Kind::List) ? "]" : ")");
}

// The name a subgraph gives its placeholder for the frame's node `id`: the frame's
// placeholder name as the frame's code reads it (L_x_ -> l_x_, as torch._dynamo's local
// proxies are named), else a neutral one.
std::string inputName(Tracer& t, int id, size_t index) {
  const graph::Node& n = t.graph().node(id);
  if (n.op == NodeOp::Placeholder && !n.name.empty()) {
    std::string s = n.name;
    for (char& c : s) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
    return s;
  }
  return "arg" + std::to_string(index);
}

std::vector<ValuePtr> tensorValues(const std::vector<int>& nodes) {
  std::vector<ValuePtr> out;
  for (int n : nodes) out.push_back(Value::tensor(n));
  return out;
}

// The op's node over `args` (its result a tuple of tensors, one getitem each), reshaped as
// the body's result `like`.
Result<ValuePtr> recordOp(Tracer& t, const std::string& op, PyObject* target, const Args& args, const Kwargs& kwargs,
                          const ValuePtr& like, size_t noutputs, PyObject* known_fake = nullptr) {
  Result<ValuePtr> r = recordCall(t, NodeOp::CallFunction, target, args, kwargs, false, known_fake);
  if (!r) return r;
  const std::vector<ValuePtr>* items = (*r)->elements();
  if (!items || items->size() != noutputs) return t.fail(op + ": the op's result does not match its body's outputs");
  size_t next = 0;
  return reshapeLike(like, *items, &next);
}

}  // namespace

ValuePtr reshapeLike(const ValuePtr& like, const std::vector<ValuePtr>& items, size_t* next) {
  if (like->is(Kind::Tensor)) return items[(*next)++];
  std::vector<ValuePtr> out;
  for (const ValuePtr& item : *like->elements()) out.push_back(reshapeLike(item, items, next));
  if (like->is(Kind::List)) return Value::list(std::move(out));
  return Value::of(Tuple{std::move(out), like->as<Tuple>().namedtuple.copy(), nullptr});
}

Done speculateCall(Tracer& t, const std::string& op, const ValuePtr& fn, Args args, Kwargs kwargs, int* first_out,
                   ValuePtr* result) {
  graph::GraphBuilder& g = t.graph();
  const int first = g.numNodes();
  *first_out = first;
  // Changes to what existed before the call are the body's side effects; what the body makes
  // and changes (a list it fills, its own cells, iterators over its values) is its own.
  const uint64_t changes = t.effects().outsideChanges();
  const uint64_t outer_scope = t.effects().openScope();
  Result<ValuePtr> r = call(t, fn, std::move(args), std::move(kwargs));
  t.effects().closeScope(outer_scope);
  if (!r) {
    if (r.outcome() == Outcome::Raised) {
      t.takePendingException();
      return t.fail(op + ": its body raises an exception, which a subgraph cannot capture");
    }
    if (r.outcome() == Outcome::Unsupported) t.prefixFailure(op + ": its body cannot be captured as one graph: ");
    return r.stop();
  }
  if (t.effects().outsideChanges() != changes)
    return t.fail(op + ": its body changes state outside it (a side effect), which a subgraph cannot capture");
  for (int i = first; i < g.numNodes(); ++i) {
    const graph::Node& n = g.node(i);
    if (!n.impure || n.moved) continue;
    // An in-place op on a tensor the body made is the body's own business; on one it was
    // given or read, or an op on torch's global state, it changes what the frame sees.
    bool own = !n.args.empty() && n.args[0].kind == graph::Arg::Kind::Node && n.args[0].node >= first &&
               g.node(n.args[0].node).op != NodeOp::Placeholder && g.node(n.args[0].node).op != NodeOp::GetAttr;
    if (!own)
      return t.fail(op + ": its body changes a tensor from outside it in place (or torch's global state), "
                    "which a subgraph cannot capture");
  }
  *result = *r;
  return {};
}

Done speculate(Tracer& t, const std::string& op, const ValuePtr& fn, Args args, Kwargs kwargs,
               const std::vector<int>& inputs, Subgraph* out) {
  graph::GraphBuilder& g = t.graph();
  int first = 0;
  ValuePtr r;
  if (Done d = speculateCall(t, op, fn, std::move(args), std::move(kwargs), &first, &r); !d) return d;
  out->result = r;
  out->outputs.clear();
  if (!flattenOutputs(t, out->result, &out->outputs))
    return t.fail(op + ": its body must return a tensor or a tuple or list of tensors");
  for (int o : out->outputs)
    if (g.isScalar(o)) return t.fail(op + ": its body returns a number read from a tensor, not supported yet");
  g.moveToSubgraph(first, &out->body);
  out->lifted.clear();
  if (!g.bodyInputs(out->body, out->outputs, inputs, &out->lifted)) return t.failFromPython(op);
  return {};
}

Ref buildBodyModule(Tracer& t, const std::string& op, const Subgraph& sg, const std::vector<int>& inputs,
                    const std::vector<int>& lifted, const std::function<std::string(int)>& lifted_suffix,
                    graph::GraphBuilder::OutputForm form, const std::vector<std::string>* input_names, size_t split) {
  std::vector<int> all = inputs;
  all.insert(all.end(), lifted.begin(), lifted.end());
  std::vector<std::string> names;
  for (size_t k = 0; k < all.size(); ++k) {
    if (k < inputs.size() && input_names) names.push_back((*input_names)[k]);
    else names.push_back(inputName(t, all[k], k) + (k >= inputs.size() ? lifted_suffix(all[k]) : ""));
  }
  // Placeholder names are the forward's parameter names: two inputs read from one source
  // (an argument and the same frame value lifted again) get _1, _2, ...
  std::unordered_set<std::string> used;
  for (std::string& n : names) {
    std::string base = n;
    for (int k = 1; !used.insert(n).second; ++k) n = base + "_" + std::to_string(k);
  }
  Ref gm = t.graph().buildSubgraph(sg.body, all, names, sg.outputs, form, split);
  if (!gm) (void)t.failFromPython(op + ": building its body's graph");
  return gm;
}

Result<int> installSubgraph(Tracer& t, const std::string& op, const Subgraph& sg, const std::vector<int>& inputs,
                            const std::vector<int>& lifted, const std::string& base,
                            const std::function<std::string(int)>& lifted_suffix, graph::GraphBuilder::OutputForm form,
                            const std::vector<std::string>* input_names, size_t split) {
  Ref gm = buildBodyModule(t, op, sg, inputs, lifted, lifted_suffix, form, input_names, split);
  if (!gm) return Stop{Outcome::Unsupported};
  int id = t.graph().addSubmodule(gm.get(), base);
  if (id < 0) return t.failFromPython(op);
  return id;
}

Result<ValuePtr> standIn(Tracer& t, const std::string& op, const ValuePtr& v, bool slice) {
  if (!v->is(Kind::Tensor) || t.graph().isScalar(v->as<Tensor>().node))
    return t.fail(op + ": its inputs must be tensors (or tuples or lists of them)");
  Result<ValuePtr> r = Value::constant(Py_None);
  if (slice) {
    Ref zero = Ref::steal(PyLong_FromLong(0));
    if (!zero) return t.failFromPython(op);
    static PyObject* const select = PyUnicode_InternFromString("select");
    r = recordCall(t, NodeOp::CallMethod, select, {v, Value::constant(zero.get()), Value::constant(zero.get())}, {});
  } else {
    static PyObject* const clone = PyUnicode_InternFromString("clone");
    r = recordCall(t, NodeOp::CallMethod, clone, {v}, {});
  }
  if (!r) return r;
  if (!(*r)->is(Kind::Tensor)) return t.fail(op + ": an input stand-in is not a tensor");
  t.graph().markBookkeeping((*r)->as<Tensor>().node);
  return r;
}

namespace {

// The tensors of a value that is a tensor or a tuple or list of them (a pytree's leaves), in order.
bool leaves(const ValuePtr& v, std::vector<ValuePtr>* out) {
  if (v->is(Kind::Tensor)) {
    out->push_back(v);
    return true;
  }
  if (!v->is(Kind::Tuple) && !v->is(Kind::List)) return false;
  for (const ValuePtr& item : *v->elements())
    if (!leaves(item, out)) return false;
  return true;
}

// Stand-ins for every leaf of `v`, in `v`'s shape; their nodes appended to *nodes.
Result<ValuePtr> standInsLike(Tracer& t, const std::string& op, const ValuePtr& v, bool slice, std::vector<int>* nodes) {
  std::vector<ValuePtr> in, out;
  if (!leaves(v, &in)) return t.fail(op + ": its inputs must be tensors (or tuples or lists of them)");
  for (const ValuePtr& leaf : in) {
    Result<ValuePtr> s = standIn(t, op, leaf, slice);
    if (!s) return s;
    nodes->push_back((*s)->as<Tensor>().node);
    out.push_back(*s);
  }
  size_t next = 0;
  return reshapeLike(v, out, &next);
}

std::vector<std::string> childNames(size_t n, size_t first = 0) {
  std::vector<std::string> names;
  for (size_t k = first; k < first + n; ++k) names.push_back(k == 0 ? std::string("child") : "child_" + std::to_string(k));
  return names;
}

std::vector<int> unionOf(const std::vector<int>& a, const std::vector<int>& b) {
  std::vector<int> out = a;
  for (int n : b)
    if (std::find(out.begin(), out.end(), n) == out.end()) out.push_back(n);
  return out;
}

}  // namespace

// torch.cond(pred, true_fn, false_fn, operands): torch.ops.higher_order.cond(pred,
// cond_true_k, cond_false_k, (*operands, *lifted)), both branches taking the same inputs
// (the operands, then the free values of either branch: the true branch's first).
Result<ValuePtr> callCond(Tracer& t, PyObject*, const char*, Args& args, Kwargs& kwargs) {
  const std::string op = "torch.cond";
  static const char* const kNames[] = {"pred", "true_fn", "false_fn", "operands"};
  ValuePtr parts[4];
  if (args.size() > 4) return t.fail(op + " takes 4 arguments: cond(pred, true_fn, false_fn, operands)");
  for (size_t i = 0; i < args.size(); ++i) parts[i] = args[i];
  for (const auto& [k, v] : kwargs) {
    bool known = false;
    for (int i = 0; i < 4; ++i)
      if (PyUnicode_CompareWithASCIIString(k.get(), kNames[i]) == 0 && !parts[i]) {
        parts[i] = v;
        known = true;
      }
    if (!known) return t.fail(op + ": unexpected keyword argument " + PyUnicode_AsUTF8(k.get()));
  }
  if (!parts[0] || !parts[1] || !parts[2]) return t.fail(op + " needs pred, true_fn and false_fn");
  if (!parts[3]) parts[3] = Value::tuple({});
  const ValuePtr& pred = parts[0];
  if (!parts[3]->is(Kind::Tuple) && !parts[3]->is(Kind::List))
    return t.fail(op + ": operands must be a tuple or a list of tensors");
  std::vector<ValuePtr> operands = *parts[3]->elements();

  if (pred->is(Kind::Constant)) {
    // A Python bool: one branch, as eager and torch._dynamo run it (with its warning).
    int truth = PyObject_IsTrue(pred->constant());
    if (truth < 0) return t.failFromPython(op + ": the predicate's truth");
    if (PyErr_WarnEx(PyExc_UserWarning,
                     "Pred is a Python constant. When used with torch.cond, it specializes on one of the branches. "
                     "If you want torch.cond to preserve two branches, please make the predicate a boolean tensor or "
                     "a SymBool.",
                     1) < 0)
      return t.raisePython();
    return call(t, truth ? parts[1] : parts[2], operands, {});
  }
  if (!pred->is(Kind::Tensor))
    return t.fail(op + ": the predicate must be a bool or a boolean tensor with a single item");
  std::vector<int> inputs;
  for (const ValuePtr& o : operands) {
    if (!o->is(Kind::Tensor) || t.graph().isScalar(o->as<Tensor>().node))
      return t.fail(op + ": operands must be a tuple or a list of tensors");
    inputs.push_back(o->as<Tensor>().node);
  }
  Subgraph tb, fb;
  if (Done d = speculate(t, op + " (true branch)", parts[1], operands, {}, inputs, &tb); !d) return d.stop();
  if (Done d = speculate(t, op + " (false branch)", parts[2], operands, {}, inputs, &fb); !d) return d.stop();
  if (shapeOf(tb.result) != shapeOf(fb.result))
    return t.fail(op + ": Expected branches to return the same pytree structure.");
  std::vector<int> lifted = unionOf(tb.lifted, fb.lifted);
  // A free value's placeholder says which branch read it (the true branch's name when both did).
  auto branch = [&](int n) {
    return std::find(tb.lifted.begin(), tb.lifted.end(), n) != tb.lifted.end() ? std::string("_true_branch")
                                                                              : std::string("_false_branch");
  };
  Result<int> true_id = installSubgraph(t, op, tb, inputs, lifted, "cond_true", branch);
  if (!true_id) return true_id.stop();
  Result<int> false_id = installSubgraph(t, op, fb, inputs, lifted, "cond_false", branch);
  if (!false_id) return false_id.stop();
  PyObject* target = lookup(Obj::torch_ops_higher_order_cond);
  if (!target) return t.failFromPython(op);
  std::vector<ValuePtr> all = operands;
  for (ValuePtr& v : tensorValues(lifted)) all.push_back(std::move(v));
  Args call_args = {pred, Value::tensor(*true_id), Value::tensor(*false_id), Value::tuple(std::move(all))};
  return recordOp(t, op, target, call_args, {}, tb.result, tb.outputs.size());
}

namespace {

// The real object a callable value of the program stands for, guarded by identity (a
// function read from the program is otherwise guarded by its code and globals, which another
// closure of the same code passes); a functools.partial made in the trace is made for real
// from such parts and constants. Null when some part exists only in the trace.
Ref realCallable(Tracer& t, const ValuePtr& v) {
  if (v->is(Kind::Constant)) return Ref::borrow(v->constant());
  if (v->is(Kind::Callable) && v->reg >= 0) {
    t.guards().checkIdentity(v->reg, v->real());
    return Ref::borrow(v->real());
  }
  const Partial* part = v->get<Partial>();
  if (!part || part->context) return Ref();
  Ref fn = realCallable(t, part->fn);
  if (!fn || !part->args->is(Kind::Tuple) || !part->kwargs->is(Kind::Dict)) return Ref();
  const std::vector<ValuePtr>& items = *part->args->elements();
  Ref pargs = Ref::steal(PyTuple_New(static_cast<Py_ssize_t>(items.size() + 1)));
  if (!pargs) return PyErr_Clear(), Ref();
  PyTuple_SET_ITEM(pargs.get(), 0, fn.release());
  for (size_t i = 0; i < items.size(); ++i) {
    Ref item = realCallable(t, items[i]);
    if (!item) return Ref();
    PyTuple_SET_ITEM(pargs.get(), static_cast<Py_ssize_t>(i + 1), item.release());
  }
  const Dict& d = part->kwargs->as<Dict>();
  Ref kw = Ref::steal(PyDict_New());
  if (!kw) return PyErr_Clear(), Ref();
  for (size_t i = 0; i < d.keys.size(); ++i) {
    Ref value = realCallable(t, d.values[i]);
    if (!value || PyDict_SetItem(kw.get(), d.keys[i].get(), value.get()) < 0) return PyErr_Clear(), Ref();
  }
  Ref made = Ref::steal(PyObject_Call(lookup(Obj::functools_partial), pargs.get(), kw.get()));
  if (!made) PyErr_Clear();
  return made;
}

// A higher-order op that runs its body once, with `body_args`/`body_kwargs`:
// target(wrap_body_k, *tensor_args, *lifted, **own), reshaped as the body's result.
Result<ValuePtr> callWrapped(Tracer& t, const std::string& op, Obj target_obj, const ValuePtr& fn, Args body_args,
                             Kwargs body_kwargs, const Kwargs& own, PyObject* context_fn = nullptr) {
  std::vector<int> inputs;
  for (const ValuePtr& a : body_args)
    if (a->is(Kind::Tensor) && !t.graph().isScalar(a->as<Tensor>().node)) inputs.push_back(a->as<Tensor>().node);
  Subgraph body;
  if (Done d = speculate(t, op, fn, std::move(body_args), std::move(body_kwargs), inputs, &body); !d) return d.stop();
  Result<int> gm_id = installSubgraph(t, op, body, inputs, body.lifted, "wrap_body", [](int) { return std::string(); });
  if (!gm_id) return gm_id.stop();
  if (context_fn) {
    static PyObject* const key = PyUnicode_InternFromString("_checkpoint_context_fn");
    Ref meta = Ref::steal(PyObject_GetAttrString(t.graph().node(*gm_id).real.get(), "meta"));
    if (!meta || PyObject_SetItem(meta.get(), key, context_fn) < 0)
      return t.failFromPython(op + ": passing its context_fn");
  }
  PyObject* target = lookup(target_obj);
  if (!target) return t.failFromPython(op);
  Args call_args = {Value::tensor(*gm_id)};
  for (ValuePtr& v : tensorValues(inputs)) call_args.push_back(std::move(v));
  for (ValuePtr& v : tensorValues(body.lifted)) call_args.push_back(std::move(v));
  // The op returns what its body returned: fresh fakes like the body's outputs are its
  // result, without running the whole body on fakes a second time (None: run it).
  PyObject* fresh_like = lookup(Obj::cdynamo_hop_fresh_like);
  if (!fresh_like) return t.failFromPython(op);
  Ref outs = Ref::steal(PyTuple_New(static_cast<Py_ssize_t>(body.outputs.size())));
  if (!outs) return t.failFromPython(op);
  for (size_t i = 0; i < body.outputs.size(); ++i)
    PyTuple_SET_ITEM(outs.get(), static_cast<Py_ssize_t>(i), Ref::borrow(t.graph().fake(body.outputs[i])).release());
  Ref known = Ref::steal(PyObject_CallOneArg(fresh_like, outs.get()));
  if (!known) return t.failFromPython(op + ": the fake result of its body");
  return recordOp(t, op, target, call_args, own, body.result, body.outputs.size(),
                  known.get() == Py_None ? nullptr : known.get());
}

}  // namespace

// torch.utils.checkpoint.checkpoint(fn, *args, use_reentrant=..., **kwargs):
// torch.ops.higher_order.tag_activation_checkpoint(wrap_body_k, *tensor_args, *lifted,
// <checkpoint's own keywords>), fn's keywords going to fn.
Result<ValuePtr> callCheckpoint(Tracer& t, PyObject*, const char*, Args& args, Kwargs& kwargs) {
  const std::string op = "torch.utils.checkpoint.checkpoint";
  if (args.empty()) return t.fail(op + " needs a function");
  Ref context_fn;
  static const char* const kOwn[] = {"use_reentrant", "context_fn", "determinism_check", "debug", "early_stop",
                                     "preserve_rng_state"};
  Kwargs own, body_kwargs;
  for (const auto& kv : kwargs) {
    bool mine = false;
    for (const char* k : kOwn) mine = mine || PyUnicode_CompareWithASCIIString(kv.first.get(), k) == 0;
    if (!mine) {
      body_kwargs.emplace_back(kv.first.copy(), kv.second);
      continue;
    }
    if (PyUnicode_CompareWithASCIIString(kv.first.get(), "context_fn") == 0) {
      PyObject* noop = lookup(Obj::torch_utils_checkpoint_noop_context_fn);
      if (!noop) return t.failFromPython(op);
      if (kv.second->real() == noop) continue;  // the default: nothing to pass
      // Selective checkpointing: the context_fn is no graph value but the policy AOT
      // autograd applies when it lowers the op, read from the body's GraphModule meta (as
      // torch._dynamo passes it); so it must be a real object, the same on every hit.
      context_fn = realCallable(t, kv.second);
      if (!context_fn)
        return t.fail(op + ": its context_fn must be a function or a functools.partial of functions and "
                      "constants read from the program, not one made in the compiled code");
      continue;
    }
    if (!kv.second->is(Kind::Constant))
      return t.fail(op + ": its keyword " + PyUnicode_AsUTF8(kv.first.get()) + " must be a constant");
    own.emplace_back(kv.first.copy(), kv.second);
  }
  return callWrapped(t, op, Obj::torch_ops_higher_order_tag_activation_checkpoint, args[0],
                     Args(args.begin() + 1, args.end()), std::move(body_kwargs), own, context_fn.get());
}

// torch._higher_order_ops.wrap.wrap(fn, *args, **kwargs): torch.ops.higher_order.wrap(wrap_body_k, ...).
Result<ValuePtr> callWrap(Tracer& t, PyObject*, const char*, Args& args, Kwargs& kwargs) {
  const std::string op = "torch.ops.higher_order.wrap";
  if (args.empty()) return t.fail(op + " needs a function");
  Kwargs body_kwargs;
  for (const auto& kv : kwargs) body_kwargs.emplace_back(kv.first.copy(), kv.second);
  return callWrapped(t, op, Obj::torch_ops_higher_order_wrap, args[0], Args(args.begin() + 1, args.end()),
                     std::move(body_kwargs), {});
}

// while_loop(cond_fn, body_fn, carried_inputs): torch.ops.higher_order.while_loop(cond_fn_k,
// body_fn_k, (*carried,), (*lifted,)). Both bodies take stand-ins of the carried values (the body
// sees each iteration's values, not the frame's: a frame value it reads is lifted apart even when
// it is a carried input too), then the free values of either.
Result<ValuePtr> callWhileLoop(Tracer& t, PyObject*, const char*, Args& args, Kwargs& kwargs) {
  const std::string op = "torch.while_loop";
  if (args.size() != 3 || !kwargs.empty()) return t.fail(op + " takes 3 arguments: while_loop(cond_fn, body_fn, carried_inputs)");
  if (!args[2]->is(Kind::Tuple) && !args[2]->is(Kind::List))
    return t.fail(op + ": carried_inputs must be a tuple or a list of tensors");
  std::vector<ValuePtr> carried = *args[2]->elements();
  if (!t.graph().shapeEnv()) {
    // The op's fake implementation makes (and ignores) unbacked symbols of the trace's
    // ShapeEnv: a trace made without one is made again with one, static sizes kept.
    t.retrace_requested = true;
    t.retrace_with_shape_env = true;
    return t.fail(op + " needs a ShapeEnv for its fake implementation: the frame is traced again with one");
  }
  std::vector<int> inputs;
  std::vector<ValuePtr> stand;
  for (const ValuePtr& c : carried) {
    Result<ValuePtr> s = standIn(t, op, c, false);
    if (!s) return s;
    inputs.push_back((*s)->as<Tensor>().node);
    stand.push_back(*s);
  }
  Subgraph cg, bg;
  if (Done d = speculate(t, op + " (cond_fn)", args[0], stand, {}, inputs, &cg); !d) return d.stop();
  if (!cg.result->is(Kind::Tensor)) return t.fail(op + ": cond_fn must return a boolean tensor with a single item");
  if (Done d = speculate(t, op + " (body_fn)", args[1], stand, {}, inputs, &bg); !d) return d.stop();
  if (bg.outputs.size() != carried.size() || bg.result->is(Kind::Tensor))
    return t.fail(op + ": body_fn must return a tuple of tensors like carried_inputs");
  std::vector<int> lifted = unionOf(cg.lifted, bg.lifted);
  std::vector<std::string> cond_names = childNames(inputs.size());
  std::vector<std::string> body_names = childNames(inputs.size(), inputs.size());
  auto suffix = [](int) { return std::string("_body_fn"); };
  Result<int> cond_id = installSubgraph(t, op, cg, inputs, lifted, "cond_fn", suffix,
                                        graph::GraphBuilder::OutputForm::Single, &cond_names);
  if (!cond_id) return cond_id.stop();
  Result<int> body_id = installSubgraph(t, op, bg, inputs, lifted, "body_fn", suffix,
                                        graph::GraphBuilder::OutputForm::Tuple, &body_names);
  if (!body_id) return body_id.stop();
  PyObject* target = lookup(Obj::torch_ops_higher_order_while_loop);
  if (!target) return t.failFromPython(op);
  Args call_args = {Value::tensor(*cond_id), Value::tensor(*body_id), Value::tuple(carried),
                    Value::tuple(tensorValues(lifted))};
  Result<ValuePtr> r = recordCall(t, NodeOp::CallFunction, target, call_args, {});
  if (!r) return r;
  const std::vector<ValuePtr>* items = (*r)->elements();
  if (!items || items->size() != carried.size()) return t.fail(op + ": the op's result does not match carried_inputs");
  return Value::tuple(*items);
}

// map(f, xs, *args): torch.ops.higher_order.map_impl(map_body_k, [*xs leaves], [*args, *lifted]),
// the body taking a slice of each xs leaf (item 0 along dim 0) then the args' tensors and the
// lifted values.
Result<ValuePtr> callMap(Tracer& t, PyObject*, const char*, Args& args, Kwargs& kwargs) {
  const std::string op = "torch.ops.higher_order.map";
  if (args.size() < 2 || !kwargs.empty()) return t.fail(op + " takes map(f, xs, *args)");
  std::vector<ValuePtr> xs_leaves;
  if (!leaves(args[1], &xs_leaves)) return t.fail(op + ": xs must be tensors (or tuples or lists of them)");
  std::vector<int> inputs;
  Result<ValuePtr> xs_stand = standInsLike(t, op, args[1], true, &inputs);
  if (!xs_stand) return xs_stand;
  std::vector<ValuePtr> extra;
  Args body_args = {*xs_stand};
  for (size_t i = 2; i < args.size(); ++i) {
    body_args.push_back(args[i]);
    if (!leaves(args[i], &extra)) return t.fail(op + ": its args must be tensors (or tuples or lists of them)");
  }
  std::vector<int> extra_nodes;
  for (const ValuePtr& e : extra) extra_nodes.push_back(e->as<Tensor>().node);
  std::vector<int> all_inputs = inputs;
  all_inputs.insert(all_inputs.end(), extra_nodes.begin(), extra_nodes.end());
  Subgraph body;
  if (Done d = speculate(t, op, args[0], body_args, {}, all_inputs, &body); !d) return d.stop();
  std::vector<std::string> names = childNames(inputs.size());
  for (size_t k = 0; k < extra_nodes.size(); ++k) names.push_back(inputName(t, extra_nodes[k], inputs.size() + k));
  Result<int> gm_id = installSubgraph(t, op, body, all_inputs, body.lifted, "map_body", [](int) { return std::string(); },
                                      graph::GraphBuilder::OutputForm::Tuple, &names);
  if (!gm_id) return gm_id.stop();
  PyObject* target = lookup(Obj::torch_ops_higher_order_map_impl);
  if (!target) return t.failFromPython(op);
  std::vector<ValuePtr> rest = extra;
  for (ValuePtr& v : tensorValues(body.lifted)) rest.push_back(std::move(v));
  Args call_args = {Value::tensor(*gm_id), Value::list(xs_leaves), Value::list(std::move(rest))};
  return recordOp(t, op, target, call_args, {}, body.result, body.outputs.size());
}

// scan(combine_fn, init, xs, dim=0, reverse=False): torch.ops.higher_order.scan(
// scan_combine_fn_k, [*init leaves], [*xs leaves], [*lifted]); combine_fn takes stand-ins of
// the carry and a slice of each xs leaf, and returns (next carry, this step's output).
Result<ValuePtr> callScan(Tracer& t, PyObject*, const char*, Args& args, Kwargs& kwargs) {
  const std::string op = "torch._higher_order_ops.scan";
  static const char* const kNames[] = {"combine_fn", "init", "xs", "dim", "reverse"};
  ValuePtr parts[5];
  if (args.size() > 5) return t.fail(op + " takes scan(combine_fn, init, xs, dim=0, reverse=False)");
  for (size_t i = 0; i < args.size(); ++i) parts[i] = args[i];
  for (const auto& [k, v] : kwargs) {
    bool known = false;
    for (int i = 0; i < 5; ++i)
      if (PyUnicode_CompareWithASCIIString(k.get(), kNames[i]) == 0 && !parts[i]) {
        parts[i] = v;
        known = true;
      }
    if (!known) return t.fail(op + ": unexpected keyword argument " + PyUnicode_AsUTF8(k.get()));
  }
  if (!parts[0] || !parts[1] || !parts[2]) return t.fail(op + " needs combine_fn, init and xs");
  // The other dims and the reversed order are the Python function's moves of xs around the
  // op: not modelled here yet.
  if ((parts[3] && !(parts[3]->is(Kind::Constant) && PyLong_CheckExact(parts[3]->constant()) &&
                     PyLong_AsLong(parts[3]->constant()) == 0)) ||
      (parts[4] && parts[4]->constant() != Py_False))
    return t.fail(op + " over a dim other than 0 or reversed is not supported yet");
  std::vector<ValuePtr> init_leaves, xs_leaves;
  if (!leaves(parts[1], &init_leaves) || !leaves(parts[2], &xs_leaves) || xs_leaves.empty())
    return t.fail(op + ": init and xs must be tensors (or tuples or lists of them)");
  std::vector<int> inputs;
  Result<ValuePtr> carry = standInsLike(t, op, parts[1], false, &inputs);
  if (!carry) return carry;
  Result<ValuePtr> x = standInsLike(t, op, parts[2], true, &inputs);
  if (!x) return x;
  Subgraph body;
  if (Done d = speculate(t, op, parts[0], {*carry, *x}, {}, inputs, &body); !d) return d.stop();
  const std::vector<ValuePtr>* pair = body.result->elements();
  std::vector<ValuePtr> carry_out;
  if (body.result->is(Kind::Tensor) || !pair || pair->size() != 2 || !leaves((*pair)[0], &carry_out) ||
      carry_out.size() != init_leaves.size())
    return t.fail(op + ": combine_fn must return (next carry like init, output)");
  std::vector<std::string> names = childNames(inputs.size());
  Result<int> gm_id = installSubgraph(t, op, body, inputs, body.lifted, "scan_combine_fn",
                                      [](int) { return std::string(); }, graph::GraphBuilder::OutputForm::List, &names);
  if (!gm_id) return gm_id.stop();
  PyObject* target = lookup(Obj::torch_ops_higher_order_scan);
  if (!target) return t.failFromPython(op);
  Args call_args = {Value::tensor(*gm_id), Value::list(init_leaves), Value::list(xs_leaves),
                    Value::list(tensorValues(body.lifted))};
  return recordOp(t, op, target, call_args, {}, body.result, body.outputs.size());
}

// t.register_hook(hook) on a tensor the graph computes: torch.ops.higher_order.register_hook(
// t, hook_body_k, *lifted), as torch._dynamo records it. The op registers the body as the
// tensor's hook when the graph runs (on the real tensor, or on AOT autograd's tracing tensor,
// whose backward then runs it), so the gradient of every use of t passes through it, the uses
// traced before the call included. The body is the hook over a stand-in of the gradient (one
// returning None keeps the gradient). Later reads of t go through the op's result, so the
// call is never dead code. The handle the call returns is not modelled: the call must discard
// it. On a tensor the caller passed in (and register_post_accumulate_grad_hook, which only a
// leaf takes) the call is a side effect replayed on the real tensor after the graph: the hook
// stays on it after the frame, as eager leaves it. A hook the body cannot capture (a side
// effect, a graph break) and a used handle are Unsupported: the call runs natively at a
// graph break.
Result<ValuePtr> tensorRegisterHook(Tracer& t, const ValuePtr& self, PyObject* method, Args& args, Kwargs& kwargs) {
  const bool post_accumulate = PyUnicode_CompareWithASCIIString(method, "register_post_accumulate_grad_hook") == 0;
  const std::string op = std::string("Tensor.") + PyUnicode_AsUTF8(method);
  if (args.size() != 1 || !kwargs.empty()) return t.fail(op + " takes one hook");
  graph::GraphBuilder& g = t.graph();
  const int node = self->as<Tensor>().node;
  if (g.isScalar(node)) return t.fail(op + " on a number read from a tensor");
  Ref rg = Ref::steal(PyObject_GetAttrString(g.fake(node), "requires_grad"));
  if (!rg) return t.failFromPython(op);
  if (rg.get() != Py_True) return t.fail(op + " on a tensor that does not require grad (eager raises)");
  SymbolicFrame* f = t.current();
  if (!f || f->pc + 1 >= f->instrs.size() || f->instrs[f->pc + 1].op != bytecode::Op::POP_TOP)
    return t.fail(op + ": the handle it returns is used, which is not modelled");
  if (g.node(node).op == NodeOp::Placeholder || g.node(node).op == NodeOp::GetAttr) {
    // A tensor the caller passed in keeps the hook after the frame (a backward outside it
    // runs it): the call is replayed on it after the graph, with the hook the program made.
    int reg = t.inputRegOf(node);
    if (reg < 0 || !t.exampleOf(node)) return t.fail(op + " on a tensor the graph reads as a constant");
    if (post_accumulate) {
      Ref leaf = Ref::steal(PyObject_GetAttrString(t.exampleOf(node), "is_leaf"));
      if (!leaf) return t.failFromPython(op);
      if (leaf.get() != Py_True) return t.fail(op + " on a tensor that is not a leaf (eager raises)");
    }
    if (Done d = t.effects().callMethod(reg, method, args[0]); !d) return d.stop();
    return Value::constant(Py_None);
  }
  // A hook after a leaf's .grad is accumulated: only leaves take one (eager raises on others).
  if (post_accumulate) return t.fail(op + " on a tensor the graph computes (eager raises: not a leaf)");
  PyObject* wrapper = lookup(Obj::cdynamo_hook_or_grad);
  PyObject* target = lookup(Obj::torch_ops_higher_order_register_hook);
  if (!wrapper || !target) return t.failFromPython(op);
  Result<ValuePtr> grad = standIn(t, op, self, false);
  if (!grad) return grad;
  std::vector<int> inputs = {(*grad)->as<Tensor>().node};
  Subgraph body;
  if (Done d = speculate(t, op + " (its hook)", Value::callable(wrapper), {args[0], *grad}, {}, inputs, &body); !d)
    return d.stop();
  if (body.outputs.size() != 1 || !body.result->is(Kind::Tensor))
    return t.fail(op + ": the hook must return a tensor or None");
  std::vector<std::string> names = {"grad"};
  Result<int> gm_id = installSubgraph(t, op, body, inputs, body.lifted, "hook_body", [](int) { return std::string(); },
                                      graph::GraphBuilder::OutputForm::Single, &names);
  if (!gm_id) return gm_id.stop();
  Args call_args = {self, Value::tensor(*gm_id)};
  for (ValuePtr& v : tensorValues(body.lifted)) call_args.push_back(std::move(v));
  Result<ValuePtr> r = recordCall(t, NodeOp::CallFunction, target, call_args, {}, true);
  if (!r) return r;
  if (!(*r)->is(Kind::Tensor)) return t.fail(op + ": the op's result is not a tensor");
  // Every holder of this tensor value (locals, containers) reads the hooked node from here on.
  const_cast<Value&>(*self).as<Tensor>().node = (*r)->as<Tensor>().node;
  return Value::constant(Py_None);
}

}  // namespace cdynamo::trace

namespace cdynamo::trace {

// A call of a function marked torch.compiler.nested_compile_region reaches the placeholder
// its wrapper calls, invoke_subgraph_placeholder(fn, *args, **kwargs):
// torch.ops.higher_order.invoke_subgraph(subgraph_k, 'subgraph_k', *tensor_args, *lifted), its
// body returning a tuple. Each call is traced (its guards are the frame's); a body equal to one
// installed before (subgraph_reuse.body_key: same structure over inputs of the same metadata)
// is not installed again: the op names the earlier one, so every call of the region runs one
// compiled body, as torch._dynamo reuses it.
Result<ValuePtr> callInvokeSubgraph(Tracer& t, PyObject*, const char*, Args& args, Kwargs& kwargs) {
  const std::string op = "torch.compiler.nested_compile_region";
  if (args.empty()) return t.fail(op + ": the region's function is missing");
  std::vector<int> inputs;
  auto note = [&](const ValuePtr& a) {
    if (a->is(Kind::Tensor) && !t.graph().isScalar(a->as<Tensor>().node)) inputs.push_back(a->as<Tensor>().node);
  };
  for (size_t i = 1; i < args.size(); ++i) note(args[i]);
  Kwargs body_kwargs;
  for (const auto& kv : kwargs) {
    note(kv.second);
    body_kwargs.emplace_back(kv.first.copy(), kv.second);
  }
  Subgraph body;
  if (Done d = speculate(t, op, args[0], Args(args.begin() + 1, args.end()), std::move(body_kwargs), inputs, &body); !d)
    return d.stop();
  auto none = [](int) { return std::string(); };
  Ref gm = buildBodyModule(t, op, body, inputs, body.lifted, none, graph::GraphBuilder::OutputForm::Tuple, nullptr);
  if (!gm) return Stop{Outcome::Unsupported};
  PyObject* key_of = lookup(Obj::cdynamo_subgraph_body_key);
  Ref key = key_of ? Ref::steal(PyObject_CallOneArg(key_of, gm.get())) : Ref();
  if (!key) return t.failFromPython(op + ": comparing its body with the region's earlier ones");
  int gm_id = -1;
  std::string name;
  for (const Tracer::RegionBody& earlier : t.region_bodies) {
    int same = PyObject_RichCompareBool(earlier.key.get(), key.get(), Py_EQ);
    if (same < 0) return t.failFromPython(op + ": comparing its body with the region's earlier ones");
    if (same) {
      gm_id = t.graph().addSubmoduleAlias(earlier.node, "subgraph");
      name = earlier.name;
      break;
    }
  }
  if (gm_id < 0) {
    gm_id = t.graph().addSubmodule(gm.get(), "subgraph");
    if (gm_id < 0) return t.failFromPython(op);
    name = t.graph().node(gm_id).name;
    t.region_bodies.push_back({std::move(key), gm_id, name});
  }
  PyObject* target = lookup(Obj::torch_ops_higher_order_invoke_subgraph);
  if (!target) return t.failFromPython(op);
  Ref identifier = Ref::steal(PyUnicode_FromStringAndSize(name.data(), static_cast<Py_ssize_t>(name.size())));
  if (!identifier) return t.failFromPython(op);
  Args call_args = {Value::tensor(gm_id), Value::constant(identifier.get())};
  for (ValuePtr& v : tensorValues(inputs)) call_args.push_back(std::move(v));
  for (ValuePtr& v : tensorValues(body.lifted)) call_args.push_back(std::move(v));
  return recordOp(t, op, target, call_args, {}, body.result, body.outputs.size());
}

}  // namespace cdynamo::trace
