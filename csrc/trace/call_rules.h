// Callables the tracer treats by a rule the Python package keeps (cdynamo._rules): one
// dict {callable: rule number}, handed over once with setCallRules and edited in place by
// the package afterwards (cdynamo.allow_in_graph, ...), so a new callable needs no C++.
// The tracer asks callRuleOf for every plain callable it is about to call (trace time
// only) and, for a rule, lets applyCallRule do the call.
#pragma once
#include <Python.h>

#include <utility>
#include <vector>

#include "support/pyref.h"
#include "trace/engine/result.h"
#include "trace/values/value.h"

namespace cdynamo::trace {

class Tracer;

enum class CallRule : int {
  None = 0,
  GraphBreak = 1,      // torch._dynamo.graph_break(): the trace stops at the call (a graph break)
  InGraph = 2,         // allow_in_graph(fn): recorded as one call_function node, run on fakes
  ConstantResult = 3,  // assume_constant_result(fn): called at trace time on constant
                       // arguments, its result baked in as a constant (not guarded)
};

// `rules` is a dict (borrowed; kept) or None. Never fails.
void setCallRules(PyObject* rules);
// The rule for `fn`: its entry in the rules dict, else ConstantResult for a function
// marked by torch.compiler.assume_constant_result (its `_dynamo_marked_constant`
// attribute), else None. Never sets an error.
CallRule callRuleOf(PyObject* fn);
Result<ValuePtr> applyCallRule(Tracer& t, CallRule rule, PyObject* fn, std::vector<ValuePtr>& args,
                               std::vector<std::pair<Ref, ValuePtr>>& kwargs);

}  // namespace cdynamo::trace
