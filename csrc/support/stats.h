// Process-wide counters behind cdynamo.stats(). Updated under the GIL only.
#pragma once
#include <cstdint>

namespace cdynamo {

struct Stats {
  uint64_t frames_seen = 0;        // frames the hook considered (not skipped by file)
  uint64_t frames_captured = 0;    // translations that produced a cache entry
  uint64_t frames_native = 0;      // translations that failed: frame ran natively
  uint64_t graphs_compiled = 0;    // backend calls
  uint64_t graph_breaks = 0;       // translations that ended in a graph break
  uint64_t cache_hits = 0;
  uint64_t cache_misses = 0;
  uint64_t recompiles = 0;         // misses on a code object that already had entries
  uint64_t translate_ns = 0;       // wall time in trace::translate (the frontend and the backends it calls)
  // The output-metadata memo (graph/memo.cpp): ops whose result it made without running
  // them on fakes, and memoizable ops it had no fitting entry for (they ran, and are stored).
  uint64_t memo_hits = 0;
  uint64_t memo_misses = 0;
};

Stats& stats();

// How many times the symbolic interpreter completed each base opcode (since the last
// reset): the raw data of the opcode coverage table (docs/opcodes.md).
uint64_t* opcodeCounts();  // 256 entries

}  // namespace cdynamo
