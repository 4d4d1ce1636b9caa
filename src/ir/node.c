/* IR nodes: creation, reference counting, and shape/dtype inference.
 * Every user-facing check of an op's operands happens here, so a bad op is
 * refused when it is recorded, with a message naming the values. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "torchtpu/ir.h"
#include "ir/ops_extra.h"
#include "torchtpu/runtime.h"

static const char *const tt_op_names_[TT_OP_COUNT] = {
    "param", "scalar", "unary", "binary", "where", "convert", "broadcast",
    "reshape", "iota", "reduce", "scan", "dot", "conv2d", "conv2d_bwd_input",
    "conv2d_bwd_weight", "max_pool2d", "max_pool2d_indices", "max_pool2d_bwd",
    "avg_pool2d", "avg_pool2d_bwd", "adaptive_avg_pool2d",
    "adaptive_avg_pool2d_bwd", "transpose", "slice", "slice_scatter", "concat",
    "pad", "flip", "index_select", "index_add", "gather", "scatter", "softmax",
    "softmax_bwd", "rng", "fused",
    "argsort", "searchsorted", "scatter_reduce", "cumulative", "linalg", "bitcast",
    "special", "fft",
    /* Designated, so ops added above these keep their names. */
    [TT_OP_ALL_REDUCE] = "all_reduce",
    [TT_OP_ALL_GATHER] = "all_gather",
    [TT_OP_REDUCE_SCATTER] = "reduce_scatter",
    [TT_OP_ALL_TO_ALL] = "all_to_all",
    [TT_OP_COLLECTIVE_PERMUTE] = "collective_permute",
    [TT_OP_SPMD_FULL_TO_SHARD] = "spmd_full_to_shard",
    [TT_OP_SPMD_SHARD_TO_FULL] = "spmd_shard_to_full",
    [TT_OP_ATTENTION] = "attention",
    [TT_OP_ATTENTION_BWD] = "attention_bwd",
    [TT_OP_LAYER_NORM] = "layer_norm",
    [TT_OP_LAYER_NORM_BWD] = "layer_norm_bwd",
};

const char *tt_op_name(tt_op_t op) {
  return (op >= 0 && op < TT_OP_COUNT) ? tt_op_names_[op] : "?";
}

static void tt_shape_format(const tt_shape_t *s, char *buf, size_t n) {
  size_t used = (size_t)snprintf(buf, n, "[");
  for (int i = 0; i < s->rank && used < n; ++i)
    used += (size_t)snprintf(buf + used, n - used, i ? ", %lld" : "%lld",
                             (long long)s->dims[i]);
  if (used < n) snprintf(buf + used, n - used, "]");
}

#define SHAPE_STR(name, s) \
  char name[160];          \
  tt_shape_format((s), name, sizeof(name))

static tt_status_t tt_set_dims(tt_shape_t *out, const int64_t *dims, int64_t n,
                               const char *what) {
  if (n < 0 || n > TT_MAX_RANK)
    return tt_status_make(TT_INVALID_ARGUMENT, "%s: rank %lld exceeds the maximum %d",
                          what, (long long)n, TT_MAX_RANK);
  out->rank = (int32_t)n;
  for (int64_t i = 0; i < n; ++i) {
    if (dims[i] < 0)
      return tt_status_make(TT_INVALID_ARGUMENT, "%s: negative dimension %lld at %lld",
                            what, (long long)dims[i], (long long)i);
    out->dims[i] = dims[i];
  }
  return NULL;
}

/* numpy broadcasting of a and b into out. */
static tt_status_t tt_broadcast_shapes(const tt_shape_t *a, const tt_shape_t *b,
                                       tt_shape_t *out) {
  int r = a->rank > b->rank ? a->rank : b->rank;
  out->rank = r;
  /* From the last dim back, as PyTorch does: its message names the last
   * mismatching dim. */
  for (int i = r - 1; i >= 0; --i) {
    int ia = a->rank - r + i, ib = b->rank - r + i;
    int64_t da = ia >= 0 ? a->dims[ia] : 1, db = ib >= 0 ? b->dims[ib] : 1;
    if (da != db && da != 1 && db != 1) {
      SHAPE_STR(sa, a);
      SHAPE_STR(sb, b);
      return tt_status_make(TT_INVALID_ARGUMENT,
                            "The size of tensor a (%lld) must match the size of tensor b "
                            "(%lld) at non-singleton dimension %d (shapes %s and %s)",
                            (long long)da, (long long)db, i, sa, sb);
    }
    out->dims[i] = da == 1 ? db : da;
  }
  return NULL;
}

static int tt_unary_returns_bool(int64_t op) {
  return op == TT_UN_LOGICAL_NOT || op == TT_UN_ISNAN;
}

