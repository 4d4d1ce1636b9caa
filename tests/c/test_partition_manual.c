/* Manual SPMD regions in the partitioner (docs/spmd.md "Partitioner",
 * manual regions): full_to_shard gives each partition its tile of the
 * region's sharding, ops over local values run as they are, collectives
 * among them run between the partitions (groups of partition ids), and
 * shard_to_full makes the local values the tiles of its result. Each case
 * partitions a graph for every partition of a mesh, runs each program on
 * its own CPU device (the collectives meet in the collective layer) and
 * compares every device's output shard with a reference computed on the
 * host. Refusals: a manual value as an output, a collective outside a
 * region, a region nested in a region. */
#include "partition_harness.h"

#define F TT_F32

/* The manual-region op over x with the tiled sharding `spec` on g_mesh
 * (full: shard_to_full's full dims, NULL for full_to_shard). */
static tt_node_t *region_op(tt_op_t op, tt_node_t *x, const char *spec, int32_t rank,
                            const int64_t *full) {
  tt_sharding_t *s = spec_sharding(g_mesh, rank, spec);
  if (s->kind == TT_SHARDING_REPLICATED) { /* every device holds all of it */
    s->kind = TT_SHARDING_TILED;
    for (int32_t d = 0; d < rank; ++d) s->tile_dims[d] = 1;
    s->tile_dims[rank] = g_mesh->n;
    s->num_tile_dims = rank + 1;
    s->last_tile_dim_replicate = 1;
    s->num_devices = g_mesh->n;
    for (int32_t i = 0; i < g_mesh->n; ++i) s->devices[i] = i;
  }
  tt_spmd_manual_attrs_t a = {0};
  int32_t n = 0;
  a.spec.v[n++] = s->num_tile_dims;
  a.spec.v[n++] = s->last_tile_dim_replicate;
  for (int32_t d = 0; d < s->num_tile_dims; ++d) a.spec.v[n++] = s->tile_dims[d];
  a.spec.v[n++] = s->num_devices;
  for (int32_t i = 0; i < s->num_devices; ++i) a.spec.v[n++] = s->devices[i];
  for (int32_t d = 0; full && d < rank; ++d) a.spec.v[n++] = full[d];
  a.spec.n = n;
  free(s);
  int64_t ia[TT_MAX_IATTRS];
  double fa[TT_MAX_FATTRS] = {0};
  int32_t ni = 0;
  CHECK_OK(tt_attrs_encode(op, &a, sizeof(a), -1, ia, &ni, fa));
  return mk(op, 1, &x, ni, ia);
}

static tt_node_t *all_reduce(tt_node_t *x, int64_t group_size, const int64_t *ids, int32_t nids) {
  tt_all_reduce_attrs_t a = {0};
  a.reduce = TT_RED_SUM;
  a.group_size = group_size;
  a.groups.n = nids;
  for (int32_t k = 0; k < nids; ++k) a.groups.v[k] = ids[k];
  int64_t ia[TT_MAX_IATTRS];
  double fa[TT_MAX_FATTRS] = {0};
  int32_t ni = 0;
  CHECK_OK(tt_attrs_encode(TT_OP_ALL_REDUCE, &a, sizeof(a), -1, ia, &ni, fa));
  return mk(TT_OP_ALL_REDUCE, 1, &x, ni, ia);
}

static tt_node_t *all_gather(tt_node_t *x, int64_t dim, int64_t group_size, const int64_t *ids,
                             int32_t nids) {
  tt_all_gather_attrs_t a = {0};
  a.dim = dim;
  a.shard_count = group_size;
  a.group_size = group_size;
  a.groups.n = nids;
  for (int32_t k = 0; k < nids; ++k) a.groups.v[k] = ids[k];
  int64_t ia[TT_MAX_IATTRS];
  double fa[TT_MAX_FATTRS] = {0};
  int32_t ni = 0;
  CHECK_OK(tt_attrs_encode(TT_OP_ALL_GATHER, &a, sizeof(a), -1, ia, &ni, fa));
  return mk(TT_OP_ALL_GATHER, 1, &x, ni, ia);
}

