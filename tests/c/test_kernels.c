/* Tests for the dtype helpers, the thread pool and the elementwise kernels
 * (unary, binary, where, convert, broadcast, fill, iota), each compared with
 * a straightforward double-precision reference written here. */
#include <pthread.h>
#include <unistd.h>
#include <stdatomic.h>

#include "test_harness.h"

/* ---- dtype ----------------------------------------------------------------- */

static double f16_value(uint16_t h) { return tt_f16_to_f32(h); }

static void test_dtype(void) {
  CHECK(tt_dtype_size(TT_F32) == 4 && tt_dtype_size(TT_F64) == 8 &&
            tt_dtype_size(TT_F16) == 2 && tt_dtype_size(TT_BF16) == 2 &&
            tt_dtype_size(TT_I8) == 1 && tt_dtype_size(TT_U8) == 1 &&
            tt_dtype_size(TT_I16) == 2 && tt_dtype_size(TT_I32) == 4 &&
            tt_dtype_size(TT_I64) == 8 && tt_dtype_size(TT_BOOL) == 1,
        "dtype sizes");
  CHECK(tt_dtype_size((tt_dtype_t)99) == 0, "unknown dtype size is 0");
  CHECK(strcmp(tt_dtype_name(TT_BF16), "bfloat16") == 0, "bf16 name");
  CHECK(strcmp(tt_dtype_name(TT_BOOL), "bool") == 0, "bool name");
  CHECK(strcmp(tt_dtype_name((tt_dtype_t)-1), "invalid") == 0, "bad name");
  CHECK(tt_dtype_is_float(TT_F16) && tt_dtype_is_float(TT_BF16) &&
            !tt_dtype_is_float(TT_I32) && !tt_dtype_is_float(TT_BOOL),
        "is_float");
  tt_shape_t s0 = {0, {0}}, s1 = {2, {3, 4}}, s2 = {2, {3, 4}}, s3 = {2, {3, 0}};
  CHECK(tt_shape_numel(&s0) == 1, "rank-0 numel is 1");
  CHECK(tt_shape_numel(&s1) == 12, "numel 12");
  CHECK(tt_shape_numel(&s3) == 0, "numel 0");
  CHECK(tt_shape_equal(&s1, &s2) && !tt_shape_equal(&s1, &s3) &&
            !tt_shape_equal(&s0, &s1),
        "shape_equal");

  /* f16: every finite pattern survives f16 -> f32 -> f16; NaN stays NaN. */
  int bad = 0;
  for (uint32_t h = 0; h < 65536; ++h) {
    float f = tt_f16_to_f32((uint16_t)h);
    uint16_t back = tt_f32_to_f16(f);
    int is_nan = (h & 0x7c00) == 0x7c00 && (h & 0x3ff);
    if (is_nan ? !(f != f) || (back & 0x7fff) != 0x7e00 : back != h) ++bad;
  }
  CHECK(bad == 0, "f16 round trip: %d patterns wrong", bad);
  /* f32 -> f16 rounds to the nearest f16, ties to even (checked against the
   * neighbours of the result). */
  bad = 0;
  for (int i = 0; i < 200000; ++i) {
    float f = (float)rnd_uniform(-70000, 70000) * (float)pow(2.0, (double)rnd_int(-30, 0));
    uint16_t h = tt_f32_to_f16(f);
    double got = f16_value(h);
    if (fabs(f) >= 65520.0) {
      if (!isinf(got)) ++bad;
      continue;
    }
    uint16_t up = (uint16_t)(h + 1), dn = (uint16_t)(h - 1);
    double e = fabs(got - f);
    double eu = (up & 0x7c00) == 0x7c00 ? INFINITY : fabs(f16_value(up) - f);
    double ed = (h & 0x7fff) == 0 ? INFINITY : fabs(f16_value(dn) - f);
    if (e > eu || e > ed) ++bad;
    if ((e == eu || e == ed) && (h & 1)) ++bad; /* tie must pick even */
  }
  CHECK(bad == 0, "f32->f16 nearest-even: %d wrong", bad);
  CHECK(tt_f32_to_f16(65504.0f) == 0x7bff, "f16 max");
  CHECK(tt_f32_to_f16(65520.0f) == 0x7c00, "65520 rounds to inf");
  CHECK(tt_f32_to_f16(-INFINITY) == 0xfc00, "-inf");
  CHECK(tt_f32_to_f16(5.9604645e-8f) == 0x0001, "smallest subnormal");
  CHECK(tt_f32_to_f16(2.9802322e-8f) == 0x0000, "half of smallest -> 0 (even)");
  CHECK(tt_f32_to_f16(-0.0f) == 0x8000, "-0");
  CHECK(tt_f32_to_f16(1.0f + 0x1p-11f) == 0x3c00, "tie to even (down)");
  CHECK(tt_f32_to_f16(1.0f + 3 * 0x1p-11f) == 0x3c02, "tie to even (up)");
  CHECK((tt_f32_to_f16(NAN) & 0x7fff) == 0x7e00, "f16 NaN");

  /* bf16 */
  bad = 0;
  for (uint32_t h = 0; h < 65536; ++h) {
    float f = tt_bf16_to_f32((uint16_t)h);
    uint16_t back = tt_f32_to_bf16(f);
    int is_nan = (h & 0x7f80) == 0x7f80 && (h & 0x7f);
    if (is_nan ? back != 0x7fc0 : back != h) ++bad;
  }
  CHECK(bad == 0, "bf16 round trip: %d patterns wrong", bad);
  CHECK(tt_f32_to_bf16(1.0f + 0x1p-8f) == 0x3f80, "bf16 tie to even (down)");
  CHECK(tt_f32_to_bf16(1.0f + 3 * 0x1p-8f) == 0x3f82, "bf16 tie to even (up)");
  CHECK(tt_f32_to_bf16(1.0f + 0x1p-8f + 0x1p-20f) == 0x3f81, "bf16 above tie");
  CHECK(tt_f32_to_bf16(3.4e38f) == 0x7f80, "bf16 overflow to inf");
}

/* ---- thread pool ---------------------------------------------------------- */

typedef struct {
  _Atomic int *hits;
  _Atomic int64_t calls;
} pf_ctx_t;

static void pf_mark(void *arg, int64_t b, int64_t e) {
  pf_ctx_t *c = (pf_ctx_t *)arg;
  atomic_fetch_add(&c->calls, 1);
  for (int64_t i = b; i < e; ++i) atomic_fetch_add(&c->hits[i], 1);
}

static void pf_nested(void *arg, int64_t b, int64_t e) {
  pf_ctx_t *c = (pf_ctx_t *)arg;
  for (int64_t i = b; i < e; ++i) {
    pf_ctx_t inner = {c->hits + i * 100, 0};
    tt_parallel_for(100, 1, pf_mark, &inner);
  }
}

