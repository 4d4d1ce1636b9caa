/* 2-D convolution passes (F32/F16/BF16, more than one input channel per
 * group) with several images in one GEMM, for small output planes.
 *
 * The per-image GEMMs of conv.c / conv_fwd.c have OH*OW (or OH*Wq)
 * columns: a 2x2 or 1x1 output plane (ResNet's last stages on 32x32
 * images) gives a GEMM 1-4 columns wide, padded to the 32-wide panels of
 * the micro-kernel, and repacks the whole weight for every image (the
 * backward-input's transposed weight alone cost more than its products).
 * Here a chunk of images shares one GEMM: the exact im2col matrix of the
 * chunk is materialised, with image n's positions as columns
 * n*OHW .. n*OHW + OHW - 1 (P = images * OHW columns in all):
 *
 *   col (K x P):   col[(c*KH + i)*KW + j][n*OHW + oh*OW + ow]
 *                    = x[n][c][oh*sh - ph + i*dh][ow*sw - pw + j*dw]  (0 outside)
 *   forward:       out (Og x P)  = W[g] (Og x K) * col
 *   bwd input:     gcol (K x P)  = W[g]^T (K x Og) * go (Og x P), then col2im
 *   bwd weight:    gW[g] (Og x K) += go (Og x P) * col^T
 *
 * with grad_out gathered into an f32 (Og x P) staging matrix. Taps that
 * read only padding at every output position (all but the centre of a
 * 3x3 kernel on a 1x1 plane) are left out of K. col is built from
 * zero-bordered copies of the chunk's planes (col2im adds into such
 * planes); materialising costs K*P stores against Og*K*P multiply-adds,
 * and chunks are sized so col stays in L2. (Stride-1 backward-input
 * usually arrives here as a forward convolution: see conv.c.) F16/BF16 operands are widened to
 * f32 while gathering (the weight inside the GEMM's packs); results are
 * rounded once when stored.
 */
#include <stdlib.h>
#if defined(__x86_64__) && defined(__GNUC__)
#include <immintrin.h>
#define TT_CONV_BATCHED_X86 1
#endif

#include "kernels/conv_internal.h"

/* Columns per GEMM the chunking aims for, and the largest im2col buffer
 * (floats) it allows unless one image alone needs more. */
#define TT_CONV_BATCH_COLS 512
#define TT_CONV_BATCH_MAX_COL (1 << 18) /* 1 MiB: col stays in L2 */
/* With the external BLAS, whose own blocking does not need col in L2, a
 * chunk may take 8 MiB of col: at ResNet's 7x7 x 512 layers (K = 4608) one
 * image per GEMM (49 columns) streamed the 9.4 MB weight once per image
 * and ran at 56 GFLOP/s. */
#define TT_CONV_BATCH_MAX_COL_BLAS (1 << 21)
/* Output planes up to this many positions take the batched path (a 16x16
 * plane, 256, already fills per-image GEMMs well: the 32x32 stem ran
 * 10-20% faster per image). */
#define TT_CONV_BATCH_MAX_OHW 128

static _Atomic int tt_conv_batched_mode_ = -1;

void tt_conv_force_batched_for_test(int mode) { tt_conv_batched_mode_ = mode; }

int tt_conv_use_batched(const tt_conv_geom_t *g, int wide) {
  int mode = tt_conv_batched_mode_;
  if (mode >= 0) return mode;
  /* With MKL every convolution with a spatial kernel goes through an
   * explicit im2col: MKL's sgemm on it beat our implicit-im2col GEMM on
   * every 3x3 layer of ResNet-18 at batch 8, one thread (ms, implicit ->
   * explicit: 56x56 24.3 -> 22.1, 28x28 22.8 -> 15.7, 14x14 23.2 -> 20.4,
   * 7x7 32.9 -> 18.7; ResNet-50 at batch 1: 131-137 -> 98 ms). 1x1
   * kernels keep the phase planes (no copy), and so do stems with a few
   * input channels, whose col is large for the work it feeds (ResNet's
   * 7x7/2 stem: 3.8 -> 6.2 ms explicit). */
  if (wide) return g->KH * g->KW > 1 && g->Cg >= 16;
  return g->N >= 2 && g->OH * g->OW <= TT_CONV_BATCH_MAX_OHW;
}

