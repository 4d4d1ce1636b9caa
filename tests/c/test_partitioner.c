/* The SPMD partitioner (tt_partition_program, include/torchtpu/partition.h):
 * differential tests. Each case builds a graph with annotated inputs,
 * propagates shardings, partitions it for every partition of a mesh, runs
 * each partition's program on its own CPU device of the engine (the
 * programs' collectives meet in the collective layer), and compares every
 * device's output shard with the unpartitioned graph's result (exact for
 * movement and elementwise ops, a tolerance for reductions and products).
 * Input shards are padded with NaN, so a reduction that read padding would
 * show it (the harness: partition_harness.h). Also the collectives each
 * program issues (Megatron's MLP: one all_reduce; data parallelism: none;
 * a sharded gradient: one reduce_scatter; rows -> columns: one
 * all_to_all; another device order: one collective_permute; a
 * vocabulary-parallel lookup: one all_reduce; a spatially tiled conv: one
 * collective_permute per side; a tiled rng: none; a scatter into a tiled
 * base: none), fallbacks, and
 * refusals. Meshes (2,), (4,), (8,), (2,2), (2,4). */
#include "partition_harness.h"

/* The output spec of the builders that annotate their result. */
static const char *g_spec_out;

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
  out[0] = annotate(dot(in[0], in[1]), g_spec_out ? g_spec_out : "-,0,-");
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

static int b_gather(tt_node_t **in, tt_node_t **out) {
  out[0] = mk(TT_OP_GATHER, OPS(in[0], in[1]), IA(0));
  return 1;
}
static int b_embedding_mlp(tt_node_t **in, tt_node_t **out) {
  /* a vocabulary-parallel lookup feeding a data-parallel layer */
  tt_node_t *e = mk(TT_OP_INDEX_SELECT, OPS(in[0], in[1]), IA(0));
  e = mk(TT_OP_RESHAPE, OPS(e), IA(1, 8, 4));
  out[0] = unary(TT_UN_TANH, mk(TT_OP_DOT, OPS(e, in[2]), IA(0, 0)));
  return 1;
}
static int b_grad_sum(tt_node_t **in, tt_node_t **out) {
  /* FSDP: the batch sum of per-example gradients, wanted sharded over the
   * devices that hold the batch */
  out[0] = annotate(reduce(TT_RED_SUM, in[0], 1), g_spec_out);
  return 1;
}
static int b_grad_sum_rot(tt_node_t **in, tt_node_t **out) {
  /* as b_grad_sum, the result's tiles on devices moved by one */
  out[0] = annotate_rot(reduce(TT_RED_SUM, in[0], 1), g_spec_out, 1);
  return 1;
}
/* conv2d with the attributes in g_conv: stride, padding, dilation (one
 * each, both spatial dims) */
static int64_t g_conv[3] = {1, 1, 1};
static int b_conv(tt_node_t **in, tt_node_t **out) {
  out[0] = mk(TT_OP_CONV2D, OPS(in[0], in[1]),
              IA(g_conv[0], g_conv[0], g_conv[1], g_conv[1], g_conv[2], g_conv[2], 1));
  return 1;
}
/* rng (g_rng: op, dtype, a, b) of shape g_rng_dims, annotated g_spec_out,
 * seeded by input 0; as F32 */
