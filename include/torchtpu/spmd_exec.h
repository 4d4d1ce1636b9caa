/* Running SPMD programs partitioned on the engine's own devices
 * (docs/spmd.md, "Partitioned execution").
 *
 * In SPMD mode (tt_lazy_set_spmd_partitioning) a graph cut whose graph
 * carries a sharding annotation or reads sharded storage is propagated
 * (tt_pass_propagate_sharding), split into one program per partition
 * (tt_partition_program) and partition p's program is queued on engine
 * device p. A tiled value is then held as sharded storage: one buffer per
 * partition, buffer p on device p, each of the shard shape (ceil(dim /
 * tiles) per dim, the tail padded), laid out by one sharding. Replicated
 * values keep one buffer that every partition reads (the CPU devices share
 * memory). */
#ifndef TORCHTPU_SPMD_EXEC_H_
#define TORCHTPU_SPMD_EXEC_H_

#include "torchtpu/lazy.h"
#include "torchtpu/runtime.h"

#ifdef __cplusplus
extern "C" {
#endif

/* The channel id a partitioned program's collectives carry:
 * TT_SPMD_PARTITION_CHANNEL + N for an execution of N partitions. Its
 * members are those partitions (devices 0 .. N - 1), all queued together,
 * so they meet without a torch_xla.launch, and a collective_permute's
 * members are all N (src/backends/cpu/exec_collective.c). */
#define TT_SPMD_PARTITION_CHANNEL ((int64_t)0x53504D44 << 8) /* "SPMD" */
/* N for a channel made so; 0 for any other channel. */
static inline int32_t tt_spmd_channel_partitions(int64_t channel) {
  return channel > TT_SPMD_PARTITION_CHANNEL && channel <= TT_SPMD_PARTITION_CHANNEL + 255
             ? (int32_t)(channel - TT_SPMD_PARTITION_CHANNEL)
             : 0;
}

/* Sharded storage (refcounted; shared by a tensor and the PARAM nodes made
 * over it). */
typedef struct tt_shard_set_s {
  int32_t refcount; /* atomic */
  int32_t num;      /* partitions = layout->num_devices */
  tt_sharding_t *layout; /* owned, tiled */
  tt_buffer_t *buffers[]; /* num entries, owned refs; buffers[p] on device p */
} tt_shard_set_t;

/* A set of n NULL buffers over a copy of layout (refcount 1); NULL when out
 * of memory. */
tt_shard_set_t *tt_shard_set_new(const tt_sharding_t *layout);
void tt_shard_set_retain(tt_shard_set_t *s);
void tt_shard_set_release(tt_shard_set_t *s);
/* Waits for every shard (never call it holding the engine lock) and writes
 * the global value (shape, dtype) into host, cropping the padding. */
tt_status_t tt_shard_set_to_host(tt_shard_set_t *s, const tt_shape_t *shape, tt_dtype_t dtype,
                                 void *host, size_t nbytes);

/* SPMD mode's partitioned execution on (1) or off (0, the default: cuts
 * run whole on their device, as outside SPMD mode). */
void tt_lazy_set_spmd_partitioning(int on);
int tt_lazy_spmd_partitioning(void);

/* SPMD mode itself (PyTorch/XLA's virtual device, on from use_spmd() on,
 * whether or not programs run partitioned): data copied to a device stays
 * on the host until used (tt_tensor_from_host_deferred), and every
 * execution is a replicated one (ExecuteReplicated,
 * tt_runtime_replicated_begin). Off by default. */
void tt_lazy_set_virtual_device(int on);
int tt_lazy_virtual_device(void);

/* t's sharded storage: the layout (a malloc'd copy the caller frees; NULL
 * when t is not held as shards: pending, one buffer, or a placeholder).
 * Syncs t first when it is pending. */
tt_status_t tt_tensor_storage_layout(tt_tensor_t *t, tt_sharding_t **out_layout);
/* The layout t's materialized value has, for reporting (PyTorch/XLA sets
 * a synced tensor's sharding from its program's output shardings): its
 * shards' layout when held as shards; a replicated sharding (num_devices
 * 0) when a graph cut wrote it as one buffer; NULL otherwise (pending,
 * uploaded data, a placeholder). Never syncs. *out_layout is malloc'd. */
tt_status_t tt_tensor_result_layout(tt_tensor_t *t, tt_sharding_t **out_layout);
/* Copies partition p's shard buffer of t (padded shard shape, nbytes) to
 * host, waiting for it. TT_INVALID_ARGUMENT when t is not held as
 * shards. */
tt_status_t tt_tensor_shard_to_host(tt_tensor_t *t, int32_t p, void *host, size_t nbytes);
/* Replaces t's value with shards written from host (hosts[p]: partition
 * p's padded shard, layout's shard shape) laid out by layout (tiled; its
 * device count at most the runtime's). Each becomes a buffer on device p. */
tt_status_t tt_tensor_load_shards(tt_tensor_t *t, const tt_sharding_t *layout,
                                  const void *const *hosts, size_t shard_bytes);

#ifdef __cplusplus
}
#endif
#endif /* TORCHTPU_SPMD_EXEC_H_ */
