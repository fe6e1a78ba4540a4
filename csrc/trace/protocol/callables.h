// The callables the tracer knows by identity: Python's builtins and the special callables
// (functools.partial, collections.deque/defaultdict/OrderedDict, operator.itemgetter/
// attrgetter, object.__init__/__setattr__, ...), as rows of one table built once per
// process. A row says how a call of that object is traced (its handler) and whether it may
// simply run for real when every argument is a constant (pure). Rows that apply to
// instances (a partial object, an itemgetter) are keyed by their type.
//
// Where to add a builtin or a special callable: a row in builtins.cpp (kBuiltinRows) or
// call_rules.cpp (kSpecialRows), and its handler next to it.
#pragma once
#include <Python.h>

#include <utility>
#include <vector>

#include "support/lookup.h"
#include "trace/engine/result.h"
#include "trace/values/value.h"

namespace cdynamo::trace {

class Tracer;

using Args = std::vector<ValuePtr>;
using Kwargs = std::vector<std::pair<Ref, ValuePtr>>;

// A traced call of `fn`; NotHandled when it does not take these arguments (the caller
// then reports "<name>() with these arguments is not supported yet").
using CallHandler = Result<ValuePtr> (*)(Tracer& t, PyObject* fn, const char* name, Args& args, Kwargs& kwargs);

struct CallableRow {
  const char* name;      // as the user spells it (builtins: the builtin's name)
  CallHandler handler;   // null: only run for real on constants
  bool pure;             // a pure function of its arguments: runs for real when they are all constants
  bool builtin = false;  // one of Python's builtins (set by the table): callBuiltin runs the row
};

// A row keyed by a builtin's name (looked up in the builtins module), an object of the
// lookup table, or the type of the instances it applies to.
struct BuiltinRow {
  const char* builtin;
  CallableRow row;
};
struct SpecialRow {
  Obj object;
  bool instances;  // the row applies to instances of `object` (a type), not to it
  CallableRow row;
};

// The row for `fn`, or null. Builds the table on first use.
const CallableRow* findCallable(PyObject* fn);

// The rows, defined next to their handlers.
const std::vector<BuiltinRow>& builtinRows();  // builtins.cpp
const std::vector<SpecialRow>& specialRows();  // call_rules.cpp

}  // namespace cdynamo::trace
