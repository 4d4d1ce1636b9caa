/* 2-D pooling over NCHW (or CHW) planes: max (with flat h*W+w indices),
 * average, adaptive average, and their backward passes. Window rules are
 * PyTorch's (aten/src/ATen/native/cpu/MaxPoolKernel.cpp, AvgPoolKernel.cpp,
 * AdaptiveAvgPoolKernel.cpp). Every kernel works plane by plane, in
 * parallel over N*C planes; F32/F16/BF16 accumulate in float, F64 (and the
 * integer types max pooling accepts) in double. */
#include <stdlib.h>

#include "kernels/kernel_util.h"

typedef struct tt_planes_s {
  int64_t P, H, W, OH, OW; /* P = N*C planes */
} tt_planes_t;

/* Reads [N,]C,H,W geometry of x and y (same rank, same leading dims). */
static tt_status_t tt_pool_planes(const char *name, const tt_view_t *x,
                                  const tt_view_t *y, tt_planes_t *pl) {
  TT_RETURN_IF_ERROR(tt_check_view(name, "input", x));
  TT_RETURN_IF_ERROR(tt_check_view(name, "output", y));
  int r = x->shape.rank;
  if ((r != 3 && r != 4) || y->shape.rank != r) {
    return tt_status_make(TT_INVALID_ARGUMENT,
                          "%s: expected rank 3 or 4 input and output of the "
                          "same rank, got %d and %d",
                          name, r, (int)y->shape.rank);
  }
  for (int d = 0; d < r - 2; ++d) {
    if (x->shape.dims[d] != y->shape.dims[d]) {
      char b1[160], b2[160];
      return tt_status_make(TT_INVALID_ARGUMENT,
                            "%s: batch/channel dims differ: %s vs %s", name,
                            tt_dims_str(&x->shape, b1, sizeof b1),
                            tt_dims_str(&y->shape, b2, sizeof b2));
    }
  }
  if (x->dtype != y->dtype) {
    return tt_status_make(TT_TYPE_ERROR, "%s: dtypes differ (%s and %s)", name,
                          tt_dtype_name(x->dtype), tt_dtype_name(y->dtype));
  }
  pl->P = r == 4 ? x->shape.dims[0] * x->shape.dims[1] : x->shape.dims[0];
  pl->H = x->shape.dims[r - 2];
  pl->W = x->shape.dims[r - 1];
  pl->OH = y->shape.dims[r - 2];
  pl->OW = y->shape.dims[r - 1];
  return NULL;
}

/* PyTorch's pooling_output_shape. */
static int64_t tt_pool_out_size(int64_t in, int64_t k, int64_t pad,
                                int64_t stride, int64_t dil, int ceil_mode) {
  int64_t num = in + 2 * pad - dil * (k - 1) - 1 + (ceil_mode ? stride - 1 : 0);
  int64_t q = num >= 0 ? num / stride : -((-num + stride - 1) / stride);
  int64_t out = q + 1;
  if (ceil_mode && (out - 1) * stride >= in + pad) --out;
  return out;
}

