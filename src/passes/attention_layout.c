/* Attention through strided layouts: the multi-head attention's
 * remaining layout copies folded into the attention ops.
 *
 * After the movement collapse (collapse_movement.c) a decoder layer still
 * copies q, k and v out of the projection [L, B, 3E] with one transpose
 * (to [3, B, H, L, hd]), its output to [L, B, H, hd], the gradient of that
 * output back to [B, H, L, hd], and the packed [dq | dk | dv] to
 * [L, B, 3E] with one transpose each. The attention kernels read and
 * write any layout whose rows are contiguous (tt_kernel_attention_ex), so
 * here an attention operand whose view map (movement_map.h) walks each of
 * its four dims with one stride, the last one 1, is read in place from
 * its base, and a result whose one reader is a transpose that only
 * permutes it is written in that transpose's order (the transpose becomes
 * a reshape of the result). The copies then have no reader and go.
 *
 * The strided forms (ir.h) fill the optional fields of
 * tt_attention_attrs_t (lse 0, B, H, L, S, E, Ev and the q, k, v and out
 * layouts) and tt_attention_bwd_attrs_t (B, ..., Ev and the grad_out, q,
 * k, v and grads layouts), each layout (off, sb, sh, sr) as
 * tt_att_layout_t and, for the backward's packed result, grads = (sw, sb,
 * sh, sr): dq, dk and dv at offsets 0, sw and 2*sw (it needs L == S and
 * E == Ev). The results keep
 * their shapes ([B, H, L, Ev] and [3*B*H*L*E]); only the order of their
 * bytes follows the layout, and their one reader is the reshape. */
#include <stdlib.h>
#include <string.h>

#include "passes/movement_map.h"

/* Layout of operand x read as [B, H, rows, cols]: its base and (off, sb,
 * sh, sr) if each dim is one atom of its map (or absent, size 1) and the
 * last has stride 1. Returns the chain's copies + 1, 0 if not. */
static int tt_al_operand(tt_mv_pass_t *p, int32_t x, const int64_t dims[4], int32_t *base,
                         int64_t lay[4]) {
  const tt_instr_t *xi = &p->w->instrs[x];
  if (xi->shape.rank != 4) return 0;
  tt_vmap_t m;
  p->budget = TT_MV_BUDGET;
  tt_mv_map(p, x, 0, &m);
  if (p->budget < 0 || m.rank != 4) return 0;
  int64_t st[4];
  for (int d = 0; d < 4; ++d) {
    int b = tt_mv_dim_begin(&m, d), e = m.dim_end[d];
    if (e - b > 1 || xi->shape.dims[d] != dims[d]) return 0;
    st[d] = e > b ? m.stride[b] : 0;
  }
  if (dims[3] > 1 && st[3] != 1) return 0;
  *base = m.base;
  lay[0] = m.off;
  for (int d = 0; d < 3; ++d) lay[1 + d] = st[d];
  return m.copies + 1;
}

/* The one transpose that reads result r (through reshapes with no other
 * reader) and only permutes it: its index and, for each of r's logical
 * strides rstride[0..n), the stride the same dim has in the transpose's
 * flat order (0 for a dim of size 1). -1 if there is none. */
static int32_t tt_al_result(tt_mv_pass_t *p, int32_t r, const int32_t *reader, int n,
                            const int64_t *rsize, const int64_t *rstride, int64_t *out) {
  tt_work_t *w = p->w;
  int32_t u = r;
  while (1) {
    if (p->uses[u] != 1 || reader[u] < 0) return -1;
    u = reader[u];
    if (w->instrs[u].op == TT_OP_TRANSPOSE) break;
    if (w->instrs[u].op != TT_OP_RESHAPE) return -1;
  }
  tt_vmap_t m;
  p->budget = TT_MV_BUDGET;
  tt_mv_map(p, u, 0, &m);
  if (p->budget < 0 || m.base != r || m.copies != 1 || m.off != 0) return -1;
  /* flat strides of u's atoms (row-major over u's elements) */
  int64_t flat[TT_MV_ATOMS], acc = 1;
  for (int a = m.n - 1; a >= 0; --a) {
    flat[a] = acc;
    acc *= m.size[a];
  }
  int used = 0;
  for (int d = 0; d < n; ++d) {
    out[d] = 0;
    if (rsize[d] == 1) continue;
    int hit = -1;
    for (int a = 0; a < m.n; ++a)
      if (m.stride[a] == rstride[d] && m.size[a] == rsize[d]) hit = a;
    if (hit < 0) return -1;
    out[d] = flat[hit];
    used++;
  }
  if (used != m.n) return -1;
  if (rsize[n - 1] > 1 && out[n - 1] != 1) return -1;
  return u;
}