static int tt_binary_returns_bool(int64_t op) {
  return (op >= TT_BIN_EQ && op <= TT_BIN_GE) ||
         (op >= TT_BIN_LOGICAL_AND && op <= TT_BIN_LOGICAL_XOR);
}

static tt_status_t tt_check_dim(int64_t dim, int32_t rank, const char *what) {
  if (dim < 0 || dim >= (rank > 0 ? rank : 1))
    return tt_status_make(TT_OUT_OF_RANGE,
                          "%s: dimension out of range (expected to be in range of [%d, %d], "
                          "but got %lld)",
                          what, rank > 0 ? -rank : -1, rank > 0 ? rank - 1 : 0,
                          (long long)dim);
  return NULL;
}

static tt_status_t tt_need_attrs(const char *what, int32_t have, int32_t need) {
  if (have < need)
    return tt_status_make(TT_INVALID_ARGUMENT, "%s: expected %d attributes, got %d",
                          what, need, have);
  return NULL;
}

static int64_t tt_pool_out_size(int64_t in, int64_t k, int64_t s, int64_t p,
                                int64_t d, int ceil_mode) {
  int64_t num = in + 2 * p - d * (k - 1) - 1;
  int64_t out = (ceil_mode ? (num + s - 1) / s : num / s) + 1;
  /* PyTorch: the last window must start inside the input or left padding. */
  if (ceil_mode && (out - 1) * s >= in + p) --out;
  return out;
}

