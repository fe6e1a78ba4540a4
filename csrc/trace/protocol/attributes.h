// Reading, storing and deleting attributes: Python's attribute protocol over value kinds (attributes.cpp).
// Each operation reports through trace/engine/result.h: Unsupported (the trace stops, with
// its reason), Raised (an exception of the traced program is in flight) and, where said,
// NotHandled.
#pragma once
#include <Python.h>

#include <initializer_list>
#include <string>
#include <utility>
#include <vector>

#include "bytecode/opcodes.h"
#include "graph/graph_builder.h"
#include "trace/engine/result.h"
#include "trace/protocol/callables.h"
#include "trace/values/value.h"

namespace cdynamo::trace {

class Tracer;

Result<ValuePtr> getAttr(Tracer& t, const ValuePtr& obj, PyObject* name);
Done storeAttr(Tracer& t, const ValuePtr& obj, PyObject* name, const ValuePtr& value);
// delattr(obj, name) of an object made in the trace or read from the program: its class's
// own __delattr__ inlined, a property's deleter, or the attribute removed (from the
// object's __dict__ value when made in the trace; a recorded effect replayed after the
// graph when from the program, nn.Module's __delattr__ included). AttributeError if absent.
Done deleteAttr(Tracer& t, const ValuePtr& obj, PyObject* name);
// object.__delattr__(obj, name): the generic deletion, the class's own __delattr__ skipped.
Done genericDelAttr(Tracer& t, const ValuePtr& obj, PyObject* name);
// Attributes of a function made in the trace: its name, module, doc, and those set on it.
Result<ValuePtr> functionAttr(Tracer& t, const ValuePtr& fn, PyObject* name);

// ---- the attributes of each kind (getAttr's cases), in its kind family's file ----------------
// Attributes of a tensor: methods (called later as call_method), metadata as constants, tensor-valued attributes as getattr nodes. (tensor.cpp)
Result<ValuePtr> tensorAttr(Tracer& t, const ValuePtr& obj, PyObject* name);
// x.grad = value on a tensor the program passed in (kinds/tensor.cpp).
Done storeTensorGrad(Tracer& t, const ValuePtr& obj, const ValuePtr& value);
// An attribute of a Python module: a global stored in the trace, or the module's attribute, guarded through its __dict__ (torch's namespaces are taken as stable). (attributes.cpp)
Result<ValuePtr> pyModuleAttr(Tracer& t, const ValuePtr& obj, PyObject* name);
// An attribute of a constant or a real callable (a function, a class, a C callable): read for real, guarded through the function's __dict__ where it has one. (attributes.cpp)
Result<ValuePtr> realObjectAttr(Tracer& t, const ValuePtr& obj, PyObject* name);
// An attribute of a tuple value: a namedtuple's fields by position, its __dict__, its class's own methods and properties, else tuple's methods. (sequence.cpp)
Result<ValuePtr> tupleAttr(Tracer& t, const ValuePtr& obj, PyObject* name);
// An attribute of a list or deque value: its type's methods (called later), AttributeError for another type's. (sequence.cpp)
Result<ValuePtr> listAttr(Tracer& t, const ValuePtr& obj, PyObject* name);
// An attribute of a set value: its methods (called later), AttributeError for a frozenset's missing ones. (set.cpp)
Result<ValuePtr> setValueAttr(Tracer& t, const ValuePtr& obj, PyObject* name);
// An attribute of a dict value: a defaultdict's default_factory, its type's methods (called later), AttributeError for another type's. (dict.cpp)
Result<ValuePtr> dictAttr(Tracer& t, const ValuePtr& obj, PyObject* name);
// An attribute of an iterator value: __iter__/__next__ (a generator's send/close/throw too), called later. (iterator.cpp)
Result<ValuePtr> iteratorAttr(Tracer& t, const ValuePtr& obj, PyObject* name);
// An attribute of a container's or tensor's method: __self__, __name__, __qualname__ as its C method answers. (function.cpp)
Result<ValuePtr> namedMethodAttr(Tracer& t, const ValuePtr& obj, PyObject* name);
// An attribute of a Python function bound to a value: the method object's own, the rest read from the function. (function.cpp)
Result<ValuePtr> boundMethodAttr(Tracer& t, const ValuePtr& obj, PyObject* name);

}  // namespace cdynamo::trace