static int pf_all_once(_Atomic int *hits, int64_t n, int times) {
  for (int64_t i = 0; i < n; ++i) {
    if (atomic_load(&hits[i]) != times) return 0;
  }
  return 1;
}

static void *pf_thread(void *arg) {
  int *ok = (int *)arg;
  *ok = 1;
  for (int rep = 0; rep < 50; ++rep) {
    int64_t n = 10000 + rep * 37;
    _Atomic int *hits = calloc((size_t)n, sizeof(*hits));
    pf_ctx_t c = {hits, 0};
    tt_parallel_for(n, 100, pf_mark, &c);
    if (!pf_all_once(hits, n, 1)) *ok = 0;
    free(hits);
  }
  return NULL;
}

/* The distinct threads that ran chunks of a call. */
typedef struct {
  pthread_mutex_t mu;
  pthread_t ids[64];
  int n;
} pf_threads_t;

static void pf_note_thread(void *arg, int64_t b, int64_t e) {
  pf_threads_t *t = (pf_threads_t *)arg;
  volatile double x = 0;
  for (int64_t i = b; i < e; ++i) x += (double)i; /* some work per chunk */
  pthread_mutex_lock(&t->mu);
  int seen = 0;
  for (int k = 0; k < t->n; ++k) seen |= pthread_equal(t->ids[k], pthread_self());
  if (!seen && t->n < 64) t->ids[t->n++] = pthread_self();
  pthread_mutex_unlock(&t->mu);
}

static int pf_count_threads(void) {
  pf_threads_t t = {PTHREAD_MUTEX_INITIALIZER, {0}, 0};
  for (int rep = 0; rep < 20; ++rep) tt_parallel_for(1 << 16, 256, pf_note_thread, &t);
  return t.n;
}

/* With no thread waiting for the device a call runs on one thread fewer
 * than the pool has (a core stays free for the thread recording the next
 * step); while one waits it may use them all. */
static void test_parallel_width(void) {
  int all = tt_num_threads();
  CHECK(tt_parallel_width() == (all > 1 ? all - 1 : 1), "width without a waiter");
  CHECK(pf_count_threads() <= (all > 1 ? all - 1 : 1), "threads without a waiter");
  tt_parallel_host_wait_begin();
  tt_parallel_host_wait_begin();
  CHECK(tt_parallel_width() == all, "width with waiters");
  tt_parallel_host_wait_end();
  CHECK(tt_parallel_width() == all, "width with one waiter left");
  tt_parallel_host_wait_end();
  CHECK(tt_parallel_width() == (all > 1 ? all - 1 : 1), "width after the waits");
}

static void test_parallel(void) {
  CHECK(tt_num_threads() >= 1, "num_threads >= 1");
  int64_t n = 100003;
  _Atomic int *hits = calloc((size_t)n, sizeof(*hits));
  pf_ctx_t c = {hits, 0};
  tt_parallel_host_wait_begin(); /* the full width, as when a step is waited for */
  tt_parallel_for(n, 1000, pf_mark, &c);
  CHECK(pf_all_once(hits, n, 1), "every index exactly once");
  CHECK(tt_num_threads() == 1 || atomic_load(&c.calls) > 1, "work was split");
  c.calls = 0;
  tt_parallel_for(n, 1 << 30, pf_mark, &c);
  CHECK(atomic_load(&c.calls) == 1 && pf_all_once(hits, n, 2),
        "n <= grain runs inline in one call");
  tt_parallel_for(0, 1, pf_mark, &c);
  tt_parallel_for(-5, 1, pf_mark, &c);
  CHECK(pf_all_once(hits, n, 2), "empty ranges do nothing");
  free(hits);

  /* tt_parallel_for_items: each item its own call, up to the job word's
   * 65535 chunks; past that, chunks of several items still cover all. */
  hits = calloc(43, sizeof(*hits));
  pf_ctx_t it = {hits, 0};
  tt_parallel_for_items(43, pf_mark, &it);
  CHECK(pf_all_once(hits, 43, 1) && (tt_num_threads() == 1 || atomic_load(&it.calls) == 43),
        "parallel_for_items: one call an item");
  free(hits);
  hits = calloc(200000, sizeof(*hits));
  pf_ctx_t big = {hits, 0};
  tt_parallel_for_items(200000, pf_mark, &big);
  CHECK(pf_all_once(hits, 200000, 1) && atomic_load(&big.calls) <= 0xffff,
        "parallel_for_items past the chunk limit");
  free(hits);

  /* Nested calls run inline and still cover everything. */
  hits = calloc(64 * 100, sizeof(*hits));
  pf_ctx_t outer = {hits, 0};
  tt_parallel_for(64, 1, pf_nested, &outer);
  CHECK(pf_all_once(hits, 64 * 100, 1), "nested parallel_for");
  free(hits);

  /* Several threads calling at once. */
  pthread_t th[4];
  int ok[4];
  for (int i = 0; i < 4; ++i) pthread_create(&th[i], NULL, pf_thread, &ok[i]);
  for (int i = 0; i < 4; ++i) pthread_join(th[i], NULL);
  CHECK(ok[0] && ok[1] && ok[2] && ok[3], "concurrent callers");

  /* Inside held bursts (nested, and from several threads at once, as
   * concurrent device executions take them) every call still covers its
   * range exactly once, with pauses between calls longer than a worker's
   * spin; after the holds close the pool still works. */
  tt_parallel_hold_begin();
  tt_parallel_hold_begin();
  for (int i = 0; i < 4; ++i) pthread_create(&th[i], NULL, pf_thread, &ok[i]);
  for (int rep = 0; rep < 20; ++rep) {
    hits = calloc((size_t)n, sizeof(*hits));
    pf_ctx_t h = {hits, 0};
    tt_parallel_for(n, 1000, pf_mark, &h);
    CHECK(pf_all_once(hits, n, 1), "held: every index exactly once");
    free(hits);
    if (rep % 5 == 0) usleep(3000);
  }
  for (int i = 0; i < 4; ++i) pthread_join(th[i], NULL);
  CHECK(ok[0] && ok[1] && ok[2] && ok[3], "held: concurrent callers");
  tt_parallel_hold_end();
  tt_parallel_hold_end();
  hits = calloc((size_t)n, sizeof(*hits));
  pf_ctx_t after = {hits, 0};
  usleep(3000);
  tt_parallel_for(n, 1000, pf_mark, &after);
  CHECK(pf_all_once(hits, n, 1), "after the holds: every index exactly once");
  free(hits);
  tt_parallel_host_wait_end();
}

/* ---- unary ---------------------------------------------------------------- */

static double ref_erfinv(double y) {
  double lo = -6, hi = 6;
  for (int i = 0; i < 200; ++i) {
    double mid = 0.5 * (lo + hi);
    if (erf(mid) < y) lo = mid;
    else hi = mid;
  }
  return 0.5 * (lo + hi);
}

