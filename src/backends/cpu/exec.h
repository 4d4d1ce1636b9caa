/* The CPU backend's tier-0 executors: one function per IR op, in a table
 * indexed by tt_op_t (exec_table.c, checked against TT_OP_COUNT at compile
 * time; tests/c/test_op_table.c checks every op has one). Each family of
 * ops has its file: exec_elementwise.c, exec_movement.c, exec_index.c,
 * exec_reduce.c, exec_linalg.c, exec_nn.c, exec_norm.c, exec_attention.c,
 * exec_collective.c, exec_fused.c.
 *
 * An executor runs one instruction into out, whose memory the executor
 * walk (execute.c) has placed; it reads its operands' views and its
 * attributes (op_attrs.h) and calls one kernel. It returns the kernel's
 * status: TT_UNIMPLEMENTED for what the CPU backend cannot run (collectives
 * over several participants), TT_RESOURCE_EXHAUSTED for scratch memory. */
#ifndef TORCHTPU_BACKENDS_CPU_EXEC_H_
#define TORCHTPU_BACKENDS_CPU_EXEC_H_

#include "backends/cpu/cpu_internal.h"

/* What an executor sees of its instruction. */
typedef struct tt_cpu_exec_s {
  const tt_cpu_plan_t *plan;
  const tt_graph_t *graph;
  int32_t index;               /* the instruction's */
  const tt_instr_t *instr;     /* &graph->instrs[index] */
  const tt_input_value_t *inputs; /* the graph's inputs */
  void *const *vals;           /* data of every instruction run so far */
  /* Views of the first TT_CPU_EXEC_VIEWS operands (attention's backward
   * has the most, five); concat and fused instructions build their own. */
  const tt_view_t *x;
} tt_cpu_exec_t;

#define TT_CPU_EXEC_VIEWS 5

typedef tt_status_t (*tt_cpu_exec_fn)(const tt_cpu_exec_t *c, tt_view_t *out);

/* The executor of op, or NULL when the CPU backend has none: graph inputs
 * (TT_OPF_INPUT ops, bound by the walk itself) and ops not in the table. */
tt_cpu_exec_fn tt_cpu_executor(tt_op_t op);

/* ---- the executors, by family ---- */
/* exec_elementwise.c */
tt_status_t tt_cpu_exec_unary(const tt_cpu_exec_t *c, tt_view_t *out);
tt_status_t tt_cpu_exec_binary(const tt_cpu_exec_t *c, tt_view_t *out);
tt_status_t tt_cpu_exec_where(const tt_cpu_exec_t *c, tt_view_t *out);
tt_status_t tt_cpu_exec_convert(const tt_cpu_exec_t *c, tt_view_t *out);
tt_status_t tt_cpu_exec_special(const tt_cpu_exec_t *c, tt_view_t *out);
tt_status_t tt_cpu_exec_iota(const tt_cpu_exec_t *c, tt_view_t *out);
tt_status_t tt_cpu_exec_rng(const tt_cpu_exec_t *c, tt_view_t *out);
/* exec_movement.c */
tt_status_t tt_cpu_exec_broadcast(const tt_cpu_exec_t *c, tt_view_t *out);
tt_status_t tt_cpu_exec_copy(const tt_cpu_exec_t *c, tt_view_t *out); /* reshape, bitcast */
tt_status_t tt_cpu_exec_transpose(const tt_cpu_exec_t *c, tt_view_t *out);
tt_status_t tt_cpu_exec_slice(const tt_cpu_exec_t *c, tt_view_t *out);
tt_status_t tt_cpu_exec_slice_scatter(const tt_cpu_exec_t *c, tt_view_t *out);
tt_status_t tt_cpu_exec_concat(const tt_cpu_exec_t *c, tt_view_t *out);
tt_status_t tt_cpu_exec_pad(const tt_cpu_exec_t *c, tt_view_t *out);
tt_status_t tt_cpu_exec_flip(const tt_cpu_exec_t *c, tt_view_t *out);
/* exec_index.c */
tt_status_t tt_cpu_exec_index_select(const tt_cpu_exec_t *c, tt_view_t *out);
tt_status_t tt_cpu_exec_index_add(const tt_cpu_exec_t *c, tt_view_t *out);
tt_status_t tt_cpu_exec_gather(const tt_cpu_exec_t *c, tt_view_t *out);
tt_status_t tt_cpu_exec_scatter(const tt_cpu_exec_t *c, tt_view_t *out);
tt_status_t tt_cpu_exec_scatter_reduce(const tt_cpu_exec_t *c, tt_view_t *out);
tt_status_t tt_cpu_exec_argsort(const tt_cpu_exec_t *c, tt_view_t *out);
tt_status_t tt_cpu_exec_searchsorted(const tt_cpu_exec_t *c, tt_view_t *out);
/* exec_reduce.c */
tt_status_t tt_cpu_exec_reduce(const tt_cpu_exec_t *c, tt_view_t *out);
tt_status_t tt_cpu_exec_scan(const tt_cpu_exec_t *c, tt_view_t *out);
tt_status_t tt_cpu_exec_cumulative(const tt_cpu_exec_t *c, tt_view_t *out);
/* exec_linalg.c */
tt_status_t tt_cpu_exec_dot(const tt_cpu_exec_t *c, tt_view_t *out);
tt_status_t tt_cpu_exec_linalg(const tt_cpu_exec_t *c, tt_view_t *out);
tt_status_t tt_cpu_exec_fft(const tt_cpu_exec_t *c, tt_view_t *out);
/* exec_nn.c: convolutions and pooling */
tt_status_t tt_cpu_exec_conv2d(const tt_cpu_exec_t *c, tt_view_t *out);
tt_status_t tt_cpu_exec_max_pool2d(const tt_cpu_exec_t *c, tt_view_t *out);
tt_status_t tt_cpu_exec_max_pool2d_bwd(const tt_cpu_exec_t *c, tt_view_t *out);
tt_status_t tt_cpu_exec_avg_pool2d(const tt_cpu_exec_t *c, tt_view_t *out);
tt_status_t tt_cpu_exec_avg_pool2d_bwd(const tt_cpu_exec_t *c, tt_view_t *out);
tt_status_t tt_cpu_exec_adaptive_avg_pool2d(const tt_cpu_exec_t *c, tt_view_t *out);
tt_status_t tt_cpu_exec_adaptive_avg_pool2d_bwd(const tt_cpu_exec_t *c, tt_view_t *out);
/* exec_norm.c */
tt_status_t tt_cpu_exec_softmax(const tt_cpu_exec_t *c, tt_view_t *out);
tt_status_t tt_cpu_exec_softmax_bwd(const tt_cpu_exec_t *c, tt_view_t *out);
tt_status_t tt_cpu_exec_layer_norm(const tt_cpu_exec_t *c, tt_view_t *out);
/* exec_attention.c */
tt_status_t tt_cpu_exec_attention(const tt_cpu_exec_t *c, tt_view_t *out);
/* exec_collective.c: the single-participant forms */
tt_status_t tt_cpu_exec_collective(const tt_cpu_exec_t *c, tt_view_t *out);
tt_status_t tt_cpu_exec_spmd_manual(const tt_cpu_exec_t *c, tt_view_t *out);
/* exec_fused.c: tier 1 when compiled, else the tier-0 interpreter */
tt_status_t tt_cpu_exec_fused(const tt_cpu_exec_t *c, tt_view_t *out);

#endif /* TORCHTPU_BACKENDS_CPU_EXEC_H_ */
