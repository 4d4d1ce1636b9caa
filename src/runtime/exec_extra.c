/* Tier-0 execution of the extra IR ops (see ir/ops_extra.h): one kernel
 * call per instruction. */
#include <string.h>

#include "ir/ops_extra.h"

/* A collective with one participant per group (the single-process case):
 * a copy of the operand, or zeros for a permute that sends nothing. More
 * participants need a partitioned program (docs/stablehlo.md). */
static tt_status_t tt_run_collective_single(const tt_instr_t *in, const tt_view_t *x,
                                            tt_view_t *out) {
  const int64_t *ia = in->iattrs;
  int32_t num_ids = in->num_iattrs - TT_COLLECTIVE_HEADER;
  int64_t participants = num_ids ? ia[4] : 1;
  if (in->op == TT_OP_ALL_GATHER) participants = ia[1];
  if (in->op == TT_OP_REDUCE_SCATTER || in->op == TT_OP_ALL_TO_ALL) participants = ia[2];
  size_t bytes = (size_t)tt_shape_numel(&out->shape) * tt_dtype_size(out->dtype);
  if (in->op == TT_OP_COLLECTIVE_PERMUTE) {
    for (int32_t p = 0; p < num_ids; p += 2)
      if (ia[TT_COLLECTIVE_HEADER + p] != ia[TT_COLLECTIVE_HEADER + p + 1])
        return tt_status_make(TT_UNIMPLEMENTED,
                              "collective_permute from replica %lld to %lld cannot run on the "
                              "engine's CPU backend, which has one participant; run the "
                              "program through a PJRT plugin (torchtpu.spmd.run_replicated)",
                              (long long)ia[TT_COLLECTIVE_HEADER + p],
                              (long long)ia[TT_COLLECTIVE_HEADER + p + 1]);
    if (num_ids == 0) {
      if (bytes) memset(out->data, 0, bytes);
      return NULL;
    }
  } else if (participants != 1) {
    return tt_status_make(TT_UNIMPLEMENTED,
                          "%s over groups of %lld participants cannot run on the engine's CPU "
                          "backend, which has one participant per group; run the program "
                          "through a PJRT plugin (torchtpu.spmd.run_replicated / run_spmd)",
                          tt_op_name(in->op), (long long)participants);
  }
  if (bytes) memcpy(out->data, x->data, bytes);
  return NULL;
}

/* The strided attention forms' sizes (B, H, L, S, E, Ev) and layouts
 * (off, sb, sh, sr), read from their integer attributes. */
static void tt_x_att_geom(const int64_t *ia, tt_att_geom_t *g) {
  memset(g, 0, sizeof(*g));
  g->B = ia[0];
  g->H = ia[1];
  g->L = ia[2];
  g->S = ia[3];
  g->E = ia[4];
  g->Ev = ia[5];
}

static void tt_x_att_layout(const int64_t *ia, tt_att_layout_t *l) {
  *l = (tt_att_layout_t){ia[0], ia[1], ia[2], ia[3]};
}

