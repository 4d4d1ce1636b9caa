/* The CPU backend's executor (tt_cpu_execute): walks the instruction list
 * once, placing each result (an output slot, the arena, its own
 * allocation, or its operand's bytes when the plan aliases it) and calling
 * the instruction's tier-0 executor (exec_table.c), or running the pair it
 * belongs to: a convolution with its epilogue, an attention forward or
 * backward sharing probabilities (plan_pairs.c). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "backends/cpu/exec.h"
#include "torchtpu/metrics.h"

typedef struct tt_epi_exec_s {
  tt_fused_fn_t fn; /* tier 1, or NULL: tier 0 over prep */
  const void *ptrs[64];
  void *out;
  tt_fused_prep_t *prep;
} tt_epi_exec_t;

static void tt_epi_exec_range(void *arg, int64_t begin, int64_t end) {
  tt_epi_exec_t *x = arg;
  if (x->fn) {
    x->fn(x->ptrs, x->out, begin, end);
  } else {
    tt_fused_prepared_range(x->prep, begin, end);
  }
}

/* Convolution i into out with its epilogue instruction epi_next[i], whose
 * buffer vals[] already names. */
static tt_status_t tt_run_conv_epilogue(const tt_cpu_plan_t *e, const tt_graph_t *g,
                                        int32_t i, const tt_input_value_t *inputs,
                                        void *const *vals, tt_view_t *out) {
  const tt_instr_t *in = &g->instrs[i];
  int32_t f = e->epi_next[i];
  const tt_instr_t *fi = &g->instrs[f];
  tt_view_t x[2], fout = tt_cpu_view(fi, vals[f]), fin[64];
  for (int k = 0; k < 2; ++k)
    x[k] = tt_cpu_view(&g->instrs[in->operands[k]], vals[in->operands[k]]);
  tt_epi_exec_t ex = {0};
  ex.fn = __atomic_load_n(&e->kernels[f], __ATOMIC_ACQUIRE);
  ex.out = vals[f];
  for (int k = 0; k < fi->num_operands; ++k) {
    int32_t o = fi->operands[k];
    int32_t r = o == i ? i : tt_cpu_epi_root(e, o, i);
    void *v = r <= i ? vals[r] : tt_buffer_data(inputs[g->instrs[r].input_index].buffer);
    ex.ptrs[k] = v;
    fin[k] = tt_cpu_view(&g->instrs[o], v);
  }
  if (!ex.fn) TT_RETURN_IF_ERROR(tt_fused_prepare(fi, fin, fi->num_operands, &fout, &ex.prep));
  tt_conv2d_params_t p;
  tt_cpu_conv_params(in, &p);
  tt_epilogue_t epi = {tt_epi_exec_range, &ex};
  tt_status_t st = tt_kernel_conv2d_epilogue(&x[0], &x[1], &p, out, &epi);
  tt_status_t est = tt_fused_finish(ex.prep);
  tt_counter_add("ConvEpilogueFused", 1);
  if (st) {
    tt_status_free(est);
    return st;
  }
  return est;
}

/* Attention instruction i of a pair (tt_cpu_plan_attention_pairs): the
 * forward allocates the probabilities its backward reads (kept[i]; when
 * that fails the backward recomputes them), the backward frees them. */
static tt_status_t tt_run_attention_pair(const tt_cpu_plan_t *e, const tt_graph_t *g, int32_t i,
                                         int32_t device, void *const *vals, void **kept,
                                         tt_view_t *out) {
  const tt_instr_t *in = &g->instrs[i];
  tt_view_t x[5];
  for (int k = 0; k < in->num_operands && k < 5; ++k)
    x[k] = tt_cpu_view(&g->instrs[in->operands[k]], vals[in->operands[k]]);
  int32_t peer = e->att_peer[i];
  if (peer > i) {
    kept[i] = tt_device_alloc(device, e->att_bytes[i]);
    return tt_cpu_run_attention(in, x, in->num_operands, out, kept[i], NULL);
  }
  tt_status_t st = tt_cpu_run_attention(in, x, in->num_operands, out, NULL, kept[peer]);
  if (kept[peer]) {
    tt_counter_add("AttentionProbsKept", 1);
    tt_device_free(device, kept[peer], e->att_bytes[peer]);
  }
  kept[peer] = NULL;
  return st;
}

/* TORCHTPU_EXEC_PROFILE=1: every instruction's time goes into the metric
 * "ExecuteOp.<op>" (fused reductions as "fused_reduce", tier-1 fused
 * kernels as "fused"), and the copies of outputs that were not written in
 * place into "ExecuteOp.output_copy", so met.metrics_report() says where a
 * graph's execution time goes. TORCHTPU_EXEC_PROFILE=shapes also names the
 * shapes: "ExecuteOp.dot[64,384]<-[64,128],[384,128]/tb" (attributes of a
 * dot: /ta, /tb for transposed operands; a convolution that computed its
 * consumer as its epilogue is "conv2d+fused"). Off: one branch per
 * instruction. */
