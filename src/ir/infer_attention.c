/* Shape inference of attention and its backward (src/ir/infer.h). */
#include "ir/infer.h"

static int tt_is_float16_32(tt_dtype_t dt) {
  return dt == TT_F32 || dt == TT_F16 || dt == TT_BF16;
}

/* Attention's q, k, v (and optional mask) at x[0..3]: the checks of
 * tt_kernel_attention, at record time. */
static tt_status_t tt_attention_check(const tt_node_t *n, tt_node_t *const *x, int has_mask) {
  const char *name = tt_op_name(n->op);
  for (int i = 0; i < 3; ++i)
    if (x[i]->shape.rank != 4)
      return tt_status_make(TT_INVALID_ARGUMENT,
                            "%s: query, key and value must be rank 4 [B, H, L, E], got rank %d",
                            name, x[i]->shape.rank);
  if (!tt_is_float16_32(x[0]->dtype) || x[1]->dtype != x[0]->dtype ||
      x[2]->dtype != x[0]->dtype)
    return tt_status_make(TT_TYPE_ERROR,
                          "%s: query, key and value must share one of float32, float16, "
                          "bfloat16, got %s, %s, %s", name, tt_dtype_name(x[0]->dtype),
                          tt_dtype_name(x[1]->dtype), tt_dtype_name(x[2]->dtype));
  const int64_t *q = x[0]->shape.dims, *k = x[1]->shape.dims, *v = x[2]->shape.dims;
  if (k[0] != q[0] || v[0] != q[0] || k[1] != q[1] || v[1] != q[1] || k[3] != q[3] ||
      v[2] != k[2])
    return tt_status_make(TT_INVALID_ARGUMENT,
                          "%s: shapes do not match: query [%lld, %lld, %lld, %lld], key [%lld, "
                          "%lld, %lld, %lld], value [%lld, %lld, %lld, %lld]", name,
                          (long long)q[0], (long long)q[1], (long long)q[2], (long long)q[3],
                          (long long)k[0], (long long)k[1], (long long)k[2], (long long)k[3],
                          (long long)v[0], (long long)v[1], (long long)v[2], (long long)v[3]);
  if (!has_mask) return NULL;
  const tt_node_t *m = x[3];
  const int64_t full[4] = {q[0], q[1], q[2], k[2]};
  int ok = m->shape.rank == 4 && tt_is_float16_32(m->dtype);
  for (int d = 0; ok && d < 4; ++d) ok = m->shape.dims[d] == 1 || m->shape.dims[d] == full[d];
  if (!ok)
    return tt_status_make(TT_INVALID_ARGUMENT,
                          "%s: the mask (%s, rank %d) must be a float tensor of rank 4 that "
                          "broadcasts to [%lld, %lld, %lld, %lld]", name,
                          tt_dtype_name(m->dtype), m->shape.rank, (long long)full[0],
                          (long long)full[1], (long long)full[2], (long long)full[3]);
  return NULL;
}

tt_status_t tt_infer_attention(tt_node_t *n, const void *attrs) {
  const tt_attention_attrs_t *a = attrs;
  tt_node_t **x = n->operands;
  TT_RETURN_IF_ERROR(tt_attention_check(n, x, n->num_operands == 4));
  const int64_t *q = x[0]->shape.dims;
  if (a->lse) {
    n->shape = (tt_shape_t){.rank = 3, .dims = {q[0], q[1], q[2]}};
    n->dtype = TT_F32;
  } else {
    n->shape = (tt_shape_t){.rank = 4, .dims = {q[0], q[1], q[2], x[2]->shape.dims[3]}};
    n->dtype = x[0]->dtype;
  }
  return NULL;
}

tt_status_t tt_infer_attention_bwd(tt_node_t *n, const void *attrs) {
  (void)attrs;
  /* (grad_out, q, k, v[, mask]) */
  tt_node_t **x = n->operands;
  TT_RETURN_IF_ERROR(tt_attention_check(n, x + 1, n->num_operands == 5));
  const int64_t *q = x[1]->shape.dims;
  const int64_t od[4] = {q[0], q[1], q[2], x[3]->shape.dims[3]};
  const tt_node_t *g = x[0];
  int ok = g->dtype == x[1]->dtype && g->shape.rank == 4;
  for (int d = 0; ok && d < 4; ++d) ok = g->shape.dims[d] == od[d];
  if (!ok)
    return tt_status_make(TT_INVALID_ARGUMENT,
                          "attention_bwd: grad_out must be %s [%lld, %lld, %lld, %lld]",
                          tt_dtype_name(x[1]->dtype), (long long)od[0], (long long)od[1],
                          (long long)od[2], (long long)od[3]);
  n->shape = (tt_shape_t){.rank = 1,
                          .dims = {tt_shape_numel(&x[1]->shape) + tt_shape_numel(&x[2]->shape) +
                                   tt_shape_numel(&x[3]->shape)}};
  n->dtype = x[1]->dtype;
  return NULL;
}