tt_status_t tt_run_attention(const tt_instr_t *in, const tt_view_t *x, int num_operands,
                             tt_view_t *out, float *psave, const float *pload) {
  const int64_t *ia = in->iattrs;
  switch (in->op) {
    case TT_OP_ATTENTION: {
      const tt_view_t *mask = num_operands > 3 ? &x[3] : NULL;
      if (in->num_iattrs > 2) {
        /* The strided form (src/passes/attention_layout.c). */
        tt_att_geom_t geo;
        tt_x_att_geom(ia + 2, &geo);
        for (int k = 0; k < 4; ++k) tt_x_att_layout(ia + 8 + 4 * k, &geo.lay[k]);
        return tt_kernel_attention_ex(&x[0], &x[1], &x[2], mask, (int)ia[0], in->fattrs[0], out,
                                      &geo, psave);
      }
      if (ia[1]) /* the logsumexp form */
        return tt_kernel_attention(&x[0], &x[1], &x[2], mask, (int)ia[0], in->fattrs[0], NULL,
                                   out);
      return tt_kernel_attention_ex(&x[0], &x[1], &x[2], mask, (int)ia[0], in->fattrs[0], out,
                                    NULL, psave);
    }
    case TT_OP_ATTENTION_BWD: {
      /* out is the packed [grad_q | grad_k | grad_v]. */
      const tt_view_t *mask = num_operands > 4 ? &x[4] : NULL;
      if (in->num_iattrs > 1) {
        /* The strided form: dq, dk, dv at offsets 0, sw, 2 sw of out. */
        tt_att_geom_t geo;
        tt_x_att_geom(ia + 1, &geo);
        tt_x_att_layout(ia + 7, &geo.lay[4]);
        for (int k = 0; k < 3; ++k) tt_x_att_layout(ia + 11 + 4 * k, &geo.lay[k]);
        const int64_t *gl = ia + 23;
        for (int k = 0; k < 3; ++k)
          geo.lay[5 + k] = (tt_att_layout_t){k * gl[0], gl[1], gl[2], gl[3]};
        return tt_kernel_attention_backward_ex(&x[0], &x[1], &x[2], &x[3], mask, (int)ia[0],
                                               in->fattrs[0], out, out, out, &geo, pload);
      }
      size_t es = tt_dtype_size(out->dtype);
      tt_view_t g[3];
      char *p = out->data;
      for (int i = 0; i < 3; ++i) {
        g[i] = (tt_view_t){.data = p, .dtype = out->dtype, .shape = x[1 + i].shape};
        p += (size_t)tt_shape_numel(&x[1 + i].shape) * es;
      }
      return tt_kernel_attention_backward_ex(&x[0], &x[1], &x[2], &x[3], mask, (int)ia[0],
                                             in->fattrs[0], &g[0], &g[1], &g[2], NULL, pload);
    }
    default:
      return tt_status_make(TT_INVALID_ARGUMENT, "%s is not an attention op",
                            tt_op_name(in->op));
  }
}

size_t tt_attention_kept_bytes(const tt_graph_t *g, const tt_instr_t *f, const tt_instr_t *b) {
  if (f->op != TT_OP_ATTENTION || b->op != TT_OP_ATTENTION_BWD ||
      f->num_operands + 1 != b->num_operands)
    return 0;
  for (int k = 0; k < f->num_operands; ++k)
    if (f->operands[k] != b->operands[k + 1]) return 0;
  const int64_t *fa = f->iattrs, *ba = b->iattrs;
  if (fa[0] != ba[0] || f->fattrs[0] != b->fattrs[0]) return 0;
  int strided = f->num_iattrs > 2;
  if (strided != (b->num_iattrs > 1)) return 0;
  tt_att_geom_t geo;
  if (strided) {
    /* [causal, 0, B..Ev, q, k, v, out] against [causal, B..Ev, grad_out, q, k, v, grads] */
    for (int k = 0; k < 6; ++k)
      if (fa[2 + k] != ba[1 + k]) return 0;
    for (int k = 0; k < 12; ++k)
      if (fa[8 + k] != ba[11 + k]) return 0;
    tt_x_att_geom(fa + 2, &geo);
  } else {
    if (fa[1]) return 0; /* the logsumexp form */
    const int64_t *q = g->instrs[f->operands[0]].shape.dims;
    const int64_t *k = g->instrs[f->operands[1]].shape.dims;
    const int64_t *v = g->instrs[f->operands[2]].shape.dims;
    geo = (tt_att_geom_t){.B = q[0], .H = q[1], .L = q[2], .S = k[2], .E = q[3], .Ev = v[3]};
  }
  int64_t ld = tt_attention_probs_ld(geo.S), width = geo.E > geo.Ev ? geo.E : geo.Ev;
  if (ld > 4 * (width > 16 ? width : 16)) return 0;
  return (size_t)(geo.B * geo.H * geo.L * ld) * sizeof(float);
}

/* A flat F32 piece [off, off + n) of out, as a rank-1 view. */
static tt_view_t tt_x_piece(const tt_view_t *out, int64_t off, int64_t n) {
  return (tt_view_t){.data = (float *)out->data + off, .dtype = TT_F32,
                     .shape = {.rank = 1, .dims = {n}}};
}

