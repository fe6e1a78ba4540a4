// Functions: inlining a call (argument binding as CPython does it), closures and cells,
// functions made in the trace (MAKE_FUNCTION), star-calls, and generators run to
// completion (generator expressions consumed in place).
#include <string>

#include "support/check.h"
#include "support/lookup.h"
#include "trace/tracer.h"

namespace cdynamo::trace {

using bytecode::Op;

namespace {

ValuePtr newCell(ValuePtr contents) {
  return Value::of(Cell{std::move(contents), Ref()});
}

bool isFreeSlot(PyCodeObject* co, int i) { return i >= co->co_nlocalsplus - co->co_nfreevars; }

}  // namespace

Done Tracer::runFunctionOpcode(SymbolicFrame& f, const bytecode::Instruction& ins) {
  const int arg = ins.arg;
  PyCodeObject* co = f.code;
  switch (ins.op) {
    case Op::MAKE_CELL: {
      ValuePtr contents = f.locals[arg];
      if (!contents && f.root) {
        Result<ValuePtr> r = loadRootLocal(f, arg);
        if (!r && !r.notHandled()) return r.stop();
        if (r) contents = r.take();
      }
      f.locals[arg] = newCell(contents);
      return {};
    }
    case Op::LOAD_CLOSURE: {
      if (!f.locals[arg] && isFreeSlot(co, arg)) {
        // A cell of an enclosing real function: model it by its current contents. It is
        // marked external (reg) so that storing into it is refused, not lost.
        bytecode::Instruction load = ins;
        load.op = Op::LOAD_DEREF;
        if (Done d = runFunctionOpcode(f, load); !d) return d;
        ValuePtr contents = pop(f);
        ValuePtr cell = newCell(contents);
        int j = arg - (co->co_nlocalsplus - co->co_nfreevars);
        cell->as<Cell>().outer = Ref::borrow(PyTuple_GET_ITEM(f.closure.get(), j));  // the real cell: stores go to it
        f.locals[arg] = cell;
      }
      if (!f.locals[arg] || !f.locals[arg]->is(Kind::Cell)) return fail("LOAD_CLOSURE of a slot that is not a cell");
      f.stack.push_back(f.locals[arg]);
      return {};
    }
    case Op::LOAD_DEREF: {
      ValuePtr slot = f.locals[arg];
      if (slot && slot->is(Kind::Cell)) {
        const ValuePtr& contents = slot->as<Cell>().contents;
        if (!contents) return fail("free variable referenced before assignment (NameError)");
        f.stack.push_back(contents);
        return {};
      }
      if (!isFreeSlot(co, arg)) return fail("LOAD_DEREF of a cell that was never made");
      int j = arg - (co->co_nlocalsplus - co->co_nfreevars);
      if (!f.closure || j >= PyTuple_GET_SIZE(f.closure.get())) return fail("free variable without a closure");
      PyObject* real_cell = PyTuple_GET_ITEM(f.closure.get(), j);
      auto stored = cell_overlay_.find(real_cell);
      if (stored != cell_overlay_.end()) {  // assigned earlier in the trace (nonlocal)
        f.stack.push_back(stored->second);
        return {};
      }
      if (slot) {  // a free variable read before (memoized)
        f.stack.push_back(slot);
        return {};
      }
      PyObject* contents = PyCell_GET(real_cell);
      if (!contents) return fail("free variable referenced before assignment (NameError)");
      PyObject* varname = PyTuple_GET_ITEM(co->co_localsplusnames, arg);
      int reg = -1;
      if (f.root) {
        reg = load(guards::LoadKind::ClosureCell, -1, j, nullptr,
                   std::string("closure['") + PyUnicode_AsUTF8(varname) + "']");
      } else if (f.function_reg >= 0) {
        int clo = load(guards::LoadKind::Attr, f.function_reg, 0, interned(Str::dunder_closure),
                       guards().sourceName(f.function_reg) + ".__closure__");
        int cellreg = load(guards::LoadKind::TupleItem, clo, j, nullptr,
                           guards().sourceName(clo) + "[" + std::to_string(j) + "]");
        reg = load(guards::LoadKind::Attr, cellreg, 0, interned(Str::cell_contents),
                   guards().sourceName(cellreg) + ".cell_contents");
      } else {
        // A closure of a function reached without a source (a method from a class):
        // the cell object is pinned by the guard program and read live.
        int cellreg = load(guards::LoadKind::Constant, -1, 0, real_cell,
                           std::string("cell of '") + PyUnicode_AsUTF8(varname) + "'");
        reg = load(guards::LoadKind::Attr, cellreg, 0, interned(Str::cell_contents),
                   guards().sourceName(cellreg) + ".cell_contents");
      }
      Result<ValuePtr> v = wrap(contents, reg);
      if (!v) return v.stop();
      f.locals[arg] = *v;
      f.stack.push_back(v.take());
      return {};
    }
    case Op::STORE_DEREF:
    case Op::DELETE_DEREF: {
      ++mutations_;
      ValuePtr slot = f.locals[arg];
      PyObject* real_cell = nullptr;  // a cell of a function outside the trace (nonlocal)
      if (slot && slot->is(Kind::Cell)) {
        real_cell = slot->as<Cell>().outer.get();
      } else if (isFreeSlot(co, arg) && f.closure) {
        real_cell = PyTuple_GET_ITEM(f.closure.get(), arg - (co->co_nlocalsplus - co->co_nfreevars));
        slot = newCell(nullptr);
        slot->as<Cell>().outer = Ref::borrow(real_cell);
        f.locals[arg] = slot;
      } else {
        return fail("STORE_DEREF to a cell that was never made");
      }
      if (ins.op == Op::DELETE_DEREF && real_cell) return fail("del of a nonlocal variable outside the trace");
      ValuePtr& contents = slot->as<Cell>().contents;
      contents = ins.op == Op::STORE_DEREF ? pop(f) : nullptr;
      if (real_cell) {
        // The cell written on every run is this frame's own (a closure made again has a
        // new cell), read from the closure the same way as the guards read its contents.
        int reg;
        int j = arg - (co->co_nlocalsplus - co->co_nfreevars);
        PyObject* varname = PyTuple_GET_ITEM(co->co_localsplusnames, arg);
        if (isFreeSlot(co, arg) && f.root) {
          reg = load(guards::LoadKind::ClosureCellObject, -1, j, nullptr,
                     std::string("closure cell of '") + PyUnicode_AsUTF8(varname) + "'");
        } else if (isFreeSlot(co, arg) && f.function_reg >= 0) {
          int clo = load(guards::LoadKind::Attr, f.function_reg, 0, interned(Str::dunder_closure),
                         guards().sourceName(f.function_reg) + ".__closure__");
          reg = load(guards::LoadKind::TupleItem, clo, j, nullptr, guards().sourceName(clo) + "[" + std::to_string(j) + "]");
        } else {
          reg = load(guards::LoadKind::Constant, -1, 0, real_cell, "cell of a nonlocal variable");
        }
        if (Done d = recordEffect({PendingEffect::Kind::SetCell, reg, Ref(), contents}); !d) return d;
        cell_overlay_[real_cell] = contents;
      }
      return {};
    }
    case Op::MAKE_FUNCTION: {
      ValuePtr code = pop(f);
      Function fn;
      if (arg & 0x08) {
        ValuePtr closure = pop(f);
        fn.closure = closure->as<Tuple>().items;
      }
      if (arg & 0x04) pop(f);  // annotations: not needed to run the function
      if (arg & 0x02) fn.kwdefaults = pop(f);
      if (arg & 0x01) fn.defaults = pop(f);
      PyObject* c = code->constant();
      if (!c || !PyCode_Check(c)) return fail("MAKE_FUNCTION without a code object");
      fn.code = Ref::borrow(c);
      fn.qualname = Ref::borrow(reinterpret_cast<PyCodeObject*>(c)->co_qualname);
      fn.globals = f.globals;
      fn.builtins = f.builtins;
      f.stack.push_back(Value::of(std::move(fn)));
      return {};
    }
    case Op::CALL_FUNCTION_EX: {
      ValuePtr kwargs = (arg & 1) ? pop(f) : nullptr;
      ValuePtr callargs = pop(f);
      ValuePtr fn = pop(f);
      ValuePtr null = pop(f);
      if (!null->is(Kind::Null)) f.stack.push_back(null);  // a method-call layout keeps its self below
      std::vector<ValuePtr> args;
      if (Done d = iterate(callargs, &args); !d) return d;
      std::vector<std::pair<Ref, ValuePtr>> kw;
      if (kwargs) {
        const Dict* d = kwargs->get<Dict>();
        if (!d) return fail("**kwargs of a call must be a dict");
        for (size_t i = 0; i < d->keys.size(); ++i) {
          if (!PyUnicode_Check(d->keys[i].get())) return fail("keywords must be strings (TypeError)");
          kw.emplace_back(d->keys[i].copy(), d->values[i]);
        }
      }
      Result<ValuePtr> r = call(fn, std::move(args), std::move(kw));
      if (!r) return r.stop();
      if (!null->is(Kind::Null)) f.stack.pop_back();
      f.stack.push_back(r.take());
      return {};
    }
    default:
      break;
  }
  return fail(std::string("opcode ") + bytecode::opName(static_cast<int>(ins.op)) + " is not a function opcode");
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
  for (int i = 0; i < nparams; ++i) {
    if (f.locals[i]) continue;
    Py_ssize_t d = i - (nparams - ndefaults);
    if (d < 0) return fail("missing a required argument (TypeError)");
    Result<ValuePtr> v = Stop{Outcome::NotHandled};
    if (defaults) {
      v = wrap(PyTuple_GET_ITEM(defaults, d), -1);
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
      if (d) v = wrap(d, -1);
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
  ++generator_depth_;
  Result<ValuePtr> r = runFrame(f);
  --generator_depth_;
  return r;
}

}  // namespace cdynamo::trace
