/* Direct 2-D convolution loops (see conv.c and conv_fwd.c for the GEMM
 * paths):
 *  - one input channel per group (depthwise, or a single-channel input) in
 *    the f32 class, where the GEMM would be one row tall. The forward runs
 *    on the phase planes of conv_fwd.c for every stride: each output plane
 *    is computed as one flat vector over the padded layout, 64 positions
 *    at a time, all taps accumulated in registers (AVX-512, or the
 *    compiler's vectors). The backward passes at stride 1 run on
 *    zero-padded planes where each kernel tap is one long vectorised axpy
 *    (or dot); other strides use clipped row loops;
 *  - F64 for any grouping, as plain loops.
 * The weight gradient of a channel sums over all images in a fixed order,
 * so results do not depend on the thread count. */
#include <stdlib.h>
#if defined(__x86_64__) && defined(__GNUC__)
#include <immintrin.h>
#define TT_CONV_X86 1
#endif

#include "kernels/conv_internal.h"

/* ---- forward, one input channel per group ----------------------------------
 * stage[p] = sum_t wt[t] * xq[off[t] + p] for p < np (rounded up to 64);
 * reads at most 63 floats past off[t] + np (the plan's slack). */
TT_TARGET_CLONES
static void tt_conv_dw_taps_c(const float *xq, const int64_t *off,
                              const float *wt, int64_t ntap, int64_t np,
                              float *stage) {
  for (int64_t p0 = 0; p0 < np; p0 += 64) {
    float acc[64] = {0};
    for (int64_t t = 0; t < ntap; ++t) {
      const float *s = xq + off[t] + p0;
      float wv = wt[t];
      for (int q = 0; q < 64; ++q) acc[q] += wv * s[q];
    }
    memcpy(stage + p0, acc, sizeof acc);
  }
}

#ifdef TT_CONV_X86
__attribute__((target("avx512f"))) static void tt_conv_dw_taps_avx512(
    const float *xq, const int64_t *off, const float *wt, int64_t ntap,
    int64_t np, float *stage) {
  for (int64_t p0 = 0; p0 < np; p0 += 64) {
    __m512 a0 = _mm512_setzero_ps(), a1 = _mm512_setzero_ps();
    __m512 a2 = _mm512_setzero_ps(), a3 = _mm512_setzero_ps();
    for (int64_t t = 0; t < ntap; ++t) {
      const float *s = xq + off[t] + p0;
      __m512 wv = _mm512_set1_ps(wt[t]);
      a0 = _mm512_fmadd_ps(wv, _mm512_loadu_ps(s), a0);
      a1 = _mm512_fmadd_ps(wv, _mm512_loadu_ps(s + 16), a1);
      a2 = _mm512_fmadd_ps(wv, _mm512_loadu_ps(s + 32), a2);
      a3 = _mm512_fmadd_ps(wv, _mm512_loadu_ps(s + 48), a3);
    }
    _mm512_storeu_ps(stage + p0, a0);
    _mm512_storeu_ps(stage + p0 + 16, a1);
    _mm512_storeu_ps(stage + p0 + 32, a2);
    _mm512_storeu_ps(stage + p0 + 48, a3);
  }
}
#endif

