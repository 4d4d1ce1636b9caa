/* Sharding annotations and collective ops in the IR: validation messages,
 * HloSharding text, the structural hash, StableHLO emission (argument and
 * result attributes, @Sharding custom calls, module attributes) and the
 * collectives' attribute checks, shapes and lowerings. */
#include <stdlib.h>
#include <string.h>

#include "test_harness.h"
#include "torchtpu/passes.h"
#include "torchtpu/stablehlo.h"

static tt_sharding_t *tiled(int32_t ndims, const int64_t *dims, int32_t ndev,
                            const int32_t *devs, int last) {
  tt_sharding_t *s = calloc(1, tt_sharding_size(ndev));
  s->kind = TT_SHARDING_TILED;
  s->num_tile_dims = ndims;
  for (int32_t d = 0; d < ndims; ++d) s->tile_dims[d] = dims[d];
  s->num_devices = ndev;
  for (int32_t i = 0; i < ndev; ++i) s->devices[i] = devs[i];
  s->last_tile_dim_replicate = last;
  return s;
}

static void check_error(tt_status_t st, tt_code_t code, const char *needle) {
  CHECK(st != NULL);
  if (!st) return;
  CHECK(tt_status_code(st) == code);
  if (!strstr(tt_status_message(st), needle)) {
    fprintf(stderr, "message \"%s\" lacks \"%s\"\n", tt_status_message(st), needle);
    CHECK(0);
  }
  tt_status_free(st);
}

static void test_text_and_validate(void) {
  tt_shape_t s2 = {2, {8, 6}};
  const int64_t d24[2] = {2, 4};
  const int32_t ids[8] = {0, 1, 2, 3, 4, 5, 6, 7};
  tt_sharding_t *s = tiled(2, d24, 8, ids, 0);
  CHECK_OK(tt_sharding_validate(s, &s2));
  char *text = tt_sharding_to_text(s);
  CHECK(text && strcmp(text, "{devices=[2,4]0,1,2,3,4,5,6,7}") == 0);
  free(text);
  /* Rank 1 tensor with partial replication: [2, 4] tile dims, last replicated. */
  tt_shape_t s1 = {1, {10}};
  s->last_tile_dim_replicate = 1;
  CHECK_OK(tt_sharding_validate(s, &s1));
  text = tt_sharding_to_text(s);
  CHECK(text && strcmp(text, "{devices=[2,4]0,1,2,3,4,5,6,7 last_tile_dim_replicate}") == 0);
  free(text);
  check_error(tt_sharding_validate(s, &s2), TT_INVALID_ARGUMENT,
              "2 tile dims for a tensor of rank 2 with last_tile_dim_replicate (want 3)");
  s->last_tile_dim_replicate = 0;
  s->devices[3] = 1;
  check_error(tt_sharding_validate(s, &s2), TT_INVALID_ARGUMENT, "device id 1 appears twice");
  s->devices[3] = 9;
  check_error(tt_sharding_validate(s, &s2), TT_INVALID_ARGUMENT,
              "device id 9 (entry 3) is outside [0, 8)");
  s->devices[3] = 3;
  s->tile_dims[1] = 2;
  check_error(tt_sharding_validate(s, &s2), TT_INVALID_ARGUMENT,
              "tile dims make 4 tiles but 8 devices are assigned");
  free(s);
  tt_sharding_t rep = {TT_SHARDING_REPLICATED, 0, {0}, 0, 8};
  text = tt_sharding_to_text(&rep);
  CHECK(text && strcmp(text, "{replicated}") == 0);
  free(text);
  tt_sharding_t man = {TT_SHARDING_MANUAL, 0, {0}, 0, 8};
  text = tt_sharding_to_text(&man);
  CHECK(text && strcmp(text, "{manual}") == 0);
  free(text);
  CHECK(tt_sharding_equal(&rep, &rep) && !tt_sharding_equal(&rep, &man) &&
        !tt_sharding_equal(&rep, NULL) && tt_sharding_equal(NULL, NULL));
}

