/* The partitioner's test harness (tests/c/test_partitioner.c,
 * tests/c/test_partition_differential.c): meshes and PyTorch/XLA tile
 * assignments written as partition specs, graphs of a case, and run_case,
 * which propagates, partitions for every partition of the mesh, runs each
 * partition's program on its own CPU device of the engine (the programs'
 * collectives meet in the collective layer), and compares every device's
 * output shard with the unpartitioned graph's result (exact or within a
 * tolerance). Input shards are padded with NaN, so a reduction that read
 * padding would show it. Every partition's collective counts must agree
 * and match its program's collective instructions. */
#ifndef TESTS_C_PARTITION_HARNESS_H_
#define TESTS_C_PARTITION_HARNESS_H_
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "test_harness.h"
#include "torchtpu/collective.h"
#include "torchtpu/partition.h"
#include "torchtpu/passes.h"
#include "torchtpu/sharding_rule.h"
#include "torchtpu/torchtpu.h"

#define NDEV 8
#define MAXN 64 /* nodes per case */

static tt_buffer_t *g_buf;

typedef struct mesh_s {
  const char *name;
  int32_t rank;
  int64_t shape[2];
  int32_t n;
} mesh_t;

static const mesh_t M2 __attribute__((unused)) = {"(2,)", 1, {2, 1}, 2};
static const mesh_t M4 __attribute__((unused)) = {"(4,)", 1, {4, 1}, 4};
static const mesh_t M22 __attribute__((unused)) = {"(2,2)", 2, {2, 2}, 4};
static const mesh_t M8 __attribute__((unused)) = {"(8,)", 1, {8, 1}, 8};
static const mesh_t M24 __attribute__((unused)) = {"(2,4)", 2, {2, 4}, 8};

/* PyTorch/XLA's tile assignment for a partition spec written as text, one
 * field per tensor dim: "-" for None, else the mesh axes (digits, in
 * order) the dim is split over: "0,-", "01,-", "-,1". NULL: replicated. */
static inline tt_sharding_t *spec_sharding(const mesh_t *m, int32_t rank, const char *spec) {
  tt_sharding_t *s = calloc(1, tt_sharding_size(NDEV));
  int32_t axes[4], na = 0, used[2] = {0, 0};
  const char *c = spec;
  s->kind = TT_SHARDING_TILED;
  s->num_devices = m->n;
  for (int32_t d = 0; d < rank; ++d) {
    s->tile_dims[d] = 1;
    while (*c && *c != ',') {
      if (*c != '-') {
        int32_t a = *c - '0';
        axes[na++] = a;
        used[a] = 1;
        s->tile_dims[d] *= m->shape[a];
      }
      ++c;
    }
    if (*c == ',') ++c;
  }
  int64_t rep = 1, tiled = 1;
  for (int32_t a = 0; a < m->rank; ++a)
    if (!used[a]) {
      axes[na++] = a;
      rep *= m->shape[a];
    }
  for (int32_t d = 0; d < rank; ++d) tiled *= s->tile_dims[d];
  s->num_tile_dims = rank;
  if (tiled == 1) {
    memset(s, 0, sizeof(*s));
    s->kind = TT_SHARDING_REPLICATED;
    return s;
  }
  if (rep > 1) {
    s->tile_dims[rank] = rep;
    s->num_tile_dims = rank + 1;
    s->last_tile_dim_replicate = 1;
  }
  /* The mesh's device array transposed to axes order, flattened. */
  int64_t idx[2] = {0, 0};
  for (int32_t o = 0; o < m->n; ++o) {
    int64_t dev = m->rank == 1 ? idx[0] : idx[0] * m->shape[1] + idx[1];
    s->devices[o] = (int32_t)dev;
    for (int32_t j = na - 1; j >= 0; --j) {
      if (++idx[axes[j]] < m->shape[axes[j]]) break;
      idx[axes[j]] = 0;
    }
  }
  return s;
}

/* ---- the graph of a case ---- */
static tt_node_t *g_nodes[MAXN];
static int g_num_nodes;
static inline tt_node_t *keep(tt_node_t *n) {
  g_nodes[g_num_nodes++] = n;
  return n;
}
static inline tt_node_t *mk(tt_op_t op, int32_t nops, tt_node_t *const *ops, int32_t ni,
                     const int64_t *ia) {
  tt_node_t *n = NULL;
  CHECK_OK(tt_node_create(op, 0, ops, nops, ia, ni, NULL, 0, &n), tt_op_name(op));
  return keep(n);
}
#define OPS(...) (int32_t)(sizeof((tt_node_t *[]){__VA_ARGS__}) / sizeof(tt_node_t *)), \
                 (tt_node_t *[]){__VA_ARGS__}
