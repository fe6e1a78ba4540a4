// torch.fx's Python code generation (CodeGen._gen_python_code) for the graphs the graph
// builder makes, done in C++.
//
// GraphModule(root, graph) generates the forward's source with Graph.python_code, a
// per-node Python walk that was ~60% of building a 2000-node GraphModule. For a graph whose
// nodes, arguments and codegen settings are all of the kinds handled here, precompute()
// produces the same PythonCode (source text, globals, line map, prologue start) that
// CodeGen._gen_python_code would, and construct() builds the GraphModule with the graph's
// python_code answering with it for that one call (an instance attribute, removed
// afterwards): GraphModule.__init__/recompile run as always, and the graph is untouched
// after. Anything else (a constant of another type, a namedtuple, a type annotation, a
// non-default CodeGen, FX_GRAPH_SHOW_META, profiler metadata) leaves the generation to FX.
//
// CDYNAMO_CHECK_FX_CODEGEN=1 (read per graph) makes every precomputed PythonCode be
// compared with FX's own; a difference raises AssertionError (used by the tests).
#pragma once
#include <Python.h>

#include <vector>

#include "support/pyref.h"

namespace cdynamo::graph::fxcodegen {

// graph.python_code(root_module="self") for `graph`, whose nodes are `nodes` in graph order
// (the output node last); null without an error when this graph is left to FX, null with
// an error set on failure.
Ref precompute(PyObject* graph, const std::vector<PyObject*>& nodes);

// graph_module_cls(root, graph), with `code` (from precompute) as the graph's generated code.
Ref construct(PyObject* graph_module_cls, PyObject* root, PyObject* graph, PyObject* code);

}  // namespace cdynamo::graph::fxcodegen