int64_t tt_conv_batch_images(const tt_conv_geom_t *g, int wide) {
  int64_t OHW = tt_max64(1, g->OH * g->OW);
  int64_t n = (TT_CONV_BATCH_COLS + OHW - 1) / OHW;
  int64_t max_col = wide ? TT_CONV_BATCH_MAX_COL_BLAS : TT_CONV_BATCH_MAX_COL;
  n = tt_max64(1, tt_min64(n, max_col / tt_max64(1, g->K * OHW)));
  if (n >= g->N) return tt_max64(1, g->N);
  /* Equal chunks: a short last chunk would repack the weight for a few
   * columns. */
  int64_t chunks = (g->N + n - 1) / n;
  return (g->N + chunks - 1) / chunks;
}

/* ---- padded planes and window copies ---------------------------------------
 * The chunk's input planes (and, for the input gradient, its gradient
 * planes) sit in zero borders: plane (n, c) is Hp x Wp floats with
 * Hp = H + 2*ph, Wp = W + 2*pw. Tap (i, j) of output row oh then reads
 * padded row oh*sh + i*dh from column j*dw in steps of sw, always inside
 * the plane, so an im2col row of one image is OH runs of OW floats with no
 * bounds checks (one masked vector copy per run when OW <= 16). */

typedef struct tt_conv_pads_s {
  int64_t Hp, Wp, plane;
  /* Taps i*KW + j that read inside the image at some output position
   * (on a 1x1 plane with padding 1 only the centre of a 3x3 kernel):
   * the others contribute nothing and are left out of the GEMMs, which
   * then have Kv = Cg*ntap rows of col. */
  int64_t ntap, Kv;
  int64_t *tap;
} tt_conv_pads_t;

/* Returns 0 if it cannot allocate; release with tt_conv_pads_free. */
static int tt_conv_pads_init(const tt_conv_geom_t *g, tt_conv_pads_t *p) {
  p->Hp = g->H + 2 * g->ph;
  p->Wp = g->W + 2 * g->pw;
  p->plane = p->Hp * p->Wp;
  p->ntap = 0;
  p->tap = (int64_t *)malloc((size_t)(g->KH * g->KW) * sizeof(int64_t));
  if (!p->tap) return 0;
  for (int64_t i = 0; i < g->KH; ++i) {
    int64_t hlo, hhi;
    tt_conv_range(g->OH, g->sh, i * g->dh - g->ph, g->H, &hlo, &hhi);
    for (int64_t j = 0; j < g->KW; ++j) {
      int64_t wlo, whi;
      tt_conv_range(g->OW, g->sw, j * g->dw - g->pw, g->W, &wlo, &whi);
      if (hlo < hhi && wlo < whi) p->tap[p->ntap++] = i * g->KW + j;
    }
  }
  p->Kv = g->Cg * p->ntap;
  return 1;
}

static void tt_conv_pads_free(tt_conv_pads_t *p) {
  free(p->tap);
  p->tap = NULL;
}

int tt_conv_all_taps_read_input(const tt_conv_geom_t *g) {
  int64_t hlo, hhi, wlo, whi;
  for (int64_t i = 0; i < g->KH; ++i) {
    tt_conv_range(g->OH, g->sh, i * g->dh - g->ph, g->H, &hlo, &hhi);
    if (hlo >= hhi) return 0;
  }
  for (int64_t j = 0; j < g->KW; ++j) {
    tt_conv_range(g->OW, g->sw, j * g->dw - g->pw, g->W, &wlo, &whi);
    if (wlo >= whi) return 0;
  }
  return 1;
}

/* wc (Og x Kv, f32) = the columns of group gi's weight for the kept taps
 * (read in place: the weight of a 1x1-plane layer is megabytes, of which
 * a ninth is kept). */
