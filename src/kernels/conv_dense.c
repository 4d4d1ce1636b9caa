/* 2-D convolution on tiny planes as one dense GEMM over whole images.
 *
 * When every output position reads every input position through some
 * tap (a 3x3 kernel, stride 1, padding 1 over a 2x2 plane: ResNet-18's
 * 256-channel stage on 32x32 images), the convolution is a plain linear
 * map from an image's C*H*W values to its O*OH*OW values. Its matrix
 *
 *   B[(c, ipos)][(o, opos)] = w[o][c][tap(opos, ipos)]
 *
 * has no structural zeros, so one GEMM over the batch does exactly the
 * useful multiply-adds:
 *
 *   forward:   out (N x O*OHW) = x (N x C*HW) * B
 *   bwd input: gx  (N x C*HW)  = go (N x O*OHW) * B^T
 *
 * and the weight gradient is one GEMM over the batch per (output, input)
 * position pair (tt_conv_dense_bwd_w, below). *
 * The im2col path (conv_batched.c) instead multiplies the 3x3 taps over
 * the padding ring: on a 2x2 plane 20 of the 36 (tap, position) products
 * are zeros (56% of its work), and its GEMM has only O rows. B is
 * gathered from the weight while the GEMM packs its panels (C*HW * O*OHW
 * floats, read from the weight's C*O*KH*KW). F32 only, one group.
 */
#if defined(__x86_64__) && defined(__GNUC__)
#include <immintrin.h>
#define TT_CONV_DENSE_X86 1
#endif

#include <stdlib.h>

#include "kernels/conv_internal.h"

/* Largest planes and B (floats) the path takes; offsets into the weight
 * are 32-bit. */
#define TT_CONV_DENSE_MAX_B (1 << 22)
#define TT_CONV_DENSE_MAX_PLANE 16

/* tap[opos * HW + ipos]: the kernel tap (i*KW + j) through which output
 * position opos reads input position ipos, or -1. */
static int tt_conv_dense_taps(const tt_conv_geom_t *g, int64_t *tap) {
  int64_t HW = g->H * g->W, OHW = g->OH * g->OW;
  for (int64_t op = 0; op < OHW; ++op) {
    int64_t oh = op / g->OW, ow = op % g->OW;
    for (int64_t ip = 0; ip < HW; ++ip) {
      int64_t dy = ip / g->W - oh * g->sh + g->ph;
      int64_t dx = ip % g->W - ow * g->sw + g->pw;
      int64_t t = -1;
      if (dy >= 0 && dx >= 0 && dy % g->dh == 0 && dx % g->dw == 0 && dy / g->dh < g->KH &&
          dx / g->dw < g->KW) {
        t = (dy / g->dh) * g->KW + dx / g->dw;
      }
      tap[op * HW + ip] = t;
      if (t < 0) return 0;
    }
  }
  return 1;
}

int tt_conv_dense_ok(const tt_conv_geom_t *g, const tt_view_t *a, const tt_view_t *w,
                     const tt_view_t *out) {
  int64_t HW = g->H * g->W, OHW = g->OH * g->OW;
  if (g->G != 1 || g->KH * g->KW == 1 || a->dtype != TT_F32 || w->dtype != TT_F32 ||
      out->dtype != TT_F32 || HW > TT_CONV_DENSE_MAX_PLANE || OHW > TT_CONV_DENSE_MAX_PLANE ||
      g->C * HW * g->O * OHW > TT_CONV_DENSE_MAX_B) {
    return 0;
  }
  int64_t tap[TT_CONV_DENSE_MAX_PLANE * TT_CONV_DENSE_MAX_PLANE];
  return tt_conv_dense_taps(g, tap);
}

/* B (forward) or B^T (backward input) is never stored: the GEMM's B
 * panels are gathered from the weight as it packs them, into its
 * cache-resident panel buffer. Row k of the matrix is (u, r) = (k / P,
 * k % P): u an input channel (forward) or output channel (backward), r
 * its position; column j reads w[u*ustride + off[r*n + j]]. */
typedef struct tt_conv_dense_pack_s {
  const float *w;
  const int32_t *off; /* [P x n] */
  int64_t P, n, ustride;
  int avx512;
} tt_conv_dense_pack_t;

