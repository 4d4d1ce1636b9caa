/* Sharding rules of gathers and scatters. A lookup into a table sharded
 * along the looked-up dim (index_select's and gather's `dim`: a
 * vocabulary-parallel embedding) is partial: each device looks up the
 * indices its rows hold (zeros for the others) and the partitioner sums
 * the partial results. The indices keep their sharding. Scatters keep the
 * base's layout (each device applies the updates that land in its rows)
 * and read the indices and updates whole along `dim`. */
#include "ir/sharding_rules.h"

static void tt_srule_index_select(const tt_graph_t *g, int32_t i, tt_sharding_map_t *m) {
  tt_dim_attrs_t a;
  TT_ATTRS(&g->instrs[i], &a);
  const tt_shape_t *x = tt_srule_operand_shape(g, i, 0), *idx = tt_srule_operand_shape(g, i, 1);
  m->partial_reduce = TT_RED_SUM;
  for (int32_t d = 0; d < x->rank; ++d) m->dims[0][d] = d == a.dim ? TT_SDIM_REDUCED : d;
  if (idx->rank == 1) m->dims[1][0] = (int32_t)a.dim;
}

/* out[..i..] = x[..idx[..i..]..] along dim: x's other dims line up with
 * the result's where their sizes agree. */
static void tt_srule_gather(const tt_graph_t *g, int32_t i, tt_sharding_map_t *m) {
  tt_dim_attrs_t a;
  TT_ATTRS(&g->instrs[i], &a);
  const tt_shape_t *x = tt_srule_operand_shape(g, i, 0), *y = &g->instrs[i].shape;
  m->partial_reduce = TT_RED_SUM;
  tt_srule_same_size_row(x, y, m->dims[0]);
  if (a.dim < x->rank) m->dims[0][a.dim] = TT_SDIM_REDUCED;
  for (int32_t d = 0; d < y->rank; ++d) m->dims[1][d] = d;
}

/* (base, idx, src) along dim. */
static void tt_srule_scatter_like(const tt_graph_t *g, int32_t i, int64_t dim,
                                  tt_sharding_map_t *m) {
  const tt_shape_t *base = tt_srule_operand_shape(g, i, 0);
  for (int32_t d = 0; d < base->rank; ++d) m->dims[0][d] = d;
  for (int32_t k = 1; k < 3; ++k) {
    const tt_shape_t *x = tt_srule_operand_shape(g, i, k);
    tt_srule_same_size_row(x, base, m->dims[k]);
    if (dim < x->rank) m->dims[k][dim] = TT_SDIM_WHOLE;
  }
}

static void tt_srule_scatter(const tt_graph_t *g, int32_t i, tt_sharding_map_t *m) {
  tt_scatter_attrs_t a;
  TT_ATTRS(&g->instrs[i], &a);
  tt_srule_scatter_like(g, i, a.dim, m);
}

static void tt_srule_scatter_reduce(const tt_graph_t *g, int32_t i, tt_sharding_map_t *m) {
  tt_scatter_reduce_attrs_t a;
  TT_ATTRS(&g->instrs[i], &a);
  tt_srule_scatter_like(g, i, a.dim, m);
}

/* index_add's index is a vector: read whole. */
static void tt_srule_index_add(const tt_graph_t *g, int32_t i, tt_sharding_map_t *m) {
  tt_dim_attrs_t a;
  TT_ATTRS(&g->instrs[i], &a);
  tt_srule_scatter_like(g, i, a.dim, m);
  m->dims[1][0] = TT_SDIM_WHOLE;
}

TT_SHARDING_RULE(INDEX_SELECT, "gather", tt_srule_index_select);
TT_SHARDING_RULE(GATHER, "gather", tt_srule_gather);
TT_SHARDING_RULE(SCATTER, "scatter", tt_srule_scatter);
TT_SHARDING_RULE(SCATTER_REDUCE, "scatter", tt_srule_scatter_reduce);
TT_SHARDING_RULE(INDEX_ADD, "scatter", tt_srule_index_add);
