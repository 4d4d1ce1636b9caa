/* The SPMD partitioner: an annotated, propagated graph -> one program per
 * partition that holds only that partition's shards (docs/spmd.md,
 * "Partitioner").
 *
 * Input: a linearised graph after tt_pass_propagate_sharding (passes.h),
 * whose graph->sharding_prop gives every instruction's layout. Output, for
 * partition p: a graph of the same inputs and outputs, in the same order,
 * each of the shard shape its layout gives (every dim ceil(dim / tiles),
 * the last tiles zero-padded by whoever fills them; the partitioner never
 * reads padding where it could change a value: reductions and contracted
 * dims mask it). Where an operand's layout is not the one an op can be
 * computed on, the program reshards it with collective ops (all_gather,
 * all_reduce, reduce_scatter, all_to_all, collective_permute) between the
 * partitions. The programs differ only in
 * constants (the slice offsets and masks of their own tiles), so every
 * partition issues the same collectives in the same order.
 *
 * The mesh: shardings already hold the mesh's tile assignment (partition
 * ids 0 .. num_partitions - 1, docs/spmd.md "Semantics"); the partitioner
 * needs the partition count and, for the collectives' replica groups, the
 * replica (engine device) id that runs each partition. */
#ifndef TORCHTPU_PARTITION_H_
#define TORCHTPU_PARTITION_H_

#include "torchtpu/ir.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct tt_partition_mesh_s {
  int32_t num_partitions; /* 1 .. 27 (a collective lists at most 27 ids) */
  /* replica_ids[p]: the replica id that runs partition p, as collectives
   * name it (distinct); NULL: p itself. */
  const int64_t *replica_ids;
} tt_partition_mesh_t;

/* What one partition's program does besides computing on shards. */
typedef struct tt_partition_stats_s {
  int64_t all_gathers;  /* one per dim gathered by a reshard */
  int64_t all_reduces;  /* one per op combining partial values */
  int64_t fallbacks;    /* ops without a partition rule: operands gathered,
                           computed replicated (correct, slow) */
  int64_t masks;        /* padded shard dims masked before a reduction */
  int64_t local_ops;    /* ops computed on shards */
  /* (after the fields above, which keep their places) */
  int64_t reduce_scatters;     /* partial values combined straight into tiles */
  int64_t all_to_alls;         /* reshards moving one dim's tiling to another */
  int64_t collective_permutes; /* reshards between device orders, halo exchanges */
} tt_partition_stats_t;

typedef struct tt_partition_s {
  int32_t partition;
  tt_graph_t *graph; /* owned; its PARAM instructions have shard shapes */
  /* input_position[k]: the position among graph's inputs of the source
   * graph's input k (graph inputs are ordered by first use). */
  int32_t num_inputs;
  int32_t *input_position;
  tt_partition_stats_t stats;
} tt_partition_t;

/* Partition `partition`'s program of g (propagated: g->sharding_prop set).
 * placeholder: a buffer the program's PARAM nodes hold while the graph is
 * built (a linearised graph keeps no buffers; the caller supplies shard
 * values at execution). Manual regions (spmd_full_to_shard ..
 * spmd_shard_to_full) run per partition on its tile, their collectives
 * between the partitions (docs/spmd.md "Partitioner"). TT_INVALID_ARGUMENT:
 * no propagation record, a partition out of range, shardings made for
 * another partition count; TT_UNIMPLEMENTED: a mesh over 27 partitions,
 * fused instructions, a collective outside a manual region, a value inside
 * one as an output, a region inside a region. *out is freed with
 * tt_partition_destroy. */
tt_status_t tt_partition_program(const tt_graph_t *g, const tt_partition_mesh_t *mesh,
                                 int32_t partition, tt_buffer_t *placeholder,
                                 tt_partition_t **out);
void tt_partition_destroy(tt_partition_t *p);

/* Where partition p's shard of a tensor of `shape` laid out by s (any
 * form; replicated with device count 0 means every partition holds all of
 * it) lies: per dim, offset[d] its first element, valid[d] how many of its
 * shard_dims[d] = ceil(dim / tiles) elements are real (the rest is
 * padding; 0 when the tile lies wholly past the end). TT_INVALID_ARGUMENT
 * when p is not in s's device list or s is manual. */
tt_status_t tt_partition_tile(const tt_sharding_t *s, const tt_shape_t *shape, int32_t p,
                              int64_t *offset, int64_t *valid, tt_shape_t *shard_shape);

#ifdef __cplusplus
}
#endif
#endif /* TORCHTPU_PARTITION_H_ */
