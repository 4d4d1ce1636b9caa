/* Manual SPMD regions in the partitioner (src/passes/partition_internal.h;
 * docs/spmd.md "Partitioner", manual regions). A value made from a
 * spmd_full_to_shard's result, not yet through a spmd_shard_to_full, is a
 * local value: the partition holds its own, of the shape the graph gives it
 * (the region's shard shape), with no layout.
 *  - full_to_shard reshards its operand to the region's tiled sharding S;
 *    the tile is the partition's local value (no collective of its own).
 *  - an op over local values runs as it is (its shapes are already the
 *    local ones); an operand made outside the region is read whole.
 *  - a collective over local values runs between the partitions: its
 *    groups' partition ids become the replicas that run them; the cut gives
 *    it the execution's partition channel (src/lazy/spmd_cut.c).
 *  - shard_to_full: the local values are the tiles of its result under S,
 *    which then moves to its propagated layout as any value. */
#include <stdlib.h>
#include <string.h>

#include "passes/partition_internal.h"
#include "torchtpu/op_table.h"

/* The tiled sharding a manual-region op's attributes hold, full form over
 * the partitions (rank: the full tensor's). */
static tt_sharding_t *tt_part_region_layout(tt_part_t *p, const tt_instr_t *in) {
  if (p->error) return NULL;
  tt_sharding_t *s = calloc(1, tt_sharding_size(TT_MAX_IATTRS));
  if (!s) {
    p->error = tt_status_make(TT_RESOURCE_EXHAUSTED, "out of memory (partitioner)");
    return NULL;
  }
  tt_shape_t shape;
  tt_status_t st = tt_spmd_manual_check(in->op, in->iattrs, in->num_iattrs,
                                        &p->g->instrs[in->operands[0]].shape, s, &shape);
  if (st) {
    p->error = st;
    free(s);
    return NULL;
  }
  int32_t rank = in->op == TT_OP_SPMD_FULL_TO_SHARD ? p->g->instrs[in->operands[0]].shape.rank
                                                    : in->shape.rank;
  tt_sharding_t *f = tt_part_full(p, s, rank);
  free(s);
  return f;
}

/* Operand k of i as a local value: a manual value as it is; any other
 * value whole (every partition holds all of it: the op's shapes inside a
 * region are the ones each partition computes on). */
static tt_node_t *tt_part_local_operand(tt_part_t *p, int32_t i, int32_t k,
                                        const tt_part_val_t *vals) {
  const tt_instr_t *in = &p->g->instrs[i];
  const tt_part_val_t *v = &vals[in->operands[k]];
  if (v->manual || !v->node) return v->node;
  const tt_shape_t *x = &p->g->instrs[in->operands[k]].shape;
  tt_sharding_t whole = {TT_SHARDING_REPLICATED, 0, {0}, 0, 0};
  tt_sharding_t *rep = tt_part_full(p, &whole, x->rank);
  tt_node_t *y = rep ? tt_part_reshard(p, v->node, x, v->layout, rep) : NULL;
  free(rep);
  return y;
}

/* full_to_shard: the operand resharded to the region's sharding S; its
 * tile (ceil(dim / tiles), padded) is the partition's local value. */
void tt_part_full_to_shard(tt_part_t *p, int32_t i, tt_part_val_t *vals) {
  const tt_instr_t *in = &p->g->instrs[i];
  const tt_part_val_t *v = &vals[in->operands[0]];
  if (v->manual) {
    p->error = tt_status_make(TT_UNIMPLEMENTED,
                              "partitioner: instruction %d enters a manual region from inside "
                              "one (nested manual regions are not partitioned)", (int)i);
    return;
  }
  tt_sharding_t *s = tt_part_region_layout(p, in);
  if (!s) return;
  tt_node_t *y = tt_part_reshard(p, v->node, &p->g->instrs[in->operands[0]].shape, v->layout, s);
  free(s);
  if (y && !tt_shape_equal(&y->shape, &in->shape))
    p->error = tt_status_make(TT_INTERNAL, "partitioner: full_to_shard's tile has another shape");
  if (p->error) return;
  vals[i].node = y;
  vals[i].manual = 1;
  ++p->stats->local_ops;
}