static void tt_conv_compact_weight(const tt_conv_geom_t *g, const tt_conv_pads_t *pd,
                                   const tt_view_t *w, int64_t gi, float *wc) {
  int64_t KK = g->KH * g->KW;
  for (int64_t o = 0; o < g->Og; ++o) {
    float *d = wc + o * pd->Kv;
    int64_t base = (gi * g->Og + o) * g->K;
    for (int64_t c = 0; c < g->Cg; ++c, d += pd->ntap, base += KK) {
      if (w->dtype == TT_F32) {
        const float *s = (const float *)w->data + base;
        for (int64_t t = 0; t < pd->ntap; ++t) d[t] = s[pd->tap[t]];
      } else {
        for (int64_t t = 0; t < pd->ntap; ++t) {
          tt_load_f32(w->data, w->dtype, base + pd->tap[t], 1, 1, d + t);
        }
      }
    }
  }
}

/* xpad[(n*Cg + c)*plane + ...] = channels gi*Cg.. of images [n0, n0 + nimg). */
static void tt_conv_pad_images(const tt_conv_geom_t *g, const tt_conv_pads_t *pd,
                               const tt_view_t *x, int64_t n0, int64_t nimg, int64_t gi,
                               float *xpad) {
  int64_t HW = g->H * g->W;
  for (int64_t n = 0; n < nimg; ++n) {
    for (int64_t c = 0; c < g->Cg; ++c) {
      float *pl = xpad + (n * g->Cg + c) * pd->plane;
      int64_t xoff = ((n0 + n) * g->C + gi * g->Cg + c) * HW;
      memset(pl, 0, (size_t)(g->ph * pd->Wp) * sizeof(float));
      for (int64_t ih = 0; ih < g->H; ++ih) {
        float *d = pl + (ih + g->ph) * pd->Wp;
        for (int64_t t = 0; t < g->pw; ++t) d[t] = d[g->pw + g->W + t] = 0.0f;
        tt_load_f32(x->data, x->dtype, xoff + ih * g->W, 1, g->W, d + g->pw);
      }
      memset(pl + (g->ph + g->H) * pd->Wp, 0, (size_t)(g->ph * pd->Wp) * sizeof(float));
    }
  }
}

/* d[r*w + t] = s[r*ss + t*sw] for r < rows, t < w (d contiguous). */
static void tt_conv_rows_copy_c(const float *s, int64_t ss, int64_t sw, int64_t w,
                                int64_t rows, float *d) {
  for (int64_t r = 0; r < rows; ++r, s += ss, d += w) {
    for (int64_t t = 0; t < w; ++t) d[t] = s[t * sw];
  }
}

/* d[r*ds + t*sw] += s[r*w + t] (s contiguous). */
static void tt_conv_rows_add_c(const float *s, int64_t w, int64_t rows, float *d,
                               int64_t ds, int64_t sw) {
  for (int64_t r = 0; r < rows; ++r, s += w, d += ds) {
    for (int64_t t = 0; t < w; ++t) d[t * sw] += s[t];
  }
}

#ifdef TT_CONV_BATCHED_X86
__attribute__((target("avx512f"))) static void tt_conv_rows_copy_avx512(
    const float *s, int64_t ss, int64_t w, int64_t rows, float *d) {
  __mmask16 m = (__mmask16)((1u << (w % 16)) - 1u);
  for (int64_t r = 0; r < rows; ++r, s += ss, d += w) {
    int64_t t = 0;
    for (; t + 16 <= w; t += 16) _mm512_storeu_ps(d + t, _mm512_loadu_ps(s + t));
    if (m) _mm512_mask_storeu_ps(d + t, m, _mm512_maskz_loadu_ps(m, s + t));
  }
}

__attribute__((target("avx512f"))) static void tt_conv_rows_add_avx512(
    const float *s, int64_t w, int64_t rows, float *d, int64_t ds) {
  __mmask16 m = (__mmask16)((1u << (w % 16)) - 1u);
  for (int64_t r = 0; r < rows; ++r, s += w, d += ds) {
    int64_t t = 0;
    for (; t + 16 <= w; t += 16) {
      _mm512_storeu_ps(d + t, _mm512_add_ps(_mm512_loadu_ps(d + t), _mm512_loadu_ps(s + t)));
    }
    if (m) {
      __m512 v = _mm512_add_ps(_mm512_maskz_loadu_ps(m, d + t), _mm512_maskz_loadu_ps(m, s + t));
      _mm512_mask_storeu_ps(d + t, m, v);
    }
  }
}
#endif