static tt_status_t tt_pool_check_params(const char *name,
                                        const tt_pool2d_params_t *p, int is_avg,
                                        const tt_planes_t *pl) {
  if (!p) return tt_status_make(TT_INVALID_ARGUMENT, "%s: params is NULL", name);
  for (int d = 0; d < 2; ++d) {
    int64_t dil = p->dilation[d];
    if (is_avg && dil == 0) dil = 1;
    if (p->kernel[d] < 1 || p->stride[d] < 1 || dil < 1 || p->pad[d] < 0) {
      return tt_status_make(TT_INVALID_ARGUMENT,
                            "%s: kernel (%lld, %lld) and stride (%lld, %lld) "
                            "must be positive, padding non-negative",
                            name, (long long)p->kernel[0],
                            (long long)p->kernel[1], (long long)p->stride[0],
                            (long long)p->stride[1]);
    }
    if (is_avg && dil != 1) {
      return tt_status_make(TT_INVALID_ARGUMENT,
                            "%s: dilation must be 1 for average pooling", name);
    }
    int64_t eff = (p->kernel[d] - 1) * dil + 1;
    if (p->pad[d] > eff / 2) {
      return tt_status_make(TT_INVALID_ARGUMENT,
                            "%s: pad should be at most half of effective "
                            "kernel size, but got pad=%lld, kernel_size=%lld "
                            "and dilation=%lld",
                            name, (long long)p->pad[d],
                            (long long)p->kernel[d], (long long)dil);
    }
  }
  int64_t dh = is_avg ? 1 : p->dilation[0], dw = is_avg ? 1 : p->dilation[1];
  int64_t oh = tt_pool_out_size(pl->H, p->kernel[0], p->pad[0], p->stride[0],
                                dh, p->ceil_mode);
  int64_t ow = tt_pool_out_size(pl->W, p->kernel[1], p->pad[1], p->stride[1],
                                dw, p->ceil_mode);
  if (oh < 1 || ow < 1) {
    return tt_status_make(TT_INVALID_ARGUMENT,
                          "%s: input %lldx%lld is too small, output size "
                          "would be %lldx%lld",
                          name, (long long)pl->H, (long long)pl->W,
                          (long long)oh, (long long)ow);
  }
  if (oh != pl->OH || ow != pl->OW) {
    return tt_status_make(TT_INVALID_ARGUMENT,
                          "%s: output is %lldx%lld, expected %lldx%lld", name,
                          (long long)pl->OH, (long long)pl->OW, (long long)oh,
                          (long long)ow);
  }
  if (is_avg && p->divisor_override < 0) {
    return tt_status_make(TT_INVALID_ARGUMENT,
                          "%s: divisor_override must be positive, got %lld",
                          name, (long long)p->divisor_override);
  }
  return NULL;
}

typedef struct tt_pool_ctx_s {
  const tt_pool2d_params_t *p;
  tt_planes_t pl;
  const tt_view_t *in;
  tt_view_t *out;
  const tt_view_t *indices_in;
  tt_view_t *indices_out;
  int backward; /* adaptive pooling: backward pass */
  _Atomic int failed;
} tt_pool_ctx_t;

/* Scratch for one input and one output plane in double. */
typedef struct tt_planebuf_s {
  double *in, *out;
} tt_planebuf_t;

static int tt_planebuf_alloc(const tt_planes_t *pl, tt_planebuf_t *b) {
  b->in = (double *)malloc((size_t)tt_max64(pl->H * pl->W, 1) * sizeof(double));
  b->out = (double *)malloc((size_t)tt_max64(pl->OH * pl->OW, 1) * sizeof(double));
  if (b->in && b->out) return 1;
  free(b->in);
  free(b->out);
  return 0;
}

static void tt_planebuf_free(tt_planebuf_t *b) {
  free(b->in);
  free(b->out);
}

/* ---- max pool -------------------------------------------------------------- */

