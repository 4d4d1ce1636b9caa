/* The executor of fused instructions: the tier-1 kernel compiled for it
 * (tier1.c) when one is installed, else the tier-0 interpreter
 * (fused_exec.c). Both compute the same bits. */
#include <stdlib.h>

#include "backends/cpu/exec.h"

typedef struct tt_tier1_ctx_s {
  tt_fused_fn_t fn;
  const void *const *inputs;
  void *out;
} tt_tier1_ctx_t;

static void tt_tier1_range(void *ctx, int64_t begin, int64_t end) {
  const tt_tier1_ctx_t *c = ctx;
  c->fn(c->inputs, c->out, begin, end);
}

static tt_status_t tt_cpu_exec_fused(const tt_cpu_exec_t *c, tt_view_t *out) {
  const tt_instr_t *in = c->instr;
  const tt_graph_t *g = c->graph;
  int n = in->num_operands;
  tt_fused_fn_t fn = __atomic_load_n(&c->plan->kernels[c->index], __ATOMIC_ACQUIRE);
  if (fn && n <= 64) {
    const void *ptrs[64];
    for (int k = 0; k < n; ++k) ptrs[k] = c->vals[in->operands[k]];
    tt_tier1_ctx_t t = {fn, ptrs, out->data};
    /* A fused reduction's kernel computes whole results: a grain of
     * about 16384 domain elements. */
    int64_t numel = tt_shape_numel(&in->shape), grain = 16384;
    if (tt_fused_is_reduce(in)) {
      tt_shape_t dom = tt_fused_domain(in);
      int64_t per = numel ? tt_shape_numel(&dom) / numel : 1;
      grain = per >= grain ? 1 : grain / (per ? per : 1);
    }
    tt_parallel_for(numel, grain, tt_tier1_range, &t);
    return NULL;
  }
  tt_view_t *vs = malloc(sizeof(tt_view_t) * (size_t)(n ? n : 1));
  if (!vs) return tt_status_make(TT_RESOURCE_EXHAUSTED, "out of memory");
  for (int k = 0; k < n; ++k)
    vs[k] = tt_cpu_view(&g->instrs[in->operands[k]], c->vals[in->operands[k]]);
  tt_status_t st = tt_execute_fused(in, vs, n, out);
  free(vs);
  return st;
}

/* The ops this file executes (exec.h). */
const tt_cpu_exec_row_t tt_cpu_exec_rows_fused[] = {
    {TT_OP_FUSED, tt_cpu_exec_fused},
    TT_CPU_EXEC_ROWS_END,
};
