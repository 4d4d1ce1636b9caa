/* Sharding rules of the movement ops. A dim that only moves (transpose,
 * broadcast, a dim a slice or pad leaves whole) keeps its sharding; a dim
 * whose elements move between positions (sliced, padded, concatenated,
 * flipped) needs the whole dim, so the result is replicated along it.
 * Reshape keeps a sharded dim when it is the major dim of a group of dims
 * that merge or split and its tile count divides the group's major dims on
 * both sides (each shard stays whole rows); any other sharded dim of a
 * group is replicated. */
#include "ir/sharding_rules.h"

static void tt_srule_broadcast(const tt_graph_t *g, int32_t i, tt_sharding_map_t *m) {
  tt_srule_broadcast_row(tt_srule_operand_shape(g, i, 0), &g->instrs[i].shape, m->dims[0]);
}

/* Groups of dims whose products agree (size-1 dims skipped): each group's
 * major operand dim maps to its major result dim, exactly when the group
 * is not one dim on each side. */
static void tt_srule_reshape(const tt_graph_t *g, int32_t i, tt_sharding_map_t *m) {
  const tt_shape_t *x = tt_srule_operand_shape(g, i, 0), *y = &g->instrs[i].shape;
  for (int32_t d = 0; d < x->rank; ++d)
    if (x->dims[d] == 0) return;
  for (int32_t d = 0; d < y->rank; ++d)
    if (y->dims[d] == 0) return;
  int32_t a = 0, b = 0;
  while (a < x->rank && b < y->rank) {
    if (x->dims[a] == 1) {
      ++a;
      continue;
    }
    if (y->dims[b] == 1) {
      ++b;
      continue;
    }
    int32_t a0 = a, b0 = b;
    int64_t pa = x->dims[a++], pb = y->dims[b++];
    while (pa != pb) {
      if (pa < pb) {
        if (a >= x->rank) return;
        pa *= x->dims[a++];
      } else {
        if (b >= y->rank) return;
        pb *= y->dims[b++];
      }
    }
    m->dims[0][a0] = a - a0 == 1 && b - b0 == 1 ? b0 : (b0 | TT_SDIM_EXACT);
  }
}

static void tt_srule_transpose(const tt_graph_t *g, int32_t i, tt_sharding_map_t *m) {
  tt_transpose_attrs_t a;
  TT_ATTRS(&g->instrs[i], &a);
  for (int32_t r = 0; r < a.perm.n; ++r) m->dims[0][a.perm.v[r]] = r;
}

/* row[d] = d where the slice takes all of dim d of x. */
static void tt_srule_slice_row(const tt_slice_attrs_t *a, const tt_shape_t *x, int32_t *row) {
  for (int32_t d = 0; d < x->rank && d < a->start.n; ++d) {
    int whole = a->start.v[d] == 0 && a->limit.v[d] >= x->dims[d] && a->step.v[d] == 1;
    row[d] = whole ? d : TT_SDIM_WHOLE;
  }
}

static void tt_srule_slice(const tt_graph_t *g, int32_t i, tt_sharding_map_t *m) {
  tt_slice_attrs_t a;
  TT_ATTRS(&g->instrs[i], &a);
  tt_srule_slice_row(&a, tt_srule_operand_shape(g, i, 0), m->dims[0]);
}

/* The base keeps its layout (each device writes the part of the window it
 * holds); the source is read whole along the sliced dims. */
static void tt_srule_slice_scatter(const tt_graph_t *g, int32_t i, tt_sharding_map_t *m) {
  tt_slice_attrs_t a;
  TT_ATTRS(&g->instrs[i], &a);
  const tt_shape_t *base = tt_srule_operand_shape(g, i, 0);
  for (int32_t d = 0; d < base->rank; ++d) m->dims[0][d] = d;
  tt_srule_slice_row(&a, base, m->dims[1]);
}

static void tt_srule_concat(const tt_graph_t *g, int32_t i, tt_sharding_map_t *m) {
  tt_concat_attrs_t a;
  TT_ATTRS(&g->instrs[i], &a);
  for (int32_t k = 0; k < m->num_operands; ++k) {
    const tt_shape_t *x = tt_srule_operand_shape(g, i, k);
    for (int32_t d = 0; d < x->rank; ++d) m->dims[k][d] = d == a.dim ? TT_SDIM_WHOLE : d;
  }
}

static void tt_srule_pad(const tt_graph_t *g, int32_t i, tt_sharding_map_t *m) {
  tt_pad_attrs_t a;
  TT_ATTRS(&g->instrs[i], &a);
  const tt_shape_t *x = tt_srule_operand_shape(g, i, 0);
  for (int32_t d = 0; d < x->rank && d < a.lo.n; ++d)
    m->dims[0][d] = a.lo.v[d] == 0 && a.hi.v[d] == 0 ? d : TT_SDIM_WHOLE;
}

static void tt_srule_flip(const tt_graph_t *g, int32_t i, tt_sharding_map_t *m) {
  tt_flip_attrs_t a;
  TT_ATTRS(&g->instrs[i], &a);
  const tt_shape_t *x = tt_srule_operand_shape(g, i, 0);
  for (int32_t d = 0; d < x->rank; ++d)
    m->dims[0][d] = ((uint64_t)a.dims_mask >> d) & 1u ? TT_SDIM_WHOLE : d;
}

/* Same dims: elementwise on the bytes; otherwise replicated. */
static void tt_srule_bitcast(const tt_graph_t *g, int32_t i, tt_sharding_map_t *m) {
  const tt_shape_t *x = tt_srule_operand_shape(g, i, 0), *y = &g->instrs[i].shape;
  if (x->rank != y->rank) return;
  for (int32_t d = 0; d < x->rank; ++d)
    if (x->dims[d] != y->dims[d]) return;
  for (int32_t d = 0; d < x->rank; ++d) m->dims[0][d] = d;
}

/* The barrier's node gives operand `index` back: every dim of it keeps its
 * sharding. The other operands are only ordered, not read into the result
 * (their rows stay WHOLE, so they give no candidate beyond replication;
 * the partitioner leaves them in their own layouts). */
static void tt_srule_opt_barrier(const tt_graph_t *g, int32_t i, tt_sharding_map_t *m) {
  tt_opt_barrier_attrs_t a;
  TT_ATTRS(&g->instrs[i], &a);
  if (a.index < 0 || a.index >= m->num_operands) return;
  const tt_shape_t *x = tt_srule_operand_shape(g, i, (int32_t)a.index);
  for (int32_t d = 0; d < x->rank; ++d) m->dims[a.index][d] = d;
}

TT_SHARDING_RULE(BROADCAST, "broadcast", tt_srule_broadcast);
TT_SHARDING_RULE(RESHAPE, "reshape", tt_srule_reshape);
TT_SHARDING_RULE(TRANSPOSE, "transpose", tt_srule_transpose);
TT_SHARDING_RULE(SLICE, "slice", tt_srule_slice);
TT_SHARDING_RULE(SLICE_SCATTER, "slice", tt_srule_slice_scatter);
TT_SHARDING_RULE(CONCAT, "concat", tt_srule_concat);
TT_SHARDING_RULE(PAD, "pad", tt_srule_pad);
TT_SHARDING_RULE(FLIP, "flip", tt_srule_flip);
TT_SHARDING_RULE(BITCAST, "bitcast", tt_srule_bitcast);
TT_SHARDING_RULE(OPT_BARRIER, "opt_barrier", tt_srule_opt_barrier);