static void tt_max_pool_range(void *arg, int64_t begin, int64_t end) {
  tt_pool_ctx_t *c = (tt_pool_ctx_t *)arg;
  const tt_pool2d_params_t *p = c->p;
  const tt_planes_t *pl = &c->pl;
  int64_t HW = pl->H * pl->W, OHW = pl->OH * pl->OW;
  tt_planebuf_t b;
  if (!tt_planebuf_alloc(pl, &b)) {
    c->failed = 1;
    return;
  }
  int64_t *idx = c->indices_out ? (int64_t *)c->indices_out->data : NULL;
  for (int64_t q = begin; q < end; ++q) {
    tt_load_f64(c->in->data, c->in->dtype, q * HW, 1, HW, b.in);
    for (int64_t oh = 0; oh < pl->OH; ++oh) {
      int64_t ih0 = oh * p->stride[0] - p->pad[0];
      int64_t ih1 = tt_min64(ih0 + (p->kernel[0] - 1) * p->dilation[0] + 1, pl->H);
      while (ih0 < 0) ih0 += p->dilation[0];
      for (int64_t ow = 0; ow < pl->OW; ++ow) {
        int64_t iw0 = ow * p->stride[1] - p->pad[1];
        int64_t iw1 = tt_min64(iw0 + (p->kernel[1] - 1) * p->dilation[1] + 1, pl->W);
        while (iw0 < 0) iw0 += p->dilation[1];
        int64_t best = ih0 * pl->W + iw0;
        double m = -INFINITY;
        for (int64_t ih = ih0; ih < ih1; ih += p->dilation[0]) {
          for (int64_t iw = iw0; iw < iw1; iw += p->dilation[1]) {
            double v = b.in[ih * pl->W + iw];
            if (v > m || v != v) {
              m = v;
              best = ih * pl->W + iw;
            }
          }
        }
        b.out[oh * pl->OW + ow] = m;
        if (idx) idx[q * OHW + oh * pl->OW + ow] = best;
      }
    }
    tt_store_f64(b.out, OHW, c->out->data, c->out->dtype, q * OHW);
  }
  tt_planebuf_free(&b);
}

/* f32: each plane is copied into a -inf border wide enough for every
 * window (ceil_mode's overhang included), split by column into `stride`
 * phase planes, so every tap of an output row is one contiguous,
 * branch-free pass. Taps are visited in the window's row-major order with
 * the general loop's comparison (a NaN wins, a later NaN too), so values
 * and indices are the same as its; a border tap is -inf and never wins,
 * and a window whose taps are all -inf keeps its first in-plane tap, as
 * the general loop does. */
static TT_ALWAYS_INLINE float tt_max_nan_f32(float m, float v) {
  return (v > m || v != v) ? v : m;
}

/* One plane's geometry on the phase planes. */
typedef struct tt_phase_geom_s {
  int64_t OH, OW, W, KH, KW, sh, sw, dh, dw, ph, pw, Wq, phase;
} tt_phase_geom_t;

/* One output plane from its phase planes xq: values into y, and (when
 * best is set) flat input indices, starting from best0 (each window's
 * first in-plane tap). One call per plane, so the dispatch and the loop
 * set-up are paid per plane, not per output row and tap. */
TT_TARGET_CLONES
static void tt_max_pool_plane_f32(const float *xq, const tt_phase_geom_t *g, float *y,
                                  int64_t *best, const int64_t *best0) {
  const int64_t OW = g->OW;
  if (best) memcpy(best, best0, (size_t)(g->OH * OW) * sizeof(int64_t));
  for (int64_t oh = 0; oh < g->OH; ++oh) {
    float *acc = y + oh * OW;
    int64_t *bi = best ? best + oh * OW : NULL;
    for (int64_t ow = 0; ow < OW; ++ow) acc[ow] = -INFINITY;
    for (int64_t i = 0; i < g->KH; ++i) {
      int64_t prow = oh * g->sh + i * g->dh;
      for (int64_t j = 0; j < g->KW; ++j) {
        int64_t pc = j * g->dw;
        const float *r = xq + (pc % g->sw) * g->phase + prow * g->Wq + pc / g->sw;
        if (bi) {
          int64_t base = (prow - g->ph) * g->W + pc - g->pw, sw = g->sw;
          for (int64_t ow = 0; ow < OW; ++ow) {
            float v = r[ow];
            int take = v > acc[ow] || v != v;
            acc[ow] = take ? v : acc[ow];
            bi[ow] = take ? base + ow * sw : bi[ow];
          }
        } else {
          for (int64_t ow = 0; ow < OW; ++ow) acc[ow] = tt_max_nan_f32(acc[ow], r[ow]);
        }
      }
    }
  }
}

