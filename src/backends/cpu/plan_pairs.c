/* Instruction pairs the CPU backend runs together, planned once per
 * executable: a convolution and the elementwise epilogue it computes while
 * its output is still in cache, and an attention forward and the backward
 * that reads the probabilities the forward keeps. */
#include <stdlib.h>

#include "backends/cpu/cpu_internal.h"

/* aliased: only through reshapes that alias (the buffer plan decides
 * that after the epilogues are chosen). */
int32_t tt_cpu_epi_root(const tt_cpu_plan_t *e, int32_t o, int32_t i, int aliased) {
  const tt_graph_t *g = e->graph;
  while (o > i && g->instrs[o].op == TT_OP_RESHAPE && (!aliased || e->alias[o]))
    o = g->instrs[o].operands[0];
  return o < i || g->instrs[o].op == TT_OP_PARAM ? o : -1;
}

/* Convolution epilogues: a CONV2D whose only reader is an elementwise
 * fused instruction f of its shape (eval-mode batch norm, activation,
 * residual add) computes f over each output plane or image right after
 * storing it, while it is still in cache, instead of f streaming the whole
 * output back from memory later. Taken when every other operand of f is
 * computed before the convolution, and f either writes an output slot no
 * input is donated to, or has the convolution's dtype (it then runs in
 * place over the convolution's buffer). TORCHTPU_CONV_EPILOGUE=0 turns it
 * off. */
tt_status_t tt_cpu_plan_epilogues(tt_cpu_plan_t *e) {
  const tt_graph_t *g = e->graph;
  int32_t n = g->num_instrs;
  e->epi_next = malloc(sizeof(int32_t) * ((size_t)n + 1));
  e->epi_src = malloc(sizeof(int32_t) * ((size_t)n + 1));
  int32_t *readers = calloc((size_t)n + 1, sizeof(int32_t));
  if (!e->epi_next || !e->epi_src || !readers) {
    free(readers);
    return tt_status_make(TT_RESOURCE_EXHAUSTED, "out of memory (executable)");
  }
  for (int32_t i = 0; i < n; ++i) e->epi_next[i] = e->epi_src[i] = -1;
  if (!tt_config()->conv_epilogue) { /* TORCHTPU_CONV_EPILOGUE=0 */
    free(readers);
    return NULL;
  }
  /* readers[o]: distinct instructions reading o; reader[o]: the last. */
  int32_t *reader = malloc(sizeof(int32_t) * ((size_t)n + 1));
  if (!reader) {
    free(readers);
    return tt_status_make(TT_RESOURCE_EXHAUSTED, "out of memory (executable)");
  }
  for (int32_t i = 0; i < n; ++i) reader[i] = -1;
  for (int32_t i = 0; i < n; ++i) {
    const tt_instr_t *in = &g->instrs[i];
    for (int32_t k = 0; k < in->num_operands; ++k) {
      int32_t o = in->operands[k];
      if (reader[o] != i) {
        readers[o]++;
        reader[o] = i;
      }
    }
  }
  for (int32_t r = 0; r < g->num_outputs; ++r) readers[g->output_instr[r]] = 2;
  for (int32_t i = 0; i < n; ++i) {
    const tt_instr_t *cv = &g->instrs[i];
    if (cv->op != TT_OP_CONV2D || readers[i] != 1 || e->direct_output[i] >= 0) continue;
    int32_t f = reader[i];
    const tt_instr_t *fi = &g->instrs[f];
    if (fi->op != TT_OP_FUSED || tt_fused_is_reduce(fi) || fi->num_operands > 64 ||
        e->epi_src[f] >= 0 || !tt_shape_equal(&fi->shape, &cv->shape))
      continue;
    int ready = 1;
    for (int32_t k = 0; k < fi->num_operands; ++k)
      ready &= fi->operands[k] == i || tt_cpu_epi_root(e, fi->operands[k], i, 0) >= 0;
    int32_t slot = e->direct_output[f];
    if (!ready || (slot >= 0 ? e->donor[slot] >= 0 : fi->dtype != cv->dtype)) continue;
    e->epi_next[i] = f;
    e->epi_src[f] = i;
  }
  free(reader);
  free(readers);
  return NULL;
}

/* Attention pairs: a forward ATTENTION and an ATTENTION_BWD that can
 * share the forward's probabilities (tt_cpu_attention_kept_bytes, as a
 * training step has them) keep them for the backward, which then skips
 * recomputing q k^T and its softmax: the decoder of bench_training.py, a
 * 64-key causal attention, ran its backward ~35% faster
 * (docs/compiler.md). TORCHTPU_ATTENTION_KEEP_PROBS=0 turns it off. */
tt_status_t tt_cpu_plan_attention_pairs(tt_cpu_plan_t *e) {
  const tt_graph_t *g = e->graph;
  int32_t n = g->num_instrs;
  if (!tt_config()->attention_keep_probs) return NULL;
  for (int32_t b = 0; b < n; ++b) {
    const tt_instr_t *bi = &g->instrs[b];
    if (bi->op != TT_OP_ATTENTION_BWD) continue;
    for (int32_t f = 0; f < b; ++f) {
      const tt_instr_t *fi = &g->instrs[f];
      if (fi->op != TT_OP_ATTENTION || (e->att_peer && e->att_peer[f] >= 0)) continue;
      size_t bytes = tt_cpu_attention_kept_bytes(g, fi, bi);
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
      break;
    }
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
      if (fi->operands[k] != i && tt_cpu_epi_root(e, fi->operands[k], i, 1) < 0) {
        e->epi_next[i] = -1;
        if (!e->alias[f]) e->epi_src[f] = -1;
        break;
      }
    }
  }
}
