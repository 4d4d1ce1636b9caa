/* The IR verifier: structural invariants every pass must keep. */
#include <stddef.h>

#include "torchtpu/op_table.h"
#include "torchtpu/passes.h"

tt_status_t tt_verify_work(const tt_work_t *w, const char *after) {
  int32_t inputs_seen = 0;
  for (int32_t i = 0; i < w->num_instrs; ++i) {
    const tt_instr_t *in = &w->instrs[i];
    if (w->forward[i] != i) {
      if (w->forward[i] < 0 || w->forward[i] >= w->num_instrs)
        return tt_status_make(TT_INTERNAL, "verify after %s: %%%d forwards to %d", after, i,
                              w->forward[i]);
      continue;
    }
    if (in->op == TT_OP_PARAM || in->op == TT_OP_SCALAR) {
      if (in->input_index < 0 || in->input_index >= w->num_inputs)
        return tt_status_make(TT_INTERNAL, "verify after %s: input %%%d has index %d", after, i,
                              in->input_index);
      inputs_seen++;
    }
    for (int32_t k = 0; k < in->num_operands; ++k) {
      int32_t o = tt_work_resolve(w, in->operands[k]);
      if (o < 0 || o >= i)
        return tt_status_make(TT_INTERNAL,
                              "verify after %s: %%%d (%s) operand %d is %%%d, not earlier", after,
                              i, tt_op_name(in->op), k, o);
      const tt_instr_t *x = &w->instrs[o];
      /* A fused reduction's inputs are checked per step below. */
      int elementwise = in->op == TT_OP_UNARY || in->op == TT_OP_BINARY ||
                        in->op == TT_OP_WHERE ||
                        (in->op == TT_OP_FUSED && !tt_fused_is_reduce(in));
      if (elementwise && !tt_shape_broadcasts_to(&x->shape, &in->shape))
        return tt_status_make(TT_INTERNAL,
                              "verify after %s: %%%d (%s) operand %%%d does not broadcast to its "
                              "shape", after, i, tt_op_name(in->op), o);
    }
    if (tt_op_is_collective(in->op)) {
      if (in->num_operands != 1)
        return tt_status_make(TT_INTERNAL, "verify after %s: %%%d (%s) has %d operands", after,
                              i, tt_op_name(in->op), in->num_operands);
      const tt_shape_t *xs = &w->instrs[tt_work_resolve(w, in->operands[0])].shape;
      /* A layout that does not decode is reported as a failed check. */
      _Alignas(max_align_t) unsigned char attrs[TT_ATTRS_MAX_SIZE];
      tt_status_t cst = tt_attrs_decode((int32_t)in->op, in->iattrs, in->num_iattrs, in->fattrs,
                                        attrs, tt_op_info(in->op)->attrs_size, NULL);
      if (!cst) cst = tt_collective_check(in->op, attrs, xs);
      if (cst) {
        tt_status_t wrapped = tt_status_make(TT_INTERNAL, "verify after %s: %%%d: %s", after, i,
                                             tt_status_message(cst));
        tt_status_free(cst);
        return wrapped;
      }
      tt_shape_t want = tt_collective_shape(in->op, attrs, xs);
      if (!tt_shape_equal(&want, &in->shape))
        return tt_status_make(TT_INTERNAL, "verify after %s: %%%d (%s) shape does not follow "
                              "from its operand and attributes", after, i, tt_op_name(in->op));
    }
    if (in->op == TT_OP_FUSED) {
      const tt_fused_t *f = in->fused;
      if (!f || f->num_ops < 1)
        return tt_status_make(TT_INTERNAL, "verify after %s: %%%d fused without program", after, i);
      for (int32_t s = 0; s < f->num_ops; ++s)
        for (int32_t a = 0; a < f->ops[s].num_args; ++a) {
          int32_t arg = f->ops[s].args[a];
          if (arg >= s || (arg < 0 && -arg - 1 >= in->num_operands))
            return tt_status_make(TT_INTERNAL, "verify after %s: %%%d fused step %d arg %d bad",
                                  after, i, s, arg);
        }
      /* Fused reductions: one REDUCE step; the steps before it run over
       * the domain, the steps after it over the result's shape. */
      int32_t red = -1, nred = 0;
      for (int32_t s = 0; s < f->num_ops; ++s)
        if (f->ops[s].op == TT_OP_REDUCE) red = s, nred++;
      int is_red = tt_fused_is_reduce(in);
      tt_fused_attrs_t fa = {0};
      if (is_red) TT_ATTRS(in, &fa);
      if (nred != (is_red ? 1 : 0) ||
          (is_red && (fa.rank < 1 || fa.rank > TT_MAX_RANK || fa.dims.n != fa.rank)))
        return tt_status_make(TT_INTERNAL, "verify after %s: %%%d fused reduction malformed",
                              after, i);
      tt_shape_t dom = tt_fused_domain(in);
      for (int32_t s = 0; s < f->num_ops; ++s)
        for (int32_t a = 0; a < f->ops[s].num_args; ++a) {
          int32_t arg = f->ops[s].args[a];
          int epilogue = is_red && s > red;
          if (epilogue && arg >= 0 && arg < red)
            return tt_status_make(TT_INTERNAL,
                                  "verify after %s: %%%d fused epilogue step %d reads domain step %d",
                                  after, i, s, arg);
          if (arg >= 0) continue;
          const tt_instr_t *x = &w->instrs[tt_work_resolve(w, in->operands[-arg - 1])];
          if (is_red && !tt_shape_broadcasts_to(&x->shape, epilogue ? &in->shape : &dom))
            return tt_status_make(TT_INTERNAL,
                                  "verify after %s: %%%d fused step %d input does not broadcast "
                                  "to its %s", after, i, s, epilogue ? "shape" : "domain");
        }
      if (f->ops[f->num_ops - 1].dtype != in->dtype)
        return tt_status_make(TT_INTERNAL, "verify after %s: %%%d fused result dtype differs",
                              after, i);
    }
  }
  if (inputs_seen != w->num_inputs)
    return tt_status_make(TT_INTERNAL, "verify after %s: %d inputs live, %d expected", after,
                          inputs_seen, w->num_inputs);
  for (int32_t r = 0; r < w->num_outputs; ++r) {
    int32_t o = tt_work_resolve(w, w->outputs[r]);
    if (o < 0 || o >= w->num_instrs)
      return tt_status_make(TT_INTERNAL, "verify after %s: output %d is %%%d", after, r, o);
  }
  return NULL;
}
