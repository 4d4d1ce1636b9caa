/* Multi-device execution through a real PJRT plugin: an all_reduce over 4
 * replicas and a 4-way SPMD-partitioned matmul, each in one execute over
 * every device, through the C API (tt_pjrt_executable_devices,
 * tt_pjrt_execute_devices). Needs XLA's CPU plugin: set
 * TORCHTPU_PJRT_CPU_PLUGIN to its path (e.g. the xla_cpu_pjrt package's
 * .so); without it the test reports that it skipped. Under the sanitizer
 * build run it with ASAN_OPTIONS=alloc_dealloc_mismatch=0:detect_leaks=0
 * (the plugin is not built with the sanitizer). */
#include <stdlib.h>
#include <string.h>

#include "test_harness.h"
#include "torchtpu/pjrt.h"

#define NDEV 4

static const char *kAllReduce =
    "module @m attributes {mhlo.num_partitions = 1 : i32, mhlo.num_replicas = 4 : i32} {\n"
    "  func.func @main(%arg0: tensor<3xf32>) -> tensor<3xf32> {\n"
    "    %0 = \"stablehlo.all_reduce\"(%arg0) ({\n"
    "    ^bb0(%a: tensor<f32>, %b: tensor<f32>):\n"
    "      %s = \"stablehlo.add\"(%a, %b) : (tensor<f32>, tensor<f32>) -> tensor<f32>\n"
    "      \"stablehlo.return\"(%s) : (tensor<f32>) -> ()\n"
    "    }) {replica_groups = dense<[[0, 1, 2, 3]]> : tensor<1x4xi64>} : (tensor<3xf32>) -> "
    "tensor<3xf32>\n"
    "    return %0 : tensor<3xf32>\n"
    "  }\n"
    "}\n";

/* [4, 2] rows split over 4 partitions times a replicated [2, 2]; the result
 * rows stay split. */
static const char *kSpmd =
    "module @m attributes {mhlo.num_partitions = 4 : i32, mhlo.num_replicas = 1 : i32} {\n"
    "  func.func @main(%arg0: tensor<4x2xf32> {mhlo.sharding = \"{devices=[4,1]0,1,2,3}\"}, "
    "%arg1: tensor<2x2xf32> {mhlo.sharding = \"{replicated}\"}) -> (tensor<4x2xf32> "
    "{mhlo.sharding = \"{devices=[4,1]0,1,2,3}\"}) {\n"
    "    %0 = \"stablehlo.dot_general\"(%arg0, %arg1) {dot_dimension_numbers = "
    "#stablehlo.dot<lhs_contracting_dimensions = [1], rhs_contracting_dimensions = [0]>} : "
    "(tensor<4x2xf32>, tensor<2x2xf32>) -> tensor<4x2xf32>\n"
    "    return %0 : tensor<4x2xf32>\n"
    "  }\n"
    "}\n";

static void test_all_reduce(tt_pjrt_client_t *client) {
  const int64_t assignment[NDEV] = {0, 1, 2, 3};
  tt_pjrt_compile_config_t config = tt_pjrt_compile_config_default();
  config.num_replicas = NDEV;
  config.device_assignment = assignment;
  tt_pjrt_executable_t *exe = NULL;
  CHECK_OK(tt_pjrt_compile(client, kAllReduce, strlen(kAllReduce), "mlir", &config, &exe));
  if (!exe) return;
  size_t order[NDEV], n = 0;
  CHECK_OK(tt_pjrt_executable_devices(exe, order, NDEV, &n));
  CHECK(n == NDEV);
  tt_pjrt_buffer_t *args[NDEV] = {0}, *outs[NDEV] = {0};
  tt_shape_t s = {1, {3}};
  for (size_t d = 0; d < n && d < NDEV; d++) {
    float v[3] = {(float)d, 10.0f * (float)d, 1.0f};
    CHECK_OK(tt_pjrt_buffer_from_host(client, order[d], TT_F32, &s, v, sizeof(v), &args[d]));
  }
  /* Too few argument lists: refused, naming both counts. */
  tt_status_t st = tt_pjrt_execute_devices(exe, 3, args, 1, outs);
  CHECK(st && tt_status_code(st) == TT_INVALID_ARGUMENT &&
        strstr(tt_status_message(st), "3 argument lists for an executable on 4 devices"));
  tt_status_free(st);
  CHECK_OK(tt_pjrt_execute_devices(exe, NDEV, args, 1, outs));
  for (int d = 0; d < NDEV; d++) {
    float got[3] = {0};
    if (!outs[d]) continue;
    CHECK_OK(tt_pjrt_buffer_to_host(outs[d], got, sizeof(got)));
    CHECK(got[0] == 6.0f && got[1] == 60.0f && got[2] == 4.0f);
    tt_pjrt_buffer_destroy(outs[d]);
  }
  for (int d = 0; d < NDEV; d++) tt_pjrt_buffer_destroy(args[d]);
  tt_pjrt_executable_destroy(exe);
}

