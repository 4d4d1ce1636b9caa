/* StableHLO lowerings of LAYER_NORM and LAYER_NORM_BWD (the engine's
 * fused layer norm, src/kernels/layer_norm.c): x reshaped to [R, C],
 * row means as reduce add over dim 1, column sums over dim 0, the rest
 * elementwise; the forward's output in x's shape, its statistics (mean
 * then rstd), or both packed, the backward's gradients flattened and
 * concatenated. */
#include "backends/stablehlo/emit_internal.h"

/* v [R] broadcast along the columns of [R, C]. */
static tt_shv_t tt_shlo_ln_rows(tt_shlo_t *c, tt_shv_t v, const tt_shape_t *rc) {
  static const int64_t dims[1] = {0};
  return tt_shlo_bcast_dims(c, v, rc, dims);
}

/* v [C] broadcast along the rows of [R, C]. */
static tt_shv_t tt_shlo_ln_cols(tt_shlo_t *c, tt_shv_t v, const tt_shape_t *rc) {
  static const int64_t dims[1] = {1};
  return tt_shlo_bcast_dims(c, v, rc, dims);
}

/* v reshaped to rank 1 (n elements). */
static tt_shv_t tt_shlo_ln_flat(tt_shlo_t *c, tt_shv_t v, int64_t n) {
  tt_shape_t fs = tt_shlo_dims(1, &n);
  return tt_shlo_reshape(c, v, &fs);
}

/* Sum over dim `dim` of a [R, C] value. */
static tt_shv_t tt_shlo_ln_sum(tt_shlo_t *c, tt_shv_t v, int dim) {
  return tt_shlo_reduce(c, v, 1u << dim, "stablehlo.add", tt_shlo_scalar(c, TT_F32, 0));
}

static tt_shv_t tt_shlo_lower_layer_norm(tt_shlo_t *c, const tt_shlo_instr_t *ins) {
  const tt_instr_t *in = ins->in;
  int n = in->num_operands;
  if (tt_shlo_bad(c, n, ins->x)) return -1;
  int bwd = in->op == TT_OP_LAYER_NORM_BWD;
  /* The forward's fields; the backward has axis and want_grad_x. */
  tt_layer_norm_attrs_t la = {0};
  int64_t want_grad_x = 0;
  if (bwd) {
    tt_layer_norm_bwd_attrs_t ba;
    TT_ATTRS(in, &ba);
    la.axis = ba.axis;
    want_grad_x = ba.want_grad_x;
  } else {
    TT_ATTRS(in, &la);
  }
  const tt_shape_t *xs = tt_shlo_shape(c, ins->x[bwd]);
  int64_t R, C;
  tt_shape_split(xs, (int)la.axis, &R, &C);
  int64_t rcd[2] = {R, C};
  tt_shape_t rc = tt_shlo_dims(2, rcd);
  tt_shv_t x = tt_shlo_reshape(c, ins->x[bwd], &rc);
  if (!bwd) {
    tt_shv_t mean = tt_shlo_bin_k(c, "multiply", tt_shlo_ln_sum(c, x, 1), 1.0 / (double)C);
    tt_shv_t xc = tt_shlo_bin(c, "subtract", x, tt_shlo_ln_rows(c, mean, &rc));
    tt_shv_t var = tt_shlo_bin_k(c, "multiply",
                                 tt_shlo_ln_sum(c, tt_shlo_bin(c, "multiply", xc, xc), 1),
                                 1.0 / (double)C);
    tt_shv_t rstd = tt_shlo_un(c, "rsqrt", tt_shlo_bin_k(c, "add", var, la.eps));
    if (la.form == 1) {
      tt_shv_t stats[2] = {mean, rstd};
      return tt_shlo_concat(c, 2, stats, 0);
    }
    tt_shv_t y = tt_shlo_bin(c, "multiply", xc, tt_shlo_ln_rows(c, rstd, &rc));
    int k = 1;
    if (la.has_weight) {
      tt_shv_t w = tt_shlo_ln_cols(c, tt_shlo_ln_flat(c, ins->x[k++], C), &rc);
      y = tt_shlo_bin(c, "multiply", y, w);
    }
    if (la.has_bias)
      y = tt_shlo_bin(c, "add", y, tt_shlo_ln_cols(c, tt_shlo_ln_flat(c, ins->x[k], C), &rc));
    if (la.form == 2) {
      tt_shv_t parts[3] = {tt_shlo_ln_flat(c, y, R * C), mean, rstd};
      return tt_shlo_concat(c, 3, parts, 0);
    }
    return tt_shlo_reshape(c, y, xs);
  }
  tt_shv_t go = tt_shlo_reshape(c, ins->x[0], &rc);
  tt_shv_t mean = tt_shlo_ln_flat(c, ins->x[2], R), rstd = tt_shlo_ln_flat(c, ins->x[3], R);
  tt_shv_t rstd_rc = tt_shlo_ln_rows(c, rstd, &rc);
  tt_shv_t xhat = tt_shlo_bin(c, "multiply",
                              tt_shlo_bin(c, "subtract", x, tt_shlo_ln_rows(c, mean, &rc)),
                              rstd_rc);
  tt_shv_t gw = tt_shlo_ln_sum(c, tt_shlo_bin(c, "multiply", go, xhat), 0);
  tt_shv_t gb = tt_shlo_ln_sum(c, go, 0);
  tt_shv_t gx;
  if (want_grad_x) {
    tt_shv_t g = n > 4 ? tt_shlo_bin(c, "multiply", go,
                                     tt_shlo_ln_cols(c, tt_shlo_ln_flat(c, ins->x[4], C), &rc))
                       : go;
    tt_shv_t mg = tt_shlo_bin_k(c, "multiply", tt_shlo_ln_sum(c, g, 1), 1.0 / (double)C);
    tt_shv_t mgx = tt_shlo_bin_k(c, "multiply",
                                 tt_shlo_ln_sum(c, tt_shlo_bin(c, "multiply", g, xhat), 1),
                                 1.0 / (double)C);
    tt_shv_t inner = tt_shlo_bin(c, "subtract",
                                 tt_shlo_bin(c, "subtract", g, tt_shlo_ln_rows(c, mg, &rc)),
                                 tt_shlo_bin(c, "multiply", xhat, tt_shlo_ln_rows(c, mgx, &rc)));
    gx = tt_shlo_bin(c, "multiply", inner, rstd_rc);
  } else {
    gx = tt_shlo_const_f(c, TT_F32, &rc, 0.0);
  }
  tt_shv_t parts[3] = {tt_shlo_ln_flat(c, gx, R * C), gw, gb};
  return tt_shlo_concat(c, 3, parts, 0);
}

/* ---- registrations ---- */

const tt_shlo_row_t tt_shlo_rows_layer_norm[] = {
    {TT_OP_LAYER_NORM, tt_shlo_lower_layer_norm,
     "on [R, C]: reduce add (mean), subtract, multiply, reduce add "
     "(variance), add eps, rsqrt, multiply (weight), add (bias); the output "
     "reshaped back, mean and rstd concatenated, or all three"},
    {TT_OP_LAYER_NORM_BWD, tt_shlo_lower_layer_norm,
     "on [R, C]: xhat from mean and rstd, reduce add over columns (two "
     "row means) and rows (grad_weight, grad_bias), elementwise grad_x; "
     "the three concatenated"},
    TT_SHLO_ROWS_END,
};
