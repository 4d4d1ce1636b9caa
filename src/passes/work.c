/* The mutable work graph passes operate on, and its compaction back into a
 * tt_graph_t (which is also dead-code elimination: only instructions
 * reachable from the outputs survive, plus every graph input). */
#include <stdlib.h>
#include <string.h>

#include "torchtpu/passes.h"

static void tt_fused_free(const tt_fused_t *f) {
  if (!f) return;
  free(f->ops);
  free((void *)f);
}

tt_status_t tt_work_from_graph(const tt_graph_t *g, tt_work_t **out) {
  *out = NULL;
  tt_work_t *w = calloc(1, sizeof(*w));
  if (!w) return tt_status_make(TT_RESOURCE_EXHAUSTED, "out of memory (work graph)");
  w->num_instrs = w->cap = g->num_instrs;
  w->instrs = calloc((size_t)g->num_instrs + 1, sizeof(tt_instr_t));
  w->forward = malloc(sizeof(int32_t) * ((size_t)g->num_instrs + 1));
  w->outputs = malloc(sizeof(int32_t) * ((size_t)g->num_outputs + 1));
  if (!w->instrs || !w->forward || !w->outputs) goto oom;
  for (int32_t i = 0; i < g->num_instrs; ++i) {
    tt_instr_t *in = &w->instrs[i];
    *in = g->instrs[i];
    in->operands = malloc(sizeof(int32_t) * ((size_t)in->num_operands + 1));
    if (!in->operands) goto oom;
    memcpy(in->operands, g->instrs[i].operands, sizeof(int32_t) * (size_t)in->num_operands);
    in->fused = NULL; /* fresh graphs have no fused instructions */
    w->forward[i] = i;
  }
  w->num_outputs = g->num_outputs;
  memcpy(w->outputs, g->output_instr, sizeof(int32_t) * (size_t)g->num_outputs);
  w->num_inputs = g->num_inputs;
  *out = w;
  return NULL;
oom:
  tt_work_destroy(w);
  return tt_status_make(TT_RESOURCE_EXHAUSTED, "out of memory (work graph)");
}

void tt_work_destroy(tt_work_t *w) {
  if (!w) return;
  if (w->instrs)
    for (int32_t i = 0; i < w->num_instrs; ++i) {
      free(w->instrs[i].operands);
      if (w->instrs[i].op == TT_OP_FUSED) tt_fused_free(w->instrs[i].fused);
    }
  free(w->instrs);
  free(w->forward);
  free(w->outputs);
  free(w);
}

int32_t tt_work_resolve(const tt_work_t *w, int32_t i) {
  while (w->forward[i] != i) i = w->forward[i];
  return i;
}

int32_t *tt_work_use_counts(const tt_work_t *w) {
  int32_t *uses = calloc((size_t)w->num_instrs + 1, sizeof(int32_t));
  if (!uses) return NULL;
  /* Only instructions reachable from the outputs count as users. */
  uint8_t *live = calloc((size_t)w->num_instrs + 1, 1);
  if (!live) {
    free(uses);
    return NULL;
  }
  for (int32_t r = 0; r < w->num_outputs; ++r) {
    int32_t o = tt_work_resolve(w, w->outputs[r]);
    live[o] = 1;
    uses[o]++;
  }
  for (int32_t i = w->num_instrs - 1; i >= 0; --i) {
    if (!live[i] || w->forward[i] != i) continue;
    const tt_instr_t *in = &w->instrs[i];
    for (int32_t k = 0; k < in->num_operands; ++k) {
      int32_t o = tt_work_resolve(w, in->operands[k]);
      uses[o]++;
      live[o] = 1;
    }
  }
  free(live);
  return uses;
}

/* Small values computed from graph inputs alone (a batch norm's
 * rsqrt(var + eps) and its [C, 1, 1] views) are scheduled before the
 * rest of the program, so a kernel that runs a consumer as its epilogue
 * (a convolution, src/runtime/executable.c) finds them ready. Pure ops
 * only, results up to TT_HOIST_BYTES. */
#define TT_HOIST_BYTES 65536

static int tt_hoistable_op(tt_op_t op) {
  switch (op) {
    case TT_OP_UNARY:
    case TT_OP_BINARY:
    case TT_OP_WHERE:
    case TT_OP_CONVERT:
    case TT_OP_BROADCAST:
    case TT_OP_RESHAPE:
    case TT_OP_TRANSPOSE:
    case TT_OP_FUSED:
      return 1;
    default:
      return 0;
  }
}