/* Forward, items (n, o) output planes. */
static void tt_conv_direct_fwd_range(void *arg, int64_t begin, int64_t end) {
  tt_conv_ctx_t *c = (tt_conv_ctx_t *)arg;
  const tt_conv_geom_t *g = &c->g;
  int64_t OHW = g->OH * g->OW, HW = g->H * g->W, KK = g->KH * g->KW;
  tt_conv_plan_t plan;
  if (!tt_conv_plan_init(g, c->x, 0, &plan)) {
    c->failed = 1;
    return;
  }
  int64_t np = g->OH * plan.Wq, npr = (np + 63) / 64 * 64;
  float *xq = (float *)tt_scratch_alloc((size_t)plan.size * sizeof(float));
  float *stage = (float *)tt_scratch_alloc((size_t)npr * sizeof(float));
  float *wk = (float *)malloc((size_t)KK * sizeof(float));
  if (!xq || !stage || !wk) {
    c->failed = 1;
  } else {
    for (int64_t t = begin; t < end; ++t) {
      int64_t n = t / g->O, o = t % g->O, ci = o / g->Og;
      tt_conv_build_phases(&plan, c->x, (n * g->C + ci) * HW, xq);
      tt_load_f32(c->w->data, c->w->dtype, o * KK, 1, KK, wk);
#ifdef TT_CONV_X86
      if (plan.avx512) {
        tt_conv_dw_taps_avx512(xq, plan.off, wk, KK, np, stage);
      } else
#endif
      {
        tt_conv_dw_taps_c(xq, plan.off, wk, KK, np, stage);
      }
      for (int64_t oh = 0; oh < g->OH; ++oh) {
        tt_store_f32(stage + oh * plan.Wq, g->OW, c->out->data, c->out->dtype,
                     (n * g->O + o) * OHW + oh * g->OW);
      }
      tt_conv_run_epilogue(c, (n * g->O + o) * OHW, (n * g->O + o + 1) * OHW);
    }
  }
  tt_scratch_free(xq);
  tt_scratch_free(stage);
  free(wk);
  tt_conv_plan_free(&plan);
}

/* y[i] += a * x[i] */
TT_TARGET_CLONES
static void tt_axpy_f32(int64_t n, float a, const float *x, float *y) {
  for (int64_t i = 0; i < n; ++i) y[i] += a * x[i];
}

/* sum x[i] * y[i] in 16 float lanes, then in double. */
TT_TARGET_CLONES
static double tt_dot_f32(int64_t n, const float *x, const float *y) {
  float acc[16] = {0};
  int64_t i = 0;
  for (; i + 16 <= n; i += 16) {
    for (int q = 0; q < 16; ++q) acc[q] += x[i + q] * y[i + q];
  }
  double s = 0;
  for (int q = 0; q < 16; ++q) s += acc[q];
  for (; i < n; ++i) s += (double)x[i] * y[i];
  return s;
}

/* Stride-1 planes are handled in a zero-padded layout of width Wp = W +
 * 2*pw: output position (oh, ow) sits at oh*Wp + ow and tap (i, j) reads
 * input at that index + i*dh*Wp + j*dw, so every tap is one long axpy or
 * dot over OH*Wp elements (columns ow >= OW are scratch). */
typedef struct tt_pad_geom_s {
  int64_t Wp, Hp, xsize, osize;
} tt_pad_geom_t;

static tt_pad_geom_t tt_pad_geom(const tt_conv_geom_t *g) {
  tt_pad_geom_t p;
  p.Wp = g->W + 2 * g->pw;
  p.Hp = g->H + 2 * g->ph;
  p.xsize = p.Hp * p.Wp + (g->KW - 1) * g->dw + 1; /* slack for scratch columns */
  p.osize = g->OH * p.Wp;
  return p;
}

/* xpad = x plane (f32 class, element offset off) inside a zero border. */
static void tt_pad_plane(const tt_conv_geom_t *g, const tt_pad_geom_t *pg,
                         const tt_view_t *x, int64_t off, float *xpad) {
  memset(xpad, 0, (size_t)pg->xsize * sizeof(float));
  for (int64_t ih = 0; ih < g->H; ++ih) {
    tt_load_f32(x->data, x->dtype, off + ih * g->W, 1, g->W,
                xpad + (ih + g->ph) * pg->Wp + g->pw);
  }
}

/* opad = an output-shaped plane (element offset off) with zero scratch. */
static void tt_pad_out_plane(const tt_conv_geom_t *g, const tt_pad_geom_t *pg,
                             const tt_view_t *v, int64_t off, float *opad) {
  for (int64_t oh = 0; oh < g->OH; ++oh) {
    float *d = opad + oh * pg->Wp;
    tt_load_f32(v->data, v->dtype, off + oh * g->OW, 1, g->OW, d);
    for (int64_t ow = g->OW; ow < pg->Wp; ++ow) d[ow] = 0.0f;
  }
}

