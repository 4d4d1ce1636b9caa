/* StableHLO lowerings of the reductions and neural-network ops: REDUCE,
 * SCAN, DOT, the convolutions (forward and both backward passes as
 * convolutions), pooling (reduce_window; adaptive pooling as products with
 * constant averaging matrices), softmax and RNG. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "backends/stablehlo/emit_internal.h"

static int tt_shlo_is_half(tt_dtype_t dt) { return dt == TT_F16 || dt == TT_BF16; }

/* The dtype a sum or product of dt accumulates in (as the kernels do). */
static tt_dtype_t tt_shlo_acc(tt_dtype_t dt) { return tt_shlo_is_half(dt) ? TT_F32 : dt; }

static tt_shv_t tt_shlo_fail_unimpl(tt_shlo_t *c, const char *what, long long v) {
  tt_shlo_fail(c, tt_status_make(TT_UNIMPLEMENTED, "stablehlo: %s %lld has no lowering", what, v));
  return -1;
}

/* Broadcasts a value reduced over the bit-mask dims back to shape s. */
static tt_shv_t tt_shlo_unreduce(tt_shlo_t *c, tt_shv_t v, uint32_t mask, const tt_shape_t *s) {
  int64_t dims[TT_MAX_RANK];
  int n = 0;
  for (int d = 0; d < s->rank; ++d)
    if (!(mask & (1u << d))) dims[n++] = d;
  return tt_shlo_bcast_dims(c, v, s, dims);
}

/* ---- REDUCE ---- */

static tt_shv_t tt_shlo_lower_reduce(tt_shlo_t *c, const tt_shlo_instr_t *ins) {
  const tt_instr_t *in = ins->in;
  tt_reduce_attrs_t ra;
  TT_ATTRS(in, &ra);
  tt_shv_t x = ins->x[0];
  if (tt_shlo_bad(c, 1, &x)) return -1;
  tt_reduce_op_t op = (tt_reduce_op_t)ra.op;
  uint32_t mask = (uint32_t)ra.dims_mask;
  tt_dtype_t out_dt = (tt_dtype_t)ra.dtype;
  const tt_shape_t xs = *tt_shlo_shape(c, x);
  tt_dtype_t xdt = tt_shlo_dtype(c, x);
  tt_shv_t r = -1;
  switch (op) {
    case TT_RED_SUM:
    case TT_RED_MEAN:
    case TT_RED_PROD: {
      tt_dtype_t acc = tt_shlo_acc(out_dt == TT_BOOL ? TT_I64 : out_dt);
      tt_shv_t xv = tt_shlo_convert(c, x, acc);
      r = tt_shlo_reduce(c, xv, mask, op == TT_RED_PROD ? "stablehlo.multiply" : "stablehlo.add",
                         tt_shlo_scalar(c, acc, op == TT_RED_PROD ? 1 : 0));
      if (op == TT_RED_MEAN) {
        double count = 1;
        for (int d = 0; d < xs.rank; ++d)
          if (mask & (1u << d)) count *= (double)xs.dims[d];
        r = tt_shlo_bin_k(c, "divide", r, count);
      }
      break;
    }
    case TT_RED_MAX:
    case TT_RED_MIN: {
      int mx = op == TT_RED_MAX;
      const char *body = xdt == TT_BOOL ? (mx ? "stablehlo.or" : "stablehlo.and")
                                        : (mx ? "stablehlo.maximum" : "stablehlo.minimum");
      r = tt_shlo_reduce(c, x, mask, body, mx ? tt_shlo_lowest(c, xdt) : tt_shlo_highest(c, xdt));
      break;
    }
    case TT_RED_ARGMAX:
    case TT_RED_ARGMIN: {
      int dim = -1;
      for (int d = 0; d < xs.rank; ++d)
        if (mask & (1u << d)) dim = dim < 0 ? d : -2;
      if (xs.rank == 0) {
        tt_shape_t s0 = {0};
        r = tt_shlo_const_i(c, TT_I64, &s0, 0);
        break;
      }
      if (dim < 0) {
        tt_shlo_fail(c, tt_status_make(TT_UNIMPLEMENTED,
                                       "stablehlo: argmax/argmin over dims mask 0x%x (one dim "
                                       "expected)", mask));
        return -1;
      }
      tt_shv_t idx = tt_shlo_iota(c, TT_I64, &xs, dim);
      tt_shv_t init_v = op == TT_RED_ARGMAX ? tt_shlo_lowest(c, xdt) : tt_shlo_highest(c, xdt);
      tt_shv_t init_i = tt_shlo_scalar(c, TT_I64, 0);
      tt_shape_t s0 = {0};
      init_i = tt_shlo_const_i(c, TT_I64, &s0, INT64_MAX);
      tt_shv_t args[4] = {x, idx, init_v, init_i};
      if (tt_shlo_bad(c, 4, args)) return -1;
      int32_t ssa = tt_shlo_op_begin(c, "stablehlo.reduce", 2, 4, args);
      tt_shlo_region_select_index(c, 1, op == TT_RED_ARGMAX ? 0 : 1, xdt, TT_I64);
      tt_shape_t out = {0};
      for (int d = 0; d < xs.rank; ++d)
        if (d != dim) out.dims[out.rank++] = xs.dims[d];
      tt_shlo_attr_t a = {0};
      int64_t dd = dim;
      tt_shlo_attr_i64s(&a, "dimensions", &dd, 1);
      tt_dtype_t dts[2] = {xdt, TT_I64};
      tt_shape_t shapes[2] = {out, out};
      tt_shv_t v0 = tt_shlo_op_end(c, ssa, a.s, 4, args, 2, dts, shapes);
      r = v0 < 0 ? -1 : v0 + 1;
      break;
    }
    case TT_RED_ANY:
    case TT_RED_ALL: {
      tt_shv_t b = tt_shlo_convert(c, x, TT_BOOL);
      r = tt_shlo_reduce(c, b, mask, op == TT_RED_ANY ? "stablehlo.or" : "stablehlo.and",
                         tt_shlo_scalar(c, TT_BOOL, op == TT_RED_ANY ? 0 : 1));
      break;
    }
    default:
      return tt_shlo_fail_unimpl(c, "reduce op", (long long)op);
  }
  r = tt_shlo_convert(c, r, out_dt);
  return tt_shlo_reshape(c, r, &in->shape);
}

