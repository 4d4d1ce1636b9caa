/* Executables: a planned graph and its tier-0 executor, which walks the
 * instruction list calling one kernel per instruction. Intermediate buffers
 * live in one arena per execution, at offsets planned once from liveness
 * (tt_buffer_plan): an intermediate reuses the bytes of ones whose last
 * reader has run, so the arena follows the live set rather than the whole
 * graph, and an execution makes one allocation instead of one per
 * intermediate. With TORCHTPU_BUFFER_PLAN=0 each intermediate is allocated
 * on its own and freed right after its last use. */
#include <dlfcn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "runtime/runtime_internal.h"
#include "torchtpu/kernels.h"
#include "ir/ops_extra.h"
#include "torchtpu/metrics.h"
#include "torchtpu/pjrt.h"

struct tt_executable_s {
  int32_t refcount;
  tt_graph_t *graph;
  /* For each instruction, the output slot it is written to directly, or -1. */
  int32_t *direct_output;
  /* Per output: the graph input whose memory it may take, or -1. */
  int32_t *donor;
  /* Tier-1 kernels per instruction (NULL: tier 0), written atomically. */
  tt_fused_fn_t *kernels;
  void *dl_handle;
  int64_t runs;
  /* Per instruction: a reshape that aliases its operand's buffer (or a
   * slice, an epilogue: see slice_off, epi_src). */
  uint8_t *alias;
  /* Per instruction: a SLICE reading a contiguous range of its operand,
   * aliased at this byte offset into the operand's buffer; -1 otherwise. */
  int64_t *slice_off;
  /* Buffer plan: per instruction its arena offset, or -1 (not planned). */
  int64_t *offset;
  /* Convolution epilogues (tt_plan_epilogues): epi_next[conv] is the fused
   * instruction computed as the convolution stores its output, epi_src[f]
   * that convolution (both -1 otherwise). An epilogue not written to an
   * output slot runs in place: its result takes over the convolution's
   * buffer (alias[f]). */
  int32_t *epi_next, *epi_src;
  /* Attention pairs (tt_plan_attention_pairs): att_peer[fwd] is the
   * backward that reads the probabilities the forward keeps, and
   * att_peer[bwd] that forward (-1 otherwise); att_bytes[fwd] their size.
   * NULL when the graph has none. */
  int32_t *att_peer;
  size_t *att_bytes;
  size_t arena_bytes, planned_bytes;
};

size_t tt_executable_arena_bytes(const tt_executable_t *e) { return e->arena_bytes; }
size_t tt_executable_planned_bytes(const tt_executable_t *e) { return e->planned_bytes; }

void tt_executable_install_kernel(tt_executable_t *e, int32_t instr, tt_fused_fn_t fn) {
  if (instr < 0 || instr >= e->graph->num_instrs) return;
  __atomic_store_n(&e->kernels[instr], fn, __ATOMIC_RELEASE);
}

void tt_executable_adopt_library(tt_executable_t *e, void *dl_handle) {
  void *old = __atomic_exchange_n(&e->dl_handle, dl_handle, __ATOMIC_ACQ_REL);
  (void)old; /* a second library would keep the first alive: never unloaded early */
}

int64_t tt_executable_count_run(tt_executable_t *e) {
  return __atomic_fetch_add(&e->runs, 1, __ATOMIC_RELAXED);
}

int32_t tt_executable_num_kernels(const tt_executable_t *e) {
  int32_t n = 0;
  for (int32_t i = 0; i < e->graph->num_instrs; ++i)
    n += __atomic_load_n(&e->kernels[i], __ATOMIC_ACQUIRE) != NULL;
  return n;
}

/* The instruction below output reshape i's chain of reshapes that are not
 * outputs themselves. */
static int32_t tt_forwarded_producer_(const tt_executable_t *e, const tt_graph_t *g, int32_t i) {
  int32_t p = g->instrs[i].operands[0];
  while (g->instrs[p].op == TT_OP_RESHAPE && e->direct_output[p] < 0) p = g->instrs[p].operands[0];
  return p;
}

/* group_last[i]: the last instruction reading i or any reshape chain
 * hanging off it (all of which may end up sharing i's bytes), with
 * epi_src, any in-place epilogue that takes i's buffer over, and with
 * slice_off, the slices that may read into it. */
static void tt_group_last_(const tt_graph_t *g, const int32_t *epi_src,
                           const int32_t *direct_output, const int64_t *slice_off,
                           int32_t *group_last) {
  int32_t n = g->num_instrs;
  for (int32_t i = 0; i < n; ++i) group_last[i] = g->instrs[i].last_use;
  for (int32_t i = n - 1; i >= 0; --i) {
    const tt_instr_t *in = &g->instrs[i];
    int32_t o = in->op == TT_OP_RESHAPE || (slice_off && slice_off[i] >= 0) ? in->operands[0]
                                                                            : -1;
    if (epi_src && epi_src[i] >= 0 && direct_output[i] < 0) o = epi_src[i];
    if (o >= 0 && group_last[i] > group_last[o]) group_last[o] = group_last[i];
  }
}

/* Donation candidates: output r produced (written directly) by a fused
 * elementwise instruction that reads a PARAM input of the same shape and
 * dtype as its last reader, reshapes of it included; the fused kernels
 * load each element before storing it, so the update can happen in place.
 * Each input donates once. A reshape of the input read later (a weight
 * viewed as [1, m, k] by a backward GEMM the schedule put after the
 * optimizer's update) would need a copy of the old bytes: that input is
 * not donated, and the update gets a fresh buffer instead. */
