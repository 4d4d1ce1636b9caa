/* Partitioned SPMD execution of graph cuts (torchtpu/spmd_exec.h,
 * docs/spmd.md "Partitioned execution"), on 4 engine devices: data
 * annotated tiled is held as one shard per device (shard contents, padding
 * and each device's bytes), a cut of an annotated graph runs one program
 * per device (values against a host reference, tiled results held as
 * shards, the compile counted once per graph), shards written from the
 * host, a graph the partitioner refuses running whole from assembled
 * shards, and the same graph with partitioning off running as before. */
#include <stdlib.h>
#include <string.h>

#include "test_harness.h"
#include "torchtpu/spmd_exec.h"
#include "torchtpu/torchtpu.h"

#define NDEV 4
#define R 6 /* rows: 4 tiles of 2, the last one all padding */
#define K 5
#define N 3

/* Rows (dim 1) of a [1, rows, cols] tensor over the 4 devices (the IR's
 * dot is batched: rank 3). */
static tt_sharding_t *rows4(void) {
  tt_sharding_t *s = calloc(1, tt_sharding_size(NDEV));
  s->kind = TT_SHARDING_TILED;
  s->num_tile_dims = 3;
  s->tile_dims[0] = 1;
  s->tile_dims[1] = NDEV;
  s->tile_dims[2] = 1;
  s->num_devices = NDEV;
  for (int32_t i = 0; i < NDEV; ++i) s->devices[i] = i;
  return s;
}

static tt_tensor_t *op2(tt_op_t op, tt_tensor_t *a, tt_tensor_t *b, const int64_t *ia, int32_t ni) {
  tt_tensor_t *ops[2] = {a, b}, *out = NULL;
  CHECK_OK(tt_tensor_op(op, 0, ops, b ? 2 : 1, ia, ni, NULL, 0, &out), tt_op_name(op));
  return out;
}

static int64_t bytes_on(int32_t d) {
  int64_t used, peak;
  tt_runtime_wait(-1);
  tt_runtime_memory_stats(d, &used, &peak);
  return used;
}