/* The graph of out (one output) propagated, with the nodes' annotations. */
static tt_graph_t *graph_of(tt_node_t *out) {
  tt_graph_t *g = NULL;
  CHECK_OK(tt_graph_build(&out, 1, &g, NULL));
  for (int i = 0; i < g_num_nodes; ++i)
    if (g_nodes[i]->visit_epoch && g_nodes[i]->sharding)
      g->instrs[g_nodes[i]->visit_index].sharding = g_nodes[i]->sharding;
  CHECK_OK(tt_pass_propagate_sharding(g));
  return g;
}

static void release_nodes(void) {
  for (int i = 0; i < g_num_nodes; ++i) tt_node_release(g_nodes[i]);
  g_num_nodes = 0;
}

/* Partitions g (one F32 input of host data x, one output) over mesh m,
 * runs every partition and compares each device's output shard with
 * want (the full output, row-major). */
static void run_manual(const char *name, const mesh_t *m, tt_graph_t *g, const float *x,
                       const float *want, tt_partition_stats_t *stats) {
  tt_collective_set_world_size(m->n);
  ++g_cases;
  tt_partition_mesh_t mesh = {m->n, NULL};
  tt_partition_t *part[NDEV] = {NULL};
  tt_tensor_t *got[NDEV][4];
  void *shards[NDEV][1];
  const tt_instr_t *xi = &g->instrs[g->input_instr[0]];
  const tt_instr_t *oi = &g->instrs[g->output_instr[0]];
  for (int32_t p = 0; p < m->n; ++p) {
    if (!CHECK_OK(tt_partition_program(g, &mesh, p, g_buf, &part[p]), name)) {
      for (int32_t q = 0; q < p; ++q) tt_partition_destroy(part[q]);
      return;
    }
    int64_t off[TT_MAX_RANK], valid[TT_MAX_RANK];
    tt_shape_t ss;
    CHECK_OK(tt_partition_tile(g->sharding_prop[g->input_instr[0]].sharding, &xi->shape, p, off,
                               valid, &ss));
    float *s = malloc(sizeof(float) * (size_t)numel(&ss) + 4);
    for (int64_t e = 0; e < numel(&ss); ++e) {
      int64_t gi = global_index(&xi->shape, &ss, off, valid, e);
      s[e] = gi < 0 ? NAN : x[gi];
    }
    shards[p][0] = s;
  }
  for (int32_t p = 0; p < m->n; ++p) replay(part[p]->graph, p, shards[p], got[p]);
  CHECK_OK(tt_lazy_sync(-1, 1, NULL), name);
  for (int32_t p = 0; p < m->n; ++p) {
    int64_t off[TT_MAX_RANK], valid[TT_MAX_RANK];
    tt_shape_t ss;
    CHECK_OK(tt_partition_tile(g->sharding_prop[g->output_instr[0]].sharding, &oi->shape, p, off,
                               valid, &ss));
    CHECK(tt_shape_equal(tt_tensor_shape(got[p][0]), &ss), "%s on %s: partition %d's shard shape",
          name, m->name, (int)p);
    if (tt_shape_equal(tt_tensor_shape(got[p][0]), &ss)) {
      float *y = malloc(sizeof(float) * (size_t)numel(&ss) + 4);
      CHECK_OK(tt_tensor_to_host(got[p][0], y, sizeof(float) * (size_t)numel(&ss)), name);
      int bad = 0;
      for (int64_t e = 0; e < numel(&ss); ++e) {
        int64_t gi = global_index(&oi->shape, &ss, off, valid, e);
        if (gi >= 0 && !(fabs(y[e] - want[gi]) <= 1e-5 * (1.0 + fabs(want[gi])))) ++bad;
      }
      CHECK(bad == 0, "%s on %s: partition %d: %d elements differ", name, m->name, (int)p, bad);
      free(y);
    }
    tt_tensor_release(got[p][0]);
    free(shards[p][0]);
  }
  if (stats) *stats = part[0]->stats;
  for (int32_t p = 0; p < m->n; ++p) {
    CHECK(count_op(part[p]->graph, TT_OP_ALL_REDUCE) == part[p]->stats.all_reduces &&
              count_op(part[p]->graph, TT_OP_ALL_GATHER) == part[p]->stats.all_gathers,
          "%s: partition %d's collective counts", name, (int)p);
    CHECK(count_op(part[p]->graph, TT_OP_SPMD_FULL_TO_SHARD) == 0 &&
              count_op(part[p]->graph, TT_OP_SPMD_SHARD_TO_FULL) == 0,
          "%s: no region ops left in partition %d's program", name, (int)p);
    tt_partition_destroy(part[p]);
  }
}

