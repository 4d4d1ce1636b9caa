/* Minimal C test harness: CHECK records failures; main prints
 * "N passed, M failed" and exits non-zero on any failure. */
#ifndef TORCHTPU_TEST_HARNESS_H_
#define TORCHTPU_TEST_HARNESS_H_
#include <stdio.h>

static int tt_test_passed_ = 0, tt_test_failed_ = 0;

#define CHECK(cond)                                                          \
  do {                                                                       \
    if (cond) {                                                              \
      tt_test_passed_++;                                                     \
    } else {                                                                 \
      tt_test_failed_++;                                                     \
      fprintf(stderr, "%s:%d: CHECK failed: %s\n", __FILE__, __LINE__, #cond); \
    }                                                                        \
  } while (0)

#define CHECK_OK(expr)                                                            \
  do {                                                                            \
    tt_status_t st_ = (expr);                                                     \
    if (!st_) {                                                                   \
      tt_test_passed_++;                                                          \
    } else {                                                                      \
      tt_test_failed_++;                                                          \
      fprintf(stderr, "%s:%d: %s failed: %s\n", __FILE__, __LINE__, #expr,        \
              tt_status_message(st_));                                            \
      tt_status_free(st_);                                                        \
    }                                                                             \
  } while (0)

static int tt_test_finish_(void) {
  printf("%d passed, %d failed\n", tt_test_passed_, tt_test_failed_);
  return tt_test_failed_ ? 1 : 0;
}
#endif
