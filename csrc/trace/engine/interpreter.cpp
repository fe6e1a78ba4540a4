// The opcode loop: the dispatcher pops what the opcode table declares, runs the opcode's
// handler (handlers.h; handlerFor is the version's, trace/opcodes/dispatch_py3XX.cpp), checks
// and pushes what it gives, and delivers exceptions of the
// traced program through the frames' 3.11 exception tables.
#include <string>

#include "support/check.h"
#include "support/py_error.h"
#include "support/stats.h"
#include "trace/opcodes/handlers.h"
#include "trace/tracer.h"

namespace cdynamo::trace {

using bytecode::Op;

Done Tracer::deliverException(SymbolicFrame& f) {
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
  if (!handler) return notHandled();  // propagates to the caller
  int idx = bytecode::indexAtOffset(f.instrs, handler->target);
  if (idx < 0 || f.stack.size() < static_cast<size_t>(handler->depth)) return fail("bad exception handler");
  f.stack.resize(static_cast<size_t>(handler->depth));
  if (handler->lasti) f.stack.push_back(Value::constant(Ref::steal(PyLong_FromLong(offset)).get()));
  f.stack.push_back(std::move(pending_exc_));
  pending_exc_.reset();
  f.pc = static_cast<size_t>(idx);
  return {};
}

Result<ValuePtr> Tracer::runFrame(SymbolicFrame& f) {
  for (;;) {
    Result<ValuePtr> r = runInstructions(f);
    if (r.outcome() != Outcome::Raised || failed_) return r;
    CDYNAMO_CHECK(pending_exc_ != nullptr, "a Raised outcome without an exception in flight");
    if (Done tb = noteTraceback(f); !tb) return tb.stop();
    // An exception in flight at f.pc: this frame's handler (3.11 exception table), if any.
    Done delivered = deliverException(f);
    if (delivered.notHandled()) return r;
    if (!delivered) return delivered.stop();
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

  Values io;
  while (f.pc < f.instrs.size()) {
    if (++instructions_run_ > kMaxInstructions) return fail("trace is too long (instruction budget exhausted)");
    if (f.root) {
      int visit = ++root_visits_[f.pc];
      if (static_cast<int>(f.pc) == break_target_.index && visit == break_target_.visit) {
        // The graph break: stop before this instruction with the state intact. A Python
        // error left set by the trace so far (an internal inconsistency) would surface in
        // the Python code that builds and compiles the graph: no break then.
        if (PyErr_Occurred()) {
          FetchedError left = FetchedError::fetch();
          std::string name = left ? reinterpret_cast<PyTypeObject*>(left.type())->tp_name : "?";
          return fail(std::string("internal: a Python error (") + name + ") was left set before the graph break");
        }
        stopped_at_break_ = true;
        grad_mode_at_break_ = contexts_.gradMode();
        return Value::null();
      }
    }
    const bytecode::Instruction& ins = f.instrs[f.pc];
    Handler handler = handlerFor(ins.op);
    if (!handler)
      return fail(std::string("opcode ") + bytecode::opName(static_cast<int>(ins.op)) + " is not supported yet");
    // The inputs stay on the stack while the handler runs (an exception unwinds to its
    // handler's depth from the stack as it was before the instruction).
    const size_t pops = static_cast<size_t>(bytecode::opPops(ins.op, ins.arg));
    CDYNAMO_CHECK(f.stack.size() >= pops, "symbolic stack underflow");
    io.assign(f.stack.end() - static_cast<std::ptrdiff_t>(pops), f.stack.end());
    // Returns and raises leave the loop: they count as run when they start.
    const bool leaves = bytecode::neverFallsThrough(ins.op) && !bytecode::opHasFlag(ins.op, 'J');
    if (leaves) ++opcodeCounts()[static_cast<int>(ins.op)];
    Result<Next> next = handler(*this, f, ins, io);
    if (graph_.symbolic()) noteShapeGuards();  // the guards this instruction made the ShapeEnv add
    if (!next) return next.stop();
    // Every handler returns the Stop that fail() gave it; this only keeps a handler that
    // reported failure and still produced a value from going on.
    if (failed_) return Stop{Outcome::Unsupported};
    if (!leaves) ++opcodeCounts()[static_cast<int>(ins.op)];
    f.stack.resize(f.stack.size() - pops);
    if (*next == Next::Return) {
      CDYNAMO_CHECK(io.size() == 1, "a return without its value");
      return std::move(io[0]);
    }
    const bool jump = *next == Next::Jump;
    CDYNAMO_CHECK(io.size() == static_cast<size_t>(bytecode::opPushes(ins.op, ins.arg, jump)),
                  "a handler pushed other than its opcode table row says");
    for (ValuePtr& v : io) f.stack.push_back(std::move(v));
    if (!jump) {
      f.pc += 1;
      continue;
    }
    int target = bytecode::indexAtOffset(f.instrs, ins.jumpTarget());
    if (target < 0) return fail("jump to an offset that is not an instruction start");
    f.pc = static_cast<size_t>(target);
  }
  return fail("fell off the end of the code object");
}

}  // namespace cdynamo::trace
