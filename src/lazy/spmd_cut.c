/* A graph cut in SPMD mode (spmd_internal.h, docs/spmd.md "Partitioned
 * execution"): a graph that carries a sharding annotation or reads sharded
 * storage is propagated and partitioned once per graph key (cached here,
 * counted as one compile), then partition p's program is queued on device
 * p -- all of them under the engine lock, in partition order, so their
 * collectives pair up. Inputs: sharded storage gives partition p its shard;
 * a buffer whose propagated layout is tiled is sliced per device by queued
 * programs; other buffers are read whole by every partition. Outputs the
 * propagation tiles become sharded storage; replicated ones keep partition
 * 0's buffer. Nothing here waits for a buffer. */
#include <stdlib.h>
#include <string.h>

#include "lazy/lazy_internal.h"
#include "lazy/spmd_internal.h"
#include "torchtpu/metrics.h"
#include "torchtpu/partition.h"
#include "torchtpu/passes.h"
#include "torchtpu/sharding_rule.h"

/* One graph key's partitioned programs (n 0: the partitioner refused the
 * graph; it runs whole). */
typedef struct tt_spmd_entry_s {
  struct tt_spmd_entry_s *next;
  uint64_t hash;
  size_t key_size;
  uint8_t *key;
  int32_t n, num_inputs, num_outputs;
  tt_executable_t **exes;    /* n */
  int32_t *input_pos;        /* n * num_inputs: program input of source input k */
  tt_sharding_t **in_layout; /* num_inputs: tiled propagated layout, or NULL (whole) */
  tt_sharding_t **out_layout; /* num_outputs: tiled, or NULL (replicated) */
  /* Partition 0's collectives (every partition issues the same ones):
   * added to the Spmd* collective counters at each execution. */
  tt_partition_stats_t stats;
} tt_spmd_entry_t;

#define TT_SPMD_BUCKETS 64
static tt_spmd_entry_t *tt_spmd_cache_[TT_SPMD_BUCKETS]; /* engine lock */

static tt_spmd_entry_t *tt_spmd_lookup_(const tt_graph_t *g) {
  for (tt_spmd_entry_t *e = tt_spmd_cache_[g->hash % TT_SPMD_BUCKETS]; e; e = e->next)
    if (e->hash == g->hash && e->key_size == g->key_size && !memcmp(e->key, g->key, g->key_size))
      return e;
  return NULL;
}

static void tt_spmd_entry_free_(tt_spmd_entry_t *e) {
  if (!e) return;
  for (int32_t p = 0; p < e->n; ++p) tt_executable_release(e->exes ? e->exes[p] : NULL);
  for (int32_t k = 0; e->in_layout && k < e->num_inputs; ++k) free(e->in_layout[k]);
  for (int32_t j = 0; e->out_layout && j < e->num_outputs; ++j) free(e->out_layout[j]);
  free(e->exes);
  free(e->input_pos);
  free(e->in_layout);
  free(e->out_layout);
  free(e->key);
  free(e);
}

static tt_sharding_t *tt_spmd_tiled_copy_(const tt_sharding_t *s, int32_t rank) {
  return tt_spmd_is_tiled(s, rank) ? tt_sharding_copy(s) : NULL;
}

/* Partitions g (instruction shardings set) into e's n programs. */
static tt_status_t tt_spmd_partition_(tt_graph_t *g, tt_spmd_entry_t *e) {
  TT_RETURN_IF_ERROR(tt_pass_propagate_sharding(g));
  tt_buffer_t *placeholder = tt_buffer_create_pending(0, 0);
  if (!placeholder) return tt_status_make(TT_RESOURCE_EXHAUSTED, "out of memory");
  tt_partition_mesh_t mesh = {e->n, NULL};
  tt_optimize_options_t opts;
  tt_optimize_options_from_env(&opts);
  tt_status_t st = NULL;
  for (int32_t p = 0; p < e->n && !st; ++p) {
    if (!tt_spmd_is_local(p)) continue; /* another process runs it */
    tt_partition_t *part = NULL;
    st = tt_partition_program(g, &mesh, p, placeholder, &part);
    tt_graph_t *opt = NULL;
    if (!st) st = tt_graph_optimize(part->graph, &opts, &opt);
    if (!st) {
      if (p == 0) e->stats = part->stats;
      for (int32_t k = 0; k < e->num_inputs; ++k)
        e->input_pos[p * e->num_inputs + k] = part->input_position[k];
      /* The programs' collectives meet between the partitions of this
       * execution (exec_collective.c). */
      for (int32_t i = 0; i < opt->num_instrs; ++i)
        if (tt_op_is_collective(opt->instrs[i].op))
          opt->instrs[i].iattrs[3] = TT_SPMD_PARTITION_CHANNEL + e->n;
      st = tt_executable_create(opt, &e->exes[p]);
      if (st) tt_graph_destroy(opt);
    }
    tt_partition_destroy(part);
  }
  tt_buffer_release(placeholder);
  if (st) return st;
  for (int32_t k = 0; k < e->num_inputs; ++k) {
    const tt_instr_t *in = &g->instrs[g->input_instr[k]];
    e->in_layout[k] = tt_spmd_tiled_copy_(g->sharding_prop[g->input_instr[k]].sharding,
                                          in->shape.rank);
  }
  for (int32_t j = 0; j < e->num_outputs; ++j) {
    const tt_instr_t *out = &g->instrs[g->output_instr[j]];
    e->out_layout[j] = tt_spmd_tiled_copy_(g->sharding_prop[g->output_instr[j]].sharding,
                                           out->shape.rank);
  }
  return NULL;
}

