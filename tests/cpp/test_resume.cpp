// Resume and break code generation (bytecode/resume.h): generated code objects run, with
// the calling convention the runtime relies on: locals, then non-NULL stack slots, then
// (break code) the continuation, called as continuation(k, *locals, *stack).
#include <Python.h>

#include "bytecode/instructions.h"
#include "bytecode/version.h"
#include "bytecode/resume.h"
#include "check.h"

using namespace cdynamo;
using namespace cdynamo::bytecode;

static const char* kSource = R"PY(
def f(a, b):
    c = a + b
    d = c * 2
    return d - a

def g(x):
    if x:
        y = 1
    else:
        y = 2
    return y

def h(x):
    try:
        y = x + 1
        z = y * 2
    except TypeError:
        z = -1
    return z

def collect(*args):
    return args

def cellf(x):
    y = x + 1
    g = lambda: y
    y = y * 10
    return g()

def run_with_cell(code):
    # The frame's cell travels in the closure, shared with the inner function.
    import types
    cell = types.CellType(2)
    inner = [k for k in cellf.__code__.co_consts if isinstance(k, types.CodeType)][0]
    g = types.FunctionType(inner, globals(), "<lambda>", None, (cell,))
    return types.FunctionType(code, globals(), "r", None, (cell,))(1, g)

def gen(x):
    yield x
)PY";

static PyObject* globals;

static PyCodeObject* codeOf(const char* name) {
  PyObject* fn = PyDict_GetItemString(globals, name);
  return reinterpret_cast<PyCodeObject*>(PyFunction_GET_CODE(fn));
}

static int indexOf(PyCodeObject* co, Op op, int nth = 0) {
  std::vector<Instruction> ins = decode(co);
  for (size_t i = 0; i < ins.size(); ++i)
    if (ins[i].op == op && nth-- == 0) return static_cast<int>(i);
  return -1;
}

// Calls a function made from `code` with `args` (a Python tuple literal).
static Ref call(const Ref& code, const char* args) {
  Ref fn = Ref::steal(PyFunction_New(code.get(), globals));
  Ref a = Ref::steal(PyRun_String(args, Py_eval_input, globals, globals));
  if (!fn || !a) return Ref();
  return Ref::steal(PyObject_Call(fn.get(), a.get(), nullptr));
}

static bool equals(const Ref& got, const char* expected) {
  if (!got) {
    PyErr_Print();
    return false;
  }
  Ref e = Ref::steal(PyRun_String(expected, Py_eval_input, globals, globals));
  return e && PyObject_RichCompareBool(got.get(), e.get(), Py_EQ) == 1;
}

static FrameLayout layout(int index, std::vector<bool> stack_null, std::vector<bool> unbound) {
  FrameLayout l;
  l.index = index;
  l.stack_null = std::move(stack_null);
  l.unbound = std::move(unbound);
  return l;
}

static void resumeAtStatementStart() {
  PyCodeObject* f = codeOf("f");
  // `d = c * 2` starts at the second LOAD_FAST of c ... i.e. after STORE_FAST c.
  int at = indexOf(f, Op::STORE_FAST, 0) + 1;
  std::string error;
  Ref code = resumeCode(f, layout(at, {}, {false, false, false, true}), &error);
  EXPECT(code);
  if (!code) return std::fprintf(stderr, "%s\n", error.c_str()), void();
  EXPECT(equals(call(code, "(1, 2, 10, None)"), "19"));
  const ResumeOrigin* o = resumeOrigin(reinterpret_cast<PyCodeObject*>(code.get()));
  EXPECT(o && o->original == f);
  // The prologue: DELETE_FAST d, JUMP_FORWARD.
  EXPECT(o && o->shift == 2);
  // Memoized: the same layout gives the same code object.
  Ref again = resumeCode(f, layout(at, {}, {false, false, false, true}), &error);
  EXPECT(again.get() == code.get());
  EXPECT(!isBreakCode(reinterpret_cast<PyCodeObject*>(code.get())));
}

static void resumeWithStack() {
  PyCodeObject* f = codeOf("f");
  int at = indexOf(f, Op::BINARY_OP, 1);  // c * 2, with [c, 2] on the stack
  std::string error;
  Ref code = resumeCode(f, layout(at, {false, false}, {false, false, false, true}), &error);
  EXPECT(code);
  if (!code) return std::fprintf(stderr, "%s\n", error.c_str()), void();
  EXPECT(equals(call(code, "(1, 2, 10, None, 5, 3)"), "14"));
}

static void breakAtBinaryOp() {
  PyCodeObject* f = codeOf("f");
  int at = indexOf(f, Op::BINARY_OP, 0);  // a + b
  std::string error;
  std::vector<bool> unbound = {false, false, true, true};
  Ref code = breakCode(f, layout(at, {false, false}, unbound), at, {layout(at + 1, {false}, unbound)}, &error);
  EXPECT(code);
  if (!code) return std::fprintf(stderr, "%s\n", error.c_str()), void();
  EXPECT(isBreakCode(reinterpret_cast<PyCodeObject*>(code.get())));
  // The instruction runs natively (1 + 2), then continuation(0, a, b, c, d, result).
  EXPECT(equals(call(code, "(1, 2, None, None, 1, 2, collect)"), "(0, 1, 2, None, None, 3)"));
  // An exception raised by the instruction propagates as from the original.
  Ref r = call(code, "(1, 2, None, None, 1, 'x', collect)");
  EXPECT(!r && PyErr_ExceptionMatches(PyExc_TypeError));
  PyErr_Clear();
}