static int tt_exec_profile_on_(void) {
  static int on = -1;
  if (on < 0) on = tt_config()->exec_profile;
  return on;
}

static void tt_exec_profile_dims_(char *buf, size_t size, size_t *len, const tt_shape_t *s) {
  *len += (size_t)snprintf(buf + *len, *len < size ? size - *len : 0, "[");
  for (int32_t d = 0; d < s->rank; ++d) {
    *len += (size_t)snprintf(buf + *len, *len < size ? size - *len : 0, "%s%lld",
                             d ? "," : "", (long long)s->dims[d]);
  }
  *len += (size_t)snprintf(buf + *len, *len < size ? size - *len : 0, "]");
}

static void tt_exec_profile_add_(const tt_graph_t *g, const tt_instr_t *in, int64_t ns,
                                 int level, int with_epilogue) {
  char name[256];
  const char *op = tt_fused_is_reduce(in) ? "fused_reduce" : tt_op_name(in->op);
  size_t len = (size_t)snprintf(name, sizeof name, "ExecuteOp.%s%s", op,
                                with_epilogue ? "+fused" : "");
  if (level == 2) {
    tt_exec_profile_dims_(name, sizeof name, &len, &in->shape);
    for (int32_t k = 0; k < in->num_operands; ++k) {
      len += (size_t)snprintf(name + len, len < sizeof name ? sizeof name - len : 0, "%s",
                              k ? "," : "<-");
      tt_exec_profile_dims_(name, sizeof name, &len, &g->instrs[in->operands[k]].shape);
    }
    if (in->op == TT_OP_DOT) {
      tt_dot_attrs_t a;
      TT_ATTRS(in, &a);
      len += (size_t)snprintf(name + len, len < sizeof name ? sizeof name - len : 0, "%s%s",
                              a.trans_a ? "/ta" : "", a.trans_b ? "/tb" : "");
    }
  }
  tt_metric_add(name, TT_UNIT_NANOSECONDS, (double)ns);
}

/* Runs instruction i (not a graph input) into out with its executor. */
static tt_status_t tt_run_instr(const tt_cpu_plan_t *e, int32_t i, int32_t device,
                                const tt_input_value_t *inputs, void *const *vals,
                                tt_view_t *out) {
  const tt_graph_t *g = e->graph;
  const tt_instr_t *in = &g->instrs[i];
  tt_cpu_exec_fn fn = tt_cpu_executor(in->op);
  if (!fn) return tt_status_make(TT_UNIMPLEMENTED, "no kernel for op %s", tt_op_name(in->op));
  tt_view_t x[TT_CPU_EXEC_VIEWS];
  for (int k = 0; k < in->num_operands && k < TT_CPU_EXEC_VIEWS; ++k)
    x[k] = tt_cpu_view(&g->instrs[in->operands[k]], vals[in->operands[k]]);
  tt_cpu_exec_t c = {.plan = e, .graph = g, .index = i, .instr = in, .inputs = inputs,
                     .vals = vals, .x = x, .device = device};
  return fn(&c, out);
}

