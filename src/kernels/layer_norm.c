/* Layer normalisation, forward and backward (kernels.h), f32.
 *
 * x is viewed as [R, C]: C the product of the normalised (trailing) dims.
 * Forward, one pass over each row while it sits in L1:
 *   mean = sum(x) / C,  var = sum((x - mean)^2) / C,  rstd = 1/sqrt(var + eps),
 *   y = (x - mean) * rstd * w + b.
 * Backward, with xhat = (x - mean) * rstd and g = grad_out * w:
 *   dx = (g - mean(g) - xhat * mean(g * xhat)) * rstd,
 *   dw = sum over rows of grad_out * xhat,  db = sum over rows of grad_out.
 * The column sums are taken per chunk of rows into partials that are then
 * added in chunk order; the chunks follow from R alone, so the results do
 * not depend on the thread count.
 *
 * Why a kernel of its own: as IR primitives (mean and variance as keepdim
 * reductions, the elementwise rest fused around them) a layer norm ran as
 * nine kernels, forward and backward, each a pass over the activation, and
 * took ~0.35 ms a call on the GPT-style decoder's [2048, 128] rows, as
 * much as eager PyTorch's own kernels (docs/kernels.md). */
#include <math.h>
#include <stdlib.h>

#include "kernels/kernel_util.h"

#if defined(__GNUC__) && defined(__x86_64__) && !defined(__clang__) && \
    !defined(__SANITIZE_THREAD__)
#define TT_LN_CLONES                                                                   \
  __attribute__((target_clones("arch=x86-64-v4", "arch=x86-64-v3", "default"),         \
                 optimize("fp-contract=fast")))
#else
#define TT_LN_CLONES
#endif

typedef struct tt_ln_ctx_s {
  const float *x, *w, *b, *go, *mean_in, *rstd_in;
  float *y, *mean, *rstd, *dx;
  float *part; /* [nchunks, 2C]: per chunk, sum(go * xhat) then sum(go) */
  int64_t R, C, chunk;
  float eps;
} tt_ln_ctx_t;

/* Sum of a[i] - sub (squared when square) over [0, n) in 16 lanes, the
 * lanes folded, then the tail: the same order for every row. */
static TT_ALWAYS_INLINE float tt_ln_sum(const float *a, float sub, int square, int64_t n) {
  float acc[TT_ROW_LANES] = {0};
  int64_t i = 0;
  for (; i + TT_ROW_LANES <= n; i += TT_ROW_LANES)
    for (int l = 0; l < TT_ROW_LANES; ++l) {
      float v = a[i + l] - sub;
      acc[l] += square ? v * v : v;
    }
  float tail = 0.0f;
  for (; i < n; ++i) {
    float v = a[i] - sub;
    tail += square ? v * v : v;
  }
  return tt_row_lanes_fold(acc) + tail;
}

TT_LN_CLONES
static void tt_ln_forward_range(void *arg, int64_t begin, int64_t end) {
  const tt_ln_ctx_t *c = arg;
  const int64_t C = c->C;
  const float inv_c = 1.0f / (float)C;
  for (int64_t r = begin; r < end; ++r) {
    const float *x = c->x + r * C;
    float *y = c->y ? c->y + r * C : NULL;
    float mean = tt_ln_sum(x, 0.0f, 0, C) * inv_c;
    float var = tt_ln_sum(x, mean, 1, C) * inv_c;
    float rstd = 1.0f / sqrtf(var + c->eps);
    if (c->mean) {
      c->mean[r] = mean;
      c->rstd[r] = rstd;
    }
    if (!y) continue;
    const float *w = c->w, *b = c->b;
    if (w && b) {
      for (int64_t i = 0; i < C; ++i) y[i] = (x[i] - mean) * rstd * w[i] + b[i];
    } else if (w) {
      for (int64_t i = 0; i < C; ++i) y[i] = (x[i] - mean) * rstd * w[i];
    } else if (b) {
      for (int64_t i = 0; i < C; ++i) y[i] = (x[i] - mean) * rstd + b[i];
    } else {
      for (int64_t i = 0; i < C; ++i) y[i] = (x[i] - mean) * rstd;
    }
  }
}

/* One row of the backward: the chunk's column partials pw += go * xhat,
 * pb += go, and (when dx) the row's grad_x; w NULL: no weight. One pass
 * for the partials and the two row sums, one for dx. */
