/* The tile-assignment algebra of sharding propagation
 * (include/torchtpu/sharding_rule.h): full and canonical forms, moving a
 * sharding between tensors by transposing its device array, and merging
 * two shardings into one that refines both. */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "torchtpu/sharding_rule.h"

static int tt_full_is_tiled(const tt_sharding_t *s) { return s->kind == TT_SHARDING_TILED; }

static tt_sharding_t *tt_full_alloc(int32_t rank, int32_t n) {
  tt_sharding_t *f = calloc(1, tt_sharding_size(n));
  if (!f) return NULL;
  f->kind = TT_SHARDING_TILED;
  f->num_tile_dims = rank + 1;
  f->last_tile_dim_replicate = 1;
  f->num_devices = n;
  return f;
}

tt_sharding_t *tt_sharding_full(const tt_sharding_t *s, int32_t rank) {
  if (s->kind == TT_SHARDING_MANUAL || (s->kind == TT_SHARDING_REPLICATED && s->num_devices <= 0))
    return tt_sharding_copy(s);
  int32_t n = s->num_devices;
  tt_sharding_t *f = tt_full_alloc(rank, n);
  if (!f) return NULL;
  if (s->kind == TT_SHARDING_REPLICATED) {
    for (int32_t d = 0; d < rank; ++d) f->tile_dims[d] = 1;
    f->tile_dims[rank] = n;
    for (int32_t i = 0; i < n; ++i) f->devices[i] = i;
    return f;
  }
  for (int32_t d = 0; d < rank; ++d) f->tile_dims[d] = s->tile_dims[d];
  f->tile_dims[rank] = s->last_tile_dim_replicate ? s->tile_dims[rank] : 1;
  memcpy(f->devices, s->devices, sizeof(int32_t) * (size_t)n);
  return f;
}

tt_sharding_t *tt_sharding_canonical(const tt_sharding_t *full, int32_t rank) {
  if (!tt_full_is_tiled(full)) return tt_sharding_copy(full);
  int tiled = 0;
  for (int32_t d = 0; d < rank; ++d) tiled |= full->tile_dims[d] > 1;
  if (!tiled) {
    tt_sharding_t *r = calloc(1, tt_sharding_size(0));
    if (!r) return NULL;
    r->kind = TT_SHARDING_REPLICATED;
    r->num_devices = full->num_devices;
    return r;
  }
  tt_sharding_t *c = tt_sharding_copy(full);
  if (c && c->tile_dims[rank] == 1) {
    c->num_tile_dims = rank;
    c->tile_dims[rank] = 0;
    c->last_tile_dim_replicate = 0;
  }
  return c;
}

int64_t tt_sharding_tiles(const tt_sharding_t *s, int32_t rank) {
  if (s->kind == TT_SHARDING_MANUAL) return INT64_MAX;
  if (!tt_full_is_tiled(s)) return 1;
  int64_t t = 1;
  for (int32_t d = 0; d < rank; ++d) t *= s->tile_dims[d];
  return t;
}

tt_sharding_t *tt_sharding_project(const tt_sharding_t *src, int32_t src_rank, const int32_t *to,
                                   int32_t dst_rank, const uint8_t *partial,
                                   int64_t *partial_count) {
  if (partial_count) *partial_count = 1;
  if (!tt_full_is_tiled(src)) return tt_sharding_copy(src);
  const int64_t *size = src->tile_dims;
  int32_t naxes = src_rank + 1, perm[TT_MAX_RANK + 1], np = 0;
  uint8_t used[TT_MAX_RANK + 1] = {0};
  int32_t n = src->num_devices;
  tt_sharding_t *dst = tt_full_alloc(dst_rank, n);
  if (!dst) return NULL;
  int64_t tiles = 1, p = 1;
  /* The dst dims' axes first, in dst order; then the replication dim:
   * partial axes, other dropped axes, src's own replication. */
  for (int32_t r = 0; r < dst_rank; ++r) {
    dst->tile_dims[r] = 1;
    for (int32_t d = 0; d < src_rank; ++d)
      if (to[d] == r && !used[d]) {
        used[d] = 1;
        perm[np++] = d;
        dst->tile_dims[r] = size[d];
        tiles *= size[d];
        break;
      }
  }
  for (int32_t d = 0; d < src_rank; ++d)
    if (!used[d] && to[d] < 0 && partial && partial[d] && size[d] > 1) {
      used[d] = 1;
      perm[np++] = d;
      p *= size[d];
    }
  for (int32_t a = 0; a < naxes; ++a)
    if (!used[a] && size[a] > 1) {
      used[a] = 1;
      perm[np++] = a;
    }
  dst->tile_dims[dst_rank] = n / tiles;
  /* Transpose the device array: walk dst's order, read src's position. */
  int64_t stride[TT_MAX_RANK + 1], idx[TT_MAX_RANK + 1] = {0};
  stride[naxes - 1] = 1;
  for (int32_t a = naxes - 2; a >= 0; --a) stride[a] = stride[a + 1] * size[a + 1];
  for (int32_t o = 0; o < n; ++o) {
    int64_t off = 0;
    for (int32_t j = 0; j < np; ++j) off += idx[j] * stride[perm[j]];
    dst->devices[o] = src->devices[off];
    for (int32_t j = np - 1; j >= 0; --j) {
      if (++idx[j] < size[perm[j]]) break;
      idx[j] = 0;
    }
  }
  if (partial_count) *partial_count = p;
  return dst;
}

