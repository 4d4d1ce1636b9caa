/* What the two fusion passes (src/passes/fuse_elementwise.c and
 * src/passes/fuse_reduce.c) share: which instructions may become steps of
 * a fused program, and how one becomes a step. Internal to the passes. */
#ifndef TORCHTPU_PASSES_FUSED_STEP_H_
#define TORCHTPU_PASSES_FUSED_STEP_H_

#include "torchtpu/passes.h"

/* tt_instr_fusible (op_table.h, the one fusibility rule) for an
 * instruction of a work graph, its first operand resolved. */
int tt_work_fusible(const tt_work_t *work, const tt_instr_t *in);

/* Fills step s's op, dtype, argument count and code (the unary or binary
 * op, the convert's target dtype; 0 for where) and parameters from a
 * fusible instruction m; the caller sets the arguments. */
void tt_fused_step_from(const tt_instr_t *m, tt_fused_op_t *s);

/* Rewrites instruction in into a fused instruction running f over
 * operands (ownership of both taken) with attributes a, its first
 * num_int_fields int fields (0: a plain fused program, no attributes). */
void tt_fused_rewrite(tt_instr_t *in, tt_fused_t *f, int32_t *operands, int32_t num_operands,
                      const tt_fused_attrs_t *a, int32_t num_int_fields);

#endif /* TORCHTPU_PASSES_FUSED_STEP_H_ */
