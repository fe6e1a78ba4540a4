// The helpers the files of the object kind family share (object.cpp, object_store.cpp,
// container_subclass.cpp, object_dunders.cpp): class lookups by the MRO and the guards
// they need. Not for other kinds.
#pragma once
#include <Python.h>

#include "trace/engine/result.h"
#include "trace/protocol/callables.h"
#include "trace/values/value.h"

namespace cdynamo::trace {

class Tracer;

// The class of a user object value (borrowed): a NewObject's class, or the type of the real object.
PyObject* classOf(const ValuePtr& v);

// Looks `name` up in the MRO of `type`, starting after `after` (super()) when given.
// Borrowed, or null.
PyObject* lookupInMro(PyObject* type, PyObject* name, PyObject* after);

// A class of the program whose instances object.__new__ makes, without metaclass magic.
bool isPlainPythonClass(PyObject* cls);

// A Python class whose instances object.__new__ makes: no builtin base below its Python
// classes (its own Python __new__ or not), not abstract.
bool madeByObjectNew(PyObject* cls);

// callBaseMethod for a special method the operator protocol calls (a + b, a == b): the
// C slot's NotImplemented where a direct call (list.__add__(p, {})) raises TypeError.
Result<ValuePtr> callBaseMethodAsOperator(Tracer& t, PyObject* fn, Args& args);

// object's own attribute `name` (object.__setattr__, object.__new__, ...): borrowed, or null.
PyObject* objectSlot(const char* name);

// The class attribute, guarded to stay this very object.
void guardClassAttr(Tracer& t, PyObject* type, PyObject* name, PyObject* after, PyObject* descr);

// The instance has no attribute `name` of its own, guarded (a class attribute read through
// it is not shadowed; an absent attribute stays absent).
void guardNotInInstance(Tracer& t, const ValuePtr& self, PyObject* name);

// setattr/delattr on an nn.Module stop the trace when the trace has read the module's
// __dict__ or its _parameters/_buffers/_modules dicts as values (they would go stale).
Done checkModuleStateNotRead(Tracer& t, const ValuePtr& module);

// Module instance attributes that nn.Module's __getattr__ finds: parameters, buffers,
// submodules. NotHandled when none has `name`.
Result<ValuePtr> moduleDictsAttr(Tracer& t, const ValuePtr& obj, PyObject* name);

// The Dict value the trace holds for the instance dict of `obj` (an Object from the
// program) when the program read it as a dict (obj.__dict__, vars(obj) before a break), or
// null. Attribute reads and stores of `obj` then go through that value, so a write through
// one view is seen through the other; on later calls the guard checks that the dict still
// is the object's __dict__.
ValuePtr aliasedInstanceDict(Tracer& t, const ValuePtr& obj);

}  // namespace cdynamo::trace
