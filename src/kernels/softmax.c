/* softmax / log_softmax along one dim, forward and backward.
 *
 * x is viewed as [A, L, B] with L the softmax dim. B == 1 (the last dim, the
 * common case) works on contiguous rows; B > 1 works on panels of up to
 * TT_SM_COLS columns at once so the loops still run along memory. The
 * forward pass is the stable one: m = max, e = exp(x - m), s = sum e,
 * softmax = e * (1/s), log_softmax = (x - m) - log(s); all -inf rows give
 * NaN as in PyTorch. F32/F16/BF16 compute in float (F16/BF16 through a
 * float copy of the panel), F64 in double.
 * Backward: softmax  gx = y * (g - sum(g*y));
 *           log_softmax gx = g - exp(y) * sum(g).
 */
#include <stdlib.h>

#include "kernels/kernel_util.h"

#define TT_SM_COLS 64

/* Row sums are tt_row_sum_f32 and row maxima tt_row_minmax_f32
 * (kernel_util.h). */

/* e *= 1/sum: the softmax from a row's exps and their sum. */
static inline void tt_softmax_scale_(float *e, int64_t L, float sum) {
  float inv = 1.0f / sum;
  for (int64_t l = 0; l < L; ++l) e[l] *= inv;
}

/* Forward over a panel: x, y are [L, w] with row stride ld (elements).
 * Every loop is a plain elementwise or 16-lane loop so it vectorises. */
TT_TARGET_CLONES
static void tt_softmax_panel_f32(const float *x, float *y, int64_t L, int64_t w,
                                 int64_t ld, int log_out, const float *bias, float *p) {
  /* p (log_softmax of contiguous rows only, tt_kernel_log_softmax_probs):
   * the row's softmax as well, from the exps the sum already takes, so y is
   * the same bit for bit with or without it. */
  if (bias) {
    /* A contiguous row of x + bias (tt_kernel_softmax_bias): the sum is
     * added in tt_row_sum_f32's lanes and order, so the result equals the
     * add and the softmax run apart, bit for bit. */
    for (int64_t l = 0; l < L; ++l) y[l] = x[l] + bias[l];
    float mm = tt_row_minmax_f32(y, L, 1);
    if (log_out) {
      float sum;
      if (p) {
        for (int64_t l = 0; l < L; ++l) p[l] = tt_expf_fast(y[l] - mm);
        sum = tt_row_sum_f32(p, NULL, L); /* the same lanes and order */
      } else {
        float acc[TT_ROW_LANES] = {0};
        int64_t i = 0;
        for (; i + TT_ROW_LANES <= L; i += TT_ROW_LANES)
          for (int q = 0; q < TT_ROW_LANES; ++q) acc[q] += tt_expf_fast(y[i + q] - mm);
        sum = tt_row_lanes_fold(acc);
        for (; i < L; ++i) sum += tt_expf_fast(y[i] - mm);
      }
      float ls = logf(sum);
      for (int64_t l = 0; l < L; ++l) y[l] = (y[l] - mm) - ls;
      if (p) tt_softmax_scale_(p, L, sum);
    } else {
      for (int64_t l = 0; l < L; ++l) y[l] = tt_expf_fast(y[l] - mm);
      float inv = 1.0f / tt_row_sum_f32(y, NULL, L);
      for (int64_t l = 0; l < L; ++l) y[l] *= inv;
    }
    return;
  }
  if (w == 1 && ld == 1) {
    /* Contiguous row: exp into p when given, else into y (also for
     * log_softmax, whose last pass overwrites it), then a 16-lane sum. */
    float mm = tt_row_minmax_f32(x, L, 1);
    float *e = p ? p : y;
    for (int64_t l = 0; l < L; ++l) e[l] = tt_expf_fast(x[l] - mm);
    float sum = tt_row_sum_f32(e, NULL, L);
    int64_t l;
    if (log_out) {
      float ls = logf(sum);
      for (l = 0; l < L; ++l) y[l] = (x[l] - mm) - ls;
      if (p) tt_softmax_scale_(p, L, sum);
    } else {
      float inv = 1.0f / sum;
      for (l = 0; l < L; ++l) y[l] *= inv;
    }
    return;
  }
  float m[TT_SM_COLS], s[TT_SM_COLS];
  for (int64_t j = 0; j < w; ++j) {
    m[j] = -INFINITY;
    s[j] = 0.0f;
  }
  for (int64_t l = 0; l < L; ++l) {
    const float *xr = x + l * ld;
    for (int64_t j = 0; j < w; ++j) {
      float v = xr[j], mj = m[j];
      m[j] = (v > mj || v != v) && mj == mj ? v : mj; /* NaN sticks */
    }
  }
  for (int64_t l = 0; l < L; ++l) {
    const float *xr = x + l * ld;
    float *yr = y + l * ld;
    if (log_out) {
      for (int64_t j = 0; j < w; ++j) s[j] += tt_expf_fast(xr[j] - m[j]);
    } else {
      for (int64_t j = 0; j < w; ++j) {
        float e = tt_expf_fast(xr[j] - m[j]);
        yr[j] = e;
        s[j] += e;
      }
    }
  }
  if (log_out) {
    for (int64_t j = 0; j < w; ++j) s[j] = logf(s[j]);
    for (int64_t l = 0; l < L; ++l) {
      for (int64_t j = 0; j < w; ++j) y[l * ld + j] = (x[l * ld + j] - m[j]) - s[j];
    }
  } else {
    for (int64_t j = 0; j < w; ++j) s[j] = 1.0f / s[j];
    for (int64_t l = 0; l < L; ++l) {
      for (int64_t j = 0; j < w; ++j) y[l * ld + j] *= s[j];
    }
  }
}

