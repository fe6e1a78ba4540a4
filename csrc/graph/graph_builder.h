// The graph IR recorded during tracing, and its conversion to a torch.fx.GraphModule.
//
// Tracing appends nodes here; each node's output metadata comes from running its target
// on fake tensors (torch._subclasses.fake_tensor.FakeTensorMode), entered for the whole
// trace. The FX graph is built once, at the end, from the live nodes only.
//
// Units: graph_builder.cpp (the IR: inputs, calls, effects), fake_mode.cpp (the mode and
// FakeTensors made from a spec), input_fakes.cpp, memo.cpp (the output-metadata memo),
// graph_module.cpp (buildGraphModule), backend.cpp (callBackend); torch_refs.h holds what
// they derive once from torch.
//
// Errors: functions returning false / -1 leave a Python error set (the tracer turns it
// into an "unsupported" reason; nothing here raises across the frame hook).
#pragma once
#include <Python.h>

#include <algorithm>
#include <functional>
#include <map>
#include <string>
#include <tuple>
#include <unordered_map>
#include <unordered_set>
#include <utility>
#include <vector>

#include "support/pyref.h"

namespace cdynamo::graph {

struct TorchRefs;  // torch_refs.h

// An argument of a node: a tree of Python constants and references to earlier nodes.
struct Arg {
  enum class Kind : uint8_t { Node, Const, Tuple, List, Slice };
  Kind kind = Kind::Const;
  int node = -1;            // Kind::Node
  Ref constant;             // Kind::Const
  std::vector<Arg> items;   // Tuple / List; Slice: exactly 3 (start, stop, step)

  static Arg ofNode(int n) {
    Arg a;
    a.kind = Kind::Node;
    a.node = n;
    return a;
  }
  static Arg ofConst(PyObject* o) {
    Arg a;
    a.kind = Kind::Const;
    a.constant = Ref::borrow(o);
    return a;
  }
  static Arg ofItems(Kind k, std::vector<Arg> items) {
    Arg a;
    a.kind = k;
    a.items = std::move(items);
    return a;
  }
  Arg clone() const;
};

// GetAttr: a tensor the graph module itself holds (its attribute `name`, the tensor `real`),
// not a graph input: see GraphBuilder::addAttribute.
enum class NodeOp : uint8_t { Placeholder, CallFunction, CallMethod, GetAttr };

struct Node {
  NodeOp op;
  Ref target;          // callable (CallFunction) or method name str (CallMethod); null for inputs
  std::string name;    // placeholder name
  std::string attr;    // GetAttr of a subgraph: the attribute it reads when not its own name (a reused body)
  std::vector<Arg> args;
  std::vector<std::pair<Ref, Arg>> kwargs;  // name (str) -> value
  Ref fake;            // fake result (FakeTensor, or a tuple of them)
  bool impure = false; // mutates its inputs: kept even when its result is unused
  Ref sig;             // memo signature of `fake` (see GraphBuilder::memoKey); null: not read yet
  bool sig_rg = false; // with `sig`: whether `fake` requires grad (kept out of the key, see MemoEntry)
  Ref unbacked_bindings;  // the unbacked symbols this node's result binds (meta["unbacked_bindings"]), or null
  // Dynamic shapes. A symbol's placeholder (its fake a SymInt) stands for size `sym_dim` of
  // tensor placeholder `sym_of`; a tensor placeholder's `dyn_mask` has a bit per symbolic
  // dim and `uses_syms` the symbol placeholders its sizes mention (kept live with it).
  int sym_of = -1;
  int sym_dim = -1;
  uint64_t dyn_mask = 0;
  std::vector<int> uses_syms;
  bool int_input = false;  // the placeholder of an int argument made symbolic (its fake a SymInt)
  int loc = -1;            // where the program made this call (internLocation), or -1
  Ref real;                // a tensor placeholder: the real tensor (its meta["tensor_dict"] is read from it)
  // The local the program first stored this node's tensor into (nameHint), and how many
  // nodes the graph had then; hint_at -1: never stored.
  std::string hint;
  int hint_at = -1;
  bool submodule = false;  // a GetAttr of a subgraph's GraphModule (real and fake are that module)
  bool moved = false;      // part of a subgraph's body (moveToSubgraph): never emitted in this graph
};

// How the trace makes input sizes symbolic (GraphBuilder::setDynamic, before begin()).
struct DynamicConfig {
  int mode = -1;             // compile(dynamic=): 1 True, 0 False, -1 None (automatic)
  PyObject* memory = nullptr;  // the code object's size memory (a dict, see cdynamo/_internal/symbolic_shapes.py), or null
  bool marked_inputs = false;  // a frame input carries torch._dynamo.mark_dynamic marks
  bool shape_env = false;      // a ShapeEnv even with static sizes (an op's fake implementation needs one)
};

class GraphBuilder {
 public:
  GraphBuilder() = default;
  ~GraphBuilder();
  GraphBuilder(const GraphBuilder&) = delete;
  GraphBuilder& operator=(const GraphBuilder&) = delete;

