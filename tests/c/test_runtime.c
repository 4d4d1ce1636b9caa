/* Unit tests for the runtime: initialisation, several devices and copies
 * between them, failed executions reported on read, bad device indices. */
#include <string.h>

#include "test_harness.h"
#include "torchtpu/torchtpu.h"

static void test_devices_and_errors(void) {
  float x[4] = {1, 2, 3, 4};
  tt_shape_t s = {1, {4}};
  tt_tensor_t *a = NULL, *b = NULL, *c = NULL;
  CHECK_OK(tt_tensor_from_host(0, TT_F32, &s, x, &a));
  CHECK_OK(tt_tensor_from_host(1, TT_F32, &s, x, &b));
  tt_tensor_t *ops[2] = {a, b};
  int64_t add = TT_BIN_ADD;
  tt_status_t st = tt_tensor_op(TT_OP_BINARY, 0, ops, 2, &add, 1, NULL, 0, &c);
  CHECK(st && strstr(tt_status_message(st), "same device"));
  tt_status_free(st);
  /* Copy across devices, then compute on device 1. */
  tt_tensor_t *a1 = NULL;
  CHECK_OK(tt_tensor_to_device(a, 1, &a1));
  tt_tensor_t *ops1[2] = {a1, b};
  CHECK_OK(tt_tensor_op(TT_OP_BINARY, 0, ops1, 2, &add, 1, NULL, 0, &c));
  float out[4];
  CHECK_OK(tt_tensor_to_host(c, out, sizeof(out)));
  CHECK(out[3] == 8.0f);
  /* An execution that fails at run time (index out of range) reports its
   * error on read instead of crashing. */
  int64_t idx[1] = {7};
  tt_shape_t s1 = {1, {1}};
  tt_tensor_t *ix = NULL, *sel = NULL;
  CHECK_OK(tt_tensor_from_host(0, TT_I64, &s1, idx, &ix));
  tt_tensor_t *sops[2] = {a, ix};
  int64_t dim0 = 0;
  CHECK_OK(tt_tensor_op(TT_OP_INDEX_SELECT, 0, sops, 2, &dim0, 1, NULL, 0, &sel));
  float one;
  st = tt_tensor_to_host(sel, &one, sizeof(one));
  CHECK(st && tt_status_code(st) == TT_OUT_OF_RANGE);
  tt_status_free(st);
  /* Bad device index is an error, not a crash. */
  tt_tensor_t *bad = NULL;
  st = tt_tensor_from_host(99, TT_F32, &s, x, &bad);
  CHECK(st && strstr(tt_status_message(st), "xla:99"));
  tt_status_free(st);
  tt_tensor_release(sel);
  tt_tensor_release(ix);
  tt_tensor_release(c);
  tt_tensor_release(a1);
  tt_tensor_release(b);
  tt_tensor_release(a);
}

int main(void) {
  CHECK_OK(tt_runtime_init(2));
  tt_status_t st = tt_runtime_init(3);
  CHECK(st && strstr(tt_status_message(st), "already initialized"));
  tt_status_free(st);
  test_devices_and_errors();
  tt_runtime_wait(-1);
  return test_summary();
}
