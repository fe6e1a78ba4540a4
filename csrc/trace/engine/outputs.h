// Output planning: how values of the trace become real objects again after the graph
// runs (runtime::OutputPlan) — the frame's result, the values effects store, a graph
// break's locals and stack. Owns the graph's outputs and the memo slots that keep a value
// made in the trace one object however often it is reachable.
#pragma once
#include <Python.h>

#include <unordered_map>
#include <unordered_set>
#include <utility>
#include <vector>

#include "runtime/compiled_entry.h"
#include "trace/engine/result.h"
#include "trace/values/value.h"

namespace cdynamo::trace {

class Tracer;

class OutputPlanner {
 public:
  explicit OutputPlanner(Tracer& t) : t_(t) {}

  // The plan that rebuilds `v` (Unsupported for a kind that cannot be returned yet).
  // Plans are made in the order the runtime builds them: memo slots are filled in order.
  Done plan(const ValuePtr& v, runtime::OutputPlan* out);
  Done planAll(const std::vector<ValuePtr>& values, std::vector<runtime::OutputPlan>* out);

  // The graph nodes the plans read, in graph-output order.
  const std::vector<int>& graphOutputs() const { return graph_outputs_; }
  int memoSlots() const { return memo_slots_; }
  // While set, iterators are planned as tuple_iterators (the one iterator a resume function
  // reads back, builder.cpp) instead of iterators of their own type: for a graph break's
  // locals and stack.
  void setForResume(bool on) { for_resume_ = on; }
  // Once the result and the effects are planned: the plans left for after the effects (an
  // iterator over a container the effects change, OutputPlan::after_effects) must sit where
  // the runtime can fill them in later (the result itself, or an item of a tuple or list
  // reached from it through tuples, lists and dict values only); the plans that read such
  // an iterator's memo slot are left for later too. *any: whether there is one.
  Done placeLatePlans(runtime::OutputPlan* output, std::vector<runtime::SideEffect>* effects, bool* any);

 private:
  Done planOne(const ValuePtr& v, runtime::OutputPlan* out);
  Done planFunction(const ValuePtr& fn, runtime::OutputPlan* out);
  // An iterator over a list, dict or set (Iterator::Made::Sequence) rebuilt over the
  // container itself in the state it reached (cdynamo._resume); false when it cannot be
  // (a dict or set changed since, a set whose real walk may differ from the modelled one).
  Result<bool> planOverContainer(const ValuePtr& v, runtime::OutputPlan* out);

  Tracer& t_;
  std::vector<int> graph_outputs_;
  // Value made in the trace -> memo slot (the map holds the value: a temporary's address
  // must not be reused while it is a key).
  std::unordered_map<const Value*, std::pair<int, ValuePtr>> memo_slot_;
  int memo_slots_ = 0;
  // The values being planned (a value reached again from inside itself cannot be built
  // from its parts), and the cells of a function's closure made empty and filled by the
  // function itself once it exists (a function that refers to itself).
  std::unordered_set<const Value*> in_progress_;
  std::unordered_set<const Value*> empty_cells_;
  bool for_resume_ = false;
};

}  // namespace cdynamo::trace