/* The node of each instruction of g (built from roots just now: the nodes
 * carry their instruction index). */
static tt_node_t **tt_spmd_nodes_(const tt_graph_t *g, tt_node_t *const *roots, int32_t nr) {
  int32_t n = g->num_instrs;
  tt_node_t **nodes = calloc((size_t)n + 1, sizeof(*nodes));
  tt_node_t **stack = malloc(sizeof(*stack) * ((size_t)n + (size_t)nr + 1));
  if (!nodes || !stack) {
    free(nodes);
    free(stack);
    return NULL;
  }
  int32_t top = 0; /* each node is pushed once, when first seen */
  for (int32_t r = 0; r < nr; ++r)
    if (!nodes[roots[r]->visit_index]) stack[top++] = nodes[roots[r]->visit_index] = roots[r];
  while (top) {
    tt_node_t *x = stack[--top];
    for (int32_t k = 0; k < x->num_operands; ++k) {
      tt_node_t *o = x->operands[k];
      if (!nodes[o->visit_index]) stack[top++] = nodes[o->visit_index] = o;
    }
  }
  free(stack);
  return nodes;
}

/* The entry of g (built from nodes): cached, or made now (counted as one
 * compile). NULL when out of memory. */
static tt_spmd_entry_t *tt_spmd_entry_(tt_graph_t *g, tt_node_t **nodes, int32_t n) {
  tt_spmd_entry_t *e = tt_spmd_lookup_(g);
  if (e) {
    tt_counter_add("CachedCompile", 1);
    return e;
  }
  int64_t t0 = tt_now_ns();
  e = calloc(1, sizeof(*e));
  if (!e) return NULL;
  e->key = malloc(g->key_size ? g->key_size : 1);
  e->n = n;
  e->num_inputs = g->num_inputs;
  e->num_outputs = g->num_outputs;
  e->exes = calloc((size_t)n + 1, sizeof(*e->exes));
  e->input_pos = calloc((size_t)n * (size_t)g->num_inputs + 1, sizeof(int32_t));
  e->in_layout = calloc((size_t)g->num_inputs + 1, sizeof(*e->in_layout));
  e->out_layout = calloc((size_t)g->num_outputs + 1, sizeof(*e->out_layout));
  if (!e->key || !e->exes || !e->input_pos || !e->in_layout || !e->out_layout) {
    tt_spmd_entry_free_(e);
    return NULL;
  }
  memcpy(e->key, g->key, g->key_size);
  e->key_size = g->key_size;
  e->hash = g->hash;
  /* The annotations (the graph's key covers them) fix their instructions;
   * an unannotated input takes the layout its users give it, as any
   * other value: the cut slices or assembles it to that layout when it is
   * held otherwise, so the programs depend on the key alone. */
  for (int32_t i = 0; i < g->num_instrs; ++i) g->instrs[i].sharding = nodes[i]->sharding;
  tt_status_t st = tt_spmd_partition_(g, e);
  for (int32_t i = 0; i < g->num_instrs; ++i) g->instrs[i].sharding = NULL;
  if (st) {
    /* Not partitionable (fused ops, a collective outside a manual region,
     * a manual value as an output, a mix of meshes): remembered, so the graph runs whole without trying again. */
    tt_status_free(st);
    for (int32_t p = 0; p < e->n; ++p) tt_executable_release(e->exes[p]);
    e->n = 0;
  }
  e->next = tt_spmd_cache_[e->hash % TT_SPMD_BUCKETS];
  tt_spmd_cache_[e->hash % TT_SPMD_BUCKETS] = e;
  if (e->n) {
    tt_counter_add("UncachedCompile", 1);
    tt_metric_add(tt_eager_mode() ? "EagerOpCompileTime" : "CompileTime", TT_UNIT_NANOSECONDS,
                  (double)(tt_now_ns() - t0));
  }
  return e;
}

