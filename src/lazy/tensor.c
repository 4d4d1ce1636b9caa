/* Lazy tensors and the live-tensor registry: making tensors (from host
 * data, runtime scalars, recorded ops), their accessors, sharding
 * annotations and reading values back (which cuts through cut.c). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "lazy/lazy_internal.h"
#include "lazy/spmd_internal.h"
#include "torchtpu/debug.h"
#include "torchtpu/metrics.h"

pthread_mutex_t tt_lazy_lock = PTHREAD_MUTEX_INITIALIZER;
/* The registry: every live tensor, newest first. */
static tt_tensor_t *tt_live_head = NULL;
static int64_t tt_live_count = 0;
static int64_t tt_next_id = 1;

tt_tensor_t *tt_tensor_new_locked(int32_t device, tt_dtype_t dtype, const tt_shape_t *shape) {
  tt_tensor_t *t = calloc(1, sizeof(*t));
  if (!t) return NULL;
  t->refcount = 1;
  t->id = tt_next_id++;
  t->alias_id = t->id;
  t->device = device;
  t->dtype = dtype;
  t->shape = *shape;
  t->next = tt_live_head;
  if (tt_live_head) tt_live_head->prev = t;
  tt_live_head = t;
  tt_live_count++;
  return t;
}

static tt_status_t tt_check_device(int32_t device) {
  int32_t n = tt_runtime_device_count();
  if (device < 0 || device >= n)
    return tt_status_make(TT_INVALID_ARGUMENT,
                          "Invalid device xla:%d: the CPU backend has %d devices (xla:0..xla:%d)",
                          device, n, n - 1);
  return NULL;
}

/* A host-to-device transfer of nbytes, under PyTorch/XLA's names for one
 * (its TransferToDevice records these two; TransferToDeviceTime is the
 * buffer's own, tt_buffer_from_host). */
static void tt_count_transfer_to_device_(size_t nbytes) {
  tt_metric_add("OutboundData", TT_UNIT_BYTES, (double)nbytes);
  tt_counter_add("CreateDataHandles", 1);
}

static tt_status_t tt_tensor_from_host_(int32_t device, tt_dtype_t dtype, const tt_shape_t *shape,
                                        const void *host, int defer, tt_tensor_t **out) {
  *out = NULL;
  TT_RETURN_IF_ERROR(tt_check_device(device));
  size_t nbytes = (size_t)tt_shape_numel(shape) * tt_dtype_size(dtype);
  pthread_mutex_lock(&tt_lazy_lock);
  defer = defer && tt_virtual_device_locked();
  pthread_mutex_unlock(&tt_lazy_lock);
  tt_buffer_t *b = NULL;
  void *copy = NULL;
  if (defer) {
    copy = malloc(nbytes ? nbytes : 1);
    if (!copy) return tt_status_make(TT_RESOURCE_EXHAUSTED, "out of memory (host copy)");
    if (nbytes) memcpy(copy, host, nbytes);
  } else {
    TT_RETURN_IF_ERROR(tt_buffer_from_host(device, host, nbytes, &b));
    tt_count_transfer_to_device_(nbytes);
  }
  pthread_mutex_lock(&tt_lazy_lock);
  tt_tensor_t *t = tt_tensor_new_locked(device, dtype, shape);
  pthread_mutex_unlock(&tt_lazy_lock);
  if (!t) {
    tt_buffer_release(b);
    free(copy);
    return tt_status_make(TT_RESOURCE_EXHAUSTED, "out of memory (tensor)");
  }
  t->buffer = b;
  t->host = copy;
  *out = t;
  return NULL;
}

tt_status_t tt_tensor_from_host(int32_t device, tt_dtype_t dtype, const tt_shape_t *shape,
                                const void *host, tt_tensor_t **out) {
  return tt_tensor_from_host_(device, dtype, shape, host, 0, out);
}

tt_status_t tt_tensor_from_host_deferred(int32_t device, tt_dtype_t dtype,
                                         const tt_shape_t *shape, const void *host,
                                         tt_tensor_t **out) {
  return tt_tensor_from_host_(device, dtype, shape, host, 1, out);
}

