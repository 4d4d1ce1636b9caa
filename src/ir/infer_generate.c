/* Shape inference of the ops that make values from nothing but their
 * attributes (and a seed): iota, rng (src/ir/infer.h). */
#include "ir/infer.h"

tt_status_t tt_infer_iota(tt_node_t *n, const void *attrs) {
  const tt_iota_attrs_t *a = attrs;
  n->dtype = (tt_dtype_t)a->dtype;
  return tt_infer_set_dims(&n->shape, &a->n, 1, tt_op_name(n->op));
}

tt_status_t tt_infer_rng(tt_node_t *n, const void *attrs) {
  const tt_rng_attrs_t *a = attrs;
  n->dtype = (tt_dtype_t)a->dtype;
  return tt_infer_set_dims(&n->shape, a->dims.v, a->dims.n, tt_op_name(n->op));
}
