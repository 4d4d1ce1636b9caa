/* 2-D convolution: forward, backward-input and backward-weight.
 *
 * F32/F16/BF16 go through the packed f32 GEMM, one GEMM per (image, group),
 * with the im2col matrix packed on the fly (never materialised) for the
 * forward and weight passes:
 *   forward:   out[g]  (Og x OHW)  = W[g] (Og x K) * col (K x OHW)
 *   bwd input: gcol    (K x OHW)   = W[g]^T * grad_out[g], then col2im
 *   bwd weight: gW[g]  (Og x K)   += grad_out[g] * col^T
 * with K = Cg*kh*kw. A 1x1 / stride 1 / no-padding convolution uses the
 * input itself as the column matrix; other stride-1 convolutions copy the
 * input planes into zero borders first, which turns every packed column
 * row into a plain copy (see "zero-padded planes" below). Images run in parallel when there
 * are enough of them, otherwise each GEMM is parallel. The weight gradient
 * sums over images into min(N, 4) partial buffers (image n goes to n % 4)
 * that are added in order, so it does not depend on the thread count.
 *
 * Several images with small output planes (at most 128 positions) take
 * conv_batched.c instead: one GEMM per chunk of images, so a 1x1 output
 * plane is not a one-column GEMM that repacks the whole weight.
 *
 * Stride-1 backward-input (padding <= dilation*(kernel-1), at least 128
 * input positions, every flipped tap reading the input) runs as the
 * forward convolution of grad_out with the flipped, transposed kernel
 * (tt_conv_bwd_in_as_fwd below), through the forward or batched paths.
 *
 * Convolutions with one input channel per group (depthwise, and plain
 * convolutions of single-channel inputs) use direct loops instead: their
 * GEMMs would be one row tall; F64 uses plain direct loops throughout.
 * Both live in conv_direct.c.
 */
#include <stdlib.h>

#include "kernels/conv_internal.h"

/* Validates shapes and parameters; fills g. x_shape/w_shape/o_shape are the
 * shapes of the three operands, whichever is being computed. */
static tt_status_t tt_conv_geom(const char *name, const tt_view_t *x,
                                const tt_view_t *w, const tt_view_t *o,
                                const tt_conv2d_params_t *p,
                                tt_conv_geom_t *g) {
  TT_RETURN_IF_ERROR(tt_check_view(name, "input", x));
  TT_RETURN_IF_ERROR(tt_check_view(name, "weight", w));
  TT_RETURN_IF_ERROR(tt_check_view(name, "output", o));
  if (!p) return tt_status_make(TT_INVALID_ARGUMENT, "%s: params is NULL", name);
  if (x->shape.rank != 4 || w->shape.rank != 4 || o->shape.rank != 4) {
    return tt_status_make(TT_INVALID_ARGUMENT,
                          "%s: input, weight and output must be rank 4 "
                          "(got %d, %d, %d)",
                          name, (int)x->shape.rank, (int)w->shape.rank,
                          (int)o->shape.rank);
  }
  if (!tt_dtype_is_float(x->dtype) || x->dtype != w->dtype ||
      x->dtype != o->dtype) {
    return tt_status_make(TT_TYPE_ERROR,
                          "%s: input (%s), weight (%s) and output (%s) must "
                          "share one floating-point dtype",
                          name, tt_dtype_name(x->dtype), tt_dtype_name(w->dtype),
                          tt_dtype_name(o->dtype));
  }
  for (int d = 0; d < 2; ++d) {
    if (p->stride[d] < 1 || p->dilation[d] < 1 || p->pad[d] < 0) {
      return tt_status_make(TT_INVALID_ARGUMENT,
                            "%s: stride (%lld, %lld) and dilation (%lld, %lld) "
                            "must be >= 1 and padding (%lld, %lld) >= 0",
                            name, (long long)p->stride[0],
                            (long long)p->stride[1], (long long)p->dilation[0],
                            (long long)p->dilation[1], (long long)p->pad[0],
                            (long long)p->pad[1]);
    }
  }
  g->N = x->shape.dims[0];
  g->C = x->shape.dims[1];
  g->H = x->shape.dims[2];
  g->W = x->shape.dims[3];
  g->O = w->shape.dims[0];
  g->Cg = w->shape.dims[1];
  g->KH = w->shape.dims[2];
  g->KW = w->shape.dims[3];
  g->G = p->groups;
  g->sh = p->stride[0];
  g->sw = p->stride[1];
  g->ph = p->pad[0];
  g->pw = p->pad[1];
  g->dh = p->dilation[0];
  g->dw = p->dilation[1];
  if (g->G < 1 || g->C % g->G != 0 || g->O % g->G != 0 ||
      g->Cg * g->G != g->C) {
    return tt_status_make(TT_INVALID_ARGUMENT,
                          "%s: groups=%lld does not fit input channels %lld, "
                          "output channels %lld and weight in-channels %lld",
                          name, (long long)g->G, (long long)g->C,
                          (long long)g->O, (long long)g->Cg);
  }
  g->Og = g->O / g->G;
  g->K = g->Cg * g->KH * g->KW;
  int64_t eh = g->H + 2 * g->ph - g->dh * (g->KH - 1) - 1;
  int64_t ew = g->W + 2 * g->pw - g->dw * (g->KW - 1) - 1;
  g->OH = eh < 0 ? 0 : eh / g->sh + 1;
  g->OW = ew < 0 ? 0 : ew / g->sw + 1;
  if (eh < 0 || ew < 0 || g->KH < 1 || g->KW < 1) {
    char b1[160], b2[160];
    return tt_status_make(TT_INVALID_ARGUMENT,
                          "%s: kernel %s does not fit padded input %s",
                          name, tt_dims_str(&w->shape, b1, sizeof b1),
                          tt_dims_str(&x->shape, b2, sizeof b2));
  }
  if (o->shape.dims[0] != g->N || o->shape.dims[1] != g->O ||
      o->shape.dims[2] != g->OH || o->shape.dims[3] != g->OW) {
    char b1[160];
    return tt_status_make(TT_INVALID_ARGUMENT,
                          "%s: output shape %s, expected [%lld, %lld, %lld, %lld]",
                          name, tt_dims_str(&o->shape, b1, sizeof b1),
                          (long long)g->N, (long long)g->O, (long long)g->OH,
                          (long long)g->OW);
  }
  return NULL;
}

