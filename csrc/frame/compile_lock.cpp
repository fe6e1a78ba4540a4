// The compile lock's state, and reset(): dropping every cache entry and record, serialized
// with translations (Note [The compile lock] in compile_lock.h).
#include "frame/frame_internal.h"

#include "frame/compile_lock.h"
#include "support/stats.h"

namespace cdynamo::frame {
namespace internal {

PyThread_type_lock CompileLock::lock_ = nullptr;
unsigned long CompileLock::owner_ = 0;
int CompileLock::depth_ = 0;
bool CompileLock::reset_pending_ = false;

// Under the compile lock (Note [The compile lock]). Generated break and resume code is a
// pure memo of code generation and stays (it dies with its original code object): an entry
// still running on another thread keeps calling its break code, which must stay known as
// such (bytecode::isBreakCode) or the hook would trace it as a user function.
void resetNow() {
  cache::resetAll();
  native_frames.clear();
  graph_breaks.clear();
  recompile_records.clear();
  stats() = Stats{};
}

}  // namespace internal

using internal::CompileLock;
using internal::resetNow;

void reset() {
  if (CompileLock::heldByThisThread()) {  // called from a backend or during tracing
    CompileLock::deferReset();
    return;
  }
  CompileLock lock;
  resetNow();
}

}  // namespace cdynamo::frame
