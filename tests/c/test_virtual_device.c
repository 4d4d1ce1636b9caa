/* SPMD mode's virtual device (tt_lazy_set_virtual_device, docs/spmd.md
 * "The virtual device"), on 4 engine devices: data made with
 * tt_tensor_from_host_deferred stays on the host (no device bytes, no
 * transfer metrics) and reads back from there; the first op moves it to
 * its device once; a tiled annotation sends each device its shard
 * straight from the host (padding included, no program run); every cut in
 * the mode counts ExecuteReplicated once and samples ExecuteReplicatedTime
 * once, partitioned or not; outside the mode the same call uploads at once
 * and executions sample ExecuteTime. */
#include <stdlib.h>
#include <string.h>

#include "test_harness.h"
#include "torchtpu/metrics.h"
#include "torchtpu/spmd_exec.h"
#include "torchtpu/torchtpu.h"

#define NDEV 4

static int64_t bytes_on(int32_t d) {
  int64_t used, peak;
  tt_runtime_wait(-1);
  tt_runtime_memory_stats(d, &used, &peak);
  return used;
}

static int64_t samples(const char *name) {
  int64_t total = 0, n = 0;
  double acc = 0;
  if (!tt_metric_data(name, &total, &acc, &n, NULL, NULL, 0)) return 0;
  return total;
}

static double accumulated(const char *name) {
  int64_t total = 0, n = 0;
  double acc = 0;
  if (!tt_metric_data(name, &total, &acc, &n, NULL, NULL, 0)) return 0;
  return acc;
}

static tt_tensor_t *add_scalar(tt_tensor_t *a, double v) {
  tt_tensor_t *k = NULL, *out = NULL;
  CHECK_OK(tt_tensor_scalar(0, TT_F32, v, 0, &k), "scalar");
  int64_t add = TT_BIN_ADD;
  tt_tensor_t *ops[2] = {a, k};
  CHECK_OK(tt_tensor_op(TT_OP_BINARY, 0, ops, 2, &add, 1, NULL, 0, &out), "add");
  tt_tensor_release(k);
  return out;
}