static int tt_conv_is_pointwise(const tt_conv_geom_t *g) {
  return g->KH == 1 && g->KW == 1 && g->sh == 1 && g->sw == 1 && g->ph == 0 &&
         g->pw == 0;
}

/* ---- implicit im2col ----------------------------------------------------
 * The GEMMs read the column matrix col[(c*KH + i)*KW + j][oh*OW + ow] =
 * x[c][oh*sh - ph + i*dh][ow*sw - pw + j*dw] (0 in the padding) without
 * materialising it: these callbacks pack GEMM panels straight from x. A
 * panel's output positions are cut into runs inside one output row, so
 * each (tap, run) is one strided (for stride 1, contiguous) copy. */

typedef struct tt_conv_pack_s {
  const tt_conv_geom_t *g;
  const tt_view_t *x;
  int64_t xoff; /* element offset of the group's first channel */
} tt_conv_pack_t;

/* Valid range [lo, hi) of t in [0, len) with 0 <= iw0 + t*sw < W. */
static TT_ALWAYS_INLINE void tt_conv_valid(const tt_conv_geom_t *g, int64_t iw0,
                                           int64_t len, int64_t *lo, int64_t *hi) {
  if (g->sw == 1) {
    *lo = tt_min64(len, tt_max64(0, -iw0));
    *hi = tt_max64(*lo, tt_min64(len, g->W - iw0));
  } else {
    tt_conv_range(len, g->sw, iw0, g->W, lo, hi);
  }
}

static TT_ALWAYS_INLINE float tt_conv_ld(const tt_view_t *x, int64_t i) {
  switch (x->dtype) {
    case TT_F32: return ((const float *)x->data)[i];
    case TT_F16: return tt_f16_to_f32(((const uint16_t *)x->data)[i]);
    case TT_BF16: return tt_bf16_to_f32(((const uint16_t *)x->data)[i]);
    default: return (float)((const double *)x->data)[i];
  }
}

/* The taps (c, i, j) of k = tap, stepped without divisions. */
typedef struct tt_conv_tap_s {
  int64_t c, i, j;
} tt_conv_tap_t;

static TT_ALWAYS_INLINE tt_conv_tap_t tt_conv_tap(const tt_conv_geom_t *g, int64_t tap) {
  int64_t KK = g->KH * g->KW;
  tt_conv_tap_t t = {tap / KK, (tap % KK) / g->KW, tap % g->KW};
  return t;
}

static TT_ALWAYS_INLINE void tt_conv_tap_next(const tt_conv_geom_t *g, tt_conv_tap_t *t) {
  if (++t->j == g->KW) {
    t->j = 0;
    if (++t->i == g->KH) {
      t->i = 0;
      ++t->c;
    }
  }
}