static double ref_digamma(double x) {
  double h = 1e-5;
  return (lgamma(x + h) - lgamma(x - h)) / (2 * h);
}

static double ref_unary(tt_unary_op_t op, double x, double a, double b) {
  switch (op) {
    case TT_UN_NEG: return -x;
    case TT_UN_ABS: return fabs(x);
    case TT_UN_EXP: return exp(x);
    case TT_UN_LOG: return log(x);
    case TT_UN_LOG1P: return log1p(x);
    case TT_UN_EXPM1: return expm1(x);
    case TT_UN_SQRT: return sqrt(x);
    case TT_UN_RSQRT: return 1 / sqrt(x);
    case TT_UN_SIN: return sin(x);
    case TT_UN_COS: return cos(x);
    case TT_UN_TAN: return tan(x);
    case TT_UN_TANH: return tanh(x);
    case TT_UN_SIGMOID: return 1 / (1 + exp(-x));
    case TT_UN_RELU: return x > 0 ? x : 0;
    case TT_UN_GELU_ERF: return 0.5 * x * (1 + erf(x / sqrt(2.0)));
    case TT_UN_GELU_TANH:
      return 0.5 * x * (1 + tanh(sqrt(2 / 3.14159265358979323846) * (x + 0.044715 * x * x * x)));
    case TT_UN_SILU: return x / (1 + exp(-x));
    case TT_UN_ERF: return erf(x);
    case TT_UN_FLOOR: return floor(x);
    case TT_UN_CEIL: return ceil(x);
    case TT_UN_ROUND: return nearbyint(x);
    case TT_UN_TRUNC: return trunc(x);
    case TT_UN_SIGN: return x > 0 ? 1 : (x < 0 ? -1 : 0);
    case TT_UN_RECIPROCAL: return 1 / x;
    case TT_UN_LOGICAL_NOT: return x == 0;
    case TT_UN_ISNAN: return x != x;
    case TT_UN_BITWISE_NOT: return (double)~(int64_t)x;
    case TT_UN_ASIN: return asin(x);
    case TT_UN_ACOS: return acos(x);
    case TT_UN_ATAN: return atan(x);
    case TT_UN_SINH: return sinh(x);
    case TT_UN_COSH: return cosh(x);
    case TT_UN_ASINH: return asinh(x);
    case TT_UN_ACOSH: return acosh(x);
    case TT_UN_ATANH: return atanh(x);
    case TT_UN_LOG2: return log2(x);
    case TT_UN_LOG10: return log10(x);
    case TT_UN_EXP2: return exp2(x);
    case TT_UN_ERFINV: return ref_erfinv(x);
    case TT_UN_SQUARE: return x * x;
    case TT_UN_LEAKY_RELU: return x > 0 ? x : a * x;
    case TT_UN_ELU: return x > 0 ? x : a * (exp(x) - 1);
    case TT_UN_HARDTANH: return x < a ? a : (x > b ? b : x);
    case TT_UN_SOFTPLUS: return a * x > b ? x : log(1 + exp(a * x)) / a;
    case TT_UN_HARDSIGMOID: return fmin(fmax(x + 3, 0), 6) / 6;
    case TT_UN_HARDSWISH: return x * fmin(fmax(x + 3, 0), 6) / 6;
    case TT_UN_MISH: return x * tanh(log(1 + exp(x)));
    case TT_UN_LGAMMA: return lgamma(x);
    case TT_UN_DIGAMMA: return ref_digamma(x);
    default: return NAN;
  }
}

static void unary_domain(tt_unary_op_t op, double *lo, double *hi) {
  *lo = -5;
  *hi = 5;
  switch (op) {
    case TT_UN_LOG: case TT_UN_SQRT: case TT_UN_RSQRT: case TT_UN_LOG2:
    case TT_UN_LOG10: case TT_UN_LGAMMA: case TT_UN_DIGAMMA:
      *lo = 0.1; *hi = 10; break;
    case TT_UN_LOG1P: *lo = -0.9; *hi = 5; break;
    case TT_UN_ASIN: case TT_UN_ACOS: case TT_UN_ATANH: case TT_UN_ERFINV:
      *lo = -0.99; *hi = 0.99; break;
    case TT_UN_ACOSH: *lo = 1.01; *hi = 10; break;
    case TT_UN_TAN: *lo = -1.4; *hi = 1.4; break;
    case TT_UN_RECIPROCAL: *lo = 0.2; *hi = 5; break;
    case TT_UN_SOFTPLUS: *lo = -15; *hi = 15; break;
    default: break;
  }
}

static int unary_int_ok(tt_unary_op_t op) {
  switch (op) {
    case TT_UN_NEG: case TT_UN_ABS: case TT_UN_RELU: case TT_UN_FLOOR:
    case TT_UN_CEIL: case TT_UN_ROUND: case TT_UN_TRUNC: case TT_UN_SIGN:
    case TT_UN_LOGICAL_NOT: case TT_UN_ISNAN: case TT_UN_BITWISE_NOT:
    case TT_UN_SQUARE: case TT_UN_HARDTANH:
      return 1;
    default:
      return 0;
  }
}

