/* Unit tests for the graph passes: before/after structure, and fused
 * results equal to unfused results. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "test_harness.h"
#include "torchtpu/passes.h"
#include "torchtpu/torchtpu.h"

static tt_node_t *unary(tt_node_t *x, int64_t code) {
  tt_node_t *n = NULL;
  double f[2] = {0, 0};
  tt_status_t st = tt_node_create(TT_OP_UNARY, 0, &x, 1, &code, 1, f, 2, &n);
  if (st) tt_status_free(st);
  return n;
}

static tt_node_t *binary(tt_node_t *a, tt_node_t *b, int64_t code) {
  tt_node_t *ops[2] = {a, b}, *n = NULL;
  tt_status_t st = tt_node_create(TT_OP_BINARY, 0, ops, 2, &code, 1, NULL, 0, &n);
  if (st) tt_status_free(st);
  return n;
}

static int count_op(const tt_graph_t *g, tt_op_t op) {
  int c = 0;
  for (int32_t i = 0; i < g->num_instrs; ++i) c += g->instrs[i].op == op;
  return c;
}

/* Runs graph g over one f32 param (data) and one scalar into out. */
static tt_status_t run(tt_graph_t *g, const float *data, double scalar, float *out) {
  tt_executable_t *exe = NULL;
  TT_RETURN_IF_ERROR(tt_executable_create(g, &exe));
  tt_buffer_t *buf = NULL;
  const tt_instr_t *p = &g->instrs[g->input_instr[0]];
  tt_status_t st = tt_buffer_from_host(0, data, sizeof(float) * (size_t)tt_shape_numel(&p->shape), &buf);
  if (st) {
    tt_executable_release(exe);
    return st;
  }
  tt_input_value_t in[2];
  memset(in, 0, sizeof(in));
  in[0].buffer = buf;
  in[1].scalar_f = scalar;
  void *outs[1] = {out};
  st = tt_executable_run(exe, in, outs);
  tt_buffer_release(buf);
  tt_executable_release(exe);
  return st;
}

static void test_fusion_matches_unfused(void) {
  enum { N = 3000 }; /* several tiles, not a multiple of the tile */
  float *data = malloc(sizeof(float) * N), *a = malloc(sizeof(float) * N),
        *b = malloc(sizeof(float) * N);
  for (int i = 0; i < N; ++i) data[i] = (float)((i % 97) - 48) / 17.0f;
  tt_buffer_t *buf = NULL;
  CHECK_OK(tt_buffer_from_host(0, data, sizeof(float) * N, &buf));
  tt_shape_t s = {2, {30, 100}};
  tt_node_t *x = tt_node_create_param(buf, TT_F32, &s, 0);
  tt_node_t *k = tt_node_create_scalar(TT_F32, 0.5, 0, 0);
  /* y = tanh(x * k + x) - sigmoid(x); z = where(y > k, y, exp(-y)) */
  tt_node_t *m = binary(x, k, TT_BIN_MUL), *ad = binary(m, x, TT_BIN_ADD);
  tt_node_t *t = unary(ad, TT_UN_TANH), *sg = unary(x, TT_UN_SIGMOID);
  tt_node_t *y = binary(t, sg, TT_BIN_SUB), *gt = binary(y, k, TT_BIN_GT);
  tt_node_t *ny = unary(y, TT_UN_NEG), *e = unary(ny, TT_UN_EXP);
  tt_node_t *wops[3] = {gt, y, e}, *z = NULL;
  CHECK_OK(tt_node_create(TT_OP_WHERE, 0, wops, 3, NULL, 0, NULL, 0, &z));
  tt_graph_t *g = NULL;
  CHECK_OK(tt_graph_build(&z, 1, &g, NULL));
  tt_optimize_options_t off = {0, 1}, on = {1, 1};
  tt_graph_t *g0 = NULL, *g1 = NULL;
  CHECK_OK(tt_graph_optimize(g, &off, &g0));
  CHECK_OK(tt_graph_optimize(g, &on, &g1));
  CHECK(g0 && count_op(g0, TT_OP_FUSED) == 0 && g0->num_instrs == g->num_instrs);
  /* Everything but the two inputs becomes one fused instruction. */
  CHECK(g1 && count_op(g1, TT_OP_FUSED) == 1 && g1->num_instrs == 3);
  CHECK(g1 && g1->hash == g->hash && g1->key_size == g->key_size);
  if (g0 && g1) {
    CHECK_OK(run(g0, data, 0.5, a));
    CHECK_OK(run(g1, data, 0.5, b));
    int same = 1;
    for (int i = 0; i < N; ++i) same &= a[i] == b[i];
    CHECK(same);
    /* And against a plain C reference. */
    int close = 1;
    for (int i = 0; i < N; ++i) {
      float xv = data[i];
      float yv = tanhf(xv * 0.5f + xv) - 1.0f / (1.0f + expf(-xv));
      float zv = yv > 0.5f ? yv : expf(-yv);
      close &= fabsf(zv - b[i]) <= 1e-5f * (1.0f + fabsf(zv));
    }
    CHECK(close);
  } else {
    tt_graph_destroy(g0);
    tt_graph_destroy(g1);
  }
  tt_graph_destroy(g);
  tt_node_t *all[] = {x, k, m, ad, t, sg, y, gt, ny, e, z};
  for (size_t i = 0; i < sizeof(all) / sizeof(all[0]); ++i) tt_node_release(all[i]);
  tt_buffer_release(buf);
  free(data);
  free(a);
  free(b);
}