tt_status_t tt_tensor_upload_host_locked(tt_tensor_t *t) {
  if (!t->host) return NULL;
  size_t nbytes = (size_t)tt_shape_numel(&t->shape) * tt_dtype_size(t->dtype);
  tt_buffer_t *b = NULL;
  int64_t t0 = tt_now_ns();
  TT_RETURN_IF_ERROR(tt_buffer_from_host(t->device, t->host, nbytes, &b));
  tt_metric_add("TensorToData", TT_UNIT_NANOSECONDS, (double)(tt_now_ns() - t0));
  tt_count_transfer_to_device_(nbytes);
  free(t->host);
  t->host = NULL;
  t->buffer = b;
  return NULL;
}

int tt_tensor_on_host(const tt_tensor_t *t) {
  pthread_mutex_lock(&tt_lazy_lock);
  int on = t->host != NULL;
  pthread_mutex_unlock(&tt_lazy_lock);
  return on;
}

int tt_tensor_has_data_node(const tt_tensor_t *t) {
  pthread_mutex_lock(&tt_lazy_lock);
  int has = !t->node && t->data_node != NULL;
  pthread_mutex_unlock(&tt_lazy_lock);
  return has;
}

tt_status_t tt_tensor_scalar(int32_t device, tt_dtype_t dtype, double value_f, int64_t value_i,
                             tt_tensor_t **out) {
  *out = NULL;
  TT_RETURN_IF_ERROR(tt_check_device(device));
  if ((unsigned)dtype >= TT_DTYPE_COUNT || tt_dtype_is_complex(dtype))
    return tt_status_make(TT_TYPE_ERROR, "scalar: %s scalars are not supported "
                          "(make a complex value from float32 pairs)", tt_dtype_name(dtype));
  tt_node_t *n = tt_node_create_scalar(dtype, value_f, value_i, device);
  if (!n) return tt_status_make(TT_RESOURCE_EXHAUSTED, "out of memory (scalar)");
  if (tt_debug_flags() & TT_DEBUG_IR_FRAMES) tt_debug_attach_node_frames(n);
  pthread_mutex_lock(&tt_lazy_lock);
  tt_tensor_t *t = tt_tensor_new_locked(device, dtype, &n->shape);
  pthread_mutex_unlock(&tt_lazy_lock);
  if (!t) {
    tt_node_release(n);
    return tt_status_make(TT_RESOURCE_EXHAUSTED, "out of memory (tensor)");
  }
  t->node = n;
  *out = t;
  return NULL;
}

tt_node_t *tt_tensor_use_node(tt_tensor_t *t) {
  if (t->node) return t->node;
  if (t->deleted) return NULL;
  if (t->host) {
    tt_status_t st = tt_tensor_upload_host_locked(t);
    if (st) {
      tt_status_free(st);
      return NULL;
    }
  }
  if (!t->data_node && t->shards) {
    /* Sharded storage: the PARAM holds the shards (no buffer); its
     * annotation is the tensor's, as for one buffer (the storage layout is
     * not part of the graph's key: a partitioned cut gives each program
     * its input in the layout the program reads, spmd_cut.c). */
    tt_buffer_t *any = NULL; /* another process's shards are NULL (spmd_internal.h) */
    for (int32_t p = 0; p < t->shards->num && !any; ++p) any = t->shards->buffers[p];
    t->data_node = tt_node_create_param(any, t->dtype, &t->shape, t->device);
    if (t->data_node) {
      tt_buffer_release(t->data_node->buffer);
      t->data_node->buffer = NULL;
      tt_shard_set_retain(t->shards);
      t->data_node->shards = t->shards;
      t->data_node->tensor_id = t->id;
      if (t->sharding) t->data_node->sharding = tt_sharding_copy(t->sharding);
      /* Several processes: the shards cannot be moved to another layout
       * outside a partitioned program, so an unannotated value reads as
       * annotated with the layout it is held in. */
      else if (tt_spmd_global_devices() > tt_runtime_device_count())
        t->data_node->sharding = tt_sharding_copy(t->shards->layout);
    }
  } else if (!t->data_node) {
    t->data_node = tt_node_create_param(t->buffer, t->dtype, &t->shape, t->device);
    if (t->data_node) {
      t->data_node->tensor_id = t->id;
      t->data_node->donor = t->donor;
    }
    if (t->data_node && t->sharding) t->data_node->sharding = tt_sharding_copy(t->sharding);
  }
  return t->data_node;
}