  // Creates a fake-tensor mode and enters it until finish() or destruction. With
  // cdynamo.config.capture_scalar_outputs set (read here, once per trace) the mode gets a
  // ShapeEnv, so that Tensor.item() gives an unbacked SymInt/SymFloat/SymBool as in
  // torch._dynamo; shapes stay static (static_shapes=True) either way.
  // `fullgraph`: the compile asked for one graph; Tensor.item() is then captured whatever
  // the option says (torch._dynamo turns capture_scalar_outputs on under fullgraph=True:
  // a break would be an error there, and a symbolic scalar the graph can hold is not).
  bool begin(bool fullgraph = false);
  bool capturesScalars() const { return capture_scalars_; }
  // Leaves the fake mode (idempotent). Must run before calling a backend.
  void finish();

  // Dynamic shapes: which sizes of the inputs become symbols of a ShapeEnv (set before
  // begin()). The trace has a ShapeEnv when some may: dynamic=True, a recompile under
  // automatic dynamic, or marked inputs; then every input fake is made by
  // cdynamo/_internal/symbolic_shapes.py input_fake and a new symbol gets a placeholder of its own, before the
  // tensor's, as in torch._dynamo's graphs.
  void setDynamic(const DynamicConfig& c) { dyn_ = c; }
  bool symbolic() const { return symbolic_; }
  PyObject* shapeEnv() const { return shape_env_.get(); }
  // Whether the graph needs torch's runtime asserts pass (cdynamo._internal.symbolic_shapes.insert_runtime_asserts):
  // a node binds unbacked symbols (Tensor.item(), nonzero()) or the ShapeEnv deferred an
  // assert (torch._check of a value read from a tensor, an op assuming a relation between
  // unbacked sizes). 1 yes, 0 no, -1 with an error set.
  int runtimeAssertsNeeded();

  // A graph input for real tensor `real` read from `source` (the guard source's name);
  // returns the node id or -1.
  int addInput(PyObject* real, const std::string& name, const std::string& source = std::string());
  // A tensor the graph module holds as its attribute `name` (a get_attr node, as
  // torch._dynamo installs a static tensor whose identity is guarded) instead of an input;
  // its fake always has static sizes. Returns the node id or -1.
  int addAttribute(PyObject* real, const std::string& name);
  // The symbolic dims of input node `id` (bit i: dim i).
  uint64_t dynamicMask(int id) const { return nodes_[id].dyn_mask; }
  // Whether placeholder `id` is a symbol's: then it is size *dim of tensor placeholder *tensor.
  bool symInputOf(int id, int* tensor, int* dim) const {
    if (nodes_[id].sym_of < 0) return false;
    *tensor = nodes_[id].sym_of;
    *dim = nodes_[id].sym_dim;
    return true;
  }
  // Automatic dynamic for an int argument `value` read from `source` (cdynamo/_internal/symbolic_shapes.py
  // int_input): its placeholder node, whose fake is a SymInt, when it becomes symbolic;
  // kNoTensorResult when it stays a constant (its value is recorded for the next compile
  // to compare); -1 with an error set.
  int addIntInput(PyObject* value, const std::string& name, const std::string& source);
  // The sources of the int arguments made symbolic in this trace.
  const std::vector<std::string>& symbolicIntSources() const { return int_sources_; }
  bool isIntInput(int id) const { return nodes_[id].int_input; }
  // The placeholder of `symint` when it is exactly one input symbol, else -1 (no error).
  int symbolNode(PyObject* symint);
  // Where calls are made: the source gives the location id of the instruction being traced
  // when a call is recorded; buildGraphModule turns it into the node's meta["stack_trace"]
  // (the user's frames, innermost last, as torch._dynamo records it: print_readable shows
  // it, and separates the nodes of different lines).
  void setLocationSource(std::function<int()> source) { location_source_ = std::move(source); }
  // The id of bytecode offset `addr` (in bytes) of `code`, called from location `parent` (-1: the root).
  int internLocation(int parent, PyObject* code, int addr);

