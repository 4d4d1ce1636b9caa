/* Shape inference of the indexing and sorting ops (src/ir/infer.h):
 * index_select, gather, index_add, scatter, scatter_reduce, argsort,
 * searchsorted. */
#include "ir/infer.h"

static int tt_is_index_dtype(tt_dtype_t dt) { return dt == TT_I64 || dt == TT_I32; }

/* index_select and gather: (self, index) along dim. */
static tt_status_t tt_infer_select_like(tt_node_t *n, int64_t dim) {
  tt_node_t **x = n->operands;
  const char *name = tt_op_name(n->op);
  TT_RETURN_IF_ERROR(tt_infer_check_dim(dim, x[0]->shape.rank, name));
  if (!tt_is_index_dtype(x[1]->dtype))
    return tt_status_make(TT_TYPE_ERROR, "%s(): Expected dtype int64 for index, got %s", name,
                          tt_dtype_name(x[1]->dtype));
  return NULL;
}

tt_status_t tt_infer_index_select(tt_node_t *n, const void *attrs) {
  const tt_dim_attrs_t *a = attrs;
  tt_node_t **x = n->operands;
  TT_RETURN_IF_ERROR(tt_infer_select_like(n, a->dim));
  if (x[1]->shape.rank > 1)
    return tt_status_make(TT_INVALID_ARGUMENT, "index_select(): Index is supposed to be a vector");
  n->shape = x[0]->shape;
  if (n->shape.rank > 0) n->shape.dims[a->dim] = tt_shape_numel(&x[1]->shape);
  n->dtype = x[0]->dtype;
  return NULL;
}

tt_status_t tt_infer_gather(tt_node_t *n, const void *attrs) {
  const tt_dim_attrs_t *a = attrs;
  tt_node_t **x = n->operands;
  TT_RETURN_IF_ERROR(tt_infer_select_like(n, a->dim));
  if (x[1]->shape.rank != x[0]->shape.rank)
    return tt_status_make(TT_INVALID_ARGUMENT,
                          "Index tensor must have the same number of dimensions as input tensor");
  n->shape = x[1]->shape;
  n->dtype = x[0]->dtype;
  return NULL;
}

/* index_add and scatter: (self, index, source) along dim; self's shape. */
static tt_status_t tt_infer_add_like(tt_node_t *n, int64_t dim) {
  tt_node_t **x = n->operands;
  const char *name = tt_op_name(n->op);
  TT_RETURN_IF_ERROR(tt_infer_check_dim(dim, x[0]->shape.rank, name));
  if (!tt_is_index_dtype(x[1]->dtype))
    return tt_status_make(TT_TYPE_ERROR, "%s(): Expected dtype int64 for index, got %s", name,
                          tt_dtype_name(x[1]->dtype));
  if (x[2]->dtype != x[0]->dtype)
    return tt_status_make(TT_TYPE_ERROR,
                          "%s(): self (%s) and source (%s) must have the same scalar type", name,
                          tt_dtype_name(x[0]->dtype), tt_dtype_name(x[2]->dtype));
  n->shape = x[0]->shape;
  n->dtype = x[0]->dtype;
  return NULL;
}

tt_status_t tt_infer_index_add(tt_node_t *n, const void *attrs) {
  const tt_dim_attrs_t *a = attrs;
  return tt_infer_add_like(n, a->dim);
}

tt_status_t tt_infer_scatter(tt_node_t *n, const void *attrs) {
  const tt_scatter_attrs_t *a = attrs;
  return tt_infer_add_like(n, a->dim);
}

tt_status_t tt_infer_scatter_reduce(tt_node_t *n, const void *attrs) {
  const tt_scatter_reduce_attrs_t *a = attrs;
  tt_node_t **x = n->operands;
  int32_t r = x[0]->shape.rank;
  TT_RETURN_IF_ERROR(tt_infer_dim_in_rank(tt_op_name(n->op), a->dim, r));
  if (!tt_is_index_dtype(x[1]->dtype))
    return tt_status_make(TT_TYPE_ERROR, "scatter_reduce(): Expected dtype int64 for index");
  if (x[2]->dtype != x[0]->dtype)
    return tt_status_make(TT_TYPE_ERROR,
                          "scatter_reduce(): Expected self.dtype to be equal to src.dtype");
  if (x[1]->shape.rank != r || x[2]->shape.rank != r)
    return tt_status_make(TT_INVALID_ARGUMENT,
                          "Index tensor must have the same number of dimensions as self "
                          "tensor");
  if (a->reduce < 0 || a->reduce >= TT_SCATTER_REDUCE_COUNT)
    return tt_status_make(TT_INVALID_ARGUMENT, "scatter_reduce: unknown reduce %lld",
                          (long long)a->reduce);
  n->shape = x[0]->shape;
  n->dtype = x[0]->dtype;
  return NULL;
}

tt_status_t tt_infer_argsort(tt_node_t *n, const void *attrs) {
  const tt_argsort_attrs_t *a = attrs;
  tt_node_t **x = n->operands;
  TT_RETURN_IF_ERROR(tt_infer_dim_in_rank(tt_op_name(n->op), a->dim, x[0]->shape.rank));
  n->shape = x[0]->shape;
  n->dtype = TT_I64;
  return NULL;
}

tt_status_t tt_infer_searchsorted(tt_node_t *n, const void *attrs) {
  const tt_searchsorted_attrs_t *a = attrs;
  tt_node_t **x = n->operands;
  const tt_shape_t *s = &x[0]->shape, *v = &x[1]->shape;
  if (s->rank < 1)
    return tt_status_make(TT_INVALID_ARGUMENT,
                          "searchsorted: sorted_sequence must have at least one dimension");
  if (x[0]->dtype != x[1]->dtype)
    return tt_status_make(TT_TYPE_ERROR, "searchsorted: dtypes differ (%s and %s)",
                          tt_dtype_name(x[0]->dtype), tt_dtype_name(x[1]->dtype));
  if (s->rank > 1) {
    int ok = v->rank == s->rank;
    for (int d = 0; ok && d < s->rank - 1; ++d) ok = v->dims[d] == s->dims[d];
    if (!ok)
      return tt_status_make(TT_INVALID_ARGUMENT,
                            "torch.searchsorted(): boundaries tensor should be 1 dimension "
                            "or the first N-1 dimensions of boundaries tensor and input "
                            "value tensor must match");
  }
  if (!tt_is_index_dtype((tt_dtype_t)a->dtype))
    return tt_status_make(TT_TYPE_ERROR, "searchsorted: out dtype must be int64 or int32");
  n->shape = *v;
  n->dtype = (tt_dtype_t)a->dtype;
  return NULL;
}
