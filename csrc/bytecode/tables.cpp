// Byte formats of co_exceptiontable and co_linetable (CPython 3.11).
//
// Both tables are streams of 6-bit groups with 0x40 as the "more follows" bit, but they
// differ in group order: the exception table writes the most significant group first
// (so a reader can scan entries by the 0x80 marker on their first byte), the location
// table writes the least significant group first. Mixing the two up is the classic bug;
// each has its own reader and writer below.
#include "bytecode/tables.h"

#include <algorithm>

namespace cdynamo::bytecode {
namespace {

constexpr uint8_t kEntryStart = 0x80;  // marks the first byte of an entry (both tables)
constexpr uint8_t kMore = 0x40;        // another 6-bit group follows
constexpr int kMaxValue = 1 << 30;     // five 6-bit groups; what CPython's writer accepts

class Reader {
 public:
  Reader(const uint8_t* data, size_t n) : p_(data), end_(data + n) {}
  bool atEnd() const { return p_ == end_; }
  bool peek(uint8_t* b) const {
    if (p_ == end_) return false;
    *b = *p_;
    return true;
  }
  bool byte(uint8_t* b) {
    if (p_ == end_) return false;
    *b = *p_++;
    return true;
  }
  // Exception-table varint: most significant group first. The 0x80 bit is ignored here
  // (the caller checks it on an entry's first byte).
  bool bigEndianVarint(int* v) {
    uint8_t b;
    if (!byte(&b)) return false;
    int value = b & 0x3f;
    while (b & kMore) {
      // At most five groups (30 bits), as CPython writes; more would overflow an int.
      if (!byte(&b) || value >= (kMaxValue >> 6)) return false;
      value = (value << 6) | (b & 0x3f);
    }
    *v = value;
    return true;
  }
  // Location-table varint: least significant group first.
  bool littleEndianVarint(unsigned* v) {
    uint8_t b;
    if (!byte(&b)) return false;
    unsigned value = b & 0x3f;
    int shift = 0;
    while (b & kMore) {
      shift += 6;
      if (shift > 24 || !byte(&b)) return false;  // five groups at most: < 2^30
      value |= static_cast<unsigned>(b & 0x3f) << shift;
    }
    *v = value;
    return true;
  }
  // Signed location varint: magnitude shifted left by one, sign in bit 0.
  bool signedVarint(int* v) {
    unsigned u;
    if (!littleEndianVarint(&u)) return false;
    int mag = static_cast<int>(u >> 1);
    *v = (u & 1) ? -mag : mag;
    return true;
  }