  // A call; runs it on fake values to get the result's metadata. Returns the node id,
  // -1 with an error set, or kNoTensorResult when the result holds no tensor (a metadata
  // query such as x.size() or x.dim()): then no node is recorded and the plain result is
  // stored in *plain_result. A symbolic scalar result (Tensor.item() under
  // capture_scalar_outputs, and arithmetic on it) is a node: see isScalar. A call that
  // makes the fake mode's ShapeEnv defer a runtime assert (torch._check on such a
  // scalar, or an op assuming one is a valid size) fails: those asserts are not put in
  // the graph yet, and dropping them could hide an error eager execution raises.
  // `keep`: recorded and kept whatever it returns (a function the program allows in the
  // graph: what it does when the graph runs is the point, as with a mutation).
  // `known_fake`: the result's fake as the caller already knows it (a higher-order op whose
  // result is its body's, speculated just before): neither the memo nor a run on fakes.
  static constexpr int kNoTensorResult = -2;
  int addCall(NodeOp op, PyObject* target, std::vector<Arg> args,
              std::vector<std::pair<Ref, Arg>> kwargs, Ref* plain_result, bool keep = false,
              PyObject* known_fake = nullptr);

  // Node `id` stands for a value eager picks among its arguments by their values: the
  // result of max(a, b) over tensors is a or b itself, computed here as a new tensor (for
  // the uses of its value), with `index` (a 0-d integer node) saying which candidate won.
  // Where the object itself matters, the trace asks choiceOf: the output plans rebuild it
  // as candidates[index] from the graph's outputs (returned, stored, alive at a graph
  // break), identity tests against it break the graph unless every candidate answers
  // alike, and an in-place op on it, on a candidate or on a view of either fails here
  // (addCall, NotImplementedError: the graph breaks before it), since eager changes the
  // winner itself and the graph's copy would go stale.
  struct Choice {
    std::vector<int> candidates;
    int index;
  };
  void markChoice(int id, std::vector<int> candidates, int index);
  // Node `id` is the trace's own bookkeeping (a choice's index), not the program's: unlike
  // the program's calls it is dropped from the graph when nothing uses it.
  void markBookkeeping(int id) { bookkeeping_.insert(id); }
  // Drops the nodes of `ids` that end the graph (nothing but inputs after them): at a graph
  // break the entry sets the state they set itself, so they change nothing there.
  void dropTrailing(const std::unordered_set<int>& ids) {
    for (int i = numNodes() - 1; i >= 0; --i) {
      Node& n = nodes_[static_cast<size_t>(i)];
      if (n.op == NodeOp::Placeholder || n.op == NodeOp::GetAttr) continue;
      if (!ids.count(i)) return;
      n.impure = false;
      bookkeeping_.insert(i);
    }
  }
  // Whether some node is kept for its effect and every such node is one of `ids`.
  bool onlyEffectsOf(const std::unordered_set<int>& ids) const {
    bool any = false;
    for (int i = 0; i < numNodes(); ++i) {
      if (!nodes_[i].impure) continue;
      if (!ids.count(i)) return false;
      any = true;
    }
    return any;
  }
  // The choice node `id` stands for: by node, or by fake (an op that returned its receiver,
  // m.float() of a float m, is the same object); null when none.
  const Choice* choiceOf(int id) const;

