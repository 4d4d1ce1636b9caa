/* Shape inference of the ops that only move elements (src/ir/infer.h):
 * broadcast, reshape, transpose, slice, slice_scatter, concat, pad, flip,
 * bitcast. */
#include "ir/infer.h"

tt_status_t tt_infer_broadcast(tt_node_t *n, const void *attrs) {
  const tt_dims_attrs_t *a = attrs;
  tt_node_t **x = n->operands;
  TT_RETURN_IF_ERROR(tt_infer_set_dims(&n->shape, a->dims.v, a->dims.n, tt_op_name(n->op)));
  if (!tt_shape_broadcasts_to(&x[0]->shape, &n->shape)) {
    TT_SHAPE_STR(sa, &x[0]->shape);
    TT_SHAPE_STR(sb, &n->shape);
    return tt_status_make(TT_INVALID_ARGUMENT,
                          "The expanded size of the tensor must match the existing size "
                          "(cannot broadcast %s to %s)", sa, sb);
  }
  n->dtype = x[0]->dtype;
  return NULL;
}

tt_status_t tt_infer_reshape(tt_node_t *n, const void *attrs) {
  const tt_dims_attrs_t *a = attrs;
  tt_node_t **x = n->operands;
  TT_RETURN_IF_ERROR(tt_infer_set_dims(&n->shape, a->dims.v, a->dims.n, tt_op_name(n->op)));
  if (tt_shape_numel(&n->shape) != tt_shape_numel(&x[0]->shape)) {
    TT_SHAPE_STR(sa, &x[0]->shape);
    TT_SHAPE_STR(sb, &n->shape);
    return tt_status_make(TT_INVALID_ARGUMENT,
                          "shape '%s' is invalid for input of size %lld (input shape %s)", sb,
                          (long long)tt_shape_numel(&x[0]->shape), sa);
  }
  n->dtype = x[0]->dtype;
  return NULL;
}

tt_status_t tt_infer_transpose(tt_node_t *n, const void *attrs) {
  const tt_transpose_attrs_t *a = attrs;
  const tt_shape_t *s = &n->operands[0]->shape;
  if (a->perm.n != s->rank)
    return tt_status_make(TT_INVALID_ARGUMENT,
                          "permute(sparse_coo): number of dimensions in the tensor input does "
                          "not match the length of the desired ordering of dimensions i.e. "
                          "input.dim() = %d is not equal to len(dims) = %d",
                          s->rank, a->perm.n);
  uint32_t seen = 0;
  n->shape.rank = s->rank;
  for (int d = 0; d < s->rank; ++d) {
    int64_t p = a->perm.v[d];
    if (p < 0 || p >= s->rank || (seen & (1u << p)))
      return tt_status_make(TT_INVALID_ARGUMENT, "permute(): duplicate or invalid dim %lld",
                            (long long)p);
    seen |= 1u << p;
    n->shape.dims[d] = s->dims[p];
  }
  n->dtype = n->operands[0]->dtype;
  return NULL;
}

/* The shape of slice attributes a of an operand of shape s into *out. */
static tt_status_t tt_slice_shape(const tt_node_t *n, const tt_slice_attrs_t *a,
                                  const tt_shape_t *s, tt_shape_t *out) {
  const char *name = tt_op_name(n->op);
  /* One start, limit and step per dim of the operand. */
  if (a->start.n != s->rank)
    return tt_status_make(TT_INVALID_ARGUMENT, "%s: expected %d attributes, got %d", name,
                          3 * s->rank, n->num_iattrs);
  out->rank = s->rank;
  for (int d = 0; d < s->rank; ++d) {
    int64_t st = a->start.v[d], lim = a->limit.v[d], step = a->step.v[d];
    if (step < 1 || st < 0 || lim > s->dims[d] || st > lim)
      return tt_status_make(TT_OUT_OF_RANGE,
                            "%s: invalid slice start=%lld limit=%lld step=%lld for dim %d of "
                            "size %lld",
                            name, (long long)st, (long long)lim, (long long)step, d,
                            (long long)s->dims[d]);
    out->dims[d] = (lim - st + step - 1) / step;
  }
  return NULL;
}

tt_status_t tt_infer_slice(tt_node_t *n, const void *attrs) {
  TT_RETURN_IF_ERROR(tt_slice_shape(n, attrs, &n->operands[0]->shape, &n->shape));
  n->dtype = n->operands[0]->dtype;
  return NULL;
}

tt_status_t tt_infer_slice_scatter(tt_node_t *n, const void *attrs) {
  tt_node_t **x = n->operands;
  tt_shape_t sl;
  TT_RETURN_IF_ERROR(tt_slice_shape(n, attrs, &x[0]->shape, &sl));
  if (!tt_shape_equal(&sl, &x[1]->shape)) {
    TT_SHAPE_STR(s1, &sl);
    TT_SHAPE_STR(s2, &x[1]->shape);
    return tt_status_make(TT_INVALID_ARGUMENT,
                          "slice_scatter: expected src to have a size equal to the slice "
                          "of self. src size = %s, slice size = %s", s2, s1);
  }
  if (x[1]->dtype != x[0]->dtype)
    return tt_status_make(TT_TYPE_ERROR, "slice_scatter: dtypes differ (%s and %s)",
                          tt_dtype_name(x[0]->dtype), tt_dtype_name(x[1]->dtype));
  n->shape = x[0]->shape;
  n->dtype = x[0]->dtype;
  return NULL;
}