/* coord[dev * rank + d]: the tile index along tensor dim d of device dev
 * in full-form s; 0 when s lists a device twice or out of range. */
static int tt_full_coords(const tt_sharding_t *s, int32_t rank, int32_t *coord) {
  int32_t n = s->num_devices;
  for (int32_t pos = 0; pos < n; ++pos) {
    int32_t dev = s->devices[pos];
    if (dev < 0 || dev >= n) return 0;
    int64_t rest = pos / s->tile_dims[rank];
    for (int32_t d = rank - 1; d >= 0; --d) {
      coord[(size_t)dev * (size_t)rank + (size_t)d] = (int32_t)(rest % s->tile_dims[d]);
      rest /= s->tile_dims[d];
    }
  }
  return 1;
}

tt_sharding_t *tt_sharding_merge(const tt_sharding_t *a, const tt_sharding_t *b, int32_t rank) {
  int am = a->kind == TT_SHARDING_MANUAL, bm = b->kind == TT_SHARDING_MANUAL;
  if (am || bm) {
    if (!(am && bm)) return NULL;
    if (a->num_devices && b->num_devices && a->num_devices != b->num_devices) return NULL;
    return tt_sharding_copy(a->num_devices ? a : b);
  }
  if (!tt_full_is_tiled(a)) return tt_sharding_copy(b);
  if (!tt_full_is_tiled(b)) return tt_sharding_copy(a);
  int32_t n = a->num_devices;
  if (b->num_devices != n || n <= 0) return NULL;
  int64_t t[TT_MAX_RANK], total = 1;
  for (int32_t d = 0; d < rank; ++d) {
    int64_t ta = a->tile_dims[d], tb = b->tile_dims[d];
    if (ta > 1 && tb > 1 && ta != tb) return NULL;
    t[d] = ta > 1 ? ta : tb;
    total *= t[d];
  }
  if (total > n || n % total) return NULL;
  int64_t per_cell = n / total;
  size_t rk = rank > 0 ? (size_t)rank : 1;
  int32_t *ca = malloc(sizeof(int32_t) * (size_t)n * rk);
  int32_t *cb = malloc(sizeof(int32_t) * (size_t)n * rk);
  int64_t *cell = malloc(sizeof(int64_t) * (size_t)n);
  int64_t *fill = calloc((size_t)total, sizeof(int64_t));
  tt_sharding_t *m = NULL;
  if (!ca || !cb || !cell || !fill) goto done;
  if (!tt_full_coords(a, rank, ca) || !tt_full_coords(b, rank, cb)) goto done;
  for (int32_t dev = 0; dev < n; ++dev) {
    int64_t c = 0;
    for (int32_t d = 0; d < rank; ++d) {
      int32_t xa = ca[(size_t)dev * rk + (size_t)d], xb = cb[(size_t)dev * rk + (size_t)d];
      if (a->tile_dims[d] > 1 && b->tile_dims[d] > 1 && xa != xb) goto done;
      c = c * t[d] + (a->tile_dims[d] > 1 ? xa : b->tile_dims[d] > 1 ? xb : 0);
    }
    cell[dev] = c;
    if (++fill[c] > per_cell) goto done;
  }
  m = tt_full_alloc(rank, n);
  if (!m) goto done;
  for (int32_t d = 0; d < rank; ++d) m->tile_dims[d] = t[d];
  m->tile_dims[rank] = per_cell;
  memset(fill, 0, sizeof(int64_t) * (size_t)total);
  for (int32_t pos = 0; pos < n; ++pos) {
    int32_t dev = a->devices[pos];
    m->devices[cell[dev] * per_cell + fill[cell[dev]]++] = dev;
  }
done:
  free(ca);
  free(cb);
  free(cell);
  free(fill);
  return m;
}

