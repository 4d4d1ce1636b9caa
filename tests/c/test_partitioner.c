/* The SPMD partitioner (tt_partition_program, include/torchtpu/partition.h):
 * differential tests. Each case builds a graph with annotated inputs,
 * propagates shardings, partitions it for every partition of a mesh, runs
 * each partition's program on its own CPU device of the engine (the
 * programs' collectives meet in the collective layer), and compares every
 * device's output shard with the unpartitioned graph's result (exact for
 * movement and elementwise ops, a tolerance for reductions and products).
 * Input shards are padded with NaN, so a reduction that read padding would
 * show it. Also the collectives each program issues (Megatron's MLP: one
 * all_reduce; data parallelism: none), fallbacks, and refusals. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "test_harness.h"
#include "torchtpu/collective.h"
#include "torchtpu/partition.h"
#include "torchtpu/passes.h"
#include "torchtpu/sharding_rule.h"
#include "torchtpu/torchtpu.h"

#define NDEV 4
#define MAXN 32 /* nodes per case */

static tt_buffer_t *g_buf;

typedef struct mesh_s {
  const char *name;
  int32_t rank;
  int64_t shape[2];
  int32_t n;
} mesh_t;

static const mesh_t M2 = {"(2,)", 1, {2, 1}, 2};
static const mesh_t M4 = {"(4,)", 1, {4, 1}, 4};
static const mesh_t M22 = {"(2,2)", 2, {2, 2}, 4};

/* PyTorch/XLA's tile assignment for a partition spec written as text, one
 * field per tensor dim: "-" for None, else the mesh axes (digits, in
 * order) the dim is split over: "0,-", "01,-", "-,1". NULL: replicated. */
