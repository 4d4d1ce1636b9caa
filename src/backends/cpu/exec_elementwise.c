/* Tier-0 executors of the elementwise ops and the data sources (iota,
 * rng): one kernel call each. */
#include "backends/cpu/exec.h"

static tt_status_t tt_cpu_exec_unary(const tt_cpu_exec_t *c, tt_view_t *out) {
  tt_unary_attrs_t a;
  TT_ATTRS(c->instr, &a);
  return tt_kernel_unary((tt_unary_op_t)a.op, &c->x[0], a.alpha, a.beta, out);
}

static tt_status_t tt_cpu_exec_binary(const tt_cpu_exec_t *c, tt_view_t *out) {
  tt_binary_attrs_t a;
  TT_ATTRS(c->instr, &a);
  return tt_kernel_binary((tt_binary_op_t)a.op, &c->x[0], &c->x[1], out);
}

static tt_status_t tt_cpu_exec_where(const tt_cpu_exec_t *c, tt_view_t *out) {
  return tt_kernel_where(&c->x[0], &c->x[1], &c->x[2], out);
}

static tt_status_t tt_cpu_exec_convert(const tt_cpu_exec_t *c, tt_view_t *out) {
  return tt_kernel_convert(&c->x[0], out);
}

static tt_status_t tt_cpu_exec_special(const tt_cpu_exec_t *c, tt_view_t *out) {
  tt_special_attrs_t a;
  TT_ATTRS(c->instr, &a);
  return tt_kernel_special((tt_special_op_t)a.op, &c->x[0], &c->x[1], out);
}

static tt_status_t tt_cpu_exec_iota(const tt_cpu_exec_t *c, tt_view_t *out) {
  tt_iota_attrs_t a;
  TT_ATTRS(c->instr, &a);
  return tt_kernel_iota(a.start, a.step, out);
}

static tt_status_t tt_cpu_exec_rng(const tt_cpu_exec_t *c, tt_view_t *out) {
  tt_rng_attrs_t a;
  TT_ATTRS(c->instr, &a);
  int64_t seed = *(const int64_t *)c->x[0].data;
  if (c->instr->fattrs[TT_RNG_TILED_FATTR] != 0.0) {
    int32_t rank = out->shape.rank;
    return tt_kernel_rng_tile((tt_rng_op_t)a.op, (uint64_t)seed, 0, a.a, a.b, a.dims.v + rank,
                              a.dims.v + 2 * rank, out);
  }
  return tt_kernel_rng((tt_rng_op_t)a.op, (uint64_t)seed, 0, a.a, a.b, out);
}

/* The ops this file executes (exec.h). */
const tt_cpu_exec_row_t tt_cpu_exec_rows_elementwise[] = {
    {TT_OP_UNARY, tt_cpu_exec_unary},
    {TT_OP_BINARY, tt_cpu_exec_binary},
    {TT_OP_WHERE, tt_cpu_exec_where},
    {TT_OP_CONVERT, tt_cpu_exec_convert},
    {TT_OP_IOTA, tt_cpu_exec_iota},
    {TT_OP_RNG, tt_cpu_exec_rng},
    {TT_OP_SPECIAL, tt_cpu_exec_special},
    TT_CPU_EXEC_ROWS_END,
};
