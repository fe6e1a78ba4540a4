// Broken invariants (the third error channel, docs/design.md): CHECK names file and line and
// aborts. Never used for user errors (those are Python exceptions) nor for unsupported
// code (those are graph-break statuses).
#pragma once
#include <cstdio>
#include <cstdlib>

#define CDYNAMO_CHECK(cond, msg)                                                   \
  do {                                                                             \
    if (!(cond)) {                                                                 \
      std::fprintf(stderr, "cdynamo internal error at %s:%d: %s (%s)\n", __FILE__, \
                   __LINE__, msg, #cond);                                          \
      std::abort();                                                                \
    }                                                                              \
  } while (0)
