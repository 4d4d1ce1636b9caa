/* Shared kernel helpers: view checks, dtype conversion on load/store, and
 * the broadcasting iterator (see kernel_util.h). */
#include "kernels/kernel_util.h"

#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>

tt_status_t tt_check_view(const char *op, const char *what,
                          const tt_view_t *v) {
  if (!v) return tt_status_make(TT_INVALID_ARGUMENT, "%s: %s is NULL", op, what);
  if ((unsigned)v->dtype >= TT_DTYPE_COUNT) {
    return tt_status_make(TT_TYPE_ERROR, "%s: %s has unknown dtype %d", op,
                          what, (int)v->dtype);
  }
  if (v->shape.rank < 0 || v->shape.rank > TT_MAX_RANK) {
    return tt_status_make(TT_INVALID_ARGUMENT,
                          "%s: %s has rank %d, expected 0..%d", op, what,
                          (int)v->shape.rank, TT_MAX_RANK);
  }
  int64_t n = 1;
  for (int i = 0; i < v->shape.rank; ++i) {
    int64_t d = v->shape.dims[i];
    if (d < 0) {
      return tt_status_make(TT_INVALID_ARGUMENT,
                            "%s: %s has negative dim %d = %lld", op, what, i,
                            (long long)d);
    }
    if (d > 0 && n > (INT64_C(1) << 62) / d) {
      return tt_status_make(TT_INVALID_ARGUMENT,
                            "%s: %s has too many elements", op, what);
    }
    n *= d;
  }
  if (n > 0 && !v->data) {
    return tt_status_make(TT_INVALID_ARGUMENT, "%s: %s has NULL data", op,
                          what);
  }
  return NULL;
}

int64_t tt_view_numel(const tt_view_t *v) {
  int64_t n = 1;
  for (int i = 0; i < v->shape.rank; ++i) n *= v->shape.dims[i];
  return n;
}

const char *tt_dims_str(const tt_shape_t *s, char *buf, size_t size) {
  size_t used = 0;
  int w = snprintf(buf, size, "[");
  used = w > 0 ? (size_t)w : 0;
  int rank = s->rank < 0 ? 0 : (s->rank > TT_MAX_RANK ? TT_MAX_RANK : s->rank);
  for (int i = 0; i < rank && used < size; ++i) {
    w = snprintf(buf + used, size - used, "%s%lld", i ? ", " : "",
                 (long long)s->dims[i]);
    if (w > 0) used += (size_t)w;
  }
  if (used < size) snprintf(buf + used, size - used, "]");
  return buf;
}

void tt_contiguous_strides(const tt_shape_t *s, int64_t *strides) {
  int64_t st = 1;
  for (int i = s->rank - 1; i >= 0; --i) {
    strides[i] = st;
    st *= s->dims[i];
  }
}

/* ---- scalar access ---------------------------------------------------- */

double tt_get_f64(const void *data, tt_dtype_t dt, int64_t i) {
  switch (dt) {
    case TT_F32: return ((const float *)data)[i];
    case TT_F64: return ((const double *)data)[i];
    case TT_F16: return tt_f16_to_f32(((const uint16_t *)data)[i]);
    case TT_BF16: return tt_bf16_to_f32(((const uint16_t *)data)[i]);
    case TT_I8: return ((const int8_t *)data)[i];
    case TT_U8: return ((const uint8_t *)data)[i];
    case TT_I16: return ((const int16_t *)data)[i];
    case TT_I32: return ((const int32_t *)data)[i];
    case TT_I64: return (double)((const int64_t *)data)[i];
    case TT_BOOL: return ((const uint8_t *)data)[i] != 0;
    default: return 0;
  }
}

int64_t tt_get_i64(const void *data, tt_dtype_t dt, int64_t i) {
  switch (dt) {
    case TT_F32: return tt_f64_to_i64_trunc(((const float *)data)[i]);
    case TT_F64: return tt_f64_to_i64_trunc(((const double *)data)[i]);
    case TT_F16: return tt_f64_to_i64_trunc(tt_f16_to_f32(((const uint16_t *)data)[i]));
    case TT_BF16: return tt_f64_to_i64_trunc(tt_bf16_to_f32(((const uint16_t *)data)[i]));
    case TT_I8: return ((const int8_t *)data)[i];
    case TT_U8: return ((const uint8_t *)data)[i];
    case TT_I16: return ((const int16_t *)data)[i];
    case TT_I32: return ((const int32_t *)data)[i];
    case TT_I64: return ((const int64_t *)data)[i];
    case TT_BOOL: return ((const uint8_t *)data)[i] != 0;
    default: return 0;
  }
}