static void test_unary(void) {
  const double alpha = 0.7, beta = 2.5; /* softplus: beta 0.7, threshold 2.5 */
  const int64_t sizes[] = {7, 3000, 70001};
  for (int op = 0; op < TT_UN_COUNT; ++op) {
    int out_bool = op == TT_UN_LOGICAL_NOT || op == TT_UN_ISNAN;
    double a = alpha, b = beta;
    if (op == TT_UN_HARDTANH) { a = -1.5; b = 2.5; }
    for (int di = 0; di < COUNT_OF(kAllDtypes); ++di) {
      tt_dtype_t dt = kAllDtypes[di];
      int is_float = tt_dtype_is_float(dt);
      if (op == TT_UN_BITWISE_NOT && is_float) continue;
      if (!is_float && !unary_int_ok((tt_unary_op_t)op)) {
        int64_t d1[1] = {4};
        tensor_t x = tensor_new(dt, 1, d1), y = tensor_new(dt, 1, d1);
        tensor_fill_random(&x, 0, 3);
        CHECK_CODE(tt_kernel_unary((tt_unary_op_t)op, &x.v, a, b, &y.v),
                   TT_TYPE_ERROR, "float-only unary on int");
        tensor_free(&x);
        tensor_free(&y);
        continue;
      }
      if (dt == TT_BOOL && (op == TT_UN_NEG || op == TT_UN_ABS)) continue;
      for (int si = 0; si < 3; ++si) {
        if (si == 2 && dt != TT_F32 && dt != TT_I64) continue;
        int64_t dims[2] = {sizes[si] > 7 ? 10 : 1, sizes[si] > 7 ? sizes[si] / 10 : 7};
        tensor_t x = tensor_new(dt, 2, dims);
        tensor_t y = tensor_like(&x, out_bool ? TT_BOOL : dt);
        double lo, hi;
        unary_domain((tt_unary_op_t)op, &lo, &hi);
        if (!is_float) { lo = dt == TT_U8 ? 0 : -100; hi = 100; }
        tensor_fill_random(&x, lo, hi);
        if (op == TT_UN_ROUND && is_float) {
          for (int64_t i = 0; i < x.n && i < 6; ++i) tset(&x, i, -2.5 + i); /* ties */
        }
        if (!CHECK_OK(tt_kernel_unary((tt_unary_op_t)op, &x.v, a, b, &y.v), "unary")) {
          tensor_free(&x);
          tensor_free(&y);
          continue;
        }
        double *ref = malloc((size_t)x.n * sizeof(double));
        for (int64_t i = 0; i < x.n; ++i) {
          double v = tget(&x, i), r;
          if (is_float) {
            r = ref_unary((tt_unary_op_t)op, v, a, b);
          } else {
            int64_t iv = tgeti(&x, i), ir = iv;
            switch (op) {
              case TT_UN_NEG: ir = -iv; break;
              case TT_UN_ABS: ir = iv < 0 ? -iv : iv; break;
              case TT_UN_RELU: ir = iv < 0 ? 0 : iv; break;
              case TT_UN_SIGN: ir = (iv > 0) - (iv < 0); break;
              case TT_UN_LOGICAL_NOT: ir = iv == 0; break;
              case TT_UN_ISNAN: ir = 0; break;
              case TT_UN_BITWISE_NOT: ir = dt == TT_BOOL ? !iv : ~iv; break;
              case TT_UN_SQUARE: ir = iv * iv; break;
              case TT_UN_HARDTANH: ir = iv < -1 ? -1 : (iv > 2 ? 2 : iv); break;
              default: break;
            }
            r = (double)ir;
          }
          ref[i] = round_to(y.v.dtype, r);
        }
        char what[64];
        snprintf(what, sizeof what, "unary op %d n=%lld", op, (long long)x.n);
        double rtol = dtype_rtol(y.v.dtype);
        double atol = dt == TT_F32 ? 1e-5 : (dt == TT_F64 ? 1e-9 : 1e-3);
        if (op == TT_UN_DIGAMMA && dt == TT_F64) atol = 1e-7; /* reference */
        if (!is_float || out_bool) atol = rtol = 0;
        COMPARE(what, &y, ref, atol, rtol);
        free(ref);
        tensor_free(&x);
        tensor_free(&y);
      }
    }
  }

  /* Special values. */
  int64_t d6[1] = {6};
  tensor_t x = tensor_new(TT_F32, 1, d6), y = tensor_like(&x, TT_F32);
  float sv[6] = {NAN, -0.0f, INFINITY, -INFINITY, 0.5f, -1.5f};
  memcpy(x.v.data, sv, sizeof sv);
  float *yo = (float *)y.v.data;
  CHECK_OK(tt_kernel_unary(TT_UN_RELU, &x.v, 0, 0, &y.v), "relu");
  CHECK(isnan(yo[0]) && yo[2] == INFINITY && yo[3] == 0 && yo[5] == 0, "relu specials");
  CHECK_OK(tt_kernel_unary(TT_UN_SIGN, &x.v, 0, 0, &y.v), "sign");
  CHECK(yo[0] == 0 && yo[2] == 1 && yo[3] == -1 && yo[5] == -1, "sign of NaN is 0");
  CHECK_OK(tt_kernel_unary(TT_UN_ROUND, &x.v, 0, 0, &y.v), "round");
  CHECK(yo[4] == 0 && yo[5] == -2, "round half to even");
  CHECK_OK(tt_kernel_unary(TT_UN_EXP, &x.v, 0, 0, &y.v), "exp");
  CHECK(isnan(yo[0]) && yo[1] == 1 && yo[2] == INFINITY && yo[3] == 0, "exp specials");
  CHECK_OK(tt_kernel_unary(TT_UN_SIGMOID, &x.v, 0, 0, &y.v), "sigmoid");
  CHECK(isnan(yo[0]) && yo[2] == 1 && yo[3] == 0, "sigmoid specials");
  CHECK_OK(tt_kernel_unary(TT_UN_HARDTANH, &x.v, -1, 1, &y.v), "hardtanh");
  CHECK(isnan(yo[0]) && yo[2] == 1 && yo[3] == -1 && yo[5] == -1, "hardtanh NaN");
  float big[3] = {100.0f, -104.0f, 88.5f};
  memcpy(x.v.data, big, sizeof big);
  CHECK_OK(tt_kernel_unary(TT_UN_EXP, &x.v, 0, 0, &y.v), "exp range");
  CHECK(yo[0] == INFINITY && yo[1] == 0 && fabs(yo[2] / exp(88.5) - 1) < 1e-6,
        "exp overflow/underflow: %g %g %g", yo[0], yo[1], yo[2]);
  tensor_t yb = tensor_like(&x, TT_BOOL);
  CHECK_CODE(tt_kernel_unary(TT_UN_ISNAN, &x.v, 0, 0, &y.v), TT_TYPE_ERROR,
             "isnan needs a bool out");
  CHECK_CODE(tt_kernel_unary(TT_UN_EXP, &x.v, 0, 0, &yb.v), TT_TYPE_ERROR,
             "exp with bool out");
  CHECK_CODE(tt_kernel_unary(TT_UN_BITWISE_NOT, &x.v, 0, 0, &y.v), TT_TYPE_ERROR,
             "bitwise_not on float");
  CHECK_CODE(tt_kernel_unary(TT_UN_COUNT, &x.v, 0, 0, &y.v), TT_INVALID_ARGUMENT,
             "unknown unary op");
  tensor_t y5 = tensor_new(TT_F32, 1, (int64_t[]){5});
  CHECK_CODE(tt_kernel_unary(TT_UN_NEG, &x.v, 0, 0, &y5.v), TT_INVALID_ARGUMENT,
             "unary shape mismatch");
  tensor_free(&y5);
  tensor_free(&yb);
  tensor_free(&x);
  tensor_free(&y);

  /* Integer wrap: -INT8_MIN and abs(INT64_MIN) wrap like two's complement. */
  tensor_t xi = tensor_new(TT_I8, 1, (int64_t[]){2}), yi = tensor_like(&xi, TT_I8);
  ((int8_t *)xi.v.data)[0] = -128;
  ((int8_t *)xi.v.data)[1] = 5;
  CHECK_OK(tt_kernel_unary(TT_UN_NEG, &xi.v, 0, 0, &yi.v), "neg i8");
  CHECK(((int8_t *)yi.v.data)[0] == -128 && ((int8_t *)yi.v.data)[1] == -5, "neg i8 wraps");
  tensor_free(&xi);
  tensor_free(&yi);
  tensor_t xu = tensor_new(TT_U8, 1, (int64_t[]){1}), yu = tensor_like(&xu, TT_U8);
  ((uint8_t *)xu.v.data)[0] = 1;
  CHECK_OK(tt_kernel_unary(TT_UN_NEG, &xu.v, 0, 0, &yu.v), "neg u8");
  CHECK(((uint8_t *)yu.v.data)[0] == 255, "neg u8 wraps to 255");
  tensor_free(&xu);
  tensor_free(&yu);
}

