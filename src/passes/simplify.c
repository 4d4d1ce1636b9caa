/* Algebraic and structural simplification. Runtime scalars are graph
 * inputs whose values are not known when compiling, so the rewrites here
 * are the ones that hold for every value: identity reshapes, converts and
 * broadcasts, reshape chains, transpose chains. */
#include <stdlib.h>
#include <string.h>

#include "torchtpu/passes.h"

static int tt_is_identity_perm(const tt_instr_t *in) {
  for (int32_t d = 0; d < in->num_iattrs; ++d)
    if (in->iattrs[d] != d) return 0;
  return 1;
}

/* Whether transpose `t` swaps its last two dims and keeps the others. */
static int tt_swaps_last_two(const tt_instr_t *t) {
  int32_t r = t->num_iattrs;
  if (t->op != TT_OP_TRANSPOSE || r < 2) return 0;
  for (int32_t d = 0; d < r - 2; ++d)
    if (t->iattrs[d] != d) return 0;
  return t->iattrs[r - 2] == r - 1 && t->iattrs[r - 1] == r - 2;
}

/* dot(.., transpose(y)) -> dot(.., y) with the operand's transpose flag
 * flipped: the GEMM packs a transposed operand as cheaply as a plain one,
 * so the transposed copy is never made. Handles the rank-3 transpose and
 * reshape(transpose(y)) to [batch, r, c] (how matmul lowers x @ w.T and
 * q @ k.transpose(-2, -1)); the reshape is rewritten in place only when
 * this dot is its one user. */
static void tt_fold_dot_transpose(tt_work_t *w, tt_instr_t *in, int32_t **uses) {
  for (int k = 0; k < 2; ++k) {
    int32_t y = tt_work_resolve(w, in->operands[k]);
    tt_instr_t *yi = &w->instrs[y];
    if (tt_swaps_last_two(yi) && yi->shape.rank == 3) {
      in->operands[k] = tt_work_resolve(w, yi->operands[0]);
      in->iattrs[k] = !in->iattrs[k];
      continue;
    }
    if (yi->op != TT_OP_RESHAPE || yi->shape.rank != 3) continue;
    const tt_instr_t *t = &w->instrs[tt_work_resolve(w, yi->operands[0])];
    if (!tt_swaps_last_two(t)) continue;
    int32_t x = tt_work_resolve(w, t->operands[0]);
    const tt_shape_t *xs = &w->instrs[x].shape;
    int64_t lead = 1;
    for (int32_t d = 0; d < xs->rank - 2; ++d) lead *= xs->dims[d];
    int64_t rows = xs->dims[xs->rank - 2], cols = xs->dims[xs->rank - 1];
    if (lead != yi->shape.dims[0] || cols != yi->shape.dims[1] || rows != yi->shape.dims[2])
      continue;
    if (!*uses) *uses = tt_work_use_counts(w);
    if (!*uses || (*uses)[y] != 1) continue;
    yi->operands[0] = x;
    yi->iattrs[0] = lead;
    yi->iattrs[1] = rows;
    yi->iattrs[2] = cols;
    yi->shape.dims[1] = rows;
    yi->shape.dims[2] = cols;
    in->iattrs[k] = !in->iattrs[k];
  }
}

tt_status_t tt_pass_simplify(tt_work_t *w) {
  int32_t *uses = NULL;
  for (int32_t i = 0; i < w->num_instrs; ++i) {
    if (w->forward[i] != i) continue;
    if (w->instrs[i].op == TT_OP_DOT) tt_fold_dot_transpose(w, &w->instrs[i], &uses);
    if (w->forward[i] != i) continue;
    tt_instr_t *in = &w->instrs[i];
    if (in->num_operands < 1) continue;
    int32_t x = tt_work_resolve(w, in->operands[0]);
    in->operands[0] = x;
    const tt_instr_t *src = &w->instrs[x];
    int same_shape = tt_shape_equal(&src->shape, &in->shape) && src->dtype == in->dtype;
    switch (in->op) {
      case TT_OP_RESHAPE:
      case TT_OP_BROADCAST:
      case TT_OP_CONVERT:
        if (same_shape) {
          w->forward[i] = x;
          break;
        }
        /* reshape(reshape(y)) -> reshape(y) */
        if (in->op == TT_OP_RESHAPE && src->op == TT_OP_RESHAPE)
          in->operands[0] = tt_work_resolve(w, src->operands[0]);
        /* convert(convert(y)) is not folded: the inner convert may round. */
        break;
      case TT_OP_TRANSPOSE:
        if (tt_is_identity_perm(in)) {
          w->forward[i] = x;
        } else if (src->op == TT_OP_TRANSPOSE) {
          /* transpose(transpose(y, p), q) = transpose(y, p[q]) */
          int64_t composed[TT_MAX_RANK];
          for (int32_t d = 0; d < in->num_iattrs; ++d) composed[d] = src->iattrs[in->iattrs[d]];
          memcpy(in->iattrs, composed, sizeof(int64_t) * (size_t)in->num_iattrs);
          in->operands[0] = tt_work_resolve(w, src->operands[0]);
          if (tt_is_identity_perm(in)) w->forward[i] = in->operands[0];
        }
        break;
      default:
        break;
    }
  }
  free(uses);
  return NULL;
}
