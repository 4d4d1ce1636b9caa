/* Shape inference and execution of the IR ops that the lowering table
 * added after TT_OP_FUSED (argsort, searchsorted, scatter_reduce,
 * cumulative, linalg, bitcast, special). Internal to the engine: node.c
 * calls tt_node_infer_extra, the tier-0 executor tt_run_instr_extra. */
#ifndef TORCHTPU_IR_OPS_EXTRA_H_
#define TORCHTPU_IR_OPS_EXTRA_H_

#include "torchtpu/ir.h"
#include "torchtpu/kernels.h"

/* Sets n->shape and n->dtype from its operands and attributes, or returns
 * an error naming the offending values (the node is then discarded). */
tt_status_t tt_node_infer_extra(tt_node_t *n);

/* Runs one instruction of an extra op: x holds num_operands operand views,
 * out is allocated with the instruction's shape and dtype. */
tt_status_t tt_run_instr_extra(const tt_instr_t *in, const tt_view_t *x, int num_operands,
                               tt_view_t *out);

/* An ATTENTION or ATTENTION_BWD instruction (as tt_run_instr_extra runs
 * it) with the probabilities kept between the two (tt_kernel_attention_ex):
 * psave for a forward, pload for a backward; NULL: computed in scratch. */
tt_status_t tt_run_attention(const tt_instr_t *in, const tt_view_t *x, int num_operands,
                             tt_view_t *out, float *psave, const float *pload);

/* The bytes of the probabilities that backward b (ATTENTION_BWD) of graph
 * g can read from forward f (ATTENTION, out form) instead of recomputing
 * them, or 0 when it cannot: the same q, k, v instructions (in the strided
 * forms the same sizes and layouts), mask, causal flag and scale. Also 0
 * where the buffer, f32 [B*H*L, tt_attention_probs_ld(S)], would exceed
 * four times q's size (S above 4 max(E, Ev, 16)): long sequences, where
 * it grows as L*S, keep the flash form's memory. */
size_t tt_attention_kept_bytes(const tt_graph_t *g, const tt_instr_t *f, const tt_instr_t *b);

#endif /* TORCHTPU_IR_OPS_EXTRA_H_ */
