/* The collective layer's reductions (collective_internal.h): blocks of
 * one dtype reduced element by element in its accumulation type. Integer
 * sums and products wrap (computed unsigned: no overflow UB); float max
 * and min propagate NaN; and/or are logical on bool, bitwise on integers. */
#include <stdint.h>
#include <string.h>
#if defined(__SSE2__)
#include <emmintrin.h>
#define TT_COLL_STREAM 1
#else
#define TT_COLL_STREAM 0
#endif

#include "runtime/collective_internal.h"

tt_status_t tt_coll_reduce_supported(const char *op, tt_reduce_op_t reduce, tt_dtype_t dtype) {
  if (reduce != TT_RED_SUM && reduce != TT_RED_PROD && reduce != TT_RED_MIN &&
      reduce != TT_RED_MAX && reduce != TT_RED_ALL && reduce != TT_RED_ANY)
    return tt_status_make(TT_INVALID_ARGUMENT, "%s: unsupported reduction code %d", op,
                          (int)reduce);
  if ((unsigned)dtype >= TT_DTYPE_COUNT)
    return tt_status_make(TT_TYPE_ERROR, "%s: invalid dtype %d", op, (int)dtype);
  if (dtype == TT_C64 && reduce != TT_RED_SUM)
    return tt_status_make(TT_TYPE_ERROR, "%s: complex64 takes only a sum reduction", op);
  if (tt_dtype_is_float(dtype) && (reduce == TT_RED_ALL || reduce == TT_RED_ANY))
    return tt_status_make(TT_TYPE_ERROR, "%s: and/or reductions take bool or integer tensors, "
                          "got %s", op, tt_dtype_name(dtype));
  return NULL;
}

size_t tt_coll_acc_size(tt_dtype_t dtype) {
  return dtype == TT_F16 || dtype == TT_BF16 ? sizeof(float) : tt_dtype_size(dtype);
}

void tt_coll_acc_load(tt_dtype_t dtype, void *acc, const void *x, int64_t k) {
  float *a = acc;
  const uint16_t *h = x;
  if (dtype == TT_F16)
    for (int64_t i = 0; i < k; ++i) a[i] = tt_f16_to_f32(h[i]);
  else if (dtype == TT_BF16)
    for (int64_t i = 0; i < k; ++i) a[i] = tt_bf16_to_f32(h[i]);
  else if (k)
    memcpy(acc, x, (size_t)k * tt_dtype_size(dtype));
}

void tt_coll_acc_store(tt_dtype_t dtype, void *dst, const void *acc, int64_t k) {
  const float *a = acc;
  uint16_t *h = dst;
  if (dtype == TT_F16)
    for (int64_t i = 0; i < k; ++i) h[i] = tt_f32_to_f16(a[i]);
  else if (dtype == TT_BF16)
    for (int64_t i = 0; i < k; ++i) h[i] = tt_f32_to_bf16(a[i]);
  else if (k)
    memcpy(dst, acc, (size_t)k * tt_dtype_size(dtype));
}

/* One loop per reduction, the switch outside it (the loops vectorize).
 * Floats: NaN wins max and min (v != v is v's NaN; a NaN already in acc
 * stays, no comparison with it being true). */
#define TT_COLL_FLOAT_LOOPS(T, LOAD)                                             \
  do {                                                                           \
    T *restrict a = acc;                                                         \
    switch (reduce) {                                                            \
      case TT_RED_SUM:                                                           \
        for (int64_t i = 0; i < k; ++i) a[i] += LOAD;                            \
        break;                                                                   \
      case TT_RED_PROD:                                                          \
        for (int64_t i = 0; i < k; ++i) a[i] *= LOAD;                            \
        break;                                                                   \
      case TT_RED_MAX:                                                           \
        for (int64_t i = 0; i < k; ++i) {                                        \
          T v = LOAD;                                                            \
          a[i] = v > a[i] || v != v ? v : a[i];                                  \
        }                                                                        \
        break;                                                                   \
      default: /* MIN */                                                         \
        for (int64_t i = 0; i < k; ++i) {                                        \
          T v = LOAD;                                                            \
          a[i] = v < a[i] || v != v ? v : a[i];                                  \
        }                                                                        \
        break;                                                                   \
    }                                                                            \
  } while (0)

/* Integers: U is T's unsigned type (wrapping sums and products). */
#define TT_COLL_INT_LOOPS(T, U)                                                     \
  do {                                                                              \
    T *restrict a = acc;                                                            \
    const T *restrict b = x;                                                        \
    switch (reduce) {                                                               \
      case TT_RED_SUM:                                                              \
        for (int64_t i = 0; i < k; ++i) a[i] = (T)((U)a[i] + (U)b[i]);              \
        break;                                                                      \
      case TT_RED_PROD:                                                             \
        for (int64_t i = 0; i < k; ++i) a[i] = (T)((U)a[i] * (U)b[i]);              \
        break;                                                                      \
      case TT_RED_MAX:                                                              \
        for (int64_t i = 0; i < k; ++i) a[i] = b[i] > a[i] ? b[i] : a[i];           \
        break;                                                                      \
      case TT_RED_MIN:                                                              \
        for (int64_t i = 0; i < k; ++i) a[i] = b[i] < a[i] ? b[i] : a[i];           \
        break;                                                                      \
      case TT_RED_ALL:                                                              \
        for (int64_t i = 0; i < k; ++i) a[i] = (T)(a[i] & b[i]);                    \
        break;                                                                      \
      default: /* ANY */                                                            \
        for (int64_t i = 0; i < k; ++i) a[i] = (T)(a[i] | b[i]);                    \
        break;                                                                      \
    }                                                                               \
  } while (0)

