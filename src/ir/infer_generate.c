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
  if (n->fattrs[TT_RNG_TILED_FATTR] == 0.0) return tt_infer_set_dims(&n->shape, a->dims.v, a->dims.n, tt_op_name(n->op));
  /* a tile: [tile dims, whole dims, offsets] */
  int32_t rank = a->dims.n / 3;
  if (a->dims.n % 3)
    return tt_status_make(TT_INVALID_ARGUMENT,
                          "rng tile: %d dims values, want tile dims, whole dims and offsets",
                          (int)a->dims.n);
  for (int32_t d = 0; d < rank; ++d)
    if (a->dims.v[rank + d] < 0 || a->dims.v[2 * rank + d] < 0)
      return tt_status_make(TT_INVALID_ARGUMENT,
                            "rng tile: dim %d has whole size %lld and offset %lld", (int)d,
                            (long long)a->dims.v[rank + d], (long long)a->dims.v[2 * rank + d]);
  return tt_infer_set_dims(&n->shape, a->dims.v, rank, tt_op_name(n->op));
}