static void tt_max_pool_f32_range(void *arg, int64_t begin, int64_t end) {
  tt_pool_ctx_t *c = (tt_pool_ctx_t *)arg;
  const tt_pool2d_params_t *p = c->p;
  const tt_planes_t *pl = &c->pl;
  tt_phase_geom_t g = {.OH = pl->OH, .OW = pl->OW, .W = pl->W,
                       .KH = p->kernel[0], .KW = p->kernel[1],
                       .sh = p->stride[0], .sw = p->stride[1],
                       .dh = p->dilation[0], .dw = p->dilation[1],
                       .ph = p->pad[0], .pw = p->pad[1]};
  int64_t Hp = tt_max64(pl->H + 2 * g.ph, (g.OH - 1) * g.sh + (g.KH - 1) * g.dh + 1);
  int64_t Wp = tt_max64(pl->W + 2 * g.pw, (g.OW - 1) * g.sw + (g.KW - 1) * g.dw + 1);
  g.Wq = (Wp + g.sw - 1) / g.sw;
  g.phase = Hp * g.Wq;
  int64_t *idx = c->indices_out ? (int64_t *)c->indices_out->data : NULL;
  size_t nplane = ((size_t)(g.sw * g.phase) + 1) & ~(size_t)1; /* best0 stays 8-byte aligned */
  size_t nbest = idx ? (size_t)(g.OH * g.OW) : 0;
  float *xq = (float *)tt_scratch_alloc(nplane * sizeof(float) + nbest * sizeof(int64_t));
  if (!xq) {
    c->failed = 1;
    return;
  }
  int64_t *best0 = (int64_t *)(xq + nplane); /* each window's first in-plane tap */
  for (size_t k = 0; k < nplane; ++k) xq[k] = -INFINITY;
  for (int64_t oh = 0; oh < g.OH && idx; ++oh) {
    int64_t ih0 = oh * g.sh - g.ph;
    while (ih0 < 0) ih0 += g.dh;
    for (int64_t ow = 0; ow < g.OW; ++ow) {
      int64_t iw0 = ow * g.sw - g.pw;
      while (iw0 < 0) iw0 += g.dw;
      best0[oh * g.OW + ow] = ih0 * g.W + iw0;
    }
  }
  const float *x = (const float *)c->in->data;
  float *y = (float *)c->out->data;
  for (int64_t q = begin; q < end; ++q) {
    for (int64_t h = 0; h < pl->H; ++h) {
      const float *src = x + (q * pl->H + h) * pl->W;
      float *dst = xq + (h + g.ph) * g.Wq;
      if (g.sw == 1) {
        memcpy(dst + g.pw, src, (size_t)pl->W * sizeof(float));
        continue;
      }
      /* Padded column pc = w + pw goes to phase pc % sw, column pc / sw. */
      for (int64_t f = 0; f < g.sw; ++f) {
        int64_t w = ((f - g.pw) % g.sw + g.sw) % g.sw;
        float *d = dst + f * g.phase + (w + g.pw) / g.sw;
        for (int64_t k = 0; w + k * g.sw < pl->W; ++k) d[k] = src[w + k * g.sw];
      }
    }
    tt_max_pool_plane_f32(xq, &g, y + q * g.OH * g.OW, idx ? idx + q * g.OH * g.OW : NULL,
                          best0);
  }
  tt_scratch_free(xq);
}