  // A call kept for its effect on global state (grad mode, autocast): always recorded,
  // never removed as dead, whatever it returns. Returns the node id or -1. `located`
  // false: the node has no meta["stack_trace"], as torch._dynamo's context managers make
  // theirs (print_readable groups such nodes apart from the program's lines).
  int addEffect(PyObject* target, std::vector<Arg> args, bool located = true,
                std::vector<std::pair<Ref, Arg>> kwargs = {});

  // The program stored node `id`'s tensor into local `name`. The first such store names the
  // node (as torch._dynamo renames a tensor's node on its first STORE_FAST, and on a store
  // into a cell of the root frame): buildGraphModule gives it the name FX makes of `name`
  // at that point of the trace. Inputs keep their source's name, and a symbolic number's
  // node is not renamed (torch._dynamo renames tensors only).
  void nameHint(int id, const std::string& name);

  // ---- subgraphs (Note [Subgraph speculation] in trace/engine/speculation.cpp) ----
  // A get_attr node of GraphModule `gm`, held by the graph module as its submodule `name`
  // (made unique with _0, _1, ... per base name, as torch._dynamo's install_subgraph does);
  // its fake is `gm` itself, so a higher-order op run on fakes runs the body. The node id or -1.
  int addSubmodule(PyObject* gm, const std::string& base);
  // Another get_attr node of the submodule node `of` installed (a body two calls share): named
  // `base`_k as a new one would be, reading `of`'s attribute.
  int addSubmoduleAlias(int of, const std::string& base);
  // Takes the nodes recorded from `first` on that compute something (calls, and the get_attr
  // nodes of nested subgraphs) out of this graph: they become the body of a subgraph and are
  // listed in *body. Placeholders and tensor attributes made meanwhile (a tensor the body read
  // from the program) stay: the body receives them as inputs.
  void moveToSubgraph(int first, std::vector<int>* body);
  // The nodes of this graph that `body` (or `outputs`) reads, in order of first use, leaving
  // out those in `skip`; false with an error set when one of them is part of another body.
  bool bodyInputs(const std::vector<int>& body, const std::vector<int>& outputs, const std::vector<int>& skip,
                  std::vector<int>* out) const;
  // The GraphModule of `body` (moveToSubgraph), its placeholders `inputs` (named `names`) and
  // its output `outputs` as a tuple, a list, or (one output) the value itself, as the op that
  // calls it expects (torch._dynamo's forms: while_loop's cond_fn returns the tensor, scan's
  // combine_fn a list). Null with an error set.
  // Split: two tuples, the first `split` outputs then the rest (autograd_function_apply's
  // forward: its results, then what it saves for the backward). An output of -1 is None (a
  // backward's gradient for an input that gets none).
  enum class OutputForm { Tuple, List, Single, Split };
  Ref buildSubgraph(const std::vector<int>& body, const std::vector<int>& inputs,
                    const std::vector<std::string>& names, const std::vector<int>& outputs,
                    OutputForm form = OutputForm::Tuple, size_t split = 0);

  const Node& node(int id) const { return nodes_[id]; }
  // Whether node `id`'s fake result is a symbolic scalar (torch.SymInt, SymFloat or
  // SymBool): a Python number read from a tensor, known only when the graph runs.
  bool isScalar(int id) const;
  PyObject* fake(int id) const { return nodes_[id].fake.get(); }
  int numNodes() const { return static_cast<int>(nodes_.size()); }
  // Whether a node from index `first` on mutates something (kept for its effect).
  bool anyImpureFrom(int first) const {
    for (int i = first; i < numNodes(); ++i)
      if (nodes_[i].impure) return true;
    return false;
  }

