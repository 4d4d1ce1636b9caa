/* The SPMD partitioner (include/torchtpu/partition.h; docs/spmd.md,
 * "Partitioner"): one partition's program of a propagated graph.
 *
 * Every instruction's value is held as this partition's tile of its
 * propagated layout R (graph->sharding_prop). An op is lowered in one of
 * three ways:
 *  - mapped (the ops whose attributes the partitioner knows how to adjust
 *    to shard shapes): from the op's dim map, L0 = R restricted to the
 *    result dims some operand dim maps to; each operand is resharded to L0
 *    moved back onto it (free when it already is), the op runs on the
 *    shards and gives L0; a slice to R's tiles finishes (free).
 *  - partial (reductions, dot and conv2d whose reduced or contracted dims
 *    an operand holds tiled; index_select / gather into a table tiled
 *    along the looked-up dim): those dims stay tiled, their padding is
 *    masked with the reduction's identity (lookups instead take only the
 *    indices in their rows), each device reduces its shard and one
 *    reduce_scatter (where R wants the result tiled over the devices that
 *    hold the pieces) or all_reduce combines them. A dot whose operands'
 *    contracted tiling conflicts with the result tiles (the partial path
 *    would first drop result tiles) takes whichever of the partial and
 *    mapped paths moves fewer bytes (docs/spmd.md "Cost rule").
 *  - conv2d over a tiled spatial dim: halo rows from the neighbouring
 *    tiles (partition_conv.c), then a local conv.
 *  - rng: each partition draws its own tile at its global offsets.
 *  - scatter, scatter_reduce, index_add into a base tiled along their dim:
 *    each partition applies the updates that land in its rows.
 *  - an optimization barrier: over the operands' tiles as they are.
 *  - fallback (every other op): operands gathered to replicated, computed
 *    replicated as in the source graph, sliced to R. Counted.
 *  - manual regions: full_to_shard reshards its operand to the region's
 *    tiled sharding, whose tile is the partition's local value; an op over
 *    local values runs as it is (its shapes are already the local ones),
 *    a collective among them across the partitions (groups of partition
 *    ids); shard_to_full makes the local values the tiles of its result.
 * The decisions depend only on layouts, never on the partition, so every
 * partition's program issues the same collectives in the same order. */
#include <stdlib.h>
#include <string.h>

#include "passes/partition_internal.h"
#include "torchtpu/op_table.h"

/* Ops lowered on shards: their attributes hold no sizes of the dims their
 * maps keep, or ones lower_mapped rewrites (broadcast, reshape, slice). */
static int tt_part_is_mapped(const tt_instr_t *in) {
  switch (in->op) {
    case TT_OP_UNARY: case TT_OP_BINARY: case TT_OP_WHERE: case TT_OP_CONVERT:
    case TT_OP_SPECIAL: case TT_OP_BROADCAST: case TT_OP_RESHAPE: case TT_OP_TRANSPOSE:
    case TT_OP_SLICE: case TT_OP_CONCAT: case TT_OP_PAD: case TT_OP_FLIP: case TT_OP_SCAN:
    case TT_OP_CUMULATIVE: case TT_OP_ARGSORT: case TT_OP_SOFTMAX_BWD: case TT_OP_REDUCE:
    case TT_OP_DOT: case TT_OP_INDEX_SELECT: case TT_OP_GATHER: case TT_OP_CONV2D:
    case TT_OP_SCATTER: case TT_OP_SCATTER_REDUCE: case TT_OP_INDEX_ADD:
      return 1;
    case TT_OP_SOFTMAX: {
      tt_softmax_attrs_t a;
      TT_ATTRS(in, &a);
      return in->num_operands == 1 && !a.packed;
    }
    default:
      return 0;
  }
}

static tt_sharding_t *tt_part_replicated(tt_part_t *p, int32_t rank) {
  tt_sharding_t rep = {TT_SHARDING_REPLICATED, 0, {0}, 0, 0};
  return tt_part_full(p, &rep, rank);
}

static tt_sharding_t *tt_part_project(tt_part_t *p, const tt_sharding_t *s, int32_t src_rank,
                                      const int32_t *to, int32_t dst_rank) {
  if (p->error || !s) return NULL;
  tt_sharding_t *r = tt_sharding_project(s, src_rank, to, dst_rank, NULL, NULL);
  if (!r) p->error = tt_status_make(TT_RESOURCE_EXHAUSTED, "out of memory (partitioner)");
  return r;
}

/* The identity a masked padding element takes for reduction `op` over
 * dtype, or 0 when the partial path does not take that pair. */
static int tt_part_identity(int64_t op, tt_dtype_t dtype, double *out) {
  switch (op) {
    case TT_RED_SUM: case TT_RED_MEAN: case TT_RED_ANY: *out = 0.0; return 1;
    case TT_RED_PROD: case TT_RED_ALL: *out = 1.0; return 1;
    case TT_RED_MAX: *out = -__builtin_inf(); return tt_dtype_is_float(dtype);
    case TT_RED_MIN: *out = __builtin_inf(); return tt_dtype_is_float(dtype);
    default: return 0;
  }
}

/* Row-major index of dev's tile over the dims of full-form s marked in
 * `dims` (NULL: every tensor dim). */
static int64_t tt_part_tile_index(const tt_sharding_t *s, int32_t rank, int32_t dev,
                                  const uint8_t *dims) {
  int64_t c[TT_MAX_RANK], idx = 0;
  tt_part_coords(s, rank, dev, c, NULL);
  for (int32_t d = 0; d < rank; ++d)
    if (!dims || dims[d]) idx = idx * s->tile_dims[d] + c[d];
  return idx;
}

/* The all_reduce groups of partial values: devices holding the same tile
 * of the result (under l0) and different pieces of the reduced dims (under
 * m, over red), tk of them each; ids gets p->n partition numbers. 0 when
 * the devices do not form such groups. */
