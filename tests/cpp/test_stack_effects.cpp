// The stack effects the opcode table declares (pops and pushes per argument and way out)
// are CPython's own: every (opcode, argument) pair that occurs in the standard library's
// code objects is compared with PyCompile_OpcodeStackEffectWithJump, both ways out.
//
// Two differences are the table's by design (opcodes_311.def): the interpreter takes a
// call's arguments at CALL, where the compiler counts them at PRECALL (so PRECALL's and
// CALL's effects are compared as their sum), and RETURN_GENERATOR pushes the value its
// first resumption sends (+1 where the compiler says 0).
#include <Python.h>

#include <set>
#include <utility>

#include "bytecode/opcodes.h"
#include "check.h"

using namespace cdynamo::bytecode;

// Collects the (opcode, argument) pairs of every code object of every .py file of the
// standard library: from its cached .pyc when that is current, else compiled from source.
static const char* kCollect = R"PY(
import importlib.util, marshal, opcode, os, sys, sysconfig, warnings
warnings.simplefilter("ignore")  # compiling the stdlib's own test data warns

def _collect():
    pairs = set()
    caches = opcode._inline_cache_entries
    ext_arg = opcode.opmap["EXTENDED_ARG"]
    def walk(co):
        code = co.co_code  # the de-specialized bytes
        ext = 0
        i = 0
        while i < len(code):
            op, arg = code[i], code[i + 1] | ext
            ext = arg << 8 if op == ext_arg else 0
            pairs.add((op, arg))
            i += 2 + 2 * caches[op]
        for c in co.co_consts:
            if isinstance(c, type(co)):
                walk(c)
    root = sysconfig.get_paths()["stdlib"]
    files = 0
    for d, dirs, names in os.walk(root):
        dirs[:] = [x for x in dirs if x not in ("site-packages", "__pycache__")]
        for n in names:
            if not n.endswith(".py"):
                continue
            path = os.path.join(d, n)
            co = None
            try:
                pyc = importlib.util.cache_from_source(path)
                if os.path.exists(pyc) and os.path.getmtime(pyc) >= os.path.getmtime(path):
                    with open(pyc, "rb") as f:
                        co = marshal.loads(f.read()[16:])
            except Exception:
                co = None
            if co is None:
                try:
                    with open(path, "rb") as f:
                        co = compile(f.read(), path, "exec", dont_inherit=True)
                except (SyntaxError, ValueError, UnicodeDecodeError):
                    continue  # test data of the stdlib's own tests
            files += 1
            walk(co)
    return sorted(pairs), files

pairs, files = _collect()
)PY";

static void checkStdlibPairs() {
  PyObject* globals = PyDict_New();
  PyDict_SetItemString(globals, "__builtins__", PyEval_GetBuiltins());
  PyObject* r = PyRun_String(kCollect, Py_file_input, globals, globals);
  if (!r) PyErr_Print();
  EXPECT(r != nullptr);
  Py_XDECREF(r);
  PyObject* pairs = PyDict_GetItemString(globals, "pairs");
  PyObject* files = PyDict_GetItemString(globals, "files");
  if (!pairs || !files) {
    EXPECT(false);
    Py_DECREF(globals);
    return;
  }
  const Py_ssize_t n = PyList_GET_SIZE(pairs);
  EXPECT(PyLong_AsLong(files) > 500);  // the whole standard library was walked
  EXPECT(n > 1000);
  std::set<int> ops_seen;
  int mismatches = 0;
  for (Py_ssize_t i = 0; i < n; ++i) {
    PyObject* pair = PyList_GET_ITEM(pairs, i);
    const int opcode = static_cast<int>(PyLong_AsLong(PyTuple_GET_ITEM(pair, 0)));
    const int arg = static_cast<int>(PyLong_AsLong(PyTuple_GET_ITEM(pair, 1)));
    EXPECT(opKnown(opcode));
    if (!opKnown(opcode)) continue;
    ops_seen.insert(opcode);
    const Op op = static_cast<Op>(opcode);
    for (int jump = 0; jump <= 1; ++jump) {
      int mine = opStackEffect(op, arg, jump != 0);
      int cpython = PyCompile_OpcodeStackEffectWithJump(opcode, arg, jump);
#if PY_MINOR_VERSION == 11
      if (op == Op::PRECALL || op == Op::CALL) {  // compared as the pair's sum
        mine = opStackEffect(Op::PRECALL, arg, false) + opStackEffect(Op::CALL, arg, false);
        cpython = PyCompile_OpcodeStackEffectWithJump(static_cast<int>(Op::PRECALL), arg, 0) +
                  PyCompile_OpcodeStackEffectWithJump(static_cast<int>(Op::CALL), arg, 0);
      } else
#endif
      if (op == Op::RETURN_GENERATOR) {
        cpython += 1;
      }
      if (mine != cpython && ++mismatches <= 20)
        std::fprintf(stderr, "stack effect of %s %d (jump=%d): table %d, CPython %d\n", opName(opcode), arg, jump,
                     mine, cpython);
      EXPECT_EQ(mine, cpython);
    }
  }
  std::printf("%zd (opcode, arg) pairs of %ld files, %zu opcodes\n", n, PyLong_AsLong(files), ops_seen.size());
  Py_DECREF(globals);
}

// Every argument-free row agrees too, for opcodes the standard library never uses (their
// effect cannot depend on an argument CPython ignores).
static void checkArgumentFreeRows() {
  for (int opcode = 0; opcode < 256; ++opcode) {
    if (!opKnown(opcode) || opHasFlag(opcode, 'H')) continue;
    const Op op = static_cast<Op>(opcode);
    if (op == Op::CACHE || op == Op::RETURN_GENERATOR) continue;
    for (int jump = 0; jump <= 1; ++jump) {
      int cpython = PyCompile_OpcodeStackEffectWithJump(opcode, 0, jump);
      if (cpython == PY_INVALID_STACK_EFFECT) continue;
      EXPECT_EQ(opStackEffect(op, 0, jump != 0), cpython);
    }
  }
}

// Pops and pushes are never negative, and only jumps differ by the way out.
static void checkRowsAreWellFormed() {
  for (int opcode = 0; opcode < 256; ++opcode) {
    if (!opKnown(opcode)) continue;
    const Op op = static_cast<Op>(opcode);
    for (int arg : {0, 1, 2, 3, 7, 255, 256 + 3, 0x10F}) {
      EXPECT(opPops(op, arg) >= 0);
      EXPECT(opPushes(op, arg, false) >= 0);
      EXPECT(opPushes(op, arg, true) >= 0);
      if (!opHasFlag(op, 'J')) EXPECT_EQ(opPushes(op, arg, true), opPushes(op, arg, false));
    }
  }
}

int main() {
  Py_Initialize();
  checkStdlibPairs();
  checkArgumentFreeRows();
  checkRowsAreWellFormed();
  Py_Finalize();
  return TEST_MAIN_RESULT();
}
