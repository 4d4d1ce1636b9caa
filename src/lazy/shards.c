/* Sharded storage (torchtpu/spmd_exec.h): shard sets, and copying between
 * a global host value and its shards (a tile of each partition, padded to
 * the shard shape). */
#include <stdlib.h>
#include <string.h>

#include "lazy/lazy_internal.h"
#include "lazy/spmd_internal.h"
#include "torchtpu/partition.h"

tt_shard_set_t *tt_shard_set_new(const tt_sharding_t *layout) {
  int32_t n = layout->num_devices;
  tt_shard_set_t *s = calloc(1, sizeof(*s) + sizeof(tt_buffer_t *) * (size_t)n);
  if (!s) return NULL;
  s->layout = tt_sharding_copy(layout);
  if (!s->layout) {
    free(s);
    return NULL;
  }
  s->refcount = 1;
  s->num = n;
  return s;
}

void tt_shard_set_retain(tt_shard_set_t *s) {
  if (s) __atomic_add_fetch(&s->refcount, 1, __ATOMIC_RELAXED);
}

void tt_shard_set_release(tt_shard_set_t *s) {
  if (!s || __atomic_sub_fetch(&s->refcount, 1, __ATOMIC_ACQ_REL) != 0) return;
  for (int32_t p = 0; p < s->num; ++p) tt_buffer_release(s->buffers[p]);
  free(s->layout);
  free(s);
}

size_t tt_spmd_shard_bytes(const tt_sharding_t *layout, const tt_shape_t *shape,
                           tt_dtype_t dtype) {
  int64_t off[TT_MAX_RANK], valid[TT_MAX_RANK];
  tt_shape_t ss;
  tt_status_t st = tt_partition_tile(layout, shape, layout->devices[0], off, valid, &ss);
  if (st) {
    tt_status_free(st);
    return 0;
  }
  return (size_t)tt_shape_numel(&ss) * tt_dtype_size(dtype);
}

/* Copies the valid part of a tile between the global row-major array g
 * (shape) and the padded shard array s (shard shape ss): to_global 1
 * writes g from s, 0 writes s from g (the padding of s is zeroed first). */
static void tt_copy_tile_(char *g, const tt_shape_t *shape, char *s, const tt_shape_t *ss,
                          const int64_t *off, const int64_t *valid, size_t es, int to_global) {
  int32_t rank = shape->rank;
  if (!to_global) memset(s, 0, (size_t)tt_shape_numel(ss) * es);
  for (int32_t d = 0; d < rank; ++d)
    if (valid[d] <= 0) return;
  if (rank == 0) {
    if (to_global) memcpy(g, s, es);
    else memcpy(s, g, es);
    return;
  }
  /* Row by row along the last dim: idx runs over the valid region's
   * leading dims. */
  int64_t idx[TT_MAX_RANK] = {0};
  size_t row = (size_t)valid[rank - 1] * es;
  for (;;) {
    int64_t gi = 0, si = 0;
    for (int32_t d = 0; d < rank; ++d) {
      gi = gi * shape->dims[d] + off[d] + idx[d];
      si = si * ss->dims[d] + idx[d];
    }
    if (to_global) memcpy(g + (size_t)gi * es, s + (size_t)si * es, row);
    else memcpy(s + (size_t)si * es, g + (size_t)gi * es, row);
    int32_t d = rank - 2;
    while (d >= 0 && ++idx[d] == valid[d]) idx[d--] = 0;
    if (d < 0) break;
  }
}

tt_status_t tt_spmd_tile_copy(const tt_sharding_t *layout, const tt_shape_t *shape, int32_t p,
                              size_t es, void *global, void *shard, int to_global) {
  int64_t off[TT_MAX_RANK], valid[TT_MAX_RANK];
  tt_shape_t ss;
  TT_RETURN_IF_ERROR(tt_partition_tile(layout, shape, p, off, valid, &ss));
  tt_copy_tile_(global, shape, shard, &ss, off, valid, es, to_global);
  return NULL;
}

tt_status_t tt_shard_set_to_host(tt_shard_set_t *s, const tt_shape_t *shape, tt_dtype_t dtype,
                                 void *host, size_t nbytes) {
  size_t es = tt_dtype_size(dtype);
  if (nbytes != (size_t)tt_shape_numel(shape) * es)
    return tt_status_make(TT_INVALID_ARGUMENT, "copy to host: %zu bytes asked, tensor has %zu",
                          nbytes, (size_t)tt_shape_numel(shape) * es);
  /* Which tiles this process holds (another process's shards are NULL;
   * a replica of a tile may still be here). */
  int64_t ntiles = 1;
  for (int32_t d = 0; d < shape->rank && d < s->layout->num_tile_dims; ++d)
    ntiles *= s->layout->tile_dims[d];
  unsigned char held[64] = {0};
  for (int32_t p = 0; p < s->num && ntiles <= 64; ++p) {
    int64_t off[TT_MAX_RANK], valid[TT_MAX_RANK], t = 0;
    tt_shape_t ss;
    if (!s->buffers[p]) continue;
    TT_RETURN_IF_ERROR(tt_partition_tile(s->layout, shape, p, off, valid, &ss));
    for (int32_t d = 0; d < shape->rank; ++d)
      t = t * s->layout->tile_dims[d] + (ss.dims[d] ? off[d] / ss.dims[d] : 0);
    if (t >= 0 && t < ntiles) held[t] = 1;
  }
  for (int64_t t = 0; t < ntiles; ++t)
    if (ntiles > 64 || !held[t])
      return tt_status_make(TT_UNIMPLEMENTED,
                            "reading a value sharded over several processes: tile %lld is held "
                            "by another process; every process must read it together (.cpu() "
                            "does), or read this process's shards (local_shards)", (long long)t);
  for (int32_t p = 0; p < s->num; ++p) {
    tt_buffer_t *b = s->buffers[p];
    if (!b) continue;
    TT_RETURN_IF_ERROR(tt_buffer_wait(b));
    /* A partially replicated tile is copied once per holder: the same
     * bytes. */
    TT_RETURN_IF_ERROR(tt_spmd_tile_copy(s->layout, shape, p, es, host, tt_buffer_data(b), 1));
  }
  return NULL;
}