static int tt_conv_direct_padded(const tt_conv_geom_t *g) {
  return g->sh == 1 && g->sw == 1;
}

/* Stride-1 direct backward passes (one input channel per group). */
static void tt_conv_direct_padded_range(void *arg, int64_t begin, int64_t end) {
  tt_conv_ctx_t *c = (tt_conv_ctx_t *)arg;
  const tt_conv_geom_t *g = &c->g;
  tt_pad_geom_t pg = tt_pad_geom(g);
  int64_t OHW = g->OH * g->OW, HW = g->H * g->W, KK = g->KH * g->KW;
  float *xpad = (float *)malloc((size_t)pg.xsize * sizeof(float));
  float *opad = (float *)malloc((size_t)pg.osize * sizeof(float));
  float *wk = (float *)malloc((size_t)KK * sizeof(float));
  double *acc = (double *)malloc((size_t)KK * sizeof(double));
  if (!xpad || !opad || !wk || !acc) {
    c->failed = 1;
    free(xpad); free(opad); free(wk); free(acc);
    return;
  }
  for (int64_t t = begin; t < end; ++t) {
    if (c->kind == TT_CONV_BWD_IN) {
      int64_t n = t / g->C, ci = t % g->C;
      memset(xpad, 0, (size_t)pg.xsize * sizeof(float));
      for (int64_t o = ci * g->Og; o < (ci + 1) * g->Og; ++o) {
        tt_pad_out_plane(g, &pg, c->go, (n * g->O + o) * OHW, opad);
        tt_load_f32(c->w->data, c->w->dtype, o * KK, 1, KK, wk);
        for (int64_t i = 0; i < g->KH; ++i) {
          for (int64_t j = 0; j < g->KW; ++j) {
            tt_axpy_f32(pg.osize, wk[i * g->KW + j], opad, xpad + i * g->dh * pg.Wp + j * g->dw);
          }
        }
      }
      for (int64_t ih = 0; ih < g->H; ++ih) {
        tt_store_f32(xpad + (ih + g->ph) * pg.Wp + g->pw, g->W, c->out->data,
                     c->out->dtype, (n * g->C + ci) * HW + ih * g->W);
      }
    } else {
      int64_t o = t, ci = o / g->Og;
      for (int64_t q = 0; q < KK; ++q) acc[q] = 0;
      for (int64_t n = 0; n < g->N; ++n) {
        tt_pad_plane(g, &pg, c->x, (n * g->C + ci) * HW, xpad);
        tt_pad_out_plane(g, &pg, c->go, (n * g->O + o) * OHW, opad);
        for (int64_t i = 0; i < g->KH; ++i) {
          for (int64_t j = 0; j < g->KW; ++j) {
            acc[i * g->KW + j] += tt_dot_f32(pg.osize, opad, xpad + i * g->dh * pg.Wp + j * g->dw);
          }
        }
      }
      for (int64_t q = 0; q < KK; ++q) {
        tt_set_f64(c->out->data, c->out->dtype, o * KK + q, acc[q]);
      }
    }
  }
  free(xpad); free(opad); free(wk); free(acc);
}

/* Backward passes, one input channel per group (f32 class): item = (n, c)
 * input plane for BWD_IN, o for BWD_W. */
