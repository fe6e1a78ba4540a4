// Iterators whose items the trace computes ahead: the links between zip/enumerate/map/
// filter and the iterators they take from, and the iterators passed in.
//
// Derived iterators (zip/enumerate/map/filter over iterators) have their items computed
// when they are made, but the real objects are lazy: each item taken from the derived
// iterator takes its share from the sources, and only then (Link::consumed).
//
// Iterators passed in (tuple_iterators: what a resume function gets for a for loop cut by a
// break) are modeled over the items they had left; what the trace consumed of each is
// replayed on the real one (an Advance effect). Once the entry is complete each is guarded
// on what the trace took of it, not on everything it had left (guardInputs).
#pragma once
#include <Python.h>

#include <unordered_map>
#include <vector>

#include "runtime/compiled_entry.h"
#include "trace/engine/result.h"
#include "trace/protocol/operators.h"
#include "trace/values/value.h"

namespace cdynamo::trace {

class Tracer;

// The type of what `fn` (builtins iter or reversed) gives for a container value `v`
// (borrowed), read from the real iterator over an empty container of v's builtin type (a
// constant: over the constant itself); null when v's type is not a builtin container type.
PyObject* iteratorTypeFor(Tracer& t, PyObject* fn, const ValuePtr& v);
// The Python type of a DictView value (dict_keys, odict_values, ...; borrowed), or null.
PyObject* dictViewType(const ValuePtr& v);
// The next item of an Iterator whose items come from a user object's __next__ (inlined):
// *item is the item, or null at its end (the StopIteration it raised is taken).
Done stepUserIterator(Tracer& t, const ValuePtr& it, ValuePtr* item);
// Turns an Iterator over a user object's __next__ into one over the items it gives to
// its end (for the consumers that take every item at once: list(), zip(), sum(), ...).
// A lazy map is drained the same way, item by item.
Done drainUserIterator(Tracer& t, const ValuePtr& it);
// An iterator (Made::Sequence) over `container` (a List, Set or Dict; `which`: a dict's
// DictView::Which) read as it is when each item is taken; `items` are its items now (what
// a consumer that reads them all at once sees), `type` its Python type.
ValuePtr sequenceIterator(const ValuePtr& container, std::vector<ValuePtr> items, PyObject* type, int which,
                          bool reversed);
// Raises RuntimeError when `it` walks a deque that changed since iter() (List::state):
// CPython's deque iterator checks that before every item, even past its end.
Done dequeUnchanged(Tracer& t, const ValuePtr& it);
// Raises the StopIteration that ends iterator `it` (a generator's carries its return value).
Stop raiseStopIteration(Tracer& t, const ValuePtr& it);
// The next item of any Iterator value (taken: it advances), or null at its end.
Done nextItem(Tracer& t, const ValuePtr& it, ValuePtr* item);
// A generator made in the trace: one still lazy, or one whose items were all taken at
// once (list(gen): then known ahead, its frame finished).
bool isGeneratorValue(const ValuePtr& v);
// Calls `each` on every item `iterable` gives, in order, taking each only after the
// previous one was handled (list.extend(map(f, ...)) where f reads the list): iterators
// made lazily are stepped, others iterated.
template <class F>
Done forEachItem(Tracer& t, const ValuePtr& iterable, F&& each);

class Iterators {
 public:
  explicit Iterators(Tracer& t) : t_(t) {}

  // Moves iterator `it` to `pos` (`ended`: its end was observed), its sources with it; the
  // derived iterators not yet exhausted that take from `it` go stale.
  Done advance(const ValuePtr& it, size_t pos, bool ended);
  // Unsupported when `it` is a derived iterator gone stale (Link::stale).
  Done usable(const Value* it);
  // Whether `it` is a derived iterator gone stale (its items are no longer known).
  bool stale(const Value* it) const;

  // Registers `derived`, made from `sources` (Iterators, at their current pos): after item
  // k is taken every source gave consumed[k]; at the end, consumed_at_end (and whether each
  // source's own end was seen, ended_at_end).
  void link(const ValuePtr& derived, std::vector<ValuePtr> sources, std::vector<size_t> consumed,
            std::vector<size_t> consumed_at_end, std::vector<bool> ended_at_end);
  // The link of zip/map over args[first:] (items `seqs`, `n` results): one item of each per
  // result; at the end each argument is tried in order until one has none left (strict:
  // all are read to their end).
  void linkLockstep(const ValuePtr& derived, const std::vector<ValuePtr>& args, size_t first,
                    const std::vector<std::vector<ValuePtr>>& seqs, size_t n, bool strict);

