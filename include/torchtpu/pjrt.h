/* The PJRT backend: drives any PJRT C API plugin (libtpu for TPUs, a JAX
 * CUDA plugin, XLA's CPU plugin for testing) through the shared library's
 * `GetPjrtApi` table. See docs/pjrt.md.
 *
 * Objects and ownership:
 * - tt_pjrt_client_t: a loaded plugin plus one plugin client. Reference
 *   counted; executables and buffers retain their client, so releasing the
 *   caller's reference while they live is safe. A plugin library, once
 *   loaded, stays loaded for the life of the process (plugins do not
 *   support unloading) and is initialised once.
 * - tt_pjrt_executable_t, tt_pjrt_buffer_t: owned by whoever created them,
 *   freed with their destroy function.
 * - tt_pjrt_topology_t: a plugin's description of devices to compile for
 *   ahead of time (no client, no hardware needed); owned by its creator.
 * Every plugin error comes back as a tt_status_t carrying the plugin's own
 * message, prefixed by the call that failed.
 */
#ifndef TORCHTPU_PJRT_H_
#define TORCHTPU_PJRT_H_

#include <stddef.h>
#include <stdint.h>

#include "torchtpu/base.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct tt_pjrt_client_s tt_pjrt_client_t;
typedef struct tt_pjrt_executable_s tt_pjrt_executable_t;
typedef struct tt_pjrt_buffer_s tt_pjrt_buffer_t;

/* A client create option passed to the plugin as a named value (for XLA's
 * CPU plugin e.g. "cpu_device_count" = 4). Which names a plugin accepts is
 * the plugin's business; it rejects unknown ones with its own message. */
typedef enum tt_pjrt_option_kind_e {
  TT_PJRT_OPTION_STRING = 0,
  TT_PJRT_OPTION_INT64 = 1,
  TT_PJRT_OPTION_FLOAT = 3,
  TT_PJRT_OPTION_BOOL = 4,
} tt_pjrt_option_kind_t;

typedef struct tt_pjrt_option_s {
  const char *name;
  tt_pjrt_option_kind_t kind;
  const char *string_value;
  int64_t int64_value;
  double float_value; /* sent as a float */
  int bool_value;
} tt_pjrt_option_t;

/* Loads the plugin at `library_path` (dlopen, GetPjrtApi, version and table
 * size checks, PJRT_Plugin_Initialize once per library) and creates a
 * client with `options` (may be NULL when num_options is 0). On success
 * *out_client holds one reference (tt_pjrt_client_release).
 * Fails with TT_IO_ERROR when the file is missing or not loadable, TT_
 * INVALID_ARGUMENT when it does not export GetPjrtApi or its API version or
 * table is not one this backend speaks, and with the plugin's message when
 * initialisation or client creation fails. */
tt_status_t tt_pjrt_client_create(const char *library_path, const tt_pjrt_option_t *options,
                                  size_t num_options, tt_pjrt_client_t **out_client);
void tt_pjrt_client_retain(tt_pjrt_client_t *client);
/* Drops a reference; the plugin client is destroyed with the last one. */
void tt_pjrt_client_release(tt_pjrt_client_t *client);

/* Facts about a client; the strings live as long as the client. */
const char *tt_pjrt_client_library_path(const tt_pjrt_client_t *client);
const char *tt_pjrt_client_platform_name(const tt_pjrt_client_t *client);
const char *tt_pjrt_client_platform_version(const tt_pjrt_client_t *client);
void tt_pjrt_client_api_version(const tt_pjrt_client_t *client, int *out_major, int *out_minor);

/* Addressable devices, in the plugin's order. */
typedef struct tt_pjrt_device_info_s {
  int id;           /* the plugin's global device id */
  const char *kind; /* e.g. "cpu", "TPU v5 lite"; lives as long as the client */
} tt_pjrt_device_info_t;
size_t tt_pjrt_client_device_count(const tt_pjrt_client_t *client);
/* TT_OUT_OF_RANGE for index >= device count. */
tt_status_t tt_pjrt_client_device_info(const tt_pjrt_client_t *client, size_t index,
                                       tt_pjrt_device_info_t *out_info);

/* What a compile asks for; serialised as an xla.CompileOptionsProto. */
typedef struct tt_pjrt_compile_config_s {
  int64_t num_replicas;   /* >= 1 */
  int64_t num_partitions; /* >= 1 */
  int64_t device_ordinal; /* -1: not pinned to a device */
  int portable;           /* 1: may run on any device (tt_pjrt_execute's index) */
  /* 1: XLA's SPMD partitioner cuts the program by its sharding annotations
   * into num_partitions per-device programs (docs/pjrt.md, "SPMD"). */
  int use_spmd_partitioning;
  /* NULL (the plugin's default), or num_replicas * num_partitions global
   * device ids: entry [r * num_partitions + p] runs replica r of partition
   * p. Borrowed for the call. */
  const int64_t *device_assignment;
} tt_pjrt_compile_config_t;
/* One replica, one partition, not pinned, not portable, no SPMD, the
 * plugin's device assignment. */
