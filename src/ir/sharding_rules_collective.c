/* Sharding rules of the collectives and the manual-region ops.
 * Collectives act across replicas (or, inside a manual region, across the
 * devices that hold manual shards, where every value is {manual} and the
 * pass keeps it so); within one participant's tensor all_reduce and
 * collective_permute keep every dim's layout, all_gather and
 * reduce_scatter read their dim whole, all_to_all its split and concat
 * dims. The manual-region ops take their shardings from their attributes:
 * full_to_shard reads its operand with the region's tiled sharding and
 * gives {manual}; shard_to_full reads {manual} and gives the tiled one. */
#include <stdlib.h>

#include "ir/sharding_rules.h"

static void tt_srule_collective(const tt_graph_t *g, int32_t i, tt_sharding_map_t *m) {
  const tt_instr_t *in = &g->instrs[i];
  const tt_shape_t *x = tt_srule_operand_shape(g, i, 0);
  int64_t whole1 = -1, whole2 = -1;
  if (in->op == TT_OP_ALL_GATHER) {
    tt_all_gather_attrs_t a;
    TT_ATTRS(in, &a);
    whole1 = a.dim;
  } else if (in->op == TT_OP_REDUCE_SCATTER) {
    tt_reduce_scatter_attrs_t a;
    TT_ATTRS(in, &a);
    whole1 = a.dim;
  } else if (in->op == TT_OP_ALL_TO_ALL) {
    tt_all_to_all_attrs_t a;
    TT_ATTRS(in, &a);
    whole1 = a.split_dim;
    whole2 = a.concat_dim;
  }
  for (int32_t d = 0; d < x->rank; ++d)
    m->dims[0][d] = d == whole1 || d == whole2 ? TT_SDIM_WHOLE : d;
}

static tt_sharding_t *tt_srule_manual(const tt_graph_t *g, int32_t i, int want_result) {
  const tt_instr_t *in = &g->instrs[i];
  tt_sharding_t *tiled = calloc(1, tt_sharding_size(TT_MAX_IATTRS));
  if (!tiled) return NULL;
  tt_shape_t shape;
  tt_status_t st = tt_spmd_manual_check(in->op, in->iattrs, in->num_iattrs,
                                        tt_srule_operand_shape(g, i, 0), tiled, &shape);
  if (st) {
    tt_status_free(st);
    free(tiled);
    return NULL;
  }
  /* The tiled side: full_to_shard's operand, shard_to_full's result. */
  if (want_result == (in->op == TT_OP_SPMD_SHARD_TO_FULL)) return tiled;
  tt_sharding_t *manual = calloc(1, tt_sharding_size(0));
  if (manual) {
    manual->kind = TT_SHARDING_MANUAL;
    manual->num_devices = tiled->num_devices;
  }
  free(tiled);
  return manual;
}

TT_SHARDING_RULE(ALL_REDUCE, "collective", tt_srule_collective);
TT_SHARDING_RULE(ALL_GATHER, "collective", tt_srule_collective);
TT_SHARDING_RULE(REDUCE_SCATTER, "collective", tt_srule_collective);
TT_SHARDING_RULE(ALL_TO_ALL, "collective", tt_srule_collective);
TT_SHARDING_RULE(COLLECTIVE_PERMUTE, "collective", tt_srule_collective);
TT_SHARDING_RULE_FIXED(SPMD_FULL_TO_SHARD, "manual", tt_srule_manual);
TT_SHARDING_RULE_FIXED(SPMD_SHARD_TO_FULL, "manual", tt_srule_manual);
