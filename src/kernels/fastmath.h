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
 * erff: x * P(x^2) / Q(x^2) on x clamped to [-4, 4], P of degree 6 and Q
 * of degree 5 (our own fit: weighted least squares iterated towards the
 * minimax error, 2.8e-9 in exact arithmetic; evaluated in float32 the
 * error is at most 3.9e-7 absolute and relative, against 2e-7 for the
 * two-branch form this replaced, which evaluated a polynomial, an exp and
 * a divide for every element: 1M elements 1.49 -> 0.77 ms at one thread).
 * Exactly +-1 from |x| = 3.919206 on, where erf rounds to 1 in float32
 * (so gelu(-inf) is NaN and gelu(-40) is -0, as PyTorch's); NaN passes.
 *
 * Polynomial steps are explicit fused multiply-adds (__builtin_fmaf): one
 * rounding each, and the same in both tiers whatever the compiler's
 * contraction setting (ISO C mode leaves a * b + c as two operations, and
 * the exp, erf and tanh kernels ran 15-25% slower for it). The kernels
 * calling these are compiled for x86-64-v3/v4 (TT_TARGET_CLONES) and tier
 * 1 with -march=native, where fmaf is one instruction; on a CPU without
 * FMA it is a libm call (correct, slower).
 *
 * Clamps are one comparison each, in sequence: a nested
 * `x < lo ? lo : (x > hi ? hi : x)` made GCC 12 vectorise expf as two
 * whole polynomial evaluations under masks (one per path), 2.2 cycles an
 * element at 16 lanes where the sequential form takes 1.5, with the same
 * results (NaN passes through both). 2^n is split as n >> 1 and the rest
 * (an arithmetic shift on every compiler we build with), not n / 2, whose
 * rounding toward zero costs a sign fix-up; the two factors are exact
 * powers of two whose product is the same either way. */
#ifndef TORCHTPU_KERNELS_FASTMATH_H_
#define TORCHTPU_KERNELS_FASTMATH_H_

#include <math.h>
#include <stdint.h>
#include <string.h>

#define TT_FASTMATH_DEFS \
  static inline __attribute__((always_inline)) float tt_expf_fast(float x) { \
  float xc = x < -88.0f ? -88.0f : x; \
  xc = xc > 89.0f ? 89.0f : xc; \
  float n = __builtin_fmaf(xc, 1.44269504088896341f, 12582912.0f) - 12582912.0f; \
  float r = __builtin_fmaf(n, -0.693359375f, xc); \
  r = __builtin_fmaf(n, 2.12194440e-4f, r); \
  float p = 1.9875691500e-4f; \
  p = __builtin_fmaf(p, r, 1.3981999507e-3f); \
  p = __builtin_fmaf(p, r, 8.3334519073e-3f); \
  p = __builtin_fmaf(p, r, 4.1665795894e-2f); \
  p = __builtin_fmaf(p, r, 1.6666665459e-1f); \
  p = __builtin_fmaf(p, r, 5.0000001201e-1f); \
  p = __builtin_fmaf(p * r, r, r) + 1.0f; \
  int32_t ni = n == n ? (int32_t)n : 0; \
  int32_t n1 = ni >> 1; \
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
  p = __builtin_fmaf(p, z, 2.06390887954e-2f); \
  p = __builtin_fmaf(p, z, -5.37397155531e-2f); \
  p = __builtin_fmaf(p, z, 1.33314422036e-1f); \
  p = __builtin_fmaf(p, z, -3.33332819422e-1f); \
  float small = __builtin_fmaf(x * z, p, x); \
  float e = tt_expf_fast(2.0f * (ax > 10.0f ? 10.0f : ax)); \
  float big = copysignf(1.0f - 2.0f / (e + 1.0f), x); \
  return ax < 0.625f ? small : big; \
  } \
  static inline __attribute__((always_inline)) float tt_erff_fast(float x) { \
  float xc = x > 4.0f ? 4.0f : x; \
  xc = xc < -4.0f ? -4.0f : xc; \
  float z = xc * xc; \
  float p = -1.4012284665909647e-08f; \
  p = __builtin_fmaf(p, z, 4.851492576563032e-06f); \
  p = __builtin_fmaf(p, z, 3.851846558973193e-04f); \
  p = __builtin_fmaf(p, z, 3.837947268038988e-03f); \
  p = __builtin_fmaf(p, z, 5.436185747385025e-02f); \
  p = __builtin_fmaf(p, z, 1.844734400510788e-01f); \
  p = __builtin_fmaf(p, z, 1.128379225730896e+00f); \
  float q = 6.468559877248481e-05f; \
  q = __builtin_fmaf(q, z, 1.312651438638568e-03f); \
  q = __builtin_fmaf(q, z, 1.5458592213690281e-02f); \
  q = __builtin_fmaf(q, z, 1.1378220468759537e-01f); \
  q = __builtin_fmaf(q, z, 4.968188405036926e-01f); \
  q = __builtin_fmaf(q, z, 1.0f); \
  float r = xc * p / q; \
  r = r > 1.0f ? 1.0f : r; \
  r = r < -1.0f ? -1.0f : r; \
  return fabsf(x) >= 3.919206f ? copysignf(1.0f, x) : r; \
  }

TT_FASTMATH_DEFS

#define TT_FASTMATH_STR_(...) #__VA_ARGS__
#define TT_FASTMATH_XSTR_(x) TT_FASTMATH_STR_(x)
/* The definitions above as C source text. */
#define TT_FASTMATH_SOURCE TT_FASTMATH_XSTR_(TT_FASTMATH_DEFS)

#endif /* TORCHTPU_KERNELS_FASTMATH_H_ */
