// The builtins that make or step iterators: next(), enumerate(), zip(), reversed(), map() and
// filter() (rows of kBuiltinRows in builtins.cpp). Iterators over sources made item by item
// are lazy, as Python's are: each item is made when it is taken.
#include <algorithm>
#include <cstring>
#include <string>

#include "support/lookup.h"
#include "trace/engine/scalars.h"
#include "trace/kinds/iterator.h"
#include "trace/kinds/object.h"
#include "trace/protocol/builtins_internal.h"
#include "trace/protocol/callables.h"
#include "trace/protocol/calls.h"
#include "trace/protocol/constants.h"
#include "trace/protocol/operators.h"
#include "trace/tracer.h"

namespace cdynamo::trace {

using graph::NodeOp;
using guards::LoadKind;

namespace {

ValuePtr lazyIterator(Iterator::Made made, PyObject* type, ValuePtr fn, std::vector<ValuePtr> sources, long start);

// The iterators of `args[first:]` when one of them makes its items one at a time (a user
// iterator object, a lazy map): what zip/enumerate then take from lazily; else empty.
// A list, dict or set (or a view) counts as made item by item: the program may change it
// between the items taken (Iterator::Made::Sequence). `ahead` (zip(strict=True)): those
// are read now, as they are, instead.
Result<std::vector<ValuePtr>> lazySources(Tracer& t, Args& args, size_t first, size_t count, bool ahead = false) {
  bool any = false;
  // One iterator passed twice (zip(it, it), the pairwise idiom): each item taken comes
  // from it in turn, so its items cannot be read ahead once per argument.
  bool shared = false;
  for (size_t i = first; i < first + count && i < args.size(); ++i)
    for (size_t j = first; j < i; ++j)
      shared = shared || (args[i]->is(Kind::Iterator) && args[i].get() == args[j].get());
  if (shared && ahead) return t.fail("zip(strict=True) of one iterator passed twice is not supported yet");
  any = shared;
  for (size_t i = first; i < first + count && i < args.size(); ++i) {
    const Iterator* it = args[i]->get<Iterator>();
    if (ahead && it && it->made == Iterator::Made::Sequence) {
      if (Done d = drainUserIterator(t, args[i]); !d) return d.stop();
      continue;
    }
    bool user_object = isUserObject(args[i]);
    bool container = !ahead && (args[i]->is(Kind::List) || args[i]->is(Kind::Dict) || args[i]->is(Kind::Set) ||
                                args[i]->is(Kind::DictView));
    any = any || (it && it->lazy()) || user_object || container;
  }
  std::vector<ValuePtr> sources;
  if (!any) return sources;
  for (size_t i = first; i < first + count && i < args.size(); ++i) {
    Result<ValuePtr> it = getIter(t, args[i]);
    if (!it) return it.stop();
    sources.push_back(it.take());
  }
  bool lazy = shared;
  for (const ValuePtr& s : sources) lazy = lazy || s->as<Iterator>().lazy();
  if (!lazy) {  // a user object whose __iter__ gave a plain iterator: computed ahead as before
    args.erase(args.begin() + static_cast<std::ptrdiff_t>(first),
               args.begin() + static_cast<std::ptrdiff_t>(std::min(args.size(), first + count)));
    args.insert(args.begin() + static_cast<std::ptrdiff_t>(first), sources.begin(), sources.end());
    sources.clear();
  }
  return sources;
}




// map() / filter(): the function runs for every item now, which is right only when it changes nothing.
// An iterator whose items are made from its sources' as they are taken (value.h Iterator::Made).
ValuePtr lazyIterator(Iterator::Made made, PyObject* type, ValuePtr fn, std::vector<ValuePtr> sources, long start) {
  ValuePtr v = Value::iterator({}, type);
  Iterator& it = v->as<Iterator>();
  it.made = made;
  it.map_fn = std::move(fn);
  it.map_sources = std::move(sources);
  it.next_index = start;
  return v;
}

// Whether calling `fn` may run Python code (a function, a method, a partial, a callable
// object, a user class): what a lazy map must not run ahead of time. C functions and builtin
// types (int, str.upper, torch.relu) compute from their arguments only.
bool runsPythonCode(const ValuePtr& fn) {
  if (!fn->is(Kind::Callable)) return true;
  PyObject* f = fn->real();
  if (PyFunction_Check(f) || PyMethod_Check(f)) return true;
  return PyType_Check(f) && PyType_HasFeature(reinterpret_cast<PyTypeObject*>(f), Py_TPFLAGS_HEAPTYPE);
}


}  // namespace
// next(it[, default]).
Result<ValuePtr> builtinNext(Tracer& t, PyObject* f, const char* which, Args& args, Kwargs& kwargs) {
  auto is = [which](const char* n) { return strcmp(which, n) == 0; };
  if (!(is("next") && (args.size() == 1 || args.size() == 2))) return notHandled();
  const ValuePtr& it = args[0];
  const Iterator* iter = it->get<Iterator>();
  if (!iter)  // an opaque iterator read from the program (a generator, a map object) or a non-iterator
    return t.fail(std::string("next() of ") + (it->real() ? std::string("a ") + Py_TYPE(it->real())->tp_name + " object the trace cannot read ahead" : std::string("a non-iterator")));
  if (iter->lazy()) {  // a user iterator object (its __next__, inlined) or a lazy map
    ValuePtr item;
    if (Done d = stepUserIterator(t, it, &item); !d) return d.stop();
    if (item) return item;
    if (args.size() == 2) return args[1];
    return raiseStopIteration(t, it);
  }
  if (iter->pos < iter->items.size()) {
    ValuePtr item = iter->items[iter->pos];
    if (Done d = t.iterators().advance(it, iter->pos + 1, false); !d) return d.stop();
    return item;
  }
  if (Done d = t.iterators().advance(it, iter->pos, true); !d) return d.stop();
  if (args.size() == 2) return args[1];
  PyErr_SetNone(PyExc_StopIteration);
  return t.raisePython();
  
}

// enumerate(iterable[, start]): its items computed now, its source consumed as they are taken (iterators.h).
Result<ValuePtr> builtinEnumerate(Tracer& t, PyObject* f, const char* which, Args& args, Kwargs& kwargs) {
  auto is = [which](const char* n) { return strcmp(which, n) == 0; };
  if (!(is("enumerate") && !args.empty() && args.size() <= 2)) return notHandled();
  long start = 0;
  if (args.size() == 2) {
    if (!args[1]->is(Kind::Constant) || !PyLong_Check(args[1]->constant())) return t.fail("enumerate() start must be a constant int");
    start = PyLong_AsLong(args[1]->constant());
  }
  for (auto& [k, v] : kwargs) {
    if (PyUnicode_CompareWithASCIIString(k.get(), "start") != 0 || !v->is(Kind::Constant) || !PyLong_Check(v->constant()))
      return t.fail("enumerate() keyword");
    start = PyLong_AsLong(v->constant());
  }
  // Over an iterator made item by item (a user iterator object, a lazy map): lazy too,
  // each item taken from it when the pair is.
  Result<std::vector<ValuePtr>> lazy = lazySources(t, args, 0, 1);
  if (!lazy) return lazy.stop();
  if (!lazy->empty()) return lazyIterator(Iterator::Made::Enumerate, f, nullptr, lazy.take(), start);
  std::vector<ValuePtr> items;
  if (Done d = peekItems(t, args[0], &items); !d) return d.stop();  // an iterator is consumed as the result is
  std::vector<ValuePtr> pairs;
  for (size_t i = 0; i < items.size(); ++i) pairs.push_back(Value::tuple({constInt(start + static_cast<long>(i)), items[i]}));
  ValuePtr it = Value::iterator(std::move(pairs), PyType_Check(f) ? f : nullptr);
  if (args[0]->is(Kind::Iterator)) {
    std::vector<size_t> consumed(items.size());
    for (size_t k = 0; k < items.size(); ++k) consumed[k] = k + 1;
    t.iterators().link(it, {args[0]}, std::move(consumed), {items.size()}, {true});
  }
  return it;
  
}

// zip(*iterables[, strict]): items computed now, sources consumed in lockstep.
Result<ValuePtr> builtinZip(Tracer& t, PyObject* f, const char* which, Args& args, Kwargs& kwargs) {
  auto is = [which](const char* n) { return strcmp(which, n) == 0; };
  if (!(is("zip") && kwargs.size() <= 1)) return notHandled();
  bool strict = false;
  for (auto& [k, v] : kwargs) {
    if (PyUnicode_CompareWithASCIIString(k.get(), "strict") != 0 || !v->is(Kind::Constant)) return t.fail("zip() keyword");
    strict = PyObject_IsTrue(v->constant()) == 1;
  }
  Result<std::vector<ValuePtr>> lazy = lazySources(t, args, 0, args.size(), strict);
  if (!lazy) return lazy.stop();
  if (!lazy->empty()) {
    if (strict) return t.fail("zip(strict=True) over an iterator made item by item is not supported yet");
    return lazyIterator(Iterator::Made::Zip, f, nullptr, lazy.take(), 0);
  }
  std::vector<std::vector<ValuePtr>> seqs(args.size());
  size_t n = SIZE_MAX;
  for (size_t i = 0; i < args.size(); ++i) {
    if (Done d = peekItems(t, args[i], &seqs[i]); !d) return d.stop();  // iterators are consumed as the result is
    if (strict && n != SIZE_MAX && seqs[i].size() != n) return t.fail("zip(strict=True) of unequal lengths (ValueError)");
    n = std::min(n, seqs[i].size());
  }
  if (args.empty()) n = 0;
  std::vector<ValuePtr> rows;
  for (size_t k = 0; k < n; ++k) {
    std::vector<ValuePtr> row;
    for (auto& s : seqs) row.push_back(s[k]);
    rows.push_back(Value::tuple(std::move(row)));
  }
  ValuePtr it = Value::iterator(std::move(rows), PyType_Check(f) ? f : nullptr);
  t.iterators().linkLockstep(it, args, 0, seqs, n, strict);
  return it;
  
}

// reversed() of a sequence.
Result<ValuePtr> builtinReversed(Tracer& t, PyObject* f, const char* which, Args& args, Kwargs& kwargs) {
  auto is = [which](const char* n) { return strcmp(which, n) == 0; };
  if (!(is("reversed") && args.size() == 1)) return notHandled();
  std::vector<ValuePtr> items;
  if (args[0]->is(Kind::Iterator)) return t.fail("reversed() of an iterator (TypeError)");
  if (args[0]->is(Kind::Set) || (args[0]->constant() && PyAnySet_Check(args[0]->constant()))) {
    // A set or frozenset has no order to reverse (the trace walked it).
    PyObject* type = typeOf(t, args[0]);
    if (!type) return t.fail("the type of a set");
    return t.raiseNew(PyExc_TypeError, std::string("'") + reinterpret_cast<PyTypeObject*>(type)->tp_name +
                                           "' object is not reversible");
  }
  if (Done d = iterate(t, args[0], &items); !d) return d.stop();
  std::vector<ValuePtr> backwards(items.rbegin(), items.rend());
  // A list is read backwards from its length now, item by item as it is then.
  if (const List* l = args[0]->get<List>(); l && !l->deque)
    return sequenceIterator(args[0], std::move(backwards), iteratorTypeFor(t, f, args[0]), 0, true);
  // A dict (or a view of one) too, from its end: a change of its size raises when the next
  // item is taken, as Python's reverse dict iterators do.
  if (args[0]->is(Kind::Dict))
    return sequenceIterator(args[0], std::move(backwards), iteratorTypeFor(t, f, args[0]), DictView::Keys, true);
  if (const DictView* view = args[0]->get<DictView>())
    return sequenceIterator(view->dict, std::move(backwards), iteratorTypeFor(t, f, args[0]), view->which, true);
  return Value::iterator(std::move(backwards), iteratorTypeFor(t, f, args[0]));
  
}

Result<ValuePtr> builtinMapFilter(Tracer& t, PyObject* f, const char* which, Args& args, Kwargs& kwargs) {
  auto is = [which](const char* n) { return strcmp(which, n) == 0; };
  if (!((is("map") || is("filter")) && args.size() >= 2)) return notHandled();
  // map() takes keywords (strict=) from Python 3.14 only; filter() never does.
  if (!kwargs.empty() && PY_VERSION_HEX < 0x030E0000)
    return t.raiseNew(PyExc_TypeError, std::string(which) + "() takes no keyword arguments");
  if (is("filter") && args.size() != 2) return t.fail("filter() takes two arguments (TypeError)");
  // Over an iterator made item by item (itertools.count(), a user iterator object, a lazy
  // map), maybe without end: lazy too, each item taken from the source when it is asked for.
  Result<std::vector<ValuePtr>> lazy = lazySources(t, args, 1, args.size() - 1);
  if (!lazy) return lazy.stop();
  if (!lazy->empty()) {
    if (is("filter")) return lazyIterator(Iterator::Made::Filter, reinterpret_cast<PyObject*>(&PyFilter_Type), args[0], lazy.take(), 0);
    return lazyIterator(Iterator::Made::Map, reinterpret_cast<PyObject*>(&PyMap_Type), args[0], lazy.take(), 0);
  }
  if ((is("map") || is("filter")) && runsPythonCode(args[0])) {
    // Python's map and filter are lazy: fn runs for an item when the item is taken, and
    // may read (or change) what the program changed since (a list the loop over the map
    // appends to, a nonlocal it counts in). Their sources are iterated now, as map() does.
    std::vector<ValuePtr> sources;
    for (size_t i = 1; i < args.size(); ++i) {
      Result<ValuePtr> it = getIter(t, args[i]);
      if (!it) return it;
      sources.push_back(it.take());
    }
    if (is("filter"))
      return lazyIterator(Iterator::Made::Filter, reinterpret_cast<PyObject*>(&PyFilter_Type), args[0], std::move(sources), 0);
    return lazyIterator(Iterator::Made::Map, reinterpret_cast<PyObject*>(&PyMap_Type), args[0], std::move(sources), 0);
  }
  std::vector<std::vector<ValuePtr>> seqs(args.size() - 1);
  size_t n = SIZE_MAX;
  for (size_t i = 1; i < args.size(); ++i) {
    if (Done d = peekItems(t, args[i], &seqs[i - 1]); !d) return d.stop();  // iterators are consumed as the result is
    n = std::min(n, seqs[i - 1].size());
  }
  std::vector<size_t> kept;  // filter: the source index of each item kept
  // The function runs for every item now; the real map/filter run it as items are taken.
  const uint64_t mutations_before = t.effects().mutations();
  const int nodes_before = t.graph().numNodes();
  std::vector<ValuePtr> results;
  for (size_t k = 0; k < n; ++k) {
    std::vector<ValuePtr> row;
    for (auto& s : seqs) row.push_back(s[k]);
    if (is("map")) {
      Result<ValuePtr> r = call(t, args[0], std::move(row), {});
      if (!r) return r;
      results.push_back(r.take());
    } else {
      ValuePtr keep = row[0];
      Result<bool> truth = false;
      if (args[0]->isNone()) {
        truth = truthValue(t, keep);
      } else {
        Result<ValuePtr> r = call(t, args[0], std::move(row), {});
        if (!r) return r;
        truth = truthValue(t, *r);
      }
      if (!truth) return truth.stop();
      if (*truth) {
        results.push_back(keep);
        kept.push_back(k);
      }
    }
  }
  ValuePtr it = Value::iterator(std::move(results), PyType_Check(f) ? f : nullptr);
  if (t.effects().mutations() != mutations_before || t.graph().anyImpureFrom(nodes_before))
    return t.fail(std::string(is("map") ? "map()" : "filter()") +
                " with a function that changes state: it runs lazily, item by item, in Python "
                "(not modeled)");
  if (is("map")) {
    t.iterators().linkLockstep(it, args, 1, seqs, n, false);
  } else if (args[1]->is(Kind::Iterator)) {
    std::vector<size_t> consumed;
    for (size_t k : kept) consumed.push_back(k + 1);  // up to the item kept
    t.iterators().link(it, {args[1]}, std::move(consumed), {n}, {true});
  }
  return it;
  
}

}  // namespace cdynamo::trace