tt_status_t tt_pass_attention_layout(tt_work_t *w) {
  tt_mv_pass_t p = {.w = w};
  int32_t *reader = NULL;
  for (int32_t i = 0; i < w->num_instrs; ++i) {
    if (w->forward[i] != i) continue;
    tt_instr_t *in = &w->instrs[i];
    /* Only the plain forms: causal and lse 0 (forward), causal (backward). */
    tt_attention_attrs_t fa;
    tt_attention_bwd_attrs_t ba;
    int fwd = in->op == TT_OP_ATTENTION && TT_ATTRS(in, &fa) == 2 && fa.lse == 0;
    int bwd = in->op == TT_OP_ATTENTION_BWD && TT_ATTRS(in, &ba) == 1;
    if (!fwd && !bwd) continue;
    if (!p.uses) {
      p.uses = tt_work_use_counts(w);
      reader = malloc(sizeof(int32_t) * ((size_t)w->num_instrs + 1));
      if (!p.uses || !reader) break;
      tt_mv_scan_readers(w, p.uses, reader, NULL);
    }
    if (!p.uses[i]) continue;
    int q0 = fwd ? 0 : 1; /* the backward's q is its second operand */
    int32_t ops[4];
    for (int k = 0; k < 4 && k < in->num_operands; ++k) ops[k] = tt_work_resolve(w, in->operands[k]);
    const tt_shape_t *qs = &w->instrs[ops[q0]].shape, *ks = &w->instrs[ops[q0 + 1]].shape;
    const tt_shape_t *vs = &w->instrs[ops[q0 + 2]].shape;
    if (qs->rank != 4 || ks->rank != 4 || vs->rank != 4) continue;
    int64_t B = qs->dims[0], H = qs->dims[1], L = qs->dims[2], E = qs->dims[3];
    int64_t S = ks->dims[2], Ev = vs->dims[3];
    if (bwd && (L != S || E != Ev)) continue;
    int64_t dq[4] = {B, H, L, E}, dk[4] = {B, H, S, E}, dv[4] = {B, H, S, Ev}, dov[4] = {B, H, L, Ev};
    const int64_t *dims[4] = {dq, dk, dv, dov};
    int nin = fwd ? 3 : 4; /* q, k, v (and grad_out first for bwd) */
    int32_t bases[4];
    int64_t lays[4][4];
    int copies = 0, ok = 1;
    for (int k = 0; k < nin && ok; ++k) {
      int slot = fwd ? k : (k == 0 ? 3 : k - 1); /* which dims */
      int c = tt_al_operand(&p, ops[k], dims[slot], &bases[k], lays[k]);
      ok = c > 0;
      copies += c - 1;
    }
    if (!ok) continue;
    /* The result's layout: in the order of its one transposing reader,
     * else dense. */
    int64_t res[4];
    int32_t u;
    if (fwd) {
      int64_t rsize[4] = {B, H, L, Ev}, rstride[4] = {H * L * Ev, L * Ev, Ev, 1}, o[4];
      u = tt_al_result(&p, i, reader, 4, rsize, rstride, o);
      if (u >= 0) {
        res[0] = 0;
        res[1] = o[0];
        res[2] = o[1];
        res[3] = o[2];
      } else {
        res[0] = 0;
        res[1] = H * L * Ev;
        res[2] = L * Ev;
        res[3] = Ev;
      }
    } else {
      int64_t W = B * H * L * E;
      int64_t rsize[5] = {3, B, H, L, E}, rstride[5] = {W, H * L * E, L * E, E, 1}, o[5];
      u = tt_al_result(&p, i, reader, 5, rsize, rstride, o);
      if (u >= 0) {
        for (int d = 0; d < 4; ++d) res[d] = o[d];
      } else {
        res[0] = W;
        res[1] = H * L * E;
        res[2] = L * E;
        res[3] = E;
      }
    }
    if (!copies && u < 0) continue; /* nothing to save */
    /* Rewrite the op into its strided form (causal and scale kept). */
    if (fwd) {
      fa.B = B, fa.H = H, fa.L = L, fa.S = S, fa.E = E, fa.Ev = Ev;
      memcpy(fa.q_layout, lays[0], sizeof(fa.q_layout));
      memcpy(fa.k_layout, lays[1], sizeof(fa.k_layout));
      memcpy(fa.v_layout, lays[2], sizeof(fa.v_layout));
      memcpy(fa.out_layout, res, sizeof(fa.out_layout));
      TT_SET_ATTRS(in, &fa);
    } else {
      ba.B = B, ba.H = H, ba.L = L, ba.S = S, ba.E = E, ba.Ev = Ev;
      memcpy(ba.grad_out_layout, lays[0], sizeof(ba.grad_out_layout));
      memcpy(ba.q_layout, lays[1], sizeof(ba.q_layout));
      memcpy(ba.k_layout, lays[2], sizeof(ba.k_layout));
      memcpy(ba.v_layout, lays[3], sizeof(ba.v_layout));
      memcpy(ba.grads_layout, res, sizeof(ba.grads_layout));
      TT_SET_ATTRS(in, &ba);
    }
    for (int k = 0; k < nin; ++k) in->operands[k] = bases[k];
    if (u >= 0) {
      tt_shape_t us = w->instrs[u].shape;
      if (!tt_mv_set_reshape(&w->instrs[u], w->instrs[u].dtype, i, &us)) break;
    }
    free(p.uses);
    free(reader);
    p.uses = NULL;
    reader = NULL;
  }
  free(p.uses);
  free(reader);
  return NULL;
}