tt_pjrt_compile_config_t tt_pjrt_compile_config_default(void);

/* Compiles `program` (size bytes, need not be NUL-terminated) in `format`
 * ("mlir": StableHLO/MHLO text or bytecode; "hlo": a serialized HloModule).
 * config NULL means tt_pjrt_compile_config_default(). *out_executable is
 * owned by the caller (tt_pjrt_executable_destroy). Fails with the plugin's
 * message (a parse or verifier error names the line). */
tt_status_t tt_pjrt_compile(tt_pjrt_client_t *client, const char *program, size_t size,
                            const char *format, const tt_pjrt_compile_config_t *config,
                            tt_pjrt_executable_t **out_executable);
size_t tt_pjrt_executable_num_outputs(const tt_pjrt_executable_t *executable);
/* The client the executable was compiled by (borrowed; lives at least as
 * long as the executable). */
tt_pjrt_client_t *tt_pjrt_executable_client(const tt_pjrt_executable_t *executable);
void tt_pjrt_executable_destroy(tt_pjrt_executable_t *executable);

/* Copies `nbytes` of dense row-major host data of `dtype` and `shape` to the
 * addressable device `device_index`, waiting until the host memory is no
 * longer needed. Fails with TT_INVALID_ARGUMENT when nbytes does not match
 * the shape, TT_OUT_OF_RANGE for a bad device index. *out_buffer is owned by
 * the caller (tt_pjrt_buffer_destroy). */
tt_status_t tt_pjrt_buffer_from_host(tt_pjrt_client_t *client, size_t device_index,
                                     tt_dtype_t dtype, const tt_shape_t *shape,
                                     const void *data, size_t nbytes,
                                     tt_pjrt_buffer_t **out_buffer);
tt_dtype_t tt_pjrt_buffer_dtype(const tt_pjrt_buffer_t *buffer);
const tt_shape_t *tt_pjrt_buffer_shape(const tt_pjrt_buffer_t *buffer);
/* Dense size in bytes of the buffer's contents. */
size_t tt_pjrt_buffer_nbytes(const tt_pjrt_buffer_t *buffer);
/* Copies the buffer to `dst` (nbytes must equal tt_pjrt_buffer_nbytes) and
 * waits for the copy. */
tt_status_t tt_pjrt_buffer_to_host(tt_pjrt_buffer_t *buffer, void *dst, size_t nbytes);
void tt_pjrt_buffer_destroy(tt_pjrt_buffer_t *buffer);

/* Runs `executable` on addressable device `device_index` (must be 0 unless
 * it was compiled portable) with `args` (borrowed; on that device) and waits
 * for completion. On success out_outputs[0 .. num_outputs-1] receive new
 * buffers owned by the caller; out_outputs must have room for
 * tt_pjrt_executable_num_outputs(). Outputs with an element type torchtpu
 * has no dtype for fail with TT_UNIMPLEMENTED. */
tt_status_t tt_pjrt_execute(tt_pjrt_executable_t *executable, size_t device_index,
                            tt_pjrt_buffer_t *const *args, size_t num_args,
                            tt_pjrt_buffer_t **out_outputs);

/* The addressable devices an execution on all of the executable's devices
 * (tt_pjrt_execute_devices) runs on, as client device indices in
 * argument-list order: replicas x partitions of its device assignment. On
 * success *out_count is their number and out_indices[0 .. min(count,
 * capacity)-1] are filled. TT_UNIMPLEMENTED when the plugin lacks
 * PJRT_LoadedExecutable_AddressableDevices; TT_INTERNAL when it names a
 * device the client does not have. */
tt_status_t tt_pjrt_executable_devices(const tt_pjrt_executable_t *executable,
                                       size_t *out_indices, size_t capacity, size_t *out_count);

/* Runs `executable` once on all num_devices devices of its device
 * assignment in one PJRT_LoadedExecutable_Execute (the form replicated
 * and SPMD-partitioned programs need: their collectives meet inside this
 * one launch) and waits for every device. args is device-major:
 * args[d * num_args + i] is argument i for the d-th device of
 * tt_pjrt_executable_devices (borrowed; must live on that device).
 * On success out_outputs[d * num_outputs + k] (room for num_devices *
 * tt_pjrt_executable_num_outputs) receive new buffers owned by the caller;
 * on failure none. TT_INVALID_ARGUMENT when num_devices is not the
 * executable's device count or a buffer belongs to another client. */
tt_status_t tt_pjrt_execute_devices(tt_pjrt_executable_t *executable, size_t num_devices,
                                    tt_pjrt_buffer_t *const *args, size_t num_args,
                                    tt_pjrt_buffer_t **out_outputs);

/* ---- ahead-of-time compile for a topology (src/backends/pjrt/topology.c) ----
 *
 * A topology description names a set of devices a plugin can compile for
 * without them being attached and without a client: for libtpu, names such
 * as "v5e:2x2" (four TPU v5 lite chips) or "v4:2x2x1". Compiling for it
 * produces an executable that only a client on such devices could run; here
 * it is serialized (the plugin's own format) to prove the compile happened
 * and to be shipped. docs/pjrt.md, "TPU ahead-of-time compile".
 *
 * libtpu asks the GCE metadata server for the TPU environment when it
 * initialises unless TPU_SKIP_MDS_QUERY=1 is set; off GCE that costs
 * minutes of retries. Those variables are the caller's to set (the Python
 * layer sets TPU_SKIP_MDS_QUERY=1 when unset). */
