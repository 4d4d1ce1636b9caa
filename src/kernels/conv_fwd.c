/* Forward 2-D convolution (F32/F16/BF16, more than one input channel per
 * group) through the packed f32 GEMM on phase planes.
 *
 * For stride (sh, sw) the zero-padded input plane of each channel is split
 * into sh*sw phase planes: phase (a, b) holds padded rows a, a+sh, ... and
 * columns b, b+sw, ..., Hq x Wq with Hq = ceil(Hp/sh), Wq = ceil(Wp/sw).
 * Output position (oh, ow) is column oh*Wq + ow of the GEMM (columns
 * ow >= OW are scratch, dropped when the result is stored), and kernel tap
 * (c, i, j) reads phase ((i*dh) % sh, (j*dw) % sw) of channel c at that
 * column + ((i*dh)/sh)*Wq + (j*dw)/sw. Every row of the implicit im2col
 * matrix is then a contiguous run of one phase plane, so packing a GEMM
 * panel is one vector copy per tap, for every stride, padding and
 * dilation. Stride 1 has one phase (the zero-padded plane); a strided 1x1
 * convolution uses only phase (0, 0), the subsampled input, and a
 * patchifying convolution (kernel = stride) has one tap per phase and no
 * scratch columns. A 1x1 / stride 1 / no-padding f32 convolution reads
 * the input in place.
 *
 *   out[g] (Og x OH*Wq) = W[g] (Og x K) * col (K x OH*Wq),  K = Cg*KH*KW
 *
 * Only the phases some tap reads are built. Images run in parallel when
 * there are enough of them, otherwise each GEMM is parallel (see
 * tt_conv_run in conv.c).
 */
#include <stdlib.h>
#if defined(__x86_64__) && defined(__GNUC__)
#include <immintrin.h>
#define TT_CONV_X86 1
#endif

#include "kernels/conv_internal.h"

/* Panel packing context: the plan plus this image's phase buffer. */
typedef struct tt_conv_pack_ctx_s {
  const tt_conv_plan_t *plan;
  const float *xq;
} tt_conv_pack_ctx_t;

static _Atomic int tt_conv_portable_ = 0;

void tt_conv_force_portable_for_test(int on) { tt_conv_portable_ = on; }

int tt_conv_cpu_avx512(void) {
  if (tt_conv_portable_) return 0;
#ifdef TT_CONV_X86
  __builtin_cpu_init();
  return __builtin_cpu_supports("avx512f");
#else
  return 0;
#endif
}

void tt_conv_plan_free(tt_conv_plan_t *p) {
  free(p->phase_id);
  free(p->off);
  p->phase_id = p->off = NULL;
}

int tt_conv_plan_init(const tt_conv_geom_t *g, const tt_view_t *x,
                      int allow_in_place, tt_conv_plan_t *p) {
  memset(p, 0, sizeof *p);
  p->g = g;
  p->avx512 = tt_conv_cpu_avx512();
  int64_t Hp = g->H + 2 * g->ph, Wp = g->W + 2 * g->pw, nphase = g->sh * g->sw;
  p->Hq = (Hp + g->sh - 1) / g->sh;
  p->Wq = (Wp + g->sw - 1) / g->sw;
  p->plane = p->Hq * p->Wq;
  p->phase_id = (int64_t *)malloc((size_t)nphase * sizeof(int64_t));
  p->off = (int64_t *)malloc((size_t)g->K * sizeof(int64_t));
  if (!p->phase_id || !p->off) {
    tt_conv_plan_free(p);
    return 0;
  }
  for (int64_t q = 0; q < nphase; ++q) p->phase_id[q] = -1;
  int64_t maxdj = 0;
  for (int64_t i = 0; i < g->KH; ++i) {
    for (int64_t j = 0; j < g->KW; ++j) {
      int64_t q = (i * g->dh % g->sh) * g->sw + j * g->dw % g->sw;
      if (p->phase_id[q] < 0) p->phase_id[q] = p->nph++;
      maxdj = tt_max64(maxdj, j * g->dw / g->sw);
    }
  }
  p->in_place = allow_in_place && g->KH == 1 && g->KW == 1 && g->sh == 1 && g->sw == 1 &&
                g->ph == 0 && g->pw == 0 && x->dtype == TT_F32;
  /* Scratch columns of the last rows read up to maxdj floats past the last
   * plane, the direct kernels up to TT_CONV_SLACK more: zeros. */
  p->size = g->Cg * p->nph * p->plane + maxdj + 1 + TT_CONV_SLACK;
  int64_t k = 0;
  for (int64_t c = 0; c < g->Cg; ++c) {
    for (int64_t i = 0; i < g->KH; ++i) {
      for (int64_t j = 0; j < g->KW; ++j, ++k) {
        int64_t q = (i * g->dh % g->sh) * g->sw + j * g->dw % g->sw;
        p->off[k] = (c * p->nph + p->phase_id[q]) * p->plane +
                    (i * g->dh / g->sh) * p->Wq + j * g->dw / g->sw;
      }
    }
  }
  return 1;
}

