/* Tier-0 executors of the normalisations: softmax (with its bias-row and
 * packed log_softmax forms) and layer norm, forward and backward. */
#include <string.h>

#include "backends/cpu/exec.h"

static tt_status_t tt_cpu_exec_softmax(const tt_cpu_exec_t *c, tt_view_t *out) {
  const tt_instr_t *in = c->instr;
  const tt_view_t *x = c->x;
  tt_softmax_attrs_t a;
  TT_ATTRS(in, &a);
  if (a.packed) { /* [log_softmax | softmax] */
    int64_t n = tt_shape_numel(&x[0].shape);
    tt_view_t y = {.data = out->data, .dtype = TT_F32, .shape = x[0].shape};
    tt_view_t p = {.data = (float *)out->data + n, .dtype = TT_F32, .shape = x[0].shape};
    return tt_kernel_log_softmax_probs(&x[0], in->num_operands == 2 ? &x[1] : NULL, &y, &p);
  }
  if (in->num_operands == 2) /* with a bias row (simplify.c) */
    return tt_kernel_softmax_bias(&x[0], &x[1], (int)a.dim, (int)a.log, out);
  return tt_kernel_softmax(&x[0], (int)a.dim, (int)a.log, out);
}

static tt_status_t tt_cpu_exec_softmax_bwd(const tt_cpu_exec_t *c, tt_view_t *out) {
  tt_softmax_bwd_attrs_t a;
  TT_ATTRS(c->instr, &a);
  return tt_kernel_softmax_backward(&c->x[0], &c->x[1], (int)a.dim, (int)a.log, out);
}

/* A flat F32 piece [off, off + n) of out, as a rank-1 view. */
static tt_view_t tt_piece_(const tt_view_t *out, int64_t off, int64_t n) {
  return (tt_view_t){.data = (float *)out->data + off, .dtype = TT_F32,
                     .shape = {.rank = 1, .dims = {n}}};
}

static tt_status_t tt_layer_norm_fwd_(const tt_cpu_exec_t *c, tt_view_t *out) {
  const tt_view_t *x = c->x;
  tt_layer_norm_attrs_t a;
  TT_ATTRS(c->instr, &a);
  int axis = (int)a.axis;
  int64_t R, C;
  tt_shape_split(&x[0].shape, axis, &R, &C);
  const tt_view_t *w = a.has_weight ? &x[1] : NULL;
  const tt_view_t *b = a.has_bias ? &x[1 + (a.has_weight != 0)] : NULL;
  if (a.form == 0) return tt_kernel_layer_norm(&x[0], axis, w, b, a.eps, out, NULL, NULL);
  /* form 1: [mean | rstd]; form 2: [output | mean | rstd] */
  int64_t y = a.form == 2 ? R * C : 0;
  tt_view_t yv = tt_piece_(out, 0, R * C);
  tt_view_t mean = tt_piece_(out, y, R), rstd = tt_piece_(out, y + R, R);
  return tt_kernel_layer_norm(&x[0], axis, w, b, a.eps, y ? &yv : NULL, &mean, &rstd);
}

/* out is the packed [grad_x | grad_weight | grad_bias] (grad_x zeros when
 * not wanted). */
static tt_status_t tt_layer_norm_bwd_(const tt_cpu_exec_t *c, tt_view_t *out) {
  const tt_view_t *x = c->x;
  tt_layer_norm_bwd_attrs_t a;
  TT_ATTRS(c->instr, &a);
  int axis = (int)a.axis;
  int64_t R, C;
  tt_shape_split(&x[1].shape, axis, &R, &C);
  tt_view_t gx = tt_piece_(out, 0, R * C), gw = tt_piece_(out, R * C, C);
  tt_view_t gb = tt_piece_(out, R * C + C, C);
  if (!a.want_grad_x && R * C != 0) memset(gx.data, 0, (size_t)(R * C) * sizeof(float));
  return tt_kernel_layer_norm_backward(&x[0], &x[1], axis, &x[2], &x[3],
                                       c->instr->num_operands > 4 ? &x[4] : NULL,
                                       a.want_grad_x ? &gx : NULL, &gw, &gb);
}

static tt_status_t tt_cpu_exec_layer_norm(const tt_cpu_exec_t *c, tt_view_t *out) {
  if (c->instr->op == TT_OP_LAYER_NORM) return tt_layer_norm_fwd_(c, out);
  return tt_layer_norm_bwd_(c, out);
}

/* The ops this file executes (exec.h). */
const tt_cpu_exec_row_t tt_cpu_exec_rows_norm[] = {
    {TT_OP_SOFTMAX, tt_cpu_exec_softmax},
    {TT_OP_SOFTMAX_BWD, tt_cpu_exec_softmax_bwd},
    {TT_OP_LAYER_NORM, tt_cpu_exec_layer_norm},
    {TT_OP_LAYER_NORM_BWD, tt_cpu_exec_layer_norm},
    TT_CPU_EXEC_ROWS_END,
};