typedef struct tt_pjrt_topology_s tt_pjrt_topology_t;

/* Loads the plugin at `library_path` as tt_pjrt_client_create does (same
 * load errors) but creates no client, then asks it for the topology
 * `topology_name` with `options` (the plugin's topology create options;
 * may be NULL when num_options is 0). *out_topology is owned by the caller
 * (tt_pjrt_topology_destroy). Fails with TT_UNIMPLEMENTED when the plugin
 * does not implement topologies or PJRT_Compile, with TT_INVALID_ARGUMENT
 * for a nameless option, and with the plugin's message when it refuses the
 * name (libtpu: "Your TPU topology name ... is invalid", "Invalid TPU
 * external name: TPU v9"; XLA's CPU plugin: "Topology not supported for CPU
 * compilation"). */
tt_status_t tt_pjrt_topology_create(const char *library_path, const char *topology_name,
                                    const tt_pjrt_option_t *options, size_t num_options,
                                    tt_pjrt_topology_t **out_topology);
void tt_pjrt_topology_destroy(tt_pjrt_topology_t *topology);

/* Facts about a topology; the strings live as long as the topology. */
const char *tt_pjrt_topology_name(const tt_pjrt_topology_t *topology);
const char *tt_pjrt_topology_library_path(const tt_pjrt_topology_t *topology);
const char *tt_pjrt_topology_platform_name(const tt_pjrt_topology_t *topology);    /* "tpu" */
const char *tt_pjrt_topology_platform_version(const tt_pjrt_topology_t *topology);
void tt_pjrt_topology_api_version(const tt_pjrt_topology_t *topology, int *out_major,
                                  int *out_minor);
size_t tt_pjrt_topology_device_count(const tt_pjrt_topology_t *topology);
/* Kind of device `index` (e.g. "TPU v5 lite"); TT_OUT_OF_RANGE for index >=
 * device count. *out_kind lives as long as the topology. */
tt_status_t tt_pjrt_topology_device_kind(const tt_pjrt_topology_t *topology, size_t index,
                                         const char **out_kind);

/* Compiles `program` (size bytes; "mlir": StableHLO text or bytecode, "hlo":
 * a serialized HloModule) for `topology` with PJRT_Compile and serializes
 * the result with PJRT_Executable_Serialize. config NULL means
 * tt_pjrt_compile_config_default(). On success *out_bytes is malloc'ed
 * (caller frees) and *out_size > 0. Fails with TT_INVALID_ARGUMENT for an
 * empty program or bad config, and with the plugin's message for anything it
 * refuses (parse and verifier errors name the line; a module needing more
 * devices than the topology has is refused by the plugin). */
tt_status_t tt_pjrt_topology_compile(tt_pjrt_topology_t *topology, const char *program,
                                     size_t size, const char *format,
                                     const tt_pjrt_compile_config_t *config, uint8_t **out_bytes,
                                     size_t *out_size);

/* ---- the lazy engine through a plugin (src/backends/pjrt/engine.c) ----
 *
 * When enabled, the plugin is the active backend (backend.h, "pjrt"): every
 * execution of an engine executable runs through the plugin: the
 * executable's graph is emitted as StableHLO and compiled once per graph
 * (cached by the graph's hash and canonical key for the life of the
 * process), the inputs (PARAM buffers, and SCALAR values as 0-d arrays, in
 * @main's argument order = the graph's input order) are copied to buffers
 * on the plugin device with the engine device's index, the executable runs,
 * and its results are copied into the engine's output memory. Host memory
 * stays the engine's: one copy in and one copy out per execution.
 * Counters: PjrtExecute, PjrtCompile, PjrtFallback; metrics PjrtCompileTime,
 * PjrtExecuteTime (transfers included). */

/* Routes executions through client (retained until
 * tt_pjrt_engine_disable). With fallback 0, a graph the plugin cannot run
 * (no StableHLO lowering, or a compile error such as an unknown custom call)
 * fails with a status naming the op and carrying the plugin's message; with
 * fallback 1 it runs on the engine's own CPU kernels instead, counted by
 * PjrtFallback. Call before the runtime starts executing; enabling twice
 * replaces the client. */
void tt_pjrt_engine_enable(tt_pjrt_client_t *client, int fallback);
/* Stops routing, drops the compiled-executable cache and the client. */
void tt_pjrt_engine_disable(void);
/* 1 while enabled. */
int tt_pjrt_engine_enabled(void);
/* The routed client (borrowed), or NULL. */
tt_pjrt_client_t *tt_pjrt_engine_client(void);
/* Number of graphs in the compiled-executable cache. */
size_t tt_pjrt_engine_cache_size(void);

#ifdef __cplusplus
}
#endif
#endif /* TORCHTPU_PJRT_H_ */