  // Calls backend(gm, example_inputs). When the graph may hold symbolic scalars, the call
  // runs inside a torch._guards.TracingContext of this trace's fake mode, as torch._dynamo
  // calls backends: AOT autograd (aot_eager, inductor) then re-traces with the same
  // ShapeEnv instead of a fresh fake mode that cannot run Tensor.item(). New reference,
  // or null with the backend's error set.
  Ref callBackend(PyObject* backend, PyObject* gm, PyObject* example_inputs);

  // Builds the GraphModule returning the tuple of `outputs`, with dead nodes dropped.
  // `inputs_used` receives the placeholder node ids kept, in graph-input order.
  // Returns null with an error set on failure.
  Ref buildGraphModule(const std::vector<int>& outputs, std::vector<int>* inputs_used,
                       int* op_count);

 private:
  Ref materialize(const Arg& a, bool fx, const std::vector<Ref>* fx_nodes);

  // addCall's steps (graph_builder.cpp); an int result is 0, or -1 with an error set.
  // Fails (NotImplementedError) on an in-place op changing what a min()/max() over
  // tensors may have returned (markChoice): a choice, one of its candidates or a view.
  int rejectChoiceMutation(NodeOp op, PyObject* target, const Node& n);
  // The memo's entry for `key`, if one fits: its result made in n->fake (with the node's
  // signature where known), or under config.memo_check moved to *memo_result, to be
  // checked against running the op. A result the memo fails to make leaves n->fake null.
  int fromMemo(PyObject* key, const std::vector<bool>& in_rg, Node* n, Ref* memo_result);
  // The call run on fake values (torch's Python dispatcher on with `python_dispatch`): its
  // result, or null with an error set.
  Ref runOnFakes(NodeOp op, PyObject* target, const Node& n, bool python_dispatch);
  // Fails (NotImplementedError) on a result that is a view of a min()/max() choice.
  int rejectChoiceView(const Node& n);
  // Under a ShapeEnv: the new unbacked symbols n's result binds, in n->unbacked_bindings.
  int bindUnbacked(Node* n);
  // Stores the result of running the op in the memo under `key`, and under the key its
  // arguments have after the op taught the ShapeEnv replacements, if that one differs.
  void rememberResult(NodeOp op, PyObject* target, PyObject* key, const Node& n,
                      const std::vector<long long>& versions_before, std::vector<bool> in_rg);

  // buildGraphModule's steps (graph_module.cpp); false with an error set on failure.
  // Which nodes the graph keeps (*live, one flag per node), by torch._dynamo's liveness.
  bool liveNodes(const std::vector<int>& outputs, const TorchRefs* t, std::vector<char>* live);
  // Counts a use of every node binding a symbol a deferred runtime assert is about.
  bool keepAssertedReads(std::vector<int>* uses);
  // The FX node's meta: example_value, unbacked_bindings, tensor_dict, stack_trace.
  bool setNodeMeta(PyObject* fxn, const Node& n);
  std::unordered_map<int, Choice> choices_;  // see markChoice
  std::vector<const void*> choice_storages_;  // the storages of choices and their candidates
  std::vector<int> choice_results_;           // the choice nodes themselves
  std::unordered_set<int> bookkeeping_;       // see markBookkeeping

