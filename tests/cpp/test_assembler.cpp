// The symbolic assembler: round trips of real code objects, jump layout with
// EXTENDED_ARG at the fixed point, stack depth, error reports, and functions assembled
// from scratch that run.
#include <Python.h>

#include "bytecode/assembler.h"
#include "bytecode/instructions.h"
#include "bytecode/version.h"
#include "check.h"
#include "py_samples.h"

using namespace cdynamo;
using namespace cdynamo::bytecode;
using namespace cdynamo_test;

static const char* qualname(PyObject* code) {
  return PyUnicode_AsUTF8(reinterpret_cast<PyCodeObject*>(code)->co_qualname);
}

// disassemble -> assemble -> buildCode must reproduce every sample exactly: the
// de-quickened co_code, the exception table, positions and lines, and co_stacksize.
static void roundTripRealCode(const std::vector<Ref>& codes) {
  int failures = 0, withPrefixes = 0, withTwoPrefixes = 0;
  for (const Ref& code : codes) {
    PyCodeObject* co = reinterpret_cast<PyCodeObject*>(code.get());
    Assembly a;
    AssembledCode out;
    std::string error;
    bool ok = disassemble(co, &a, &error) && assemble(a, co->co_firstlineno, &out, &error);
    std::string what;
    if (!ok) {
      what = error;
    } else if (out.code != bytesField(code.get(), "co_code")) {
      what = "co_code differs";
    } else if (out.exceptionTable != bytesField(code.get(), "co_exceptiontable")) {
      what = "exception table differs";
    } else if (out.lineTable != bytesField(code.get(), "co_linetable") && PY_MINOR_VERSION == 11) {
      // 3.12's compiler may split a run of equal positions that the assembler writes as one
      // entry; the positions must still be the same (checked below).
      what = "location table differs";
    } else if (out.stackSize != co->co_stacksize) {
      what = "stack size " + std::to_string(out.stackSize) + " vs " +
             std::to_string(co->co_stacksize);
    } else {
      Ref rebuilt = buildCode(code.get(), out, co->co_firstlineno, nullptr);
      if (!rebuilt) {
        PyErr_Print();
        what = "buildCode failed";
      } else if (pyPositions(rebuilt.get()) != pyPositions(code.get()) ||
                 pyLines(rebuilt.get()) != pyLines(code.get())) {
        what = "positions or lines differ";
      } else if (bytesField(rebuilt.get(), "co_code") != out.code) {
        what = "CPython changed the assembled co_code";
      }
    }
    if (!what.empty() && ++failures <= 5) {
      std::fprintf(stderr, "round trip of %s: %s\n", qualname(code.get()), what.c_str());
    }
    int prefixes = 0;
    for (size_t i = 0; i < out.code.size(); i += 2) {
      prefixes += static_cast<uint8_t>(out.code[i]) == static_cast<int>(Op::EXTENDED_ARG);
    }
    withPrefixes += prefixes > 0;
    for (size_t i = 0; i + 2 < out.code.size(); i += 2) {
      if (static_cast<uint8_t>(out.code[i]) == static_cast<int>(Op::EXTENDED_ARG) &&
          static_cast<uint8_t>(out.code[i + 2]) == static_cast<int>(Op::EXTENDED_ARG)) {
        ++withTwoPrefixes;
        break;
      }
    }
  }
  EXPECT_EQ(failures, 0);
  EXPECT(withPrefixes >= 2);     // BIG and HUGE at least
  EXPECT(withTwoPrefixes >= 1);  // HUGE's long jumps
}

// The rebuilt sample functions behave like the originals (results, raised exceptions,
// generator and coroutine output).
static void rebuiltFunctionsRun() {
  PyObject* cases = PyDict_GetItemString(samples(), "CASES");
  EXPECT(cases && PyList_GET_SIZE(cases) >= 15);
  for (Py_ssize_t i = 0; cases && i < PyList_GET_SIZE(cases); ++i) {
    PyObject* fn = PyTuple_GET_ITEM(PyList_GET_ITEM(cases, i), 0);
    PyObject* args = PyTuple_GET_ITEM(PyList_GET_ITEM(cases, i), 1);
    Ref code = Ref::steal(PyObject_GetAttrString(fn, "__code__"));
    PyCodeObject* co = reinterpret_cast<PyCodeObject*>(code.get());
    Assembly a;
    AssembledCode out;
    std::string error;
    bool ok = disassemble(co, &a, &error) && assemble(a, co->co_firstlineno, &out, &error);
    EXPECT(ok);
    if (!ok) continue;
    Ref rebuilt = buildCode(code.get(), out, co->co_firstlineno, nullptr);
    EXPECT(rebuilt);
    if (!rebuilt) continue;
    Ref same = callSample("same_behaviour", fn, rebuilt.get(), args);
    EXPECT(same.get() == Py_True);
  }
}

