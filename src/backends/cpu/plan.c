/* The CPU backend's executable plan (tt_cpu_prepare), made once per
 * executable from the graph alone: which outputs are written in place by
 * their producers, which inputs donate their memory to outputs, which
 * reshapes and slices alias their operand's bytes, and the buffer plan.
 * Intermediate buffers live in one arena per execution, at offsets planned
 * from liveness (tt_buffer_plan): an intermediate reuses the bytes of ones
 * whose last reader has run, so the arena follows the live set rather than
 * the whole graph, and an execution makes one allocation instead of one
 * per intermediate. With TORCHTPU_BUFFER_PLAN=0 each intermediate is
 * allocated on its own and freed right after its last use. The pairs run
 * together (conv epilogues, attention) are planned in plan_pairs.c. */
#include <dlfcn.h>
#include <stdlib.h>
#include <string.h>

#include "backends/cpu/cpu_internal.h"
#include "backends/cpu/exec.h"


/* The instruction below output reshape i's chain of reshapes that are not
 * outputs themselves. */
static int32_t tt_forwarded_producer_(const tt_cpu_plan_t *e, const tt_graph_t *g, int32_t i) {
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
static void tt_plan_output_forwarding(tt_cpu_plan_t *e) {
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

/* Whether graph input `param` is donated to an output whose update runs at
 * or before instruction `last` (so a view of its bytes read up to `last`
 * would see the update). */
static int tt_donated_before_(const tt_cpu_plan_t *e, const tt_graph_t *g,
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
  tt_slice_attrs_t a;
  TT_ATTRS(in, &a);
  const int64_t *start = a.start.v, *step = a.step.v;
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
static int tt_reshape_aliases_(const tt_cpu_plan_t *e, const tt_graph_t *g,
                               const tt_instr_t *in, const uint8_t *owned,
                               const int32_t *group_last, int planned) {
  int32_t o = in->operands[0];
  const tt_instr_t *src = &g->instrs[o];
  int32_t self = (int32_t)(in - g->instrs);
  if (src->op == TT_OP_PARAM) return !tt_donated_before_(e, g, src, group_last[self]);
  if (!owned[o] || planned) return 1;
  return src->last_use == self;
}

/* Which reshapes alias their operand (decided from the graph alone: the
 * executor's ownership walk without running anything), then the arena
 * plan: one buffer per owned intermediate, live from its producer to the
 * last reader of the last reshape that took it over. */
static tt_status_t tt_plan_memory(tt_cpu_plan_t *e) {
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
  const int planned = tt_config()->buffer_plan; /* TORCHTPU_BUFFER_PLAN */
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
      int32_t o = tt_cpu_alias_source(e, i);
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


tt_status_t tt_cpu_prepare(const tt_backend_t *self, const tt_graph_t *graph, void **out_plan) {
  (void)self;
  *out_plan = NULL;
  /* Refused while the executor registrations are broken (an op with no
   * executor or two: exec_table.c), naming the op. */
  TT_RETURN_IF_ERROR(tt_cpu_exec_table_check());
  tt_cpu_plan_t *e = calloc(1, sizeof(*e));
  if (!e) return tt_status_make(TT_RESOURCE_EXHAUSTED, "out of memory (executable)");
  e->graph = graph;
  e->direct_output = malloc(sizeof(int32_t) * ((size_t)graph->num_instrs + 1));
  e->kernels = calloc((size_t)graph->num_instrs + 1, sizeof(tt_fused_fn_t));
  e->donor = malloc(sizeof(int32_t) * ((size_t)graph->num_outputs + 1));
  if (!e->direct_output || !e->kernels || !e->donor) {
    tt_cpu_release(self, e);
    return tt_status_make(TT_RESOURCE_EXHAUSTED, "out of memory (executable)");
  }
  for (int32_t i = 0; i < graph->num_instrs; ++i) e->direct_output[i] = -1;
  for (int32_t r = 0; r < graph->num_outputs; ++r) {
    int32_t i = graph->output_instr[r];
    tt_op_t op = graph->instrs[i].op;
    if (e->direct_output[i] < 0 && op != TT_OP_PARAM && op != TT_OP_SCALAR)
      e->direct_output[i] = r;
  }
  tt_status_t st = tt_plan_donation(graph, e->direct_output, e->donor);
  if (!st) tt_plan_output_forwarding(e);
  if (!st) st = tt_cpu_plan_epilogues(e);
  if (!st) st = tt_cpu_plan_attention_pairs(e);
  if (!st) st = tt_plan_memory(e);
  if (!st) tt_cpu_check_epilogues(e);
  if (st) {
    tt_cpu_release(self, e);
    return st;
  }
  *out_plan = e;
  return NULL;
}

void tt_cpu_release(const tt_backend_t *self, void *plan) {
  (void)self;
  tt_cpu_plan_t *e = plan;
  if (!e) return;
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
