// Iterator values (iterator.h): their types, stepping them, StopIteration, rebuilding them
// after the graph and their attributes.
#include "support/lookup.h"
#include "trace/engine/frame.h"
#include "trace/engine/outputs.h"
#include "trace/kinds/dict.h"
#include "trace/kinds/iterator.h"
#include "trace/kinds/object.h"
#include "trace/kinds/set.h"
#include "trace/protocol/attributes.h"
#include "trace/protocol/calls.h"
#include "trace/protocol/constants.h"
#include "trace/protocol/operators.h"
#include "trace/tracer.h"

#include <algorithm>
#include <array>
#include <cstring>
#include <string>
#include <unordered_set>


namespace cdynamo::trace {


namespace {

// The dict type whose views a DictView stands for: its dict's type when that is one of
// CPython's own (static) types, else dict (a subclass's views are dict's own).
PyObject* viewedDictType(const DictView& view) {
  PyObject* type = view.dict->as<Dict>().type.get();
  if (!type || !PyType_Check(type) || PyType_HasFeature(reinterpret_cast<PyTypeObject*>(type), Py_TPFLAGS_HEAPTYPE))
    return reinterpret_cast<PyObject*>(&PyDict_Type);
  return type;
}

// A real empty view of `view`'s kind (an empty dict of its type, viewed), or null (error cleared).
Ref emptyView(const DictView& view) {
  static const char* const kNames[] = {"keys", "values", "items"};
  Ref d = Ref::steal(PyObject_CallNoArgs(viewedDictType(view)));
  Ref r = d ? Ref::steal(PyObject_CallMethod(d.get(), kNames[view.which], nullptr)) : Ref();
  if (!r) PyErr_Clear();
  return r;
}

}  // namespace

PyObject* dictViewType(const ValuePtr& v) {
  const DictView& view = v->as<DictView>();
  static std::unordered_map<PyObject*, std::array<PyObject*, 3>> cache;  // static types, never freed
  PyObject* dict_type = viewedDictType(view);
  auto found = cache.find(dict_type);
  if (found == cache.end()) found = cache.emplace(dict_type, std::array<PyObject*, 3>{}).first;
  PyObject*& slot = found->second[view.which];
  if (!slot) {
    Ref r = emptyView(view);
    if (r) slot = reinterpret_cast<PyObject*>(Py_TYPE(r.get()));
  }
  return slot;
}

PyObject* iteratorTypeFor(Tracer& t, PyObject* fn, const ValuePtr& v) {
  if (!fn) {
    PyErr_Clear();
    return nullptr;
  }
  Ref example;
  if (PyObject* c = v->constant()) {
    example = Ref::borrow(c);
  } else if (const DictView* view = v->get<DictView>()) {
    static std::unordered_map<PyObject*, PyObject*> cache[2];  // view type -> [iter, reversed]
    PyObject* view_type = dictViewType(v);
    if (!view_type) return nullptr;
    auto& memo = cache[fn == reinterpret_cast<PyObject*>(&PyReversed_Type) ? 1 : 0];
    if (auto found = memo.find(view_type); found != memo.end()) return found->second;
    example = emptyView(*view);
    PyObject* it_type = nullptr;
    if (example) {
      Ref it = Ref::steal(PyObject_CallOneArg(fn, example.get()));
      if (it) it_type = reinterpret_cast<PyObject*>(Py_TYPE(it.get()));
    }
    PyErr_Clear();
    memo.emplace(view_type, it_type);
    return it_type;
  } else {
    PyObject* type = nullptr;
    if (const List* l = v->get<List>()) type = l->deque ? l->deque.get() : reinterpret_cast<PyObject*>(&PyList_Type);
    else if (v->is(Kind::Tuple)) type = reinterpret_cast<PyObject*>(&PyTuple_Type);
    else if (v->is(Kind::Set)) type = reinterpret_cast<PyObject*>(&PySet_Type);
    else if (const Dict* d = v->get<Dict>()) type = d->type.get();
    // Only CPython's own (static) types: making an empty one runs no user code.
    if (!type || !PyType_Check(type) ||
        PyType_HasFeature(reinterpret_cast<PyTypeObject*>(type), Py_TPFLAGS_HEAPTYPE))
      return nullptr;
    static std::unordered_map<PyObject*, PyObject*> cache[2];  // [iter, reversed]: static types, never freed
    auto& memo = cache[fn == reinterpret_cast<PyObject*>(&PyReversed_Type) ? 1 : 0];
    if (auto found = memo.find(type); found != memo.end()) return found->second;
    example = Ref::steal(PyObject_CallNoArgs(type));
    PyObject* it_type = nullptr;
    if (example) {
      Ref it = Ref::steal(PyObject_CallOneArg(fn, example.get()));
      if (it) it_type = reinterpret_cast<PyObject*>(Py_TYPE(it.get()));
    }
    PyErr_Clear();
    memo.emplace(type, it_type);
    return it_type;
  }
  Ref it = Ref::steal(PyObject_CallOneArg(fn, example.get()));
  if (!it) {
    PyErr_Clear();
    return nullptr;
  }
  (void)t;
  return reinterpret_cast<PyObject*>(Py_TYPE(it.get()));
}

namespace {

// The next item of a Sequence iterator, read from its container as it is now.
Done stepSequence(Tracer& t, const ValuePtr& it, ValuePtr* item) {
  Iterator& iter = it->as<Iterator>();
  const ValuePtr seq = iter.seq;
  auto end = [&]() -> Done {
    Iterator& now = it->as<Iterator>();
    now.ended = true;
    const List* q = now.seq ? now.seq->get<List>() : nullptr;
    if (q && q->deque) return {};  // a deque's keeps it: a change after its end still raises
    now.seq = nullptr;  // as Python's: an exhausted iterator lets its container go
    now.seq_keys.clear();
    now.seq_items.clear();
    return {};
  };
  if (!seq) return end();
  t.effects().noteIteratorMove();
  t.effects().noteChangeOf(it.get());
  if (const List* l = seq->get<List>()) {
    const size_t n = l->items.size();
    if (l->deque && l->state != iter.seq_state) {  // any change CPython's deque counts, even of the same size
      iter.ended = true;
      return t.raiseNew(PyExc_RuntimeError, "deque mutated during iteration");
    }
    if (iter.seq_reversed) {
      // reversed(list): an index from the end, valid while it is below the list's length.
      if (iter.pos >= iter.seq_len) return end();
      const size_t index = iter.seq_len - 1 - iter.pos;
      if (index >= n) return end();
      *item = l->items[index];
    } else {
      if (iter.pos >= n) return end();
      *item = l->items[iter.pos];
    }
    iter.pos += 1;
    return {};
  }
  if (const Set* set = seq->get<Set>()) {
    if (set->items.size() != iter.seq_len) {
      iter.seq_len = static_cast<size_t>(-1);  // stays broken, as Python's
      return t.raiseNew(PyExc_RuntimeError, "Set changed size during iteration");
    }
    if (set->items != iter.seq_items) return t.fail("a set changed (same size) while an iterator over it was in use");
    if (iter.pos >= iter.items.size()) return end();
    *item = iter.items[iter.pos];
    iter.pos += 1;
    return {};
  }
  const Dict* d = seq->get<Dict>();
  if (!d) return t.fail("an iterator over a container of an unknown kind");
  if (d->keys.size() != iter.seq_len) {
    iter.seq_len = static_cast<size_t>(-1);
    const bool ordered = d->type && PyType_Check(d->type.get()) &&
                         std::string(reinterpret_cast<PyTypeObject*>(d->type.get())->tp_name) == "collections.OrderedDict";
    return t.raiseNew(PyExc_RuntimeError, ordered ? "OrderedDict changed size during iteration"
                                                  : "dictionary changed size during iteration");
  }
  bool same_keys = true;
  for (size_t k = 0; k < d->keys.size() && same_keys; ++k) same_keys = d->keys[k].get() == iter.seq_keys[k].get();
  if (!same_keys) return t.fail("a dict's keys changed (same size) while an iterator over it was in use");
  if (iter.pos >= d->keys.size()) return end();
  const size_t k = iter.seq_reversed ? d->keys.size() - 1 - iter.pos : iter.pos;
  ValuePtr value = d->values[k];
  if (iter.seq_which == DictView::Values) {
    *item = std::move(value);
  } else {
    Result<ValuePtr> key = keyValueOf(t, d->keys[k].get());
    if (!key) return key.stop();
    *item = iter.seq_which == DictView::Keys ? key.take() : Value::tuple({key.take(), std::move(value)});
  }
  it->as<Iterator>().pos += 1;
  return {};
}

}  // namespace

ValuePtr sequenceIterator(const ValuePtr& container, std::vector<ValuePtr> items, PyObject* type, int which,
                          bool reversed) {
  ValuePtr it = Value::iterator(std::move(items), type);
  Iterator& iter = it->as<Iterator>();
  iter.made = Iterator::Made::Sequence;
  iter.seq = container;
  iter.seq_which = static_cast<uint8_t>(which);
  iter.seq_reversed = reversed;
  if (const List* l = container->get<List>()) {
    iter.seq_len = l->items.size();
    iter.seq_state = l->state;
  } else if (const Set* s = container->get<Set>()) {
    iter.seq_len = s->items.size();
    iter.seq_items = s->items;
  } else if (const Dict* d = container->get<Dict>()) {
    iter.seq_len = d->keys.size();
    for (const Ref& k : d->keys) iter.seq_keys.push_back(k.copy());
  }
  return it;
}

Stop raiseStopIteration(Tracer& t, const ValuePtr& it) {
  const Iterator& done = it->as<Iterator>();
  ValuePtr returned = done.gen ? done.gen->returned : nullptr;
  if (done.gen) done.gen->returned = nullptr;  // the first StopIteration carries it, later ones None
  if (returned && !returned->isNone()) {
    if (!returned->constant()) return t.fail("a generator's return value that is not a constant, carried by StopIteration");
    Ref exc = Ref::steal(PyObject_CallOneArg(PyExc_StopIteration, returned->constant()));
    if (!exc) return t.failFromPython("StopIteration(value)");
    PyErr_SetObject(PyExc_StopIteration, exc.get());
    return t.raisePython();
  }
  PyErr_SetNone(PyExc_StopIteration);
  return t.raisePython();
}

Done stepUserIterator(Tracer& t, const ValuePtr& it, ValuePtr* item) {
  Iterator& iter = it->as<Iterator>();
  item->reset();
  if (iter.ended && iter.made == Iterator::Made::Sequence && iter.seq)
    if (const List* q = iter.seq->get<List>(); q && q->deque && q->state != iter.seq_state)
      return stepSequence(t, it, item);  // raises again, as Python's
  if (iter.ended) return {};
  if (iter.made == Iterator::Made::Generator) return t.resumeGenerator(it, nullptr, item);
  if (iter.made == Iterator::Made::Sequence) return stepSequence(t, it, item);
  if (iter.made == Iterator::Made::Filter) {  // the source's items until one is kept
    const ValuePtr fn = iter.map_fn;
    const ValuePtr source = iter.map_sources.at(0);
    while (true) {
      ValuePtr x;
      if (Done d = nextItem(t, source, &x); !d) return d;
      if (!x) {
        it->as<Iterator>().ended = true;
        return {};
      }
      Result<bool> keep = false;
      if (fn->isNone()) {
        keep = truthValue(t, x);
      } else {
        Result<ValuePtr> r = call(t, fn, {x}, {});
        if (!r) return r.stop();
        keep = truthValue(t, *r);
      }
      if (!keep) return keep.stop();
      if (*keep) {
        *item = std::move(x);
        return {};
      }
    }
  }
  if (iter.made != Iterator::Made::Ahead) {  // map/zip/enumerate: the next item of every source in turn
    std::vector<ValuePtr> row;
    const std::vector<ValuePtr> sources = iter.map_sources;
    for (const ValuePtr& source : sources) {
      ValuePtr x;
      if (Done d = nextItem(t, source, &x); !d) return d;
      if (!x) {
        it->as<Iterator>().ended = true;
        return {};
      }
      row.push_back(std::move(x));
    }
    Iterator& now = it->as<Iterator>();
    if (sources.empty()) {
      now.ended = true;
      return {};
    }
    switch (now.made) {
      case Iterator::Made::Map: {
        ValuePtr fn = now.map_fn;
        Result<ValuePtr> r = call(t, fn, std::move(row), {});
        if (!r) return r.stop();
        *item = r.take();
        return {};
      }
      case Iterator::Made::Zip:
        *item = Value::tuple(std::move(row));
        return {};
      case Iterator::Made::Enumerate: {
        Ref count = Ref::steal(PyLong_FromLong(now.next_index++));
        if (!count) return t.failFromPython("enumerate's count");
        *item = Value::tuple({Value::constant(count.get()), row[0]});
        return {};
      }
      case Iterator::Made::Ahead:
      case Iterator::Made::Filter:
      case Iterator::Made::Generator:
      case Iterator::Made::Sequence:
        break;
    }
    return t.fail("an iterator made item by item of an unknown kind");
  }
  Result<ValuePtr> r = callDunder(t, iter.stepper, interned(Str::dunder_next), {});
  if (r.notHandled()) return t.fail("an iterator object without __next__ (TypeError)");
  if (r) {
    *item = r.take();
    return {};
  }
  if (r.outcome() != Outcome::Raised) return r.stop();
  PyObject* type = typeOf(t, t.pendingException());
  if (!type || !PyType_Check(type) ||
      !PyType_IsSubtype(reinterpret_cast<PyTypeObject*>(type), reinterpret_cast<PyTypeObject*>(PyExc_StopIteration)))
    return r.stop();
  (void)t.takePendingException();  // its end
  iter.ended = true;
  return {};
}

Done nextItem(Tracer& t, const ValuePtr& it, ValuePtr* item) {
  item->reset();
  Iterator* iter = it->get<Iterator>();
  if (!iter)  // an opaque iterator read from the program (a generator, a map object) or a non-iterator
    return t.fail(std::string("next() of ") + (it->real() ? std::string("a ") + Py_TYPE(it->real())->tp_name + " object the trace cannot read ahead" : std::string("a non-iterator")));
  if (iter->lazy()) return stepUserIterator(t, it, item);
  if (Done d = dequeUnchanged(t, it); !d) return d;
  if (iter->pos < iter->items.size()) {
    ValuePtr v = iter->items[iter->pos];
    if (Done d = t.iterators().advance(it, iter->pos + 1, false); !d) return d;
    *item = std::move(v);
    return {};
  }
  return t.iterators().advance(it, iter->pos, true);
}

Done drainUserIterator(Tracer& t, const ValuePtr& it) {
  Iterator& iter = it->as<Iterator>();
  if (!iter.lazy()) return {};
  constexpr size_t kMaxItems = 100000;  // an endless iterator is not unrolled
  const size_t pos_before = iter.pos;
  std::vector<ValuePtr> items;
  while (true) {
    ValuePtr item;
    if (Done d = stepUserIterator(t, it, &item); !d) return d;
    if (!item) break;
    items.push_back(std::move(item));
    if (items.size() > kMaxItems) return t.fail("an iterator object that gives more than 100000 items");
  }
  if (iter.made == Iterator::Made::Sequence) iter.seq_base = pos_before;
  iter.items = std::move(items);
  iter.pos = 0;
  iter.ended = false;  // its items are now known: it ends once they are taken
  iter.stepper = nullptr;
  iter.made = Iterator::Made::Ahead;
  iter.map_fn = nullptr;
  iter.map_sources.clear();
  const List* q = iter.seq ? iter.seq->get<List>() : nullptr;
  if (!q || !q->deque) iter.seq = nullptr;  // a deque's stays: its iterator checks its changes to the last (dequeUnchanged)
  iter.seq_keys.clear();
  iter.seq_items.clear();
  return {};
}

Done dequeUnchanged(Tracer& t, const ValuePtr& it) {
  const Iterator* iter = it->get<Iterator>();
  if (!iter || !iter->seq) return {};
  const List* q = iter->seq->get<List>();
  if (!q || !q->deque || q->state == iter->seq_state) return {};
  it->as<Iterator>().ended = true;
  return t.raiseNew(PyExc_RuntimeError, "deque mutated during iteration");
}

Result<bool> planIteratorOverContainer(OutputPlanner& p, const ValuePtr& v, runtime::OutputPlan* out) {
  namespace P = runtime::plan;
  const Iterator& it = v->as<Iterator>();
  const ValuePtr& c = it.seq;
  Obj helper = Obj::cdynamo_resume_container_iterator_at;
  Py_ssize_t state = static_cast<Py_ssize_t>(it.pos);
  int which = it.seq_which;
  // A container from the program that the trace changed gets its new contents from the
  // effects, which run after the result is built: an iterator made over it then would walk
  // the old contents and see them replaced (a dict or set "changed size", a deque "mutated
  // during iteration"; a list iterator's position is clamped to the old length when it is
  // set). It is built after the effects instead (placeLatePlans says where it can be).
  const bool after_effects = c->reg >= 0 && p.tracer().effects().replaces(c.get());
  bool deque_changed = false;
  if (const List* l = c->get<List>(); l && l->deque) {
    // A deque's iterator over the deque rebuilt, as many items taken; one the deque changed
    // under since iter() is made to raise as Python's (cdynamo._internal.frame_rebuild.deque_iterator_at).
    // A deque of maxlen 0 cannot be changed and given back its contents: not rebuilt.
    deque_changed = l->state != it.seq_state;
    if (it.seq_reversed) {  // reversed(d): over the deque rebuilt while it is unchanged
      if (deque_changed) return false;
      which = 0;
    } else {
      if (deque_changed && l->maxlen && PyLong_Check(l->maxlen.get()) && PyLong_AsSsize_t(l->maxlen.get()) == 0)
        return false;
      helper = Obj::cdynamo_resume_deque_iterator_at;
    }
  } else if (l) {
    if (it.seq_reversed) {  // the index of the next item, counted from the length it had at reversed()
      helper = Obj::cdynamo_resume_list_reverse_iterator_at;
      state = static_cast<Py_ssize_t>(it.seq_len) - 1 - static_cast<Py_ssize_t>(it.pos);
      if (state < -1) state = -1;
    } else {
      helper = Obj::cdynamo_resume_list_iterator_at;
    }
  } else if (const Dict* d = c->get<Dict>()) {
    // Taken that many items of the dict as it is: only while it has the keys it had at iter().
    if (d->keys.size() != it.seq_len || it.seq_keys.size() != d->keys.size()) return false;
    for (size_t k = 0; k < d->keys.size(); ++k)
      if (d->keys[k].get() != it.seq_keys[k].get()) return false;
  } else if (const Set* s = c->get<Set>()) {
    if (s->items.size() != it.seq_len || s->items != it.seq_items) return false;
    // The real set must be walked in the order the trace modelled: the set passed in, not
    // changed (a changed one returned false above), a copy of a changed set's shadow table,
    // or one rebuilt from constants whose new table walks them in that order.
    if (c->reg < 0 && !shadowOfConstants(*s)) {
      Ref fresh = Ref::steal(PySet_New(nullptr));
      if (!fresh) return p.tracer().failFromPython("a set");
      for (const ValuePtr& item : s->items)
        if (!item->constant() || PySet_Add(fresh.get(), item->constant()) < 0) {
          PyErr_Clear();
          return false;
        }
      Ref walk = Ref::steal(PySequence_List(fresh.get()));
      if (!walk) return p.tracer().failFromPython("a set");
      std::vector<ValuePtr> order = setIterationOrder(*s);
      if (static_cast<size_t>(PyList_GET_SIZE(walk.get())) != order.size()) return false;
      for (size_t k = 0; k < order.size(); ++k)
        if (order[k]->constant() != PyList_GET_ITEM(walk.get(), static_cast<Py_ssize_t>(k))) return false;
    }
    which = 0;
  } else {
    return false;
  }
  PyObject* fn = lookup(helper);
  if (!fn) return p.tracer().failFromPython("cdynamo._internal.frame_rebuild's iterator rebuilders");
  std::vector<runtime::OutputPlan> args(1);
  if (Done d = p.plan(c, &args[0]); !d) return d.stop();
  if (helper == Obj::cdynamo_resume_container_iterator_at) {
    Ref w = Ref::steal(PyLong_FromLong(which));
    if (!w) return p.tracer().failFromPython("an iterator's state");
    args.push_back(runtime::OutputPlan::constant(w.get()));
  }
  Ref n = Ref::steal(PyLong_FromSsize_t(state));
  if (!n) return p.tracer().failFromPython("an iterator's state");
  args.push_back(runtime::OutputPlan::constant(n.get()));
  if (helper == Obj::cdynamo_resume_container_iterator_at && it.seq_reversed)
    args.push_back(runtime::OutputPlan::constant(Py_True));
  if (helper == Obj::cdynamo_resume_deque_iterator_at)
    args.push_back(runtime::OutputPlan::constant(deque_changed ? Py_True : Py_False));
  out->step = P::Call{Ref::borrow(fn), std::move(args)};
  out->after_effects = after_effects;
  return true;
}

// The plan of an iterator: over its container in the state it reached, over its sources (map/zip/enumerate), or over the items it has left (OutputPlanner::plan).
Done rebuildIterator(OutputPlanner& p, const ValuePtr& v, runtime::OutputPlan* out) {
  namespace P = runtime::plan;
  // The same type of iterator over the items it has left (already computed):
  // cdynamo._internal.frame_rebuild.rebuild_iterator(type, items), or iter(items) when its type is not known.
  if (Done d = p.tracer().iterators().usable(v.get()); !d) return d;
  const Iterator& it = v->as<Iterator>();
  if (it.stepper) {
    // A polyfill's iterator object (cdynamo._internal.polyfills.itertools.count for itertools.count): a real
    // iterator of the original type in the same state, made by the class's rebuild().
    if (PyObject* rebuild = polyfillRebuild(it.type.get())) {
      std::vector<runtime::OutputPlan> args(1);
      if (Done d = p.plan(it.stepper, &args[0]); !d) return d;
      out->step = P::Call{Ref::borrow(rebuild), std::move(args)};
      return {};
    }
    if (PyErr_Occurred()) return p.tracer().failFromPython("a polyfill's rebuild");
    return p.plan(it.stepper, out);  // the user's iterator object is the iterator
  }
  if (it.made == Iterator::Made::Generator) {
    // A paused frame has no real counterpart to rebuild: the trace must not end with
    // one alive (returned, stored, or across a graph break) before it finished.
    if (!it.ended) return p.tracer().fail("a generator made in the trace is still running where the trace ends (returned, stored, or alive at a graph break): its paused frame cannot be rebuilt");
    // An ended generator is rebuilt as one (also for a resume function: its
    // throw/close/send stay there).
    std::vector<runtime::OutputPlan> args;
    args.push_back(runtime::OutputPlan::constant(it.type.get()));
    args.emplace_back();
    if (Done d = p.plan(Value::tuple({}), &args.back()); !d) return d;
    PyObject* rebuild = lookup(Obj::cdynamo_resume_rebuild_iterator);
    if (!rebuild) return p.tracer().failFromPython("cdynamo._internal.frame_rebuild.rebuild_iterator");
    out->step = P::Call{Ref::borrow(rebuild), std::move(args)};
    return {};
  }
  if (it.made == Iterator::Made::Sequence && it.seq) {
    // Rebuilt over its container itself, in the state it reached, so a change made to
    // the container after the break (or by the caller) is seen as eagerly: a list
    // iterator reads the item at its index then, a dict or set iterator raises once the
    // size changed. A copy of the items left would see none of it.
    Result<bool> over = planIteratorOverContainer(p, v, out);
    if (!over) return over.stop();
    if (*over) return {};
  }
  if (it.made == Iterator::Made::Sequence) {
    // What it has left, read from its container now: it leaves as an iterator over those.
    Done d = drainUserIterator(p.tracer(), v);
    if (!d && d.outcome() == Outcome::Raised) {
      (void)p.tracer().takePendingException();
      return p.tracer().fail("an iterator over a dict or set that changed size leaves the trace");
    }
    if (!d) return d;
  }
  if (it.made != Iterator::Made::Ahead) {  // map/zip/enumerate: what is left of it, still lazy
    // Rebuilt over its sources, it would take from them again once exhausted.
    if (it.ended) return p.tracer().fail("an exhausted map/zip/enumerate object cannot be rebuilt yet");
    std::vector<ValuePtr> parts;
    if (it.made == Iterator::Made::Map || it.made == Iterator::Made::Filter) parts.push_back(it.map_fn);
    parts.insert(parts.end(), it.map_sources.begin(), it.map_sources.end());
    std::vector<runtime::OutputPlan> args;
    if (Done d = p.planAll(parts, &args); !d) return d;
    PyObject* type = it.made == Iterator::Made::Map      ? reinterpret_cast<PyObject*>(&PyMap_Type)
                     : it.made == Iterator::Made::Filter ? reinterpret_cast<PyObject*>(&PyFilter_Type)
                     : it.made == Iterator::Made::Zip ? reinterpret_cast<PyObject*>(&PyZip_Type)
                                                      : reinterpret_cast<PyObject*>(&PyEnum_Type);
    if (it.made == Iterator::Made::Enumerate) {
      Ref start = Ref::steal(PyLong_FromLong(it.next_index));
      if (!start) return p.tracer().failFromPython("enumerate's count");
      args.push_back(runtime::OutputPlan::constant(start.get()));
    }
    out->step = P::Call{Ref::borrow(type), std::move(args)};
    return {};
  }
  // A generator stays one (its throw/close/send are there), also for a resume function.
  const bool typed = it.type && (!p.forResume() || it.type.get() == reinterpret_cast<PyObject*>(&PyGen_Type));
  PyObject* rebuild = typed ? lookup(Obj::cdynamo_resume_rebuild_iterator) : lookup(Obj::builtins_iter);
  if (!rebuild) return p.tracer().failFromPython("cdynamo._internal.frame_rebuild.rebuild_iterator");
  std::vector<ValuePtr> rest(it.items.begin() + static_cast<std::ptrdiff_t>(std::min(it.pos, it.items.size())),
                             it.items.end());
  std::vector<runtime::OutputPlan> args;
  if (typed) args.push_back(runtime::OutputPlan::constant(it.type.get()));
  args.emplace_back();
  if (Done d = p.plan(Value::tuple(std::move(rest)), &args.back()); !d) return d;
  out->step = P::Call{Ref::borrow(rebuild), std::move(args)};
  return {};
}

bool isGeneratorValue(const ValuePtr& v) {
  const Iterator* it = v->get<Iterator>();
  // Of the generator type itself: a polyfill's generator stands for another type (itertools.product), without these methods.
  return it && it->type.get() == reinterpret_cast<PyObject*>(&PyGen_Type) &&
         (it->made == Iterator::Made::Generator || it->made == Iterator::Made::Ahead);
}

// An attribute of an iterator value: __iter__/__next__ (a generator's send/close/throw too), called later.
Result<ValuePtr> iteratorAttr(Tracer& t, const ValuePtr& obj, PyObject* name) {
  const char* n = PyUnicode_AsUTF8(name);
  // A generator's methods (calls.cpp generatorMethod), called later.
  if (isGeneratorValue(obj) &&
      (strcmp(n, "send") == 0 || strcmp(n, "close") == 0 || strcmp(n, "throw") == 0 || strcmp(n, "__next__") == 0))
    return Value::namedMethod(obj, name);
  if (strcmp(n, "__iter__") == 0 || strcmp(n, "__next__") == 0)
    return Value::namedMethod(obj, name);  // it.__iter__() (itself), it.__next__(): called later
  return notHandled();
}

}  // namespace cdynamo::trace
