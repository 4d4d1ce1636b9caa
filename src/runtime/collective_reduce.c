/* The collective layer's reductions (collective_internal.h): blocks of
 * one dtype reduced element by element in its accumulation type. Integer
 * sums and products wrap (computed unsigned: no overflow UB); float max
 * and min propagate NaN; and/or are logical on bool, bitwise on integers. */
#include <string.h>

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
