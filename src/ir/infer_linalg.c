/* Shape inference of the products and the batched linear algebra ops
 * (src/ir/infer.h): dot, linalg. */
#include "ir/infer.h"

tt_status_t tt_infer_dot(tt_node_t *n, const void *attrs) {
  const tt_dot_attrs_t *t = attrs;
  tt_node_t **x = n->operands;
  const tt_shape_t *a = &x[0]->shape, *b = &x[1]->shape;
  if (a->rank != 3 || b->rank != 3)
    return tt_status_make(TT_INVALID_ARGUMENT, "dot: operands must be rank 3, got %d and %d",
                          a->rank, b->rank);
  if (x[0]->dtype != x[1]->dtype)
    return tt_status_make(TT_TYPE_ERROR,
                          "expected m1 and m2 to have the same dtype, but got: %s != %s",
                          tt_dtype_name(x[0]->dtype), tt_dtype_name(x[1]->dtype));
  int64_t m = t->trans_a ? a->dims[2] : a->dims[1], ka = t->trans_a ? a->dims[1] : a->dims[2];
  int64_t kb = t->trans_b ? b->dims[2] : b->dims[1], nn = t->trans_b ? b->dims[1] : b->dims[2];
  if (ka != kb || (b->dims[0] != a->dims[0] && b->dims[0] != 1)) {
    TT_SHAPE_STR(sa, a);
    TT_SHAPE_STR(sb, b);
    return tt_status_make(TT_INVALID_ARGUMENT,
                          "mat1 and mat2 shapes cannot be multiplied (%lldx%lld and %lldx%lld; "
                          "batched shapes %s and %s)",
                          (long long)m, (long long)ka, (long long)kb, (long long)nn, sa, sb);
  }
  n->shape.rank = 3;
  n->shape.dims[0] = a->dims[0];
  n->shape.dims[1] = m;
  n->shape.dims[2] = nn;
  n->dtype = x[0]->dtype;
  return NULL;
}

tt_status_t tt_infer_linalg(tt_node_t *n, const void *attrs) {
  const tt_linalg_attrs_t *a = attrs;
  tt_node_t **x = n->operands;
  if (a->op < 0 || a->op >= TT_LINALG_COUNT)
    return tt_status_make(TT_INVALID_ARGUMENT, "linalg: unknown op %lld", (long long)a->op);
  for (int i = 0; i < n->num_operands; ++i) {
    if (x[i]->shape.rank != 3)
      return tt_status_make(TT_INVALID_ARGUMENT, "linalg: operand %d must be rank 3, got %d", i,
                            x[i]->shape.rank);
    if (x[i]->dtype != TT_F32 && x[i]->dtype != TT_F64 && x[i]->dtype != TT_F16 &&
        x[i]->dtype != TT_BF16)
      return tt_status_make(TT_TYPE_ERROR, "linalg: expected a floating point tensor, got %s",
                            tt_dtype_name(x[i]->dtype));
  }
  int64_t P = tt_linalg_out_size((tt_linalg_op_t)a->op, &x[0]->shape,
                                 n->num_operands > 1 ? &x[1]->shape : NULL,
                                 n->num_operands > 2 ? &x[2]->shape : NULL);
  if (P < 0) return tt_status_make(TT_INVALID_ARGUMENT, "linalg: bad operands");
  n->shape.rank = 2;
  n->shape.dims[0] = x[0]->shape.dims[0];
  n->shape.dims[1] = P;
  n->dtype = x[0]->dtype;
  return NULL;
}