/* shard_to_full: the partitions' local values are the tiles of the result
 * under the region's sharding S (padding included), then resharded to the
 * propagated layout R as any value. */
void tt_part_shard_to_full(tt_part_t *p, int32_t i, tt_part_val_t *vals) {
  const tt_instr_t *in = &p->g->instrs[i];
  tt_node_t *y = tt_part_local_operand(p, i, 0, vals);
  tt_sharding_t *s = tt_part_region_layout(p, in);
  vals[i].layout = tt_part_full(p, p->g->sharding_prop[i].sharding, in->shape.rank);
  if (!y || !s || !vals[i].layout) {
    free(s);
    return;
  }
  tt_shape_t want = tt_part_local_shape(s, &in->shape);
  if (!tt_shape_equal(&y->shape, &want))
    p->error = tt_status_make(TT_INTERNAL, "partitioner: shard_to_full's local value is not "
                              "the shard shape");
  else
    vals[i].node = tt_part_reshard(p, y, &in->shape, s, vals[i].layout);
  free(s);
  ++p->stats->local_ops;
}

/* An op over local values (some operand manual): the op itself on each
 * partition's local values; a collective runs across the partitions, its
 * groups' partition ids named by the replicas that run them (XLA's
 * use_global_device_ids in SPMD mode). */
void tt_part_manual_op(tt_part_t *p, int32_t i, tt_part_val_t *vals) {
  const tt_instr_t *in = &p->g->instrs[i];
  int32_t nops = in->num_operands;
  tt_node_t **xs = calloc((size_t)nops + 1, sizeof(*xs));
  if (!xs) {
    p->error = tt_status_make(TT_RESOURCE_EXHAUSTED, "out of memory (partitioner)");
    return;
  }
  for (int32_t k = 0; k < nops; ++k) xs[k] = tt_part_local_operand(p, i, k, vals);
  int64_t ia[TT_MAX_IATTRS];
  int32_t ni = in->num_iattrs;
  memcpy(ia, in->iattrs, sizeof(int64_t) * (size_t)ni);
  if (tt_op_is_collective(in->op)) {
    /* An id outside 0 .. n - 1 stays as it is: the collective layer
     * refuses it when the program runs, naming it. */
    for (int32_t k = TT_COLLECTIVE_HEADER; k < ni; ++k)
      if (ia[k] >= 0 && ia[k] < p->n) ia[k] = p->replica[ia[k]];
    switch (in->op) {
      case TT_OP_ALL_REDUCE: ++p->stats->all_reduces; break;
      case TT_OP_ALL_GATHER: ++p->stats->all_gathers; break;
      case TT_OP_REDUCE_SCATTER: ++p->stats->reduce_scatters; break;
      case TT_OP_ALL_TO_ALL: ++p->stats->all_to_alls; break;
      default: ++p->stats->collective_permutes; break;
    }
  } else {
    ++p->stats->local_ops;
  }
  tt_node_t *y = tt_part_make(p, in->op, xs, nops, ia, ni, in->fattrs);
  free(xs);
  if (y && !tt_shape_equal(&y->shape, &in->shape))
    p->error = tt_status_make(TT_INTERNAL, "partitioner: %s on local values has another shape",
                              tt_op_name(in->op));
  if (p->error) return;
  vals[i].node = y;
  vals[i].manual = 1;
}

int tt_part_reads_manual(const tt_instr_t *in, const tt_part_val_t *vals) {
  for (int32_t k = 0; k < in->num_operands; ++k)
    if (vals[in->operands[k]].manual) return 1;
  return 0;
}
