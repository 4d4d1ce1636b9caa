/* The CPU backend's executable plan and the pieces of its executor,
 * shared by the files of src/backends/cpu/. Internal to the backend (the
 * PJRT backend's fallback reaches it through tt_backend_cpu()). */
#ifndef TORCHTPU_BACKENDS_CPU_INTERNAL_H_
#define TORCHTPU_BACKENDS_CPU_INTERNAL_H_

#include "runtime/runtime_internal.h"
#include "torchtpu/backend.h"
#include "torchtpu/kernels.h"

/* What tt_cpu_prepare decides once per executable (plan.c, plan_pairs.c);
 * the executor (execute.c) reads it, never writes it, except the tier-1
 * kernel slots, swapped atomically between executions. */
typedef struct tt_cpu_plan_s {
  const tt_graph_t *graph; /* borrowed from the executable */
  /* For each instruction, the output slot it is written to directly, or -1. */
  int32_t *direct_output;
  /* Per output: the graph input whose memory it may take, or -1. */
  int32_t *donor;
  /* Tier-1 kernels per instruction (NULL: tier 0), written atomically. */
  tt_fused_fn_t *kernels;
  void *dl_handle;
  /* Per instruction: a reshape that aliases its operand's buffer (or a
   * slice, an epilogue: see slice_off, epi_src). */
  uint8_t *alias;
  /* Per instruction: a SLICE reading a contiguous range of its operand,
   * aliased at this byte offset into the operand's buffer; -1 otherwise. */
  int64_t *slice_off;
  /* Buffer plan: per instruction its arena offset, or -1 (not planned). */
  int64_t *offset;
  /* Convolution epilogues (tt_cpu_plan_epilogues, from the graph's
   * pairs): epi_next[conv] is the
   * fused instruction computed as the convolution stores its output,
   * epi_src[f] that convolution (both -1 otherwise). An epilogue not
   * written to an output slot runs in place: its result takes over the
   * convolution's buffer (alias[f]). */
  int32_t *epi_next, *epi_src;
  /* Attention pairs (tt_cpu_plan_attention_pairs, from the graph's
   * pairs): att_peer[fwd] is the
   * backward that reads the probabilities the forward keeps, and
   * att_peer[bwd] that forward (-1 otherwise); att_bytes[fwd] their size.
   * NULL when the graph has none. */
  int32_t *att_peer;
  size_t *att_bytes;
  size_t arena_bytes, planned_bytes;
} tt_cpu_plan_t;

/* The backend's functions (backend.c puts them in its table; the PJRT
 * backend prepares, releases and binds outputs with them too, for its
 * fallback). */
tt_status_t tt_cpu_prepare(const tt_backend_t *self, const tt_graph_t *graph, void **out_plan);
void tt_cpu_release(const tt_backend_t *self, void *plan);
tt_status_t tt_cpu_execute(const tt_backend_t *self, tt_executable_t *exe, int32_t device,
                           const tt_input_value_t *inputs, void *const *output_data);
tt_status_t tt_cpu_bind_outputs(const tt_backend_t *self, tt_executable_t *exe, int32_t device,
                                const tt_input_value_t *inputs, tt_buffer_t *const *outputs,
                                void **out_data);

/* exe's CPU plan, or NULL when exe was prepared by a backend that does not
 * make one. */
tt_cpu_plan_t *tt_cpu_plan_of(const tt_executable_t *exe);

/* ---- planning (plan.c, plan_pairs.c) ---- */
/* The instruction whose buffer instruction i takes over, when alias[i]:
 * its convolution for an in-place epilogue, else its operand. */
static inline int32_t tt_cpu_alias_source(const tt_cpu_plan_t *p, int32_t i) {
  return p->epi_src[i] >= 0 ? p->epi_src[i] : p->graph->instrs[i].operands[0];
}
/* The conv epilogue and attention pair decisions, made before the buffer
 * plan (which aliases in-place epilogues), and the epilogue check after
 * it (an epilogue reading a copied reshape runs at its own place). */
tt_status_t tt_cpu_plan_epilogues(tt_cpu_plan_t *p);
tt_status_t tt_cpu_plan_attention_pairs(tt_cpu_plan_t *p);
void tt_cpu_check_epilogues(tt_cpu_plan_t *p);
/* Where operand o of convolution i's epilogue is read at the time the
 * convolution runs: o itself when computed before i, else the end of the
 * chain of reshapes the buffer plan aliases to an instruction before i or
 * a graph input (tt_pass_pair checked the chain through any reshapes).
 * -1: not available. */
int32_t tt_cpu_epi_root(const tt_cpu_plan_t *p, int32_t o, int32_t i);

/* ---- fused execution (fused_exec.c) ---- */
/* Tier-0 execution of one TT_OP_FUSED instruction. */
tt_status_t tt_execute_fused(const tt_instr_t *instr, const tt_view_t *inputs,
                             int32_t num_inputs, tt_view_t *out);
/* The same, in pieces (a convolution's epilogue, execute.c): prepare
 * once, run any element ranges of out (from several threads, each element
 * once), then finish, which returns the first failure and frees it. The
 * inputs and out must outlive the pieces. Elementwise programs only. */
typedef struct tt_fused_ctx_s tt_fused_prep_t;
tt_status_t tt_fused_prepare(const tt_instr_t *instr, const tt_view_t *inputs,
                             int32_t num_inputs, tt_view_t *out, tt_fused_prep_t **prep);
void tt_fused_prepared_range(void *prep, int64_t begin, int64_t end);
tt_status_t tt_fused_finish(tt_fused_prep_t *prep);

/* ---- attention (exec_attention.c) ---- */
/* An ATTENTION or ATTENTION_BWD instruction with the probabilities kept
 * between the two (tt_kernel_attention_ex): psave for a forward, pload for
 * a backward; NULL: computed in scratch. */
tt_status_t tt_cpu_run_attention(const tt_instr_t *in, const tt_view_t *x, int num_operands,
                                 tt_view_t *out, float *psave, const float *pload);
/* The bytes of the probabilities that forward f (ATTENTION) of graph g
 * keeps for the backward tt_pass_pair paired it with, which reads them
 * instead of recomputing them; 0 when not worth keeping: where the
 * buffer, f32 [B*H*L, tt_attention_probs_ld(S)], would exceed four times
 * q's size (S above 4 max(E, Ev, 16)): long sequences, where
 * it grows as L*S, keep the flash form's memory. */
size_t tt_cpu_attention_kept_bytes(const tt_graph_t *g, const tt_instr_t *f);

/* ---- small shared helpers ---- */
static inline tt_view_t tt_cpu_view(const tt_instr_t *in, void *data) {
  tt_view_t v;
  v.data = data;
  v.dtype = in->dtype;
  v.shape = in->shape;
  return v;
}

/* A conv2d's (or its backward's) attributes as the kernels take them. */
void tt_cpu_conv_params(const tt_instr_t *in, tt_conv2d_params_t *p);

#endif /* TORCHTPU_BACKENDS_CPU_INTERNAL_H_ */
