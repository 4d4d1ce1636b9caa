/* Unit tests for the IR (shape inference, errors, hashing) and the lazy
 * core (graph cuts, cache hits, aliasing, value reads). The runtime's own
 * tests are in test_runtime.c. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "test_harness.h"
#include "torchtpu/torchtpu.h"

static tt_shape_t shape2(int64_t a, int64_t b) {
  tt_shape_t s = {2, {a, b}};
  return s;
}

static void test_shape_inference(void) {
  tt_buffer_t *buf = NULL;
  float data[6] = {0};
  CHECK_OK(tt_buffer_from_host(0, data, sizeof(data), &buf));
  tt_shape_t s23 = shape2(2, 3), s13 = shape2(1, 3), s32 = shape2(3, 2);
  tt_node_t *a = tt_node_create_param(buf, TT_F32, &s23, 0);
  tt_node_t *b = tt_node_create_param(buf, TT_F32, &s13, 0);
  tt_node_t *c = tt_node_create_param(buf, TT_F32, &s32, 0);
  tt_node_t *ops[2] = {a, b};
  int64_t add = TT_BIN_ADD;
  tt_node_t *sum = NULL;
  CHECK_OK(tt_node_create(TT_OP_BINARY, 0, ops, 2, &add, 1, NULL, 0, &sum));
  CHECK(sum && sum->shape.rank == 2 && sum->shape.dims[0] == 2 && sum->shape.dims[1] == 3);
  tt_node_release(sum);
  /* Broadcasting mismatch names both sizes. */
  tt_node_t *bad_ops[2] = {a, c};
  tt_node_t *bad = NULL;
  tt_status_t st = tt_node_create(TT_OP_BINARY, 0, bad_ops, 2, &add, 1, NULL, 0, &bad);
  CHECK(st != NULL && bad == NULL);
  CHECK(tt_status_code(st) == TT_INVALID_ARGUMENT);
  CHECK(strstr(tt_status_message(st), "size of tensor a (3)") != NULL);
  tt_status_free(st);
  /* Reshape must keep numel. */
  int64_t dims[2] = {4, 2};
  st = tt_node_create(TT_OP_RESHAPE, 0, &a, 1, dims, 2, NULL, 0, &bad);
  CHECK(st && strstr(tt_status_message(st), "invalid for input of size 6"));
  tt_status_free(st);
  /* Dot: [1,2,3] x [1,3,2] -> [1,2,2]. */
  tt_node_t *a3 = NULL, *c3 = NULL, *d = NULL;
  int64_t r3a[3] = {1, 2, 3}, r3c[3] = {1, 3, 2}, tr[2] = {0, 0};
  CHECK_OK(tt_node_create(TT_OP_RESHAPE, 0, &a, 1, r3a, 3, NULL, 0, &a3));
  CHECK_OK(tt_node_create(TT_OP_RESHAPE, 0, &c, 1, r3c, 3, NULL, 0, &c3));
  tt_node_t *dops[2] = {a3, c3};
  CHECK_OK(tt_node_create(TT_OP_DOT, 0, dops, 2, tr, 2, NULL, 0, &d));
  CHECK(d && d->shape.dims[1] == 2 && d->shape.dims[2] == 2);
  /* Dot with mismatched K fails with PyTorch's words. */
  tt_node_t *dbad[2] = {a3, a3};
  st = tt_node_create(TT_OP_DOT, 0, dbad, 2, tr, 2, NULL, 0, &bad);
  CHECK(st && strstr(tt_status_message(st), "cannot be multiplied"));
  tt_status_free(st);
  tt_node_release(d);
  tt_node_release(a3);
  tt_node_release(c3);
  tt_node_release(a);
  tt_node_release(b);
  tt_node_release(c);
  tt_buffer_release(buf);
}