int tt_sharding_same_tiles(const tt_sharding_t *a, const tt_sharding_t *b, int32_t rank) {
  if (!tt_full_is_tiled(a) || !tt_full_is_tiled(b)) {
    if (a->kind == TT_SHARDING_MANUAL || b->kind == TT_SHARDING_MANUAL) return a->kind == b->kind;
    return tt_sharding_tiles(a, rank) == 1 && tt_sharding_tiles(b, rank) == 1;
  }
  int32_t n = a->num_devices;
  if (b->num_devices != n) return 0;
  for (int32_t d = 0; d < rank; ++d)
    if (a->tile_dims[d] != b->tile_dims[d]) return 0;
  size_t rk = rank > 0 ? (size_t)rank : 1;
  int32_t *ca = malloc(sizeof(int32_t) * (size_t)n * rk);
  int32_t *cb = malloc(sizeof(int32_t) * (size_t)n * rk);
  int same = ca && cb && tt_full_coords(a, rank, ca) && tt_full_coords(b, rank, cb) &&
             memcmp(ca, cb, sizeof(int32_t) * (size_t)n * (size_t)rank) == 0;
  free(ca);
  free(cb);
  return same;
}

/* group[dev]: the partial group of each device of full-form s whose
 * replication dim lists `count` groups first. */
static void tt_full_groups(const tt_sharding_t *s, int32_t rank, int64_t count, int32_t *group) {
  int64_t r = s->tile_dims[rank], per = r / count;
  for (int32_t pos = 0; pos < s->num_devices; ++pos)
    group[s->devices[pos]] = (int32_t)((pos % r) / per);
}

tt_sharding_t *tt_sharding_merge_partial(const tt_sharding_t *a, int64_t pa,
                                         const tt_sharding_t *b, int64_t pb, int32_t rank,
                                         int64_t *pout) {
  *pout = 1;
  if (pa <= 1 && pb <= 1) return tt_sharding_merge(a, b, rank);
  if (!tt_full_is_tiled(a) || !tt_full_is_tiled(b)) {
    /* Partial layouts are tiled; the other side says nothing (replicated
     * with no device count) or cannot merge (manual). */
    const tt_sharding_t *part = pa > 1 ? a : b, *other = pa > 1 ? b : a;
    if (other->kind != TT_SHARDING_REPLICATED || !tt_full_is_tiled(part)) return NULL;
    *pout = pa > 1 ? pa : pb;
    return tt_sharding_copy(part);
  }
  int32_t n = a->num_devices;
  if (b->num_devices != n || (pa > 1 && pb > 1 && pa != pb)) return NULL;
  int64_t count = pa > 1 ? pa : pb;
  int32_t *ga = malloc(sizeof(int32_t) * (size_t)n), *gb = malloc(sizeof(int32_t) * (size_t)n);
  int64_t *fill = NULL;
  tt_sharding_t *m = NULL, *out = NULL;
  if (!ga || !gb) goto done;
  if (pa > 1) tt_full_groups(a, rank, pa, ga);
  if (pb > 1) tt_full_groups(b, rank, pb, gb);
  if (pa > 1 && pb > 1 && memcmp(ga, gb, sizeof(int32_t) * (size_t)n) != 0) goto done;
  const int32_t *g = pa > 1 ? ga : gb;
  m = tt_sharding_merge(a, b, rank);
  if (!m) goto done;
  /* Every merged tile must hold each group equally often; its devices are
   * then listed group-major (stable). */
  int64_t r = m->tile_dims[rank];
  if (r % count) goto done;
  int64_t per = r / count;
  out = tt_sharding_copy(m);
  fill = malloc(sizeof(int64_t) * (size_t)count);
  if (!out || !fill) {
    free(out);
    out = NULL;
    goto done;
  }
  for (int64_t cell = 0; cell * r < n; ++cell) {
    memset(fill, 0, sizeof(int64_t) * (size_t)count);
    const int32_t *src = m->devices + cell * r;
    for (int64_t q = 0; q < r; ++q) {
      int32_t grp = g[src[q]];
      if (fill[grp] == per) {
        free(out);
        out = NULL;
        goto done;
      }
      out->devices[cell * r + grp * per + fill[grp]++] = src[q];
    }
  }
  *pout = count;
done:
  free(ga);
  free(gb);
  free(fill);
  free(m);
  return out;
}