int tt_tensor_set_donation(tt_tensor_t *t, int donate) {
  pthread_mutex_lock(&tt_lazy_lock);
  int data = !t->node;
  if (data) {
    t->donor = donate != 0;
    if (t->data_node) t->data_node->donor = t->donor;
  }
  pthread_mutex_unlock(&tt_lazy_lock);
  return data;
}

int tt_tensor_donation(const tt_tensor_t *t) {
  pthread_mutex_lock(&tt_lazy_lock);
  int donor = !t->node && t->donor;
  pthread_mutex_unlock(&tt_lazy_lock);
  return donor;
}

void tt_tensor_propagate_alias(tt_tensor_t *input, tt_tensor_t *output) {
  pthread_mutex_lock(&tt_lazy_lock);
  if (!input->node)
    output->alias_id = input->id;
  else if (input->node->op == TT_OP_PARAM && input->node->tensor_id)
    output->alias_id = input->node->tensor_id;
  else
    output->alias_id = input->alias_id;
  pthread_mutex_unlock(&tt_lazy_lock);
}

tt_status_t tt_tensor_set_sharding(tt_tensor_t *t, const tt_sharding_t *sharding) {
  tt_sharding_t *copy = NULL;
  if (sharding) {
    TT_RETURN_IF_ERROR(tt_sharding_validate(sharding, &t->shape));
    copy = tt_sharding_copy(sharding);
    if (!copy) return tt_status_make(TT_RESOURCE_EXHAUSTED, "out of memory (sharding)");
  }
  tt_status_t st = NULL;
  pthread_mutex_lock(&tt_lazy_lock);
  /* In SPMD mode the storage of data follows its annotation: shards of a
   * layout the annotation no longer names are assembled into one buffer
   * first, then a tiled annotation splits one buffer into shards. Both are
   * queued programs: nothing waits here. */
  if (!t->node && t->shards && !tt_sharding_equal(t->shards->layout, sharding))
    st = tt_spmd_unshard_locked(t);
  if (!st && t->node) st = tt_node_set_sharding(t->node, sharding);
  if (!st && t->data_node) st = tt_node_set_sharding(t->data_node, sharding);
  if (!st) {
    free(t->sharding);
    t->sharding = copy;
    copy = NULL;
    /* Cleared: reports no layout until its next sync (PyTorch/XLA). */
    if (!sharding) t->cut_result = 0;
    st = tt_spmd_shard_storage_locked(t);
  }
  /* An annotation moves a host-held value to the device (PyTorch/XLA's
   * mark_sharding uploads it as sharded data): as shards above when its
   * storage follows the annotation, else whole here. */
  if (!st && sharding) st = tt_tensor_upload_host_locked(t);
  /* Annotated data is read through its node from here on, as PyTorch/XLA's
   * annotation makes the tensor's device_data IR value. */
  if (!st && sharding && !t->node && !t->deleted && !tt_tensor_use_node(t))
    st = tt_status_make(TT_RESOURCE_EXHAUSTED, "out of memory (node)");
  pthread_mutex_unlock(&tt_lazy_lock);
  free(copy);
  return st;
}

const tt_sharding_t *tt_tensor_sharding(const tt_tensor_t *t) { return t->sharding; }

