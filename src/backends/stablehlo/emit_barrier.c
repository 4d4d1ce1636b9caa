/* The optimization barrier's lowering (ops.def, OPT_BARRIER). The IR
 * holds one node per tensor of a barrier, each reading every operand and
 * giving operand `index` back; StableHLO's op takes the operands and gives
 * them all back as its results. The first node of a barrier met in the
 * graph emits the op over its operands; every later node with the same
 * operand list reads its own result of that op, so one
 * xm.optimization_barrier_ call is one stablehlo.optimization_barrier
 * (`opt-barrier` in HLO text), as in PyTorch/XLA. */
#include <stdlib.h>
#include <string.h>

#include "backends/stablehlo/emit_internal.h"

static int tt_shlo_same_operands(const tt_instr_t *a, const tt_instr_t *b) {
  return a->num_operands == b->num_operands &&
         !memcmp(a->operands, b->operands, sizeof(*a->operands) * (size_t)a->num_operands);
}

static int tt_shlo_remember_barrier(tt_shlo_t *c, const tt_instr_t *in, tt_shv_t first) {
  if (c->num_barriers == c->cap_barriers) {
    int32_t cap = c->cap_barriers ? 2 * c->cap_barriers : 8;
    const tt_instr_t **ins = realloc(c->barrier_instr, sizeof(*ins) * (size_t)cap);
    if (ins) c->barrier_instr = ins;
    tt_shv_t *vals = realloc(c->barrier_val, sizeof(*vals) * (size_t)cap);
    if (vals) c->barrier_val = vals;
    if (!ins || !vals) {
      tt_shlo_fail(c, tt_status_make(TT_RESOURCE_EXHAUSTED, "stablehlo: out of memory"));
      return 0;
    }
    c->cap_barriers = cap;
  }
  c->barrier_instr[c->num_barriers] = in;
  c->barrier_val[c->num_barriers++] = first;
  return 1;
}

static tt_shv_t tt_shlo_lower_opt_barrier(tt_shlo_t *c, const tt_shlo_instr_t *ins) {
  const tt_instr_t *in = ins->in;
  tt_opt_barrier_attrs_t a;
  TT_ATTRS(in, &a);
  for (int32_t b = 0; b < c->num_barriers; ++b)
    if (tt_shlo_same_operands(c->barrier_instr[b], in)) return c->barrier_val[b] + (tt_shv_t)a.index;
  int n = in->num_operands;
  tt_dtype_t *dts = malloc(sizeof(*dts) * (size_t)n);
  tt_shape_t *shapes = malloc(sizeof(*shapes) * (size_t)n);
  tt_shv_t first = -1;
  if (!dts || !shapes) {
    tt_shlo_fail(c, tt_status_make(TT_RESOURCE_EXHAUSTED, "stablehlo: out of memory"));
  } else if (!tt_shlo_bad(c, n, ins->x)) {
    for (int k = 0; k < n; ++k) {
      dts[k] = tt_shlo_dtype(c, ins->x[k]);
      shapes[k] = *tt_shlo_shape(c, ins->x[k]);
    }
    int32_t ssa = tt_shlo_op_begin(c, "stablehlo.optimization_barrier", n, n, ins->x);
    first = tt_shlo_op_end(c, ssa, NULL, n, ins->x, n, dts, shapes);
    if (first >= 0 && !tt_shlo_remember_barrier(c, in, first)) first = -1;
  }
  free(dts);
  free(shapes);
  return first < 0 ? -1 : first + (tt_shv_t)a.index;
}

/* ---- registrations ---- */

const tt_shlo_row_t tt_shlo_rows_barrier[] = {
    {TT_OP_OPT_BARRIER, tt_shlo_lower_opt_barrier,
     "stablehlo.optimization_barrier over the operands, once per operand "
     "list; each node reads its own result"},
    TT_SHLO_ROWS_END,
};