/* ---- SCAN ---- */

/* Inclusive scan along dim: reduce_window over a window the length of dim,
 * padded by that length - 1 on the low side. */
static tt_shv_t tt_shlo_scan_window(tt_shlo_t *c, tt_shv_t v, int dim, const char *body,
                                    tt_shv_t init) {
  if (tt_shlo_bad(c, 1, &v)) return -1;
  const tt_shape_t s = *tt_shlo_shape(c, v);
  int64_t win[TT_MAX_RANK], one[TT_MAX_RANK], lo[TT_MAX_RANK], hi[TT_MAX_RANK];
  for (int d = 0; d < s.rank; ++d) {
    win[d] = d == dim ? (s.dims[d] > 0 ? s.dims[d] : 1) : 1;
    one[d] = 1;
    lo[d] = d == dim ? win[d] - 1 : 0;
    hi[d] = 0;
  }
  if (s.dims[dim] <= 1) return v;
  return tt_shlo_reduce_window(c, v, init, body, win, one, one, lo, hi, &s);
}

static tt_shv_t tt_shlo_lower_scan(tt_shlo_t *c, const tt_shlo_instr_t *ins) {
  const tt_instr_t *in = ins->in;
  tt_scan_attrs_t sa;
  TT_ATTRS(in, &sa);
  tt_dtype_t out_dt = (tt_dtype_t)sa.dtype;
  tt_dtype_t acc = tt_shlo_acc(out_dt);
  tt_shv_t x = tt_shlo_convert(c, ins->x[0], acc);
  int prod = sa.op == TT_SCAN_PROD;
  tt_shv_t r = tt_shlo_scan_window(c, x, (int)sa.dim, prod ? "stablehlo.multiply" : "stablehlo.add",
                                   tt_shlo_scalar(c, acc, prod ? 1 : 0));
  return tt_shlo_convert(c, r, out_dt);
}

/* ---- DOT ---- */

tt_shv_t tt_shlo_dot_general(tt_shlo_t *c, tt_shv_t a, tt_shv_t b, int nbatch,
                             const int64_t *lb, const int64_t *rb, int64_t lc, int64_t rc,
                             tt_dtype_t dt, const tt_shape_t *out) {
  tt_shv_t ab[2] = {a, b};
  tt_shlo_attr_t at = {0};
  tt_shlo_attr(&at, "dot_dimension_numbers = #stablehlo.dot<");
  if (nbatch) {
    tt_shlo_attr(&at, "lhs_batching_dimensions = ");
    tt_shlo_attr_list(&at, lb, nbatch);
    tt_shlo_attr(&at, ", rhs_batching_dimensions = ");
    tt_shlo_attr_list(&at, rb, nbatch);
    tt_shlo_attr(&at, ", ");
  }
  tt_shlo_attr(&at, "lhs_contracting_dimensions = [%lld], rhs_contracting_dimensions = [%lld]>",
               (long long)lc, (long long)rc);
  return tt_shlo_op(c, "stablehlo.dot_general", 2, ab, at.s, dt, out);
}

static tt_shv_t tt_shlo_lower_dot(tt_shlo_t *c, const tt_shlo_instr_t *ins) {
  const tt_instr_t *in = ins->in;
  tt_shv_t a = ins->x[0], b = ins->x[1];
  tt_shv_t ab[2] = {a, b};
  if (tt_shlo_bad(c, 2, ab)) return -1;
  tt_dot_attrs_t da;
  TT_ATTRS(in, &da);
  int ta = (int)da.trans_a, tb = (int)da.trans_b;
  const tt_shape_t *as = tt_shlo_shape(c, a), *bs = tt_shlo_shape(c, b);
  int64_t lc = ta ? 1 : 2, rc = tb ? 2 : 1, zero = 0;
  if (bs->dims[0] == as->dims[0])
    return tt_shlo_dot_general(c, a, b, 1, &zero, &zero, lc, rc, in->dtype, &in->shape);
  /* b shared by every batch element: drop its unit batch dim. */
  tt_shape_t b2 = tt_shlo_dims(2, bs->dims + 1);
  b = tt_shlo_reshape(c, b, &b2);
  return tt_shlo_dot_general(c, a, b, 0, NULL, NULL, lc, rc - 1, in->dtype, &in->shape);
}

/* ---- convolutions ---- */

static tt_shv_t tt_shlo_convolution(tt_shlo_t *c, tt_shv_t lhs, tt_shv_t rhs, const char *dims,
                                    const int64_t *stride, const int64_t *lo, const int64_t *hi,
                                    const int64_t *lhs_dil, const int64_t *rhs_dil,
                                    int64_t fgc, int64_t bgc, tt_dtype_t dt,
                                    const tt_shape_t *out) {
  tt_shv_t args[2] = {lhs, rhs};
  tt_shlo_attr_t a = {0};
  tt_shlo_attr(&a, "batch_group_count = %lld : i64, dimension_numbers = #stablehlo.conv<%s>, "
               "feature_group_count = %lld : i64",
               (long long)bgc, dims, (long long)fgc);
  tt_shlo_attr_i64s(&a, "lhs_dilation", lhs_dil, 2);
  tt_shlo_attr_padding(&a, "padding", lo, hi, 2);
  tt_shlo_attr_i64s(&a, "rhs_dilation", rhs_dil, 2);
  tt_shlo_attr_i64s(&a, "window_strides", stride, 2);
  return tt_shlo_op(c, "stablehlo.convolution", 2, args, a.s, dt, out);
}

