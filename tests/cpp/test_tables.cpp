// Exception and location table codecs, checked against CPython's own readers
// (dis._parse_exception_table, code.co_positions(), code.co_lines()) on real code objects
// and on hand-made tables that use every entry form.
#include <Python.h>

#include <set>

#include "bytecode/assembler.h"
#include "bytecode/tables.h"
#include "check.h"
#include "py_samples.h"

using namespace cdynamo;
using namespace cdynamo::bytecode;
using namespace cdynamo_test;

static const uint8_t* u8(const std::string& s) { return reinterpret_cast<const uint8_t*>(s.data()); }

// Decode each sample's exception table, compare with dis, re-encode to the same bytes.
static void exceptionTablesOfRealCode(const std::vector<Ref>& codes) {
  int nonEmpty = 0, mismatches = 0;
  for (const Ref& code : codes) {
    std::string bytes = bytesField(code.get(), "co_exceptiontable");
    std::vector<ExceptionTableEntry> entries;
    bool ok = decodeExceptionTable(u8(bytes), bytes.size(), &entries);
    EXPECT(ok);
    auto expected = intTuples<5>(callSample("exception_table", code.get()).get());
    bool same = expected.size() == entries.size();
    for (size_t i = 0; same && i < entries.size(); ++i) {
      const ExceptionTableEntry& e = entries[i];
      same = expected[i] == std::array<int, 5>{e.start, e.end, e.target, e.depth, e.lasti};
    }
    std::string again;
    EXPECT(encodeExceptionTable(entries, &again));
    same = same && again == bytes;
    if (!same && ++mismatches <= 3) {
      std::fprintf(stderr, "exception table mismatch in %s\n",
                   PyUnicode_AsUTF8(((PyCodeObject*)code.get())->co_qualname));
    }
    nonEmpty += !entries.empty();
  }
  EXPECT_EQ(mismatches, 0);
  EXPECT(nonEmpty > 100);  // the corpus really exercises the codec
}

static void exceptionTableEdgeCases() {
  std::vector<ExceptionTableEntry> in = {
      {0, 3, 10, 0, false}, {3, 70, 200, 5, true}, {100, 5000, 1 << 20, 63, false},
      {(1 << 29) - 10, (1 << 29), (1 << 29) + 3, 1000, true}};
  std::string bytes;
  EXPECT(encodeExceptionTable(in, &bytes));
  std::vector<ExceptionTableEntry> out;
  EXPECT(decodeExceptionTable(u8(bytes), bytes.size(), &out));
  EXPECT(out == in);
  // Hand-checked bytes: start 3 -> 0x83; length 67 = 1*64+3 -> 0x41 0x03; target 200 =
  // 3*64+8 -> 0x43 0x08; depth 5, lasti -> 11 -> 0x0b.
  std::string one;
  EXPECT(encodeExceptionTable({in[1]}, &one));
  EXPECT(one == std::string("\x83\x41\x03\x43\x08\x0b", 6));
  // Invalid input is refused, not written.
  std::string junk;
  EXPECT(!encodeExceptionTable({{5, 5, 0, 0, false}}, &junk));
  EXPECT(!encodeExceptionTable({{-1, 5, 0, 0, false}}, &junk));
  // Truncated bytes and a missing entry marker are reported.
  std::vector<ExceptionTableEntry> bad;
  EXPECT(!decodeExceptionTable(u8(bytes), bytes.size() - 1, &bad));
  std::string unmarked = bytes;
  unmarked[0] = static_cast<char>(unmarked[0] & 0x7f);
  bad.clear();
  EXPECT(!decodeExceptionTable(u8(unmarked), unmarked.size(), &bad));
  // A varint of six 6-bit groups (more than 30 bits) is refused rather than overflowing.
  const uint8_t overlong[] = {0xc1, 0x40, 0x40, 0x40, 0x40, 0x00, 0x01, 0x00, 0x00};
  const uint8_t longest[] = {0xc1, 0x40, 0x40, 0x40, 0x00, 0x01, 0x00, 0x00};
  bad.clear();
  EXPECT(!decodeExceptionTable(overlong, sizeof overlong, &bad));
  bad.clear();
  EXPECT(decodeExceptionTable(longest, sizeof longest, &bad));
  EXPECT(bad.size() == 1 && bad[0].start == (1 << 24));
}