 private:
  const uint8_t* p_;
  const uint8_t* end_;
};

void writeBigEndianVarint(std::string* out, int value, uint8_t firstByteFlag) {
  // Emit the 6-bit groups from the most significant non-zero one down.
  int shift = 24;
  while (shift > 0 && (value >> shift) == 0) shift -= 6;
  for (; shift > 0; shift -= 6) {
    out->push_back(static_cast<char>(((value >> shift) & 0x3f) | kMore | firstByteFlag));
    firstByteFlag = 0;
  }
  out->push_back(static_cast<char>((value & 0x3f) | firstByteFlag));
}

void writeLittleEndianVarint(std::string* out, unsigned value) {
  while (value >= 0x40) {
    out->push_back(static_cast<char>((value & 0x3f) | kMore));
    value >>= 6;
  }
  out->push_back(static_cast<char>(value));
}

void writeSignedVarint(std::string* out, int value) {
  unsigned u = value < 0 ? ((static_cast<unsigned>(-value) << 1) | 1u)
                         : (static_cast<unsigned>(value) << 1);
  writeLittleEndianVarint(out, u);
}

// Location entry kinds (the 4-bit code in an entry's first byte).
constexpr int kShortFormLast = 9;   // 0-9: same line, column = code*8 + 3 bits, width 4 bits
constexpr int kOneLineForm = 10;    // 10-12: line += code-10, column and end column bytes
constexpr int kNoColumnForm = 13;   // line delta only
constexpr int kLongForm = 14;       // line delta, end line delta, column+1, end column+1
constexpr int kNoLocationForm = 15; // no position at all
constexpr int kMaxEntryUnits = 8;   // 3 bits of length-1

}  // namespace

bool decodeExceptionTable(const uint8_t* data, size_t n, std::vector<ExceptionTableEntry>* out) {
  Reader r(data, n);
  while (!r.atEnd()) {
    uint8_t first;
    r.peek(&first);
    if (!(first & kEntryStart)) return false;
    int start, length, target, depthLasti;
    if (!r.bigEndianVarint(&start) || !r.bigEndianVarint(&length) ||
        !r.bigEndianVarint(&target) || !r.bigEndianVarint(&depthLasti)) {
      return false;
    }
    ExceptionTableEntry e;
    e.start = start;
    e.end = start + length;
    e.target = target;
    e.depth = depthLasti >> 1;
    e.lasti = (depthLasti & 1) != 0;
    out->push_back(e);
  }
  return true;
}

bool encodeExceptionTable(const std::vector<ExceptionTableEntry>& entries, std::string* out) {
  for (const ExceptionTableEntry& e : entries) {
    int length = e.end - e.start;
    if (e.start < 0 || length <= 0 || e.target < 0 || e.depth < 0 || e.end >= kMaxValue ||
        e.target >= kMaxValue || e.depth >= kMaxValue / 2) {
      return false;
    }
    writeBigEndianVarint(out, e.start, kEntryStart);
    writeBigEndianVarint(out, length, 0);
    writeBigEndianVarint(out, e.target, 0);
    writeBigEndianVarint(out, (e.depth << 1) | (e.lasti ? 1 : 0), 0);
  }
  return true;
}

bool positionEncodable(const Position& p) {
  if (p.line < 0) return p.endLine < 0 && p.col < 0 && p.endCol < 0;
  return p.endLine >= p.line && p.col >= -1 && p.endCol >= -1;
}

bool decodeLocationTable(const uint8_t* data, size_t n, int firstLineNo,
                         std::vector<LocationEntry>* out) {
  Reader r(data, n);
  // The running line is kept across no-location entries: deltas are relative to the
  // last entry that had a line, not to "absent".
  int line = firstLineNo;
  int unit = 0;
  while (!r.atEnd()) {
    uint8_t first;
    r.byte(&first);
    if (!(first & kEntryStart)) return false;
    int kind = (first >> 3) & 0x0f;
    int units = (first & 7) + 1;
    LocationEntry e;
    e.start = unit;
    e.end = unit + units;
    e.kind = kind;
    Position& p = e.pos;
    if (kind <= kShortFormLast) {
      uint8_t b;
      if (!r.byte(&b)) return false;
      p.line = p.endLine = line;
      p.col = kind * 8 + ((b >> 4) & 7);
      p.endCol = p.col + (b & 0x0f);
    } else if (kind < kNoColumnForm) {
      uint8_t c, ec;
      if (!r.byte(&c) || !r.byte(&ec)) return false;
      line += kind - kOneLineForm;
      p.line = p.endLine = line;
      p.col = c;
      p.endCol = ec;
    } else if (kind == kNoColumnForm) {
      int delta;
      if (!r.signedVarint(&delta)) return false;
      line += delta;
      p.line = p.endLine = line;
    } else if (kind == kLongForm) {
      int delta;
      unsigned endDelta, col1, endCol1;
      if (!r.signedVarint(&delta) || !r.littleEndianVarint(&endDelta) ||
          !r.littleEndianVarint(&col1) || !r.littleEndianVarint(&endCol1)) {
        return false;
      }
      line += delta;
      p.line = line;
      p.endLine = line + static_cast<int>(endDelta);
      p.col = static_cast<int>(col1) - 1;  // stored +1 so that 0 can mean "absent"
      p.endCol = static_cast<int>(endCol1) - 1;
    }  // kNoLocationForm: p stays absent, line unchanged
    // Bytes of an entry never carry the 0x80 marker; if the next byte is not an entry
    // start, the entry had more payload than its kind allows.
    uint8_t next;
    if (r.peek(&next) && !(next & kEntryStart)) return false;
    out->push_back(e);
    unit += units;
  }
  return true;
}

std::vector<Position> positionsPerUnit(const std::vector<LocationEntry>& entries, int nunits) {
  std::vector<Position> out(std::max(nunits, 0));
  for (const LocationEntry& e : entries) {
    for (int u = e.start; u < e.end && u < nunits; ++u) out[u] = e.pos;
  }
  return out;
}

namespace {

// Writes one entry of 1..8 units; returns the new running line.
int writeLocationEntry(std::string* out, int units, const Position& p, int line, bool compact) {
  auto head = [&](int kind) {
    out->push_back(static_cast<char>(kEntryStart | (kind << 3) | (units - 1)));
  };
  if (p.line < 0) {
    head(kNoLocationForm);
    return line;
  }
  int delta = p.line - line;
  if (p.col < 0 && p.endCol < 0 && p.endLine == p.line) {
    head(kNoColumnForm);
    writeSignedVarint(out, delta);
    return p.line;
  }
  if (compact && p.endLine == p.line && p.col >= 0 && p.endCol >= p.col) {
    int width = p.endCol - p.col;
    if (delta == 0 && p.col < (kShortFormLast + 1) * 8 && width < 16) {
      head(p.col >> 3);
      out->push_back(static_cast<char>(((p.col & 7) << 4) | width));
      return line;
    }
    // Column bytes must stay below 0x80, which marks entry starts.
    if (delta >= 0 && delta <= 2 && p.col < 128 && p.endCol < 128) {
      head(kOneLineForm + delta);
      out->push_back(static_cast<char>(p.col));
      out->push_back(static_cast<char>(p.endCol));
      return p.line;
    }
  }
  head(kLongForm);
  writeSignedVarint(out, delta);
  writeLittleEndianVarint(out, static_cast<unsigned>(p.endLine - p.line));
  writeLittleEndianVarint(out, static_cast<unsigned>(p.col + 1));
  writeLittleEndianVarint(out, static_cast<unsigned>(p.endCol + 1));
  return p.line;
}

}  // namespace

bool encodeLocationTable(const std::vector<LocationRun>& runs, int firstLineNo, std::string* out,
                         bool compact) {
  int line = firstLineNo;
  for (const LocationRun& run : runs) {
    if (run.units <= 0 || !positionEncodable(run.pos)) return false;
    // A run longer than one entry repeats the position (line delta 0 after the first).
    for (int left = run.units; left > 0; left -= kMaxEntryUnits) {
      line = writeLocationEntry(out, std::min(left, kMaxEntryUnits), run.pos, line, compact);
    }
  }
  return true;
}

}  // namespace cdynamo::bytecode
