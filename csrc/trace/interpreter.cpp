// The opcode loop: one case per base opcode of CPython 3.11. Handlers pop their inputs,
// call an operation of the Tracer (calls.cpp, ops.cpp) that states the meaning, and push
// the result. An opcode not handled here stops the trace with a named reason.
#include <string>

#include "support/check.h"
#include "support/lookup.h"
#include "support/stats.h"
#include "trace/tracer.h"

namespace cdynamo::trace {

using bytecode::Op;

namespace {

bool isNoneValue(const ValuePtr& v) { return v->isNone(); }

// Whether a value is a mutable object made in the trace (distinct from every other one).
bool madeMutable(const ValuePtr& v) {
  switch (v->kind()) {
    case Kind::NewObject:
    case Kind::List:
    case Kind::Dict:
    case Kind::Set:
      return v->reg < 0;
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
    case Kind::Super:
    case Kind::Partial:
    case Kind::Context:
      return false;
  }
  return false;
}

}  // namespace

Result<ValuePtr> Tracer::runFrame(SymbolicFrame& f) {
  for (;;) {
    Result<ValuePtr> r = runInstructions(f);
    if (r.outcome() != Outcome::Raised || failed_) return r;
    CDYNAMO_CHECK(pending_exc_ != nullptr, "a Raised outcome without an exception in flight");
    // An exception in flight at f.pc: find this frame's handler (3.11 exception table).
    if (!f.handlers_decoded) {
      PyObject* table = f.code->co_exceptiontable;
      if (!bytecode::decodeExceptionTable(reinterpret_cast<const uint8_t*>(PyBytes_AS_STRING(table)),
                                          static_cast<size_t>(PyBytes_GET_SIZE(table)), &f.handlers))
        return fail("malformed exception table");
      f.handlers_decoded = true;
    }
    int offset = f.instrs[f.pc].offset;
    const bytecode::ExceptionTableEntry* handler = nullptr;
    for (const auto& e : f.handlers)
      if (offset >= e.start && offset < e.end) {
        handler = &e;
        break;
      }
    if (!handler) return r;  // propagates to the caller
    int idx = bytecode::indexAtOffset(f.instrs, handler->target);
    if (idx < 0 || f.stack.size() < static_cast<size_t>(handler->depth)) return fail("bad exception handler");
    f.stack.resize(static_cast<size_t>(handler->depth));
    if (handler->lasti) f.stack.push_back(Value::constant(Ref::steal(PyLong_FromLong(offset)).get()));
    f.stack.push_back(std::move(pending_exc_));
    pending_exc_.reset();
    f.pc = static_cast<size_t>(idx);
  }
}

Result<ValuePtr> Tracer::runInstructions(SymbolicFrame& f) {
  SymbolicFrame* saved = current_;
  current_ = &f;
  struct Restore {
    Tracer* t;
    SymbolicFrame* saved;
    ~Restore() { t->current_ = saved; }
  } restore{this, saved};

  PyObject* consts = f.code->co_consts;
  PyObject* names = f.code->co_names;
  // Jumps name code-unit offsets; map them to instruction indices.
  auto jumpTo = [&](int offset) -> Done {
    int idx = bytecode::indexAtOffset(f.instrs, offset);
    if (idx < 0) return fail("jump to an offset that is not an instruction start");
    f.pc = static_cast<size_t>(idx);
    return {};
  };
  // Pushes an operation's value, or leaves the loop with its outcome.
#define PUSH_RESULT(expr)                      \
  do {                                         \
    Result<ValuePtr> pushed_ = (expr);         \
    if (!pushed_) return pushed_.stop();       \
    f.stack.push_back(pushed_.take());         \
  } while (0)
#define CHECK_DONE(expr)              \
  do {                                \
    Done done_ = (expr);              \
    if (!done_) return done_.stop();  \
  } while (0)

  while (f.pc < f.instrs.size()) {
    if (++instructions_run_ > kMaxInstructions) return fail("trace is too long (instruction budget exhausted)");
    if (f.root) {
      int visit = ++root_visits_[f.pc];
      if (static_cast<int>(f.pc) == break_target_.index && visit == break_target_.visit) {
        // The graph break: stop before this instruction with the state intact.
        stopped_at_break_ = true;
        grad_mode_at_break_ = currentGradMode();
        return Value::null();
      }
    }
    const bytecode::Instruction& ins = f.instrs[f.pc];
    size_t next_pc = f.pc + 1;
    const int arg = ins.arg;
    switch (ins.op) {
      case Op::NOP:
      case Op::RESUME:
      case Op::PRECALL:
      case Op::CACHE:
      case Op::EXTENDED_ARG:
      case Op::COPY_FREE_VARS:  // free variables are read lazily from the closure
        break;

      case Op::LOAD_FAST: {
        ValuePtr v = f.locals[arg];
        if (!v && f.root && !f.deleted[arg]) {
          Result<ValuePtr> r = loadRootLocal(f, arg);
          if (!r && !r.notHandled()) return r.stop();
          if (r) v = r.take();
        }
        if (!v) return fail("local variable referenced before assignment (UnboundLocalError)");
        f.stack.push_back(std::move(v));
        break;
      }
      case Op::STORE_FAST:
        f.locals[arg] = pop(f);
        break;
      case Op::DELETE_FAST:
        if (!f.locals[arg]) {
          Result<ValuePtr> r = f.root && !f.deleted[arg] ? loadRootLocal(f, arg) : Result<ValuePtr>(notHandled());
          if (!r && !r.notHandled()) return r.stop();
          if (!r) return fail("deleting an unbound local variable (UnboundLocalError)");
        }
        f.locals[arg] = nullptr;
        if (f.root) f.deleted[arg] = 1;
        break;
      case Op::LOAD_CONST:
        f.stack.push_back(Value::constant(PyTuple_GET_ITEM(consts, arg)));
        break;
      case Op::LOAD_GLOBAL: {
        PyObject* name = PyTuple_GET_ITEM(names, arg >> 1);
        if (arg & 1) f.stack.push_back(Value::null());
        PUSH_RESULT(loadGlobal(f, name));
        break;
      }
      case Op::LOAD_ATTR: {
        ValuePtr obj = pop(f);
        PUSH_RESULT(getAttr(obj, PyTuple_GET_ITEM(names, arg)));
        break;
      }
      case Op::LOAD_METHOD: {
        // Pushed as [NULL, bound callable]: the call handler does not need the
        // unbound-method form, and both layouts call the same thing.
        ValuePtr obj = pop(f);
        Result<ValuePtr> v = getAttr(obj, PyTuple_GET_ITEM(names, arg));
        if (!v) return v.stop();
        f.stack.push_back(Value::null());
        f.stack.push_back(v.take());
        break;
      }
      case Op::PUSH_NULL:
        f.stack.push_back(Value::null());
        break;
      case Op::KW_NAMES:
        f.kwnames = Ref::borrow(PyTuple_GET_ITEM(consts, arg));
        break;
      case Op::CALL: {
        // Stack: [callable_or_NULL, self_or_callable, arg1 .. argN] (3.11 convention).
        std::vector<ValuePtr> args = popN(f, static_cast<size_t>(arg));
        ValuePtr second = pop(f);
        ValuePtr first = pop(f);
        ValuePtr fn;
        if (first->is(Kind::Null)) {
          fn = second;
        } else {
          fn = first;
          args.insert(args.begin(), second);
        }
        std::vector<std::pair<Ref, ValuePtr>> kwargs;
        if (f.kwnames) {
          Py_ssize_t nk = PyTuple_GET_SIZE(f.kwnames.get());
          size_t npos = args.size() - static_cast<size_t>(nk);
          for (Py_ssize_t k = 0; k < nk; ++k)
            kwargs.emplace_back(Ref::borrow(PyTuple_GET_ITEM(f.kwnames.get(), k)), args[npos + k]);
          args.resize(npos);
          f.kwnames.reset();
        }
        PUSH_RESULT(call(fn, std::move(args), std::move(kwargs)));
        break;
      }
      case Op::BINARY_OP: {
        ValuePtr b = pop(f);
        ValuePtr a = pop(f);
        PUSH_RESULT(binaryOp(arg, a, b));
        break;
      }
      case Op::UNARY_POSITIVE:
      case Op::UNARY_NEGATIVE:
      case Op::UNARY_NOT:
      case Op::UNARY_INVERT: {
        ValuePtr a = pop(f);
        PUSH_RESULT(unaryOp(ins.op, a));
        break;
      }
      case Op::COMPARE_OP: {
        ValuePtr b = pop(f);
        ValuePtr a = pop(f);
        PUSH_RESULT(compareOp(arg, a, b));
        break;
      }
      case Op::IS_OP: {
        ValuePtr b = pop(f);
        ValuePtr a = pop(f);
        int same;
        auto hasObj = [](const ValuePtr& v) { return v->real() != nullptr; };
        if (a == b) {
          same = 1;  // the same value: the same object
        } else if (hasObj(a) && hasObj(b)) {
          same = a->real() == b->real();
        } else if (madeMutable(a) && madeMutable(b)) {
          same = 0;  // two distinct objects made in the trace
        } else if (a->is(Kind::Tensor) && b->is(Kind::Tensor)) {
          if (a->as<Tensor>().node != b->as<Tensor>().node)
            return fail("identity of two distinct tensors is not known at trace time");
          same = 1;
        } else if (a->constant() || b->constant()) {
          same = 0;  // a constant is never the same object as a tensor or container
        } else {
          return fail(std::string("`is` between ") + kindName(a->kind()) + " and " + kindName(b->kind()));
        }
        f.stack.push_back(Value::constant((same != arg) ? Py_True : Py_False));
        break;
      }
      case Op::CONTAINS_OP: {
        ValuePtr container = pop(f);
        ValuePtr item = pop(f);
        int r;
        if (isModuleContainer(container) && item->is(Kind::Constant)) {
          std::vector<std::pair<Ref, ValuePtr>> children;
          CHECK_DONE(moduleContainerItems(container, &children));
          r = 0;
          for (auto& kv : children) r = r || PyObject_RichCompareBool(kv.first.get(), item->constant(), Py_EQ) == 1;
        } else if (isUserObject(container)) {
          Result<ValuePtr> c = callDunder(container, interned(Str::dunder_contains), {item});
          if (c.notHandled()) return fail("`in` on an object without __contains__ is not supported yet");
          if (!c) return c.stop();
          Result<bool> t = truthValue(*c);
          if (!t) return t.stop();
          r = *t;
        } else if (container->is(Kind::Constant) && item->is(Kind::Constant)) {
          r = PySequence_Contains(container->constant(), item->constant());
          if (r < 0) return failFromPython("`in` on constants");
        } else {
          std::vector<ValuePtr> a{item};
          std::vector<std::pair<Ref, ValuePtr>> kw;
          bool mapping = container->is(Kind::Dict) || container->is(Kind::Set);
          if (!mapping && !container->is(Kind::List) && !container->is(Kind::Tuple))
            return fail(std::string("`in` on a ") + kindName(container->kind()) + " is not supported yet");
          Result<ValuePtr> c =
              callContainerMethod(container, interned(mapping ? Str::dunder_contains : Str::count), a, kw);
          if (!c) return c.stop();
          r = PyObject_IsTrue((*c)->constant());
        }
        f.stack.push_back(Value::constant((r != arg) ? Py_True : Py_False));
        break;
      }
      case Op::BINARY_SUBSCR: {
        ValuePtr index = pop(f);
        ValuePtr obj = pop(f);
        PUSH_RESULT(subscript(obj, index));
        break;
      }
      case Op::STORE_SUBSCR: {
        ValuePtr index = pop(f);
        ValuePtr obj = pop(f);
        ValuePtr value = pop(f);
        if (!obj->is(Kind::Tensor)) {
          CHECK_DONE(storeSubscript(obj, index, value));
          break;
        }
        PyObject* setitem = lookup(Obj::operator_setitem);
        if (!setitem) return failFromPython("operator.setitem");
        Result<ValuePtr> r = recordCall(graph::NodeOp::CallFunction, setitem, {obj, index, value}, {});
        if (!r) return r.stop();
        break;
      }
      case Op::BUILD_TUPLE:
      case Op::BUILD_LIST:
        if (ins.op == Op::BUILD_TUPLE)
          f.stack.push_back(Value::tuple(popN(f, static_cast<size_t>(arg))));
        else
          f.stack.push_back(Value::list(popN(f, static_cast<size_t>(arg))));
        break;
      case Op::LIST_TO_TUPLE: {
        ValuePtr l = pop(f);
        const List* list = l->get<List>();
        if (!list) return fail("LIST_TO_TUPLE on a non-list");
        f.stack.push_back(Value::tuple(list->items));
        break;
      }
      case Op::LIST_EXTEND: {
        ValuePtr seq = pop(f);
        List& list = f.stack[f.stack.size() - static_cast<size_t>(arg)]->as<List>();
        Result<ValuePtr> it = getIter(seq);
        if (!it) return it.stop();
        for (const ValuePtr& v : (*it)->as<Iterator>().items) list.items.push_back(v);
        break;
      }
      case Op::BUILD_SLICE: {
        std::vector<ValuePtr> parts = popN(f, static_cast<size_t>(arg));
        if (parts.size() == 2) parts.push_back(Value::constant(Py_None));
        f.stack.push_back(Value::of(Slice{{parts[0], parts[1], parts[2]}}));
        break;
      }
      case Op::UNPACK_SEQUENCE: {
        ValuePtr seq = pop(f);
        Result<ValuePtr> got = getIter(seq);
        if (!got) return got.stop();
        const std::vector<ValuePtr>& items = (*got)->as<Iterator>().items;
        if (items.size() > static_cast<size_t>(arg))
          return raiseNew(PyExc_ValueError, "too many values to unpack (expected " + std::to_string(arg) + ")");
        if (items.size() < static_cast<size_t>(arg))
          return raiseNew(PyExc_ValueError, "not enough values to unpack (expected " + std::to_string(arg) +
                                                ", got " + std::to_string(items.size()) + ")");
        for (auto r = items.rbegin(); r != items.rend(); ++r) f.stack.push_back(*r);
        break;
      }
      case Op::GET_ITER:
        PUSH_RESULT(getIter(pop(f)));
        break;
      case Op::FOR_ITER: {
        ValuePtr it = f.stack.back();
        Iterator* iter = it->get<Iterator>();
        if (!iter) return fail("FOR_ITER on a non-iterator");
        if (iter->pos < iter->items.size()) {
          ValuePtr item = iter->items[iter->pos];
          CHECK_DONE(advanceIterator(it, iter->pos + 1, false));
          f.stack.push_back(std::move(item));
        } else {
          CHECK_DONE(advanceIterator(it, iter->pos, true));
          f.stack.pop_back();
          CHECK_DONE(jumpTo(ins.jumpTarget()));
          next_pc = f.pc;
        }
        break;
      }
      case Op::POP_TOP:
        pop(f);
        break;
      case Op::COPY:
        f.stack.push_back(f.stack[f.stack.size() - static_cast<size_t>(arg)]);
        break;
      case Op::SWAP:
        std::swap(f.stack.back(), f.stack[f.stack.size() - static_cast<size_t>(arg)]);
        break;

      case Op::JUMP_FORWARD:
      case Op::JUMP_BACKWARD:
      case Op::JUMP_BACKWARD_NO_INTERRUPT:
        CHECK_DONE(jumpTo(ins.jumpTarget()));
        next_pc = f.pc;
        break;
      case Op::POP_JUMP_FORWARD_IF_FALSE:
      case Op::POP_JUMP_BACKWARD_IF_FALSE:
      case Op::POP_JUMP_FORWARD_IF_TRUE:
      case Op::POP_JUMP_BACKWARD_IF_TRUE: {
        ValuePtr v = pop(f);
        Result<bool> t = truthValue(v);
        if (!t) return t.stop();
        bool jump_if = ins.op == Op::POP_JUMP_FORWARD_IF_TRUE || ins.op == Op::POP_JUMP_BACKWARD_IF_TRUE;
        if (*t == jump_if) {
          CHECK_DONE(jumpTo(ins.jumpTarget()));
          next_pc = f.pc;
        }
        break;
      }
      case Op::POP_JUMP_FORWARD_IF_NONE:
      case Op::POP_JUMP_BACKWARD_IF_NONE:
      case Op::POP_JUMP_FORWARD_IF_NOT_NONE:
      case Op::POP_JUMP_BACKWARD_IF_NOT_NONE: {
        ValuePtr v = pop(f);
        bool none = isNoneValue(v);
        bool jump_if_none = ins.op == Op::POP_JUMP_FORWARD_IF_NONE || ins.op == Op::POP_JUMP_BACKWARD_IF_NONE;
        if (none == jump_if_none) {
          CHECK_DONE(jumpTo(ins.jumpTarget()));
          next_pc = f.pc;
        }
        break;
      }
      case Op::JUMP_IF_FALSE_OR_POP:
      case Op::JUMP_IF_TRUE_OR_POP: {
        Result<bool> t = truthValue(f.stack.back());
        if (!t) return t.stop();
        if (*t == (ins.op == Op::JUMP_IF_TRUE_OR_POP)) {
          CHECK_DONE(jumpTo(ins.jumpTarget()));
          next_pc = f.pc;
        } else {
          pop(f);
        }
        break;
      }
      case Op::RAISE_VARARGS: {
        ++opcodeCounts()[static_cast<int>(ins.op)];  // counted here: raising leaves the loop
        ValuePtr cause = arg == 2 ? pop(f) : nullptr;
        if (arg == 0) {
          if (!current_exc_) return raiseNew(PyExc_RuntimeError, "No active exception to reraise");
          return raiseValue(current_exc_);
        }
        ValuePtr exc = pop(f);
        if (exc->is(Kind::Callable) && PyExceptionClass_Check(exc->real())) {
          std::vector<ValuePtr> none;
          Result<ValuePtr> made = makeException(exc->real(), none);
          if (!made) return made.stop();
          exc = made.take();
        }
        if (!exc->real() || !PyExceptionInstance_Check(exc->real()))
          return raiseNew(PyExc_TypeError, "exceptions must derive from BaseException");
        if (cause) {
          PyObject* c = cause->real();
          if (!c) return fail("raise ... from a value made in the trace");
          if (c != Py_None && PyExceptionClass_Check(c)) return fail("raise ... from an exception class");
          PyException_SetCause(exc->real(), c == Py_None ? nullptr : Ref::borrow(c).release());
          // `from None` also suppresses the context, as CPython does.
          reinterpret_cast<PyBaseExceptionObject*>(exc->real())->suppress_context = 1;
        }
        return raiseValue(exc);
      }
      case Op::PUSH_EXC_INFO: {
        ValuePtr v = pop(f);
        f.stack.push_back(current_exc_ ? current_exc_ : Value::constant(Py_None));
        current_exc_ = v;
        f.stack.push_back(std::move(v));
        break;
      }
      case Op::POP_EXCEPT: {
        ValuePtr v = pop(f);
        current_exc_ = v->isNone() ? nullptr : v;
        break;
      }
      case Op::CHECK_EXC_MATCH: {
        ValuePtr right = pop(f);
        ValuePtr left = f.stack.back();
        Ref cls = toPython(right);
        if (!left->real() || !cls) return fail("except clause with values made in the trace");
        int r = PyErr_GivenExceptionMatches(left->real(), cls.get());
        f.stack.push_back(Value::constant(r ? Py_True : Py_False));
        break;
      }
      case Op::RERAISE: {
        // The lasti operand only fixes the traceback's line; the handler is looked up
        // from RERAISE itself, as ceval's exception_unwind does.
        ++opcodeCounts()[static_cast<int>(ins.op)];
        return raiseValue(pop(f));
      }
      case Op::WITH_EXCEPT_START: {
        // Stack: exit, lasti, previous exception, exception -> exit(type, value, traceback).
        ValuePtr exc = f.stack.back();
        ValuePtr exit = f.stack[f.stack.size() - 4];
        PyObject* e = exc->real();
        if (!e) return fail("exception made in the trace reaching a with-block");
        PUSH_RESULT(call(exit, {Value::callable(reinterpret_cast<PyObject*>(Py_TYPE(e))), exc,
                                Value::constant(Py_None)}, {}));
        break;
      }
      case Op::LOAD_ASSERTION_ERROR:
        f.stack.push_back(Value::callable(PyExc_AssertionError));
        break;
      case Op::IMPORT_NAME: {
        // `import m` of a module that is already imported (the common case inside
        // forward): the statement only reads sys.modules, so it is evaluated now. A first
        // import runs module code and is left to CPython.
        ValuePtr fromlist = pop(f);
        ValuePtr level = pop(f);
        PyObject* name = PyTuple_GET_ITEM(names, arg);
        PyObject* modules = PyImport_GetModuleDict();
        if (!level->is(Kind::Constant) || PyLong_AsLong(level->constant()) != 0 || !fromlist->is(Kind::Constant))
          return fail("relative imports inside the trace are not supported yet");
        if (!PyDict_GetItemWithError(modules, name)) {
          if (PyErr_Occurred()) return failFromPython("sys.modules");
          return fail("an import that would load a new module");
        }
        Ref mod = Ref::steal(PyImport_ImportModuleLevelObject(name, f.globals.get(), nullptr, fromlist->constant(), 0));
        if (!mod) return raisePython();
        f.stack.push_back(Value::of(PyModule{mod.copy()}));
        break;
      }
      case Op::IMPORT_FROM:
        PUSH_RESULT(getAttr(f.stack.back(), PyTuple_GET_ITEM(names, arg)));
        break;
      case Op::STORE_GLOBAL: {
        PyObject* name = PyTuple_GET_ITEM(names, arg);
        int reg = load(guards::LoadKind::Constant, -1, 0, f.globals.get(), "globals");
        ValuePtr value = pop(f);
        CHECK_DONE(recordEffect({PendingEffect::Kind::SetItem, reg, Ref::borrow(name), value}));
        setOverlayAttr(reg, name, value);
        break;
      }
      case Op::STORE_ATTR: {
        ValuePtr obj = pop(f);
        ValuePtr value = pop(f);
        CHECK_DONE(storeAttr(obj, PyTuple_GET_ITEM(names, arg), value));
        break;
      }
      case Op::BEFORE_WITH: {
        ValuePtr ctx = pop(f);
        if (isUserObject(ctx)) {
          Result<ValuePtr> exit = getAttr(ctx, interned(Str::dunder_exit));
          if (!exit) return exit.stop();
          Result<ValuePtr> entered = callDunder(ctx, interned(Str::dunder_enter), {});
          if (entered.notHandled()) return fail("`with` on an object without __enter__ (TypeError)");
          if (!entered) return entered.stop();
          f.stack.push_back(exit.take());
          f.stack.push_back(entered.take());
          break;
        }
        if (!ctx->is(Kind::Context))
          return fail(std::string("`with` on a ") + kindName(ctx->kind()) + " is not supported yet");
        Result<ValuePtr> entered = enterContext(ctx);
        if (!entered) return entered.stop();
        f.stack.push_back(Value::namedMethod(ctx, interned(Str::dunder_exit)));
        f.stack.push_back(entered.take());
        break;
      }
      case Op::RETURN_VALUE:
        ++opcodeCounts()[static_cast<int>(ins.op)];
        if (f.generator) {
          pop(f);
          return Value::iterator(std::move(f.yielded));
        }
        return pop(f);
      case Op::GET_YIELD_FROM_ITER:
        PUSH_RESULT(getIter(pop(f)));
        break;
      case Op::SEND: {
        // `yield from it` in a generator run to completion: every remaining item is
        // yielded now; the expression's value is None (iterators return nothing).
        pop(f);
        ValuePtr& receiver = f.stack.back();
        Iterator* iter = receiver->get<Iterator>();
        if (!f.generator || !iter) return fail("SEND outside a generator run in place");
        for (size_t k = iter->pos; k < iter->items.size(); ++k) f.yielded.push_back(iter->items[k]);
        CHECK_DONE(advanceIterator(ValuePtr(receiver), iter->items.size(), true));
        receiver = Value::constant(Py_None);
        CHECK_DONE(jumpTo(ins.jumpTarget()));
        next_pc = f.pc;
        break;
      }
      case Op::RETURN_GENERATOR:
        // A generator is run to completion where it is called: its values are collected
        // and handed to the consumer as an iterator.
        f.stack.push_back(Value::constant(Py_None));
        break;
      case Op::YIELD_VALUE:
        if (!f.generator) return fail("YIELD_VALUE outside a generator");
        f.yielded.push_back(pop(f));
        f.stack.push_back(Value::constant(Py_None));
        break;

      case Op::BUILD_MAP:
      case Op::BUILD_CONST_KEY_MAP:
      case Op::BUILD_SET:
      case Op::LIST_APPEND:
      case Op::SET_ADD:
      case Op::SET_UPDATE:
      case Op::DICT_UPDATE:
      case Op::DICT_MERGE:
      case Op::MAP_ADD:
      case Op::DELETE_SUBSCR:
      case Op::UNPACK_EX:
        CHECK_DONE(runContainerOpcode(f, ins));
        break;
      case Op::MAKE_CELL:
      case Op::LOAD_CLOSURE:
      case Op::LOAD_DEREF:
      case Op::STORE_DEREF:
      case Op::DELETE_DEREF:
      case Op::MAKE_FUNCTION:
      case Op::CALL_FUNCTION_EX:
        CHECK_DONE(runFunctionOpcode(f, ins));
        break;
      case Op::FORMAT_VALUE: {
        // f-string pieces of constants: format with CPython's own conversion rules.
        Ref spec;
        if ((arg & 0x04) == 0x04) spec = Ref::borrow(pop(f)->constant());
        ValuePtr v = pop(f);
        PyObject* c = v->constant();
        if (!c) return fail(std::string("formatting a ") + kindName(v->kind()) + " in an f-string is not supported yet");
        Ref conv;
        switch (arg & 0x03) {
          case 1: conv = Ref::steal(PyObject_Str(c)); break;
          case 2: conv = Ref::steal(PyObject_Repr(c)); break;
          case 3: conv = Ref::steal(PyObject_ASCII(c)); break;
          default: conv = Ref::borrow(c);
        }
        if (!conv) return failFromPython("f-string conversion");
        Ref out = Ref::steal(PyObject_Format(conv.get(), spec.get()));
        if (!out) return failFromPython("f-string formatting");
        f.stack.push_back(Value::constant(out.get()));
        break;
      }
      case Op::BUILD_STRING: {
        std::vector<ValuePtr> parts = popN(f, static_cast<size_t>(arg));
        Ref tuple = Ref::steal(PyTuple_New(arg));
        if (!tuple) return failFromPython("BUILD_STRING");
        for (int k = 0; k < arg; ++k) {
          PyObject* part = parts[k]->constant();
          if (!part || !PyUnicode_Check(part)) return fail("BUILD_STRING of non-strings");
          PyTuple_SET_ITEM(tuple.get(), k, Ref::borrow(part).release());
        }
        Ref empty = Ref::steal(PyUnicode_FromString(""));
        Ref joined = Ref::steal(empty ? PyUnicode_Join(empty.get(), tuple.get()) : nullptr);
        if (!joined) return failFromPython("BUILD_STRING");
        f.stack.push_back(Value::constant(joined.get()));
        break;
      }

      default:
        return fail(std::string("opcode ") + bytecode::opName(static_cast<int>(ins.op)) +
                    " is not supported yet");
    }
    // Every handler returns the Stop that fail() gave it; this only keeps a handler that
    // reported failure and still produced a value from going on.
    if (failed_) return Stop{Outcome::Unsupported};
    ++opcodeCounts()[static_cast<int>(ins.op)];
    f.pc = next_pc;
  }
  return fail("fell off the end of the code object");
#undef CHECK_DONE
#undef PUSH_RESULT
}

}  // namespace cdynamo::trace
