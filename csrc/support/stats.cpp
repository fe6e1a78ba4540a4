#include "support/stats.h"

namespace cdynamo {

Stats& stats() {
  static Stats s;
  return s;
}

uint64_t* opcodeCounts() {
  static uint64_t counts[256] = {};
  return counts;
}

}  // namespace cdynamo
