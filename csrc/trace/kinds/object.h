// User-defined classes and their instances (Kind::Object, Kind::NewObject), super(), and the special methods of user objects and nn.Modules (object.cpp).
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

// An object read from the program (Kind::Object) or made in the trace (Kind::NewObject).
inline bool isUserObject(const ValuePtr& v) { return v->is(Kind::Object) || v->is(Kind::NewObject); }
// A class made by collections.namedtuple (a tuple subclass with _fields).
bool isNamedTupleClass(PyObject* cls);
Result<ValuePtr> objectGetAttr(Tracer& t, const ValuePtr& obj, PyObject* name);
// An attribute of a namedtuple value (Tuple with a namedtuple class `cls`) that a class
// above tuple defines: a method bound to the tuple, a staticmethod, a classmethod bound to
// the class, a property's getter run on it, a constant. NotHandled when only tuple has it.
Result<ValuePtr> namedTupleClassAttr(Tracer& t, const ValuePtr& self, PyObject* cls, PyObject* name);
// A special method (`name`: __add__, __eq__, ...) that a namedtuple value's class defines as
// a Python function above tuple, inlined with the tuple first; NotHandled when the class
// leaves it to tuple's C slot.
Result<ValuePtr> namedTupleDunder(Tracer& t, const ValuePtr& self, PyObject* name, std::vector<ValuePtr> args);
// The Python __new__ a class defines above its builtin base (unwrapped from its
// staticmethod), or null when its instances come from the base's __new__ or from the
// __new__ a namedtuple class is generated with.
PyObject* ownPythonNew(PyObject* cls);
// Guards what reading `name` of `self` (a value from the program) through its class
// assumed: not shadowed in its instance dict, the same object in the class that defines it,
// and absent from the classes before that one (a method replaced on the instance or a class).
void guardClassAttributeOf(Tracer& t, const ValuePtr& self, PyObject* name);
// hasattr() on a user object, an nn.Module, super() or a user class: getAttr with an
// AttributeError meaning false (guarded either way).
Result<bool> objectHasAttr(Tracer& t, const ValuePtr& obj, PyObject* name);
// When `r` is an AttributeError raised in the program: takes it out of flight, true.
bool takeAttributeError(Tracer& t, const Result<ValuePtr>& r);
// Whether hasattr()/getattr(o, n, default) are answered by objectHasAttr for this value.
bool probesByLookup(const ValuePtr& v);
// object.__getattribute__(self, name): the generic lookup, without the class's own
// __getattribute__ (and, as object's, without __getattr__).
Result<ValuePtr> genericGetAttr(Tracer& t, const ValuePtr& self, PyObject* name, PyObject* after, bool with_getattr);
Result<ValuePtr> newObject(Tracer& t, PyObject* cls, Args args, Kwargs kwargs);
// dict, OrderedDict, tuple or list when instances of `cls` are those (the builtin base whose
// items they carry), else null.
PyTypeObject* containerBase(PyObject* cls);
// The items of a dict, tuple or list subclass instance (a Dict, Tuple or List value), or null.
ValuePtr basePart(const ValuePtr& v);
// An instance of `cls` (a subclass of dict, tuple or list; containerBase) made in the trace
// with the items `part` (a value of its base's kind): a NewObject, or for a namedtuple class
// the Tuple value itself, marked as that class.
Result<ValuePtr> newContainerSubclassInstance(Tracer& t, PyObject* cls, ValuePtr part);
// A C method of dict/OrderedDict (a method or slot descriptor) called with a dict subclass
// instance first: the container operation on its items. NotHandled for anything else.
Result<ValuePtr> callBaseMethod(Tracer& t, PyObject* fn, Args& args, Kwargs& kwargs);
// An attribute a Python function from the program keeps in its __dict__ (fn.flag): read
// through the function's register and guarded, absence too (AttributeError raised).
// NotHandled for the function type's own attributes and for functions without a source.
Result<ValuePtr> guardedFunctionAttr(Tracer& t, const ValuePtr& fn, PyObject* name);
// object.__setattr__ on an object made in the trace (no own __setattr__).
Done genericSetAttr(Tracer& t, const ValuePtr& obj, PyObject* name, const ValuePtr& value);

// Guards class attribute `name` of `type` as resolved now (the same object in the class
// that defines it, absent from the classes before it).
void guardTypeAttribute(Tracer& t, PyObject* type, PyObject* name);

// Special methods, str/repr/format of user objects and nn.Modules, super().
// Calls the Python-level special method `name` (a str) of a user object's class;
// NotHandled (nothing done) when the class has none.
Result<ValuePtr> callDunder(Tracer& t, const ValuePtr& obj, PyObject* name, Args args);
// str(obj) / repr(obj) of a user object: its class's Python __str__ (or, where that is
// object's, __repr__) inlined; notHandled when neither is Python code.
Result<ValuePtr> userObjectStr(Tracer& t, const ValuePtr& obj, bool repr);
// An f-string piece {obj}, {obj!s}, {obj!r} (conversion 0, 1, 2) without a format spec, of
// a user object: as str()/repr(); notHandled for others (own __format__, !a).
Result<ValuePtr> userObjectFormat(Tracer& t, const ValuePtr& obj, int conversion);
// The same for an nn.Module: the Python special method `name` its class defines (its
// class attribute guarded), inlined; NotHandled when the class has none in Python.
Result<ValuePtr> callModuleDunder(Tracer& t, const ValuePtr& module, PyObject* name, Args args);
Result<ValuePtr> makeSuper(Tracer& t, Args& args);

}  // namespace cdynamo::trace
