/* Shape inference of the NCHW convolution and pooling ops and of softmax
 * (src/ir/infer.h). */
#include "ir/infer.h"

tt_status_t tt_infer_conv2d(tt_node_t *n, const void *attrs) {
  const tt_conv2d_attrs_t *a = attrs;
  tt_node_t **x = n->operands;
  const tt_shape_t *s = &x[0]->shape, *w = &x[1]->shape;
  if (s->rank != 4 || w->rank != 4)
    return tt_status_make(TT_INVALID_ARGUMENT,
                          "conv2d: expected 4-D input and weight, got %d-D and %d-D", s->rank,
                          w->rank);
  int64_t g = a->groups;
  if (g < 1 || s->dims[1] != w->dims[1] * g || w->dims[0] % g) {
    TT_SHAPE_STR(sa, s);
    TT_SHAPE_STR(sw, w);
    return tt_status_make(TT_INVALID_ARGUMENT,
                          "Given groups=%lld, weight of size %s, expected input%s to have "
                          "%lld channels, but got %lld channels instead",
                          (long long)g, sw, sa, (long long)(w->dims[1] * g),
                          (long long)s->dims[1]);
  }
  n->shape.rank = 4;
  n->shape.dims[0] = s->dims[0];
  n->shape.dims[1] = w->dims[0];
  for (int d = 0; d < 2; ++d) {
    int64_t st = a->stride[d], p = a->padding[d], dil = a->dilation[d];
    /* The stride is checked after the division, as before; a zero stride
     * must not divide. */
    int64_t o = st > 0 ? (s->dims[2 + d] + 2 * p - dil * (w->dims[2 + d] - 1) - 1) / st + 1 : 0;
    if (o <= 0 || st <= 0)
      return tt_status_make(TT_INVALID_ARGUMENT,
                            "conv2d: kernel size %lld with padding %lld and dilation %lld "
                            "is larger than the input size %lld",
                            (long long)w->dims[2 + d], (long long)p, (long long)dil,
                            (long long)s->dims[2 + d]);
    n->shape.dims[2 + d] = o;
  }
  n->dtype = x[0]->dtype;
  return NULL;
}

tt_status_t tt_infer_conv2d_bwd(tt_node_t *n, const void *attrs) {
  const tt_conv2d_bwd_attrs_t *a = attrs;
  n->dtype = n->operands[0]->dtype;
  return tt_infer_set_dims(&n->shape, a->out_dims, 4, tt_op_name(n->op));
}

static int64_t tt_pool_out_size(int64_t in, int64_t k, int64_t s, int64_t p, int64_t d,
                                int ceil_mode) {
  int64_t num = in + 2 * p - d * (k - 1) - 1;
  int64_t out = (ceil_mode ? (num + s - 1) / s : num / s) + 1;
  /* PyTorch: the last window must start inside the input or left padding. */
  if (ceil_mode && (out - 1) * s >= in + p) --out;
  return out;
}

/* The pooled shape of a 3-D or 4-D input; dilation NULL: 1. */
static tt_status_t tt_pool_shape(tt_node_t *n, const int64_t *kernel, const int64_t *stride,
                                 const int64_t *padding, const int64_t *dilation,
                                 int64_t ceil_mode) {
  const char *name = tt_op_name(n->op);
  const tt_shape_t *s = &n->operands[0]->shape;
  if (s->rank != 4 && s->rank != 3)
    return tt_status_make(TT_INVALID_ARGUMENT, "%s: expected 3D or 4D input, got %dD", name,
                          s->rank);
  n->shape = *s;
  for (int d = 0; d < 2; ++d) {
    int64_t k = kernel[d], st = stride[d], p = padding[d], dil = dilation ? dilation[d] : 1;
    if (k <= 0 || st <= 0 || p < 0 || p * 2 > k)
      return tt_status_make(TT_INVALID_ARGUMENT,
                            "%s: pad should be at most half of effective kernel size, but got "
                            "pad=%lld, kernel_size=%lld and stride=%lld",
                            name, (long long)p, (long long)k, (long long)st);
    int64_t o = tt_pool_out_size(s->dims[s->rank - 2 + d], k, st, p, dil, (int)ceil_mode);
    if (o <= 0)
      return tt_status_make(TT_INVALID_ARGUMENT, "%s: output size is too small (%lld)", name,
                            (long long)o);
    n->shape.dims[s->rank - 2 + d] = o;
  }
  return NULL;
}