tt_status_t tt_cpu_execute(const tt_backend_t *self, tt_executable_t *exe, int32_t device,
                           const tt_input_value_t *inputs, void *const *output_data) {
  (void)self;
  const tt_cpu_plan_t *e = tt_cpu_plan_of(exe);
  if (!e)
    return tt_status_make(TT_INTERNAL, "the CPU backend cannot run an executable prepared by "
                          "the %s backend", tt_executable_backend(exe)->name);
  const tt_graph_t *g = e->graph;
  int32_t n = g->num_instrs;
  const int profile = tt_exec_profile_on_();
  void **vals = calloc((size_t)n + 1, sizeof(void *));
  uint8_t *owned = calloc((size_t)n + 1, 1);
  /* Scalars are stored inline: 8 bytes each. */
  int64_t *scalars = calloc((size_t)n + 1, sizeof(int64_t));
  /* Attention probabilities kept from a forward to its backward. */
  void **kept = e->att_peer ? calloc((size_t)n + 1, sizeof(void *)) : NULL;
  tt_status_t st = NULL;
  uint8_t *arena = NULL;
  if (!vals || !owned || !scalars || (e->att_peer && !kept)) {
    st = tt_status_make(TT_RESOURCE_EXHAUSTED, "out of memory (execute)");
    goto done;
  }
  if (e->arena_bytes) {
    arena = tt_device_alloc(device, e->arena_bytes);
    if (!arena) {
      st = tt_status_make(TT_RESOURCE_EXHAUSTED,
                          "out of device memory allocating the %zu-byte arena of %d instructions",
                          e->arena_bytes, n);
      goto done;
    }
  }
  tt_parallel_hold_begin();
  for (int32_t i = 0; i < n && !st; ++i) {
    const tt_instr_t *in = &g->instrs[i];
    if (in->op == TT_OP_PARAM) {
      vals[i] = tt_buffer_data(inputs[in->input_index].buffer);
    } else if (in->op == TT_OP_SCALAR) {
      tt_store_scalar(in->dtype, inputs[in->input_index].scalar_f,
                      inputs[in->input_index].scalar_i, &scalars[i]);
      vals[i] = &scalars[i];
    } else {
      size_t bytes = tt_instr_bytes(in);
      /* An epilogue its convolution has already computed. */
      int done_early = e->epi_src[i] >= 0 && e->epi_next[e->epi_src[i]] == i;
      if (e->alias[i] && e->slice_off[i] >= 0) {
        /* A contiguous slice: its bytes inside its operand's. */
        vals[i] = (char *)vals[in->operands[0]] + e->slice_off[i];
        if (profile) tt_metric_add("ExecuteOp.slice_alias", TT_UNIT_NANOSECONDS, 0.0);
        goto free_operands;
      }
      if (e->alias[i]) {
        /* Buffers are dense: a reshape is the same bytes, and an in-place
         * epilogue has already rewritten its convolution's. Alias them. */
        int32_t o = tt_cpu_alias_source(e, i);
        vals[i] = vals[o];
        owned[i] = owned[o]; /* i was o's last reader: it takes o over */
        owned[o] = 0;
        if (e->epi_src[i] < 0 || done_early) goto free_operands;
        /* else: an epilogue that runs at its own place, in place */
      } else if (done_early) {
        /* written into its output slot by its convolution's epilogue */
      } else if (e->direct_output[i] >= 0) {
        vals[i] = output_data[e->direct_output[i]];
      } else if (arena && e->offset[i] >= 0) {
        vals[i] = arena + e->offset[i]; /* the arena is freed once, at the end */
      } else {
        vals[i] = tt_device_alloc(device, bytes);
        if (!vals[i]) {
          st = tt_status_make(TT_RESOURCE_EXHAUSTED,
                              "out of device memory allocating %zu bytes for %%%d (%s)", bytes,
                              i, tt_op_name(in->op));
          break;
        }
        owned[i] = 1;
      }
      tt_view_t out = tt_cpu_view(in, vals[i]);
      int64_t t0 = profile ? tt_now_ns() : 0;
      int32_t f = e->epi_next[i];
      if (f >= 0) {
        vals[f] = e->direct_output[f] >= 0 ? output_data[e->direct_output[f]] : vals[i];
        st = tt_run_conv_epilogue(e, g, i, inputs, vals, &out);
      } else if (e->att_peer && e->att_peer[i] >= 0) {
        st = tt_run_attention_pair(e, g, i, device, vals, kept, &out);
      } else if (!done_early) {
        st = tt_run_instr(e, i, device, inputs, vals, &out);
      }
      if (profile && !done_early) tt_exec_profile_add_(g, in, tt_now_ns() - t0, profile, f >= 0);
      if (st) {
        tt_status_t wrapped = tt_status_make(tt_status_code(st), "%s", tt_status_message(st));
        tt_status_free(st);
        st = wrapped;
        break;
      }
    }
  free_operands:
    /* Free operands whose last use was this instruction. */
    for (int32_t k = 0; k < in->num_operands; ++k) {
      int32_t o = in->operands[k];
      if (owned[o] && g->instrs[o].last_use == i) {
        tt_device_free(device, vals[o], tt_instr_bytes(&g->instrs[o]));
        owned[o] = 0;
      }
    }
  }
  tt_parallel_hold_end();
  if (!st) {
    /* Outputs not written in place: parameters, scalars, repeated roots. */
    int64_t t0 = profile ? tt_now_ns() : 0;
    for (int32_t r = 0; r < g->num_outputs; ++r) {
      int32_t i = g->output_instr[r];
      if (e->direct_output[i] == r) continue;
      size_t bytes = tt_instr_bytes(&g->instrs[i]);
      if (bytes) memcpy(output_data[r], vals[i], bytes);
    }
    if (profile)
      tt_metric_add("ExecuteOp.output_copy", TT_UNIT_NANOSECONDS, (double)(tt_now_ns() - t0));
  }
done:
  if (vals && owned)
    for (int32_t i = 0; i < n; ++i)
      if (owned[i]) tt_device_free(device, vals[i], tt_instr_bytes(&g->instrs[i]));
  if (arena) tt_device_free(device, arena, e->arena_bytes);
  if (kept)
    for (int32_t i = 0; i < n; ++i)
      if (kept[i]) tt_device_free(device, kept[i], e->att_bytes[i]);
  free(kept);
  free(vals);
  free(owned);
  free(scalars);
  return st;
}
