/* Tier-0 executors of products, dense linear algebra and the FFT. */
#include "backends/cpu/exec.h"

/* The buffer id of a DOT's B when it is a graph input (through reshapes
 * that alias it): its bytes cannot change while the key lives, so the
 * GEMM may keep it packed (blas_ext.c). 0 otherwise. */
static uint64_t tt_dot_b_key_(const tt_cpu_exec_t *c) {
  const tt_graph_t *g = c->graph;
  int32_t o = c->instr->operands[1];
  while (g->instrs[o].op == TT_OP_RESHAPE && c->plan->alias[o]) o = g->instrs[o].operands[0];
  const tt_instr_t *p = &g->instrs[o];
  if (p->op != TT_OP_PARAM || p->dtype != TT_F32 || !c->inputs[p->input_index].buffer) return 0;
  return tt_buffer_key(c->inputs[p->input_index].buffer);
}

static tt_status_t tt_cpu_exec_dot(const tt_cpu_exec_t *c, tt_view_t *out) {
  tt_dot_attrs_t a;
  TT_ATTRS(c->instr, &a);
  return tt_kernel_dot_keyed(&c->x[0], &c->x[1], (int)a.trans_a, (int)a.trans_b, out,
                             tt_dot_b_key_(c));
}

static tt_status_t tt_cpu_exec_linalg(const tt_cpu_exec_t *c, tt_view_t *out) {
  tt_linalg_attrs_t a;
  TT_ATTRS(c->instr, &a);
  int n = c->instr->num_operands < 3 ? c->instr->num_operands : 3;
  const tt_view_t *ins[3];
  for (int i = 0; i < n; ++i) ins[i] = &c->x[i];
  return tt_kernel_linalg((tt_linalg_op_t)a.op, ins, n, a.flags, out);
}

static tt_status_t tt_cpu_exec_fft(const tt_cpu_exec_t *c, tt_view_t *out) {
  tt_fft_attrs_t a;
  TT_ATTRS(c->instr, &a);
  return tt_kernel_fft((tt_fft_kind_t)a.kind, a.n, a.scale, &c->x[0], out);
}

/* The ops this file executes (exec.h). */
const tt_cpu_exec_row_t tt_cpu_exec_rows_linalg[] = {
    {TT_OP_DOT, tt_cpu_exec_dot},
    {TT_OP_LINALG, tt_cpu_exec_linalg},
    {TT_OP_FFT, tt_cpu_exec_fft},
    TT_CPU_EXEC_ROWS_END,
};
