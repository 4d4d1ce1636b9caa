/* Fusion steps shared by the fusion passes (fused_step.h). */
#include <stdlib.h>

#include "passes/fused_step.h"
#include "torchtpu/op_table.h"

int tt_work_fusible(const tt_work_t *w, const tt_instr_t *in) {
  /* Ops with no operand are never fusible: x0's dtype is then unread. */
  tt_dtype_t x0 = in->num_operands ? w->instrs[tt_work_resolve(w, in->operands[0])].dtype
                                   : in->dtype;
  return tt_instr_fusible(in, x0);
}

void tt_fused_step_from(const tt_instr_t *m, tt_fused_op_t *s) {
  s->op = m->op;
  s->dtype = m->dtype;
  s->num_args = m->num_operands;
  s->code = 0;
  s->alpha = s->beta = 0.0;
  switch (m->op) {
    case TT_OP_UNARY: {
      tt_unary_attrs_t a;
      TT_ATTRS(m, &a);
      s->code = a.op;
      s->alpha = a.alpha;
      s->beta = a.beta;
      break;
    }
    case TT_OP_BINARY: {
      tt_binary_attrs_t a;
      TT_ATTRS(m, &a);
      s->code = a.op;
      break;
    }
    case TT_OP_CONVERT: {
      tt_convert_attrs_t a;
      TT_ATTRS(m, &a);
      s->code = a.dtype;
      break;
    }
    default: /* where */
      break;
  }
}

void tt_fused_rewrite(tt_instr_t *in, tt_fused_t *f, int32_t *operands, int32_t num_operands,
                      const tt_fused_attrs_t *a, int32_t num_int_fields) {
  free(in->operands);
  in->operands = operands;
  in->num_operands = num_operands;
  in->op = TT_OP_FUSED;
  in->fused = f;
  /* Only the ints are written: the instruction keeps the float bytes of
   * the op it replaces, which its graph text has always shown. */
  double unused[TT_MAX_FATTRS];
  tt_attrs_encode_valid(TT_OP_FUSED, a, sizeof(*a), num_int_fields, in->iattrs, &in->num_iattrs,
                        unused);
}