static tt_shv_t tt_shlo_lower_conv(tt_shlo_t *c, const tt_shlo_instr_t *ins) {
  const tt_instr_t *in = ins->in;
  /* The backward forms lead with the forward's fields. */
  tt_conv2d_attrs_t ca;
  if (in->op == TT_OP_CONV2D) {
    TT_ATTRS(in, &ca);
  } else {
    tt_conv2d_bwd_attrs_t ba;
    TT_ATTRS(in, &ba);
    memcpy(ca.stride, ba.stride, sizeof(ca.stride));
    memcpy(ca.padding, ba.padding, sizeof(ca.padding));
    memcpy(ca.dilation, ba.dilation, sizeof(ca.dilation));
    ca.groups = ba.groups;
  }
  tt_shv_t x0 = ins->x[0], x1 = ins->x[1];
  tt_shv_t xx[2] = {x0, x1};
  if (tt_shlo_bad(c, 2, xx)) return -1;
  int64_t s[2] = {ca.stride[0], ca.stride[1]}, p[2] = {ca.padding[0], ca.padding[1]};
  int64_t dil[2] = {ca.dilation[0], ca.dilation[1]}, g = ca.groups;
  int64_t one[2] = {1, 1};
  if (in->op == TT_OP_CONV2D)
    return tt_shlo_convolution(c, x0, x1, "[b, f, 0, 1]x[o, i, 0, 1]->[b, f, 0, 1]", s, p, p, one,
                               dil, g, 1, in->dtype, &in->shape);
  if (in->op == TT_OP_CONV2D_BWD_INPUT) {
    /* grad_x = grad_out (dilated by the stride) convolved with the kernel
     * reversed in space and with its in/out features swapped. */
    const tt_shape_t ws = *tt_shlo_shape(c, x1); /* [O, C/g, kh, kw] */
    const tt_shape_t gs = *tt_shlo_shape(c, x0); /* [N, O, OH, OW] */
    int64_t rev[2] = {2, 3};
    tt_shlo_attr_t a = {0};
    tt_shlo_attr_i64s(&a, "dimensions", rev, 2);
    tt_shv_t w = tt_shlo_op(c, "stablehlo.reverse", 1, &x1, a.s, tt_shlo_dtype(c, x1), &ws);
    if (g > 1) {
      int64_t d5[5] = {g, ws.dims[0] / g, ws.dims[1], ws.dims[2], ws.dims[3]};
      tt_shape_t s5 = tt_shlo_dims(5, d5);
      int64_t perm[5] = {1, 0, 2, 3, 4};
      int64_t d4[4] = {ws.dims[0] / g, g * ws.dims[1], ws.dims[2], ws.dims[3]};
      tt_shape_t s4 = tt_shlo_dims(4, d4);
      w = tt_shlo_reshape(c, tt_shlo_transpose(c, tt_shlo_reshape(c, w, &s5), perm), &s4);
    }
    int64_t lo[2], hi[2];
    for (int d = 0; d < 2; ++d) {
      int64_t k = ws.dims[2 + d], H = in->shape.dims[2 + d], OH = gs.dims[2 + d];
      lo[d] = dil[d] * (k - 1) - p[d];
      hi[d] = H + p[d] - (OH - 1) * s[d] - 1;
    }
    return tt_shlo_convolution(c, x0, w, "[b, f, 0, 1]x[i, o, 0, 1]->[b, f, 0, 1]", one, lo, hi,
                               s, dil, g, 1, in->dtype, &in->shape);
  }
  /* CONV2D_BWD_WEIGHT: x convolved by grad_out, the batch playing the
   * feature role; groups split x's channels (batch_group_count). */
  tt_shape_t xs = *tt_shlo_shape(c, x1); /* x [N, C, H, W] */
  const tt_shape_t gs = *tt_shlo_shape(c, x0);
  int64_t lo[2], hi[2];
  int64_t start[4] = {0, 0, 0, 0}, limit[4], step[4] = {1, 1, 1, 1};
  int crop = 0;
  for (int d = 0; d < 4; ++d) limit[d] = xs.dims[d];
  for (int d = 0; d < 2; ++d) {
    int64_t k = in->shape.dims[2 + d], H = xs.dims[2 + d], OH = gs.dims[2 + d];
    lo[d] = p[d];
    hi[d] = (k - 1) * dil[d] + (OH - 1) * s[d] + 1 - H - p[d];
    if (hi[d] < 0) {
      /* Rows the forward pass never read: crop them, pad nothing. */
      limit[2 + d] = H + hi[d];
      hi[d] = 0;
      crop = 1;
    }
  }
  tt_shv_t xv = crop ? tt_shlo_slice(c, x1, start, limit, step) : x1;
  return tt_shlo_convolution(c, xv, x0, "[f, b, 0, 1]x[i, o, 0, 1]->[f, b, 0, 1]", dil, lo, hi,
                             one, s, 1, g, in->dtype, &in->shape);
}

/* ---- pooling ---- */

/* The high padding that makes a window (k, stride s, dilation d, low pad p)
 * produce out windows over n elements; never negative (any value in a
 * stride-wide range gives the same count, and 0 lies in it then). */
static int64_t tt_shlo_pool_hi(int64_t n, int64_t k, int64_t s, int64_t d, int64_t p,
                               int64_t out) {
  int64_t hi = (out - 1) * s + (k - 1) * d + 1 - n - p;
  return hi < 0 ? 0 : hi;
}

/* An average pool's window (avg_pool2d's and its backward's fields). */
typedef struct {
  int64_t kernel[2], stride[2], padding[2], count_include_pad, divisor;
} tt_shlo_avg_window_t;

/* PyTorch's average-pool divisors for every output position [OH, OW]. */
static double *tt_shlo_avg_counts(const tt_shlo_avg_window_t *aw, const int64_t *in_hw,
                                  const int64_t *out_hw) {
  int64_t oh = out_hw[0], ow = out_hw[1];
  double *v = malloc(sizeof(double) * (size_t)(oh * ow > 0 ? oh * ow : 1));
  if (!v) return NULL;
  for (int64_t i = 0; i < oh; ++i)
    for (int64_t j = 0; j < ow; ++j) {
      int64_t hs = i * aw->stride[0] - aw->padding[0], ws = j * aw->stride[1] - aw->padding[1];
      int64_t he = hs + aw->kernel[0], we = ws + aw->kernel[1];
      if (he > in_hw[0] + aw->padding[0]) he = in_hw[0] + aw->padding[0];
      if (we > in_hw[1] + aw->padding[1]) we = in_hw[1] + aw->padding[1];
      double pool = (double)((he - hs) * (we - ws));
      if (hs < 0) hs = 0;
      if (ws < 0) ws = 0;
      if (he > in_hw[0]) he = in_hw[0];
      if (we > in_hw[1]) we = in_hw[1];
      double n = aw->divisor             ? (double)aw->divisor
                 : aw->count_include_pad ? pool
                                         : (double)((he - hs) * (we - ws));
      v[i * ow + j] = n;
    }
  return v;
}

