/* torchtpu runtime: devices, buffers, executables, per-device queues.
 *
 * The runtime exposes N virtual devices. Each device owns one worker
 * thread and a FIFO queue: executions on a device run in submission order,
 * executions on different devices run concurrently. A buffer lives on one
 * device; it is created "pending" when its producer is queued and becomes
 * ready (or failed, carrying the producer's error) when that producer ends.
 * What runs an execution is the active backend (backend.h).
 */
#ifndef TORCHTPU_RUNTIME_H_
#define TORCHTPU_RUNTIME_H_

#include "torchtpu/base.h"
#include "torchtpu/ir.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Starts the runtime with num_devices virtual devices (1..1024). Calling it
 * again with the same count is a no-op; another count is
 * TT_INVALID_ARGUMENT (the runtime is already initialized). */
tt_status_t tt_runtime_init(int32_t num_devices);
int32_t tt_runtime_device_count(void); /* 0 before init */
/* Blocks until every queued execution on device (or on all devices when
 * device < 0) has finished. */
void tt_runtime_wait(int32_t device);
/* Blocks while device (every device when < 0) has TORCHTPU_MAX_INFLIGHT
 * (default 2) or more executions queued or running: a step boundary calls
 * it before queueing the next graph, so a loop that never reads a value
 * runs at most that far ahead of the device instead of queueing every
 * step's inputs (as PyTorch/XLA's mark_step waits for the device). */
void tt_runtime_throttle(int32_t device);

/* Eager mode (PyTorch/XLA's torch_xla.experimental.eager_mode, off inside
 * torch_xla.compile regions): while on, a graph compile is sampled in the
 * EagerOpCompileTime metric instead of CompileTime, and an execution enqueued
 * while on is sampled in EagerOpExecuteTime instead of ExecuteTime (the
 * setting at enqueue time counts, not the one when the device runs it).
 * Nothing else changes: the caller still cuts and syncs each op's graph. */
void tt_set_eager_mode(int on);
int tt_eager_mode(void);

/* Replicated executions (PyTorch/XLA's ExecuteReplicated, the path of
 * every execution in SPMD mode): the programs this thread enqueues between
 * tt_runtime_replicated_begin and tt_runtime_replicated_end are one
 * execution, sampled once in ExecuteReplicatedTime (from the first
 * program's start to the last one's end, taken when the last finishes)
 * instead of ExecuteTime / EagerOpExecuteTime each. _end returns how many
 * programs were enqueued. Calls do not nest. */
void tt_runtime_replicated_begin(void);
int32_t tt_runtime_replicated_end(void);

/* ---- buffers (refcounted) ---- */
/* A ready buffer holding a copy of nbytes from host (TransferToDevice). */
tt_status_t tt_buffer_from_host(int32_t device, const void *host, size_t nbytes,
                                tt_buffer_t **out_buffer);
/* A pending buffer of nbytes, to be filled by a queued execution. */
tt_buffer_t *tt_buffer_create_pending(int32_t device, size_t nbytes);
void tt_buffer_retain(tt_buffer_t *buffer);
void tt_buffer_release(tt_buffer_t *buffer);
int32_t tt_buffer_device(const tt_buffer_t *buffer);
size_t tt_buffer_size(const tt_buffer_t *buffer);
/* Waits until ready, then copies nbytes to host (TransferFromDevice). The
 * producer's error, if it failed, is returned (a copy the caller owns). */
tt_status_t tt_buffer_to_host(tt_buffer_t *buffer, void *host, size_t nbytes);
/* Waits until ready; returns the producer's error (copy) or NULL. */
tt_status_t tt_buffer_wait(tt_buffer_t *buffer);
/* Data pointer of a ready buffer (valid while a reference is held). */
void *tt_buffer_data(tt_buffer_t *buffer);

/* ---- executables ---- */
typedef struct tt_executable_s tt_executable_t;

/* Prepares graph for execution with the active backend (backend.h: the
 * CPU backend plans buffers and pairs). Takes ownership of graph on
 * success; on failure the graph stays the caller's. */