/* x = broadcast(scalar) [4, 2]; y = x + x. */
static void make_nodes(tt_node_t **out_x, tt_node_t **out_y) {
  tt_node_t *c = tt_node_create_scalar(TT_F32, 1.5, 0, 0);
  int64_t dims[2] = {4, 2};
  CHECK_OK(tt_node_create(TT_OP_BROADCAST, 0, &c, 1, dims, 2, NULL, 0, out_x));
  tt_node_t *xx[2] = {*out_x, *out_x};
  int64_t add = TT_BIN_ADD;
  CHECK_OK(tt_node_create(TT_OP_BINARY, 0, xx, 2, &add, 1, NULL, 0, out_y));
  tt_node_release(c);
}

static void test_hash_and_emission(void) {
  tt_node_t *x, *y;
  make_nodes(&x, &y);
  tt_graph_t *g0 = NULL;
  CHECK_OK(tt_graph_build(&y, 1, &g0, NULL));
  const int64_t d21[2] = {2, 1};
  const int32_t ids[2] = {1, 0};
  tt_sharding_t *s = tiled(2, d21, 2, ids, 0);
  CHECK_OK(tt_node_set_sharding(x, s));
  tt_graph_t *g1 = NULL;
  CHECK_OK(tt_graph_build(&y, 1, &g1, NULL));
  /* The annotation enters the hash; the cut graph's instructions do not
   * carry it (its execution is unpartitioned). */
  CHECK(g0 && g1 && g0->hash != g1->hash);
  CHECK(g1 && g1->instrs[1].sharding == NULL);
  tt_graph_destroy(g0);
  tt_graph_destroy(g1);
  /* A sharding that does not fit leaves the node as it was. */
  s->tile_dims[1] = 2;
  check_error(tt_node_set_sharding(x, s), TT_INVALID_ARGUMENT, "tile dims make 4 tiles");
  CHECK(x->sharding && x->sharding->tile_dims[1] == 1);
  free(s);

  char *text = NULL;
  CHECK_OK(tt_stablehlo_emit(&y, 1, &text, NULL, NULL));
  const char *want =
      "module @\"torchtpu\" attributes {mhlo.num_partitions = 2 : i32, mhlo.num_replicas = 1 : "
      "i32} {\n"
      "  func.func @main(%arg0: tensor<f32> {mhlo.sharding = \"{replicated}\"}) -> "
      "(tensor<4x2xf32> {mhlo.sharding = \"{replicated}\"}) {\n"
      "    %0 = \"stablehlo.broadcast_in_dim\"(%arg0) {broadcast_dimensions = array<i64>} : "
      "(tensor<f32>) -> tensor<4x2xf32>\n"
      "    %1 = \"stablehlo.custom_call\"(%0) {call_target_name = \"Sharding\", mhlo.sharding = "
      "\"{devices=[2,1]1,0}\"} : (tensor<4x2xf32>) -> tensor<4x2xf32>\n"
      "    %2 = \"stablehlo.add\"(%1, %1) : (tensor<4x2xf32>, tensor<4x2xf32>) -> "
      "tensor<4x2xf32>\n"
      "    return %2 : tensor<4x2xf32>\n"
      "  }\n"
      "}\n";
  CHECK(text && strcmp(text, want) == 0);
  if (text && strcmp(text, want)) fprintf(stderr, "got:\n%s", text);
  free(text);
  /* Cleared: the plain module again. */
  CHECK_OK(tt_node_set_sharding(x, NULL));
  CHECK_OK(tt_stablehlo_emit(&y, 1, &text, NULL, NULL));
  CHECK(text && !strstr(text, "mhlo.") && strstr(text, "-> tensor<4x2xf32> {"));
  free(text);
  tt_node_release(y);
  tt_node_release(x);
}