/* The averaging matrix [out, n] of adaptive pooling (PyTorch's start/end). */
static double *tt_shlo_adaptive_matrix(int64_t out, int64_t n) {
  double *m = calloc((size_t)(out * n > 0 ? out * n : 1), sizeof(double));
  if (!m) return NULL;
  for (int64_t i = 0; i < out; ++i) {
    int64_t st = (i * n) / out, en = ((i + 1) * n + out - 1) / out;
    for (int64_t h = st; h < en; ++h) m[i * n + h] = 1.0 / (double)(en - st);
  }
  return m;
}

static tt_shv_t tt_shlo_oom(tt_shlo_t *c) {
  tt_shlo_fail(c, tt_status_make(TT_RESOURCE_EXHAUSTED, "stablehlo: out of memory"));
  return -1;
}

/* x [..., H, W] contracted with matrices mh [oh, H] and mw [ow, W] along
 * its last two dims (dim 1 of each matrix when fwd, else dim 0), as x's
 * dtype: the result is [..., oh, ow] (fwd) or [..., H, W] (bwd). */
static tt_shv_t tt_shlo_adaptive(tt_shlo_t *c, tt_shv_t x, int64_t oh, int64_t ow, int64_t H,
                                 int64_t W, int fwd, const tt_shape_t *out) {
  double *mh = tt_shlo_adaptive_matrix(oh, H), *mw = tt_shlo_adaptive_matrix(ow, W);
  if (!mh || !mw) {
    free(mh);
    free(mw);
    return tt_shlo_oom(c);
  }
  tt_dtype_t dt = tt_shlo_dtype(c, x);
  int64_t dh[2] = {oh, H}, dw[2] = {ow, W};
  tt_shape_t sh = tt_shlo_dims(2, dh), sw = tt_shlo_dims(2, dw);
  tt_shv_t ah = tt_shlo_const_array(c, dt, &sh, mh), aw = tt_shlo_const_array(c, dt, &sw, mw);
  free(mh);
  free(mw);
  const tt_shape_t xs = *tt_shlo_shape(c, x);
  int r = xs.rank;
  int64_t rc = fwd ? 1 : 0;
  tt_shape_t t1 = xs; /* [..., H|oh, ow|W] */
  t1.dims[r - 1] = fwd ? ow : W;
  tt_shv_t t = tt_shlo_dot_general(c, x, aw, 0, NULL, NULL, r - 1, rc, dt, &t1);
  tt_shape_t t2 = t1; /* [..., ow|W, oh|H] */
  t2.dims[r - 2] = t1.dims[r - 1];
  t2.dims[r - 1] = fwd ? oh : H;
  t = tt_shlo_dot_general(c, t, ah, 0, NULL, NULL, r - 2, rc, dt, &t2);
  int64_t perm[TT_MAX_RANK];
  for (int d = 0; d < r; ++d) perm[d] = d;
  perm[r - 2] = r - 1;
  perm[r - 1] = r - 2;
  (void)out;
  return tt_shlo_transpose(c, t, perm);
}

