// The compile lock (the Note below): one translation at a time, process-wide.
#pragma once
#include <Python.h>
#include <pythread.h>

namespace cdynamo::frame::internal {

void resetNow();  // compile_lock.cpp

// Note [The compile lock]
// One compile at a time, process-wide (as in TorchDynamo): a translation runs Python code
// (fake tensors, FX, the backend) that may switch threads at any call, the backend is not
// known to be thread-safe (inductor patches global config), and generated code is memoized
// in a process-wide registry (bytecode/resume.cpp) whose updates are not atomic with respect
// to the Python calls they make. Tracing is bound by the GIL anyway, so serializing it costs
// only the overlap of one thread's tracing with another's GIL-free backend work; cache hits
// never take the lock. The lock:
// * is re-entrant on the thread that holds it: a compiled function called while this thread
//   compiles (from a backend, a property or __torch_function__ run during tracing, a
//   dispatch mode) compiles its own frames instead of waiting for itself;
// * is waited for with the GIL released (the holder may need the GIL to finish);
// * is held only while deciding and translating, never while the frame or an entry runs;
// * serializes reset() with translations: reset() from another thread waits for the one in
//   flight; reset() on the thread that holds the lock (inside a backend) is deferred to the
//   moment the outermost hold ends, so no translation ever sees its state cleared under it.
// State owned by the lock's holder: cache entries being added, native/break records, the
// per-code decisions made on a miss. Everything else the hook touches is read under the GIL.
class CompileLock {
 public:
  CompileLock() {
    unsigned long me = PyThread_get_thread_ident();
    if (depth_ > 0 && owner_ == me) {
      ++depth_;
      return;
    }
    if (!lock_) lock_ = PyThread_allocate_lock();
    if (!PyThread_acquire_lock(lock_, NOWAIT_LOCK)) {
      Py_BEGIN_ALLOW_THREADS
      PyThread_acquire_lock(lock_, WAIT_LOCK);
      Py_END_ALLOW_THREADS
    }
    owner_ = me;
    depth_ = 1;
  }
  ~CompileLock() {
    if (depth_ > 1) {
      --depth_;
      return;
    }
    // Still held (depth 1) while a deferred reset runs: destroying entries may run Python
    // code that compiles on this thread, which then re-enters instead of waiting for itself.
    while (reset_pending_) {
      reset_pending_ = false;
      resetNow();
    }
    depth_ = 0;
    owner_ = 0;
    PyThread_release_lock(lock_);
  }
  CompileLock(const CompileLock&) = delete;
  CompileLock& operator=(const CompileLock&) = delete;

  static void afterForkChild() {
    if (depth_ > 0 && owner_ != PyThread_get_thread_ident()) {
      lock_ = PyThread_allocate_lock();  // the old one stays held by a thread that is gone
      depth_ = 0;
      owner_ = 0;
    }
  }
  static bool heldByThisThread() { return depth_ > 0 && owner_ == PyThread_get_thread_ident(); }
  static void deferReset() { reset_pending_ = true; }

 private:
  // All read and written with the GIL held (the holder keeps them while it waits for the
  // GIL; another thread only compares owner_ with itself).
  static PyThread_type_lock lock_;
  static unsigned long owner_;
  static int depth_;
  static bool reset_pending_;
};

}  // namespace cdynamo::frame::internal
