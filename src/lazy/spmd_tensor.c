/* Tensors held as shards (torchtpu/spmd_exec.h): the SPMD-mode switch,
 * storage that follows a tensor's annotation, and reading / writing the
 * shards themselves (XLAShardedTensor.local_shards, load_local_shards_). */
#include <stdlib.h>
#include <string.h>

#include "lazy/lazy_internal.h"
#include "lazy/spmd_internal.h"
#include "torchtpu/collective.h"
#include "torchtpu/metrics.h"

static int tt_spmd_on_; /* engine lock */

void tt_lazy_set_spmd_partitioning(int on) {
  pthread_mutex_lock(&tt_lazy_lock);
  tt_spmd_on_ = on != 0;
  pthread_mutex_unlock(&tt_lazy_lock);
}

int tt_lazy_spmd_partitioning(void) {
  pthread_mutex_lock(&tt_lazy_lock);
  int on = tt_spmd_on_;
  pthread_mutex_unlock(&tt_lazy_lock);
  return on;
}

int tt_spmd_on_locked(void) { return tt_spmd_on_; }

static int tt_virtual_device_; /* engine lock */

void tt_lazy_set_virtual_device(int on) {
  pthread_mutex_lock(&tt_lazy_lock);
  tt_virtual_device_ = on != 0;
  pthread_mutex_unlock(&tt_lazy_lock);
}

int tt_lazy_virtual_device(void) {
  pthread_mutex_lock(&tt_lazy_lock);
  int on = tt_virtual_device_;
  pthread_mutex_unlock(&tt_lazy_lock);
  return on;
}

int tt_virtual_device_locked(void) { return tt_virtual_device_; }

int32_t tt_spmd_device_base(void) {
  return tt_collective_process_count() > 1 ? tt_collective_device_base() : 0;
}

int32_t tt_spmd_global_devices(void) {
  return tt_collective_process_count() * tt_runtime_device_count();
}

int tt_spmd_is_local(int32_t p) {
  int32_t d = p - tt_spmd_device_base();
  return d >= 0 && d < tt_runtime_device_count();
}

int tt_spmd_is_tiled(const tt_sharding_t *s, int32_t rank) {
  if (!s || s->kind != TT_SHARDING_TILED) return 0;
  int64_t tiles = 1;
  for (int32_t d = 0; d < rank && d < s->num_tile_dims; ++d) tiles *= s->tile_dims[d];
  return tiles > 1;
}

/* Drops t's data node: the next op makes one over the new storage. */
static void tt_spmd_drop_data_node_(tt_tensor_t *t) {
  tt_node_release(t->data_node);
  t->data_node = NULL;
}

/* A value still on the host (t->host) goes to the devices as s's shards,
 * each device sent its own (PyTorch/XLA's sharded transfer): no whole copy
 * on one device first. */
static tt_status_t tt_spmd_shard_host_(tt_tensor_t *t, const tt_sharding_t *s) {
  size_t es = tt_dtype_size(t->dtype), sb = tt_spmd_shard_bytes(s, &t->shape, t->dtype);
  tt_shard_set_t *set = tt_shard_set_new(s);
  void *tmp = malloc(sb ? sb : 1);
  tt_status_t st = set && tmp ? NULL : tt_status_make(TT_RESOURCE_EXHAUSTED, "out of memory (shards)");
  int32_t base = tt_spmd_device_base(), sent = 0;
  for (int32_t p = 0; !st && p < set->num; ++p) {
    if (!tt_spmd_is_local(p)) continue; /* another process sends its own */
    st = tt_spmd_tile_copy(s, &t->shape, p, es, t->host, tmp, 0);
    if (!st) st = tt_buffer_from_host(p - base, tmp, sb, &set->buffers[p]);
    if (!st) ++sent;
  }
  free(tmp);
  if (st) {
    tt_shard_set_release(set);
    return st;
  }
  tt_metric_add("OutboundData", TT_UNIT_BYTES, (double)sb * sent);
  tt_counter_add("CreateDataHandles", sent);
  free(t->host);
  t->host = NULL;
  t->shards = set;
  tt_spmd_drop_data_node_(t);
  return NULL;
}

tt_status_t tt_spmd_shard_storage_locked(tt_tensor_t *t) {
  const tt_sharding_t *s = t->sharding;
  if (!tt_spmd_on_ || t->node || t->deleted || !(t->buffer || t->host) || t->shards ||
      !tt_spmd_is_tiled(s, t->shape.rank) || tt_shape_numel(&t->shape) == 0)
    return NULL;
  if (s->num_devices > 27 || s->num_devices > tt_spmd_global_devices()) return NULL;
  /* Several processes: a mesh over part of the job is refused by the cut
   * (spmd_cut.c); until then the value stays whole (this process might
   * hold none of its shards). */
  if (tt_spmd_global_devices() > tt_runtime_device_count() &&
      s->num_devices != tt_spmd_global_devices())
    return NULL;
  if (t->host) return tt_spmd_shard_host_(t, s);
  tt_shard_set_t *set = NULL;
  TT_RETURN_IF_ERROR(tt_spmd_slice_locked(t->buffer, &t->shape, t->dtype, s, &set));
  tt_buffer_release(t->buffer);
  t->buffer = NULL;
  t->shards = set;
  tt_spmd_drop_data_node_(t);
  return NULL;
}