static tt_status_t tt_run_layer_norm(const tt_instr_t *in, const tt_view_t *x, int num_operands,
                                     tt_view_t *out) {
  const int64_t *ia = in->iattrs;
  int axis = (int)ia[0];
  const tt_view_t *xv = &x[in->op == TT_OP_LAYER_NORM_BWD];
  int64_t R, C;
  tt_shape_split(&xv->shape, axis, &R, &C);
  if (in->op == TT_OP_LAYER_NORM) {
    const tt_view_t *w = ia[1] ? &x[1] : NULL, *b = ia[2] ? &x[1 + (ia[1] != 0)] : NULL;
    if (ia[3] == 0) return tt_kernel_layer_norm(xv, axis, w, b, in->fattrs[0], out, NULL, NULL);
    int64_t y = ia[3] == 2 ? R * C : 0;
    tt_view_t yv = tt_x_piece(out, 0, R * C);
    tt_view_t mean = tt_x_piece(out, y, R), rstd = tt_x_piece(out, y + R, R);
    return tt_kernel_layer_norm(xv, axis, w, b, in->fattrs[0], y ? &yv : NULL, &mean, &rstd);
  }
  tt_view_t gx = tt_x_piece(out, 0, R * C), gw = tt_x_piece(out, R * C, C);
  tt_view_t gb = tt_x_piece(out, R * C + C, C);
  if (!ia[1] && R * C != 0) memset(gx.data, 0, (size_t)(R * C) * sizeof(float));
  return tt_kernel_layer_norm_backward(&x[0], xv, axis, &x[2], &x[3],
                                       num_operands > 4 ? &x[4] : NULL, ia[1] ? &gx : NULL, &gw,
                                       &gb);
}

tt_status_t tt_run_instr_extra(const tt_instr_t *in, const tt_view_t *x, int num_operands,
                               tt_view_t *out) {
  const int64_t *ia = in->iattrs;
  (void)num_operands;
  switch (in->op) {
    case TT_OP_ARGSORT:
      return tt_kernel_argsort(&x[0], (int)ia[0], (int)ia[1], out);
    case TT_OP_SEARCHSORTED:
      return tt_kernel_searchsorted(&x[0], &x[1], (int)ia[0], out);
    case TT_OP_SCATTER_REDUCE:
      return tt_kernel_scatter_reduce(&x[0], (int)ia[0], &x[1], &x[2],
                                      (tt_scatter_reduce_t)ia[1], (int)ia[2], out);
    case TT_OP_CUMULATIVE:
      return tt_kernel_cumulative((tt_cumulative_t)ia[0], &x[0], (int)ia[1], out);
    case TT_OP_BITCAST: {
      size_t bytes = (size_t)tt_shape_numel(&out->shape) * tt_dtype_size(out->dtype);
      if (bytes) memcpy(out->data, x[0].data, bytes);
      return NULL;
    }
    case TT_OP_LINALG: {
      const tt_view_t *ins[3];
      for (int i = 0; i < num_operands && i < 3; ++i) ins[i] = &x[i];
      return tt_kernel_linalg((tt_linalg_op_t)ia[0], ins, num_operands < 3 ? num_operands : 3,
                              ia + 1, out);
    }
    case TT_OP_SPECIAL:
      return tt_kernel_special((tt_special_op_t)ia[0], &x[0], &x[1], out);
    case TT_OP_FFT:
      return tt_kernel_fft((tt_fft_kind_t)ia[0], ia[1], in->fattrs[0], &x[0], out);
    case TT_OP_ALL_REDUCE:
    case TT_OP_ALL_GATHER:
    case TT_OP_REDUCE_SCATTER:
    case TT_OP_ALL_TO_ALL:
    case TT_OP_COLLECTIVE_PERMUTE:
      return tt_run_collective_single(in, &x[0], out);
    case TT_OP_SPMD_FULL_TO_SHARD:
    case TT_OP_SPMD_SHARD_TO_FULL: {
      /* One device: the shard is the whole tensor. */
      int64_t ndev = ia[2 + ia[0]];
      if (ndev != 1)
        return tt_status_make(TT_UNIMPLEMENTED,
                              "%s over %lld devices cannot run on the engine's CPU backend, "
                              "which does not partition; run the program through a PJRT "
                              "plugin (torchtpu.spmd.run_spmd)", tt_op_name(in->op),
                              (long long)ndev);
      size_t bytes = (size_t)tt_shape_numel(&out->shape) * tt_dtype_size(out->dtype);
      if (bytes) memcpy(out->data, x[0].data, bytes);
      return NULL;
    }
    case TT_OP_ATTENTION:
    case TT_OP_ATTENTION_BWD:
      return tt_run_attention(in, x, num_operands, out, NULL, NULL);
    case TT_OP_LAYER_NORM:
    case TT_OP_LAYER_NORM_BWD:
      return tt_run_layer_norm(in, x, num_operands, out);
    default:
      return tt_status_make(TT_UNIMPLEMENTED, "no kernel for op %s", tt_op_name(in->op));
  }
}