static tt_sharding_t *spec_sharding(const mesh_t *m, int32_t rank, const char *spec) {
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
static tt_node_t *keep(tt_node_t *n) {
  g_nodes[g_num_nodes++] = n;
  return n;
}
static tt_node_t *mk(tt_op_t op, int32_t nops, tt_node_t *const *ops, int32_t ni,
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

static tt_node_t *unary(tt_unary_op_t op, tt_node_t *x) { return mk(TT_OP_UNARY, OPS(x), IA(op)); }
static tt_node_t *binary(tt_binary_op_t op, tt_node_t *a, tt_node_t *b) {
  return mk(TT_OP_BINARY, OPS(a, b), IA(op));
}
static tt_node_t *reduce(tt_reduce_op_t op, tt_node_t *x, int64_t mask) {
  return mk(TT_OP_REDUCE, OPS(x), IA(op, mask, 0, TT_F32));
}
static tt_node_t *dot(tt_node_t *a, tt_node_t *b) { return mk(TT_OP_DOT, OPS(a, b), IA(0, 0)); }

/* An input: shape text rank/dims, its dtype, its spec (NULL: none). */
typedef struct input_s {
  int32_t rank;
  int64_t dims[3];
  const char *spec;
  tt_dtype_t dtype;
} input_t;

typedef int (*build_fn)(tt_node_t **in, tt_node_t **out);

static int g_cases; /* cases run (printed at the end) */

/* The mesh of the case being built (for annotations inside a graph). */
static const mesh_t *g_mesh;
static tt_node_t *annotate(tt_node_t *n, const char *spec) {
  tt_sharding_t *sh = spec_sharding(g_mesh, n->shape.rank, spec);
  CHECK_OK(tt_node_set_sharding(n, sh), spec);
  free(sh);
  return n;
}

/* ---- running programs ---- */
/* Replays graph g's instructions as tensor ops on device dev; host[k] is
 * input k's data. outs[j] gets output j (one reference). */
static void replay(const tt_graph_t *g, int32_t dev, void *const *host, tt_tensor_t **outs) {
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

static int64_t numel(const tt_shape_t *s) {
  int64_t n = 1;
  for (int32_t d = 0; d < s->rank; ++d) n *= s->dims[d];
  return n;
}

/* Element index of shard position i (row-major over shard) in the global
 * tensor, or -1 when it is padding. */
static int64_t global_index(const tt_shape_t *g, const tt_shape_t *shard, const int64_t *off,
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

static int count_op(const tt_graph_t *g, tt_op_t op) {
  int n = 0;
  for (int32_t i = 0; i < g->num_instrs; ++i) n += g->instrs[i].op == op;
  return n;
}

/* Runs one case; *stats gets partition 0's counts (every partition's must
 * agree). */
static void run_case(const char *name, const mesh_t *m, int32_t nin, const input_t *ins,
                     build_fn build, double tol, tt_partition_stats_t *stats) {
  tt_node_t *in_nodes[4], *outs[4];
  g_mesh = m;
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
              s->fallbacks == s0->fallbacks,
          "%s on %s: partition %d's counts differ from partition 0's", name, m->name, (int)p);
    CHECK(count_op(part[p]->graph, TT_OP_ALL_REDUCE) == s->all_reduces &&
              count_op(part[p]->graph, TT_OP_ALL_GATHER) == s->all_gathers,
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

/* ---- the cases ---- */
static int b_elementwise(tt_node_t **in, tt_node_t **out) {
  /* tanh(x) * x + bias (bias broadcast along rows), relu; where(x > 0). */
  tt_node_t *y = binary(TT_BIN_ADD, binary(TT_BIN_MUL, unary(TT_UN_TANH, in[0]), in[0]), in[1]);
  out[0] = unary(TT_UN_RELU, y);
  tt_node_t *pos = binary(TT_BIN_GT, in[0], y);
  out[1] = mk(TT_OP_WHERE, OPS(pos, in[0], y), NOIA);
  return 2;
}
static int b_broadcast(tt_node_t **in, tt_node_t **out) {
  tt_node_t *b = mk(TT_OP_BROADCAST, OPS(in[1]), IA(6, 5));
  out[0] = binary(TT_BIN_SUB, in[0], b);
  return 1;
}
static int b_transpose(tt_node_t **in, tt_node_t **out) {
  out[0] = unary(TT_UN_EXP, mk(TT_OP_TRANSPOSE, OPS(in[0]), IA(1, 0)));
  return 1;
}
static int b_reshape(tt_node_t **in, tt_node_t **out) {
  /* [6, 4] -> [6, 2, 2] (rows and the column group's major dim kept) ->
   * [6, 4] */
  tt_node_t *r = mk(TT_OP_RESHAPE, OPS(in[0]), IA(6, 2, 2));
  out[0] = unary(TT_UN_NEG, r);
  out[1] = mk(TT_OP_RESHAPE, OPS(out[0]), IA(6, 4));
  return 2;
}
static int b_reduce(tt_node_t **in, tt_node_t **out) {
  out[0] = reduce(TT_RED_SUM, in[0], 2);  /* over columns */
  out[1] = reduce(TT_RED_MEAN, in[0], 1); /* over rows */
  out[2] = reduce(TT_RED_MAX, in[0], 1);
  out[3] = reduce(TT_RED_SUM, unary(TT_UN_EXP, in[0]), 3); /* everything */
  return 4;
}
static int b_min_prod(tt_node_t **in, tt_node_t **out) {
  out[0] = reduce(TT_RED_MIN, in[0], 2);
  out[1] = reduce(TT_RED_PROD, in[0], 1);
  return 2;
}
static int b_dot(tt_node_t **in, tt_node_t **out) {
  out[0] = dot(in[0], in[1]);
  return 1;
}
static int b_softmax(tt_node_t **in, tt_node_t **out) {
  out[0] = mk(TT_OP_SOFTMAX, OPS(in[0]), IA(1, 0));
  out[1] = mk(TT_OP_SOFTMAX, OPS(in[0]), IA(0, 1)); /* log_softmax over rows */
  return 2;
}
static int b_slice_concat(tt_node_t **in, tt_node_t **out) {
  /* columns 1:4 (rows whole), x beside itself along columns, rows 1:5. */
  out[0] = mk(TT_OP_SLICE, OPS(in[0]), IA(0, 1, 6, 4, 1, 1));
  out[1] = mk(TT_OP_CONCAT, OPS(in[0], out[0]), IA(1));
  out[2] = mk(TT_OP_SLICE, OPS(in[0]), IA(1, 0, 5, 5, 1, 1));
  return 3;
}
static int b_index_select(tt_node_t **in, tt_node_t **out) {
  out[0] = mk(TT_OP_INDEX_SELECT, OPS(in[0], in[1]), IA(0));
  return 1;
}
static int b_mlp(tt_node_t **in, tt_node_t **out) {
  out[0] = dot(unary(TT_UN_RELU, dot(in[0], in[1])), in[2]);
  return 1;
}

static int b_dot_trans(tt_node_t **in, tt_node_t **out) {
  /* a^T b^T: a [1, K, M], b [1, N, K] */
  out[0] = mk(TT_OP_DOT, OPS(in[0], in[1]), IA(1, 1));
  return 1;
}
static int b_reshard_output(tt_node_t **in, tt_node_t **out) {
  /* rows in, columns out: the result is resharded (gather rows, slice
   * columns) */
  out[0] = annotate(unary(TT_UN_EXP, in[0]), "-,0");
  out[1] = annotate(binary(TT_BIN_ADD, in[0], in[0]), "0,-");
  return 2;
}
static int b_dot_rows_out(tt_node_t **in, tt_node_t **out) {
  /* row-parallel with the result wanted sharded by rows (sequence
   * parallelism): the partial sums reduce-scatter. */
  out[0] = annotate(dot(in[0], in[1]), "-,0,-");
  return 1;
}
static int b_keepdim_argmax(tt_node_t **in, tt_node_t **out) {
  out[0] = mk(TT_OP_REDUCE, OPS(in[0]), IA(TT_RED_SUM, 1, 1, TT_F32));
  out[1] = mk(TT_OP_CONVERT, OPS(mk(TT_OP_REDUCE, OPS(in[0]), IA(TT_RED_ARGMAX, 1, 0, TT_I64))),
              IA(TT_F32));
  return 2;
}
static int b_block(tt_node_t **in, tt_node_t **out) {
  /* softmax(x W1 + b) W2, summed over the batch: a small block mixing
   * the families. */
  tt_node_t *h = dot(in[0], in[1]);
  h = binary(TT_BIN_ADD, h, in[2]);
  h = mk(TT_OP_SOFTMAX, OPS(h), IA(2, 0));
  tt_node_t *y = dot(h, in[3]);
  out[0] = reduce(TT_RED_SUM, mk(TT_OP_RESHAPE, OPS(y), IA(8, 3)), 1);
  return 1;
}

#define F TT_F32
#define I(rank, d0, d1, d2, spec) {rank, {d0, d1, d2}, spec, F}

static void test_elementwise_and_movement(void) {
  const mesh_t *meshes[3] = {&M2, &M4, &M22};
  const char *specs[3][4] = {{"0,-", "-,0", NULL}, {"0,-", "-,0", NULL},
                             {"0,1", "1,0", "01,-", "-,1"}};
  for (int mi = 0; mi < 3; ++mi)
    for (int si = 0; si < 4 && specs[mi][si]; ++si) {
      const char *sp = specs[mi][si];
      input_t ew[2] = {I(2, 6, 5, 0, sp), I(1, 5, 0, 0, NULL)};
      tt_partition_stats_t st;
      run_case("elementwise", meshes[mi], 2, ew, b_elementwise, 0, &st);
      CHECK(st.all_gathers == 0 && st.all_reduces == 0 && st.fallbacks == 0,
            "elementwise %s %s: %lld gathers %lld reduces", meshes[mi]->name, sp,
            (long long)st.all_gathers, (long long)st.all_reduces);
      run_case("broadcast", meshes[mi], 2, ew, b_broadcast, 0, &st);
      CHECK(st.all_gathers == 0 && st.all_reduces == 0, "broadcast %s %s", meshes[mi]->name, sp);
      input_t t[1] = {I(2, 6, 5, 0, sp)};
      run_case("transpose", meshes[mi], 1, t, b_transpose, 0, &st);
      CHECK(st.all_gathers == 0 && st.all_reduces == 0, "transpose %s %s", meshes[mi]->name, sp);
      input_t r[1] = {I(2, 6, 4, 0, sp)};
      run_case("reshape", meshes[mi], 1, r, b_reshape, 0, &st);
      run_case("slice/concat", meshes[mi], 1, t, b_slice_concat, 0, &st);
      run_case("softmax", meshes[mi], 1, t, b_softmax, 1e-5, &st);
    }
  /* Sharded dims kept by a reshape, a slice of whole rows and a concat
   * beside it, a softmax beside it: local. */
  tt_partition_stats_t st;
  input_t rows[1] = {I(2, 6, 4, 0, "0,-")};
  run_case("reshape rows", &M2, 1, rows, b_reshape, 0, &st);
  CHECK(st.all_gathers == 0, "reshape keeping rows: %lld gathers", (long long)st.all_gathers);
  input_t cols[1] = {I(2, 6, 4, 0, "-,0")};
  run_case("reshape columns", &M2, 1, cols, b_reshape, 0, &st);
  CHECK(st.all_gathers == 0, "reshape keeping the column group's major dim: %lld gathers",
        (long long)st.all_gathers);
  input_t rows5[1] = {I(2, 6, 5, 0, "0,-")};
  run_case("slice/concat rows", &M4, 1, rows5, b_slice_concat, 0, &st);
  /* The third output slices the sharded rows: that one gathers. */
  CHECK(st.all_gathers == 1 && st.fallbacks == 0, "slice along rows: %lld gathers",
        (long long)st.all_gathers);
  run_case("softmax rows", &M4, 1, rows5, b_softmax, 1e-5, &st);
  /* softmax over columns is local, log_softmax over the sharded rows gathers. */
  CHECK(st.all_gathers == 1, "softmax: %lld gathers", (long long)st.all_gathers);
}

static void test_reductions(void) {
  const mesh_t *meshes[3] = {&M2, &M4, &M22};
  const char *specs[3][4] = {{"0,-", "-,0", NULL}, {"0,-", "-,0", NULL},
                             {"0,1", "1,0", "01,-", "-,1"}};
  for (int mi = 0; mi < 3; ++mi)
    for (int si = 0; si < 4 && specs[mi][si]; ++si) {
      input_t x[1] = {I(2, 7, 5, 0, specs[mi][si])};
      run_case("reduce", meshes[mi], 1, x, b_reduce, 1e-5, NULL);
      run_case("min/prod", meshes[mi], 1, x, b_min_prod, 1e-5, NULL);
    }
  /* Over a sharded dim: partial values, one all_reduce, no gather (7 rows
   * over 4: the last shard is one row and three masked). */
  tt_partition_stats_t st;
  input_t x[1] = {I(2, 7, 5, 0, "0,-")};
  run_case("reduce rows", &M4, 1, x, b_reduce, 1e-5, &st);
  /* sum over columns: local; mean and max over rows: partial; full sum: partial. */
  CHECK(st.all_reduces == 3 && st.all_gathers == 0 && st.masks == 3,
        "reduce rows: %lld reduces %lld gathers %lld masks", (long long)st.all_reduces,
        (long long)st.all_gathers, (long long)st.masks);
}

static void test_dot(void) {
  tt_partition_stats_t st;
  /* Batch-sharded (data parallel over the batch dim). */
  input_t bat[2] = {I(3, 4, 3, 5, "0,-,-"), I(3, 4, 5, 2, "0,-,-")};
  run_case("dot batch", &M2, 2, bat, b_dot, 1e-5, &st);
  CHECK(st.all_gathers + st.all_reduces == 0, "dot batch: collectives");
  run_case("dot batch", &M4, 2, bat, b_dot, 1e-5, &st);
  CHECK(st.all_gathers + st.all_reduces == 0, "dot batch 4: collectives");
  input_t bat22[2] = {I(3, 4, 3, 5, "01,-,-"), I(3, 4, 5, 2, "01,-,-")};
  run_case("dot batch", &M22, 2, bat22, b_dot, 1e-5, &st);
  CHECK(st.all_gathers + st.all_reduces == 0, "dot batch 2x2: collectives");
  /* Contracting-sharded (row-parallel): local dots, one all_reduce; K = 5
   * is uneven (masked). */
  input_t k[2] = {I(3, 1, 3, 5, "-,-,0"), I(3, 1, 5, 4, "-,0,-")};
  const mesh_t *meshes[3] = {&M2, &M4, &M22};
  for (int mi = 0; mi < 2; ++mi) {
    run_case("dot contracting", meshes[mi], 2, k, b_dot, 1e-5, &st);
    CHECK(st.all_reduces == 1 && st.all_gathers == 0, "dot contracting %s: %lld reduces %lld "
          "gathers", meshes[mi]->name, (long long)st.all_reduces, (long long)st.all_gathers);
  }
  /* Output-feature-sharded (column-parallel): local, no collective. */
  input_t n[2] = {I(3, 1, 3, 5, NULL), I(3, 1, 5, 6, "-,-,0")};
  for (int mi = 0; mi < 2; ++mi) {
    run_case("dot column", meshes[mi], 2, n, b_dot, 1e-5, &st);
    CHECK(st.all_reduces + st.all_gathers == 0, "dot column %s", meshes[mi]->name);
  }
  /* 2x2: rows over axis 0 and K over axis 1 (data parallel + row-parallel). */
  input_t mk22[2] = {I(3, 1, 6, 5, "-,0,1"), I(3, 1, 5, 3, "-,1,-")};
  run_case("dot rows+contracting", &M22, 2, mk22, b_dot, 1e-5, &st);
  CHECK(st.all_reduces == 1 && st.all_gathers == 0, "dot 2x2: %lld reduces %lld gathers",
        (long long)st.all_reduces, (long long)st.all_gathers);
  /* K sharded on one operand only (the other replicated: sliced, free). */
  input_t k1[2] = {I(3, 1, 3, 6, "-,-,0"), I(3, 1, 6, 4, NULL)};
  run_case("dot contracting one side", &M4, 2, k1, b_dot, 1e-5, &st);
  CHECK(st.all_reduces == 1 && st.all_gathers == 0, "dot one-sided K: %lld reduces %lld gathers",
        (long long)st.all_reduces, (long long)st.all_gathers);
  /* Each operand sharded along a different dim: N sharded for b, M for a on
   * the same devices: the result tiles both over 4 devices of (2,2)? */
  input_t mn[2] = {I(3, 1, 6, 5, "-,0,-"), I(3, 1, 5, 4, "-,-,1")};
  run_case("dot rows x columns", &M22, 2, mn, b_dot, 1e-5, &st);
  CHECK(st.all_reduces + st.all_gathers == 0, "dot 2-D tiles: %lld", (long long)st.all_gathers);
}

static void test_mlp_collectives(void) {
  tt_partition_stats_t st;
  /* Megatron: column-parallel then row-parallel: exactly one all_reduce. */
  input_t meg[3] = {I(3, 1, 4, 6, NULL), I(3, 1, 6, 8, "-,-,0"), I(3, 1, 8, 6, "-,0,-")};
  run_case("megatron mlp", &M2, 3, meg, b_mlp, 1e-5, &st);
  CHECK(st.all_reduces == 1 && st.all_gathers == 0 && st.fallbacks == 0,
        "megatron (2,): %lld all_reduces %lld all_gathers", (long long)st.all_reduces,
        (long long)st.all_gathers);
  run_case("megatron mlp", &M4, 3, meg, b_mlp, 1e-5, &st);
  CHECK(st.all_reduces == 1 && st.all_gathers == 0,
        "megatron (4,): %lld all_reduces %lld all_gathers", (long long)st.all_reduces,
        (long long)st.all_gathers);
  /* (2,2): batch over axis 0, Megatron over axis 1: still one. */
  input_t meg22[3] = {I(3, 1, 4, 6, "-,0,-"), I(3, 1, 6, 8, "-,-,1"), I(3, 1, 8, 6, "-,1,-")};
  run_case("megatron mlp", &M22, 3, meg22, b_mlp, 1e-5, &st);
  CHECK(st.all_reduces == 1 && st.all_gathers == 0,
        "megatron (2,2): %lld all_reduces %lld all_gathers", (long long)st.all_reduces,
        (long long)st.all_gathers);
  /* Data parallel: batch rows sharded, weights replicated: none. */
  input_t dp[3] = {I(3, 1, 8, 6, "-,0,-"), I(3, 1, 6, 5, NULL), I(3, 1, 5, 3, NULL)};
  run_case("data-parallel mlp", &M4, 3, dp, b_mlp, 1e-5, &st);
  CHECK(st.all_reduces == 0 && st.all_gathers == 0,
        "data parallel: %lld all_reduces %lld all_gathers", (long long)st.all_reduces,
        (long long)st.all_gathers);
}

static void test_more(void) {
  tt_partition_stats_t st;
  /* Both operands transposed, K sharded: still one all_reduce. */
  input_t tr[2] = {I(3, 1, 5, 3, "-,0,-"), I(3, 1, 4, 5, "-,-,0")};
  run_case("dot transposed", &M2, 2, tr, b_dot_trans, 1e-5, &st);
  CHECK(st.all_reduces == 1 && st.all_gathers == 0, "dot transposed: %lld reduces %lld gathers",
        (long long)st.all_reduces, (long long)st.all_gathers);
  run_case("dot transposed", &M4, 2, tr, b_dot_trans, 1e-5, &st);
  /* Row-parallel with the result wanted in row tiles over the devices
   * that hold K: rows and K cannot share those devices, so both K dims
   * are gathered (a reduce_scatter would do: not done yet). */
  input_t rs[2] = {I(3, 1, 6, 5, "-,-,0"), I(3, 1, 5, 3, "-,0,-")};
  run_case("dot reduce-scatter", &M4, 2, rs, b_dot_rows_out, 1e-5, &st);
  CHECK(st.all_reduces == 0 && st.all_gathers == 2,
        "row-parallel into rows (4,): %lld all_reduces %lld gathers", (long long)st.all_reduces,
        (long long)st.all_gathers);
  run_case("dot reduce-scatter", &M2, 2, rs, b_dot_rows_out, 1e-5, &st);
  /* A user's output layout that differs from its operand's. */
  input_t x[1] = {I(2, 6, 5, 0, "0,-")};
  run_case("resharded output", &M4, 1, x, b_reshard_output, 0, &st);
  CHECK(st.all_gathers == 1 && st.all_reduces == 0, "resharded output: %lld gathers",
        (long long)st.all_gathers);
  run_case("resharded output", &M2, 1, x, b_reshard_output, 0, &st);
  /* keepdim sum over sharded rows (partial), argmax over them (gathered). */
  input_t r[1] = {I(2, 7, 3, 0, "0,-")};
  run_case("keepdim/argmax", &M4, 1, r, b_keepdim_argmax, 1e-5, &st);
  CHECK(st.all_reduces == 1 && st.all_gathers == 1, "keepdim/argmax: %lld reduces %lld gathers",
        (long long)st.all_reduces, (long long)st.all_gathers);
  input_t r22[1] = {I(2, 7, 3, 0, "0,1")};
  run_case("keepdim/argmax", &M22, 1, r22, b_keepdim_argmax, 1e-5, &st);
  /* A block over a (2,2) mesh: batch over axis 0, hidden over axis 1. */
  input_t blk[4] = {I(3, 1, 8, 6, "-,0,-"), I(3, 1, 6, 5, "-,-,1"), I(1, 5, 0, 0, NULL),
                    I(3, 1, 5, 3, NULL)};
  run_case("block", &M22, 4, blk, b_block, 1e-5, &st);
  run_case("block", &M2, 4, (input_t[]){I(3, 1, 8, 6, "-,0,-"), I(3, 1, 6, 5, NULL),
                                         I(1, 5, 0, 0, NULL), I(3, 1, 5, 3, NULL)},
           b_block, 1e-5, &st);
  CHECK(st.all_gathers == 0 && st.all_reduces == 1,
        "data-parallel block: %lld gathers %lld reduces (the batch sum)",
        (long long)st.all_gathers, (long long)st.all_reduces);
}

static void test_fallback(void) {
  /* index_select has no partition rule: the sharded table is gathered and
   * the lookup computed replicated; counted. */
  tt_partition_stats_t st;
  input_t in[2] = {I(2, 6, 5, 0, "0,-"), {1, {4, 0, 0}, NULL, TT_I64}};
  run_case("index_select", &M4, 2, in, b_index_select, 0, &st);
  CHECK(st.fallbacks == 1 && st.all_gathers == 1, "fallback: %lld fallbacks %lld gathers",
        (long long)st.fallbacks, (long long)st.all_gathers);
}

static void test_refusals(void) {
  tt_shape_t s = {2, {4, 4}};
  tt_node_t *x = tt_node_create_param(g_buf, F, &s, 0);
  tt_node_t *y = NULL;
  CHECK_OK(tt_node_create(TT_OP_UNARY, 0, &x, 1, (int64_t[]){TT_UN_EXP}, 1, NULL, 0, &y));
  tt_sharding_t *sh = spec_sharding(&M4, 2, "0,-");
  CHECK_OK(tt_node_set_sharding(x, sh));
  free(sh);
  tt_graph_t *g = NULL;
  CHECK_OK(tt_graph_build(&y, 1, &g, NULL));
  g->instrs[x->visit_index].sharding = x->sharding;
  tt_partition_t *part = NULL;
  tt_partition_mesh_t m4 = {4, NULL}, m2 = {2, NULL}, m40 = {40, NULL};
  tt_status_t st = tt_partition_program(g, &m4, 0, g_buf, &part);
  CHECK(st && tt_status_code(st) == TT_INVALID_ARGUMENT &&
            strstr(tt_status_message(st), "tt_pass_propagate_sharding"),
        "unpropagated: %s", st ? tt_status_message(st) : "ok");
  tt_status_free(st);
  CHECK_OK(tt_pass_propagate_sharding(g));
  st = tt_partition_program(g, &m4, 4, g_buf, &part);
  CHECK(st && tt_status_code(st) == TT_INVALID_ARGUMENT, "partition 4 of 4");
  tt_status_free(st);
  st = tt_partition_program(g, &m2, 0, g_buf, &part);
  CHECK(st && strstr(tt_status_message(st), "made for 4 devices in a program of 2"),
        "device count: %s", st ? tt_status_message(st) : "ok");
  tt_status_free(st);
  st = tt_partition_program(g, &m40, 0, g_buf, &part);
  CHECK(st && tt_status_code(st) == TT_UNIMPLEMENTED, "40 partitions");
  tt_status_free(st);
  CHECK(part == NULL, "no program on refusal");
  /* A program's input has the shard shape: [1, 4] of [4, 4] over 4. */
  CHECK_OK(tt_partition_program(g, &m4, 2, g_buf, &part));
  if (part) {
    const tt_instr_t *in = &part->graph->instrs[part->graph->input_instr[0]];
    CHECK(in->shape.rank == 2 && in->shape.dims[0] == 1 && in->shape.dims[1] == 4,
          "shard shape [%lld, %lld]", (long long)in->shape.dims[0], (long long)in->shape.dims[1]);
    tt_partition_destroy(part);
  }
  tt_graph_destroy(g);
  tt_node_release(y);
  tt_node_release(x);
}

int main(void) {
  CHECK_OK(tt_runtime_init(NDEV));
  tt_collective_set_world_size(NDEV);
  float data[4] = {0};
  CHECK_OK(tt_buffer_from_host(0, data, sizeof(data), &g_buf));
  test_elementwise_and_movement();
  test_reductions();
  test_dot();
  test_mlp_collectives();
  test_more();
  test_fallback();
  test_refusals();
  tt_runtime_wait(-1);
  tt_buffer_release(g_buf);
  printf("%d partitioned cases\n", g_cases);
  return test_summary();
}