tt_status_t tt_tensor_op(tt_op_t op, int32_t device, tt_tensor_t *const *operands,
                         int32_t num_operands,
                         const int64_t *iattrs, int32_t num_iattrs, const double *fattrs,
                         int32_t num_fattrs, tt_tensor_t **out) {
  *out = NULL;
  tt_node_t *small[8];
  tt_node_t **nodes = num_operands <= 8 ? small : malloc(sizeof(*nodes) * (size_t)num_operands);
  if (!nodes) return tt_status_make(TT_RESOURCE_EXHAUSTED, "out of memory");
  if (num_operands) device = operands[0]->device;
  tt_status_t st = tt_check_device(device);
  if (st) {
    if (nodes != small) free(nodes);
    return st;
  }
  pthread_mutex_lock(&tt_lazy_lock);
  for (int32_t i = 0; i < num_operands && !st; ++i) {
    if (operands[i]->deleted) {
      st = tt_tensor_deleted_error(operands[i]);
      break;
    }
    nodes[i] = tt_tensor_use_node(operands[i]);
    if (!nodes[i]) st = tt_status_make(TT_RESOURCE_EXHAUSTED, "out of memory (node)");
  }
  tt_node_t *n = NULL;
  if (!st) st = tt_node_create(op, device, nodes, num_operands, iattrs, num_iattrs, fattrs,
                               num_fattrs, &n);
  tt_tensor_t *t = NULL;
  if (!st && (tt_debug_flags() & TT_DEBUG_IR_FRAMES)) tt_debug_attach_node_frames(n);
  if (!st) {
    t = tt_tensor_new_locked(device, n->dtype, &n->shape);
    if (!t) {
      tt_node_release(n);
      st = tt_status_make(TT_RESOURCE_EXHAUSTED, "out of memory (tensor)");
    } else {
      t->node = n;
    }
  }
  pthread_mutex_unlock(&tt_lazy_lock);
  if (nodes != small) free(nodes);
  if (st) return st;
  *out = t;
  return NULL;
}

void tt_tensor_retain(tt_tensor_t *t) { __atomic_add_fetch(&t->refcount, 1, __ATOMIC_RELAXED); }

void tt_tensor_release(tt_tensor_t *t) {
  if (!t || __atomic_sub_fetch(&t->refcount, 1, __ATOMIC_ACQ_REL) != 0) return;
  pthread_mutex_lock(&tt_lazy_lock);
  if (t->prev) t->prev->next = t->next;
  else tt_live_head = t->next;
  if (t->next) t->next->prev = t->prev;
  tt_live_count--;
  tt_node_t *node = t->node, *data_node = t->data_node;
  pthread_mutex_unlock(&tt_lazy_lock);
  tt_node_release(node);
  tt_node_release(data_node);
  tt_buffer_release(t->buffer);
  tt_shard_set_release(t->shards);
  free(t->host);
  free(t->sharding);
  free(t);
}

int32_t tt_tensor_device(const tt_tensor_t *t) { return t->device; }
tt_dtype_t tt_tensor_dtype(const tt_tensor_t *t) { return t->dtype; }
const tt_shape_t *tt_tensor_shape(const tt_tensor_t *t) { return &t->shape; }
int64_t tt_tensor_id(const tt_tensor_t *t) { return t->id; }
int tt_tensor_is_pending(const tt_tensor_t *t) { return t->node != NULL; }

int tt_tensor_is_placeholder(const tt_tensor_t *t) {
  pthread_mutex_lock(&tt_lazy_lock);
  int deleted = t->deleted;
  pthread_mutex_unlock(&tt_lazy_lock);
  return deleted;
}

tt_status_t tt_tensor_deleted_error(const tt_tensor_t *t) {
  char dims[160];
  size_t len = 0;
  dims[0] = 0;
  for (int32_t d = 0; d < t->shape.rank && len < sizeof(dims); ++d)
    len += (size_t)snprintf(dims + len, sizeof(dims) - len, d ? ",%lld" : "%lld",
                            (long long)t->shape.dims[d]);
  return tt_status_make(TT_INVALID_ARGUMENT,
                        "buffer with shape %s[%s] on device CPU:%d is deleted: its data was "
                        "donated to a computation (_set_buffer_donation)",
                        tt_dtype_name(t->dtype), dims, t->device);
}

void tt_tensor_delete_donated_locked(const tt_buffer_t *b) {
  for (tt_tensor_t *t = tt_live_head; t; t = t->next) {
    if (t->node || t->buffer != b) continue;
    tt_buffer_release(t->buffer);
    t->buffer = NULL;
    tt_node_release(t->data_node);
    t->data_node = NULL;
    t->donor = 0;
    t->deleted = 1;
  }
}
tt_node_t *tt_tensor_node(const tt_tensor_t *t) { return t->node; }

int64_t tt_lazy_live_tensors(void) {
  pthread_mutex_lock(&tt_lazy_lock);
  int64_t n = tt_live_count;
  pthread_mutex_unlock(&tt_lazy_lock);
  return n;
}

int64_t tt_lazy_live_count_locked(void) { return tt_live_count; }