/* Integer stores wrap (two's complement), as a C++ static_cast does. */
static inline void tt_set_int_(void *data, tt_dtype_t dt, int64_t i,
                               int64_t v) {
  switch (dt) {
    case TT_I8: ((int8_t *)data)[i] = (int8_t)(uint8_t)v; break;
    case TT_U8: ((uint8_t *)data)[i] = (uint8_t)v; break;
    case TT_I16: ((int16_t *)data)[i] = (int16_t)(uint16_t)v; break;
    case TT_I32: ((int32_t *)data)[i] = (int32_t)(uint32_t)v; break;
    case TT_I64: ((int64_t *)data)[i] = v; break;
    case TT_BOOL: ((uint8_t *)data)[i] = v != 0; break;
    default: break;
  }
}

void tt_set_f64(void *data, tt_dtype_t dt, int64_t i, double v) {
  switch (dt) {
    case TT_F32: ((float *)data)[i] = (float)v; break;
    case TT_F64: ((double *)data)[i] = v; break;
    case TT_F16: ((uint16_t *)data)[i] = tt_f32_to_f16((float)v); break;
    case TT_BF16: ((uint16_t *)data)[i] = tt_f32_to_bf16((float)v); break;
    case TT_BOOL: ((uint8_t *)data)[i] = v != 0; break;
    case TT_I64: ((int64_t *)data)[i] = tt_f64_to_i64_trunc(v); break;
    default: tt_set_int_(data, dt, i, tt_f64_to_i32_trunc(v)); break;
  }
}

void tt_set_i64(void *data, tt_dtype_t dt, int64_t i, int64_t v) {
  switch (dt) {
    case TT_F32: ((float *)data)[i] = (float)v; break;
    case TT_F64: ((double *)data)[i] = (double)v; break;
    case TT_F16: ((uint16_t *)data)[i] = tt_f32_to_f16((float)v); break;
    case TT_BF16: ((uint16_t *)data)[i] = tt_f32_to_bf16((float)v); break;
    default: tt_set_int_(data, dt, i, v); break;
  }
}

/* ---- block loads ------------------------------------------------------ */

void tt_load_f32(const void *src, tt_dtype_t dt, int64_t off, int64_t stride,
                 int64_t n, float *dst) {
  switch (dt) {
    case TT_F32: {
      const float *s = (const float *)src + off;
      if (stride == 1) {
        memcpy(dst, s, (size_t)n * sizeof(float));
      } else {
        for (int64_t i = 0; i < n; ++i) dst[i] = s[i * stride];
      }
      return;
    }
    case TT_F16: {
      const uint16_t *s = (const uint16_t *)src + off;
      for (int64_t i = 0; i < n; ++i) dst[i] = tt_f16_to_f32(s[i * stride]);
      return;
    }
    case TT_BF16: {
      const uint16_t *s = (const uint16_t *)src + off;
      for (int64_t i = 0; i < n; ++i) dst[i] = tt_bf16_to_f32(s[i * stride]);
      return;
    }
    case TT_F64: {
      const double *s = (const double *)src + off;
      for (int64_t i = 0; i < n; ++i) dst[i] = (float)s[i * stride];
      return;
    }
    case TT_I64: {
      const int64_t *s = (const int64_t *)src + off;
      for (int64_t i = 0; i < n; ++i) dst[i] = (float)s[i * stride];
      return;
    }
    case TT_I32: {
      const int32_t *s = (const int32_t *)src + off;
      for (int64_t i = 0; i < n; ++i) dst[i] = (float)s[i * stride];
      return;
    }
    default:
      for (int64_t i = 0; i < n; ++i) {
        dst[i] = (float)tt_get_i64(src, dt, off + i * stride);
      }
      return;
  }
}