/* Backward-weight: B(p, q) = col[q][p] (the transposed column matrix), q a
 * tap, p an output position. Filled in blocks of 16 positions so the panel
 * rows being written stay in L1. */
static void tt_conv_pack_bwd_w(const void *arg, int64_t p0, int64_t pc,
                               int64_t j0, int64_t w, int nr, float *dst) {
  const tt_conv_pack_t *cp = (const tt_conv_pack_t *)arg;
  const tt_conv_geom_t *g = cp->g;
  const tt_view_t *x = cp->x;
  int64_t HW = g->H * g->W;
  int64_t plane[TT_GEMM_PANEL_MAX], di[TT_GEMM_PANEL_MAX], dj[TT_GEMM_PANEL_MAX];
  tt_conv_tap_t tap = tt_conv_tap(g, j0);
  for (int64_t q = 0; q < w; ++q, tt_conv_tap_next(g, &tap)) {
    plane[q] = cp->xoff + tap.c * HW;
    di[q] = tap.i * g->dh - g->ph;
    dj[q] = tap.j * g->dw - g->pw;
  }
  int64_t p = p0, row = 0;
  while (row < pc) {
    int64_t oh = p / g->OW, ow = p % g->OW;
    int64_t len = tt_min64(tt_min64(pc - row, g->OW - ow), 16);
    float *d = dst + row * nr;
    for (int64_t q = 0; q < w; ++q) {
      int64_t ih = oh * g->sh + di[q];
      if (ih < 0 || ih >= g->H) {
        for (int64_t t = 0; t < len; ++t) d[t * nr + q] = 0.0f;
        continue;
      }
      int64_t iw0 = ow * g->sw + dj[q], lo, hi;
      tt_conv_valid(g, iw0, len, &lo, &hi);
      int64_t src = plane[q] + ih * g->W + iw0;
      for (int64_t t = 0; t < lo; ++t) d[t * nr + q] = 0.0f;
      if (x->dtype == TT_F32) {
        const float *sp = (const float *)x->data + src;
        for (int64_t t = lo; t < hi; ++t) d[t * nr + q] = sp[t * g->sw];
      } else {
        for (int64_t t = lo; t < hi; ++t) d[t * nr + q] = tt_conv_ld(x, src + t * g->sw);
      }
      for (int64_t t = hi; t < len; ++t) d[t * nr + q] = 0.0f;
    }
    for (int64_t t = 0; t < len; ++t) {
      for (int64_t q = w; q < nr; ++q) d[t * nr + q] = 0.0f;
    }
    row += len;
    p += len;
  }
}

/* ---- stride-1 convolutions on zero-padded planes ----------------------------
 * With stride 1 the column matrix is simple once the input planes sit in a
 * zero border: in a layout where output position (oh, ow) is at oh*Wp + ow
 * (Wp = W + 2*pw; columns ow >= OW are scratch), tap (c, i, j) reads the
 * padded plane of channel c at that index + i*dh*Wp + j*dw. Packing a GEMM
 * panel is then one contiguous copy per tap, with no bounds checks. */

typedef struct tt_conv_padded_s {
  const tt_conv_geom_t *g;
  const float *xpad; /* Cg padded planes of one image and group */
  int64_t plane, Wp; /* (H + 2*ph) * Wp, W + 2*pw */
} tt_conv_padded_t;

static int tt_conv_use_padded(const tt_conv_geom_t *g) {
  return g->sh == 1 && g->sw == 1 && !tt_conv_is_pointwise(g);
}

static tt_conv_padded_t tt_conv_padded_geom(const tt_conv_geom_t *g) {
  tt_conv_padded_t cp = {g, NULL, 0, g->W + 2 * g->pw};
  cp.plane = (g->H + 2 * g->ph) * cp.Wp;
  return cp;
}

/* Floats in the padded buffer: the last tap of the last channel reads up
 * to (KW-1)*dw past the end of its plane (scratch columns). */
static int64_t tt_conv_padded_size(const tt_conv_padded_t *cp) {
  return cp->g->Cg * cp->plane + (cp->g->KW - 1) * cp->g->dw + 1;
}

