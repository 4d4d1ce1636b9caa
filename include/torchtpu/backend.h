/* Backends: what runs an optimised graph.
 *
 * The lazy layer records, cuts and optimises graphs; the runtime owns
 * devices, buffers and per-device queues. Neither knows how a graph is
 * executed: they ask the active backend, a table of functions in the
 * style of a PJRT C API or IREE HAL driver. Two implementations exist:
 * - "cpu" (src/backends/cpu/): the engine's own executor, tier-0 kernels
 *   per instruction and tier-1 generated code for fused instructions;
 * - "pjrt" (src/backends/pjrt/engine.c): a PJRT plugin, each graph
 *   emitted as StableHLO, compiled once and run with copies in and out.
 *   It is made active by tt_pjrt_engine_enable and inactive again by
 *   tt_pjrt_engine_disable; with fallback it runs a graph its plugin
 *   cannot on the CPU backend.
 *
 * Ownership and threads:
 * - Backends are static objects that live for the process; the table is
 *   never freed and its functions may be called from any thread (the
 *   compile driver's, each device's worker) at the same time.
 * - An executable (runtime.h's tt_executable_t) is made by the backend
 *   active when the graph is compiled (prepare) and remembers it: its
 *   prepared state is released by that backend's release. It may be
 *   executed by whichever backend is active at execution time (a cached
 *   executable outlives a switch), so every backend's execute accepts an
 *   executable prepared by any backend whose prepared state it can read:
 *   today every prepare produces the CPU backend's plan (the PJRT backend
 *   prepares one for its fallback), which the CPU backend finds by the
 *   preparing backend's prepare function (src/backends/cpu/backend.c).
 *
 * Failures: functions returning tt_status_t return NULL on success or a
 * status the caller owns. A backend never aborts on a graph it cannot run;
 * it returns TT_UNIMPLEMENTED (no kernel, too many participants) or the
 * compiler's error naming the graph, and leaves outputs unspecified. Out of
 * memory is TT_RESOURCE_EXHAUSTED.
 */
#ifndef TORCHTPU_BACKEND_H_
#define TORCHTPU_BACKEND_H_

#include "torchtpu/base.h"
#include "torchtpu/ir.h"
#include "torchtpu/passes.h"
#include "torchtpu/runtime.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct tt_backend_s tt_backend_t;

struct tt_backend_s {
  /* Short lower-case name ("cpu", "pjrt"): metrics, messages. */
  const char *name;

  /* Adjusts the pass pipeline's options (already read from the
   * environment) for graphs this backend will run: e.g. a backend that
   * emits StableHLO turns off forms only the engine's kernels run
   * (opts->no_engine_forms). NULL: the options as they are. Called once per
   * graph compile, on the compiling thread. */
  void (*configure_passes)(const tt_backend_t *self, tt_optimize_options_t *opts);

  /* Prepares an optimised graph for execution: plans buffers, decides
   * what runs where. graph is borrowed (the executable owns it and
   * outlives the prepared state). On success *out_prepared is owned by the
   * executable and freed with release; on failure nothing is kept and the
   * status says why (TT_RESOURCE_EXHAUSTED for out of memory). */
  tt_status_t (*prepare)(const tt_backend_t *self, const tt_graph_t *graph, void **out_prepared);
  /* Frees what prepare made (NULL is allowed). */
  void (*release)(const tt_backend_t *self, void *prepared);

  /* Executes exe on the calling thread (a device worker; device < 0: the
   * caller's own thread, tt_executable_run). inputs[k] is graph input k
   * (buffers ready and retained by the caller for the call). output_data[r]
   * is dense host-visible memory of output r's byte size, written by the
   * call; its contents are unspecified when the call fails. Returns the
   * execution's status (owned by the caller). */
  tt_status_t (*execute)(const tt_backend_t *self, tt_executable_t *exe, int32_t device,
                         const tt_input_value_t *inputs, void *const *output_data);

  /* Optional: gives each output of a queued execution its memory
   * (out_data[r], nbytes of outputs[r]), e.g. taking over an input buffer
   * only this execution references (donation). NULL: each output is
   * allocated on the device. Called by the device worker just before
   * execute; on failure outputs already bound keep their memory (the
   * buffers free it). */
  tt_status_t (*bind_outputs)(const tt_backend_t *self, tt_executable_t *exe, int32_t device,
                              const tt_input_value_t *inputs, tt_buffer_t *const *outputs,
                              void **out_data);
};

/* The backend graphs are compiled for and executed on now: the CPU
 * backend unless another was made active. Never NULL. */
const tt_backend_t *tt_backend_active(void);
/* Makes backend active for compiles and executions that start after the
 * call (NULL: the CPU backend). Executions already running finish on the
 * backend they started on. */
void tt_backend_set_active(const tt_backend_t *backend);

/* The CPU backend (src/backends/cpu/backend.c). */
const tt_backend_t *tt_backend_cpu(void);

/* The backend that prepared exe (its release frees exe's prepared state),
 * and that state. */
const tt_backend_t *tt_executable_backend(const tt_executable_t *exe);
void *tt_executable_prepared(const tt_executable_t *exe);

#ifdef __cplusplus
}
#endif
#endif /* TORCHTPU_BACKEND_H_ */
