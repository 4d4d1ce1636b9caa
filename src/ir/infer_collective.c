/* Collective ops and manual SPMD regions: attribute checks and shape
 * inference (ir.h, src/ir/infer.h). The replica groups follow XLA: every
 * group has group_size participants, ids are replica (or, in SPMD
 * programs, partition) ids, and no id appears in two groups. */
#include <string.h>

#include "ir/infer.h"
#include "torchtpu/kernels.h"
#include "torchtpu/op_table.h"

/* The fields of the five collectives' structs in one form: what each op
 * has (an op without a field leaves it 0). */
typedef struct tt_coll_s {
  int64_t reduce, dim, concat_dim, count;
  int64_t channel_id, group_size;
  const tt_attr_list_t *groups;
} tt_coll_t;

static int tt_coll_view(tt_op_t op, const void *attrs, tt_coll_t *c) {
  memset(c, 0, sizeof(*c));
#define TT_COLL_TAIL(a) \
  (c->channel_id = (a)->channel_id, c->group_size = (a)->group_size, c->groups = &(a)->groups)
  switch (op) {
    case TT_OP_ALL_REDUCE: {
      const tt_all_reduce_attrs_t *a = attrs;
      c->reduce = a->reduce;
      TT_COLL_TAIL(a);
      return 1;
    }
    case TT_OP_ALL_GATHER: {
      const tt_all_gather_attrs_t *a = attrs;
      c->dim = a->dim, c->count = a->shard_count;
      TT_COLL_TAIL(a);
      return 1;
    }
    case TT_OP_REDUCE_SCATTER: {
      const tt_reduce_scatter_attrs_t *a = attrs;
      c->reduce = a->reduce, c->dim = a->dim, c->count = a->shard_count;
      TT_COLL_TAIL(a);
      return 1;
    }
    case TT_OP_ALL_TO_ALL: {
      const tt_all_to_all_attrs_t *a = attrs;
      c->dim = a->split_dim, c->concat_dim = a->concat_dim, c->count = a->split_count;
      TT_COLL_TAIL(a);
      return 1;
    }
    case TT_OP_COLLECTIVE_PERMUTE: {
      const tt_collective_permute_attrs_t *a = attrs;
      TT_COLL_TAIL(a);
      return 1;
    }
    default:
      return 0;
  }
#undef TT_COLL_TAIL
}

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

tt_status_t tt_collective_check(tt_op_t op, const void *attrs, const tt_shape_t *x) {
  tt_coll_t c;
  if (!tt_coll_view(op, attrs, &c))
    return tt_status_make(TT_INTERNAL, "%s is not a collective", tt_op_name(op));
  int32_t num_ids = c.groups->n;
  const int64_t *ids = c.groups->v;
  if (c.channel_id < 0)
    return tt_status_make(TT_INVALID_ARGUMENT, "%s: channel id %lld is negative",
                          tt_op_name(op), (long long)c.channel_id);
  if (c.group_size < 1 || num_ids % c.group_size)
    return tt_status_make(TT_INVALID_ARGUMENT,
                          "%s: %d replica ids do not make groups of %lld", tt_op_name(op),
                          (int)num_ids, (long long)c.group_size);
  if (op == TT_OP_COLLECTIVE_PERMUTE && c.group_size != 2)
    return tt_status_make(TT_INVALID_ARGUMENT,
                          "collective_permute: ids must be (source, target) pairs, got groups "
                          "of %lld", (long long)c.group_size);
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
      if (!tt_coll_reduce_ok(c.reduce))
        return tt_status_make(TT_INVALID_ARGUMENT, "all_reduce: unsupported reduce code %lld",
                              (long long)c.reduce);
      return NULL;
    case TT_OP_ALL_GATHER:
      TT_RETURN_IF_ERROR(tt_coll_dim(op, "dim", c.dim, x->rank));
      return tt_coll_count(op, "shard_count", c.count, c.group_size, num_ids, x, -1);
    case TT_OP_REDUCE_SCATTER:
      if (!tt_coll_reduce_ok(c.reduce))
        return tt_status_make(TT_INVALID_ARGUMENT,
                              "reduce_scatter: unsupported reduce code %lld", (long long)c.reduce);
      TT_RETURN_IF_ERROR(tt_coll_dim(op, "scatter dim", c.dim, x->rank));
      return tt_coll_count(op, "shard_count", c.count, c.group_size, num_ids, x, c.dim);
    case TT_OP_ALL_TO_ALL:
      TT_RETURN_IF_ERROR(tt_coll_dim(op, "split dim", c.dim, x->rank));
      TT_RETURN_IF_ERROR(tt_coll_dim(op, "concat dim", c.concat_dim, x->rank));
      return tt_coll_count(op, "split_count", c.count, c.group_size, num_ids, x, c.dim);
    default: /* collective_permute */
      return NULL;
  }
}

tt_shape_t tt_collective_shape(tt_op_t op, const void *attrs, const tt_shape_t *x) {
  tt_shape_t s = *x;
  tt_coll_t c;
  if (!tt_coll_view(op, attrs, &c)) return s;
  switch (op) {
    case TT_OP_ALL_GATHER:
      s.dims[c.dim] *= c.count;
      break;
    case TT_OP_REDUCE_SCATTER:
      s.dims[c.dim] /= c.count;
      break;
    case TT_OP_ALL_TO_ALL:
      s.dims[c.dim] /= c.count;
      s.dims[c.concat_dim] *= c.count;
      break;
    default:
      break;
  }
  return s;
}

