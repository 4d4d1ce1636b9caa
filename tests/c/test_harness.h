/* The C tests' harness, shared by every tests/c/test_*.c program: checks
 * that count passes and failures (test_summary prints "N passed, M failed"
 * and gives main's exit status), tensors that own their buffer, random
 * fills, and comparison against double-precision reference values with
 * per-dtype tolerances.
 *
 *   CHECK(cond)                  fails with the condition's text
 *   CHECK(cond, fmt, ...)        fails with a printf-style message
 *   CHECK_OK(expr[, what])       expr returns a tt_status_t that must be OK
 *                                (freed); the expression is 1 when it was
 *   CHECK_CODE(expr, code, what) the status carries `code` (freed)
 */
#ifndef TORCHTPU_TESTS_TEST_HARNESS_H_
#define TORCHTPU_TESTS_TEST_HARNESS_H_

#include <math.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kernels/kernel_util.h"
#include "torchtpu/kernels.h"

static int g_passed = 0, g_failed = 0;

static inline void check_impl(int ok, const char *file, int line, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));
static inline void check_impl(int ok, const char *file, int line, const char *fmt, ...) {
  if (ok) {
    ++g_passed;
    return;
  }
  ++g_failed;
  printf("FAIL %s:%d: ", file, line);
  va_list ap;
  va_start(ap, fmt);
  vprintf(fmt, ap);
  va_end(ap);
  printf("\n");
  fflush(stdout);
}

/* CHECK with one argument or with a message: the 21st argument of the
 * selector names the form. */
#define TT_CHECK_PICK_(_1, _2, _3, _4, _5, _6, _7, _8, _9, _10, _11, _12, _13, _14, _15, _16, \
                       _17, _18, _19, _20, NAME, ...)                                         \
  NAME
#define CHECK(...) TT_CHECK_PICK_(__VA_ARGS__, CHECK_MSG_, CHECK_MSG_, CHECK_MSG_, CHECK_MSG_, CHECK_MSG_, CHECK_MSG_, CHECK_MSG_, CHECK_MSG_, CHECK_MSG_, CHECK_MSG_, CHECK_MSG_, CHECK_MSG_, CHECK_MSG_, CHECK_MSG_, CHECK_MSG_, CHECK_MSG_, CHECK_MSG_, CHECK_MSG_, CHECK_MSG_, CHECK_BARE_)(__VA_ARGS__)
#define CHECK_BARE_(cond) check_impl(!!(cond), __FILE__, __LINE__, "CHECK failed: %s", #cond)
#define CHECK_MSG_(cond, ...) check_impl(!!(cond), __FILE__, __LINE__, __VA_ARGS__)

/* Checks that st is OK (and frees it). Returns 1 when OK. */
static inline int check_ok_impl(tt_status_t st, const char *file, int line, const char *what) {
  check_impl(st == NULL, file, line, "%s: unexpected error %d: %s", what,
             (int)tt_status_code(st), tt_status_message(st));
  int ok = st == NULL;
  tt_status_free(st);
  return ok;
}
#define TT_CHECK_OK_PICK_(_1, _2, NAME, ...) NAME
#define CHECK_OK(...) TT_CHECK_OK_PICK_(__VA_ARGS__, CHECK_OK_WHAT_, CHECK_OK_BARE_)(__VA_ARGS__)
#define CHECK_OK_BARE_(expr) check_ok_impl((expr), __FILE__, __LINE__, #expr)
#define CHECK_OK_WHAT_(expr, what) check_ok_impl((expr), __FILE__, __LINE__, (what))

/* Checks that st carries `code` (and frees it). */
static inline void check_code_impl(tt_status_t st, tt_code_t code, const char *file, int line,
                                   const char *what) {
  check_impl(tt_status_code(st) == code, file, line, "%s: expected code %d, got %d (%s)", what,
             (int)code, (int)tt_status_code(st), tt_status_message(st));
  tt_status_free(st);
}
#define CHECK_CODE(expr, code, what) check_code_impl((expr), (code), __FILE__, __LINE__, (what))

static inline int test_summary(void) {
  printf("%d passed, %d failed\n", g_passed, g_failed);
  return g_failed ? 1 : 0;
}

/* ---- tensors ------------------------------------------------------------ */

typedef struct tensor_s {
  tt_view_t v;
  int64_t n;
} tensor_t;

static inline tensor_t tensor_new(tt_dtype_t dt, int rank, const int64_t *dims) {
  tensor_t t;
  memset(&t, 0, sizeof(t));
  t.v.dtype = dt;
  t.v.shape.rank = rank;
  t.n = 1;
  for (int i = 0; i < rank; ++i) {
    t.v.shape.dims[i] = dims[i];
    t.n *= dims[i];
  }
  size_t bytes = (size_t)(t.n > 0 ? t.n : 1) * tt_dtype_size(dt);
  t.v.data = malloc(bytes);
  /* Poison so kernels that forget to write an element are caught. */
  memset(t.v.data, 0xA5, bytes);
  return t;
}

