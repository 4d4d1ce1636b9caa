/* Tier-0 executors of the collectives and the manual SPMD region markers.
 *
 * A collective runs through the collective layer (torchtpu/collective.h)
 * on the executing device's worker: the replica id is the device's global
 * id, tt_collective_device_base() + its index (the index itself in a
 * launch of one process). Its members are the
 * replica group holding the device (from the attrs) or, with no groups,
 * every replica of the current launch (tt_collective_world_size: 0..N-1
 * inside torch_xla.launch; outside a launch the executing device alone,
 * where the collective is a copy of its operand). A collective_permute's
 * members are every replica; a device no pair targets receives zeros. */
#include <string.h>

#include "backends/cpu/exec.h"
#include "torchtpu/collective.h"
#include "torchtpu/spmd_exec.h"

/* A collective's attributes, whichever op it is. */
typedef union tt_collective_attrs_u {
  tt_all_reduce_attrs_t ar;
  tt_all_gather_attrs_t ag;
  tt_reduce_scatter_attrs_t rs;
  tt_all_to_all_attrs_t aa;
  tt_collective_permute_attrs_t cp;
} tt_collective_attrs_t;

/* Decodes in's attrs into *u: its replica groups (none: every replica)
 * and the participant count its op names (shard/split count; 0 for the
 * ops that name none). */
static int64_t tt_collective_decode_(const tt_instr_t *in, tt_collective_attrs_t *u,
                                     const tt_attr_list_t **groups, int64_t *group_size) {
  switch (in->op) {
    case TT_OP_ALL_REDUCE:
      TT_ATTRS(in, &u->ar);
      *groups = &u->ar.groups, *group_size = u->ar.group_size;
      return 0;
    case TT_OP_ALL_GATHER:
      TT_ATTRS(in, &u->ag);
      *groups = &u->ag.groups, *group_size = u->ag.group_size;
      return u->ag.shard_count;
    case TT_OP_REDUCE_SCATTER:
      TT_ATTRS(in, &u->rs);
      *groups = &u->rs.groups, *group_size = u->rs.group_size;
      return u->rs.shard_count;
    case TT_OP_ALL_TO_ALL:
      TT_ATTRS(in, &u->aa);
      *groups = &u->aa.groups, *group_size = u->aa.group_size;
      return u->aa.split_count;
    default: /* TT_OP_COLLECTIVE_PERMUTE: (source, target) pairs */
      TT_ATTRS(in, &u->cp);
      *groups = &u->cp.groups, *group_size = u->cp.group_size;
      return 0;
  }
}

/* The members of the collective on `device` into ids (capacity
 * TT_COLLECTIVE_MAX_MEMBERS); *n their count. */
static tt_status_t tt_collective_members_(const tt_instr_t *in, int32_t device,
                                          const tt_attr_list_t *groups, int64_t group_size,
                                          int64_t *ids, int32_t *n) {
  int32_t world = tt_collective_world_size();
  int32_t parts = tt_spmd_channel_partitions(in->iattrs[3]);
  if (parts) world = parts; /* a partitioned program: its partitions */
  if (groups->n == 0 || in->op == TT_OP_COLLECTIVE_PERMUTE) {
    if (world <= 1) {
      ids[0] = device;
      *n = 1;
      return NULL;
    }
    if (device >= world)
      return tt_status_make(TT_INVALID_ARGUMENT,
                            "%s on xla:%d, outside the launch's %d replicas (xla:0..xla:%d)",
                            tt_op_name(in->op), (int)device, (int)world, (int)world - 1);
    for (int32_t i = 0; i < world; ++i) ids[i] = i;
    *n = world;
    return NULL;
  }
  for (int32_t g = 0; g < groups->n; g += (int32_t)group_size)
    for (int32_t k = 0; k < group_size; ++k)
      if (groups->v[g + k] == device) {
        for (int32_t j = 0; j < group_size; ++j) ids[j] = groups->v[g + j];
        *n = (int32_t)group_size;
        return NULL;
      }
  return tt_status_make(TT_INVALID_ARGUMENT, "%s: replica %d is in none of its replica groups",
                        tt_op_name(in->op), (int)device);
}