tt_status_t tt_kernel_max_pool2d(const tt_view_t *x, const tt_pool2d_params_t *p,
                                 tt_view_t *out, tt_view_t *indices) {
  static const char *name = "max_pool2d";
  tt_pool_ctx_t c = {.p = p, .in = x, .out = out, .indices_out = indices};
  TT_RETURN_IF_ERROR(tt_pool_planes(name, x, out, &c.pl));
  TT_RETURN_IF_ERROR(tt_pool_check_params(name, p, 0, &c.pl));
  if (indices) {
    TT_RETURN_IF_ERROR(tt_check_view(name, "indices", indices));
    if (indices->dtype != TT_I64 || !tt_shape_equal(&indices->shape, &out->shape)) {
      return tt_status_make(TT_INVALID_ARGUMENT,
                            "%s: indices must be int64 with the output's shape",
                            name);
    }
  }
  if (tt_view_numel(out) == 0) return NULL;
  int f32 = x->dtype == TT_F32 && out->dtype == TT_F32;
  tt_parallel_for(c.pl.P, 1, f32 ? tt_max_pool_f32_range : tt_max_pool_range, &c);
  if (c.failed) return tt_status_make(TT_RESOURCE_EXHAUSTED, "%s: out of memory", name);
  return NULL;
}

static void tt_max_pool_bwd_range(void *arg, int64_t begin, int64_t end) {
  tt_pool_ctx_t *c = (tt_pool_ctx_t *)arg;
  const tt_planes_t *pl = &c->pl;
  int64_t HW = pl->H * pl->W, OHW = pl->OH * pl->OW;
  tt_planebuf_t b;
  if (!tt_planebuf_alloc(pl, &b)) {
    c->failed = 1;
    return;
  }
  const int64_t *idx = (const int64_t *)c->indices_in->data;
  for (int64_t q = begin; q < end; ++q) {
    for (int64_t i = 0; i < HW; ++i) b.in[i] = 0;
    tt_load_f64(c->in->data, c->in->dtype, q * OHW, 1, OHW, b.out);
    for (int64_t i = 0; i < OHW; ++i) b.in[idx[q * OHW + i]] += b.out[i];
    tt_store_f64(b.in, HW, c->out->data, c->out->dtype, q * HW);
  }
  tt_planebuf_free(&b);
}

tt_status_t tt_kernel_max_pool2d_backward(const tt_view_t *grad_out,
                                          const tt_view_t *indices,
                                          tt_view_t *grad_x) {
  static const char *name = "max_pool2d_backward";
  tt_pool_ctx_t c = {.in = grad_out, .out = grad_x, .indices_in = indices};
  TT_RETURN_IF_ERROR(tt_pool_planes(name, grad_x, grad_out, &c.pl));
  TT_RETURN_IF_ERROR(tt_check_view(name, "indices", indices));
  if (indices->dtype != TT_I64 || !tt_shape_equal(&indices->shape, &grad_out->shape)) {
    return tt_status_make(TT_INVALID_ARGUMENT,
                          "%s: indices must be int64 with grad_out's shape", name);
  }
  int64_t HW = c.pl.H * c.pl.W, n = tt_view_numel(indices);
  const int64_t *idx = (const int64_t *)indices->data;
  for (int64_t i = 0; i < n; ++i) {
    if (idx[i] < 0 || idx[i] >= HW) {
      return tt_status_make(TT_OUT_OF_RANGE,
                            "%s: index %lld out of range for a %lldx%lld plane",
                            name, (long long)idx[i], (long long)c.pl.H,
                            (long long)c.pl.W);
    }
  }
  if (tt_view_numel(grad_x) == 0) return NULL;
  tt_parallel_for(c.pl.P, 1, tt_max_pool_bwd_range, &c);
  if (c.failed) return tt_status_make(TT_RESOURCE_EXHAUSTED, "%s: out of memory", name);
  return NULL;
}

/* ---- average pool ------------------------------------------------------------ */

/* PyTorch's window for output (oh, ow): [ih0, ih1) x [iw0, iw1) clipped to
 * the input, and the divisor. Returns 0 for an empty window. */