static int tt_part_partial_groups(tt_part_t *p, const tt_sharding_t *l0, int32_t yrank,
                                  const tt_sharding_t *m, int32_t mrank, const uint8_t *red,
                                  int64_t tk, int32_t *ids) {
  int32_t n = p->n;
  int64_t key[27], kid[27], occ[27];
  for (int32_t dev = 0; dev < n; ++dev) {
    key[dev] = tt_part_tile_index(l0, yrank, dev, NULL);
    kid[dev] = tt_part_tile_index(m, mrank, dev, red);
    occ[dev] = 0;
    for (int32_t e = 0; e < dev; ++e) occ[dev] += key[e] == key[dev] && kid[e] == kid[dev];
  }
  /* Sort by (key, occurrence, piece): each run of tk is one group. */
  for (int32_t i = 0; i < n; ++i) ids[i] = i;
  for (int32_t i = 1; i < n; ++i)
    for (int32_t j = i; j > 0; --j) {
      int32_t a = ids[j - 1], b = ids[j];
      int later = key[a] != key[b] ? key[a] > key[b]
                  : occ[a] != occ[b] ? occ[a] > occ[b]
                                     : kid[a] > kid[b];
      if (!later) break;
      ids[j - 1] = b;
      ids[j] = a;
    }
  if (tk <= 0 || n % tk) return 0;
  for (int32_t g = 0; g < n; g += (int32_t)tk)
    for (int32_t q = 0; q < tk; ++q) {
      int32_t dev = ids[g + q], first = ids[g];
      if (kid[dev] != q || key[dev] != key[first] || occ[dev] != occ[first]) return 0;
    }
  return 1;
}

typedef struct tt_part_op_s {
  tt_part_t *p;
  const tt_instr_t *in;
  const tt_part_val_t *vals;
  int32_t nops;
  int32_t (*rows)[TT_MAX_RANK];
  int32_t (*inv)[TT_MAX_RANK]; /* per operand: its dim each result dim of L0 takes, or -1 */
  int32_t partial_reduce;
  tt_sharding_t *r, *l0;
  tt_sharding_t **a; /* per operand: the layout computing on shards needs */
  const tt_sharding_t *x0; /* the layout operand 0 was resharded to (conv's halos) */
} tt_part_op_t;

static const tt_shape_t *tt_part_xshape(const tt_part_op_t *o, int32_t k) {
  return &o->p->g->instrs[o->in->operands[k]].shape;
}

/* o->a from o->l0 (the old ones freed). */
static void tt_part_operand_layouts(tt_part_op_t *o) {
  for (int32_t k = 0; k < o->nops; ++k) {
    free(o->a[k]);
    o->a[k] = tt_part_project(o->p, o->l0, o->in->shape.rank, o->inv[k],
                              tt_part_xshape(o, k)->rank);
  }
}

/* Runs the op on operand nodes xs with its attributes adjusted to shard
 * shapes; checks the result is L0's shard. */
static tt_node_t *tt_part_run_local(tt_part_op_t *o, tt_node_t **xs, int64_t reduce_op) {
  tt_part_t *p = o->p;
  const tt_instr_t *in = o->in;
  int64_t ia[TT_MAX_IATTRS];
  int32_t ni = in->num_iattrs;
  memcpy(ia, in->iattrs, sizeof(int64_t) * (size_t)ni);
  tt_shape_t want = tt_part_local_shape(o->l0, &in->shape);
  if (in->op == TT_OP_BROADCAST || in->op == TT_OP_RESHAPE) {
    ni = want.rank;
    memcpy(ia, want.dims, sizeof(int64_t) * (size_t)ni);
  } else if (in->op == TT_OP_SLICE && xs[0]) {
    tt_slice_attrs_t a;
    TT_ATTRS(in, &a);
    for (int32_t d = 0; d < a.limit.n; ++d)
      if (o->a[0]->tile_dims[d] > 1) a.limit.v[d] = xs[0]->shape.dims[d];
    double fa[TT_MAX_FATTRS];
    tt_status_t st = tt_attrs_encode(TT_OP_SLICE, &a, sizeof(a), -1, ia, &ni, fa);
    if (st) {
      p->error = st;
      return NULL;
    }
  } else if (in->op == TT_OP_REDUCE) {
    ia[0] = reduce_op;
  } else if (in->op == TT_OP_CONV2D && o->x0) {
    /* A tiled spatial dim: its tile extended by the halo rows, then
     * convolved with no padding along it. */
    tt_conv2d_attrs_t a;
    TT_ATTRS(in, &a);
    const tt_shape_t *x = tt_part_xshape(o, 0), *w = tt_part_xshape(o, 1);
    tt_node_t *ops[2] = {xs[0], xs[1]};
    for (int32_t d = 2; d < 4; ++d) {
      if (o->x0->tile_dims[d] == 1) continue;
      int64_t lo = a.padding[d - 2], hi = a.dilation[d - 2] * (w->dims[d] - 1) - lo;
      ops[0] = tt_part_halo(p, ops[0], x, o->x0, d, lo, hi);
      a.padding[d - 2] = 0;
    }
    double fa[TT_MAX_FATTRS];
    tt_status_t st = tt_attrs_encode(TT_OP_CONV2D, &a, sizeof(a), -1, ia, &ni, fa);
    if (st) {
      p->error = st;
      return NULL;
    }
    tt_node_t *y = tt_part_make(p, in->op, ops, 2, ia, ni, NULL);
    if (y && !tt_shape_equal(&y->shape, &want))
      p->error = tt_status_make(TT_INTERNAL, "partitioner: conv2d on halo tiles: wrong shape");
    return p->error ? NULL : y;
  }
  tt_node_t *y = tt_part_make(p, in->op, xs, o->nops, ia, ni, in->fattrs);
  if (y && !tt_shape_equal(&y->shape, &want)) {
    p->error = tt_status_make(TT_INTERNAL,
                              "partitioner: %s on shards gave rank %d dim0 %lld, want dim0 %lld",
                              tt_op_name(in->op), (int)y->shape.rank,
                              (long long)(y->shape.rank ? y->shape.dims[0] : 0),
                              (long long)(want.rank ? want.dims[0] : 0));
    return NULL;
  }
  return y;
}