/* col (Kv x nimg*OHW) from the padded planes of a chunk (kept taps only). */
static void tt_conv_im2col_images(const tt_conv_geom_t *g, const tt_conv_pads_t *pd,
                                  const float *xpad, int64_t nimg, int avx512, float *col) {
  int64_t OHW = g->OH * g->OW, P = nimg * OHW, ss = g->sh * pd->Wp;
  (void)avx512;
  int64_t k = 0;
  for (int64_t c = 0; c < g->Cg; ++c) {
    for (int64_t t = 0; t < pd->ntap; ++t, ++k) {
      int64_t i = pd->tap[t] / g->KW, j = pd->tap[t] % g->KW;
      {
        for (int64_t n = 0; n < nimg; ++n) {
          const float *s = xpad + (n * g->Cg + c) * pd->plane + i * g->dh * pd->Wp + j * g->dw;
          float *d = col + k * P + n * OHW;
#ifdef TT_CONV_BATCHED_X86
          if (avx512 && g->sw == 1) {
            tt_conv_rows_copy_avx512(s, ss, g->OW, g->OH, d);
            continue;
          }
#endif
          tt_conv_rows_copy_c(s, ss, g->sw, g->OW, g->OH, d);
        }
      }
    }
  }
}

/* gxpad += col2im(gcol) for a chunk: the transpose of tt_conv_im2col_images. */
static void tt_conv_col2im_images(const tt_conv_geom_t *g, const tt_conv_pads_t *pd,
                                  const float *gcol, int64_t nimg, int avx512, float *gxpad) {
  int64_t OHW = g->OH * g->OW, P = nimg * OHW, ds = g->sh * pd->Wp;
  (void)avx512;
  int64_t k = 0;
  for (int64_t c = 0; c < g->Cg; ++c) {
    for (int64_t t = 0; t < pd->ntap; ++t, ++k) {
      int64_t i = pd->tap[t] / g->KW, j = pd->tap[t] % g->KW;
      {
        for (int64_t n = 0; n < nimg; ++n) {
          float *d = gxpad + (n * g->Cg + c) * pd->plane + i * g->dh * pd->Wp + j * g->dw;
          const float *s = gcol + k * P + n * OHW;
#ifdef TT_CONV_BATCHED_X86
          if (avx512 && g->sw == 1) {
            tt_conv_rows_add_avx512(s, g->OW, g->OH, d, ds);
            continue;
          }
#endif
          tt_conv_rows_add_c(s, g->OW, g->OH, d, ds, g->sw);
        }
      }
    }
  }
}

/* Stores the interior of the chunk's gradient planes into channels gi*Cg..
 * of grad_x (rounded once to its dtype). */
static void tt_conv_unpad_images(const tt_conv_geom_t *g, const tt_conv_pads_t *pd,
                                 const float *gxpad, int64_t n0, int64_t nimg, int64_t gi,
                                 tt_view_t *gx) {
  int64_t HW = g->H * g->W;
  for (int64_t n = 0; n < nimg; ++n) {
    for (int64_t c = 0; c < g->Cg; ++c) {
      const float *pl = gxpad + (n * g->Cg + c) * pd->plane + g->ph * pd->Wp + g->pw;
      int64_t off = ((n0 + n) * g->C + gi * g->Cg + c) * HW;
      if (g->pw == 0) {
        tt_store_f32(pl, HW, gx->data, gx->dtype, off);
        continue;
      }
      for (int64_t ih = 0; ih < g->H; ++ih) {
        tt_store_f32(pl + ih * pd->Wp, g->W, gx->data, gx->dtype, off + ih * g->W);
      }
    }
  }
}

/* stage (Og x nimg*OHW, f32) = grad_out of images [n0, n0 + nimg), group gi. */
static void tt_conv_gather_go(const tt_conv_geom_t *g, const tt_view_t *go,
                              int64_t n0, int64_t nimg, int64_t gi, float *stage) {
  int64_t OHW = g->OH * g->OW, P = nimg * OHW;
  for (int64_t o = 0; o < g->Og; ++o) {
    for (int64_t n = 0; n < nimg; ++n) {
      tt_load_f32(go->data, go->dtype, ((n0 + n) * g->O + gi * g->Og + o) * OHW, 1, OHW,
                  stage + o * P + n * OHW);
    }
  }
}

