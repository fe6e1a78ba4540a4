// Python's builtins, modelled on symbolic values: the builtin rows of the callable table
// (callables.h), recognised by identity, never by name. Pure builtins on constants run for
// real, so their results and errors are CPython's own; the others have a handler here.
#include <algorithm>
#include <cstring>
#include <string>

#include "support/lookup.h"
#include "trace/engine/graph_calls.h"
#include "trace/engine/scalars.h"
#include "trace/kinds/iterator.h"
#include "trace/kinds/module.h"
#include "trace/kinds/namespace.h"
#include "trace/kinds/ndarray.h"
#include "trace/kinds/object.h"
#include "trace/kinds/set.h"
#include "trace/protocol/attributes.h"
#include "trace/protocol/callables.h"
#include "trace/protocol/calls.h"
#include "trace/protocol/constants.h"
#include "trace/protocol/container_methods.h"
#include "trace/protocol/operators.h"
#include "trace/tracer.h"

namespace cdynamo::trace {

using graph::NodeOp;
using guards::LoadKind;

namespace {

ValuePtr constInt(long v) { return Value::constant(Ref::steal(PyLong_FromLong(v)).get()); }

// A pure builtin called for real on arguments made of constants (key=len included);
// NotHandled when one is not.
Result<ValuePtr> runPure(Tracer& t, PyObject* f, const char* which, Args& args, Kwargs& kwargs) {
  Ref pargs = Ref::steal(PyTuple_New(static_cast<Py_ssize_t>(args.size())));
  if (!pargs) return t.failFromPython(std::string(which) + "()");
  bool materialized = true;
  // An iterator argument is a real iterator of its type over the items it has left; its
  // counter says afterwards how many the call took.
  std::vector<Ref> counters(args.size());
  for (size_t i = 0; i < args.size() && materialized; ++i) {
    if (const Iterator* it = args[i]->get<Iterator>()) {
      Ref items = it->lazy() ? Ref() : toPython(t, Value::tuple(std::vector<ValuePtr>(
                                                         it->items.begin() + static_cast<std::ptrdiff_t>(std::min(it->pos, it->items.size())),
                                                         it->items.end())));
      Ref pair = items && !t.iterators().stale(args[i].get()) ? realIterator(it->type.get(), items.get()) : Ref();
      if (!pair) {
        materialized = false;
        break;
      }
      counters[i] = Ref::borrow(PyTuple_GET_ITEM(pair.get(), 1));
      PyTuple_SET_ITEM(pargs.get(), i, Ref::borrow(PyTuple_GET_ITEM(pair.get(), 0)).release());
      continue;
    }
    Ref a = toPython(t, args[i]);
    if (!a || (args[i]->is(Kind::Callable) && !PyCFunction_Check(a.get()) && !PyType_Check(a.get()))) {
      materialized = false;
      break;
    }
    PyTuple_SET_ITEM(pargs.get(), i, a.release());
  }
  Ref kw;
  if (materialized && !kwargs.empty()) {
    kw = Ref::steal(PyDict_New());
    if (!kw) return t.failFromPython(std::string(which) + "()");
    for (auto& [k, v] : kwargs) {
      Ref a = toPython(t, v);
      if (!a || (v->is(Kind::Callable) && !PyCFunction_Check(a.get()) && !PyType_Check(a.get()))) {
        materialized = false;
        break;
      }
      if (PyDict_SetItem(kw.get(), k.get(), a.get()) < 0) return t.failFromPython(std::string(which) + "()");
    }
  }
  if (!materialized) return notHandled();
  // What the call takes of an iterator argument, read from its counter.
  auto itemsLeft = [](PyObject* counter) -> Py_ssize_t {
    Py_ssize_t n = PyObject_LengthHint(counter, -1);
    if (n < 0) PyErr_Clear();
    return n;
  };
  std::vector<Py_ssize_t> left_before(args.size(), -1);
  for (size_t i = 0; i < args.size(); ++i)
    if (counters[i]) left_before[i] = itemsLeft(counters[i].get());
  Ref r = Ref::steal(PyObject_Call(f, pargs.get(), kw.get()));
  if (!r) return t.raisePython();
  for (size_t i = 0; i < args.size(); ++i) {  // consumed as the real call did
    const Iterator* it = args[i]->get<Iterator>();
    if (!it || !counters[i]) continue;
    Py_ssize_t before = left_before[i], after = itemsLeft(counters[i].get());
    if (before < 0 || after < 0 || after > before)
      return t.fail(std::string(which) + "() of an iterator: what it took is not known");
    const size_t taken = static_cast<size_t>(before - after);
    // Taking every item means the call also saw its end (sum, list, sorted, ...).
    if (taken == 0 && after != 0) continue;
    if (Done d = t.iterators().advance(args[i], it->pos + taken, after == 0); !d) return d.stop();
  }
  return fromPython(t, r.get());
}

// print(), input(), open(), exec(), eval(): effects outside the program.
Result<ValuePtr> builtinEffects(Tracer& t, PyObject*, const char* which, Args&, Kwargs&) {
  return t.fail(std::string(which) + "() has effects outside the program");
}

}  // namespace

PyObject* Tracer::standInId(const ValuePtr& v) {
  for (const auto& [value, obj] : stand_in_ids_)
    if (value == v) return obj.get();
  Ref obj = Ref::steal(PyBaseObject_Type.tp_alloc(&PyBaseObject_Type, 0));
  if (!obj) return nullptr;
  stand_in_ids_.emplace_back(v, std::move(obj));
  return stand_in_ids_.back().second.get();
}

namespace {

// id(x): an object read from the program has its real id, under a guard of its identity;
// a constant of the code and an object the trace made for real, theirs; a value made in
// the trace (a container, an object, a function) a stand-in that is the same for the
// same value, as a memo keyed by id() (copy.deepcopy) needs. A tensor's id would tie the
// entry to one tensor object.
Result<ValuePtr> builtinId(Tracer& t, PyObject*, const char*, Args& args, Kwargs& kwargs) {
  if (args.size() != 1 || !kwargs.empty()) return notHandled();
  const ValuePtr& v = args[0];
  if (v->is(Kind::Tensor)) return t.fail("id() of a tensor depends on which tensor object is passed");
  PyObject* obj = v->real();
  if (!obj && v->reg >= 0) {  // a container read from the program: the object it was wrapped from
    for (const auto& [o, wrapped] : t.wrappedObjects())
      if (wrapped == v) obj = o;
    if (!obj) return t.fail(std::string("id() of ") + describe(v) + " read from the program");
  }
  if (obj && v->reg >= 0) t.guards().checkIdentity(v->reg, obj);
  if (!obj) obj = t.standInId(v);
  if (!obj) return t.failFromPython("id()");
  Ref id = Ref::steal(PyLong_FromVoidPtr(obj));
  if (!id) return t.failFromPython("id()");
  return Value::constant(id.get());
}

Result<ValuePtr> builtinSuper(Tracer& t, PyObject*, const char*, Args& args, Kwargs&) { return makeSuper(t, args); }

// delattr(obj, name) with a constant name (objects.cpp deleteAttr).
Result<ValuePtr> builtinDelattr(Tracer& t, PyObject*, const char*, Args& args, Kwargs& kwargs) {
  PyObject* name = args.size() == 2 && kwargs.empty() ? args[1]->constant() : nullptr;
  if (!name || !PyUnicode_Check(name)) return t.fail("delattr() with a name that is not a constant string");
  if (Done d = deleteAttr(t, args[0], name); !d) return d.stop();
  return Value::constant(Py_None);
}

// globals(), locals(), vars(): not modelled.
Result<ValuePtr> builtinUnsupported(Tracer& t, PyObject*, const char* which, Args&, Kwargs&) {
  return t.fail(std::string(which) + "() is not supported yet");
}

Result<ValuePtr> builtinObject(Tracer& t, PyObject* f, const char* which, Args& args, Kwargs& kwargs) {
  if (args.empty() && kwargs.empty()) return newObject(t, f, {}, {});
  return builtinUnsupported(t, f, which, args, kwargs);
}

Result<ValuePtr> builtinSetattr(Tracer& t, PyObject* f, const char* which, Args& args, Kwargs& kwargs) {
  if (args.size() == 3 && args[1]->constant() && PyUnicode_Check(args[1]->constant())) {
    if (Done d = storeAttr(t, args[0], args[1]->constant(), args[2]); !d) return d.stop();
    return Value::constant(Py_None);
  }
  return builtinUnsupported(t, f, which, args, kwargs);
}

// len(): a container's size, a user object's __len__, a tensor's (a graph op), a module container's children.
// range() of symbolic ints (x.shape[0] under dynamic shapes, an int argument made a
// symbol): range needs their values, so each is specialized to the int it stands for, as
// torch._dynamo specializes it; int() of the SymInt makes its ShapeEnv record the guard
// (Eq(s, value)), which becomes one of the entry's shape guards. NotHandled when no
// argument is a symbolic int.
Result<ValuePtr> builtinRange(Tracer& t, PyObject* f, const char* which, Args& args, Kwargs& kwargs) {
  if (!kwargs.empty()) return notHandled();
  bool any = false;
  Args values;
  for (const ValuePtr& a : args) {
    if (!isScalarValue(t, a) || scalarType(t, a) != reinterpret_cast<PyObject*>(&PyLong_Type)) {
      values.push_back(a);
      continue;
    }
    static Ref& shapes = *new Ref();  // Note [Python references in statics] (support/pyref.h)
    if (!shapes) shapes = Ref::steal(PyImport_ImportModule("cdynamo._shapes"));
    Ref v = shapes ? Ref::steal(PyObject_CallMethod(shapes.get(), "specialize_int", "O",
                                                    t.graph().fake(a->as<Tensor>().node)))
                   : Ref();
    if (!v) return t.failFromPython("specializing a symbolic int for range()");
    if (v.get() == Py_None) return t.fail("range() of a value read from a tensor (Tensor.item())");
    values.push_back(Value::constant(v.get()));
    any = true;
  }
  if (!any) return notHandled();
  return runPure(t, f, which, values, kwargs);
}

Result<ValuePtr> builtinLen(Tracer& t, PyObject* f, const char* which, Args& args, Kwargs& kwargs) {
  auto is = [which](const char* n) { return strcmp(which, n) == 0; };
  if (!(is("len") && args.size() == 1 && kwargs.empty())) return notHandled();
  const ValuePtr& v = args[0];
  Result<ValuePtr> r = callDunder(t, v, interned(Str::dunder_len), {});
  if (!r.notHandled()) return r ? lenDunderResult(t, *r) : r;
  if (v->is(Kind::Module) && !isModuleContainer(v, interned(Str::dunder_len))) {  // a module class's own __len__
    r = callModuleDunder(t, v, interned(Str::dunder_len), {});
    if (!r.notHandled()) return r ? lenDunderResult(t, *r) : r;
  }
  if (v->is(Kind::Tuple) || v->is(Kind::List) || v->is(Kind::Set))
    return constInt(static_cast<long>(v->elements()->size()));
  if (const Dict* d = v->get<Dict>()) return constInt(static_cast<long>(d->values.size()));
  if (const DictView* view = v->get<DictView>()) return constInt(static_cast<long>(view->dict->as<Dict>().values.size()));
  if (v->is(Kind::Tensor)) {
    // Under a ShapeEnv the length is size 0 as x.shape[0] gives it (its symbol), as
    // torch._dynamo answers len(x): running len() on the fake would specialize it (Python's
    // len() makes Tensor.__len__'s SymInt an int, guarded to the size at hand). A 0-d
    // tensor goes to len() itself, which raises eager's TypeError.
    if (t.graph().symbolic() && !isScalarValue(t, v)) {
      Ref dim = Ref::steal(PyObject_CallMethod(t.graph().fake(v->get<Tensor>()->node), "dim", nullptr));
      if (!dim) return t.failFromPython("len() of a tensor");
      if (PyLong_AsLong(dim.get()) >= 1) {
        static PyObject* const size_name = PyUnicode_InternFromString("size");
        Result<ValuePtr> sizes = recordCall(t, NodeOp::CallMethod, size_name, {v}, {});
        if (!sizes) return sizes;
        if ((*sizes)->is(Kind::Tuple)) return (*sizes)->elements()->at(0);
        if ((*sizes)->is(Kind::Constant) && PyTuple_Check((*sizes)->constant()))
          return Value::constant(PyTuple_GET_ITEM((*sizes)->constant(), 0));
        return t.fail("len() of a tensor: its sizes are not a tuple");
      }
    }
    return recordCall(t, NodeOp::CallFunction, f, args, {});
  }
  if (isModuleContainer(v, interned(Str::dunder_len))) {
    std::vector<std::pair<Ref, ValuePtr>> children;
    if (Done d = moduleContainerItems(t, v, &children); !d) return d.stop();
    return constInt(static_cast<long>(children.size()));
  }
  return notHandled();
}

// isinstance() / issubclass() against a class or a tuple of them.
Result<ValuePtr> builtinIsinstance(Tracer& t, PyObject* f, const char* which, Args& args, Kwargs& kwargs) {
  auto is = [which](const char* n) { return strcmp(which, n) == 0; };
  if (!((is("isinstance") || is("issubclass")) && args.size() == 2)) return notHandled();
  PyObject* cls = args[1]->real();
  Ref cls_tuple;
  if (const Tuple* classes = args[1]->get<Tuple>()) {
    cls_tuple = Ref::steal(PyTuple_New(static_cast<Py_ssize_t>(classes->items.size())));
    if (!cls_tuple) return t.failFromPython(std::string(which) + "()");
    for (size_t i = 0; i < classes->items.size(); ++i) {
      PyObject* c = classes->items[i]->real();
      if (!c) return t.fail("isinstance() with a non-class");
      PyTuple_SET_ITEM(cls_tuple.get(), i, Ref::borrow(c).release());
    }
    cls = cls_tuple.get();
  }
  if (!cls) return t.fail(std::string(which) + "() with a non-class");
  int r;
  if (is("issubclass")) {
    if (!args[0]->real()) return t.fail("issubclass() of a non-class");
    r = PyObject_IsSubclass(args[0]->real(), cls);
  } else if (args[0]->real()) {
    r = PyObject_IsInstance(args[0]->real(), cls);
  } else {
    PyObject* type = typeOf(t, args[0]);
    if (!type) return t.fail("isinstance() of a value whose type is not known");
    r = PyObject_IsSubclass(type, cls);
  }
  if (r < 0) return t.failFromPython(std::string(which) + "()");
  return Value::constant(r ? Py_True : Py_False);
  
}

// type(): the type a value has when the graph runs.
Result<ValuePtr> builtinType(Tracer& t, PyObject* f, const char* which, Args& args, Kwargs& kwargs) {
  auto is = [which](const char* n) { return strcmp(which, n) == 0; };
  if (!(is("type") && args.size() == 1)) return notHandled();
  PyObject* type = typeOf(t, args[0]);
  if (!type) return t.fail("type() of a value whose type is not known");
  return Value::callable(type);
  
}

// callable().
Result<ValuePtr> builtinCallable(Tracer& t, PyObject* f, const char* which, Args& args, Kwargs& kwargs) {
  auto is = [which](const char* n) { return strcmp(which, n) == 0; };
  if (!(is("callable") && args.size() == 1)) return notHandled();
  const ValuePtr& v = args[0];
  bool c = v->is(Kind::Callable) || v->is(Kind::BoundMethod) || v->is(Kind::NamedMethod) ||
           v->is(Kind::Function) || v->is(Kind::Module) || (v->real() && PyCallable_Check(v->real()));
  if (const NewObject* o = v->get<NewObject>()) {
    Ref call = Ref::steal(PyObject_GetAttrString(o->cls.get(), "__call__"));
    PyErr_Clear();
    c = call.get() != nullptr;
  }
  return Value::constant(c ? Py_True : Py_False);
  
}

// vars(obj): the __dict__ of an object (one value with its attributes: objects.cpp,
// namespaces.cpp). vars() without an argument (the frame's locals) is not modelled.
Result<ValuePtr> builtinVars(Tracer& t, PyObject*, const char*, Args& args, Kwargs& kwargs) {
  if (args.size() != 1 || !kwargs.empty()) return notHandled();
  const ValuePtr& v = args[0];
  if (v->is(Kind::Namespace) || v->is(Kind::NewObject) || v->is(Kind::Object)) return getAttr(t, v, interned(Str::dunder_dict));
  return notHandled();
}

// tuple() / list() / set() / frozenset() of an iterable.
Result<ValuePtr> builtinCollection(Tracer& t, PyObject* f, const char* which, Args& args, Kwargs& kwargs) {
  auto is = [which](const char* n) { return strcmp(which, n) == 0; };
  if (!((is("tuple") || is("list") || is("set") || is("frozenset")) && args.size() <= 1 && kwargs.empty())) return notHandled();
  if (is("frozenset")) {
    if (!args.empty()) return makeFrozenSet(t, args[0]);
    Ref empty = Ref::steal(PyFrozenSet_New(nullptr));
    if (!empty) return t.failFromPython("frozenset()");
    return Value::constant(empty.get());
  }
  if (is("set") && !args.empty())
    if (PyObject* shadow = realSetOperand(args[0])) {
      // set(s) of a set made in the trace copies its real table, as eagerly (containers.cpp).
      Ref real = Ref::steal(PySet_New(shadow));
      if (!real) PyErr_Clear();
      if (ValuePtr v = real ? setFromReal(real.get(), {args[0]}) : nullptr) return v;
    }
  std::vector<ValuePtr> items;
  if (!args.empty())
    if (Done d = iterate(t, args[0], &items); !d) return d.stop();
  if (is("tuple")) return Value::tuple(std::move(items));
  if (is("list")) return Value::list(std::move(items));
  ValuePtr s = Value::set({});
  std::vector<ValuePtr> a(1);
  std::vector<std::pair<Ref, ValuePtr>> kw;
  for (const ValuePtr& v : items) {
    a[0] = v;
    if (Result<ValuePtr> r = callContainerMethod(t, s, interned(Str::add), a, kw); !r) return r;
  }
  return s;
}

// dict(...).
Result<ValuePtr> builtinDict(Tracer& t, PyObject* f, const char* which, Args& args, Kwargs& kwargs) {
  auto is = [which](const char* n) { return strcmp(which, n) == 0; };
  if (!(is("dict"))) return notHandled();
  if (args.size() > 1) return raiseConstructorArgumentError(t, f, args.size(), kwargs);
  ValuePtr d = Value::dict(f, {}, {});
  if (Result<ValuePtr> r = callContainerMethod(t, d, interned(Str::update), args, kwargs); !r) return r;
  return d;
  
}

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

// sum(iterable[, start]): the items added with the + operator.
Result<ValuePtr> builtinSum(Tracer& t, PyObject* f, const char* which, Args& args, Kwargs& kwargs) {
  auto is = [which](const char* n) { return strcmp(which, n) == 0; };
  if (!(is("sum") && !args.empty() && args.size() <= 2)) return notHandled();
  std::vector<ValuePtr> items;
  if (Done d = iterate(t, args[0], &items); !d) return d.stop();
  Result<ValuePtr> acc = args.size() == 2 ? args[1] : constInt(0);
  for (auto& [k, v] : kwargs) {
    if (PyUnicode_CompareWithASCIIString(k.get(), "start") != 0) return t.fail("sum() keyword");
    acc = v;
  }
  for (const ValuePtr& v : items) {
    acc = binaryOp(t, bytecode::BinaryOp::Add, *acc, v);
    if (!acc) return acc;
  }
  return acc;
  
}

// min() / max() / sorted() of constants (run for real), all() / any() by truth value.
// sorted(iterable, *, key=None, reverse=False): the key of each item computed in the trace
// (key called on each item in order, as sorted does), the order decided by the real sort of
// the keys (stable, Python's own comparisons), which must be constants; the items may be anything.
Result<ValuePtr> builtinSorted(Tracer& t, PyObject* f, Args& args, Kwargs& kwargs) {
  if (args.size() != 1) return t.raiseNew(PyExc_TypeError, "sorted expected 1 argument");
  ValuePtr key;
  ValuePtr reverse = Value::constant(Py_False);
  for (auto& [k, v] : kwargs) {
    if (PyUnicode_CompareWithASCIIString(k.get(), "key") == 0) key = v;
    else if (PyUnicode_CompareWithASCIIString(k.get(), "reverse") == 0) reverse = v;
    else return t.raiseNew(PyExc_TypeError, std::string("'") + PyUnicode_AsUTF8(k.get()) + "' is an invalid keyword argument for sort()");
  }
  if (key && key->isNone()) key = nullptr;
  if (!reverse->is(Kind::Constant)) return t.fail("sorted(reverse=) that is not a constant");
  std::vector<ValuePtr> items;
  if (Done d = iterate(t, args[0], &items); !d) return d.stop();
  Ref keys = Ref::steal(PyList_New(0));
  if (!keys) return t.failFromPython("sorted()");
  for (const ValuePtr& item : items) {
    ValuePtr k = item;
    if (key) {
      Result<ValuePtr> r = call(t, key, {item}, {});
      if (!r) return r;
      k = r.take();
    }
    Ref real = toPython(t, k);
    if (!real) return t.fail("sorted() by keys that are not constants depends on their values");
    if (PyList_Append(keys.get(), real.get()) < 0) return t.failFromPython("sorted()");
  }
  // The order: sorted(range(n), key=keys.__getitem__, reverse=reverse), run for real.
  Ref indices = Ref::steal(PyObject_CallFunction(reinterpret_cast<PyObject*>(&PyRange_Type), "n",
                                                 static_cast<Py_ssize_t>(items.size())));
  Ref getitem = keys ? Ref::steal(PyObject_GetAttrString(keys.get(), "__getitem__")) : Ref();
  Ref pkw = Ref::steal(PyDict_New());
  if (!indices || !getitem || !pkw || PyDict_SetItemString(pkw.get(), "key", getitem.get()) < 0 ||
      PyDict_SetItemString(pkw.get(), "reverse", reverse->constant()) < 0)
    return t.failFromPython("sorted()");
  Ref pargs = Ref::steal(PyTuple_Pack(1, indices.get()));
  if (!pargs) return t.failFromPython("sorted()");
  Ref order = Ref::steal(PyObject_Call(f, pargs.get(), pkw.get()));
  if (!order) return t.raisePython();  // keys that do not compare: the TypeError eager raises
  std::vector<ValuePtr> out;
  for (Py_ssize_t i = 0; i < PyList_GET_SIZE(order.get()); ++i)
    out.push_back(items[static_cast<size_t>(PyLong_AsSsize_t(PyList_GET_ITEM(order.get(), i)))]);
  return Value::list(std::move(out));
}

// min() / max() over 0-d tensors of one dtype. Python's max keeps the first item and takes
// each later one that compares greater (min: less), so a pair is torch.where(b > a, b, a)
// (b < a for min), folded from the left: eager's value and dtype, NaN and ties included.
// Eager returns that item itself: the graph also computes which item won (the same fold
// over the items' positions, torch.where(b > a, i, k)), and the result is a choice
// (GraphBuilder::markChoice): its value is the where() node's, and where the object
// matters it is the winning item itself (rebuilt from the graph's outputs; an identity test
// or an in-place change breaks the graph). Not modelled (NotHandled): an item that requires
// grad (see below), a larger tensor (eager's comparison raises), tensors of different
// dtypes, bool or complex ones, and a number among the items (eager returns the number
// itself when it wins: a type no graph gives).
Result<ValuePtr> minMaxOfTensors(Tracer& t, bool is_max, const std::vector<ValuePtr>& items) {
  if (items.size() == 1 && items[0]->is(Kind::Tensor)) return items[0];  // one item: never compared
  if (items.size() < 2) return notHandled();
  PyObject* bool_dtype = lookup(Obj::torch_bool);
  PyObject* where = lookup(Obj::torch_where);
  PyObject* compare = lookup(is_max ? Obj::operator_gt : Obj::operator_lt);
  if (!bool_dtype || !where || !compare) return t.failFromPython("min()/max() of tensors");
  Ref dtype;
  std::vector<int> nodes;
  for (const ValuePtr& v : items) {
    const Tensor* tensor = v->get<Tensor>();
    if (!tensor || isScalarValue(t, v)) return notHandled();
    PyObject* fake = t.graph().fake(tensor->node);
    Ref d = Ref::steal(PyObject_GetAttrString(fake, "dtype"));
    Ref dim = d ? Ref::steal(PyObject_CallMethod(fake, "dim", nullptr)) : Ref();
    Ref cx = dim ? Ref::steal(PyObject_GetAttrString(d.get(), "is_complex")) : Ref();
    if (!cx) return t.failFromPython("min()/max() of tensors");
    if (PyLong_AsLong(dim.get()) != 0 || cx.get() == Py_True || d.get() == bool_dtype) return notHandled();
    // An item that takes part in autograd: where() would send the losing items a zero
    // gradient (their .grad zeros) where eager's max, returning the winner itself, leaves
    // them out of the backward graph (.grad None). Not modelled.
    Ref rg = Ref::steal(PyObject_GetAttrString(fake, "requires_grad"));
    if (!rg) return t.failFromPython("min()/max() of tensors");
    if (rg.get() == Py_True) return notHandled();
    if (dtype && dtype.get() != d.get()) return notHandled();
    dtype = std::move(d);
    nodes.push_back(tensor->node);
  }
  ValuePtr acc = items[0];
  ValuePtr index = constInt(0);
  for (size_t i = 1; i < items.size(); ++i) {
    Result<ValuePtr> takes = recordCall(t, graph::NodeOp::CallFunction, compare, {items[i], acc}, {});
    if (!takes) return takes;
    Result<ValuePtr> r = recordCall(t, graph::NodeOp::CallFunction, where, {*takes, items[i], acc}, {});
    if (!r) return r;
    Result<ValuePtr> won =
        recordCall(t, graph::NodeOp::CallFunction, where, {takes.take(), constInt(static_cast<long>(i)), index}, {});
    if (!won) return won;
    acc = r.take();
    index = won.take();
    if (const Tensor* w = index->get<Tensor>()) t.graph().markBookkeeping(w->node);
  }
  const Tensor* out = acc->get<Tensor>();
  const Tensor* which = index->get<Tensor>();
  if (!out || !which) return t.fail("min()/max() of tensors: where() did not give tensors");
  t.graph().markChoice(out->node, std::move(nodes), which->node);
  return acc;
}

// min() / max() of numbers some of which are symbolic (a size, a symbolic int argument, a
// Tensor.item()): torch.sym_max / torch.sym_min folded from the left, as torch._dynamo
// records them, so the result stays symbolic and no guard fixes which item won (for ints
// only the value matters, not which object won). Floats too, all of them floats: run on
// numbers, torch.sym_max(a, b) is max(a, b), the same order (NaN kept where max keeps it).
// NotHandled unless every item is a constant or a scalar of the graph of one type, int
// (not bool: max(True, 0) is True) or float -- max(3, 2.5) is the int 3, which sym_max
// would make 3.0 -- and one is symbolic.
Result<ValuePtr> minMaxOfSymbolic(Tracer& t, bool is_max, const std::vector<ValuePtr>& items) {
  if (items.size() < 2) return notHandled();
  bool symbolic = false;
  PyTypeObject* type = nullptr;
  for (const ValuePtr& v : items) {
    PyTypeObject* item_type;
    if (v->is(Kind::Constant)) {
      item_type = Py_TYPE(v->constant());
    } else {
      if (!isScalarValue(t, v)) return notHandled();
      item_type = reinterpret_cast<PyTypeObject*>(scalarType(t, v));
      symbolic = true;
    }
    if ((item_type != &PyLong_Type && item_type != &PyFloat_Type) || (type && item_type != type)) return notHandled();
    type = item_type;
  }
  if (!symbolic) return notHandled();
  PyObject* target = lookup(is_max ? Obj::torch_sym_max : Obj::torch_sym_min);
  if (!target) return t.failFromPython("torch.sym_max");
  ValuePtr acc = items[0];
  for (size_t i = 1; i < items.size(); ++i) {
    Result<ValuePtr> r = recordCall(t, graph::NodeOp::CallFunction, target, {acc, items[i]}, {});
    if (!r) return r;
    acc = r.take();
  }
  return acc;
}

// min() / max() of numbers, some symbolic, that minMaxOfSymbolic leaves (a SymBool such as
// `x.shape[0] > 3`, ints mixed with floats): Python's own fold, each later item taken when it
// compares greater (min: less) than the one kept, every comparison's truth fixed by a shape
// guard as a branch on it is. The result is the very item eager returns, of its type
// (max(True, 0) is True, max(3, 2.5) the int 3). A SymBool item is made its truth first
// (it compares as the bool it is). NotHandled if an item is not a number.
Result<ValuePtr> minMaxOfNumbers(Tracer& t, bool is_max, std::vector<ValuePtr> items) {
  if (items.size() < 2) return notHandled();
  for (ValuePtr& v : items) {
    if (v->is(Kind::Constant)) {
      PyTypeObject* type = Py_TYPE(v->constant());
      if (type != &PyLong_Type && type != &PyFloat_Type && type != &PyBool_Type) return notHandled();
      continue;
    }
    if (!isScalarValue(t, v)) return notHandled();
    if (scalarType(t, v) == reinterpret_cast<PyObject*>(&PyBool_Type)) {
      Result<bool> truth = truthValue(t, v);
      if (!truth) return truth.stop();
      v = Value::constant(*truth ? Py_True : Py_False);
    }
  }
  ValuePtr acc = items[0];
  for (size_t i = 1; i < items.size(); ++i) {
    Result<ValuePtr> takes = compareOp(t, is_max ? Py_GT : Py_LT, items[i], acc);
    if (!takes) return takes;
    Result<bool> truth = truthValue(t, *takes);
    if (!truth) return truth.stop();
    if (*truth) acc = items[i];
  }
  return acc;
}

Result<ValuePtr> builtinReduce(Tracer& t, PyObject* f, const char* which, Args& args, Kwargs& kwargs) {
  auto is = [which](const char* n) { return strcmp(which, n) == 0; };
  if (is("sorted")) return builtinSorted(t, f, args, kwargs);
  if (!((is("min") || is("max") || is("sorted") || is("all") || is("any")) && !args.empty() && kwargs.empty())) return notHandled();
  if ((is("all") || is("any")) && args.size() == 1) {
    // Item by item, stopping at the first that decides: what is left of an iterator (or a
    // generator's frame) stays untaken, as in Python.
    const bool want = is("any");
    Result<ValuePtr> it = getIter(t, args[0]);
    if (!it) return it;
    while (true) {
      ValuePtr v;
      if (Done d = nextItem(t, *it, &v); !d) return d.stop();
      if (!v) return Value::constant(want ? Py_False : Py_True);
      Result<bool> truth = truthValue(t, v);
      if (!truth) return truth.stop();
      if (*truth == want) return Value::constant(want ? Py_True : Py_False);
    }
  }
  std::vector<ValuePtr> items;
  if (args.size() == 1) {
    if (Done d = iterate(t, args[0], &items); !d) return d.stop();
  } else {
    items = args;
  }
  if (is("all") || is("any")) {
    bool want = is("any");
    for (const ValuePtr& v : items) {
      Result<bool> truth = truthValue(t, v);
      if (!truth) return truth.stop();
      if (*truth == want) return Value::constant(want ? Py_True : Py_False);
    }
    return Value::constant(want ? Py_False : Py_True);
  }
  bool constants = true;
  for (const ValuePtr& v : items) constants = constants && v->is(Kind::Constant);
  if (constants) {
    std::vector<ValuePtr> one{Value::tuple(items)};
    Ref tup = Ref::steal(PyTuple_New(static_cast<Py_ssize_t>(items.size())));
    if (!tup) return t.failFromPython(std::string(which) + "()");
    for (size_t i = 0; i < items.size(); ++i) PyTuple_SET_ITEM(tup.get(), i, Ref::borrow(items[i]->constant()).release());
    std::vector<ValuePtr> cargs{Value::constant(tup.get())};
    std::vector<std::pair<Ref, ValuePtr>> nokw;
    Result<ValuePtr> r = runPure(t, f, which, cargs, nokw);
    if (!r.notHandled()) return r;
  }
  if (is("min") || is("max")) {
    Result<ValuePtr> sym = minMaxOfSymbolic(t, is("max"), items);
    if (!sym.notHandled()) return sym;
    Result<ValuePtr> r = minMaxOfTensors(t, is("max"), items);
    if (!r.notHandled()) return r;
    Result<ValuePtr> n = minMaxOfNumbers(t, is("max"), items);
    if (!n.notHandled()) return n;
  }
  return t.fail(std::string(which) + "() over tensors depends on their values");
}

// getattr(obj, name[, default]) / hasattr(obj, name) with a constant name.
Result<ValuePtr> builtinAttribute(Tracer& t, PyObject*, const char* which, Args& args, Kwargs&) {
  auto is = [which](const char* n) { return strcmp(which, n) == 0; };
  PyObject* attr_name = args.size() >= 2 ? args[1]->constant() : nullptr;
  if (attr_name && !PyUnicode_Check(attr_name)) attr_name = nullptr;
  // A NewObject's attribute: in its __dict__ or its class.
  auto newObjectHas = [&](const NewObject& o) {
    return o.attrs->as<Dict>().findKey(attr_name) >= 0 || PyObject_HasAttr(o.cls.get(), attr_name);
  };
  if (is("getattr") && (args.size() == 2 || args.size() == 3) && attr_name) {
    if (args.size() == 3) {
      // With a default, an absent attribute is not an error: only constants' and
      // modules' attributes can be probed without tracing a read.
      if (probesByLookup(args[0])) {
        Result<ValuePtr> v = getAttr(t, args[0], attr_name);
        if (v || !takeAttributeError(t, v)) return v;
        return args[2];
      } else if (args[0]->real()) {
        int has = PyObject_HasAttr(args[0]->real(), attr_name);
        if (!has) return args[2];
      } else if (const NewObject* o = args[0]->get<NewObject>()) {
        if (!newObjectHas(*o)) return args[2];
      } else if (args[0]->is(Kind::Namespace)) {
        if (!namespaceHasAttr(args[0], attr_name)) return args[2];
      } else if (const Tuple* tup = args[0]->get<Tuple>(); tup && tup->namedtuple && args[0]->reg < 0) {
        // A namedtuple made in the trace: its fields, its __dict__, its class.
        bool has = PyObject_HasAttr(tup->namedtuple.get(), attr_name) ||
                   (tup->attrs && tup->attrs->as<Dict>().findKey(attr_name) >= 0);
        if (!has) return args[2];
      }
    }
    return getAttr(t, args[0], attr_name);
  }
  if (is("hasattr") && args.size() == 2 && attr_name) {
    if (probesByLookup(args[0])) {
      Result<bool> has = objectHasAttr(t, args[0], attr_name);
      if (!has) return has.stop();
      return Value::constant(*has ? Py_True : Py_False);
    }
    PyObject* probe = args[0]->real();
    if (args[0]->is(Kind::Tensor)) {
      if (isScalarValue(t, args[0])) {
        probe = scalarType(t, args[0]);
      } else {
        // The tensor's class (pinned by the tensor check or known from the op that made
        // it), then its own __dict__: never the fake tensor, whose class has attributes
        // of its own (fake_mode, ...) and whose __dict__ is not the real one's.
        PyObject* type = typeOf(t, args[0]);
        if (!type || !PyType_Check(type)) return t.fail("hasattr() on a tensor of unknown class");
        PyTypeObject* tp = reinterpret_cast<PyTypeObject*>(type);
        if (_PyType_Lookup(tp, interned(Str::dunder_getattr)))
          return t.fail("hasattr() on a tensor whose class defines __getattr__ is not supported yet");
        if (_PyType_Lookup(tp, attr_name)) return Value::constant(Py_True);
        // A tensor made in the trace has no attribute of its own (setting one is not
        // traced); a graph input is guarded to keep (or still lack) the one it has.
        int node = args[0]->as<Tensor>().node;
        int reg = t.inputRegOf(node);
        if (reg < 0) return Value::constant(Py_False);
        PyObject* real = t.isSubclassInput(node) ? t.subclassInputObject(node) : t.exampleOf(node);
        if (!real) return t.fail("hasattr() on a tensor input whose object is unknown");
        PyObject** dictptr = _PyObject_GetDictPtr(real);
        PyObject* own = dictptr && *dictptr ? PyDict_GetItemWithError(*dictptr, attr_name) : nullptr;
        if (!own && PyErr_Occurred()) return t.failFromPython("hasattr() on a tensor");
        if (own) {
          t.load(LoadKind::InstanceDict, reg, 0, attr_name, t.guards().sourceName(reg) + "." + PyUnicode_AsUTF8(attr_name));
          return Value::constant(Py_True);
        }
        t.guards().checkNoInstanceAttr(reg, attr_name);
        return Value::constant(Py_False);
      }
    }
    if (const NewObject* o = args[0]->get<NewObject>()) return Value::constant(newObjectHas(*o) ? Py_True : Py_False);
    if (args[0]->is(Kind::Namespace)) return Value::constant(namespaceHasAttr(args[0], attr_name) ? Py_True : Py_False);
    if (!probe) {
      // A value made in the trace (a partial, a function, a list, a namedtuple...): its
      // type's attributes, and a function's own.
      PyObject* type = typeOf(t, args[0]);
      if (!type || !PyType_Check(type)) return t.fail("hasattr() on a value that cannot be probed");
      bool has = _PyType_Lookup(reinterpret_cast<PyTypeObject*>(type), attr_name) != nullptr;
      if (!has && args[0]->is(Kind::Tuple) && args[0]->reg >= 0 && reinterpret_cast<PyTypeObject*>(type)->tp_dictoffset != 0)
        return t.fail("hasattr() on the __dict__ of a tuple subclass instance from the program is not supported yet");
      if (const Function* f = args[0]->get<Function>(); f && f->attrs) has = has || f->attrs->as<Dict>().findKey(attr_name) >= 0;
      if (const Tuple* tup = args[0]->get<Tuple>(); tup && tup->attrs) has = has || tup->attrs->as<Dict>().findKey(attr_name) >= 0;
      return Value::constant(has ? Py_True : Py_False);
    }
    if (Result<ValuePtr> fa = guardedFunctionAttr(t, args[0], attr_name); !fa.notHandled()) {
      if (fa) return Value::constant(Py_True);
      if (!takeAttributeError(t, fa)) return fa.stop();
      return Value::constant(Py_False);
    }
    int r = PyObject_HasAttr(probe, attr_name);
    return Value::constant(r ? Py_True : Py_False);
  }
  return notHandled();
}

// format(obj) / format(obj, ""): a user object's __format__, object's being str(obj).
Result<ValuePtr> builtinFormat(Tracer& t, PyObject*, const char*, Args& args, Kwargs& kwargs) {
  if (args.empty() || args.size() > 2 || !kwargs.empty()) return notHandled();
  if (args.size() == 2) {
    PyObject* spec = args[1]->constant();
    if (!spec || !PyUnicode_Check(spec) || PyUnicode_GET_LENGTH(spec) != 0) return notHandled();
  }
  return userObjectFormat(t, args[0], 0);
}

Result<ValuePtr> builtinIter(Tracer& t, PyObject*, const char*, Args& args, Kwargs&) {
  if (args.size() == 1) return getIter(t, args[0]);
  return notHandled();
}

// float() / int() / bool() / abs() / pow() / divmod() / round() / str() of a tensor: a value
// read from it (scalars.h), a graph op, or a data-dependent read that stops the trace.
Result<ValuePtr> builtinOfTensor(Tracer& t, PyObject* f, const char* which, Args& args, Kwargs& kwargs) {
  auto is = [which](const char* n) { return strcmp(which, n) == 0; };
  if (is("bool") && args.size() == 1 && kwargs.empty() && !args[0]->is(Kind::Tensor)) {
    Result<bool> truth = truthValue(t, args[0]);  // __bool__, __len__, a container's size, ...
    if (!truth) return truth.stop();
    return Value::constant(*truth ? Py_True : Py_False);
  }
  if (args.size() == 1 && kwargs.empty() && args[0]->is(Kind::NdArray)) {
    if (is("abs")) return ndarrayOperator(t, "abs", {args[0]});
    if (is("float") || is("int") || is("bool")) return t.fail(std::string(which) + "() of a numpy array reads its value (data-dependent)");
  }
  if ((is("str") || is("repr")) && args.size() == 1 && kwargs.empty())
    if (Result<ValuePtr> s = userObjectStr(t, args[0], is("repr")); !s.notHandled()) return s;
  if (args.empty() || !args[0]->is(Kind::Tensor)) return notHandled();
  if (is("str")) {
    if (args.size() == 1) return t.fail("str() of a tensor reads its value");
    return notHandled();
  }
  if ((is("float") || is("int") || is("bool")) && args.size() == 1 && kwargs.empty())
    return readTensorValue(t, args[0], which);  // scalars.h
  if (is("abs")) {
    PyObject* abs = lookup(Obj::operator_abs);
    if (!abs) return t.failFromPython("operator.abs");
    return recordCall(t, NodeOp::CallFunction, abs, args, {});
  }
  if (is("pow") && args.size() == 2) return binaryOp(t, bytecode::BinaryOp::Power, args[0], args[1]);
  if (is("round") && args.size() == 1) return recordCall(t, NodeOp::CallFunction, f, args, {});
  return t.fail(std::string(which) + "() of a tensor reads its value (data-dependent)");
  
}

// Every builtin the tracer knows, by name; pure ones run for real on constants first.
const std::vector<BuiltinRow> kBuiltinRows = {
    {"abs", {"abs", builtinOfTensor, true}},
    {"all", {"all", builtinReduce, true}},
    {"any", {"any", builtinReduce, true}},
    {"ascii", {"ascii", nullptr, true}},
    {"bin", {"bin", nullptr, true}},
    {"bool", {"bool", builtinOfTensor, true}},
    {"callable", {"callable", builtinCallable, true}},
    {"chr", {"chr", nullptr, true}},
    {"complex", {"complex", nullptr, true}},
    {"delattr", {"delattr", builtinDelattr, false}},
    {"dict", {"dict", builtinDict, false}},
    {"divmod", {"divmod", builtinOfTensor, true}},
    {"enumerate", {"enumerate", builtinEnumerate, false}},
    {"eval", {"eval", builtinEffects, false}},
    {"exec", {"exec", builtinEffects, false}},
    {"filter", {"filter", builtinMapFilter, false}},
    {"float", {"float", builtinOfTensor, true}},
    {"format", {"format", builtinFormat, true}},
    {"frozenset", {"frozenset", builtinCollection, true}},
    {"getattr", {"getattr", builtinAttribute, false}},
    {"globals", {"globals", builtinUnsupported, false}},
    {"hasattr", {"hasattr", builtinAttribute, false}},
    {"hash", {"hash", nullptr, true}},
    {"hex", {"hex", nullptr, true}},
    {"id", {"id", builtinId, false}},
    {"input", {"input", builtinEffects, false}},
    {"int", {"int", builtinOfTensor, true}},
    {"isinstance", {"isinstance", builtinIsinstance, true}},
    {"issubclass", {"issubclass", builtinIsinstance, true}},
    {"iter", {"iter", builtinIter, false}},
    {"len", {"len", builtinLen, true}},
    {"list", {"list", builtinCollection, false}},
    {"locals", {"locals", builtinUnsupported, false}},
    {"map", {"map", builtinMapFilter, false}},
    {"max", {"max", builtinReduce, true}},
    {"min", {"min", builtinReduce, true}},
    {"next", {"next", builtinNext, false}},
    {"object", {"object", builtinObject, false}},
    {"oct", {"oct", nullptr, true}},
    {"open", {"open", builtinEffects, false}},
    {"ord", {"ord", nullptr, true}},
    {"pow", {"pow", builtinOfTensor, true}},
    {"print", {"print", builtinEffects, false}},
    {"range", {"range", builtinRange, true}},
    {"repr", {"repr", builtinOfTensor, true}},
    {"reversed", {"reversed", builtinReversed, false}},
    {"round", {"round", builtinOfTensor, true}},
    {"set", {"set", builtinCollection, false}},
    {"setattr", {"setattr", builtinSetattr, false}},
    {"slice", {"slice", nullptr, true}},
    {"sorted", {"sorted", builtinReduce, true}},
    {"str", {"str", builtinOfTensor, true}},
    {"sum", {"sum", builtinSum, true}},
    {"super", {"super", builtinSuper, false}},
    {"tuple", {"tuple", builtinCollection, true}},
    {"type", {"type", builtinType, true}},
    {"vars", {"vars", builtinVars, false}},
    {"zip", {"zip", builtinZip, false}},
};

}  // namespace

const std::vector<BuiltinRow>& builtinRows() { return kBuiltinRows; }

// Whether the builtin `f` takes no keyword arguments at all: a C function without
// METH_KEYWORDS, or a type whose text signature has positional-only parameters only
// (`(function, iterable, /)`). False when it takes some or it cannot be told.
bool takesNoKeywords(PyObject* f) {
  if (PyCFunction_Check(f)) return (PyCFunction_GET_FLAGS(f) & METH_KEYWORDS) == 0;
  if (!PyType_Check(f)) return false;
  Ref sig = Ref::steal(PyObject_GetAttrString(f, "__text_signature__"));
  if (!sig || !PyUnicode_Check(sig.get())) {
    PyErr_Clear();
    return false;
  }
  Py_ssize_t n = PyUnicode_GET_LENGTH(sig.get());
  return n >= 2 && PyUnicode_Tailmatch(sig.get(), Ref::steal(PyUnicode_FromString("/)")).get(), 0, n, 1) == 1;
}

Result<ValuePtr> callBuiltin(Tracer& t, PyObject* f, const CallableRow& row, Args& args, Kwargs& kwargs) {
  // A keyword CPython rejects is the program's TypeError, whatever the handler would accept.
  if (!kwargs.empty() && takesNoKeywords(f))
    return t.raiseNew(PyExc_TypeError, std::string(row.name) + "() takes no keyword arguments");
  if (row.pure) {
    Result<ValuePtr> r = runPure(t, f, row.name, args, kwargs);
    if (!r.notHandled()) return r;
  }
  if (row.handler) {
    Result<ValuePtr> r = row.handler(t, f, row.name, args, kwargs);
    if (!r.notHandled()) return r;
  }
  return t.fail(std::string(row.name) + "() with these arguments is not supported yet");
}

}  // namespace cdynamo::trace
