// Wrapping real Python objects read from the frame into Values, with their guards
// (the VariableBuilder of TorchDynamo): each kind of object decides here which checks
// a later call must pass for the trace to stay valid.
#include <cctype>
#include <string>

#include "graph/torch_refs.h"
#include "support/lookup.h"
#include "support/set_table.h"
#include "support/torch_types.h"
#include "trace/kinds/dict.h"
#include "trace/kinds/object.h"
#include "trace/kinds/tensor_subclass.h"
#include "trace/protocol/calls.h"
#include "trace/protocol/constants.h"
#include "trace/protocol/operators.h"
#include "trace/tracer.h"

namespace cdynamo::trace {

using guards::LoadKind;

namespace {

// A graph input's name as torch._dynamo gives it: the source's name with every run of
// characters other than letters and digits made one '_' (L['self'].linear.weight ->
// L_self_linear_weight); GraphBuilder makes it unique among the inputs.
std::string placeholderName(const std::string& source) {
  std::string out;
  bool in_run = false;
  for (char c : source) {
    bool alnum = std::isalnum(static_cast<unsigned char>(c));
    if (alnum) out += c;
    else if (!in_run) out += '_';
    in_run = !alnum;
  }
  return out.empty() ? std::string("input") : out;
}

}  // namespace

// Automatic dynamic for an int read from the program (dynamic=None): once its value changed
// since the first compile of this code, a SymInt graph input, guarded by its type and the
// shape guards on its symbol. As torch._dynamo decides by the source: an int reached from
// an argument of the frame (the argument itself, an attribute, item or key under it); not
// a global, a closure cell or a class attribute (specialized); one under an nn.Module only
// with config.allow_unspec_int_on_nn_module (torch._dynamo's flag of that name: a module's
// ints are its configuration, rarely changed). NotHandled while it stays a constant.
Result<ValuePtr> Tracer::wrapIntInput(PyObject* obj, int reg) {
  bool under_module = false;
  int root = reg;
  for (int r = guards().baseOf(reg); r >= 0; r = guards().baseOf(r)) {
    under_module = under_module || module_regs_.count(r) > 0;
    root = r;
  }
  if (guards().kindOf(root) != LoadKind::Local) return notHandled();
  if (under_module) {
    int allow = graph::configFlag("allow_unspec_int_on_nn_module");
    if (allow < 0) return failFromPython("reading cdynamo.config.allow_unspec_int_on_nn_module");
    if (!allow) return notHandled();
  }
  const std::string& src = guards().sourceName(reg);
  int node = graph_.addIntInput(obj, placeholderName(src), src);
  if (node == -1) return failFromPython("making a symbolic int for an input");
  if (node < 0) return notHandled();
  guards().checkType(reg, &PyLong_Type);
  input_reg_of_node_[node] = reg;
  example_of_node_[node] = Ref::borrow(graph_.fake(node));  // the backend's example: the SymInt
  ValuePtr v = Value::tensor(node, reg);
  wrapped_[reg] = v;
  return v;
}

namespace {

constexpr const char* kStaticMark = "_dynamo_static_input_type";

// The tensor's static-input mark (borrowed), or null.
PyObject* staticMark(PyObject* tensor) {
  PyObject** dictptr = _PyObject_GetDictPtr(tensor);
  PyObject* mark = dictptr && *dictptr ? PyDict_GetItemString(*dictptr, kStaticMark) : nullptr;
  return mark == Py_None ? nullptr : mark;
}

bool markIs(PyObject* mark, const char* text) {
  return mark && PyUnicode_Check(mark) && PyUnicode_CompareWithASCIIString(mark, text) == 0;
}

}  // namespace

// What every tensor subclass input starts with: one reached again through another source
// is the same value (the guard checks the two stay one object); NotHandled for a new one.
Result<ValuePtr> Tracer::subclassInputAgain(PyObject* obj, int reg) {
  if (reg < 0) return fail("a tensor subclass instance without a source is not supported yet");
  if (auto same = wrapped_tensors_.find(obj); same != wrapped_tensors_.end()) {
    guards().checkAliasing(same->second->reg, reg, true);
    wrapped_[reg] = same->second;
    return same->second;
  }
  if (markIs(staticMark(obj), "guarded")) return fail("a static tensor subclass instance is not supported yet");
  return notHandled();
}

Result<ValuePtr> Tracer::wrapSubclassTensor(PyObject* obj, int reg) {
  PyObject* cls = reinterpret_cast<PyObject*>(Py_TYPE(obj));
  if (!subclassModelled(cls))
    return fail(std::string("tensor subclass ") + Py_TYPE(obj)->tp_name +
                " (an nn.Parameter subclass, or one with its own __torch_dispatch__) is not supported yet");
  if (Result<ValuePtr> again = subclassInputAgain(obj, reg); !again.notHandled()) return again;
  // The graph and its backend see the plain tensor of its data (what the default
  // __torch_function__ runs functions on); the guards check the object itself, its class
  // exactly (tensor guards do) and the __torch_function__ its class resolves to.
  PyObject* to_plain = lookup(Obj::cdynamo_subclass_plain);
  Ref plain = to_plain ? Ref::steal(PyObject_CallOneArg(to_plain, obj)) : Ref();
  if (!plain) return failFromPython("the plain tensor of a tensor subclass instance");
  int node = graph_.addInput(plain.get(), placeholderName(guards().sourceName(reg)), guards().sourceName(reg));
  if (node < 0) return failFromPython("making a fake tensor for an input");
  guards().checkTensor(reg, obj, graph_.dynamicMask(node));
  static PyObject* const tf_name = PyUnicode_InternFromString("__torch_function__");
  guardTypeAttribute(*this, cls, tf_name);
  input_reg_of_node_[node] = reg;
  example_of_node_[node] = plain.copy();
  subclass_input_nodes_[node] = Ref::borrow(obj);
  ValuePtr v = Value::of(SubclassTensor{node, Ref::borrow(cls)}, reg);
  wrapped_[reg] = v;
  wrapped_tensors_.emplace(obj, v);
  return v;
}

// A traceable wrapper subclass instance (__tensor_flatten__ and its own __torch_dispatch__,
// TwoTensor, a float8 tensor): a graph input as it is, as torch._dynamo makes it one. Its
// fake is torch's (the converter fakes its inner tensors and rebuilds it with
// __tensor_unflatten__), so each op the trace records runs the class's __torch_dispatch__ on
// fakes, and the backend gets the real instance (AOT autograd flattens it). The graph
// depends on more than the outer tensor's metadata: the class exactly and the outer
// metadata (the tensor check), the inner tensors' metadata (each guarded through its
// attribute), and the flatten context (a predicate: equal, or the class's
// __metadata_guard__). Sizes stay static (symbolic_shapes.py _can_be_dynamic).
Result<ValuePtr> Tracer::wrapWrapperSubclassInput(PyObject* obj, int reg) {
  if (Result<ValuePtr> again = subclassInputAgain(obj, reg); !again.notHandled()) return again;
  if (Done d = guardWrapperSubclass(obj, reg, reg, 0); !d) return d.stop();
  int node = graph_.addInput(obj, placeholderName(guards().sourceName(reg)), guards().sourceName(reg));
  if (node < 0) return failFromPython("making a fake tensor for a tensor subclass input");
  input_reg_of_node_[node] = reg;
  example_of_node_[node] = Ref::borrow(obj);
  ValuePtr v = Value::tensor(node, reg);
  wrapped_tensors_.emplace(obj, v);
  wrapped_[reg] = v;
  return v;
}

Done Tracer::guardWrapperSubclass(PyObject* obj, int reg, int outer_reg, int depth) {
  if (depth > 8) return fail("tensor subclasses nested more than 8 levels deep are not supported");
  PyObject* cls = reinterpret_cast<PyObject*>(Py_TYPE(obj));
  if (!wrapperSubclassModelled(cls))
    return fail(std::string("tensor subclass ") + Py_TYPE(obj)->tp_name +
                " with both __torch_dispatch__ and a __torch_function__ of its own is not supported yet");
  guards().checkTensor(reg, obj);
  PyObject* flatten_check = lookup(Obj::cdynamo_subclass_flatten_check);
  Ref info = flatten_check ? Ref::steal(PyObject_CallOneArg(flatten_check, obj)) : Ref();
  if (!info) return failFromPython(std::string("the __tensor_flatten__ metadata of ") + Py_TYPE(obj)->tp_name);
  PyObject* attrs = PyTuple_GET_ITEM(info.get(), 0);
  guards().checkPredicate(reg, PyTuple_GET_ITEM(info.get(), 1),
                          guards().sourceName(reg) + ".__tensor_flatten__() names the same inner tensors and an equal context");
  for (Py_ssize_t i = 0; i < PyTuple_GET_SIZE(attrs); ++i) {
    PyObject* name = PyTuple_GET_ITEM(attrs, i);
    if (!PyUnicode_Check(name)) return fail("a __tensor_flatten__ whose inner names are not strings");
    Ref inner = Ref::steal(PyObject_GetAttr(obj, name));
    if (!inner) return failFromPython("an inner tensor of a tensor subclass instance");
    if (!isTensor(inner.get()))
      return fail(std::string("an inner value of ") + Py_TYPE(obj)->tp_name + " that is not a tensor (" +
                  Py_TYPE(inner.get())->tp_name + ") is not supported yet");
    int ireg = load(LoadKind::Attr, reg, 0, name, guards().sourceName(reg) + "." + PyUnicode_AsUTF8(name));
    if (ireg < 0) return failFromPython("guarding an inner tensor");
    if (isPlainTensorOrParameter(inner.get())) {
      guards().checkTensor(ireg, inner.get());
      wrapper_inners_[outer_reg].emplace_back(ireg, inner.copy());
    } else if (wrapperSubclass(reinterpret_cast<PyObject*>(Py_TYPE(inner.get())))) {
      if (Done d = guardWrapperSubclass(inner.get(), ireg, outer_reg, depth + 1); !d) return d;
    } else {
      return fail(std::string("an inner tensor of ") + Py_TYPE(obj)->tp_name + " of type " +
                  Py_TYPE(inner.get())->tp_name + " is not supported yet");
    }
  }
  return {};
}

int Tracer::parameterFreezing() {
  if (freezing_ >= 0) return freezing_;
  // torch._inductor.config.freezing with grad mode off (torch._dynamo's is_parameter_freezing);
  // inductor's config is only read when something imported it.
  PyObject* cfg = PyDict_GetItemString(PyImport_GetModuleDict(), "torch._inductor.config");
  int on = 0;
  if (cfg) {
    Ref f = Ref::steal(PyObject_GetAttrString(cfg, "freezing"));
    on = f ? PyObject_IsTrue(f.get()) : -1;
  }
  if (on == 1) {
    Ref grad = Ref::steal(PyObject_CallNoArgs(lookup(Obj::torch_is_grad_enabled)));
    on = grad ? (grad.get() == Py_False ? 1 : 0) : -1;
  }
  if (on < 0) return -1;
  return freezing_ = on;
}

Done Tracer::markStaticInput(PyObject* tensor, int reg) {
  bool static_input = Py_TYPE(tensor) == reinterpret_cast<PyTypeObject*>(lookup(Obj::torch_nn_Parameter));
  for (int r = guards().baseOf(reg); r >= 0 && !static_input; r = guards().baseOf(r)) static_input = module_regs_.count(r) > 0;
  if (!static_input) return {};
  int freezing = parameterFreezing();
  if (freezing < 0) return failFromPython("reading torch._inductor.config.freezing");
  // Under parameter freezing a module's tensors are static and guarded (graph attributes
  // with an identity guard: the backend folds them as constants), as torch._dynamo marks
  // them then; otherwise "unguarded" (inputs), unless marked already.
  PyObject* mark = staticMark(tensor);
  if (mark && !(freezing && markIs(mark, "unguarded"))) return {};
  Ref text = Ref::steal(PyUnicode_FromString(freezing ? "guarded" : "unguarded"));
  if (!text || PyObject_SetAttrString(tensor, kStaticMark, text.get()) < 0)
    return failFromPython("marking a module's tensor a static input");
  return {};
}

int Tracer::load(LoadKind kind, int base, int index, PyObject* name, std::string what) {
  return guards().load(kind, base, index, name, std::move(what));
}

Result<ValuePtr> Tracer::wrap(PyObject* obj, int reg) {
  // A generator run ahead (settleGenerators) that reads the program's state live: what it
  // reads may change before the caller takes its items. Functions, classes and modules
  // (its code) aside.
  if (running_ahead_ && reg >= 0 && !PyFunction_Check(obj) && !PyType_Check(obj) && !PyModule_Check(obj) &&
      !PyCFunction_Check(obj))
    read_live_ahead_ = true;
  if (reg >= 0) {
    auto it = wrapped_.find(reg);
    if (it != wrapped_.end()) return it->second;
  }
  // Lists, tuples and dicts are wrapped item by item, before their own value exists: one
  // that holds itself would recurse without end (a C stack overflow), and a very deep
  // nesting would exhaust the C stack too. Both stop the trace with a reason (the frame
  // then runs natively or breaks), as an unsupported construct does.
  constexpr size_t kMaxWrapDepth = 200;
  if (wrapping_.count(obj)) {
    return fail(std::string("a ") + Py_TYPE(obj)->tp_name +
                " that contains itself (a reference cycle through its items) is not supported");
  }
  if (wrapping_.size() >= kMaxWrapDepth)
    return fail("containers nested more than " + std::to_string(kMaxWrapDepth) + " levels deep are not supported");
  struct InProgress {
    std::unordered_set<PyObject*>& set;
    PyObject* obj;
    ~InProgress() { set.erase(obj); }
  } in_progress{wrapping_, obj};
  wrapping_.insert(obj);
  // One mutable object reached through two sources (`alias = lst`, f(l, l), a bound
  // method's __self__) is one Value, so a mutation through one is seen through the other;
  // the guard checks that the two sources still are one object.
  const bool mutable_object = PyList_CheckExact(obj) || PyDict_Check(obj) || PySet_CheckExact(obj) ||
                              guards::isReadableIterator(obj) ||
                              (PyType_HasFeature(Py_TYPE(obj), Py_TPFLAGS_HEAPTYPE) && !PyType_Check(obj) &&
                               !isTensor(obj) && !isModule(obj) && !isOperatorObject(obj) &&
                               !isImmutableCObject(obj));
  if (mutable_object && reg >= 0) {
    auto same = wrapped_objects_.find(obj);
    if (same != wrapped_objects_.end() && same->second->reg >= 0) {
      guards().checkAliasing(same->second->reg, reg, true);
      wrapped_[reg] = same->second;
      return same->second;
    }
  }
  if (PyDict_Check(obj) && reg >= 0) {
    // The instance dict of an object whose attributes the trace already stored to: those
    // stores are pending effects the dict does not show yet (objects.cpp keeps the two
    // views one once the dict is read first).
    for (const auto& [other, value] : wrapped_objects_) {
      if (!value->is(Kind::Object) || !effects().anyAttrOverlayOf(value->reg)) continue;
      PyObject** dictptr = _PyObject_GetDictPtr(other);
      if (dictptr && *dictptr == obj)
        return fail("an object's __dict__ read after the trace set its attributes is not supported yet");
    }
  }
  ValuePtr v;
  if (isTensor(obj)) {
    return wrapTensorInput(obj, reg);
  } else if (isConstantObject(obj)) {
    if (PyLong_CheckExact(obj) && reg >= 0) {
      Result<ValuePtr> sym = wrapIntInput(obj, reg);
      if (!sym.notHandled()) return sym;
    }
    if (reg >= 0) guards().checkEquals(reg, obj);
    v = Value::constant(obj, reg);
  } else if (reg < 0 && Py_IS_TYPE(obj, &PyDictProxy_Type)) {
    // A read-only view computed at trace time (an inspect.Signature's parameters): its
    // mapping's items, as they are now.
    Ref copy = Ref::steal(PyObject_CallMethod(obj, "copy", nullptr));
    if (!copy) return failFromPython("reading a mappingproxy");
    if (!PyDict_Check(copy.get())) return fail("a mappingproxy of a non-dict");
    return wrapDictItems(copy.get(), -1, reinterpret_cast<PyObject*>(Py_TYPE(copy.get())));
  } else if (reg < 0 && PyExceptionInstance_Check(obj)) {
    v = Value::object(obj, reg);  // an exception object reached from one made in the trace
  } else if (reg < 0 && PyTraceBack_Check(obj)) {
    // A traceback entry the trace made (an exception's __traceback__, tb_next): the trace's
    // own object, changed for real (tb_next = ...).
    v = Value::of(Object{Ref::borrow(obj), true}, reg);
  } else if (reg < 0 && PyFrame_Check(obj)) {
    return fail("a frame object (a traceback's tb_frame, a frame's f_back) is not supported yet");
  } else if (isImmutableCObject(obj)) {
    // A compiled pattern or a match: its methods are folded on constants, so another
    // object at the same place is another entry.
    if (reg >= 0) guards().checkIdentity(reg, obj);
    v = Value::object(obj, reg);
  } else if (Result<ValuePtr> c = wrapContainer(obj, reg); !c.notHandled()) {
    if (!c) return c;
    v = c.take();
  } else if (Result<ValuePtr> f = wrapCallable(obj, reg); !f.notHandled()) {
    if (!f) return f;
    v = f.take();
  } else if (PyType_HasFeature(Py_TYPE(obj), Py_TPFLAGS_HEAPTYPE)) {
    Result<ValuePtr> o = wrapUserObject(obj, reg);
    if (!o) return o;
    v = o.take();
  } else if (reg >= 0 && (PyDictKeys_Check(obj) || PyDictValues_Check(obj) || PyDictItems_Check(obj))) {
    Result<ValuePtr> view = wrapDictView(obj, reg);
    if (!view) return view;
    v = view.take();
  } else if (reg >= 0 && !PyCallable_Check(obj)) {
    // Any other object read from the program (a numpy scalar, a torch.Generator, a file,
    // an iterator the trace cannot read ahead, as a map object a resume function is given):
    // opaque, guarded by type, its attributes read like a user object's. What the trace
    // cannot model about it stops the trace where it is used, not where it is read (a
    // resume function that only carries it along is still captured).
    guards().checkType(reg, Py_TYPE(obj));
    v = Value::object(obj, reg);
  } else {
    return fail(std::string("cannot trace a value of type ") + Py_TYPE(obj)->tp_name + " yet");
  }
  if (reg >= 0) wrapped_[reg] = v;
  if (reg >= 0 && v && v->is(Kind::Module)) module_regs_.insert(reg);
  if (mutable_object && reg >= 0 && v) {
    // ... and two distinct objects of one type stay distinct (an entry traced with two
    // lists must not run for one list passed twice).
    for (const auto& [other, value] : wrapped_objects_)
      if (Py_TYPE(other) == Py_TYPE(obj) && value->reg >= 0) guards().checkAliasing(value->reg, reg, false);
    wrapped_objects_.emplace(obj, v);
  }
  return v;
}

// A tensor read from the program: a graph input (or a graph attribute for a static input
// whose identity is guarded), one per object however many sources reach it.
Result<ValuePtr> Tracer::wrapTensorInput(PyObject* obj, int reg) {
  ValuePtr v;
  if (!isPlainTensorOrParameter(obj)) {
    if (wrapperSubclass(reinterpret_cast<PyObject*>(Py_TYPE(obj)))) return wrapWrapperSubclassInput(obj, reg);
    return wrapSubclassTensor(obj, reg);
  }
  if (reg < 0) return fail("a tensor without a source (e.g. a default argument) is not supported yet");
  if (Done d = markStaticInput(obj, reg); !d) return d.stop();
  // One tensor reached through two sources (f(x, x), a partial's keyword and an argument,
  // tied weights) is one graph input, as in torch._dynamo; the guard checks that the two
  // sources still are one object.
  if (auto same = wrapped_tensors_.find(obj); same != wrapped_tensors_.end()) {
    guards().checkAliasing(same->second->reg, reg, true);
    wrapped_[reg] = same->second;
    return same->second;
  }
  if (markIs(staticMark(obj), "guarded")) {
    // A static input whose identity is guarded (torch._dynamo.mark_static_address(t),
    // a module's tensor under parameter freezing): the graph module holds it (get_attr),
    // as torch._dynamo installs it, so the backend may treat it as a constant. A new
    // object under the source recompiles; its metadata is checked too, since the graph
    // reads the object live.
    guards().checkIdentity(reg, obj);
    guards().checkTensor(reg, obj);
    int node = graph_.addAttribute(obj, placeholderName(guards().sourceName(reg)));
    if (node < 0) return failFromPython("making a fake tensor for a graph attribute");
    input_reg_of_node_[node] = reg;  // returned as is, compared by identity: the very object
    example_of_node_[node] = Ref::borrow(obj);
    v = Value::tensor(node, reg);
    wrapped_[reg] = v;
    wrapped_tensors_.emplace(obj, v);
    return v;
  }
  int node = graph_.addInput(obj, placeholderName(guards().sourceName(reg)),
                             guards().sourceName(reg));
  if (node < 0) return failFromPython("making a fake tensor for an input");
  guards().checkTensor(reg, obj, graph_.dynamicMask(node));  // symbolic dims: the shape guards say what holds
  input_reg_of_node_[node] = reg;
  example_of_node_[node] = Ref::borrow(obj);
  v = Value::tensor(node, reg);
  wrapped_tensors_.emplace(obj, v);
  wrapped_[reg] = v;
  return v;
}

// An instance of a class of the program: guarded by its class, its attributes read when
// the trace reads them; a tuple, list or dict subclass instance with its items read too.
Result<ValuePtr> Tracer::wrapUserObject(PyObject* obj, int reg) {
  ValuePtr v;
  // An instance of a user class: its class is guarded; attributes are read (and
  // guarded) when the trace reads them.
  if (reg >= 0) guards().checkType(reg, Py_TYPE(obj));
  v = Value::object(obj, reg);
  PyTypeObject* base = reg >= 0 ? containerBase(reinterpret_cast<PyObject*>(Py_TYPE(obj))) : nullptr;
  if (base == &PyTuple_Type || base == &PyList_Type) {
    // An instance of a tuple or list subclass: its items, read (and guarded) like a
    // tuple's or list's through the C layout (the class's own __getitem__ or __iter__
    // never runs for this); the class's methods see them through the base's C methods.
    bool tuple = base == &PyTuple_Type;
    Py_ssize_t n = PySequence_Fast_GET_SIZE(obj);
    guards().checkLength(reg, n);
    std::vector<ValuePtr> items;
    for (Py_ssize_t i = 0; i < n; ++i) {
      int item_reg = load(tuple ? LoadKind::TupleItem : LoadKind::ListItem, reg, static_cast<int>(i), nullptr,
                          guards().sourceName(reg) + "[" + std::to_string(i) + "]");
      Result<ValuePtr> item = wrap(PySequence_Fast_GET_ITEM(obj, i), item_reg);
      if (!item) return item;
      items.push_back(item.take());
    }
    v->as<Object>().base = tuple ? Value::tuple(std::move(items), reg) : Value::list(std::move(items), reg);
    base = nullptr;
  }
  // An instance of a set or frozenset subclass: its attributes only (its items are not
  // read; what needs them stops the trace with the reason).
  if (base == &PySet_Type || base == &PyFrozenSet_Type) base = nullptr;
  PyObject *key, *value;
  for (Py_ssize_t pos = 0; base && PyDict_Next(obj, &pos, &key, &value);)
    if (!isConstantObject(key) && !isIdentityKey(key)) base = nullptr;  // keys the Dict model cannot hold: attributes only
  if (base) {
    // An instance of a dict subclass (a registry): its items, read like a dict's.
    Result<ValuePtr> items = wrapDictItems(obj, reg, reinterpret_cast<PyObject*>(base));
    if (!items) return items;
    v->as<Object>().base = items.take();
  }
  return v;
}

Result<ValuePtr> Tracer::wrapDictView(PyObject* obj, int reg) {
  // A view of a dict passed in (d.keys()): the dict it reads, wrapped from the view (one
  // value with the dict when the program also passes that), and a live view of it.
  guards().checkType(reg, Py_TYPE(obj));
  PyObject* d = reinterpret_cast<PyObject*>(reinterpret_cast<_PyDictViewObject*>(obj)->dv_dict);
  if (!d) return fail("a dict view without its dict");
  int dreg = load(LoadKind::ViewDict, reg, 0, nullptr, guards().sourceName(reg) + ".mapping");
  Result<ValuePtr> dv = wrap(d, dreg);
  if (!dv) return dv;
  if (!(*dv)->is(Kind::Dict)) return fail("a view of a dict the trace cannot model as a dict");
  return Value::of(DictView{dv.take(), PyDictKeys_Check(obj)     ? DictView::Keys
                                    : PyDictValues_Check(obj) ? DictView::Values
                                                              : DictView::Items},
                reg);
}

namespace {
// Whether `o` is a function, builtin or class whose hash and == are C code by identity (a
// metaclass or a function type with its own __eq__/__hash__ in Python is not).
bool identityHashed(PyObject* o) {
  if (!(PyFunction_Check(o) || PyCFunction_Check(o) || PyType_Check(o))) return false;
  PyTypeObject* type = Py_TYPE(o);
  PyObject* eq = _PyType_Lookup(type, interned(Str::dunder_eq));
  PyObject* hash = _PyType_Lookup(type, interned(Str::dunder_hash));
  return eq && hash && !PyFunction_Check(eq) && !PyFunction_Check(hash);
}
}  // namespace

// Lists, tuples (named too), dicts, sets and tuple iterators read from the program;
// NotHandled for other objects.
Result<ValuePtr> Tracer::wrapContainer(PyObject* obj, int reg) {
  ValuePtr v;
  if ((PyTuple_Check(obj) && (PyTuple_CheckExact(obj) || isNamedTupleClass(reinterpret_cast<PyObject*>(Py_TYPE(obj))))) ||
             PyList_CheckExact(obj)) {
    bool tuple = PyTuple_Check(obj);
    if (reg >= 0) {
      guards().checkType(reg, Py_TYPE(obj));
      guards().checkLength(reg, PySequence_Fast_GET_SIZE(obj));
    }
    std::vector<ValuePtr> items;
    Py_ssize_t n = PySequence_Fast_GET_SIZE(obj);
    for (Py_ssize_t i = 0; i < n; ++i) {
      int item_reg = -1;
      if (reg >= 0)
        item_reg = load(tuple ? LoadKind::TupleItem : LoadKind::ListItem, reg, static_cast<int>(i), nullptr,
                        guards().sourceName(reg) + "[" + std::to_string(i) + "]");
      Result<ValuePtr> item = wrap(PySequence_Fast_GET_ITEM(obj, i), item_reg);
      if (!item) return item;
      items.push_back(item.take());
    }
    if (!tuple)
      v = Value::list(std::move(items), reg);
    else if (PyTuple_CheckExact(obj))
      v = Value::tuple(std::move(items), reg);
    else
      v = Value::of(Tuple{std::move(items), Ref::borrow(reinterpret_cast<PyObject*>(Py_TYPE(obj)))}, reg);
  } else if (PyDict_Check(obj) && (PyDict_CheckExact(obj) || !PyType_HasFeature(Py_TYPE(obj), Py_TPFLAGS_HEAPTYPE) ||
                                    strcmp(Py_TYPE(obj)->tp_name, "collections.OrderedDict") == 0)) {
    // A dict read from the program: its type and exact key order are guarded, each value
    // is read through its key.
    if (reg >= 0) guards().checkType(reg, Py_TYPE(obj));
    Result<ValuePtr> d = wrapDictItems(obj, reg, reinterpret_cast<PyObject*>(Py_TYPE(obj)));
    if (!d) return d;
    v = d.take();
    PyObject* dd_type = lookup(Obj::collections_defaultdict);
    if (!dd_type) return failFromPython("collections.defaultdict");
    if (PyObject_TypeCheck(obj, reinterpret_cast<PyTypeObject*>(dd_type))) {
      // A defaultdict: a missing key calls its factory (the object the program holds there).
      // A Python function without defaults is guarded by its code and globals, not its
      // identity (what it closes over is read through it when it runs): a factory made by
      // the frame before a graph break is a new function on every call, as a closure is.
      // Anything else is guarded by identity.
      static PyObject* attr = PyUnicode_InternFromString("default_factory");
      Ref held = Ref::steal(PyObject_GetAttr(obj, attr));
      if (!held) return failFromPython("a defaultdict's default_factory");
      PyObject* factory = held.get();
      if (factory != Py_None) {
        int freg = -1;
        if (reg >= 0) {
          freg = load(LoadKind::Attr, reg, 0, attr, guards().sourceName(reg) + ".default_factory");
          if (PyFunction_Check(factory) && !PyFunction_GET_DEFAULTS(factory) && !PyFunction_GET_KW_DEFAULTS(factory)) {
            guards().checkType(freg, Py_TYPE(factory));
            int code_reg = load(LoadKind::Attr, freg, 0, interned(Str::dunder_code), guards().sourceName(freg) + ".__code__");
            guards().checkIdentity(code_reg, PyFunction_GET_CODE(factory));
            int globals_reg =
                load(LoadKind::Attr, freg, 0, interned(Str::dunder_globals), guards().sourceName(freg) + ".__globals__");
            guards().checkIdentity(globals_reg, PyFunction_GET_GLOBALS(factory));
          } else {
            guards().checkIdentity(freg, factory);
          }
        }
        v->as<Dict>().default_factory = Ref::borrow(factory);
        v->as<Dict>().factory_value = Value::callable(factory, freg);
      }
    }
  } else if (PySet_CheckExact(obj)) {
    // A set read from the program: sets of constants and of objects that hash and compare
    // by identity in C (functions, builtins, classes), guarded equal as a whole: its table,
    // keys compared with ==, which for those objects is identity (their order of iteration
    // is then the same too). A tensor's hash is its address and an object's own __eq__ is
    // Python code: those sets are not read.
    Ref items = Ref::steal(PySequence_List(obj));
    if (!items) return failFromPython("reading a set");
    std::vector<ValuePtr> values;
    for (Py_ssize_t i = 0; i < PyList_GET_SIZE(items.get()); ++i) {
      PyObject* item = PyList_GET_ITEM(items.get(), i);
      if (isConstantObject(item)) {
        values.push_back(Value::constant(item));
        continue;
      }
      if (isTensor(item))
        return fail("a set read from the program holding tensors (their hash is their address: its order is not "
                    "stable; a dict keyed by the tensors is)");
      if (!identityHashed(item))
        return fail(std::string("a set read from the program holding a ") + Py_TYPE(item)->tp_name +
                    " object (only constants, functions and classes, compared by identity, are read)");
      values.push_back(Value::callable(item));
    }
    if (reg >= 0) {
      // Its table (equal sets of other histories walk and pop in other orders: the trace
      // walks, pops and changes a copy of this very table), compared with a private
      // snapshot: the set itself may be mutated by this very entry.
      guards().checkType(reg, Py_TYPE(obj));
      int table_reg = load(LoadKind::SetTable, reg, 0, nullptr, "<table of " + guards().sourceName(reg) + ">");
      Ref layout = setTableLayout(obj);
      if (!layout) return failFromPython("reading a set");
      guards().checkEquals(table_reg, layout.get());
    }
    v = Value::set(std::move(values), reg);
    // What the trace does to it replays on a copy of its very table (support/set_table.h),
    // so it walks and pops as the real set will, and that table is what the real set gets.
    Ref shadow = copySetTable(obj);
    if (!shadow) return failFromPython("reading a set");
    v->as<Set>().shadow = std::move(shadow);
  } else if (guards::isReadableIterator(obj) && reg >= 0) {
    // An iterator of a tuple, list, range, dict or set passed in: a tuple_iterator is what a
    // resume function receives for a for loop a break interrupted (the break's output plan
    // rebuilds the loop's iterator as iter(tuple)); the others, what a compiled frame returns.
    // Modeled as an Iterator over the items it has left, guarded by its type, their number
    // and each item as it is used; what the trace consumes is replayed on the real
    // iterator (an Advance effect, Iterators::appendAdvances), which the outputs hand back
    // as itself.
    // Its length and the items it has left past those taken are guarded only as far as
    // the trace depended on them (Iterators::guardInputs, once the entry is complete).
    guards().checkType(reg, Py_TYPE(obj));
    int rest_reg = load(LoadKind::IterRemaining, reg, 0, nullptr, guards().sourceName(reg) + ".<items left>");
    Ref rest = guards::iterRemaining(obj);
    if (!rest) return failFromPython("reading a tuple_iterator");
    Py_ssize_t n = PyTuple_GET_SIZE(rest.get());
    std::vector<ValuePtr> items;
    std::vector<int> item_regs;
    for (Py_ssize_t i = 0; i < n; ++i) {
      int item_reg = load(LoadKind::TupleItem, rest_reg, static_cast<int>(i), nullptr,
                          guards().sourceName(rest_reg) + "[" + std::to_string(i) + "]");
      Result<ValuePtr> item = wrap(PyTuple_GET_ITEM(rest.get(), i), item_reg);
      if (!item) return item;
      items.push_back(item.take());
      item_regs.push_back(item_reg);
    }
    v = Value::iterator(std::move(items), reinterpret_cast<PyObject*>(Py_TYPE(obj)), reg);
    wrapped_[reg] = v;
    if (Done d = iterators_.addInput(v, obj, rest_reg, std::move(item_regs)); !d) return d.stop();
  } else {
    return notHandled();
  }
  return v;
}

Result<ValuePtr> Tracer::wrapDictItems(PyObject* obj, int reg, PyObject* type) {
  std::vector<Ref> keys;
  std::vector<ValuePtr> values;
  if (reg >= 0) guards().checkDictKeys(reg, obj);
  // The items in the order iterating the dict meets them: an OrderedDict's linked order
  // (move_to_end changes it, not the storage order PyDict_Next walks), the key guard's order.
  Ref order = guards::dictKeysInOrder(obj);
  if (!order) return failFromPython("reading the keys of a dict");
  for (Py_ssize_t i = 0; i < PyTuple_GET_SIZE(order.get()); ++i) {
    PyObject* key = PyTuple_GET_ITEM(order.get(), i);
    // Constants, or objects hashed by identity (tensors, classes, functions, modules, user
    // objects), which the key guard then requires to be the same objects.
    if (!isConstantObject(key) && !isIdentityKey(key)) return fail("dict keys must be constants or objects hashed by identity");
    PyObject* value = PyDict_GetItemWithError(obj, key);  // such keys hash and compare in C
    if (!value) return PyErr_Occurred() ? failFromPython("reading a dict item") : fail("a dict changed while it was read");
    int item_reg = -1;
    if (reg >= 0) {
      Ref r = Ref::steal(PyObject_Repr(key));
      if (!r) PyErr_Clear();
      item_reg = load(LoadKind::DictItem, reg, 0, key, guards().sourceName(reg) + "[" + (r ? PyUnicode_AsUTF8(r.get()) : "?") + "]");
    }
    Result<ValuePtr> item = wrap(value, item_reg);
    if (!item) return item;
    keys.push_back(Ref::borrow(key));
    values.push_back(item.take());
  }
  return Value::dict(type, std::move(keys), std::move(values), reg);
}

// nn.Modules, Python modules, bound methods and callables read from the program;
// NotHandled for other objects.
Result<ValuePtr> Tracer::wrapCallable(PyObject* obj, int reg) {
  ValuePtr v;
  if (isModule(obj)) {
    if (reg < 0) return fail("an nn.Module without a source is not supported yet");
    // Like TorchDynamo with inline_inbuilt_nn_modules: the module's class is guarded, not
    // its identity. Everything the trace reads through it (submodules, parameters,
    // buffers, flags, hook dicts) is loaded live from the object and guarded itself, so
    // another instance of the same structure reuses the entry.
    guards().checkType(reg, Py_TYPE(obj));
    v = Value::of(Module{Ref::borrow(obj)}, reg);
  } else if (PyModule_Check(obj)) {
    if (reg >= 0) guards().checkIdentity(reg, obj);
    v = Value::of(PyModule{Ref::borrow(obj)}, reg);
  } else if (PyMethod_Check(obj)) {
    // A bound method (e.g. rebuilt on a resume function's stack): the receiver and the
    // function are sources of their own, so a new method object of the same pair matches.
    PyObject* self = PyMethod_GET_SELF(obj);
    PyObject* func = PyMethod_GET_FUNCTION(obj);
    int self_reg = -1, func_reg = -1;
    if (reg >= 0) {
      guards().checkType(reg, Py_TYPE(obj));
      self_reg = load(LoadKind::Attr, reg, 0, interned(Str::dunder_self), guards().sourceName(reg) + ".__self__");
      func_reg = load(LoadKind::Attr, reg, 0, interned(Str::dunder_func), guards().sourceName(reg) + ".__func__");
    }
    Result<ValuePtr> exit = contexts_.wrapExit(self, func, self_reg);
    if (!exit && !exit.notHandled()) return exit;
    if (exit) {
      v = exit.take();
    } else {
      Result<ValuePtr> receiver = wrap(self, self_reg);
      if (!receiver) return receiver;
      Result<ValuePtr> function = wrap(func, func_reg);
      if (!function) return function;
      v = Value::boundMethod(*receiver, func);
    }
  } else if (PyCFunction_Check(obj) && PyCFunction_GET_SELF(obj) &&
             (PyList_CheckExact(PyCFunction_GET_SELF(obj)) || PyDict_CheckExact(PyCFunction_GET_SELF(obj)) ||
              PyTuple_CheckExact(PyCFunction_GET_SELF(obj)) || isTensor(PyCFunction_GET_SELF(obj)))) {
    // A builtin method bound to a list, dict, tuple or tensor (e.g. `out.append` on a
    // resume function's stack): the receiver is a source of its own and the method is
    // called by name, so a new bound method of another list still matches.
    PyObject* self = PyCFunction_GET_SELF(obj);
    PyObject* mname = PyUnicode_FromString(reinterpret_cast<PyCFunctionObject*>(obj)->m_ml->ml_name);
    Ref name_ref = Ref::steal(mname);
    if (!mname) return failFromPython("a builtin method's name");
    int self_reg = -1;
    if (reg >= 0) {
      guards().checkType(reg, Py_TYPE(obj));
      self_reg = load(LoadKind::Attr, reg, 0, interned(Str::dunder_self), guards().sourceName(reg) + ".__self__");
      int name_reg = load(LoadKind::Attr, reg, 0, interned(Str::dunder_name), guards().sourceName(reg) + ".__name__");
      guards().checkEquals(name_reg, mname);
    }
    Result<ValuePtr> receiver = wrap(self, self_reg);
    if (!receiver) return receiver;
    v = Value::namedMethod(*receiver, mname);
  } else if (PyFunction_Check(obj) && PyFunction_GET_CLOSURE(obj) && !PyFunction_GET_DEFAULTS(obj) &&
             !PyFunction_GET_KW_DEFAULTS(obj) && reg >= 0) {
    // A closure (e.g. made by the frame before a graph break, rebuilt for its resume
    // function on every call): guarded by its code and globals, not its identity, as
    // TorchDynamo's CLOSURE_MATCH; the cells' contents are read (and guarded) through
    // the function's __closure__ when the inlined body reads them.
    guards().checkType(reg, Py_TYPE(obj));
    int code_reg = load(LoadKind::Attr, reg, 0, interned(Str::dunder_code), guards().sourceName(reg) + ".__code__");
    guards().checkIdentity(code_reg, PyFunction_GET_CODE(obj));
    int globals_reg =
        load(LoadKind::Attr, reg, 0, interned(Str::dunder_globals), guards().sourceName(reg) + ".__globals__");
    guards().checkIdentity(globals_reg, PyFunction_GET_GLOBALS(obj));
    v = Value::callable(obj, reg);
  } else if (reg >= 0 && reinterpret_cast<PyObject*>(Py_TYPE(obj)) == lookup(Obj::functools_partial)) {
    // A functools.partial passed in: its function, arguments and keywords read through it
    // and guarded each as what they are (a function by its code, tensors by their
    // metadata, ...), as TorchDynamo does, so another partial of the same function and
    // argument structure reuses the entry; called as a partial made in the trace would be,
    // and handed back as itself.
    guards().checkType(reg, Py_TYPE(obj));
    auto part = [&](const char* attr, Result<ValuePtr>* out) {
      Ref name = Ref::steal(PyUnicode_InternFromString(attr));
      Ref value = Ref::steal(name ? PyObject_GetAttr(obj, name.get()) : nullptr);
      if (!value) return false;
      *out = wrap(value.get(), load(LoadKind::Attr, reg, 0, name.get(), guards().sourceName(reg) + "." + attr));
      return true;
    };
    Result<ValuePtr> fn = notHandled(), args = notHandled(), kwargs = notHandled();
    if (!part("func", &fn) || !part("args", &args) || !part("keywords", &kwargs)) return failFromPython("functools.partial");
    if (!fn) return fn;
    if (!args) return args;
    if (!kwargs) return kwargs;
    if (PyObject* c = (*args)->constant(); c && PyTuple_Check(c)) {  // arguments that are all constants
      std::vector<ValuePtr> items;
      for (Py_ssize_t i = 0; i < PyTuple_GET_SIZE(c); ++i) items.push_back(Value::constant(PyTuple_GET_ITEM(c, i)));
      args = Value::tuple(std::move(items));
    }
    if (!(*args)->is(Kind::Tuple) || !(*kwargs)->is(Kind::Dict)) return fail("a functools.partial with odd parts");
    v = Value::of(Partial{fn.take(), args.take(), kwargs.take(), nullptr}, reg);
  } else if (PyCallable_Check(obj) && (!PyType_HasFeature(Py_TYPE(obj), Py_TPFLAGS_HEAPTYPE) || PyType_Check(obj) ||
                                       strcmp(Py_TYPE(obj)->tp_name, "functools.partial") == 0 || isCacheWrapper(obj) ||
                                       isOperatorObject(obj))) {
    // An operator of torch.ops is a callable like torch.sin, not an object whose Python
    // __call__ is traced: that __call__ only hands the arguments to the dispatcher's C
    // binding, which is no graph op. Guarded by identity, as TorchDynamo's ID_MATCH.
    if (reg >= 0) guards().checkIdentity(reg, obj);
    v = Value::callable(obj, reg);
  } else {
    return notHandled();
  }
  return v;
}

int Tracer::rootLocalRegister(SymbolicFrame& f, int index) {
  PyCodeObject* co = f.code;
  int nargs = co->co_argcount + co->co_kwonlyargcount + ((co->co_flags & CO_VARARGS) ? 1 : 0) +
              ((co->co_flags & CO_VARKEYWORDS) ? 1 : 0);
  if (index >= nargs || index >= root_view_.nfast || !root_view_.fast[index]) return -1;
  PyObject* name = PyTuple_GET_ITEM(co->co_localsplusnames, index);
  return load(LoadKind::Local, -1, index, nullptr, std::string("L['") + PyUnicode_AsUTF8(name) + "']");
}

Result<ValuePtr> Tracer::loadRootLocal(SymbolicFrame& f, int index) {
  int reg = rootLocalRegister(f, index);
  if (reg < 0) return notHandled();
  PyObject* obj = root_view_.fast[index];
  Result<ValuePtr> v = wrap(obj, reg);
  if (v) f.locals[index] = *v;
  return v;
}

Result<ValuePtr> Tracer::loadGlobal(SymbolicFrame& f, PyObject* name) {
  if (effects_.anyAttrOverlay()) {  // a global stored earlier in the trace
    int reg = load(LoadKind::Constant, -1, 0, f.globals.get(), "globals");
    if (ValuePtr v = effects_.overlayAttr(reg, name)) {
      if (v == SideEffects::deleted()) return fail("a global deleted in the trace");
      return v;
    }
  }
  PyObject* obj = PyDict_GetItemWithError(f.globals.get(), name);
  if (!obj && !PyErr_Occurred()) obj = PyDict_GetItemWithError(f.builtins.get(), name);
  if (!obj) {
    if (PyErr_Occurred()) return failFromPython("global lookup");
    return fail(std::string("name '") + PyUnicode_AsUTF8(name) + "' is not defined (NameError)");
  }
  if (f.root) {
    int reg = load(LoadKind::Global, -1, 0, name, std::string("G['") + PyUnicode_AsUTF8(name) + "']");
    return wrap(obj, reg);
  }
  // An inlined function reads its own globals dict (held by the guard program, read live
  // on every call), or the builtins when the name is not a global.
  PyObject* dict = PyDict_GetItemWithError(f.globals.get(), name) ? f.globals.get() : f.builtins.get();
  if (PyErr_Occurred()) return failFromPython("global lookup");
  int d = load(LoadKind::Constant, -1, 0, dict,
               dict == f.globals.get() ? "globals of " + std::string(PyUnicode_AsUTF8(f.code->co_qualname)) : "builtins");
  int reg = load(LoadKind::DictItem, d, 0, name, guards().sourceName(d) + "['" + PyUnicode_AsUTF8(name) + "']");
  return wrap(obj, reg);
}

}  // namespace cdynamo::trace