tt_status_t tt_infer_max_pool2d(tt_node_t *n, const void *attrs) {
  const tt_max_pool2d_attrs_t *a = attrs;
  TT_RETURN_IF_ERROR(tt_pool_shape(n, a->kernel, a->stride, a->padding, a->dilation,
                                   a->ceil_mode));
  n->dtype = n->op == TT_OP_MAX_POOL2D_INDICES ? TT_I64 : n->operands[0]->dtype;
  return NULL;
}

tt_status_t tt_infer_avg_pool2d(tt_node_t *n, const void *attrs) {
  const tt_avg_pool2d_attrs_t *a = attrs;
  TT_RETURN_IF_ERROR(tt_pool_shape(n, a->kernel, a->stride, a->padding, NULL, a->ceil_mode));
  n->dtype = n->operands[0]->dtype;
  return NULL;
}

tt_status_t tt_infer_max_pool2d_bwd(tt_node_t *n, const void *attrs) {
  const tt_dims_attrs_t *a = attrs;
  n->dtype = n->operands[0]->dtype;
  return tt_infer_set_dims(&n->shape, a->dims.v, a->dims.n, tt_op_name(n->op));
}

tt_status_t tt_infer_avg_pool2d_bwd(tt_node_t *n, const void *attrs) {
  const tt_avg_pool2d_bwd_attrs_t *a = attrs;
  const char *name = tt_op_name(n->op);
  /* x's dims follow the 9 pooling ints; a rank-0 x is no pooling input. */
  if (a->dims.n < 1)
    return tt_status_make(TT_INVALID_ARGUMENT, "%s: expected %d attributes, got %d", name, 10,
                          n->num_iattrs);
  n->dtype = n->operands[0]->dtype;
  return tt_infer_set_dims(&n->shape, a->dims.v, a->dims.n, name);
}

tt_status_t tt_infer_adaptive_avg_pool2d(tt_node_t *n, const void *attrs) {
  const tt_adaptive_avg_pool2d_attrs_t *a = attrs;
  const tt_shape_t *s = &n->operands[0]->shape;
  if (s->rank != 4 && s->rank != 3)
    return tt_status_make(TT_INVALID_ARGUMENT,
                          "adaptive_avg_pool2d: expected 3D or 4D input, got %dD", s->rank);
  n->shape = *s;
  n->shape.dims[s->rank - 2] = a->out_size[0];
  n->shape.dims[s->rank - 1] = a->out_size[1];
  n->dtype = n->operands[0]->dtype;
  return NULL;
}

tt_status_t tt_infer_adaptive_avg_pool2d_bwd(tt_node_t *n, const void *attrs) {
  const tt_dims_attrs_t *a = attrs;
  n->dtype = n->operands[0]->dtype;
  return tt_infer_set_dims(&n->shape, a->dims.v, a->dims.n, tt_op_name(n->op));
}

tt_status_t tt_infer_softmax(tt_node_t *n, const void *attrs) {
  const tt_softmax_attrs_t *a = attrs;
  const tt_node_t *x = n->operands[0];
  const char *name = tt_op_name(n->op);
  TT_RETURN_IF_ERROR(tt_infer_check_dim(a->dim, x->shape.rank, name));
  n->shape = x->shape;
  n->dtype = x->dtype;
  if (a->packed) {
    /* Packed [log_softmax | softmax]: log, float32, the last dim. */
    int32_t r = x->shape.rank;
    if (!a->log || x->dtype != TT_F32 || r < 1 || a->dim != r - 1 || r >= TT_MAX_RANK)
      return tt_status_make(TT_INVALID_ARGUMENT,
                            "%s: the packed form is a float32 log_softmax along the last "
                            "dim of rank < %d, got %s rank %d dim %lld log %lld",
                            name, TT_MAX_RANK, tt_dtype_name(x->dtype), r, (long long)a->dim,
                            (long long)a->log);
    n->shape.rank = r + 1;
    n->shape.dims[0] = 2;
    for (int32_t d = 0; d < r; ++d) n->shape.dims[d + 1] = x->shape.dims[d];
  }
  return NULL;
}

tt_status_t tt_infer_softmax_bwd(tt_node_t *n, const void *attrs) {
  (void)attrs;
  n->shape = n->operands[0]->shape;
  n->dtype = n->operands[0]->dtype;
  return NULL;
}
