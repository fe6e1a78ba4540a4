// A set's table, copied as it is.
//
// Python walks a set in its hash table's order, and pop() takes from where its last pop
// left off (a "finger"); both depend on the set's history: a removal leaves a dummy entry
// that later insertions skip, growth re-inserts everything. A copy by set(s), s.copy() or
// `t.clear(); t |= s` inserts the items again into a fresh table and forgets that history,
// so it can walk, or pop, in another order than the set it copies (fuzzer seeds 92000-
// 92002: a set changed in the trace, handed to a resume function or the caller as a fresh
// set of its items, then combined or popped natively). These copy the table entry by entry
// (dummies, fill, finger included): the copy behaves as the original would from there on.
// CPython 3.11's PySetObject layout (Include/cpython/setobject.h); exact sets only.
#pragma once
#include <Python.h>

#include "support/pyref.h"

namespace cdynamo {

// A new set whose table is a copy of `set`'s; TypeError unless `set` is an exact set.
Ref copySetTable(PyObject* set);
// Gives `target` (an exact set) a copy of `source`'s table (an exact set), as if it had
// lived source's history; its own items are released. -1 with an error set on failure.
int assignSetTable(PyObject* target, PyObject* source);
// A new tuple that is equal for two exact sets exactly when their tables are the same: size,
// fill, used, pop's finger, which slots hold dummies, and the key (compared with ==, and its
// type) in each other occupied slot, in slot order. What a guard compares for a set the
// trace walks, pops or changes: equal sets of other histories walk and pop differently.
// Null with an error set when `set` is not an exact set.
Ref setTableLayout(PyObject* set);
// A builtin function object: f(s) -> copySetTable(s) (a step of an output plan). Borrowed,
// made once; null with an error set if it cannot be made.
PyObject* setTableCopier();

}  // namespace cdynamo
