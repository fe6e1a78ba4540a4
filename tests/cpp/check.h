// Minimal test harness for the C++ unit tests (run by ctest): EXPECT records a failure and
// goes on; main() returns non-zero when any expectation failed.
#pragma once
#include <cstdio>
#include <string>

namespace cdynamo_test {
inline int& failures() {
  static int n = 0;
  return n;
}
inline int& checks() {
  static int n = 0;
  return n;
}
}  // namespace cdynamo_test

#define EXPECT(cond)                                                            \
  do {                                                                          \
    ++cdynamo_test::checks();                                                   \
    if (!(cond)) {                                                              \
      ++cdynamo_test::failures();                                               \
      std::fprintf(stderr, "%s:%d: expectation failed: %s\n", __FILE__, __LINE__, #cond); \
    }                                                                           \
  } while (0)

#define EXPECT_EQ(a, b) EXPECT((a) == (b))

#define TEST_MAIN_RESULT()                                                           \
  (std::printf("%d checks, %d failed\n", cdynamo_test::checks(), cdynamo_test::failures()), \
   cdynamo_test::failures() == 0 ? 0 : 1)