void tt_load_f64(const void *src, tt_dtype_t dt, int64_t off, int64_t stride,
                 int64_t n, double *dst) {
  switch (dt) {
    case TT_F64: {
      const double *s = (const double *)src + off;
      if (stride == 1) {
        memcpy(dst, s, (size_t)n * sizeof(double));
      } else {
        for (int64_t i = 0; i < n; ++i) dst[i] = s[i * stride];
      }
      return;
    }
    case TT_F32: {
      const float *s = (const float *)src + off;
      for (int64_t i = 0; i < n; ++i) dst[i] = s[i * stride];
      return;
    }
    default:
      for (int64_t i = 0; i < n; ++i) {
        dst[i] = tt_get_f64(src, dt, off + i * stride);
      }
      return;
  }
}

void tt_load_i64(const void *src, tt_dtype_t dt, int64_t off, int64_t stride,
                 int64_t n, int64_t *dst) {
  switch (dt) {
    case TT_I64: {
      const int64_t *s = (const int64_t *)src + off;
      if (stride == 1) {
        memcpy(dst, s, (size_t)n * sizeof(int64_t));
      } else {
        for (int64_t i = 0; i < n; ++i) dst[i] = s[i * stride];
      }
      return;
    }
    case TT_I32: {
      const int32_t *s = (const int32_t *)src + off;
      for (int64_t i = 0; i < n; ++i) dst[i] = s[i * stride];
      return;
    }
    case TT_BOOL:
    case TT_U8: {
      const uint8_t *s = (const uint8_t *)src + off;
      if (dt == TT_BOOL) {
        for (int64_t i = 0; i < n; ++i) dst[i] = s[i * stride] != 0;
      } else {
        for (int64_t i = 0; i < n; ++i) dst[i] = s[i * stride];
      }
      return;
    }
    default:
      for (int64_t i = 0; i < n; ++i) {
        dst[i] = tt_get_i64(src, dt, off + i * stride);
      }
      return;
  }
}

/* ---- block stores ----------------------------------------------------- */

void tt_store_f32(const float *src, int64_t n, void *dst, tt_dtype_t dt,
                  int64_t off) {
  switch (dt) {
    case TT_F32:
      memcpy((float *)dst + off, src, (size_t)n * sizeof(float));
      return;
    case TT_F16: {
      uint16_t *d = (uint16_t *)dst + off;
      for (int64_t i = 0; i < n; ++i) d[i] = tt_f32_to_f16(src[i]);
      return;
    }
    case TT_BF16: {
      uint16_t *d = (uint16_t *)dst + off;
      for (int64_t i = 0; i < n; ++i) d[i] = tt_f32_to_bf16(src[i]);
      return;
    }
    case TT_F64: {
      double *d = (double *)dst + off;
      for (int64_t i = 0; i < n; ++i) d[i] = src[i];
      return;
    }
    case TT_BOOL: {
      uint8_t *d = (uint8_t *)dst + off;
      for (int64_t i = 0; i < n; ++i) d[i] = src[i] != 0;
      return;
    }
    default:
      for (int64_t i = 0; i < n; ++i) tt_set_f64(dst, dt, off + i, src[i]);
      return;
  }
}

void tt_store_f64(const double *src, int64_t n, void *dst, tt_dtype_t dt,
                  int64_t off) {
  switch (dt) {
    case TT_F64:
      memcpy((double *)dst + off, src, (size_t)n * sizeof(double));
      return;
    case TT_F32: {
      float *d = (float *)dst + off;
      for (int64_t i = 0; i < n; ++i) d[i] = (float)src[i];
      return;
    }
    default:
      for (int64_t i = 0; i < n; ++i) tt_set_f64(dst, dt, off + i, src[i]);
      return;
  }
}

void tt_store_i64(const int64_t *src, int64_t n, void *dst, tt_dtype_t dt,
                  int64_t off) {
  switch (dt) {
    case TT_I64:
      memcpy((int64_t *)dst + off, src, (size_t)n * sizeof(int64_t));
      return;
    case TT_I32: {
      int32_t *d = (int32_t *)dst + off;
      for (int64_t i = 0; i < n; ++i) d[i] = (int32_t)(uint32_t)src[i];
      return;
    }
    case TT_BOOL: {
      uint8_t *d = (uint8_t *)dst + off;
      for (int64_t i = 0; i < n; ++i) d[i] = src[i] != 0;
      return;
    }
    case TT_F32: {
      float *d = (float *)dst + off;
      for (int64_t i = 0; i < n; ++i) d[i] = (float)src[i];
      return;
    }
    default:
      for (int64_t i = 0; i < n; ++i) tt_set_i64(dst, dt, off + i, src[i]);
      return;
  }
}

