/* View maps of movement chains (src/passes/collapse_movement.c), shared
 * with the passes that read operands through them
 * (src/passes/attention_layout.c). Internal to the passes. */
#ifndef TORCHTPU_PASSES_MOVEMENT_MAP_H_
#define TORCHTPU_PASSES_MOVEMENT_MAP_H_

#include "torchtpu/passes.h"

#define TT_MV_ATOMS 24

typedef struct tt_vmap_s {
  int32_t base;
  int64_t off;
  int n;                       /* atoms, row-major over the node's elements */
  int64_t size[TT_MV_ATOMS], stride[TT_MV_ATOMS];
  int rank;
  int dim_end[TT_MAX_RANK];    /* dim d owns atoms [dim_end[d-1], dim_end[d]) */
  int copies;                  /* copying nodes on the chain (this one included) */
  int whole_copy;              /* a copy of all of the base, read by movement ops only */
} tt_vmap_t;


/* Nodes one candidate's map may visit: concatenations of shared pieces
 * make the walk a DAG, which unbounded would be exponential in depth. */
#define TT_MV_BUDGET 256

typedef struct tt_mv_pass_s {
  tt_work_t *w;
  int budget;
  int32_t *uses;
  int32_t *users_movement; /* 1: every reader of i is a movement op */
} tt_mv_pass_t;

/* Whether op only moves elements (reshape, transpose, slice, concat). */
int tt_mv_is_movement(tt_op_t op);
/* Over live instructions (uses from tt_work_use_counts): last_reader[o],
 * the last instruction reading o (-1: none), and users_movement[o], 1
 * when every reader of o is a movement op and o is no graph output.
 * Either array may be NULL. */
void tt_mv_scan_readers(const tt_work_t *w, const int32_t *uses, int32_t *last_reader,
                        int32_t *users_movement);
/* Node i's view map over its base (p->budget counts down; a node that is
 * no movement op, or a chain the map cannot follow, is its own base). */
void tt_mv_map(tt_mv_pass_t *p, int32_t i, int depth, tt_vmap_t *m);
/* First atom of dim d. */
int tt_mv_dim_begin(const tt_vmap_t *m, int d);
/* Makes room for k instructions before position pos (indices >= pos move
 * up by k); 0 on allocation failure. */
int tt_mv_insert(tt_work_t *w, int32_t pos, int32_t k);
/* Rewrites in as a one-operand instruction op(operand) with shape and
 * attributes *attrs (op's attribute struct, attrs_size bytes; op_attrs.h);
 * 0 on allocation failure. */
int tt_mv_set(tt_instr_t *in, tt_op_t op, tt_dtype_t dt, int32_t operand,
              const tt_shape_t *shape, const void *attrs, size_t attrs_size);
/* tt_mv_set of a reshape to shape. */
int tt_mv_set_reshape(tt_instr_t *in, tt_dtype_t dt, int32_t operand, const tt_shape_t *shape);

#endif /* TORCHTPU_PASSES_MOVEMENT_MAP_H_ */
