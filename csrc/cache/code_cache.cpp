#include "cache/code_cache.h"

#include <unordered_set>

namespace cdynamo::cache {
namespace {

Py_ssize_t extraIndex = -1;
// Every live extra, so that reset() can reach them. Touched under the GIL only.
std::unordered_set<CodeExtra*>& registry() {
  static auto* r = new std::unordered_set<CodeExtra*>();
  return *r;
}

// Runs when a code object dies. May run re-entrantly while entries are being destroyed
// (an entry can hold the last reference to another code object), so it only unlinks.
void freeExtra(void* p) {
  auto* extra = static_cast<CodeExtra*>(p);
  registry().erase(extra);
  delete extra;
}

bool ensureIndex() {
  if (extraIndex < 0) {
    extraIndex = _PyEval_RequestCodeExtraIndex(freeExtra);
    if (extraIndex < 0) {
      PyErr_SetString(PyExc_RuntimeError, "cdynamo: no co_extra index available");
      return false;
    }
  }
  return true;
}

}  // namespace

CodeExtra* lookup(PyCodeObject* code) {
  if (extraIndex < 0) return nullptr;
  void* p = nullptr;
  if (_PyCode_GetExtra(reinterpret_cast<PyObject*>(code), extraIndex, &p) < 0) {
    PyErr_Clear();
    return nullptr;
  }
  return static_cast<CodeExtra*>(p);
}

CodeExtra* getOrCreate(PyCodeObject* code) {
  if (!ensureIndex()) return nullptr;
  if (CodeExtra* e = lookup(code)) return e;
  auto* extra = new CodeExtra();
  extra->code = code;
  if (_PyCode_SetExtra(reinterpret_cast<PyObject*>(code), extraIndex, extra) < 0) {
    delete extra;
    return nullptr;
  }
  registry().insert(extra);
  return extra;
}

void touch(CodeExtra* extra, size_t i) {
  if (i == 0 || i >= extra->entries.size()) return;
  EntryPtr hit = std::move(extra->entries[i]);
  for (size_t k = i; k > 0; --k) extra->entries[k] = std::move(extra->entries[k - 1]);
  extra->entries[0] = std::move(hit);
}

std::vector<CodeExtra*> snapshot() {
  return std::vector<CodeExtra*>(registry().begin(), registry().end());
}

void resetAll() {
  // Collect the entries first and destroy them after the walk: destroying one can free
  // another code object and so edit the registry.
  std::vector<EntryPtr> graveyard;
  for (CodeExtra* e : snapshot()) {
    if (!registry().count(e)) continue;
    for (auto& entry : e->entries) graveyard.push_back(std::move(entry));
    e->entries.clear();
    e->limit_warned.clear();
    e->shape_memory.reset();
    e->state = e->disabled ? CodeState::Skip : CodeState::Unknown;
    e->native_reason.clear();
    e->mode_reported.clear();
  }
  graveyard.clear();
}

bool markDisabled(PyCodeObject* code, bool context_off) {
  CodeExtra* e = getOrCreate(code);
  if (!e) return false;
  e->disabled = true;
  e->context_off = e->context_off || context_off;
  e->state = CodeState::Skip;  // the hook evaluates Skip code with CPython, untouched
  e->native_reason.clear();
  // Entries made before the code was disabled are never run again; the caller's frame may
  // hold one (EntryPtr), so destroying them here is safe.
  std::vector<EntryPtr> graveyard = std::move(e->entries);
  e->entries.clear();
  graveyard.clear();
  return true;
}

size_t numCodes() { return registry().size(); }
size_t numEntries() {
  size_t n = 0;
  for (CodeExtra* e : registry()) n += e->entries.size();
  return n;
}

}  // namespace cdynamo::cache