/* ---- broadcasting iterator -------------------------------------------- */

tt_status_t tt_iter_init(const char *op, const tt_shape_t *out,
                         const tt_view_t *const *inputs, int ninputs,
                         tt_iter_t *it) {
  int rank = out->rank;
  int64_t full[TT_ITER_MAX_OPS][TT_MAX_RANK];
  tt_contiguous_strides(out, full[0]);
  for (int k = 0; k < ninputs; ++k) {
    const tt_shape_t *s = &inputs[k]->shape;
    char b1[160], b2[160];
    if (s->rank > rank) {
      return tt_status_make(TT_INVALID_ARGUMENT,
                            "%s: input %d shape %s has more dims than output %s",
                            op, k, tt_dims_str(s, b1, sizeof b1),
                            tt_dims_str(out, b2, sizeof b2));
    }
    int64_t own[TT_MAX_RANK];
    tt_contiguous_strides(s, own);
    int lead = rank - s->rank;
    for (int d = 0; d < rank; ++d) {
      if (d < lead) {
        full[k + 1][d] = 0;
        continue;
      }
      int64_t sd = s->dims[d - lead];
      if (sd == out->dims[d]) {
        full[k + 1][d] = sd == 1 ? 0 : own[d - lead];
      } else if (sd == 1) {
        full[k + 1][d] = 0;
      } else {
        return tt_status_make(
            TT_INVALID_ARGUMENT,
            "%s: input %d shape %s does not broadcast to output shape %s", op,
            k, tt_dims_str(s, b1, sizeof b1), tt_dims_str(out, b2, sizeof b2));
      }
    }
  }
  int nops = ninputs + 1;
  it->nops = nops;
  it->rank = 0;
  /* Drop size-1 dims, then merge d into the previous kept dim when every
   * operand's strides make them one contiguous run. */
  for (int d = 0; d < rank; ++d) {
    if (out->dims[d] == 1) continue;
    int r = it->rank;
    if (r > 0) {
      int mergeable = 1;
      for (int k = 0; k < nops; ++k) {
        if (it->strides[k][r - 1] != full[k][d] * out->dims[d]) {
          mergeable = 0;
          break;
        }
      }
      if (mergeable) {
        it->dims[r - 1] *= out->dims[d];
        for (int k = 0; k < nops; ++k) it->strides[k][r - 1] = full[k][d];
        continue;
      }
    }
    it->dims[r] = out->dims[d];
    for (int k = 0; k < nops; ++k) it->strides[k][r] = full[k][d];
    it->rank = r + 1;
  }
  if (it->rank == 0) {
    it->rank = 1;
    it->dims[0] = 1;
    for (int k = 0; k < nops; ++k) it->strides[k][0] = 0;
  }
  return NULL;
}

void tt_iter_seek(const tt_iter_t *it, int64_t flat, tt_iter_pos_t *pos) {
  for (int k = 0; k < it->nops; ++k) pos->off[k] = 0;
  for (int d = it->rank - 1; d >= 0; --d) {
    int64_t i = it->dims[d] ? flat % it->dims[d] : 0;
    flat = it->dims[d] ? flat / it->dims[d] : 0;
    pos->idx[d] = i;
    for (int k = 0; k < it->nops; ++k) pos->off[k] += i * it->strides[k][d];
  }
}

void tt_iter_advance(const tt_iter_t *it, tt_iter_pos_t *pos, int64_t n) {
  int d = it->rank - 1;
  pos->idx[d] += n;
  for (int k = 0; k < it->nops; ++k) pos->off[k] += n * it->strides[k][d];
  while (d > 0 && pos->idx[d] >= it->dims[d]) {
    for (int k = 0; k < it->nops; ++k) {
      pos->off[k] -= it->dims[d] * it->strides[k][d];
      pos->off[k] += it->strides[k][d - 1];
    }
    pos->idx[d] = 0;
    --d;
    pos->idx[d] += 1;
  }
}

/* ---- scratch allocator --------------------------------------------------- */

/* Each block carries a 64-byte header holding its size class, so frees need
 * no size. Classes: four per power of two from 16 KiB; at most
 * TT_SCRATCH_CACHE_CAP bytes are kept. */