tt_status_t tt_executable_create(tt_graph_t *graph, tt_executable_t **out_exe);
void tt_executable_retain(tt_executable_t *exe);
void tt_executable_release(tt_executable_t *exe);
const tt_graph_t *tt_executable_graph(const tt_executable_t *exe);

/* One graph input value: a buffer (PARAM) or a scalar (SCALAR). */
typedef struct tt_input_value_s {
  tt_buffer_t *buffer; /* retained by the execution while queued */
  double scalar_f;
  int64_t scalar_i;
} tt_input_value_t;

/* Queues exe on device with the given inputs; outputs[i] are pending
 * buffers (retained until done) that become ready when it ends. Returns at
 * once (asynchronous). */
tt_status_t tt_executable_enqueue(tt_executable_t *exe, int32_t device,
                                  const tt_input_value_t *inputs,
                                  int32_t num_inputs, tt_buffer_t *const *outputs,
                                  int32_t num_outputs);
/* As tt_executable_enqueue, but the job does not start until
 * tt_runtime_release_held(device): the caller can drop its own references
 * to the inputs first, so the execution sees whether it holds the last one
 * (which lets outputs take over input memory, see donation). Jobs behind a
 * held job wait too. */
tt_status_t tt_executable_enqueue_held(tt_executable_t *exe, int32_t device,
                                       const tt_input_value_t *inputs, int32_t num_inputs,
                                       tt_buffer_t *const *outputs, int32_t num_outputs);
void tt_runtime_release_held(int32_t device);

/* Runs exe synchronously on the calling thread (with the active backend)
 * into ready host memory (tests). outputs[i] must have the output's byte
 * size. */
tt_status_t tt_executable_run(tt_executable_t *exe,
                              const tt_input_value_t *inputs, void *const *outputs);

/* ---- tier-1 kernels (the CPU backend's; no-ops for executables another
 * backend prepared) ----
 * A compiled fused kernel computes out[i] for i in [begin, end). */
typedef void (*tt_fused_fn_t)(const void *const *inputs, void *out, int64_t begin,
                              int64_t end);
/* Installs fn for fused instruction instr of exe's graph (atomically; the
 * next execution uses it). handle (may be NULL) is a dlopen handle the
 * executable closes when it is destroyed; one handle per executable. */
void tt_executable_install_kernel(tt_executable_t *exe, int32_t instr, tt_fused_fn_t fn);
void tt_executable_adopt_library(tt_executable_t *exe, void *dl_handle);
/* Counts an execution request; returns the count before this one. */
int64_t tt_executable_count_run(tt_executable_t *exe);
/* Number of installed tier-1 kernels. */
int32_t tt_executable_num_kernels(const tt_executable_t *exe);

/* ---- buffer planning (the CPU backend's, src/backends/cpu/) ----
 * Places n buffers (sizes in bytes, inclusive lifetimes [start[i], end[i]]
 * in instruction order) in one arena so that buffers whose lifetimes
 * overlap never share bytes: greedy by decreasing size, each in the
 * smallest gap that fits (best fit). Offsets are 64-byte aligned.
 * out_offsets has n entries; *out_arena_bytes receives the arena size. */
tt_status_t tt_buffer_plan(int32_t n, const size_t *sizes, const int32_t *start,
                           const int32_t *end, size_t *out_offsets, size_t *out_arena_bytes);
/* The executable's plan (made once at tt_executable_create): the arena
 * every execution takes for its intermediates, and the bytes those
 * intermediates would take without reuse. TORCHTPU_BUFFER_PLAN=0 disables
 * planning (each intermediate is allocated and freed at its last use):
 * both are then 0. */
size_t tt_executable_arena_bytes(const tt_executable_t *exe);
size_t tt_executable_planned_bytes(const tt_executable_t *exe);

/* Bytes currently allocated on device, and the peak since start. */
void tt_runtime_memory_stats(int32_t device, int64_t *out_bytes_in_use,
                             int64_t *out_peak_bytes);

#ifdef __cplusplus
}
#endif
#endif /* TORCHTPU_RUNTIME_H_ */