tt_status_t tt_infer_collective(tt_node_t *n, const void *attrs) {
  const tt_shape_t *x = &n->operands[0]->shape;
  TT_RETURN_IF_ERROR(tt_collective_check(n->op, attrs, x));
  n->shape = tt_collective_shape(n->op, attrs, x);
  n->dtype = n->operands[0]->dtype;
  return NULL;
}

/* ---- manual SPMD regions ---- */

/* The tiled sharding in a's spec (op_attrs.h) and the result shape. */
static tt_status_t tt_spmd_manual_decode(tt_op_t op, const tt_spmd_manual_attrs_t *a,
                                         const tt_shape_t *x, tt_sharding_t *out,
                                         tt_shape_t *out_shape) {
  const char *name = tt_op_name(op);
  const int64_t *ia = a->spec.v;
  int32_t n = a->spec.n;
  if (n < 3 || ia[0] < 1 || ia[0] > TT_MAX_RANK + 1 || 2 + ia[0] + 1 > n)
    return tt_status_make(TT_INVALID_ARGUMENT, "%s: malformed sharding attributes (%d given)",
                          name, (int)n);
  int32_t ntd = (int32_t)ia[0];
  int64_t ndev = ia[2 + ntd];
  int32_t rest = n - (3 + ntd) - (int32_t)(ndev > 0 ? ndev : 0);
  if (ndev < 1 || rest < 0)
    return tt_status_make(TT_INVALID_ARGUMENT, "%s: %lld devices do not fit the %d attributes",
                          name, (long long)ndev, (int)n);
  memset(out, 0, sizeof(*out));
  out->kind = TT_SHARDING_TILED;
  out->num_tile_dims = ntd;
  out->last_tile_dim_replicate = ia[1] != 0;
  for (int32_t d = 0; d < ntd; ++d) out->tile_dims[d] = ia[2 + d];
  out->num_devices = (int32_t)ndev;
  for (int64_t i = 0; i < ndev; ++i) out->devices[i] = (int32_t)ia[3 + ntd + i];
  int32_t rank = ntd - (out->last_tile_dim_replicate ? 1 : 0);
  tt_shape_t full = *x;
  if (op == TT_OP_SPMD_SHARD_TO_FULL) {
    if (rest != x->rank)
      return tt_status_make(TT_INVALID_ARGUMENT, "%s: %d full dims for a shard of rank %d",
                            name, (int)rest, (int)x->rank);
    for (int32_t d = 0; d < x->rank; ++d) full.dims[d] = ia[n - rest + d];
  } else if (rest != 0) {
    return tt_status_make(TT_INVALID_ARGUMENT, "%s: %d attributes after the devices", name,
                          (int)rest);
  }
  if (rank != full.rank)
    return tt_status_make(TT_INVALID_ARGUMENT, "%s: a sharding of %d tile dims for a tensor of "
                          "rank %d", name, (int)ntd, (int)full.rank);
  TT_RETURN_IF_ERROR(tt_sharding_validate(out, &full));
  tt_shape_t shard = full;
  for (int32_t d = 0; d < rank; ++d)
    shard.dims[d] = (full.dims[d] + out->tile_dims[d] - 1) / out->tile_dims[d];
  if (op == TT_OP_SPMD_SHARD_TO_FULL) {
    for (int32_t d = 0; d < rank; ++d)
      if (x->dims[d] != shard.dims[d])
        return tt_status_make(TT_INVALID_ARGUMENT,
                              "%s: dim %d of the shard is %lld, but a full dim of %lld over %lld "
                              "tiles makes shards of %lld", name, (int)d, (long long)x->dims[d],
                              (long long)full.dims[d], (long long)out->tile_dims[d],
                              (long long)shard.dims[d]);
    *out_shape = full;
  } else {
    *out_shape = shard;
  }
  return NULL;
}

tt_status_t tt_spmd_manual_check(tt_op_t op, const int64_t *iattrs, int32_t num_iattrs,
                                 const tt_shape_t *x, tt_sharding_t *out,
                                 tt_shape_t *out_shape) {
  if (!tt_op_is_spmd_manual(op))
    return tt_status_make(TT_INTERNAL, "%s is not a manual SPMD region op", tt_op_name(op));
  tt_spmd_manual_attrs_t a;
  double none[TT_MAX_FATTRS] = {0};
  TT_RETURN_IF_ERROR(tt_attrs_decode((int32_t)op, iattrs, num_iattrs, none, &a, sizeof a, NULL));
  return tt_spmd_manual_decode(op, &a, x, out, out_shape);
}

tt_status_t tt_infer_spmd_manual(tt_node_t *n, const void *attrs) {
  /* The sharding needs room for its devices after the struct. */
  union {
    tt_sharding_t s;
    uint8_t room[sizeof(tt_sharding_t) + sizeof(int32_t) * TT_MAX_IATTRS];
  } sh;
  TT_RETURN_IF_ERROR(
      tt_spmd_manual_decode(n->op, attrs, &n->operands[0]->shape, &sh.s, &n->shape));
  n->dtype = n->operands[0]->dtype;
  return NULL;
}