/* The partition count of g's shardings (the largest device count); 0 when
 * nothing in g is tiled (annotated tiled or held as shards): a graph of
 * replicated values runs whole, once, instead of once per device. */
static int32_t tt_spmd_count_(const tt_graph_t *g, tt_node_t *const *nodes) {
  int32_t n = 0, tiled = 0;
  for (int32_t i = 0; i < g->num_instrs; ++i) {
    const tt_node_t *x = nodes[i];
    /* ({manual} annotations count no devices: the region ops say how many
     * devices their region runs on.) */
    if (x->sharding && x->sharding->kind != TT_SHARDING_MANUAL && x->sharding->num_devices > n)
      n = x->sharding->num_devices;
    if (x->shards && x->shards->num > n) n = x->shards->num;
    tiled |= x->shards || (x->sharding && x->sharding->kind != TT_SHARDING_REPLICATED);
    if (tt_op_is_spmd_manual(x->op)) {
      /* A manual region runs on its sharding's devices, even a replicated
       * one (each partition holds the whole value): its collectives act
       * between them. The spec's device count (op_attrs.h; verified when
       * the node was made). */
      tt_spmd_manual_attrs_t a;
      TT_ATTRS(x, &a);
      int64_t devices = a.spec.v[2 + a.spec.v[0]];
      if (devices > n) n = (int32_t)devices;
      tiled = 1;
    }
  }
  return tiled ? n : 0;
}

/* The collectives one partitioned execution runs (per partition: every
 * partition issues the same ones), as PyTorch/XLA users read them from
 * the compiled HLO; a counter only once it is non-zero. */
static void tt_spmd_count_collectives_(const tt_partition_stats_t *s) {
  if (s->all_reduces) tt_counter_add("SpmdAllReduce", s->all_reduces);
  if (s->all_gathers) tt_counter_add("SpmdAllGather", s->all_gathers);
  if (s->reduce_scatters) tt_counter_add("SpmdReduceScatter", s->reduce_scatters);
  if (s->all_to_alls) tt_counter_add("SpmdAllToAll", s->all_to_alls);
  if (s->collective_permutes) tt_counter_add("SpmdCollectivePermute", s->collective_permutes);
}

/* The roots of g (built from roots: each root's instruction is its
 * visit_index) that are not values inside a manual region -- made from a
 * full_to_shard's result without leaving through a shard_to_full, as the
 * partitioner tells them (partition.c) -- into *kr, *ko (malloc'd) with
 * their owners; their count, or -1 when out of memory. */
static int32_t tt_spmd_drop_manual_(const tt_graph_t *g, tt_node_t **roots, tt_tensor_t **owners,
                                    int32_t nr, tt_node_t ***kr, tt_tensor_t ***ko) {
  uint8_t *manual = calloc((size_t)g->num_instrs + 1, 1);
  *kr = malloc(sizeof(**kr) * ((size_t)nr + 1));
  *ko = malloc(sizeof(**ko) * ((size_t)nr + 1));
  if (!manual || !*kr || !*ko) {
    free(manual);
    return -1;
  }
  for (int32_t i = 0; i < g->num_instrs; ++i) {
    const tt_instr_t *in = &g->instrs[i];
    if (in->op == TT_OP_SPMD_FULL_TO_SHARD) {
      manual[i] = 1;
    } else if (in->op != TT_OP_SPMD_SHARD_TO_FULL && in->op != TT_OP_FUSED) {
      for (int32_t k = 0; k < in->num_operands; ++k) manual[i] |= manual[in->operands[k]];
    }
  }
  int32_t kept = 0;
  for (int32_t r = 0; r < nr; ++r) {
    if (manual[roots[r]->visit_index]) continue;
    (*kr)[kept] = roots[r];
    (*ko)[kept++] = owners[r];
  }
  free(manual);
  return kept;
}