/* Copies the Cg channels at element offset xoff of x into zero borders. */
static void tt_conv_pad_group(const tt_conv_padded_t *cp, const tt_view_t *x,
                              int64_t xoff, float *xpad) {
  const tt_conv_geom_t *g = cp->g;
  memset(xpad, 0, (size_t)tt_conv_padded_size(cp) * sizeof(float));
  for (int64_t c = 0; c < g->Cg; ++c) {
    for (int64_t ih = 0; ih < g->H; ++ih) {
      tt_load_f32(x->data, x->dtype, xoff + (c * g->H + ih) * g->W, 1, g->W,
                  xpad + c * cp->plane + (ih + g->ph) * cp->Wp + g->pw);
    }
  }
}

static TT_ALWAYS_INLINE int64_t tt_conv_tap_offset(const tt_conv_padded_t *cp,
                                                   tt_conv_tap_t t) {
  return t.c * cp->plane + t.i * cp->g->dh * cp->Wp + t.j * cp->g->dw;
}

/* Backward-weight: B(p, q) = xpad[offset(tap q) + p], filled in blocks of
 * 16 positions so the panel rows being written stay in L1. */
static void tt_conv_pack_bwd_w_padded(const void *arg, int64_t p0, int64_t pc,
                                      int64_t j0, int64_t w, int nr, float *dst) {
  const tt_conv_padded_t *cp = (const tt_conv_padded_t *)arg;
  int64_t offs[TT_GEMM_PANEL_MAX];
  tt_conv_tap_t tap = tt_conv_tap(cp->g, j0);
  for (int64_t q = 0; q < w; ++q, tt_conv_tap_next(cp->g, &tap)) {
    offs[q] = tt_conv_tap_offset(cp, tap) + p0;
  }
  for (int64_t r0 = 0; r0 < pc; r0 += 16) {
    int64_t len = tt_min64(16, pc - r0);
    float *d = dst + r0 * nr;
    for (int64_t q = 0; q < w; ++q) {
      const float *src = cp->xpad + offs[q] + r0;
      for (int64_t t = 0; t < len; ++t) d[t * nr + q] = src[t];
    }
    for (int64_t t = 0; t < len; ++t) {
      for (int64_t q = w; q < nr; ++q) d[t * nr + q] = 0.0f;
    }
  }
}

/* gx[c][ih][iw] += col[k][p] over the taps k = (c, i, j) of Cg channels of
 * one f32 image gradient; col rows are ld floats apart, p = oh*OW + ow. */
static void tt_conv_col2im_add(const tt_conv_geom_t *g, const float *col, int64_t ld,
                               float *gx) {
  int64_t HW = g->H * g->W;
  for (int64_t c = 0; c < g->Cg; ++c) {
    for (int64_t i = 0; i < g->KH; ++i) {
      for (int64_t j = 0; j < g->KW; ++j) {
        const float *src = col + ((c * g->KH + i) * g->KW + j) * ld;
        int64_t ohlo, ohhi, owlo, owhi;
        tt_conv_range(g->OH, g->sh, i * g->dh - g->ph, g->H, &ohlo, &ohhi);
        tt_conv_range(g->OW, g->sw, j * g->dw - g->pw, g->W, &owlo, &owhi);
        for (int64_t oh = ohlo; oh < ohhi; ++oh) {
          int64_t ih = oh * g->sh - g->ph + i * g->dh;
          float *d = gx + c * HW + ih * g->W + owlo * g->sw - g->pw + j * g->dw;
          const float *s = src + oh * g->OW + owlo;
          for (int64_t t = 0; t < owhi - owlo; ++t) d[t * g->sw] += s[t];
        }
      }
    }
  }
}

/* ---- im2col + GEMM paths (F32 / F16 / BF16) ----------------------------- */

/* Backward-input for images [begin, end) (the forward is
 * tt_conv_forward_range in conv_fwd.c). */