/* Forward or backward-input of image chunks [begin, end). */
void tt_conv_batched_range(void *arg, int64_t begin, int64_t end) {
  tt_conv_ctx_t *c = (tt_conv_ctx_t *)arg;
  const tt_conv_geom_t *g = &c->g;
  tt_conv_pads_t pd;
  if (!tt_conv_pads_init(g, &pd)) {
    c->failed = 1;
    return;
  }
  int64_t OHW = g->OH * g->OW, per = c->chunk_imgs, Pmax = per * OHW;
  int fwd = c->kind == TT_CONV_FWD, avx512 = tt_conv_cpu_avx512();
  int compact = pd.ntap < g->KH * g->KW;
  float *col = (float *)tt_scratch_alloc((size_t)(pd.Kv * Pmax + 1) * sizeof(float));
  float *stage = (float *)tt_scratch_alloc((size_t)(g->Og * Pmax) * sizeof(float));
  /* input planes (forward) or input-gradient planes (backward) */
  float *pad = (float *)tt_scratch_alloc((size_t)(per * g->Cg * pd.plane) * sizeof(float));
  float *wc = compact ? (float *)tt_scratch_alloc((size_t)(g->Og * pd.Kv + 1) * sizeof(float))
                      : NULL;
  if (!col || !stage || !pad || (compact && !wc)) {
    c->failed = 1;
    goto done;
  }
  const tt_view_t *w = c->w;
  size_t es = tt_dtype_size(w->dtype);
  for (int64_t gi = 0; gi < g->G; ++gi) {
    if (compact) tt_conv_compact_weight(g, &pd, w, gi, wc);
    for (int64_t chunk = begin; chunk < end; ++chunk) {
      int64_t n0 = chunk * per, nimg = tt_min64(per, g->N - n0), P = nimg * OHW;
      tt_sgemm_args_t a = {0};
      a.a = compact ? (const void *)wc : (const char *)w->data + (size_t)(gi * g->Og * g->K) * es;
      a.a_dtype = compact ? TT_F32 : w->dtype;
      a.b_dtype = TT_F32;
      if (fwd) {
        tt_conv_pad_images(g, &pd, c->x, n0, nimg, gi, pad);
        tt_conv_im2col_images(g, &pd, pad, nimg, avx512, col);
        a.m = g->Og;
        a.n = P;
        a.k = pd.Kv;
        a.rsa = pd.Kv;
        a.csa = 1;
        a.b = col;
        a.rsb = P;
        a.csb = 1;
        a.c = stage;
        a.ldc = P;
      } else {
        tt_conv_gather_go(g, c->go, n0, nimg, gi, stage);
        a.m = pd.Kv;
        a.n = P;
        a.k = g->Og;
        a.rsa = 1;
        a.csa = pd.Kv;
        a.b = stage;
        a.rsb = P;
        a.csb = 1;
        a.c = col;
        a.ldc = P;
      }
      if (fwd && pd.Kv == 0) {
        memset(stage, 0, (size_t)(g->Og * P) * sizeof(float)); /* every tap reads padding */
      } else if (pd.Kv > 0) {
        tt_status_t st = tt_sgemm(&a, c->inner_parallel);
        if (st) {
          tt_status_free(st);
          c->failed = 1;
          goto done;
        }
      }
      if (fwd) {
        for (int64_t n = 0; n < nimg; ++n) {
          for (int64_t o = 0; o < g->Og; ++o) {
            tt_store_f32(stage + o * P + n * OHW, OHW, c->out->data, c->out->dtype,
                         ((n0 + n) * g->O + gi * g->Og + o) * OHW);
          }
          int64_t o0 = ((n0 + n) * g->O + gi * g->Og) * OHW;
          tt_conv_run_epilogue(c, o0, o0 + g->Og * OHW);
        }
      } else {
        memset(pad, 0, (size_t)(nimg * g->Cg * pd.plane) * sizeof(float));
        tt_conv_col2im_images(g, &pd, col, nimg, avx512, pad);
        tt_conv_unpad_images(g, &pd, pad, n0, nimg, gi, c->out);
      }
    }
  }
done:
  tt_scratch_free(col);
  tt_scratch_free(stage);
  tt_scratch_free(pad);
  tt_scratch_free(wc);
  tt_conv_pads_free(&pd);
}

