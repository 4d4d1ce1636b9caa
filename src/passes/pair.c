/* Instruction pairs a backend may run together, marked on the optimised
 * graph (tt_graph_t.pair) after the pipeline; the graph's instructions are
 * not changed. Two kinds:
 * - a convolution and its epilogue: a CONV2D whose only reader is an
 *   elementwise fused instruction f of its shape (eval-mode batch norm,
 *   activation, residual add) whose other operands are all computed
 *   before the convolution (directly or through reshapes), so f can be
 *   computed over each output plane right after the convolution stores
 *   it, while it is still in cache;
 * - an attention forward and its backward: an ATTENTION and an
 *   ATTENTION_BWD over the same q, k, v (and mask), causal flag, scale and
 *   layouts, so the backward can read the probabilities the forward keeps
 *   instead of recomputing q k^T and its softmax.
 * The decision is structural; whether a pair pays off on a device, or fits
 * its memory plan, is the backend's (src/backends/cpu/plan_pairs.c). */
#include <stdlib.h>
#include <string.h>

#include "torchtpu/op_attrs.h"
#include "torchtpu/passes.h"

/* Where operand o of convolution i's epilogue comes from: o itself when
 * computed before i, else the end of a chain of reshapes to an instruction
 * before i or a graph input; -1 when neither. */
static int32_t tt_pair_epilogue_root(const tt_graph_t *g, int32_t o, int32_t i) {
  while (o > i && g->instrs[o].op == TT_OP_RESHAPE) o = g->instrs[o].operands[0];
  return o < i || g->instrs[o].op == TT_OP_PARAM ? o : -1;
}

static int tt_pair_attention_matches(const tt_instr_t *f, const tt_instr_t *b) {
  if (f->op != TT_OP_ATTENTION || b->op != TT_OP_ATTENTION_BWD ||
      f->num_operands + 1 != b->num_operands)
    return 0;
  for (int k = 0; k < f->num_operands; ++k)
    if (f->operands[k] != b->operands[k + 1]) return 0;
  tt_attention_attrs_t fa;
  tt_attention_bwd_attrs_t ba;
  int strided = TT_ATTRS(f, &fa) > 2;
  int b_strided = TT_ATTRS(b, &ba) > 1;
  if (fa.causal != ba.causal || fa.scale != ba.scale || strided != b_strided) return 0;
  if (!strided) return !fa.lse; /* the logsumexp form keeps no probabilities */
  /* The same sizes, and q, k, v read through the same layouts. */
  return fa.B == ba.B && fa.H == ba.H && fa.L == ba.L && fa.S == ba.S && fa.E == ba.E &&
         fa.Ev == ba.Ev && memcmp(fa.q_layout, ba.q_layout, sizeof fa.q_layout) == 0 &&
         memcmp(fa.k_layout, ba.k_layout, sizeof fa.k_layout) == 0 &&
         memcmp(fa.v_layout, ba.v_layout, sizeof fa.v_layout) == 0;
}

/* Epilogue candidates: pair[conv] = f. f is not marked: when several
 * convolutions offer it (each read only by f) the backend takes the first
 * one its plan allows. */
static tt_status_t tt_pair_epilogues(tt_graph_t *g) {
  int32_t n = g->num_instrs;
  /* readers[o]: distinct instructions reading o (outputs count twice);
   * reader[o]: the last of them. */
  int32_t *readers = calloc((size_t)n + 1, sizeof(int32_t));
  int32_t *reader = malloc(sizeof(int32_t) * ((size_t)n + 1));
  if (!readers || !reader) {
    free(readers);
    free(reader);
    return tt_status_make(TT_RESOURCE_EXHAUSTED, "out of memory (pair pass)");
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
    if (cv->op != TT_OP_CONV2D || readers[i] != 1) continue;
    int32_t f = reader[i];
    const tt_instr_t *fi = &g->instrs[f];
    if (fi->op != TT_OP_FUSED || tt_fused_is_reduce(fi) || fi->num_operands > 64 ||
        !tt_shape_equal(&fi->shape, &cv->shape))
      continue;
    int ready = 1;
    for (int32_t k = 0; k < fi->num_operands; ++k)
      ready &= fi->operands[k] == i || tt_pair_epilogue_root(g, fi->operands[k], i) >= 0;
    if (ready) g->pair[i] = f;
  }
  free(reader);
  free(readers);
  return NULL;
}

/* Attention pairs: each backward with the first unpaired forward that
 * matches it, marked both ways. */
static void tt_pair_attention(tt_graph_t *g) {
  for (int32_t b = 0; b < g->num_instrs; ++b) {
    const tt_instr_t *bi = &g->instrs[b];
    if (bi->op != TT_OP_ATTENTION_BWD) continue;
    for (int32_t f = 0; f < b; ++f) {
      if (g->pair[f] >= 0 || !tt_pair_attention_matches(&g->instrs[f], bi)) continue;
      g->pair[f] = b;
      g->pair[b] = f;
      break;
    }
  }
}

tt_status_t tt_pass_pair(tt_graph_t *g, const tt_optimize_options_t *opts) {
  free(g->pair);
  g->pair = NULL;
  if (!opts->conv_epilogue && !opts->attention_pairs) return NULL;
  g->pair = malloc(sizeof(int32_t) * ((size_t)g->num_instrs + 1));
  if (!g->pair) return tt_status_make(TT_RESOURCE_EXHAUSTED, "out of memory (pair pass)");
  for (int32_t i = 0; i < g->num_instrs; ++i) g->pair[i] = -1;
  tt_status_t st = opts->conv_epilogue ? tt_pair_epilogues(g) : NULL;
  if (!st && opts->attention_pairs) tt_pair_attention(g);
  return st;
}