static void test_hash_ignores_values(void) {
  float x[4] = {1, 2, 3, 4}, y[4] = {5, 6, 7, 8};
  tt_buffer_t *bx = NULL, *by = NULL;
  CHECK_OK(tt_buffer_from_host(0, x, sizeof(x), &bx));
  CHECK_OK(tt_buffer_from_host(0, y, sizeof(y), &by));
  tt_shape_t s = {1, {4}};
  uint64_t hashes[3];
  for (int k = 0; k < 3; ++k) {
    tt_node_t *p = tt_node_create_param(k == 1 ? by : bx, TT_F32, &s, 0);
    tt_node_t *sc = tt_node_create_scalar(TT_F32, k == 2 ? 7.0 : 0.5, 0, 0);
    tt_node_t *ops[2] = {p, sc}, *m = NULL;
    int64_t mul = TT_BIN_MUL;
    CHECK_OK(tt_node_create(TT_OP_BINARY, 0, ops, 2, &mul, 1, NULL, 0, &m));
    tt_graph_t *g = NULL;
    CHECK_OK(tt_graph_build(&m, 1, &g, NULL));
    hashes[k] = g ? g->hash : 0;
    CHECK(g && g->num_inputs == 2 && g->num_instrs == 3);
    tt_graph_destroy(g);
    tt_node_release(m);
    tt_node_release(p);
    tt_node_release(sc);
  }
  /* New parameter values and new scalar values give the same graph. */
  CHECK(hashes[0] == hashes[1]);
  CHECK(hashes[0] == hashes[2]);
  tt_buffer_release(bx);
  tt_buffer_release(by);
}

static void test_lazy_sync_and_cache(void) {
  float x[6] = {1, 2, 3, 4, 5, 6};
  tt_shape_t s = shape2(2, 3);
  int64_t compiles0 = tt_counter_value("UncachedCompile");
  int64_t cached0 = tt_counter_value("CachedCompile");
  for (int step = 0; step < 3; ++step) {
    tt_tensor_t *a = NULL, *k = NULL, *m = NULL, *r = NULL;
    CHECK_OK(tt_tensor_from_host(0, TT_F32, &s, x, &a));
    CHECK_OK(tt_tensor_scalar(0, TT_F32, 2.0 + step, 0, &k));
    int64_t mul = TT_BIN_MUL;
    tt_tensor_t *ops[2] = {a, k};
    CHECK_OK(tt_tensor_op(TT_OP_BINARY, 0, ops, 2, &mul, 1, NULL, 0, &m));
    int64_t red[4] = {TT_RED_SUM, 2, 0, TT_F32};
    CHECK_OK(tt_tensor_op(TT_OP_REDUCE, 0, &m, 1, red, 4, NULL, 0, &r));
    CHECK(tt_tensor_is_pending(r));
    float out[2] = {0, 0};
    CHECK_OK(tt_tensor_to_host(r, out, sizeof(out)));
    CHECK(fabsf(out[0] - 6.0f * (2 + step)) < 1e-5f && fabsf(out[1] - 15.0f * (2 + step)) < 1e-5f);
    CHECK(!tt_tensor_is_pending(r));
    /* m was not needed by the read and stays pending; a full sync cuts it. */
    CHECK(tt_tensor_is_pending(m));
    CHECK_OK(tt_lazy_sync(-1, 1, NULL));
    CHECK(!tt_tensor_is_pending(m));
    tt_tensor_release(r);
    tt_tensor_release(m);
    tt_tensor_release(k);
    tt_tensor_release(a);
  }
  /* Steps 2 and 3 hit the cache for both graph shapes (the read and the sync). */
  CHECK(tt_counter_value("UncachedCompile") - compiles0 == 2);
  CHECK(tt_counter_value("CachedCompile") - cached0 == 4);
}

static int64_t samples_of(const char *name) {
  int64_t total = 0, n = 0;
  double acc = 0;
  return tt_metric_data(name, &total, &acc, &n, NULL, NULL, 0) ? total : 0;
}

/* Eager mode (tt_set_eager_mode): a compile and the execution queued while
 * it is on are sampled in EagerOpCompileTime/EagerOpExecuteTime only; off,
 * in CompileTime/ExecuteTime. */
