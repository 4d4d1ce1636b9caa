/* Tier-0 executors of the collectives and the manual SPMD region markers.
 * The CPU backend runs one unpartitioned program: a collective with one
 * participant per group is a copy of its operand (or zeros for a permute
 * that sends nothing); more participants need a partitioned program
 * (docs/stablehlo.md) and are TT_UNIMPLEMENTED here. */
#include <string.h>

#include "backends/cpu/exec.h"

/* A collective's attributes, whichever op it is. */
typedef union tt_collective_attrs_u {
  tt_all_reduce_attrs_t ar;
  tt_all_gather_attrs_t ag;
  tt_reduce_scatter_attrs_t rs;
  tt_all_to_all_attrs_t aa;
  tt_collective_permute_attrs_t cp;
} tt_collective_attrs_t;

/* The participants per group of collective `in` (decoded into *u), and
 * its replica groups' ids (none: one group of every participant). */
static int64_t tt_collective_participants_(const tt_instr_t *in, tt_collective_attrs_t *u,
                                           const tt_attr_list_t **groups) {
  switch (in->op) {
    case TT_OP_ALL_REDUCE:
      TT_ATTRS(in, &u->ar);
      *groups = &u->ar.groups;
      return u->ar.groups.n ? u->ar.group_size : 1;
    case TT_OP_ALL_GATHER:
      TT_ATTRS(in, &u->ag);
      *groups = &u->ag.groups;
      return u->ag.shard_count;
    case TT_OP_REDUCE_SCATTER:
      TT_ATTRS(in, &u->rs);
      *groups = &u->rs.groups;
      return u->rs.shard_count;
    case TT_OP_ALL_TO_ALL:
      TT_ATTRS(in, &u->aa);
      *groups = &u->aa.groups;
      return u->aa.split_count;
    default: /* TT_OP_COLLECTIVE_PERMUTE: (source, target) pairs */
      TT_ATTRS(in, &u->cp);
      *groups = &u->cp.groups;
      return u->cp.groups.n ? u->cp.group_size : 1;
  }
}

static tt_status_t tt_cpu_exec_collective(const tt_cpu_exec_t *c, tt_view_t *out) {
  const tt_instr_t *in = c->instr;
  tt_collective_attrs_t u;
  const tt_attr_list_t *groups;
  int64_t participants = tt_collective_participants_(in, &u, &groups);
  const int64_t *ids = groups->v;
  int32_t num_ids = groups->n;
  size_t bytes = (size_t)tt_shape_numel(&out->shape) * tt_dtype_size(out->dtype);
  if (in->op == TT_OP_COLLECTIVE_PERMUTE) {
    for (int32_t p = 0; p < num_ids; p += 2)
      if (ids[p] != ids[p + 1])
        return tt_status_make(TT_UNIMPLEMENTED,
                              "collective_permute from replica %lld to %lld cannot run on the "
                              "engine's CPU backend, which has one participant; run the "
                              "program through a PJRT plugin (torchtpu.spmd.run_replicated)",
                              (long long)ids[p], (long long)ids[p + 1]);
    if (num_ids == 0) {
      if (bytes) memset(out->data, 0, bytes);
      return NULL;
    }
  } else if (participants != 1) {
    return tt_status_make(TT_UNIMPLEMENTED,
                          "%s over groups of %lld participants cannot run on the engine's CPU "
                          "backend, which has one participant per group; run the program "
                          "through a PJRT plugin (torchtpu.spmd.run_replicated / run_spmd)",
                          tt_op_name(in->op), (long long)participants);
  }
  if (bytes) memcpy(out->data, c->x[0].data, bytes);
  return NULL;
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
                          "%s over %lld devices cannot run on the engine's CPU backend, "
                          "which does not partition; run the program through a PJRT "
                          "plugin (torchtpu.spmd.run_spmd)", tt_op_name(in->op),
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