void tt_coll_acc_reduce(tt_dtype_t dtype, tt_reduce_op_t reduce, void *acc, const void *x,
                        int64_t k) {
  switch (dtype) {
    case TT_F32:
    case TT_C64: /* sum only: f32 pairs, k counts floats */
      TT_COLL_FLOAT_LOOPS(float, ((const float *restrict)x)[i]);
      break;
    case TT_F64:
      TT_COLL_FLOAT_LOOPS(double, ((const double *restrict)x)[i]);
      break;
    case TT_F16:
      TT_COLL_FLOAT_LOOPS(float, tt_f16_to_f32(((const uint16_t *)x)[i]));
      break;
    case TT_BF16:
      TT_COLL_FLOAT_LOOPS(float, tt_bf16_to_f32(((const uint16_t *)x)[i]));
      break;
    case TT_I8: TT_COLL_INT_LOOPS(int8_t, uint8_t); break;
    case TT_U8: TT_COLL_INT_LOOPS(uint8_t, uint8_t); break;
    case TT_I16: TT_COLL_INT_LOOPS(int16_t, uint16_t); break;
    case TT_I32: TT_COLL_INT_LOOPS(int32_t, uint32_t); break;
    case TT_I64: TT_COLL_INT_LOOPS(int64_t, uint64_t); break;
    default: { /* TT_BOOL: sum and max are or, product and min are and */
      uint8_t *a = acc;
      const uint8_t *b = x;
      int any = reduce == TT_RED_SUM || reduce == TT_RED_MAX || reduce == TT_RED_ANY;
      for (int64_t i = 0; i < k; ++i) a[i] = any ? (a[i] || b[i]) : (a[i] && b[i]);
      break;
    }
  }
}

/* ---- the float32 sum, fused ----
 * Every member's output gets the sum, so member r's slice of the result is
 * written n times: with streaming stores those lines go to memory without
 * being read first (a plain store reads each line into the cache before
 * writing it), which is a third of the all-reduce's memory traffic at
 * sizes past the caches. */

static void tt_coll_f32_store(float *restrict dst, const float *restrict src, int64_t k,
                              int stream) {
#if TT_COLL_STREAM
  if (stream) {
    int64_t i = 0;
    for (; i + 4 <= k; i += 4) _mm_stream_ps(dst + i, _mm_load_ps(src + i));
    for (; i < k; ++i) dst[i] = src[i];
    return;
  }
#endif
  (void)stream;
  memcpy(dst, src, (size_t)k * sizeof(float));
}

void tt_coll_f32_sum_to_all(const float *const *x, float *const *dst, int32_t n, int64_t k,
                            int stream) {
#if TT_COLL_STREAM
  if (stream)
    for (int32_t q = 0; q < n; ++q) stream &= ((uintptr_t)dst[q] & 15) == 0;
#else
  stream = 0;
#endif
  if (n == 2) {
    /* No restrict: in place, d0 is x[0] (or d1 is x[1]), element for element. */
    const float *a = x[0], *b = x[1];
    float *d0 = dst[0], *d1 = dst[1];
    int64_t i = 0;
#if TT_COLL_STREAM
    if (stream) {
      for (; i + 4 <= k; i += 4) {
        __m128 s = _mm_add_ps(_mm_loadu_ps(a + i), _mm_loadu_ps(b + i));
        _mm_stream_ps(d0 + i, s);
        _mm_stream_ps(d1 + i, s);
      }
    }
#endif
    for (; i < k; ++i) {
      float s = a[i] + b[i];
      d0[i] = s;
      d1[i] = s;
    }
    return;
  }
  _Alignas(64) float acc[TT_COLL_BLOCK_BYTES / sizeof(float)];
  for (int64_t b = 0; b < k; b += (int64_t)(sizeof acc / sizeof acc[0])) {
    int64_t m = k - b < (int64_t)(sizeof acc / sizeof acc[0]) ? k - b
                                                              : (int64_t)(sizeof acc / sizeof acc[0]);
    float *restrict s = acc;
    const float *restrict x0 = x[0] + b;
    if (n == 1) {
      memcpy(s, x0, (size_t)m * sizeof(float));
    } else {
      const float *restrict x1 = x[1] + b;
      for (int64_t i = 0; i < m; ++i) s[i] = x0[i] + x1[i];
      for (int32_t q = 2; q < n; ++q) {
        const float *restrict xq = x[q] + b;
        for (int64_t i = 0; i < m; ++i) s[i] += xq[i];
      }
    }
    for (int32_t q = 0; q < n; ++q) tt_coll_f32_store(dst[q] + b, s, m, stream);
  }
}

void tt_coll_stream_fence(void) {
#if TT_COLL_STREAM
  _mm_sfence();
#endif
}
