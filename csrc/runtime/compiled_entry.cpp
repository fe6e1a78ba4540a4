#include "runtime/compiled_entry.h"

#include "runtime/continuation.h"
#include "support/lookup.h"
#include "support/set_table.h"
#include "support/type_dict.h"

namespace cdynamo::runtime {
namespace {

// Fixed buffers keep the hit path free of allocation for frames of up to 256 guard
// registers / graph inputs (2 KiB of stack each).
constexpr int kInlineSlots = 256;

// `memo` holds (owned) the objects already built for plans with a memo slot: a value
// made in the trace that is reachable twice is rebuilt once (aliasing, self-reference).
// Owned, not borrowed: what a part was built into need not keep it (functools.partial of
// a partial flattens and drops the inner one), and a later read of the slot must still
// find that object, not freed memory. Builds return the built object, or null with an
// error set.
struct Builder {
  PyObject* graph_out;
  PyObject* const* regs;
  PyObject** memo;
  // A sequence item built after the effects (OutputPlan::after_effects): None holds its
  // place in the new tuple or list until then.
  struct Late {
    PyObject* seq;  // borrowed: part of the result being built
    Py_ssize_t index;
    bool tuple;
    const OutputPlan* plan;
  };
  std::vector<Late>* late = nullptr;  // null: build every plan now

  Ref build(const OutputPlan& p) {
    Ref r = std::visit([&](const auto& step) { return make(p, step); }, p.step);
    return r;
  }

  Ref remember(const OutputPlan& p, Ref obj) {
    if (obj && p.memo >= 0) {
      Py_XSETREF(memo[p.memo], Ref::borrow(obj.get()).release());
    }
    return obj;
  }

  // A new tuple or list of `items` built, recorded for `p` first when `remembered`.
  // `may_defer`: a Tuple or List plan's own items (the only places an after_effects plan is
  // left for later; a call's arguments, a named tuple's or a deque's items are built now).
  Ref sequence(bool tuple, const std::vector<OutputPlan>& items, const OutputPlan* remembered, bool may_defer = false) {
    Py_ssize_t n = static_cast<Py_ssize_t>(items.size());
    Ref seq = Ref::steal(tuple ? PyTuple_New(n) : PyList_New(n));
    if (!seq) return Ref();
    if (remembered) remember(*remembered, Ref::borrow(seq.get()));
    for (Py_ssize_t i = 0; i < n; ++i) {
      if (may_defer && late && items[static_cast<size_t>(i)].after_effects) {
        PyObject* none = Ref::borrow(Py_None).release();  // the slot's own reference, replaced in fillLate
        if (tuple)
          PyTuple_SET_ITEM(seq.get(), i, none);
        else
          PyList_SET_ITEM(seq.get(), i, none);
        late->push_back(Late{seq.get(), i, tuple, &items[static_cast<size_t>(i)]});
        continue;
      }
      Ref item = build(items[static_cast<size_t>(i)]);
      if (!item) return Ref();
      if (tuple)
        PyTuple_SET_ITEM(seq.get(), i, item.release());
      else
        PyList_SET_ITEM(seq.get(), i, item.release());
    }
    return seq;
  }

