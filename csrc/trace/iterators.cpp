// Iterator links and input iterators (iterators.h).
#include "trace/iterators.h"

#include <algorithm>
#include <unordered_set>

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
  t_.effects().noteMutation();
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

void Iterators::addInput(ValuePtr value, int items_reg, std::vector<int> item_regs) {
  inputs_.push_back(Input{std::move(value), items_reg, std::move(item_regs)});
}

void Iterators::appendAdvances(std::vector<runtime::SideEffect>* out) const {
  for (const Input& in : inputs_) {
    const Iterator& it = in.value->as<Iterator>();
    if (it.pos == 0) continue;
    out->push_back(runtime::SideEffect{in.value->reg,
                                       runtime::SideEffect::Advance{static_cast<Py_ssize_t>(std::min(it.pos, it.items.size()))}});
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
    const size_t taken = std::min(iter.pos, in.item_regs.size());
    std::vector<int> untaken(in.item_regs.begin() + static_cast<std::ptrdiff_t>(taken), in.item_regs.end());
    bool unread = !iter.ended;
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
