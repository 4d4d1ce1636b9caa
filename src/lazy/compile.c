/* The compilation cache and the compile driver: a cut's roots become a
 * graph, the graph's executable comes from the cache or from the passes
 * (tt_graph_optimize) and the planner (tt_executable_create), and tier 1
 * code generation is requested when the tier mode asks for it. */
#include <stdlib.h>
#include <string.h>

#include "lazy/lazy_internal.h"
#include "torchtpu/metrics.h"
#include "torchtpu/debug.h"
#include "torchtpu/trace.h"
#include "torchtpu/codegen.h"
#include "torchtpu/passes.h"
#include "torchtpu/backend.h"
#include "torchtpu/runtime.h"

/* A chained hash table from a graph's structural hash to its executable;
 * entries compare the full cache key. Entries live as long as the process. */
#define TT_CACHE_BUCKETS 1024
typedef struct tt_cache_entry_s {
  struct tt_cache_entry_s *next;
  uint64_t hash;
  tt_executable_t *exe;
} tt_cache_entry_t;
static tt_cache_entry_t *tt_cache_[TT_CACHE_BUCKETS];
static int64_t tt_cache_count_ = 0;

tt_executable_t *tt_cache_lookup_locked(const tt_graph_t *g) {
  for (tt_cache_entry_t *e = tt_cache_[g->hash % TT_CACHE_BUCKETS]; e; e = e->next) {
    const tt_graph_t *cg = tt_executable_graph(e->exe);
    if (e->hash == g->hash && cg->key_size == g->key_size &&
        memcmp(cg->key, g->key, g->key_size) == 0)
      return e->exe;
  }
  return NULL;
}

static void tt_cache_insert(tt_executable_t *exe) {
  const tt_graph_t *g = tt_executable_graph(exe);
  tt_cache_entry_t *e = malloc(sizeof(*e));
  if (!e) return; /* not cached: the next run compiles again */
  e->hash = g->hash;
  e->exe = exe;
  tt_executable_retain(exe);
  e->next = tt_cache_[g->hash % TT_CACHE_BUCKETS];
  tt_cache_[g->hash % TT_CACHE_BUCKETS] = e;
  tt_cache_count_++;
}

int64_t tt_lazy_cached_graphs(void) {
  pthread_mutex_lock(&tt_lazy_lock);
  int64_t n = tt_cache_count_;
  pthread_mutex_unlock(&tt_lazy_lock);
  return n;
}

tt_status_t tt_lazy_compile_locked(tt_node_t **roots, int32_t nr, int32_t device,
                                   tt_graph_t **out_graph, tt_node_t ***out_inputs,
                                   tt_executable_t **out_exe) {
  *out_graph = NULL;
  *out_inputs = NULL;
  *out_exe = NULL;
  tt_graph_t *g = NULL;
  tt_node_t **inputs = NULL;
  int64_t t0 = tt_now_ns();
  int64_t trace_t0 = tt_trace_now();
  tt_status_t st = tt_graph_build(roots, nr, &g, &inputs);
  if (st) return st;
  /* PyTorch/XLA's name for the node count of each synced graph. */
  tt_metric_add("TensorsGraphSize", TT_UNIT_COUNT, (double)g->num_instrs);
  tt_executable_t *exe = tt_cache_lookup_locked(g);
  /* Debug output and trace spans (each a single flag test when off). */
  uint64_t graph_hash = g->hash;
  tt_trace_complete("BuildGraph", "lazy", trace_t0, "{\"hash\":\"%016llx\",\"cached\":%d}",
                    (unsigned long long)graph_hash, exe != NULL);
  tt_debug_cut_t debug_cut = {.graph = g, .roots = roots, .device = device, .cache_miss = !exe};
  if (tt_debug_flags()) tt_debug_on_cut_built(&debug_cut);
  int64_t compile_t0 = exe ? 0 : tt_trace_now();
  if (exe) {
    tt_executable_retain(exe);
    tt_counter_add("CachedCompile", 1);
    /* Tier 1 once a graph repeats. */
    if (tt_executable_count_run(exe) == 1 && tt_tier_mode() == TT_TIER_AUTO)
      tt_tier1_request(exe, 0);
  } else {
    /* Optimise (the result keeps g's cache key), then plan. */
    tt_optimize_options_t opts;
    tt_optimize_options_from_env(&opts);
    /* The backend that will run the graph says what it needs (a PJRT
     * plugin: no engine-only forms, graphs are emitted as StableHLO). */
    opts.no_engine_forms = 0;
    const tt_backend_t *backend = tt_backend_active();
    if (backend->configure_passes) backend->configure_passes(backend, &opts);
    tt_graph_t *opt = NULL;
    st = tt_graph_optimize(g, &opts, &opt);
    if (!st && tt_debug_dump_enabled()) {
      char *text = tt_graph_to_text(opt);
      if (text) tt_status_free(tt_debug_dump(g->hash, "optimized", "txt", text));
      free(text);
    }
    if (!st) st = tt_executable_create(opt, &exe);
    if (st) {
      tt_graph_destroy(opt);
      tt_graph_destroy(g);
      free(inputs);
      return st;
    }
    tt_cache_insert(exe);
    tt_executable_count_run(exe);
    if (tt_tier_mode() == TT_TIER_1) tt_tier1_request(exe, 1);
    tt_counter_add("UncachedCompile", 1);
    /* PyTorch/XLA samples an eager op's compile in EagerOpCompileTime only. */
    tt_metric_add(tt_eager_mode() ? "EagerOpCompileTime" : "CompileTime", TT_UNIT_NANOSECONDS,
                  (double)(tt_now_ns() - t0));
  }
  tt_trace_complete("Compile", "compile", compile_t0, "{\"hash\":\"%016llx\"}",
                    (unsigned long long)graph_hash);
  if (tt_debug_flags()) tt_debug_on_cut_scheduled(&debug_cut, tt_executable_graph(exe));
  *out_graph = g;
  *out_inputs = inputs;
  *out_exe = exe;
  return NULL;
}
