/* The optimization barrier (ops.def OPT_BARRIER): shape inference of its
 * nodes, the CPU executor (each node gives its operand's values back), the
 * passes (the barrier survives fusion, CSE and DCE between its readers and
 * its operands' producers) and the StableHLO lowering (the nodes of one
 * barrier are one stablehlo.optimization_barrier). */
#include <stdlib.h>
#include <string.h>

#include "test_harness.h"
#include "torchtpu/passes.h"
#include "torchtpu/stablehlo.h"
#include "torchtpu/torchtpu.h"

static int count_op(const tt_graph_t *g, tt_op_t op) {
  int n = 0;
  for (int32_t i = 0; i < g->num_instrs; ++i) n += g->instrs[i].op == op;
  return n;
}

static int count_str(const char *text, const char *what) {
  int n = 0;
  for (const char *p = text; (p = strstr(p, what)) != NULL; p += strlen(what)) ++n;
  return n;
}

static void test_shapes(void) {
  tt_buffer_t *buf = NULL;
  float data[6] = {0};
  CHECK_OK(tt_buffer_from_host(0, data, sizeof(data), &buf));
  tt_shape_t s23 = {2, {2, 3}}, s4 = {1, {4}};
  tt_node_t *ops[2] = {tt_node_create_param(buf, TT_F32, &s23, 0),
                       tt_node_create_param(buf, TT_I64, &s4, 0)};
  tt_node_t *b0 = NULL, *b1 = NULL, *bad = NULL;
  int64_t i0 = 0, i1 = 1, i2 = 2;
  CHECK_OK(tt_node_create(TT_OP_OPT_BARRIER, 0, ops, 2, &i0, 1, NULL, 0, &b0));
  CHECK_OK(tt_node_create(TT_OP_OPT_BARRIER, 0, ops, 2, &i1, 1, NULL, 0, &b1));
  CHECK(b0 && b0->dtype == TT_F32 && tt_shape_equal(&b0->shape, &s23));
  CHECK(b1 && b1->dtype == TT_I64 && tt_shape_equal(&b1->shape, &s4));
  tt_status_t st = tt_node_create(TT_OP_OPT_BARRIER, 0, ops, 2, &i2, 1, NULL, 0, &bad);
  CHECK(st && !bad && tt_status_code(st) == TT_INVALID_ARGUMENT);
  CHECK(st && strstr(tt_status_message(st), "index 2 out of range for 2 operands"));
  tt_status_free(st);
  /* The StableHLO of both nodes: one barrier with two results, each node
   * one of them, in the operands' order. */
  tt_node_t *roots[2] = {b1, b0};
  char *text = NULL;
  CHECK_OK(tt_stablehlo_emit(roots, 2, &text, NULL, NULL));
  if (text) {
    CHECK(count_str(text, "\"stablehlo.optimization_barrier\"(%arg0, %arg1)") == 1, "%s", text);
    CHECK(strstr(text, ":2 = \"stablehlo.optimization_barrier\""), "%s", text);
    CHECK(strstr(text, "(tensor<2x3xf32>, tensor<4xi64>) -> (tensor<2x3xf32>, tensor<4xi64>)"),
          "%s", text);
    CHECK(strstr(text, "return %0#1, %0#0"), "%s", text);
  }
  free(text);
  tt_node_release(b0);
  tt_node_release(b1);
  tt_node_release(ops[0]);
  tt_node_release(ops[1]);
  tt_buffer_release(buf);
}