static TT_ALWAYS_INLINE void tt_ln_backward_row(const float *restrict x,
                                                const float *restrict go,
                                                const float *restrict w, float mean, float rstd,
                                                int64_t C, float *restrict pw,
                                                float *restrict pb, float *restrict dx) {
  float a[TT_ROW_LANES] = {0}, bx[TT_ROW_LANES] = {0};
  int64_t i = 0;
  for (; i + TT_ROW_LANES <= C; i += TT_ROW_LANES)
    for (int l = 0; l < TT_ROW_LANES; ++l) {
      float xh = (x[i + l] - mean) * rstd, gv = go[i + l];
      float g = w ? gv * w[i + l] : gv;
      pw[i + l] += gv * xh;
      pb[i + l] += gv;
      a[l] += g;
      bx[l] += g * xh;
    }
  float ta = 0.0f, tb = 0.0f;
  for (; i < C; ++i) {
    float xh = (x[i] - mean) * rstd, gv = go[i];
    float g = w ? gv * w[i] : gv;
    pw[i] += gv * xh;
    pb[i] += gv;
    ta += g;
    tb += g * xh;
  }
  if (!dx) return;
  float inv_c = 1.0f / (float)C;
  float mg = (tt_row_lanes_fold(a) + ta) * inv_c;
  float mgx = (tt_row_lanes_fold(bx) + tb) * inv_c;
  for (int64_t j = 0; j < C; ++j) {
    float xh = (x[j] - mean) * rstd;
    float g = w ? go[j] * w[j] : go[j];
    dx[j] = (g - mg - xh * mgx) * rstd;
  }
}

/* Chunk k's rows: dx, and the chunk's partial column sums. */
TT_LN_CLONES
static void tt_ln_backward_range(void *arg, int64_t begin, int64_t end) {
  const tt_ln_ctx_t *c = arg;
  const int64_t C = c->C;
  for (int64_t k = begin; k < end; ++k) {
    float *pw = c->part + k * 2 * C, *pb = pw + C;
    for (int64_t i = 0; i < 2 * C; ++i) pw[i] = 0.0f;
    int64_t r1 = tt_min64(c->R, (k + 1) * c->chunk);
    for (int64_t r = k * c->chunk; r < r1; ++r) {
      float *dx = c->dx ? c->dx + r * C : NULL;
      if (c->w)
        tt_ln_backward_row(c->x + r * C, c->go + r * C, c->w, c->mean_in[r], c->rstd_in[r], C,
                           pw, pb, dx);
      else
        tt_ln_backward_row(c->x + r * C, c->go + r * C, NULL, c->mean_in[r], c->rstd_in[r], C,
                           pw, pb, dx);
    }
  }
}

/* R and C of x for normalised dims [axis, rank). */
static tt_status_t tt_ln_geom(const char *op, const tt_view_t *x, int axis, int64_t *R,
                              int64_t *C) {
  TT_RETURN_IF_ERROR(tt_check_view(op, "input", x));
  if (x->dtype != TT_F32)
    return tt_status_make(TT_TYPE_ERROR, "%s: input must be float32, got %s", op,
                          tt_dtype_name(x->dtype));
  if (axis < 0 || axis >= x->shape.rank)
    return tt_status_make(TT_INVALID_ARGUMENT, "%s: axis %d out of range for rank %d", op, axis,
                          x->shape.rank);
  tt_shape_split(&x->shape, axis, R, C);
  return NULL;
}

/* v (if given) is a float32 view of n elements. */
static tt_status_t tt_ln_vec(const char *op, const char *what, const tt_view_t *v, int64_t n) {
  if (!v) return NULL;
  TT_RETURN_IF_ERROR(tt_check_view(op, what, v));
  if (v->dtype != TT_F32 || tt_view_numel(v) != n)
    return tt_status_make(TT_INVALID_ARGUMENT, "%s: %s must be float32 with %lld elements, got "
                          "%s with %lld", op, what, (long long)n, tt_dtype_name(v->dtype),
                          (long long)tt_view_numel(v));
  return NULL;
}

static int64_t tt_ln_grain(int64_t C) { return tt_max64(1, 16384 / tt_max64(C, 1)); }

