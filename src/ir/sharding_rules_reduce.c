/* Sharding rules of reductions, scans and sorts. A reduced dim that is
 * sharded leaves each device a partial value of the reduction (sum, mean,
 * product, max, min, any, all; combined by the partitioner: a mean as the
 * sum of partial sums over the full count); the result is replicated over
 * that dim's devices. argmax/argmin need the whole dim. Scans, cumulative
 * ops and sorts need the whole of their dim; their other dims keep their
 * sharding. */
#include "ir/sharding_rules.h"

static void tt_srule_reduce(const tt_graph_t *g, int32_t i, tt_sharding_map_t *m) {
  tt_reduce_attrs_t a;
  TT_ATTRS(&g->instrs[i], &a);
  const tt_shape_t *x = tt_srule_operand_shape(g, i, 0);
  int partial = a.op != TT_RED_ARGMAX && a.op != TT_RED_ARGMIN;
  m->partial_reduce = partial ? (int32_t)a.op : -1;
  int32_t r = 0;
  for (int32_t d = 0; d < x->rank; ++d) {
    if (((uint64_t)a.dims_mask >> d) & 1u) {
      m->dims[0][d] = partial ? TT_SDIM_REDUCED : TT_SDIM_WHOLE;
      if (a.keepdim) ++r;
    } else {
      m->dims[0][d] = r++;
    }
  }
}

/* Every dim but `dim` keeps its place. */
static void tt_srule_along(const tt_shape_t *x, int64_t dim, int32_t *row) {
  for (int32_t d = 0; d < x->rank; ++d) row[d] = d == dim ? TT_SDIM_WHOLE : d;
}

static void tt_srule_scan(const tt_graph_t *g, int32_t i, tt_sharding_map_t *m) {
  tt_scan_attrs_t a;
  TT_ATTRS(&g->instrs[i], &a);
  tt_srule_along(tt_srule_operand_shape(g, i, 0), a.dim, m->dims[0]);
}

static void tt_srule_cumulative(const tt_graph_t *g, int32_t i, tt_sharding_map_t *m) {
  tt_cumulative_attrs_t a;
  TT_ATTRS(&g->instrs[i], &a);
  tt_srule_along(tt_srule_operand_shape(g, i, 0), a.dim, m->dims[0]);
}

static void tt_srule_argsort(const tt_graph_t *g, int32_t i, tt_sharding_map_t *m) {
  tt_argsort_attrs_t a;
  TT_ATTRS(&g->instrs[i], &a);
  tt_srule_along(tt_srule_operand_shape(g, i, 0), a.dim, m->dims[0]);
}

/* (sorted, values): the values keep their layout; the sorted sequences are
 * searched whole, their batch dims lining up with the values'. */
static void tt_srule_searchsorted(const tt_graph_t *g, int32_t i, tt_sharding_map_t *m) {
  const tt_shape_t *s = tt_srule_operand_shape(g, i, 0), *v = tt_srule_operand_shape(g, i, 1);
  for (int32_t d = 0; d + 1 < s->rank; ++d) m->dims[0][d] = d;
  for (int32_t d = 0; d < v->rank; ++d) m->dims[1][d] = d;
}

TT_SHARDING_RULE(REDUCE, "reduce", tt_srule_reduce);
TT_SHARDING_RULE(SCAN, "scan", tt_srule_scan);
TT_SHARDING_RULE(CUMULATIVE, "scan", tt_srule_cumulative);
TT_SHARDING_RULE(ARGSORT, "sort", tt_srule_argsort);
TT_SHARDING_RULE(SEARCHSORTED, "sort", tt_srule_searchsorted);
