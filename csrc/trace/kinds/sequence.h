// Sequences made or read in the trace (sequence.cpp): lists, tuples and namedtuples, deques and
// torch.Size values; their methods, and the helpers the other container kinds share.
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

// Whether a value is a torch.Size: a symbolic x.shape (a Tuple of that class) or a constant one.
bool isSizeValue(const ValuePtr& v);
// A torch.Size value of `items` when all are ints (isIntValue), else null.
ValuePtr newSize(Tracer& t, std::vector<ValuePtr> items);

// The constant int argument `i` of a method call, if it is one (no error set either way).
inline bool constIntArg(const std::vector<ValuePtr>& args, size_t i, Py_ssize_t* out) {
  PyObject* c = i < args.size() ? args[i]->constant() : nullptr;
  if (!c || !PyLong_Check(c)) return false;
  *out = PyLong_AsSsize_t(c);
  return true;
}
// A new int (a new reference, null with an error set on failure).
inline PyObject* longOf(Py_ssize_t n) { return PyLong_FromSsize_t(n); }

// The methods of each sequence kind, called with the method's name `n` (applyContainerMethod
// checked the arguments against the C method's signature first). NotHandled when the kind
// has no such method here.
// namedtuple._replace(**fields) / _asdict() of a namedtuple value.
Result<ValuePtr> namedTupleMethod(Tracer& t, const ValuePtr& self, const char* n, Kwargs& kwargs);
// The methods only a deque has (appendleft, popleft, extendleft, rotate, ...), and the deque
// forms of the ones it shares with a list.
Result<ValuePtr> dequeMethod(Tracer& t, const ValuePtr& self, const char* n, Args& args);
// The methods of a list or tuple value (append, extend, insert, pop, remove, index, count,
// sort, reverse, copy, clear).
Result<ValuePtr> sequenceMethod(Tracer& t, const ValuePtr& self, const char* n, Args& args, Kwargs& kwargs);
// items.sort(**kwargs) of constants, with Python's own sort (the same order and errors).
Result<ValuePtr> sortConstants(Tracer& t, std::vector<ValuePtr>& items, Kwargs& kwargs);
// list.sort() of the list value `self` with a key function or items that are not all
// constants (their class's own __lt__ inlined).
Result<ValuePtr> sortValues(Tracer& t, const ValuePtr& self, Kwargs& kwargs);
// The positions of `keys` in the order a stable sort by `<` puts them (reverse: as
// list.sort(reverse=True) does, equal keys kept in order), comparing values the trace cannot
// compare for real by the operator protocol.
Done stableSortOrder(Tracer& t, const std::vector<ValuePtr>& keys, bool reverse, std::vector<size_t>* sorted);

// Whether a value is a namedtuple (a Tuple of a namedtuple class).
bool isNamedTupleValue(const ValuePtr& v);

}  // namespace cdynamo::trace