tt_status_t tt_kernel_layer_norm(const tt_view_t *x, int axis, const tt_view_t *weight,
                                 const tt_view_t *bias, double eps, tt_view_t *y,
                                 tt_view_t *mean, tt_view_t *rstd) {
  static const char *op = "layer_norm";
  int64_t R = 0, C = 0;
  TT_RETURN_IF_ERROR(tt_ln_geom(op, x, axis, &R, &C));
  TT_RETURN_IF_ERROR(tt_ln_vec(op, "weight", weight, C));
  TT_RETURN_IF_ERROR(tt_ln_vec(op, "bias", bias, C));
  TT_RETURN_IF_ERROR(tt_ln_vec(op, "output", y, R * C));
  TT_RETURN_IF_ERROR(tt_ln_vec(op, "mean", mean, R));
  TT_RETURN_IF_ERROR(tt_ln_vec(op, "rstd", rstd, R));
  if (!y && !(mean && rstd))
    return tt_status_make(TT_INVALID_ARGUMENT, "%s: needs the output or both mean and rstd",
                          op);
  if ((mean == NULL) != (rstd == NULL))
    return tt_status_make(TT_INVALID_ARGUMENT, "%s: mean and rstd go together", op);
  tt_ln_ctx_t c = {.x = x->data, .w = weight ? weight->data : NULL,
                   .b = bias ? bias->data : NULL, .y = y ? y->data : NULL,
                   .mean = mean ? mean->data : NULL, .rstd = rstd ? rstd->data : NULL,
                   .R = R, .C = C, .eps = (float)eps};
  if (C == 0) {
    /* An empty row's mean and variance are 0/0. */
    for (int64_t r = 0; r < R && c.mean; ++r) c.mean[r] = c.rstd[r] = NAN;
    return NULL;
  }
  tt_parallel_for(R, tt_ln_grain(C), tt_ln_forward_range, &c);
  return NULL;
}

tt_status_t tt_kernel_layer_norm_backward(const tt_view_t *grad_out, const tt_view_t *x,
                                          int axis, const tt_view_t *mean,
                                          const tt_view_t *rstd, const tt_view_t *weight,
                                          tt_view_t *grad_x, tt_view_t *grad_weight,
                                          tt_view_t *grad_bias) {
  static const char *op = "layer_norm_backward";
  int64_t R = 0, C = 0;
  TT_RETURN_IF_ERROR(tt_ln_geom(op, x, axis, &R, &C));
  TT_RETURN_IF_ERROR(tt_ln_vec(op, "grad_out", grad_out, R * C));
  TT_RETURN_IF_ERROR(tt_ln_vec(op, "mean", mean, R));
  TT_RETURN_IF_ERROR(tt_ln_vec(op, "rstd", rstd, R));
  TT_RETURN_IF_ERROR(tt_ln_vec(op, "weight", weight, C));
  TT_RETURN_IF_ERROR(tt_ln_vec(op, "grad_input", grad_x, R * C));
  TT_RETURN_IF_ERROR(tt_ln_vec(op, "grad_weight", grad_weight, C));
  TT_RETURN_IF_ERROR(tt_ln_vec(op, "grad_bias", grad_bias, C));
  if (!grad_out || !mean || !rstd)
    return tt_status_make(TT_INVALID_ARGUMENT, "%s: grad_out, mean and rstd are required", op);
  /* Chunks of rows: at least 32, at most 256 chunks. */
  int64_t chunk = tt_max64(32, (R + 255) / 256);
  int64_t nchunks = R ? (R + chunk - 1) / chunk : 0;
  tt_ln_ctx_t c = {.x = x->data, .w = weight ? weight->data : NULL, .go = grad_out->data,
                   .mean_in = mean->data, .rstd_in = rstd->data,
                   .dx = grad_x ? grad_x->data : NULL, .R = R, .C = C, .chunk = chunk};
  float *part = NULL;
  if (nchunks && C) {
    part = tt_scratch_alloc((size_t)(nchunks * 2 * C) * sizeof(float));
    if (!part) return tt_status_make(TT_RESOURCE_EXHAUSTED, "%s: out of memory", op);
    c.part = part;
    tt_parallel_for_items(nchunks, tt_ln_backward_range, &c);
  }
  float *dw = grad_weight ? grad_weight->data : NULL, *db = grad_bias ? grad_bias->data : NULL;
  for (int64_t i = 0; i < C; ++i) {
    float sw = 0.0f, sb = 0.0f;
    for (int64_t k = 0; k < nchunks; ++k) {
      sw += part[k * 2 * C + i];
      sb += part[k * 2 * C + C + i];
    }
    if (dw) dw[i] = sw;
    if (db) db[i] = sb;
  }
  if (part) tt_scratch_free(part);
  return NULL;
}