static int tt_avg_window(const tt_pool2d_params_t *p, const tt_planes_t *pl,
                         int64_t oh, int64_t ow, int64_t *ih0, int64_t *ih1,
                         int64_t *iw0, int64_t *iw1, int64_t *divisor) {
  int64_t h0 = oh * p->stride[0] - p->pad[0];
  int64_t w0 = ow * p->stride[1] - p->pad[1];
  int64_t h1 = tt_min64(h0 + p->kernel[0], pl->H + p->pad[0]);
  int64_t w1 = tt_min64(w0 + p->kernel[1], pl->W + p->pad[1]);
  int64_t pool_size = (h1 - h0) * (w1 - w0);
  h0 = tt_max64(h0, 0);
  w0 = tt_max64(w0, 0);
  h1 = tt_min64(h1, pl->H);
  w1 = tt_min64(w1, pl->W);
  *ih0 = h0;
  *ih1 = h1;
  *iw0 = w0;
  *iw1 = w1;
  if (p->divisor_override) *divisor = p->divisor_override;
  else if (p->count_include_pad) *divisor = pool_size;
  else *divisor = (h1 - h0) * (w1 - w0);
  return h0 < h1 && w0 < w1;
}

static void tt_avg_pool_range(void *arg, int64_t begin, int64_t end) {
  tt_pool_ctx_t *c = (tt_pool_ctx_t *)arg;
  const tt_planes_t *pl = &c->pl;
  int64_t HW = pl->H * pl->W, OHW = pl->OH * pl->OW;
  int f32 = tt_class_of(c->in->dtype) == TT_CLASS_F32;
  tt_planebuf_t b;
  if (!tt_planebuf_alloc(pl, &b)) {
    c->failed = 1;
    return;
  }
  for (int64_t q = begin; q < end; ++q) {
    tt_load_f64(c->in->data, c->in->dtype, q * HW, 1, HW, b.in);
    for (int64_t oh = 0; oh < pl->OH; ++oh) {
      for (int64_t ow = 0; ow < pl->OW; ++ow) {
        int64_t h0, h1, w0, w1, div;
        double r = 0;
        if (tt_avg_window(c->p, pl, oh, ow, &h0, &h1, &w0, &w1, &div)) {
          if (f32) {
            float s = 0;
            for (int64_t h = h0; h < h1; ++h) {
              for (int64_t w = w0; w < w1; ++w) s += (float)b.in[h * pl->W + w];
            }
            r = s / (float)div;
          } else {
            double s = 0;
            for (int64_t h = h0; h < h1; ++h) {
              for (int64_t w = w0; w < w1; ++w) s += b.in[h * pl->W + w];
            }
            r = s / (double)div;
          }
        }
        b.out[oh * pl->OW + ow] = r;
      }
    }
    tt_store_f64(b.out, OHW, c->out->data, c->out->dtype, q * OHW);
  }
  tt_planebuf_free(&b);
}

static tt_status_t tt_avg_check_dtype(const char *name, const tt_view_t *x) {
  if (!tt_dtype_is_float(x->dtype)) {
    return tt_status_make(TT_TYPE_ERROR,
                          "%s: not implemented for dtype %s (floating point "
                          "only)",
                          name, tt_dtype_name(x->dtype));
  }
  return NULL;
}

tt_status_t tt_kernel_avg_pool2d(const tt_view_t *x, const tt_pool2d_params_t *p,
                                 tt_view_t *out) {
  static const char *name = "avg_pool2d";
  tt_pool_ctx_t c = {.p = p, .in = x, .out = out};
  TT_RETURN_IF_ERROR(tt_pool_planes(name, x, out, &c.pl));
  TT_RETURN_IF_ERROR(tt_avg_check_dtype(name, x));
  TT_RETURN_IF_ERROR(tt_pool_check_params(name, p, 1, &c.pl));
  if (tt_view_numel(out) == 0) return NULL;
  tt_parallel_for(c.pl.P, 1, tt_avg_pool_range, &c);
  if (c.failed) return tt_status_make(TT_RESOURCE_EXHAUSTED, "%s: out of memory", name);
  return NULL;
}

