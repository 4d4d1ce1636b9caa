/* Algebraic and structural simplification. Runtime scalars are graph
 * inputs whose values are not known when compiling, so the rewrites here
 * are the ones that hold for every value: identity reshapes, converts and
 * broadcasts, reshape chains, transpose chains. */
#include <string.h>

#include "torchtpu/passes.h"

static int tt_is_identity_perm(const tt_instr_t *in) {
  for (int32_t d = 0; d < in->num_iattrs; ++d)
    if (in->iattrs[d] != d) return 0;
  return 1;
}

tt_status_t tt_pass_simplify(tt_work_t *w) {
  for (int32_t i = 0; i < w->num_instrs; ++i) {
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
  return NULL;
}
