// Subgraph speculation: a Python callable traced into a graph of its own, for the
// higher-order ops that take one (torch.cond's branches, checkpoint's function).
// Note [Subgraph speculation] in speculation.cpp says how it works.
#pragma once
#include <Python.h>

#include <functional>
#include <string>
#include <vector>

#include "graph/graph_builder.h"
#include "trace/engine/result.h"
#include "trace/protocol/callables.h"
#include "trace/values/value.h"

namespace cdynamo::trace {

class Tracer;

// One traced body. `body` and `outputs` are node ids of the frame's graph builder (the
// body's nodes are out of the frame's graph once speculated); `lifted` are the frame's
// values the body reads beyond its explicit inputs, in order of first use.
struct Subgraph {
  std::vector<int> body;
  std::vector<int> outputs;
  std::vector<int> lifted;
  ValuePtr result;  // what the callable returned: `outputs` are its tensors, in order
};

// Traces `fn(*args, **kwargs)` as the body of higher-order op `op` (its name for reasons).
// `inputs`: the nodes of the tensors the op passes the body explicitly (they are the
// subgraph's first placeholders). Unsupported, with a reason naming `op`, when the body
// cannot be one graph: a graph break or an unsupported operation in it, a side effect on
// state outside it, an in-place change of a tensor, a return value other than tensors.
Done speculate(Tracer& t, const std::string& op, const ValuePtr& fn, Args args, Kwargs kwargs,
               const std::vector<int>& inputs, Subgraph* out);

// The subgraph's GraphModule installed in the frame's graph (a get_attr node named
// `base`_0, _1, ...), its placeholders `inputs` then `lifted` (named from the frame's
// nodes, a lifted one with lifted_suffix(node) added). The get_attr's node id.
// `input_names`: the names of the `inputs` placeholders (null: named from the frame's nodes).
Result<int> installSubgraph(Tracer& t, const std::string& op, const Subgraph& g, const std::vector<int>& inputs,
                            const std::vector<int>& lifted, const std::string& base,
                            const std::function<std::string(int)>& lifted_suffix,
                            graph::GraphBuilder::OutputForm form = graph::GraphBuilder::OutputForm::Tuple,
                            const std::vector<std::string>* input_names = nullptr, size_t split = 0);
// The GraphModule installSubgraph installs, not installed yet (null with the failure recorded).
Ref buildBodyModule(Tracer& t, const std::string& op, const Subgraph& sg, const std::vector<int>& inputs,
                    const std::vector<int>& lifted, const std::function<std::string(int)>& lifted_suffix,
                    graph::GraphBuilder::OutputForm form, const std::vector<std::string>* input_names,
                    size_t split = 0);

// A body input that is not one of the frame's values but stands for each of its values in turn
// (a while_loop's carried value, a slice map and scan take of their inputs): a node made from
// `v` (a copy of it, or with `slice`, its item 0 along dim 0) that the frame's graph drops
// unless it reads it itself. Its fake has the metadata the body sees.
Result<ValuePtr> standIn(Tracer& t, const std::string& op, const ValuePtr& v, bool slice);

// The value shaped as `like` (a body's result) with its tensors replaced, in order, by `items`.
ValuePtr reshapeLike(const ValuePtr& like, const std::vector<ValuePtr>& items, size_t* next);

// The rows' handlers (special_callables.cpp lists them).
Result<ValuePtr> callCond(Tracer& t, PyObject* f, const char* name, Args& args, Kwargs& kwargs);
Result<ValuePtr> callCheckpoint(Tracer& t, PyObject* f, const char* name, Args& args, Kwargs& kwargs);
Result<ValuePtr> callWrap(Tracer& t, PyObject* f, const char* name, Args& args, Kwargs& kwargs);
Result<ValuePtr> callWhileLoop(Tracer& t, PyObject* f, const char* name, Args& args, Kwargs& kwargs);
Result<ValuePtr> callMap(Tracer& t, PyObject* f, const char* name, Args& args, Kwargs& kwargs);
// The first half of speculate(): calls fn(*args) with the body's checks (no change of state
// outside it, no in-place change of a tensor from outside it), its nodes left in the frame's
// graph from *first on, for an op that chooses its body's outputs itself (autograd.Function:
// its forward's results and what its backward reads). *result: what fn returned.
Done speculateCall(Tracer& t, const std::string& op, const ValuePtr& fn, Args args, Kwargs kwargs, int* first,
                   ValuePtr* result);

// t.register_hook(hook) (or register_post_accumulate_grad_hook, `method`) on a tensor value
// `self` (speculation.cpp says when it is captured).
Result<ValuePtr> tensorRegisterHook(Tracer& t, const ValuePtr& self, PyObject* method, Args& args, Kwargs& kwargs);
Result<ValuePtr> callScan(Tracer& t, PyObject* f, const char* name, Args& args, Kwargs& kwargs);
Result<ValuePtr> callInvokeSubgraph(Tracer& t, PyObject* f, const char* name, Args& args, Kwargs& kwargs);

}  // namespace cdynamo::trace
