#include "support/pyref.h"

namespace cdynamo {

PyObject* intern(const char* s) {
  // Interned strings live as long as the interpreter; the caller gets a borrowed pointer.
  PyObject* o = PyUnicode_InternFromString(s);
  return o;  // one reference leaked on purpose: the table of interned names is immortal
}

}  // namespace cdynamo

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