// Decode each sample's location table and compare with co_positions()/co_lines();
// re-encode compactly (must give CPython's bytes) and in long form only (must give the
// same positions and lines once installed in a code object).
static void locationTablesOfRealCode(const std::vector<Ref>& codes) {
  int positionMismatch = 0, lineMismatch = 0, byteMismatch = 0, rebuiltMismatch = 0;
  std::set<int> kindsSeen;
  for (const Ref& code : codes) {
    PyCodeObject* co = reinterpret_cast<PyCodeObject*>(code.get());
    std::string bytes = bytesField(code.get(), "co_linetable");
    std::vector<LocationEntry> entries;
    EXPECT(decodeLocationTable(u8(bytes), bytes.size(), co->co_firstlineno, &entries));
    int nunits = static_cast<int>(Py_SIZE(co));
    std::vector<Position> mine = positionsPerUnit(entries, nunits);
    if (mine != pyPositions(code.get())) ++positionMismatch;

    std::vector<std::array<int, 3>> lines;
    std::vector<LocationRun> runs;
    for (const LocationEntry& e : entries) {
      kindsSeen.insert(e.kind);
      lines.push_back({e.start, e.end, e.pos.line});
      runs.push_back({e.end - e.start, e.pos});
    }
    std::vector<std::array<int, 3>> pyLinesList = pyLines(code.get());
    if (mergedLines(lines) != pyLinesList) ++lineMismatch;

    std::string compact;
    EXPECT(encodeLocationTable(runs, co->co_firstlineno, &compact));
    if (compact != bytes && ++byteMismatch <= 3) {
      std::fprintf(stderr, "compact location bytes differ in %s\n",
                   PyUnicode_AsUTF8(co->co_qualname));
    }
    std::string longForm;
    EXPECT(encodeLocationTable(runs, co->co_firstlineno, &longForm, /*compact=*/false));
    Ref table = Ref::steal(PyBytes_FromStringAndSize(longForm.data(), longForm.size()));
    Ref kwargs = Ref::steal(PyDict_New());
    PyDict_SetItemString(kwargs.get(), "co_linetable", table.get());
    Ref replace = Ref::steal(PyObject_GetAttrString(code.get(), "replace"));
    Ref noArgs = Ref::steal(PyTuple_New(0));
    Ref rebuilt = Ref::steal(PyObject_Call(replace.get(), noArgs.get(), kwargs.get()));
    EXPECT(rebuilt);
    if (!rebuilt) {
      PyErr_Print();
      continue;
    }
    if (pyPositions(rebuilt.get()) != mine || pyLines(rebuilt.get()) != pyLinesList) {
      ++rebuiltMismatch;
    }
  }
  EXPECT_EQ(positionMismatch, 0);
  EXPECT_EQ(lineMismatch, 0);
  EXPECT_EQ(byteMismatch, 0);
  EXPECT_EQ(rebuiltMismatch, 0);
  // The compiler's output alone covers most kinds; the synthetic test covers all.
  EXPECT(kindsSeen.count(14) && kindsSeen.count(15) && kindsSeen.count(10) && kindsSeen.count(0));
}