static tt_status_t tt_plan_donation(const tt_graph_t *g, const int32_t *direct_output,
                                    int32_t *donor) {
  int32_t *group_last = malloc(sizeof(int32_t) * ((size_t)g->num_instrs + 1));
  if (!group_last) return tt_status_make(TT_RESOURCE_EXHAUSTED, "out of memory (executable)");
  tt_group_last_(g, NULL, direct_output, NULL, group_last);
  for (int32_t r = 0; r < g->num_outputs; ++r) {
    donor[r] = -1;
    int32_t i = g->output_instr[r];
    const tt_instr_t *in = &g->instrs[i];
    if (in->op != TT_OP_FUSED || tt_fused_is_reduce(in) || direct_output[i] != r) continue;
    for (int32_t k = 0; k < in->num_operands; ++k) {
      const tt_instr_t *p = &g->instrs[in->operands[k]];
      if (p->op != TT_OP_PARAM || p->last_use != i || group_last[in->operands[k]] > i ||
          p->dtype != in->dtype || !tt_shape_equal(&p->shape, &in->shape))
        continue;
      int taken = 0;
      for (int32_t q = 0; q < r; ++q) taken |= donor[q] == p->input_index;
      if (!taken) {
        donor[r] = p->input_index;
        break;
      }
    }
  }
  free(group_last);
  return NULL;
}

/* An output that is a reshape (chain) of an intermediate: the producer
 * writes into the output's buffer (the same bytes, buffers being dense)
 * and the reshapes alias it, instead of a copy of the whole value. Weight
 * gradients come out this way: a GEMM's [1, m, n] viewed as [m, n]. */
static void tt_plan_output_forwarding(tt_executable_t *e) {
  const tt_graph_t *g = e->graph;
  for (int32_t r = 0; r < g->num_outputs; ++r) {
    int32_t i = g->output_instr[r];
    if (g->instrs[i].op != TT_OP_RESHAPE || e->direct_output[i] != r) continue;
    int32_t p = tt_forwarded_producer_(e, g, i);
    tt_op_t op = g->instrs[p].op;
    if (op == TT_OP_PARAM || op == TT_OP_SCALAR || e->direct_output[p] >= 0) continue;
    e->direct_output[p] = r;
  }
}

tt_status_t tt_executable_bind_outputs(tt_executable_t *e, int32_t device,
                                       const tt_input_value_t *inputs,
                                       tt_buffer_t *const *outputs, void **out_data) {
  const tt_graph_t *g = e->graph;
  int64_t aliased = 0;
  for (int32_t r = 0; r < g->num_outputs; ++r) {
    tt_buffer_t *b = outputs[r];
    int32_t k = e->donor[r];
    tt_buffer_t *in = k >= 0 ? inputs[k].buffer : NULL;
    /* Only this execution references the input: nobody can read it later. */
    if (in && !in->donated && in->nbytes == b->nbytes && in->device == device &&
        __atomic_load_n(&in->refcount, __ATOMIC_ACQUIRE) == 1) {
      in->donated = 1;
      b->data = in->data;
      tt_counter_add("InputOutputAliasCount", 1);
      aliased++;
    } else {
      b->data = tt_device_alloc(device, b->nbytes);
      if (!b->data)
        return tt_status_make(TT_RESOURCE_EXHAUSTED, "out of device memory allocating %zu bytes",
                              b->nbytes);
    }
    out_data[r] = b->data;
  }
  /* PyTorch/XLA's metric of the same name: one sample per graph, the
   * outputs that took an input's buffer (in-place updates). */
  tt_metric_add("InputOutputAliasCount", TT_UNIT_COUNT, (double)aliased);
  return NULL;
}

static int tt_reshape_aliases_(const tt_executable_t *e, const tt_graph_t *g,
                               const tt_instr_t *in, const uint8_t *owned,
                               const int32_t *group_last, int planned);

/* Where operand o of convolution i's epilogue is read at the time the
 * convolution runs: o itself when computed before i, else the end of the
 * chain of reshapes (aliasing ones, with `aliased`; the plan decides that
 * later) to an instruction before i or a graph input. -1: not available. */
static int32_t tt_epi_root_(const tt_executable_t *e, const tt_graph_t *g, int32_t o, int32_t i,
                            int aliased) {
  while (o > i && g->instrs[o].op == TT_OP_RESHAPE && (!aliased || e->alias[o]))
    o = g->instrs[o].operands[0];
  return o < i || g->instrs[o].op == TT_OP_PARAM ? o : -1;
}

/* Convolution epilogues: a CONV2D whose only reader is an elementwise
 * fused instruction f of its shape (eval-mode batch norm, activation,
 * residual add) computes f over each output plane or image right after
 * storing it, while it is still in cache, instead of f streaming the whole
 * output back from memory later. Taken when every other operand of f is
 * computed before the convolution, and f either writes an output slot no
 * input is donated to, or has the convolution's dtype (it then runs in
 * place over the convolution's buffer). TORCHTPU_CONV_EPILOGUE=0 turns it
 * off. */
