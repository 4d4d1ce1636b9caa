/* Collective ops: attribute checks and shape inference (see ir.h). The
 * replica groups follow XLA: every group has group_size participants, ids
 * are replica (or, in SPMD programs, partition) ids, and no id appears in
 * two groups. */
#include <stdlib.h>

#include "torchtpu/ir.h"
#include "torchtpu/kernels.h"

static int tt_coll_reduce_ok(int64_t code) {
  return code == TT_RED_SUM || code == TT_RED_PROD || code == TT_RED_MAX ||
         code == TT_RED_MIN || code == TT_RED_ANY || code == TT_RED_ALL;
}

static tt_status_t tt_coll_dim(tt_op_t op, const char *what, int64_t dim, int32_t rank) {
  if (dim < 0 || dim >= rank)
    return tt_status_make(TT_OUT_OF_RANGE, "%s: %s %lld out of range for a tensor of rank %d",
                          tt_op_name(op), what, (long long)dim, (int)rank);
  return NULL;
}

/* count must equal the group size when groups are given (with none it is
 * the caller's world size, unchecked) and divide the dim it splits (split
 * >= 0). */
static tt_status_t tt_coll_count(tt_op_t op, const char *what, int64_t count,
                                 int64_t group_size, int32_t num_ids, const tt_shape_t *x,
                                 int64_t split) {
  if (count < 1)
    return tt_status_make(TT_INVALID_ARGUMENT, "%s: %s must be at least 1, got %lld",
                          tt_op_name(op), what, (long long)count);
  if (num_ids && count != group_size)
    return tt_status_make(TT_INVALID_ARGUMENT,
                          "%s: %s %lld does not match the replica group size %lld",
                          tt_op_name(op), what, (long long)count, (long long)group_size);
  if (split >= 0 && x->dims[split] % count)
    return tt_status_make(TT_INVALID_ARGUMENT,
                          "%s: dim %lld of size %lld does not divide by %s %lld", tt_op_name(op),
                          (long long)split, (long long)x->dims[split], what, (long long)count);
  return NULL;
}

tt_status_t tt_collective_check(tt_op_t op, const int64_t *ia, int32_t num_iattrs,
                                const tt_shape_t *x) {
  if (!tt_op_is_collective(op))
    return tt_status_make(TT_INTERNAL, "%s is not a collective", tt_op_name(op));
  if (num_iattrs < TT_COLLECTIVE_HEADER)
    return tt_status_make(TT_INVALID_ARGUMENT, "%s: expected at least %d attributes, got %d",
                          tt_op_name(op), TT_COLLECTIVE_HEADER, (int)num_iattrs);
  int64_t channel = ia[3], group_size = ia[4];
  int32_t num_ids = num_iattrs - TT_COLLECTIVE_HEADER;
  const int64_t *ids = ia + TT_COLLECTIVE_HEADER;
  if (channel < 0)
    return tt_status_make(TT_INVALID_ARGUMENT, "%s: channel id %lld is negative",
                          tt_op_name(op), (long long)channel);
  if (group_size < 1 || num_ids % group_size)
    return tt_status_make(TT_INVALID_ARGUMENT,
                          "%s: %d replica ids do not make groups of %lld", tt_op_name(op),
                          (int)num_ids, (long long)group_size);
  if (op == TT_OP_COLLECTIVE_PERMUTE && group_size != 2)
    return tt_status_make(TT_INVALID_ARGUMENT,
                          "collective_permute: ids must be (source, target) pairs, got groups "
                          "of %lld", (long long)group_size);
  for (int32_t i = 0; i < num_ids; ++i) {
    if (ids[i] < 0 || ids[i] >= TT_SHARDING_MAX_DEVICES)
      return tt_status_make(TT_INVALID_ARGUMENT, "%s: replica id %lld outside [0, %d)",
                            tt_op_name(op), (long long)ids[i], TT_SHARDING_MAX_DEVICES);
    /* Pairs: a source sends once and a target receives once; groups: an id
     * is in one group. Either way no id repeats in its column. */
    int32_t stride = op == TT_OP_COLLECTIVE_PERMUTE ? 2 : 1;
    for (int32_t k = i % stride; k < i; k += stride)
      if (ids[k] == ids[i])
        return tt_status_make(TT_INVALID_ARGUMENT, "%s: replica id %lld appears twice%s",
                              tt_op_name(op), (long long)ids[i],
                              stride == 2 ? (i % 2 ? " as a target" : " as a source") : "");
  }
  switch (op) {
    case TT_OP_ALL_REDUCE:
      if (!tt_coll_reduce_ok(ia[0]))
        return tt_status_make(TT_INVALID_ARGUMENT, "all_reduce: unsupported reduce code %lld",
                              (long long)ia[0]);
      return NULL;
    case TT_OP_ALL_GATHER:
      TT_RETURN_IF_ERROR(tt_coll_dim(op, "dim", ia[0], x->rank));
      return tt_coll_count(op, "shard_count", ia[1], group_size, num_ids, x, -1);
    case TT_OP_REDUCE_SCATTER:
      if (!tt_coll_reduce_ok(ia[0]))
        return tt_status_make(TT_INVALID_ARGUMENT,
                              "reduce_scatter: unsupported reduce code %lld", (long long)ia[0]);
      TT_RETURN_IF_ERROR(tt_coll_dim(op, "scatter dim", ia[1], x->rank));
      return tt_coll_count(op, "shard_count", ia[2], group_size, num_ids, x, ia[1]);
    case TT_OP_ALL_TO_ALL:
      TT_RETURN_IF_ERROR(tt_coll_dim(op, "split dim", ia[0], x->rank));
      TT_RETURN_IF_ERROR(tt_coll_dim(op, "concat dim", ia[1], x->rank));
      return tt_coll_count(op, "split_count", ia[2], group_size, num_ids, x, ia[0]);
    case TT_OP_COLLECTIVE_PERMUTE:
      return NULL;
    default:
      return tt_status_make(TT_INTERNAL, "%s is not a collective", tt_op_name(op));
  }
}

tt_shape_t tt_collective_shape(tt_op_t op, const int64_t *ia, const tt_shape_t *x) {
  tt_shape_t s = *x;
  switch (op) {
    case TT_OP_ALL_GATHER:
      s.dims[ia[0]] *= ia[1];
      break;
    case TT_OP_REDUCE_SCATTER:
      s.dims[ia[1]] /= ia[2];
      break;
    case TT_OP_ALL_TO_ALL:
      s.dims[ia[0]] /= ia[2];
      s.dims[ia[1]] *= ia[2];
      break;
    default:
      break;
  }
  return s;
}