static void tt_conv_images_range(void *arg, int64_t begin, int64_t end) {
  tt_conv_ctx_t *c = (tt_conv_ctx_t *)arg;
  const tt_conv_geom_t *g = &c->g;
  int64_t OHW = g->OH * g->OW, HW = g->H * g->W;
  int pointwise = tt_conv_is_pointwise(g);
  int out_f32 = c->out->dtype == TT_F32;
  int64_t img = g->C * HW;
  int need_col = c->kind == TT_CONV_BWD_IN && !pointwise;
  float *col = need_col ? (float *)tt_scratch_alloc((size_t)(g->K * OHW) * sizeof(float)) : NULL;
  float *tmp = out_f32 ? NULL : (float *)tt_scratch_alloc((size_t)img * sizeof(float));
  if ((need_col && !col) || (!out_f32 && !tmp)) {
    c->failed = 1;
    tt_scratch_free(col);
    tt_scratch_free(tmp);
    return;
  }
  size_t es = tt_dtype_size(c->out->dtype);
  for (int64_t n = begin; n < end; ++n) {
    float *dst = out_f32 ? (float *)c->out->data + n * img : tmp;
    if (c->kind == TT_CONV_BWD_IN && !pointwise) memset(dst, 0, (size_t)img * sizeof(float));
    for (int64_t gi = 0; gi < g->G; ++gi) {
      tt_sgemm_args_t a = {0};
      {
        a.m = g->K;
        a.n = OHW;
        a.k = g->Og;
        a.a = (const char *)c->w->data + (size_t)(gi * g->Og * g->K) * es;
        a.a_dtype = c->w->dtype;
        a.rsa = 1;
        a.csa = g->K;
        a.b = (const char *)c->go->data + (size_t)((n * g->O + gi * g->Og) * OHW) * es;
        a.b_dtype = c->go->dtype;
        a.rsb = OHW;
        a.csb = 1;
        a.c = pointwise ? dst + gi * g->Cg * HW : col;
        a.ldc = OHW;
      }
      tt_status_t st = tt_sgemm(&a, c->inner_parallel);
      if (st) {
        tt_status_free(st);
        c->failed = 1;
        break;
      }
      if (c->kind == TT_CONV_BWD_IN && !pointwise) {
        tt_conv_col2im_add(g, col, OHW, dst + gi * g->Cg * HW);
      }
    }
    if (!out_f32) tt_store_f32(tmp, img, c->out->data, c->out->dtype, n * img);
  }
  tt_scratch_free(col);
  tt_scratch_free(tmp);
}

/* Backward-weight for partial buffers [begin, end). */
static void tt_conv_bwd_w_range(void *arg, int64_t begin, int64_t end) {
  tt_conv_ctx_t *c = (tt_conv_ctx_t *)arg;
  const tt_conv_geom_t *g = &c->g;
  int64_t OHW = g->OH * g->OW, HW = g->H * g->W;
  int pointwise = tt_conv_is_pointwise(g);
  size_t es = tt_dtype_size(c->x->dtype);
  /* Stride 1: padded planes for x and a padded-layout copy of grad_out
   * (zero in the scratch columns, so they add nothing). */
  int padded = tt_conv_use_padded(g);
  tt_conv_padded_t cp = tt_conv_padded_geom(g);
  int64_t np = g->OH * cp.Wp;
  float *xpad = NULL, *gopad = NULL;
  if (padded) {
    xpad = (float *)tt_scratch_alloc((size_t)tt_conv_padded_size(&cp) * sizeof(float));
    gopad = (float *)tt_scratch_alloc((size_t)(g->Og * np) * sizeof(float));
    if (!xpad || !gopad) {
      c->failed = 1;
      tt_scratch_free(xpad);
      tt_scratch_free(gopad);
      return;
    }
    cp.xpad = xpad;
  }
  for (int64_t part = begin; part < end; ++part) {
    float *gw = c->partials + part * g->O * g->K;
    memset(gw, 0, (size_t)(g->O * g->K) * sizeof(float));
    for (int64_t n = part; n < g->N; n += c->nparts) {
      for (int64_t gi = 0; gi < g->G; ++gi) {
        int64_t xoff = (n * g->C + gi * g->Cg) * HW;
        tt_sgemm_args_t a = {0};
        if (padded) {
          tt_conv_pad_group(&cp, c->x, xoff, xpad);
          for (int64_t o = 0; o < g->Og; ++o) {
            for (int64_t oh = 0; oh < g->OH; ++oh) {
              float *d = gopad + o * np + oh * cp.Wp;
              tt_load_f32(c->go->data, c->go->dtype,
                          (n * g->O + gi * g->Og + o) * OHW + oh * g->OW, 1, g->OW, d);
              for (int64_t ow = g->OW; ow < cp.Wp; ++ow) d[ow] = 0.0f;
            }
          }
          a.m = g->Og;
          a.n = g->K;
          a.k = np;
          a.a = gopad;
          a.a_dtype = TT_F32;
          a.rsa = np;
          a.csa = 1;
          a.pack_b = tt_conv_pack_bwd_w_padded;
          a.pack_b_ctx = &cp;
          a.c = gw + gi * g->Og * g->K;
          a.ldc = g->K;
          a.accumulate = 1;
          tt_status_t st = tt_sgemm(&a, c->inner_parallel);
          if (st) {
            tt_status_free(st);
            c->failed = 1;
          }
          continue;
        }
        a.m = g->Og;
        a.n = g->K;
        a.k = OHW;
        a.a = (const char *)c->go->data + (size_t)((n * g->O + gi * g->Og) * OHW) * es;
        a.a_dtype = c->go->dtype;
        a.rsa = OHW;
        a.csa = 1;
        tt_conv_pack_t pk = {g, c->x, xoff};
        if (pointwise) {
          a.b = (const char *)c->x->data + (size_t)xoff * es;
          a.b_dtype = c->x->dtype;
        } else {
          a.pack_b = tt_conv_pack_bwd_w;
          a.pack_b_ctx = &pk;
        }
        a.rsb = 1;
        a.csb = OHW;
        a.c = gw + gi * g->Og * g->K;
        a.ldc = g->K;
        a.accumulate = 1;
        tt_status_t st = tt_sgemm(&a, c->inner_parallel);
        if (st) {
          tt_status_free(st);
          c->failed = 1;
        }
      }
    }
  }
  tt_scratch_free(xpad);
  tt_scratch_free(gopad);
}

