/* torchtpu graph passes: rewrites of a linearised graph before execution.
 *
 * Passes run on a tt_work_t, a mutable copy of a tt_graph_t in which an
 * instruction can be replaced by another (its uses are forwarded) or
 * rewritten in place. Graph inputs (PARAM/SCALAR) keep their positions, so
 * the caller supplies input values exactly as for the unoptimised graph.
 * Each pass is one file with one entry point; the verifier runs between
 * passes when TORCHTPU_VERIFY_IR=1 (and always in the C tests).
 */
#ifndef TORCHTPU_PASSES_H_
#define TORCHTPU_PASSES_H_

#include "torchtpu/ir.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct tt_work_s {
  int32_t num_instrs, cap;
  tt_instr_t *instrs;     /* operands arrays are malloc'd per instruction */
  int32_t *forward;       /* forward[i] == i unless i was replaced */
  int32_t num_outputs;
  int32_t *outputs;
  int32_t num_inputs;
} tt_work_t;

/* Copies graph into a new work graph (*out owned by caller). */
tt_status_t tt_work_from_graph(const tt_graph_t *graph, tt_work_t **out);
void tt_work_destroy(tt_work_t *work);
/* Follows forwarding to the final replacement of instruction i. */
int32_t tt_work_resolve(const tt_work_t *work, int32_t i);
/* Use counts after forwarding (outputs count as uses); caller frees. */
int32_t *tt_work_use_counts(const tt_work_t *work);
/* Builds a compact graph from the live instructions (those reachable from
 * outputs, plus every input). *out is owned by the caller. */
tt_status_t tt_work_to_graph(const tt_work_t *work, tt_graph_t **out);

/* Checks operand order, operand counts and that shape inference agrees for
 * non-fused instructions. Returns the first violation. */
tt_status_t tt_verify_work(const tt_work_t *work, const char *after_pass);

/* The passes. */
tt_status_t tt_pass_simplify(tt_work_t *work);   /* algebraic/structural */
tt_status_t tt_pass_cse(tt_work_t *work);        /* common subexpressions */
/* Chains of reshapes, transposes, slices and concatenations that only move
 * one tensor's elements: at most one transposed copy each (then CSE). */
tt_status_t tt_pass_collapse_movement(tt_work_t *work);
/* Attention ops read their operands and write their results through
 * strided layouts where that removes layout copies (after CSE). */
tt_status_t tt_pass_attention_layout(tt_work_t *work);
tt_status_t tt_pass_fuse_elementwise(tt_work_t *work);
/* Reductions with their elementwise producers (recomputed where other
 * elementwise readers need them too) and a chain of elementwise consumers
 * of the result's shape, as fused reductions (ir.h, TT_FUSED_REDUCE). Runs
 * before tt_pass_fuse_elementwise. */
tt_status_t tt_pass_fuse_reduce(tt_work_t *work);

typedef struct tt_optimize_options_s {
  int fuse;    /* elementwise fusion */
  int verify;  /* verifier between passes */
  int no_reduce_fusion; /* with fuse: leave reductions unfused */
  int no_collapse; /* leave movement chains as recorded */
  int no_engine_forms; /* no forms only the engine's kernels run (strided
                        * attention): graphs emitted as StableHLO */
  int conv_epilogue;   /* tt_pass_pair marks convolution epilogues */
  int attention_pairs; /* tt_pass_pair marks attention forward/backward pairs */
} tt_optimize_options_t;

/* Marks instruction pairs a backend may run together on an optimised
 * graph (tt_graph_t.pair; src/passes/pair.c says which); replaces any
 * earlier marks. The last step of tt_graph_optimize. */
tt_status_t tt_pass_pair(tt_graph_t *graph, const tt_optimize_options_t *opts);

/* Sharding propagation (src/passes/propagate_sharding.c; docs/spmd.md):
 * from the annotations on the instructions (tt_instr_t.sharding, which
 * stay as they are), each op's rule (the op table's sharding_rule) gives
 * every other instruction a sharding, forward then backward to a fixed
 * point, conflicts settled by a fixed policy, replicated where nothing
 * reaches. Records graph->sharding_prop (torchtpu/sharding_rule.h),
 * replacing any earlier record; the instructions and the hash are not
 * changed. Not part of tt_graph_optimize: only sharded programs need it.
 * TT_INVALID_ARGUMENT naming the instruction when an annotation does not
 * fit its shape. */
tt_status_t tt_pass_propagate_sharding(tt_graph_t *graph);

/* Options from the environment: TORCHTPU_FUSION=0 disables fusion,
 * TORCHTPU_REDUCE_FUSION=0 only reduction fusion,
 * TORCHTPU_CONV_EPILOGUE=0 the epilogue pairs,
 * TORCHTPU_ATTENTION_KEEP_PROBS=0 the attention pairs,
 * TORCHTPU_MOVEMENT_COLLAPSE=0 the movement collapse and attention layouts,
 * TORCHTPU_VERIFY_IR=1
 * enables the verifier. */
void tt_optimize_options_from_env(tt_optimize_options_t *opts);

/* Runs the pipeline simplify -> movement collapse -> CSE -> attention
 * layouts -> reduction fusion -> elementwise fusion -> DCE (compaction)
 * -> pairs over graph (options leave passes out) and returns the optimised graph
 * (owned by the caller). The input graph is not modified. Both fusion
 * passes take steps by tt_instr_fusible (op_table.h). */
tt_status_t tt_graph_optimize(const tt_graph_t *graph, const tt_optimize_options_t *opts,
                              tt_graph_t **out);

#ifdef __cplusplus
}
#endif
#endif /* TORCHTPU_PASSES_H_ */
