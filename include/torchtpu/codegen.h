/* torchtpu tier-1 code generation: C source for a graph's fused kernels,
 * built by the system C compiler on a background thread, loaded with
 * dlopen, and kept in an optional persistent cache across processes.
 *
 * Tiers (TORCHTPU_TIER): "0" runs the tier-0 interpreter only; "1" compiles
 * a graph's kernels before its first execution; unset or "auto" runs tier 0
 * at once and compiles in the background once a graph repeats, swapping
 * the compiled kernels in between executions. Without a C compiler
 * (TORCHTPU_CC, default "cc") tier 0 serves alone after a one-time notice.
 */
#ifndef TORCHTPU_CODEGEN_H_
#define TORCHTPU_CODEGEN_H_

#include "torchtpu/ir.h"
#include "torchtpu/runtime.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Whether instruction i of graph can be generated (fused, every step's op
 * supported). */
int tt_codegen_supported(const tt_graph_t *graph, int32_t i);

/* C source defining `void tt_gen_<i>(...)` for every supported fused
 * instruction and `const char tt_gen_key[]` = key. Caller frees. NULL if
 * no instruction is supported (or out of memory). */
char *tt_codegen_emit(const tt_graph_t *graph, const char *key);

/* ---- the tier-1 service ---- */
typedef enum tt_tier_mode_e { TT_TIER_AUTO = 0, TT_TIER_0 = 1, TT_TIER_1 = 2 } tt_tier_mode_t;
tt_tier_mode_t tt_tier_mode(void);

/* Persistent cache directory (NULL disables); readonly never writes. */
tt_status_t tt_persistent_cache_init(const char *path, int readonly);
/* The directory in use, or NULL. */
const char *tt_persistent_cache_path(void);

/* Asks for tier-1 kernels for exe (retained while pending). With wait, the
 * kernels are built (or loaded from the persistent cache) before return;
 * otherwise on the background compiler thread. Failures leave tier 0 in
 * place and are reported once on stderr. */
void tt_tier1_request(tt_executable_t *exe, int wait);
/* Blocks until the background compiler is idle (tests, benchmarks). */
void tt_tier1_wait_idle(void);

#ifdef __cplusplus
}
#endif
#endif /* TORCHTPU_CODEGEN_H_ */