static tt_node_t *input(const mesh_t *m, int32_t rank, int64_t d0, int64_t d1, const char *spec) {
  g_mesh = m;
  tt_shape_t s = {rank, {d0, d1}};
  tt_node_t *x = keep(tt_node_create_param(g_buf, F, &s, 0));
  if (spec) annotate(x, spec);
  return x;
}

static float *random_data(int64_t n) {
  float *x = malloc(sizeof(float) * (size_t)n);
  for (int64_t e = 0; e < n; ++e) x[e] = (float)rnd_uniform(-1.0, 1.0);
  return x;
}

/* enable (rows over 4) -> exp -> all_reduce over every partition ->
 * disable (rows over 4): every row block is the sum of the blocks' exps.
 * The input arrives replicated, column-tiled or row-tiled. */
static void test_all_reduce_rows(void) {
  const char *in_specs[] = {NULL, "-,0", "0,-"};
  for (int32_t c = 0; c < 3; ++c) {
    tt_node_t *x = input(&M4, 2, 8, 3, in_specs[c]);
    tt_node_t *l = region_op(TT_OP_SPMD_FULL_TO_SHARD, x, "0,-", 2, NULL);
    CHECK(l->shape.dims[0] == 2 && l->shape.dims[1] == 3, "local shape [2, 3]");
    tt_node_t *r = all_reduce(unary(TT_UN_EXP, l), 4, (int64_t[]){0, 1, 2, 3}, 4);
    tt_node_t *y = region_op(TT_OP_SPMD_SHARD_TO_FULL, r, "0,-", 2, (int64_t[]){8, 3});
    tt_graph_t *g = graph_of(y);
    float *xd = random_data(24), want[24];
    for (int32_t i = 0; i < 2; ++i)
      for (int32_t j = 0; j < 3; ++j) {
        double s = 0;
        for (int32_t q = 0; q < 4; ++q) s += exp(xd[(q * 2 + i) * 3 + j]);
        for (int32_t q = 0; q < 4; ++q) want[(q * 2 + i) * 3 + j] = (float)s;
      }
    tt_partition_stats_t st;
    memset(&st, 0, sizeof(st));
    run_manual("all_reduce rows", &M4, g, xd, want, &st);
    CHECK(st.all_reduces == 1, "one all_reduce (the user's), got %lld",
          (long long)st.all_reduces);
    /* Column-tiled input: resharded to rows by one all_to_all, the
     * region's tile then read at no cost. */
    if (c == 1) CHECK(st.all_to_alls == 1, "column input: one all_to_all");
    if (c != 1) CHECK(st.all_gathers == 0 && st.all_to_alls == 0, "no reshard");
    free(xd);
    tt_graph_destroy(g);
    release_nodes();
  }
}

/* Mesh (2,2): enable (0,1) -> x 2 -> all_gather along dim 1 among the
 * partitions that differ in mesh axis 1 -> disable ("0,-", partial over
 * axis 1): 2x. */