static void test_spmd(tt_pjrt_client_t *client) {
  const int64_t assignment[NDEV] = {0, 1, 2, 3};
  tt_pjrt_compile_config_t config = tt_pjrt_compile_config_default();
  config.num_partitions = NDEV;
  config.use_spmd_partitioning = 1;
  config.device_assignment = assignment;
  tt_pjrt_executable_t *exe = NULL;
  CHECK_OK(tt_pjrt_compile(client, kSpmd, strlen(kSpmd), "mlir", &config, &exe));
  if (!exe) return;
  size_t order[NDEV], n = 0;
  CHECK_OK(tt_pjrt_executable_devices(exe, order, NDEV, &n));
  CHECK(n == NDEV);
  const float w[4] = {1, 2, 3, 4}; /* [[1, 2], [3, 4]] */
  tt_pjrt_buffer_t *args[2 * NDEV] = {0}, *outs[NDEV] = {0};
  tt_shape_t row = {2, {1, 2}}, ws = {2, {2, 2}};
  for (size_t d = 0; d < n && d < NDEV; d++) {
    float x[2] = {(float)order[d], 1.0f}; /* partition p = device p: row p is [p, 1] */
    CHECK_OK(tt_pjrt_buffer_from_host(client, order[d], TT_F32, &row, x, sizeof(x),
                                      &args[2 * d]));
    CHECK_OK(tt_pjrt_buffer_from_host(client, order[d], TT_F32, &ws, w, sizeof(w),
                                      &args[2 * d + 1]));
  }
  CHECK_OK(tt_pjrt_execute_devices(exe, NDEV, args, 2, outs));
  for (size_t d = 0; d < NDEV; d++) {
    if (!outs[d]) continue;
    /* Each device returns only its [1, 2] row: [p, 1] @ w = [p + 3, 2p + 4]. */
    CHECK(tt_pjrt_buffer_shape(outs[d])->rank == 2 && tt_pjrt_buffer_shape(outs[d])->dims[0] == 1);
    float got[2] = {0};
    CHECK_OK(tt_pjrt_buffer_to_host(outs[d], got, sizeof(got)));
    float p = (float)order[d];
    CHECK(got[0] == p + 3.0f && got[1] == 2.0f * p + 4.0f);
    tt_pjrt_buffer_destroy(outs[d]);
  }
  for (int i = 0; i < 2 * NDEV; i++) tt_pjrt_buffer_destroy(args[i]);
  tt_pjrt_executable_destroy(exe);
}

int main(void) {
  const char *path = getenv("TORCHTPU_PJRT_CPU_PLUGIN");
  if (!path || !*path) {
    printf("skipped: set TORCHTPU_PJRT_CPU_PLUGIN to XLA's CPU PJRT plugin to run\n");
    return test_summary();
  }
  tt_pjrt_option_t opt = {"cpu_device_count", TT_PJRT_OPTION_INT64, NULL, NDEV, 0, 0};
  tt_pjrt_client_t *client = NULL;
  CHECK_OK(tt_pjrt_client_create(path, &opt, 1, &client));
  if (!client) return test_summary();
  CHECK(tt_pjrt_client_device_count(client) == NDEV);
  test_all_reduce(client);
  test_spmd(client);
  tt_pjrt_client_release(client);
  return test_summary();
}
