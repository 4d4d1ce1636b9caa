/* The partitioner's building blocks (src/passes/partition_internal.h):
 * nodes kept in a pool, constants, reshards between layouts (all_to_all,
 * collective_permute, all_gather along the dims still tiled differently,
 * then local slices), masks over padding, and the all_reduce and
 * reduce_scatter that combine partial values. */
#include <stdlib.h>
#include <string.h>

#include "passes/partition_internal.h"
#include "torchtpu/op_table.h"

tt_node_t *tt_part_make(tt_part_t *p, tt_op_t op, tt_node_t *const *operands, int32_t nops,
                        const int64_t *iattrs, int32_t ni, const double *fattrs) {
  if (p->error) return NULL;
  for (int32_t k = 0; k < nops; ++k)
    if (!operands[k]) return NULL;
  if (p->pool_len == p->pool_cap) {
    int32_t cap = p->pool_cap ? 2 * p->pool_cap : 64;
    tt_node_t **pool = realloc(p->pool, sizeof(*pool) * (size_t)cap);
    if (!pool) {
      p->error = tt_status_make(TT_RESOURCE_EXHAUSTED, "out of memory (partitioner)");
      return NULL;
    }
    p->pool = pool;
    p->pool_cap = cap;
  }
  tt_node_t *n = NULL;
  tt_status_t st = tt_node_create(op, 0, operands, nops, iattrs, ni, fattrs,
                                  fattrs ? TT_MAX_FATTRS : 0, &n);
  if (st) {
    p->error = tt_status_make(TT_INTERNAL, "partitioner: making %s on partition %d: %s",
                              tt_op_name(op), (int)p->me, tt_status_message(st));
    tt_status_free(st);
    return NULL;
  }
  p->pool[p->pool_len++] = n;
  return n;
}

static tt_node_t *tt_part_reshape(tt_part_t *p, tt_node_t *x, const tt_shape_t *to) {
  if (!x || tt_shape_equal(&x->shape, to)) return x;
  return tt_part_make(p, TT_OP_RESHAPE, &x, 1, to->dims, to->rank, NULL);
}

tt_node_t *tt_part_constant(tt_part_t *p, double v, tt_dtype_t dtype, int32_t rank) {
  /* An iota of one value (step 0) is the IR's constant. */
  int64_t ia[2] = {TT_F32, 1};
  double fa[TT_MAX_FATTRS] = {v, 0.0};
  if (dtype == TT_F64 || dtype == TT_I64) ia[0] = dtype;
  tt_node_t *c = tt_part_make(p, TT_OP_IOTA, NULL, 0, ia, 2, fa);
  if (c && c->dtype != dtype) {
    int64_t to = dtype;
    c = tt_part_make(p, TT_OP_CONVERT, &c, 1, &to, 1, NULL);
  }
  tt_shape_t ones = {rank, {0}};
  for (int32_t d = 0; d < rank; ++d) ones.dims[d] = 1;
  return tt_part_reshape(p, c, &ones);
}

tt_node_t *tt_part_slice_dim(tt_part_t *p, tt_node_t *x, int32_t d, int64_t start,
                             int64_t len) {
  if (!x) return NULL;
  if (start == 0 && len == x->shape.dims[d]) return x;
  tt_slice_attrs_t a;
  memset(&a, 0, sizeof(a));
  a.start.n = a.limit.n = a.step.n = x->shape.rank;
  for (int32_t e = 0; e < x->shape.rank; ++e) {
    a.start.v[e] = e == d ? start : 0;
    a.limit.v[e] = e == d ? start + len : x->shape.dims[e];
    a.step.v[e] = 1;
  }
  int64_t ia[TT_MAX_IATTRS];
  double fa[TT_MAX_FATTRS];
  int32_t ni = 0;
  tt_status_t st = tt_attrs_encode(TT_OP_SLICE, &a, sizeof(a), -1, ia, &ni, fa);
  if (st) {
    p->error = st;
    return NULL;
  }
  return tt_part_make(p, TT_OP_SLICE, &x, 1, ia, ni, NULL);
}

