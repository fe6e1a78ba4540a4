// Handlers of control flow: jumps, loops, returns, generators run in place, exceptions of
// the traced program and `with` blocks (handlers.h).
#include <string>

#include "support/lookup.h"
#include "trace/kinds/exception.h"
#include "trace/kinds/iterator.h"
#include "trace/kinds/object.h"
#include "trace/opcodes/handlers.h"
#include "trace/protocol/attributes.h"
#include "trace/protocol/calls.h"
#include "trace/protocol/constants.h"
#include "trace/protocol/operators.h"
#include "trace/tracer.h"

namespace cdynamo::trace {

using bytecode::Op;

Result<Next> opGetIter(Tracer& t, SymbolicFrame&, const bytecode::Instruction&, Values& io) {
  Result<ValuePtr> it = getIter(t, io[0]);
  if (!it) return it.stop();
  io.assign(1, it.take());
  return Next::Fall;
}

Result<Next> opForIter(Tracer& t, SymbolicFrame&, const bytecode::Instruction&, Values& io) {
  const ValuePtr it = io[0];
  Iterator* iter = it->get<Iterator>();
  if (!iter)  // an opaque iterator read from the program (a generator, a map object) or a non-iterator
    return t.fail(std::string("FOR_ITER on ") + (it->real() ? std::string("a ") + Py_TYPE(it->real())->tp_name + " object the trace cannot read ahead" : std::string("a non-iterator")));
  if (iter->lazy()) {  // a user iterator object (its __next__, inlined) or a lazy map: an item or its end
    ValuePtr item;
    if (Done d = stepUserIterator(t, it, &item); !d) return d.stop();
    if (!item) {
      io.clear();
      return Next::Jump;
    }
    io.push_back(std::move(item));
    return Next::Fall;
  }
  if (iter->pos < iter->items.size()) {
    ValuePtr item = iter->items[iter->pos];
    if (Done d = t.iterators().advance(it, iter->pos + 1, false); !d) return d.stop();
    io.push_back(std::move(item));
    return Next::Fall;
  }
  if (Done d = t.iterators().advance(it, iter->pos, true); !d) return d.stop();
  io.clear();  // exhausted: the iterator is popped
  return Next::Jump;
}

Result<Next> opJump(Tracer&, SymbolicFrame&, const bytecode::Instruction&, Values&) { return Next::Jump; }

namespace {

Result<Next> popJumpIf(Tracer& t, Values& io, bool jump_if) {
  Result<bool> truth = truthValue(t, io[0]);
  if (!truth) return truth.stop();
  io.clear();
  return *truth == jump_if ? Next::Jump : Next::Fall;
}

Result<Next> popJumpIfNone(Values& io, bool jump_if_none) {
  const bool none = io[0]->isNone();
  io.clear();
  return none == jump_if_none ? Next::Jump : Next::Fall;
}

Result<Next> jumpIfOrPop(Tracer& t, Values& io, bool jump_if) {
  Result<bool> truth = truthValue(t, io[0]);
  if (!truth) return truth.stop();
  if (*truth == jump_if) return Next::Jump;  // the value stays
  io.clear();
  return Next::Fall;
}

}  // namespace

Result<Next> opPopJumpIfTrue(Tracer& t, SymbolicFrame&, const bytecode::Instruction&, Values& io) {
  return popJumpIf(t, io, true);
}
Result<Next> opPopJumpIfFalse(Tracer& t, SymbolicFrame&, const bytecode::Instruction&, Values& io) {
  return popJumpIf(t, io, false);
}
Result<Next> opPopJumpIfNone(Tracer&, SymbolicFrame&, const bytecode::Instruction&, Values& io) {
  return popJumpIfNone(io, true);
}
Result<Next> opPopJumpIfNotNone(Tracer&, SymbolicFrame&, const bytecode::Instruction&, Values& io) {
  return popJumpIfNone(io, false);
}
Result<Next> opJumpIfTrueOrPop(Tracer& t, SymbolicFrame&, const bytecode::Instruction&, Values& io) {
  return jumpIfOrPop(t, io, true);
}
Result<Next> opJumpIfFalseOrPop(Tracer& t, SymbolicFrame&, const bytecode::Instruction&, Values& io) {
  return jumpIfOrPop(t, io, false);
}

Result<Next> opReturnValue(Tracer&, SymbolicFrame&, const bytecode::Instruction&, Values&) { return Next::Return; }

Result<Next> opReturnGenerator(Tracer&, SymbolicFrame&, const bytecode::Instruction&, Values& io) {
  // A generator's frame is made paused before this instruction (Tracer::inlineCode): its
  // first resumption runs from here. This stands for the value that resumption is sent
  // (popped by the POP_TOP that follows).
  io.assign(1, Value::constant(Py_None));
  return Next::Fall;
}

Result<Next> opYieldValue(Tracer& t, SymbolicFrame& f, const bytecode::Instruction&, Values& io) {
  if (!f.generator) return t.fail("YIELD_VALUE outside a generator");
  // The frame pauses here: resumeGenerator gets the value and resumes it past this
  // instruction, the value sent in pushed.
  f.suspended = true;
  return Next::Return;
}

Result<Next> opSend(Tracer& t, SymbolicFrame& f, const bytecode::Instruction&, Values& io) {
  // `yield from it`: the next item of `it` (stepped now), yielded by the YIELD_VALUE that
  // follows; at its end the expression's value (a generator's return value, else None)
  // and a jump past the loop. Stack: receiver, sent value.
  const ValuePtr receiver = io[0];
  Iterator* iter = receiver->get<Iterator>();
  if (!f.generator || !iter) return t.fail("SEND outside a generator, or to a non-iterator");
  ValuePtr item;
  if (iter->made == Iterator::Made::Generator) {
    if (Done d = t.resumeGenerator(receiver, io[1], &item); !d) return d.stop();
  } else {
    if (!io[1]->isNone()) return t.fail("send() of a value through `yield from` an iterator that is not a generator");
    if (Done d = nextItem(t, receiver, &item); !d) return d.stop();
  }
  if (item) {
    io.assign({receiver, std::move(item)});
    return Next::Fall;
  }
  const Iterator& done = receiver->as<Iterator>();
  ValuePtr value = Value::constant(Py_None);
  if (done.gen && done.gen->returned) value = done.gen->returned;
  io.assign(1, std::move(value));
  return Next::Jump;
}

Result<Next> opRaiseVarargs(Tracer& t, SymbolicFrame&, const bytecode::Instruction& ins, Values& io) {
  if (ins.arg == 0) {
    if (!t.handledException()) return t.raiseNew(PyExc_RuntimeError, "No active exception to reraise");
    return t.raiseValue(t.handledException());
  }
  ValuePtr exc = io[0];
  ValuePtr cause = ins.arg == 2 ? io[1] : nullptr;
  if (exc->is(Kind::Callable) && PyExceptionClass_Check(exc->real())) {
    Args none;
    Result<ValuePtr> made = makeException(t, exc->real(), none);
    if (!made) return made.stop();
    exc = made.take();
  }
  if (!exc->real() || !PyExceptionInstance_Check(exc->real()))
    return t.raiseNew(PyExc_TypeError, "exceptions must derive from BaseException");
  // Raising sets the exception's __context__ and __traceback__; on an object the program
  // passed in that would be a change made once, at trace time, and never on later calls.
  if (exc->reg >= 0) return t.fail("raising an exception object that exists outside the trace is not supported yet");
  if (cause) {
    PyObject* c = cause->real();
    if (!c) return t.fail("raise ... from a value made in the trace");
    if (c != Py_None && PyExceptionClass_Check(c)) return t.fail("raise ... from an exception class");
    PyException_SetCause(exc->real(), c == Py_None ? nullptr : Ref::borrow(c).release());
    // `from None` also suppresses the context, as CPython does.
    reinterpret_cast<PyBaseExceptionObject*>(exc->real())->suppress_context = 1;
  }
  if (!t.chainToHandled(exc->real())) return t.failOuterHandled();
  return t.raiseValue(exc);
}

Result<Next> opReraise(Tracer& t, SymbolicFrame&, const bytecode::Instruction&, Values& io) {
  // The lasti operand only fixes the traceback's line; the handler is looked up from
  // RERAISE itself, as ceval's exception_unwind does.
  return t.raiseValue(io[0]);
}

Result<Next> opPushExcInfo(Tracer& t, SymbolicFrame&, const bytecode::Instruction&, Values& io) {
  ValuePtr exc = io[0];
  io = {t.handledException() ? t.handledException() : Value::constant(Py_None), exc};
  t.setHandledException(std::move(exc));
  return Next::Fall;
}

Result<Next> opPopExcept(Tracer& t, SymbolicFrame&, const bytecode::Instruction&, Values& io) {
  t.setHandledException(io[0]->isNone() ? nullptr : io[0]);
  io.clear();
  return Next::Fall;
}

Result<Next> opCheckExcMatch(Tracer& t, SymbolicFrame&, const bytecode::Instruction&, Values& io) {
  // Stack: exception, class -> exception, whether it matches.
  const ValuePtr& left = io[0];
  Ref cls = toPython(t, io[1]);
  if (!left->real() || !cls) return t.fail("except clause with values made in the trace");
  int r = PyErr_GivenExceptionMatches(left->real(), cls.get());
  io[1] = Value::constant(r ? Py_True : Py_False);
  return Next::Fall;
}

Result<Next> opWithExceptStart(Tracer& t, SymbolicFrame&, const bytecode::Instruction&, Values& io) {
  // Stack: exit, lasti, previous exception, exception -> the same, exit(type, value, traceback).
  const ValuePtr exit = io[0];
  const ValuePtr exc = io[3];
  PyObject* e = exc->real();
  if (!e) return t.fail("exception made in the trace reaching a with-block");
  Result<ValuePtr> r =
      call(t, exit, {Value::callable(reinterpret_cast<PyObject*>(Py_TYPE(e))), exc, Value::constant(Py_None)}, {});
  if (!r) return r.stop();
  io.push_back(r.take());
  return Next::Fall;
}

Result<Next> opBeforeWith(Tracer& t, SymbolicFrame&, const bytecode::Instruction&, Values& io) {
  const ValuePtr ctx = io[0];
  if (isUserObject(ctx)) {
    Result<ValuePtr> exit = getAttr(t, ctx, interned(Str::dunder_exit));
    if (!exit) return exit.stop();
    Result<ValuePtr> entered = callDunder(t, ctx, interned(Str::dunder_enter), {});
    if (entered.notHandled()) return t.fail("`with` on an object without __enter__ (TypeError)");
    if (!entered) return entered.stop();
    ValuePtr exit_fn = exit.take();
    // contextlib.nullcontext is the one such class torch._dynamo resumes inside.
    PyObject* nullcontext = lookup(Obj::contextlib_nullcontext);
    if (!nullcontext) PyErr_Clear();
    if (!nullcontext || typeOf(t, ctx) != nullcontext)
      t.contexts().noteProgramWith(exit_fn);
    io = {std::move(exit_fn), entered.take()};
    return Next::Fall;
  }
  if (!ctx->is(Kind::Context))
    return t.fail(std::string("`with` on ") + describe(ctx) + " is not supported yet");
  Result<ValuePtr> entered = t.contexts().enter(ctx);
  if (!entered) return entered.stop();
  io = {Value::namedMethod(ctx, interned(Str::dunder_exit)), entered.take()};
  return Next::Fall;
}

}  // namespace cdynamo::trace