static tt_status_t tt_plan_epilogues(tt_executable_t *e) {
  const tt_graph_t *g = e->graph;
  int32_t n = g->num_instrs;
  e->epi_next = malloc(sizeof(int32_t) * ((size_t)n + 1));
  e->epi_src = malloc(sizeof(int32_t) * ((size_t)n + 1));
  int32_t *readers = calloc((size_t)n + 1, sizeof(int32_t));
  if (!e->epi_next || !e->epi_src || !readers) {
    free(readers);
    return tt_status_make(TT_RESOURCE_EXHAUSTED, "out of memory (executable)");
  }
  for (int32_t i = 0; i < n; ++i) e->epi_next[i] = e->epi_src[i] = -1;
  const char *env = getenv("TORCHTPU_CONV_EPILOGUE");
  if (env && strcmp(env, "0") == 0) {
    free(readers);
    return NULL;
  }
  /* readers[o]: distinct instructions reading o; reader[o]: the last. */
  int32_t *reader = malloc(sizeof(int32_t) * ((size_t)n + 1));
  if (!reader) {
    free(readers);
    return tt_status_make(TT_RESOURCE_EXHAUSTED, "out of memory (executable)");
  }
  for (int32_t i = 0; i < n; ++i) reader[i] = -1;
  for (int32_t i = 0; i < n; ++i) {
    const tt_instr_t *in = &g->instrs[i];
    for (int32_t k = 0; k < in->num_operands; ++k) {
      int32_t o = in->operands[k];
      if (reader[o] != i) {
        readers[o]++;
        reader[o] = i;
      }
    }
  }
  for (int32_t r = 0; r < g->num_outputs; ++r) readers[g->output_instr[r]] = 2;
  for (int32_t i = 0; i < n; ++i) {
    const tt_instr_t *cv = &g->instrs[i];
    if (cv->op != TT_OP_CONV2D || readers[i] != 1 || e->direct_output[i] >= 0) continue;
    int32_t f = reader[i];
    const tt_instr_t *fi = &g->instrs[f];
    if (fi->op != TT_OP_FUSED || tt_fused_is_reduce(fi) || fi->num_operands > 64 ||
        e->epi_src[f] >= 0 || !tt_shape_equal(&fi->shape, &cv->shape))
      continue;
    int ready = 1;
    for (int32_t k = 0; k < fi->num_operands; ++k)
      ready &= fi->operands[k] == i || tt_epi_root_(e, g, fi->operands[k], i, 0) >= 0;
    int32_t slot = e->direct_output[f];
    if (!ready || (slot >= 0 ? e->donor[slot] >= 0 : fi->dtype != cv->dtype)) continue;
    e->epi_next[i] = f;
    e->epi_src[f] = i;
  }
  free(reader);
  free(readers);
  return NULL;
}

/* Attention pairs: a forward ATTENTION and an ATTENTION_BWD that can
 * share the forward's probabilities (tt_attention_kept_bytes, as a
 * training step has them) keep them for the backward, which then skips
 * recomputing q k^T and its softmax: the decoder of bench_training.py, a
 * 64-key causal attention, ran its backward ~35% faster
 * (docs/compiler.md). TORCHTPU_ATTENTION_KEEP_PROBS=0 turns it off. */
static tt_status_t tt_plan_attention_pairs(tt_executable_t *e) {
  const tt_graph_t *g = e->graph;
  int32_t n = g->num_instrs;
  const char *env = getenv("TORCHTPU_ATTENTION_KEEP_PROBS");
  if (env && strcmp(env, "0") == 0) return NULL;
  for (int32_t b = 0; b < n; ++b) {
    const tt_instr_t *bi = &g->instrs[b];
    if (bi->op != TT_OP_ATTENTION_BWD) continue;
    for (int32_t f = 0; f < b; ++f) {
      const tt_instr_t *fi = &g->instrs[f];
      if (fi->op != TT_OP_ATTENTION || (e->att_peer && e->att_peer[f] >= 0)) continue;
      size_t bytes = tt_attention_kept_bytes(g, fi, bi);
      if (!bytes) continue;
      if (!e->att_peer) {
        e->att_peer = malloc(sizeof(int32_t) * ((size_t)n + 1));
        e->att_bytes = calloc((size_t)n + 1, sizeof(size_t));
        if (!e->att_peer || !e->att_bytes)
          return tt_status_make(TT_RESOURCE_EXHAUSTED, "out of memory (executable)");
        for (int32_t i = 0; i < n; ++i) e->att_peer[i] = -1;
      }
      e->att_peer[f] = b;
      e->att_peer[b] = f;
      e->att_bytes[f] = bytes;
      break;
    }
  }
  return NULL;
}

/* After the buffer plan: an epilogue reading a reshape the plan copies
 * (instead of aliasing) runs at its own place, in place when it shares
 * the convolution's buffer. */
static void tt_check_epilogues(tt_executable_t *e) {
  const tt_graph_t *g = e->graph;
  for (int32_t i = 0; i < g->num_instrs; ++i) {
    int32_t f = e->epi_next[i];
    if (f < 0) continue;
    const tt_instr_t *fi = &g->instrs[f];
    for (int32_t k = 0; k < fi->num_operands; ++k) {
      if (fi->operands[k] != i && tt_epi_root_(e, g, fi->operands[k], i, 1) < 0) {
        e->epi_next[i] = -1;
        if (!e->alias[f]) e->epi_src[f] = -1;
        break;
      }
    }
  }
}

/* Whether graph input `param` is donated to an output whose update runs at
 * or before instruction `last` (so a view of its bytes read up to `last`
 * would see the update). */
static int tt_donated_before_(const tt_executable_t *e, const tt_graph_t *g,
                              const tt_instr_t *param, int32_t last) {
  for (int32_t r = 0; r < g->num_outputs; ++r)
    if (e->donor[r] == param->input_index && last >= g->output_instr[r]) return 1;
  return 0;
}

/* The byte offset of slice i's range in its operand when that range is
 * contiguous (unit steps; every dim after the last one it cuts taken
 * whole, every dim before it of extent 1: q, k and v out of one [3, ...]
 * projection), else -1. */