/* Backward-weight into partial buffers [begin, end): partial q sums the
 * chunks q, q + nparts, ... With taps left out, the GEMM fills a compact
 * (Og x Kv) gradient that is scattered into the full one (zero at the
 * other taps). */
void tt_conv_batched_w_range(void *arg, int64_t begin, int64_t end) {
  tt_conv_ctx_t *c = (tt_conv_ctx_t *)arg;
  const tt_conv_geom_t *g = &c->g;
  tt_conv_pads_t pd;
  if (!tt_conv_pads_init(g, &pd)) {
    c->failed = 1;
    return;
  }
  int64_t OHW = g->OH * g->OW, per = c->chunk_imgs, Pmax = per * OHW, KK = g->KH * g->KW;
  int64_t nchunks = (g->N + per - 1) / per;
  int avx512 = tt_conv_cpu_avx512();
  int compact = pd.ntap < KK;
  float *col = (float *)tt_scratch_alloc((size_t)(pd.Kv * Pmax + 1) * sizeof(float));
  float *stage = (float *)tt_scratch_alloc((size_t)(g->Og * Pmax) * sizeof(float));
  float *xpad = (float *)tt_scratch_alloc((size_t)(per * g->Cg * pd.plane) * sizeof(float));
  float *gwc = compact ? (float *)tt_scratch_alloc((size_t)(g->O * pd.Kv + 1) * sizeof(float))
                       : NULL;
  if (!col || !stage || !xpad || (compact && !gwc)) {
    c->failed = 1;
    goto done;
  }
  int64_t ldc = compact ? pd.Kv : g->K;
  for (int64_t part = begin; part < end; ++part) {
    float *gw = c->partials + part * g->O * g->K;
    float *acc = compact ? gwc : gw;
    memset(gw, 0, (size_t)(g->O * g->K) * sizeof(float));
    memset(acc, 0, (size_t)(g->O * ldc) * sizeof(float));
    for (int64_t chunk = part; chunk < nchunks && pd.Kv > 0; chunk += c->nparts) {
      int64_t n0 = chunk * per, nimg = tt_min64(per, g->N - n0), P = nimg * OHW;
      for (int64_t gi = 0; gi < g->G; ++gi) {
        tt_conv_pad_images(g, &pd, c->x, n0, nimg, gi, xpad);
        tt_conv_im2col_images(g, &pd, xpad, nimg, avx512, col);
        tt_conv_gather_go(g, c->go, n0, nimg, gi, stage);
        tt_sgemm_args_t a = {0};
        a.m = g->Og;
        a.n = pd.Kv;
        a.k = P;
        a.a = stage;
        a.a_dtype = TT_F32;
        a.rsa = P;
        a.csa = 1;
        a.b = col;
        a.b_dtype = TT_F32;
        a.rsb = 1;
        a.csb = P;
        a.c = acc + gi * g->Og * ldc;
        a.ldc = ldc;
        a.accumulate = 1;
        tt_status_t st = tt_sgemm(&a, c->inner_parallel);
        if (st) {
          tt_status_free(st);
          c->failed = 1;
          goto done;
        }
      }
    }
    if (compact) {
      for (int64_t o = 0; o < g->O; ++o) {
        for (int64_t ch = 0; ch < g->Cg; ++ch) {
          for (int64_t t = 0; t < pd.ntap; ++t) {
            gw[(o * g->Cg + ch) * KK + pd.tap[t]] = gwc[o * pd.Kv + ch * pd.ntap + t];
          }
        }
      }
    }
  }
done:
  tt_scratch_free(col);
  tt_scratch_free(stage);
  tt_scratch_free(xpad);
  tt_scratch_free(gwc);
  tt_conv_pads_free(&pd);
}
