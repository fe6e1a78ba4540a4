// StorageGuard (guards/guard_program.h): whether the tensor inputs' storages alias as they
// did at trace time, for the pairs the graph's mutations make matter.
#include "guards/guard_program.h"

#include <algorithm>
#include <functional>

namespace cdynamo::guards {

StorageGuard::StorageGuard(std::vector<int> r, std::vector<int> g, std::vector<uint8_t> m)
    : regs(std::move(r)), groups(std::move(g)), mutated(std::move(m)), scratch(regs.size()) {
  for (size_t i = 0; i < regs.size(); ++i) {
    num_mutated += mutated[i] ? 1 : 0;
    for (size_t j = 0; j < i; ++j) all_distinct = all_distinct && groups[i] != groups[j];
  }
}

bool StorageGuard::firstMismatch(const void* const* st, size_t* bad_i, size_t* bad_j) const {
  const size_t n = regs.size();
  for (size_t i = 0; i < n; ++i) {
    if (!mutated[i]) continue;
    for (size_t j = 0; j < n; ++j) {
      if (j == i) continue;
      const bool shares = st[i] != nullptr && st[i] == st[j];
      if (shares != (groups[i] == groups[j])) {
        *bad_i = i;
        *bad_j = j;
        return true;
      }
    }
  }
  return false;
}

bool StorageGuard::relatesAsTraced() const {
  const size_t n = regs.size();
  // Pairwise (mutated x all) while that is cheap, or when some registers shared a storage.
  if (!all_distinct || num_mutated * n <= 1024) {
    for (size_t i = 0; i < n; ++i) {
      if (!scratch[i].mutated) continue;
      for (size_t j = 0; j < n; ++j) {
        if (j == i) continue;
        const bool shares = scratch[i].storage != nullptr && scratch[i].storage == scratch[j].storage;
        if (shares != (groups[i] == groups[j])) return false;
      }
    }
    return true;
  }
  // Every register had its own storage: no storage may now be shared by two registers one
  // of which is mutated (the pairwise rule). Sorted by storage, such registers sit in one
  // run of equal storages.
  std::sort(scratch.begin(), scratch.end(),
            [](const Slot& a, const Slot& b) { return std::less<const void*>()(a.storage, b.storage); });
  for (size_t i = 0; i < n;) {
    size_t k = i + 1;
    bool any_mutated = scratch[i].mutated != 0;
    for (; k < n && scratch[k].storage == scratch[i].storage; ++k)
      if (scratch[k].mutated) any_mutated = true;
    if (scratch[i].storage != nullptr && k - i > 1 && any_mutated) return false;
    i = k;
  }
  return true;
}

bool StorageGuard::relates(const void* const* st) const {
  for (size_t i = 0; i < regs.size(); ++i) scratch[i] = Slot{st[i], mutated[i]};
  return relatesAsTraced();
}

bool StorageGuard::holds(PyObject** r) const {
  for (size_t i = 0; i < regs.size(); ++i) scratch[i] = Slot{tensorStorage(r[regs[i]]), mutated[i]};
  return relatesAsTraced();
}

}  // namespace cdynamo::guards