/* ---- binary ---------------------------------------------------------------- */

static int bin_out_bool(int op) {
  return (op >= TT_BIN_EQ && op <= TT_BIN_GE) ||
         (op >= TT_BIN_LOGICAL_AND && op <= TT_BIN_LOGICAL_XOR);
}

static int bin_int_only(int op) {
  return (op >= TT_BIN_BITWISE_AND && op <= TT_BIN_BITWISE_XOR) ||
         op == TT_BIN_SHIFT_LEFT || op == TT_BIN_SHIFT_RIGHT;
}

static int bin_float_only(int op) {
  return op == TT_BIN_DIV || op == TT_BIN_ATAN2 || op == TT_BIN_HYPOT;
}

static double ref_binary_f(int op, double x, double y) {
  switch (op) {
    case TT_BIN_ADD: return x + y;
    case TT_BIN_SUB: return x - y;
    case TT_BIN_MUL: return x * y;
    case TT_BIN_DIV: return x / y;
    case TT_BIN_POW: return pow(x, y);
    case TT_BIN_MAX: return fmax(x, y);
    case TT_BIN_MIN: return fmin(x, y);
    case TT_BIN_EQ: return x == y;
    case TT_BIN_NE: return x != y;
    case TT_BIN_LT: return x < y;
    case TT_BIN_LE: return x <= y;
    case TT_BIN_GT: return x > y;
    case TT_BIN_GE: return x >= y;
    case TT_BIN_LOGICAL_AND: return x != 0 && y != 0;
    case TT_BIN_LOGICAL_OR: return x != 0 || y != 0;
    case TT_BIN_LOGICAL_XOR: return (x != 0) != (y != 0);
    case TT_BIN_ATAN2: return atan2(x, y);
    case TT_BIN_REMAINDER: return x - y * floor(x / y);
    case TT_BIN_FMOD: return fmod(x, y);
    case TT_BIN_FLOOR_DIV: return floor(x / y);
    case TT_BIN_HYPOT: return hypot(x, y);
    case TT_BIN_MAXIMUM_NAN: return (isnan(x) || isnan(y)) ? NAN : fmax(x, y);
    case TT_BIN_MINIMUM_NAN: return (isnan(x) || isnan(y)) ? NAN : fmin(x, y);
    default: return NAN;
  }
}

static int64_t ref_binary_i(int op, int64_t x, int64_t y) {
  switch (op) {
    case TT_BIN_ADD: return x + y;
    case TT_BIN_SUB: return x - y;
    case TT_BIN_MUL: return x * y;
    case TT_BIN_POW: {
      if (y < 0) return x == 1 ? 1 : (x == -1 ? (y % 2 ? -1 : 1) : 0);
      int64_t r = 1;
      for (int64_t i = 0; i < y; ++i) r *= x;
      return r;
    }
    case TT_BIN_MAX: case TT_BIN_MAXIMUM_NAN: return x > y ? x : y;
    case TT_BIN_MIN: case TT_BIN_MINIMUM_NAN: return x < y ? x : y;
    case TT_BIN_EQ: return x == y;
    case TT_BIN_NE: return x != y;
    case TT_BIN_LT: return x < y;
    case TT_BIN_LE: return x <= y;
    case TT_BIN_GT: return x > y;
    case TT_BIN_GE: return x >= y;
    case TT_BIN_LOGICAL_AND: return x && y;
    case TT_BIN_LOGICAL_OR: return x || y;
    case TT_BIN_LOGICAL_XOR: return !x != !y;
    case TT_BIN_BITWISE_AND: return x & y;
    case TT_BIN_BITWISE_OR: return x | y;
    case TT_BIN_BITWISE_XOR: return x ^ y;
    case TT_BIN_REMAINDER:
      return y == 0 ? 0 : x - y * (int64_t)floor((double)x / (double)y);
    case TT_BIN_FMOD: return y == 0 ? 0 : x % y;
    case TT_BIN_FLOOR_DIV: return y == 0 ? 0 : (int64_t)floor((double)x / (double)y);
    case TT_BIN_SHIFT_LEFT: return (y < 0 || y >= 64) ? 0 : x * ((int64_t)1 << y);
    case TT_BIN_SHIFT_RIGHT: return (y < 0 || y >= 64) ? (x < 0 ? -1 : 0) : x >> y;
    default: return 0;
  }
}

/* Flat index into an input of shape `in` for output flat index i. */
static int64_t bcast_index(const tt_shape_t *out, const tt_shape_t *in, int64_t i) {
  int64_t idx = 0, stride = 1;
  for (int d = out->rank - 1; d >= 0; --d) {
    int64_t k = i % out->dims[d];
    i /= out->dims[d];
    int di = d - (out->rank - in->rank);
    if (di < 0) continue;
    if (in->dims[di] != 1) idx += k * stride;
    stride *= in->dims[di];
  }
  return idx;
}

typedef struct {
  int ro, ra, rb;
  int64_t o[4], a[4], b[4];
} bshape_t;