/* d[t] = s[t * st] for f32. */
static void tt_conv_gather_f32_c(const float *s, int64_t st, int64_t n, float *d) {
  for (int64_t t = 0; t < n; ++t) d[t] = s[t * st];
}

#ifdef TT_CONV_X86
/* Stride 2: 16 outputs from two loads and one two-source permute. The last
 * (partial) block loads only the elements it needs. */
__attribute__((target("avx512f"))) static void tt_conv_gather2_avx512(
    const float *s, int64_t n, float *d) {
  const __m512i even = _mm512_setr_epi32(0, 2, 4, 6, 8, 10, 12, 14, 16, 18, 20,
                                         22, 24, 26, 28, 30);
  int64_t t = 0;
  for (; t + 16 <= n; t += 16) {
    __m512 lo = _mm512_loadu_ps(s + 2 * t), hi = _mm512_loadu_ps(s + 2 * t + 16);
    _mm512_storeu_ps(d + t, _mm512_permutex2var_ps(lo, even, hi));
  }
  if (t < n) {
    int64_t left = 2 * (n - t) - 1; /* elements needed: 0, 2, ..., 2(n-t-1) */
    __mmask16 m0 = (__mmask16)(left >= 16 ? 0xFFFFu : (1u << left) - 1u);
    __mmask16 m1 = (__mmask16)(left <= 16 ? 0u : (1u << (left - 16)) - 1u);
    __m512 lo = _mm512_maskz_loadu_ps(m0, s + 2 * t);
    __m512 hi = _mm512_maskz_loadu_ps(m1, s + 2 * t + 16);
    _mm512_mask_storeu_ps(d + t, (__mmask16)((1u << (n - t)) - 1u),
                          _mm512_permutex2var_ps(lo, even, hi));
  }
}
#endif

void tt_conv_build_phases(const tt_conv_plan_t *p, const tt_view_t *x,
                                 int64_t xoff, float *xq) {
  const tt_conv_geom_t *g = p->g;
  for (int64_t a = 0; a < g->sh; ++a) {
    for (int64_t b = 0; b < g->sw; ++b) {
      int64_t id = p->phase_id[a * g->sw + b];
      if (id < 0) continue;
      int64_t lo, hi;
      tt_conv_range(p->Wq, g->sw, b - g->pw, g->W, &lo, &hi);
      for (int64_t c = 0; c < g->Cg; ++c) {
        float *pl = xq + (c * p->nph + id) * p->plane;
        for (int64_t u = 0; u < p->Hq; ++u) {
          float *d = pl + u * p->Wq;
          int64_t ih = u * g->sh + a - g->ph;
          if (ih < 0 || ih >= g->H || lo >= hi) {
            memset(d, 0, (size_t)p->Wq * sizeof(float));
            continue;
          }
          memset(d, 0, (size_t)lo * sizeof(float));
          int gathered = 0;
          int64_t src = xoff + (c * g->H + ih) * g->W + lo * g->sw + b - g->pw;
          if (x->dtype == TT_F32 && g->sw > 1) {
            const float *sp = (const float *)x->data + src;
#ifdef TT_CONV_X86
            if (g->sw == 2 && p->avx512) {
              tt_conv_gather2_avx512(sp, hi - lo, d + lo);
              gathered = 1;
            }
#endif
            if (!gathered) tt_conv_gather_f32_c(sp, g->sw, hi - lo, d + lo);
          } else {
            tt_load_f32(x->data, x->dtype, src, g->sw, hi - lo, d + lo);
          }
          memset(d + hi, 0, (size_t)(p->Wq - hi) * sizeof(float));
        }
      }
    }
  }
  int64_t body = g->Cg * p->nph * p->plane;
  memset(xq + body, 0, (size_t)(p->size - body) * sizeof(float));
}