/* ---- entry points ---------------------------------------------------------- */

static tt_status_t tt_conv_run(tt_conv_ctx_t *c);

/* Backward-input of a stride-1 convolution is the forward convolution of
 * grad_out with the flipped, transposed kernel
 *   W'[gi*Cg + c][o][i][j] = W[gi*Og + o][c][KH-1-i][KW-1-j]
 * at padding dh*(KH-1) - ph (same groups and dilation; its output plane
 * is H x W). Running it through the forward paths (phase planes, or
 * batched im2col) replaces the col2im scatter, whose overlapping
 * read-modify-write rows stall on small planes, with plain copies. Needs
 * ph <= dh*(KH-1) (and the same along W), and is not used when some tap
 * of W' would read only padding (a 3x3 kernel on a 1x1 plane): flipping
 * the whole weight would then cost more than the products that remain,
 * and col2im's GEMM already leaves those taps out. Nor below 128 input
 * positions in all (N*H*W: ResNet's 7x7 plane at batch 1), where the
 * flip, O*K element moves, costs about as much as the GEMM's
 * 2*O*K*N*H*W flops. */
/* The forward convolution that computes g's backward-input: grad_out
 * (O channels, OH x OW) in, the input's C x H x W out, padding
 * d*(K-1) - p. */
static tt_conv_geom_t tt_conv_flipped_geom(const tt_conv_geom_t *g) {
  tt_conv_geom_t t = *g;
  t.C = g->O;
  t.H = g->OH;
  t.W = g->OW;
  t.O = g->C;
  t.Cg = g->Og;
  t.Og = g->Cg;
  t.ph = g->dh * (g->KH - 1) - g->ph;
  t.pw = g->dw * (g->KW - 1) - g->pw;
  t.OH = g->H;
  t.OW = g->W;
  return t;
}

static int tt_conv_bwd_in_as_fwd_ok(const tt_conv_geom_t *g) {
  if (g->sh != 1 || g->sw != 1 || g->ph > g->dh * (g->KH - 1) ||
      g->pw > g->dw * (g->KW - 1) || g->N * g->H * g->W < 128) {
    return 0;
  }
  tt_conv_geom_t t = tt_conv_flipped_geom(g);
  return tt_conv_all_taps_read_input(&t);
}

static tt_status_t tt_conv_bwd_in_as_fwd(tt_conv_ctx_t *c) {
  const tt_conv_geom_t *g = &c->g;
  tt_conv_geom_t t = tt_conv_flipped_geom(g);
  t.K = t.Cg * g->KH * g->KW;
  int64_t KK = g->KH * g->KW;
  /* Blocks of 16 weight rows are widened into rows (L2-resident), then
   * written out channel by channel, so both sides stream. */
  enum { TT_FLIP_ROWS = 16 };
  float *wt = (float *)tt_scratch_alloc((size_t)(g->O * g->K + TT_FLIP_ROWS * g->K) *
                                        sizeof(float));
  if (!wt) {
    return tt_status_make(TT_RESOURCE_EXHAUSTED, "conv2d_backward_input: out of memory");
  }
  float *rows = wt + g->O * g->K;
  for (int64_t gi = 0; gi < g->G; ++gi) {
    for (int64_t o0 = 0; o0 < g->Og; o0 += TT_FLIP_ROWS) {
      int64_t no = tt_min64(TT_FLIP_ROWS, g->Og - o0);
      tt_load_f32(c->w->data, c->w->dtype, (gi * g->Og + o0) * g->K, 1, no * g->K, rows);
      for (int64_t ch = 0; ch < g->Cg; ++ch) {
        float *d = wt + ((gi * g->Cg + ch) * g->Og + o0) * KK;
        for (int64_t o = 0; o < no; ++o, d += KK) {
          const float *s = rows + o * g->K + ch * KK;
          for (int64_t q = 0; q < KK; ++q) d[KK - 1 - q] = s[q]; /* (i,j) -> (KH-1-i, KW-1-j) */
        }
      }
    }
  }
  tt_view_t wv = {.data = wt, .dtype = TT_F32};
  wv.shape.rank = 4;
  wv.shape.dims[0] = t.O;
  wv.shape.dims[1] = t.Cg;
  wv.shape.dims[2] = g->KH;
  wv.shape.dims[3] = g->KW;
  tt_conv_ctx_t f = {.kind = TT_CONV_FWD, .g = t, .x = c->go, .w = &wv, .out = c->out};
  tt_status_t st = tt_conv_run(&f);
  tt_scratch_free(wt);
  return st;
}