#define TT_SCRATCH_HDR 64
#define TT_SCRATCH_MIN_SHIFT 14
#define TT_SCRATCH_BINS (4 * (48 - TT_SCRATCH_MIN_SHIFT))
#define TT_SCRATCH_CACHE_CAP ((int64_t)256 << 20)

static pthread_mutex_t tt_scratch_lock_ = PTHREAD_MUTEX_INITIALIZER;
static void *tt_scratch_bins_[TT_SCRATCH_BINS];
static int64_t tt_scratch_cached_ = 0;

static int tt_scratch_class_(size_t bytes, size_t *rounded) {
  *rounded = bytes;
  if (bytes < ((size_t)1 << TT_SCRATCH_MIN_SHIFT)) return -1;
  int b = 63 - __builtin_clzll((unsigned long long)bytes);
  size_t base = (size_t)1 << b, step = base >> 2;
  size_t q = (bytes - base + step - 1) / step;
  int cls = (b - TT_SCRATCH_MIN_SHIFT) * 4 + (int)q;
  if (cls >= TT_SCRATCH_BINS) return -1;
  *rounded = base + q * step;
  return cls;
}

void *tt_scratch_alloc(size_t bytes) {
  size_t rounded;
  int cls = tt_scratch_class_(bytes ? bytes : 1, &rounded);
  char *blk = NULL;
  if (cls >= 0) {
    pthread_mutex_lock(&tt_scratch_lock_);
    blk = (char *)tt_scratch_bins_[cls];
    if (blk) {
      tt_scratch_bins_[cls] = *(void **)(blk + TT_SCRATCH_HDR);
      tt_scratch_cached_ -= (int64_t)rounded;
    }
    pthread_mutex_unlock(&tt_scratch_lock_);
  }
  if (!blk) {
    blk = (char *)aligned_alloc(64, (rounded + TT_SCRATCH_HDR + 63) / 64 * 64);
    if (!blk) return NULL;
  }
  *(int *)blk = cls;
  *(size_t *)(blk + 8) = rounded;
  return blk + TT_SCRATCH_HDR;
}

void tt_scratch_free(void *p) {
  if (!p) return;
  char *blk = (char *)p - TT_SCRATCH_HDR;
  int cls = *(int *)blk;
  size_t rounded = *(size_t *)(blk + 8);
  if (cls >= 0) {
    pthread_mutex_lock(&tt_scratch_lock_);
    if (tt_scratch_cached_ + (int64_t)rounded <= TT_SCRATCH_CACHE_CAP) {
      *(void **)p = tt_scratch_bins_[cls];
      tt_scratch_bins_[cls] = blk;
      tt_scratch_cached_ += (int64_t)rounded;
      blk = NULL;
    }
    pthread_mutex_unlock(&tt_scratch_lock_);
  }
  free(blk);
}

/* ---- row max / min --------------------------------------------------------
 * Four independent vector accumulators (max/min latency 4), an unordered
 * compare folded into a mask per vector for NaN, the tail scalar. */
static float tt_row_minmax_tail(const float *x, int64_t i, int64_t n, float r, int nan,
                                int want_max) {
  for (; i < n; ++i) {
    float v = x[i];
    nan |= v != v;
    r = want_max ? (v > r ? v : r) : (v < r ? v : r);
  }
  return nan ? NAN : r;
}

#if defined(__x86_64__) && defined(__GNUC__)
#include <immintrin.h>