static void test_cse_simplify_dce(void) {
  float data[6] = {1, 2, 3, 4, 5, 6};
  tt_buffer_t *buf = NULL;
  CHECK_OK(tt_buffer_from_host(0, data, sizeof(data), &buf));
  tt_shape_t s = {2, {2, 3}};
  tt_node_t *x = tt_node_create_param(buf, TT_F32, &s, 0);
  tt_node_t *e1 = unary(x, TT_UN_EXP), *e2 = unary(x, TT_UN_EXP); /* duplicates */
  int64_t same_dims[2] = {2, 3}, flat[1] = {6}, perm[2] = {1, 0};
  tt_node_t *r = NULL, *r2 = NULL, *t1 = NULL, *t2 = NULL, *dead = NULL;
  CHECK_OK(tt_node_create(TT_OP_RESHAPE, 0, &e2, 1, same_dims, 2, NULL, 0, &r)); /* identity */
  CHECK_OK(tt_node_create(TT_OP_TRANSPOSE, 0, &e1, 1, perm, 2, NULL, 0, &t1));
  CHECK_OK(tt_node_create(TT_OP_TRANSPOSE, 0, &t1, 1, perm, 2, NULL, 0, &t2)); /* undoes t1 */
  CHECK_OK(tt_node_create(TT_OP_RESHAPE, 0, &x, 1, flat, 1, NULL, 0, &dead));
  tt_node_t *sum = binary(r, t2, TT_BIN_ADD);
  CHECK_OK(tt_node_create(TT_OP_RESHAPE, 0, &sum, 1, flat, 1, NULL, 0, &r2));
  tt_graph_t *g = NULL, *o = NULL;
  CHECK_OK(tt_graph_build(&r2, 1, &g, NULL));
  tt_optimize_options_t opts = {0, 1};
  CHECK_OK(tt_graph_optimize(g, &opts, &o));
  /* param, one exp, add, reshape: the duplicate exp, the identity reshape
   * and both transposes are gone. */
  CHECK(o && o->num_instrs == 4);
  CHECK(o && count_op(o, TT_OP_UNARY) == 1 && count_op(o, TT_OP_TRANSPOSE) == 0);
  if (o) {
    const tt_instr_t *add = &o->instrs[2];
    CHECK(add->op == TT_OP_BINARY && add->operands[0] == add->operands[1]);
  }
  tt_graph_destroy(o);
  tt_graph_destroy(g);
  tt_node_t *all[] = {x, e1, e2, r, t1, t2, dead, sum, r2};
  for (size_t i = 0; i < sizeof(all) / sizeof(all[0]); ++i) tt_node_release(all[i]);
  tt_buffer_release(buf);
}

static void test_verifier_catches_bad_graph(void) {
  float data[4] = {0};
  tt_buffer_t *buf = NULL;
  CHECK_OK(tt_buffer_from_host(0, data, sizeof(data), &buf));
  tt_shape_t s = {1, {4}};
  tt_node_t *x = tt_node_create_param(buf, TT_F32, &s, 0);
  tt_node_t *e = unary(x, TT_UN_EXP);
  tt_graph_t *g = NULL;
  CHECK_OK(tt_graph_build(&e, 1, &g, NULL));
  tt_work_t *w = NULL;
  CHECK_OK(tt_work_from_graph(g, &w));
  CHECK_OK(tt_verify_work(w, "test"));
  w->instrs[1].operands[0] = 1; /* an instruction reading itself */
  tt_status_t st = tt_verify_work(w, "test");
  CHECK(st && strstr(tt_status_message(st), "not earlier"));
  tt_status_free(st);
  tt_work_destroy(w);
  tt_graph_destroy(g);
  tt_node_release(e);
  tt_node_release(x);
  tt_buffer_release(buf);
}

int main(void) {
  CHECK_OK(tt_runtime_init(1));
  test_fusion_matches_unfused();
  test_cse_simplify_dce();
  test_verifier_catches_bad_graph();
  return tt_test_finish_();
}