tt_status_t tt_infer_concat(tt_node_t *n, const void *attrs) {
  const tt_concat_attrs_t *a = attrs;
  tt_node_t **x = n->operands;
  /* The entry admits no operands so that the empty list gets PyTorch's
   * message here. */
  if (n->num_operands < 1)
    return tt_status_make(TT_INVALID_ARGUMENT,
                          "torch.cat(): expected a non-empty list of Tensors");
  const tt_shape_t *s = &x[0]->shape;
  int64_t dim = a->dim;
  TT_RETURN_IF_ERROR(tt_infer_check_dim(dim, s->rank, "cat"));
  n->shape = *s;
  n->shape.dims[dim] = 0;
  for (int i = 0; i < n->num_operands; ++i) {
    const tt_shape_t *b = &x[i]->shape;
    if (x[i]->dtype != x[0]->dtype)
      return tt_status_make(TT_TYPE_ERROR, "cat: operand dtypes differ (%s and %s)",
                            tt_dtype_name(x[0]->dtype), tt_dtype_name(x[i]->dtype));
    if (b->rank != s->rank)
      return tt_status_make(TT_INVALID_ARGUMENT,
                            "Tensors must have same number of dimensions: got %d and %d",
                            s->rank, b->rank);
    for (int d = 0; d < s->rank; ++d)
      if (d != dim && b->dims[d] != s->dims[d])
        return tt_status_make(TT_INVALID_ARGUMENT,
                              "Sizes of tensors must match except in dimension %lld. Expected "
                              "size %lld but got size %lld for tensor number %d in the list.",
                              (long long)dim, (long long)s->dims[d], (long long)b->dims[d], i);
    n->shape.dims[dim] += b->dims[dim];
  }
  n->dtype = x[0]->dtype;
  return NULL;
}

tt_status_t tt_infer_pad(tt_node_t *n, const void *attrs) {
  const tt_pad_attrs_t *a = attrs;
  const tt_shape_t *s = &n->operands[0]->shape;
  /* One low and one high pad per dim of the operand. */
  if (a->lo.n != s->rank)
    return tt_status_make(TT_INVALID_ARGUMENT, "%s: expected %d attributes, got %d",
                          tt_op_name(n->op), 2 * s->rank, n->num_iattrs);
  n->shape = *s;
  for (int d = 0; d < s->rank; ++d) {
    n->shape.dims[d] = s->dims[d] + a->lo.v[d] + a->hi.v[d];
    if (n->shape.dims[d] < 0)
      return tt_status_make(TT_INVALID_ARGUMENT, "pad: resulting size %lld of dim %d is negative",
                            (long long)n->shape.dims[d], d);
  }
  n->dtype = n->operands[0]->dtype;
  return NULL;
}

tt_status_t tt_infer_flip(tt_node_t *n, const void *attrs) {
  (void)attrs;
  n->shape = n->operands[0]->shape;
  n->dtype = n->operands[0]->dtype;
  return NULL;
}

tt_status_t tt_infer_bitcast(tt_node_t *n, const void *attrs) {
  const tt_bitcast_attrs_t *a = attrs;
  tt_node_t **x = n->operands;
  if (a->dtype < 0 || a->dtype >= TT_DTYPE_COUNT)
    return tt_status_make(TT_TYPE_ERROR, "bitcast: unknown dtype %lld", (long long)a->dtype);
  int64_t nd = a->dims.n;
  if (nd > TT_MAX_RANK)
    return tt_status_make(TT_INVALID_ARGUMENT, "bitcast: rank %lld too large", (long long)nd);
  n->shape.rank = (int32_t)nd;
  for (int64_t d = 0; d < nd; ++d) n->shape.dims[d] = a->dims.v[d];
  n->dtype = (tt_dtype_t)a->dtype;
  size_t in_bytes = (size_t)tt_shape_numel(&x[0]->shape) * tt_dtype_size(x[0]->dtype);
  size_t out_bytes = (size_t)tt_shape_numel(&n->shape) * tt_dtype_size(n->dtype);
  if (in_bytes != out_bytes)
    return tt_status_make(TT_INVALID_ARGUMENT,
                          "bitcast: %zu bytes cannot be viewed as %zu bytes of %s", in_bytes,
                          out_bytes, tt_dtype_name(n->dtype));
  return NULL;
}

/* The optimization barrier's node `index`: that operand's shape and dtype
 * (the other operands are read only so the barrier orders them). */
tt_status_t tt_infer_opt_barrier(tt_node_t *n, const void *attrs) {
  const tt_opt_barrier_attrs_t *a = attrs;
  if (a->index < 0 || a->index >= n->num_operands)
    return tt_status_make(TT_INVALID_ARGUMENT,
                          "opt_barrier: index %lld out of range for %d operands",
                          (long long)a->index, (int)n->num_operands);
  const tt_node_t *x = n->operands[a->index];
  n->shape = x->shape;
  n->dtype = x->dtype;
  return NULL;
}