/* Indices idx relative to this partition's tile of a value of shape full
 * tiled by s along dim: *rel = idx - the tile's first row, *inr = whether
 * rel falls in the tile's real rows; *chunk is the tile length. */
static void tt_part_tile_rows(tt_part_t *p, const tt_sharding_t *s, const tt_shape_t *full,
                              int32_t dim, tt_node_t *idx, tt_node_t **rel, tt_node_t **inr,
                              int64_t *chunk) {
  int64_t c[TT_MAX_RANK];
  tt_part_coords(s, full->rank, p->me, c, NULL);
  *chunk = tt_part_chunk(full->dims[dim], s->tile_dims[dim]);
  int64_t off = c[dim] * *chunk, valid = full->dims[dim] - off;
  valid = valid < 0 ? 0 : valid > *chunk ? *chunk : valid;
  int32_t ir = idx->shape.rank;
  tt_node_t *sub[2] = {idx, tt_part_constant(p, (double)off, idx->dtype, ir)};
  int64_t code = TT_BIN_SUB;
  *rel = tt_part_make(p, TT_OP_BINARY, sub, 2, &code, 1, NULL);
  tt_node_t *ge[2] = {*rel, tt_part_constant(p, 0.0, idx->dtype, ir)};
  code = TT_BIN_GE;
  tt_node_t *lo = tt_part_make(p, TT_OP_BINARY, ge, 2, &code, 1, NULL);
  tt_node_t *lt[2] = {*rel, tt_part_constant(p, (double)valid, idx->dtype, ir)};
  code = TT_BIN_LT;
  tt_node_t *hi = tt_part_make(p, TT_OP_BINARY, lt, 2, &code, 1, NULL);
  tt_node_t *both[2] = {lo, hi};
  code = TT_BIN_LOGICAL_AND;
  *inr = tt_part_make(p, TT_OP_BINARY, both, 2, &code, 1, NULL);
}

static int tt_part_is_lookup(const tt_instr_t *in) {
  return in->op == TT_OP_INDEX_SELECT || in->op == TT_OP_GATHER;
}

/* A lookup (index_select / gather along dim) into this partition's rows
 * of a table tiled along dim (full-form m): the indices that fall in its
 * rows are looked up, the others give 0 (summed with the other devices'
 * pieces afterwards). */
static tt_node_t *tt_part_lookup(tt_part_op_t *o, tt_node_t **xs, const tt_sharding_t *m) {
  tt_part_t *p = o->p;
  const tt_instr_t *in = o->in;
  tt_node_t *idx = xs[1];
  if (!xs[0] || !idx) return NULL;
  int64_t dim = in->iattrs[0];
  tt_node_t *rel, *inr;
  int64_t chunk;
  tt_part_tile_rows(p, m, tt_part_xshape(o, 0), (int32_t)dim, idx, &rel, &inr, &chunk);
  int32_t ir = idx->shape.rank;
  tt_node_t *w[3] = {inr, rel, tt_part_constant(p, 0.0, idx->dtype, ir)};
  tt_node_t *safe = tt_part_make(p, TT_OP_WHERE, w, 3, NULL, 0, NULL);
  tt_node_t *ls[2] = {xs[0], safe};
  tt_node_t *y = tt_part_run_local(o, ls, 0);
  if (!y || !inr) return NULL;
  if (in->op == TT_OP_INDEX_SELECT) {
    /* the indices run along the result's dim */
    tt_shape_t along = {y->shape.rank, {0}};
    for (int32_t e = 0; e < along.rank; ++e) along.dims[e] = e == dim ? y->shape.dims[e] : 1;
    if (!tt_shape_equal(&inr->shape, &along))
      inr = tt_part_make(p, TT_OP_RESHAPE, &inr, 1, along.dims, along.rank, NULL);
  }
  tt_node_t *z[3] = {inr, y, tt_part_constant(p, 0.0, y->dtype, y->shape.rank)};
  return tt_part_make(p, TT_OP_WHERE, z, 3, NULL, 0, NULL);
}

static int tt_part_is_scatter(const tt_instr_t *in) {
  return in->op == TT_OP_SCATTER || in->op == TT_OP_SCATTER_REDUCE || in->op == TT_OP_INDEX_ADD;
}

/* A scatter (scatter, scatter_reduce, index_add along dim: base, indices,
 * updates) into this partition's tile of the base. Tiled along dim: the
 * indices are shifted by the tile's first row, those outside its rows sent
 * to one extra row appended to the tile and cut off afterwards (so
 * replace, add and every reduction leave the tile's rows as the whole
 * scatter would); untiled: the op on the shards as it is. */
static tt_node_t *tt_part_scatter_local(tt_part_op_t *o, tt_node_t **xs) {
  tt_part_t *p = o->p;
  const tt_instr_t *in = o->in;
  int32_t dim = (int32_t)in->iattrs[0];
  const tt_sharding_t *s = o->a[0];
  if (s->tile_dims[dim] == 1) return tt_part_run_local(o, xs, 0);
  if (!xs[0] || !xs[1] || !xs[2]) return NULL;
  const tt_shape_t *base = tt_part_xshape(o, 0);
  tt_node_t *idx = xs[1], *rel, *inr;
  int64_t chunk;
  tt_part_tile_rows(p, s, base, dim, idx, &rel, &inr, &chunk);
  int32_t ir = idx->shape.rank;
  tt_node_t *w[3] = {inr, rel, tt_part_constant(p, (double)chunk, idx->dtype, ir)};
  tt_node_t *ops[3] = {tt_part_pad_dim(p, xs[0], dim, 1),
                       tt_part_make(p, TT_OP_WHERE, w, 3, NULL, 0, NULL), xs[2]};
  tt_node_t *y = ops[0] && ops[1]
                     ? tt_part_make(p, in->op, ops, 3, in->iattrs, in->num_iattrs, in->fattrs)
                     : NULL;
  return tt_part_slice_dim(p, y, dim, 0, chunk);
}