tt_status_t tt_spmd_cut_locked(tt_node_t **roots, tt_tensor_t **owners, int32_t nr,
                               int32_t device, int step, int *handled) {
  *handled = 0;
  /* One device: nothing to partition onto (and nothing to build twice). */
  if (!tt_spmd_on_locked() || device != 0 || tt_spmd_global_devices() < 2) return NULL;
  tt_graph_t *g = NULL;
  tt_node_t **inputs = NULL, **kept_roots = NULL;
  tt_tensor_t **kept_owners = NULL;
  TT_RETURN_IF_ERROR(tt_graph_build(roots, nr, &g, &inputs));
  tt_node_t **nodes = tt_spmd_nodes_(g, roots, nr);
  tt_status_t st = NULL;
  int32_t n = nodes ? tt_spmd_count_(g, nodes) : 0;
  if (n == 0) goto done; /* nothing sharded: the ordinary cut */
  /* Values inside a manual region (each partition holds its own) stay
   * pending: the others run without them, and the region is recomputed
   * where a later graph leaves it. A graph of only such values runs whole
   * (the region's ops refuse it there, naming the way out). */
  int32_t kept = tt_spmd_drop_manual_(g, roots, owners, nr, &kept_roots, &kept_owners);
  if (kept < 0) {
    st = tt_status_make(TT_RESOURCE_EXHAUSTED, "out of memory (cut)");
    goto done;
  }
  if (kept > 0 && kept < nr) {
    free(nodes);
    free(inputs);
    tt_graph_destroy(g);
    g = NULL;
    inputs = NULL;
    nodes = NULL;
    roots = kept_roots;
    owners = kept_owners;
    nr = kept;
    st = tt_graph_build(roots, nr, &g, &inputs);
    if (st) goto done;
    nodes = tt_spmd_nodes_(g, roots, nr);
    n = nodes ? tt_spmd_count_(g, nodes) : 0;
    if (n == 0) goto done;
  }
  tt_spmd_entry_t *e = NULL;
  int32_t gd = tt_spmd_global_devices(), base = tt_spmd_device_base();
  if (gd > tt_runtime_device_count() && n != gd) {
    /* Several processes: every process runs its own partitions, so the
     * mesh must hold each of them. */
    st = tt_status_make(TT_INVALID_ARGUMENT,
                        "SPMD over several processes: a mesh of %d devices, but the job has %d "
                        "(every process's devices); make the Mesh over all "
                        "xr.global_runtime_device_count() devices", (int)n, (int)gd);
    goto done;
  }
  if (n >= 2 && n <= 27 && n <= gd) e = tt_spmd_entry_(g, nodes, n);
  if ((!e || !e->n) && gd > tt_runtime_device_count()) {
    /* Running it whole would need the other processes' shards. */
    st = tt_status_make(TT_UNIMPLEMENTED,
                        "SPMD over several processes: the partitioner refused this graph (a "
                        "collective outside a manual region, a manual value as an output or "
                        "a mix of meshes) and it cannot run "
                        "whole on one process");
    goto done;
  }
  if (!e || !e->n) {
    tt_counter_add("SpmdPartitionFallback", 1);
    goto done;
  }
  tt_metric_add("TensorsGraphSize", TT_UNIT_COUNT, (double)g->num_instrs);
  int32_t ni = g->num_inputs;
  /* vals[p * ni + k]: source input k's value for partition p. */
  tt_input_value_t *vals = calloc((size_t)n * (size_t)ni + 1, sizeof(*vals));
  tt_shard_set_t **made = calloc((size_t)ni + 1, sizeof(*made)); /* slices made here */
  tt_buffer_t **outs = calloc((size_t)n * (size_t)nr + 1, sizeof(*outs));
  tt_input_value_t *pv = calloc((size_t)ni + 1, sizeof(*pv));
  if (!vals || !made || !outs || !pv) {
    st = tt_status_make(TT_RESOURCE_EXHAUSTED, "out of memory (cut)");
    goto out;
  }
  for (int32_t k = 0; k < ni && !st; ++k) {
    tt_node_t *in = inputs[k];
    const tt_sharding_t *want = e->in_layout[k];
    tt_shard_set_t *set = in->shards;
    tt_buffer_t *whole = in->buffer;
    if (set && !tt_sharding_equal(set->layout, want)) {
      /* Held in another layout than the program reads (not made by the
       * cut itself): one buffer first. */
      tt_counter_add("SpmdInputReshard", 1);
      st = tt_spmd_assemble_locked(set, &in->shape, in->dtype, 0, &whole);
      set = NULL;
      if (st) break;
    } else if (whole) {
      tt_buffer_retain(whole);
    }
    if (in->op == TT_OP_PARAM && !set && want) {
      tt_counter_add("SpmdInputSlice", 1);
      st = tt_spmd_slice_locked(whole, &in->shape, in->dtype, want, &made[k]);
      set = made[k];
    }
    for (int32_t p = 0; p < n && !st; ++p) {
      if (!tt_spmd_is_local(p)) continue;
      tt_input_value_t *v = &vals[(size_t)p * (size_t)ni + (size_t)k];
      v->scalar_f = in->scalar_f;
      v->scalar_i = in->scalar_i;
      if (in->op == TT_OP_PARAM) v->buffer = set ? set->buffers[p] : whole;
      if (v->buffer) tt_buffer_retain(v->buffer);
    }
    tt_buffer_release(whole);
  }
  /* Outputs: each program's buffers, of its output shapes. */
  for (int32_t p = 0; p < n && !st; ++p) {
    if (!tt_spmd_is_local(p)) continue;
    const tt_graph_t *pg = tt_executable_graph(e->exes[p]);
    for (int32_t r = 0; r < nr && !st; ++r) {
      const tt_instr_t *oi = &pg->instrs[pg->output_instr[r]];
      size_t bytes = (size_t)tt_shape_numel(&oi->shape) * tt_dtype_size(oi->dtype);
      outs[p * nr + r] = tt_buffer_create_pending(p - base, bytes);
      if (!outs[p * nr + r]) st = tt_status_make(TT_RESOURCE_EXHAUSTED, "out of memory (buffer)");
    }
  }
  /* All n programs (this process's), in partition order. */
  for (int32_t p = 0; p < n && !st; ++p) {
    if (!tt_spmd_is_local(p)) continue;
    const tt_graph_t *pg = tt_executable_graph(e->exes[p]);
    for (int32_t j = 0; j < pg->num_inputs; ++j) pv[j] = (tt_input_value_t){0};
    for (int32_t k = 0; k < ni; ++k) {
      int32_t j = e->input_pos[p * ni + k];
      if (j >= 0 && j < pg->num_inputs) pv[j] = vals[(size_t)p * (size_t)ni + (size_t)k];
    }
    st = tt_executable_enqueue(e->exes[p], p - base, pv, pg->num_inputs, &outs[p * nr], nr);
  }
  if (st) goto out;
  /* Donors as an unpartitioned cut counts them; user-marked donors held
   * as one buffer are deleted after the run (the jobs hold them). */
  tt_buffer_t **user_donated = NULL;
  int32_t n_user_donated = 0;
  tt_cut_count_alias_inputs_locked(g->hash, inputs, ni, owners, nr, step, &user_donated,
                                   &n_user_donated);
  for (int32_t r = 0; r < nr; ++r) {
    tt_tensor_t *t = owners[r];
    tt_buffer_release(t->buffer);
    t->buffer = NULL;
    tt_shard_set_release(t->shards);
    t->shards = NULL;
    if (e->out_layout[r]) {
      tt_shard_set_t *set = tt_shard_set_new(e->out_layout[r]);
      if (!set) {
        st = tt_status_make(TT_RESOURCE_EXHAUSTED, "out of memory (shards)");
        break;
      }
      for (int32_t p = 0; p < n; ++p) { /* NULL: another process's */
        set->buffers[p] = outs[p * nr + r];
        outs[p * nr + r] = NULL;
      }
      t->shards = set;
    } else {
      t->buffer = outs[base * nr + r]; /* this process's first partition's */
      outs[base * nr + r] = NULL;
    }
    tt_node_release(t->data_node);
    t->data_node = NULL;
    tt_node_t *old = t->node;
    t->node = NULL;
    t->derived = 0;
    t->cut_result = 1;
    tt_node_release(old);
  }
  if (!st)
    for (int32_t k = 0; k < n_user_donated; ++k) tt_tensor_delete_donated_locked(user_donated[k]);
  free(user_donated);
  if (!st) {
    *handled = 1;
    tt_counter_add("SpmdPartitionedExecution", 1);
    tt_spmd_count_collectives_(&e->stats);
  }
out:
  if (vals)
    for (size_t i = 0; i < (size_t)n * (size_t)ni; ++i) tt_buffer_release(vals[i].buffer);
  if (made)
    for (int32_t k = 0; k < ni; ++k) tt_shard_set_release(made[k]);
  if (outs)
    for (size_t i = 0; i < (size_t)n * (size_t)nr; ++i) tt_buffer_release(outs[i]);
  free(vals);
  free(made);
  free(outs);
  free(pv);
done:
  free(nodes);
  free(inputs);
  free(kept_roots);
  free(kept_owners);
  if (g) tt_graph_destroy(g);
  return st;
}