static void tt_conv_direct_range(void *arg, int64_t begin, int64_t end) {
  tt_conv_ctx_t *c = (tt_conv_ctx_t *)arg;
  const tt_conv_geom_t *g = &c->g;
  int64_t OHW = g->OH * g->OW, HW = g->H * g->W, KK = g->KH * g->KW;
  float *xp = (float *)malloc((size_t)tt_max64(HW, 1) * sizeof(float));
  float *op = (float *)malloc((size_t)tt_max64(OHW, 1) * sizeof(float));
  float *wk = (float *)malloc((size_t)KK * sizeof(float));
  double *acc = (double *)malloc((size_t)KK * sizeof(double));
  if (!xp || !op || !wk || !acc) {
    c->failed = 1;
    free(xp); free(op); free(wk); free(acc);
    return;
  }
  for (int64_t t = begin; t < end; ++t) {
    if (c->kind == TT_CONV_BWD_IN) {
      int64_t n = t / g->C, ci = t % g->C;
      memset(xp, 0, (size_t)HW * sizeof(float));
      for (int64_t o = ci * g->Og; o < (ci + 1) * g->Og; ++o) {
        tt_load_f32(c->go->data, c->go->dtype, (n * g->O + o) * OHW, 1, OHW, op);
        tt_load_f32(c->w->data, c->w->dtype, o * KK, 1, KK, wk);
        for (int64_t i = 0; i < g->KH; ++i) {
          for (int64_t j = 0; j < g->KW; ++j) {
            float wv = wk[i * g->KW + j];
            int64_t ohlo, ohhi, owlo, owhi;
            tt_conv_range(g->OH, g->sh, i * g->dh - g->ph, g->H, &ohlo, &ohhi);
            tt_conv_range(g->OW, g->sw, j * g->dw - g->pw, g->W, &owlo, &owhi);
            for (int64_t oh = ohlo; oh < ohhi; ++oh) {
              float *d = xp + (oh * g->sh - g->ph + i * g->dh) * g->W +
                         owlo * g->sw - g->pw + j * g->dw;
              const float *s = op + oh * g->OW + owlo;
              for (int64_t q = 0; q < owhi - owlo; ++q) d[q * g->sw] += wv * s[q];
            }
          }
        }
      }
      tt_store_f32(xp, HW, c->out->data, c->out->dtype, (n * g->C + ci) * HW);
    } else {
      int64_t o = t, ci = o / g->Og;
      for (int64_t q = 0; q < KK; ++q) acc[q] = 0;
      for (int64_t n = 0; n < g->N; ++n) {
        tt_load_f32(c->x->data, c->x->dtype, (n * g->C + ci) * HW, 1, HW, xp);
        tt_load_f32(c->go->data, c->go->dtype, (n * g->O + o) * OHW, 1, OHW, op);
        for (int64_t i = 0; i < g->KH; ++i) {
          for (int64_t j = 0; j < g->KW; ++j) {
            int64_t ohlo, ohhi, owlo, owhi;
            tt_conv_range(g->OH, g->sh, i * g->dh - g->ph, g->H, &ohlo, &ohhi);
            tt_conv_range(g->OW, g->sw, j * g->dw - g->pw, g->W, &owlo, &owhi);
            float s = 0.0f;
            for (int64_t oh = ohlo; oh < ohhi; ++oh) {
              const float *xs = xp + (oh * g->sh - g->ph + i * g->dh) * g->W +
                                owlo * g->sw - g->pw + j * g->dw;
              const float *gs = op + oh * g->OW + owlo;
              for (int64_t q = 0; q < owhi - owlo; ++q) s += gs[q] * xs[q * g->sw];
            }
            acc[i * g->KW + j] += s;
          }
        }
      }
      for (int64_t q = 0; q < KK; ++q) {
        tt_set_f64(c->out->data, c->out->dtype, o * KK + q, acc[q]);
      }
    }
  }
  free(xp); free(op); free(wk); free(acc);
}

/* F64: naive direct loops; item as in tt_conv_direct_range but over all
 * channels of the group. */