tt_status_t tt_spmd_unshard_locked(tt_tensor_t *t) {
  if (!t->shards) return NULL;
  tt_counter_add("SpmdStorageAssembled", 1);
  tt_buffer_t *b = NULL;
  TT_RETURN_IF_ERROR(tt_spmd_assemble_locked(t->shards, &t->shape, t->dtype, t->device, &b));
  tt_buffer_release(t->buffer);
  t->buffer = b;
  tt_shard_set_release(t->shards);
  t->shards = NULL;
  tt_spmd_drop_data_node_(t);
  return NULL;
}

tt_status_t tt_tensor_storage_layout(tt_tensor_t *t, tt_sharding_t **out_layout) {
  *out_layout = NULL;
  if (t->node) TT_RETURN_IF_ERROR(tt_lazy_sync_tensors(&t, 1, 0));
  pthread_mutex_lock(&tt_lazy_lock);
  tt_status_t st = NULL;
  if (!t->node && t->shards) {
    *out_layout = tt_sharding_copy(t->shards->layout);
    if (!*out_layout) st = tt_status_make(TT_RESOURCE_EXHAUSTED, "out of memory (sharding)");
  }
  pthread_mutex_unlock(&tt_lazy_lock);
  return st;
}

tt_status_t tt_tensor_result_layout(tt_tensor_t *t, tt_sharding_t **out_layout) {
  *out_layout = NULL;
  tt_status_t st = NULL;
  pthread_mutex_lock(&tt_lazy_lock);
  if (!t->node && !t->deleted && t->shards) {
    *out_layout = tt_sharding_copy(t->shards->layout);
    if (!*out_layout) st = tt_status_make(TT_RESOURCE_EXHAUSTED, "out of memory (sharding)");
  } else if (!t->node && !t->deleted && t->buffer && t->cut_result) {
    *out_layout = calloc(1, tt_sharding_size(0));
    if (!*out_layout) st = tt_status_make(TT_RESOURCE_EXHAUSTED, "out of memory (sharding)");
    else (*out_layout)->kind = TT_SHARDING_REPLICATED;
  }
  pthread_mutex_unlock(&tt_lazy_lock);
  return st;
}

tt_status_t tt_tensor_shard_to_host(tt_tensor_t *t, int32_t p, void *host, size_t nbytes) {
  pthread_mutex_lock(&tt_lazy_lock);
  tt_buffer_t *b = NULL;
  int held = !t->node && t->shards && p >= 0 && p < t->shards->num;
  if (held) b = t->shards->buffers[p];
  if (b) tt_buffer_retain(b);
  pthread_mutex_unlock(&tt_lazy_lock);
  if (held && !b)
    return tt_status_make(TT_INVALID_ARGUMENT,
                          "tensor %lld: shard %d is held by another process (global device %d); "
                          "this process holds the shards of its own devices", (long long)t->id,
                          (int)p, (int)p);
  if (!b)
    return tt_status_make(TT_INVALID_ARGUMENT,
                          "tensor %lld holds no shard %d (it is not held as shards)",
                          (long long)t->id, (int)p);
  tt_status_t st = tt_buffer_to_host(b, host, nbytes);
  tt_buffer_release(b);
  return st;
}

tt_status_t tt_tensor_load_shards(tt_tensor_t *t, const tt_sharding_t *layout,
                                  const void *const *hosts, size_t shard_bytes) {
  TT_RETURN_IF_ERROR(tt_sharding_validate(layout, &t->shape));
  int32_t gd = tt_spmd_global_devices(), base = tt_spmd_device_base();
  if (!tt_spmd_is_tiled(layout, t->shape.rank) || layout->num_devices > gd ||
      (gd > tt_runtime_device_count() && layout->num_devices != gd))
    return tt_status_make(TT_INVALID_ARGUMENT,
                          "load shards: a tiled layout over %s %d devices is needed",
                          gd > tt_runtime_device_count() ? "all" : "at most", (int)gd);
  size_t want = tt_spmd_shard_bytes(layout, &t->shape, t->dtype);
  if (shard_bytes != want)
    return tt_status_make(TT_INVALID_ARGUMENT, "load shards: %zu bytes per shard, the layout's "
                          "shard has %zu", shard_bytes, want);
  tt_shard_set_t *set = tt_shard_set_new(layout);
  if (!set) return tt_status_make(TT_RESOURCE_EXHAUSTED, "out of memory (shards)");
  for (int32_t p = 0; p < set->num; ++p) {
    if (!tt_spmd_is_local(p)) continue; /* another process loads it */
    tt_status_t st = tt_buffer_from_host(p - base, hosts[p], shard_bytes, &set->buffers[p]);
    if (st) {
      tt_shard_set_release(set);
      return st;
    }
  }
  pthread_mutex_lock(&tt_lazy_lock);
  tt_node_release(t->node);
  t->node = NULL;
  t->derived = 0;
  t->deleted = 0;
  t->cut_result = 0;
  tt_buffer_release(t->buffer);
  t->buffer = NULL;
  tt_shard_set_release(t->shards);
  t->shards = set;
  free(t->host);
  t->host = NULL;
  tt_spmd_drop_data_node_(t);
  pthread_mutex_unlock(&tt_lazy_lock);
  return NULL;
}
