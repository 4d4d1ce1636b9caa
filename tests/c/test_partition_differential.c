/* The SPMD partitioner against the unpartitioned engine, on random cases
 * (issue 30): for each op family, each mesh of (2,), (4,), (8,), (2,2)
 * and (2,4), a few randomly drawn shapes (1 to 9 per dim: most uneven
 * over the mesh) and partition specs for the inputs and, for some
 * families, the result (which makes the partitioner reshard: all_gather,
 * all_to_all, collective_permute, reduce_scatter), the assembled shards
 * of every device must equal the unsharded engine's result: exactly for
 * movement, elementwise, lookups and rng (each device draws its own
 * tile), within 1e-5 relative for reductions, products, softmax, conv and
 * scatters. The draws come from the harness's fixed-seed
 * generator, so a failure reproduces; each failure names its family,
 * mesh and specs. */
#include "partition_harness.h"

#define DRAWS 8 /* per family and mesh */

/* The drawn parameters a builder reads. */
static int64_t g_p[8];
static char g_out_spec[32];
static int32_t g_out_rot;

/* A random partition spec for a tensor of `rank` dims on mesh m: each mesh
 * axis goes to a random dim or to none (replication); two axes on one dim
 * in a random order. Written as spec_sharding reads it. */
static void draw_spec(const mesh_t *m, int32_t rank, char *buf) {
  char dims[TT_MAX_RANK][4];
  memset(dims, 0, sizeof(dims));
  int32_t order[2] = {0, 1};
  if (m->rank == 2 && rnd_int(0, 1)) order[0] = 1, order[1] = 0;
  for (int32_t j = 0; j < m->rank; ++j) {
    int64_t d = rnd_int(-1, rank - 1);
    if (d < 0) continue;
    size_t len = strlen(dims[d]);
    dims[d][len] = (char)('0' + order[j]);
  }
  buf[0] = 0;
  for (int32_t d = 0; d < rank; ++d) {
    strcat(buf, dims[d][0] ? dims[d] : "-");
    if (d + 1 < rank) strcat(buf, ",");
  }
}

static void draw_shape(input_t *in, int32_t rank, const char *spec) {
  in->rank = rank;
  for (int32_t d = 0; d < 3; ++d) in->dims[d] = d < rank ? rnd_int(1, 9) : 0;
  in->spec = spec;
  in->dtype = TT_F32;
}

/* ---- the families ---- */
static tt_node_t *out_annotated(tt_node_t *n) {
  return g_out_spec[0] ? annotate_rot(n, g_out_spec, g_out_rot) : n;
}
static int f_elementwise(tt_node_t **in, tt_node_t **out) {
  tt_node_t *c = mk(TT_OP_BROADCAST, OPS(in[1]), in[0]->shape.rank, in[0]->shape.dims);
  tt_node_t *t = binary(TT_BIN_MUL, unary(TT_UN_TANH, in[0]), c);
  tt_node_t *f = binary(TT_BIN_SUB, in[0], c);
  out[0] = mk(TT_OP_WHERE, OPS(binary(TT_BIN_GT, in[0], c), t, f), NOIA);
  return 1;
}
static int f_transpose(tt_node_t **in, tt_node_t **out) {
  int64_t perm[3] = {g_p[0], g_p[1], g_p[2]};
  out[0] = unary(TT_UN_EXP, mk(TT_OP_TRANSPOSE, OPS(in[0]), in[0]->shape.rank, perm));
  return 1;
}
static int f_reshape(tt_node_t **in, tt_node_t **out) {
  const tt_shape_t *s = &in[0]->shape;
  tt_node_t *r = mk(TT_OP_RESHAPE, OPS(in[0]), IA(s->dims[0], s->dims[1] * s->dims[2]));
  out[0] = out_annotated(unary(TT_UN_NEG, r));
  return 1;
}
static int f_reduce(tt_node_t **in, tt_node_t **out) {
  out[0] = out_annotated(mk(TT_OP_REDUCE, OPS(in[0]), IA(g_p[0], g_p[1], 0, TT_F32)));
  return 1;
}
static int f_dot(tt_node_t **in, tt_node_t **out) {
  out[0] = out_annotated(dot(in[0], in[1]));
  return 1;
}
static int f_softmax(tt_node_t **in, tt_node_t **out) {
  out[0] = mk(TT_OP_SOFTMAX, OPS(in[0]), IA(g_p[0], g_p[1]));
  return 1;
}
static int f_slice_concat(tt_node_t **in, tt_node_t **out) {
  const tt_shape_t *s = &in[0]->shape;
  int64_t d = g_p[0], lo = g_p[1], hi = g_p[2];
  int64_t ia[6] = {0, 0, s->dims[0], s->dims[1], 1, 1};
  ia[d] = lo;
  ia[2 + d] = hi;
  tt_node_t *sl = mk(TT_OP_SLICE, OPS(in[0]), 6, ia);
  out[0] = mk(TT_OP_CONCAT, OPS(in[0], sl), IA(d));
  return 1;
}
static int f_index_select(tt_node_t **in, tt_node_t **out) {
  out[0] = out_annotated(mk(TT_OP_INDEX_SELECT, OPS(in[0], in[1]), IA(0)));
  return 1;
}
static int f_gather(tt_node_t **in, tt_node_t **out) {
  out[0] = mk(TT_OP_GATHER, OPS(in[0], in[1]), IA(0));
  return 1;
}
static int f_conv(tt_node_t **in, tt_node_t **out) {
  out[0] = mk(TT_OP_CONV2D, OPS(in[0], in[1]), IA(g_p[0], g_p[0], g_p[1], g_p[1], g_p[2], g_p[2], 1));
  return 1;
}
static int f_rng(tt_node_t **in, tt_node_t **out) {
  tt_node_t *r = NULL;
  int64_t ia[5] = {g_p[0], TT_F32, g_p[1], g_p[2], g_p[3]};
  double fa[2] = {0.25, 1.5};
  CHECK_OK(tt_node_create(TT_OP_RNG, 0, &in[0], 1, ia, 2 + g_p[4], fa, 2, &r), "rng");
  keep(r);
  out[0] = out_annotated(r);
  return 1;
}
static int f_scatter(tt_node_t **in, tt_node_t **out) {
  if (g_p[0] < 0)
    out[0] = mk(TT_OP_INDEX_ADD, OPS(in[0], in[1], in[2]), IA(0));
  else if (g_p[0] < 2)
    out[0] = mk(TT_OP_SCATTER, OPS(in[0], in[1], in[2]), IA(0, g_p[0]));
  else
    out[0] = mk(TT_OP_SCATTER_REDUCE, OPS(in[0], in[1], in[2]), IA(0, g_p[0] - 2, g_p[1]));
  out[0] = out_annotated(out[0]);
  return 1;
}
static int f_relayout(tt_node_t **in, tt_node_t **out) {
  out[0] = out_annotated(unary(TT_UN_EXP, in[0]));
  return 1;
}