static void tt_softmax_panel_f64(const double *x, double *y, int64_t L,
                                 int64_t w, int64_t ld, int log_out) {
  for (int64_t j = 0; j < w; ++j) {
    double m = -INFINITY, s = 0;
    int nan = 0;
    for (int64_t l = 0; l < L; ++l) {
      double v = x[l * ld + j];
      nan |= v != v;
      m = v > m ? v : m;
    }
    if (nan) m = NAN;
    for (int64_t l = 0; l < L; ++l) s += exp(x[l * ld + j] - m);
    if (log_out) {
      double ls = log(s);
      for (int64_t l = 0; l < L; ++l) y[l * ld + j] = (x[l * ld + j] - m) - ls;
    } else {
      for (int64_t l = 0; l < L; ++l) y[l * ld + j] = exp(x[l * ld + j] - m) / s;
    }
  }
}

/* Backward over a panel: g (grad_out), y (forward output), gx. */
TT_TARGET_CLONES
static void tt_softmax_bwd_panel_f32(const float *g, const float *y, float *gx,
                                     int64_t L, int64_t w, int64_t ld,
                                     int log_out) {
  if (w == 1 && ld == 1) {
    /* Contiguous row (softmax over the last dim): a 16-lane sum, then
     * one elementwise pass; both vectorise. */
    float sum = tt_row_sum_f32(g, log_out ? NULL : y, L);
    int64_t l;
    if (log_out) {
      for (l = 0; l < L; ++l) gx[l] = g[l] - tt_expf_fast(y[l]) * sum;
    } else {
      for (l = 0; l < L; ++l) gx[l] = y[l] * (g[l] - sum);
    }
    return;
  }
  float s[TT_SM_COLS];
  for (int64_t j = 0; j < w; ++j) s[j] = 0.0f;
  for (int64_t l = 0; l < L; ++l) {
    for (int64_t j = 0; j < w; ++j) {
      s[j] += log_out ? g[l * ld + j] : g[l * ld + j] * y[l * ld + j];
    }
  }
  for (int64_t l = 0; l < L; ++l) {
    for (int64_t j = 0; j < w; ++j) {
      int64_t k = l * ld + j;
      gx[k] = log_out ? g[k] - tt_expf_fast(y[k]) * s[j] : y[k] * (g[k] - s[j]);
    }
  }
}

static void tt_softmax_bwd_panel_f64(const double *g, const double *y,
                                     double *gx, int64_t L, int64_t w,
                                     int64_t ld, int log_out) {
  for (int64_t j = 0; j < w; ++j) {
    double s = 0;
    for (int64_t l = 0; l < L; ++l) {
      s += log_out ? g[l * ld + j] : g[l * ld + j] * y[l * ld + j];
    }
    for (int64_t l = 0; l < L; ++l) {
      int64_t k = l * ld + j;
      gx[k] = log_out ? g[k] - exp(y[k]) * s : y[k] * (g[k] - s);
    }
  }
}

