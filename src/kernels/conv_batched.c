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
 * with grad_out gathered into an f32 (Og x P) staging matrix. Materialising
 * costs K*P stores against Og*K*P multiply-adds, and the planes are small
 * by construction, so it stays in cache. F16/BF16 operands are widened to
 * f32 while gathering (the weight inside the GEMM's packs); results are
 * rounded once when stored.
 */
#include <stdlib.h>

#include "kernels/conv_internal.h"

/* Columns per GEMM the chunking aims for, and the largest im2col buffer
 * (floats) it allows unless one image alone needs more. */
#define TT_CONV_BATCH_COLS 2048
#define TT_CONV_BATCH_MAX_COL (1 << 22)
/* Output planes up to this many positions take the batched path. */
#define TT_CONV_BATCH_MAX_OHW 256

static _Atomic int tt_conv_batched_mode_ = -1;

void tt_conv_force_batched_for_test(int mode) { tt_conv_batched_mode_ = mode; }

int tt_conv_use_batched(const tt_conv_geom_t *g) {
  int mode = tt_conv_batched_mode_;
  if (mode >= 0) return mode;
  return g->N >= 2 && g->OH * g->OW <= TT_CONV_BATCH_MAX_OHW;
}

int64_t tt_conv_batch_images(const tt_conv_geom_t *g) {
  int64_t OHW = tt_max64(1, g->OH * g->OW);
  int64_t n = (TT_CONV_BATCH_COLS + OHW - 1) / OHW;
  n = tt_min64(n, TT_CONV_BATCH_MAX_COL / tt_max64(1, g->K * OHW));
  return tt_max64(1, tt_min64(n, g->N));
}

/* col (K x nimg*OHW) for images [n0, n0 + nimg), group gi. */
static void tt_conv_im2col_images(const tt_conv_geom_t *g, const tt_view_t *x,
                                  int64_t n0, int64_t nimg, int64_t gi, float *col) {
  int64_t OHW = g->OH * g->OW, P = nimg * OHW, HW = g->H * g->W;
  int64_t k = 0;
  for (int64_t c = 0; c < g->Cg; ++c) {
    for (int64_t i = 0; i < g->KH; ++i) {
      for (int64_t j = 0; j < g->KW; ++j, ++k) {
        int64_t ih0 = i * g->dh - g->ph, iw0 = j * g->dw - g->pw;
        int64_t ohlo, ohhi, owlo, owhi;
        tt_conv_range(g->OH, g->sh, ih0, g->H, &ohlo, &ohhi);
        tt_conv_range(g->OW, g->sw, iw0, g->W, &owlo, &owhi);
        if (owlo >= owhi) ohhi = ohlo; /* no column of this tap is inside */
        for (int64_t n = 0; n < nimg; ++n) {
          float *row = col + k * P + n * OHW;
          int64_t xoff = ((n0 + n) * g->C + gi * g->Cg + c) * HW;
          memset(row, 0, (size_t)(ohlo * g->OW) * sizeof(float));
          for (int64_t oh = ohlo; oh < ohhi; ++oh) {
            float *d = row + oh * g->OW;
            int64_t src = xoff + (oh * g->sh + ih0) * g->W + owlo * g->sw + iw0;
            int64_t len = owhi - owlo;
            for (int64_t t = 0; t < owlo; ++t) d[t] = 0.0f;
            if (g->sw == 1 && x->dtype == TT_F32) {
              memcpy(d + owlo, (const float *)x->data + src, (size_t)len * sizeof(float));
            } else if (x->dtype == TT_F32) {
              const float *s = (const float *)x->data + src;
              for (int64_t t = 0; t < len; ++t) d[owlo + t] = s[t * g->sw];
            } else {
              tt_load_f32(x->data, x->dtype, src, g->sw, len, d + owlo);
            }
            for (int64_t t = owhi; t < g->OW; ++t) d[t] = 0.0f;
          }
          memset(row + ohhi * g->OW, 0, (size_t)((g->OH - ohhi) * g->OW) * sizeof(float));
        }
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
  int64_t OHW = g->OH * g->OW, HW = g->H * g->W, img = g->C * HW;
  int64_t per = c->chunk_imgs, Pmax = per * OHW;
  int fwd = c->kind == TT_CONV_FWD;
  int out_f32 = c->out->dtype == TT_F32;
  float *col = (float *)tt_scratch_alloc((size_t)(g->K * Pmax) * sizeof(float));
  float *stage = (float *)tt_scratch_alloc((size_t)(g->Og * Pmax) * sizeof(float));
  float *tmp = fwd || out_f32 ? NULL
                              : (float *)tt_scratch_alloc((size_t)(per * img) * sizeof(float));
  if (!col || !stage || (!fwd && !out_f32 && !tmp)) {
    c->failed = 1;
    goto done;
  }
  const tt_view_t *w = c->w;
  size_t es = tt_dtype_size(w->dtype);
  for (int64_t chunk = begin; chunk < end; ++chunk) {
    int64_t n0 = chunk * per, nimg = tt_min64(per, g->N - n0), P = nimg * OHW;
    float *gx = NULL;
    if (!fwd) {
      gx = out_f32 ? (float *)c->out->data + n0 * img : tmp;
      memset(gx, 0, (size_t)(nimg * img) * sizeof(float));
    }
    for (int64_t gi = 0; gi < g->G; ++gi) {
      tt_sgemm_args_t a = {0};
      a.a = (const char *)w->data + (size_t)(gi * g->Og * g->K) * es;
      a.a_dtype = w->dtype;
      a.b_dtype = TT_F32;
      if (fwd) {
        tt_conv_im2col_images(g, c->x, n0, nimg, gi, col);
        a.m = g->Og;
        a.n = P;
        a.k = g->K;
        a.rsa = g->K;
        a.csa = 1;
        a.b = col;
        a.rsb = P;
        a.csb = 1;
        a.c = stage;
        a.ldc = P;
      } else {
        tt_conv_gather_go(g, c->go, n0, nimg, gi, stage);
        a.m = g->K;
        a.n = P;
        a.k = g->Og;
        a.rsa = 1;
        a.csa = g->K;
        a.b = stage;
        a.rsb = P;
        a.csb = 1;
        a.c = col;
        a.ldc = P;
      }
      tt_status_t st = tt_sgemm(&a, c->inner_parallel);
      if (st) {
        tt_status_free(st);
        c->failed = 1;
        goto done;
      }
      for (int64_t n = 0; n < nimg; ++n) {
        if (fwd) {
          for (int64_t o = 0; o < g->Og; ++o) {
            tt_store_f32(stage + o * P + n * OHW, OHW, c->out->data, c->out->dtype,
                         ((n0 + n) * g->O + gi * g->Og + o) * OHW);
          }
        } else {
          tt_conv_col2im_add(g, col + n * OHW, P, gx + n * img + gi * g->Cg * HW);
        }
      }
    }
    if (!fwd && !out_f32) tt_store_f32(tmp, nimg * img, c->out->data, c->out->dtype, n0 * img);
  }
done:
  tt_scratch_free(col);
  tt_scratch_free(stage);
  tt_scratch_free(tmp);
}

/* Backward-weight into partial buffers [begin, end): partial q sums the
 * chunks q, q + nparts, ... */
void tt_conv_batched_w_range(void *arg, int64_t begin, int64_t end) {
  tt_conv_ctx_t *c = (tt_conv_ctx_t *)arg;
  const tt_conv_geom_t *g = &c->g;
  int64_t OHW = g->OH * g->OW, per = c->chunk_imgs, Pmax = per * OHW;
  int64_t nchunks = (g->N + per - 1) / per;
  float *col = (float *)tt_scratch_alloc((size_t)(g->K * Pmax) * sizeof(float));
  float *stage = (float *)tt_scratch_alloc((size_t)(g->Og * Pmax) * sizeof(float));
  if (!col || !stage) {
    c->failed = 1;
    goto done;
  }
  for (int64_t part = begin; part < end; ++part) {
    float *gw = c->partials + part * g->O * g->K;
    memset(gw, 0, (size_t)(g->O * g->K) * sizeof(float));
    for (int64_t chunk = part; chunk < nchunks; chunk += c->nparts) {
      int64_t n0 = chunk * per, nimg = tt_min64(per, g->N - n0), P = nimg * OHW;
      for (int64_t gi = 0; gi < g->G; ++gi) {
        tt_conv_im2col_images(g, c->x, n0, nimg, gi, col);
        tt_conv_gather_go(g, c->go, n0, nimg, gi, stage);
        tt_sgemm_args_t a = {0};
        a.m = g->Og;
        a.n = g->K;
        a.k = P;
        a.a = stage;
        a.a_dtype = TT_F32;
        a.rsa = P;
        a.csa = 1;
        a.b = col;
        a.b_dtype = TT_F32;
        a.rsb = 1;
        a.csb = P;
        a.c = gw + gi * g->Og * g->K;
        a.ldc = g->K;
        a.accumulate = 1;
        tt_status_t st = tt_sgemm(&a, c->inner_parallel);
        if (st) {
          tt_status_free(st);
          c->failed = 1;
          goto done;
        }
      }
    }
  }
done:
  tt_scratch_free(col);
  tt_scratch_free(stage);
}