static void test_collectives(void) {
  tt_node_t *x, *y;
  make_nodes(&x, &y);
  /* all_reduce sum over groups {0,1},{2,3} with a channel (id 3 in the IR;
   * the emitter numbers handles from 1). */
  int64_t ar[9] = {TT_RED_SUM, 0, 0, 3, 2, 0, 1, 2, 3};
  tt_node_t *r = NULL;
  CHECK_OK(tt_node_create(TT_OP_ALL_REDUCE, 0, &y, 1, ar, 9, NULL, 0, &r));
  CHECK(r && r->shape.rank == 2 && r->shape.dims[0] == 4 && r->shape.dims[1] == 2);
  char *text = NULL;
  CHECK_OK(tt_stablehlo_emit(&r, 1, &text, NULL, NULL));
  CHECK(text && strstr(text, "replica_groups = dense<[[0, 1], [2, 3]]> : tensor<2x2xi64>, "
                             "channel_handle = #stablehlo.channel_handle<handle = 1, type = 1>, "
                             "use_global_device_ids} : (tensor<4x2xf32>) -> tensor<4x2xf32>"));
  CHECK(text && strstr(text, "\"stablehlo.all_reduce\"(%1) ({"));
  /* Channel ids mark global device ids: no replica count. */
  CHECK(text && strstr(text, "module @\"torchtpu\" {"));
  free(text);
  tt_node_release(r);

  /* all_gather along dim 1 over one group of 4 replicas: [4, 8]. */
  int64_t ag[9] = {1, 4, 0, 0, 4, 0, 1, 2, 3};
  CHECK_OK(tt_node_create(TT_OP_ALL_GATHER, 0, &y, 1, ag, 9, NULL, 0, &r));
  CHECK(r && r->shape.dims[0] == 4 && r->shape.dims[1] == 8);
  CHECK_OK(tt_stablehlo_emit(&r, 1, &text, NULL, NULL));
  CHECK(text && strstr(text, "{all_gather_dim = 1 : i64, replica_groups = dense<[[0, 1, 2, 3]]> "
                             ": tensor<1x4xi64>} : (tensor<4x2xf32>) -> tensor<4x8xf32>"));
  CHECK(text && strstr(text, "attributes {mhlo.num_partitions = 1 : i32, mhlo.num_replicas = "
                             "4 : i32}"));
  free(text);
  tt_node_release(r);

  /* reduce_scatter max along dim 0 by 4: [1, 2]; all_to_all split 0 concat 1. */
  int64_t rs[9] = {TT_RED_MAX, 0, 4, 0, 4, 3, 2, 1, 0};
  CHECK_OK(tt_node_create(TT_OP_REDUCE_SCATTER, 0, &y, 1, rs, 9, NULL, 0, &r));
  CHECK(r && r->shape.dims[0] == 1 && r->shape.dims[1] == 2);
  CHECK_OK(tt_stablehlo_emit(&r, 1, &text, NULL, NULL));
  CHECK(text && strstr(text, "\"stablehlo.maximum\""));
  CHECK(text && strstr(text, "{scatter_dimension = 0 : i64, replica_groups = dense<[[3, 2, 1, "
                             "0]]> : tensor<1x4xi64>}"));
  free(text);
  tt_node_release(r);
  int64_t a2a[7] = {0, 1, 2, 0, 2, 0, 1};
  CHECK_OK(tt_node_create(TT_OP_ALL_TO_ALL, 0, &y, 1, a2a, 7, NULL, 0, &r));
  CHECK(r && r->shape.dims[0] == 2 && r->shape.dims[1] == 4);
  tt_node_release(r);
  /* collective_permute ring over 3; no groups: empty pairs. */
  int64_t cp[11] = {3, 0, 0, 0, 2, 0, 1, 1, 2, 2, 0};
  CHECK_OK(tt_node_create(TT_OP_COLLECTIVE_PERMUTE, 0, &y, 1, cp, 11, NULL, 0, &r));
  CHECK_OK(tt_stablehlo_emit(&r, 1, &text, NULL, NULL));
  CHECK(text && strstr(text, "{source_target_pairs = dense<[[0, 1], [1, 2], [2, 0]]> : "
                             "tensor<3x2xi64>}"));
  free(text);
  tt_node_release(r);

  /* Refusals name the values. */
  int64_t bad_groups[8] = {TT_RED_SUM, 0, 0, 0, 2, 0, 1, 2};
  check_error(tt_node_create(TT_OP_ALL_REDUCE, 0, &y, 1, bad_groups, 8, NULL, 0, &r),
              TT_INVALID_ARGUMENT, "3 replica ids do not make groups of 2");
  int64_t dup[9] = {TT_RED_SUM, 0, 0, 0, 2, 0, 1, 1, 2};
  check_error(tt_node_create(TT_OP_ALL_REDUCE, 0, &y, 1, dup, 9, NULL, 0, &r),
              TT_INVALID_ARGUMENT, "replica id 1 appears twice");
  int64_t count[9] = {0, 2, 0, 0, 4, 0, 1, 2, 3};
  check_error(tt_node_create(TT_OP_ALL_GATHER, 0, &y, 1, count, 9, NULL, 0, &r),
              TT_INVALID_ARGUMENT, "shard_count 2 does not match the replica group size 4");
  int64_t split[5] = {TT_RED_SUM, 1, 4, 0, 1};
  check_error(tt_node_create(TT_OP_REDUCE_SCATTER, 0, &y, 1, split, 5, NULL, 0, &r),
              TT_INVALID_ARGUMENT, "dim 1 of size 2 does not divide by shard_count 4");
  int64_t code[5] = {TT_RED_ARGMAX, 0, 0, 0, 1};
  check_error(tt_node_create(TT_OP_ALL_REDUCE, 0, &y, 1, code, 5, NULL, 0, &r),
              TT_INVALID_ARGUMENT, "unsupported reduce code");
  int64_t target[9] = {2, 0, 0, 0, 2, 0, 1, 2, 1};
  check_error(tt_node_create(TT_OP_COLLECTIVE_PERMUTE, 0, &y, 1, target, 9, NULL, 0, &r),
              TT_INVALID_ARGUMENT, "replica id 1 appears twice as a target");
  tt_node_release(y);
  tt_node_release(x);
}

