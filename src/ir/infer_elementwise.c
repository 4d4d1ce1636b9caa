/* Shape inference of the elementwise ops (src/ir/infer.h): unary, binary,
 * where, convert, special. */
#include "ir/infer.h"

static int tt_unary_returns_bool(int64_t op) {
  return op == TT_UN_LOGICAL_NOT || op == TT_UN_ISNAN;
}

static int tt_binary_returns_bool(int64_t op) {
  return (op >= TT_BIN_EQ && op <= TT_BIN_GE) ||
         (op >= TT_BIN_LOGICAL_AND && op <= TT_BIN_LOGICAL_XOR);
}

tt_status_t tt_infer_unary(tt_node_t *n, const void *attrs) {
  const tt_unary_attrs_t *a = attrs;
  tt_node_t **x = n->operands;
  if (a->op < 0 || a->op >= TT_UN_COUNT)
    return tt_status_make(TT_INVALID_ARGUMENT, "unary: unknown op %lld", (long long)a->op);
  n->shape = x[0]->shape;
  n->dtype = tt_unary_returns_bool(a->op) ? TT_BOOL : x[0]->dtype;
  return NULL;
}

tt_status_t tt_infer_binary(tt_node_t *n, const void *attrs) {
  const tt_binary_attrs_t *a = attrs;
  tt_node_t **x = n->operands;
  if (a->op < 0 || a->op >= TT_BIN_COUNT)
    return tt_status_make(TT_INVALID_ARGUMENT, "binary: unknown op %lld", (long long)a->op);
  if (x[0]->dtype != x[1]->dtype)
    return tt_status_make(TT_TYPE_ERROR,
                          "binary %lld: operand dtypes differ (%s and %s); the "
                          "front end must promote first",
                          (long long)a->op, tt_dtype_name(x[0]->dtype),
                          tt_dtype_name(x[1]->dtype));
  TT_RETURN_IF_ERROR(tt_infer_broadcast_shapes(&x[0]->shape, &x[1]->shape, &n->shape));
  n->dtype = tt_binary_returns_bool(a->op) ? TT_BOOL : x[0]->dtype;
  return NULL;
}

tt_status_t tt_infer_where(tt_node_t *n, const void *attrs) {
  (void)attrs;
  tt_node_t **x = n->operands;
  if (x[0]->dtype != TT_BOOL)
    return tt_status_make(TT_TYPE_ERROR,
                          "where expected condition to be a boolean tensor, but got a tensor "
                          "with dtype %s",
                          tt_dtype_name(x[0]->dtype));
  if (x[1]->dtype != x[2]->dtype)
    return tt_status_make(TT_TYPE_ERROR, "where: expected scalar type %s but found %s",
                          tt_dtype_name(x[1]->dtype), tt_dtype_name(x[2]->dtype));
  tt_shape_t t;
  TT_RETURN_IF_ERROR(tt_infer_broadcast_shapes(&x[1]->shape, &x[2]->shape, &t));
  TT_RETURN_IF_ERROR(tt_infer_broadcast_shapes(&x[0]->shape, &t, &n->shape));
  n->dtype = x[1]->dtype;
  return NULL;
}

tt_status_t tt_infer_convert(tt_node_t *n, const void *attrs) {
  const tt_convert_attrs_t *a = attrs;
  if (a->dtype < 0 || a->dtype >= TT_DTYPE_COUNT)
    return tt_status_make(TT_TYPE_ERROR, "convert: unknown dtype %lld", (long long)a->dtype);
  n->shape = n->operands[0]->shape;
  n->dtype = (tt_dtype_t)a->dtype;
  return NULL;
}

tt_status_t tt_infer_special(tt_node_t *n, const void *attrs) {
  const tt_special_attrs_t *a = attrs;
  tt_node_t **x = n->operands;
  if (a->op < 0 || a->op >= TT_SP_COUNT)
    return tt_status_make(TT_INVALID_ARGUMENT, "special: unknown op %lld", (long long)a->op);
  if (!tt_shape_equal(&x[0]->shape, &x[1]->shape))
    return tt_status_make(TT_INVALID_ARGUMENT, "special: operands must have one shape");
  if (x[0]->dtype != TT_F32 && x[0]->dtype != TT_F64 && x[0]->dtype != TT_F16 &&
      x[0]->dtype != TT_BF16)
    return tt_status_make(TT_TYPE_ERROR, "special: expected a floating point tensor, got %s",
                          tt_dtype_name(x[0]->dtype));
  n->shape = x[0]->shape;
  n->dtype = x[0]->dtype;
  return NULL;
}

tt_status_t tt_infer_fused(tt_node_t *n, const void *attrs) {
  (void)attrs;
  /* Fused programs exist only in linearised graphs. */
  return tt_status_make(TT_INVALID_ARGUMENT, "unknown op %d", (int)n->op);
}