typedef struct family_s {
  const char *name;
  build_fn build;
  double tol;
} family_t;

/* Draws family f's inputs and parameters on mesh m into ins/specs; the
 * input count. */
static int32_t draw_case(int f, const mesh_t *m, input_t *ins, char (*specs)[32]) {
  g_out_spec[0] = 0;
  g_out_rot = 0;
  int out_spec = rnd_int(0, 1);
  switch (f) {
    case 0: { /* elementwise beside a broadcast row */
      int32_t rank = (int32_t)rnd_int(1, 3);
      draw_spec(m, rank, specs[0]);
      draw_shape(&ins[0], rank, specs[0]);
      /* a row of the last dim, broadcast over the others */
      ins[1] = (input_t){1, {ins[0].dims[rank - 1], 0, 0}, NULL, TT_F32};
      return 2;
    }
    case 1: { /* transpose */
      int32_t rank = (int32_t)rnd_int(2, 3);
      draw_spec(m, rank, specs[0]);
      draw_shape(&ins[0], rank, specs[0]);
      int64_t perm[3] = {0, 1, 2};
      for (int32_t d = rank - 1; d > 0; --d) {
        int64_t j = rnd_int(0, d), t = perm[d];
        perm[d] = perm[j], perm[j] = t;
      }
      memcpy(g_p, perm, sizeof(perm));
      return 1;
    }
    case 2: /* reshape merging the last two dims */
      draw_spec(m, 3, specs[0]);
      draw_shape(&ins[0], 3, specs[0]);
      if (out_spec) draw_spec(m, 2, g_out_spec);
      return 1;
    case 3: { /* reduce (sum, mean, max, min, prod) over random dims */
      int32_t rank = (int32_t)rnd_int(1, 3);
      draw_spec(m, rank, specs[0]);
      draw_shape(&ins[0], rank, specs[0]);
      static const int64_t ops[5] = {TT_RED_SUM, TT_RED_MEAN, TT_RED_MAX, TT_RED_MIN,
                                     TT_RED_PROD};
      g_p[0] = ops[rnd_int(0, 4)];
      g_p[1] = rnd_int(1, (1 << rank) - 1);
      int32_t kept = rank - __builtin_popcountll((unsigned long long)g_p[1]);
      if (out_spec && kept > 0) draw_spec(m, kept, g_out_spec);
      return 1;
    }
    case 4: { /* batched dot [B, M, K] x [B, K, N] */
      int64_t b = rnd_int(1, 4), mm = rnd_int(1, 9), k = rnd_int(1, 9), n = rnd_int(1, 9);
      draw_spec(m, 3, specs[0]);
      draw_spec(m, 3, specs[1]);
      ins[0] = (input_t){3, {b, mm, k}, specs[0], TT_F32};
      ins[1] = (input_t){3, {b, k, n}, specs[1], TT_F32};
      if (out_spec) draw_spec(m, 3, g_out_spec);
      return 2;
    }
    case 5: /* softmax / log_softmax along a random dim */
      draw_spec(m, 2, specs[0]);
      draw_shape(&ins[0], 2, specs[0]);
      g_p[0] = rnd_int(0, 1);
      g_p[1] = rnd_int(0, 1);
      return 1;
    case 6: { /* a slice along a random dim, concatenated to its source */
      draw_spec(m, 2, specs[0]);
      draw_shape(&ins[0], 2, specs[0]);
      g_p[0] = rnd_int(0, 1);
      int64_t len = ins[0].dims[g_p[0]];
      g_p[1] = rnd_int(0, len - 1);
      g_p[2] = rnd_int(g_p[1] + 1, len);
      return 1;
    }
    case 7: { /* index_select rows of a table (indices 0..5: 6 to 9 rows) */
      draw_spec(m, 2, specs[0]);
      draw_spec(m, 1, specs[1]);
      ins[0] = (input_t){2, {rnd_int(6, 9), rnd_int(1, 9), 0}, specs[0], TT_F32};
      ins[1] = (input_t){1, {rnd_int(1, 9), 0, 0}, specs[1], TT_I64};
      if (out_spec) draw_spec(m, 2, g_out_spec);
      return 2;
    }
    case 8: { /* gather along rows */
      draw_spec(m, 2, specs[0]);
      draw_spec(m, 2, specs[1]);
      int64_t e = rnd_int(1, 9);
      ins[0] = (input_t){2, {rnd_int(6, 9), e, 0}, specs[0], TT_F32};
      ins[1] = (input_t){2, {rnd_int(1, 9), e, 0}, specs[1], TT_I64};
      return 2;
    }
    case 9: { /* conv2d: kernel 1, 3 or 5, "same" or less padding, dilation,
               * sometimes a stride */
      int64_t k = 2 * rnd_int(0, 2) + 1, dil = rnd_int(1, 2);
      int64_t pad = rnd_int(0, 1) ? dil * (k - 1) / 2 : rnd_int(0, dil * (k - 1) / 2);
      int64_t stride = rnd_int(0, 3) ? 1 : 2, reach = dil * (k - 1) + 1 - 2 * pad;
      int64_t n = rnd_int(1, 3), c = rnd_int(1, 4), o = rnd_int(1, 4);
      int64_t h = rnd_int(reach > 1 ? reach : 1, 9), w = rnd_int(reach > 1 ? reach : 1, 9);
      draw_spec(m, 4, specs[0]);
      draw_spec(m, 4, specs[1]);
      ins[0] = (input_t){4, {n, c, h, w}, specs[0], TT_F32};
      ins[1] = (input_t){4, {o, c, k, k}, specs[1], TT_F32};
      g_p[0] = stride, g_p[1] = pad, g_p[2] = dil;
      return 2;
    }
    case 10: { /* rng drawn in tiles: bit for bit the whole tensor's */
      int32_t rank = (int32_t)rnd_int(1, 3);
      g_p[0] = rnd_int(0, 2);
      for (int32_t d = 0; d < 3; ++d) g_p[1 + d] = d < rank ? rnd_int(1, 9) : 0;
      g_p[4] = rank;
      ins[0] = (input_t){0, {0, 0, 0, 0}, NULL, TT_I64};
      draw_spec(m, rank, g_out_spec);
      g_out_rot = (int32_t)rnd_int(0, m->n - 1);
      return 1;
    }
    case 11: { /* scatter / scatter_reduce / index_add into rows (indices
                * 0..5: 6 to 9 rows; duplicates) */
      static const int64_t kinds[6] = {0, 1, 2 + TT_SCATTER_REDUCE_SUM, 2 + TT_SCATTER_REDUCE_AMIN,
                                       2 + TT_SCATTER_REDUCE_MEAN, -1};
      g_p[0] = kinds[rnd_int(0, 5)];
      g_p[1] = rnd_int(0, 1); /* include_self */
      int64_t rows = rnd_int(6, 9), cols = rnd_int(1, 9), n = rnd_int(1, 9);
      int64_t ucols = g_p[0] < 0 ? cols : rnd_int(1, cols);
      draw_spec(m, 2, specs[0]);
      draw_spec(m, 2, specs[2]);
      ins[0] = (input_t){2, {rows, cols, 0, 0}, specs[0], TT_F32};
      if (g_p[0] < 0) {
        draw_spec(m, 1, specs[1]);
        ins[1] = (input_t){1, {n, 0, 0, 0}, specs[1], TT_I64};
      } else {
        draw_spec(m, 2, specs[1]);
        ins[1] = (input_t){2, {n, ucols, 0, 0}, specs[1], TT_I64};
      }
      ins[2] = (input_t){2, {n, ucols, 0, 0}, specs[2], TT_F32};
      if (out_spec) draw_spec(m, 2, g_out_spec);
      return 3;
    }
    default: { /* one layout to another (devices maybe moved) */
      int32_t rank = (int32_t)rnd_int(1, 3);
      draw_spec(m, rank, specs[0]);
      draw_shape(&ins[0], rank, specs[0]);
      draw_spec(m, rank, g_out_spec);
      g_out_rot = (int32_t)rnd_int(0, 1) * (int32_t)rnd_int(1, m->n - 1);
      return 1;
    }
  }
}