  // Output-metadata memo (a shortcut past fake propagation): for a known-functional
  // op whose tensor inputs carry the same metadata (dtype, device, sizes, strides,
  // requires_grad) and whose constants are equal, the result is made directly from the
  // remembered output metadata instead of dispatching through FakeTensorMode again.
  // Remembered results: one fresh tensor, or a tuple of fresh tensors and Nones (see
  // torchimpl::freshResult); a fresh tensor may also be a view of a base that only it
  // reaches (made again as such a view). A result that requires grad is made with the history of an op
  // on the same inputs (an autograd Error node: requires_grad, not a leaf, as the op's own
  // result). Cleared by every effect (grad mode, autocast). Under a ShapeEnv sizes in keys are
  // their sympy expressions (memo.cpp symTuple) and a result that binds unbacked symbols is not
  // remembered.
  struct FakeSpec {
    bool none = false;       // a None in a tuple result
    Ref shape, stride, dtype, device;
    std::string device_str;  // str(device), for the autograd node of a result requiring grad
    Ref dict;                // the FakeTensor attributes (__dict__) of the op's own result
    bool requires_grad = false;
    // A view of a fresh base that the op made and did not return (e.g. `t.view(...)` of an
    // intermediate): the fields above describe the base, the result is base.as_strided(...).
    bool view = false;
    Ref view_size, view_stride, view_offset;
    Ref like;  // under a ShapeEnv: the op's own result (or base), whose layout the copy takes
  };
  // Which tensor arguments require grad is not part of a key: an entry holds the pattern
  // it was made with (in_rg, one flag per tensor argument in key order) and serves another
  // where autograd's rule gives the same result (memoFits): an output requiring grad keeps
  // requiring it when more inputs do, one that does not keeps not when fewer do. The first
  // layer of a model (its input not requiring grad, the parameters requiring it) and the
  // next ones (both requiring it) share entries so. Entries of one key are chained (next).
  enum class OutGrad { AllTrue, AllFalse, Mixed };
  struct MemoEntry {
    bool tuple = false;
    std::vector<FakeSpec> outputs;
    // The result is positional argument `alias_arg` itself (dropout in eval mode, x.float()
    // of a float tensor): what running the op gave, and what the memo gives again.
    int alias_arg = -1;
    std::vector<bool> in_rg;
    OutGrad out_rg = OutGrad::Mixed;
    int next = -1;  // the next entry of the same key, or -1
    // The result is a view of positional argument 0 (a view method: view_methods), with
    // this layout (sizes and strides in the key's symbols; view_offset: its storage offset
    // less the receiver's, see relativeOffset in memo.cpp): made by as_strided.
    bool view_of_receiver = false;
    Ref view_size, view_stride, view_offset;
  };
  Ref memoKey(NodeOp op, PyObject* target, const std::vector<Arg>& args,
              const std::vector<std::pair<Ref, Arg>>& kwargs, std::vector<bool>* in_rg);
  bool argSig(const Arg& a, PyObject* out_list, std::vector<bool>* in_rg);
  PyObject* nodeSig(int id);
  Ref makeSig(PyObject* dtype, PyObject* device, PyObject* shape, PyObject* stride);
  static bool memoFits(const MemoEntry& entry, const std::vector<bool>& in_rg);
  void pushEntry(PyObject* key, MemoEntry entry);
  const MemoEntry* memoFind(PyObject* key, const std::vector<bool>& in_rg);
  int memoCheck();  // config.memo_check, read once per trace: 1 on, 0 off, -1 error
  int memo_check_ = -1;
  bool checkMemoResult(PyObject* memo_result, PyObject* real_result, PyObject* target);
  Ref memoMake(const MemoEntry& entry, const Node& n);
  // `versions_before`: the version counter of each positional tensor argument before the
  // op ran (-1 for other arguments); an op that returns an argument it changed in place is
  // not remembered.
  void memoStore(PyObject* key, PyObject* fake, const Node& n, const std::vector<long long>& versions_before,
                 std::vector<bool> in_rg);
  long long tensorVersion(PyObject* tensor) const;
  bool specOf(PyObject* fake, FakeSpec* spec);
  // A FakeTensor per `spec`: an op's result (with the history of an op on `grad_inputs` if
  // spec.requires_grad), or with `input`, the fake of a graph input: a leaf, requiring
  // grad per `input_requires_grad`, never an inference tensor.
  Ref makeFake(const FakeSpec& spec, const std::vector<PyObject*>& grad_inputs, bool input = false,
               bool input_requires_grad = false);
  bool templateDictOk(PyObject* dict, bool allow_param) const;
  Ref inputFake(PyObject* real, bool force_static = false);
  Ref inputFakeNow(PyObject* real, bool force_static);
  // A placeholder for `real` with static sizes (its fake from inputFake); the node id or -1.
  int addStaticPlaceholder(PyObject* real, const std::string& name);
  int addSymbolicInput(PyObject* real, const std::string& name, const std::string& source);  // dynamic_shapes.cpp
  void tensorInputs(const Arg& a, std::vector<PyObject*>* out) const;
  void forgetSigsOf(const Node& n);  // n changes its tensor arguments in place
  void argNodes(const Arg& a, std::vector<int>* out) const;