static tt_status_t tt_cpu_exec_collective(const tt_cpu_exec_t *c, tt_view_t *out) {
  const tt_instr_t *in = c->instr;
  tt_collective_attrs_t u;
  const tt_attr_list_t *groups;
  int64_t group_size;
  int64_t named = tt_collective_decode_(in, &u, &groups, &group_size);
  const tt_view_t *x = &c->x[0];
  int64_t count = tt_shape_numel(&x->shape);
  size_t bytes = (size_t)count * tt_dtype_size(x->dtype);
  int32_t world = tt_collective_world_size();
  int32_t parts = tt_spmd_channel_partitions(in->iattrs[3]);
  if (parts) world = parts; /* a partitioned program: its partitions */
  int32_t device = tt_collective_device_base() + c->device;
  if (in->op == TT_OP_COLLECTIVE_PERMUTE && world <= 1) {
    /* One replica: a pair into this device from itself copies, no pair
     * into it gives zeros; a pair from another replica has no sender. */
    const int64_t *ids = groups->v;
    int from_self = 0;
    for (int32_t p = 0; p < groups->n; p += 2) {
      if (ids[p] != ids[p + 1])
        return tt_status_make(TT_INVALID_ARGUMENT,
                              "collective_permute from replica %lld to %lld outside a launch "
                              "(one replica); run it inside torch_xla.launch / xmp.spawn with "
                              "CPU_NUM_DEVICES > 1", (long long)ids[p], (long long)ids[p + 1]);
      from_self |= ids[p] == device;
    }
    if (bytes) {
      if (from_self) memcpy(out->data, x->data, bytes);
      else memset(out->data, 0, bytes);
    }
    return NULL;
  }
  int64_t ids[TT_COLLECTIVE_MAX_MEMBERS];
  int32_t n = 0;
  TT_RETURN_IF_ERROR(tt_collective_members_(in, device, groups, group_size, ids, &n));
  if (named && named != n)
    return tt_status_make(TT_INVALID_ARGUMENT,
                          "%s over %lld participants, but replica %d's group has %d members",
                          tt_op_name(in->op), (long long)named, (int)device, (int)n);
  /* An id beyond the launch's replicas would never arrive. */
  for (int32_t i = 0; world > 1 && i < groups->n; ++i)
    if (groups->v[i] >= world)
      return tt_status_make(TT_INVALID_ARGUMENT,
                            "%s: replica id %lld outside the launch's %d replicas", tt_op_name(in->op),
                            (long long)groups->v[i], (int)world);
  if (n > 1 && world <= 1)
    return tt_status_make(TT_INVALID_ARGUMENT,
                          "%s over a replica group of %d outside a launch (one replica); run it "
                          "inside torch_xla.launch / xmp.spawn with CPU_NUM_DEVICES > 1",
                          tt_op_name(in->op), (int)n);
  tt_collective_group_t group = {ids, n};
  int64_t outer, inner;
  tt_status_t st;
  /* The worker may wait here for its peers: its hold on the kernel pool
   * would keep the pool's idle threads polling meanwhile. */
  tt_parallel_hold_end();
  switch (in->op) {
    case TT_OP_ALL_REDUCE:
      st = tt_collective_all_reduce(device, group, (tt_reduce_op_t)u.ar.reduce, x->dtype,
                                    x->data, out->data, count);
      break;
    case TT_OP_ALL_GATHER:
      tt_shape_split(&x->shape, (int)u.ag.dim, &outer, &inner);
      st = tt_collective_all_gather(device, group, x->dtype, x->data, out->data,
                                    (tt_collective_blocks_t){outer, inner});
      break;
    case TT_OP_REDUCE_SCATTER:
      tt_shape_split(&x->shape, (int)u.rs.dim, &outer, &inner);
      st = tt_collective_reduce_scatter(device, group, (tt_reduce_op_t)u.rs.reduce, x->dtype,
                                        x->data, out->data,
                                        (tt_collective_blocks_t){outer, inner / n});
      break;
    case TT_OP_ALL_TO_ALL: {
      int64_t out_outer, out_inner;
      tt_shape_split(&x->shape, (int)u.aa.split_dim, &outer, &inner);
      tt_shape_split(&out->shape, (int)u.aa.concat_dim, &out_outer, &out_inner);
      st = tt_collective_all_to_all(device, group, x->dtype, x->data, out->data,
                                    (tt_collective_blocks_t){outer, inner / n},
                                    (tt_collective_blocks_t){out_outer, out_inner / n});
      break;
    }
    default:
      st = tt_collective_permute(device, group, groups->v, groups->n / 2, x->dtype, x->data,
                                 out->data, count);
      break;
  }
  tt_parallel_hold_begin();
  return st;
}

static tt_status_t tt_cpu_exec_spmd_manual(const tt_cpu_exec_t *c, tt_view_t *out) {
  const tt_instr_t *in = c->instr;
  tt_spmd_manual_attrs_t a;
  TT_ATTRS(in, &a);
  /* The spec's device count (its encoding: op_attrs.h; verified when the
   * node was made). One device: the shard is the whole tensor. */
  int64_t ndev = a.spec.v[2 + a.spec.v[0]];
  if (ndev != 1)
    return tt_status_make(TT_UNIMPLEMENTED,
                          "%s over %lld devices cannot run unpartitioned on the engine's CPU "
                          "backend. In SPMD mode (xr.use_spmd()) the partitioner runs manual "
                          "regions, but not a graph whose outputs all lie inside one (each "
                          "device holds its own value: leave the region with "
                          "xs.disable_manual_sharding first) nor one it refuses; else run the "
                          "program through a PJRT plugin (xs.run_spmd)", tt_op_name(in->op),
                          (long long)ndev);
  size_t bytes = (size_t)tt_shape_numel(&out->shape) * tt_dtype_size(out->dtype);
  if (bytes) memcpy(out->data, c->x[0].data, bytes);
  return NULL;
}

/* The ops this file executes (exec.h). */
const tt_cpu_exec_row_t tt_cpu_exec_rows_collective[] = {
    {TT_OP_ALL_REDUCE, tt_cpu_exec_collective},
    {TT_OP_ALL_GATHER, tt_cpu_exec_collective},
    {TT_OP_REDUCE_SCATTER, tt_cpu_exec_collective},
    {TT_OP_ALL_TO_ALL, tt_cpu_exec_collective},
    {TT_OP_COLLECTIVE_PERMUTE, tt_cpu_exec_collective},
    {TT_OP_SPMD_FULL_TO_SHARD, tt_cpu_exec_spmd_manual},
    {TT_OP_SPMD_SHARD_TO_FULL, tt_cpu_exec_spmd_manual},
    TT_CPU_EXEC_ROWS_END,
};
