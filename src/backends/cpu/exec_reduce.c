/* Tier-0 executors of the reductions and scans (fused reductions run in
 * exec_fused.c). */
#include "backends/cpu/exec.h"

static tt_status_t tt_cpu_exec_reduce(const tt_cpu_exec_t *c, tt_view_t *out) {
  tt_reduce_attrs_t a;
  TT_ATTRS(c->instr, &a);
  return tt_kernel_reduce((tt_reduce_op_t)a.op, &c->x[0], (uint32_t)a.dims_mask, out);
}

static tt_status_t tt_cpu_exec_scan(const tt_cpu_exec_t *c, tt_view_t *out) {
  tt_scan_attrs_t a;
  TT_ATTRS(c->instr, &a);
  return tt_kernel_scan((tt_scan_op_t)a.op, &c->x[0], (int)a.dim, out);
}

static tt_status_t tt_cpu_exec_cumulative(const tt_cpu_exec_t *c, tt_view_t *out) {
  tt_cumulative_attrs_t a;
  TT_ATTRS(c->instr, &a);
  return tt_kernel_cumulative((tt_cumulative_t)a.op, &c->x[0], (int)a.dim, out);
}

/* The ops this file executes (exec.h). */
const tt_cpu_exec_row_t tt_cpu_exec_rows_reduce[] = {
    {TT_OP_REDUCE, tt_cpu_exec_reduce},
    {TT_OP_SCAN, tt_cpu_exec_scan},
    {TT_OP_CUMULATIVE, tt_cpu_exec_cumulative},
    TT_CPU_EXEC_ROWS_END,
};
