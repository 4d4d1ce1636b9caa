/* Which of the instruction pairs tt_pass_pair marked (src/passes/pair.c)
 * the CPU backend runs together, decided once per executable against its
 * buffer plan: a convolution and the elementwise epilogue it computes
 * while its output is still in cache, and an attention forward and the
 * backward that reads the probabilities the forward keeps. */
#include <stdlib.h>

#include "backends/cpu/cpu_internal.h"

/* Only through reshapes that alias (the buffer plan decides that after
 * the epilogues are chosen). */
int32_t tt_cpu_epi_root(const tt_cpu_plan_t *e, int32_t o, int32_t i) {
  const tt_graph_t *g = e->graph;
  while (o > i && g->instrs[o].op == TT_OP_RESHAPE && e->alias[o])
    o = g->instrs[o].operands[0];
  return o < i || g->instrs[o].op == TT_OP_PARAM ? o : -1;
}

/* Convolution epilogues: the pairs tt_pass_pair marked (a CONV2D and
 * the elementwise fused instruction f reading only it) that this plan
 * can run. Taken when the convolution is not written to an output slot,
 * f is not already another convolution's epilogue, and f either writes an
 * output slot no input is donated to, or has the convolution's dtype (it
 * then runs in place over the convolution's buffer). */
tt_status_t tt_cpu_plan_epilogues(tt_cpu_plan_t *e) {
  const tt_graph_t *g = e->graph;
  int32_t n = g->num_instrs;
  e->epi_next = malloc(sizeof(int32_t) * ((size_t)n + 1));
  e->epi_src = malloc(sizeof(int32_t) * ((size_t)n + 1));
  if (!e->epi_next || !e->epi_src)
    return tt_status_make(TT_RESOURCE_EXHAUSTED, "out of memory (executable)");
  for (int32_t i = 0; i < n; ++i) e->epi_next[i] = e->epi_src[i] = -1;
  if (!g->pair) return NULL;
  for (int32_t i = 0; i < n; ++i) {
    int32_t f = g->pair[i];
    if (f < 0 || g->instrs[i].op != TT_OP_CONV2D || e->direct_output[i] >= 0 ||
        e->epi_src[f] >= 0)
      continue;
    int32_t slot = e->direct_output[f];
    if (slot >= 0 ? e->donor[slot] >= 0 : g->instrs[f].dtype != g->instrs[i].dtype) continue;
    e->epi_next[i] = f;
    e->epi_src[f] = i;
  }
  return NULL;
}

/* Attention pairs: the pairs tt_pass_pair marked whose probabilities fit
 * (tt_cpu_attention_kept_bytes) are kept by the forward for the backward,
 * which then skips recomputing q k^T and its softmax: the decoder of
 * bench_training.py, a 64-key causal attention, ran its backward ~35%
 * faster (docs/compiler.md). */
tt_status_t tt_cpu_plan_attention_pairs(tt_cpu_plan_t *e) {
  const tt_graph_t *g = e->graph;
  int32_t n = g->num_instrs;
  if (!g->pair) return NULL;
  for (int32_t f = 0; f < n; ++f) {
    int32_t b = g->pair[f];
    if (b <= f || g->instrs[f].op != TT_OP_ATTENTION) continue;
    size_t bytes = tt_cpu_attention_kept_bytes(g, &g->instrs[f]);
    if (!bytes) continue;
    if (!e->att_peer) {
      e->att_peer = malloc(sizeof(int32_t) * ((size_t)n + 1));
      e->att_bytes = calloc((size_t)n + 1, sizeof(size_t));
      if (!e->att_peer || !e->att_bytes)
        return tt_status_make(TT_RESOURCE_EXHAUSTED, "out of memory (executable)");
      for (int32_t i = 0; i < n; ++i) e->att_peer[i] = -1;
    }
    e->att_peer[f] = b;
    e->att_peer[b] = f;
    e->att_bytes[f] = bytes;
  }
  return NULL;
}

/* After the buffer plan: an epilogue reading a reshape the plan copies
 * (instead of aliasing) runs at its own place, in place when it shares
 * the convolution's buffer. */
void tt_cpu_check_epilogues(tt_cpu_plan_t *e) {
  const tt_graph_t *g = e->graph;
  for (int32_t i = 0; i < g->num_instrs; ++i) {
    int32_t f = e->epi_next[i];
    if (f < 0) continue;
    const tt_instr_t *fi = &g->instrs[f];
    for (int32_t k = 0; k < fi->num_operands; ++k) {
      if (fi->operands[k] != i && tt_cpu_epi_root(e, fi->operands[k], i) < 0) {
        e->epi_next[i] = -1;
        if (!e->alias[f]) e->epi_src[f] = -1;
        break;
      }
    }
  }
}