int32_t tt_lazy_pending_on_locked(int32_t device, tt_tensor_t **out) {
  int32_t n = 0;
  for (tt_tensor_t *t = tt_live_head; t; t = t->next)
    if (t->device == device && t->node && !t->derived) out[n++] = t;
  return n;
}

tt_status_t tt_tensor_to_host(tt_tensor_t *t, void *host, size_t nbytes) {
  TT_RETURN_IF_ERROR(tt_lazy_sync_tensors(&t, 1, 0));
  pthread_mutex_lock(&tt_lazy_lock);
  if (t->host) { /* still on the host: no transfer */
    size_t have = (size_t)tt_shape_numel(&t->shape) * tt_dtype_size(t->dtype);
    if (nbytes != have) {
      pthread_mutex_unlock(&tt_lazy_lock);
      return tt_status_make(TT_INVALID_ARGUMENT, "to_host: %zu bytes requested, tensor %lld "
                            "holds %zu", nbytes, (long long)t->id, have);
    }
    if (nbytes) memcpy(host, t->host, nbytes);
    pthread_mutex_unlock(&tt_lazy_lock);
    return NULL;
  }
  tt_buffer_t *b = t->buffer;
  if (b) tt_buffer_retain(b);
  tt_shard_set_t *shards = b ? NULL : t->shards;
  tt_shard_set_retain(shards);
  tt_status_t deleted = t->deleted ? tt_tensor_deleted_error(t) : NULL;
  /* SPMD mode's device data is sharded data (one shard per device, or
   * replicated): PyTorch/XLA reassembles it for each read, counted so. */
  int virtual_device = tt_virtual_device_locked();
  pthread_mutex_unlock(&tt_lazy_lock);
  if (deleted) return deleted;
  tt_status_t st = NULL;
  if (shards) { /* assembled here, outside the engine lock */
    st = tt_shard_set_to_host(shards, &t->shape, t->dtype, host, nbytes);
    tt_shard_set_release(shards);
  } else {
    if (!b)
      return tt_status_make(TT_INTERNAL, "tensor %lld has no value after sync", (long long)t->id);
    st = tt_buffer_to_host(b, host, nbytes);
    tt_buffer_release(b);
  }
  /* PyTorch/XLA's name for data read back from a device (its
   * TransferFromDevice). */
  if (!st) tt_metric_add("InboundData", TT_UNIT_BYTES, (double)nbytes);
  if (!st && virtual_device) tt_counter_add("ReplicateShardedData", 1);
  return st;
}

tt_status_t tt_tensor_buffer_address(tt_tensor_t *t, uintptr_t *out) {
  *out = 0;
  pthread_mutex_lock(&tt_lazy_lock);
  tt_status_t up = tt_tensor_upload_host_locked(t);
  if (up) {
    pthread_mutex_unlock(&tt_lazy_lock);
    return up;
  }
  tt_buffer_t *b = t->node ? NULL : t->buffer;
  if (b) tt_buffer_retain(b);
  pthread_mutex_unlock(&tt_lazy_lock);
  if (!b && !t->node && t->shards)
    return tt_status_make(TT_INVALID_ARGUMENT,
                          "Could not get the buffer pointer for a sharded XLATensor: its data "
                          "is held as one shard per device");
  if (!b)
    return tt_status_make(TT_INVALID_ARGUMENT,
                          "Could not get the buffer pointer for XLATensor with IR that's not "
                          "DeviceData");
  tt_status_t st = tt_buffer_wait(b);
  if (!st) *out = (uintptr_t)tt_buffer_data(b);
  tt_buffer_release(b);
  return st;
}

tt_status_t tt_tensor_to_device(tt_tensor_t *t, int32_t device, tt_tensor_t **out) {
  *out = NULL;
  TT_RETURN_IF_ERROR(tt_check_device(device));
  size_t nbytes = (size_t)tt_shape_numel(&t->shape) * tt_dtype_size(t->dtype);
  void *tmp = malloc(nbytes ? nbytes : 1);
  if (!tmp) return tt_status_make(TT_RESOURCE_EXHAUSTED, "out of memory (transfer)");
  tt_status_t st = tt_tensor_to_host(t, tmp, nbytes);
  if (!st) st = tt_tensor_from_host(device, t->dtype, &t->shape, tmp, out);
  free(tmp);
  return st;
}
