/* Shape inference of layer_norm and its backward (src/ir/infer.h). */
#include "ir/infer.h"

/* Operand k of n must be float32 with want[k] elements. */
static tt_status_t tt_norm_operands(const tt_node_t *n, const int64_t *want) {
  for (int k = 0; k < n->num_operands; ++k) {
    const tt_node_t *x = n->operands[k];
    if (x->dtype != TT_F32 || tt_shape_numel(&x->shape) != want[k])
      return tt_status_make(TT_INVALID_ARGUMENT,
                            "%s: operand %d must be float32 with %lld elements, got %s with "
                            "%lld", tt_op_name(n->op), k, (long long)want[k],
                            tt_dtype_name(x->dtype), (long long)tt_shape_numel(&x->shape));
  }
  return NULL;
}

tt_status_t tt_infer_layer_norm(tt_node_t *n, const void *attrs) {
  const tt_layer_norm_attrs_t *a = attrs;
  const tt_node_t *x = n->operands[0];
  TT_RETURN_IF_ERROR(tt_infer_dim_in_rank(tt_op_name(n->op), a->axis, x->shape.rank));
  int64_t R, C;
  tt_shape_split(&x->shape, (int)a->axis, &R, &C);
  /* x, then weight and bias as flagged. */
  const int64_t want[3] = {R * C, C, C};
  if (n->num_operands != 1 + (a->has_weight != 0) + (a->has_bias != 0))
    return tt_status_make(TT_INVALID_ARGUMENT, "layer_norm: %d operands for weight %lld, "
                          "bias %lld", n->num_operands, (long long)a->has_weight,
                          (long long)a->has_bias);
  TT_RETURN_IF_ERROR(tt_norm_operands(n, want));
  if (a->form < 0 || a->form > 2)
    return tt_status_make(TT_INVALID_ARGUMENT, "layer_norm: form %lld is not 0, 1 or 2",
                          (long long)a->form);
  if (a->form == 0)
    n->shape = x->shape;
  else
    n->shape = (tt_shape_t){.rank = 1, .dims = {a->form == 1 ? 2 * R : R * C + 2 * R}};
  n->dtype = TT_F32;
  return NULL;
}

tt_status_t tt_infer_layer_norm_bwd(tt_node_t *n, const void *attrs) {
  const tt_layer_norm_bwd_attrs_t *a = attrs;
  const tt_node_t *x = n->operands[1];
  TT_RETURN_IF_ERROR(tt_infer_dim_in_rank(tt_op_name(n->op), a->axis, x->shape.rank));
  int64_t R, C;
  tt_shape_split(&x->shape, (int)a->axis, &R, &C);
  /* grad_out (as x), x, mean, rstd (R each), weight. */
  const int64_t want[5] = {R * C, R * C, R, R, C};
  TT_RETURN_IF_ERROR(tt_norm_operands(n, want));
  n->shape = (tt_shape_t){.rank = 1, .dims = {R * C + 2 * C}};
  n->dtype = TT_F32;
  return NULL;
}