static int64_t tt_slice_view_offset_(const tt_graph_t *g, int32_t i) {
  const tt_instr_t *in = &g->instrs[i];
  if (in->op != TT_OP_SLICE || tt_instr_bytes(in) == 0) return -1;
  const tt_instr_t *x = &g->instrs[in->operands[0]];
  if (x->op == TT_OP_SCALAR || x->dtype != in->dtype) return -1;
  int r = x->shape.rank;
  const int64_t *start = in->iattrs, *step = in->iattrs + 2 * r;
  int cut = -1; /* the last dim not taken whole */
  for (int d = 0; d < r; ++d) {
    if (step[d] != 1) return -1;
    if (in->shape.dims[d] != x->shape.dims[d]) cut = d;
  }
  for (int d = 0; d < cut; ++d)
    if (in->shape.dims[d] != 1) return -1;
  int64_t off = 0, stride = 1;
  for (int d = r - 1; d >= 0; --d) {
    off += start[d] * stride;
    stride *= x->shape.dims[d];
  }
  return off * (int64_t)tt_dtype_size(in->dtype);
}

/* The instruction whose buffer instruction i takes over, when alias[i]. */
static int32_t tt_alias_source_(const tt_executable_t *e, const tt_graph_t *g, int32_t i) {
  return e->epi_src[i] >= 0 ? e->epi_src[i] : g->instrs[i].operands[0];
}

/* Which reshapes alias their operand (decided from the graph alone: the
 * executor's ownership walk without running anything), then the arena
 * plan: one buffer per owned intermediate, live from its producer to the
 * last reader of the last reshape that took it over. */
static tt_status_t tt_plan_memory(tt_executable_t *e) {
  const tt_graph_t *g = e->graph;
  int32_t n = g->num_instrs;
  e->alias = calloc((size_t)n + 1, 1);
  e->offset = malloc(sizeof(int64_t) * ((size_t)n + 1));
  e->slice_off = malloc(sizeof(int64_t) * ((size_t)n + 1));
  uint8_t *owned = calloc((size_t)n + 1, 1);
  int32_t *holder = malloc(sizeof(int32_t) * ((size_t)n + 1)); /* buffer -> last holder */
  int32_t *owner = malloc(sizeof(int32_t) * ((size_t)n + 1));  /* holder -> buffer */
  int32_t *bufs = malloc(sizeof(int32_t) * ((size_t)n + 1));
  size_t *sizes = malloc(sizeof(size_t) * ((size_t)n + 1));
  size_t *offs = malloc(sizeof(size_t) * ((size_t)n + 1));
  int32_t *start = malloc(sizeof(int32_t) * ((size_t)n + 1));
  int32_t *end = malloc(sizeof(int32_t) * ((size_t)n + 1));
  int32_t *group_last = malloc(sizeof(int32_t) * ((size_t)n + 1));
  tt_status_t st = NULL;
  if (!e->alias || !e->offset || !e->slice_off || !owned || !holder || !owner || !bufs ||
      !sizes || !offs || !start || !end || !group_last) {
    st = tt_status_make(TT_RESOURCE_EXHAUSTED, "out of memory (executable)");
    goto done;
  }
  const char *env = getenv("TORCHTPU_BUFFER_PLAN");
  const int planned = !(env && strcmp(env, "0") == 0);
  /* Slice candidates first (from the graph's structure), so the lifetimes
   * cover their readers; a candidate turned down below only keeps its
   * operand's slot a little longer. */
  for (int32_t i = 0; i < n; ++i)
    e->slice_off[i] = planned && e->direct_output[i] < 0 ? tt_slice_view_offset_(g, i) : -1;
  tt_group_last_(g, e->epi_src, e->direct_output, e->slice_off, group_last);
  int32_t nb = 0;
  for (int32_t i = 0; i < n; ++i) {
    const tt_instr_t *in = &g->instrs[i];
    e->offset[i] = -1;
    owner[i] = -1;
    if (in->op == TT_OP_RESHAPE && e->direct_output[i] >= 0 &&
        e->direct_output[tt_forwarded_producer_(e, g, i)] == e->direct_output[i]) {
      e->alias[i] = 1; /* an output its producer writes (tt_plan_output_forwarding) */
      continue;
    }
    if (in->op == TT_OP_PARAM || in->op == TT_OP_SCALAR || e->direct_output[i] >= 0) continue;
    if (e->slice_off[i] >= 0) {
      /* The slice reads its range in place: the operand's slot (or input,
       * or output buffer) outlives every reader of the slice, since
       * group_last counted them; a donated input must not be updated
       * before they have run. Not owned: nothing frees it early. */
      const tt_instr_t *src = &g->instrs[in->operands[0]];
      if (src->op != TT_OP_PARAM || !tt_donated_before_(e, g, src, group_last[i])) {
        e->alias[i] = 1;
        continue;
      }
      e->slice_off[i] = -1;
    }
    if ((in->op == TT_OP_RESHAPE && tt_reshape_aliases_(e, g, in, owned, group_last, planned)) ||
        e->epi_src[i] >= 0) {
      int32_t o = tt_alias_source_(e, g, i);
      e->alias[i] = 1;
      owned[i] = owned[o];
      owned[o] = 0;
      if (owned[i]) {
        owner[i] = owner[o];
        holder[owner[i]] = i;
      }
      continue;
    }
    owned[i] = 1;
    owner[i] = nb;
    holder[nb] = i;
    bufs[nb] = i;
    sizes[nb] = tt_instr_bytes(in);
    start[nb] = i;
    nb++;
  }
  if (!planned) goto done;
  /* A buffer lives until the last reader of its producer or of any
   * reshape chain hanging off it (they may all share its bytes). */
  for (int32_t b = 0; b < nb; ++b) {
    end[b] = g->instrs[holder[b]].last_use;
    if (group_last[bufs[b]] > end[b]) end[b] = group_last[bufs[b]];
  }
  st = tt_buffer_plan(nb, sizes, start, end, offs, &e->arena_bytes);
  if (st) goto done;
  for (int32_t b = 0; b < nb; ++b) {
    e->offset[bufs[b]] = (int64_t)offs[b];
    e->planned_bytes += sizes[b];
  }
done:
  free(owned);
  free(holder);
  free(owner);
  free(bufs);
  free(sizes);
  free(offs);
  free(start);
  free(end);
  free(group_last);
  return st;
}