int main(void) {
  CHECK_OK(tt_runtime_init(NDEV));
  float data[4] = {0};
  CHECK_OK(tt_buffer_from_host(0, data, sizeof(data), &g_buf));
  static const family_t fams[] = {
      {"elementwise", f_elementwise, 0},   {"transpose", f_transpose, 0},
      {"reshape", f_reshape, 0},           {"reduce", f_reduce, 1e-5},
      {"dot", f_dot, 1e-5},                {"softmax", f_softmax, 1e-5},
      {"slice/concat", f_slice_concat, 0}, {"index_select", f_index_select, 0},
      {"gather", f_gather, 0},             {"conv2d", f_conv, 1e-5},
      {"rng", f_rng, 0},                   {"scatter", f_scatter, 1e-5},
      {"relayout", f_relayout, 0},
  };
  const mesh_t *meshes[5] = {&M2, &M4, &M8, &M22, &M24};
  int nf = (int)(sizeof(fams) / sizeof(fams[0]));
  tt_partition_stats_t total = {0};
  for (int f = 0; f < nf; ++f)
    for (int mi = 0; mi < 5; ++mi)
      for (int k = 0; k < DRAWS; ++k) {
        input_t ins[3];
        char specs[3][32] = {{0}};
        int32_t nin = draw_case(f, meshes[mi], ins, specs);
        char name[160];
        snprintf(name, sizeof(name), "%s [%s | %s | %s -> %s rot %d]", fams[f].name,
                 specs[0][0] ? specs[0] : "rep", specs[1][0] ? specs[1] : "rep",
                 specs[2][0] ? specs[2] : "rep", g_out_spec[0] ? g_out_spec : "propagated",
                 (int)g_out_rot);
        int failed_before = g_failed;
        tt_partition_stats_t st;
        memset(&st, 0, sizeof(st));
        run_case(name, meshes[mi], nin, ins, fams[f].build, fams[f].tol, &st);
        if (g_failed != failed_before) printf("  (case %d of %s on %s)\n", k, name,
                                              meshes[mi]->name);
        total.all_gathers += st.all_gathers;
        total.all_reduces += st.all_reduces;
        total.reduce_scatters += st.reduce_scatters;
        total.all_to_alls += st.all_to_alls;
        total.collective_permutes += st.collective_permutes;
        /* a scatter whose updates are narrower than a dim the base tiles
         * is computed replicated, by design */
        if (fams[f].build != f_scatter) total.fallbacks += st.fallbacks;
      }
  /* The draws reach every collective the partitioner issues (a change
   * that stopped using one would show here). */
  CHECK(total.all_gathers > 0 && total.all_reduces > 0 && total.reduce_scatters > 0 &&
            total.all_to_alls > 0 && total.collective_permutes > 0,
        "collectives over the draws: %lld all_gather %lld all_reduce %lld reduce_scatter %lld "
        "all_to_all %lld collective_permute", (long long)total.all_gathers,
        (long long)total.all_reduces, (long long)total.reduce_scatters,
        (long long)total.all_to_alls, (long long)total.collective_permutes);
  CHECK(total.fallbacks == 0, "%lld fallbacks in families with partition rules",
        (long long)total.fallbacks);
  printf("%d random partitioned cases: %lld all_gather, %lld all_reduce, %lld reduce_scatter, "
         "%lld all_to_all, %lld collective_permute\n", g_cases, (long long)total.all_gathers,
         (long long)total.all_reduces, (long long)total.reduce_scatters,
         (long long)total.all_to_alls, (long long)total.collective_permutes);
  tt_runtime_wait(-1);
  tt_buffer_release(g_buf);
  return test_summary();
}