int main(void) {
  CHECK_OK(tt_runtime_init(NDEV));
  float a_host[R * K], b_host[K * N], want[R * N];
  for (int i = 0; i < R * K; ++i) a_host[i] = (float)((i * 7) % 11) - 5.0f;
  for (int i = 0; i < K * N; ++i) b_host[i] = (float)((i * 5) % 7) * 0.5f - 1.0f;
  for (int r = 0; r < R; ++r)
    for (int n = 0; n < N; ++n) {
      float acc = 0;
      for (int k = 0; k < K; ++k) acc += a_host[r * K + k] * b_host[k * N + n];
      want[r * N + n] = acc;
    }
  tt_shape_t sa = {3, {1, R, K}}, sb = {3, {1, K, N}};
  tt_sharding_t *rows = rows4();

  /* ---- data annotated tiled becomes shards ---- */
  tt_lazy_set_spmd_partitioning(1);
  CHECK(tt_lazy_spmd_partitioning() == 1);
  int64_t before[NDEV];
  for (int d = 0; d < NDEV; ++d) before[d] = bytes_on(d);
  tt_tensor_t *a = NULL, *b = NULL;
  CHECK_OK(tt_tensor_from_host(0, TT_F32, &sa, a_host, &a));
  CHECK_OK(tt_tensor_from_host(0, TT_F32, &sb, b_host, &b));
  CHECK_OK(tt_tensor_set_sharding(a, rows));
  tt_sharding_t *layout = NULL;
  CHECK_OK(tt_tensor_storage_layout(a, &layout));
  CHECK(layout && tt_sharding_equal(layout, rows), "a is held as row shards");
  free(layout);
  /* Device 0 holds its shard of a and all of b; the others a shard each. */
  int64_t shard_bytes = 2 * K * 4;
  CHECK(bytes_on(0) - before[0] == shard_bytes + K * N * 4, "device 0: %lld bytes",
        (long long)(bytes_on(0) - before[0]));
  for (int d = 1; d < NDEV; ++d)
    CHECK(bytes_on(d) - before[d] == shard_bytes, "device %d: %lld bytes", d,
          (long long)(bytes_on(d) - before[d]));
  for (int p = 0; p < NDEV; ++p) {
    float shard[2 * K];
    CHECK_OK(tt_tensor_shard_to_host(a, p, shard, sizeof(shard)));
    int bad = 0;
    for (int i = 0; i < 2 * K; ++i) {
      int row = 2 * p + i / K;
      float expect = row < R ? a_host[row * K + i % K] : 0.0f; /* padding reads 0 */
      bad += shard[i] != expect;
    }
    CHECK(bad == 0, "shard %d: %d elements differ", p, bad);
  }
  float back[R * K];
  CHECK_OK(tt_tensor_to_host(a, back, sizeof(back)));
  CHECK(!memcmp(back, a_host, sizeof(back)), "a assembled from its shards");
  CHECK_CODE(tt_tensor_shard_to_host(b, 0, back, 4), TT_INVALID_ARGUMENT, "b holds no shards");
  CHECK_OK(tt_tensor_result_layout(b, &layout));
  CHECK(!layout, "uploaded data reports no layout");

  /* ---- an annotated graph runs partitioned; compiled once ---- */
  int64_t unc = tt_counter_value("UncachedCompile"), part = tt_counter_value("SpmdPartitionedExecution");
  int64_t ar = tt_counter_value("SpmdAllReduce"), ag = tt_counter_value("SpmdAllGather");
  for (int step = 0; step < 2; ++step) {
    int64_t dot_attrs[2] = {0, 0}, sum_attrs[4] = {TT_RED_SUM, 7, 0, TT_F32};
    tt_tensor_t *c = op2(TT_OP_DOT, a, b, dot_attrs, 2);
    tt_tensor_t *s = op2(TT_OP_REDUCE, c, NULL, sum_attrs, 4);
    CHECK_OK(tt_lazy_sync(0, 1, NULL));
    float got[R * N], total = 0, want_total = 0;
    CHECK_OK(tt_tensor_to_host(c, got, sizeof(got)));
    CHECK_OK(tt_tensor_to_host(s, &total, sizeof(total)));
    int bad = 0;
    for (int i = 0; i < R * N; ++i) {
      bad += fabsf(got[i] - want[i]) > 1e-4f;
      want_total += want[i];
    }
    CHECK(bad == 0, "step %d: a @ b: %d of %d differ", step, bad, R * N);
    CHECK(fabsf(total - want_total) < 1e-3f, "step %d: sum %g, want %g", step, total, want_total);
    CHECK_OK(tt_tensor_storage_layout(c, &layout));
    CHECK(layout && layout->tile_dims[1] == NDEV, "step %d: a @ b is held as row shards", step);
    free(layout);
    CHECK_OK(tt_tensor_storage_layout(s, &layout));
    CHECK(!layout, "the replicated sum is one buffer");
    /* What the synced values report (tt_tensor_result_layout). */
    CHECK_OK(tt_tensor_result_layout(c, &layout));
    CHECK(layout && layout->kind == TT_SHARDING_TILED && layout->tile_dims[1] == NDEV,
          "step %d: a @ b reports its row shards", step);
    free(layout);
    CHECK_OK(tt_tensor_result_layout(s, &layout));
    CHECK(layout && layout->kind == TT_SHARDING_REPLICATED, "the sum reports replicated");
    free(layout);
    tt_tensor_release(c);
    tt_tensor_release(s);
  }
  CHECK(tt_counter_value("UncachedCompile") - unc == 1, "one compile for two runs");
  CHECK(tt_counter_value("SpmdPartitionedExecution") - part == 2, "two partitioned runs");
  /* Per execution: the full sum of row shards combines with one
   * all_reduce; nothing is gathered. */
  CHECK(tt_counter_value("SpmdAllReduce") - ar == 2, "one all_reduce per run");
  CHECK(tt_counter_value("SpmdAllGather") - ag == 0, "no all_gather");

  /* ---- shards written from the host ---- */
  float shards[NDEV][2 * K];
  const void *hosts[NDEV];
  for (int p = 0; p < NDEV; ++p) {
    for (int i = 0; i < 2 * K; ++i) shards[p][i] = (float)(100 * p + i);
    hosts[p] = shards[p];
  }
  CHECK_OK(tt_tensor_load_shards(a, rows, hosts, sizeof(shards[0])));
  CHECK_OK(tt_tensor_to_host(a, back, sizeof(back)));
  CHECK(back[0] == 0.0f && back[K] == 5.0f && back[2 * K] == 100.0f && back[5 * K + 4] == 209.0f,
        "loaded shards assemble: %g %g %g %g", back[0], back[K], back[2 * K], back[5 * K + 4]);
  CHECK_CODE(tt_tensor_load_shards(a, rows, hosts, 4), TT_INVALID_ARGUMENT, "wrong shard size");

  /* ---- a collective: the partitioner refuses, the graph runs whole ---- */
  int64_t fb = tt_counter_value("SpmdPartitionFallback");
  int64_t ar_attrs[6] = {TT_RED_SUM, 0, 0, 0, 1, 0};
  tt_tensor_t *r = op2(TT_OP_ALL_REDUCE, a, NULL, ar_attrs, 6);
  float rb[R * K];
  CHECK_OK(tt_tensor_to_host(r, rb, sizeof(rb)));
  CHECK(!memcmp(rb, back, sizeof(rb)), "the one-member all_reduce copies the assembled value");
  CHECK(tt_counter_value("SpmdPartitionFallback") - fb == 1, "counted as a fallback");
  tt_tensor_release(r);

  /* ---- partitioning off: annotated data stays one buffer ---- */
  tt_lazy_set_spmd_partitioning(0);
  tt_tensor_t *a2 = NULL;
  CHECK_OK(tt_tensor_from_host(0, TT_F32, &sa, a_host, &a2));
  CHECK_OK(tt_tensor_set_sharding(a2, rows));
  CHECK_OK(tt_tensor_storage_layout(a2, &layout));
  CHECK(!layout, "no shards with partitioning off");
  int64_t dot_attrs[2] = {0, 0};
  part = tt_counter_value("SpmdPartitionedExecution");
  tt_tensor_t *c2 = op2(TT_OP_DOT, a2, b, dot_attrs, 2);
  float got[R * N];
  CHECK_OK(tt_tensor_to_host(c2, got, sizeof(got)));
  int bad = 0;
  for (int i = 0; i < R * N; ++i) bad += fabsf(got[i] - want[i]) > 1e-4f;
  CHECK(bad == 0 && tt_counter_value("SpmdPartitionedExecution") == part,
        "whole on one device: %d differ", bad);
  tt_tensor_release(c2);
  tt_tensor_release(a2);
  tt_tensor_release(a);
  tt_tensor_release(b);
  free(rows);
  tt_runtime_wait(-1);
  return test_summary();
}
