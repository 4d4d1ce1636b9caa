/* The partitioner's view of a layout (src/passes/partition_internal.h):
 * full forms over the mesh's partitions, each device's tile coordinates,
 * shard shapes, and where a partition's tile lies (tt_partition_tile,
 * include/torchtpu/partition.h). */
#include <stdlib.h>
#include <string.h>

#include "passes/partition_internal.h"

static const tt_sharding_t tt_part_replicated_any_ = {TT_SHARDING_REPLICATED, 0, {0}, 0, 0};

tt_sharding_t *tt_part_full(tt_part_t *p, const tt_sharding_t *s, int32_t rank) {
  if (p->error) return NULL;
  /* {manual} propagated onto a value made outside a manual region (a
   * constant or input the region reads): every partition computes or holds
   * all of it. Values inside a region never ask (partition.c). */
  if (s->kind == TT_SHARDING_MANUAL) s = &tt_part_replicated_any_;
  if (s->num_devices != p->n && !(s->kind == TT_SHARDING_REPLICATED && s->num_devices == 0)) {
    p->error = tt_status_make(TT_INVALID_ARGUMENT,
                              "partitioner: a sharding made for %d devices in a program of %d "
                              "partitions",
                              (int)s->num_devices, (int)p->n);
    return NULL;
  }
  tt_sharding_t *f;
  if (s->kind == TT_SHARDING_REPLICATED) {
    f = calloc(1, tt_sharding_size(p->n));
    if (f) {
      f->kind = TT_SHARDING_TILED;
      f->num_tile_dims = rank + 1;
      f->last_tile_dim_replicate = 1;
      f->num_devices = p->n;
      for (int32_t d = 0; d < rank; ++d) f->tile_dims[d] = 1;
      f->tile_dims[rank] = p->n;
      for (int32_t i = 0; i < p->n; ++i) f->devices[i] = i;
    }
  } else {
    f = tt_sharding_full(s, rank);
  }
  if (!f) p->error = tt_status_make(TT_RESOURCE_EXHAUSTED, "out of memory (partitioner)");
  return f;
}

void tt_part_coords(const tt_sharding_t *s, int32_t rank, int32_t dev, int64_t *coord,
                    int64_t *rep) {
  int64_t pos = 0;
  while (pos < s->num_devices && s->devices[pos] != dev) ++pos;
  int64_t rest = pos / s->tile_dims[rank];
  if (rep) *rep = pos % s->tile_dims[rank];
  for (int32_t d = rank - 1; d >= 0; --d) {
    coord[d] = rest % s->tile_dims[d];
    rest /= s->tile_dims[d];
  }
}

tt_shape_t tt_part_local_shape(const tt_sharding_t *s, const tt_shape_t *global) {
  tt_shape_t l = *global;
  for (int32_t d = 0; d < global->rank; ++d)
    l.dims[d] = tt_part_chunk(global->dims[d], s->tile_dims[d]);
  return l;
}

int tt_part_same_dim(const tt_sharding_t *a, const tt_sharding_t *b, int32_t rank, int32_t d) {
  if (a->tile_dims[d] != b->tile_dims[d]) return 0;
  if (a->tile_dims[d] == 1) return 1;
  int64_t ca[TT_MAX_RANK], cb[TT_MAX_RANK];
  for (int32_t dev = 0; dev < a->num_devices; ++dev) {
    tt_part_coords(a, rank, dev, ca, NULL);
    tt_part_coords(b, rank, dev, cb, NULL);
    if (ca[d] != cb[d]) return 0;
  }
  return 1;
}

tt_status_t tt_partition_tile(const tt_sharding_t *s, const tt_shape_t *shape, int32_t p,
                              int64_t *offset, int64_t *valid, tt_shape_t *shard_shape) {
  if (s->kind == TT_SHARDING_MANUAL)
    return tt_status_make(TT_INVALID_ARGUMENT, "partition tile: a {manual} sharding");
  int32_t rank = shape->rank;
  *shard_shape = *shape;
  if (s->kind == TT_SHARDING_REPLICATED) {
    if (p < 0 || (s->num_devices > 0 && p >= s->num_devices))
      return tt_status_make(TT_INVALID_ARGUMENT, "partition tile: partition %d of %d", (int)p,
                            (int)s->num_devices);
    for (int32_t d = 0; d < rank; ++d) {
      offset[d] = 0;
      valid[d] = shape->dims[d];
    }
    return NULL;
  }
  if (p < 0 || p >= s->num_devices)
    return tt_status_make(TT_INVALID_ARGUMENT, "partition tile: partition %d of %d", (int)p,
                          (int)s->num_devices);
  tt_sharding_t *f = tt_sharding_full(s, rank);
  if (!f) return tt_status_make(TT_RESOURCE_EXHAUSTED, "out of memory (partition tile)");
  int64_t c[TT_MAX_RANK];
  tt_part_coords(f, rank, p, c, NULL);
  for (int32_t d = 0; d < rank; ++d) {
    int64_t chunk = tt_part_chunk(shape->dims[d], f->tile_dims[d]);
    int64_t left = shape->dims[d] - c[d] * chunk;
    offset[d] = c[d] * chunk;
    valid[d] = left < 0 ? 0 : left < chunk ? left : chunk;
    shard_shape->dims[d] = chunk;
  }
  free(f);
  return NULL;
}

tt_sharding_t *tt_part_from_coords(tt_part_t *p, int32_t rank, const int64_t *tiles,
                                   const int64_t (*coord)[TT_MAX_RANK]) {
  if (p->error) return NULL;
  tt_sharding_t *f = calloc(1, tt_sharding_size(p->n));
  if (!f) {
    p->error = tt_status_make(TT_RESOURCE_EXHAUSTED, "out of memory (partitioner)");
    return NULL;
  }
  f->kind = TT_SHARDING_TILED;
  f->num_tile_dims = rank + 1;
  f->last_tile_dim_replicate = 1;
  f->num_devices = p->n;
  int64_t ntiles = 1;
  for (int32_t d = 0; d <= rank; ++d) f->tile_dims[d] = tiles[d];
  for (int32_t d = 0; d < rank; ++d) ntiles *= tiles[d];
  int64_t rep = tiles[rank], used[27] = {0};
  int ok = ntiles * rep == p->n && ntiles <= 27;
  for (int32_t pos = 0; pos < p->n; ++pos) f->devices[pos] = -1;
  for (int32_t dev = 0; dev < p->n && ok; ++dev) {
    int64_t t = 0;
    for (int32_t d = 0; d < rank; ++d) {
      ok = ok && coord[dev][d] >= 0 && coord[dev][d] < tiles[d];
      t = t * tiles[d] + coord[dev][d];
    }
    if (!ok || used[t] >= rep) {
      ok = 0;
      break;
    }
    f->devices[t * rep + used[t]++] = dev;
  }
  if (!ok) {
    free(f);
    p->error = tt_status_make(TT_INTERNAL, "partitioner: device tiles do not form a layout");
    return NULL;
  }
  return f;
}

tt_sharding_t *tt_part_copy(tt_part_t *p, const tt_sharding_t *s) {
  if (p->error || !s) return NULL;
  size_t bytes = tt_sharding_size(s->num_devices);
  tt_sharding_t *c = malloc(bytes);
  if (!c) {
    p->error = tt_status_make(TT_RESOURCE_EXHAUSTED, "out of memory (partitioner)");
    return NULL;
  }
  memcpy(c, s, bytes);
  return c;
}