/* Whether a scatter computes on R's tiles: every dim but dim that R tiles
 * must be one the indices and updates line up with (a scatter's indices
 * read whole along a dim the base tiles would reach past the tile). */
static int tt_part_scatter_ok(tt_part_t *p, int32_t i) {
  const tt_instr_t *in = &p->g->instrs[i];
  int32_t rows[3][TT_MAX_RANK];
  for (int32_t k = 0; k < 3; ++k)
    for (int32_t d = 0; d < TT_MAX_RANK; ++d) rows[k][d] = TT_SDIM_WHOLE;
  tt_sharding_map_t map = {3, rows, -1};
  tt_op_info(in->op)->sharding_rule->map(p->g, i, &map);
  tt_sharding_t *r = tt_part_full(p, p->g->sharding_prop[i].sharding, in->shape.rank);
  if (!r) return 1; /* the error is reported by the lowering */
  int ok = 1;
  for (int32_t d = 0; d < in->shape.rank; ++d) {
    if (d == in->iattrs[0] || r->tile_dims[d] == 1) continue;
    ok = ok && rows[2][d] == d && (in->op == TT_OP_INDEX_ADD || rows[1][d] == d);
  }
  free(r);
  return ok;
}

/* How the partial path computes an op: per operand the layout it is
 * resharded to (m) and its reduced dims, and the groups that combine. */
typedef struct tt_part_plan_s {
  tt_sharding_t *m[2];
  uint8_t red[2][TT_MAX_RANK];
  int32_t nred[2], rdim[2][TT_MAX_RANK];
  int32_t ids[27];
  int64_t tk;
} tt_part_plan_t;

static void tt_part_plan_free(tt_part_plan_t *pl) {
  free(pl->m[0]);
  free(pl->m[1]);
  pl->m[0] = pl->m[1] = NULL;
}

/* The partial plan for o->l0 and o->a; 0 when the operands' reduced dims
 * cannot stay tiled beside what L0 needs. */
static int tt_part_plan(tt_part_op_t *o, tt_part_plan_t *pl) {
  tt_part_t *p = o->p;
  const tt_instr_t *in = o->in;
  int lookup = tt_part_is_lookup(in);
  int32_t best = -1;
  int64_t best_tiles = 1;
  memset(pl, 0, sizeof(*pl));
  for (int32_t k = 0; k < o->nops; ++k) {
    const tt_sharding_t *s = o->vals[in->operands[k]].layout;
    int64_t t = 1;
    for (int32_t d = 0; d < tt_part_xshape(o, k)->rank; ++d) {
      pl->red[k][d] = o->rows[k][d] == TT_SDIM_REDUCED;
      if (pl->red[k][d]) {
        pl->rdim[k][pl->nred[k]++] = d;
        t *= s->tile_dims[d];
      }
    }
    if (t > best_tiles) {
      best = k;
      best_tiles = t;
    }
  }
  if (best < 0) return 0;
  for (int32_t k = 0; k < o->nops; ++k)
    if (pl->nred[k] != pl->nred[best] && !(lookup && k == 1)) return 0;
  /* The reduced dims' tiling of the best operand, moved onto each operand
   * and merged with what the result needs. */
  int32_t brank = tt_part_xshape(o, best)->rank;
  int32_t to[TT_MAX_RANK];
  for (int32_t d = 0; d < brank; ++d) to[d] = pl->red[best][d] ? d : -1;
  tt_sharding_t *q = tt_part_project(p, o->vals[in->operands[best]].layout, brank, to, brank);
  int ok = q != NULL;
  for (int32_t k = 0; k < o->nops && ok; ++k) {
    int32_t xr = tt_part_xshape(o, k)->rank;
    for (int32_t d = 0; d < brank; ++d) to[d] = -1;
    for (int32_t j = 0; j < pl->nred[k]; ++j) {
      if (tt_part_xshape(o, best)->dims[pl->rdim[best][j]] !=
          tt_part_xshape(o, k)->dims[pl->rdim[k][j]])
        ok = 0;
      to[pl->rdim[best][j]] = pl->rdim[k][j];
    }
    tt_sharding_t *qk = ok ? tt_part_project(p, q, brank, to, xr) : NULL;
    pl->m[k] = qk ? tt_sharding_merge(o->a[k], qk, xr) : NULL;
    free(qk);
    ok = ok && pl->m[k];
  }
  pl->tk = 1;
  for (int32_t j = 0; j < pl->nred[best]; ++j) pl->tk *= q ? q->tile_dims[pl->rdim[best][j]] : 1;
  ok = ok && tt_part_partial_groups(p, o->l0, in->shape.rank, pl->m[best], brank,
                                    pl->red[best], pl->tk, pl->ids);
  free(q);
  if (!ok) tt_part_plan_free(pl);
  return ok;
}

/* Combines partial values y (layout o->l0, groups of tk in ids): where R
 * tiles a dim L0 does not, tk ways, each group's devices holding its
 * tiles, one reduce_scatter along it gives those tiles; else one
 * all_reduce. *layout gets the result's layout (owned). */
