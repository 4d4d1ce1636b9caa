/* Sharding propagation: each op's rule (the op table's sharding_rule, one
 * per row of torchtpu/ops.def), the tile-assignment algebra the rules and
 * the propagation pass compute with, and what the pass records on a graph
 * for an SPMD partitioner. docs/spmd.md, "Sharding propagation".
 *
 * A rule says how an op's operand dims relate to its result dims (a "dim
 * map"); the pass (tt_pass_propagate_sharding, passes.h) turns that one
 * description into both directions: operand shardings -> result sharding
 * (forward) and result sharding -> operand shardings (backward). The two
 * manual-region ops instead take their shardings from their attributes.
 *
 * Shardings here are XLA HloSharding values (tt_sharding_t, ir.h). Rules
 * and the pass compute with their "full form": kind TILED, rank + 1 tile
 * dims with last_tile_dim_replicate set, the last one the replication
 * count (1 when none), even for a replicated tensor (every tile dim 1).
 * Moving a sharding from one tensor to another is a transpose of its
 * device array, so the devices that hold a tile keep holding the matching
 * tile: nothing here renumbers devices.
 */
#ifndef TORCHTPU_SHARDING_RULE_H_
#define TORCHTPU_SHARDING_RULE_H_

#include "torchtpu/ir.h"

