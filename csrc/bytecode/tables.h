// Codecs for the two side tables of a CPython 3.11 code object:
//
//  * co_exceptiontable: entries (start, end, target, depth, lasti), offsets in code units.
//  * co_linetable: the PEP 626/657 location table, one (line, end_line, col, end_col) per
//    code unit, stored as entries of 1..8 code units.
//
// Both are pure byte-format functions: no Python objects, no interpreter needed. The
// formats are 3.11-specific (3.12 keeps them; 3.13 keeps them) but live here, behind one
// header, so a format change is a change of this file only. See docs/bytecode.md.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

namespace cdynamo::bytecode {

// One row of co_exceptiontable. An exception raised by an instruction whose first code
// unit lies in [start, end) pops the value stack down to `depth` items, pushes the offset
// of the raising instruction when `lasti`, pushes the exception, and jumps to `target`.
struct ExceptionTableEntry {
  int start = 0;   // code units, inclusive
  int end = 0;     // code units, exclusive
  int target = 0;  // code units
  int depth = 0;
  bool lasti = false;
  bool operator==(const ExceptionTableEntry& o) const {
    return start == o.start && end == o.end && target == o.target && depth == o.depth &&
           lasti == o.lasti;
  }
};

// Decodes `n` bytes of an exception table. Returns false (and leaves `out` partial) when
// the bytes are truncated or an entry does not start with the 0x80 marker.
bool decodeExceptionTable(const uint8_t* data, size_t n, std::vector<ExceptionTableEntry>* out);
// Encodes entries in the given order (the interpreter searches them in order, so callers
// pass them sorted by start and non-overlapping). Returns false for an entry that cannot
// be encoded (negative field, end <= start, value >= 2^30).
bool encodeExceptionTable(const std::vector<ExceptionTableEntry>& entries, std::string* out);

// A source position. -1 means "absent" in every field (None in Python's co_positions()).
struct Position {
  int line = -1;
  int endLine = -1;
  int col = -1;
  int endCol = -1;
  bool operator==(const Position& o) const {
    return line == o.line && endLine == o.endLine && col == o.col && endCol == o.endCol;
  }
  bool operator!=(const Position& o) const { return !(*this == o); }
};

// The positions a 3.11 location table can express. Absent line: everything absent.
// Present line: end line present and >= line, columns any of absent/non-negative.
bool positionEncodable(const Position& p);

// One decoded location-table entry: code units [start, end) share `pos`. The entry kind
// (0-15, see tables.cpp) is kept so tests can check which forms were read or written.
struct LocationEntry {
  int start = 0;
  int end = 0;
  Position pos;
  int kind = 0;
};

// Decodes a whole location table whose line numbers count from `firstLineNo`
// (co_firstlineno). Returns false on truncated or malformed bytes.
bool decodeLocationTable(const uint8_t* data, size_t n, int firstLineNo,
                         std::vector<LocationEntry>* out);
// Expands entries to one Position per code unit (what co_positions() yields); units past
// the last entry get an absent position.
std::vector<Position> positionsPerUnit(const std::vector<LocationEntry>& entries, int nunits);

// A run of `units` code units sharing one position; the assembler passes one run per
// instruction (its EXTENDED_ARG prefixes, opcode and caches), as CPython's compiler does,
// which keeps co_lines() ranges identical to the compiler's.
struct LocationRun {
  int units = 0;
  Position pos;
};

// Encodes runs into a location table (runs over 8 units are split into several entries).
// `compact` picks the smallest form for each entry (short 0-9, one-line 10-12, no-column
// 13, long 14, none 15), which for compiler-made positions reproduces CPython's bytes;
// without it only forms 13/14/15 are written. Returns false if a position is not
// positionEncodable() or a run is empty.
bool encodeLocationTable(const std::vector<LocationRun>& runs, int firstLineNo, std::string* out,
                         bool compact = true);

}  // namespace cdynamo::bytecode
