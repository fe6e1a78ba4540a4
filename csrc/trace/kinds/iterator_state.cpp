// The iterators' state across the trace (the Iterators class of iterator.h): which derived
// iterators advance their sources in lockstep, input iterators pinned to their containers,
// the advances replayed on the real iterators after the graph, and their guards.
#include <algorithm>
#include <array>
#include <cstring>
#include <string>
#include <unordered_set>

#include "support/lookup.h"
#include "trace/engine/frame.h"
#include "trace/engine/outputs.h"
#include "trace/kinds/iterator.h"
#include "trace/tracer.h"

namespace cdynamo::trace {


bool Iterators::stale(const Value* it) const {
  auto found = links_.find(it);
  return found != links_.end() && found->second.stale;
}

Done Iterators::usable(const Value* it) {
  if (!stale(it)) return {};
  return t_.fail("a zip/enumerate/map/filter iterator used again after its source iterator was consumed directly "
              "(the interleaving is not modeled)");
}

Done Iterators::advance(const ValuePtr& it, size_t pos, bool ended) {
  if (Done d = usable(it.get()); !d) return d;
  // One passed in moves the program's own iterator (replayed); one made in the trace moves
  // only what its holders see.
  t_.effects().noteChangeOf(it.get());
  if (it->reg >= 0) t_.effects().noteMutation();
  else t_.effects().noteIteratorMove();
  for (auto& [derived, link] : links_) {
    if (link.derived->as<Iterator>().ended || link.derived == it) continue;
    for (const ValuePtr& s : link.sources)
      if (s == it) link.stale = true;
  }
  Iterator& iter = it->as<Iterator>();
  iter.pos = std::min(pos, iter.items.size());
  iter.ended = iter.ended || ended;
  syncSources(it.get());
  return {};
}

void Iterators::syncSources(const Value* derived) {
  auto found = links_.find(derived);
  if (found == links_.end()) return;
  const Link& link = found->second;
  const Iterator& d = derived->as<Iterator>();
  const size_t k = d.pos;
  for (size_t s = 0; s < link.sources.size(); ++s) {
    const ValuePtr& src = link.sources[s];
    Iterator& source = src->as<Iterator>();
    if (d.ended && k >= link.consumed.size()) {
      source.pos = link.start[s] + link.consumed_at_end[s];
      source.ended = link.ended_at_end[s];
    } else {
      source.pos = link.start[s] + (k == 0 ? 0 : link.consumed[k - 1]);
    }
    syncSources(src.get());
  }
}

void Iterators::linkLockstep(const ValuePtr& derived, const std::vector<ValuePtr>& args, size_t first,
                          const std::vector<std::vector<ValuePtr>>& seqs, size_t n, bool strict) {
  std::vector<ValuePtr> sources;
  std::vector<size_t> consumed(n);
  for (size_t k = 0; k < n; ++k) consumed[k] = k + 1;  // one from each per result
  std::vector<size_t> consumed_at_end;
  std::vector<bool> ended_at_end;
  bool stopped = false;  // an earlier argument had no item left: later ones are not read
  for (size_t i = first; i < args.size(); ++i) {
    const size_t len = seqs[i - first].size();
    const bool exhausted_here = !stopped && (strict || len == n);
    if (args[i]->is(Kind::Iterator)) {
      sources.push_back(args[i]);
      // At the end: read one more if it has one and no earlier argument ran out.
      consumed_at_end.push_back(n + (!stopped && !exhausted_here ? 1 : 0));
      ended_at_end.push_back(exhausted_here);
    }
    if (exhausted_here && !strict) stopped = true;
  }
  link(derived, std::move(sources), std::move(consumed), std::move(consumed_at_end), std::move(ended_at_end));
}

void Iterators::link(const ValuePtr& derived, std::vector<ValuePtr> sources, std::vector<size_t> consumed,
                     std::vector<size_t> consumed_at_end, std::vector<bool> ended_at_end) {
  if (sources.empty()) return;
  Link link;
  link.derived = derived;
  for (const ValuePtr& s : sources) link.start.push_back(s->as<Iterator>().pos);
  link.sources = std::move(sources);
  link.consumed = std::move(consumed);
  link.consumed_at_end = std::move(consumed_at_end);
  link.ended_at_end = std::move(ended_at_end);
  links_[derived.get()] = std::move(link);
}

Done Iterators::addInput(ValuePtr value, PyObject* obj, int items_reg, std::vector<int> item_regs) {
  Input in{std::move(value), items_reg, std::move(item_regs), Ref::borrow(obj)};
  if (PyObject* c = guards::iterContainer(obj)) in.container = Ref::borrow(c);
  inputs_.push_back(std::move(in));
  if (!inputs_.back().container) return {};
  // A container the trace changed before it read this iterator: the iterator sees the change.
  for (const ValuePtr& c : t_.effects().replacedContainers())
    if (Done d = relate(inputs_.back(), c, nullptr); !d) return d;
  return {};
}

Done Iterators::containerChanging(const ValuePtr& c) {
  for (Input& in : inputs_)
    if (Done d = relate(in, c, nullptr); !d) return d;
  return {};
}

Done Iterators::relate(Input& in, const ValuePtr& c, PyObject* obj) {
  if (in.pinned || !in.container || in.value->as<Iterator>().ended || c->reg < 0) return {};
  if (!obj) {  // the object the program passed for `c`
    for (const auto& [o, v] : t_.wrappedObjects())
      if (v == c) obj = o;
    if (!obj) return {};
  }
  if (Py_TYPE(obj) != Py_TYPE(in.container.get())) return {};
  if (in.container_reg < 0)
    in.container_reg = t_.load(guards::LoadKind::IterContainer, in.value->reg, 0, nullptr,
                               t_.guards().sourceName(in.value->reg) + ".<container>");
  const bool same = obj == in.container.get();
  t_.guards().checkAliasing(in.container_reg, c->reg, same);
  if (!same) return {};
  return pin(in, c);
}

Done Iterators::pin(Input& in, const ValuePtr& c) {
  for (const auto& [derived, link] : links_)
    for (const ValuePtr& s : link.sources)
      if (s == in.value && !link.derived->as<Iterator>().ended)
        return t_.fail("an iterator passed in, read by a zip/map/enumerate, over a container the trace changes");
  Iterator& it = in.value->as<Iterator>();
  if (it.lazy()) return t_.fail("internal: an input iterator made item by item before it was pinned");
  const size_t taken = std::min(it.pos, it.items.size());
  const size_t left = it.items.size() - taken;
  const int reg = in.value->reg;
  PyObject* rest = nullptr;  // the tuple of the items it had left, as the guards read it
  Ref rest_held = guards::iterRemaining(in.obj.get());
  if (!rest_held) return t_.failFromPython("reading an iterator passed in");
  rest = rest_held.get();
  if (static_cast<size_t>(PyTuple_GET_SIZE(rest)) != it.items.size())
    return t_.fail("internal: an iterator passed in changed while it was traced");
  size_t pos = 0;
  if (const List* l = c->get<List>()) {
    // list_iterator reads its list at its index: the index is what the trace now depends on.
    Py_ssize_t index = guards::listIteratorIndex(in.obj.get());
    if (index < 0) return t_.failFromPython("the index of a list_iterator passed in");
    Ref index_obj = Ref::steal(PyLong_FromSsize_t(index));
    if (!index_obj) return t_.failFromPython("the index of a list_iterator passed in");
    int index_reg = t_.load(guards::LoadKind::IterIndex, reg, 0, nullptr, t_.guards().sourceName(reg) + ".<index>");
    t_.guards().checkEquals(index_reg, index_obj.get());
    pos = static_cast<size_t>(index) + taken;
    it.seq_len = l->items.size();
    it.items = l->items;
  } else if (c->is(Kind::Dict) || c->is(Kind::Set)) {
    // A dict or set iterator's place is by its items left, in the container as the program
    // passed it (the trace may have changed its value already): the last `left` of the real
    // container's walk, when the iterator is not broken (a size changed since iter() makes
    // its length hint 0). The iterator then checks the value's size and keys against those.
    PyObject* real = in.container.get();
    Py_ssize_t hint = PyObject_LengthHint(in.obj.get(), -1);
    if (hint < 0) return t_.failFromPython("the length of an iterator passed in");
    Ref walk = Ref::steal(PySequence_List(real));
    if (!walk) return t_.failFromPython("the items of a container passed in");
    const size_t n = static_cast<size_t>(PyList_GET_SIZE(walk.get()));
    if (static_cast<size_t>(hint) != it.items.size() || left > n)
      return t_.fail("an iterator passed in over a dict or set that changed size while it was in use");
    pos = n - left;
    int which = DictView::Keys;
    if (c->is(Kind::Dict)) {
      static const char* const kTypes[] = {"dict_keyiterator", "dict_valueiterator", "dict_itemiterator"};
      which = -1;
      for (int k = 0; k < 3; ++k)
        if (strcmp(Py_TYPE(in.obj.get())->tp_name, kTypes[k]) == 0) which = k;
      if (which < 0) return t_.fail("an iterator of a dict subclass's views passed in, over a dict the trace changes");
    }
    for (size_t k = 0; k < left && which != DictView::Values; ++k) {
      PyObject* item = PyTuple_GET_ITEM(rest, static_cast<Py_ssize_t>(taken + k));
      PyObject* key = which == DictView::Items ? PyTuple_GET_ITEM(item, 0) : item;
      if (key != PyList_GET_ITEM(walk.get(), static_cast<Py_ssize_t>(pos + k)))
        return t_.fail("an iterator passed in whose items left are not the last of its dict or set");
    }
    it.seq_len = n;
    if (const Dict* d = c->get<Dict>()) {
      it.seq_which = static_cast<uint8_t>(which);
      it.seq_keys.clear();
      for (size_t k = 0; k < n; ++k) it.seq_keys.push_back(Ref::borrow(PyList_GET_ITEM(walk.get(), static_cast<Py_ssize_t>(k))));
      it.items.clear();
      (void)d;
    } else {
      // The set's walk: what it had taken as constants, what it has left as traced.
      const Set& s = c->as<Set>();
      std::vector<ValuePtr> order;
      for (size_t k = 0; k < pos; ++k) order.push_back(Value::constant(PyList_GET_ITEM(walk.get(), static_cast<Py_ssize_t>(k))));
      order.insert(order.end(), it.items.begin() + static_cast<std::ptrdiff_t>(taken), it.items.end());
      // Its items as the trace has them now; a set changed before (same size) is not modeled.
      it.seq_items = inReplaced(t_, c) ? std::vector<ValuePtr>{} : s.items;
      it.items = std::move(order);
    }
  } else {
    return t_.fail("internal: an iterator's container of an unknown kind");
  }
  it.made = Iterator::Made::Sequence;
  it.seq = c;
  it.seq_reversed = false;
  it.pos = pos;
  in.pinned = true;
  in.taken_at_pin = taken;
  in.pos_at_pin = pos;
  return {};
}

bool Iterators::inReplaced(Tracer& t, const ValuePtr& c) {
  for (const ValuePtr& r : t.effects().replacedContainers())
    if (r == c) return true;
  return false;
}

size_t Iterators::takenSincePin(const Input& in) {
  const Iterator& it = in.value->as<Iterator>();
  if (it.made == Iterator::Made::Sequence) return it.pos - in.pos_at_pin;
  return it.seq_base - in.pos_at_pin + std::min(it.pos, it.items.size());  // drained, then taken from
}

void Iterators::appendAdvances(std::vector<runtime::SideEffect>* out, bool after) const {
  for (const Input& in : inputs_) {
    const Iterator& it = in.value->as<Iterator>();
    const bool list = in.pinned && PyList_CheckExact(in.container.get());
    if (list != after) continue;
    runtime::SideEffect::Advance a{0};
    if (list) {
      // Its index in the list as it is at the end (exhausted: -1), set on the real one.
      a.set_index = true;
      a.count = it.ended ? -1 : static_cast<Py_ssize_t>(in.pos_at_pin + takenSincePin(in));
    } else {
      a.count = static_cast<Py_ssize_t>(in.pinned ? in.taken_at_pin + takenSincePin(in) : std::min(it.pos, it.items.size()));
      if (a.count == 0) continue;
    }
// GCC 12 warns that a field of another alternative of SideEffect::What may be
// uninitialized when a SideEffect is moved into the vector (a -Wmaybe-uninitialized false
// positive of std::variant).
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
    out->push_back(runtime::SideEffect{in.value->reg, a});
#pragma GCC diagnostic pop
  }
}

namespace {

void registersIn(const runtime::OutputPlan& p, std::unordered_set<int>* out) {
  namespace P = runtime::plan;
  auto all = [&](const std::vector<runtime::OutputPlan>& items) {
    for (const runtime::OutputPlan& item : items) registersIn(item, out);
  };
  struct {
    std::unordered_set<int>* out;
    decltype(all)& items;
    void operator()(const P::Register& r) const { out->insert(r.reg); }
    void operator()(const P::GraphOutput&) const {}
    void operator()(const P::Constant&) const {}
    void operator()(const P::Memo&) const {}
    void operator()(const P::Tuple& t) const { items(t.items); }
    void operator()(const P::NamedTuple& t) const { items(t.items); }
    void operator()(const P::List& l) const { items(l.items); }
    void operator()(const P::Deque& d) const { items(d.items); }
    void operator()(const P::Dict& d) const { items(d.values); }
    void operator()(const P::Set& s) const { items(s.items); }
    void operator()(const P::NewObject& n) const { registersIn(*n.attrs, out); }
    void operator()(const P::Call& c) const { items(c.args); }
  } visitor{out, all};
  std::visit(visitor, p.step);
}

}  // namespace

void Iterators::guardInputs(const runtime::CompiledEntry& entry) {
  if (inputs_.empty()) return;
  // The registers the entry reads besides its guards: graph inputs, outputs, effects.
  std::unordered_set<int> read(entry.input_regs.begin(), entry.input_regs.end());
  registersIn(entry.output, &read);
  for (const runtime::SideEffect& e : entry.effects) {
    read.insert(e.reg);
    if (const runtime::OutputPlan* stored = runtime::storedValue(e)) registersIn(*stored, &read);
  }
  for (const Input& in : inputs_) {
    const ValuePtr& it = in.value;
    const Iterator& iter = it->as<Iterator>();
    // A pinned one reads its container, guarded as such (the container, the index): of the
    // items it had left only those taken before are used.
    const size_t taken = in.pinned ? in.taken_at_pin : std::min(iter.pos, in.item_regs.size());
    std::vector<int> untaken(in.item_regs.begin() + static_cast<std::ptrdiff_t>(taken), in.item_regs.end());
    bool unread = in.pinned || !iter.ended;
    std::vector<int> under = t_.guards().registersUnder(untaken);
    std::unordered_set<int> under_set(under.begin(), under.end());
    std::unordered_set<const Value*> under_values;
    for (int r : under) {
      unread = unread && !read.count(r);
      auto w = t_.wrappedValues().find(r);
      if (w != t_.wrappedValues().end()) under_values.insert(w->second.get());
    }
    // An untaken item that is also reached through another source (one object passed twice)
    // is one traced value: what the trace read of it may be guarded through the item's
    // registers, so those stay.
    for (const auto& [reg, value] : t_.wrappedValues())
      if (!under_set.count(reg) && under_values.count(value.get())) unread = false;
    if (unread) {
      // The trace took `taken` items and did not see the end: any iterator with at least
      // those items (each guarded as it was used) behaves the same here.
      t_.guards().dropRegisters(untaken);
      if (taken > 0) t_.guards().checkLengthAtLeast(in.items_reg, static_cast<Py_ssize_t>(taken));
    } else {
      t_.guards().checkLength(in.items_reg, static_cast<Py_ssize_t>(in.item_regs.size()));
    }
  }
}

}  // namespace cdynamo::trace