/* The verifier checks a collective's attributes and shape between passes. */
static void test_verifier(void) {
  tt_node_t *x, *y, *r = NULL;
  make_nodes(&x, &y);
  int64_t ag[9] = {0, 4, 0, 0, 4, 0, 1, 2, 3};
  CHECK_OK(tt_node_create(TT_OP_ALL_GATHER, 0, &y, 1, ag, 9, NULL, 0, &r));
  tt_graph_t *g = NULL;
  CHECK_OK(tt_graph_build(&r, 1, &g, NULL));
  tt_work_t *w = NULL;
  if (g) CHECK_OK(tt_work_from_graph(g, &w));
  if (w) {
    int32_t k = w->num_instrs - 1;
    CHECK(w->instrs[k].op == TT_OP_ALL_GATHER);
    CHECK_OK(tt_verify_work(w, "test"));
    w->instrs[k].shape.dims[0] = 8; /* not 4 x 4 */
    check_error(tt_verify_work(w, "test"), TT_INTERNAL,
                "(all_gather) shape does not follow from its operand and attributes");
    w->instrs[k].shape.dims[0] = 16;
    w->instrs[k].iattrs[4] = 3; /* 4 ids in groups of 3 */
    check_error(tt_verify_work(w, "test"), TT_INTERNAL,
                "all_gather: 4 replica ids do not make groups of 3");
    tt_work_destroy(w);
  }
  tt_graph_destroy(g);
  tt_node_release(r);
  tt_node_release(y);
  tt_node_release(x);
}

