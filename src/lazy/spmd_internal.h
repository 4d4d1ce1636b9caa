/* What the lazy core's SPMD files share (not a public interface).
 *
 * shards.c         shard sets, tile copies between host values and shards
 * spmd_programs.c  the small per-device programs that move data between one
 *                  buffer and shards (slice a buffer into shards, assemble
 *                  shards into one buffer), queued without waiting
 * spmd_cut.c       a cut in SPMD mode: propagate, partition, queue one
 *                  program per device, keep tiled outputs as shards
 * spmd_tensor.c    the tensor-level calls of torchtpu/spmd_exec.h
 *
 * Functions named *_locked expect the engine lock held; none of them waits
 * for a buffer (device workers wait for their jobs' inputs). */
#ifndef TORCHTPU_LAZY_SPMD_INTERNAL_H_
#define TORCHTPU_LAZY_SPMD_INTERNAL_H_

#include "torchtpu/spmd_exec.h"

struct tt_tensor_s;

/* Bytes of one shard of a tensor of shape/dtype under layout (0 on a
 * layout that does not fit). */
size_t tt_spmd_shard_bytes(const tt_sharding_t *layout, const tt_shape_t *shape,
                           tt_dtype_t dtype);
/* Copies partition p's tile between global (row-major, shape) and shard
 * (padded shard shape): to_global 1 writes global, else shard (its padding
 * zeroed). es: element size. */
tt_status_t tt_spmd_tile_copy(const tt_sharding_t *layout, const tt_shape_t *shape, int32_t p,
                              size_t es, void *global, void *shard, int to_global);

/* Several processes (docs/spmd.md "Several processes"): a mesh holds the
 * job's global device ids; partition p runs on global device p, i.e. on
 * local device p - tt_spmd_device_base() of the process holding it. A
 * shard set has a buffer for every partition of this process and NULL for
 * the others'. With one process the base is 0 and every partition is
 * local. */
int32_t tt_spmd_device_base(void);
/* Every process's devices together (the largest mesh). */
int32_t tt_spmd_global_devices(void);
/* Whether partition p runs in this process. */
int tt_spmd_is_local(int32_t p);

/* Whether partitioned execution is on (engine lock held). */
int tt_spmd_on_locked(void);
/* SPMD mode's virtual device (tt_lazy_set_virtual_device), engine lock held. */
int tt_virtual_device_locked(void);

/* A new shard set over layout whose buffer p is partition p's shard of
 * full (shape, dtype), made by a slice program queued on device p. */
tt_status_t tt_spmd_slice_locked(tt_buffer_t *full, const tt_shape_t *shape, tt_dtype_t dtype,
                                 const tt_sharding_t *layout, tt_shard_set_t **out);
/* A pending buffer on device holding the global value of s (shape, dtype),
 * made by an assemble program queued on device. */
tt_status_t tt_spmd_assemble_locked(tt_shard_set_t *s, const tt_shape_t *shape,
                                    tt_dtype_t dtype, int32_t device, tt_buffer_t **out);

/* The storage of materialized tensor t after its annotation changed: one
 * buffer annotated tiled (over 2 .. min(27, devices) partitions) becomes
 * shards (tt_spmd_shard_storage_locked; otherwise nothing changes), shards
 * become one buffer on t's device (tt_spmd_unshard_locked). t's data node
 * is dropped (pending ops keep the one they hold). */
tt_status_t tt_spmd_shard_storage_locked(struct tt_tensor_s *t);
tt_status_t tt_spmd_unshard_locked(struct tt_tensor_s *t);
/* 1 when s tiles some dim of a rank-`rank` value into more than one tile. */
int tt_spmd_is_tiled(const tt_sharding_t *s, int32_t rank);

/* Tries to run the graph of roots (owners[r] the tensor of roots[r], all on
 * device) partitioned (step: a step's sync, for the donor count). *handled 0: the cut should run it whole as before
 * (not SPMD mode, nothing sharded, or the partitioner refused it:
 * SpmdPartitionFallback counts those); 1: queued, the owners hold the
 * results. */
tt_status_t tt_spmd_cut_locked(tt_node_t **roots, struct tt_tensor_s **owners, int32_t nr,
                               int32_t device, int step, int *handled);

#endif /* TORCHTPU_LAZY_SPMD_INTERNAL_H_ */