static tt_status_t tt_infer(tt_node_t *n) {
  tt_node_t **x = n->operands;
  const int64_t *ia = n->iattrs;
  const char *name = tt_op_name(n->op);
  for (int i = 0; i < n->num_operands; ++i)
    if (x[i]->device != n->device)
      return tt_status_make(TT_INVALID_ARGUMENT,
                            "Expected all tensors to be on the same device, but found at "
                            "least two devices, xla:%d and xla:%d!",
                            n->device, x[i]->device);
#define NEED_OPERANDS(k)                                                              \
  if (n->num_operands != (k))                                                         \
  return tt_status_make(TT_INVALID_ARGUMENT, "%s: expected %d operands, got %d", name, \
                        (k), n->num_operands)
  switch (n->op) {
    case TT_OP_PARAM:
    case TT_OP_SCALAR:
      return tt_status_make(TT_INTERNAL, "param/scalar nodes have their own constructors");
    case TT_OP_UNARY:
      NEED_OPERANDS(1);
      TT_RETURN_IF_ERROR(tt_need_attrs(name, n->num_iattrs, 1));
      if (ia[0] < 0 || ia[0] >= TT_UN_COUNT)
        return tt_status_make(TT_INVALID_ARGUMENT, "unary: unknown op %lld", (long long)ia[0]);
      n->shape = x[0]->shape;
      n->dtype = tt_unary_returns_bool(ia[0]) ? TT_BOOL : x[0]->dtype;
      return NULL;
    case TT_OP_BINARY:
      NEED_OPERANDS(2);
      TT_RETURN_IF_ERROR(tt_need_attrs(name, n->num_iattrs, 1));
      if (ia[0] < 0 || ia[0] >= TT_BIN_COUNT)
        return tt_status_make(TT_INVALID_ARGUMENT, "binary: unknown op %lld", (long long)ia[0]);
      if (x[0]->dtype != x[1]->dtype)
        return tt_status_make(TT_TYPE_ERROR,
                              "binary %lld: operand dtypes differ (%s and %s); the "
                              "front end must promote first",
                              (long long)ia[0], tt_dtype_name(x[0]->dtype),
                              tt_dtype_name(x[1]->dtype));
      TT_RETURN_IF_ERROR(tt_broadcast_shapes(&x[0]->shape, &x[1]->shape, &n->shape));
      n->dtype = tt_binary_returns_bool(ia[0]) ? TT_BOOL : x[0]->dtype;
      return NULL;
    case TT_OP_WHERE: {
      NEED_OPERANDS(3);
      if (x[0]->dtype != TT_BOOL)
        return tt_status_make(TT_TYPE_ERROR, "where expected condition to be a boolean tensor, but got a tensor with dtype %s",
                              tt_dtype_name(x[0]->dtype));
      if (x[1]->dtype != x[2]->dtype)
        return tt_status_make(TT_TYPE_ERROR, "where: expected scalar type %s but found %s",
                              tt_dtype_name(x[1]->dtype), tt_dtype_name(x[2]->dtype));
      tt_shape_t t;
      TT_RETURN_IF_ERROR(tt_broadcast_shapes(&x[1]->shape, &x[2]->shape, &t));
      TT_RETURN_IF_ERROR(tt_broadcast_shapes(&x[0]->shape, &t, &n->shape));
      n->dtype = x[1]->dtype;
      return NULL;
    }
    case TT_OP_CONVERT:
      NEED_OPERANDS(1);
      TT_RETURN_IF_ERROR(tt_need_attrs(name, n->num_iattrs, 1));
      if (ia[0] < 0 || ia[0] >= TT_DTYPE_COUNT)
        return tt_status_make(TT_TYPE_ERROR, "convert: unknown dtype %lld", (long long)ia[0]);
      n->shape = x[0]->shape;
      n->dtype = (tt_dtype_t)ia[0];
      return NULL;
    case TT_OP_BROADCAST: {
      NEED_OPERANDS(1);
      TT_RETURN_IF_ERROR(tt_set_dims(&n->shape, ia, n->num_iattrs, name));
      if (!tt_shape_broadcasts_to(&x[0]->shape, &n->shape)) {
        SHAPE_STR(sa, &x[0]->shape);
        SHAPE_STR(sb, &n->shape);
        return tt_status_make(TT_INVALID_ARGUMENT,
                              "The expanded size of the tensor must match the existing size "
                              "(cannot broadcast %s to %s)", sa, sb);
      }
      n->dtype = x[0]->dtype;
      return NULL;
    }
    case TT_OP_RESHAPE: {
      NEED_OPERANDS(1);
      TT_RETURN_IF_ERROR(tt_set_dims(&n->shape, ia, n->num_iattrs, name));
      if (tt_shape_numel(&n->shape) != tt_shape_numel(&x[0]->shape)) {
        SHAPE_STR(sa, &x[0]->shape);
        SHAPE_STR(sb, &n->shape);
        return tt_status_make(TT_INVALID_ARGUMENT, "shape '%s' is invalid for input of size %lld (input shape %s)",
                              sb, (long long)tt_shape_numel(&x[0]->shape), sa);
      }
      n->dtype = x[0]->dtype;
      return NULL;
    }
    case TT_OP_IOTA:
      NEED_OPERANDS(0);
      TT_RETURN_IF_ERROR(tt_need_attrs(name, n->num_iattrs, 2));
      n->dtype = (tt_dtype_t)ia[0];
      return tt_set_dims(&n->shape, ia + 1, 1, name);
    case TT_OP_REDUCE: {
      NEED_OPERANDS(1);
      TT_RETURN_IF_ERROR(tt_need_attrs(name, n->num_iattrs, 4));
      uint32_t mask = (uint32_t)ia[1];
      int keep = (int)ia[2];
      const tt_shape_t *s = &x[0]->shape;
      if (s->rank < 32 && (mask >> (s->rank > 0 ? s->rank : 1)) != 0)
        return tt_status_make(TT_OUT_OF_RANGE, "reduce: dims mask 0x%x out of range for rank %d",
                              mask, s->rank);
      n->shape.rank = 0;
      for (int d = 0; d < s->rank; ++d) {
        if (mask & (1u << d)) {
          if (s->dims[d] == 0 && ia[0] != TT_RED_SUM && ia[0] != TT_RED_PROD &&
              ia[0] != TT_RED_MEAN && ia[0] != TT_RED_ANY && ia[0] != TT_RED_ALL)
            return tt_status_make(TT_INVALID_ARGUMENT,
                                  "Expected reduction dim %d to have non-zero size.", d);
          if (keep) n->shape.dims[n->shape.rank++] = 1;
        } else {
          n->shape.dims[n->shape.rank++] = s->dims[d];
        }
      }
      n->dtype = (tt_dtype_t)ia[3];
      return NULL;
    }
    case TT_OP_SCAN:
      NEED_OPERANDS(1);
      TT_RETURN_IF_ERROR(tt_need_attrs(name, n->num_iattrs, 3));
      TT_RETURN_IF_ERROR(tt_check_dim(ia[1], x[0]->shape.rank, name));
      n->shape = x[0]->shape;
      n->dtype = (tt_dtype_t)ia[2];
      return NULL;
    case TT_OP_DOT: {
      NEED_OPERANDS(2);
      TT_RETURN_IF_ERROR(tt_need_attrs(name, n->num_iattrs, 2));
      const tt_shape_t *a = &x[0]->shape, *b = &x[1]->shape;
      if (a->rank != 3 || b->rank != 3)
        return tt_status_make(TT_INVALID_ARGUMENT, "dot: operands must be rank 3, got %d and %d",
                              a->rank, b->rank);
      if (x[0]->dtype != x[1]->dtype)
        return tt_status_make(TT_TYPE_ERROR,
                              "expected m1 and m2 to have the same dtype, but got: %s != %s",
                              tt_dtype_name(x[0]->dtype), tt_dtype_name(x[1]->dtype));
      int64_t m = ia[0] ? a->dims[2] : a->dims[1], ka = ia[0] ? a->dims[1] : a->dims[2];
      int64_t kb = ia[1] ? b->dims[2] : b->dims[1], nn = ia[1] ? b->dims[1] : b->dims[2];
      if (ka != kb || (b->dims[0] != a->dims[0] && b->dims[0] != 1)) {
        SHAPE_STR(sa, a);
        SHAPE_STR(sb, b);
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
    case TT_OP_CONV2D: {
      NEED_OPERANDS(2);
      TT_RETURN_IF_ERROR(tt_need_attrs(name, n->num_iattrs, 7));
      const tt_shape_t *a = &x[0]->shape, *w = &x[1]->shape;
      if (a->rank != 4 || w->rank != 4)
        return tt_status_make(TT_INVALID_ARGUMENT,
                              "conv2d: expected 4-D input and weight, got %d-D and %d-D",
                              a->rank, w->rank);
      int64_t g = ia[6];
      if (g < 1 || a->dims[1] != w->dims[1] * g || w->dims[0] % g) {
        SHAPE_STR(sa, a);
        SHAPE_STR(sw, w);
        return tt_status_make(TT_INVALID_ARGUMENT,
                              "Given groups=%lld, weight of size %s, expected input%s to have "
                              "%lld channels, but got %lld channels instead",
                              (long long)g, sw, sa, (long long)(w->dims[1] * g),
                              (long long)a->dims[1]);
      }
      n->shape.rank = 4;
      n->shape.dims[0] = a->dims[0];
      n->shape.dims[1] = w->dims[0];
      for (int d = 0; d < 2; ++d) {
        int64_t o = (a->dims[2 + d] + 2 * ia[2 + d] - ia[4 + d] * (w->dims[2 + d] - 1) - 1) /
                        ia[d] + 1;
        if (o <= 0 || ia[d] <= 0)
          return tt_status_make(TT_INVALID_ARGUMENT,
                                "conv2d: kernel size %lld with padding %lld and dilation %lld "
                                "is larger than the input size %lld",
                                (long long)w->dims[2 + d], (long long)ia[2 + d],
                                (long long)ia[4 + d], (long long)a->dims[2 + d]);
        n->shape.dims[2 + d] = o;
      }
      n->dtype = x[0]->dtype;
      return NULL;
    }
    case TT_OP_CONV2D_BWD_INPUT:
    case TT_OP_CONV2D_BWD_WEIGHT:
      NEED_OPERANDS(2);
      TT_RETURN_IF_ERROR(tt_need_attrs(name, n->num_iattrs, 11));
      n->dtype = x[0]->dtype;
      return tt_set_dims(&n->shape, ia + 7, 4, name);
    case TT_OP_MAX_POOL2D:
    case TT_OP_MAX_POOL2D_INDICES:
    case TT_OP_AVG_POOL2D: {
      NEED_OPERANDS(1);
      int avg = n->op == TT_OP_AVG_POOL2D;
      TT_RETURN_IF_ERROR(tt_need_attrs(name, n->num_iattrs, 9));
      const tt_shape_t *a = &x[0]->shape;
      if (a->rank != 4 && a->rank != 3)
        return tt_status_make(TT_INVALID_ARGUMENT, "%s: expected 3D or 4D input, got %dD",
                              name, a->rank);
      n->shape = *a;
      for (int d = 0; d < 2; ++d) {
        int64_t k = ia[d], s = ia[2 + d], p = ia[4 + d], dil = avg ? 1 : ia[6 + d];
        int ceil_mode = (int)(avg ? ia[6] : ia[8]);
        if (k <= 0 || s <= 0 || p < 0 || p * 2 > k)
          return tt_status_make(TT_INVALID_ARGUMENT,
                                "%s: pad should be at most half of effective kernel size, but got "
                                "pad=%lld, kernel_size=%lld and stride=%lld",
                                name, (long long)p, (long long)k, (long long)s);
        int64_t o = tt_pool_out_size(a->dims[a->rank - 2 + d], k, s, p, dil, ceil_mode);
        if (o <= 0)
          return tt_status_make(TT_INVALID_ARGUMENT, "%s: output size is too small (%lld)",
                                name, (long long)o);
        n->shape.dims[a->rank - 2 + d] = o;
      }
      n->dtype = n->op == TT_OP_MAX_POOL2D_INDICES ? TT_I64 : x[0]->dtype;
      return NULL;
    }
    case TT_OP_MAX_POOL2D_BWD:
      NEED_OPERANDS(2);
      n->dtype = x[0]->dtype;
      return tt_set_dims(&n->shape, ia, n->num_iattrs, name);
    case TT_OP_AVG_POOL2D_BWD:
      NEED_OPERANDS(1);
      TT_RETURN_IF_ERROR(tt_need_attrs(name, n->num_iattrs, 10));
      n->dtype = x[0]->dtype;
      return tt_set_dims(&n->shape, ia + 9, n->num_iattrs - 9, name);
    case TT_OP_ADAPTIVE_AVG_POOL2D: {
      NEED_OPERANDS(1);
      TT_RETURN_IF_ERROR(tt_need_attrs(name, n->num_iattrs, 2));
      const tt_shape_t *a = &x[0]->shape;
      if (a->rank != 4 && a->rank != 3)
        return tt_status_make(TT_INVALID_ARGUMENT, "adaptive_avg_pool2d: expected 3D or 4D input, got %dD", a->rank);
      n->shape = *a;
      n->shape.dims[a->rank - 2] = ia[0];
      n->shape.dims[a->rank - 1] = ia[1];
      n->dtype = x[0]->dtype;
      return NULL;
    }
    case TT_OP_ADAPTIVE_AVG_POOL2D_BWD:
      NEED_OPERANDS(1);
      n->dtype = x[0]->dtype;
      return tt_set_dims(&n->shape, ia, n->num_iattrs, name);
    case TT_OP_TRANSPOSE: {
      NEED_OPERANDS(1);
      const tt_shape_t *a = &x[0]->shape;
      if (n->num_iattrs != a->rank)
        return tt_status_make(TT_INVALID_ARGUMENT,
                              "permute(sparse_coo): number of dimensions in the tensor input does "
                              "not match the length of the desired ordering of dimensions i.e. "
                              "input.dim() = %d is not equal to len(dims) = %d",
                              a->rank, n->num_iattrs);
      uint32_t seen = 0;
      n->shape.rank = a->rank;
      for (int d = 0; d < a->rank; ++d) {
        if (ia[d] < 0 || ia[d] >= a->rank || (seen & (1u << ia[d])))
          return tt_status_make(TT_INVALID_ARGUMENT, "permute(): duplicate or invalid dim %lld",
                                (long long)ia[d]);
        seen |= 1u << ia[d];
        n->shape.dims[d] = a->dims[ia[d]];
      }
      n->dtype = x[0]->dtype;
      return NULL;
    }
    case TT_OP_SLICE:
    case TT_OP_SLICE_SCATTER: {
      const tt_shape_t *a = &x[0]->shape;
      NEED_OPERANDS(n->op == TT_OP_SLICE ? 1 : 2);
      TT_RETURN_IF_ERROR(tt_need_attrs(name, n->num_iattrs, 3 * a->rank));
      tt_shape_t sl;
      sl.rank = a->rank;
      for (int d = 0; d < a->rank; ++d) {
        int64_t st = ia[d], lim = ia[a->rank + d], step = ia[2 * a->rank + d];
        if (step < 1 || st < 0 || lim > a->dims[d] || st > lim)
          return tt_status_make(TT_OUT_OF_RANGE,
                                "%s: invalid slice start=%lld limit=%lld step=%lld for dim %d of "
                                "size %lld",
                                name, (long long)st, (long long)lim, (long long)step, d,
                                (long long)a->dims[d]);
        sl.dims[d] = (lim - st + step - 1) / step;
      }
      if (n->op == TT_OP_SLICE) {
        n->shape = sl;
      } else {
        if (!tt_shape_equal(&sl, &x[1]->shape)) {
          SHAPE_STR(s1, &sl);
          SHAPE_STR(s2, &x[1]->shape);
          return tt_status_make(TT_INVALID_ARGUMENT,
                                "slice_scatter: expected src to have a size equal to the slice "
                                "of self. src size = %s, slice size = %s", s2, s1);
        }
        if (x[1]->dtype != x[0]->dtype)
          return tt_status_make(TT_TYPE_ERROR, "slice_scatter: dtypes differ (%s and %s)",
                                tt_dtype_name(x[0]->dtype), tt_dtype_name(x[1]->dtype));
        n->shape = *a;
      }
      n->dtype = x[0]->dtype;
      return NULL;
    }
    case TT_OP_CONCAT: {
      if (n->num_operands < 1)
        return tt_status_make(TT_INVALID_ARGUMENT, "torch.cat(): expected a non-empty list of Tensors");
      TT_RETURN_IF_ERROR(tt_need_attrs(name, n->num_iattrs, 1));
      const tt_shape_t *a = &x[0]->shape;
      TT_RETURN_IF_ERROR(tt_check_dim(ia[0], a->rank, "cat"));
      n->shape = *a;
      n->shape.dims[ia[0]] = 0;
      for (int i = 0; i < n->num_operands; ++i) {
        const tt_shape_t *b = &x[i]->shape;
        if (x[i]->dtype != x[0]->dtype)
          return tt_status_make(TT_TYPE_ERROR, "cat: operand dtypes differ (%s and %s)",
                                tt_dtype_name(x[0]->dtype), tt_dtype_name(x[i]->dtype));
        if (b->rank != a->rank)
          return tt_status_make(TT_INVALID_ARGUMENT,
                                "Tensors must have same number of dimensions: got %d and %d",
                                a->rank, b->rank);
        for (int d = 0; d < a->rank; ++d)
          if (d != ia[0] && b->dims[d] != a->dims[d])
            return tt_status_make(TT_INVALID_ARGUMENT,
                                  "Sizes of tensors must match except in dimension %lld. Expected "
                                  "size %lld but got size %lld for tensor number %d in the list.",
                                  (long long)ia[0], (long long)a->dims[d], (long long)b->dims[d], i);
        n->shape.dims[ia[0]] += b->dims[ia[0]];
      }
      n->dtype = x[0]->dtype;
      return NULL;
    }
    case TT_OP_PAD: {
      NEED_OPERANDS(1);
      const tt_shape_t *a = &x[0]->shape;
      TT_RETURN_IF_ERROR(tt_need_attrs(name, n->num_iattrs, 2 * a->rank));
      n->shape = *a;
      for (int d = 0; d < a->rank; ++d) {
        n->shape.dims[d] = a->dims[d] + ia[d] + ia[a->rank + d];
        if (n->shape.dims[d] < 0)
          return tt_status_make(TT_INVALID_ARGUMENT,
                                "pad: resulting size %lld of dim %d is negative",
                                (long long)n->shape.dims[d], d);
      }
      n->dtype = x[0]->dtype;
      return NULL;
    }
    case TT_OP_FLIP:
      NEED_OPERANDS(1);
      n->shape = x[0]->shape;
      n->dtype = x[0]->dtype;
      return NULL;
    case TT_OP_INDEX_SELECT:
    case TT_OP_GATHER: {
      NEED_OPERANDS(2);
      TT_RETURN_IF_ERROR(tt_need_attrs(name, n->num_iattrs, 1));
      TT_RETURN_IF_ERROR(tt_check_dim(ia[0], x[0]->shape.rank, name));
      if (x[1]->dtype != TT_I64 && x[1]->dtype != TT_I32)
        return tt_status_make(TT_TYPE_ERROR, "%s(): Expected dtype int64 for index, got %s",
                              name, tt_dtype_name(x[1]->dtype));
      if (n->op == TT_OP_INDEX_SELECT) {
        if (x[1]->shape.rank > 1)
          return tt_status_make(TT_INVALID_ARGUMENT, "index_select(): Index is supposed to be a vector");
        n->shape = x[0]->shape;
        if (n->shape.rank > 0) n->shape.dims[ia[0]] = tt_shape_numel(&x[1]->shape);
      } else {
        if (x[1]->shape.rank != x[0]->shape.rank)
          return tt_status_make(TT_INVALID_ARGUMENT,
                                "Index tensor must have the same number of dimensions as input tensor");
        n->shape = x[1]->shape;
      }
      n->dtype = x[0]->dtype;
      return NULL;
    }
    case TT_OP_INDEX_ADD:
    case TT_OP_SCATTER:
      NEED_OPERANDS(3);
      TT_RETURN_IF_ERROR(tt_need_attrs(name, n->num_iattrs, 1));
      TT_RETURN_IF_ERROR(tt_check_dim(ia[0], x[0]->shape.rank, name));
      if (x[1]->dtype != TT_I64 && x[1]->dtype != TT_I32)
        return tt_status_make(TT_TYPE_ERROR, "%s(): Expected dtype int64 for index, got %s",
                              name, tt_dtype_name(x[1]->dtype));
      if (x[2]->dtype != x[0]->dtype)
        return tt_status_make(TT_TYPE_ERROR,
                              "%s(): self (%s) and source (%s) must have the same scalar type",
                              name, tt_dtype_name(x[0]->dtype), tt_dtype_name(x[2]->dtype));
      n->shape = x[0]->shape;
      n->dtype = x[0]->dtype;
      return NULL;
    case TT_OP_SOFTMAX:
      NEED_OPERANDS(1);
      TT_RETURN_IF_ERROR(tt_need_attrs(name, n->num_iattrs, 2));
      TT_RETURN_IF_ERROR(tt_check_dim(ia[0], x[0]->shape.rank, name));
      n->shape = x[0]->shape;
      n->dtype = x[0]->dtype;
      if (n->num_iattrs > 2 && ia[2]) {
        /* Packed [log_softmax | softmax]: log, float32, the last dim. */
        int32_t r = x[0]->shape.rank;
        if (!ia[1] || x[0]->dtype != TT_F32 || r < 1 || ia[0] != r - 1 || r >= TT_MAX_RANK)
          return tt_status_make(TT_INVALID_ARGUMENT,
                                "%s: the packed form is a float32 log_softmax along the last "
                                "dim of rank < %d, got %s rank %d dim %lld log %lld",
                                name, TT_MAX_RANK, tt_dtype_name(x[0]->dtype), r,
                                (long long)ia[0], (long long)ia[1]);
        n->shape.rank = r + 1;
        n->shape.dims[0] = 2;
        for (int32_t d = 0; d < r; ++d) n->shape.dims[d + 1] = x[0]->shape.dims[d];
      }
      return NULL;
    case TT_OP_SOFTMAX_BWD:
      NEED_OPERANDS(2);
      TT_RETURN_IF_ERROR(tt_need_attrs(name, n->num_iattrs, 2));
      n->shape = x[0]->shape;
      n->dtype = x[0]->dtype;
      return NULL;
    case TT_OP_RNG:
      NEED_OPERANDS(1);
      TT_RETURN_IF_ERROR(tt_need_attrs(name, n->num_iattrs, 2));
      n->dtype = (tt_dtype_t)ia[1];
      return tt_set_dims(&n->shape, ia + 2, n->num_iattrs - 2, name);
    case TT_OP_ARGSORT:
    case TT_OP_SEARCHSORTED:
    case TT_OP_SCATTER_REDUCE:
    case TT_OP_CUMULATIVE:
    case TT_OP_LINALG:
    case TT_OP_BITCAST:
    case TT_OP_SPECIAL:
    case TT_OP_FFT:
    case TT_OP_ATTENTION:
    case TT_OP_ATTENTION_BWD:
    case TT_OP_LAYER_NORM:
    case TT_OP_LAYER_NORM_BWD:
      return tt_node_infer_extra(n);
    case TT_OP_ALL_REDUCE:
    case TT_OP_ALL_GATHER:
    case TT_OP_REDUCE_SCATTER:
    case TT_OP_ALL_TO_ALL:
    case TT_OP_COLLECTIVE_PERMUTE:
      NEED_OPERANDS(1);
      TT_RETURN_IF_ERROR(tt_collective_check(n->op, ia, n->num_iattrs, &x[0]->shape));
      n->shape = tt_collective_shape(n->op, ia, &x[0]->shape);
      n->dtype = x[0]->dtype;
      return NULL;
    case TT_OP_SPMD_FULL_TO_SHARD:
    case TT_OP_SPMD_SHARD_TO_FULL: {
      NEED_OPERANDS(1);
      union {
        tt_sharding_t s;
        uint8_t room[sizeof(tt_sharding_t) + sizeof(int32_t) * TT_MAX_IATTRS];
      } sh;
      TT_RETURN_IF_ERROR(tt_spmd_manual_check(n->op, ia, n->num_iattrs, &x[0]->shape, &sh.s,
                                              &n->shape));
      n->dtype = x[0]->dtype;
      return NULL;
    }
    default:
      return tt_status_make(TT_INVALID_ARGUMENT, "unknown op %d", (int)n->op);
  }
#undef NEED_OPERANDS
}

/* Complex values are data to the engine: only ops that move whole elements
 * (and bitcast, and fft) may read or make them. Arithmetic on complex
 * tensors is lowered on their float32 pairs, so anything else seeing one is
 * a lowering's mistake, reported instead of computing garbage. */
static tt_status_t tt_check_complex(const tt_node_t *n) {
  int complex_seen = tt_dtype_is_complex(n->dtype);
  for (int i = 0; i < n->num_operands && !complex_seen; ++i)
    complex_seen = tt_dtype_is_complex(n->operands[i]->dtype);
  if (!complex_seen) return NULL;
  switch (n->op) {
    case TT_OP_RESHAPE:
    case TT_OP_BROADCAST:
    case TT_OP_TRANSPOSE:
    case TT_OP_SLICE:
    case TT_OP_SLICE_SCATTER:
    case TT_OP_CONCAT:
    case TT_OP_FLIP:
    case TT_OP_BITCAST:
    case TT_OP_FFT:
      return NULL;
    case TT_OP_INDEX_SELECT:
      return tt_dtype_is_complex(n->operands[1]->dtype)
                 ? tt_status_make(TT_TYPE_ERROR, "index_select: complex indices")
                 : NULL;
    default:
      return tt_status_make(TT_TYPE_ERROR,
                            "%s does not take complex64 tensors in the engine (complex "
                            "arithmetic is lowered on float32 pairs)",
                            tt_op_name(n->op));
  }
}

static tt_node_t *tt_node_alloc(tt_op_t op, int32_t device, int32_t num_operands) {
  tt_node_t *n = calloc(1, sizeof(*n));
  if (!n) return NULL;
  n->refcount = 1;
  n->op = op;
  n->device = device;
  n->num_operands = num_operands;
  if (num_operands) {
    n->operands = calloc((size_t)num_operands, sizeof(tt_node_t *));
    if (!n->operands) {
      free(n);
      return NULL;
    }
  }
  return n;
}

tt_status_t tt_node_create(tt_op_t op, int32_t device, tt_node_t *const *operands,
                           int32_t num_operands, const int64_t *iattrs,
                           int32_t num_iattrs, const double *fattrs,
                           int32_t num_fattrs, tt_node_t **out_node) {
  *out_node = NULL;
  if (num_iattrs > TT_MAX_IATTRS || num_fattrs > TT_MAX_FATTRS || num_iattrs < 0 ||
      num_fattrs < 0 || num_operands < 0)
    return tt_status_make(TT_INVALID_ARGUMENT, "%s: too many attributes (%d ints, %d floats)",
                          tt_op_name(op), num_iattrs, num_fattrs);
  tt_node_t *n = tt_node_alloc(op, device, num_operands);
  if (!n) return tt_status_make(TT_RESOURCE_EXHAUSTED, "out of memory creating a node");
  for (int32_t i = 0; i < num_operands; ++i) n->operands[i] = operands[i];
  n->num_iattrs = num_iattrs;
  if (num_iattrs) memcpy(n->iattrs, iattrs, sizeof(int64_t) * (size_t)num_iattrs);
  if (num_fattrs) memcpy(n->fattrs, fattrs, sizeof(double) * (size_t)num_fattrs);
  tt_status_t st = tt_infer(n);
  if (!st) st = tt_check_complex(n);
  if (st) {
    free(n->operands);
    free(n);
    return st;
  }
  for (int32_t i = 0; i < num_operands; ++i) tt_node_retain(operands[i]);
  *out_node = n;
  return NULL;
}

tt_node_t *tt_node_create_param(tt_buffer_t *buffer, tt_dtype_t dtype,
                                const tt_shape_t *shape, int32_t device) {
  tt_node_t *n = tt_node_alloc(TT_OP_PARAM, device, 0);
  if (!n) return NULL;
  n->dtype = dtype;
  n->shape = *shape;
  n->buffer = buffer;
  tt_buffer_retain(buffer);
  return n;
}

tt_node_t *tt_node_create_scalar(tt_dtype_t dtype, double value_f, int64_t value_i,
                                 int32_t device) {
  tt_node_t *n = tt_node_alloc(TT_OP_SCALAR, device, 0);
  if (!n) return NULL;
  n->dtype = dtype;
  n->shape.rank = 0;
  n->scalar_f = value_f;
  n->scalar_i = value_i;
  return n;
}

void tt_node_retain(tt_node_t *node) {
  __atomic_add_fetch(&node->refcount, 1, __ATOMIC_RELAXED);
}

void tt_node_release(tt_node_t *node) {
  /* Iterative release: long chains of nodes (a 10k-step unsynced loop) must
   * not overflow the C stack. */
  tt_node_t *stack_small[64];
  tt_node_t **stack = stack_small;
  size_t cap = 64, top = 0;
  if (!node) return;
  stack[top++] = node;
  while (top) {
    tt_node_t *n = stack[--top];
    if (__atomic_sub_fetch(&n->refcount, 1, __ATOMIC_ACQ_REL) != 0) continue;
    for (int32_t i = 0; i < n->num_operands; ++i) {
      if (top == cap) {
        size_t ncap = cap * 2;
        tt_node_t **ns = malloc(ncap * sizeof(*ns));
        if (!ns) abort(); /* cannot leak-free recover; internal invariant */
        memcpy(ns, stack, top * sizeof(*ns));
        if (stack != stack_small) free(stack);
        stack = ns;
        cap = ncap;
      }
      stack[top++] = n->operands[i];
    }
    if (n->buffer) tt_buffer_release(n->buffer);
    free(n->operands);
    free(n->debug_info);
    free(n->sharding);
    free(n);
  }
  if (stack != stack_small) free(stack);
}

tt_status_t tt_node_set_sharding(tt_node_t *node, const tt_sharding_t *sharding) {
  tt_sharding_t *copy = NULL;
  if (sharding) {
    TT_RETURN_IF_ERROR(tt_sharding_validate(sharding, &node->shape));
    copy = tt_sharding_copy(sharding);
    if (!copy) return tt_status_make(TT_RESOURCE_EXHAUSTED, "out of memory (sharding)");
  }
  free(node->sharding);
  node->sharding = copy;
  return NULL;
}