#define IA(...) \
  (int32_t)(sizeof((int64_t[]){__VA_ARGS__}) / sizeof(int64_t)), (int64_t[]){__VA_ARGS__}
#define NOIA 0, NULL

static inline tt_node_t *unary(tt_unary_op_t op, tt_node_t *x) { return mk(TT_OP_UNARY, OPS(x), IA(op)); }
static inline tt_node_t *binary(tt_binary_op_t op, tt_node_t *a, tt_node_t *b) {
  return mk(TT_OP_BINARY, OPS(a, b), IA(op));
}
static inline tt_node_t *reduce(tt_reduce_op_t op, tt_node_t *x, int64_t mask) {
  return mk(TT_OP_REDUCE, OPS(x), IA(op, mask, 0, TT_F32));
}
static inline tt_node_t *dot(tt_node_t *a, tt_node_t *b) { return mk(TT_OP_DOT, OPS(a, b), IA(0, 0)); }

/* An input: shape text rank/dims, its dtype, its spec (NULL: none). */
typedef struct input_s {
  int32_t rank;
  int64_t dims[4];
  const char *spec;
  tt_dtype_t dtype;
} input_t;

typedef int (*build_fn)(tt_node_t **in, tt_node_t **out);

static int g_cases __attribute__((unused)); /* cases run (printed at the end) */

/* The mesh of the case being built (for annotations inside a graph). */
static const mesh_t *g_mesh;
static inline tt_node_t *annotate(tt_node_t *n, const char *spec) {
  tt_sharding_t *sh = spec_sharding(g_mesh, n->shape.rank, spec);
  CHECK_OK(tt_node_set_sharding(n, sh), spec);
  free(sh);
  return n;
}
/* annotate with every device id of spec's tile assignment moved by
 * `rot` (mod the mesh's size): the same tiles on other devices. */
static inline tt_node_t *annotate_rot(tt_node_t *n, const char *spec, int32_t rot) {
  tt_sharding_t *sh = spec_sharding(g_mesh, n->shape.rank, spec);
  for (int32_t i = 0; i < sh->num_devices; ++i)
    sh->devices[i] = (sh->devices[i] + rot) % g_mesh->n;
  CHECK_OK(tt_node_set_sharding(n, sh), spec);
  free(sh);
  return n;
}

/* ---- running programs ---- */
/* Replays graph g's instructions as tensor ops on device dev; host[k] is
 * input k's data. outs[j] gets output j (one reference). */
static inline void replay(const tt_graph_t *g, int32_t dev, void *const *host, tt_tensor_t **outs) {
  tt_tensor_t **v = calloc((size_t)g->num_instrs, sizeof(*v));
  for (int32_t i = 0; i < g->num_instrs; ++i) {
    const tt_instr_t *in = &g->instrs[i];
    if (in->op == TT_OP_PARAM) {
      CHECK_OK(tt_tensor_from_host(dev, in->dtype, &in->shape, host[in->input_index], &v[i]));
      continue;
    }
    tt_tensor_t *ops[8];
    for (int32_t k = 0; k < in->num_operands; ++k) ops[k] = v[in->operands[k]];
    CHECK_OK(tt_tensor_op(in->op, dev, ops, in->num_operands, in->iattrs, in->num_iattrs,
                          in->fattrs, TT_MAX_FATTRS, &v[i]),
             tt_op_name(in->op));
  }
  for (int32_t j = 0; j < g->num_outputs; ++j) {
    outs[j] = v[g->output_instr[j]];
    tt_tensor_retain(outs[j]);
  }
  for (int32_t i = 0; i < g->num_instrs; ++i)
    if (v[i]) tt_tensor_release(v[i]);
  free(v);
}

static inline int64_t numel(const tt_shape_t *s) {
  int64_t n = 1;
  for (int32_t d = 0; d < s->rank; ++d) n *= s->dims[d];
  return n;
}

/* Element index of shard position i (row-major over shard) in the global
 * tensor, or -1 when it is padding. */
static inline int64_t global_index(const tt_shape_t *g, const tt_shape_t *shard, const int64_t *off,
                            const int64_t *valid, int64_t i) {
  int64_t gi = 0, rest = i, c[TT_MAX_RANK];
  for (int32_t d = shard->rank - 1; d >= 0; --d) {
    c[d] = rest % shard->dims[d];
    rest /= shard->dims[d];
  }
  for (int32_t d = 0; d < shard->rank; ++d) {
    if (c[d] >= valid[d]) return -1;
    gi = gi * g->dims[d] + off[d] + c[d];
  }
  return gi;
}

