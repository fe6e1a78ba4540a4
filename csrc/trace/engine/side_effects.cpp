#include "trace/engine/side_effects.h"

#include "trace/engine/outputs.h"
#include "trace/tracer.h"

namespace cdynamo::trace {

Done SideEffects::record(Effect e) {
  ++mutations_;
  noteChangeOf(nullptr);  // a store to the program's own state
  effects_.push_back(std::move(e));
  return {};
}

Done SideEffects::setAttr(int reg, PyObject* name, ValuePtr value, bool generic) {
  if (Done d = record({reg, Effect::SetAttr{Ref::borrow(name), value, generic}}); !d) return d;
  attr_overlay_.push_back({{reg, PyUnicode_AsUTF8(name)}, std::move(value)});
  return {};
}

Done SideEffects::setGlobal(int globals_reg, PyObject* name, ValuePtr value) {
  if (Done d = record({globals_reg, Effect::SetItem{Ref::borrow(name), value}}); !d) return d;
  attr_overlay_.push_back({{globals_reg, PyUnicode_AsUTF8(name)}, std::move(value)});
  return {};
}

Done SideEffects::delAttr(int reg, PyObject* name, bool generic) {
  if (Done d = record({reg, Effect::DelAttr{Ref::borrow(name), generic}}); !d) return d;
  attr_overlay_.push_back({{reg, PyUnicode_AsUTF8(name)}, deleted()});
  return {};
}

const ValuePtr& SideEffects::deleted() {
  static const ValuePtr& marker = *new ValuePtr(Value::null());  // never freed: outlives every trace
  return marker;
}

Done SideEffects::setCell(int cell_reg, PyObject* real_cell, ValuePtr value) {
  if (Done d = record({cell_reg, Effect::SetCell{value}}); !d) return d;
  cell_overlay_[real_cell] = std::move(value);
  return {};
}

Done SideEffects::callMethod(int reg, PyObject* name, ValuePtr value) {
  return record({reg, Effect::CallMethod{Ref::borrow(name), std::move(value)}});
}

Done SideEffects::noteContainerMutation(const ValuePtr& c) {
  if (c->is(Kind::Dict) && c->as<Dict>().type.get() == reinterpret_cast<PyObject*>(&PyDictProxy_Type))
    return t_.raiseNew(PyExc_TypeError, "'mappingproxy' object does not support item assignment");
  ++mutations_;
  noteChangeOf(c.get());
  if (c->reg < 0) return {};  // made in the trace: nothing to replay
  if (!c->is(Kind::List) && !c->is(Kind::Dict) && !c->is(Kind::Set))
    return t_.fail(std::string("mutating ") + describe(c) + " from outside the trace is not supported yet");
  // An iterator passed in over this container reads it as it changes from now on.
  if (Done d = t_.iterators().containerChanging(c); !d) return d;
  for (const Effect& e : effects_)
    if (const auto* r = std::get_if<Effect::Replace>(&e.what); r && r->container == c) return {};
  return record({c->reg, Effect::Replace{c}});
}

std::vector<ValuePtr> SideEffects::storedValues() const {
  std::vector<ValuePtr> out;
  for (const Effect& e : effects_) {
    if (const auto* a = std::get_if<Effect::SetAttr>(&e.what)) out.push_back(a->value);
    if (const auto* i = std::get_if<Effect::SetItem>(&e.what)) out.push_back(i->value);
    if (const auto* c = std::get_if<Effect::SetCell>(&e.what)) out.push_back(c->value);
    if (const auto* r = std::get_if<Effect::Replace>(&e.what)) out.push_back(r->container);
    if (const auto* m = std::get_if<Effect::CallMethod>(&e.what)) out.push_back(m->value);
  }
  return out;
}

std::vector<ValuePtr> SideEffects::replacedContainers() const {
  std::vector<ValuePtr> out;
  for (const Effect& e : effects_)
    if (const auto* r = std::get_if<Effect::Replace>(&e.what)) out.push_back(r->container);
  return out;
}

bool SideEffects::replaces(const Value* c) const {
  for (const Effect& e : effects_)
    if (const auto* r = std::get_if<Effect::Replace>(&e.what); r && r->container.get() == c) return true;
  return false;
}

ValuePtr SideEffects::overlayAttr(int reg, PyObject* name) const {
  if (reg < 0 || attr_overlay_.empty()) return nullptr;
  const char* n = PyUnicode_AsUTF8(name);
  for (auto it = attr_overlay_.rbegin(); it != attr_overlay_.rend(); ++it)
    if (it->first.first == reg && it->first.second == n) return it->second;
  return nullptr;
}

ValuePtr SideEffects::overlayCell(PyObject* cell) const {
  auto it = cell_overlay_.find(cell);
  return it == cell_overlay_.end() ? nullptr : it->second;
}

namespace {

// The final contents of a replaced container, as a fresh list/set/dict to copy from.
ValuePtr contentsOf(const Value& c) {
  switch (c.kind()) {
    case Kind::List: return Value::list(c.as<List>().items);
    case Kind::Set: {  // with its shadow: the table the real set must end with (support/set_table.h)
      ValuePtr copy = Value::set(c.as<Set>().items);
      copy->as<Set>().shadow = c.as<Set>().shadow.copy();
      copy->as<Set>().shadow_lost = c.as<Set>().shadow_lost;
      return copy;
    }
    case Kind::Dict: {
      const Dict& d = c.as<Dict>();
      std::vector<Ref> keys;
      for (const Ref& k : d.keys) keys.push_back(k.copy());
      return Value::dict(reinterpret_cast<PyObject*>(&PyDict_Type), std::move(keys), d.values);
    }
    case Kind::Null:
    case Kind::Tensor:
    case Kind::Constant:
    case Kind::Tuple:
    case Kind::Slice:
    case Kind::Iterator:
    case Kind::Callable:
    case Kind::BoundMethod:
    case Kind::NamedMethod:
    case Kind::Module:
    case Kind::PyModule:
    case Kind::Cell:
    case Kind::Function:
    case Kind::Object:
    case Kind::NewObject:
    case Kind::Super:
    case Kind::Partial:
    case Kind::Context:
    case Kind::Namespace:
    case Kind::DictView:
    case Kind::NdArray:
    case Kind::SubclassTensor:
      break;
  }
  CDYNAMO_CHECK(false, "a replaced container that is not a list, set or dict");
  return nullptr;
}

}  // namespace

Done SideEffects::buildReplay(OutputPlanner& outputs, std::vector<runtime::SideEffect>* out) const {
  using E = runtime::SideEffect;
  for (const Effect& e : effects_) {
    runtime::OutputPlan value;
    struct {
      OutputPlanner& outputs;
      runtime::OutputPlan& value;
      Done operator()(const Effect::SetAttr& s) const { return outputs.plan(s.value, &value); }
      Done operator()(const Effect::SetItem& s) const { return outputs.plan(s.value, &value); }
      Done operator()(const Effect::DelAttr&) const { return {}; }
      Done operator()(const Effect::SetCell& s) const { return outputs.plan(s.value, &value); }
      Done operator()(const Effect::Replace& r) const { return outputs.plan(contentsOf(*r.container), &value); }
      Done operator()(const Effect::CallMethod& m) const { return outputs.plan(m.value, &value); }
    } planValue{outputs, value};
    if (Done d = std::visit(planValue, e.what); !d) return d;
    struct {
      runtime::OutputPlan& value;
      E::What operator()(const Effect::SetAttr& s) const { return E::SetAttr{s.name.copy(), std::move(value), s.generic}; }
      E::What operator()(const Effect::SetItem& s) const { return E::SetItem{s.key.copy(), std::move(value)}; }
      E::What operator()(const Effect::DelAttr& s) const { return E::DelAttr{s.name.copy(), s.generic}; }
      E::What operator()(const Effect::SetCell&) const { return E::SetCell{std::move(value)}; }
      E::What operator()(const Effect::Replace& r) const {
        if (r.container->is(Kind::List)) return E::ReplaceList{std::move(value)};
        if (r.container->is(Kind::Set)) return E::ReplaceSet{std::move(value)};
        return E::ReplaceDict{std::move(value)};
      }
      E::What operator()(const Effect::CallMethod& m) const { return E::CallMethod{m.name.copy(), std::move(value)}; }
    } replayed{value};
    out->push_back(E{e.reg, std::visit(replayed, e.what)});
  }
  return {};
}

}  // namespace cdynamo::trace