static tt_node_t *tt_part_combine(tt_part_op_t *o, tt_node_t *y, int64_t op,
                                  const tt_part_plan_t *pl, tt_sharding_t **layout) {
  tt_part_t *p = o->p;
  int32_t yr = o->in->shape.rank, n = p->n, tk = (int32_t)pl->tk;
  int64_t cr[27][TT_MAX_RANK], cl[27][TT_MAX_RANK];
  for (int32_t dev = 0; dev < n; ++dev) {
    tt_part_coords(o->r, yr, dev, cr[dev], NULL);
    tt_part_coords(o->l0, yr, dev, cl[dev], NULL);
  }
  for (int32_t d = 0; d < yr && y; ++d) {
    if (o->l0->tile_dims[d] != 1 || o->r->tile_dims[d] != tk || tk < 2) continue;
    int32_t ids[27];
    int ok = 1;
    for (int32_t g = 0; g < n && ok; g += tk) {
      for (int32_t q = 0; q < tk; ++q) ids[g + q] = -1;
      for (int32_t q = 0; q < tk; ++q) {
        int32_t dev = pl->ids[g + q];
        int64_t c = cr[dev][d];
        if (ids[g + c] >= 0) ok = 0;
        else ids[g + c] = dev;
      }
    }
    if (!ok) continue;
    int64_t dim = o->in->shape.dims[d], chunk = tt_part_chunk(dim, tk);
    y = tt_part_pad_dim(p, y, d, (int64_t)tk * chunk - dim);
    y = tt_part_reduce_scatter(p, y, op, d, ids, tk);
    int64_t tiles[TT_MAX_RANK + 1];
    for (int32_t e = 0; e <= yr; ++e) tiles[e] = o->l0->tile_dims[e];
    tiles[d] = tk;
    tiles[yr] /= tk;
    for (int32_t dev = 0; dev < n; ++dev) cl[dev][d] = cr[dev][d];
    *layout = tt_part_from_coords(p, yr, tiles, (const int64_t(*)[TT_MAX_RANK])cl);
    return *layout ? y : NULL;
  }
  *layout = tt_part_copy(p, o->l0);
  return tt_part_all_reduce(p, y, op, pl->ids, tk);
}

/* Bytes of a whole value of this shape and dtype. */
static int64_t tt_part_value_bytes(const tt_shape_t *shape, tt_dtype_t dtype) {
  return tt_shape_numel(shape) * (int64_t)tt_dtype_size(dtype);
}

/* The bytes resharding o's operands to layouts want[k] moves, counted
 * simply: an operand whose layout changes moves its whole value once. */
static int64_t tt_part_moved_bytes(const tt_part_op_t *o, tt_sharding_t *const *want) {
  int64_t bytes = 0;
  for (int32_t k = 0; k < o->nops; ++k) {
    int32_t x = o->in->operands[k];
    if (!tt_sharding_equal(o->vals[x].layout, want[k]))
      bytes += tt_part_value_bytes(&o->p->g->instrs[x].shape, o->p->g->instrs[x].dtype);
  }
  return bytes;
}

/* The partial path; 0 (nothing made) when it does not apply. When the
 * reduced dims cannot stay tiled beside L0 (R wants the result tiled over
 * the devices that hold the pieces: sequence parallelism, sharded
 * gradients), L0 drops one of its tiled dims at a time, the first that
 * lets them: the combine then scatters onto it. */
static int tt_part_try_partial(tt_part_op_t *o, tt_part_val_t *out) {
  tt_part_t *p = o->p;
  const tt_instr_t *in = o->in;
  if (o->partial_reduce < 0 || (in->op != TT_OP_REDUCE && in->op != TT_OP_DOT &&
                                 in->op != TT_OP_CONV2D && !tt_part_is_lookup(in)))
    return 0;
  double identity = 0.0;
  int64_t op = in->op == TT_OP_REDUCE ? in->iattrs[0] : TT_RED_SUM;
  if (!tt_part_identity(op, p->g->instrs[in->operands[0]].dtype, &identity)) return 0;
  int32_t yr = in->shape.rank;
  tt_part_plan_t pl;
  int ok = tt_part_plan(o, &pl);
  /* What the plain path (operands resharded to o->a, no combine) moves,
   * for the cost rule below; only needed when L0 must drop dims. */
  int64_t plain_bytes = ok ? 0 : tt_part_moved_bytes(o, o->a);
  if (!ok && !tt_sharding_equal(o->l0, o->r))
    plain_bytes += tt_part_value_bytes(&in->shape, in->dtype);
  int dropped = 0;
  tt_sharding_t *first_l0 = ok ? NULL : tt_part_copy(p, o->l0);
  if (!ok && !first_l0) return 0;
  for (int32_t d = 0; d < yr && !ok && !p->error; ++d) {
    if (o->l0->tile_dims[d] == 1) continue;
    int32_t to[TT_MAX_RANK];
    for (int32_t e = 0; e < yr; ++e) to[e] = e == d ? -1 : e;
    tt_sharding_t *l0 = tt_part_project(p, o->l0, yr, to, yr), *old = o->l0;
    if (!l0) break;
    o->l0 = l0;
    tt_part_operand_layouts(o);
    ok = !p->error && tt_part_plan(o, &pl);
    if (ok) {
      free(old);
      dropped = 1;
    } else {
      o->l0 = old;
      free(l0);
      tt_part_operand_layouts(o);
    }
  }
  if (!ok) {
    free(first_l0);
    return 0;
  }
  /* Cost rule (docs/spmd.md "Partitioner"): when the operands' reduced
   * dims and L0 tile over the same devices in conflicting ways (FSDP's
   * weight sharded on its input dim beside a batch-sharded activation),
   * keeping the reduced tiling moves the other operands and combines the
   * whole result, while the plain path gathers the conflicting operand.
   * The one that moves fewer bytes wins; a tie keeps the partial path. */
  if (dropped && in->op == TT_OP_DOT && !p->error) {
    int64_t partial_bytes =
        tt_part_moved_bytes(o, pl.m) + tt_part_value_bytes(&in->shape, in->dtype);
    if (plain_bytes < partial_bytes) {
      tt_part_plan_free(&pl);
      /* Back to the first L0 and the operand layouts the plain path uses. */
      free(o->l0);
      o->l0 = first_l0;
      tt_part_operand_layouts(o);
      return 0;
    }
  }
  free(first_l0);
  tt_node_t *xs[2];
  for (int32_t k = 0; k < o->nops; ++k) {
    const tt_part_val_t *v = &o->vals[in->operands[k]];
    xs[k] = tt_part_reshard(p, v->node, tt_part_xshape(o, k), v->layout, pl.m[k]);
    if (tt_part_is_lookup(in)) continue; /* rows past the table are never looked up */
    uint64_t mask_dims = 0;
    for (int32_t j = 0; j < pl.nred[k]; ++j) mask_dims |= 1ull << pl.rdim[k][j];
    xs[k] = tt_part_mask(p, xs[k], tt_part_xshape(o, k), pl.m[k], mask_dims, identity);
  }
  int64_t local_op = op == TT_RED_MEAN ? TT_RED_SUM : op;
  o->x0 = pl.m[0];
  tt_node_t *y = tt_part_is_lookup(in) ? tt_part_lookup(o, xs, pl.m[0])
                                       : tt_part_run_local(o, xs, local_op);
  tt_sharding_t *layout = NULL;
  y = tt_part_combine(o, y, local_op, &pl, &layout);
  if (y && op == TT_RED_MEAN) {
    int64_t count = 1;
    for (int32_t j = 0; j < pl.nred[0]; ++j) count *= tt_part_xshape(o, 0)->dims[pl.rdim[0][j]];
    tt_node_t *mul[2] = {y, tt_part_constant(p, 1.0 / (double)count, y->dtype, y->shape.rank)};
    int64_t code = TT_BIN_MUL;
    y = tt_part_make(p, TT_OP_BINARY, mul, 2, &code, 1, NULL);
  }
  if (layout) out->node = tt_part_reshard(p, y, &in->shape, layout, o->r);
  ++p->stats->local_ops;
  free(layout);
  tt_part_plan_free(&pl);
  return 1;
}