static tt_shv_t tt_shlo_lower_pool(tt_shlo_t *c, const tt_shlo_instr_t *ins) {
  const tt_instr_t *in = ins->in;
  /* The window fields of the max and average pools and their backwards. */
  int64_t kernel[2] = {1, 1}, stride[2] = {1, 1}, padding[2] = {0, 0}, dilation[2] = {1, 1};
  tt_shlo_avg_window_t aw = {{1, 1}, {1, 1}, {0, 0}, 0, 0};
  int64_t out_size[2] = {0, 0};
  if (in->op == TT_OP_MAX_POOL2D || in->op == TT_OP_MAX_POOL2D_INDICES) {
    tt_max_pool2d_attrs_t a;
    TT_ATTRS(in, &a);
    memcpy(kernel, a.kernel, sizeof(kernel));
    memcpy(stride, a.stride, sizeof(stride));
    memcpy(padding, a.padding, sizeof(padding));
    memcpy(dilation, a.dilation, sizeof(dilation));
  } else if (in->op == TT_OP_AVG_POOL2D || in->op == TT_OP_AVG_POOL2D_BWD) {
    if (in->op == TT_OP_AVG_POOL2D) {
      tt_avg_pool2d_attrs_t a;
      TT_ATTRS(in, &a);
      aw = (tt_shlo_avg_window_t){{a.kernel[0], a.kernel[1]}, {a.stride[0], a.stride[1]},
                                  {a.padding[0], a.padding[1]}, a.count_include_pad, a.divisor};
    } else {
      tt_avg_pool2d_bwd_attrs_t a;
      TT_ATTRS(in, &a);
      aw = (tt_shlo_avg_window_t){{a.kernel[0], a.kernel[1]}, {a.stride[0], a.stride[1]},
                                  {a.padding[0], a.padding[1]}, a.count_include_pad, a.divisor};
    }
    memcpy(kernel, aw.kernel, sizeof(kernel));
    memcpy(stride, aw.stride, sizeof(stride));
    memcpy(padding, aw.padding, sizeof(padding));
  } else if (in->op == TT_OP_ADAPTIVE_AVG_POOL2D) {
    tt_adaptive_avg_pool2d_attrs_t a;
    TT_ATTRS(in, &a);
    memcpy(out_size, a.out_size, sizeof(out_size));
  }
  tt_shv_t x = ins->x[0];
  if (tt_shlo_bad(c, 1, &x)) return -1;
  const tt_shape_t xs = *tt_shlo_shape(c, x);
  tt_dtype_t dt = tt_shlo_dtype(c, x);
  int r = xs.rank;
  int64_t win[TT_MAX_RANK], str[TT_MAX_RANK], dil[TT_MAX_RANK], lo[TT_MAX_RANK], hi[TT_MAX_RANK];
  for (int d = 0; d < TT_MAX_RANK; ++d) win[d] = str[d] = dil[d] = 1, lo[d] = hi[d] = 0;
  switch (in->op) {
    case TT_OP_MAX_POOL2D:
    case TT_OP_MAX_POOL2D_INDICES:
    case TT_OP_AVG_POOL2D: {
      int avg = in->op == TT_OP_AVG_POOL2D;
      for (int d = 0; d < 2; ++d) {
        int a = r - 2 + d;
        win[a] = kernel[d];
        str[a] = stride[d];
        dil[a] = avg ? 1 : dilation[d];
        lo[a] = padding[d];
        hi[a] = tt_shlo_pool_hi(xs.dims[a], win[a], str[a], dil[a], lo[a], in->shape.dims[a]);
      }
      if (in->op == TT_OP_MAX_POOL2D)
        return tt_shlo_reduce_window(c, x, tt_shlo_lowest(c, dt), "stablehlo.maximum", win, str,
                                     dil, lo, hi, &in->shape);
      if (in->op == TT_OP_AVG_POOL2D) {
        tt_dtype_t acc = tt_shlo_acc(dt);
        tt_shape_t os = in->shape;
        tt_shv_t sum = tt_shlo_reduce_window(c, tt_shlo_convert(c, x, acc), tt_shlo_scalar(c, acc, 0),
                                             "stablehlo.add", win, str, dil, lo, hi, &os);
        int64_t in_hw[2] = {xs.dims[r - 2], xs.dims[r - 1]};
        int64_t out_hw[2] = {os.dims[r - 2], os.dims[r - 1]};
        double *cnt = tt_shlo_avg_counts(&aw, in_hw, out_hw);
        if (!cnt) return tt_shlo_oom(c);
        tt_shape_t cs = tt_shlo_dims(2, out_hw);
        tt_shv_t cv = tt_shlo_const_array(c, acc, &cs, cnt);
        free(cnt);
        int64_t bd[2] = {r - 2, r - 1};
        tt_shv_t avg_v = tt_shlo_bin(c, "divide", sum, tt_shlo_bcast_dims(c, cv, &os, bd));
        return tt_shlo_convert(c, avg_v, dt);
      }
      /* Indices: variadic reduce_window over (value, flat h*W+w). */
      int64_t hw = xs.dims[r - 2] * xs.dims[r - 1];
      tt_shape_t flat = tt_shlo_dims(1, &hw);
      tt_shape_t plane = tt_shlo_dims(2, xs.dims + r - 2);
      int64_t bd[2] = {r - 2, r - 1};
      tt_shv_t idx = tt_shlo_bcast_dims(
          c, tt_shlo_reshape(c, tt_shlo_iota(c, TT_I64, &flat, 0), &plane), &xs, bd);
      tt_shape_t s0 = {0};
      tt_shv_t args[4] = {x, idx, tt_shlo_lowest(c, dt), tt_shlo_const_i(c, TT_I64, &s0, INT64_MAX)};
      if (tt_shlo_bad(c, 4, args)) return -1;
      int32_t ssa = tt_shlo_op_begin(c, "stablehlo.reduce_window", 2, 4, args);
      tt_shlo_region_select_index(c, 1, 0, dt, TT_I64);
      tt_shlo_attr_t a = {0};
      tt_shlo_attr_i64s(&a, "window_dimensions", win, r);
      tt_shlo_attr_i64s(&a, "window_strides", str, r);
      tt_shlo_attr_i64s(&a, "window_dilations", dil, r);
      tt_shlo_attr_padding(&a, "padding", lo, hi, r);
      tt_dtype_t dts[2] = {dt, TT_I64};
      tt_shape_t shapes[2] = {in->shape, in->shape};
      tt_shv_t v0 = tt_shlo_op_end(c, ssa, a.s, 4, args, 2, dts, shapes);
      return v0 < 0 ? -1 : v0 + 1;
    }
    case TT_OP_MAX_POOL2D_BWD: {
      /* grad_x[plane, idx] += grad_out: a scatter-add along the flat plane. */
      tt_shv_t ind = ins->x[1];
      const tt_shape_t *gs = tt_shlo_shape(c, x);
      int64_t planes = 1;
      for (int d = 0; d < in->shape.rank - 2; ++d) planes *= in->shape.dims[d];
      int64_t gd[2] = {planes, gs->dims[gs->rank - 2] * gs->dims[gs->rank - 1]};
      int64_t bd[2] = {planes, in->shape.dims[in->shape.rank - 2] * in->shape.dims[in->shape.rank - 1]};
      tt_shape_t g2 = tt_shlo_dims(2, gd), b2 = tt_shlo_dims(2, bd);
      tt_shv_t base = tt_shlo_const_f(c, in->dtype, &b2, 0);
      tt_shv_t out = tt_shlo_scatter_dim(c, base, 1, tt_shlo_reshape(c, ind, &g2),
                                         tt_shlo_reshape(c, x, &g2), "stablehlo.add");
      return tt_shlo_reshape(c, out, &in->shape);
    }
    case TT_OP_AVG_POOL2D_BWD: {
      /* grad_x[h] = sum over the windows covering h of grad_out / count:
       * spread grad_out by the stride (interior padding), then sum every
       * kernel-sized window. */
      tt_shape_t os = xs; /* grad_out */
      int rr = in->shape.rank;
      int64_t in_hw[2] = {in->shape.dims[rr - 2], in->shape.dims[rr - 1]};
      int64_t out_hw[2] = {os.dims[r - 2], os.dims[r - 1]};
      tt_dtype_t acc = tt_shlo_acc(dt);
      double *cnt = tt_shlo_avg_counts(&aw, in_hw, out_hw);
      if (!cnt) return tt_shlo_oom(c);
      tt_shape_t cs = tt_shlo_dims(2, out_hw);
      tt_shv_t cv = tt_shlo_const_array(c, acc, &cs, cnt);
      free(cnt);
      int64_t bd[2] = {r - 2, r - 1};
      tt_shv_t gv = tt_shlo_bin(c, "divide", tt_shlo_convert(c, x, acc),
                                tt_shlo_bcast_dims(c, cv, &os, bd));
      int64_t plo[TT_MAX_RANK] = {0}, phi[TT_MAX_RANK] = {0}, pin[TT_MAX_RANK] = {0};
      tt_shape_t ps = os;
      for (int d = 0; d < 2; ++d) {
        int a = r - 2 + d;
        int64_t k = kernel[d], s = stride[d], p = padding[d], H = in_hw[d], OH = out_hw[d];
        pin[a] = s - 1;
        plo[a] = k - 1 - p;
        phi[a] = H + p - (OH - 1) * s - 1;
        ps.dims[a] = plo[a] + (OH > 0 ? (OH - 1) * s + 1 : 0) + phi[a];
        win[a] = k;
      }
      tt_shv_t pargs[2] = {gv, tt_shlo_scalar(c, acc, 0)};
      tt_shlo_attr_t a = {0};
      tt_shlo_attr_i64s(&a, "edge_padding_low", plo, r);
      tt_shlo_attr_i64s(&a, "edge_padding_high", phi, r);
      tt_shlo_attr_i64s(&a, "interior_padding", pin, r);
      tt_shv_t padded = tt_shlo_op(c, "stablehlo.pad", 2, pargs, a.s, acc, &ps);
      tt_shape_t res = in->shape;
      tt_shv_t sum = tt_shlo_reduce_window(c, padded, tt_shlo_scalar(c, acc, 0), "stablehlo.add",
                                           win, str, dil, lo, hi, &res);
      return tt_shlo_convert(c, sum, dt);
    }
    case TT_OP_ADAPTIVE_AVG_POOL2D:
      return tt_shlo_adaptive(c, x, out_size[0], out_size[1], xs.dims[r - 2], xs.dims[r - 1], 1,
                              &in->shape);
    case TT_OP_ADAPTIVE_AVG_POOL2D_BWD: {
      int rr = in->shape.rank;
      return tt_shlo_adaptive(c, x, xs.dims[r - 2], xs.dims[r - 1], in->shape.dims[rr - 2],
                              in->shape.dims[rr - 1], 0, &in->shape);
    }
    default:
      return tt_shlo_fail_unimpl(c, "pool op", (long long)in->op);
  }
}

