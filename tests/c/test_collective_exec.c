/* Collective IR ops executed by the CPU backend across 4 devices
 * (src/backends/cpu/exec_collective.c): one thread records each device's
 * program, the devices' workers meet in the collective layer. Values
 * against a serial reference; outside a launch (world size 1) a group
 * naming other replicas is refused at once. */
#include <string.h>

#include "test_harness.h"
#include "torchtpu/collective.h"
#include "torchtpu/torchtpu.h"

#define N 4

/* Device d's input: [2, 8] with x[r][c] = 100 d + 8 r + c. */
static tt_tensor_t *input(int32_t d) {
  float x[16];
  for (int i = 0; i < 16; ++i) x[i] = (float)(100 * d + i);
  tt_shape_t s = {2, {2, 8}};
  tt_tensor_t *t = NULL;
  CHECK_OK(tt_tensor_from_host(d, TT_F32, &s, x, &t));
  return t;
}

static float in_at(int d, int r, int c) { return (float)(100 * d + 8 * r + c); }

/* One op on every device; results read back into out[d] (n floats). */
static void run(tt_op_t op, const int64_t *ia, int32_t ni, float out[N][64], int64_t n) {
  tt_tensor_t *x[N], *y[N];
  for (int d = 0; d < N; ++d) {
    x[d] = input(d);
    CHECK_OK(tt_tensor_op(op, d, &x[d], 1, ia, ni, NULL, 0, &y[d]), tt_op_name(op));
  }
  CHECK_OK(tt_lazy_sync(-1, 0, NULL));
  for (int d = 0; d < N; ++d) {
    CHECK_OK(tt_tensor_to_host(y[d], out[d], sizeof(float) * (size_t)n), tt_op_name(op));
    tt_tensor_release(y[d]);
    tt_tensor_release(x[d]);
  }
}

static void test_ops(void) {
  float out[N][64];
  /* all_reduce sum over every replica (no groups). */
  int64_t ar[5] = {TT_RED_SUM, 0, 0, 0, 1};
  run(TT_OP_ALL_REDUCE, ar, 5, out, 16);
  int ok = 1;
  for (int d = 0; d < N; ++d)
    for (int i = 0; i < 16; ++i) ok &= out[d][i] == (float)(600 + 4 * i);
  CHECK(ok, "all_reduce");
  /* all_reduce max over groups {0, 2}, {1, 3}. */
  int64_t arg[9] = {TT_RED_MAX, 0, 0, 0, 2, 0, 2, 1, 3};
  run(TT_OP_ALL_REDUCE, arg, 9, out, 16);
  ok = 1;
  for (int d = 0; d < N; ++d)
    for (int i = 0; i < 16; ++i) ok &= out[d][i] == in_at(d % 2 + 2, 0, i);
  CHECK(ok, "all_reduce over groups");
  /* all_gather along dim 1: [2, 32], row r = x_0[r] x_1[r] ... */
  int64_t ag[5] = {1, N, 0, 0, 1};
  run(TT_OP_ALL_GATHER, ag, 5, out, 64);
  ok = 1;
  for (int d = 0; d < N; ++d)
    for (int r = 0; r < 2; ++r)
      for (int q = 0; q < N; ++q)
        for (int c = 0; c < 8; ++c) ok &= out[d][r * 32 + q * 8 + c] == in_at(q, r, c);
  CHECK(ok, "all_gather dim 1");
  /* reduce_scatter sum along dim 1: [2, 2], device d gets columns 2d, 2d+1. */
  int64_t rs[5] = {TT_RED_SUM, 1, N, 0, 1};
  run(TT_OP_REDUCE_SCATTER, rs, 5, out, 4);
  ok = 1;
  for (int d = 0; d < N; ++d)
    for (int r = 0; r < 2; ++r)
      for (int c = 0; c < 2; ++c) {
        float want = 0;
        for (int q = 0; q < N; ++q) want += in_at(q, r, 2 * d + c);
        ok &= out[d][r * 2 + c] == want;
      }
  CHECK(ok, "reduce_scatter dim 1");
  /* all_to_all split dim 1, concat dim 0: [8, 2]; rows 2q, 2q+1 from q. */
  int64_t aa[5] = {1, 0, N, 0, 1};
  run(TT_OP_ALL_TO_ALL, aa, 5, out, 16);
  ok = 1;
  for (int d = 0; d < N; ++d)
    for (int q = 0; q < N; ++q)
      for (int r = 0; r < 2; ++r)
        for (int c = 0; c < 2; ++c) ok &= out[d][(2 * q + r) * 2 + c] == in_at(q, r, 2 * d + c);
  CHECK(ok, "all_to_all");
  /* collective_permute 0 -> 1 -> 2 (3 and 0 receive zeros). */
  int64_t cp[9] = {0, 0, 0, 0, 2, 0, 1, 1, 2};
  run(TT_OP_COLLECTIVE_PERMUTE, cp, 9, out, 16);
  ok = 1;
  for (int d = 0; d < N; ++d)
    for (int i = 0; i < 16; ++i) ok &= out[d][i] == (d == 1 || d == 2 ? in_at(d - 1, 0, i) : 0.0f);
  CHECK(ok, "collective_permute");
  /* A group naming a replica beyond the launch fails at once on every
   * device (nobody waits for it). */
  int64_t bad[7] = {TT_RED_SUM, 0, 0, 0, 2, 0, 9};
  tt_tensor_t *x = input(0), *y = NULL;
  CHECK_OK(tt_tensor_op(TT_OP_ALL_REDUCE, 0, &x, 1, bad, 7, NULL, 0, &y));
  tt_status_t st = tt_tensor_to_host(y, out[0], 64);
  CHECK(st && strstr(tt_status_message(st), "replica id 9 outside the launch's 4 replicas"),
        "beyond the launch: '%s'", tt_status_message(st));
  tt_status_free(st);
  tt_tensor_release(y);
  tt_tensor_release(x);
}

/* Outside a launch one replica: no groups is a copy, a group naming
 * others is refused at once. */
static void test_outside_a_launch(void) {
  tt_collective_set_world_size(1);
  float out[16];
  tt_tensor_t *x = input(2), *y = NULL;
  int64_t ar[5] = {TT_RED_SUM, 0, 0, 0, 1};
  CHECK_OK(tt_tensor_op(TT_OP_ALL_REDUCE, 2, &x, 1, ar, 5, NULL, 0, &y));
  CHECK_OK(tt_tensor_to_host(y, out, sizeof(out)));
  CHECK(out[5] == in_at(2, 0, 5), "one replica: a copy");
  tt_tensor_release(y);
  int64_t arg[7] = {TT_RED_SUM, 0, 0, 0, 2, 2, 3};
  CHECK_OK(tt_tensor_op(TT_OP_ALL_REDUCE, 2, &x, 1, arg, 7, NULL, 0, &y));
  tt_status_t st = tt_tensor_to_host(y, out, sizeof(out));
  CHECK(st && strstr(tt_status_message(st), "all_reduce over a replica group of 2 outside a "
                                            "launch"),
        "refused: '%s'", tt_status_message(st));
  tt_status_free(st);
  tt_tensor_release(y);
  tt_tensor_release(x);
}

int main(void) {
  CHECK_OK(tt_runtime_init(N));
  tt_collective_set_world_size(N);
  test_ops();
  test_outside_a_launch();
  tt_runtime_wait(-1);
  return test_summary();
}
