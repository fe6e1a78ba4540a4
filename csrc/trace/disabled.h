// Which code objects cdynamo.disable marked, as the tracer sees them. The marks live in
// the code cache (csrc/cache: they share its per-code lifetime and survive reset()), a
// stage the trace stage does not link; the extension module installs the query at
// start-up (module.cpp), so the dependency stays pointing the way the data flows.
#pragma once
#include <Python.h>

namespace cdynamo::trace {

using DisabledCodeQuery = bool (*)(PyCodeObject* code);
void setDisabledCodeQuery(DisabledCodeQuery query);
// Whether `code` is marked (false while no query is installed). Never sets an error.
bool isDisabledCode(PyCodeObject* code);

}  // namespace cdynamo::trace