static inline int count_op(const tt_graph_t *g, tt_op_t op) {
  int n = 0;
  for (int32_t i = 0; i < g->num_instrs; ++i) n += g->instrs[i].op == op;
  return n;
}

/* Runs one case; *stats gets partition 0's counts (every partition's must
 * agree). */
static inline void run_case(const char *name, const mesh_t *m, int32_t nin, const input_t *ins,
                     build_fn build, double tol, tt_partition_stats_t *stats) {
  tt_node_t *in_nodes[4], *outs[4];
  g_mesh = m;
  /* collective_permute's members are every replica of the launch */
  tt_collective_set_world_size(m->n);
  ++g_cases;
  for (int32_t k = 0; k < nin; ++k) {
    tt_shape_t s = {ins[k].rank, {0}};
    for (int32_t d = 0; d < s.rank; ++d) s.dims[d] = ins[k].dims[d];
    in_nodes[k] = keep(tt_node_create_param(g_buf, ins[k].dtype, &s, 0));
    if (ins[k].spec) {
      tt_sharding_t *sh = spec_sharding(m, s.rank, ins[k].spec);
      CHECK_OK(tt_node_set_sharding(in_nodes[k], sh), name);
      free(sh);
    }
  }
  int32_t nout = build(in_nodes, outs);
  tt_graph_t *g = NULL;
  tt_node_t **gin = NULL;
  CHECK_OK(tt_graph_build(outs, nout, &g, &gin));
  for (int i = 0; i < g_num_nodes; ++i)
    if (g_nodes[i]->visit_epoch && g_nodes[i]->sharding)
      g->instrs[g_nodes[i]->visit_index].sharding = g_nodes[i]->sharding;
  CHECK_OK(tt_pass_propagate_sharding(g), name);
  /* Full inputs (random; indices in range of a 6-row table). */
  void *full[4];
  for (int32_t k = 0; k < g->num_inputs; ++k) {
    const tt_instr_t *in = &g->instrs[g->input_instr[k]];
    int64_t n = numel(&in->shape);
    if (in->dtype == TT_I64) {
      int64_t *x = malloc(sizeof(int64_t) * (size_t)n);
      for (int64_t e = 0; e < n; ++e) x[e] = rnd_int(0, 5);
      full[k] = x;
    } else {
      float *x = malloc(sizeof(float) * (size_t)n);
      for (int64_t e = 0; e < n; ++e) x[e] = (float)rnd_uniform(-1.0, 1.0);
      full[k] = x;
    }
  }
  tt_tensor_t *ref[4], *got[NDEV][4];
  replay(g, 0, full, ref);
  tt_partition_t *part[NDEV] = {NULL};
  tt_partition_mesh_t mesh = {m->n, NULL};
  void *shards[NDEV][4];
  for (int32_t p = 0; p < m->n; ++p) {
    if (!CHECK_OK(tt_partition_program(g, &mesh, p, g_buf, &part[p]), name)) {
      for (int32_t q = 0; q < p; ++q) tt_partition_destroy(part[q]);
      goto cleanup_ref;
    }
    for (int32_t k = 0; k < g->num_inputs; ++k) {
      const tt_instr_t *in = &g->instrs[g->input_instr[k]];
      int64_t off[TT_MAX_RANK], valid[TT_MAX_RANK];
      tt_shape_t ss;
      CHECK_OK(tt_partition_tile(g->sharding_prop[g->input_instr[k]].sharding, &in->shape, p,
                                 off, valid, &ss));
      size_t es = in->dtype == TT_I64 ? 8 : 4;
      uint8_t *x = malloc(es * (size_t)numel(&ss));
      for (int64_t e = 0; e < numel(&ss); ++e) {
        int64_t gi = global_index(&in->shape, &ss, off, valid, e);
        if (es == 8) {
          ((int64_t *)x)[e] = gi < 0 ? 0 : ((int64_t *)full[k])[gi];
        } else {
          ((float *)x)[e] = gi < 0 ? NAN : ((float *)full[k])[gi];
        }
      }
      int32_t pos = part[p]->input_position[k];
      CHECK(pos >= 0 && pos < part[p]->graph->num_inputs, "%s: input %d position %d", name,
            (int)k, (int)pos);
      CHECK(tt_shape_equal(&part[p]->graph->instrs[part[p]->graph->input_instr[pos]].shape, &ss),
            "%s: input %d of partition %d has the shard shape", name, (int)k, (int)p);
      shards[p][pos] = x;
    }
  }
  for (int32_t p = 0; p < m->n; ++p) replay(part[p]->graph, p, shards[p], got[p]);
  CHECK_OK(tt_lazy_sync(-1, 1, NULL), name);
  /* Every device's shard of every output against the reference. */
  for (int32_t j = 0; j < g->num_outputs; ++j) {
    const tt_instr_t *oi = &g->instrs[g->output_instr[j]];
    int64_t n = numel(&oi->shape);
    float *want = malloc(sizeof(float) * (size_t)n);
    CHECK_OK(tt_tensor_to_host(ref[j], want, sizeof(float) * (size_t)n), name);
    int64_t covered = 0;
    for (int32_t p = 0; p < m->n; ++p) {
      int64_t off[TT_MAX_RANK], valid[TT_MAX_RANK];
      tt_shape_t ss;
      CHECK_OK(tt_partition_tile(g->sharding_prop[g->output_instr[j]].sharding, &oi->shape, p,
                                 off, valid, &ss));
      CHECK(tt_shape_equal(tt_tensor_shape(got[p][j]), &ss), "%s %s: output %d shard shape", name,
            m->name, (int)j);
      if (!tt_shape_equal(tt_tensor_shape(got[p][j]), &ss)) continue;
      float *x = malloc(sizeof(float) * (size_t)numel(&ss) + 4);
      CHECK_OK(tt_tensor_to_host(got[p][j], x, sizeof(float) * (size_t)numel(&ss)), name);
      int bad = 0;
      int64_t first = -1;
      for (int64_t e = 0; e < numel(&ss); ++e) {
        int64_t gi = global_index(&oi->shape, &ss, off, valid, e);
        if (gi < 0) continue;
        ++covered;
        double a = x[e], b = want[gi];
        int ok = tol == 0 ? a == b : fabs(a - b) <= tol * (1.0 + fabs(b));
        if (!ok && first < 0) first = e;
        bad += !ok;
      }
      CHECK(bad == 0, "%s on %s: partition %d output %d: %d of %lld differ (first shard element "
            "%lld: %g, want %g)", name, m->name, (int)p, (int)j, bad, (long long)numel(&ss),
            (long long)first, first >= 0 ? x[first] : 0.0,
            first >= 0 ? want[global_index(&oi->shape, &ss, off, valid, first)] : 0.0);
      free(x);
    }
    CHECK(covered >= n, "%s on %s: output %d: the shards cover %lld of %lld elements", name,
          m->name, (int)j, (long long)covered, (long long)n);
    free(want);
  }
  /* The programs issue the same collectives; the counts agree with the
   * graph's collective instructions. */
  for (int32_t p = 0; p < m->n; ++p) {
    tt_partition_stats_t *s = &part[p]->stats, *s0 = &part[0]->stats;
    CHECK(s->all_gathers == s0->all_gathers && s->all_reduces == s0->all_reduces &&
              s->fallbacks == s0->fallbacks && s->reduce_scatters == s0->reduce_scatters &&
              s->all_to_alls == s0->all_to_alls &&
              s->collective_permutes == s0->collective_permutes,
          "%s on %s: partition %d's counts differ from partition 0's", name, m->name, (int)p);
    CHECK(count_op(part[p]->graph, TT_OP_ALL_REDUCE) == s->all_reduces &&
              count_op(part[p]->graph, TT_OP_ALL_GATHER) == s->all_gathers &&
              count_op(part[p]->graph, TT_OP_REDUCE_SCATTER) == s->reduce_scatters &&
              count_op(part[p]->graph, TT_OP_ALL_TO_ALL) == s->all_to_alls &&
              count_op(part[p]->graph, TT_OP_COLLECTIVE_PERMUTE) == s->collective_permutes,
          "%s on %s: partition %d: collective instructions vs counts", name, m->name, (int)p);
  }
  if (stats) {
    *stats = part[0]->stats;
    stats->masks = 0; /* masks depend on the partition's tile: summed */
    for (int32_t p = 0; p < m->n; ++p) stats->masks += part[p]->stats.masks;
  }
  for (int32_t p = 0; p < m->n; ++p) {
    for (int32_t j = 0; j < g->num_outputs; ++j) tt_tensor_release(got[p][j]);
    for (int32_t k = 0; k < g->num_inputs; ++k) free(shards[p][k]);
    tt_partition_destroy(part[p]);
  }
cleanup_ref:
  for (int32_t j = 0; j < g->num_outputs; ++j) tt_tensor_release(ref[j]);
  for (int32_t k = 0; k < g->num_inputs; ++k) free(full[k]);
  free(gin);
  tt_graph_destroy(g);
  for (int i = 0; i < g_num_nodes; ++i) tt_node_release(g_nodes[i]);
  g_num_nodes = 0;
}

#endif /* TESTS_C_PARTITION_HARNESS_H_ */
