/* Tier-0 executors of the movement ops: copies, transposes, slices,
 * concatenation, padding and flips (most reshapes and contiguous slices
 * never get here: the plan aliases their operand's bytes). */
#include <stdlib.h>
#include <string.h>

#include "backends/cpu/exec.h"

static tt_status_t tt_cpu_exec_broadcast(const tt_cpu_exec_t *c, tt_view_t *out) {
  return tt_kernel_broadcast(&c->x[0], out);
}

/* Reshape and bitcast: buffers are dense, so the same bytes. */
static tt_status_t tt_cpu_exec_copy(const tt_cpu_exec_t *c, tt_view_t *out) {
  size_t bytes = tt_instr_bytes(c->instr);
  if (bytes) memcpy(out->data, c->x[0].data, bytes);
  return NULL;
}

static tt_status_t tt_cpu_exec_transpose(const tt_cpu_exec_t *c, tt_view_t *out) {
  tt_transpose_attrs_t a;
  TT_ATTRS(c->instr, &a);
  int32_t perm[TT_MAX_RANK];
  for (int d = 0; d < c->instr->shape.rank; ++d) perm[d] = (int32_t)a.perm.v[d];
  return tt_kernel_transpose(&c->x[0], perm, out);
}

static tt_status_t tt_cpu_exec_slice(const tt_cpu_exec_t *c, tt_view_t *out) {
  tt_slice_attrs_t a;
  TT_ATTRS(c->instr, &a);
  return tt_kernel_slice(&c->x[0], a.start.v, a.step.v, out);
}

static tt_status_t tt_cpu_exec_slice_scatter(const tt_cpu_exec_t *c, tt_view_t *out) {
  tt_slice_attrs_t a;
  TT_ATTRS(c->instr, &a);
  return tt_kernel_slice_scatter(&c->x[0], &c->x[1], a.start.v, a.step.v, out);
}

static tt_status_t tt_cpu_exec_concat(const tt_cpu_exec_t *c, tt_view_t *out) {
  const tt_instr_t *in = c->instr;
  tt_concat_attrs_t a;
  TT_ATTRS(in, &a);
  int n = in->num_operands;
  tt_view_t *vs = malloc(sizeof(tt_view_t) * (size_t)n);
  const tt_view_t **ps = malloc(sizeof(tt_view_t *) * (size_t)n);
  if (!vs || !ps) {
    free(vs);
    free(ps);
    return tt_status_make(TT_RESOURCE_EXHAUSTED, "out of memory");
  }
  for (int k = 0; k < n; ++k) {
    vs[k] = tt_cpu_view(&c->graph->instrs[in->operands[k]], c->vals[in->operands[k]]);
    ps[k] = &vs[k];
  }
  tt_status_t st = tt_kernel_concat(ps, n, (int)a.dim, out);
  free(vs);
  free(ps);
  return st;
}

static tt_status_t tt_cpu_exec_pad(const tt_cpu_exec_t *c, tt_view_t *out) {
  tt_pad_attrs_t a;
  TT_ATTRS(c->instr, &a);
  return tt_kernel_pad(&c->x[0], a.lo.v, a.hi.v, a.value, out);
}

static tt_status_t tt_cpu_exec_flip(const tt_cpu_exec_t *c, tt_view_t *out) {
  tt_flip_attrs_t a;
  TT_ATTRS(c->instr, &a);
  return tt_kernel_flip(&c->x[0], (uint32_t)a.dims_mask, out);
}

/* The barrier's node `index`: that operand's bytes, copied (the plan
 * aliases only reshapes and slices, which read operand 0). */
static tt_status_t tt_cpu_exec_opt_barrier(const tt_cpu_exec_t *c, tt_view_t *out) {
  tt_opt_barrier_attrs_t a;
  TT_ATTRS(c->instr, &a);
  int32_t o = c->instr->operands[a.index];
  tt_view_t x = tt_cpu_view(&c->graph->instrs[o], c->vals[o]);
  size_t bytes = tt_instr_bytes(c->instr);
  if (bytes && out->data != x.data) memcpy(out->data, x.data, bytes);
  return NULL;
}

/* The ops this file executes (exec.h). */
const tt_cpu_exec_row_t tt_cpu_exec_rows_movement[] = {
    {TT_OP_BROADCAST, tt_cpu_exec_broadcast},
    {TT_OP_RESHAPE, tt_cpu_exec_copy},
    {TT_OP_TRANSPOSE, tt_cpu_exec_transpose},
    {TT_OP_SLICE, tt_cpu_exec_slice},
    {TT_OP_SLICE_SCATTER, tt_cpu_exec_slice_scatter},
    {TT_OP_CONCAT, tt_cpu_exec_concat},
    {TT_OP_PAD, tt_cpu_exec_pad},
    {TT_OP_FLIP, tt_cpu_exec_flip},
    {TT_OP_BITCAST, tt_cpu_exec_copy},
    {TT_OP_OPT_BARRIER, tt_cpu_exec_opt_barrier},
    TT_CPU_EXEC_ROWS_END,
};