/* A conv2d's spatial dims stay tiled as R tiles them only where a halo
 * exchange computes them; the others are read whole. */
static void tt_part_conv_spatial(tt_part_t *p, const tt_instr_t *in, const tt_sharding_t *r,
                                 int32_t (*rows)[TT_MAX_RANK]) {
  tt_conv2d_attrs_t a;
  TT_ATTRS(in, &a);
  const tt_shape_t *x = &p->g->instrs[in->operands[0]].shape;
  const tt_shape_t *w = &p->g->instrs[in->operands[1]].shape;
  for (int32_t d = 2; d < 4; ++d) {
    if (rows[0][d] < 0 || r->tile_dims[d] == 1) continue;
    int64_t lo = a.padding[d - 2], hi = a.dilation[d - 2] * (w->dims[d] - 1) - lo;
    if (!tt_part_halo_fits(p, x->dims[d], r->tile_dims[d], a.stride[d - 2], lo, hi))
      rows[0][d] = TT_SDIM_WHOLE;
  }
}

/* Lowers a mapped op (or, with fallback, any op: operands replicated). */
static void tt_part_lower_op(tt_part_t *p, int32_t i, tt_part_val_t *vals, int fallback) {
  const tt_instr_t *in = &p->g->instrs[i];
  int32_t nops = in->num_operands, yr = in->shape.rank;
  tt_part_op_t o = {p, in, vals, nops, NULL, NULL, -1, NULL, NULL, NULL, NULL};
  tt_part_val_t *out = &vals[i];
  o.rows = malloc(sizeof(*o.rows) * ((size_t)nops + 1));
  o.inv = malloc(sizeof(*o.inv) * ((size_t)nops + 1));
  o.a = calloc((size_t)nops + 1, sizeof(*o.a));
  tt_node_t **xs = calloc((size_t)nops + 1, sizeof(*xs));
  if (!o.rows || !o.inv || !o.a || !xs) {
    p->error = tt_status_make(TT_RESOURCE_EXHAUSTED, "out of memory (partitioner)");
    goto done;
  }
  o.r = tt_part_full(p, p->g->sharding_prop[i].sharding, yr);
  out->layout = tt_part_full(p, p->g->sharding_prop[i].sharding, yr);
  if (!o.r || !out->layout) goto done;
  if (fallback) {
    o.l0 = tt_part_replicated(p, yr);
    for (int32_t k = 0; k < nops; ++k) o.a[k] = tt_part_replicated(p, tt_part_xshape(&o, k)->rank);
    ++p->stats->fallbacks;
  } else {
    for (int32_t k = 0; k < nops; ++k)
      for (int32_t d = 0; d < TT_MAX_RANK; ++d) o.rows[k][d] = TT_SDIM_WHOLE;
    tt_sharding_map_t map = {nops, o.rows, -1};
    tt_op_info(in->op)->sharding_rule->map(p->g, i, &map);
    o.partial_reduce = map.partial_reduce;
    if (in->op == TT_OP_CONV2D) tt_part_conv_spatial(p, in, o.r, o.rows);
    /* L0: R's tiles on the result dims an operand dim maps to. */
    int32_t to[TT_MAX_RANK];
    for (int32_t r = 0; r < yr; ++r) to[r] = -1;
    for (int32_t k = 0; k < nops; ++k) {
      const tt_shape_t *x = tt_part_xshape(&o, k);
      for (int32_t d = 0; d < x->rank; ++d) {
        int32_t e = o.rows[k][d];
        if (e < 0) continue;
        int32_t r = e & TT_SDIM_DIM_MASK;
        int64_t t = o.r->tile_dims[r];
        if ((e & TT_SDIM_EXACT) && (x->dims[d] % t || in->shape.dims[r] % t)) continue;
        to[r] = r;
      }
    }
    o.l0 = tt_part_project(p, o.r, yr, to, yr);
    for (int32_t k = 0; k < nops && o.l0; ++k) {
      const tt_shape_t *x = tt_part_xshape(&o, k);
      int32_t *inv = o.inv[k];
      for (int32_t r = 0; r < yr; ++r) inv[r] = -1;
      for (int32_t d = 0; d < x->rank; ++d) {
        int32_t e = o.rows[k][d];
        if (e < 0) continue;
        int32_t r = e & TT_SDIM_DIM_MASK;
        if (to[r] >= 0 && inv[r] < 0) inv[r] = d;
      }
    }
    if (o.l0) tt_part_operand_layouts(&o);
    if (p->error) goto done;
    if (tt_part_try_partial(&o, out)) goto done;
    ++p->stats->local_ops;
  }
  if (p->error) goto done;
  for (int32_t k = 0; k < nops; ++k) {
    const tt_part_val_t *v = &vals[in->operands[k]];
    xs[k] = tt_part_reshard(p, v->node, tt_part_xshape(&o, k), v->layout, o.a[k]);
  }
  if (fallback) {
    tt_node_t *y = tt_part_make(p, in->op, xs, nops, in->iattrs, in->num_iattrs, in->fattrs);
    out->node = tt_part_reshard(p, y, &in->shape, o.l0, o.r);
  } else {
    o.x0 = o.a[0];
    tt_node_t *y = tt_part_is_scatter(in) ? tt_part_scatter_local(&o, xs)
                                          : tt_part_run_local(&o, xs, nops ? in->iattrs[0] : 0);
    out->node = tt_part_reshard(p, y, &in->shape, o.l0, o.r);
  }
done:
  for (int32_t k = 0; o.a && k < nops; ++k) free(o.a[k]);
  free(o.a);
  free(o.rows);
  free(o.inv);
  free(o.r);
  free(o.l0);
  free(xs);
}

