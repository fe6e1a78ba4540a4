#include "runtime/compiled_entry.h"

#include "runtime/continuation.h"

namespace cdynamo::runtime {
namespace {

// Fixed buffers keep the hit path free of allocation for frames of up to 256 guard
// registers / graph inputs (2 KiB of stack each).
constexpr int kInlineSlots = 256;

// `memo` holds (borrowed) the objects already built for plans with a memo slot: a value
// made in the trace that is reachable twice is rebuilt once (aliasing, self-reference).
// Returns the built object, or null with an error set.
Ref build(const OutputPlan& p, PyObject* graph_out, PyObject* const* regs, PyObject** memo);

Ref remember(const OutputPlan& p, Ref obj, PyObject** memo) {
  if (obj && p.memo >= 0) memo[p.memo] = obj.get();
  return obj;
}

// A new tuple or list of the plans `items` built.
Ref buildSequence(bool tuple, const std::vector<OutputPlan>& items, PyObject* graph_out, PyObject* const* regs,
                  PyObject** memo, const OutputPlan* remembered) {
  Py_ssize_t n = static_cast<Py_ssize_t>(items.size());
  Ref seq = Ref::steal(tuple ? PyTuple_New(n) : PyList_New(n));
  if (!seq) return Ref();
  if (remembered) remember(*remembered, Ref::borrow(seq.get()), memo);
  for (Py_ssize_t i = 0; i < n; ++i) {
    Ref item = build(items[static_cast<size_t>(i)], graph_out, regs, memo);
    if (!item) return Ref();
    if (tuple)
      PyTuple_SET_ITEM(seq.get(), i, item.release());
    else
      PyList_SET_ITEM(seq.get(), i, item.release());
  }
  return seq;
}

Ref build(const OutputPlan& p, PyObject* graph_out, PyObject* const* regs, PyObject** memo) {
  switch (p.kind) {
    case OutputPlan::Kind::Memo: {
      PyObject* o = memo[p.index];
      if (!o) {
        PyErr_SetString(PyExc_RuntimeError, "cdynamo: cannot rebuild a container that contains itself");
        return Ref();
      }
      return Ref::borrow(o);
    }
    case OutputPlan::Kind::GraphOutput:
      return Ref::borrow(PySequence_Fast_GET_ITEM(graph_out, p.index));
    case OutputPlan::Kind::Constant:
      return p.constant.copy();
    case OutputPlan::Kind::Register:
      return Ref::borrow(regs[p.index]);
    case OutputPlan::Kind::Tuple:
    case OutputPlan::Kind::List: {
      bool tuple = p.kind == OutputPlan::Kind::Tuple;
      Ref seq = buildSequence(tuple, p.items, graph_out, regs, memo, !tuple && !p.constant ? &p : nullptr);
      if (!seq) return Ref();
      if (!tuple && p.constant)  // a deque: deque(items, maxlen)
        return remember(p, Ref::steal(PyObject_CallFunctionObjArgs(p.constant.get(), seq.get(),
                                                                   p.ctor_arg ? p.ctor_arg.get() : Py_None, nullptr)),
                        memo);
      if (tuple && p.constant)  // a namedtuple: tuple.__new__(cls, items)
        return Ref::steal(PyObject_CallMethod(reinterpret_cast<PyObject*>(&PyTuple_Type), "__new__", "OO",
                                              p.constant.get(), seq.get()));
      return seq;
    }
    case OutputPlan::Kind::Dict: {
      Ref d = Ref::steal(p.constant.get() == reinterpret_cast<PyObject*>(&PyDict_Type) ? PyDict_New()
                         : p.ctor_arg ? PyObject_CallOneArg(p.constant.get(), p.ctor_arg.get())  // defaultdict(factory)
                                      : PyObject_CallNoArgs(p.constant.get()));
      if (!d) return Ref();
      remember(p, Ref::borrow(d.get()), memo);
      for (size_t i = 0; i < p.items.size(); ++i) {
        Ref v = build(p.items[i], graph_out, regs, memo);
        if (!v || PyObject_SetItem(d.get(), p.keys[i].get(), v.get()) < 0) return Ref();
      }
      return d;
    }
    case OutputPlan::Kind::NewObject: {
      PyTypeObject* cls = reinterpret_cast<PyTypeObject*>(p.constant.get());
      Ref obj = Ref::steal(cls->tp_alloc(cls, 0));
      if (!obj) return Ref();
      remember(p, Ref::borrow(obj.get()), memo);
      Ref attrs = build(p.items[0], graph_out, regs, memo);
      PyObject** dictptr = attrs ? _PyObject_GetDictPtr(obj.get()) : nullptr;
      if (!attrs || !dictptr) {
        if (!PyErr_Occurred()) PyErr_SetString(PyExc_TypeError, "cdynamo: cannot rebuild an object without __dict__");
        return Ref();
      }
      Ref old = Ref::steal(*dictptr);
      *dictptr = attrs.release();
      return obj;
    }
    case OutputPlan::Kind::Call: {
      Ref args = buildSequence(true, p.items, graph_out, regs, memo, nullptr);
      if (!args) return Ref();
      return remember(p, Ref::steal(PyObject_Call(p.constant.get(), args.get(), nullptr)), memo);
    }
    case OutputPlan::Kind::Set: {
      Ref s = Ref::steal(PySet_New(nullptr));
      if (!s) return Ref();
      remember(p, Ref::borrow(s.get()), memo);
      for (const OutputPlan& item : p.items) {
        Ref v = build(item, graph_out, regs, memo);
        if (!v || PySet_Add(s.get(), v.get()) < 0) return Ref();
      }
      return s;
    }
  }
  return Ref();
}

bool applyEffect(const SideEffect& e, PyObject* target, PyObject* value) {
  int rc = 0;
  switch (e.kind) {
    case SideEffect::Kind::SetAttr:
      rc = PyObject_SetAttr(target, e.name.get(), value);
      break;
    case SideEffect::Kind::SetItem:
      rc = PyObject_SetItem(target, e.name.get(), value);
      break;
    case SideEffect::Kind::SetCell:
      rc = PyCell_Set(target, value);
      break;
    case SideEffect::Kind::ReplaceList:
      rc = PyList_SetSlice(target, 0, PyList_GET_SIZE(target), value);
      break;
    case SideEffect::Kind::ReplaceDict:
      PyDict_Clear(target);
      rc = PyDict_Update(target, value);
      break;
    case SideEffect::Kind::ReplaceSet: {
      PySet_Clear(target);
      Ref r = Ref::steal(PyNumber_InPlaceOr(target, value));
      rc = r ? 0 : -1;
      break;
    }
    case SideEffect::Kind::Advance: {
      Py_ssize_t n = PyLong_AsSsize_t(value);
      if (n < 0) return false;
      for (Py_ssize_t i = 0; i < n; ++i) {
        if (Ref item = Ref::steal(PyIter_Next(target))) continue;
        if (!PyErr_Occurred())
          PyErr_SetString(PyExc_RuntimeError, "cdynamo: an iterator had fewer items left than its guard checked");
        return false;
      }
      break;
    }
  }
  return rc == 0;
}

}  // namespace

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
  Ref result = build(output, graph_out.get(), regs, memo);
  if (result && !effects.empty()) {
    std::vector<Ref> values;
    values.reserve(effects.size());
    for (const SideEffect& e : effects) {
      values.push_back(build(e.value, graph_out.get(), regs, memo));
      if (!values.back()) {
        result.reset();
        break;
      }
    }
    for (size_t i = 0; result && i < effects.size(); ++i)
      if (!applyEffect(effects[i], regs[effects[i].reg], values[i].get())) result.reset();
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
