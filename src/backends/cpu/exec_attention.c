/* Tier-0 execution of attention, forward and backward, in the dense
 * [B, H, L, E] form and the strided form made by
 * src/passes/attention_layout.c; and which forward/backward pairs can
 * share the forward's probabilities (the plan pairs them, plan_pairs.c;
 * execute.c runs a pair). */

#include "backends/cpu/exec.h"

static tt_att_layout_t tt_att_layout_(const int64_t l[4]) {
  return (tt_att_layout_t){l[0], l[1], l[2], l[3]};
}

static tt_status_t tt_attention_fwd_(const tt_instr_t *in, const tt_view_t *x, int num_operands,
                                     tt_view_t *out, float *psave) {
  tt_attention_attrs_t a;
  int32_t fields = TT_ATTRS(in, &a);
  const tt_view_t *mask = num_operands > 3 ? &x[3] : NULL;
  if (fields > 2) { /* the strided form */
    tt_att_geom_t geo = {.B = a.B, .H = a.H, .L = a.L, .S = a.S, .E = a.E, .Ev = a.Ev};
    geo.lay[0] = tt_att_layout_(a.q_layout);
    geo.lay[1] = tt_att_layout_(a.k_layout);
    geo.lay[2] = tt_att_layout_(a.v_layout);
    geo.lay[3] = tt_att_layout_(a.out_layout);
    return tt_kernel_attention_ex(&x[0], &x[1], &x[2], mask, (int)a.causal, a.scale, out, &geo,
                                  psave);
  }
  if (a.lse) /* the logsumexp form */
    return tt_kernel_attention(&x[0], &x[1], &x[2], mask, (int)a.causal, a.scale, NULL, out);
  return tt_kernel_attention_ex(&x[0], &x[1], &x[2], mask, (int)a.causal, a.scale, out, NULL,
                                psave);
}

/* out is the packed [grad_q | grad_k | grad_v]. */
static tt_status_t tt_attention_bwd_(const tt_instr_t *in, const tt_view_t *x, int num_operands,
                                     tt_view_t *out, const float *pload) {
  tt_attention_bwd_attrs_t a;
  int32_t fields = TT_ATTRS(in, &a);
  const tt_view_t *mask = num_operands > 4 ? &x[4] : NULL;
  if (fields > 1) {
    /* The strided form: dq, dk, dv at offsets 0, sw, 2 sw of out. */
    tt_att_geom_t geo = {.B = a.B, .H = a.H, .L = a.L, .S = a.S, .E = a.E, .Ev = a.Ev};
    geo.lay[0] = tt_att_layout_(a.q_layout);
    geo.lay[1] = tt_att_layout_(a.k_layout);
    geo.lay[2] = tt_att_layout_(a.v_layout);
    geo.lay[4] = tt_att_layout_(a.grad_out_layout);
    const int64_t *gl = a.grads_layout; /* (sw, sb, sh, sr) */
    for (int k = 0; k < 3; ++k)
      geo.lay[5 + k] = (tt_att_layout_t){k * gl[0], gl[1], gl[2], gl[3]};
    return tt_kernel_attention_backward_ex(&x[0], &x[1], &x[2], &x[3], mask, (int)a.causal,
                                           a.scale, out, out, out, &geo, pload);
  }
  size_t es = tt_dtype_size(out->dtype);
  tt_view_t g[3];
  char *p = out->data;
  for (int i = 0; i < 3; ++i) {
    g[i] = (tt_view_t){.data = p, .dtype = out->dtype, .shape = x[1 + i].shape};
    p += (size_t)tt_shape_numel(&x[1 + i].shape) * es;
  }
  return tt_kernel_attention_backward_ex(&x[0], &x[1], &x[2], &x[3], mask, (int)a.causal,
                                         a.scale, &g[0], &g[1], &g[2], NULL, pload);
}

tt_status_t tt_cpu_run_attention(const tt_instr_t *in, const tt_view_t *x, int num_operands,
                                 tt_view_t *out, float *psave, const float *pload) {
  switch (in->op) {
    case TT_OP_ATTENTION:
      return tt_attention_fwd_(in, x, num_operands, out, psave);
    case TT_OP_ATTENTION_BWD:
      return tt_attention_bwd_(in, x, num_operands, out, pload);
    default:
      return tt_status_make(TT_INVALID_ARGUMENT, "%s is not an attention op",
                            tt_op_name(in->op));
  }
}

static tt_status_t tt_cpu_exec_attention(const tt_cpu_exec_t *c, tt_view_t *out) {
  return tt_cpu_run_attention(c->instr, c->x, c->instr->num_operands, out, NULL, NULL);
}

size_t tt_cpu_attention_kept_bytes(const tt_graph_t *g, const tt_instr_t *f) {
  tt_attention_attrs_t fa;
  tt_att_geom_t geo;
  if (TT_ATTRS(f, &fa) > 2) {
    geo = (tt_att_geom_t){.B = fa.B, .H = fa.H, .L = fa.L, .S = fa.S, .E = fa.E, .Ev = fa.Ev};
  } else {
    const int64_t *q = g->instrs[f->operands[0]].shape.dims;
    const int64_t *k = g->instrs[f->operands[1]].shape.dims;
    const int64_t *v = g->instrs[f->operands[2]].shape.dims;
    geo = (tt_att_geom_t){.B = q[0], .H = q[1], .L = q[2], .S = k[2], .E = q[3], .Ev = v[3]};
  }
  int64_t ld = tt_attention_probs_ld(geo.S), width = geo.E > geo.Ev ? geo.E : geo.Ev;
  if (ld > 4 * (width > 16 ? width : 16)) return 0;
  return (size_t)(geo.B * geo.H * geo.L * ld) * sizeof(float);
}

/* The ops this file executes (exec.h). */
const tt_cpu_exec_row_t tt_cpu_exec_rows_attention[] = {
    {TT_OP_ATTENTION, tt_cpu_exec_attention},
    {TT_OP_ATTENTION_BWD, tt_cpu_exec_attention},
    TT_CPU_EXEC_ROWS_END,
};
