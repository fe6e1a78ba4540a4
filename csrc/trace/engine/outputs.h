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
  // For the kinds' plans below: the trace, whether the plan is for a graph break's resume
  // function, and the Unsupported stop for a value that cannot be rebuilt (yet).
  Tracer& tracer() { return t_; }
  bool forResume() const { return for_resume_; }
  Stop unsupported(const ValuePtr& v);
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

  Tracer& t_;
  std::vector<int> graph_outputs_;
  // Value made in the trace -> memo slot (the map holds the value: a temporary's address
  // must not be reused while it is a key).
  std::unordered_map<const Value*, std::pair<int, ValuePtr>> memo_slot_;
  // An exception the trace made may be reached through several values (the handler's name,
  // sys.exc_info(), what with_traceback() returns): one object, so one value stands for it.
  std::unordered_map<PyObject*, ValuePtr> exception_values_;
  int memo_slots_ = 0;
  // The values being planned (a value reached again from inside itself cannot be built
  // from its parts), and the cells of a function's closure made empty and filled by the
  // function itself once it exists (a function that refers to itself).
  std::unordered_set<const Value*> in_progress_;
  std::unordered_set<const Value*> empty_cells_;
  bool for_resume_ = false;
};


// ---- the plan of each kind, defined in its kind family's file (planOne's cases) ------------
// Each makes `out` rebuild `v` after the graph runs, planning its parts through p.plan().

// A tuple or namedtuple made in the trace (a namedtuple with attributes made by tuple.__new__, then given its __dict__) (kinds/sequence.cpp).
Done rebuildTuple(OutputPlanner& p, const ValuePtr& v, runtime::OutputPlan* out);
// A list or deque made in the trace (kinds/sequence.cpp).
Done rebuildList(OutputPlanner& p, const ValuePtr& v, runtime::OutputPlan* out);
// A dict (OrderedDict, defaultdict) made in the trace, its items in order (kinds/dict.cpp).
Done rebuildDict(OutputPlanner& p, const ValuePtr& v, runtime::OutputPlan* out);
// A set made in the trace: a copy of its shadow's table when it was changed, else built from its items (kinds/set.cpp).
Done rebuildSet(OutputPlanner& p, const ValuePtr& v, runtime::OutputPlan* out);
// A module, callable, Python module or object: the object read from the program itself, or one made for real in the trace (kinds/object.cpp).
Done rebuildProgramObject(OutputPlanner& p, const ValuePtr& v, runtime::OutputPlan* out);
// An instance made in the trace: its class, its items (a container subclass) and its attributes (kinds/object.cpp).
Done rebuildNewObject(OutputPlanner& p, const ValuePtr& v, runtime::OutputPlan* out);
// A types.SimpleNamespace made in the trace: its attributes (kinds/namespace.cpp).
Done rebuildNamespace(OutputPlanner& p, const ValuePtr& v, runtime::OutputPlan* out);
// An iterator: over its container in the state it reached, over its sources (map/zip/enumerate), or over the items it has left (kinds/iterator.cpp).
Done rebuildIterator(OutputPlanner& p, const ValuePtr& v, runtime::OutputPlan* out);
// Types.MethodType(function, receiver) (kinds/function.cpp).
Done rebuildBoundMethod(OutputPlanner& p, const ValuePtr& v, runtime::OutputPlan* out);
// Getattr(receiver, name) (a context manager's __exit__ by its own plan) (kinds/function.cpp).
Done rebuildNamedMethod(OutputPlanner& p, const ValuePtr& v, runtime::OutputPlan* out);
// A dict view: type(d).keys(d) of the very dict rebuilt (kinds/dict.cpp).
Done rebuildDictView(OutputPlanner& p, const ValuePtr& v, runtime::OutputPlan* out);
// The graph's tensor made an ndarray again (sharing its memory) (kinds/ndarray.cpp).
Done rebuildNdArray(OutputPlanner& p, const ValuePtr& v, runtime::OutputPlan* out);
// A tensor subclass instance: the object read from the program, or the graph tensor viewed as an instance of its class (kinds/tensor_subclass.cpp).
Done rebuildSubclassTensor(OutputPlanner& p, const ValuePtr& v, runtime::OutputPlan* out);
// Functools.partial(fn, *args, **keywords); not a decorated function (a context) (kinds/function.cpp).
Done rebuildPartial(OutputPlanner& p, const ValuePtr& v, runtime::OutputPlan* out);
// An iterator over a list, dict or set (Iterator::Made::Sequence) rebuilt over the
// container itself in the state it reached (cdynamo._internal.frame_rebuild); false when it cannot be
// (a dict or set changed since, a set whose real walk may differ from the modelled one)
// (kinds/iterator.cpp).
Result<bool> planIteratorOverContainer(OutputPlanner& p, const ValuePtr& v, runtime::OutputPlan* out);

}  // namespace cdynamo::trace