static void tt_avg_pool_bwd_range(void *arg, int64_t begin, int64_t end) {
  tt_pool_ctx_t *c = (tt_pool_ctx_t *)arg;
  const tt_planes_t *pl = &c->pl;
  int64_t HW = pl->H * pl->W, OHW = pl->OH * pl->OW;
  int f32 = tt_class_of(c->in->dtype) == TT_CLASS_F32;
  tt_planebuf_t b;
  if (!tt_planebuf_alloc(pl, &b)) {
    c->failed = 1;
    return;
  }
  for (int64_t q = begin; q < end; ++q) {
    tt_load_f64(c->in->data, c->in->dtype, q * OHW, 1, OHW, b.out);
    for (int64_t i = 0; i < HW; ++i) b.in[i] = 0;
    for (int64_t oh = 0; oh < pl->OH; ++oh) {
      for (int64_t ow = 0; ow < pl->OW; ++ow) {
        int64_t h0, h1, w0, w1, div;
        if (!tt_avg_window(c->p, pl, oh, ow, &h0, &h1, &w0, &w1, &div)) continue;
        double g = f32 ? (double)((float)b.out[oh * pl->OW + ow] / (float)div)
                       : b.out[oh * pl->OW + ow] / (double)div;
        for (int64_t h = h0; h < h1; ++h) {
          for (int64_t w = w0; w < w1; ++w) {
            double *d = &b.in[h * pl->W + w];
            *d = f32 ? (double)((float)*d + (float)g) : *d + g;
          }
        }
      }
    }
    tt_store_f64(b.in, HW, c->out->data, c->out->dtype, q * HW);
  }
  tt_planebuf_free(&b);
}

tt_status_t tt_kernel_avg_pool2d_backward(const tt_view_t *grad_out,
                                          const tt_pool2d_params_t *p,
                                          tt_view_t *grad_x) {
  static const char *name = "avg_pool2d_backward";
  tt_pool_ctx_t c = {.p = p, .in = grad_out, .out = grad_x};
  TT_RETURN_IF_ERROR(tt_pool_planes(name, grad_x, grad_out, &c.pl));
  TT_RETURN_IF_ERROR(tt_avg_check_dtype(name, grad_x));
  TT_RETURN_IF_ERROR(tt_pool_check_params(name, p, 1, &c.pl));
  if (tt_view_numel(grad_x) == 0) return NULL;
  tt_parallel_for(c.pl.P, 1, tt_avg_pool_bwd_range, &c);
  if (c.failed) return tt_status_make(TT_RESOURCE_EXHAUSTED, "%s: out of memory", name);
  return NULL;
}

/* ---- adaptive average pool --------------------------------------------------- */

static TT_ALWAYS_INLINE int64_t tt_adaptive_start(int64_t i, int64_t out, int64_t in) {
  return (i * in) / out;
}

static TT_ALWAYS_INLINE int64_t tt_adaptive_end(int64_t i, int64_t out, int64_t in) {
  return ((i + 1) * in + out - 1) / out;
}