tt_status_t tt_executable_create(tt_graph_t *graph, tt_executable_t **out_exe) {
  *out_exe = NULL;
  tt_executable_t *e = calloc(1, sizeof(*e));
  if (!e) return tt_status_make(TT_RESOURCE_EXHAUSTED, "out of memory (executable)");
  e->direct_output = malloc(sizeof(int32_t) * ((size_t)graph->num_instrs + 1));
  if (!e->direct_output) {
    free(e);
    return tt_status_make(TT_RESOURCE_EXHAUSTED, "out of memory (executable)");
  }
  e->kernels = calloc((size_t)graph->num_instrs + 1, sizeof(tt_fused_fn_t));
  if (!e->kernels) {
    free(e->direct_output);
    free(e);
    return tt_status_make(TT_RESOURCE_EXHAUSTED, "out of memory (executable)");
  }
  for (int32_t i = 0; i < graph->num_instrs; ++i) e->direct_output[i] = -1;
  for (int32_t r = 0; r < graph->num_outputs; ++r) {
    int32_t i = graph->output_instr[r];
    tt_op_t op = graph->instrs[i].op;
    if (e->direct_output[i] < 0 && op != TT_OP_PARAM && op != TT_OP_SCALAR)
      e->direct_output[i] = r;
  }
  e->donor = malloc(sizeof(int32_t) * ((size_t)graph->num_outputs + 1));
  if (!e->donor) {
    free(e->kernels);
    free(e->direct_output);
    free(e);
    return tt_status_make(TT_RESOURCE_EXHAUSTED, "out of memory (executable)");
  }
  e->refcount = 1;
  e->graph = graph;
  tt_status_t st = tt_plan_donation(graph, e->direct_output, e->donor);
  if (!st) tt_plan_output_forwarding(e);
  if (!st) st = tt_plan_epilogues(e);
  if (!st) st = tt_plan_attention_pairs(e);
  if (!st) st = tt_plan_memory(e);
  if (!st) tt_check_epilogues(e);
  if (st) {
    e->graph = NULL;
    tt_executable_release(e);
    return st;
  }
  *out_exe = e;
  return NULL;
}

void tt_executable_retain(tt_executable_t *e) {
  __atomic_add_fetch(&e->refcount, 1, __ATOMIC_RELAXED);
}

void tt_executable_release(tt_executable_t *e) {
  if (!e || __atomic_sub_fetch(&e->refcount, 1, __ATOMIC_ACQ_REL) != 0) return;
  if (e->graph) tt_graph_destroy(e->graph);
  free(e->alias);
  free(e->slice_off);
  free(e->offset);
  free(e->epi_next);
  free(e->epi_src);
  free(e->att_peer);
  free(e->att_bytes);
  free(e->direct_output);
  free(e->kernels);
  free(e->donor);
  if (e->dl_handle) dlclose(e->dl_handle);
  free(e);
}

const tt_graph_t *tt_executable_graph(const tt_executable_t *e) { return e->graph; }

void tt_store_scalar(tt_dtype_t dt, double f, int64_t i, void *dst) {
  switch (dt) {
    case TT_F32: *(float *)dst = (float)f; break;
    case TT_F64: *(double *)dst = f; break;
    case TT_F16: *(uint16_t *)dst = tt_f32_to_f16((float)f); break;
    case TT_BF16: *(uint16_t *)dst = tt_f32_to_bf16((float)f); break;
    case TT_I8: *(int8_t *)dst = (int8_t)i; break;
    case TT_U8: *(uint8_t *)dst = (uint8_t)i; break;
    case TT_I16: *(int16_t *)dst = (int16_t)i; break;
    case TT_I32: *(int32_t *)dst = (int32_t)i; break;
    case TT_I64: *(int64_t *)dst = i; break;
    case TT_BOOL: *(uint8_t *)dst = i != 0; break;
    default: break;
  }
}

size_t tt_instr_bytes(const tt_instr_t *in) {
  return (size_t)tt_shape_numel(&in->shape) * tt_dtype_size(in->dtype);
}

static tt_view_t tt_make_view(const tt_instr_t *in, void *data) {
  tt_view_t v;
  v.data = data;
  v.dtype = in->dtype;
  v.shape = in->shape;
  return v;
}

static void tt_conv_params(const int64_t *ia, tt_conv2d_params_t *p) {
  p->stride[0] = ia[0];
  p->stride[1] = ia[1];
  p->pad[0] = ia[2];
  p->pad[1] = ia[3];
  p->dilation[0] = ia[4];
  p->dilation[1] = ia[5];
  p->groups = ia[6];
}

static void tt_pool_params(const int64_t *ia, int avg, tt_pool2d_params_t *p) {
  memset(p, 0, sizeof(*p));
  p->kernel[0] = ia[0];
  p->kernel[1] = ia[1];
  p->stride[0] = ia[2];
  p->stride[1] = ia[3];
  p->pad[0] = ia[4];
  p->pad[1] = ia[5];
  if (avg) {
    p->dilation[0] = p->dilation[1] = 1;
    p->ceil_mode = (int)ia[6];
    p->count_include_pad = (int)ia[7];
    p->divisor_override = ia[8];
  } else {
    p->dilation[0] = ia[6];
    p->dilation[1] = ia[7];
    p->ceil_mode = (int)ia[8];
  }
}

typedef struct tt_tier1_ctx_s {
  tt_fused_fn_t fn;
  const void *const *inputs;
  void *out;
} tt_tier1_ctx_t;

static void tt_tier1_range(void *ctx, int64_t begin, int64_t end) {
  const tt_tier1_ctx_t *c = ctx;
  c->fn(c->inputs, c->out, begin, end);
}

