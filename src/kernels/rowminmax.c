/* Max / min over a float32 row, vectorised per ISA (kernel_util.h). */
#include "kernels/kernel_util.h"

#include <math.h>

/* Four independent vector accumulators (max/min latency 4), an unordered
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