  // An iterator passed in: `value` over the items it had left, read through `items_reg`
  // (the tuple of them) and `item_regs` (one per item). `obj` is the real iterator.
  // An iterator of a list, dict or set reads that container as it is when each item is
  // taken: modeled over the items it had left as long as the trace does not change the
  // container, it is pinned to the container's value (an Iterator::Made::Sequence over
  // it) once the trace is about to change it (containerChanging), or when the trace
  // changed it before reading the iterator.
  Done addInput(ValuePtr value, PyObject* obj, int items_reg, std::vector<int> item_regs);
  // Container `c`, read from the program, is about to change (SideEffects::noteContainerMutation):
  // every input iterator not yet ended over a container of its type is guarded to read `c`
  // or not, and the ones that read it are pinned to it.
  Done containerChanging(const ValuePtr& c);
  // The effects that move the inputs the trace consumed from as it did (appended to `out`):
  // Advance (next() so many times) before the program's effects, and `after` the index a
  // pinned list_iterator reached, set once its list has its final contents.
  void appendAdvances(std::vector<runtime::SideEffect>* out, bool after) const;
  // Once `entry` is complete: each input iterator guarded on what the trace took of it.
  void guardInputs(const runtime::CompiledEntry& entry);

 private:
  struct Link {
    ValuePtr derived;
    std::vector<ValuePtr> sources;
    std::vector<size_t> start;            // each source's pos when the derived one was made
    std::vector<size_t> consumed;         // consumed[k]: items every source gave once item k was taken
    std::vector<size_t> consumed_at_end;  // per source, once the derived one's end was observed
    std::vector<bool> ended_at_end;       // ... and whether that source's own end was
    // A source was consumed directly before the derived iterator was exhausted: its
    // precomputed items no longer are what the real one would give, so any later use of it
    // fails the trace (until then, e.g. a loop left with `break`, nothing is wrong).
    bool stale = false;
  };
  struct Input {
    ValuePtr value;
    int items_reg;               // the guard register of the tuple of items it had left
    std::vector<int> item_regs;  // one per item
    Ref obj;                     // the real iterator
    Ref container;               // the list, dict or set it reads (null: another kind, or exhausted)
    int container_reg = -1;      // its guard register, once the trace depends on which it is
    bool pinned = false;         // an Iterator::Made::Sequence over the container's value now
    size_t taken_at_pin = 0;     // items taken over the items it had left, before it was pinned
    size_t pos_at_pin = 0;       // its pos in the container when it was pinned
  };
  void syncSources(const Value* derived);
  Done relate(Input& in, const ValuePtr& c, PyObject* obj);
  Done pin(Input& in, const ValuePtr& c);
  // Items an input taken from the container since it was pinned (its Sequence pos, or the
  // drained items' start and pos).
  static size_t takenSincePin(const Input& in);
  // Whether the trace has changed container `c` (from the program) already.
  static bool inReplaced(Tracer& t, const ValuePtr& c);

  Tracer& t_;
  std::unordered_map<const Value*, Link> links_;
  std::vector<Input> inputs_;
};

Result<ValuePtr> getIter(Tracer& t, const ValuePtr& obj);
Done iterate(Tracer& t, const ValuePtr& v, std::vector<ValuePtr>* out);

template <class F>
Done forEachItem(Tracer& t, const ValuePtr& iterable, F&& each) {
  if (const Iterator* it = iterable->get<Iterator>(); it && it->lazy()) {
    while (true) {
      ValuePtr item;
      if (Done d = nextItem(t, iterable, &item); !d) return d;
      if (!item) return {};
      if (Done d = each(std::move(item)); !d) return d;
    }
  }
  std::vector<ValuePtr> items;
  if (Done d = iterate(t, iterable, &items); !d) return d;
  for (ValuePtr& item : items)
    if (Done d = each(std::move(item)); !d) return d;
  return {};
}

}  // namespace cdynamo::trace