/* ---- softmax ---- */

static tt_shv_t tt_shlo_lower_softmax(tt_shlo_t *c, const tt_shlo_instr_t *ins) {
  const tt_instr_t *in = ins->in;
  int dim, lg, packed = 0;
  if (in->op == TT_OP_SOFTMAX) {
    tt_softmax_attrs_t a;
    TT_ATTRS(in, &a); /* packed absent: 0 */
    dim = (int)a.dim, lg = (int)a.log, packed = a.packed != 0;
  } else {
    tt_softmax_bwd_attrs_t a;
    TT_ATTRS(in, &a);
    dim = (int)a.dim, lg = (int)a.log;
  }
  uint32_t mask = 1u << dim;
  tt_dtype_t dt = in->dtype, acc = tt_shlo_acc(dt);
  /* A packed result [2, x...] is log_softmax then softmax of x's shape. */
  tt_shape_t xs = in->shape;
  if (packed) {
    xs.rank = in->shape.rank - 1;
    for (int32_t d = 0; d < xs.rank; ++d) xs.dims[d] = in->shape.dims[d + 1];
  }
  const tt_shape_t *s = &xs;
  tt_shv_t r;
  if (in->op == TT_OP_SOFTMAX) {
    tt_shv_t x = tt_shlo_convert(c, ins->x[0], acc);
    if (in->num_operands == 2) {
      /* x + bias (simplify.c folds a bias add into the softmax): the bias
       * holds one value per element of the last dim. */
      tt_shape_t row = {1, {s->dims[s->rank - 1]}};
      tt_shv_t b = tt_shlo_reshape(c, tt_shlo_convert(c, ins->x[1], acc), &row);
      x = tt_shlo_bin(c, "add", x, tt_shlo_bcast_to(c, b, s));
    }
    tt_shv_t m = tt_shlo_reduce(c, x, mask, "stablehlo.maximum", tt_shlo_lowest(c, acc));
    tt_shv_t z = tt_shlo_bin(c, "subtract", x, tt_shlo_unreduce(c, m, mask, s));
    tt_shv_t e = tt_shlo_un(c, "exponential", z);
    tt_shv_t sum = tt_shlo_reduce(c, e, mask, "stablehlo.add", tt_shlo_scalar(c, acc, 0));
    tt_shv_t sb = tt_shlo_unreduce(c, sum, mask, s);
    r = lg ? tt_shlo_bin(c, "subtract", z, tt_shlo_un(c, "log", sb))
           : tt_shlo_bin(c, "divide", e, sb);
    if (packed) {
      tt_shape_t one = in->shape;
      one.dims[0] = 1;
      tt_shv_t parts[2] = {tt_shlo_reshape(c, r, &one),
                           tt_shlo_reshape(c, tt_shlo_bin(c, "divide", e, sb), &one)};
      r = tt_shlo_concat(c, 2, parts, 0);
    }
  } else {
    tt_shv_t g = tt_shlo_convert(c, ins->x[0], acc), y = tt_shlo_convert(c, ins->x[1], acc);
    tt_shv_t zero = tt_shlo_scalar(c, acc, 0);
    if (lg) {
      tt_shv_t sum = tt_shlo_unreduce(c, tt_shlo_reduce(c, g, mask, "stablehlo.add", zero), mask, s);
      r = tt_shlo_bin(c, "subtract", g, tt_shlo_bin(c, "multiply", tt_shlo_un(c, "exponential", y), sum));
    } else {
      tt_shv_t gy = tt_shlo_bin(c, "multiply", g, y);
      tt_shv_t sum = tt_shlo_unreduce(c, tt_shlo_reduce(c, gy, mask, "stablehlo.add", zero), mask, s);
      r = tt_shlo_bin(c, "multiply", y, tt_shlo_bin(c, "subtract", g, sum));
    }
  }
  return tt_shlo_convert(c, r, dt);
}

/* ---- RNG ---- */