  Ref make(const OutputPlan&, const plan::Memo& m) {
    PyObject* o = memo[m.slot];
    if (!o) {
      PyErr_SetString(PyExc_RuntimeError, "cdynamo: cannot rebuild a container that contains itself");
      return Ref();
    }
    return Ref::borrow(o);
  }
  Ref make(const OutputPlan&, const plan::GraphOutput& g) {
    // A backend's artifact that returns fewer outputs than its graph has (or a plan that
    // disagrees with its graph) is an error, never a read past the sequence.
    if (!graph_out || g.index < 0 || g.index >= PySequence_Fast_GET_SIZE(graph_out)) {
      PyErr_Format(PyExc_RuntimeError,
                   "cdynamo: the compiled graph returned %zd outputs; output %d is needed (a backend's "
                   "compiled function must return every output of the graph it was given)",
                   graph_out ? PySequence_Fast_GET_SIZE(graph_out) : Py_ssize_t(0), g.index);
      return Ref();
    }
    return Ref::borrow(PySequence_Fast_GET_ITEM(graph_out, g.index));
  }
  Ref make(const OutputPlan&, const plan::Constant& c) { return c.obj.copy(); }
  Ref make(const OutputPlan&, const plan::Register& r) { return Ref::borrow(regs[r.reg]); }
  Ref make(const OutputPlan&, const plan::Tuple& t) { return sequence(true, t.items, nullptr, true); }
  Ref make(const OutputPlan&, const plan::NamedTuple& t) {
    Ref items = sequence(true, t.items, nullptr);
    if (!items) return Ref();
    // A structseq (torch.return_types.max) or a torch.Size, C types, are made from one
    // sequence; tuple.__new__ refuses them.
    PyObject* cls_dict = typeDict(reinterpret_cast<PyTypeObject*>(t.cls.get()));
    if (!PyType_HasFeature(reinterpret_cast<PyTypeObject*>(t.cls.get()), Py_TPFLAGS_HEAPTYPE) ||
        (cls_dict && PyDict_GetItem(cls_dict, interned(Str::n_sequence_fields))))
      return Ref::steal(PyObject_CallOneArg(t.cls.get(), items.get()));
    return Ref::steal(
        PyObject_CallMethod(reinterpret_cast<PyObject*>(&PyTuple_Type), "__new__", "OO", t.cls.get(), items.get()));
  }
  Ref make(const OutputPlan& p, const plan::List& l) { return sequence(false, l.items, &p, true); }
  Ref make(const OutputPlan& p, const plan::Deque& d) {
    Ref items = sequence(false, d.items, nullptr);
    if (!items) return Ref();
    return remember(p, Ref::steal(PyObject_CallFunctionObjArgs(d.cls.get(), items.get(),
                                                               d.maxlen ? d.maxlen.get() : Py_None, nullptr)));
  }
  Ref make(const OutputPlan& p, const plan::Dict& d) {
    Ref dict = Ref::steal(d.type.get() == reinterpret_cast<PyObject*>(&PyDict_Type) ? PyDict_New()
                          : d.default_factory ? PyObject_CallOneArg(d.type.get(), d.default_factory.get())
                                              : PyObject_CallNoArgs(d.type.get()));
    if (!dict) return Ref();
    remember(p, Ref::borrow(dict.get()));
    for (size_t i = 0; i < d.values.size(); ++i) {
      Ref v = build(d.values[i]);
      if (!v || PyObject_SetItem(dict.get(), d.keys[i].get(), v.get()) < 0) return Ref();
    }
    return dict;
  }
  Ref make(const OutputPlan& p, const plan::Set& s) {
    if (s.frozen) {  // immutable: made from its items once they are built (nothing in them can reach it)
      Ref items = sequence(false, s.items, nullptr);
      if (!items) return Ref();
      return remember(p, Ref::steal(PyFrozenSet_New(items.get())));
    }
    Ref set = Ref::steal(PySet_New(nullptr));
    if (!set) return Ref();
    remember(p, Ref::borrow(set.get()));
    for (const OutputPlan& item : s.items) {
      Ref v = build(item);
      if (!v || PySet_Add(set.get(), v.get()) < 0) return Ref();
    }
    return set;
  }
  Ref make(const OutputPlan& p, const plan::NewObject& n) {
    PyTypeObject* cls = reinterpret_cast<PyTypeObject*>(n.cls.get());
    PyTypeObject* base = reinterpret_cast<PyTypeObject*>(n.base.get());
    // A tuple or frozenset subclass instance is made from its items (built first); the
    // others are made empty by their base's tp_new and filled after.
    const bool from_items = base == &PyTuple_Type || base == &PyFrozenSet_Type;
    Ref tuple_items = from_items ? build(*n.items) : Ref();
    if (from_items && !tuple_items) return Ref();
    Ref new_args = !base       ? Ref()
                   : from_items ? Ref::steal(PyTuple_Pack(1, tuple_items.get()))
                                : Ref::steal(PyTuple_New(0));
    if (base && !new_args) return Ref();
    Ref obj = Ref::steal(base ? base->tp_new(cls, new_args.get(), nullptr) : cls->tp_alloc(cls, 0));
    if (!obj) return Ref();
    remember(p, Ref::borrow(obj.get()));
    if (base == &PyList_Type) {
      Ref items = build(*n.items);
      if (!items || PyList_SetSlice(obj.get(), 0, 0, items.get()) < 0) return Ref();
    } else if (base == &PySet_Type) {
      Ref items = build(*n.items);
      if (!items || _PySet_Update(obj.get(), items.get()) < 0) return Ref();
    } else if (base && !from_items) {
      Ref items = build(*n.items);
      if (!items) return Ref();
      PyObject *k, *v;
      Py_ssize_t pos = 0;
      while (PyDict_Next(items.get(), &pos, &k, &v))
        if (base->tp_as_mapping->mp_ass_subscript(obj.get(), k, v) < 0) return Ref();
    }
    Ref attrs = build(*n.attrs);
    if (!attrs) return Ref();
    // An attribute the class keeps in a slot (__slots__, a dataclass with slots=True) is
    // stored through its member descriptor: it is not the instance __dict__'s, which
    // would not be read back (the class's descriptor comes first) or may not exist.
    if (PyDict_GET_SIZE(attrs.get()) > 0) {
      Ref keys = Ref::steal(PyDict_Keys(attrs.get()));
      if (!keys) return Ref();
      for (Py_ssize_t i = 0; i < PyList_GET_SIZE(keys.get()); ++i) {
        PyObject* k = PyList_GET_ITEM(keys.get(), i);
        PyObject* descr = PyUnicode_Check(k) ? _PyType_Lookup(cls, k) : nullptr;
        if (!descr || !Py_IS_TYPE(descr, &PyMemberDescr_Type)) continue;
        if (Py_TYPE(descr)->tp_descr_set(descr, obj.get(), PyDict_GetItem(attrs.get(), k)) < 0 ||
            PyDict_DelItem(attrs.get(), k) < 0)
          return Ref();
      }
    }
    if (PyDict_GET_SIZE(attrs.get()) == 0) return obj;
    PyObject** dictptr = _PyObject_GetDictPtr(obj.get());
    if (!dictptr) {
      PyErr_SetString(PyExc_TypeError, "cdynamo: cannot rebuild an object without __dict__");
      return Ref();
    }
    Ref old = Ref::steal(*dictptr);
    *dictptr = attrs.release();
    return obj;
  }
  Ref make(const OutputPlan& p, const plan::Call& c) {
    Ref args = sequence(true, c.args, nullptr);
    if (!args) return Ref();
    return remember(p, Ref::steal(PyObject_Call(c.fn.get(), args.get(), nullptr)));
  }