tt_node_t *tt_part_pad_dim(tt_part_t *p, tt_node_t *x, int32_t d, int64_t hi) {
  if (!x || hi == 0) return x;
  tt_pad_attrs_t a;
  memset(&a, 0, sizeof(a));
  a.lo.n = a.hi.n = x->shape.rank;
  a.hi.v[d] = hi;
  int64_t ia[TT_MAX_IATTRS];
  double fa[TT_MAX_FATTRS];
  int32_t ni = 0;
  tt_status_t st = tt_attrs_encode(TT_OP_PAD, &a, sizeof(a), -1, ia, &ni, fa);
  if (st) {
    p->error = st;
    return NULL;
  }
  return tt_part_make(p, TT_OP_PAD, &x, 1, ia, ni, fa);
}

/* Gathers dim d of x (tiled by full-form s) to the whole dim: the groups
 * are the devices that differ only in their tile along d, in tile order
 * (the gathered blocks' order). */
static tt_node_t *tt_part_gather_dim(tt_part_t *p, tt_node_t *x, const tt_shape_t *global,
                                     const tt_sharding_t *s, int32_t d) {
  if (!x) return NULL;
  int32_t rank = global->rank;
  int64_t t = s->tile_dims[d], stride = 1;
  for (int32_t e = d + 1; e <= rank; ++e) stride *= s->tile_dims[e];
  int64_t ia[TT_MAX_IATTRS] = {d, t, 0, 0, t};
  int32_t ni = TT_COLLECTIVE_HEADER;
  for (int64_t pos = 0; pos < s->num_devices; ++pos) {
    if ((pos / stride) % t) continue;
    for (int64_t c = 0; c < t; ++c) ia[ni++] = p->replica[s->devices[pos + c * stride]];
  }
  tt_node_t *y = tt_part_make(p, TT_OP_ALL_GATHER, &x, 1, ia, ni, NULL);
  if (!y) return NULL;
  ++p->stats->all_gathers;
  return tt_part_slice_dim(p, y, d, 0, global->dims[d]);
}

/* The tile of this partition along dim d under full-form s, from x whole
 * along d. */
static tt_node_t *tt_part_take_tile(tt_part_t *p, tt_node_t *x, const tt_shape_t *global,
                                    const tt_sharding_t *s, int32_t d) {
  if (!x) return NULL;
  int64_t c[TT_MAX_RANK];
  tt_part_coords(s, global->rank, p->me, c, NULL);
  int64_t t = s->tile_dims[d], chunk = tt_part_chunk(global->dims[d], t);
  x = tt_part_pad_dim(p, x, d, t * chunk - global->dims[d]);
  return tt_part_slice_dim(p, x, d, c[d] * chunk, chunk);
}

tt_node_t *tt_part_permute(tt_part_t *p, tt_node_t *x, const int32_t *pairs, int32_t n_pairs) {
  if (!x || TT_COLLECTIVE_HEADER + 2 * n_pairs > TT_MAX_IATTRS) return NULL;
  int64_t ia[TT_MAX_IATTRS] = {0, 0, 0, 0, 2};
  for (int32_t k = 0; k < 2 * n_pairs; ++k) ia[TT_COLLECTIVE_HEADER + k] = p->replica[pairs[k]];
  tt_node_t *y = tt_part_make(p, TT_OP_COLLECTIVE_PERMUTE, &x, 1, ia,
                              TT_COLLECTIVE_HEADER + 2 * n_pairs, NULL);
  if (y) ++p->stats->collective_permutes;
  return y;
}

tt_node_t *tt_part_reduce_scatter(tt_part_t *p, tt_node_t *x, int64_t reduce, int32_t d,
                                  const int32_t *ids, int32_t group_size) {
  if (!x) return NULL;
  int64_t ia[TT_MAX_IATTRS] = {reduce, d, group_size, 0, group_size};
  for (int32_t k = 0; k < p->n; ++k) ia[TT_COLLECTIVE_HEADER + k] = p->replica[ids[k]];
  tt_node_t *y =
      tt_part_make(p, TT_OP_REDUCE_SCATTER, &x, 1, ia, TT_COLLECTIVE_HEADER + p->n, NULL);
  if (y) ++p->stats->reduce_scatters;
  return y;
}

/* One collective_permute from full-form `from` to `to` when they tile
 * every dim the same number of ways (devices holding other tiles): each
 * device receives its tile from a device holding it under `from`, itself
 * where it can. NULL (nothing made) when the counts differ or the pairs do
 * not fit. */