/* An rng: where its result R tiles, each partition draws its own tile at
 * its offsets in the whole tensor (the rng's tiled form, op_attrs.h), bit
 * for bit the unsharded tensor's, with no collective; replicated, each
 * draws all of it. 0 (nothing made) for an rng already tiled or too high a
 * rank for the tiled form's attributes. */
static int tt_part_try_rng(tt_part_t *p, int32_t i, tt_part_val_t *vals) {
  const tt_instr_t *in = &p->g->instrs[i];
  int32_t rank = in->shape.rank;
  tt_rng_attrs_t a;
  TT_ATTRS(in, &a);
  if (in->fattrs[TT_RNG_TILED_FATTR] != 0.0 || 3 * rank > TT_MAX_IATTRS - 2) return 0;
  tt_sharding_t *r = tt_part_full(p, p->g->sharding_prop[i].sharding, rank);
  if (!r) return 0;
  int tiled = 0;
  tt_node_t *seed = vals[in->operands[0]].node;
  for (int32_t d = 0; d < rank; ++d) tiled |= r->tile_dims[d] > 1;
  vals[i].layout = r;
  ++p->stats->local_ops;
  if (!tiled) { /* replicated: every partition draws the whole tensor */
    vals[i].node = tt_part_make(p, TT_OP_RNG, &seed, 1, in->iattrs, in->num_iattrs, in->fattrs);
    return 1;
  }
  int64_t c[TT_MAX_RANK];
  tt_part_coords(r, rank, p->me, c, NULL);
  a.dims.n = 3 * rank;
  for (int32_t d = 0; d < rank; ++d) {
    int64_t chunk = tt_part_chunk(in->shape.dims[d], r->tile_dims[d]);
    a.dims.v[d] = chunk;
    a.dims.v[rank + d] = in->shape.dims[d];
    a.dims.v[2 * rank + d] = c[d] * chunk;
  }
  int64_t ia[TT_MAX_IATTRS];
  double fa[TT_MAX_FATTRS] = {0};
  int32_t ni = 0;
  tt_status_t st = tt_attrs_encode(TT_OP_RNG, &a, sizeof(a), -1, ia, &ni, fa);
  if (st) {
    p->error = st;
    return 1;
  }
  fa[TT_RNG_TILED_FATTR] = 1.0;
  vals[i].node = tt_part_make(p, TT_OP_RNG, &seed, 1, ia, ni, fa);
  return 1;
}

/* An optimization barrier's node: every operand stays in its own layout
 * (a barrier over sharded gradients must not gather them), the barrier is
 * made over the shards, and node `index` gives its operand's tile, which
 * then moves to the propagated layout R (free where they agree, as the
 * identity rule makes them unless a user asked for more). */
static void tt_part_opt_barrier(tt_part_t *p, int32_t i, tt_part_val_t *vals) {
  const tt_instr_t *in = &p->g->instrs[i];
  int32_t nops = in->num_operands;
  tt_opt_barrier_attrs_t a;
  TT_ATTRS(in, &a);
  tt_node_t **xs = malloc(sizeof(*xs) * ((size_t)nops + 1));
  if (!xs) {
    p->error = tt_status_make(TT_RESOURCE_EXHAUSTED, "out of memory (partitioner)");
    return;
  }
  for (int32_t k = 0; k < nops; ++k) xs[k] = vals[in->operands[k]].node;
  tt_node_t *y = tt_part_make(p, TT_OP_OPT_BARRIER, xs, nops, in->iattrs, in->num_iattrs,
                              in->fattrs);
  free(xs);
  vals[i].layout = tt_part_full(p, p->g->sharding_prop[i].sharding, in->shape.rank);
  if (!y || !vals[i].layout) return;
  ++p->stats->local_ops;
  vals[i].node = tt_part_reshard(p, y, &in->shape, vals[in->operands[a.index]].layout,
                                 vals[i].layout);
}

static void tt_part_keep(tt_part_t *p, tt_node_t *n) {
  if (!n) {
    if (!p->error) p->error = tt_status_make(TT_RESOURCE_EXHAUSTED, "out of memory (partitioner)");
    return;
  }
  if (p->pool_len == p->pool_cap) {
    int32_t cap = p->pool_cap ? 2 * p->pool_cap : 64;
    tt_node_t **pool = realloc(p->pool, sizeof(*pool) * (size_t)cap);
    if (!pool) {
      tt_node_release(n);
      p->error = tt_status_make(TT_RESOURCE_EXHAUSTED, "out of memory (partitioner)");
      return;
    }
    p->pool = pool;
    p->pool_cap = cap;
  }
  p->pool[p->pool_len++] = n;
}