/* Runs one instruction into out (already allocated). */
/* The buffer id of a DOT's B when it is a graph input (through reshapes
 * that alias it): its bytes cannot change while the key lives, so the
 * GEMM may keep it packed (blas_ext.c). 0 otherwise. */
static uint64_t tt_dot_b_key_(const tt_executable_t *e, const tt_graph_t *g,
                              const tt_instr_t *in, const tt_input_value_t *inputs) {
  int32_t o = in->operands[1];
  while (g->instrs[o].op == TT_OP_RESHAPE && e->alias[o]) o = g->instrs[o].operands[0];
  const tt_instr_t *p = &g->instrs[o];
  if (p->op != TT_OP_PARAM || p->dtype != TT_F32 || !inputs[p->input_index].buffer) return 0;
  return tt_buffer_key(inputs[p->input_index].buffer);
}

static tt_status_t tt_run_instr(const tt_executable_t *e, const tt_graph_t *g, int32_t idx,
                                const tt_input_value_t *inputs, void *const *vals,
                                tt_view_t *out) {
  const tt_instr_t *in = &g->instrs[idx];
  const int64_t *ia = in->iattrs;
  /* Operand views of fixed-arity ops (attention's backward has the most,
   * five); concat and fused instructions read theirs below. */
  tt_view_t x[5];
  for (int k = 0; k < in->num_operands && k < 5; ++k)
    x[k] = tt_make_view(&g->instrs[in->operands[k]], vals[in->operands[k]]);
  switch (in->op) {
    case TT_OP_UNARY:
      return tt_kernel_unary((tt_unary_op_t)ia[0], &x[0], in->fattrs[0], in->fattrs[1], out);
    case TT_OP_BINARY:
      return tt_kernel_binary((tt_binary_op_t)ia[0], &x[0], &x[1], out);
    case TT_OP_WHERE:
      return tt_kernel_where(&x[0], &x[1], &x[2], out);
    case TT_OP_CONVERT:
      return tt_kernel_convert(&x[0], out);
    case TT_OP_BROADCAST:
      return tt_kernel_broadcast(&x[0], out);
    case TT_OP_RESHAPE:
      memcpy(out->data, x[0].data, tt_instr_bytes(in));
      return NULL;
    case TT_OP_IOTA:
      return tt_kernel_iota(in->fattrs[0], in->fattrs[1], out);
    case TT_OP_REDUCE:
      return tt_kernel_reduce((tt_reduce_op_t)ia[0], &x[0], (uint32_t)ia[1], out);
    case TT_OP_SCAN:
      return tt_kernel_scan((tt_scan_op_t)ia[0], &x[0], (int)ia[1], out);
    case TT_OP_DOT:
      return tt_kernel_dot_keyed(&x[0], &x[1], (int)ia[0], (int)ia[1], out,
                                 tt_dot_b_key_(e, g, in, inputs));
    case TT_OP_CONV2D:
    case TT_OP_CONV2D_BWD_INPUT:
    case TT_OP_CONV2D_BWD_WEIGHT: {
      tt_conv2d_params_t p;
      tt_conv_params(ia, &p);
      if (in->op == TT_OP_CONV2D) return tt_kernel_conv2d(&x[0], &x[1], &p, out);
      if (in->op == TT_OP_CONV2D_BWD_INPUT)
        return tt_kernel_conv2d_backward_input(&x[0], &x[1], &p, out);
      return tt_kernel_conv2d_backward_weight(&x[0], &x[1], &p, out);
    }
    case TT_OP_MAX_POOL2D:
    case TT_OP_MAX_POOL2D_INDICES: {
      tt_pool2d_params_t p;
      tt_pool_params(ia, 0, &p);
      /* The values alone take the kernel's index-free path; the indices
       * come with values the kernel writes to a scratch buffer. */
      if (in->op == TT_OP_MAX_POOL2D) return tt_kernel_max_pool2d(&x[0], &p, out, NULL);
      tt_view_t other;
      other.shape = out->shape;
      size_t n = (size_t)tt_shape_numel(&out->shape);
      other.dtype = x[0].dtype;
      other.data = malloc(n * tt_dtype_size(x[0].dtype) + 8);
      if (!other.data) return tt_status_make(TT_RESOURCE_EXHAUSTED, "out of memory");
      tt_status_t st = tt_kernel_max_pool2d(&x[0], &p, &other, out);
      free(other.data);
      return st;
    }
    case TT_OP_MAX_POOL2D_BWD:
      return tt_kernel_max_pool2d_backward(&x[0], &x[1], out);
    case TT_OP_AVG_POOL2D: {
      tt_pool2d_params_t p;
      tt_pool_params(ia, 1, &p);
      return tt_kernel_avg_pool2d(&x[0], &p, out);
    }
    case TT_OP_AVG_POOL2D_BWD: {
      tt_pool2d_params_t p;
      tt_pool_params(ia, 1, &p);
      return tt_kernel_avg_pool2d_backward(&x[0], &p, out);
    }
    case TT_OP_ADAPTIVE_AVG_POOL2D:
      return tt_kernel_adaptive_avg_pool2d(&x[0], out);
    case TT_OP_ADAPTIVE_AVG_POOL2D_BWD:
      return tt_kernel_adaptive_avg_pool2d_backward(&x[0], out);
    case TT_OP_TRANSPOSE: {
      int32_t perm[TT_MAX_RANK];
      for (int d = 0; d < in->shape.rank; ++d) perm[d] = (int32_t)ia[d];
      return tt_kernel_transpose(&x[0], perm, out);
    }
    case TT_OP_SLICE:
    case TT_OP_SLICE_SCATTER: {
      int r = g->instrs[in->operands[0]].shape.rank;
      if (in->op == TT_OP_SLICE) return tt_kernel_slice(&x[0], ia, ia + 2 * r, out);
      return tt_kernel_slice_scatter(&x[0], &x[1], ia, ia + 2 * r, out);
    }
    case TT_OP_FUSED: {
      int n = in->num_operands;
      tt_fused_fn_t fn = __atomic_load_n(&e->kernels[idx], __ATOMIC_ACQUIRE);
      if (fn) {
        const void *ptrs[64];
        if (n <= 64) {
          for (int k = 0; k < n; ++k) ptrs[k] = vals[in->operands[k]];
          tt_tier1_ctx_t c = {fn, ptrs, out->data};
          /* A fused reduction's kernel computes whole results: a grain of
           * about 16384 domain elements. */
          int64_t numel = tt_shape_numel(&in->shape), grain = 16384;
          if (tt_fused_is_reduce(in)) {
            tt_shape_t dom = tt_fused_domain(in);
            int64_t per = numel ? tt_shape_numel(&dom) / numel : 1;
            grain = per >= grain ? 1 : grain / (per ? per : 1);
          }
          tt_parallel_for(numel, grain, tt_tier1_range, &c);
          return NULL;
        }
      }
      tt_view_t *vs = malloc(sizeof(tt_view_t) * (size_t)(n ? n : 1));
      if (!vs) return tt_status_make(TT_RESOURCE_EXHAUSTED, "out of memory");
      for (int k = 0; k < n; ++k)
        vs[k] = tt_make_view(&g->instrs[in->operands[k]], vals[in->operands[k]]);
      tt_status_t st = tt_execute_fused(in, vs, n, out);
      free(vs);
      return st;
    }
    case TT_OP_CONCAT: {
      int n = in->num_operands;
      tt_view_t *vs = malloc(sizeof(tt_view_t) * (size_t)n);
      const tt_view_t **ps = malloc(sizeof(tt_view_t *) * (size_t)n);
      if (!vs || !ps) {
        free(vs);
        free(ps);
        return tt_status_make(TT_RESOURCE_EXHAUSTED, "out of memory");
      }
      for (int k = 0; k < n; ++k) {
        vs[k] = tt_make_view(&g->instrs[in->operands[k]], vals[in->operands[k]]);
        ps[k] = &vs[k];
      }
      tt_status_t st = tt_kernel_concat(ps, n, (int)ia[0], out);
      free(vs);
      free(ps);
      return st;
    }
    case TT_OP_PAD: {
      int r = in->shape.rank;
      return tt_kernel_pad(&x[0], ia, ia + r, in->fattrs[0], out);
    }
    case TT_OP_FLIP:
      return tt_kernel_flip(&x[0], (uint32_t)ia[0], out);
    case TT_OP_INDEX_SELECT:
      return tt_kernel_index_select(&x[0], (int)ia[0], &x[1], out);
    case TT_OP_INDEX_ADD:
      return tt_kernel_index_add(&x[0], (int)ia[0], &x[1], &x[2], out);
    case TT_OP_GATHER:
      return tt_kernel_gather(&x[0], (int)ia[0], &x[1], out);
    case TT_OP_SCATTER:
      return tt_kernel_scatter(&x[0], (int)ia[0], &x[1], &x[2], in->num_iattrs > 1 ? (int)ia[1] : 0,
                               out);
    case TT_OP_SOFTMAX:
      if (in->num_iattrs > 2 && in->iattrs[2]) { /* packed [log_softmax | softmax] */
        int64_t n = tt_shape_numel(&x[0].shape);
        tt_view_t y = {.data = out->data, .dtype = TT_F32, .shape = x[0].shape};
        tt_view_t p = {.data = (float *)out->data + n, .dtype = TT_F32, .shape = x[0].shape};
        return tt_kernel_log_softmax_probs(&x[0], in->num_operands == 2 ? &x[1] : NULL, &y, &p);
      }
      if (in->num_operands == 2) /* with a bias row (simplify.c) */
        return tt_kernel_softmax_bias(&x[0], &x[1], (int)ia[0], (int)ia[1], out);
      return tt_kernel_softmax(&x[0], (int)ia[0], (int)ia[1], out);
    case TT_OP_SOFTMAX_BWD:
      return tt_kernel_softmax_backward(&x[0], &x[1], (int)ia[0], (int)ia[1], out);
    case TT_OP_RNG: {
      int64_t seed = *(const int64_t *)x[0].data;
      return tt_kernel_rng((tt_rng_op_t)ia[0], (uint64_t)seed, 0, in->fattrs[0], in->fattrs[1],
                           out);
    }
    case TT_OP_ARGSORT:
    case TT_OP_SEARCHSORTED:
    case TT_OP_SCATTER_REDUCE:
    case TT_OP_CUMULATIVE:
    case TT_OP_LINALG:
    case TT_OP_BITCAST:
    case TT_OP_SPECIAL:
    case TT_OP_FFT:
    case TT_OP_ALL_REDUCE:
    case TT_OP_ALL_GATHER:
    case TT_OP_REDUCE_SCATTER:
    case TT_OP_ALL_TO_ALL:
    case TT_OP_COLLECTIVE_PERMUTE:
    case TT_OP_SPMD_FULL_TO_SHARD:
    case TT_OP_SPMD_SHARD_TO_FULL:
    case TT_OP_ATTENTION:
    case TT_OP_ATTENTION_BWD:
    case TT_OP_LAYER_NORM:
    case TT_OP_LAYER_NORM_BWD:
      return tt_run_instr_extra(in, x, in->num_operands, out);
    default:
      return tt_status_make(TT_UNIMPLEMENTED, "no kernel for op %s", tt_op_name(in->op));
  }
}

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
static tt_status_t tt_run_conv_epilogue(const tt_executable_t *e, const tt_graph_t *g,
                                        int32_t i, const tt_input_value_t *inputs,
                                        void *const *vals, tt_view_t *out) {
  const tt_instr_t *in = &g->instrs[i];
  int32_t f = e->epi_next[i];
  const tt_instr_t *fi = &g->instrs[f];
  tt_view_t x[2], fout = tt_make_view(fi, vals[f]), fin[64];
  for (int k = 0; k < 2; ++k) x[k] = tt_make_view(&g->instrs[in->operands[k]], vals[in->operands[k]]);
  tt_epi_exec_t ex = {0};
  ex.fn = __atomic_load_n(&e->kernels[f], __ATOMIC_ACQUIRE);
  ex.out = vals[f];
  for (int k = 0; k < fi->num_operands; ++k) {
    int32_t o = fi->operands[k];
    int32_t r = o == i ? i : tt_epi_root_(e, g, o, i, 1);
    void *v = r <= i ? vals[r] : tt_buffer_data(inputs[g->instrs[r].input_index].buffer);
    ex.ptrs[k] = v;
    fin[k] = tt_make_view(&g->instrs[o], v);
  }
  if (!ex.fn) TT_RETURN_IF_ERROR(tt_fused_prepare(fi, fin, fi->num_operands, &fout, &ex.prep));
  tt_conv2d_params_t p;
  tt_conv_params(in->iattrs, &p);
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

/* Whether reshape instruction `in` may alias its operand's buffer instead
 * of copying it: the operand is a graph input that no output update writes
 * in place (donation) before every reader of the reshape (and of reshapes
 * of it) has run, a buffer only written once (an output or a scalar), or an
 * owned intermediate: always when the arena is planned (its slot then lives
 * until the last reader of the whole reshape group, and nothing is freed
 * before the arena), else when this reshape is its last reader (ownership
 * moves to the reshape, which frees it). A donated parameter read through
 * a reshape (a weight viewed as [1, m, k] for a GEMM) is the common case:
 * copying it cost a weight's bytes per use and step; an activation read
 * both as [b, s, d] and as [1, b*s, d] is the other. */
static int tt_reshape_aliases_(const tt_executable_t *e, const tt_graph_t *g,
                               const tt_instr_t *in, const uint8_t *owned,
                               const int32_t *group_last, int planned) {
  int32_t o = in->operands[0];
  const tt_instr_t *src = &g->instrs[o];
  int32_t self = (int32_t)(in - g->instrs);
  if (src->op == TT_OP_PARAM) return !tt_donated_before_(e, g, src, group_last[self]);
  if (!owned[o] || planned) return 1;
  return src->last_use == self;
}

/* Attention instruction i of a pair (tt_plan_attention_pairs): the
 * forward allocates the probabilities its backward reads (kept[i]; when
 * that fails the backward recomputes them), the backward frees them. */
static tt_status_t tt_run_attention_pair(const tt_executable_t *e, const tt_graph_t *g, int32_t i,
                                         int32_t device, void *const *vals, void **kept,
                                         tt_view_t *out) {
  const tt_instr_t *in = &g->instrs[i];
  tt_view_t x[5];
  for (int k = 0; k < in->num_operands && k < 5; ++k)
    x[k] = tt_make_view(&g->instrs[in->operands[k]], vals[in->operands[k]]);
  int32_t peer = e->att_peer[i];
  if (peer > i) {
    kept[i] = tt_device_alloc(device, e->att_bytes[i]);
    return tt_run_attention(in, x, in->num_operands, out, kept[i], NULL);
  }
  tt_status_t st = tt_run_attention(in, x, in->num_operands, out, NULL, kept[peer]);
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
  if (on < 0) {
    const char *env = getenv("TORCHTPU_EXEC_PROFILE");
    on = !env || !env[0] || strcmp(env, "0") == 0 ? 0 : strcmp(env, "shapes") == 0 ? 2 : 1;
  }
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
      len += (size_t)snprintf(name + len, len < sizeof name ? sizeof name - len : 0, "%s%s",
                              in->iattrs[0] ? "/ta" : "", in->iattrs[1] ? "/tb" : "");
    }
  }
  tt_metric_add(name, TT_UNIT_NANOSECONDS, (double)ns);
}