/* Manual regions: x [4, 2] split in 2 along dim 0 -> shard [2, 2] -> back. */
static void test_manual(void) {
  tt_node_t *x, *y, *shard = NULL, *full = NULL;
  make_nodes(&x, &y);
  int64_t to_shard[7] = {2, 0, 2, 1, 2, 1, 0}; /* tiles [2, 1], devices 1, 0 */
  CHECK_OK(tt_node_create(TT_OP_SPMD_FULL_TO_SHARD, 0, &y, 1, to_shard, 7, NULL, 0, &shard));
  CHECK(shard && shard->shape.dims[0] == 2 && shard->shape.dims[1] == 2);
  int64_t to_full[9] = {2, 0, 2, 1, 2, 1, 0, 4, 2};
  if (shard)
    CHECK_OK(tt_node_create(TT_OP_SPMD_SHARD_TO_FULL, 0, &shard, 1, to_full, 9, NULL, 0, &full));
  CHECK(full && full->shape.dims[0] == 4 && full->shape.dims[1] == 2);
  char *text = NULL;
  if (full) CHECK_OK(tt_stablehlo_emit(&full, 1, &text, NULL, NULL));
  CHECK(text && strstr(text, "{call_target_name = \"SPMDFullToShardShape\", mhlo.sharding = "
                             "\"{manual}\"} : (tensor<4x2xf32>) -> tensor<2x2xf32>"));
  CHECK(text && strstr(text, "{call_target_name = \"SPMDShardToFullShape\", mhlo.sharding = "
                             "\"{devices=[2,1]1,0}\"} : (tensor<2x2xf32>) -> tensor<4x2xf32>"));
  CHECK(text && strstr(text, "mhlo.num_partitions = 2 : i32"));
  free(text);
  /* A full shape the shard does not come from; a missing full dim. */
  int64_t wrong[9] = {2, 0, 2, 1, 2, 1, 0, 6, 2};
  tt_node_t *bad = NULL;
  check_error(tt_node_create(TT_OP_SPMD_SHARD_TO_FULL, 0, &shard, 1, wrong, 9, NULL, 0, &bad),
              TT_INVALID_ARGUMENT, "dim 0 of the shard is 2, but a full dim of 6 over 2 tiles "
                                   "makes shards of 3");
  check_error(tt_node_create(TT_OP_SPMD_SHARD_TO_FULL, 0, &shard, 1, wrong, 8, NULL, 0, &bad),
              TT_INVALID_ARGUMENT, "1 full dims for a shard of rank 2");
  tt_node_release(full);
  tt_node_release(shard);
  tt_node_release(y);
  tt_node_release(x);
}

/* A manual region's targets on values that already carry the shardings:
 * no @Sharding call of the emitter's own (PyTorch/XLA's form), and a
 * one-tile tiling counts as the replication it is. */
static int count_of(const char *text, const char *needle) {
  int n = 0;
  for (const char *p = text; p && (p = strstr(p, needle)); p += strlen(needle)) ++n;
  return n;
}

static void test_manual_on_carried_shardings(void) {
  tt_node_t *x, *y, *shard = NULL;
  make_nodes(&x, &y);
  const int64_t d21[2] = {2, 1};
  const int32_t ids[2] = {1, 0};
  tt_sharding_t *t21 = tiled(2, d21, 2, ids, 0);
  CHECK_OK(tt_node_set_sharding(y, t21));
  free(t21);
  int64_t to_shard[7] = {2, 0, 2, 1, 2, 1, 0}; /* the same tiling */
  CHECK_OK(tt_node_create(TT_OP_SPMD_FULL_TO_SHARD, 0, &y, 1, to_shard, 7, NULL, 0, &shard));
  tt_sharding_t *manual = calloc(1, tt_sharding_size(0));
  manual->kind = TT_SHARDING_MANUAL;
  manual->num_devices = 2;
  if (shard) CHECK_OK(tt_node_set_sharding(shard, manual));
  free(manual);
  char *text = NULL;
  if (shard) CHECK_OK(tt_stablehlo_emit(&shard, 1, &text, NULL, NULL));
  /* y's annotation, then the target carrying {manual}: nothing else */
  CHECK(text && count_of(text, "call_target_name = \"Sharding\"") == 1);
  CHECK(text && count_of(text, "SPMDFullToShardShape") == 1);
  free(text);
  tt_node_release(shard);
  shard = NULL;
  /* one device: y replicated is the one-tile tiling the region names */
  tt_sharding_t *rep = calloc(1, tt_sharding_size(0));
  rep->kind = TT_SHARDING_REPLICATED;
  rep->num_devices = 1;
  CHECK_OK(tt_node_set_sharding(y, rep));
  free(rep);
  int64_t one[6] = {2, 0, 1, 1, 1, 0};
  CHECK_OK(tt_node_create(TT_OP_SPMD_FULL_TO_SHARD, 0, &y, 1, one, 6, NULL, 0, &shard));
  text = NULL;
  if (shard) CHECK_OK(tt_stablehlo_emit(&shard, 1, &text, NULL, NULL));
  CHECK(text && count_of(text, "call_target_name = \"Sharding\"") == 1);
  free(text);
  tt_node_release(shard);
  tt_node_release(y);
  tt_node_release(x);
}

int main(void) {
  test_manual();
  test_manual_on_carried_shardings();
  test_verifier();
  test_text_and_validate();
  test_hash_and_emission();
  test_collectives();
  return test_summary();
}