static void test_all_gather_2d(void) {
  tt_node_t *x = input(&M22, 2, 4, 6, "0,1");
  tt_node_t *l = region_op(TT_OP_SPMD_FULL_TO_SHARD, x, "0,1", 2, NULL);
  tt_node_t *two = binary(TT_BIN_ADD, l, l);
  tt_node_t *gth = all_gather(two, 1, 2, (int64_t[]){0, 1, 2, 3}, 4);
  tt_node_t *y = region_op(TT_OP_SPMD_SHARD_TO_FULL, gth, "0,-", 2, (int64_t[]){4, 6});
  tt_graph_t *g = graph_of(y);
  float *xd = random_data(24), want[24];
  for (int32_t e = 0; e < 24; ++e) want[e] = 2 * xd[e];
  tt_partition_stats_t st;
  memset(&st, 0, sizeof(st));
  run_manual("all_gather (2,2)", &M22, g, xd, want, &st);
  CHECK(st.all_gathers == 1 && st.all_reduces == 0, "one all_gather");
  free(xd);
  tt_graph_destroy(g);
  release_nodes();
}

/* Uneven rows: 7 over 4 (local 2 rows, the last tile one real row), an
 * elementwise op, back to 7 rows: padding cropped. */
static void test_uneven(void) {
  tt_node_t *x = input(&M4, 2, 7, 2, NULL);
  tt_node_t *l = region_op(TT_OP_SPMD_FULL_TO_SHARD, x, "0,-", 2, NULL);
  tt_node_t *y = region_op(TT_OP_SPMD_SHARD_TO_FULL, unary(TT_UN_NEG, l), "0,-", 2,
                           (int64_t[]){7, 2});
  tt_node_t *z = unary(TT_UN_EXP, y); /* continues partitioned after the region */
  tt_graph_t *g = graph_of(z);
  float *xd = random_data(14), want[14];
  for (int32_t e = 0; e < 14; ++e) want[e] = (float)exp(-xd[e]);
  run_manual("uneven rows", &M4, g, xd, want, NULL);
  free(xd);
  tt_graph_destroy(g);
  release_nodes();
}

static void expect_refusal(const char *name, tt_node_t *out, const char *msg) {
  tt_graph_t *g = graph_of(out);
  tt_partition_mesh_t m4 = {4, NULL};
  tt_partition_t *part = NULL;
  tt_status_t st = tt_partition_program(g, &m4, 0, g_buf, &part);
  CHECK(st && tt_status_code(st) == TT_UNIMPLEMENTED && strstr(tt_status_message(st), msg),
        "%s: %s", name, st ? tt_status_message(st) : "partitioned");
  CHECK(part == NULL, "%s: no program", name);
  tt_status_free(st);
  tt_partition_destroy(part);
  tt_graph_destroy(g);
  release_nodes();
}

static void test_refusals(void) {
  tt_node_t *x = input(&M4, 2, 8, 3, "0,-");
  tt_node_t *l = region_op(TT_OP_SPMD_FULL_TO_SHARD, x, "0,-", 2, NULL);
  expect_refusal("manual output", unary(TT_UN_EXP, l), "inside a manual region");
  x = input(&M4, 2, 8, 3, "0,-");
  expect_refusal("collective outside a region", all_reduce(x, 4, (int64_t[]){0, 1, 2, 3}, 4),
                 "only inside a manual region");
  x = input(&M4, 2, 8, 4, "0,-");
  l = region_op(TT_OP_SPMD_FULL_TO_SHARD, x, "0,-", 2, NULL);
  tt_node_t *l2 = region_op(TT_OP_SPMD_FULL_TO_SHARD, l, "-,0", 2, NULL);
  tt_node_t *y = region_op(TT_OP_SPMD_SHARD_TO_FULL, l2, "-,0", 2, (int64_t[]){2, 4});
  expect_refusal("nested region",
                 region_op(TT_OP_SPMD_SHARD_TO_FULL, y, "0,-", 2, (int64_t[]){8, 4}),
                 "nested manual regions");
}

int main(void) {
  CHECK_OK(tt_runtime_init(NDEV));
  float data[4] = {0};
  CHECK_OK(tt_buffer_from_host(0, data, sizeof(data), &g_buf));
  test_all_reduce_rows();
  test_all_gather_2d();
  test_uneven();
  test_refusals();
  tt_runtime_wait(-1);
  tt_buffer_release(g_buf);
  printf("%d partitioned manual-region cases\n", g_cases);
  return test_summary();
}