static void test_binary(void) {
  const bshape_t shapes[] = {
      {2, 2, 2, {4, 5}, {4, 5}, {4, 5}},
      {2, 2, 0, {4, 5}, {4, 5}, {0}},
      {2, 0, 2, {4, 5}, {0}, {4, 5}},
      {3, 2, 3, {3, 4, 5}, {4, 1}, {3, 1, 5}},
      {2, 1, 2, {300, 257}, {257}, {300, 257}},
      {1, 1, 1, {70000}, {70000}, {70000}},
      {2, 2, 2, {600, 130}, {600, 1}, {1, 130}},
      {0, 0, 0, {0}, {0}, {0}},
      {2, 2, 2, {0, 3}, {0, 3}, {1, 3}},
      /* batch norm's short inner runs: gathered blocks, several of them,
       * split over threads, a flat operand read in place */
      {4, 4, 4, {16, 700, 2, 2}, {16, 700, 2, 2}, {1, 700, 1, 1}},
      {4, 4, 4, {3, 50, 3, 3}, {1, 50, 1, 1}, {3, 50, 3, 3}},
      {3, 3, 3, {70, 30, 3}, {70, 1, 3}, {1, 30, 1}},
  };
  for (int op = 0; op < TT_BIN_COUNT; ++op) {
    for (int di = 0; di < COUNT_OF(kAllDtypes); ++di) {
      tt_dtype_t dt = kAllDtypes[di];
      int is_float = tt_dtype_is_float(dt);
      tt_dtype_t odt = bin_out_bool(op) ? TT_BOOL : dt;
      if ((is_float && bin_int_only(op)) || (!is_float && bin_float_only(op))) {
        tensor_t a = tensor_new(dt, 1, (int64_t[]){3});
        tensor_t o = tensor_like(&a, odt);
        tensor_fill_random(&a, 1, 3);
        CHECK_CODE(tt_kernel_binary((tt_binary_op_t)op, &a.v, &a.v, &o.v),
                   TT_TYPE_ERROR, "binary op not for this dtype");
        tensor_free(&a);
        tensor_free(&o);
        continue;
      }
      for (int si = 0; si < COUNT_OF(shapes); ++si) {
        const bshape_t *s = &shapes[si];
        int64_t on = 1;
        for (int d = 0; d < s->ro; ++d) on *= s->o[d];
        if (on > 5000 && dt != TT_F32 && dt != TT_I64 && dt != TT_F16) continue;
        tensor_t a = tensor_new(dt, s->ra, s->a), b = tensor_new(dt, s->rb, s->b);
        tensor_t o = tensor_new(odt, s->ro, s->o);
        double lo = -4, hi = 4;
        if (!is_float) { lo = dt == TT_U8 ? 0 : -50; hi = 50; }
        if (op == TT_BIN_POW) { lo = is_float ? 0.1 : 0; hi = is_float ? 3 : 5; }
        if (op == TT_BIN_SHIFT_LEFT || op == TT_BIN_SHIFT_RIGHT) { lo = 0; hi = 5; }
        tensor_fill_random(&a, lo, hi);
        tensor_fill_random(&b, op == TT_BIN_POW && !is_float ? 0 : lo, hi);
        if (op == TT_BIN_SHIFT_LEFT || op == TT_BIN_SHIFT_RIGHT) tensor_fill_random(&a, -50, 50);
        if (dt == TT_U8 && (op == TT_BIN_SHIFT_LEFT || op == TT_BIN_SHIFT_RIGHT)) tensor_fill_random(&a, 0, 100);
        /* Sprinkle equal values and NaNs for comparisons / max. */
        if (a.n > 2 && b.n == a.n && op != TT_BIN_SHIFT_LEFT && op != TT_BIN_SHIFT_RIGHT)
          tset(&b, 1, tget(&a, 1)); /* (a shift amount stays in [0, 5]) */
        if (is_float && a.n > 3 && (op == TT_BIN_MAX || op == TT_BIN_MAXIMUM_NAN ||
                                    op == TT_BIN_MIN || op == TT_BIN_MINIMUM_NAN)) {
          tset(&a, 2, NAN);
        }
        if (!CHECK_OK(tt_kernel_binary((tt_binary_op_t)op, &a.v, &b.v, &o.v), "binary")) {
          tensor_free(&a); tensor_free(&b); tensor_free(&o);
          continue;
        }
        double *ref = malloc((size_t)(o.n > 0 ? o.n : 1) * sizeof(double));
        for (int64_t i = 0; i < o.n; ++i) {
          int64_t ia = bcast_index(&o.v.shape, &a.v.shape, i);
          int64_t ib = bcast_index(&o.v.shape, &b.v.shape, i);
          double r;
          if (is_float) {
            r = ref_binary_f(op, tget(&a, ia), tget(&b, ib));
          } else {
            r = (double)ref_binary_i(op, tgeti(&a, ia), tgeti(&b, ib));
          }
          ref[i] = round_to(odt, r);
        }
        char what[64];
        snprintf(what, sizeof what, "binary op %d shape #%d", op, si);
        double rtol = dtype_rtol(odt), atol = is_float ? rtol * 1e-2 : 0;
        if (op == TT_BIN_REMAINDER || op == TT_BIN_FMOD || op == TT_BIN_FLOOR_DIV) {
          atol = is_float ? rtol * 10 : 0; /* formula differences in rounding */
        }
        COMPARE(what, &o, ref, atol, rtol);
        free(ref);
        tensor_free(&a);
        tensor_free(&b);
        tensor_free(&o);
      }
    }
  }

  /* PyTorch sign rules and edge values. */
  float fa[6] = {-7, 7, -7, 7, 1, -0.0f}, fb[6] = {3, -3, -3, 3, 0, 3};
  tensor_t a = tensor_new(TT_F32, 1, (int64_t[]){6}), b = tensor_like(&a, TT_F32);
  tensor_t o = tensor_like(&a, TT_F32);
  memcpy(a.v.data, fa, sizeof fa);
  memcpy(b.v.data, fb, sizeof fb);
  float *of = (float *)o.v.data;
  CHECK_OK(tt_kernel_binary(TT_BIN_REMAINDER, &a.v, &b.v, &o.v), "remainder");
  CHECK(of[0] == 2 && of[1] == -2 && of[2] == -1 && of[3] == 1, "remainder signs");
  CHECK_OK(tt_kernel_binary(TT_BIN_FLOOR_DIV, &a.v, &b.v, &o.v), "floor_div");
  CHECK(of[0] == -3 && of[1] == -3 && of[2] == 2 && of[3] == 2 &&
            of[4] == INFINITY && of[5] == 0 && signbit(of[5]),
        "floor_div values: %g %g %g %g %g %g", of[0], of[1], of[2], of[3], of[4], of[5]);
  fa[0] = NAN;
  memcpy(a.v.data, fa, sizeof fa);
  CHECK_OK(tt_kernel_binary(TT_BIN_MAX, &a.v, &b.v, &o.v), "fmax");
  CHECK(of[0] == 3, "MAX ignores NaN");
  CHECK_OK(tt_kernel_binary(TT_BIN_MAXIMUM_NAN, &a.v, &b.v, &o.v), "maximum");
  CHECK(isnan(of[0]) && of[1] == 7, "MAXIMUM_NAN propagates NaN");
  tensor_free(&a);
  tensor_free(&b);
  tensor_free(&o);

  int64_t ia[5] = {7, -7, INT64_MIN, 5, 1}, ib[5] = {0, 0, -1, -1, 64};
  tensor_t ai = tensor_new(TT_I64, 1, (int64_t[]){5}), bi = tensor_like(&ai, TT_I64);
  tensor_t oi = tensor_like(&ai, TT_I64);
  memcpy(ai.v.data, ia, sizeof ia);
  memcpy(bi.v.data, ib, sizeof ib);
  int64_t *oo = (int64_t *)oi.v.data;
  CHECK_OK(tt_kernel_binary(TT_BIN_FLOOR_DIV, &ai.v, &bi.v, &oi.v), "int floor_div");
  CHECK(oo[0] == 0 && oo[1] == 0 && oo[2] == INT64_MIN && oo[3] == -5,
        "int division by zero gives 0, INT64_MIN / -1 wraps");
  CHECK_OK(tt_kernel_binary(TT_BIN_REMAINDER, &ai.v, &bi.v, &oi.v), "int remainder");
  CHECK(oo[0] == 0 && oo[2] == 0 && oo[3] == 0, "int remainder by 0 / -1");
  CHECK_OK(tt_kernel_binary(TT_BIN_SHIFT_LEFT, &ai.v, &bi.v, &oi.v), "shift");
  CHECK(oo[4] == 0 && oo[3] == 0, "shift by 64 or negative gives 0");
  tensor_free(&ai);
  tensor_free(&bi);
  tensor_free(&oi);

  /* int32 shifts past the width: 1 << 33 == 0, -8 >> 40 == -1 (torch). */
  int32_t sa[2] = {1, -8}, sb[2] = {33, 40};
  tensor_t a32 = tensor_new(TT_I32, 1, (int64_t[]){2}), b32 = tensor_like(&a32, TT_I32);
  tensor_t o32 = tensor_like(&a32, TT_I32);
  memcpy(a32.v.data, sa, sizeof sa);
  memcpy(b32.v.data, sb, sizeof sb);
  CHECK_OK(tt_kernel_binary(TT_BIN_SHIFT_LEFT, &a32.v, &b32.v, &o32.v), "shl32");
  CHECK(((int32_t *)o32.v.data)[0] == 0, "i32 1 << 33 == 0");
  CHECK_OK(tt_kernel_binary(TT_BIN_SHIFT_RIGHT, &a32.v, &b32.v, &o32.v), "shr32");
  CHECK(((int32_t *)o32.v.data)[1] == -1, "i32 -8 >> 40 == -1");

  /* Errors. */
  tensor_t f3 = tensor_new(TT_F32, 1, (int64_t[]){3});
  tensor_t f4 = tensor_new(TT_F32, 1, (int64_t[]){4});
  CHECK_CODE(tt_kernel_binary(TT_BIN_ADD, &a32.v, &f3.v, &o32.v), TT_TYPE_ERROR,
             "mixed dtypes");
  CHECK_CODE(tt_kernel_binary(TT_BIN_ADD, &f3.v, &f4.v, &f4.v), TT_INVALID_ARGUMENT,
             "non-broadcastable shapes");
  CHECK_CODE(tt_kernel_binary(TT_BIN_LT, &f3.v, &f3.v, &f3.v), TT_TYPE_ERROR,
             "comparison needs bool out");
  tt_view_t nul = f3.v;
  nul.data = NULL;
  CHECK_CODE(tt_kernel_binary(TT_BIN_ADD, &nul, &f3.v, &f3.v), TT_INVALID_ARGUMENT,
             "NULL data");
  tensor_free(&f3);
  tensor_free(&f4);
  tensor_free(&a32);
  tensor_free(&b32);
  tensor_free(&o32);
}