static void test_eager_mode_metrics(void) {
  float x[5] = {1, 2, 3, 4, 5};
  tt_shape_t s = {.rank = 1, .dims = {5}};
  for (int eager = 1; eager >= 0; --eager) {
    tt_runtime_wait(-1);
    int64_t c0 = samples_of("CompileTime"), e0 = samples_of("ExecuteTime");
    int64_t ec0 = samples_of("EagerOpCompileTime"), ee0 = samples_of("EagerOpExecuteTime");
    tt_set_eager_mode(eager);
    CHECK(tt_eager_mode() == eager);
    tt_tensor_t *a = NULL, *m = NULL;
    CHECK_OK(tt_tensor_from_host(0, TT_F32, &s, x, &a));
    int64_t op = eager ? TT_BIN_SUB : TT_BIN_ADD; /* a graph not yet compiled */
    tt_tensor_t *ops[2] = {a, a};
    CHECK_OK(tt_tensor_op(TT_OP_BINARY, 0, ops, 2, &op, 1, NULL, 0, &m));
    CHECK_OK(tt_lazy_sync_tensors(&m, 1, 0));
    /* Switched off before the device ran it: the enqueue-time setting counts. */
    tt_set_eager_mode(0);
    tt_runtime_wait(-1);
    CHECK(samples_of("EagerOpCompileTime") - ec0 == eager);
    CHECK(samples_of("EagerOpExecuteTime") - ee0 == eager);
    CHECK(samples_of("CompileTime") - c0 == !eager);
    CHECK(samples_of("ExecuteTime") - e0 == !eager);
    tt_tensor_release(m);
    tt_tensor_release(a);
  }
}

static void test_metrics_report(void) {
  tt_metric_add("TestTime", TT_UNIT_NANOSECONDS, 2384437513.0);
  tt_counter_add("TestCounter", 3);
  char *r = tt_metrics_report("TestTime\nTestCounter");
  CHECK(strstr(r, "Metric: TestTime\n  TotalSamples: 1\n  Accumulator: 02s384ms437.513us\n"));
  CHECK(strstr(r, "Counter: TestCounter\n  Value: 3\n"));
  CHECK(strstr(r, "Percentiles: 1%=02s384ms437.513us; 5%="));
  free(r);
}

static void test_long_chain_release(void) {
  /* 200k pending ops: release must not recurse. */
  float x = 1;
  tt_shape_t s = {0, {0}};
  tt_tensor_t *t = NULL;
  CHECK_OK(tt_tensor_from_host(0, TT_F32, &s, &x, &t));
  int64_t neg = TT_UN_NEG;
  double f[2] = {0, 0};
  for (int i = 0; i < 200000; ++i) {
    tt_tensor_t *n = NULL;
    tt_status_t st = tt_tensor_op(TT_OP_UNARY, 0, &t, 1, &neg, 1, f, 2, &n);
    if (st) {
      tt_status_free(st);
      break;
    }
    tt_tensor_release(t);
    t = n;
  }
  tt_tensor_release(t);
  CHECK(1);
}

/* A live transpose of another live pending value (a view and its base):
 * the sync computes the transpose alone, the base becomes the transpose
 * back of its data, left pending by later step syncs, and both read the
 * right values. An explicit sync of given tensors materializes them all. */
