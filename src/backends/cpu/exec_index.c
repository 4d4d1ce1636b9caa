/* Tier-0 executors of the indexing ops: selects, gathers, scatters, and
 * sorting and searching (which produce or consume indices). */
#include "backends/cpu/exec.h"

static tt_status_t tt_cpu_exec_index_select(const tt_cpu_exec_t *c, tt_view_t *out) {
  tt_dim_attrs_t a;
  TT_ATTRS(c->instr, &a);
  return tt_kernel_index_select(&c->x[0], (int)a.dim, &c->x[1], out);
}

static tt_status_t tt_cpu_exec_index_add(const tt_cpu_exec_t *c, tt_view_t *out) {
  tt_dim_attrs_t a;
  TT_ATTRS(c->instr, &a);
  return tt_kernel_index_add(&c->x[0], (int)a.dim, &c->x[1], &c->x[2], out);
}

static tt_status_t tt_cpu_exec_gather(const tt_cpu_exec_t *c, tt_view_t *out) {
  tt_dim_attrs_t a;
  TT_ATTRS(c->instr, &a);
  return tt_kernel_gather(&c->x[0], (int)a.dim, &c->x[1], out);
}

static tt_status_t tt_cpu_exec_scatter(const tt_cpu_exec_t *c, tt_view_t *out) {
  tt_scatter_attrs_t a;
  TT_ATTRS(c->instr, &a);
  return tt_kernel_scatter(&c->x[0], (int)a.dim, &c->x[1], &c->x[2], (int)a.reduce, out);
}

static tt_status_t tt_cpu_exec_scatter_reduce(const tt_cpu_exec_t *c, tt_view_t *out) {
  tt_scatter_reduce_attrs_t a;
  TT_ATTRS(c->instr, &a);
  return tt_kernel_scatter_reduce(&c->x[0], (int)a.dim, &c->x[1], &c->x[2],
                                  (tt_scatter_reduce_t)a.reduce, (int)a.include_self, out);
}

static tt_status_t tt_cpu_exec_argsort(const tt_cpu_exec_t *c, tt_view_t *out) {
  tt_argsort_attrs_t a;
  TT_ATTRS(c->instr, &a);
  return tt_kernel_argsort(&c->x[0], (int)a.dim, (int)a.descending, out);
}

static tt_status_t tt_cpu_exec_searchsorted(const tt_cpu_exec_t *c, tt_view_t *out) {
  tt_searchsorted_attrs_t a;
  TT_ATTRS(c->instr, &a);
  return tt_kernel_searchsorted(&c->x[0], &c->x[1], (int)a.right, out);
}

/* The ops this file executes (exec.h). */
const tt_cpu_exec_row_t tt_cpu_exec_rows_index[] = {
    {TT_OP_INDEX_SELECT, tt_cpu_exec_index_select},
    {TT_OP_INDEX_ADD, tt_cpu_exec_index_add},
    {TT_OP_GATHER, tt_cpu_exec_gather},
    {TT_OP_SCATTER, tt_cpu_exec_scatter},
    {TT_OP_ARGSORT, tt_cpu_exec_argsort},
    {TT_OP_SEARCHSORTED, tt_cpu_exec_searchsorted},
    {TT_OP_SCATTER_REDUCE, tt_cpu_exec_scatter_reduce},
    TT_CPU_EXEC_ROWS_END,
};