// Every entry kind 0-15, negative and large line deltas, absent columns, runs longer than
// one entry: encode, decode, and compare with what CPython reads from the same bytes.
static void everyLocationForm() {
  const int first = 10;
  std::vector<LocationRun> runs = {
      {1, {-1, -1, -1, -1}},     // 15: no location
      {2, {10, 10, -1, -1}},     // 13: no columns, delta 0
  };
  for (int c = 0; c < 80; c += 8) runs.push_back({1, {10, 10, c + 1, c + 4}});  // 0..9
  runs.push_back({3, {10, 10, 79, 94}});    // 9: widest short form
  runs.push_back({1, {10, 10, 90, 127}});   // 10: same line, column too big for short form
  runs.push_back({4, {11, 11, 5, 90}});     // 11: line + 1
  runs.push_back({8, {13, 13, 100, 120}});  // 12: line + 2
  runs.push_back({2, {5, 9, 200, 3}});      // 14: negative delta, several lines
  runs.push_back({1, {5, 5, -1, 7}});       // 14: column absent, end column present
  runs.push_back({1, {6, 6, 3, -1}});       // 14: end column absent
  runs.push_back({1, {4000, 4000, 1000, 1005}});  // 14: big delta and columns
  runs.push_back({19, {4000, 4001, 0, 0}});       // 14, split into 8 + 8 + 3
  runs.push_back({1, {-1, -1, -1, -1}});          // 15 does not move the running line...
  runs.push_back({1, {4000, 4000, 2, 5}});        // ...so this is a short form again
  runs.push_back({1, {1, 1, -1, -1}});            // 13 with a negative delta
  runs.push_back({2, {1, 1, 0, 0}});              // 0: empty range at column 0

  std::string bytes;
  EXPECT(encodeLocationTable(runs, first, &bytes));
  std::vector<LocationEntry> entries;
  EXPECT(decodeLocationTable(u8(bytes), bytes.size(), first, &entries));
  std::set<int> kinds;
  for (const LocationEntry& e : entries) kinds.insert(e.kind);
  EXPECT_EQ(kinds.size(), 16u);
  int nunits = 0;
  std::vector<Position> expected;
  for (const LocationRun& r : runs) {
    nunits += r.units;
    expected.insert(expected.end(), r.units, r.pos);
  }
  EXPECT(positionsPerUnit(entries, nunits) == expected);

  // Install the table in a code object of the same length: NOPs, LOAD_CONST, RETURN_VALUE.
  AssembledCode parts;
  for (int i = 0; i < nunits - 2; ++i) parts.code += std::string("\x09\x00", 2);
  parts.code += std::string("\x64\x00\x53\x00", 4);
  parts.lineTable = bytes;
  parts.stackSize = 1;
  PyObject* templ = PyObject_GetAttrString(PyDict_GetItemString(samples(), "loops"), "__code__");
  Ref code = buildCode(templ, parts, first, nullptr);
  Py_XDECREF(templ);
  EXPECT(code);
  if (!code) {
    PyErr_Print();
    return;
  }
  EXPECT(pyPositions(code.get()) == expected);
  std::vector<std::array<int, 3>> lines;
  for (const LocationEntry& e : entries) lines.push_back({e.start, e.end, e.pos.line});
  EXPECT(pyLines(code.get()) == mergedLines(lines));

  // Positions the format cannot hold are refused.
  std::string junk;
  EXPECT(!encodeLocationTable({{1, {5, 4, 0, 0}}}, first, &junk));   // end line < line
  EXPECT(!encodeLocationTable({{1, {-1, -1, 3, 4}}}, first, &junk)); // columns, no line
  EXPECT(!encodeLocationTable({{0, {5, 5, 0, 0}}}, first, &junk));   // empty run
  // Malformed bytes are reported: a truncated entry, and a long-form entry followed by a
  // byte that belongs to no entry (no 0x80 marker).
  std::vector<LocationEntry> bad;
  EXPECT(!decodeLocationTable(u8(bytes), bytes.size() - 1, first, &bad));
  const uint8_t longFormThenStray[] = {0xf0, 0x00, 0x00, 0x01, 0x01, 0x05};
  bad.clear();
  EXPECT(decodeLocationTable(longFormThenStray, 5, first, &bad));
  EXPECT(!decodeLocationTable(longFormThenStray, 6, first, &bad));
}

int main() {
  Py_Initialize();
  std::vector<Ref> codes = sampleCodes();
  EXPECT(codes.size() > 500);
  exceptionTablesOfRealCode(codes);
  exceptionTableEdgeCases();
  locationTablesOfRealCode(codes);
  everyLocationForm();
  std::printf("%zu sample code objects\n", codes.size());
  codes.clear();
  Py_Finalize();
  return TEST_MAIN_RESULT();
}