__attribute__((target("avx512f"))) static float tt_row_minmax_avx512(const float *x, int64_t n,
                                                                     int want_max) {
  const __m512 init = _mm512_set1_ps(want_max ? -INFINITY : INFINITY);
  __m512 m0 = init, m1 = init, m2 = init, m3 = init;
  __mmask16 nan = 0;
  int64_t i = 0;
#define TT_MM_LOOP(OP)                                                   \
  for (; i + 64 <= n; i += 64) {                                         \
    __m512 v0 = _mm512_loadu_ps(x + i), v1 = _mm512_loadu_ps(x + i + 16); \
    __m512 v2 = _mm512_loadu_ps(x + i + 32), v3 = _mm512_loadu_ps(x + i + 48); \
    nan |= _mm512_cmp_ps_mask(v0, v1, _CMP_UNORD_Q) |                    \
           _mm512_cmp_ps_mask(v2, v3, _CMP_UNORD_Q);                      \
    m0 = OP(m0, v0);                                                     \
    m1 = OP(m1, v1);                                                     \
    m2 = OP(m2, v2);                                                     \
    m3 = OP(m3, v3);                                                     \
  }                                                                      \
  for (; i + 16 <= n; i += 16) {                                         \
    __m512 v = _mm512_loadu_ps(x + i);                                   \
    nan |= _mm512_cmp_ps_mask(v, v, _CMP_UNORD_Q);                       \
    m0 = OP(m0, v);                                                      \
  }                                                                      \
  m0 = OP(OP(m0, m1), OP(m2, m3));
  if (want_max) {
    TT_MM_LOOP(_mm512_max_ps)
  } else {
    TT_MM_LOOP(_mm512_min_ps)
  }
#undef TT_MM_LOOP
  float r = want_max ? _mm512_reduce_max_ps(m0) : _mm512_reduce_min_ps(m0);
  return tt_row_minmax_tail(x, i, n, r, nan != 0, want_max);
}

__attribute__((target("avx2"))) static float tt_row_minmax_avx2(const float *x, int64_t n,
                                                                int want_max) {
  const __m256 init = _mm256_set1_ps(want_max ? -INFINITY : INFINITY);
  __m256 m0 = init, m1 = init, m2 = init, m3 = init, nan = _mm256_setzero_ps();
  int64_t i = 0;
#define TT_MM_LOOP(OP)                                                   \
  for (; i + 32 <= n; i += 32) {                                         \
    __m256 v0 = _mm256_loadu_ps(x + i), v1 = _mm256_loadu_ps(x + i + 8); \
    __m256 v2 = _mm256_loadu_ps(x + i + 16), v3 = _mm256_loadu_ps(x + i + 24); \
    nan = _mm256_or_ps(nan, _mm256_or_ps(_mm256_cmp_ps(v0, v1, _CMP_UNORD_Q), \
                                         _mm256_cmp_ps(v2, v3, _CMP_UNORD_Q))); \
    m0 = OP(m0, v0);                                                     \
    m1 = OP(m1, v1);                                                     \
    m2 = OP(m2, v2);                                                     \
    m3 = OP(m3, v3);                                                     \
  }                                                                      \
  for (; i + 8 <= n; i += 8) {                                           \
    __m256 v = _mm256_loadu_ps(x + i);                                   \
    nan = _mm256_or_ps(nan, _mm256_cmp_ps(v, v, _CMP_UNORD_Q));          \
    m0 = OP(m0, v);                                                      \
  }                                                                      \
  m0 = OP(OP(m0, m1), OP(m2, m3));
  if (want_max) {
    TT_MM_LOOP(_mm256_max_ps)
  } else {
    TT_MM_LOOP(_mm256_min_ps)
  }
#undef TT_MM_LOOP
  float lanes[8];
  _mm256_storeu_ps(lanes, m0);
  float r = lanes[0];
  for (int j = 1; j < 8; ++j) r = want_max ? (lanes[j] > r ? lanes[j] : r) : (lanes[j] < r ? lanes[j] : r);
  return tt_row_minmax_tail(x, i, n, r, _mm256_movemask_ps(nan) != 0, want_max);
}
#endif

float tt_row_minmax_f32_isa(const float *x, int64_t n, int want_max, tt_sgemm_isa_t isa) {
#if defined(__x86_64__) && defined(__GNUC__)
  int auto_ = isa == TT_SGEMM_ISA_AUTO;
  if ((auto_ || isa == TT_SGEMM_ISA_AVX512) && __builtin_cpu_supports("avx512f")) {
    return tt_row_minmax_avx512(x, n, want_max);
  }
  if ((auto_ || isa == TT_SGEMM_ISA_AVX2) && __builtin_cpu_supports("avx2")) {
    return tt_row_minmax_avx2(x, n, want_max);
  }
#else
  (void)isa;
#endif
  return tt_row_minmax_tail(x, 0, n, want_max ? -INFINITY : INFINITY, 0, want_max);
}

float tt_row_minmax_f32(const float *x, int64_t n, int want_max) {
  return tt_row_minmax_f32_isa(x, n, want_max, TT_SGEMM_ISA_AUTO);
}