// Units of the instruction that starts at `unit` in assembled code, by the decoder.
static std::vector<Instruction> decoded(const AssembledCode& out) {
  return decode(reinterpret_cast<const uint8_t*>(out.code.data()),
                static_cast<int>(out.code.size() / 2));
}

static bool assembleOk(const Assembly& a, AssembledCode* out) {
  std::string error;
  bool ok = assemble(a, 1, out, &error);
  if (!ok) std::fprintf(stderr, "assemble failed: %s\n", error.c_str());
  return ok;
}

// Forward and backward jumps around the one-byte limit, and a jump that needs a prefix
// only because another jump inside its span got one.
static void jumpLayout() {
  for (int nops : {255, 256}) {  // JUMP_FORWARD over `nops` units
    Assembly a;
    int end = a.newLabel();
    a.emit(Op::RESUME, 0);
    a.emitJump(Op::JUMP_FORWARD, end);
    for (int i = 0; i < nops; ++i) a.emit(Op::NOP);
    a.bind(end);
    a.emit(Op::LOAD_CONST, 0);
    a.emit(Op::RETURN_VALUE);
    AssembledCode out;
    EXPECT(assembleOk(a, &out));
    auto ins = decoded(out);
    EXPECT(ins[1].op == Op::JUMP_FORWARD);
    EXPECT_EQ(ins[1].arg, nops);
    EXPECT_EQ(ins[1].offset - ins[1].start, nops > 255 ? 1 : 0);
    EXPECT_EQ(ins[1].jumpTarget(), out.unitOf[a.labelAt[end]]);
    EXPECT_EQ(out.stackSize, 1);
  }
  for (int nops : {254, 255}) {  // JUMP_BACKWARD over `nops` units plus itself
    Assembly a;
    int top = a.newLabel();
    a.emit(Op::RESUME, 0);
    a.bind(top);
    for (int i = 0; i < nops; ++i) a.emit(Op::NOP);
    a.emitJump(Op::JUMP_FORWARD, top);  // the direction is fixed by the assembler
    AssembledCode out;
    EXPECT(assembleOk(a, &out));
    auto ins = decoded(out);
    const Instruction& j = ins.back();
    EXPECT(j.op == Op::JUMP_BACKWARD);
    // 254 NOPs + 1 = 255 fits; 255 NOPs + 1 = 256 does not, and the prefix it needs is
    // itself part of the distance: 257.
    EXPECT_EQ(j.arg, nops == 254 ? 255 : 257);
    EXPECT_EQ(j.jumpTarget(), 1);
  }
  {
    // top: 300 NOPs; A: JUMP_FORWARD end; 254 NOPs; B: JUMP_BACKWARD top; end: ...
    // A spans 255 units until B (556 back) gets a prefix; then A needs one too, which
    // lies inside B's span and moves B's argument again.
    Assembly a;
    int top = a.newLabel(), end = a.newLabel();
    a.emit(Op::RESUME, 0);
    a.bind(top);
    for (int i = 0; i < 300; ++i) a.emit(Op::NOP);
    a.emitJump(Op::JUMP_FORWARD, end);
    for (int i = 0; i < 254; ++i) a.emit(Op::NOP);
    a.emitJump(Op::JUMP_BACKWARD, top);
    a.bind(end);
    a.emit(Op::LOAD_CONST, 0);
    a.emit(Op::RETURN_VALUE);
    AssembledCode out;
    EXPECT(assembleOk(a, &out));
    auto ins = decoded(out);
    const Instruction& jA = ins[301];
    const Instruction& jB = ins[301 + 255];
    EXPECT(jA.op == Op::JUMP_FORWARD && jB.op == Op::JUMP_BACKWARD);
    EXPECT_EQ(jA.offset - jA.start, 1);
    EXPECT_EQ(jB.offset - jB.start, 1);
    EXPECT_EQ(jA.arg, 256);        // 254 NOPs + B with its prefix
    EXPECT_EQ(jB.arg, 300 + 2 + 254 + 2);
    EXPECT_EQ(jA.jumpTarget(), out.unitOf[a.labelAt[end]]);
    EXPECT_EQ(jB.jumpTarget(), 1);
    EXPECT_EQ(out.code.size() / 2, static_cast<size_t>(1 + 300 + 2 + 254 + 2 + 2));
  }
  {
    // Non-jump arguments take as many prefixes as bytes: 70000 = 0x01_11_70.
    Assembly a;
    a.emit(Op::LOAD_CONST, 70000);
    a.emit(Op::RETURN_VALUE);
    AssembledCode out;
    EXPECT(assembleOk(a, &out));
    EXPECT(out.code == std::string("\x90\x01\x90\x11\x64\x70\x53\x00", 8));
    // Inline caches follow their opcode, zero-filled: BINARY_OP has one, LOAD_GLOBAL five.
    Assembly b;
    b.emit(Op::LOAD_GLOBAL, 1);
    b.emit(Op::LOAD_CONST, 0);
    b.emit(Op::BINARY_OP, 0);
    b.emit(Op::RETURN_VALUE);
    EXPECT(assembleOk(b, &out));
    const size_t global = 1 + static_cast<size_t>(opCaches(static_cast<int>(Op::LOAD_GLOBAL)));
    EXPECT_EQ(out.code.size(), 2u * (global + 1 + 2 + 1));
    EXPECT(out.code.substr(2 * (global + 1), 4) == std::string("\x7a\x00\x00\x00", 4));
    EXPECT_EQ(out.unitOf[2], static_cast<int>(global + 1));
    EXPECT_EQ(out.stackSize, 3);  // NULL, global, constant
  }
}