void tt_conv_f64_range(void *arg, int64_t begin, int64_t end) {
  tt_conv_ctx_t *c = (tt_conv_ctx_t *)arg;
  const tt_conv_geom_t *g = &c->g;
  int64_t OHW = g->OH * g->OW, HW = g->H * g->W, KK = g->KH * g->KW;
  const double *wd = c->w ? (const double *)c->w->data : NULL;
  const double *xd = c->x ? (const double *)c->x->data : NULL;
  const double *god = c->go ? (const double *)c->go->data : NULL;
  double *od = (double *)c->out->data;
  for (int64_t t = begin; t < end; ++t) {
    if (c->kind == TT_CONV_FWD) {
      int64_t n = t / g->O, o = t % g->O, gi = o / g->Og;
      double *dst = od + (n * g->O + o) * OHW;
      for (int64_t q = 0; q < OHW; ++q) dst[q] = 0;
      for (int64_t cc = 0; cc < g->Cg; ++cc) {
        const double *xs = xd + (n * g->C + gi * g->Cg + cc) * HW;
        for (int64_t i = 0; i < g->KH; ++i) {
          for (int64_t j = 0; j < g->KW; ++j) {
            double wv = wd[(o * g->Cg + cc) * KK + i * g->KW + j];
            for (int64_t oh = 0; oh < g->OH; ++oh) {
              int64_t ih = oh * g->sh - g->ph + i * g->dh;
              if (ih < 0 || ih >= g->H) continue;
              for (int64_t ow = 0; ow < g->OW; ++ow) {
                int64_t iw = ow * g->sw - g->pw + j * g->dw;
                if (iw >= 0 && iw < g->W) dst[oh * g->OW + ow] += wv * xs[ih * g->W + iw];
              }
            }
          }
        }
      }
    } else if (c->kind == TT_CONV_BWD_IN) {
      int64_t n = t / g->C, ci = t % g->C, gi = ci / g->Cg, cc = ci % g->Cg;
      double *dst = od + (n * g->C + ci) * HW;
      for (int64_t q = 0; q < HW; ++q) dst[q] = 0;
      for (int64_t o = gi * g->Og; o < (gi + 1) * g->Og; ++o) {
        const double *gs = god + (n * g->O + o) * OHW;
        for (int64_t i = 0; i < g->KH; ++i) {
          for (int64_t j = 0; j < g->KW; ++j) {
            double wv = wd[(o * g->Cg + cc) * KK + i * g->KW + j];
            for (int64_t oh = 0; oh < g->OH; ++oh) {
              int64_t ih = oh * g->sh - g->ph + i * g->dh;
              if (ih < 0 || ih >= g->H) continue;
              for (int64_t ow = 0; ow < g->OW; ++ow) {
                int64_t iw = ow * g->sw - g->pw + j * g->dw;
                if (iw >= 0 && iw < g->W) dst[ih * g->W + iw] += wv * gs[oh * g->OW + ow];
              }
            }
          }
        }
      }
    } else {
      int64_t o = t, gi = o / g->Og;
      for (int64_t cc = 0; cc < g->Cg; ++cc) {
        for (int64_t i = 0; i < g->KH; ++i) {
          for (int64_t j = 0; j < g->KW; ++j) {
            double s = 0;
            for (int64_t n = 0; n < g->N; ++n) {
              const double *xs = xd + (n * g->C + gi * g->Cg + cc) * HW;
              const double *gs = god + (n * g->O + o) * OHW;
              for (int64_t oh = 0; oh < g->OH; ++oh) {
                int64_t ih = oh * g->sh - g->ph + i * g->dh;
                if (ih < 0 || ih >= g->H) continue;
                for (int64_t ow = 0; ow < g->OW; ++ow) {
                  int64_t iw = ow * g->sw - g->pw + j * g->dw;
                  if (iw >= 0 && iw < g->W) s += gs[oh * g->OW + ow] * xs[ih * g->W + iw];
                }
              }
            }
            od[(o * g->Cg + cc) * KK + i * g->KW + j] = s;
          }
        }
      }
    }
  }
}

tt_range_fn_t tt_conv_direct_range_fn(const tt_conv_geom_t *g, tt_conv_kind_t kind) {
  if (kind == TT_CONV_FWD) return tt_conv_direct_fwd_range;
  return tt_conv_direct_padded(g) ? tt_conv_direct_padded_range : tt_conv_direct_range;
}