/* ---- where / convert / broadcast / fill / iota ---------------------------- */

static void test_where(void) {
  for (int di = 0; di < COUNT_OF(kAllDtypes); ++di) {
    tt_dtype_t dt = kAllDtypes[di];
    tensor_t c = tensor_new(TT_BOOL, 2, (int64_t[]){50, 1});
    tensor_t a = tensor_new(dt, 1, (int64_t[]){40});
    tensor_t b = tensor_new(dt, 0, NULL);
    tensor_t o = tensor_new(dt, 2, (int64_t[]){50, 40});
    tensor_fill_random(&c, 0, 1);
    tensor_fill_random(&a, 0, 100);
    tensor_fill_random(&b, 0, 100);
    CHECK_OK(tt_kernel_where(&c.v, &a.v, &b.v, &o.v), "where");
    double *ref = malloc((size_t)o.n * sizeof(double));
    for (int64_t i = 0; i < o.n; ++i) ref[i] = tgeti(&c, i / 40) ? tget(&a, i % 40) : tget(&b, 0);
    COMPARE("where", &o, ref, 0, 0);
    free(ref);
    tensor_free(&c); tensor_free(&a); tensor_free(&b); tensor_free(&o);
  }
  tensor_t c = tensor_new(TT_BOOL, 1, (int64_t[]){3});
  tensor_t a = tensor_new(TT_F32, 1, (int64_t[]){3}), b = tensor_new(TT_I32, 1, (int64_t[]){3});
  CHECK_CODE(tt_kernel_where(&c.v, &a.v, &b.v, &a.v), TT_TYPE_ERROR, "where dtypes");
  tensor_free(&c); tensor_free(&a); tensor_free(&b);
}

static void test_convert(void) {
  /* Special values through every pair, against the documented rules. */
  const double vals[] = {0, -0.0, 1, -1, 2.7, -2.7, 127.5, 300.7, -129, 65504,
                         1e10, -3e10, NAN, INFINITY, 0.1};
  int nv = COUNT_OF(vals);
  for (int si = 0; si < COUNT_OF(kAllDtypes); ++si) {
    for (int di = 0; di < COUNT_OF(kAllDtypes); ++di) {
      tt_dtype_t sd = kAllDtypes[si], dd = kAllDtypes[di];
      tensor_t x = tensor_new(sd, 1, (int64_t[]){nv});
      tensor_t y = tensor_new(dd, 1, (int64_t[]){nv});
      for (int i = 0; i < nv; ++i) tset(&x, i, vals[i]);
      CHECK_OK(tt_kernel_convert(&x.v, &y.v), "convert");
      double ref[32];
      for (int i = 0; i < nv; ++i) {
        double v = tget(&x, i);
        if (!tt_dtype_is_float(sd)) {
          unsigned char buf[8];
          tt_set_i64(buf, dd, 0, tgeti(&x, i)); /* integers wrap */
          ref[i] = tt_get_f64(buf, dd, 0);
        } else if (dd == TT_BOOL) ref[i] = v != 0;
        else if (tt_dtype_is_float(dd)) ref[i] = round_to(dd, v);
        else if (isnan(v) || fabs(v) > 9e18) ref[i] = dd == TT_I64 ? (double)INT64_MIN : round_to(dd, (double)INT32_MIN);
        else if (dd != TT_I64 && fabs(v) >= 2147483648.0) ref[i] = round_to(dd, (double)INT32_MIN);
        else ref[i] = round_to(dd, trunc(v));
      }
      char what[64];
      snprintf(what, sizeof what, "convert %s->%s", tt_dtype_name(sd), tt_dtype_name(dd));
      COMPARE(what, &y, ref, 0, 0);
      tensor_free(&x);
      tensor_free(&y);
    }
  }
  /* i64 -> f32 rounds once (not through double). */
  tensor_t x = tensor_new(TT_I64, 1, (int64_t[]){1}), y = tensor_new(TT_F32, 1, (int64_t[]){1});
  ((int64_t *)x.v.data)[0] = (1LL << 60) + (1LL << 36) + 1;
  CHECK_OK(tt_kernel_convert(&x.v, &y.v), "convert i64->f32");
  CHECK(((float *)y.v.data)[0] == (float)((1LL << 60) + (1LL << 36) + 1), "i64->f32 rounding");
  tensor_t z = tensor_new(TT_F32, 1, (int64_t[]){2});
  CHECK_CODE(tt_kernel_convert(&x.v, &z.v), TT_INVALID_ARGUMENT, "convert numel mismatch");
  tensor_free(&x); tensor_free(&y); tensor_free(&z);
  /* Large same-dtype copy and a large converting copy. */
  tensor_t big = tensor_new(TT_F32, 1, (int64_t[]){300000});
  tensor_t big2 = tensor_like(&big, TT_F32), bigh = tensor_like(&big, TT_BF16);
  tensor_fill_random(&big, -10, 10);
  CHECK_OK(tt_kernel_convert(&big.v, &big2.v), "copy");
  CHECK(memcmp(big.v.data, big2.v.data, (size_t)big.n * 4) == 0, "same-dtype copy");
  CHECK_OK(tt_kernel_convert(&big.v, &bigh.v), "to bf16");
  int bad = 0;
  for (int64_t i = 0; i < big.n; ++i) {
    if (((uint16_t *)bigh.v.data)[i] != tt_f32_to_bf16(((float *)big.v.data)[i])) ++bad;
  }
  CHECK(bad == 0, "f32->bf16 convert: %d wrong", bad);
  tensor_free(&big); tensor_free(&big2); tensor_free(&bigh);
}

