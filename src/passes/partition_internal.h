/* Internal to the partitioner (src/passes/partition*.c,
 * include/torchtpu/partition.h): the state of building one partition's
 * program, layouts as per-device tile coordinates, and the reshards.
 *
 * Layouts are full-form shardings (torchtpu/sharding_rule.h: rank + 1
 * tile dims, the last the replication) over exactly num_partitions
 * devices; every value the program holds is its partition's tile of such
 * a layout, padded to ceil(dim / tiles) per dim. */
#ifndef TORCHTPU_PASSES_PARTITION_INTERNAL_H_
#define TORCHTPU_PASSES_PARTITION_INTERNAL_H_

#include "torchtpu/partition.h"
#include "torchtpu/sharding_rule.h"

typedef struct tt_part_s {
  const tt_graph_t *g;
  int32_t n;  /* partitions */
  int32_t me; /* this partition */
  int64_t replica[27];
  tt_partition_stats_t *stats;
  /* Every node made (one reference each), released when done. */
  tt_node_t **pool;
  int32_t pool_len, pool_cap;
  tt_status_t error; /* the first failure; later calls do nothing */
} tt_part_t;

/* A node of op over operands (tt_node_create), kept in the pool; NULL
 * after a failure (p->error set). */
tt_node_t *tt_part_make(tt_part_t *p, tt_op_t op, tt_node_t *const *operands, int32_t nops,
                        const int64_t *iattrs, int32_t ni, const double *fattrs);
/* A [1, .., 1] tensor (rank ones; rank 0: a 0-d tensor) of dtype holding v. */
tt_node_t *tt_part_constant(tt_part_t *p, double v, tt_dtype_t dtype, int32_t rank);

/* s (any form, validated) as a full-form layout over p->n devices; NULL
 * with p->error set when it is manual or made for another count. */
tt_sharding_t *tt_part_full(tt_part_t *p, const tt_sharding_t *s, int32_t rank);
/* coord[d]: the tile index along dim d device dev holds in full-form s;
 * *rep (may be NULL): its position along the replication dim. */
void tt_part_coords(const tt_sharding_t *s, int32_t rank, int32_t dev, int64_t *coord,
                    int64_t *rep);
static inline int64_t tt_part_chunk(int64_t dim, int64_t tiles) {
  return tiles > 1 ? (dim + tiles - 1) / tiles : dim;
}
/* The shard shape of a tensor of global shape under full-form s. */
tt_shape_t tt_part_local_shape(const tt_sharding_t *s, const tt_shape_t *global);
/* 1 when full-form a and b tile dim d alike: the same count and every
 * device at the same index. */
int tt_part_same_dim(const tt_sharding_t *a, const tt_sharding_t *b, int32_t rank, int32_t d);

/* x (this partition's tile of a tensor of global shape `global` under
 * from) -> its tile under `to`: the dims tiled differently are gathered
 * (one all_gather each, groups of the devices that differ only along that
 * dim), then the tiles `to` asks for are sliced locally (free). */
tt_node_t *tt_part_reshard(tt_part_t *p, tt_node_t *x, const tt_shape_t *global,
                           const tt_sharding_t *from, const tt_sharding_t *to);
/* x's padding along each dim of `dims` (bit d) that s tiles unevenly
 * replaced by `identity` (this partition's tile only). */
tt_node_t *tt_part_mask(tt_part_t *p, tt_node_t *x, const tt_shape_t *global,
                        const tt_sharding_t *s, uint64_t dims, double identity);
/* An all_reduce of x with `reduce` over groups (group_size ids each, n
 * ids in all, partition numbers; named by replica id in the op). */
tt_node_t *tt_part_all_reduce(tt_part_t *p, tt_node_t *x, int64_t reduce, const int32_t *ids,
                              int32_t group_size);

#endif /* TORCHTPU_PASSES_PARTITION_INTERNAL_H_ */