typedef struct tt_softmax_ctx_s {
  const tt_view_t *x;  /* forward input, or grad_out */
  const tt_view_t *y;  /* backward: forward output */
  tt_view_t *out;
  int log_out;
  const float *bias; /* forward over contiguous f32 rows: added first */
  float *probs;      /* log_softmax over contiguous f32 rows: softmax too */
  int64_t A, L, B, nblk;
  _Atomic int failed;
} tt_softmax_ctx_t;

/* Item = (a, column block). Panels of non-native dtypes are converted to a
 * dense [L, w] buffer first. */
static void tt_softmax_range(void *arg, int64_t begin, int64_t end) {
  tt_softmax_ctx_t *c = (tt_softmax_ctx_t *)arg;
  tt_dtype_t dt = c->x->dtype;
  int native = dt == TT_F32 || dt == TT_F64;
  int64_t w_max = tt_min64(c->B, TT_SM_COLS);
  size_t es = dt == TT_F64 ? sizeof(double) : sizeof(float);
  int nbuf = c->y ? 3 : 2;
  char *buf = NULL;
  if (!native) {
    buf = (char *)malloc((size_t)(c->L * w_max) * es * (size_t)nbuf);
    if (!buf) {
      c->failed = 1;
      return;
    }
  }
  for (int64_t t = begin; t < end; ++t) {
    int64_t a = t / c->nblk, j0 = (t % c->nblk) * TT_SM_COLS;
    int64_t w = tt_min64(TT_SM_COLS, c->B - j0);
    int64_t base = a * c->L * c->B + j0;
    if (native) {
      size_t off = (size_t)base * es;
      const void *xp = (const char *)c->x->data + off;
      void *op = (char *)c->out->data + off;
      if (dt == TT_F32) {
        if (c->y) {
          tt_softmax_bwd_panel_f32((const float *)xp,
                                   (const float *)((const char *)c->y->data + off),
                                   (float *)op, c->L, w, c->B, c->log_out);
        } else {
          tt_softmax_panel_f32((const float *)xp, (float *)op, c->L, w, c->B,
                               c->log_out, c->bias, c->probs ? c->probs + base : NULL);
        }
      } else if (c->y) {
        tt_softmax_bwd_panel_f64((const double *)xp,
                                 (const double *)((const char *)c->y->data + off),
                                 (double *)op, c->L, w, c->B, c->log_out);
      } else {
        tt_softmax_panel_f64((const double *)xp, (double *)op, c->L, w, c->B,
                             c->log_out);
      }
      continue;
    }
    /* F16 / BF16: gather the panel into float buffers. */
    float *bx = (float *)buf, *bo = bx + c->L * w, *by = bo + c->L * w;
    for (int64_t l = 0; l < c->L; ++l) {
      tt_load_f32(c->x->data, dt, base + l * c->B, 1, w, bx + l * w);
      if (c->y) tt_load_f32(c->y->data, dt, base + l * c->B, 1, w, by + l * w);
    }
    if (c->y) {
      tt_softmax_bwd_panel_f32(bx, by, bo, c->L, w, w, c->log_out);
    } else {
      tt_softmax_panel_f32(bx, bo, c->L, w, w, c->log_out, NULL, NULL);
    }
    for (int64_t l = 0; l < c->L; ++l) {
      tt_store_f32(bo + l * w, w, c->out->data, dt, base + l * c->B);
    }
  }
  free(buf);
}