/* ---- panel packing: B(k, j) = xq[off[k] + j] ------------------------------ */

static void tt_conv_pack_rows_c(const float *xq, const int64_t *off, int64_t kc,
                                int64_t j0, int64_t w, int nr, float *dst) {
  for (int64_t k = 0; k < kc; ++k) {
    float *d = dst + k * nr;
    const float *s = xq + off[k] + j0;
    for (int64_t q = 0; q < w; ++q) d[q] = s[q];
    for (int64_t q = w; q < nr; ++q) d[q] = 0.0f;
  }
}

#ifdef TT_CONV_X86
/* nr == 32: two (masked) 16-float copies per row. */
__attribute__((target("avx512f"))) static void tt_conv_pack_rows_avx512(
    const float *xq, const int64_t *off, int64_t kc, int64_t j0, int64_t w,
    float *dst) {
  if (w == 32) {
    int64_t k = 0;
    for (; k + 2 <= kc; k += 2) {
      const float *s0 = xq + off[k] + j0, *s1 = xq + off[k + 1] + j0;
      __m512 a0 = _mm512_loadu_ps(s0), a1 = _mm512_loadu_ps(s0 + 16);
      __m512 b0 = _mm512_loadu_ps(s1), b1 = _mm512_loadu_ps(s1 + 16);
      _mm512_storeu_ps(dst + k * 32, a0);
      _mm512_storeu_ps(dst + k * 32 + 16, a1);
      _mm512_storeu_ps(dst + k * 32 + 32, b0);
      _mm512_storeu_ps(dst + k * 32 + 48, b1);
    }
    for (; k < kc; ++k) {
      const float *s = xq + off[k] + j0;
      _mm512_storeu_ps(dst + k * 32, _mm512_loadu_ps(s));
      _mm512_storeu_ps(dst + k * 32 + 16, _mm512_loadu_ps(s + 16));
    }
    return;
  }
  __mmask16 m0 = (__mmask16)(w >= 16 ? 0xFFFFu : (1u << w) - 1u);
  __mmask16 m1 = (__mmask16)(w <= 16 ? 0u : w >= 32 ? 0xFFFFu : (1u << (w - 16)) - 1u);
  for (int64_t k = 0; k < kc; ++k) {
    const float *s = xq + off[k] + j0;
    _mm512_storeu_ps(dst + k * 32, _mm512_maskz_loadu_ps(m0, s));
    _mm512_storeu_ps(dst + k * 32 + 16, _mm512_maskz_loadu_ps(m1, s + 16));
  }
}
#endif

static void tt_conv_pack_fwd_phases(const void *arg, int64_t k0, int64_t kc,
                                    int64_t j0, int64_t w, int nr, float *dst) {
  const tt_conv_pack_ctx_t *pc = (const tt_conv_pack_ctx_t *)arg;
  const int64_t *off = pc->plan->off + k0;
#ifdef TT_CONV_X86
  if (nr == 32 && pc->plan->avx512) {
    tt_conv_pack_rows_avx512(pc->xq, off, kc, j0, w, dst);
    return;
  }
#endif
  tt_conv_pack_rows_c(pc->xq, off, kc, j0, w, nr, dst);
}

/* ---- driver ---------------------------------------------------------------- */

/* Output columns per GEMM when the result goes through a staging buffer
 * (scratch columns or a non-f32 output): the buffer stays in L2 and the
 * GEMM packs A once per TT_GEMM_NC (512) columns anyway. */
#define TT_CONV_CHUNK 1024
#define TT_CONV_EPI_BYTES (512 * 1024)

/* out[o][p] for the positions p = oh*OW + ow whose GEMM column oh*Wq + ow
 * lies in [p0, p0 + w); stage holds Og rows of w columns. */
static void tt_conv_store_chunk(const tt_conv_geom_t *g, int64_t Wq,
                                const float *stage, int64_t p0, int64_t w,
                                tt_view_t *out, int64_t ooff) {
  int64_t OHW = g->OH * g->OW;
  for (int64_t oh = p0 / Wq; oh * Wq < p0 + w; ++oh) {
    int64_t c0 = tt_max64(p0, oh * Wq), c1 = tt_min64(p0 + w, oh * Wq + g->OW);
    if (c0 >= c1) continue;
    int64_t ow0 = c0 - oh * Wq;
    for (int64_t o = 0; o < g->Og; ++o) {
      tt_store_f32(stage + o * w + (c0 - p0), c1 - c0, out->data, out->dtype,
                   ooff + o * OHW + oh * g->OW + ow0);
    }
  }
}