#ifdef __cplusplus
extern "C" {
#endif

/* ---- dim maps ---------------------------------------------------------
 * dims[k][d] for operand k's dim d: the result dim it becomes (>= 0, at
 * most one operand dim of an operand per result dim), optionally with
 * TT_SDIM_EXACT, or one of:
 *   TT_SDIM_WHOLE    the op needs the whole dim on every device (slice or
 *                    sort along it, softmax's dim, a size-1 dim that
 *                    broadcasts): a sharded one is gathered first, and the
 *                    result is replicated over its devices; backward never
 *                    shards it.
 *   TT_SDIM_REDUCED  reduced or contracted: computed on shards, each
 *                    device holds a partial value that partial_reduce
 *                    (tt_reduce_op_t) combines over the dim's devices; the
 *                    result is replicated over them once combined. With
 *                    partial_reduce -1 it means TT_SDIM_WHOLE.
 * TT_SDIM_EXACT on a mapped dim: it maps only when the tile count divides
 * both the operand dim and the result dim, else it counts as WHOLE: a
 * reshape that merges or splits a sharded major dim keeps it only when
 * each shard is whole rows of the dims after it. */
#define TT_SDIM_WHOLE (-1)
#define TT_SDIM_REDUCED (-2)
#define TT_SDIM_EXACT 0x10000
#define TT_SDIM_DIM_MASK 0xffff

typedef struct tt_sharding_map_s {
  int32_t num_operands;
  int32_t (*dims)[TT_MAX_RANK]; /* [num_operands]; filled with TT_SDIM_WHOLE first */
  int32_t partial_reduce;       /* tt_reduce_op_t, or -1 (set to -1 first) */
} tt_sharding_map_t;

/* An op's rule. family names the rule in tests and docs ("elementwise",
 * "dot", ...). map fills m for instruction i of g (operand shapes are
 * g->instrs[operands[k]].shape); NULL: every operand dim is WHOLE, so the
 * result is replicated. fixed (the manual-region ops only, map NULL):
 * a malloc'd sharding for the result (want_result 1) or for operand 0,
 * from the attributes; NULL when they do not decode. */
struct tt_sharding_rule_s {
  const char *family;
  void (*map)(const tt_graph_t *g, int32_t i, tt_sharding_map_t *m);
  tt_sharding_t *(*fixed)(const tt_graph_t *g, int32_t i, int want_result);
};
/* (typedef'd as tt_sharding_rule_t in op_table.h) */

/* ---- the algebra (src/ir/sharding_tiles.c) ----------------------------
 * Every function returns a malloc'd sharding (free()) or NULL (out of
 * memory, or as stated). */

/* s (validated for a tensor of the given rank) in full form; a REPLICATED
 * or MANUAL sharding is copied as it is when its device count is 0
 * (unknown) or it is MANUAL. */
tt_sharding_t *tt_sharding_full(const tt_sharding_t *s, int32_t rank);
/* A full-form sharding of a rank-`rank` tensor in XLA's canonical form: no
 * replication dim when its count is 1, {replicated} (with the device
 * count) when no tensor dim is tiled. */
tt_sharding_t *tt_sharding_canonical(const tt_sharding_t *full, int32_t rank);
/* The tiles of full-form s: the product of its tensor dims' tile counts
 * (1 for replicated; INT64_MAX for manual, which is never refined). */
int64_t tt_sharding_tiles(const tt_sharding_t *s, int32_t rank);
/* Moves full-form src (a tensor of src_rank dims) onto a tensor of
 * dst_rank dims: to[d] is the dst dim src dim d becomes, or < 0 when it
 * has none; a src dim with none moves its devices into the replication
 * dim, the ones marked in `partial` (may be NULL) first: the dst's
 * replication dim lists the partial-value devices major, so its entry
 * p * R + r (p < *partial_count) is the p-th partial value of replica r.
 * *partial_count (may be NULL) gets the product of the partial dims' tile
 * counts (1: none). A dst dim that two src dims map to takes the first. */
tt_sharding_t *tt_sharding_project(const tt_sharding_t *src, int32_t src_rank, const int32_t *to,
                                   int32_t dst_rank, const uint8_t *partial,
                                   int64_t *partial_count);
/* The most specific sharding that refines both a and b (full forms of one
 * rank, or replicated with no device count, which refines to anything):
 * a tensor dim tiled in both must be tiled alike, with every device
 * holding the same tile in both; the merged tile grid must split the
 * devices evenly. NULL when they cannot merge (or differ in device count,
 * or one is manual and the other not). Within a tile, devices keep a's
 * order. */
tt_sharding_t *tt_sharding_merge(const tt_sharding_t *a, const tt_sharding_t *b, int32_t rank);
/* tt_sharding_merge for layouts with partial values: a and b list pa and
 * pb partial groups first in their replication dims (1: none), as
 * tt_sharding_project makes them. Where both have groups they must be as
 * many with every device in the same group; every tile of the merged
 * layout must hold each group equally often (a tile split along the
 * groups' devices would need partial values held by other tiles). The
 * result lists its groups first; *pout gets their count. NULL when they
 * cannot merge. */
tt_sharding_t *tt_sharding_merge_partial(const tt_sharding_t *a, int64_t pa,
                                         const tt_sharding_t *b, int64_t pb, int32_t rank,
                                         int64_t *pout);
/* 1 when full-form a and b give every device the same tile. */
int tt_sharding_same_tiles(const tt_sharding_t *a, const tt_sharding_t *b, int32_t rank);

/* ---- what the pass records --------------------------------------------
 * tt_graph_t.sharding_prop[i] for instruction i; one malloc'd block freed
 * with the graph. */
typedef enum tt_sharding_origin_e {
  TT_SHARDING_FROM_USER = 0,     /* the instruction's own annotation, kept as is */
  TT_SHARDING_FROM_FORWARD = 1,  /* from its operands */
  TT_SHARDING_FROM_BACKWARD = 2, /* from its users */
  TT_SHARDING_FROM_DEFAULT = 3,  /* nothing reached it: replicated */
} tt_sharding_origin_t;

typedef struct tt_sharding_prop_s {
  /* The layout the partitioner makes the result have (canonical form). */
  const tt_sharding_t *sharding;
  /* The layout computing the op on its operands' shards gives (full form):
   * the operands' candidates merged where their tiles and partial groups
   * agree, by the operands' own tiles, most first (docs/spmd.md); the
   * partitioner reshards an operand that does not agree, computes,
   * combines partial values, then reshards to `sharding` where the tiles
   * differ. NULL for inputs, ops without operands and manual-region ops. */
  const tt_sharding_t *local;
  /* > 1: `local`'s replication dim starts with partial_count partial-value
   * groups (tt_sharding_project) that partial_reduce combines. */
  int64_t partial_count;
  int32_t partial_reduce; /* tt_reduce_op_t, or -1 */
  int32_t origin;         /* tt_sharding_origin_t */
} tt_sharding_prop_t;

/* graph->sharding_prop as text, one line per instruction: "%i op(%a,
 * %b): <sharding> <origin>[ local <local>][ partial <count> <reduce>]"
 * (src/ir/sharding_prop_text.c); "" when there is no record. The caller
 * frees it; NULL when out of memory. */
char *tt_sharding_prop_to_text(const tt_graph_t *g);

#ifdef __cplusplus
}
#endif
#endif /* TORCHTPU_SHARDING_RULE_H_ */