  // Input shortcut: a real tensor that is a plain leaf (torchimpl::plainLeaf) whose storage
  // no other graph input reaches gets a FakeTensor made directly, once
  // FakeTensorMode.from_tensor has converted one of the same kind (type, dtype, device,
  // requires_grad, dispatch keys) to that form in this trace. The converter does not know
  // the fakes made so; one is registered in its memos (registerWithConverter) before a
  // later conversion could reach the same storage, so aliasing between inputs comes out as
  // from_tensor alone makes it.
  Ref input_templates_;  // dict: kind -> FakeTensor __dict__ of the converted one
  std::unordered_map<PyObject*, std::pair<Ref, Ref>> input_fakes_;  // real -> (real, fake) made by the shortcut
  // Storages of the graph inputs so far: -> the real tensor whose shortcut fake owns it
  // and is not registered with the converter yet, or null (the converter knows it).
  std::unordered_map<const void*, PyObject*> input_storages_;
  std::vector<Ref> entry_fakes_;  // fakes of inputs as the graph receives them (callBackend)
  bool registerWithConverter(PyObject* real);
  bool beforeConversion(PyObject* real, std::vector<const void*>* related);
  void afterConversion(const std::vector<const void*>& related);
  bool allow_data_ptr_ = false;  // the mode's _allow_unsafe_data_ptr_access

  Ref mode_;
  Ref shape_env_;                      // set when capturing scalar outputs or when sizes may be symbolic
  DynamicConfig dyn_;
  Ref cache_was_enabled_;              // the mode's cache_enabled, turned off for a symbolic trace (begin)
  int dyn_log_ = -1;                   // the "dynamic" log channel is on (1), off (0), not read yet (-1)
  int force_param_static_ = -1;        // config.force_parameter_static_shapes (1/0), not read yet (-1)
  bool symbolic_ = false;              // input fakes are made with symbolic contexts (_shapes.input_fake)
  Ref symbol_nodes_;                   // dict: sympy symbol -> its placeholder node id
  std::vector<std::string> int_sources_;  // see symbolicIntSources
  bool has_unbacked_ = false;  // a node binds unbacked symbols (see runtimeAssertsNeeded)
  bool capture_scalars_ = false;
  Ref memo_;  // dict: memo key -> index in memo_entries_ of the key's newest entry
  std::vector<MemoEntry> memo_entries_;
  bool entered_ = false;
  // begin() set torch's saved-tensor-hooks tracing flag; finish() puts back its old value.
  bool hooks_tracing_set_ = false;
  bool hooks_tracing_was_ = false;
  std::vector<Node> nodes_;
  // The names of the graph inputs so far: a new one that would repeat one gets a suffix
  // _0, _1, ... (as torch._dynamo's get_unique_name_wrt), so forward's parameters differ.
  std::unordered_set<std::string> input_names_;
  struct Location {
    int parent;
    Ref code;
    int addr;
  };
  std::function<int()> location_source_;
  std::vector<Location> locations_;
  std::map<std::tuple<int, PyObject*, int>, int> location_ids_;
  // meta["stack_trace"] of location `loc` (cached in stack_traces_), or null with an error set.
  PyObject* stackTrace(int loc);
  std::vector<Ref> stack_traces_;
  std::string uniqueInputName(const std::string& name);
  std::map<std::string, int> submodule_counts_;  // addSubmodule: base name -> the next suffix
};

}  // namespace cdynamo::graph
