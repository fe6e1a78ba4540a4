// Dicts made or read in the trace (Kind::Dict; dict.cpp): methods, keys, operators.
#pragma once
#include <Python.h>

#include <initializer_list>
#include <string>
#include <utility>
#include <vector>

#include "bytecode/opcodes.h"
#include "trace/protocol/callables.h"
#include "trace/engine/result.h"
#include "trace/values/value.h"

namespace cdynamo::trace {

class Tracer;

// The object that stands for `v` as a dict key (borrowed): a hashable constant, or a real
// object hashed by identity (a tensor or nn.Module from the program, a class, a function, a
// user object whose class keeps object's __hash__/__eq__), whose source is then guarded to be
// that object. Null, with no error set, when `v` cannot be a key the trace can hash.
PyObject* dictKeyOf(Tracer& t, const ValuePtr& v);
// Whether the real object `o` hashes and compares by identity, as a dict sees it: its type
// keeps object's __hash__ and __eq__ (type's, for a class), or it is a tensor
// (torch.Tensor.__hash__ is id(), and a dict compares identical keys before calling __eq__).
bool isIdentityKey(PyObject* o);
// The value of dict key `key` (the inverse of dictKeyOf; a key read from a program's dict is
// wrapped as the object itself, which its dict's key guard fixes).
Result<ValuePtr> keyValueOf(Tracer& t, PyObject* key);

// The methods of a dict value (get, keys, items, values, pop, popitem, setdefault, update,
// copy, clear, OrderedDict.move_to_end, ...) by name; NotHandled when it has none here.
Result<ValuePtr> dictMethod(Tracer& t, const ValuePtr& self, const char* n, Args& args, Kwargs& kwargs);
// a == b and a != b of two dict values whose classes keep dict's (or OrderedDict's)
// comparison, as dict_richcompare runs it: the sizes, then each key of `a` looked up in `b`
// and the values compared (identity, then the program's ==); two OrderedDicts also compare
// their key order, unless `unordered` (dict.__eq__ called on them). NotHandled for other
// operands and operators.
Result<ValuePtr> dictCompare(Tracer& t, int op, const ValuePtr& a, const ValuePtr& b, bool unordered = false);
// d.update(E, **F): a mapping, an iterable of pairs, then the keywords.
Result<ValuePtr> dictUpdate(Tracer& t, const ValuePtr& self, Args& args, Kwargs& kwargs);

}  // namespace cdynamo::trace
