/* Vectorisable f32 exp, tanh and erf shared by the kernels (tier 0) and
 * the C that tier 1 generates (emit_c.c embeds TT_FASTMATH_SOURCE in every
 * generated file), so both tiers compute these functions identically.
 *
 * expf: exp(x) = 2^n * exp(r), n = round(x/ln2), |r| <= ln2/2, Cephes'
 * polynomial for exp(r); about 1 ulp where the result is a normal
 * float, +inf above, NaN passes. Results below FLT_MIN (x < -87.34) are
 * flushed to 0: a causal mask's -inf scores went through exp() into
 * subnormals, and every kernel that then read them (softmax's sum and
 * scale, the attention GEMM) ran on microcode assists, 2.7x slower for
 * a masked softmax. The absolute error is below 1.2e-38.
 * tanhf: Cephes' odd polynomial below 0.625, 1 - 2/(exp(2|x|) + 1) above;
 * a few ulp; branch-free.
 * erff: x * P(x^2) below 1, 1 - exp(-x^2) * G(1/|x|) above (least-squares
 * fits, max relative error about 2e-7); saturates at |x| = 4. */
#ifndef TORCHTPU_KERNELS_FASTMATH_H_
#define TORCHTPU_KERNELS_FASTMATH_H_

#include <math.h>
#include <stdint.h>
#include <string.h>

#define TT_FASTMATH_DEFS \
  static inline __attribute__((always_inline)) float tt_expf_fast(float x) { \
  float xc = x < -88.0f ? -88.0f : (x > 89.0f ? 89.0f : x); \
  float n = (xc * 1.44269504088896341f + 12582912.0f) - 12582912.0f; \
  float r = xc - n * 0.693359375f; \
  r = r - n * -2.12194440e-4f; \
  float p = 1.9875691500e-4f; \
  p = p * r + 1.3981999507e-3f; \
  p = p * r + 8.3334519073e-3f; \
  p = p * r + 4.1665795894e-2f; \
  p = p * r + 1.6666665459e-1f; \
  p = p * r + 5.0000001201e-1f; \
  p = p * r * r + r + 1.0f; \
  int32_t ni = n == n ? (int32_t)n : 0; \
  int32_t n1 = ni / 2; \
  int32_t n2 = ni - n1; \
  uint32_t b1 = (uint32_t)(n1 + 127) << 23; \
  uint32_t b2 = (uint32_t)(n2 + 127) << 23; \
  float s1, s2; \
  memcpy(&s1, &b1, 4); \
  memcpy(&s2, &b2, 4); \
  return x < -87.33654f ? 0.0f : p * s1 * s2; \
  } \
  static inline __attribute__((always_inline)) float tt_tanhf_fast(float x) { \
  float ax = fabsf(x); \
  float z = x * x; \
  float p = -5.70498872745e-3f; \
  p = p * z + 2.06390887954e-2f; \
  p = p * z - 5.37397155531e-2f; \
  p = p * z + 1.33314422036e-1f; \
  p = p * z - 3.33332819422e-1f; \
  float small = x + x * z * p; \
  float e = tt_expf_fast(2.0f * (ax > 10.0f ? 10.0f : ax)); \
  float big = copysignf(1.0f - 2.0f / (e + 1.0f), x); \
  return ax < 0.625f ? small : big; \
  } \
  static inline __attribute__((always_inline)) float tt_erff_fast(float x) { \
  float ax = fabsf(x); \
  float z = x * x; \
  float p = -5.696599048e-04f; \
  p = p * z + 4.934494904e-03f; \
  p = p * z - 2.672697316e-02f; \
  p = p * z + 1.128078854e-01f; \
  p = p * z - 3.761241470e-01f; \
  p = p * z + 1.128379150e+00f; \
  float small = x * p; \
  float axc = ax > 4.0f ? 4.0f : ax; \
  float u = 1.0f / axc; \
  float g = -1.868913360e-02f; \
  g = g * u + 1.244308918e-01f; \
  g = g * u - 3.611178066e-01f; \
  g = g * u + 5.825368162e-01f; \
  g = g * u - 5.096867230e-01f; \
  g = g * u + 5.220809572e-02f; \
  g = g * u + 5.575376220e-01f; \
  g = g * u + 3.638235926e-04f; \
  float big = copysignf(1.0f - tt_expf_fast(-axc * axc) * g, x); \
  return ax < 1.0f ? small : big; \
  }

TT_FASTMATH_DEFS

#define TT_FASTMATH_STR_(...) #__VA_ARGS__
#define TT_FASTMATH_XSTR_(x) TT_FASTMATH_STR_(x)
/* The definitions above as C source text. */
#define TT_FASTMATH_SOURCE TT_FASTMATH_XSTR_(TT_FASTMATH_DEFS)

#endif /* TORCHTPU_KERNELS_FASTMATH_H_ */