tt_status_t tt_executable_execute(tt_executable_t *e, int32_t device,
                                  const tt_input_value_t *inputs, void *const *output_data) {
  /* Routed through a PJRT plugin (src/backends/pjrt/engine.c): it runs the
   * graph, unless it falls back to the kernels below (opt-in). */
  tt_status_t pjrt_status = NULL;
  if (tt_pjrt_engine_execute(e, device, inputs, output_data, &pjrt_status)) return pjrt_status;
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
        int32_t o = tt_alias_source_(e, g, i);
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
      tt_view_t out = tt_make_view(in, vals[i]);
      int64_t t0 = profile ? tt_now_ns() : 0;
      int32_t f = e->epi_next[i];
      if (f >= 0) {
        vals[f] = e->direct_output[f] >= 0 ? output_data[e->direct_output[f]] : vals[i];
        st = tt_run_conv_epilogue(e, g, i, inputs, vals, &out);
      } else if (e->att_peer && e->att_peer[i] >= 0) {
        st = tt_run_attention_pair(e, g, i, device, vals, kept, &out);
      } else if (!done_early) {
        st = tt_run_instr(e, g, i, inputs, vals, &out);
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

tt_status_t tt_executable_run(tt_executable_t *e, const tt_input_value_t *inputs,
                              void *const *outputs) {
  tt_parallel_host_wait_begin(); /* run on the calling thread: no one else records */
  tt_status_t st = tt_executable_execute(e, -1, inputs, outputs);
  tt_parallel_host_wait_end();
  return st;
}