/* y = exp(x) through a barrier, then neg: fusion must not reach across it. */
static void test_passes_keep_it(void) {
  tt_buffer_t *buf = NULL;
  float data[4] = {0};
  CHECK_OK(tt_buffer_from_host(0, data, sizeof(data), &buf));
  tt_shape_t s = {1, {4}};
  tt_node_t *x = tt_node_create_param(buf, TT_F32, &s, 0), *e = NULL, *e2 = NULL, *b = NULL,
            *n = NULL, *sum = NULL;
  int64_t exp_code = TT_UN_EXP, neg = TT_UN_NEG, add = TT_BIN_ADD, i0 = 0;
  double f[2] = {0, 0};
  CHECK_OK(tt_node_create(TT_OP_UNARY, 0, &x, 1, &exp_code, 1, f, 2, &e));
  CHECK_OK(tt_node_create(TT_OP_OPT_BARRIER, 0, &e, 1, &i0, 1, NULL, 0, &b));
  CHECK_OK(tt_node_create(TT_OP_UNARY, 0, &b, 1, &neg, 1, f, 2, &n));
  /* exp(x) recomputed after the barrier: the sum reads both. */
  CHECK_OK(tt_node_create(TT_OP_UNARY, 0, &x, 1, &exp_code, 1, f, 2, &e2));
  tt_node_t *sops[2] = {n, e2};
  CHECK_OK(tt_node_create(TT_OP_BINARY, 0, sops, 2, &add, 1, NULL, 0, &sum));
  tt_graph_t *g = NULL, *o = NULL;
  CHECK_OK(tt_graph_build(&sum, 1, &g, NULL));
  tt_optimize_options_t opts = {.fuse = 1, .verify = 1};
  if (g) CHECK_OK(tt_graph_optimize(g, &opts, &o));
  if (o) {
    CHECK(count_op(o, TT_OP_OPT_BARRIER) == 1);
    /* The barrier reads exp(x) made before it and is read after it: the
     * fused programs sit on both sides, none contains it. */
    for (int32_t i = 0; i < o->num_instrs; ++i) {
      if (o->instrs[i].op != TT_OP_OPT_BARRIER) continue;
      int32_t src = o->instrs[i].operands[0];
      CHECK(o->instrs[src].op == TT_OP_FUSED || o->instrs[src].op == TT_OP_UNARY);
      CHECK(o->instrs[o->output_instr[0]].op == TT_OP_FUSED && o->output_instr[0] > i);
    }
    char *text = NULL;
    CHECK_OK(tt_stablehlo_emit_graph(o, "m", &text));
    if (text) CHECK(count_str(text, "stablehlo.optimization_barrier") == 1, "%s", text);
    free(text);
    tt_graph_destroy(o);
  }
  if (g) tt_graph_destroy(g);
  tt_node_release(sum);
  tt_node_release(e2);
  tt_node_release(n);
  tt_node_release(b);
  tt_node_release(e);
  tt_node_release(x);
  tt_buffer_release(buf);
}

/* Recorded on tensors and run by the CPU backend: each node's values are
 * its operand's, whatever the other operands are. */
static void test_execute(void) {
  float x[6] = {1, 2, 3, 4, 5, 6};
  int64_t y[3] = {7, -8, 9};
  tt_shape_t s23 = {2, {2, 3}}, s3 = {1, {3}};
  tt_tensor_t *a = NULL, *k = NULL, *m = NULL, *iy = NULL, *b0 = NULL, *b1 = NULL, *r = NULL;
  CHECK_OK(tt_tensor_from_host(0, TT_F32, &s23, x, &a));
  CHECK_OK(tt_tensor_from_host(0, TT_I64, &s3, y, &iy));
  CHECK_OK(tt_tensor_scalar(0, TT_F32, 2.0, 0, &k));
  int64_t mul = TT_BIN_MUL, add = TT_BIN_ADD, i0 = 0, i1 = 1;
  tt_tensor_t *mops[2] = {a, k};
  CHECK_OK(tt_tensor_op(TT_OP_BINARY, 0, mops, 2, &mul, 1, NULL, 0, &m));
  tt_tensor_t *bops[2] = {m, iy};
  CHECK_OK(tt_tensor_op(TT_OP_OPT_BARRIER, 0, bops, 2, &i0, 1, NULL, 0, &b0));
  CHECK_OK(tt_tensor_op(TT_OP_OPT_BARRIER, 0, bops, 2, &i1, 1, NULL, 0, &b1));
  tt_tensor_t *rops[2] = {b0, k};
  CHECK_OK(tt_tensor_op(TT_OP_BINARY, 0, rops, 2, &add, 1, NULL, 0, &r));
  CHECK_OK(tt_lazy_sync(-1, 1, NULL));
  float out[6] = {0}, outb[6] = {0};
  int64_t out1[3] = {0};
  CHECK_OK(tt_tensor_to_host(r, out, sizeof(out)));
  CHECK_OK(tt_tensor_to_host(b0, outb, sizeof(outb)));
  CHECK_OK(tt_tensor_to_host(b1, out1, sizeof(out1)));
  for (int i = 0; i < 6; ++i) {
    CHECK(out[i] == 2.0f * x[i] + 2.0f, "r[%d] = %g", i, (double)out[i]);
    CHECK(outb[i] == 2.0f * x[i], "b0[%d] = %g", i, (double)outb[i]);
  }
  for (int i = 0; i < 3; ++i) CHECK(out1[i] == y[i], "b1[%d] = %lld", i, (long long)out1[i]);
  tt_tensor_t *all[7] = {a, k, m, iy, b0, b1, r};
  for (int i = 0; i < 7; ++i) tt_tensor_release(all[i]);
}

int main(void) {
  CHECK_OK(tt_runtime_init(1));
  test_shapes();
  test_passes_keep_it();
  test_execute();
  tt_runtime_wait(-1);
  return test_summary();
}