static void test_derived_roots(void) {
  float x[6] = {1, 2, 3, 4, 5, 6};
  tt_shape_t s = shape2(2, 3);
  tt_tensor_t *a = NULL, *k = NULL, *b = NULL, *v = NULL, *r = NULL;
  CHECK_OK(tt_tensor_from_host(0, TT_F32, &s, x, &a));
  CHECK_OK(tt_tensor_scalar(0, TT_F32, 3.0, 0, &k));
  int64_t mul = TT_BIN_MUL;
  tt_tensor_t *ops[2] = {a, k};
  CHECK_OK(tt_tensor_op(TT_OP_BINARY, 0, ops, 2, &mul, 1, NULL, 0, &b));
  int64_t perm[2] = {1, 0};
  CHECK_OK(tt_tensor_op(TT_OP_TRANSPOSE, 0, &b, 1, perm, 2, NULL, 0, &v));
  int64_t flat[1] = {6};
  CHECK_OK(tt_tensor_op(TT_OP_RESHAPE, 0, &b, 1, flat, 1, NULL, 0, &r));
  int64_t derived0 = tt_counter_value("DerivedSyncTensor");
  CHECK_OK(tt_lazy_sync(0, 1, NULL));
  CHECK(tt_counter_value("DerivedSyncTensor") - derived0 == 1);
  CHECK(!tt_tensor_is_pending(v) && !tt_tensor_is_pending(r));
  CHECK(tt_tensor_is_pending(b));
  CHECK(tt_tensor_node(b)->op == TT_OP_TRANSPOSE || tt_tensor_node(b)->op == TT_OP_RESHAPE);
  /* A second step sync leaves it so: nothing runs. */
  int64_t compiles0 = tt_counter_value("UncachedCompile") + tt_counter_value("CachedCompile");
  CHECK_OK(tt_lazy_sync(0, 1, NULL));
  CHECK(tt_counter_value("UncachedCompile") + tt_counter_value("CachedCompile") == compiles0);
  CHECK(tt_tensor_is_pending(b));
  float vb[6], vv[6], vr[6];
  CHECK_OK(tt_tensor_to_host(v, vv, sizeof vv));
  CHECK_OK(tt_tensor_to_host(r, vr, sizeof vr));
  for (int i = 0; i < 2; ++i)
    for (int j = 0; j < 3; ++j) CHECK(vv[j * 2 + i] == 3.0f * x[i * 3 + j]);
  for (int i = 0; i < 6; ++i) CHECK(vr[i] == 3.0f * x[i]);
  CHECK_OK(tt_lazy_sync_tensors(&b, 1, 1));
  CHECK(!tt_tensor_is_pending(b));
  CHECK_OK(tt_tensor_to_host(b, vb, sizeof vb));
  for (int i = 0; i < 6; ++i) CHECK(vb[i] == 3.0f * x[i]);
  tt_tensor_release(r);
  tt_tensor_release(v);
  tt_tensor_release(b);
  tt_tensor_release(k);
  tt_tensor_release(a);
  /* Explicit syncs derive nothing. */
  CHECK_OK(tt_tensor_from_host(0, TT_F32, &s, x, &a));
  CHECK_OK(tt_tensor_scalar(0, TT_F32, 2.0, 0, &k));
  tt_tensor_t *ops2[2] = {a, k};
  CHECK_OK(tt_tensor_op(TT_OP_BINARY, 0, ops2, 2, &mul, 1, NULL, 0, &b));
  CHECK_OK(tt_tensor_op(TT_OP_TRANSPOSE, 0, &b, 1, perm, 2, NULL, 0, &v));
  tt_tensor_t *both[2] = {b, v};
  CHECK_OK(tt_lazy_sync_tensors(both, 2, 1));
  CHECK(!tt_tensor_is_pending(b) && !tt_tensor_is_pending(v));
  CHECK(tt_counter_value("DerivedSyncTensor") - derived0 == 1);
  tt_tensor_release(v);
  tt_tensor_release(b);
  tt_tensor_release(k);
  tt_tensor_release(a);
}

/* tt_tensor_buffer_address: a materialized tensor's data, readable at the
 * address; a pending one has none (TT_INVALID_ARGUMENT) until a sync. */
static void test_buffer_address(void) {
  float x[3] = {1, 2, 3};
  tt_shape_t s = {.rank = 1, .dims = {3}};
  tt_tensor_t *a = NULL, *n = NULL;
  uintptr_t addr = 0;
  CHECK_OK(tt_tensor_from_host(0, TT_F32, &s, x, &a));
  CHECK_OK(tt_tensor_buffer_address(a, &addr));
  CHECK(addr != 0 && memcmp((const void *)addr, x, sizeof(x)) == 0);
  int64_t neg = TT_UN_NEG;
  CHECK_OK(tt_tensor_op(TT_OP_UNARY, 0, &a, 1, &neg, 1, (double[]){0, 0}, 2, &n));
  CHECK_CODE(tt_tensor_buffer_address(n, &addr), TT_INVALID_ARGUMENT, "pending tensor");
  CHECK(addr == 0);
  CHECK_OK(tt_lazy_sync(-1, 1, NULL));
  CHECK_OK(tt_tensor_buffer_address(n, &addr));
  CHECK(addr != 0 && ((const float *)addr)[2] == -3.0f);
  tt_tensor_release(n);
  tt_tensor_release(a);
}

int main(void) {
  CHECK_OK(tt_runtime_init(2));
  test_buffer_address();
  test_shape_inference();
  test_hash_ignores_values();
  test_lazy_sync_and_cache();
  test_derived_roots();
  test_metrics_report();
  test_eager_mode_metrics();
  test_long_chain_release();
  tt_runtime_wait(-1);
  return test_summary();
}
