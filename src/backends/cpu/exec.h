/* The CPU backend's tier-0 executors: one function per IR op. Each family
 * of ops has its file (exec_elementwise.c, exec_movement.c, exec_index.c,
 * exec_reduce.c, exec_linalg.c, exec_nn.c, exec_norm.c, exec_attention.c,
 * exec_collective.c, exec_fused.c), holding its executors (static) and
 * ending with its registrations, tt_cpu_exec_rows_<family>: which op runs
 * with which executor. exec_table.c builds the table indexed by tt_op_t
 * from those lists once, checking that every op but the graph inputs has
 * exactly one; the backend's prepare refuses to run while one has none or
 * two, naming it (tests/c/test_op_table.c checks the registrations).
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
  int32_t device;              /* the executing device (the collectives' replica id) */
} tt_cpu_exec_t;

#define TT_CPU_EXEC_VIEWS 5

typedef tt_status_t (*tt_cpu_exec_fn)(const tt_cpu_exec_t *c, tt_view_t *out);

/* One registration: op runs with fn. */
typedef struct tt_cpu_exec_row_s {
  tt_op_t op;
  tt_cpu_exec_fn fn;
} tt_cpu_exec_row_t;

/* Ends every list of registrations. */
#define TT_CPU_EXEC_ROWS_END {TT_OP_COUNT, NULL}

/* Every family's list (exec_table.c; a new family file adds its list
 * there), NULL-ended: the backend's registrations. */
extern const tt_cpu_exec_row_t *const tt_cpu_exec_families[];

/* Fills table[0..TT_OP_COUNT) from `lists` (a NULL-ended array of lists,
 * each ended by TT_CPU_EXEC_ROWS_END): every op but the graph inputs
 * (TT_OPF_INPUT) registered exactly once. NULL, or TT_INTERNAL naming the
 * first op registered twice, registered though a graph input, registered
 * without a function or not an op, or else the first op without an
 * executor; table's contents are then unspecified. */
tt_status_t tt_cpu_exec_table_build(const tt_cpu_exec_row_t *const *lists, tt_cpu_exec_fn *table);

/* The backend's registrations (tt_cpu_exec_families), built into its table
 * once (thread-safe): NULL when they are complete, else a new status with
 * the build's error (every call its own copy). The backend's prepare
 * calls it: no graph runs on a broken table. */
tt_status_t tt_cpu_exec_table_check(void);

/* The executor of op, or NULL when the CPU backend has none: graph inputs
 * (TT_OPF_INPUT ops, bound by the walk itself) and codes that are no op.
 * After the first call an array read. While the registrations are broken
 * every op's executor returns tt_cpu_exec_table_check's error. */
tt_cpu_exec_fn tt_cpu_executor(tt_op_t op);

#endif /* TORCHTPU_BACKENDS_CPU_EXEC_H_ */