int main(void) {
  CHECK_OK(tt_runtime_init(NDEV));
  enum { R = 7, C = 3 }; /* 7 rows over 4 devices: shards of 2, the last padded */
  float host[R * C], back[R * C];
  for (int i = 0; i < R * C; ++i) host[i] = (float)i - 4.5f;
  tt_shape_t shape = {2, {R, C}};

  tt_lazy_set_spmd_partitioning(1);
  tt_lazy_set_virtual_device(1);
  CHECK(tt_lazy_virtual_device() == 1);
  tt_metrics_clear();
  tt_counters_clear();

  /* ---- held on the host, read back from there ---- */
  int64_t before0 = bytes_on(0);
  tt_tensor_t *a = NULL;
  CHECK_OK(tt_tensor_from_host_deferred(0, TT_F32, &shape, host, &a));
  CHECK(tt_tensor_on_host(a) && !tt_tensor_is_pending(a) && !tt_tensor_has_data_node(a));
  CHECK(bytes_on(0) == before0, "no device bytes for held data");
  CHECK(samples("TransferToDeviceTime") == 0 && samples("OutboundData") == 0);
  memset(back, 0, sizeof(back));
  CHECK_OK(tt_tensor_to_host(a, back, sizeof(back)));
  CHECK(memcmp(back, host, sizeof(back)) == 0 && tt_tensor_on_host(a));
  CHECK(samples("InboundData") == 0 && samples("TransferFromDeviceTime") == 0);

  /* ---- the first op moves it once ---- */
  tt_tensor_t *b = add_scalar(a, 1.0);
  CHECK(!tt_tensor_on_host(a) && tt_tensor_has_data_node(a));
  CHECK(bytes_on(0) == before0 + (int64_t)sizeof(host), "a now on device 0");
  tt_tensor_t *c = add_scalar(a, 2.0);
  CHECK(samples("OutboundData") == 1 && accumulated("OutboundData") == (double)sizeof(host));
  CHECK(tt_counter_value("CreateDataHandles") == 1);
  tt_tensor_t *both[2] = {b, c};
  CHECK_OK(tt_lazy_sync_tensors(both, 2, 1));
  CHECK(tt_counter_value("ExecuteReplicated") == 1, "one replicated execution");
  CHECK(samples("ExecuteReplicatedTime") == 1 && samples("ExecuteTime") == 0);
  CHECK_OK(tt_tensor_to_host(c, back, sizeof(back)));
  for (int i = 0; i < R * C; ++i) CHECK(back[i] == host[i] + 2.0f, "c[%d]", i);
  CHECK(tt_counter_value("ReplicateShardedData") == 1);

  /* ---- a tiled annotation sends the shards from the host ---- */
  tt_sharding_t *rows = calloc(1, tt_sharding_size(NDEV));
  rows->kind = TT_SHARDING_TILED;
  rows->num_tile_dims = 2;
  rows->tile_dims[0] = NDEV;
  rows->tile_dims[1] = 1;
  rows->num_devices = NDEV;
  for (int32_t i = 0; i < NDEV; ++i) rows->devices[i] = i;
  int64_t before[NDEV];
  for (int d = 0; d < NDEV; ++d) before[d] = bytes_on(d);
  tt_metrics_clear();
  tt_tensor_t *s = NULL;
  CHECK_OK(tt_tensor_from_host_deferred(0, TT_F32, &shape, host, &s));
  CHECK_OK(tt_tensor_set_sharding(s, rows));
  CHECK(!tt_tensor_on_host(s) && tt_tensor_has_data_node(s));
  tt_sharding_t *layout = NULL;
  CHECK_OK(tt_tensor_storage_layout(s, &layout));
  CHECK(layout && tt_sharding_equal(layout, rows), "held as row shards");
  free(layout);
  for (int d = 0; d < NDEV; ++d)
    CHECK(bytes_on(d) - before[d] == 2 * C * 4, "device %d holds one shard", d);
  CHECK(samples("ExecuteTime") == 0 && samples("ExecuteReplicatedTime") == 0,
        "no program slices a whole copy");
  CHECK(accumulated("OutboundData") == (double)(NDEV * 2 * C * 4), "4 padded shards sent");
  float shard[2 * C];
  CHECK_OK(tt_tensor_shard_to_host(s, 3, shard, sizeof(shard)));
  CHECK(shard[0] == host[6 * C] && shard[C] == 0.0f, "last shard: row 6 then padding");
  CHECK_OK(tt_tensor_to_host(s, back, sizeof(back)));
  CHECK(memcmp(back, host, sizeof(back)) == 0);
  tt_tensor_t *s2 = add_scalar(s, 3.0);
  CHECK_OK(tt_lazy_sync_tensors(&s2, 1, 1));
  tt_runtime_wait(-1); /* sampled when the last of the 4 programs ends */
  CHECK(tt_counter_value("ExecuteReplicated") == 2 && samples("ExecuteReplicatedTime") == 1,
        "a partitioned execution (4 programs) is one sample: %lld, %lld",
        (long long)tt_counter_value("ExecuteReplicated"),
        (long long)samples("ExecuteReplicatedTime"));
  CHECK_OK(tt_tensor_to_host(s2, back, sizeof(back)));
  for (int i = 0; i < R * C; ++i) CHECK(back[i] == host[i] + 3.0f, "s2[%d]", i);

  /* ---- a held value that is never used is freed with its tensor ---- */
  tt_tensor_t *unused = NULL;
  CHECK_OK(tt_tensor_from_host_deferred(0, TT_F32, &shape, host, &unused));
  tt_tensor_release(unused);

  /* ---- outside the mode: at once, ExecuteTime ---- */
  tt_lazy_set_virtual_device(0);
  tt_lazy_set_spmd_partitioning(0);
  tt_metrics_clear();
  tt_counters_clear();
  tt_tensor_t *n = NULL;
  CHECK_OK(tt_tensor_from_host_deferred(0, TT_F32, &shape, host, &n));
  CHECK(!tt_tensor_on_host(n) && samples("OutboundData") == 1);
  tt_tensor_t *n2 = add_scalar(n, 1.0);
  CHECK_OK(tt_lazy_sync_tensors(&n2, 1, 1));
  CHECK(tt_counter_value("ExecuteReplicated") == 0 && samples("ExecuteTime") == 1);
  CHECK_OK(tt_tensor_to_host(n2, back, sizeof(back)));
  CHECK(tt_counter_value("ReplicateShardedData") == 0);

  tt_tensor_release(a);
  tt_tensor_release(b);
  tt_tensor_release(c);
  tt_tensor_release(s);
  tt_tensor_release(s2);
  tt_tensor_release(n);
  tt_tensor_release(n2);
  free(rows);
  return test_summary();
}