// Inconsistent input is reported, not assembled.
static void errors() {
  std::string error;
  AssembledCode out;
  {
    Assembly a;
    int never = a.newLabel();
    a.emitJump(Op::JUMP_FORWARD, never);
    EXPECT(!assemble(a, 1, &out, &error));
  }
  {
    Assembly a;  // FOR_ITER has no backward form
    int top = a.newLabel();
    a.bind(top);
    a.emitJump(Op::FOR_ITER, top);
    EXPECT(!assemble(a, 1, &out, &error));
  }
  {
    Assembly a;  // overlapping exception ranges
    int l0 = a.newLabel(), l1 = a.newLabel(), l2 = a.newLabel(), h = a.newLabel();
    a.bind(l0);
    a.emit(Op::NOP);
    a.bind(l1);
    a.emit(Op::NOP);
    a.bind(l2);
    a.emit(Op::LOAD_CONST, 0);
    a.emit(Op::RETURN_VALUE);
    a.bind(h);
    a.emit(Op::RERAISE, 0);
    a.addHandler(l0, l2, h, 0, false);
    a.addHandler(l1, l2, h, 0, false);
    EXPECT(!assemble(a, 1, &out, &error));
    EXPECT(error.find("overlap") != std::string::npos);
  }
  {
    Assembly a;  // a join reached with two depths: broken code
    int join = a.newLabel();
    a.emit(Op::LOAD_CONST, 0);
    a.emitJump(popJumpIfTrue(), join);
    a.emit(Op::LOAD_CONST, 0);
    a.bind(join);
    a.emit(Op::LOAD_CONST, 0);
    a.emit(Op::RETURN_VALUE);
    EXPECT(!assemble(a, 1, &out, &error));
    EXPECT(error.find("depths") != std::string::npos);
  }
  {
    Assembly a;  // falls off the end
    a.emit(Op::NOP);
    EXPECT(!assemble(a, 1, &out, &error));
    Assembly b;  // pops from an empty stack
    b.emit(Op::POP_TOP);
    b.emit(Op::LOAD_CONST, 0);
    b.emit(Op::RETURN_VALUE);
    EXPECT(!assemble(b, 1, &out, &error));
    Assembly d;  // an exception range deeper than the stack it protects
    int s = d.newLabel(), e = d.newLabel(), h = d.newLabel();
    d.bind(s);
    d.emit(Op::LOAD_CONST, 0);
    d.emit(Op::RETURN_VALUE);
    d.bind(e);
    d.bind(h);
    d.emit(Op::RERAISE, 0);
    d.addHandler(s, e, h, 1, false);
    EXPECT(!assemble(d, 1, &out, &error));
    EXPECT(error.find("above the stack depth") != std::string::npos);
    Assembly c;  // a position the location table cannot hold
    c.emit(Op::LOAD_CONST, 0, Position{7, 6, 0, 1});
    c.emit(Op::RETURN_VALUE);
    EXPECT(!assemble(c, 1, &out, &error));
  }
}

