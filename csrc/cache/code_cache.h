// Per-code-object state kept in co_extra: whether the code is traced at all, and its
// cache entries, most recently hit first. Freed with the code object.
#pragma once
#include <Python.h>

#include <memory>
#include <string>
#include <vector>

#include "runtime/compiled_entry.h"

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
  std::string native_reason;
  // Entries, most recently hit first. Iterate by index and hold an EntryPtr while using
  // one: a backend may release the GIL while compiling, and another thread may insert.
  std::vector<EntryPtr> entries;
};

// The extra of `code`, or null when it has none yet. Never sets an error.
CodeExtra* lookup(PyCodeObject* code);
// The extra of `code`, created on first use. Null with an error set on failure.
CodeExtra* getOrCreate(PyCodeObject* code);
// Moves entry `i` to the front (most recently hit first).
void touch(CodeExtra* extra, size_t i);
// Forgets every decision and entry of every code object (cdynamo.reset()).
void resetAll();
// Number of code objects with state and total cache entries (for stats and tests).
size_t numCodes();
size_t numEntries();
// Calls `fn` for each code extra (cold; explain and introspection).
template <typename Fn>
void forEach(Fn&& fn);

std::vector<CodeExtra*> snapshot();

template <typename Fn>
void forEach(Fn&& fn) {
  for (CodeExtra* e : snapshot()) fn(e);
}

}  // namespace cdynamo::cache