static tt_status_t tt_softmax_run(const char *name, const tt_view_t *x,
                                  const tt_view_t *y, int dim, int log_out,
                                  tt_view_t *out, const float *bias, float *probs) {
  TT_RETURN_IF_ERROR(tt_check_view(name, "input", x));
  TT_RETURN_IF_ERROR(tt_check_view(name, "out", out));
  if (y) TT_RETURN_IF_ERROR(tt_check_view(name, "output", y));
  if (!tt_dtype_is_float(x->dtype) || out->dtype != x->dtype ||
      (y && y->dtype != x->dtype)) {
    return tt_status_make(TT_TYPE_ERROR,
                          "%s: needs one floating-point dtype, got %s -> %s",
                          name, tt_dtype_name(x->dtype), tt_dtype_name(out->dtype));
  }
  if (!tt_shape_equal(&x->shape, &out->shape) ||
      (y && !tt_shape_equal(&x->shape, &y->shape))) {
    return tt_status_make(TT_INVALID_ARGUMENT, "%s: shapes differ", name);
  }
  int rank = x->shape.rank;
  if (!(rank == 0 && (dim == 0 || dim == -1)) && (dim < 0 || dim >= rank)) {
    return tt_status_make(TT_INVALID_ARGUMENT,
                          "%s: dim %d out of range for rank %d", name, dim, rank);
  }
  tt_softmax_ctx_t c = {.x = x, .y = y, .out = out, .log_out = log_out,
                        .bias = bias, .probs = probs, .A = 1, .L = 1, .B = 1};
  for (int d = 0; d < rank; ++d) {
    if (d < dim) c.A *= x->shape.dims[d];
    else if (d == dim) c.L = x->shape.dims[d];
    else c.B *= x->shape.dims[d];
  }
  if (tt_view_numel(x) == 0) return NULL;
  c.nblk = (c.B + TT_SM_COLS - 1) / TT_SM_COLS;
  int64_t per = c.L * tt_min64(c.B, TT_SM_COLS);
  tt_parallel_for(c.A * c.nblk, tt_max64(1, TT_GRAIN / per), tt_softmax_range, &c);
  if (c.failed) return tt_status_make(TT_RESOURCE_EXHAUSTED, "%s: out of memory", name);
  return NULL;
}

tt_status_t tt_kernel_softmax(const tt_view_t *x, int dim, int log,
                              tt_view_t *out) {
  return tt_softmax_run(log ? "log_softmax" : "softmax", x, NULL, dim, log, out, NULL, NULL);
}

tt_status_t tt_kernel_softmax_bias(const tt_view_t *x, const tt_view_t *bias, int dim, int log,
                                   tt_view_t *out) {
  const char *name = log ? "log_softmax" : "softmax";
  TT_RETURN_IF_ERROR(tt_check_view(name, "input", x));
  TT_RETURN_IF_ERROR(tt_check_view(name, "bias", bias));
  int rank = x->shape.rank;
  if (x->dtype != TT_F32 || bias->dtype != TT_F32 || rank < 1 || dim != rank - 1 ||
      tt_view_numel(bias) != x->shape.dims[rank - 1])
    return tt_status_make(TT_INVALID_ARGUMENT,
                          "%s with a bias: float32 rows along the last dim and a float32 "
                          "bias of the row length, got %s rank %d dim %d and %s of %lld",
                          name, tt_dtype_name(x->dtype), rank, dim,
                          tt_dtype_name(bias->dtype), (long long)tt_view_numel(bias));
  return tt_softmax_run(name, x, NULL, dim, log, out, (const float *)bias->data, NULL);
}

tt_status_t tt_kernel_log_softmax_probs(const tt_view_t *x, const tt_view_t *bias,
                                        tt_view_t *out, tt_view_t *probs) {
  const char *name = "log_softmax";
  TT_RETURN_IF_ERROR(tt_check_view(name, "input", x));
  TT_RETURN_IF_ERROR(tt_check_view(name, "probs", probs));
  if (bias) TT_RETURN_IF_ERROR(tt_check_view(name, "bias", bias));
  int rank = x->shape.rank;
  if (x->dtype != TT_F32 || rank < 1 || probs->dtype != TT_F32 ||
      !tt_shape_equal(&x->shape, &probs->shape) ||
      (bias && (bias->dtype != TT_F32 || tt_view_numel(bias) != x->shape.dims[rank - 1])))
    return tt_status_make(TT_INVALID_ARGUMENT,
                          "%s with probabilities: float32 rows along the last dim, probs of "
                          "the input's shape and a float32 bias of the row length, got %s "
                          "rank %d",
                          name, tt_dtype_name(x->dtype), rank);
  return tt_softmax_run(name, x, NULL, rank - 1, 1, out,
                        bias ? (const float *)bias->data : NULL, (float *)probs->data);
}

tt_status_t tt_kernel_softmax_backward(const tt_view_t *grad_out,
                                       const tt_view_t *y, int dim, int log,
                                       tt_view_t *grad_x) {
  return tt_softmax_run(log ? "log_softmax_backward" : "softmax_backward",
                        grad_out, y, dim, log, grad_x, NULL, NULL);
}
