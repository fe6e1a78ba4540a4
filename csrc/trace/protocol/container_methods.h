// Calls of a container's methods (container_methods.cpp): the C method's signature checked as
// Python checks it, then the method of the container's kind family (kinds/sequence.h, dict.h, set.h).
#pragma once
#include <Python.h>

#include <initializer_list>
#include <string>
#include <utility>
#include <vector>

#include "bytecode/opcodes.h"
#include "support/lookup.h"
#include "trace/protocol/callables.h"
#include "trace/engine/result.h"
#include "trace/values/value.h"

namespace cdynamo::trace {

class Tracer;

// A program's call of a container's method: the arguments are checked against the C
// method's signature first (a call Python refuses raises its TypeError).
Result<ValuePtr> callContainerMethod(Tracer& t, const ValuePtr& self, PyObject* name, Args& args, Kwargs& kwargs);
// The interpreter's own use of a method as the implementation of an opcode or a special
// method (DELETE_SUBSCR and __delitem__ as pop(k), which deque.pop() does not take; SET_UPDATE
// as update): no signature check.
Result<ValuePtr> applyContainerMethod(Tracer& t, const ValuePtr& self, PyObject* name, Args& args, Kwargs& kwargs);
// The C type whose methods act on a container value (list, collections.deque, tuple, dict,
// OrderedDict, defaultdict, mappingproxy, set, frozenset; for a subclass instance's items,
// the first base that is not a class of the program), or null for other kinds.
PyTypeObject* containerCType(const ValuePtr& self);
// Raises the TypeError Python raises for a call of the container type `type` (dict,
// OrderedDict, defaultdict, ...) with more positional arguments than it takes: the type is
// called for real with None in their place (its argument check fails before any work).
Stop raiseConstructorArgumentError(Tracer& t, PyObject* type, size_t nargs, const Kwargs& kwargs);

// Calls C method `name` of `type` for real with placeholders for `args` and `kwargs`, on an
// empty instance, to raise the TypeError Python raises for arguments the method refuses
// (its argument parsing fails before it does anything); the caller knows they are refused.
Result<ValuePtr> raiseArgumentError(Tracer& t, PyTypeObject* type, PyObject* name, const Args& args,
                                    const Kwargs& kwargs);

// Calls method `name` of container `self` with one argument, for an opcode (no signature check).
Done containerCall(Tracer& t, const ValuePtr& self, Str name, const ValuePtr& arg);

}  // namespace cdynamo::trace