static _Atomic int tt_conv_bwd_in_col2im_ = 0;
static _Atomic int tt_conv_dense_off_ = 0;

void tt_conv_force_no_dense_for_test(int off) { tt_conv_dense_off_ = off; }

void tt_conv_force_col2im_for_test(int on) { tt_conv_bwd_in_col2im_ = on; }

static tt_status_t tt_conv_run(tt_conv_ctx_t *c) {
  const tt_conv_geom_t *g = &c->g;
  int64_t nt = tt_parallel_width();
  int64_t items = c->kind == TT_CONV_FWD    ? g->N * g->O
                  : c->kind == TT_CONV_BWD_IN ? g->N * g->C
                                              : g->O;
  if (tt_view_numel(c->out) == 0) return NULL;
  if (c->kind == TT_CONV_BWD_W && g->N == 0) return tt_kernel_fill(0.0, c->out);
  if (c->out->dtype == TT_F64) {
    tt_parallel_for(items, 1, tt_conv_f64_range, c);
    if (c->kind == TT_CONV_FWD) tt_conv_run_epilogue(c, 0, tt_view_numel(c->out));
    return NULL;
  }
  if (!tt_conv_dense_off_) {
    /* The pass's two operands: (x or grad_out) and (w, or x for BWD_W). */
    const tt_view_t *a = c->kind == TT_CONV_FWD ? c->x : c->go;
    const tt_view_t *b = c->kind == TT_CONV_BWD_W ? c->x : c->w;
    if (tt_conv_dense_ok(g, a, b, c->out))
      return c->kind == TT_CONV_BWD_W ? tt_conv_dense_bwd_w(c) : tt_conv_dense_run(c);
  }
  if (c->kind == TT_CONV_BWD_IN && g->Cg > 1 && tt_conv_bwd_in_as_fwd_ok(g) &&
      !tt_conv_bwd_in_col2im_) {
    return tt_conv_bwd_in_as_fwd(c);
  }
  /* An f32 forward MKL can take: explicit im2col chunks for it. */
  int wide = c->kind == TT_CONV_FWD && tt_blas_may_take_f32() && c->x->dtype == TT_F32 &&
             c->w->dtype == TT_F32;
  int batched = g->Cg > 1 && tt_conv_use_batched(g, wide);
  int64_t units = g->N; /* images, or chunks of images (batched) */
  if (batched) {
    c->chunk_imgs = tt_conv_batch_images(g, wide);
    units = (g->N + c->chunk_imgs - 1) / c->chunk_imgs;
  }
  if (g->Cg == 1) {
    tt_parallel_for(items, 1, tt_conv_direct_range_fn(g, c->kind), c);
  } else if (c->kind != TT_CONV_BWD_W) {
    int outer = units >= 4 * nt || (units >= nt && units % nt == 0);
    c->inner_parallel = !outer;
    tt_range_fn_t fn = batched ? tt_conv_batched_range
                       : c->kind == TT_CONV_FWD ? tt_conv_forward_range
                                                : tt_conv_images_range;
    tt_parallel_for(units, 1, fn, c);
  } else {
    c->nparts = tt_min64(units, 4);
    int64_t per = g->O * g->K;
    c->partials = (float *)tt_scratch_alloc((size_t)(c->nparts * per) * sizeof(float));
    if (!c->partials) {
      return tt_status_make(TT_RESOURCE_EXHAUSTED,
                            "conv2d_backward_weight: out of memory");
    }
    tt_range_fn_t fn = batched ? tt_conv_batched_w_range : tt_conv_bwd_w_range;
    c->inner_parallel = c->nparts == 1;
    if (c->nparts == 1) {
      fn(c, 0, 1);
    } else {
      tt_parallel_for(c->nparts, 1, fn, c);
    }
    for (int64_t p = 1; p < c->nparts; ++p) {
      const float *src = c->partials + p * per;
      for (int64_t q = 0; q < per; ++q) c->partials[q] += src[q];
    }
    tt_store_f32(c->partials, per, c->out->data, c->out->dtype, 0);
    tt_scratch_free(c->partials);
  }
  if (c->failed) {
    return tt_status_make(TT_RESOURCE_EXHAUSTED, "conv2d: out of memory");
  }
  return NULL;
}