static tt_node_t *tt_part_permute_layout(tt_part_t *p, tt_node_t *x, int32_t rank,
                                         const tt_sharding_t *from, const tt_sharding_t *to) {
  if (!x) return NULL;
  for (int32_t d = 0; d < rank; ++d)
    if (from->tile_dims[d] != to->tile_dims[d]) return NULL;
  int64_t cf[27][TT_MAX_RANK], ct[27][TT_MAX_RANK];
  int32_t src[27], taken[27] = {0};
  for (int32_t dev = 0; dev < p->n; ++dev) {
    tt_part_coords(from, rank, dev, cf[dev], NULL);
    tt_part_coords(to, rank, dev, ct[dev], NULL);
    src[dev] = -1;
  }
  /* Devices that keep their tile first, then the others in device order. */
  for (int pass = 0; pass < 2; ++pass)
    for (int32_t dev = 0; dev < p->n; ++dev) {
      if (src[dev] >= 0) continue;
      for (int32_t s = 0; s < p->n; ++s) {
        if (taken[s] || (pass == 0 && s != dev)) continue;
        if (memcmp(cf[s], ct[dev], sizeof(int64_t) * (size_t)rank)) continue;
        src[dev] = s;
        taken[s] = 1;
        break;
      }
    }
  int32_t pairs[54];
  for (int32_t dev = 0; dev < p->n; ++dev) {
    if (src[dev] < 0) return NULL; /* not a layout of the same tiles */
    pairs[2 * dev] = src[dev];
    pairs[2 * dev + 1] = dev;
  }
  return tt_part_permute(p, x, pairs, p->n);
}

/* Moves full-form *cur's tiling of dim a (t ways) onto dim b with one
 * all_to_all over the devices that differ only along a: each splits its
 * shard along b into t pieces and receives the group's pieces of its own
 * position, concatenated along a. *cur becomes the new layout (dim b
 * tiled by the devices' former tile index along a). */
static tt_node_t *tt_part_all_to_all(tt_part_t *p, tt_node_t *x, const tt_shape_t *global,
                                     tt_sharding_t **cur, int32_t a, int32_t b) {
  const tt_sharding_t *s = *cur;
  int32_t rank = global->rank;
  int64_t t = s->tile_dims[a], stride = 1;
  for (int32_t e = a + 1; e <= rank; ++e) stride *= s->tile_dims[e];
  x = tt_part_pad_dim(p, x, b, t * tt_part_chunk(global->dims[b], t) - global->dims[b]);
  int64_t ia[TT_MAX_IATTRS] = {b, a, t, 0, t};
  int32_t ni = TT_COLLECTIVE_HEADER;
  for (int64_t pos = 0; pos < s->num_devices; ++pos) {
    if ((pos / stride) % t) continue;
    for (int64_t c = 0; c < t; ++c) ia[ni++] = p->replica[s->devices[pos + c * stride]];
  }
  tt_node_t *y = x ? tt_part_make(p, TT_OP_ALL_TO_ALL, &x, 1, ia, ni, NULL) : NULL;
  if (!y) return NULL;
  ++p->stats->all_to_alls;
  y = tt_part_slice_dim(p, y, a, 0, global->dims[a]);
  int64_t tiles[TT_MAX_RANK + 1], coord[27][TT_MAX_RANK];
  for (int32_t d = 0; d <= rank; ++d) tiles[d] = s->tile_dims[d];
  tiles[a] = 1;
  tiles[b] = t;
  for (int32_t dev = 0; dev < p->n; ++dev) {
    tt_part_coords(s, rank, dev, coord[dev], NULL);
    coord[dev][b] = coord[dev][a];
    coord[dev][a] = 0;
  }
  tt_sharding_t *next = tt_part_from_coords(p, rank, tiles, coord);
  if (!next) return NULL;
  free(*cur);
  *cur = next;
  return y;
}

