// Every row of the checked-in opcode table agrees with the running interpreter's `dis`
// and `opcode` modules, and the decoder folds EXTENDED_ARG and skips CACHE units.
#include <Python.h>

#include "bytecode/instructions.h"
#include "bytecode/opcodes.h"
#include "check.h"

using namespace cdynamo::bytecode;

static void checkTableAgainstDis() {
  PyObject* opcode = PyImport_ImportModule("opcode");
  PyObject* opmap = PyObject_GetAttrString(opcode, "opmap");
  PyObject* caches = PyObject_GetAttrString(opcode, "_inline_cache_entries");
  PyObject *key, *value;
  Py_ssize_t pos = 0;
  int n = 0;
  while (PyDict_Next(opmap, &pos, &key, &value)) {
    int num = (int)PyLong_AsLong(value);
    // 3.12's opmap also has pseudo-instructions (numbers past 255, the compiler's) and the
    // INSTRUMENTED_* forms, which the decoder never sees (it reads co_code).
    if (num > 255 || std::string(PyUnicode_AsUTF8(key)).rfind("INSTRUMENTED_", 0) == 0) continue;
    const char* name = opName(num);
    EXPECT(name != nullptr);
    if (name) EXPECT(std::string(name) == PyUnicode_AsUTF8(key));
    EXPECT_EQ(opCaches(num), (int)PyLong_AsLong(PyList_GetItem(caches, num)));
    ++n;
  }
  int known = 0;
  for (int i = 0; i < 256; ++i) known += opKnown(i);
  EXPECT_EQ(known, n);
  Py_DECREF(caches);
  Py_DECREF(opmap);
  Py_DECREF(opcode);
}

// Every S(...) row names a specialized opcode of this interpreter with the right number
// (dis._all_opmap) and the right base (opcode._specializations), and every specialization
// the interpreter has is a row: a missing row would make opDeopt() leave it unmapped.
static void checkSpecializationsAgainstOpcode() {
  struct Row {
    const char* name;
    int num;
    const char* base;
  };
  static const Row rows[] = {
#define X(name, num, caches, flags, pops, pushes, pushes_if_jump)
#define S(name, num, base) {#name, num, #base},
#include CDYNAMO_OPCODE_TABLE
#undef S
#undef X
  };
  PyObject* dis = PyImport_ImportModule("dis");
  PyObject* opcode = PyImport_ImportModule("opcode");
  PyObject* allOpmap = PyObject_GetAttrString(dis, "_all_opmap");
  PyObject* specs = PyObject_GetAttrString(opcode, "_specializations");
  for (const Row& r : rows) {
    PyObject* num = PyDict_GetItemString(allOpmap, r.name);
    EXPECT(num != nullptr);
    if (num) EXPECT_EQ(PyLong_AsLong(num), r.num);
    PyObject* family = PyDict_GetItemString(specs, r.base);
    EXPECT(family != nullptr);
    PyObject* name = PyUnicode_FromString(r.name);
    if (family) EXPECT_EQ(PySequence_Contains(family, name), 1);
    Py_DECREF(name);
    EXPECT_EQ(opDeopt(r.num), static_cast<int>(PyLong_AsLong(PyDict_GetItemString(allOpmap, r.base))));
    EXPECT(!opKnown(r.num));  // a specialized number is never also a base opcode
  }
  Py_ssize_t total = 0, pos = 0;
  PyObject *key, *value;
  while (PyDict_Next(specs, &pos, &key, &value)) total += PySequence_Size(value);
  EXPECT_EQ(total, static_cast<Py_ssize_t>(sizeof(rows) / sizeof(rows[0])));
  // Base opcodes map to themselves.
  for (int i = 0; i < 256; ++i) {
    if (opKnown(i)) EXPECT_EQ(opDeopt(i), i);
  }
  Py_DECREF(specs);
  Py_DECREF(allOpmap);
  Py_DECREF(opcode);
  Py_DECREF(dis);
}

static void checkDecoder() {
  // LOAD_FAST 0; EXTENDED_ARG 1; LOAD_CONST 2 (-> 258); BINARY_OP 0 + 1 cache; RETURN_VALUE
  const uint8_t code[] = {124, 0, 144, 1, 100, 2, 122, 0, 0, 0, 83, 0};
  auto ins = decode(code, 6);
  EXPECT_EQ(ins.size(), 4u);
  EXPECT(ins[1].op == Op::LOAD_CONST);
  EXPECT_EQ(ins[1].arg, 258);
  EXPECT_EQ(ins[1].start, 1);
  EXPECT_EQ(ins[1].offset, 2);
  EXPECT_EQ(ins[2].next, 5);
  EXPECT_EQ(indexAtOffset(ins, 1), 1);
  EXPECT_EQ(indexAtOffset(ins, 2), -1);
}

int main() {
  Py_Initialize();
  checkTableAgainstDis();
  checkSpecializationsAgainstOpcode();
  checkDecoder();
  Py_Finalize();
  return TEST_MAIN_RESULT();
}