static Ref tuple(std::initializer_list<PyObject*> items) {
  Ref t = Ref::steal(PyTuple_New(static_cast<Py_ssize_t>(items.size())));
  Py_ssize_t i = 0;
  for (PyObject* o : items) PyTuple_SET_ITEM(t.get(), i++, o);  // steals the new refs
  return t;
}

// Builds `code` on a template, wraps it in a function over the sample globals, calls it.
static Ref runAssembled(const Assembly& a, PyObject* extra, int* stackSize) {
  AssembledCode out;
  if (!assembleOk(a, &out)) return Ref();
  *stackSize = out.stackSize;
  PyObject* loops = PyDict_GetItemString(samples(), "loops");
  Ref templ = Ref::steal(PyObject_GetAttrString(loops, "__code__"));
  Ref code = buildCode(templ.get(), out, 100, extra);
  if (!code) {
    PyErr_Print();
    return Ref();
  }
  Ref fn = Ref::steal(PyFunction_New(code.get(), samples()));
  Ref result = Ref::steal(fn ? PyObject_CallNoArgs(fn.get()) : nullptr);
  if (!result) PyErr_Print();
  return result;
}

// total = 0; for i in range(10): total += i; return total -- written by hand with labels.
static void sumLoopFromScratch() {
  Assembly a;
  int loop = a.newLabel(), done = a.newLabel();
  Position line{101, 101, 4, 20};
  a.emit(Op::RESUME, 0, line);
  a.emit(Op::LOAD_CONST, 0, line);   // 0
  a.emit(Op::STORE_FAST, 0, line);   // total
  a.emit(Op::LOAD_GLOBAL, 1, line);  // NULL + range
  a.emit(Op::LOAD_CONST, 1, line);   // 10
  emitCall(a, 1, line);
  a.emit(Op::GET_ITER, 0, line);
  a.bind(loop);
  a.emitJump(Op::FOR_ITER, done, line);
  a.emit(Op::STORE_FAST, 1, line);   // i
  a.emit(Op::LOAD_FAST, 0, {102, 102, 8, 13});
  a.emit(Op::LOAD_FAST, 1, {102, 102, 17, 18});
  a.emit(Op::BINARY_OP, 13, {102, 102, 8, 18});  // +=
  a.emit(Op::STORE_FAST, 0, {102, 102, 8, 13});
  a.emitJump(Op::JUMP_FORWARD, loop, line);  // becomes JUMP_BACKWARD
  a.bind(done);
#if PY_MINOR_VERSION >= 12
  // 3.12's FOR_ITER leaves the loop at an END_FOR, which it skips (the table's Note).
  a.emit(Op::END_FOR, 0, line);
#endif
  a.emit(Op::LOAD_FAST, 0, {103, 103, 11, 16});
  a.emit(Op::RETURN_VALUE, 0, {103, 103, 4, 16});

  Ref extra = Ref::steal(PyDict_New());
  Ref consts = tuple({PyLong_FromLong(0), PyLong_FromLong(10)});
  Ref names = tuple({PyUnicode_FromString("range")});
  Ref varnames = tuple({PyUnicode_FromString("total"), PyUnicode_FromString("i")});
  Ref empty = Ref::steal(PyTuple_New(0));
  Ref zero = Ref::steal(PyLong_FromLong(0));
  Ref two = Ref::steal(PyLong_FromLong(2));
  Ref name = Ref::steal(PyUnicode_FromString("sum_loop"));
  PyDict_SetItemString(extra.get(), "co_consts", consts.get());
  PyDict_SetItemString(extra.get(), "co_names", names.get());
  PyDict_SetItemString(extra.get(), "co_varnames", varnames.get());
  PyDict_SetItemString(extra.get(), "co_cellvars", empty.get());
  PyDict_SetItemString(extra.get(), "co_freevars", empty.get());
  PyDict_SetItemString(extra.get(), "co_argcount", zero.get());
  PyDict_SetItemString(extra.get(), "co_nlocals", two.get());
  PyDict_SetItemString(extra.get(), "co_name", name.get());
  PyDict_SetItemString(extra.get(), "co_qualname", name.get());
  int stackSize = -1;
  Ref result = runAssembled(a, extra.get(), &stackSize);
  EXPECT(result && PyLong_Check(result.get()) && PyLong_AsLong(result.get()) == 45);
  // NULL + range + 10 before the call; iterator + item, then iterator + total + i in the
  // loop: 3, what the compiler gives for the same source.
  EXPECT_EQ(stackSize, 3);
  PyObject* g = samples();
  Ref r = Ref::steal(PyRun_String(
      "def _sum_loop():\n    total = 0\n    for i in range(10):\n        total += i\n"
      "    return total\n",
      Py_file_input, g, g));
  PyObject* fn = PyDict_GetItemString(g, "_sum_loop");
  Ref code = Ref::steal(fn ? PyObject_GetAttrString(fn, "__code__") : nullptr);
  EXPECT(code && stackSize == intField(code.get(), "co_stacksize"));
}

