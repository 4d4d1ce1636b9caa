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

/* An instruction's value in the program being built. */
typedef struct tt_part_val_s {
  tt_node_t *node;
  tt_sharding_t *layout; /* full form, owned; NULL for a manual value */
  /* 1: a value inside a manual region (made from a full_to_shard's
   * result): node is this partition's own local value, no layout. */
  int manual;
} tt_part_val_t;

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

/* s (any form, validated) as a full-form layout over p->n devices ({manual}
 * as replicated: a value made outside a region that propagation marked
 * {manual}); NULL with p->error set when made for another count. */
tt_sharding_t *tt_part_full(tt_part_t *p, const tt_sharding_t *s, int32_t rank);
/* coord[d]: the tile index along dim d device dev holds in full-form s;
 * *rep (may be NULL): its position along the replication dim. */
void tt_part_coords(const tt_sharding_t *s, int32_t rank, int32_t dev, int64_t *coord,
                    int64_t *rep);
static inline int64_t tt_part_chunk(int64_t dim, int64_t tiles) {
  return tiles > 1 ? (dim + tiles - 1) / tiles : dim;
}
/* The full-form layout whose device dev holds tile coord[dev] (tiles:
 * rank tile counts and the replication count), devices of one tile in
 * device order; NULL with p->error set when the coordinates do not give
 * every tile tiles[rank] devices. */
tt_sharding_t *tt_part_from_coords(tt_part_t *p, int32_t rank, const int64_t *tiles,
                                   const int64_t (*coord)[TT_MAX_RANK]);
/* A malloc'd copy of s (NULL with p->error set when out of memory). */
tt_sharding_t *tt_part_copy(tt_part_t *p, const tt_sharding_t *s);
/* The shard shape of a tensor of global shape under full-form s. */
tt_shape_t tt_part_local_shape(const tt_sharding_t *s, const tt_shape_t *global);
/* 1 when full-form a and b tile dim d alike: the same count and every
 * device at the same index. */
int tt_part_same_dim(const tt_sharding_t *a, const tt_sharding_t *b, int32_t rank, int32_t d);

/* x (this partition's tile of a tensor of global shape `global` under
 * from) -> its tile under `to`. In order: a dim both tile, different
 * numbers of ways, is gathered (one all_gather); a dim `from` tiles t ways that
 * `to` does not, while `to` tiles another dim t ways that `from` does not,
 * moves with one all_to_all (groups: the devices that differ only along
 * the first dim); equal tile counts on every dim with devices holding
 * other tiles: one collective_permute; else the dims still tiled
 * differently are gathered (one all_gather each, groups of the devices
 * that differ only along that dim), then the tiles `to` asks for are
 * sliced locally (free). */
tt_node_t *tt_part_reshard(tt_part_t *p, tt_node_t *x, const tt_shape_t *global,
                           const tt_sharding_t *from, const tt_sharding_t *to);
/* x's padding along each dim of `dims` (bit d) that s tiles unevenly
 * replaced by `identity` (this partition's tile only). */
tt_node_t *tt_part_mask(tt_part_t *p, tt_node_t *x, const tt_shape_t *global,
                        const tt_sharding_t *s, uint64_t dims, double identity);
/* x[start:start+len] along dim d; x padded with zeros after its end
 * along dim d by hi elements. */
tt_node_t *tt_part_slice_dim(tt_part_t *p, tt_node_t *x, int32_t d, int64_t start, int64_t len);
tt_node_t *tt_part_pad_dim(tt_part_t *p, tt_node_t *x, int32_t d, int64_t hi);
/* A collective_permute of x along (source, target) partition pairs
 * (n_pairs of them; every partition not a target receives zeros). NULL
 * with nothing made when the pairs do not fit the attributes (over 13
 * partitions): the caller takes another way. */
tt_node_t *tt_part_permute(tt_part_t *p, tt_node_t *x, const int32_t *pairs, int32_t n_pairs);
/* A reduce_scatter of x with `reduce` along dim d over groups of
 * group_size (ids: p->n partition numbers, each group in the order of the
 * tiles its members get); x's dim d must divide by group_size. */
tt_node_t *tt_part_reduce_scatter(tt_part_t *p, tt_node_t *x, int64_t reduce, int32_t d,
                                  const int32_t *ids, int32_t group_size);
/* Halo exchange (src/passes/partition_conv.c): x, this partition's tile
 * of a tensor of global shape under full-form s, tiled along d, extended
 * by the lo rows before it and the hi rows after it (zeros past the
 * tensor's ends; its own padding rows zeroed), with one
 * collective_permute per side. tt_part_halo_fits: whether a window of
 * that reach and stride can be computed so over `tiles` tiles of a dim
 * of size dim (stride 1, each side within one neighbouring tile, the
 * pairs fit a collective). */
int tt_part_halo_fits(const tt_part_t *p, int64_t dim, int64_t tiles, int64_t stride,
                      int64_t lo, int64_t hi);
tt_node_t *tt_part_halo(tt_part_t *p, tt_node_t *x, const tt_shape_t *global,
                        const tt_sharding_t *s, int32_t d, int64_t lo, int64_t hi);
/* An all_reduce of x with `reduce` over groups (group_size ids each, n
 * ids in all, partition numbers; named by replica id in the op). */
tt_node_t *tt_part_all_reduce(tt_part_t *p, tt_node_t *x, int64_t reduce, const int32_t *ids,
                              int32_t group_size);

/* Manual regions (src/passes/partition_manual.c): instruction i of p->g
 * lowered into vals[i]. tt_part_reads_manual: whether an operand of in is a
 * value inside a region (then tt_part_manual_op lowers it). */
void tt_part_full_to_shard(tt_part_t *p, int32_t i, tt_part_val_t *vals);
void tt_part_shard_to_full(tt_part_t *p, int32_t i, tt_part_val_t *vals);
void tt_part_manual_op(tt_part_t *p, int32_t i, tt_part_val_t *vals);
int tt_part_reads_manual(const tt_instr_t *in, const tt_part_val_t *vals);

#endif /* TORCHTPU_PASSES_PARTITION_INTERNAL_H_ */
