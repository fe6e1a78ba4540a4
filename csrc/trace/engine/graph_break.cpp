// Graph breaks: what happens when the trace cannot go on.
//
// The first trace runs until something is unsupported. If that happened while the root
// frame was running instruction I (directly, or inside a call it inlines), and I is an
// instruction that can run natively on its own, the frame is traced again and stopped
// right before I (the same visit of I, for loops). That second trace has the state the
// break needs, untouched by the failed attempt: the graph of everything before I, the
// symbolic stack and locals, the side effects so far. The entry then
//   1. runs the graph and replays the side effects,
//   2. rebuilds the locals and the value stack as real objects (output plans),
//   3. calls the break code, which runs I natively and continues in a resume function
//      per successor of I (bytecode/resume.h), captured in turn when it is called.
// A failure inside an inlined call breaks the root frame at the CALL: the callee then runs
// natively and is captured as a frame of its own, as in TorchDynamo.
#include <string>

#include "bytecode/resume.h"
#include "bytecode/version.h"
#include "runtime/continuation.h"
#include "support/lookup.h"
#include "support/py_error.h"
#include "support/stats.h"
#include "trace/tracer.h"

namespace cdynamo::trace {

using bytecode::Op;

namespace {

// How the breaking instruction changes the stack on each way out of it.
struct Successor {
  int index;   // instruction index (in the traced code) where execution continues
  int pops;
  int pushes;  // values pushed
  bool null_first = false;  // the first of them is a NULL (LOAD_METHOD, LOAD_GLOBAL with bit 0:
                            // the break code runs the plain load, then pushes NULL below it)
};

struct BreakShape {
  int first;  // first instruction of the breaking sequence (KW_NAMES/PRECALL before CALL)
  std::vector<Successor> successors;
};

// The instructions that may run natively as a graph break (flag G of the opcode table):
// their effect on the stack is fixed and they do not touch locals or the block structure.
// Others (loads of NULL, the loop and exception machinery, returns) make the frame run
// natively instead. Each way out pops and pushes what the table says.
bool shapeOf(const SymbolicFrame& f, size_t pc, BreakShape* out, std::string* why) {
  const bytecode::Instruction& ins = f.instrs[pc];
  const int idx = static_cast<int>(pc);
  out->first = idx;
  int target = -1;
  const bool jumps = bytecode::opHasFlag(ins.op, 'J');
  if (jumps) target = bytecode::indexAtOffset(f.instrs, ins.jumpTarget());
  if (!bytecode::opHasFlag(ins.op, 'G') || (jumps && target < 0)) {
    const char* name = bytecode::opName(static_cast<int>(ins.op));
    *why = std::string("cannot break the graph at ") + (name ? name : "?");
    return false;
  }
  // The call's KW_NAMES (and on 3.11 its PRECALL) run natively with it.
  if (ins.op == Op::CALL) out->first = bytecode::callSequenceStart(f.instrs, idx);
  const int pops = bytecode::opPops(ins.op, ins.arg);
  const bool null_first = bytecode::pushesNullBelow(ins);
  out->successors.push_back({idx + 1, pops, bytecode::opPushes(ins.op, ins.arg, false), null_first});
  if (jumps) out->successors.push_back({target, pops, bytecode::opPushes(ins.op, ins.arg, true)});
  return true;
}

}  // namespace

Done Tracer::breakArguments(SymbolicFrame& f, PyCodeObject* orig, bool in_resume_code, bytecode::FrameLayout* at,
                            std::vector<runtime::OutputPlan>* items, int* ncells) {
  struct ForResume {
    OutputPlanner& p;
    explicit ForResume(OutputPlanner& planner) : p(planner) { p.setForResume(true); }
    ~ForResume() { p.setForResume(false); }
  } for_resume(outputs_);
  // Locals: every co_varnames entry of the original, bound or not.
  const int nvar = orig->co_nlocals;
  at->unbound.assign(static_cast<size_t>(nvar), false);
  const std::vector<int> cells = bytecode::cellSlots(orig);
  auto isCell = [&](int i) {
    for (int c : cells)
      if (c == i) return true;
    return false;
  };
  // Dead locals (never read again before written) are not passed on: they would only be
  // guarded (a float from time.time() in a dead local would recompile every call).
  const std::vector<bool> live = bytecode::liveLocals(orig, at->index);
  for (int i = 0; i < nvar; ++i) {
    if (!live[static_cast<size_t>(i)] && !isCell(i)) {
      at->unbound[static_cast<size_t>(i)] = true;
      items->push_back(runtime::OutputPlan::constant(Py_None));
      continue;
    }
    if (isCell(i)) {  // an argument captured by an inner function: it travels as a cell
      items->push_back(runtime::OutputPlan::constant(Py_None));
      continue;
    }
    ValuePtr v = f.locals[static_cast<size_t>(i)];
    if (!v && !f.deleted[static_cast<size_t>(i)]) {
      // An argument the trace never read (nor stored to) is handed on as the object itself,
      // unguarded: nothing traced depends on it, and what the trace did to the object
      // through another source is replayed on it. Wrapping it would guard it, and all it
      // holds, for nothing (a list kept alive across a loop whose iterator breaks every
      // step would tie its items to the iterator's at each index, one entry per step).
      int reg = rootLocalRegister(f, i);
      if (reg >= 0) {
        items->push_back(runtime::plan::Register{reg});
        continue;
      }
    }
    runtime::OutputPlan p;
    if (!v) {
      at->unbound[static_cast<size_t>(i)] = true;
      p = runtime::OutputPlan::constant(Py_None);
    } else if (Done d = outputs_.plan(v, &p); !d) {
      return d;
    }
    items->push_back(std::move(p));
  }
  for (const ValuePtr& v : f.stack) {
    at->stack_null.push_back(v->is(Kind::Null));
    if (v->is(Kind::Null)) continue;
    runtime::OutputPlan p;
    if (Done d = outputs_.plan(v, &p); !d) return d;
    items->push_back(std::move(p));
  }

  // The frame's cells, after everything else (the runtime makes them the closure). A
  // resume function's cells are its closure already.
  *ncells = 0;
  if (in_resume_code) return {};
  for (int slot : cells) {
    ValuePtr cell = f.locals[static_cast<size_t>(slot)];
    if (!cell || !cell->is(Kind::Cell) || cell->as<Cell>().outer)
      return fail("internal: a cell variable without its cell at a graph break");
    runtime::OutputPlan p;  // shared (memo) with the closures made in the trace
    if (Done d = outputs_.plan(cell, &p); !d) return d;
    items->push_back(std::move(p));
    ++*ncells;
  }
  return {};
}

Done Tracer::buildBreak(SymbolicFrame& f, runtime::OutputPlan* args) {
  if (pending_exc_ || current_exc_) return fail("graph break while an exception is being handled");
  if (contexts_.anyOpen()) return fail("graph break inside inference_mode or autocast");
  if (contexts_.functorchLevelPushed())
    return fail("graph break while a functorch transform's level is pushed (the frame runs natively, so no "
                "graph leaves a level pushed for the rest of the frame)");
  if (functionModeActive())
    return fail("graph break inside a TorchFunctionMode the frame entered (the native instruction and the resumed "
                "code would run without it)");
  if (contexts_.calledInsideTransform())
    return fail("graph break in a frame called inside a functorch transform (torch._dynamo runs it natively too)");
  // The code the generated functions copy: the original, also when this frame is a
  // resume function (its instructions past the prologue are the original's, shifted).
  PyCodeObject* orig = f.code;
  int shift = 0;
  const bytecode::ResumeOrigin* origin = bytecode::resumeOrigin(f.code);
  if (origin) {
    if (static_cast<int>(f.pc) < origin->prologueEnd) return fail("graph break in a resume function's prologue");
    orig = origin->original;
    shift = origin->shift;
  }
  for (const ValuePtr& v : f.stack)
    if (contexts_.isProgramWithExit(v))
      return fail("graph break inside the `with` block of a context manager the program defines (torch._dynamo "
                  "runs such a frame natively too)");
  std::string why;
  if (!bytecode::canResume(orig, &why)) return fail(why);
  if (Done d = contexts_.leaveAtBreak(f.stack); !d) return d;
  BreakShape shape;
  // Note [A break before an instruction that cannot break]: an instruction that cannot run
  // natively on its own as a break (BEFORE_WITH of a context the trace cannot enter, FOR_ITER
  // of an iterator it cannot step, ...) still ends the graph there: the graph of what came
  // before is kept and the frame goes on at that instruction in a resume function, run
  // natively when its own trace fails at the same place (as torch._dynamo compiles the
  // partial graph and jumps into the original bytecode). Without an op before it there is
  // nothing to keep: the frame runs natively, as before.
  bool empty_break = false;
  if (!shapeOf(f, f.pc, &shape, &why)) {
    bool any_op = false;
    for (int i = 0; i < graph_.numNodes() && !any_op; ++i)
      any_op = graph_.node(i).op != graph::NodeOp::Placeholder;
    if (!any_op) return fail(why);
    empty_break = true;
    shape.first = static_cast<int>(f.pc);
    shape.successors = {Successor{static_cast<int>(f.pc), 0, 0}};
  }
  for (const Successor& s : shape.successors)
    if (s.index < shift) return fail("graph break jumping into a resume function's prologue");

  bytecode::FrameLayout at;
  at.index = shape.first - shift;
  std::vector<runtime::OutputPlan> items;  // the break code's arguments
  int ncells = 0;
  if (Done d = breakArguments(f, orig, origin != nullptr, &at, &items, &ncells); !d) return d;
  *args = runtime::plan::Tuple{std::move(items)};

  std::vector<bytecode::FrameLayout> successors;
  std::vector<Ref> resume_codes;
  for (const Successor& s : shape.successors) {
    bytecode::FrameLayout l;
    l.index = s.index - shift;
    l.unbound = at.unbound;
    if (static_cast<size_t>(s.pops) > at.stack_null.size())
      return fail("internal: graph break pops more than the stack holds");
    l.stack_null.assign(at.stack_null.begin(), at.stack_null.end() - s.pops);
    for (int k = 0; k < s.pushes; ++k) l.stack_null.push_back(k == 0 && s.null_first);
    Ref code = bytecode::resumeCode(orig, l, &why);
    if (!code) return fail("generating the resume function: " + why);
    resume_codes.push_back(std::move(code));
    successors.push_back(std::move(l));
  }
  const int last = static_cast<int>(f.pc) - shift;
  Ref break_code = empty_break ? bytecode::emptyBreakCode(orig, at, &why)
                               : bytecode::breakCode(orig, at, last, successors, &why);
  if (!break_code) return fail("generating the break code: " + why);
  auto plan = std::make_shared<runtime::BreakPlan>();
  plan->break_code = std::move(break_code);
  plan->resume_table = runtime::makeResumeTable(std::move(resume_codes));
  if (!plan->resume_table) return failFromPython("setting up the graph break");
  plan->set_grad_enabled = Ref::borrow(lookup(Obj::torch_set_grad_enabled_C));
  if (!plan->set_grad_enabled) return failFromPython("setting up the graph break");
  plan->grad_mode = grad_mode_at_break_;
  plan->in_resume_code = origin != nullptr;
  plan->ncells = ncells;
  entry_->brk = std::move(plan);
  const Unsupported& u = break_target_.why;
  entry_->break_info = {u.reason, u.filename, u.line, u.user_stack};
  return {};
}

// How deep translate() is in the retries Tracer::retrace_requested asks for: one is
// enough (what the first run changed is in place for the second); translations run under
// the compile lock, one at a time.
static int retrace_depth = 0;

namespace {

// translate(), with_shape_env once a trace asked for a ShapeEnv (Tracer::retrace_with_shape_env):
// every later try of the same frame (a retry with ints specialized, the trace stopping at a
// break) keeps it.
TranslateResult translateWith(const FrameView& frame, PyObject* config, PyObject* shape_memory, bool with_shape_env) {
  TranslateResult first;
  BreakTarget target;
  {
    Tracer tracer(frame, config, {}, shape_memory, with_shape_env);
    first = tracer.run();
    if (first.entry) return first;
    if (tracer.retrace_requested && retrace_depth < 1) {
      if (first.error) PyErr_Clear();  // fullgraph's Unsupported for the dropped run
      ++retrace_depth;
      TranslateResult again =
          translateWith(frame, config, shape_memory, with_shape_env || tracer.retrace_with_shape_env);
      --retrace_depth;
      return again;
    }
    const std::vector<std::string>& ints = tracer.graph().symbolicIntSources();
    // With fullgraph=True the failure is raised as cdynamo.Unsupported: when symbolic ints
    // may be the cause, the retry with them specialized decides (it raises again if not).
    bool retry_ints = !ints.empty() && shape_memory;
    if (retry_ints && first.error) {
      // Only a failure of the trace is retried (cdynamo.Unsupported, or an op that raised on
      // fake tensors, which symbolic sizes may cause). The lookups may import: not with the
      // error pending (a backend's failure would become a SystemError).
      FetchedError pending = FetchedError::fetch();
      PyObject* unsupported_exc = lookup(Obj::cdynamo_exc_Unsupported);
      if (!unsupported_exc) PyErr_Clear();
      PyObject* fake_call_exc = lookup(Obj::cdynamo_exc_TorchRuntimeError);
      if (!fake_call_exc) PyErr_Clear();
      pending.restore();
      retry_ints = (unsupported_exc && PyErr_ExceptionMatches(unsupported_exc)) ||
                   (fake_call_exc && PyErr_ExceptionMatches(fake_call_exc));
    }
    if (first.error && !retry_ints) return first;
    target = tracer.failedAt();
    if (retry_ints) {
      FetchedError fullgraph_error;  // the fullgraph error, raised again if no retry
      if (first.error) fullgraph_error = FetchedError::fetch();
      // The trace with int arguments symbolic did not complete (range(n), an index, a
      // constant the program needs): they are specialized from now on, and it runs again.
      PyObject* shapes = lookup(Obj::cdynamo_shapes);
      Ref list = Ref::steal(PyList_New(0));
      for (const std::string& s : ints) {
        Ref str = Ref::steal(PyUnicode_FromString(s.c_str()));
        if (!list || !str || PyList_Append(list.get(), str.get()) < 0) break;
      }
      Ref r = shapes && list ? Ref::steal(PyObject_CallMethod(shapes, "specialize_ints", "OOs", shape_memory,
                                                                list.get(), first.unsupported.reason.c_str()))
                             : Ref();
      if (r) return translateWith(frame, config, shape_memory, with_shape_env);  // the fullgraph error is dropped
      PyErr_Clear();
      if (first.error) {  // cannot specialize: the first failure stands
        fullgraph_error.restore();
        return first;
      }
    }
  }
  if (target.index < 0) return first;
  Tracer retrace(frame, config, target, shape_memory, with_shape_env);
  TranslateResult second = retrace.run();
  if (second.entry || second.error) {
    if (second.entry) ++stats().graph_breaks;
    return second;
  }
  // No break possible there: the frame runs natively, for the first reason.
  first.unsupported.reason += " (and no graph break is possible there: " + second.unsupported.reason + ")";
  return first;
}

}  // namespace

TranslateResult translate(const FrameView& frame, PyObject* config, PyObject* shape_memory) {
  return translateWith(frame, config, shape_memory, false);
}

}  // namespace cdynamo::trace