  // After the effects: builds the items left in place, in the order they were met.
  bool fillLate(const std::vector<Late>& items) {
    std::vector<Late>* saved = late;
    late = nullptr;
    bool ok = true;
    for (const Late& l : items) {
      Ref item = build(*l.plan);
      if (!item) {
        ok = false;
        break;
      }
      if (l.tuple) {
        Ref old = Ref::steal(PyTuple_GET_ITEM(l.seq, l.index));  // the placeholder's, taken in sequence()
        PyTuple_SET_ITEM(l.seq, l.index, item.release());
      } else if (PyList_SetItem(l.seq, l.index, item.release()) < 0) {
        ok = false;
        break;
      }
    }
    late = saved;
    return ok;
  }
};

// Walks plans in the order Builder builds them and records when each memo slot is
// filled (remember): before its parts for what is made first and filled after (list,
// dict, set, object), after them for what a call makes from its parts. Keep in step
// with Builder.
struct MemoOrder {
  std::vector<bool> built;
  int first_unbuilt = -1;

  void fill(const OutputPlan& p) {
    if (p.memo < 0) return;
    if (static_cast<size_t>(p.memo) >= built.size()) built.resize(static_cast<size_t>(p.memo) + 1, false);
    built[static_cast<size_t>(p.memo)] = true;
  }
  void all(const std::vector<OutputPlan>& items) {
    for (const OutputPlan& i : items) visit(i);
  }
  std::vector<const OutputPlan*> deferred;  // after_effects plans, walked after the rest
  bool deferring = true;