static inline tensor_t tensor_like(const tensor_t *o, tt_dtype_t dt) {
  return tensor_new(dt, o->v.shape.rank, o->v.shape.dims);
}

static inline void tensor_free(tensor_t *t) {
  free(t->v.data);
  t->v.data = NULL;
}

static inline double tget(const tensor_t *t, int64_t i) {
  return tt_get_f64(t->v.data, t->v.dtype, i);
}
static inline int64_t tgeti(const tensor_t *t, int64_t i) {
  return tt_get_i64(t->v.data, t->v.dtype, i);
}
static inline void tset(tensor_t *t, int64_t i, double v) {
  tt_set_f64(t->v.data, t->v.dtype, i, v);
}

/* xorshift64* for reproducible test data. */
static uint64_t g_rng_state = 0x9E3779B97F4A7C15ull;
static inline uint64_t rnd_u64(void) {
  g_rng_state ^= g_rng_state >> 12;
  g_rng_state ^= g_rng_state << 25;
  g_rng_state ^= g_rng_state >> 27;
  return g_rng_state * 0x2545F4914F6CDD1Dull;
}
static inline double rnd_uniform(double lo, double hi) {
  return lo + (hi - lo) * (double)(rnd_u64() >> 11) * 0x1p-53;
}
static inline int64_t rnd_int(int64_t lo, int64_t hi) { /* [lo, hi] */
  return lo + (int64_t)(rnd_u64() % (uint64_t)(hi - lo + 1));
}

/* Fills with values in [lo, hi]; integer dtypes get integers, BOOL 0/1. */
static inline void tensor_fill_random(tensor_t *t, double lo, double hi) {
  for (int64_t i = 0; i < t->n; ++i) {
    if (tt_dtype_is_float(t->v.dtype)) {
      tset(t, i, rnd_uniform(lo, hi));
    } else if (t->v.dtype == TT_BOOL) {
      tset(t, i, (double)(rnd_u64() & 1));
    } else {
      tset(t, i, (double)rnd_int((int64_t)lo, (int64_t)hi));
    }
  }
}

/* The value a double becomes when stored in dt and read back. */
static inline double round_to(tt_dtype_t dt, double v) {
  unsigned char buf[8];
  tt_set_f64(buf, dt, 0, v);
  return tt_get_f64(buf, dt, 0);
}

/* Tolerances for comparing a kernel result with a reference computed in
 * double and rounded to the output dtype. */
static inline double dtype_rtol(tt_dtype_t dt) {
  switch (dt) {
    case TT_F32: return 2e-5;
    case TT_F64: return 1e-10;
    case TT_F16: return 2e-3;
    case TT_BF16: return 1.6e-2;
    default: return 0;
  }
}

static inline int close_enough(double got, double want, double atol, double rtol) {
  if (isnan(want)) return isnan(got);
  if (isinf(want)) return got == want;
  return fabs(got - want) <= atol + rtol * fabs(want);
}

/* Compares t against ref[] (already rounded to t's dtype); reports up to
 * three mismatches under `what`. Returns the number of mismatches. */
static inline int compare_ref(const char *file, int line, const char *what,
                       const tensor_t *t, const double *ref, double atol,
                       double rtol) {
  int bad = 0;
  for (int64_t i = 0; i < t->n; ++i) {
    double got = tget(t, i);
    if (!close_enough(got, ref[i], atol, rtol)) {
      if (bad < 3) {
        printf("  %s [%s] at %lld: got %.9g want %.9g\n", what,
               tt_dtype_name(t->v.dtype), (long long)i, got, ref[i]);
      }
      ++bad;
    }
  }
  check_impl(bad == 0, file, line, "%s [%s]: %d of %lld elements differ", what,
             tt_dtype_name(t->v.dtype), bad, (long long)t->n);
  return bad;
}
#define COMPARE(what, t, ref, atol, rtol) \
  compare_ref(__FILE__, __LINE__, (what), (t), (ref), (atol), (rtol))

__attribute__((unused)) static const tt_dtype_t kFloatDtypes[] = {TT_F32, TT_F64, TT_F16, TT_BF16};
__attribute__((unused)) static const tt_dtype_t kAllDtypes[] = {TT_F32, TT_F64, TT_F16, TT_BF16, TT_I8,
                                        TT_U8,  TT_I16, TT_I32, TT_I64, TT_BOOL};
#define COUNT_OF(a) ((int)(sizeof(a) / sizeof((a)[0])))

#endif /* TORCHTPU_TESTS_TEST_HARNESS_H_ */
