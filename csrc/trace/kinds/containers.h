// Lists, tuples, dicts and sets made in the trace (containers.cpp).
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
#include "trace/protocol/callables.h"
#include "trace/engine/result.h"
#include "trace/values/value.h"

namespace cdynamo::trace {

class Tracer;

// Equality of two values as Python would decide it (identity first), when it can be known
// at trace time: true with *eq set (0 or 1), false when it cannot be known.
bool sameValue(const ValuePtr& a, const ValuePtr& b, int* eq);
// Whether `v` may be compared (and, with `hashed`, hashed) as its real object without running
// Python code or depending on an unguarded identity: a constant, a class or function, a
// Python module, whose type's __eq__ (and __hash__) are not Python functions.
bool realComparable(const ValuePtr& v, bool hashed = false);
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
// Sets and frozensets made in the trace (their items constants, modules, tensors by
// identity, frozensets of those). The order a walk of set `s` meets its items in: Python's
// (from the items' hashes) when they are all real objects, else the order they were added.
std::vector<ValuePtr> setIterationOrder(const Set& s);
// The real set an operation of the program would read for the set value `v` made in the
// trace: its shadow (Set::shadow, the same table eager execution's set has, history and
// all), made on first need; borrowed; null when there is none (an item without a real
// object, a set from the program, not a Set).
PyObject* realSetOperand(const ValuePtr& v);
// A mutable set value for `real`, a set computed for real from `operands` (at least one a set
// made in the trace, read through realSetOperand): its items are the operands' values for the
// objects it holds, its shadow `real` itself. Null when it holds an object none stands for.
ValuePtr setFromReal(PyObject* real, std::initializer_list<ValuePtr> operands);
// frozenset(iterable): a constant when its items are constants, else a frozen Set.
Result<ValuePtr> makeFrozenSet(Tracer& t, const ValuePtr& iterable);
// a | b, a & b, a - b, a ^ b (and the in-place forms, which change a set itself) of two
// sets or frozensets; NotHandled when either is not one.
Result<ValuePtr> setBinaryOp(Tracer& t, bytecode::BinaryOp op, const ValuePtr& a, const ValuePtr& b);
// a <op> b (COMPARE_OP's order: <, <=, ==, !=, >, >=) of two sets or frozensets by their
// members; NotHandled when either is not one.
Result<ValuePtr> setCompare(Tracer& t, int op, const ValuePtr& a, const ValuePtr& b);
Done storeSubscript(Tracer& t, const ValuePtr& obj, const ValuePtr& index, const ValuePtr& value);
// del obj[index] of a list, deque (a slice of a list) or dict value, as DELETE_SUBSCR and
// __delitem__ do it: an index out of range raises the IndexError of the item deletion
// ("list assignment index out of range", "deque index out of range"), not pop's.
Done deleteItem(Tracer& t, const ValuePtr& obj, const ValuePtr& index);
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
// The real slice of a Slice of constants (Unsupported otherwise; null with an error set if
// making it failed).
Result<Ref> constantSlice(Tracer& t, const Slice& slice);

}  // namespace cdynamo::trace