/* Epilogue pieces: about this many elements per parallel chunk. */
#define TT_CONV_EPI_GRAIN 16384

typedef struct tt_conv_epi_span_s {
  const tt_epilogue_t *epi;
  int64_t base, stride, width;
} tt_conv_epi_span_t;

static void tt_conv_epi_span_range(void *arg, int64_t begin, int64_t end) {
  const tt_conv_epi_span_t *s = (const tt_conv_epi_span_t *)arg;
  s->epi->fn(s->epi->ctx, s->base + begin, s->base + end);
}

static void tt_conv_epi_rows_range(void *arg, int64_t begin, int64_t end) {
  const tt_conv_epi_span_t *s = (const tt_conv_epi_span_t *)arg;
  for (int64_t r = begin; r < end; ++r) {
    int64_t b = s->base + r * s->stride;
    s->epi->fn(s->epi->ctx, b, b + s->width);
  }
}

void tt_conv_run_epilogue(const tt_conv_ctx_t *c, int64_t begin, int64_t end) {
  if (!c->epi || end <= begin || c->failed) return;
  tt_conv_epi_span_t s = {c->epi, begin, 0, 0};
  tt_parallel_for(end - begin, TT_CONV_EPI_GRAIN, tt_conv_epi_span_range, &s);
}

void tt_conv_run_epilogue_rows(const tt_conv_ctx_t *c, int64_t base, int64_t rows,
                               int64_t stride, int64_t width) {
  if (!c->epi || rows <= 0 || width <= 0 || c->failed) return;
  if (width == stride) {
    tt_conv_run_epilogue(c, base, base + rows * width);
    return;
  }
  tt_conv_epi_span_t s = {c->epi, base, stride, width};
  tt_parallel_for(rows, (TT_CONV_EPI_GRAIN + width - 1) / width, tt_conv_epi_rows_range, &s);
}

tt_status_t tt_kernel_conv2d(const tt_view_t *x, const tt_view_t *w,
                             const tt_conv2d_params_t *p, tt_view_t *out) {
  return tt_kernel_conv2d_epilogue(x, w, p, out, NULL);
}

tt_status_t tt_kernel_conv2d_epilogue(const tt_view_t *x, const tt_view_t *w,
                                      const tt_conv2d_params_t *p, tt_view_t *out,
                                      const tt_epilogue_t *epi) {
  tt_conv_ctx_t c = {.kind = TT_CONV_FWD, .x = x, .w = w, .out = out, .epi = epi};
  TT_RETURN_IF_ERROR(tt_conv_geom("conv2d", x, w, out, p, &c.g));
  return tt_conv_run(&c);
}

tt_status_t tt_kernel_conv2d_backward_input(const tt_view_t *grad_out,
                                            const tt_view_t *w,
                                            const tt_conv2d_params_t *p,
                                            tt_view_t *grad_x) {
  tt_conv_ctx_t c = {.kind = TT_CONV_BWD_IN, .w = w, .go = grad_out,
                     .out = grad_x};
  TT_RETURN_IF_ERROR(
      tt_conv_geom("conv2d_backward_input", grad_x, w, grad_out, p, &c.g));
  return tt_conv_run(&c);
}

tt_status_t tt_kernel_conv2d_backward_weight(const tt_view_t *grad_out,
                                             const tt_view_t *x,
                                             const tt_conv2d_params_t *p,
                                             tt_view_t *grad_w) {
  tt_conv_ctx_t c = {.kind = TT_CONV_BWD_W, .x = x, .go = grad_out,
                     .out = grad_w};
  TT_RETURN_IF_ERROR(
      tt_conv_geom("conv2d_backward_weight", x, grad_w, grad_out, p, &c.g));
  return tt_conv_run(&c);
}
