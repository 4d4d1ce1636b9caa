/* Shape inference of the reductions and scans (src/ir/infer.h): reduce,
 * scan, cumulative. */
#include "ir/infer.h"

tt_status_t tt_infer_reduce(tt_node_t *n, const void *attrs) {
  const tt_reduce_attrs_t *a = attrs;
  uint32_t mask = (uint32_t)a->dims_mask;
  int keep = (int)a->keepdim;
  const tt_shape_t *s = &n->operands[0]->shape;
  if (s->rank < 32 && (mask >> (s->rank > 0 ? s->rank : 1)) != 0)
    return tt_status_make(TT_OUT_OF_RANGE, "reduce: dims mask 0x%x out of range for rank %d",
                          mask, s->rank);
  n->shape.rank = 0;
  for (int d = 0; d < s->rank; ++d) {
    if (mask & (1u << d)) {
      /* Reductions without an identity have no value over nothing. */
      if (s->dims[d] == 0 && a->op != TT_RED_SUM && a->op != TT_RED_PROD &&
          a->op != TT_RED_MEAN && a->op != TT_RED_ANY && a->op != TT_RED_ALL)
        return tt_status_make(TT_INVALID_ARGUMENT,
                              "Expected reduction dim %d to have non-zero size.", d);
      if (keep) n->shape.dims[n->shape.rank++] = 1;
    } else {
      n->shape.dims[n->shape.rank++] = s->dims[d];
    }
  }
  n->dtype = (tt_dtype_t)a->dtype;
  return NULL;
}

tt_status_t tt_infer_scan(tt_node_t *n, const void *attrs) {
  const tt_scan_attrs_t *a = attrs;
  TT_RETURN_IF_ERROR(tt_infer_check_dim(a->dim, n->operands[0]->shape.rank, tt_op_name(n->op)));
  n->shape = n->operands[0]->shape;
  n->dtype = (tt_dtype_t)a->dtype;
  return NULL;
}

tt_status_t tt_infer_cumulative(tt_node_t *n, const void *attrs) {
  const tt_cumulative_attrs_t *a = attrs;
  tt_node_t **x = n->operands;
  TT_RETURN_IF_ERROR(tt_infer_dim_in_rank(tt_op_name(n->op), a->dim, x[0]->shape.rank));
  if (a->op < 0 || a->op >= TT_CUM_COUNT)
    return tt_status_make(TT_INVALID_ARGUMENT, "cumulative: unknown op %lld", (long long)a->op);
  n->shape = x[0]->shape;
  n->dtype = (a->op == TT_CUM_MAX_INDEX || a->op == TT_CUM_MIN_INDEX) ? TT_I64 : x[0]->dtype;
  return NULL;
}
