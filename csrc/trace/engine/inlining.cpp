// Functions: inlining a call (argument binding as CPython does it), closures and cells,
// functions made in the trace (MAKE_FUNCTION), star-calls, and generators run to
// completion (generator expressions consumed in place).
#include <algorithm>
#include <string>

#include "support/check.h"
#include "support/lookup.h"
#include "trace/kinds/iterator.h"
#include "trace/opcodes/handlers.h"
#include "trace/protocol/calls.h"
#include "trace/protocol/constants.h"
#include "trace/protocol/operators.h"
#include "trace/tracer.h"

namespace cdynamo::trace {

using bytecode::Op;

namespace {

ValuePtr newCell(ValuePtr contents) { return Value::of(Cell{std::move(contents), Ref()}); }

bool isFreeSlot(PyCodeObject* co, int i) { return i >= co->co_nlocalsplus - co->co_nfreevars; }
int freeIndex(PyCodeObject* co, int i) { return i - (co->co_nlocalsplus - co->co_nfreevars); }

// The guard register of the contents of free variable `arg` (real cell `real_cell`).
int loadCellContents(Tracer& t, SymbolicFrame& f, int arg, PyObject* real_cell) {
  const int j = freeIndex(f.code, arg);
  PyObject* varname = PyTuple_GET_ITEM(f.code->co_localsplusnames, arg);
  guards::GuardProgram& g = t.guards();
  if (f.root)  // named as torch._dynamo names a root frame's free variable: a local
    return t.load(guards::LoadKind::ClosureCell, -1, j, nullptr,
                  std::string("L['") + PyUnicode_AsUTF8(varname) + "']");
  int cellreg;
  if (f.function_reg >= 0) {
    int clo = t.load(guards::LoadKind::Attr, f.function_reg, 0, interned(Str::dunder_closure),
                     g.sourceName(f.function_reg) + ".__closure__");
    cellreg = t.load(guards::LoadKind::TupleItem, clo, j, nullptr, g.sourceName(clo) + "[" + std::to_string(j) + "]");
  } else {
    // A closure of a function reached without a source (a method from a class): the cell
    // object is pinned by the guard program and read live.
    cellreg = t.load(guards::LoadKind::Constant, -1, 0, real_cell,
                     std::string("cell of '") + PyUnicode_AsUTF8(varname) + "'");
  }
  return t.load(guards::LoadKind::Attr, cellreg, 0, interned(Str::cell_contents),
                g.sourceName(cellreg) + ".cell_contents");
}

// The guard register of the real cell object of free variable `arg`, to store into.
int loadCellObject(Tracer& t, SymbolicFrame& f, int arg, PyObject* real_cell) {
  PyCodeObject* co = f.code;
  const int j = freeIndex(co, arg);
  if (isFreeSlot(co, arg) && f.root) {
    PyObject* varname = PyTuple_GET_ITEM(co->co_localsplusnames, arg);
    return t.load(guards::LoadKind::ClosureCellObject, -1, j, nullptr,
                  std::string("closure cell of '") + PyUnicode_AsUTF8(varname) + "'");
  }
  if (isFreeSlot(co, arg) && f.function_reg >= 0) {
    int clo = t.load(guards::LoadKind::Attr, f.function_reg, 0, interned(Str::dunder_closure),
                     t.guards().sourceName(f.function_reg) + ".__closure__");
    return t.load(guards::LoadKind::TupleItem, clo, j, nullptr,
                  t.guards().sourceName(clo) + "[" + std::to_string(j) + "]");
  }
  return t.load(guards::LoadKind::Constant, -1, 0, real_cell, "cell of a nonlocal variable");
}

// The value of cell or free variable `arg`.
Result<ValuePtr> loadDeref(Tracer& t, SymbolicFrame& f, int arg) {
  PyCodeObject* co = f.code;
  ValuePtr slot = f.locals[arg];
  if (slot && slot->is(Kind::Cell)) {
    // A model of a real cell (outer) is not the only one: a function that closes over the
    // same real cell and was made before the trace (a resume function's frame calling a
    // closure of the original frame) stores into it through a model of its own. Every
    // store to a real cell updates the overlay, so the overlay is what the cell holds now.
    if (PyObject* outer = slot->as<Cell>().outer.get())
      if (ValuePtr stored = t.effects().overlayCell(outer)) return stored;
    const ValuePtr& contents = slot->as<Cell>().contents;
    if (!contents) return t.fail("free variable referenced before assignment (NameError)");
    return contents;
  }
  if (!isFreeSlot(co, arg)) return t.fail("LOAD_DEREF of a cell that was never made");
  const int j = freeIndex(co, arg);
  if (!f.closure || j >= PyTuple_GET_SIZE(f.closure.get())) return t.fail("free variable without a closure");
  PyObject* real_cell = PyTuple_GET_ITEM(f.closure.get(), j);
  if (ValuePtr stored = t.effects().overlayCell(real_cell)) return stored;  // assigned earlier in the trace (nonlocal)
  if (slot) return slot;                                                    // a free variable read before (memoized)
  PyObject* contents = PyCell_GET(real_cell);
  if (!contents) return t.fail("free variable referenced before assignment (NameError)");
  Result<ValuePtr> v = t.wrap(contents, loadCellContents(t, f, arg, real_cell));
  if (!v) return v.stop();
  f.locals[arg] = *v;
  return v;
}

}  // namespace

Result<Next> opMakeCell(Tracer& t, SymbolicFrame& f, const bytecode::Instruction& ins, Values&) {
  ValuePtr contents = f.locals[ins.arg];
  if (!contents && f.root) {
    Result<ValuePtr> r = t.loadRootLocal(f, ins.arg);
    if (!r && !r.notHandled()) return r.stop();
    if (r) contents = r.take();
  }
  f.locals[ins.arg] = newCell(contents);
  return Next::Fall;
}

Result<Next> opLoadClosure(Tracer& t, SymbolicFrame& f, const bytecode::Instruction& ins, Values& io) {
  const int arg = ins.arg;
  if (!f.locals[arg] && isFreeSlot(f.code, arg)) {
    // A cell of an enclosing real function: model it by its current contents. It is
    // marked external (outer) so that storing into it goes to the real cell. An empty one
    // (a resume function's cell of a local function defined after the break, which
    // refers to itself) is modelled empty: a read before the trace stores to it stops
    // the trace, so what the cell holds at run time is never assumed.
    if (!f.closure || freeIndex(f.code, arg) >= PyTuple_GET_SIZE(f.closure.get()))
      return t.fail("free variable without a closure");
    PyObject* real_cell = PyTuple_GET_ITEM(f.closure.get(), freeIndex(f.code, arg));
    ValuePtr cell;
    if (!t.effects().overlayCell(real_cell) && !PyCell_GET(real_cell)) {
      cell = newCell(nullptr);
    } else {
      Result<ValuePtr> contents = loadDeref(t, f, arg);
      if (!contents) return contents.stop();
      cell = newCell(contents.take());
    }
    cell->as<Cell>().outer = Ref::borrow(real_cell);
    cell->reg = loadCellObject(t, f, arg, real_cell);  // what a function made with it closes over
    f.locals[arg] = cell;
  }
  if (!f.locals[arg] || !f.locals[arg]->is(Kind::Cell)) return t.fail("LOAD_CLOSURE of a slot that is not a cell");
  io.assign(1, f.locals[arg]);
  return Next::Fall;
}

Result<Next> opLoadDeref(Tracer& t, SymbolicFrame& f, const bytecode::Instruction& ins, Values& io) {
  Result<ValuePtr> v = loadDeref(t, f, ins.arg);
  if (!v) return v.stop();
  io.assign(1, v.take());
  return Next::Fall;
}

Result<Next> opStoreDeref(Tracer& t, SymbolicFrame& f, const bytecode::Instruction& ins, Values& io) {
  // STORE_DEREF (io: the value) and DELETE_DEREF.
  PyCodeObject* co = f.code;
  const int arg = ins.arg;
  t.effects().noteMutation();
  ValuePtr slot = f.locals[arg];
  // A cell made in the trace changes (one of the program's changes through setCell below).
  if (slot && slot->is(Kind::Cell) && !slot->as<Cell>().outer) t.effects().noteChangeOf(slot.get());
  PyObject* real_cell = nullptr;  // a cell of a function outside the trace (nonlocal)
  if (slot && slot->is(Kind::Cell)) {
    real_cell = slot->as<Cell>().outer.get();
  } else if (isFreeSlot(co, arg) && f.closure) {
    real_cell = PyTuple_GET_ITEM(f.closure.get(), freeIndex(co, arg));
    slot = newCell(nullptr);
    slot->as<Cell>().outer = Ref::borrow(real_cell);
    f.locals[arg] = slot;
  } else {
    return t.fail("STORE_DEREF to a cell that was never made");
  }
  if (ins.op == Op::DELETE_DEREF && real_cell) return t.fail("del of a nonlocal variable outside the trace");
  ValuePtr& contents = slot->as<Cell>().contents;
  contents = ins.op == Op::STORE_DEREF ? io[0] : nullptr;
  // A store into one of the root frame's own cells names a tensor as a local store does
  // (torch._dynamo knows those cells' names; an inlined frame's cells are anonymous there).
  if (contents && f.root && !isFreeSlot(co, arg)) t.noteStored(contents, PyTuple_GET_ITEM(co->co_localsplusnames, arg));
  io.clear();
  // The cell written on every run is this frame's own (a closure made again has a new
  // cell), read from the closure the same way as the guards read its contents.
  if (real_cell)
    if (Done d = t.effects().setCell(loadCellObject(t, f, arg, real_cell), real_cell, contents); !d) return d.stop();
  return Next::Fall;
}

Result<Next> opMakeFunction(Tracer& t, SymbolicFrame& f, const bytecode::Instruction& ins, Values& io) {
  // io, bottom first: defaults (0x01), kwdefaults (0x02), annotations (0x04), closure
  // (0x08), the code object.
  const int arg = ins.arg;
  size_t next = 0;
  Function fn;
  if (arg & 0x01) fn.defaults = io[next++];
  if (arg & 0x02) fn.kwdefaults = io[next++];
  if (arg & 0x04) fn.annotations = io[next++];  // not needed to run it, but the program may read them
  if (arg & 0x08) fn.closure = io[next++]->as<Tuple>().items;
  PyObject* c = io[next]->constant();
  if (!c || !PyCode_Check(c)) return t.fail("MAKE_FUNCTION without a code object");
  fn.code = Ref::borrow(c);
  fn.qualname = Ref::borrow(reinterpret_cast<PyCodeObject*>(c)->co_qualname);
  fn.globals = f.globals;
  fn.builtins = f.builtins;
  io.assign(1, Value::of(std::move(fn)));
  return Next::Fall;
}

Result<Next> opCallFunctionEx(Tracer& t, SymbolicFrame&, const bytecode::Instruction& ins, Values& io) {
  // io: NULL, the callable, the positional arguments, and with arg & 1 the keywords.
  if (!io[0]->is(Kind::Null)) return t.fail("CALL_FUNCTION_EX without the NULL below its callable");
  std::vector<ValuePtr> args;
  if (Done d = iterate(t, io[2], &args); !d) return d.stop();
  Kwargs kw;
  if (ins.arg & 1) {
    const Dict* d = io[3]->get<Dict>();
    if (!d) return t.fail("**kwargs of a call must be a dict");
    for (size_t i = 0; i < d->keys.size(); ++i) {
      if (!PyUnicode_Check(d->keys[i].get())) return t.fail("keywords must be strings (TypeError)");
      kw.emplace_back(d->keys[i].copy(), d->values[i]);
    }
  }
  Result<ValuePtr> r = call(t, io[1], std::move(args), std::move(kw));
  if (!r) return r.stop();
  io.assign(1, r.take());
  return Next::Fall;
}

Result<ValuePtr> Tracer::inlineCode(PyCodeObject* co, PyObject* globals, PyObject* builtins, PyObject* real_closure,
                                    const std::vector<ValuePtr>* closure_cells, PyObject* defaults,
                                    PyObject* kwdefaults, const ValuePtr& defaults_value,
                                    const ValuePtr& kwdefaults_value, int func_reg, std::vector<ValuePtr> args,
                                    std::vector<std::pair<Ref, ValuePtr>> kwargs) {
  if (co->co_flags & (CO_COROUTINE | CO_ASYNC_GENERATOR | CO_ITERABLE_COROUTINE))
    return fail("inlining a coroutine is not supported");
  int depth = current_ ? current_->depth + 1 : 1;
  if (depth > kMaxInlineDepth) return fail("inlining is too deep (recursion limit)");

  SymbolicFrame f;
  f.code = co;
  f.globals = Borrowed(globals);
  f.builtins = Borrowed(builtins);
  f.closure = Borrowed(real_closure);
  f.instrs = bytecode::decode(co);
  f.locals.resize(co->co_nlocalsplus);
  f.parent = current_;
  f.depth = depth;
  f.function_reg = func_reg;
  f.generator = (co->co_flags & CO_GENERATOR) != 0;
  if (closure_cells) {
    int first_free = co->co_nlocalsplus - co->co_nfreevars;
    for (size_t j = 0; j < closure_cells->size(); ++j) f.locals[first_free + j] = (*closure_cells)[j];
  }

  // Bind arguments the way CPython does: positional, keywords, defaults, *args, **kwargs.
  const int nparams = co->co_argcount;
  const int nkwonly = co->co_kwonlyargcount;
  const bool varargs = co->co_flags & CO_VARARGS, varkw = co->co_flags & CO_VARKEYWORDS;
  size_t npos = std::min(args.size(), static_cast<size_t>(nparams));
  for (size_t i = 0; i < npos; ++i) f.locals[i] = args[i];
  int slot_varargs = nparams + nkwonly;
  int slot_varkw = slot_varargs + (varargs ? 1 : 0);
  if (args.size() > static_cast<size_t>(nparams)) {
    if (!varargs) return fail("too many positional arguments (TypeError)");
    f.locals[slot_varargs] = Value::tuple(std::vector<ValuePtr>(args.begin() + nparams, args.end()));
  } else if (varargs) {
    f.locals[slot_varargs] = Value::tuple({});
  }
  ValuePtr extra_kw = varkw ? Value::emptyDict() : nullptr;
  for (auto& [k, v] : kwargs) {
    int slot = -1;
    for (int i = co->co_posonlyargcount; i < nparams + nkwonly; ++i)
      if (PyUnicode_Compare(PyTuple_GET_ITEM(co->co_localsplusnames, i), k.get()) == 0) slot = i;
    if (slot < 0) {
      if (!varkw) return fail(std::string("unexpected keyword argument '") + PyUnicode_AsUTF8(k.get()) + "' (TypeError)");
      extra_kw->as<Dict>().keys.push_back(k.copy());
      extra_kw->as<Dict>().values.push_back(v);
      continue;
    }
    if (f.locals[slot]) return fail("multiple values for an argument (TypeError)");
    f.locals[slot] = v;
  }
  if (varkw) f.locals[slot_varkw] = extra_kw;
  Py_ssize_t ndefaults = defaults ? PyTuple_GET_SIZE(defaults)
                                  : (defaults_value && defaults_value->is(Kind::Tuple)
                                         ? static_cast<Py_ssize_t>(defaults_value->as<Tuple>().items.size())
                                         : 0);
  if (defaults_value && defaults_value->constant()) ndefaults = PyTuple_GET_SIZE(defaults_value->constant());
  // A default of a function the program holds is read through the function (its
  // __defaults__ / __kwdefaults__, guarded as any input): the program may change what a
  // mutable default holds, or assign other defaults, between calls.
  int defaults_reg = -1, kwdefaults_reg = -1;
  auto guardedDefault = [&](int fn_reg, int* holder, Py_ssize_t index, PyObject* name) {
    const std::string fn_name = guards().sourceName(fn_reg);
    if (*holder < 0) {
      *holder = name ? load(guards::LoadKind::Attr, fn_reg, 0, interned(Str::dunder_kwdefaults), fn_name + ".__kwdefaults__")
                     : load(guards::LoadKind::Attr, fn_reg, 0, interned(Str::dunder_defaults), fn_name + ".__defaults__");
      if (name) {
        guards().checkType(*holder, &PyDict_Type);
      } else {
        guards().checkType(*holder, &PyTuple_Type);
        guards().checkLength(*holder, ndefaults);
      }
    }
    if (name)
      return load(guards::LoadKind::DictItem, *holder, 0, name,
                  guards().sourceName(*holder) + "['" + PyUnicode_AsUTF8(name) + "']");
    return load(guards::LoadKind::TupleItem, *holder, static_cast<int>(index),
                nullptr, guards().sourceName(*holder) + "[" + std::to_string(index) + "]");
  };
  // A function reached without a source: a mutable default (a list, dict or set the
  // function keeps between calls, e.g. a cache) is pinned by the guard program and read
  // live, as such a function's cells are; an immutable one is a constant.
  auto pinnedDefault = [&](PyObject* value) {
    if (!(PyList_CheckExact(value) || PyDict_CheckExact(value) || PySet_CheckExact(value))) return -1;
    return load(guards::LoadKind::Constant, -1, 0, value,
                std::string("a default of '") + PyUnicode_AsUTF8(co->co_qualname) + "'");
  };
  for (int i = 0; i < nparams; ++i) {
    if (f.locals[i]) continue;
    Py_ssize_t d = i - (nparams - ndefaults);
    if (d < 0) return fail("missing a required argument (TypeError)");
    Result<ValuePtr> v = Stop{Outcome::NotHandled};
    if (defaults && func_reg >= 0) {
      v = wrap(PyTuple_GET_ITEM(defaults, d), guardedDefault(func_reg, &defaults_reg, d, nullptr));
    } else if (defaults) {
      v = wrap(PyTuple_GET_ITEM(defaults, d), pinnedDefault(PyTuple_GET_ITEM(defaults, d)));
    } else if (defaults_value->is(Kind::Constant)) {
      v = Value::constant(PyTuple_GET_ITEM(defaults_value->constant(), d));
    } else {
      v = defaults_value->as<Tuple>().items[static_cast<size_t>(d)];
    }
    if (!v) return v;
    f.locals[i] = v.take();
  }
  for (int i = nparams; i < nparams + nkwonly; ++i) {
    if (f.locals[i]) continue;
    PyObject* name = PyTuple_GET_ITEM(co->co_localsplusnames, i);
    Result<ValuePtr> v = notHandled();
    if (kwdefaults) {
      PyObject* d = PyDict_GetItemWithError(kwdefaults, name);
      if (d) v = wrap(d, func_reg >= 0 ? guardedDefault(func_reg, &kwdefaults_reg, -1, name) : pinnedDefault(d));
      else if (PyErr_Occurred()) return failFromPython("keyword-only defaults");
    } else if (kwdefaults_value && kwdefaults_value->is(Kind::Dict)) {
      int k = kwdefaults_value->as<Dict>().findKey(name);
      if (k == -2) return failFromPython("keyword-only defaults");
      if (k >= 0) v = kwdefaults_value->as<Dict>().values[static_cast<size_t>(k)];
    }
    if (v.notHandled()) return fail("missing a required keyword-only argument (TypeError)");
    if (!v) return v;
    f.locals[i] = v.take();
  }
  if (!f.generator) return runFrame(f);
  // A generator: its frame is kept, paused before its first instruction; each item taken
  // runs it to its next yield (resumeGenerator), so what it does between items happens
  // when it does in the program.
  auto gen = std::make_shared<GeneratorState>();
  gen->frame = std::move(f);
  gen->frame.parent = nullptr;
  generators_.push_back(gen);
  ValuePtr it = Value::iterator({}, reinterpret_cast<PyObject*>(&PyGen_Type));
  it->as<Iterator>().made = Iterator::Made::Generator;
  it->as<Iterator>().gen = std::move(gen);
  return it;
}

namespace {

// A generator that ended (returned, raised or closed) keeps nothing of its frame.
void finishGenerator(Iterator& iter) {
  iter.ended = true;
  if (!iter.gen) return;
  iter.gen->finished = true;
  iter.gen->frame.locals.clear();
  iter.gen->frame.stack.clear();
}

bool isSubclassOf(PyObject* type, PyObject* base) {
  return type && PyType_Check(type) &&
         PyType_IsSubtype(reinterpret_cast<PyTypeObject*>(type), reinterpret_cast<PyTypeObject*>(base));
}

}  // namespace

Done Tracer::resumeGenerator(const ValuePtr& it, const ValuePtr& sent, ValuePtr* item) {
  item->reset();
  Iterator& iter = it->as<Iterator>();
  if (iter.ended || !iter.gen || iter.gen->finished) return {};
  effects().noteChangeOf(it.get());
  std::shared_ptr<GeneratorState> gen = iter.gen;  // kept while it runs
  if (gen->running) return raiseNew(PyExc_ValueError, "generator already executing");
  SymbolicFrame& f = gen->frame;
  if (!gen->started) {
    if (sent && !sent->isNone()) return raiseNew(PyExc_TypeError, "can't send non-None value to a just-started generator");
    gen->started = true;
  } else {
    // Past its YIELD_VALUE, with the value sent in as that expression's value.
    f.stack.push_back(sent ? sent : Value::constant(Py_None));
    f.pc += 1;
  }
  return runGenerator(it, item);
}

Done Tracer::runGenerator(const ValuePtr& it, ValuePtr* item) {
  std::shared_ptr<GeneratorState> gen = it->as<Iterator>().gen;  // kept while it runs
  SymbolicFrame& f = gen->frame;
  const int depth = current_ ? current_->depth + 1 : 1;
  if (depth > kMaxInlineDepth) return fail("inlining is too deep (recursion limit)");
  f.parent = current_;
  f.depth = depth;
  f.suspended = false;
  gen->running = true;
  // The exception a generator handles is its own (CPython swaps the generator's exc_info
  // in while it runs): one it was handling when it paused comes back with it, and the
  // caller's comes back when it pauses or ends.
  ValuePtr caller_exc = current_exc_;
  if (gen->handled_exc) current_exc_ = gen->handled_exc;
  ++generator_depth_;
  Result<ValuePtr> r = runFrame(f);
  --generator_depth_;
  gen->handled_exc = f.suspended && current_exc_ != caller_exc ? current_exc_ : nullptr;
  current_exc_ = std::move(caller_exc);
  gen->running = false;
  f.parent = nullptr;
  if (!r) {
    finishGenerator(it->as<Iterator>());
    if (r.outcome() == Outcome::Raised && isSubclassOf(typeOf(*this, pending_exc_), PyExc_StopIteration)) {
      // PEP 479: a StopIteration raised inside a generator leaves it as a RuntimeError.
      ValuePtr cause = takePendingException();
      Ref exc = Ref::steal(PyObject_CallFunction(PyExc_RuntimeError, "s", "generator raised StopIteration"));
      if (!exc) return failFromPython("making an exception");
      if (PyObject* c = cause ? cause->real() : nullptr) {
        PyException_SetCause(exc.get(), Ref::borrow(c).release());
        PyException_SetContext(exc.get(), Ref::borrow(c).release());
      }
      return raiseValue(Value::object(exc.get()));
    }
    return r.stop();
  }
  if (f.suspended) {
    f.suspended = false;
    *item = r.take();
    return {};
  }
  gen->returned = r.take();  // returned: its StopIteration carries this
  finishGenerator(it->as<Iterator>());
  return {};
}

namespace {

// Whether generator frame `f`, paused at a YIELD_VALUE, is delegating to a subiterator
// (`yield from`): CPython's test, the RESUME after the yield has an argument of 2 or more.
// The subiterator is then on top of the frame's stack.
bool pausedInYieldFrom(const SymbolicFrame& f) {
  if (f.pc + 1 >= f.instrs.size() || f.stack.empty()) return false;
  const bytecode::Instruction& next = f.instrs[f.pc + 1];
  return next.op == bytecode::Op::RESUME && next.arg >= 2;
}

}  // namespace

Done Tracer::throwGenerator(const ValuePtr& it, ValuePtr exc, ValuePtr* item) {
  item->reset();
  Iterator& iter = it->as<Iterator>();
  std::shared_ptr<GeneratorState> gen = iter.gen;  // kept while it runs
  // One that ended (or whose items were all taken at once: its frame ran to its end)
  // raises it where throw() is called.
  if (!gen || iter.ended || gen->finished) return raiseValue(std::move(exc));
  if (gen->running) return raiseNew(PyExc_ValueError, "generator already executing");
  SymbolicFrame& f = gen->frame;
  const bool generator_exit = isSubclassOf(typeOf(*this, exc), PyExc_GeneratorExit);
  if (gen->started && pausedInYieldFrom(f)) {
    // `yield from`: the subiterator gets it first (GeneratorExit closes it). What the
    // subiterator yields, this one yields; its return value is the `yield from`'s value;
    // what it raises is raised here at the yield.
    const ValuePtr sub = f.stack.back();
    const Iterator* sub_iter = sub->get<Iterator>();
    if (!sub_iter) return fail("throw()/close() through `yield from` a value that is not an iterator");
    if (sub_iter->made == Iterator::Made::Generator) {
      gen->running = true;
      ValuePtr sub_item;
      Done d;
      if (generator_exit) {
        Result<ValuePtr> closed = closeGenerator(sub);
        if (!closed) d = closed.stop();
      } else {
        d = throwGenerator(sub, exc, &sub_item);
      }
      gen->running = false;
      if (!d) {
        if (d.outcome() != Outcome::Raised) return d;
        exc = takePendingException();  // raised at this one's yield instead
      } else if (!generator_exit) {
        if (sub_item) {
          *item = std::move(sub_item);  // still paused at the same yield
          return {};
        }
        // The subgenerator returned: past the `yield from` loop, with its value.
        const Iterator& done = sub->as<Iterator>();
        ValuePtr value = done.gen && done.gen->returned ? done.gen->returned : Value::constant(Py_None);
        if (f.pc == 0 || f.instrs[f.pc - 1].op != bytecode::Op::SEND) return fail("internal: `yield from` without its SEND");
        int target = bytecode::indexAtOffset(f.instrs, f.instrs[f.pc - 1].jumpTarget());
        if (target < 0) return fail("internal: SEND's target is not an instruction start");
        // SEND's exit: 3.11 puts the value in the receiver's place; 3.12 keeps the receiver
        // below it for END_SEND (the table's pushes on the jump: 1 or 2).
        if (bytecode::opPushes(bytecode::Op::SEND, f.instrs[f.pc - 1].arg, true) == 2)
          f.stack.push_back(std::move(value));
        else
          f.stack.back() = std::move(value);
        f.pc = static_cast<size_t>(target);
        return runGenerator(it, item);
      }
    } else if (sub_iter->stepper) {
      return fail("throw()/close() through `yield from` a user iterator (its throw/close methods are not modeled)");
    }
    // The iterators made in the trace other than generators have no throw() or close():
    // the exception is raised at the yield itself.
  }
  if (!gen->started) {
    // Raised before its first instruction, where no handler covers it.
    gen->started = true;
    f.pc = 0;
    pending_exc_ = std::move(exc);
  } else {
    // Paused at a yield: as CPython's generator send does for throw() too, the frame gets a
    // value pushed where the yield's result goes (None) before the exception unwinds it to
    // its handler's depth (3.12's `yield from` handler keeps that slot).
    f.stack.push_back(Value::constant(Py_None));
    pending_exc_ = std::move(exc);
  }
  ValuePtr caller_exc = current_exc_;
  if (gen->handled_exc) current_exc_ = gen->handled_exc;
  const bool chained = chainToHandled(pending_exc_->real());
  Done delivered = chained ? deliverException(f) : Done(notHandled());
  current_exc_ = std::move(caller_exc);
  if (!chained) return failOuterHandled();
  if (delivered.notHandled()) {
    // Not caught: it ends the generator and leaves throw() (a StopIteration as a
    // RuntimeError, PEP 479).
    ValuePtr raised = takePendingException();
    finishGenerator(iter);
    if (isSubclassOf(typeOf(*this, raised), PyExc_StopIteration)) {
      Ref e = Ref::steal(PyObject_CallFunction(PyExc_RuntimeError, "s", "generator raised StopIteration"));
      if (!e) return failFromPython("making an exception");
      if (PyObject* c = raised->real()) {
        PyException_SetCause(e.get(), Ref::borrow(c).release());
        PyException_SetContext(e.get(), Ref::borrow(c).release());
      }
      return raiseValue(Value::object(e.get()));
    }
    return raiseValue(std::move(raised));
  }
  if (!delivered) return delivered;
  return runGenerator(it, item);
}

Result<ValuePtr> Tracer::closeGenerator(const ValuePtr& it) {
  Iterator& iter = it->as<Iterator>();
  std::shared_ptr<GeneratorState> gen = iter.gen;
  if (gen && gen->running) return raiseNew(PyExc_ValueError, "generator already executing");
  if (!gen || !gen->started || gen->finished || iter.ended) {
    finishGenerator(iter);  // not started or ended: nothing runs
    return Value::constant(Py_None);
  }
  Ref exit = Ref::steal(PyObject_CallNoArgs(PyExc_GeneratorExit));
  if (!exit) return failFromPython("making an exception");
  ValuePtr item;
  Done d = throwGenerator(it, Value::object(exit.get()), &item);
  if (!d) {
    // It let GeneratorExit through (or ended with a StopIteration): closed.
    if (d.outcome() == Outcome::Raised) {
      PyObject* type = typeOf(*this, pending_exc_);
      if (isSubclassOf(type, PyExc_GeneratorExit) || isSubclassOf(type, PyExc_StopIteration)) {
        (void)takePendingException();
        return Value::constant(Py_None);
      }
    }
    return d.stop();
  }
  if (item) return raiseNew(PyExc_RuntimeError, "generator ignored GeneratorExit");
  return Value::constant(Py_None);  // returned (3.11's close() drops the value)
}

bool pausedInHandler(const SymbolicFrame& f) {
  std::vector<bytecode::ExceptionTableEntry> table;
  PyObject* bytes = f.code->co_exceptiontable;
  if (!bytecode::decodeExceptionTable(reinterpret_cast<const uint8_t*>(PyBytes_AS_STRING(bytes)),
                                      static_cast<size_t>(PyBytes_GET_SIZE(bytes)), &table))
    return true;
  const int offset = f.instrs[f.pc].offset;
  for (const auto& e : table)
    if (offset >= e.start && offset < e.end) return true;
  return false;
}

std::vector<ValuePtr> generatorValues(const GeneratorState& g) {
  std::vector<ValuePtr> out;
  for (const ValuePtr& v : g.frame.locals)
    if (v) out.push_back(v);
  for (const ValuePtr& v : g.frame.stack)
    if (v) out.push_back(v);
  return out;
}

}  // namespace cdynamo::trace
