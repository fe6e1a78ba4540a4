// Output planning (outputs.h): one plan per value kind.
#include "support/lookup.h"
#include "support/set_table.h"
#include "trace/engine/outputs.h"
#include "trace/kinds/iterator.h"
#include "trace/kinds/set.h"
#include "trace/protocol/calls.h"
#include "trace/protocol/operators.h"
#include "trace/tracer.h"

#include <algorithm>
#include <cstring>


namespace cdynamo::trace {

namespace {

// The shadow of a set changed in the trace (Set::shadow) when it holds exactly the set's
// items, all constants: a copy of its table is then the set as eager has it. Null otherwise
// (never changed: a set built from the items in order is the same; no shadow: the order is
// rebuilt from the items).
PyObject* shadowOfConstants(const Set& s) {
  if (s.frozen || s.shadow_lost || !s.shadow || !PySet_CheckExact(s.shadow.get())) return nullptr;
  if (static_cast<size_t>(PySet_GET_SIZE(s.shadow.get())) != s.items.size()) return nullptr;
  for (const ValuePtr& item : s.items) {
    if (!item->is(Kind::Constant)) return nullptr;
    int in = PySet_Contains(s.shadow.get(), item->constant());
    if (in != 1) return in < 0 ? (PyErr_Clear(), nullptr) : nullptr;
  }
  return s.shadow.get();
}

}  // namespace

Done OutputPlanner::planAll(const std::vector<ValuePtr>& values, std::vector<runtime::OutputPlan>* out) {
  out->resize(values.size());
  for (size_t i = 0; i < values.size(); ++i)
    if (Done d = plan(values[i], &(*out)[i]); !d) return d;
  return {};
}

Done OutputPlanner::plan(const ValuePtr& v, runtime::OutputPlan* out) {
  namespace P = runtime::plan;
  // A container or iterator read from the program is handed back as the object itself
  // (its mutations, or what the trace consumed of it, are replayed on it as effects); one
  // made in the trace is one object however often it is reachable (the memo).
  bool container = false, made_once = false;
  switch (v->kind()) {
    case Kind::List:
    case Kind::Dict:
    case Kind::Set:
    case Kind::Tuple:
    case Kind::Iterator:
      container = true;
      made_once = true;
      break;
    case Kind::NewObject:
    case Kind::Namespace:
    case Kind::Cell:
    case Kind::Function:
    case Kind::NdArray:
    case Kind::SubclassTensor:
    case Kind::Partial:
      made_once = true;
      break;
    case Kind::Null:
    case Kind::Tensor:
    case Kind::Constant:
    case Kind::Slice:
    case Kind::Callable:
    case Kind::BoundMethod:
    case Kind::NamedMethod:
    case Kind::Module:
    case Kind::PyModule:
    case Kind::Object:
    case Kind::Super:
    case Kind::Context:
    case Kind::DictView:
      break;
  }
  if (v->is(Kind::Dict) && v->reg >= 0 && v->as<Dict>().type.get() == reinterpret_cast<PyObject*>(&PyDictProxy_Type)) {
    // cls.__dict__: a new mappingproxy of the class dict itself, as eager's each read
    std::vector<runtime::OutputPlan> args(1);
    args[0].step = P::Register{v->reg};
    out->step = P::Call{Ref::borrow(reinterpret_cast<PyObject*>(&PyDictProxy_Type)), std::move(args)};
    return {};
  }
  if ((container || v->is(Kind::Partial)) && v->reg >= 0) {  // read from the program: handed back as itself
    *out = P::Register{v->reg};
    return {};
  }
  if (made_once && v->reg < 0) {
    auto it = memo_slot_.find(v.get());
    if (it != memo_slot_.end()) {
      // Lists, dicts, sets and objects are made first and filled after: they may contain
      // themselves; what is built by a call from its parts may not.
      // (A deque is made by a call from its items.)
      const bool filled_after = (v->is(Kind::List) && !v->as<List>().deque) || v->is(Kind::Dict) ||
                                (v->is(Kind::Set) && !v->as<Set>().frozen) || v->is(Kind::NewObject);
      if (in_progress_.count(v.get()) && !filled_after)
        return t_.fail(describe(v) +
                       " made in the trace that contains itself cannot be rebuilt yet");
      *out = P::Memo{it->second.first};
      return {};
    }
    if (!v->is(Kind::Tuple) || v->as<Tuple>().attrs) {  // a namedtuple with attributes is one object
      out->memo = memo_slots_++;
      memo_slot_.emplace(v.get(), std::make_pair(out->memo, v));
    }
    in_progress_.insert(v.get());
    Done d = planOne(v, out);
    in_progress_.erase(v.get());
    return d;
  }
  return planOne(v, out);
}

Done OutputPlanner::planOne(const ValuePtr& v, runtime::OutputPlan* out) {
  namespace P = runtime::plan;
  switch (v->kind()) {
    case Kind::Tensor: {
      const int node = v->as<Tensor>().node;
      const int in = t_.inputRegOf(node);
      if (in >= 0 && t_.isSubclassInput(node)) {
        // The plain tensor of a tensor subclass input (Tensor.as_subclass(x, torch.Tensor)):
        // a new plain tensor object of its data.
        PyObject* as_subclass = lookup(Obj::cdynamo_subclass_as_subclass);
        PyObject* tensor_type = lookup(Obj::torch_Tensor);
        if (!as_subclass || !tensor_type) return t_.failFromPython("cdynamo._tensor_subclass.as_subclass");
        std::vector<runtime::OutputPlan> args(2);
        args[0].step = P::Register{in};
        args[1] = runtime::OutputPlan::constant(tensor_type);
        out->step = P::Call{Ref::borrow(as_subclass), std::move(args)};
        return {};
      }
      if (in >= 0) {
        // An input returned as is: hand back the very same object, as eager does.
        out->step = P::Register{in};
        return {};
      }
      if (const graph::GraphBuilder::Choice* choice = t_.graph().choiceOf(node)) {
        // The result of min()/max() over tensors is the item that won itself, as in eager:
        // (items...)[index], the index a graph output (a 0-d integer tensor is an index).
        PyObject* getitem = lookup(Obj::operator_getitem);
        if (!getitem) return t_.failFromPython("operator.getitem");
        std::vector<ValuePtr> candidates;
        for (int c : choice->candidates) candidates.push_back(Value::tensor(c));
        std::vector<runtime::OutputPlan> args(2);
        if (Done d = plan(Value::tuple(std::move(candidates)), &args[0]); !d) return d;
        if (Done d = plan(Value::tensor(choice->index), &args[1]); !d) return d;
        out->step = P::Call{Ref::borrow(getitem), std::move(args)};
        return {};
      }
      for (size_t i = 0; i < graph_outputs_.size(); ++i)
        if (graph_outputs_[i] == node) {
          out->step = P::GraphOutput{static_cast<int>(i)};
          return {};
        }
      graph_outputs_.push_back(node);
      out->step = P::GraphOutput{static_cast<int>(graph_outputs_.size() - 1)};
      return {};
    }
    case Kind::Constant:
      out->step = P::Constant{v->as<Constant>().obj.copy()};
      return {};
    case Kind::Tuple: {
      const Tuple& t = v->as<Tuple>();
      std::vector<runtime::OutputPlan> items;
      if (Done d = planAll(t.items, &items); !d) return d;
      if (t.namedtuple && t.attrs) {  // made by tuple.__new__ from its items, then given its __dict__
        auto attrs = std::make_unique<runtime::OutputPlan>();
        if (Done d = plan(t.attrs, attrs.get()); !d) return d;
        out->step = P::NewObject{t.namedtuple.copy(), std::move(attrs),
                                 Ref::borrow(reinterpret_cast<PyObject*>(&PyTuple_Type)),
                                 std::make_unique<runtime::OutputPlan>(P::Tuple{std::move(items)})};
      } else if (t.namedtuple)
        out->step = P::NamedTuple{t.namedtuple.copy(), std::move(items)};
      else
        out->step = P::Tuple{std::move(items)};
      return {};
    }
    case Kind::List: {
      const List& l = v->as<List>();
      std::vector<runtime::OutputPlan> items;
      if (Done d = planAll(l.items, &items); !d) return d;
      if (l.deque)
        out->step = P::Deque{l.deque.copy(), l.maxlen.copy(), std::move(items)};
      else
        out->step = P::List{std::move(items)};
      return {};
    }
    case Kind::Dict: {
      const Dict& d = v->as<Dict>();
      const bool traced_factory = d.factory_value && !d.default_factory;
      P::Dict dict{traced_factory ? Ref::borrow(reinterpret_cast<PyObject*>(&PyDict_Type)) : d.type.copy(),
                   d.default_factory.copy(), {}, {}};
      for (const Ref& k : d.keys) dict.keys.push_back(k.copy());
      if (Done done = planAll(d.values, &dict.values); !done) return done;
      if (!traced_factory) {
        out->step = std::move(dict);
        return {};
      }
      // A factory made in the trace is rebuilt like any value (a function): the defaultdict
      // is then its type called with it and the items, in their order.
      std::vector<runtime::OutputPlan> args(2);
      if (Done done = plan(d.factory_value, &args[0]); !done) return done;
      args[1].step = std::move(dict);
      out->step = P::Call{d.type.copy(), std::move(args)};
      return {};
    }
    case Kind::Set: {
      if (PyObject* shadow = shadowOfConstants(v->as<Set>())) {
        // Changed in the trace: its shadow has eager's table (dummies, pop's finger), which
        // a set built afresh from the items would not (support/set_table.h). Each run hands
        // out its own copy of a private snapshot of it.
        Ref snapshot = copySetTable(shadow);
        PyObject* copier = snapshot ? setTableCopier() : nullptr;
        if (!copier) return t_.failFromPython("copying a set's table");
        std::vector<runtime::OutputPlan> args;
        args.push_back(runtime::OutputPlan::constant(snapshot.get()));
        out->step = P::Call{Ref::borrow(copier), std::move(args)};
        return {};
      }
      std::vector<runtime::OutputPlan> items;
      if (Done d = planAll(v->as<Set>().items, &items); !d) return d;
      out->step = P::Set{std::move(items), v->as<Set>().frozen};
      return {};
    }
    case Kind::Module:
    case Kind::Callable:
    case Kind::PyModule:
    case Kind::Object:
      if (v->reg >= 0) {
        out->step = P::Register{v->reg};
        return {};
      }
      if (v->is(Kind::Callable) || v->is(Kind::PyModule)) {  // e.g. type(x): a stable object
        out->step = P::Constant{Ref::borrow(v->real())};
        return {};
      }
      if (v->is(Kind::Object) && !v->as<Object>().owned &&
          strcmp(Py_TYPE(v->real())->tp_name, "types.UnionType") == 0) {
        // A union type made in the trace (int | None): made again from its members as eager
        // makes it, a new object each call (or_(or_(a, b), c)); they are classes, aliases
        // and type variables, which outlive the trace.
        Ref members = Ref::steal(PyObject_GetAttrString(v->real(), "__args__"));
        PyObject* or_ = lookup(Obj::operator_or_);
        if (!members || !or_ || !PyTuple_Check(members.get()) || PyTuple_GET_SIZE(members.get()) < 2)
          return t_.failFromPython("the members of a union type");
        runtime::OutputPlan acc = runtime::OutputPlan::constant(PyTuple_GET_ITEM(members.get(), 0));
        for (Py_ssize_t i = 1; i < PyTuple_GET_SIZE(members.get()); ++i) {
          std::vector<runtime::OutputPlan> args;
          args.push_back(std::move(acc));
          args.push_back(runtime::OutputPlan::constant(PyTuple_GET_ITEM(members.get(), i)));
          acc = P::Call{Ref::borrow(or_), std::move(args)};
        }
        *out = std::move(acc);
        return {};
      }
      break;
    case Kind::NewObject: {
      // Planned in the order the runtime builds them (items, then attributes): a value
      // reachable from both (a ModelOutput's field is an item and an attribute) is built
      // in full where it is reached first and read from the memo after.
      const NewObject& o = v->as<NewObject>();
      std::unique_ptr<runtime::OutputPlan> items;
      Ref base_type;
      if (o.base && o.base->is(Kind::Dict)) {  // a dict subclass instance: its items, rebuilt as a plain dict first
        const Dict& part = o.base->as<Dict>();
        P::Dict dict{Ref::borrow(reinterpret_cast<PyObject*>(&PyDict_Type)), Ref(), {}, {}};
        for (const Ref& k : part.keys) dict.keys.push_back(k.copy());
        if (Done d = planAll(part.values, &dict.values); !d) return d;
        items = std::make_unique<runtime::OutputPlan>(std::move(dict));
        base_type = part.type.copy();
      } else if (o.base) {  // a tuple or list subclass instance: its items as a plain tuple or list
        std::vector<runtime::OutputPlan> parts;
        if (Done d = planAll(*o.base->elements(), &parts); !d) return d;
        bool tuple = o.base->is(Kind::Tuple);
        items = tuple ? std::make_unique<runtime::OutputPlan>(P::Tuple{std::move(parts)})
                      : std::make_unique<runtime::OutputPlan>(P::List{std::move(parts)});
        base_type = Ref::borrow(reinterpret_cast<PyObject*>(tuple ? &PyTuple_Type : &PyList_Type));
      }
      auto attrs = std::make_unique<runtime::OutputPlan>();
      if (Done d = plan(o.attrs, attrs.get()); !d) return d;
      out->step = P::NewObject{o.cls.copy(), std::move(attrs), std::move(base_type), std::move(items)};
      return {};
    }
    case Kind::Namespace: {  // SimpleNamespace's __dict__ is its attributes, as for a NewObject
      PyObject* type = lookup(Obj::types_SimpleNamespace);
      if (!type) return t_.failFromPython("types.SimpleNamespace");
      auto attrs = std::make_unique<runtime::OutputPlan>();
      if (Done d = plan(v->as<Namespace>().attrs, attrs.get()); !d) return d;
      out->step = P::NewObject{Ref::borrow(type), std::move(attrs)};
      return {};
    }
    case Kind::Slice: {
      // slice(start, stop, step)
      const Slice& sl = v->as<Slice>();
      std::vector<runtime::OutputPlan> parts;
      if (Done d = planAll({sl.parts.begin(), sl.parts.end()}, &parts); !d) return d;
      out->step = P::Call{Ref::borrow(reinterpret_cast<PyObject*>(&PySlice_Type)), std::move(parts)};
      return {};
    }
    case Kind::Iterator: {
      // The same type of iterator over the items it has left (already computed):
      // cdynamo._resume.rebuild_iterator(type, items), or iter(items) when its type is not known.
      if (Done d = t_.iterators().usable(v.get()); !d) return d;
      const Iterator& it = v->as<Iterator>();
      if (it.stepper) {
        // A polyfill's iterator object (cdynamo._polyfills.count for itertools.count): a real
        // iterator of the original type in the same state, made by the class's rebuild().
        if (PyObject* rebuild = polyfillRebuild(it.type.get())) {
          std::vector<runtime::OutputPlan> args(1);
          if (Done d = plan(it.stepper, &args[0]); !d) return d;
          out->step = P::Call{Ref::borrow(rebuild), std::move(args)};
          return {};
        }
        if (PyErr_Occurred()) return t_.failFromPython("a polyfill's rebuild");
        return plan(it.stepper, out);  // the user's iterator object is the iterator
      }
      if (it.made == Iterator::Made::Generator) {
        // A paused frame has no real counterpart to rebuild: the trace must not end with
        // one alive (returned, stored, or across a graph break) before it finished.
        if (!it.ended) return t_.fail("a generator made in the trace is still running where the trace ends (returned, stored, or alive at a graph break): its paused frame cannot be rebuilt");
        std::vector<runtime::OutputPlan> args;
        if (!for_resume_) args.push_back(runtime::OutputPlan::constant(it.type.get()));
        args.emplace_back();
        if (Done d = plan(Value::tuple({}), &args.back()); !d) return d;
        PyObject* rebuild = !for_resume_ ? lookup(Obj::cdynamo_resume_rebuild_iterator) : lookup(Obj::builtins_iter);
        if (!rebuild) return t_.failFromPython("cdynamo._resume.rebuild_iterator");
        out->step = P::Call{Ref::borrow(rebuild), std::move(args)};
        return {};
      }
      if (it.made == Iterator::Made::Sequence && it.seq) {
        // Rebuilt over its container itself, in the state it reached, so a change made to
        // the container after the break (or by the caller) is seen as eagerly: a list
        // iterator reads the item at its index then, a dict or set iterator raises once the
        // size changed. A copy of the items left would see none of it.
        Result<bool> over = planOverContainer(v, out);
        if (!over) return over.stop();
        if (*over) return {};
      }
      if (it.made == Iterator::Made::Sequence) {
        // What it has left, read from its container now: it leaves as an iterator over those.
        Done d = drainUserIterator(t_, v);
        if (!d && d.outcome() == Outcome::Raised) {
          (void)t_.takePendingException();
          return t_.fail("an iterator over a dict or set that changed size leaves the trace");
        }
        if (!d) return d;
      }
      if (it.made != Iterator::Made::Ahead) {  // map/zip/enumerate: what is left of it, still lazy
        // Rebuilt over its sources, it would take from them again once exhausted.
        if (it.ended) return t_.fail("an exhausted map/zip/enumerate object cannot be rebuilt yet");
        std::vector<ValuePtr> parts;
        if (it.made == Iterator::Made::Map || it.made == Iterator::Made::Filter) parts.push_back(it.map_fn);
        parts.insert(parts.end(), it.map_sources.begin(), it.map_sources.end());
        std::vector<runtime::OutputPlan> args;
        if (Done d = planAll(parts, &args); !d) return d;
        PyObject* type = it.made == Iterator::Made::Map      ? reinterpret_cast<PyObject*>(&PyMap_Type)
                         : it.made == Iterator::Made::Filter ? reinterpret_cast<PyObject*>(&PyFilter_Type)
                         : it.made == Iterator::Made::Zip ? reinterpret_cast<PyObject*>(&PyZip_Type)
                                                          : reinterpret_cast<PyObject*>(&PyEnum_Type);
        if (it.made == Iterator::Made::Enumerate) {
          Ref start = Ref::steal(PyLong_FromLong(it.next_index));
          if (!start) return t_.failFromPython("enumerate's count");
          args.push_back(runtime::OutputPlan::constant(start.get()));
        }
        out->step = P::Call{Ref::borrow(type), std::move(args)};
        return {};
      }
      const bool typed = it.type && !for_resume_;
      PyObject* rebuild = typed ? lookup(Obj::cdynamo_resume_rebuild_iterator) : lookup(Obj::builtins_iter);
      if (!rebuild) return t_.failFromPython("cdynamo._resume.rebuild_iterator");
      std::vector<ValuePtr> rest(it.items.begin() + static_cast<std::ptrdiff_t>(std::min(it.pos, it.items.size())),
                                 it.items.end());
      std::vector<runtime::OutputPlan> args;
      if (typed) args.push_back(runtime::OutputPlan::constant(it.type.get()));
      args.emplace_back();
      if (Done d = plan(Value::tuple(std::move(rest)), &args.back()); !d) return d;
      out->step = P::Call{Ref::borrow(rebuild), std::move(args)};
      return {};
    }
    case Kind::BoundMethod: {  // types.MethodType(function, receiver)
      const BoundMethod& m = v->as<BoundMethod>();
      std::vector<runtime::OutputPlan> args(2);
      args[0] = runtime::OutputPlan::constant(m.function.get());
      if (Done d = plan(m.self, &args[1]); !d) return d;
      out->step = P::Call{Ref::borrow(reinterpret_cast<PyObject*>(&PyMethod_Type)), std::move(args)};
      return {};
    }
    case Kind::NamedMethod: {  // getattr(receiver, name)
      const NamedMethod& m = v->as<NamedMethod>();
      if (m.self->is(Kind::Context) && PyUnicode_CompareWithASCIIString(m.name.get(), "__exit__") == 0)
        return t_.contexts().planExit(m.self, out);
      PyObject* getattr = lookup(Obj::builtins_getattr);
      if (!getattr) return t_.failFromPython("builtins.getattr");
      std::vector<runtime::OutputPlan> args(2);
      if (Done d = plan(m.self, &args[0]); !d) return d;
      args[1] = runtime::OutputPlan::constant(m.name.get());
      out->step = P::Call{Ref::borrow(getattr), std::move(args)};
      return {};
    }
    case Kind::Cell: {
      // A cell made in the trace (a local captured by an inner function).
      const Cell& c = v->as<Cell>();
      if (c.outer && v->reg >= 0) {  // a cell of an enclosing function: the frame's own, read at run time
        *out = P::Register{v->reg};
        return {};
      }
      if (c.outer) break;  // not rebuilt (yet)
      std::vector<runtime::OutputPlan> args;
      if (c.contents && !empty_cells_.count(v.get())) {
        args.resize(1);
        if (Done d = plan(c.contents, &args[0]); !d) return d;
      }
      out->step = P::Call{Ref::borrow(reinterpret_cast<PyObject*>(&PyCell_Type)), std::move(args)};
      return {};
    }
    case Kind::Function:
      return planFunction(v, out);
    case Kind::DictView: {  // type(d).keys(d): a view of the very dict rebuilt
      const DictView& view = v->as<DictView>();
      static const char* const kNames[] = {"keys", "values", "items"};
      Ref method = Ref::steal(PyObject_GetAttrString(view.dict->as<Dict>().type.get(), kNames[view.which]));
      if (!method) return t_.failFromPython("a dict view's method");
      std::vector<runtime::OutputPlan> args(1);
      if (Done d = plan(view.dict, &args[0]); !d) return d;
      out->step = P::Call{std::move(method), std::move(args)};
      return {};
    }
    case Kind::NdArray: {  // the graph's tensor made an ndarray again (sharing its memory)
      PyObject* to_ndarray = lookup(Obj::cdynamo_numpy_to_ndarray);
      if (!to_ndarray) return t_.failFromPython("cdynamo._numpy.to_ndarray");
      std::vector<runtime::OutputPlan> args(1);
      if (Done d = plan(Value::tensor(v->as<NdArray>().node), &args[0]); !d) return d;
      out->step = P::Call{Ref::borrow(to_ndarray), std::move(args)};
      return {};
    }
    case Kind::SubclassTensor: {
      // The object read from the program is itself; one made in the trace is its graph
      // tensor viewed as an instance of its class, as torch's default __torch_function__
      // makes it (as_subclass).
      const SubclassTensor& s = v->as<SubclassTensor>();
      if (v->reg >= 0) {
        out->step = P::Register{v->reg};
        return {};
      }
      PyObject* as_subclass = lookup(Obj::cdynamo_subclass_as_subclass);
      if (!as_subclass) return t_.failFromPython("cdynamo._tensor_subclass.as_subclass");
      std::vector<runtime::OutputPlan> args(2);
      const int in = t_.inputRegOf(s.node);
      if (in >= 0) args[0].step = P::Register{in};
      else if (Done d = plan(Value::tensor(s.node), &args[0]); !d) return d;
      args[1] = runtime::OutputPlan::constant(s.cls.get());
      out->step = P::Call{Ref::borrow(as_subclass), std::move(args)};
      return {};
    }
    case Kind::Partial: {  // functools.partial(fn, *args, **keywords); not a decorated function (a context)
      const Partial& p = v->as<Partial>();
      if (p.context) break;
      PyObject* rebuild = lookup(Obj::cdynamo_resume_rebuild_partial);
      if (!rebuild) return t_.failFromPython("cdynamo._resume.rebuild_partial");
      std::vector<runtime::OutputPlan> args(3);
      if (Done d = plan(p.fn, &args[0]); !d) return d;
      if (Done d = plan(p.args, &args[1]); !d) return d;
      if (Done d = plan(p.kwargs, &args[2]); !d) return d;
      out->step = P::Call{Ref::borrow(rebuild), std::move(args)};
      return {};
    }
    case Kind::Null:
    case Kind::Context:
    case Kind::Super:
      break;
  }
  return t_.fail(std::string("returning ") + describe(v) + " is not supported yet");
}

Result<bool> OutputPlanner::planOverContainer(const ValuePtr& v, runtime::OutputPlan* out) {
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
  const bool after_effects = c->reg >= 0 && t_.effects().replaces(c.get());
  bool deque_changed = false;
  if (const List* l = c->get<List>(); l && l->deque) {
    // A deque's iterator over the deque rebuilt, as many items taken; one the deque changed
    // under since iter() is made to raise as Python's (cdynamo._resume.deque_iterator_at).
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
      if (!fresh) return t_.failFromPython("a set");
      for (const ValuePtr& item : s->items)
        if (!item->constant() || PySet_Add(fresh.get(), item->constant()) < 0) {
          PyErr_Clear();
          return false;
        }
      Ref walk = Ref::steal(PySequence_List(fresh.get()));
      if (!walk) return t_.failFromPython("a set");
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
  if (!fn) return t_.failFromPython("cdynamo._resume's iterator rebuilders");
  std::vector<runtime::OutputPlan> args(1);
  if (Done d = plan(c, &args[0]); !d) return d.stop();
  if (helper == Obj::cdynamo_resume_container_iterator_at) {
    Ref w = Ref::steal(PyLong_FromLong(which));
    if (!w) return t_.failFromPython("an iterator's state");
    args.push_back(runtime::OutputPlan::constant(w.get()));
  }
  Ref n = Ref::steal(PyLong_FromSsize_t(state));
  if (!n) return t_.failFromPython("an iterator's state");
  args.push_back(runtime::OutputPlan::constant(n.get()));
  if (helper == Obj::cdynamo_resume_container_iterator_at && it.seq_reversed)
    args.push_back(runtime::OutputPlan::constant(Py_True));
  if (helper == Obj::cdynamo_resume_deque_iterator_at)
    args.push_back(runtime::OutputPlan::constant(deque_changed ? Py_True : Py_False));
  out->step = P::Call{Ref::borrow(fn), std::move(args)};
  out->after_effects = after_effects;
  return true;
}

namespace {

// Where a plan sits, for placeLatePlans.
struct LatePlacer {
  std::unordered_set<int> late_slots;
  bool misplaced = false;
  bool any = false;

  // `fillable`: reached from the result's root through tuples, lists and dict values only
  // (a built object the runtime can still patch: nothing consumed it); `direct`: the root
  // itself or a tuple's or list's own item.
  void walk(runtime::OutputPlan& p, bool fillable, bool direct, bool mark_readers) {
    namespace P = runtime::plan;
    if (const auto* m = std::get_if<P::Memo>(&p.step); m && mark_readers && late_slots.count(m->slot))
      p.after_effects = true;
    if (p.after_effects) {
      if (!(fillable && direct)) misplaced = true;
      any = true;
      if (!mark_readers && p.memo >= 0) late_slots.insert(p.memo);
      return;  // its own parts are built with it, later
    }
    auto items = [&](std::vector<runtime::OutputPlan>& xs, bool keeps_fillable, bool are_direct) {
      for (runtime::OutputPlan& x : xs) walk(x, fillable && keeps_fillable, are_direct, mark_readers);
    };
    if (auto* tp = std::get_if<P::Tuple>(&p.step)) return items(tp->items, true, true);
    if (auto* l = std::get_if<P::List>(&p.step)) return items(l->items, true, true);
    if (auto* d = std::get_if<P::Dict>(&p.step)) return items(d->values, true, false);
    if (auto* n = std::get_if<P::NamedTuple>(&p.step)) return items(n->items, false, false);
    if (auto* dq = std::get_if<P::Deque>(&p.step)) return items(dq->items, false, false);
    if (auto* st = std::get_if<P::Set>(&p.step)) return items(st->items, false, false);
    if (auto* c = std::get_if<P::Call>(&p.step)) return items(c->args, false, false);
    if (auto* o = std::get_if<P::NewObject>(&p.step)) {
      if (o->attrs) walk(*o->attrs, false, false, mark_readers);
      if (o->items) walk(*o->items, false, false, mark_readers);
    }
  }
};

}  // namespace

Done OutputPlanner::placeLatePlans(runtime::OutputPlan* output, std::vector<runtime::SideEffect>* effects, bool* any) {
  LatePlacer placer;
  // First the iterators themselves (their slots), then the plans that read those slots.
  for (bool readers : {false, true}) {
    placer.walk(*output, true, true, readers);
    for (runtime::SideEffect& e : *effects)
      if (const runtime::OutputPlan* stored = runtime::storedValue(e))
        placer.walk(*const_cast<runtime::OutputPlan*>(stored), false, false, readers);
  }
  if (placer.misplaced)
    return t_.fail("an iterator over a container the trace changed is kept where it cannot be rebuilt after the "
                   "change (inside another object, or stored by an effect): not supported yet");
  *any = placer.any;
  return {};
}

Done OutputPlanner::planFunction(const ValuePtr& fv, runtime::OutputPlan* out) {
  namespace P = runtime::plan;
  const Function& fp = fv->as<Function>();
  // A function made in the trace: cdynamo._resume.make_function(code, globals,
  // qualname, defaults, kwdefaults, closure, attrs, self_cells), its cells shared through
  // the memo. A cell not built yet that holds the function itself (`def g(): return g`)
  // is made empty and filled by make_function once the function exists (self_cells).
  PyObject* helper = lookup(Obj::cdynamo_resume_make_function);
  if (!helper) return t_.failFromPython("cdynamo._resume.make_function");
  Ref self_cells = Ref::steal(PyList_New(0));
  if (!self_cells) return t_.failFromPython("a function's closure");
  for (size_t i = 0; i < fp.closure.size(); ++i) {
    const ValuePtr& c = fp.closure[i];
    const Cell* cell = c ? c->get<Cell>() : nullptr;
    if (!cell || cell->outer || cell->contents != fv || memo_slot_.count(c.get())) continue;
    empty_cells_.insert(c.get());
    Ref index = Ref::steal(PyLong_FromSize_t(i));
    if (!index || PyList_Append(self_cells.get(), index.get()) < 0) return t_.failFromPython("a function's closure");
  }
  std::vector<runtime::OutputPlan> args(8);
  auto optional = [&](size_t i, const ValuePtr& part) -> Done {
    if (part) return plan(part, &args[i]);
    args[i] = runtime::OutputPlan::constant(Py_None);
    return {};
  };
  args[0] = runtime::OutputPlan::constant(fp.code.get());
  args[1] = runtime::OutputPlan::constant(fp.globals.get());
  args[2] = runtime::OutputPlan::constant(fp.qualname.get());
  if (Done d = optional(3, fp.defaults); !d) return d;
  if (Done d = optional(4, fp.kwdefaults); !d) return d;
  std::vector<runtime::OutputPlan> cells;
  if (Done d = planAll(fp.closure, &cells); !d) return d;
  args[5] = P::Tuple{std::move(cells)};
  if (Done d = optional(6, fp.attrs); !d) return d;
  Ref cells_tuple = Ref::steal(PyList_AsTuple(self_cells.get()));
  if (!cells_tuple) return t_.failFromPython("a function's closure");
  args[7] = runtime::OutputPlan::constant(cells_tuple.get());
  out->step = P::Call{Ref::borrow(helper), std::move(args)};
  return {};
}


}  // namespace cdynamo::trace