tt_node_t *tt_part_reshard(tt_part_t *p, tt_node_t *x, const tt_shape_t *global,
                           const tt_sharding_t *from, const tt_sharding_t *to) {
  int32_t rank = global->rank;
  if (!x || tt_sharding_same_tiles(from, to, rank)) return x;
  tt_sharding_t *cur = tt_part_copy(p, from);
  if (!cur) return NULL;
  /* A dim both tile, a different number of ways, is gathered whatever
   * else happens: first, so that it can take another dim's tiling. */
  for (int32_t d = 0; d < rank && x; ++d) {
    if (cur->tile_dims[d] == 1 || to->tile_dims[d] == 1 ||
        cur->tile_dims[d] == to->tile_dims[d])
      continue;
    x = tt_part_gather_dim(p, x, global, cur, d);
    int32_t keep[TT_MAX_RANK];
    for (int32_t e = 0; e < rank; ++e) keep[e] = e == d ? -1 : e;
    tt_sharding_t *next = tt_sharding_project(cur, rank, keep, rank, NULL, NULL);
    free(cur);
    cur = next;
    if (!cur) {
      p->error = tt_status_make(TT_RESOURCE_EXHAUSTED, "out of memory (partitioner)");
      return NULL;
    }
  }
  for (int32_t a = 0; a < rank && x; ++a) {
    int64_t t = cur->tile_dims[a];
    if (t == 1 || to->tile_dims[a] != 1) continue;
    for (int32_t b = 0; b < rank; ++b)
      if (b != a && cur->tile_dims[b] == 1 && to->tile_dims[b] == t) {
        x = tt_part_all_to_all(p, x, global, &cur, a, b);
        break;
      }
  }
  if (x && !tt_sharding_same_tiles(cur, to, rank)) {
    tt_node_t *y = tt_part_permute_layout(p, x, rank, cur, to);
    if (y || p->error) {
      free(cur);
      return y;
    }
  }
  uint8_t keep[TT_MAX_RANK];
  for (int32_t d = 0; d < rank; ++d) keep[d] = (uint8_t)tt_part_same_dim(cur, to, rank, d);
  for (int32_t d = 0; d < rank; ++d)
    if (cur->tile_dims[d] > 1 && !keep[d]) x = tt_part_gather_dim(p, x, global, cur, d);
  for (int32_t d = 0; d < rank; ++d)
    if (to->tile_dims[d] > 1 && !keep[d]) x = tt_part_take_tile(p, x, global, to, d);
  free(cur);
  return x;
}

tt_node_t *tt_part_mask(tt_part_t *p, tt_node_t *x, const tt_shape_t *global,
                        const tt_sharding_t *s, uint64_t dims, double identity) {
  int32_t rank = global->rank;
  int64_t c[TT_MAX_RANK];
  tt_part_coords(s, rank, p->me, c, NULL);
  for (int32_t d = 0; d < rank && x; ++d) {
    if (!((dims >> d) & 1u) || s->tile_dims[d] == 1) continue;
    int64_t chunk = tt_part_chunk(global->dims[d], s->tile_dims[d]);
    int64_t v = global->dims[d] - c[d] * chunk;
    if (v >= chunk) continue;
    if (v < 0) v = 0;
    /* where(iota < v, x, identity), the iota along dim d. */
    int64_t ia[2] = {TT_F32, chunk};
    double fa[TT_MAX_FATTRS] = {0.0, 1.0};
    tt_node_t *idx = tt_part_make(p, TT_OP_IOTA, NULL, 0, ia, 2, fa);
    tt_shape_t along = {rank, {0}};
    for (int32_t e = 0; e < rank; ++e) along.dims[e] = e == d ? chunk : 1;
    idx = tt_part_reshape(p, idx, &along);
    tt_node_t *lt_ops[2] = {idx, tt_part_constant(p, (double)v, TT_F32, rank)};
    int64_t lt = TT_BIN_LT;
    tt_node_t *cond = tt_part_make(p, TT_OP_BINARY, lt_ops, 2, &lt, 1, NULL);
    tt_node_t *w_ops[3] = {cond, x, tt_part_constant(p, identity, x->dtype, rank)};
    x = tt_part_make(p, TT_OP_WHERE, w_ops, 3, NULL, 0, NULL);
    ++p->stats->masks;
  }
  return x;
}

tt_node_t *tt_part_all_reduce(tt_part_t *p, tt_node_t *x, int64_t reduce, const int32_t *ids,
                              int32_t group_size) {
  if (!x) return NULL;
  int64_t ia[TT_MAX_IATTRS] = {reduce, 0, 0, 0, group_size};
  for (int32_t k = 0; k < p->n; ++k) ia[TT_COLLECTIVE_HEADER + k] = p->replica[ids[k]];
  tt_node_t *y = tt_part_make(p, TT_OP_ALL_REDUCE, &x, 1, ia, TT_COLLECTIVE_HEADER + p->n, NULL);
  if (y) ++p->stats->all_reduces;
  return y;
}