// try: return 1 / 0  except: return 'caught' -- with a hand-written exception table,
// including the cleanup range that keeps lasti; the stack size must match the compiler's.
static void tryExceptFromScratch() {
  Assembly a;
  int body = a.newLabel(), bodyEnd = a.newLabel(), handler = a.newLabel();
  int handlerEnd = a.newLabel(), cleanup = a.newLabel();
  a.emit(Op::RESUME, 0);
  a.bind(body);
  a.emit(Op::LOAD_CONST, 0);    // 1
  a.emit(Op::LOAD_CONST, 1);    // 0
  a.emit(Op::BINARY_OP, 11);    // /
  a.emit(Op::RETURN_VALUE);
  a.bind(bodyEnd);
  a.bind(handler);
  a.emit(Op::PUSH_EXC_INFO);
  a.emit(Op::POP_TOP);
  a.bind(handlerEnd);  // POP_EXCEPT restores the previous exception: out of the range
  a.emit(Op::POP_EXCEPT);
  a.emit(Op::LOAD_CONST, 2);    // 'caught'
  a.emit(Op::RETURN_VALUE);
  a.bind(cleanup);
  a.emit(Op::COPY, 3);
  a.emit(Op::POP_EXCEPT);
  a.emit(Op::RERAISE, 1);
  a.addHandler(body, bodyEnd, handler, 0, false);
  a.addHandler(handler, handlerEnd, cleanup, 1, true);

  Ref extra = Ref::steal(PyDict_New());
  Ref consts = tuple({PyLong_FromLong(1), PyLong_FromLong(0), PyUnicode_FromString("caught")});
  Ref empty = Ref::steal(PyTuple_New(0));
  Ref zero = Ref::steal(PyLong_FromLong(0));
  PyDict_SetItemString(extra.get(), "co_consts", consts.get());
  PyDict_SetItemString(extra.get(), "co_varnames", empty.get());
  PyDict_SetItemString(extra.get(), "co_argcount", zero.get());
  PyDict_SetItemString(extra.get(), "co_nlocals", zero.get());
  int stackSize = -1;
  Ref result = runAssembled(a, extra.get(), &stackSize);
  EXPECT(result && PyUnicode_Check(result.get()) &&
         std::string(PyUnicode_AsUTF8(result.get())) == "caught");

  PyObject* g = samples();
  Ref r = Ref::steal(PyRun_String(
      "def _try_div():\n    try:\n        return 1 / 0\n    except:\n        return 'caught'\n",
      Py_file_input, g, g));
  PyObject* fn = PyDict_GetItemString(g, "_try_div");
  Ref code = Ref::steal(fn ? PyObject_GetAttrString(fn, "__code__") : nullptr);
  EXPECT(code && stackSize == intField(code.get(), "co_stacksize"));
  EXPECT_EQ(stackSize, 4);  // handler: exc 1 -> +prev exc 2; cleanup: lasti+exc 3 -> COPY 4
}

int main() {
  Py_Initialize();
  std::vector<Ref> codes = sampleCodes();
  EXPECT(codes.size() > 500);
  roundTripRealCode(codes);
  rebuiltFunctionsRun();
  jumpLayout();
  errors();
  sumLoopFromScratch();
  tryExceptFromScratch();
  std::printf("%zu sample code objects round-tripped\n", codes.size());
  codes.clear();
  Py_Finalize();
  return TEST_MAIN_RESULT();
}