static void test_broadcast_fill_iota(void) {
  for (int di = 0; di < COUNT_OF(kAllDtypes); ++di) {
    tt_dtype_t dt = kAllDtypes[di];
    tensor_t x = tensor_new(dt, 3, (int64_t[]){3, 1, 5});
    tensor_t o = tensor_new(dt, 4, (int64_t[]){2, 3, 4, 5});
    tensor_fill_random(&x, 0, 100);
    CHECK_OK(tt_kernel_broadcast(&x.v, &o.v), "broadcast");
    double ref[120];
    for (int64_t i = 0; i < o.n; ++i) ref[i] = tget(&x, bcast_index(&o.v.shape, &x.v.shape, i));
    COMPARE("broadcast", &o, ref, 0, 0);
    CHECK_OK(tt_kernel_fill(3.75, &o.v), "fill");
    for (int64_t i = 0; i < o.n; ++i) ref[i] = round_to(dt, 3.75);
    COMPARE("fill", &o, ref, 0, 0);
    tensor_t r = tensor_new(dt, 1, (int64_t[]){50});
    CHECK_OK(tt_kernel_iota(2, 0.5, &r.v), "iota");
    for (int64_t i = 0; i < r.n; ++i) ref[i] = round_to(dt, 2 + 0.5 * (double)i);
    COMPARE("iota", &r, ref, 0, 0);
    tensor_free(&x); tensor_free(&o); tensor_free(&r);
  }
  tensor_t x = tensor_new(TT_F32, 1, (int64_t[]){3}), o = tensor_new(TT_F32, 1, (int64_t[]){4});
  CHECK_CODE(tt_kernel_broadcast(&x.v, &o.v), TT_INVALID_ARGUMENT, "bad broadcast");
  tensor_t m = tensor_new(TT_F32, 2, (int64_t[]){2, 2});
  CHECK_CODE(tt_kernel_iota(0, 1, &m.v), TT_INVALID_ARGUMENT, "iota needs 1-D");
  tensor_free(&x); tensor_free(&o); tensor_free(&m);
  tensor_t big = tensor_new(TT_F16, 1, (int64_t[]){500000});
  CHECK_OK(tt_kernel_fill(-2.0, &big.v), "big fill");
  int bad = 0;
  for (int64_t i = 0; i < big.n; ++i) bad += ((uint16_t *)big.v.data)[i] != 0xc000;
  CHECK(bad == 0, "big fill f16");
  tensor_free(&big);
}

/* ---- row max / min (rowminmax.c) -------------------------------------------
 * Every variant against a plain loop: lengths around the 64/32/16/8 blocks,
 * NaN in each position class (main loop, 16-wide loop, tail), infinities. */
static float rowmm_ref(const float *x, int64_t n, int want_max) {
  float r = want_max ? -INFINITY : INFINITY;
  for (int64_t i = 0; i < n; ++i) {
    if (x[i] != x[i]) return NAN;
    r = want_max ? (x[i] > r ? x[i] : r) : (x[i] < r ? x[i] : r);
  }
  return r;
}

static void test_row_minmax(void) {
  float x[203];
  tt_sgemm_isa_t isas[] = {TT_SGEMM_ISA_GENERIC, TT_SGEMM_ISA_AVX2, TT_SGEMM_ISA_AVX512,
                           TT_SGEMM_ISA_AUTO};
  int bad = 0, cases = 0;
  for (int64_t n = 0; n <= 203; n += (n < 70 ? 1 : 19)) {
    for (int64_t at = -1; at < n; at += (n < 8 ? 1 : 7)) {
      for (int kind = 0; kind < 3; ++kind) { /* at: 0 the extreme, 1 NaN, 2 +-inf */
        for (int64_t i = 0; i < n; ++i) x[i] = (float)((i * 37) % 101) - 50.0f;
        for (int want_max = 0; want_max < 2; ++want_max) {
          if (at >= 0) {
            x[at] = kind == 1 ? NAN : kind == 2 ? (want_max ? INFINITY : -INFINITY)
                                                : (want_max ? 1000.0f : -1000.0f);
          }
          float want = rowmm_ref(x, n, want_max);
          for (size_t v = 0; v < sizeof isas / sizeof isas[0]; ++v) {
            float got = tt_row_minmax_f32_isa(x, n, want_max, isas[v]);
            int same = (got != got && want != want) || got == want;
            if (!same && bad++ < 5) {
              fprintf(stderr, "row %s n %lld at %lld kind %d isa %d: %g, want %g\n",
                      want_max ? "max" : "min", (long long)n, (long long)at, kind,
                      (int)isas[v], got, want);
            }
            cases++;
          }
        }
      }
    }
  }
  CHECK(bad == 0, "row min/max variants");
  CHECK(cases > 1000, "row min/max case count");
}

int main(void) {
  test_dtype();
  test_parallel();
  test_parallel_width();
  test_unary();
  test_binary();
  test_where();
  test_convert();
  test_broadcast_fill_iota();
  test_row_minmax();
  return test_summary();
}