static tt_shv_t tt_shlo_lower_rng(tt_shlo_t *c, const tt_shlo_instr_t *ins) {
  const tt_instr_t *in = ins->in;
  tt_rng_attrs_t ra;
  TT_ATTRS(in, &ra);
  tt_rng_op_t op = (tt_rng_op_t)ra.op;
  double a = ra.a, b = ra.b;
  tt_shv_t seed = ins->x[0];
  if (tt_shlo_bad(c, 1, &seed)) return -1;
  /* State [seed bits, 0] for the backend's default generator. */
  tt_shape_t s0 = {0}, s1 = {1, {1}}, s2 = {1, {2}};
  tt_shv_t sd = tt_shlo_convert(c, seed, TT_I64);
  tt_shv_t su = tt_shlo_op(c, "stablehlo.bitcast_convert", 1, &sd, NULL, TT_SHLO_U64, &s0);
  tt_shv_t st[2] = {tt_shlo_reshape(c, su, &s1), tt_shlo_const_i(c, TT_SHLO_U64, &s1, 0)};
  tt_shv_t state = tt_shlo_concat(c, 2, st, 0);
  int wide = in->dtype == TT_F64;
  int64_t n = tt_shape_numel(&in->shape);
  int64_t m = op == TT_RNG_NORMAL ? 2 * n : n;
  tt_shape_t bits_shape = tt_shlo_dims(1, &m);
  tt_dtype_t bits_dt = wide ? TT_SHLO_U64 : TT_SHLO_U32;
  if (tt_shlo_bad(c, 1, &state)) return -1;
  int32_t ssa = tt_shlo_op_begin(c, "stablehlo.rng_bit_generator", 2, 1, &state);
  tt_dtype_t dts[2] = {TT_SHLO_U64, bits_dt};
  tt_shape_t shapes[2] = {s2, bits_shape};
  tt_shv_t v0 = tt_shlo_op_end(c, ssa, "rng_algorithm = #stablehlo<rng_algorithm DEFAULT>", 1,
                               &state, 2, dts, shapes);
  if (v0 < 0) return -1;
  tt_shv_t bits = v0 + 1;
  /* u = (bits >> 8) * 2^-24 in [0, 1) (53 bits for f64), as the kernel. */
  tt_dtype_t fdt = wide ? TT_F64 : TT_F32;
  tt_shv_t sh = tt_shlo_bin_k(c, "shift_right_logical", bits, wide ? 11 : 8);
  tt_shv_t u = tt_shlo_bin_k(c, "multiply", tt_shlo_convert(c, sh, fdt),
                             wide ? ldexp(1.0, -53) : ldexp(1.0, -24));
  tt_shape_t flat = tt_shlo_dims(1, &n);
  tt_shv_t r;
  if (op == TT_RNG_UNIFORM) {
    r = tt_shlo_bin_k(c, "add", tt_shlo_bin_k(c, "multiply", u, b - a), a);
  } else if (op == TT_RNG_NORMAL) {
    int64_t z0 = 0, one = 1;
    tt_shv_t u1 = tt_shlo_slice(c, u, &z0, &n, &one);
    tt_shv_t u2 = tt_shlo_slice(c, u, &n, &m, &one);
    tt_shv_t rad = tt_shlo_un(c, "sqrt", tt_shlo_bin_k(c, "multiply",
        tt_shlo_un(c, "log", tt_shlo_bin(c, "subtract", tt_shlo_like(c, u1, 1), u1)), -2.0));
    tt_shv_t z = tt_shlo_bin(c, "multiply", rad,
                             tt_shlo_un(c, "cosine", tt_shlo_bin_k(c, "multiply", u2, 2 * M_PI)));
    r = tt_shlo_bin_k(c, "add", tt_shlo_bin_k(c, "multiply", z, b), a);
  } else if (op == TT_RNG_BERNOULLI) {
    r = tt_shlo_cmp(c, "LT", u, tt_shlo_like(c, u, a));
  } else {
    return tt_shlo_fail_unimpl(c, "rng op", (long long)op);
  }
  (void)flat;
  r = tt_shlo_convert(c, r, in->dtype);
  return tt_shlo_reshape(c, r, &in->shape);
}

/* ---- CUMULATIVE ---- */

