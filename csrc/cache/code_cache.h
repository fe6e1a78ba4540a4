// Per-code-object state kept in co_extra: whether the code is traced at all, and its
// cache entries, most recently hit first. Freed with the code object.
#pragma once
#include <Python.h>

#include <memory>
#include <string>
#include <vector>

#include "runtime/compiled_entry.h"
#include "support/pyref.h"

namespace cdynamo::cache {

enum class CodeState : uint8_t {
  Unknown,  // not looked at yet
  Skip,     // never traced (cdynamo's own code, torch internals, stdlib, generators)
  Native,   // tracing failed: runs natively; `native_reason` says why
  Active,   // traced; see entries
};

using EntryPtr = std::shared_ptr<const runtime::CompiledEntry>;

struct CodeExtra {
  PyCodeObject* code = nullptr;  // borrowed: the extra dies with its code object
  CodeState state = CodeState::Unknown;
  // Marked by cdynamo.disable (the wrapper's code, or a function's own code with
  // recursive=False): the code is never traced, and a trace that reaches a call of it
  // stops there. Unlike `state`, this survives resetAll(): it is the user's decision,
  // not a cached one.
  bool disabled = false;
  // With `disabled`: frames of this code run with the compile context off, so nothing
  // they call is traced either (torch.compiler.disable's recursive wrapper, whose code is
  // shared by every function it wraps).
  bool context_off = false;
  std::string native_reason;
  // Entries, most recently hit first. Iterate by index and hold an EntryPtr while using
  // one: a backend may release the GIL while compiling, and another thread may insert.
  std::vector<EntryPtr> entries;
  // The configurations (identity only, never dereferenced) whose recompile limit this
  // code has hit and warned about: one warning each.
  std::vector<PyObject*> limit_warned;
  // The last reason a call ran natively this once because of torch's mode stacks
  // (frame/compile_miss.cpp modeRefusal): recorded once per reason, not on every such call.
  std::string mode_reported;
  // Automatic dynamic shapes: the sizes each input source had in this code's compiles
  // (a dict, cdynamo/_internal/symbolic_shapes.py input_fake), made on the first compile.
  Ref shape_memory;
};

// The extra of `code`, or null when it has none yet. Never sets an error.
CodeExtra* lookup(PyCodeObject* code);
// The extra of `code`, created on first use. Null with an error set on failure.
CodeExtra* getOrCreate(PyCodeObject* code);
// Moves entry `i` to the front (most recently hit first).
void touch(CodeExtra* extra, size_t i);
// Forgets every decision and entry of every code object (cdynamo.reset()); disabled
// code stays disabled.
void resetAll();
// Marks `code` as never traced (cdynamo.disable), dropping any entry it had; with
// `context_off`, its frames also run with the compile context off. False with an error
// set on failure.
bool markDisabled(PyCodeObject* code, bool context_off = false);
// Whether `code` was marked by markDisabled (cheap; never sets an error).
inline bool isDisabled(PyCodeObject* code);
// Number of code objects with state and total cache entries (for stats and tests).
size_t numCodes();
size_t numEntries();
// Calls `fn` for each code extra (cold; explain and introspection).
template <typename Fn>
void forEach(Fn&& fn);

std::vector<CodeExtra*> snapshot();

inline bool isDisabled(PyCodeObject* code) {
  CodeExtra* e = lookup(code);
  return e && e->disabled;
}

template <typename Fn>
void forEach(Fn&& fn) {
  for (CodeExtra* e : snapshot()) fn(e);
}

}  // namespace cdynamo::cache