  void visit(const OutputPlan& p) {
    if (first_unbuilt >= 0) return;
    if (deferring && p.after_effects) {
      deferred.push_back(&p);
      return;
    }
    std::visit([&](const auto& step) { walk(p, step); }, p.step);
  }
  void visitDeferred() {
    deferring = false;
    for (const OutputPlan* p : deferred) visit(*p);
  }
  void walk(const OutputPlan&, const plan::Memo& m) {
    if (m.slot < 0 || static_cast<size_t>(m.slot) >= built.size() || !built[static_cast<size_t>(m.slot)])
      first_unbuilt = m.slot;
  }
  void walk(const OutputPlan&, const plan::GraphOutput&) {}
  void walk(const OutputPlan&, const plan::Constant&) {}
  void walk(const OutputPlan&, const plan::Register&) {}
  void walk(const OutputPlan& p, const plan::Tuple& t) { all(t.items); fill(p); }
  void walk(const OutputPlan& p, const plan::NamedTuple& t) { all(t.items); fill(p); }
  void walk(const OutputPlan& p, const plan::List& l) { fill(p); all(l.items); }
  void walk(const OutputPlan& p, const plan::Deque& d) { all(d.items); fill(p); }
  void walk(const OutputPlan& p, const plan::Dict& d) { fill(p); all(d.values); }
  void walk(const OutputPlan& p, const plan::Set& s) {
    if (s.frozen) {  // built from its items, as a tuple is
      all(s.items);
      fill(p);
      return;
    }
    fill(p);
    all(s.items);
  }
  void walk(const OutputPlan& p, const plan::NewObject& n) {
    bool tuple = n.base.get() == reinterpret_cast<PyObject*>(&PyTuple_Type) ||
                 n.base.get() == reinterpret_cast<PyObject*>(&PyFrozenSet_Type);
    if (tuple && n.items) visit(*n.items);  // a tuple (frozenset) subclass instance is made from its items
    fill(p);
    if (!tuple && n.items) visit(*n.items);
    if (n.attrs) visit(*n.attrs);
  }
  void walk(const OutputPlan& p, const plan::Call& c) { all(c.args); fill(p); }
};

// Applies `e` to `target` with its built value `value` (null for Advance).
bool applyEffect(const SideEffect& e, PyObject* target, PyObject* value) {
  struct {
    PyObject* target;
    PyObject* value;
    int operator()(const SideEffect::SetAttr& s) const {
      return s.generic ? PyObject_GenericSetAttr(target, s.name.get(), value) : PyObject_SetAttr(target, s.name.get(), value);
    }
    int operator()(const SideEffect::SetItem& s) const { return PyObject_SetItem(target, s.key.get(), value); }
    int operator()(const SideEffect::CallMethod& m) const {
      Ref r = Ref::steal(PyObject_CallMethodOneArg(target, m.name.get(), value));
      return r ? 0 : -1;
    }
    int operator()(const SideEffect::DelAttr& s) const {
      return s.generic ? PyObject_GenericSetAttr(target, s.name.get(), nullptr) : PyObject_DelAttr(target, s.name.get());
    }
    int operator()(const SideEffect::SetCell&) const { return PyCell_Set(target, value); }
    int operator()(const SideEffect::ReplaceList&) const {
      return PyList_SetSlice(target, 0, PyList_GET_SIZE(target), value);
    }
    int operator()(const SideEffect::ReplaceDict&) const {
      if (PyDict_CheckExact(target)) {
        PyDict_Clear(target);
        return PyDict_Update(target, value);
      }
      // An OrderedDict, a defaultdict (or a subclass of one): PyDict_Clear/PyDict_Update
      // would write the dict's storage under an OrderedDict's linked order (corrupting it);
      // its C type's own clear() and item assignment keep both (a Python override of the
      // program's class is not what the trace recorded, and does not run).
      PyTypeObject* base = Py_TYPE(target);
      while (PyType_HasFeature(base, Py_TPFLAGS_HEAPTYPE)) base = base->tp_base;
      PyObject* clear = _PyType_Lookup(base, interned(Str::clear));
      if (!clear) {
        PyErr_SetString(PyExc_TypeError, "cdynamo: a dict type without clear()");
        return -1;
      }
      Ref cleared = Ref::steal(PyObject_CallOneArg(clear, target));
      if (!cleared) return -1;
      PyObject *k, *v;
      Py_ssize_t pos = 0;
      while (PyDict_Next(value, &pos, &k, &v))
        if (base->tp_as_mapping->mp_ass_subscript(target, k, v) < 0) return -1;
      return 0;
    }
    int operator()(const SideEffect::ReplaceSet&) const {
      // The trace's set, with its table when it kept one (a copy of its shadow's): the
      // target gets that table, so it walks and pops as eagerly (support/set_table.h).
      if (PySet_CheckExact(target) && PySet_CheckExact(value)) return assignSetTable(target, value);
      PySet_Clear(target);
      Ref r = Ref::steal(PyNumber_InPlaceOr(target, value));
      return r ? 0 : -1;
    }
    int operator()(const SideEffect::Advance& a) const {
      if (a.set_index) {
        Ref r = Ref::steal(PyObject_CallMethod(target, "__setstate__", "n", a.count < 0 ? PY_SSIZE_T_MAX : a.count));
        if (!r) return -1;
        if (a.count >= 0) return 0;
        if (Ref item = Ref::steal(PyIter_Next(target))) {  // past its end: it lets its list go
          PyErr_SetString(PyExc_RuntimeError, "cdynamo: a list_iterator set past its end gave an item");
          return -1;
        }
        return PyErr_Occurred() ? -1 : 0;
      }
      for (Py_ssize_t i = 0; i < a.count; ++i) {
        if (Ref item = Ref::steal(PyIter_Next(target))) continue;
        if (!PyErr_Occurred())
          PyErr_SetString(PyExc_RuntimeError, "cdynamo: an iterator had fewer items left than its guard checked");
        return -1;
      }
      return 0;
    }
  } apply{target, value};
  return std::visit(apply, e.what) == 0;
}

}  // namespace

int memoReadBeforeBuilt(const OutputPlan& output, const std::vector<SideEffect>& effects) {
  MemoOrder order;
  order.visit(output);
  for (const SideEffect& e : effects)
    if (const OutputPlan* stored = storedValue(e)) order.visit(*stored);
  order.visitDeferred();
  return order.first_unbuilt;
}

const OutputPlan* storedValue(const SideEffect& e) {
  struct {
    const OutputPlan* operator()(const SideEffect::SetAttr& s) const { return &s.value; }
    const OutputPlan* operator()(const SideEffect::SetItem& s) const { return &s.value; }
    const OutputPlan* operator()(const SideEffect::DelAttr&) const { return nullptr; }
    const OutputPlan* operator()(const SideEffect::SetCell& s) const { return &s.value; }
    const OutputPlan* operator()(const SideEffect::ReplaceList& s) const { return &s.contents; }
    const OutputPlan* operator()(const SideEffect::ReplaceDict& s) const { return &s.contents; }
    const OutputPlan* operator()(const SideEffect::ReplaceSet& s) const { return &s.contents; }
    const OutputPlan* operator()(const SideEffect::Advance&) const { return nullptr; }
    const OutputPlan* operator()(const SideEffect::CallMethod& m) const { return &m.value; }
  } visitor;
  return std::visit(visitor, e.what);
}

PyObject* CompiledEntry::tryRun(const FrameView& frame, bool* matched) const {
  const int nregs = guards.numRegisters();
  PyObject* inline_regs[kInlineSlots];
  std::vector<PyObject*> heap_regs;
  PyObject** regs = inline_regs;
  if (nregs > kInlineSlots) {
    heap_regs.resize(nregs);
    regs = heap_regs.data();
  }
  *matched = guards.run(frame, regs);
  if (!*matched) {
    guards.release(regs);
    return nullptr;
  }

  const size_t nin = input_regs.size();
  PyObject* inline_args[kInlineSlots];
  std::vector<PyObject*> heap_args;
  PyObject** args = inline_args;
  if (nin > kInlineSlots) {
    heap_args.resize(nin);
    args = heap_args.data();
  }
  for (size_t i = 0; i < nin; ++i) args[i] = regs[input_regs[i]];
  // Symbolic sizes are passed as ints read from their tensors (owned: released after the call).
  bool sizes_ok = true;
  if (!input_dims.empty())
    for (size_t i = 0; i < nin; ++i)
      if (input_dims[i] >= 0) {
        args[i] = PyLong_FromLongLong(guards::tensorSize(args[i], input_dims[i]));
        sizes_ok = sizes_ok && args[i] != nullptr;
      }
  struct ReleaseSizes {
    const std::vector<int>& dims;
    PyObject** args;
    size_t n;
    ~ReleaseSizes() {
      if (!dims.empty())
        for (size_t i = 0; i < n; ++i)
          if (dims[i] >= 0) Py_XDECREF(args[i]);  // why: raw slots of the fixed argument buffer
    }
  } release_sizes{input_dims, args, nin};
  if (!sizes_ok) {
    guards.release(regs);
    return nullptr;
  }
  Ref graph_out;
  if (compiled) {
    graph_out = Ref::steal(PyObject_Vectorcall(compiled.get(), args, nin, nullptr));
    if (!graph_out) {
      guards.release(regs);
      return nullptr;
    }
    if (!PyTuple_Check(graph_out.get()) && !PyList_Check(graph_out.get())) {
      guards.release(regs);
      PyErr_SetString(PyExc_TypeError, "cdynamo: compiled graph did not return a tuple or list");
      return nullptr;
    }
  }
  // Registers are borrowed from the inputs: build the result and every stored value
  // before any effect runs (replacing a list's contents can free an object a register
  // still points to). Same order as the tracer assigned memo slots: result, then effects.
  PyObject* inline_memo[16] = {};
  std::vector<PyObject*> heap_memo;
  PyObject** memo = inline_memo;
  if (memo_slots > 16) {
    heap_memo.assign(static_cast<size_t>(memo_slots), nullptr);
    memo = heap_memo.data();
  }
  struct ReleaseMemo {
    PyObject** memo;
    int n;
    ~ReleaseMemo() {
      for (int i = 0; i < n; ++i) Py_XDECREF(memo[i]);  // why: raw owned slots (see Builder)
    }
  } release_memo{memo, memo_slots};
  Builder builder{graph_out.get(), regs, memo};
  std::vector<Builder::Late> late;
  // Plans built after the effects read registers then: hold them (an effect can free an
  // object a borrowed register points to).
  std::vector<Ref> held;
  if (late_plans) {
    builder.late = &late;
    held.reserve(static_cast<size_t>(nregs));
    for (int i = 0; i < nregs; ++i) held.push_back(Ref::borrow(regs[i]));
  }
  const bool root_late = late_plans && output.after_effects;
  Ref result = root_late ? Ref::borrow(Py_None) : builder.build(output);
  if (result && !effects.empty()) {
    std::vector<Ref> values;
    values.reserve(effects.size());
    for (const SideEffect& e : effects) {
      const OutputPlan* stored = storedValue(e);
      values.push_back(stored ? builder.build(*stored) : Ref());
      if (stored && !values.back()) {
        result.reset();
        break;
      }
    }
    for (size_t i = 0; result && i < effects.size(); ++i)
      if (!applyEffect(effects[i], regs[effects[i].reg], values[i].get())) result.reset();
  }
  if (result && root_late) {
    builder.late = nullptr;
    result = builder.build(output);
  } else if (result && !late.empty() && !builder.fillLate(late)) {
    result.reset();
  }
  graph_out.reset();
  guards.release(regs);
  if (result && brk) {
    // The program's grad mode at the break (the backend may not replay the graph's own
    // mode changes as side effects).
    Ref r = Ref::steal(PyObject_CallOneArg(brk->set_grad_enabled.get(), brk->grad_mode ? Py_True : Py_False));
    if (!r) result.reset();
  }
  return result.release();
}

PyObject* CompiledEntry::continueAfterBreak(const FrameView& frame, PyObject* args) const {
  Ref held = Ref::steal(args);
  Py_ssize_t n = PyTuple_GET_SIZE(args) - brk->ncells;
  // The closure of the generated functions: the frame's cells, then its own closure.
  Ref closure = Ref::borrow(frame.closure);
  if (brk->ncells > 0) {
    Py_ssize_t nfree = frame.closure ? PyTuple_GET_SIZE(frame.closure) : 0;
    closure = Ref::steal(PyTuple_New(brk->ncells + nfree));
    if (!closure) return nullptr;
    for (Py_ssize_t i = 0; i < brk->ncells + nfree; ++i) {
      PyObject* c = i < brk->ncells ? PyTuple_GET_ITEM(args, n + i) : PyTuple_GET_ITEM(frame.closure, i - brk->ncells);
      PyTuple_SET_ITEM(closure.get(), i, Ref::borrow(c).release());
    }
  }
  Ref fn = Ref::steal(makeFunction(brk->break_code.get(), frame.globals, closure.get()));
  if (!fn) return nullptr;
  std::vector<PyObject*> argv(static_cast<size_t>(n) + 1);
  for (Py_ssize_t i = 0; i < n; ++i) argv[static_cast<size_t>(i)] = PyTuple_GET_ITEM(args, i);
  argv[static_cast<size_t>(n)] = brk->resume_table.get();
  PyObject* r = PyObject_Vectorcall(fn.get(), argv.data(), static_cast<size_t>(n) + 1, nullptr);
  fn.reset();
  if (!r || brk->in_resume_code) return r;
  return runContinuations(r, frame.globals, closure.get());
}

bool CompiledEntry::matches(const FrameView& frame) const {
  std::vector<PyObject*> regs(static_cast<size_t>(guards.numRegisters()) + 1);
  bool ok = guards.run(frame, regs.data());
  guards.release(regs.data());
  return ok;
}

}  // namespace cdynamo::runtime