#ifdef TT_CONV_DENSE_X86
__attribute__((target("avx512f"))) static void tt_conv_dense_gather_avx512(
    const float *wu, const int32_t *o, int64_t w, float *dst) {
  for (int64_t j = 0; j < w; j += 16) {
    __mmask16 m = (__mmask16)(w - j >= 16 ? 0xFFFFu : (1u << (w - j)) - 1u);
    __m512i idx = _mm512_maskz_loadu_epi32(m, o + j);
    _mm512_storeu_ps(dst + j, _mm512_mask_i32gather_ps(_mm512_setzero_ps(), m, idx, wu, 4));
  }
}
#endif

static void tt_conv_dense_pack(const void *arg, int64_t k0, int64_t kc, int64_t j0,
                               int64_t w, int nr, float *dst) {
  const tt_conv_dense_pack_t *d = (const tt_conv_dense_pack_t *)arg;
  for (int64_t k = 0; k < kc; ++k) {
    int64_t u = (k0 + k) / d->P, r = (k0 + k) % d->P;
    const float *wu = d->w + u * d->ustride;
    const int32_t *o = d->off + r * d->n + j0;
    float *row = dst + k * nr;
#ifdef TT_CONV_DENSE_X86
    if (d->avx512 && nr % 16 == 0) {
      tt_conv_dense_gather_avx512(wu, o, w, row);
      for (int64_t j = (w + 15) / 16 * 16; j < nr; ++j) row[j] = 0.0f;
      continue;
    }
#endif
    for (int64_t j = 0; j < w; ++j) row[j] = wu[o[j]];
    for (int64_t j = w; j < nr; ++j) row[j] = 0.0f;
  }
}

tt_status_t tt_conv_dense_run(const tt_conv_ctx_t *c) {
  const tt_conv_geom_t *g = &c->g;
  int64_t HW = g->H * g->W, OHW = g->OH * g->OW, KK = g->KH * g->KW;
  int64_t CHW = g->C * HW, OOHW = g->O * OHW;
  int64_t tap[TT_CONV_DENSE_MAX_PLANE * TT_CONV_DENSE_MAX_PLANE];
  if (!tt_conv_dense_taps(g, tap)) {
    return tt_status_make(TT_INTERNAL, "conv2d: dense path on a plane it does not cover");
  }
  int fwd = c->kind == TT_CONV_FWD;
  /* Forward: B (CHW x OOHW), rows (c, ipos), columns (o, opos). Backward
   * input: B^T (OOHW x CHW), rows (o, opos), columns (c, ipos). */
  int64_t P = fwd ? HW : OHW, Q = fwd ? OHW : HW, n = fwd ? OOHW : CHW;
  int32_t *off = (int32_t *)tt_scratch_alloc((size_t)(P * n) * sizeof(int32_t));
  if (!off) return tt_status_make(TT_RESOURCE_EXHAUSTED, "conv2d: out of memory");
  for (int64_t r = 0; r < P; ++r) {
    for (int64_t j = 0; j < n; ++j) {
      int64_t v = j / Q, q = j % Q;
      int64_t t = fwd ? tap[q * HW + r] : tap[r * HW + q];
      off[r * n + j] = (int32_t)((fwd ? v * g->C * KK : v * KK) + t);
    }
  }
  tt_conv_dense_pack_t d = {.w = (const float *)c->w->data, .off = off, .P = P, .n = n,
                            .ustride = fwd ? KK : g->C * KK, .avx512 = tt_conv_cpu_avx512()};
  const tt_view_t *a = fwd ? c->x : c->go;
  int64_t kdim = fwd ? CHW : OOHW;
  tt_sgemm_args_t s = {.m = g->N, .n = n, .k = kdim,
                       .a = a->data, .a_dtype = TT_F32, .rsa = kdim, .csa = 1,
                       .b_dtype = TT_F32, .pack_b = tt_conv_dense_pack, .pack_b_ctx = &d,
                       .c = (float *)c->out->data, .ldc = n};
  tt_status_t st = tt_sgemm(&s, 1);
  tt_scratch_free(off);
  if (!st && fwd) tt_conv_run_epilogue(c, 0, tt_view_numel(c->out));
  return st;
}

/* Weight gradient on a dense plane: for every pair of output position op
 * and input position ip, through tap t = tap(op, ip),
 *
 *   S[t] (O x C) += go[:, :, op]^T (O x N) * x[:, :, ip] (N x C),
 *
 * one GEMM per pair over the batch (the im2col path's GEMM runs over
 * K = C*KH*KW columns of which the padding ring's are zeros). go and x are
 * first copied position-major (goT[op][o][n], xT[ip][n][c]: a few hundred
 * KiB) so the GEMMs read plain row-major operands; S is then written out
 * as gw[o][c][t], zeros at taps no pair uses. */