static void tt_part_lower_input(tt_part_t *p, int32_t i, tt_part_val_t *v,
                                tt_buffer_t *placeholder) {
  const tt_instr_t *in = &p->g->instrs[i];
  v->layout = tt_part_full(p, p->g->sharding_prop[i].sharding, in->shape.rank);
  if (!v->layout) return;
  if (in->op == TT_OP_SCALAR) {
    v->node = tt_node_create_scalar(in->dtype, 0.0, 0, 0);
  } else {
    tt_shape_t s = tt_part_local_shape(v->layout, &in->shape);
    v->node = tt_node_create_param(placeholder, in->dtype, &s, 0);
  }
  tt_part_keep(p, v->node);
}

tt_status_t tt_partition_program(const tt_graph_t *g, const tt_partition_mesh_t *mesh,
                                 int32_t partition, tt_buffer_t *placeholder,
                                 tt_partition_t **out) {
  *out = NULL;
  if (!g->sharding_prop)
    return tt_status_make(TT_INVALID_ARGUMENT,
                          "partitioner: the graph has no sharding propagation record (run "
                          "tt_pass_propagate_sharding first)");
  if (mesh->num_partitions > 27)
    return tt_status_make(TT_UNIMPLEMENTED,
                          "partitioner: %d partitions (a collective names at most 27)",
                          (int)mesh->num_partitions);
  if (mesh->num_partitions < 1 || partition < 0 || partition >= mesh->num_partitions)
    return tt_status_make(TT_INVALID_ARGUMENT, "partitioner: partition %d of %d",
                          (int)partition, (int)mesh->num_partitions);
  tt_partition_t *res = calloc(1, sizeof(*res));
  tt_part_val_t *vals = calloc((size_t)g->num_instrs + 1, sizeof(*vals));
  tt_node_t **roots = calloc((size_t)g->num_outputs + 1, sizeof(*roots));
  if (!res || !vals || !roots) {
    free(res);
    free(vals);
    free(roots);
    return tt_status_make(TT_RESOURCE_EXHAUSTED, "out of memory (partitioner)");
  }
  tt_part_t p = {0};
  p.g = g;
  p.n = mesh->num_partitions;
  p.me = partition;
  p.stats = &res->stats;
  res->partition = partition;
  for (int32_t k = 0; k < p.n; ++k) p.replica[k] = mesh->replica_ids ? mesh->replica_ids[k] : k;
  for (int32_t i = 0; i < g->num_instrs && !p.error; ++i) {
    const tt_instr_t *in = &g->instrs[i];
    if (in->op == TT_OP_PARAM || in->op == TT_OP_SCALAR) {
      tt_part_lower_input(&p, i, &vals[i], placeholder);
    } else if (in->op == TT_OP_SPMD_FULL_TO_SHARD) {
      tt_part_full_to_shard(&p, i, vals);
    } else if (in->op == TT_OP_SPMD_SHARD_TO_FULL) {
      tt_part_shard_to_full(&p, i, vals);
    } else if (in->op != TT_OP_FUSED && tt_part_reads_manual(in, vals)) {
      tt_part_manual_op(&p, i, vals);
    } else if (in->op == TT_OP_FUSED || tt_op_is_collective(in->op)) {
      p.error = tt_status_make(TT_UNIMPLEMENTED,
                               "partitioner: instruction %d (%s) is not partitioned (run the "
                               "partitioner before fusion; a collective is partitioned only "
                               "inside a manual region)",
                               (int)i, tt_op_name(in->op));
    } else if (in->op == TT_OP_OPT_BARRIER) {
      tt_part_opt_barrier(&p, i, vals);
    } else if (in->op != TT_OP_RNG || !tt_part_try_rng(&p, i, vals)) {
      int mapped = tt_part_is_mapped(in) && (!tt_part_is_scatter(in) || tt_part_scatter_ok(&p, i));
      tt_part_lower_op(&p, i, vals, !mapped);
    }
  }
  tt_node_t **inputs = NULL;
  for (int32_t j = 0; j < g->num_outputs && !p.error; ++j)
    if (vals[g->output_instr[j]].manual)
      p.error = tt_status_make(TT_UNIMPLEMENTED,
                               "partitioner: output %d is a value inside a manual region (each "
                               "partition holds its own); leave the region first "
                               "(disable_manual_sharding / _spmd_shard_to_full_shape)",
                               (int)j);
  if (!p.error) {
    for (int32_t j = 0; j < g->num_outputs; ++j) roots[j] = vals[g->output_instr[j]].node;
    tt_status_t st = tt_graph_build(roots, g->num_outputs, &res->graph, &inputs);
    if (st) p.error = st;
  }
  if (!p.error) {
    res->num_inputs = g->num_inputs;
    res->input_position = malloc(sizeof(int32_t) * ((size_t)g->num_inputs + 1));
    if (!res->input_position) {
      p.error = tt_status_make(TT_RESOURCE_EXHAUSTED, "out of memory (partitioner)");
    } else {
      for (int32_t k = 0; k < g->num_inputs; ++k) {
        res->input_position[k] = -1;
        for (int32_t j = 0; j < res->graph->num_inputs; ++j)
          if (inputs[j] == vals[g->input_instr[k]].node) res->input_position[k] = j;
      }
    }
  }
  free(inputs);
  for (int32_t i = 0; i < g->num_instrs; ++i) free(vals[i].layout);
  free(vals);
  free(roots);
  for (int32_t i = 0; i < p.pool_len; ++i) tt_node_release(p.pool[i]);
  free(p.pool);
  if (p.error) {
    tt_partition_destroy(res);
    return p.error;
  }
  *out = res;
  return NULL;
}

void tt_partition_destroy(tt_partition_t *p) {
  if (!p) return;
  if (p->graph) tt_graph_destroy(p->graph);
  free(p->input_position);
  free(p);
}