static tt_shv_t tt_shlo_lower_cumulative(tt_shlo_t *c, const tt_shlo_instr_t *ins) {
  const tt_instr_t *in = ins->in;
  tt_cumulative_attrs_t ca;
  TT_ATTRS(in, &ca);
  tt_cumulative_t op = (tt_cumulative_t)ca.op;
  int dim = (int)ca.dim;
  tt_shv_t x = ins->x[0];
  if (tt_shlo_bad(c, 1, &x)) return -1;
  tt_dtype_t dt = tt_shlo_dtype(c, x);
  const tt_shape_t xs = *tt_shlo_shape(c, x);
  switch (op) {
    case TT_CUM_MAX:
      return tt_shlo_scan_window(c, x, dim, "stablehlo.maximum", tt_shlo_lowest(c, dt));
    case TT_CUM_MIN:
      return tt_shlo_scan_window(c, x, dim, "stablehlo.minimum", tt_shlo_highest(c, dt));
    case TT_CUM_MAX_INDEX:
    case TT_CUM_MIN_INDEX: {
      int mx = op == TT_CUM_MAX_INDEX;
      tt_shv_t idx = tt_shlo_iota(c, TT_I64, &xs, dim);
      if (xs.dims[dim] <= 1) return idx;
      int64_t win[TT_MAX_RANK], one[TT_MAX_RANK], lo[TT_MAX_RANK], hi[TT_MAX_RANK];
      for (int d = 0; d < xs.rank; ++d) {
        win[d] = d == dim ? xs.dims[d] : 1;
        one[d] = 1;
        lo[d] = d == dim ? xs.dims[d] - 1 : 0;
        hi[d] = 0;
      }
      tt_shape_t s0 = {0};
      tt_shv_t args[4] = {x, idx, mx ? tt_shlo_lowest(c, dt) : tt_shlo_highest(c, dt),
                          tt_shlo_const_i(c, TT_I64, &s0, -1)};
      if (tt_shlo_bad(c, 4, args)) return -1;
      int32_t ssa = tt_shlo_op_begin(c, "stablehlo.reduce_window", 2, 4, args);
      tt_shlo_region_select_index(c, 1, mx ? 2 : 3, dt, TT_I64);
      tt_shlo_attr_t a = {0};
      tt_shlo_attr_i64s(&a, "window_dimensions", win, xs.rank);
      tt_shlo_attr_i64s(&a, "window_strides", one, xs.rank);
      tt_shlo_attr_i64s(&a, "window_dilations", one, xs.rank);
      tt_shlo_attr_padding(&a, "padding", lo, hi, xs.rank);
      tt_dtype_t dts[2] = {dt, TT_I64};
      tt_shape_t shapes[2] = {xs, xs};
      tt_shv_t v0 = tt_shlo_op_end(c, ssa, a.s, 4, args, 2, dts, shapes);
      return v0 < 0 ? -1 : v0 + 1;
    }
    case TT_CUM_LOGSUMEXP: {
      tt_dtype_t acc = tt_shlo_acc(dt);
      tt_shv_t xv = tt_shlo_convert(c, x, acc);
      if (xs.dims[dim] <= 1) return x;
      int64_t win[TT_MAX_RANK], one[TT_MAX_RANK], lo[TT_MAX_RANK], hi[TT_MAX_RANK];
      for (int d = 0; d < xs.rank; ++d) {
        win[d] = d == dim ? xs.dims[d] : 1;
        one[d] = 1;
        lo[d] = d == dim ? xs.dims[d] - 1 : 0;
        hi[d] = 0;
      }
      tt_shv_t args[2] = {xv, tt_shlo_lowest(c, acc)};
      if (tt_shlo_bad(c, 2, args)) return -1;
      int32_t ssa = tt_shlo_op_begin(c, "stablehlo.reduce_window", 1, 2, args);
      tt_dtype_t bd[2] = {acc, acc};
      tt_shv_t p[2];
      tt_shlo_region_begin(c, 1, 2, bd, p);
      /* log(exp(a) + exp(b)) = max + log1p(exp(min - max)); -inf stays. */
      tt_shv_t mxv = tt_shlo_bin(c, "maximum", p[0], p[1]);
      tt_shv_t mnv = tt_shlo_bin(c, "minimum", p[0], p[1]);
      tt_shv_t l = tt_shlo_bin(c, "add", mxv, tt_shlo_un(c, "log_plus_one",
                               tt_shlo_un(c, "exponential", tt_shlo_bin(c, "subtract", mnv, mxv))));
      tt_shv_t ninf = tt_shlo_cmp(c, "EQ", mxv, tt_shlo_like(c, mxv, -INFINITY));
      tt_shv_t rv = tt_shlo_select(c, ninf, mxv, l);
      tt_shlo_return(c, 1, &rv);
      tt_shlo_region_end(c);
      tt_shlo_attr_t a = {0};
      tt_shlo_attr_i64s(&a, "window_dimensions", win, xs.rank);
      tt_shlo_attr_i64s(&a, "window_strides", one, xs.rank);
      tt_shlo_attr_i64s(&a, "window_dilations", one, xs.rank);
      tt_shlo_attr_padding(&a, "padding", lo, hi, xs.rank);
      tt_shv_t r = tt_shlo_op_end(c, ssa, a.s, 2, args, 1, &acc, &xs);
      return tt_shlo_convert(c, r, dt);
    }
    default:
      return tt_shlo_fail_unimpl(c, "cumulative op", (long long)op);
  }
}

/* ---- registrations ---- */

const tt_shlo_row_t tt_shlo_rows_nn[] = {
    {TT_OP_REDUCE, tt_shlo_lower_reduce,
     "reduce with an add/mul/max/min/and/or region; mean = sum / count; "
     "argmax/argmin = variadic reduce over (value, iota)"},
    {TT_OP_SCAN, tt_shlo_lower_scan,
     "reduce_window over a full-length window padded on the low side"},
    {TT_OP_DOT, tt_shlo_lower_dot, "dot_general with batch dims"},
    {TT_OP_CONV2D, tt_shlo_lower_conv, "convolution [b,f,0,1]x[o,i,0,1]->[b,f,0,1]"},
    {TT_OP_CONV2D_BWD_INPUT, tt_shlo_lower_conv,
     "convolution over grad_out with lhs_dilation = stride and "
     "the kernel reversed, in/out features swapped"},
    {TT_OP_CONV2D_BWD_WEIGHT, tt_shlo_lower_conv,
     "convolution of x by grad_out with rhs_dilation = stride, "
     "batch as features, batch_group_count = groups"},
    {TT_OP_MAX_POOL2D, tt_shlo_lower_pool, "reduce_window max"},
    {TT_OP_MAX_POOL2D_INDICES, tt_shlo_lower_pool,
     "variadic reduce_window over (value, flat h*W+w iota)"},
    {TT_OP_MAX_POOL2D_BWD, tt_shlo_lower_pool, "scatter (add) of grad_out at the indices"},
    {TT_OP_AVG_POOL2D, tt_shlo_lower_pool, "reduce_window add / constant window counts"},
    {TT_OP_AVG_POOL2D_BWD, tt_shlo_lower_pool,
     "divide by counts, interior pad by stride-1, reduce_window add"},
    {TT_OP_ADAPTIVE_AVG_POOL2D, tt_shlo_lower_pool,
     "two dot_generals with constant averaging matrices"},
    {TT_OP_ADAPTIVE_AVG_POOL2D_BWD, tt_shlo_lower_pool,
     "two dot_generals with the transposed matrices"},
    {TT_OP_SOFTMAX, tt_shlo_lower_softmax,
     "reduce max, exponential, reduce add, divide (log: subtract log)"},
    {TT_OP_SOFTMAX_BWD, tt_shlo_lower_softmax, "elementwise + reduce add"},
    {TT_OP_RNG, tt_shlo_lower_rng,
     "rng_bit_generator + bit tricks (uniform), Box-Muller (normal), compare "
     "(bernoulli)"},
    {TT_OP_CUMULATIVE, tt_shlo_lower_cumulative,
     "reduce_window (max/min; variadic with indices; logaddexp region)"},
    TT_SHLO_ROWS_END,
};