/* Forward of images [begin, end) (tt_range_fn_t over a tt_conv_ctx_t). */
void tt_conv_forward_range(void *arg, int64_t begin, int64_t end) {
  tt_conv_ctx_t *c = (tt_conv_ctx_t *)arg;
  const tt_conv_geom_t *g = &c->g;
  tt_conv_plan_t plan;
  if (!tt_conv_plan_init(g, c->x, 1, &plan)) {
    c->failed = 1;
    return;
  }
  int64_t OHW = g->OH * g->OW, np = g->OH * plan.Wq;
  int direct_out = plan.Wq == g->OW && c->out->dtype == TT_F32;
  int64_t chunk = direct_out ? np : tt_min64(np, TT_CONV_CHUNK);
  /* With an epilogue, a chunk's result (Og rows) should still be in L2
   * when the epilogue reads it: about TT_CONV_EPI_BYTES. */
  if (c->epi && direct_out)
    chunk = tt_min64(np, tt_max64(256, TT_CONV_EPI_BYTES / (int64_t)sizeof(float) / g->Og / 64 * 64));
  float *xq = plan.in_place ? NULL : (float *)tt_scratch_alloc((size_t)plan.size * sizeof(float));
  float *stage = direct_out ? NULL : (float *)tt_scratch_alloc((size_t)(g->Og * chunk) * sizeof(float));
  if ((!plan.in_place && !xq) || (!direct_out && !stage)) {
    c->failed = 1;
    goto done;
  }
  size_t es = tt_dtype_size(c->w->dtype), xes = tt_dtype_size(c->x->dtype);
  for (int64_t n = begin; n < end; ++n) {
    for (int64_t gi = 0; gi < g->G; ++gi) {
      int64_t xoff = (n * g->C + gi * g->Cg) * g->H * g->W;
      int64_t ooff = (n * g->O + gi * g->Og) * OHW;
      const float *base = xq;
      if (plan.in_place) {
        base = (const float *)((const char *)c->x->data + (size_t)xoff * xes);
      } else {
        tt_conv_build_phases(&plan, c->x, xoff, xq);
      }
      for (int64_t p0 = 0; p0 < np; p0 += chunk) {
        int64_t w = tt_min64(chunk, np - p0);
        tt_conv_pack_ctx_t pk = {&plan, base + p0};
        tt_sgemm_args_t a = {0};
        a.m = g->Og;
        a.n = w;
        a.k = g->K;
        a.a = (const char *)c->w->data + (size_t)(gi * g->Og * g->K) * es;
        a.a_dtype = c->w->dtype;
        a.rsa = g->K;
        a.csa = 1;
        if (plan.in_place && plan.Wq == g->W) {
          /* 1x1/1 on f32: B is the input's [C, H*W] itself, a plain
           * product (which the external BLAS may take, blas_ext.c). */
          a.b = base + p0;
          a.b_dtype = TT_F32;
          a.rsb = np;
          a.csb = 1;
        } else {
          a.pack_b = tt_conv_pack_fwd_phases;
          a.pack_b_ctx = &pk;
        }
        a.c = direct_out ? (float *)c->out->data + ooff + p0 : stage;
        a.ldc = direct_out ? np : w;
        tt_status_t st = tt_sgemm(&a, c->inner_parallel);
        if (st) {
          tt_status_free(st);
          c->failed = 1;
          goto done;
        }
        if (!direct_out) tt_conv_store_chunk(g, plan.Wq, stage, p0, w, c->out, ooff);
        if (c->epi) {
          /* Columns [p0, p0 + w) hold output positions [lo, hi) of each channel. */
          int64_t e = p0 + w;
          int64_t lo = p0 / plan.Wq * g->OW + tt_min64(p0 % plan.Wq, g->OW);
          int64_t hi = e / plan.Wq * g->OW + tt_min64(e % plan.Wq, g->OW);
          tt_conv_run_epilogue_rows(c, ooff + lo, g->Og, OHW, hi - lo);
        }
      }
    }
  }
done:
  tt_scratch_free(xq);
  tt_scratch_free(stage);
  tt_conv_plan_free(&plan);
}