static double g_rng[4];
static int64_t g_rng_dims[3] = {7, 9, 5};
static int b_rng(tt_node_t **in, tt_node_t **out) {
  tt_node_t *r = NULL;
  int64_t ia[5] = {(int64_t)g_rng[0], (int64_t)g_rng[1], g_rng_dims[0], g_rng_dims[1],
                   g_rng_dims[2]};
  double fa[2] = {g_rng[2], g_rng[3]};
  CHECK_OK(tt_node_create(TT_OP_RNG, 0, &in[0], 1, ia, 5, fa, 2, &r), "rng");
  keep(r);
  annotate(r, g_spec_out);
  out[0] = (tt_dtype_t)g_rng[1] == TT_F32 ? r : mk(TT_OP_CONVERT, OPS(r), IA(TT_F32));
  return 1;
}
static int b_weight_grad(tt_node_t **in, tt_node_t **out) {
  /* x^T g over a batch sharded on every device, the gradient wanted
   * sharded by its rows (FSDP's reduce-scatter) */
  out[0] = annotate(mk(TT_OP_DOT, OPS(in[0], in[1]), IA(1, 0)), g_spec_out);
  return 1;
}
static int b_mean_grad(tt_node_t **in, tt_node_t **out) {
  out[0] = annotate(reduce(TT_RED_MEAN, in[0], 1), g_spec_out);
  out[1] = annotate(reduce(TT_RED_MAX, in[0], 1), g_spec_out);
  return 2;
}
static int b_relayout(tt_node_t **in, tt_node_t **out) {
  /* the input's layout moved to the spec g_spec_out (exp: computed on
   * the input's tiles, then resharded) */
  out[0] = annotate(unary(TT_UN_EXP, in[0]), g_spec_out);
  return 1;
}
static int b_rotate(tt_node_t **in, tt_node_t **out) {
  /* the same tiles on devices moved by one */
  out[0] = annotate_rot(unary(TT_UN_NEG, in[0]), g_spec_out, 1);
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
   * that hold K (sequence parallelism): rows and K cannot share those
   * devices, so the partial sums reduce_scatter into the row tiles: one
   * reduce_scatter, nothing else (6 rows over 4 and 8: uneven, padded). */
  input_t rs[2] = {I(3, 1, 6, 5, "-,-,0"), I(3, 1, 5, 3, "-,0,-")};
  const mesh_t *rs_meshes[3] = {&M2, &M4, &M8};
  for (int mi = 0; mi < 3; ++mi) {
    run_case("dot reduce-scatter", rs_meshes[mi], 2, rs, b_dot_rows_out, 1e-5, &st);
    CHECK(st.reduce_scatters == 1 && st.all_reduces == 0 && st.all_gathers == 0 &&
              st.all_to_alls == 0 && st.collective_permutes == 0,
          "row-parallel into rows %s: %lld reduce_scatters %lld all_reduces %lld gathers",
          rs_meshes[mi]->name, (long long)st.reduce_scatters, (long long)st.all_reduces,
          (long long)st.all_gathers);
  }
  /* A user's output layout that differs from its operand's: rows ->
   * columns over the same devices is one all_to_all. */
  input_t x[1] = {I(2, 6, 5, 0, "0,-")};
  const mesh_t *ro_meshes[3] = {&M2, &M4, &M8};
  for (int mi = 0; mi < 3; ++mi) {
    run_case("resharded output", ro_meshes[mi], 1, x, b_reshard_output, 0, &st);
    CHECK(st.all_to_alls == 1 && st.all_gathers == 0 && st.all_reduces == 0,
          "resharded output %s: %lld all_to_alls %lld gathers", ro_meshes[mi]->name,
          (long long)st.all_to_alls, (long long)st.all_gathers);
  }
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

static void test_reduce_scatter(void) {
  tt_partition_stats_t st;
  /* The batch sum of a batch-sharded tensor wanted sharded over the same
   * devices: one reduce_scatter, no all_reduce, no gather (9 columns: uneven
   * over 2, 4 and 8). */
  struct { const mesh_t *m; const char *in, *out; } sum_cases[] = {
      {&M2, "0,-", "0"}, {&M4, "0,-", "0"}, {&M8, "0,-", "0"}, {&M22, "01,-", "01"},
      {&M24, "01,-", "01"}, {&M24, "1,-", "1"}, {&M22, "0,1", "0"}};
  for (size_t c = 0; c < sizeof(sum_cases) / sizeof(sum_cases[0]); ++c) {
    input_t x[1] = {I(2, 8, 9, 0, sum_cases[c].in)};
    g_spec_out = sum_cases[c].out;
    run_case("grad sum", sum_cases[c].m, 1, x, b_grad_sum, 1e-5, &st);
    int want_gathers = c == 6; /* columns over axis 1 first gathered */
    CHECK(st.reduce_scatters == 1 && st.all_reduces == 0 && st.all_gathers == want_gathers &&
              st.all_to_alls == 0 && st.collective_permutes == 0,
          "grad sum %s %s -> %s: %lld reduce_scatters %lld all_reduces %lld gathers",
          sum_cases[c].m->name, sum_cases[c].in, sum_cases[c].out, (long long)st.reduce_scatters,
          (long long)st.all_reduces, (long long)st.all_gathers);
    run_case("mean/max grad", sum_cases[c].m, 1, x, b_mean_grad, 1e-5, &st);
    CHECK(st.reduce_scatters == 2 && st.all_reduces == 0, "mean/max %s: %lld reduce_scatters",
          sum_cases[c].m->name, (long long)st.reduce_scatters);
  }
  /* The result's tiles in another device order than the batch's: the
   * reduce_scatter's groups list the devices in the result's tile order
   * (still one collective). */
  const mesh_t *rot_meshes[3] = {&M4, &M8, &M24};
  for (int mi = 0; mi < 3; ++mi) {
    input_t x[1] = {I(2, 8, 9, 0, rot_meshes[mi]->rank == 1 ? "0,-" : "01,-")};
    g_spec_out = rot_meshes[mi]->rank == 1 ? "0" : "01";
    run_case("grad sum rotated", rot_meshes[mi], 1, x, b_grad_sum_rot, 1e-5, &st);
    CHECK(st.reduce_scatters == 1 && st.all_reduces == 0 && st.collective_permutes == 0 &&
              st.all_gathers == 0,
          "grad sum rotated %s: %lld reduce_scatters %lld permutes", rot_meshes[mi]->name,
          (long long)st.reduce_scatters, (long long)st.collective_permutes);
  }
  /* The weight gradient x^T g, batch over every device, wanted in row
   * tiles (FSDP): exactly one reduce_scatter per gradient. */
  const mesh_t *meshes[5] = {&M2, &M4, &M8, &M22, &M24};
  for (int mi = 0; mi < 5; ++mi) {
    const char *b = meshes[mi]->rank == 1 ? "-,0,-" : "-,01,-";
    input_t xg[2] = {I(3, 1, 8, 5, b), I(3, 1, 8, 3, b)};
    g_spec_out = b;
    run_case("weight grad", meshes[mi], 2, xg, b_weight_grad, 1e-5, &st);
    CHECK(st.reduce_scatters == 1 && st.all_reduces == 0 && st.all_gathers == 0 &&
              st.all_to_alls == 0 && st.collective_permutes == 0,
          "weight grad %s: %lld reduce_scatters %lld all_reduces %lld gathers", meshes[mi]->name,
          (long long)st.reduce_scatters, (long long)st.all_reduces, (long long)st.all_gathers);
  }
  /* Row-parallel on (2,4): K over the 4, rows wanted over the 4 too (data
   * axis replicated): one reduce_scatter in groups of 4. */
  input_t rs[2] = {I(3, 1, 6, 5, "-,-,1"), I(3, 1, 5, 3, "-,1,-")};
  g_spec_out = "-,1,-";
  run_case("dot reduce-scatter", &M24, 2, rs, b_dot_rows_out, 1e-5, &st);
  g_spec_out = NULL;
  CHECK(st.reduce_scatters == 1 && st.all_reduces == 0 && st.all_gathers == 0,
        "(2,4) row-parallel into rows: %lld reduce_scatters %lld all_reduces %lld gathers",
        (long long)st.reduce_scatters, (long long)st.all_reduces, (long long)st.all_gathers);
}

static void test_all_to_all_and_permute(void) {
  tt_partition_stats_t st;
  /* One dim's tiling moved onto another over the same devices: one
   * all_to_all (uneven: 7 rows, 5 columns). */
  struct { const mesh_t *m; const char *in, *out; int a2a, perm; } cases[] = {
      {&M2, "0,-", "-,0", 1, 0},   {&M4, "0,-", "-,0", 1, 0},  {&M8, "0,-", "-,0", 1, 0},
      {&M8, "-,0", "0,-", 1, 0},   {&M22, "0,1", "1,0", 0, 1}, {&M22, "01,-", "-,01", 1, 0},
      {&M24, "01,-", "-,01", 1, 0}, {&M24, "0,-", "-,0", 1, 0}, {&M24, "1,-", "-,1", 1, 0},
      {&M24, "0,1", "1,-", 1, 0}, /* rows gathered first, then columns -> rows */
  };
  for (size_t c = 0; c < sizeof(cases) / sizeof(cases[0]); ++c) {
    input_t x[1] = {I(2, 7, 5, 0, cases[c].in)};
    g_spec_out = cases[c].out;
    run_case("relayout", cases[c].m, 1, x, b_relayout, 0, &st);
    CHECK(st.all_to_alls == cases[c].a2a && st.collective_permutes == cases[c].perm &&
              st.all_reduces == 0 && st.reduce_scatters == 0,
          "relayout %s %s -> %s: %lld all_to_alls %lld permutes %lld gathers",
          cases[c].m->name, cases[c].in, cases[c].out, (long long)st.all_to_alls,
          (long long)st.collective_permutes, (long long)st.all_gathers);
  }
  /* The same tiles on devices moved by one: one collective_permute. */
  struct { const mesh_t *m; const char *spec; } rot[] = {
      {&M2, "0,-"}, {&M4, "0,-"}, {&M8, "-,0"}, {&M22, "0,1"}, {&M24, "1,0"}, {&M24, "0,-"}};
  for (size_t c = 0; c < sizeof(rot) / sizeof(rot[0]); ++c) {
    input_t x[1] = {I(2, 7, 9, 0, rot[c].spec)};
    g_spec_out = rot[c].spec;
    run_case("rotated devices", rot[c].m, 1, x, b_rotate, 0, &st);
    CHECK(st.collective_permutes == 1 && st.all_gathers == 0 && st.all_to_alls == 0,
          "rotated %s %s: %lld permutes %lld gathers", rot[c].m->name, rot[c].spec,
          (long long)st.collective_permutes, (long long)st.all_gathers);
  }
}

static void test_lookup(void) {
  tt_partition_stats_t st;
  /* Vocabulary-parallel: the table's rows over the devices; each looks up
   * the indices in its rows (others 0), one all_reduce, no gather of the
   * table (6 rows over 4 and 8: uneven, tiles wholly padding). */
  struct { const mesh_t *m; const char *table, *idx; } cases[] = {
      {&M2, "0,-", NULL}, {&M4, "0,-", NULL}, {&M8, "0,-", NULL}, {&M22, "01,-", NULL},
      {&M24, "1,-", "0"}, {&M24, "01,-", NULL}, {&M22, "0,1", NULL}};
  for (size_t c = 0; c < sizeof(cases) / sizeof(cases[0]); ++c) {
    input_t in[2] = {I(2, 6, 5, 0, cases[c].table), {1, {8, 0, 0}, cases[c].idx, TT_I64}};
    run_case("index_select", cases[c].m, 2, in, b_index_select, 0, &st);
    CHECK(st.all_reduces == 1 && st.all_gathers == 0 && st.fallbacks == 0,
          "vocab-parallel index_select %s %s: %lld all_reduces %lld gathers %lld fallbacks",
          cases[c].m->name, cases[c].table, (long long)st.all_reduces, (long long)st.all_gathers,
          (long long)st.fallbacks);
    input_t gi[2] = {I(2, 6, 5, 0, cases[c].table), {2, {3, 5, 0}, NULL, TT_I64}};
    run_case("gather", cases[c].m, 2, gi, b_gather, 0, &st);
    CHECK(st.all_reduces == 1 && st.all_gathers == 0 && st.fallbacks == 0,
          "vocab-parallel gather %s %s: %lld all_reduces %lld gathers", cases[c].m->name,
          cases[c].table, (long long)st.all_reduces, (long long)st.all_gathers);
  }
  /* An unsharded table: the lookup is local (tokens sharded). */
  input_t tok[2] = {I(2, 6, 5, 0, NULL), {1, {8, 0, 0}, "0", TT_I64}};
  run_case("index_select tokens", &M4, 2, tok, b_index_select, 0, &st);
  CHECK(st.all_reduces + st.all_gathers + st.fallbacks == 0, "token-sharded lookup: %lld",
        (long long)(st.all_reduces + st.all_gathers + st.fallbacks));
  /* An embedding table over axis 1, tokens over axis 0, then a layer. */
  input_t emb[3] = {I(2, 7, 4, 0, "1,-"), {1, {8, 0, 0}, "0", TT_I64}, I(3, 1, 4, 3, NULL)};
  run_case("embedding + layer", &M24, 3, emb, b_embedding_mlp, 1e-5, &st);
  CHECK(st.all_reduces == 1 && st.all_gathers == 0, "embedding (2,4): %lld reduces %lld gathers",
        (long long)st.all_reduces, (long long)st.all_gathers);
}

static void test_conv(void) {
  tt_partition_stats_t st;
  /* Batch-sharded and output-channel-sharded: local, no collective. */
  const mesh_t *meshes[5] = {&M2, &M4, &M8, &M22, &M24};
  for (int mi = 0; mi < 5; ++mi) {
    const char *one = meshes[mi]->rank == 1 ? "0,-,-,-" : "01,-,-,-";
    input_t bat[2] = {{4, {8, 2, 5, 4}, one, F}, {4, {3, 2, 3, 3}, NULL, F}};
    g_conv[0] = 1, g_conv[1] = 1, g_conv[2] = 1;
    run_case("conv batch", meshes[mi], 2, bat, b_conv, 1e-5, &st);
    CHECK(st.all_gathers + st.all_reduces + st.collective_permutes + st.fallbacks == 0,
          "conv batch %s: %lld gathers %lld permutes", meshes[mi]->name,
          (long long)st.all_gathers, (long long)st.collective_permutes);
    input_t och[2] = {{4, {2, 2, 5, 4}, NULL, F}, {4, {8, 2, 3, 3}, one, F}};
    run_case("conv output channels", meshes[mi], 2, och, b_conv, 1e-5, &st);
    CHECK(st.all_gathers + st.all_reduces + st.collective_permutes + st.fallbacks == 0,
          "conv output channels %s: %lld gathers", meshes[mi]->name, (long long)st.all_gathers);
    /* input channels: partial sums, one all_reduce (6 channels: uneven) */
    const char *ic = meshes[mi]->rank == 1 ? "-,0,-,-" : "-,01,-,-";
    input_t ich[2] = {{4, {2, 6, 4, 4}, ic, F}, {4, {3, 6, 3, 3}, ic, F}};
    run_case("conv input channels", meshes[mi], 2, ich, b_conv, 1e-5, &st);
    CHECK(st.all_reduces == 1 && st.all_gathers == 0 && st.fallbacks == 0,
          "conv input channels %s: %lld reduces %lld gathers", meshes[mi]->name,
          (long long)st.all_reduces, (long long)st.all_gathers);
  }
  /* A spatial dim tiled: halo rows from the neighbours (one
   * collective_permute per side), local conv; no gather. Uneven rows,
   * wider kernels, dilation. */
  struct { const mesh_t *m; const char *spec; int64_t h, w, k, pad, dil; int perms; } sp[] = {
      {&M2, "-,-,0,-", 7, 5, 3, 1, 1, 2},  {&M4, "-,-,0,-", 7, 5, 3, 1, 1, 2},
      {&M8, "-,-,0,-", 9, 4, 3, 1, 1, 2},  {&M4, "-,-,-,0", 5, 9, 5, 2, 1, 2},
      {&M2, "-,-,0,-", 8, 3, 3, 2, 2, 2},  {&M22, "-,-,0,1", 7, 6, 3, 1, 1, 4},
      {&M24, "-,-,1,0", 9, 5, 3, 1, 1, 4}, {&M24, "0,-,1,-", 8, 4, 3, 1, 1, 2},
      {&M4, "-,-,0,-", 8, 4, 1, 0, 1, 0},
  };
  for (size_t c = 0; c < sizeof(sp) / sizeof(sp[0]); ++c) {
    input_t in[2] = {{4, {2, 2, sp[c].h, sp[c].w}, sp[c].spec, F},
                     {4, {3, 2, sp[c].k, sp[c].k}, NULL, F}};
    g_conv[0] = 1, g_conv[1] = sp[c].pad, g_conv[2] = sp[c].dil;
    run_case("conv spatial", sp[c].m, 2, in, b_conv, 1e-5, &st);
    CHECK(st.collective_permutes == sp[c].perms && st.all_gathers == 0 && st.all_reduces == 0 &&
              st.fallbacks == 0,
          "conv spatial %s %s k%lld: %lld permutes %lld gathers", sp[c].m->name, sp[c].spec,
          (long long)sp[c].k, (long long)st.collective_permutes, (long long)st.all_gathers);
  }
  /* A window reaching past the neighbouring tile (5 rows, pad 2, tiles of
   * one row) or a stride: the dim is gathered, still exact. */
  input_t far[2] = {{4, {1, 2, 7, 4}, "-,-,0,-", F}, {4, {2, 2, 5, 5}, NULL, F}};
  g_conv[0] = 1, g_conv[1] = 2, g_conv[2] = 1;
  run_case("conv wide window", &M8, 2, far, b_conv, 1e-5, &st);
  CHECK(st.collective_permutes == 0 && st.all_gathers == 1, "conv wide window: %lld gathers",
        (long long)st.all_gathers);
  g_conv[0] = 2, g_conv[1] = 1, g_conv[2] = 1;
  input_t strided[2] = {{4, {1, 2, 8, 4}, "-,-,0,-", F}, {4, {2, 2, 3, 3}, NULL, F}};
  run_case("conv strided", &M4, 2, strided, b_conv, 1e-5, &st);
  CHECK(st.collective_permutes == 0, "conv strided: %lld permutes",
        (long long)st.collective_permutes);
  g_conv[0] = 1, g_conv[1] = 1, g_conv[2] = 1;
}

static void test_rng(void) {
  /* Each partition draws its own tile at its offsets: every device's
   * shard equals the unsharded tensor's slice bit for bit (tolerance 0),
   * with no collective and no fallback; 7 x 9 x 5 over 2, 4 and 8 ways
   * (uneven: tiles wholly padding). */
  tt_partition_stats_t st;
  struct { const mesh_t *m; const char *spec; } cases[] = {
      {&M2, "0,-,-"}, {&M4, "-,0,-"}, {&M8, "-,-,0"}, {&M8, "0,-,-"},
      {&M22, "0,1,-"}, {&M22, "-,10,-"}, {&M24, "1,-,0"}, {&M24, "01,-,-"}};
  static const double draws[4][4] = {{TT_RNG_UNIFORM, TT_F32, -2.0, 3.0},
                                     {TT_RNG_NORMAL, TT_F32, 0.5, 2.0},
                                     {TT_RNG_BERNOULLI, TT_F32, 0.3, 0.0},
                                     {TT_RNG_NORMAL, TT_F64, 0.0, 1.0}};
  input_t seed[1] = {{0, {0, 0, 0, 0}, NULL, TT_I64}};
  for (size_t c = 0; c < sizeof(cases) / sizeof(cases[0]); ++c)
    for (int k = 0; k < 4; ++k) {
      memcpy(g_rng, draws[k], sizeof(g_rng));
      g_spec_out = cases[c].spec;
      run_case("rng tile", cases[c].m, 1, seed, b_rng, 0, &st);
      CHECK(st.fallbacks == 0 && st.all_gathers == 0 && st.collective_permutes == 0 &&
                st.all_reduces == 0,
            "rng tile %s %s: %lld fallbacks %lld gathers", cases[c].m->name, cases[c].spec,
            (long long)st.fallbacks, (long long)st.all_gathers);
    }
  g_spec_out = NULL;
  /* The tiled form's attributes are checked: 3 * rank values, whole dims
   * and offsets not negative. */
  tt_shape_t s0 = {0, {0}};
  tt_node_t *sd = tt_node_create_param(g_buf, TT_I64, &s0, 0), *r = NULL;
  double fa[3] = {0.0, 1.0, 1.0};
  tt_status_t err = tt_node_create(TT_OP_RNG, 0, &sd, 1, (int64_t[]){0, TT_F32, 2, 4, 6, 0}, 6,
                                   fa, 3, &r);
  CHECK(err && tt_status_code(err) == TT_INVALID_ARGUMENT, "rng tile of 4 dims values: %s",
        err ? tt_status_message(err) : "ok");
  tt_status_free(err);
  err = tt_node_create(TT_OP_RNG, 0, &sd, 1, (int64_t[]){0, TT_F32, 2, 4, -1}, 5, fa, 3, &r);
  CHECK(err && strstr(tt_status_message(err), "offset -1"), "rng tile offset -1: %s",
        err ? tt_status_message(err) : "ok");
  tt_status_free(err);
  CHECK(r == NULL, "no node on refusal");
  tt_node_release(sd);
}

static int b_searchsorted(tt_node_t **in, tt_node_t **out) {
  tt_node_t *r = mk(TT_OP_SEARCHSORTED, OPS(in[0], in[1]), IA(0, TT_I64));
  out[0] = mk(TT_OP_CONVERT, OPS(r), IA(TT_F32));
  return 1;
}
static void test_fallback(void) {
  /* searchsorted has no partition rule: the sharded values are gathered
   * and the search computed replicated; counted. */
  tt_partition_stats_t st;
  input_t in[2] = {I(1, 8, 0, 0, NULL), I(2, 6, 5, 0, "0,-")};
  run_case("searchsorted", &M4, 2, in, b_searchsorted, 0, &st);
  CHECK(st.fallbacks == 1 && st.all_gathers == 1, "fallback: %lld fallbacks %lld gathers",
        (long long)st.fallbacks, (long long)st.all_gathers);
}

/* scatter (g_scatter: 0 replace, 1 add), scatter_reduce (g_scatter 2 +
 * reduce kind, include_self 1) or index_add (g_scatter -1) along dim 0 */
static int64_t g_scatter;
static int b_scatter_family(tt_node_t **in, tt_node_t **out) {
  if (g_scatter < 0)
    out[0] = mk(TT_OP_INDEX_ADD, OPS(in[0], in[1], in[2]), IA(0));
  else if (g_scatter < 2)
    out[0] = mk(TT_OP_SCATTER, OPS(in[0], in[1], in[2]), IA(0, g_scatter));
  else
    out[0] = mk(TT_OP_SCATTER_REDUCE, OPS(in[0], in[1], in[2]), IA(0, g_scatter - 2, 1));
  return 1;
}

static void test_scatter(void) {
  /* The base tiled along the scatter's dim (or beside it): each partition
   * applies the updates that land in its rows (the others go to an extra
   * row, cut off); no gather of the base, no fallback. Duplicate indices
   * (indices 0..5 over 6 or 7 rows). */
  tt_partition_stats_t st;
  struct { const mesh_t *m; const char *base, *upd; } cases[] = {
      {&M2, "0,-", NULL},  {&M4, "0,-", NULL},   {&M8, "0,-", NULL}, {&M4, "-,0", "-,0"},
      {&M22, "0,1", "-,1"}, {&M24, "01,-", NULL}, {&M24, "1,0", "-,0"}};
  static const int64_t kinds[] = {0, 1, 2 + TT_SCATTER_REDUCE_SUM, 2 + TT_SCATTER_REDUCE_AMAX,
                                  2 + TT_SCATTER_REDUCE_MEAN, -1};
  for (size_t c = 0; c < sizeof(cases) / sizeof(cases[0]); ++c)
    for (size_t k = 0; k < sizeof(kinds) / sizeof(kinds[0]); ++k) {
      g_scatter = kinds[k];
      input_t in[3] = {I(2, 7, 4, 0, cases[c].base),
                       {2, {5, 4, 0, 0}, cases[c].upd, TT_I64},
                       I(2, 5, 4, 0, cases[c].upd)};
      if (g_scatter < 0) in[1] = (input_t){1, {5, 0, 0, 0}, NULL, TT_I64};
      run_case("scatter", cases[c].m, 3, in, b_scatter_family, 1e-6, &st);
      CHECK(st.fallbacks == 0 && st.all_gathers == 0 && st.all_reduces == 0,
            "scatter kind %lld %s %s: %lld fallbacks %lld gathers", (long long)g_scatter,
            cases[c].m->name, cases[c].base, (long long)st.fallbacks, (long long)st.all_gathers);
    }
  /* Updates narrower than the base along a tiled dim: they would reach
   * past the tile: computed replicated. */
  g_scatter = 1;
  input_t narrow[3] = {I(2, 7, 4, 0, "-,0"), {2, {5, 3, 0, 0}, NULL, TT_I64},
                       I(2, 5, 3, 0, NULL)};
  run_case("scatter narrow", &M4, 3, narrow, b_scatter_family, 1e-6, &st);
  CHECK(st.fallbacks == 1, "scatter with narrower updates: %lld fallbacks",
        (long long)st.fallbacks);
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
  test_reduce_scatter();
  test_all_to_all_and_permute();
  test_lookup();
  test_conv();
  test_rng();
  test_scatter();
  test_fallback();
  test_refusals();
  tt_runtime_wait(-1);
  tt_buffer_release(g_buf);
  printf("%d partitioned cases\n", g_cases);
  return test_summary();
}