static void breakAtConditionalJump() {
  PyCodeObject* g = codeOf("g");
  int at = indexOf(g, popJumpIfFalse());
  EXPECT(at > 0);
  std::vector<Instruction> ins = decode(g);
  int target = indexAtOffset(ins, ins[static_cast<size_t>(at)].jumpTarget());
  std::string error;
  std::vector<bool> unbound = {false, true};
  Ref code = breakCode(g, layout(at, {false}, unbound), at,
                       {layout(at + 1, {}, unbound), layout(target, {}, unbound)}, &error);
  EXPECT(code);
  if (!code) return std::fprintf(stderr, "%s\n", error.c_str()), void();
  // Truth is decided natively: successor 0 falls through, successor 1 is the jump target.
  EXPECT(equals(call(code, "('s', None, [1], collect)"), "(0, 's', None)"));
  EXPECT(equals(call(code, "('s', None, [], collect)"), "(1, 's', None)"));
  // Both resume functions run the rest of g from their branch.
  Ref then = resumeCode(g, layout(at + 1, {}, unbound), &error);
  Ref other = resumeCode(g, layout(target, {}, unbound), &error);
  EXPECT(equals(call(then, "(0, None)"), "1"));
  EXPECT(equals(call(other, "(0, None)"), "2"));
}

static void breakInsideTryBlock() {
  PyCodeObject* h = codeOf("h");
  int at = indexOf(h, Op::BINARY_OP, 0);  // x + 1, inside try
  std::string error;
  std::vector<bool> unbound = {false, true, true};
  Ref code = breakCode(h, layout(at, {false, false}, unbound), at, {layout(at + 1, {false}, unbound)}, &error);
  EXPECT(code);
  if (!code) return std::fprintf(stderr, "%s\n", error.c_str()), void();
  EXPECT(equals(call(code, "(1, None, None, 1, 1, collect)"), "(0, 1, None, None, 2)"));
  // The copied body's handler still catches what the instruction raises.
  EXPECT(equals(call(code, "('s', None, None, 's', 1, collect)"), "-1"));
  // A resume function inside the try block is still inside it.
  int mid = indexOf(h, Op::STORE_FAST, 0) + 1;  // z = y * 2
  Ref resume = resumeCode(h, layout(mid, {}, {false, false, true}), &error);
  EXPECT(equals(call(resume, "(1, 2, None)"), "4"));
  EXPECT(equals(call(resume, "(1, None, None)"), "-1"));
}

static void cellsTravelInTheClosure() {
  PyCodeObject* c = codeOf("cellf");
  EXPECT(cellSlots(c).size() == 1);
  int at = indexOf(c, Op::STORE_FAST, 0) + 1;  // after `g = lambda: y`: y = y * 10
  std::string error;
  Ref code = resumeCode(c, layout(at, {}, {false, false}), &error);
  EXPECT(code);
  if (!code) return std::fprintf(stderr, "%s\n", error.c_str()), void();
  auto* rc = reinterpret_cast<PyCodeObject*>(code.get());
  EXPECT(rc->co_ncellvars == 0 && rc->co_nfreevars == 1);
  PyObject* run = PyDict_GetItemString(globals, "run_with_cell");
  Ref r = Ref::steal(PyObject_CallOneArg(run, code.get()));
  // y (2) is multiplied in the shared cell, which the inner function then reads.
  EXPECT(equals(r, "20"));
}

static void liveness() {
  PyCodeObject* f = codeOf("f");
  // At `d = c * 2`: a and c are read later; b is never read again; d is written first.
  int at = indexOf(f, Op::STORE_FAST, 0) + 1;
  std::vector<bool> live = liveLocals(f, at);
  EXPECT(live == std::vector<bool>({true, false, true, false}));
  // In h's try block, y is read by the statement after; z is written on both paths.
  PyCodeObject* h = codeOf("h");
  std::vector<bool> inTry = liveLocals(h, indexOf(h, Op::STORE_FAST, 0) + 1);
  EXPECT(inTry == std::vector<bool>({false, true, false}));
}

static void refusals() {
  std::string why;
  EXPECT(!canResume(codeOf("gen"), &why));
  EXPECT(why.find("generator") != std::string::npos);
  EXPECT(canResume(codeOf("f"), &why));
  Ref bad = resumeCode(codeOf("f"), layout(0, {}, {false, false, false, false}), &why);
  EXPECT(!bad && !PyErr_Occurred());
}

int main() {
  Py_Initialize();
  globals = PyDict_New();
  PyDict_SetItemString(globals, "__builtins__", PyEval_GetBuiltins());
  Ref r = Ref::steal(PyRun_String(kSource, Py_file_input, globals, globals));
  if (!r) {
    PyErr_Print();
    return 1;
  }
  resumeAtStatementStart();
  resumeWithStack();
  breakAtBinaryOp();
  breakAtConditionalJump();
  breakInsideTryBlock();
  cellsTravelInTheClosure();
  liveness();
  refusals();
  clearGenerated();
  Py_DECREF(globals);
  Py_Finalize();
  return TEST_MAIN_RESULT();
}