static void tt_adaptive_range(void *arg, int64_t begin, int64_t end) {
  tt_pool_ctx_t *c = (tt_pool_ctx_t *)arg;
  const tt_planes_t *pl = &c->pl;
  int64_t HW = pl->H * pl->W, OHW = pl->OH * pl->OW;
  int f32 = tt_class_of(c->in->dtype) == TT_CLASS_F32;
  int backward = c->backward;
  tt_planebuf_t b;
  if (!tt_planebuf_alloc(pl, &b)) {
    c->failed = 1;
    return;
  }
  for (int64_t q = begin; q < end; ++q) {
    if (backward) {
      tt_load_f64(c->in->data, c->in->dtype, q * OHW, 1, OHW, b.out);
      for (int64_t i = 0; i < HW; ++i) b.in[i] = 0;
    } else {
      tt_load_f64(c->in->data, c->in->dtype, q * HW, 1, HW, b.in);
    }
    for (int64_t oh = 0; oh < pl->OH; ++oh) {
      int64_t h0 = tt_adaptive_start(oh, pl->OH, pl->H);
      int64_t h1 = tt_adaptive_end(oh, pl->OH, pl->H);
      for (int64_t ow = 0; ow < pl->OW; ++ow) {
        int64_t w0 = tt_adaptive_start(ow, pl->OW, pl->W);
        int64_t w1 = tt_adaptive_end(ow, pl->OW, pl->W);
        int64_t kh = h1 - h0, kw = w1 - w0;
        if (backward) {
          double g = f32 ? (double)((float)b.out[oh * pl->OW + ow] / (float)kh / (float)kw)
                         : b.out[oh * pl->OW + ow] / (double)kh / (double)kw;
          for (int64_t h = h0; h < h1; ++h) {
            for (int64_t w = w0; w < w1; ++w) {
              double *d = &b.in[h * pl->W + w];
              *d = f32 ? (double)((float)*d + (float)g) : *d + g;
            }
          }
        } else if (f32) {
          float s = 0;
          for (int64_t h = h0; h < h1; ++h) {
            for (int64_t w = w0; w < w1; ++w) s += (float)b.in[h * pl->W + w];
          }
          b.out[oh * pl->OW + ow] = s / (float)kh / (float)kw;
        } else {
          double s = 0;
          for (int64_t h = h0; h < h1; ++h) {
            for (int64_t w = w0; w < w1; ++w) s += b.in[h * pl->W + w];
          }
          b.out[oh * pl->OW + ow] = s / (double)kh / (double)kw;
        }
      }
    }
    if (backward) {
      tt_store_f64(b.in, HW, c->out->data, c->out->dtype, q * HW);
    } else {
      tt_store_f64(b.out, OHW, c->out->data, c->out->dtype, q * OHW);
    }
  }
  tt_planebuf_free(&b);
}

static tt_status_t tt_adaptive_check(const char *name, const tt_planes_t *pl,
                                     const tt_view_t *x) {
  TT_RETURN_IF_ERROR(tt_avg_check_dtype(name, x));
  if (pl->OH < 1 || pl->OW < 1 || pl->H < 1 || pl->W < 1) {
    return tt_status_make(TT_INVALID_ARGUMENT,
                          "%s: input %lldx%lld and output %lldx%lld must be "
                          "non-empty",
                          name, (long long)pl->H, (long long)pl->W,
                          (long long)pl->OH, (long long)pl->OW);
  }
  return NULL;
}

tt_status_t tt_kernel_adaptive_avg_pool2d(const tt_view_t *x, tt_view_t *out) {
  static const char *name = "adaptive_avg_pool2d";
  tt_pool_ctx_t c = {.in = x, .out = out};
  TT_RETURN_IF_ERROR(tt_pool_planes(name, x, out, &c.pl));
  TT_RETURN_IF_ERROR(tt_adaptive_check(name, &c.pl, x));
  tt_parallel_for(c.pl.P, 1, tt_adaptive_range, &c);
  if (c.failed) return tt_status_make(TT_RESOURCE_EXHAUSTED, "%s: out of memory", name);
  return NULL;
}

tt_status_t tt_kernel_adaptive_avg_pool2d_backward(const tt_view_t *grad_out,
                                                   tt_view_t *grad_x) {
  static const char *name = "adaptive_avg_pool2d_backward";
  tt_pool_ctx_t c = {.in = grad_out, .out = grad_x, .backward = 1};
  TT_RETURN_IF_ERROR(tt_pool_planes(name, grad_x, grad_out, &c.pl));
  TT_RETURN_IF_ERROR(tt_adaptive_check(name, &c.pl, grad_x));
  tt_parallel_for(c.pl.P, 1, tt_adaptive_range, &c);
  if (c.failed) return tt_status_make(TT_RESOURCE_EXHAUSTED, "%s: out of memory", name);
  return NULL;
}