tt_status_t tt_work_to_graph(const tt_work_t *w, tt_graph_t **out) {
  *out = NULL;
  int32_t n = w->num_instrs;
  int32_t *uses = tt_work_use_counts(w);
  int32_t *newidx = malloc(sizeof(int32_t) * ((size_t)n + 1));
  tt_graph_t *g = calloc(1, sizeof(*g));
  if (!uses || !newidx || !g) {
    free(uses);
    free(newidx);
    free(g);
    return tt_status_make(TT_RESOURCE_EXHAUSTED, "out of memory (compaction)");
  }
  int32_t count = 0;
  size_t total_operands = 0, total_fused_ops = 0, num_fused = 0;
  /* order[q]: the work instruction scheduled q-th; early[i]: an input,
   * or a value hoisted to the front. */
  int32_t *order = malloc(((size_t)n + 1) * (sizeof(int32_t) + 1));
  uint8_t *early = (uint8_t *)(order + n + 1);
  if (!order) {
    free(uses);
    free(newidx);
    free(g);
    return tt_status_make(TT_RESOURCE_EXHAUSTED, "out of memory (compaction)");
  }
  for (int32_t i = 0; i < n; ++i) {
    const tt_instr_t *in = &w->instrs[i];
    early[i] = in->op == TT_OP_PARAM || in->op == TT_OP_SCALAR;
    if (!early[i] && w->forward[i] == i && uses[i] > 0 && tt_hoistable_op(in->op) &&
        (size_t)tt_shape_numel(&in->shape) * tt_dtype_size(in->dtype) <= TT_HOIST_BYTES) {
      early[i] = 1;
      for (int32_t k = 0; k < in->num_operands && early[i]; ++k)
        early[i] = early[tt_work_resolve(w, in->operands[k])];
    }
  }
  for (int pass = 0; pass < 2; ++pass) {
    for (int32_t i = 0; i < n; ++i) {
      const tt_instr_t *in = &w->instrs[i];
      if (early[i] != (pass == 0)) continue;
      int keep = in->op == TT_OP_PARAM || in->op == TT_OP_SCALAR ||
                 (w->forward[i] == i && uses[i] > 0);
      newidx[i] = -1;
      if (keep) {
        order[count] = i;
        newidx[i] = count++;
      }
    }
  }
  for (int32_t i = 0; i < n; ++i) {
    const tt_instr_t *in = &w->instrs[i];
    if (newidx[i] >= 0) {
      total_operands += (size_t)in->num_operands;
      if (in->op == TT_OP_FUSED) {
        num_fused++;
        total_fused_ops += (size_t)in->fused->num_ops;
      }
    }
  }
  size_t bytes = (size_t)count * sizeof(tt_instr_t) + total_operands * sizeof(int32_t) +
                 (size_t)count * sizeof(int32_t) + (size_t)w->num_outputs * sizeof(int32_t) +
                 num_fused * sizeof(tt_fused_t) + total_fused_ops * sizeof(tt_fused_op_t) + 64;
  g->arena = calloc(1, bytes);
  if (!g->arena) {
    free(order);
    free(uses);
    free(newidx);
    free(g);
    return tt_status_make(TT_RESOURCE_EXHAUSTED, "out of memory (compaction)");
  }
  /* Largest alignment first: fused ops hold doubles. */
  uint8_t *cur = g->arena;
  tt_fused_op_t *fops = (tt_fused_op_t *)cur;
  cur += total_fused_ops * sizeof(tt_fused_op_t);
  tt_instr_t *instrs = (tt_instr_t *)cur;
  cur += (size_t)count * sizeof(tt_instr_t);
  tt_fused_t *fused = (tt_fused_t *)cur;
  cur += num_fused * sizeof(tt_fused_t);
  int32_t *operand_pool = (int32_t *)cur;
  cur += total_operands * sizeof(int32_t);
  g->input_instr = (int32_t *)cur;
  cur += (size_t)count * sizeof(int32_t);
  g->output_instr = (int32_t *)cur;
  g->instrs = instrs;
  g->num_instrs = count;
  g->num_inputs = w->num_inputs;
  /* In schedule order, so last_use ends up the latest reader. */
  for (int32_t q = 0; q < count; ++q) {
    int32_t i = order[q];
    const tt_instr_t *src = &w->instrs[i];
    tt_instr_t *dst = &instrs[newidx[i]];
    *dst = *src;
    dst->operands = operand_pool;
    operand_pool += src->num_operands;
    for (int32_t k = 0; k < src->num_operands; ++k) {
      dst->operands[k] = newidx[tt_work_resolve(w, src->operands[k])];
      instrs[dst->operands[k]].last_use = newidx[i];
    }
    dst->last_use = newidx[i];
    if (src->op == TT_OP_FUSED) {
      fused->num_ops = src->fused->num_ops;
      fused->ops = fops;
      memcpy(fops, src->fused->ops, sizeof(tt_fused_op_t) * (size_t)fused->num_ops);
      fops += fused->num_ops;
      dst->fused = fused++;
    } else {
      dst->fused = NULL;
    }
    if (src->op == TT_OP_PARAM || src->op == TT_OP_SCALAR)
      g->input_instr[src->input_index] = newidx[i];
  }
  g->num_outputs = w->num_outputs;
  for (int32_t r = 0; r < w->num_outputs; ++r) {
    g->output_instr[r] = newidx[tt_work_resolve(w, w->outputs[r])];
    instrs[g->output_instr[r]].last_use = count;
  }
  free(order);
  free(uses);
  free(newidx);
  *out = g;
  return NULL;
}
