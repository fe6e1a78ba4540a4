// Output planning (outputs.h): one plan per value kind.
#include "support/lookup.h"
#include "support/set_table.h"
#include "trace/engine/outputs.h"
#include "trace/kinds/iterator.h"
#include "trace/protocol/operators.h"
#include "trace/tracer.h"

#include <algorithm>
#include <cstring>


namespace cdynamo::trace {


Done OutputPlanner::planAll(const std::vector<ValuePtr>& values, std::vector<runtime::OutputPlan>* out) {
  out->resize(values.size());
  for (size_t i = 0; i < values.size(); ++i)
    if (Done d = plan(values[i], &(*out)[i]); !d) return d;
  return {};
}

Done OutputPlanner::plan(const ValuePtr& given, runtime::OutputPlan* out) {
  namespace P = runtime::plan;
  ValuePtr v = given;
  if (const Object* o = v->get<Object>(); o && o->owned && v->reg < 0 && PyExceptionInstance_Check(o->obj.get()))
    v = exception_values_.emplace(o->obj.get(), v).first->second;
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
    case Kind::Context:  // a context object reachable twice is one object
      made_once = true;
      break;
    case Kind::Object:  // an exception made in the trace: one new object however often reached
      made_once = v->as<Object>().owned && PyExceptionInstance_Check(v->real());
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
    case Kind::Super:
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

Stop OutputPlanner::unsupported(const ValuePtr& v) {
  return t_.fail(std::string("returning ") + describe(v) + " is not supported yet");
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
        if (!as_subclass || !tensor_type) return t_.failFromPython("cdynamo._internal.tensor_subclass.as_subclass");
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
    case Kind::Tuple: return rebuildTuple(*this, v, out);
    case Kind::List: return rebuildList(*this, v, out);
    case Kind::Dict: return rebuildDict(*this, v, out);
    case Kind::Set: return rebuildSet(*this, v, out);
    case Kind::Module:
    case Kind::Callable:
    case Kind::PyModule:
    case Kind::Object:
      return rebuildProgramObject(*this, v, out);
    case Kind::NewObject: return rebuildNewObject(*this, v, out);
    case Kind::Namespace: return rebuildNamespace(*this, v, out);
    case Kind::Slice: {
      // slice(start, stop, step)
      const Slice& sl = v->as<Slice>();
      std::vector<runtime::OutputPlan> parts;
      if (Done d = planAll({sl.parts.begin(), sl.parts.end()}, &parts); !d) return d;
      out->step = P::Call{Ref::borrow(reinterpret_cast<PyObject*>(&PySlice_Type)), std::move(parts)};
      return {};
    }
    case Kind::Iterator: return rebuildIterator(*this, v, out);
    case Kind::BoundMethod: return rebuildBoundMethod(*this, v, out);
    case Kind::NamedMethod: return rebuildNamedMethod(*this, v, out);
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
    case Kind::DictView: return rebuildDictView(*this, v, out);
    case Kind::NdArray: return rebuildNdArray(*this, v, out);
    case Kind::SubclassTensor: return rebuildSubclassTensor(*this, v, out);
    case Kind::Partial: return rebuildPartial(*this, v, out);
    case Kind::Context:
      return tracer().contexts().planObject(v, out);
    case Kind::Null:
    case Kind::Super:
      break;
  }
  return unsupported(v);
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
  // A function made in the trace: cdynamo._internal.frame_rebuild.make_function(code, globals,
  // qualname, defaults, kwdefaults, closure, attrs, self_cells, annotations), its cells shared through
  // the memo. A cell not built yet that holds the function itself (`def g(): return g`)
  // is made empty and filled by make_function once the function exists (self_cells).
  PyObject* helper = lookup(Obj::cdynamo_resume_make_function);
  if (!helper) return t_.failFromPython("cdynamo._internal.frame_rebuild.make_function");
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
  std::vector<runtime::OutputPlan> args(9);
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
  if (Done d = optional(8, fp.annotations); !d) return d;
  out->step = P::Call{Ref::borrow(helper), std::move(args)};
  return {};
}


}  // namespace cdynamo::trace