typedef struct tt_conv_dense_w_s {
  const tt_conv_geom_t *g;
  const float *go, *x, *S;
  float *goT, *xT, *gw;
  const uint8_t *used;
} tt_conv_dense_w_t;

static void tt_conv_dense_w_split(void *arg, int64_t begin, int64_t end) {
  const tt_conv_dense_w_t *d = (const tt_conv_dense_w_t *)arg;
  const tt_conv_geom_t *g = d->g;
  int64_t HW = g->H * g->W, OHW = g->OH * g->OW, N = g->N;
  for (int64_t n = begin; n < end; ++n) {
    for (int64_t o = 0; o < g->O; ++o) {
      const float *s = d->go + (n * g->O + o) * OHW;
      for (int64_t p = 0; p < OHW; ++p) d->goT[(p * g->O + o) * N + n] = s[p];
    }
    for (int64_t c = 0; c < g->C; ++c) {
      const float *s = d->x + (n * g->C + c) * HW;
      for (int64_t p = 0; p < HW; ++p) d->xT[(p * N + n) * g->C + c] = s[p];
    }
  }
}

static void tt_conv_dense_w_store(void *arg, int64_t begin, int64_t end) {
  const tt_conv_dense_w_t *d = (const tt_conv_dense_w_t *)arg;
  const tt_conv_geom_t *g = d->g;
  int64_t KK = g->KH * g->KW, OC = g->O * g->C;
  for (int64_t q = begin; q < end; ++q) { /* q = o*C + c */
    float *dst = d->gw + q * KK;
    for (int64_t t = 0; t < KK; ++t) dst[t] = d->used[t] ? d->S[t * OC + q] : 0.0f;
  }
}

tt_status_t tt_conv_dense_bwd_w(const tt_conv_ctx_t *c) {
  const tt_conv_geom_t *g = &c->g;
  int64_t HW = g->H * g->W, OHW = g->OH * g->OW, KK = g->KH * g->KW;
  int64_t N = g->N, O = g->O, C = g->C;
  int64_t tap[TT_CONV_DENSE_MAX_PLANE * TT_CONV_DENSE_MAX_PLANE];
  if (!tt_conv_dense_taps(g, tap)) {
    return tt_status_make(TT_INTERNAL, "conv2d: dense path on a plane it does not cover");
  }
  size_t fl = (size_t)(KK * O * C + OHW * O * N + HW * N * C);
  float *S = (float *)tt_scratch_alloc(fl * sizeof(float));
  uint8_t *used = (uint8_t *)calloc((size_t)KK, 1);
  if (!S || !used) {
    tt_scratch_free(S);
    free(used);
    return tt_status_make(TT_RESOURCE_EXHAUSTED, "conv2d_backward_weight: out of memory");
  }
  tt_conv_dense_w_t d = {.g = g, .go = (const float *)c->go->data,
                         .x = (const float *)c->x->data, .S = S, .goT = S + KK * O * C,
                         .gw = (float *)c->out->data, .used = used};
  d.xT = d.goT + OHW * O * N;
  tt_parallel_for(N, tt_max64(1, TT_GRAIN / tt_max64(1, O * OHW + C * HW)),
                  tt_conv_dense_w_split, &d);
  tt_status_t st = NULL;
  for (int64_t op = 0; op < OHW && !st; ++op) {
    for (int64_t ip = 0; ip < HW && !st; ++ip) {
      int64_t t = tap[op * HW + ip];
      tt_sgemm_args_t s = {.m = O, .n = C, .k = N,
                           .a = d.goT + op * O * N, .a_dtype = TT_F32, .rsa = N, .csa = 1,
                           .b = d.xT + ip * N * C, .b_dtype = TT_F32, .rsb = C, .csb = 1,
                           .c = S + t * O * C, .ldc = C, .accumulate = used[t]};
      used[t] = 1;
      st = tt_sgemm(&s, 1);
    }
  }
  if (!st) tt_parallel_for(O * C, tt_max64(1, TT_GRAIN / KK), tt_conv_dense_w_store, &d);
  tt_scratch_free(S);
  free(used);
  return st;
}
