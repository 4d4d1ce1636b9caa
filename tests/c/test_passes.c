/* Unit tests for the graph passes: before/after structure, and fused
 * results equal to unfused results. */
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "test_harness.h"
#include "torchtpu/codegen.h"
#include "torchtpu/passes.h"
#include "torchtpu/torchtpu.h"

/* Pass options: fusion, verifier, no reduce fusion, no movement collapse,
 * no engine-only forms (the pair pass off unless a test turns it on). */
#define OPTS(fuse_, verify_, no_reduce_, no_collapse_, no_engine_)                   \
  ((tt_optimize_options_t){.fuse = fuse_, .verify = verify_, .no_reduce_fusion = no_reduce_, \
                           .no_collapse = no_collapse_, .no_engine_forms = no_engine_})

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

static uint32_t rng_state = 12345u;
static float rnd_unit(void) {
  rng_state = rng_state * 1664525u + 1013904223u;
  return (float)((rng_state >> 8) & 0xffffff) / 16777216.0f * 4.0f - 2.0f;
}

static int count_op(const tt_graph_t *g, tt_op_t op) {
  int c = 0;
  for (int32_t i = 0; i < g->num_instrs; ++i) c += g->instrs[i].op == op;
  return c;
}

/* Runs graph g (consumed) over one f32 param (data) and one scalar into
 * outs, one pointer per output. */
static tt_status_t run_outs(tt_graph_t *g, const float *data, double scalar, void **outs) {
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
  st = tt_executable_run(exe, in, outs);
  tt_buffer_release(buf);
  tt_executable_release(exe);
  return st;
}

static tt_status_t run(tt_graph_t *g, const float *data, double scalar, float *out) {
  void *outs[1] = {out};
  return run_outs(g, data, scalar, outs);
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
  tt_optimize_options_t off = OPTS(0, 1, 0, 0, 0), on = OPTS(1, 1, 0, 0, 0);
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

/* A cheap producer read by several groups (y = x * k, read by tanh(y) and
 * by exp(y) - y) is copied into each: no standalone multiply remains, and
 * the results equal the unfused graph's. An expensive one (tanh(y), read
 * by exp(-t) and sqrt(t * t)) is computed once, in a group of its own. */
static void test_fusion_duplicates_cheap_producer(void) {
  enum { N = 1000 };
  float *data = malloc(sizeof(float) * N), *a = malloc(sizeof(float) * 3 * N),
        *b = malloc(sizeof(float) * 3 * N);
  for (int i = 0; i < N; ++i) data[i] = (float)((i % 89) - 44) / 23.0f;
  tt_buffer_t *buf = NULL;
  CHECK_OK(tt_buffer_from_host(0, data, sizeof(float) * N, &buf));
  tt_shape_t s = {2, {10, 100}};
  tt_node_t *x = tt_node_create_param(buf, TT_F32, &s, 0);
  tt_node_t *k = tt_node_create_scalar(TT_F32, 0.5, 0, 0);
  tt_node_t *y = binary(x, k, TT_BIN_MUL);
  tt_node_t *t = unary(y, TT_UN_TANH);
  tt_node_t *e = unary(y, TT_UN_EXP), *d = binary(e, y, TT_BIN_SUB);
  tt_node_t *nt = unary(t, TT_UN_NEG), *t1 = unary(nt, TT_UN_EXP);
  tt_node_t *tt_ = binary(t, t, TT_BIN_MUL), *t2 = unary(tt_, TT_UN_SQRT);
  tt_node_t *roots[3] = {t1, d, t2};
  tt_graph_t *g = NULL;
  CHECK_OK(tt_graph_build(roots, 3, &g, NULL));
  tt_optimize_options_t off = OPTS(0, 1, 1, 0, 0), on = OPTS(1, 1, 1, 0, 0);
  tt_graph_t *g0 = NULL, *g1 = NULL;
  CHECK_OK(tt_graph_optimize(g, &off, &g0));
  CHECK_OK(tt_graph_optimize(g, &on, &g1));
  if (g0 && g1) {
    /* (y, tanh), (y, exp, sub), (neg, exp), (mul, sqrt). */
    CHECK(count_op(g1, TT_OP_FUSED) == 4);
    CHECK(count_op(g1, TT_OP_BINARY) == 0 && count_op(g1, TT_OP_UNARY) == 0);
    void *oa[3] = {a, a + N, a + 2 * N}, *ob[3] = {b, b + N, b + 2 * N};
    CHECK_OK(run_outs(g0, data, 0.5, oa));
    CHECK_OK(run_outs(g1, data, 0.5, ob));
    int same = 1;
    for (int i = 0; i < 3 * N; ++i) same &= a[i] == b[i];
    CHECK(same);
    CHECK(fabsf(b[N + 7] - (expf(data[7] * 0.5f) - data[7] * 0.5f)) < 1e-5f);
  }
  else {
    tt_graph_destroy(g0);
    tt_graph_destroy(g1);
  }
  tt_node_t *all[] = {x, k, y, t, e, d, nt, t1, tt_, t2};
  for (size_t i = 0; i < sizeof(all) / sizeof(all[0]); ++i) tt_node_release(all[i]);
  tt_graph_destroy(g);
  tt_buffer_release(buf);
  free(data);
  free(a);
  free(b);
}

/* A copy must not cost more memory passes than storing: x + x read by
 * three kernels is copied into each (3 x 2 reads against 2 + 1 + 3), read
 * by four it is stored (8 reads against 2 + 1 + 4). */
static void test_fusion_copy_limit(void) {
  float data[64] = {0};
  tt_buffer_t *buf = NULL;
  CHECK_OK(tt_buffer_from_host(0, data, sizeof(data), &buf));
  tt_shape_t s = {1, {64}};
  for (int readers = 3; readers <= 4; ++readers) {
    tt_node_t *x = tt_node_create_param(buf, TT_F32, &s, 0);
    tt_node_t *y = binary(x, x, TT_BIN_ADD);
    int64_t codes[4] = {TT_UN_EXP, TT_UN_TANH, TT_UN_NEG, TT_UN_SQRT};
    tt_node_t *r[4];
    for (int i = 0; i < readers; ++i) r[i] = unary(y, codes[i]);
    tt_graph_t *g = NULL, *g1 = NULL;
    CHECK_OK(tt_graph_build(r, readers, &g, NULL));
    tt_optimize_options_t on = OPTS(1, 1, 1, 0, 0);
    CHECK_OK(tt_graph_optimize(g, &on, &g1));
    if (g1) {
      if (readers == 3)
        CHECK(count_op(g1, TT_OP_FUSED) == 3 && count_op(g1, TT_OP_BINARY) == 0);
      else
        CHECK(count_op(g1, TT_OP_FUSED) == 0 && count_op(g1, TT_OP_BINARY) == 1);
    }
    tt_graph_destroy(g1);
    tt_graph_destroy(g);
    for (int i = 0; i < readers; ++i) tt_node_release(r[i]);
    tt_node_release(y);
    tt_node_release(x);
  }
  tt_buffer_release(buf);
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
  tt_optimize_options_t opts = OPTS(0, 1, 0, 0, 0);
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


/* A binary or where operand that is a broadcast of a value which already
 * broadcasts to the op's shape reads that value: z = where(x > k,
 * broadcast(k), x) + broadcast(row) keeps no broadcast; a unary of a
 * broadcast (its kernel does not broadcast) keeps its own. Values equal
 * the unsimplified graph's. */
static void test_broadcast_operands_fold(void) {
  enum { N = 2 * 3 * 40 };
  float data[N], a[N], b[N];
  for (int i = 0; i < N; ++i) data[i] = (float)((i % 23) - 11) / 5.0f;
  tt_buffer_t *buf = NULL;
  CHECK_OK(tt_buffer_from_host(0, data, sizeof(data), &buf));
  tt_shape_t s = {3, {2, 3, 40}};
  tt_node_t *x = tt_node_create_param(buf, TT_F32, &s, 0);
  tt_node_t *k = tt_node_create_scalar(TT_F32, 0.5, 0, 0);
  int64_t full[3] = {2, 3, 40};
  int64_t slice_attrs[9] = {0, 0, 0, 1, 1, 40, 1, 1, 1}; /* start, limit, step: x[0, 0] */
  tt_node_t *kb = NULL, *row = NULL, *rowb = NULL, *kb2 = NULL, *w = NULL;
  CHECK_OK(tt_node_create(TT_OP_BROADCAST, 0, &k, 1, full, 3, NULL, 0, &kb));
  CHECK_OK(tt_node_create(TT_OP_SLICE, 0, &x, 1, slice_attrs, 9, NULL, 0, &row));
  CHECK_OK(tt_node_create(TT_OP_BROADCAST, 0, &row, 1, full, 3, NULL, 0, &rowb));
  CHECK_OK(tt_node_create(TT_OP_BROADCAST, 0, &k, 1, full, 3, NULL, 0, &kb2));
  tt_node_t *gt = binary(x, k, TT_BIN_GT);
  tt_node_t *wops[3] = {gt, kb, x};
  CHECK_OK(tt_node_create(TT_OP_WHERE, 0, wops, 3, NULL, 0, NULL, 0, &w));
  tt_node_t *sum = binary(w, rowb, TT_BIN_ADD);
  tt_node_t *ex = unary(kb2, TT_UN_EXP); /* exp over a broadcast: kept */
  tt_node_t *z = binary(sum, ex, TT_BIN_MUL);
  tt_graph_t *g = NULL, *g0 = NULL, *g1 = NULL;
  CHECK_OK(tt_graph_build(&z, 1, &g, NULL));
  CHECK(g && count_op(g, TT_OP_BROADCAST) == 3);
  tt_optimize_options_t opts = OPTS(0, 1, 0, 0, 0);
  CHECK_OK(tt_graph_optimize(g, &opts, &g1));
  CHECK(g1 && count_op(g1, TT_OP_BROADCAST) == 1); /* only the unary's */
  if (g1) {
    for (int32_t i = 0; i < g1->num_instrs; ++i) {
      const tt_instr_t *in = &g1->instrs[i];
      if (in->op != TT_OP_BROADCAST) continue;
      CHECK(in->last_use >= 0 && g1->instrs[in->last_use].op == TT_OP_UNARY);
    }
  }
  /* Reference: the graph as built, run without passes. */
  CHECK_OK(tt_graph_build(&z, 1, &g0, NULL));
  if (g0 && g1) {
    CHECK_OK(run(g0, data, 0.5, a));
    CHECK_OK(run(g1, data, 0.5, b));
    int same = 1, close = 1;
    for (int i = 0; i < N; ++i) {
      same &= a[i] == b[i];
      float xv = data[i], wv = xv > 0.5f ? 0.5f : xv;
      float want = (wv + data[i % 40]) * expf(0.5f);
      close &= fabsf(want - b[i]) <= 1e-5f * (1.0f + fabsf(want));
    }
    CHECK(same && close);
  } else {
    tt_graph_destroy(g0);
    tt_graph_destroy(g1);
  }
  tt_graph_destroy(g);
  tt_node_t *all[] = {x, k, kb, row, rowb, kb2, gt, w, sum, ex, z};
  for (size_t i = 0; i < sizeof(all) / sizeof(all[0]); ++i) tt_node_release(all[i]);
  tt_buffer_release(buf);
}

/* transpose(dot(a, b)) becomes dot(b, a) with flipped transpose flags:
 * the rank-3 form (a batched product transposed) and the rank-2 form
 * (a weight gradient: x^T g reshaped to [in, out], then t()). No transpose
 * is left, the values equal the unoptimised graph's, and a
 * dot that has another user is left alone. */
static void test_transpose_of_dot_folds(void) {
  enum { B = 2, M = 5, K = 7, N = 3 };
  float xa[B * K * M], xb[B * K * N];
  for (int i = 0; i < B * K * M; ++i) xa[i] = rnd_unit();
  for (int i = 0; i < B * K * N; ++i) xb[i] = rnd_unit();
  for (int form = 0; form < 3; ++form) {
    int64_t bt = form == 0 ? B : 1;
    tt_buffer_t *ba = NULL, *bb = NULL;
    CHECK_OK(tt_buffer_from_host(0, xa, sizeof(float) * (size_t)(bt * K * M), &ba));
    CHECK_OK(tt_buffer_from_host(0, xb, sizeof(float) * (size_t)(bt * K * N), &bb));
    tt_shape_t sa = {3, {bt, K, M}}, sb = {3, {bt, K, N}};
    tt_node_t *a = tt_node_create_param(ba, TT_F32, &sa, 0);
    tt_node_t *b = tt_node_create_param(bb, TT_F32, &sb, 0);
    int64_t flags[2] = {1, 0}; /* a^T b: [bt, M, N] */
    tt_node_t *ops[2] = {a, b}, *d = NULL, *r = NULL, *t = NULL, *extra = NULL;
    CHECK_OK(tt_node_create(TT_OP_DOT, 0, ops, 2, flags, 2, NULL, 0, &d));
    tt_node_t *outs[2];
    int nout = 1;
    if (form == 0) {
      int64_t perm[3] = {0, 2, 1};
      CHECK_OK(tt_node_create(TT_OP_TRANSPOSE, 0, &d, 1, perm, 3, NULL, 0, &t));
    } else {
      int64_t dims[2] = {M, N}, perm[2] = {1, 0};
      CHECK_OK(tt_node_create(TT_OP_RESHAPE, 0, &d, 1, dims, 2, NULL, 0, &r));
      CHECK_OK(tt_node_create(TT_OP_TRANSPOSE, 0, &r, 1, perm, 2, NULL, 0, &t));
    }
    outs[0] = t;
    if (form == 2) { /* the dot is read by someone else too: no fold */
      extra = unary(d, TT_UN_NEG);
      outs[nout++] = extra;
    }
    tt_graph_t *g = NULL, *o = NULL, *plain = NULL;
    CHECK_OK(tt_graph_build(outs, nout, &g, NULL));
    tt_optimize_options_t on = OPTS(0, 1, 0, 0, 0);
    CHECK_OK(tt_graph_optimize(g, &on, &o));
    CHECK_OK(tt_graph_build(outs, nout, &plain, NULL)); /* unoptimised */
    if (o && plain) {
      CHECK(count_op(o, TT_OP_TRANSPOSE) == (form == 2 ? 1 : 0));
      CHECK(count_op(o, TT_OP_DOT) == 1);
      float got[2 * B * M * N], want[2 * B * M * N];
      memset(got, 0, sizeof got);
      memset(want, 1, sizeof want);
      tt_executable_t *e1 = NULL, *e2 = NULL;
      CHECK_OK(tt_executable_create(o, &e1));
      CHECK_OK(tt_executable_create(plain, &e2));
      if (e1 && e2) {
        tt_input_value_t in[2];
        memset(in, 0, sizeof(in));
        in[0].buffer = ba;
        in[1].buffer = bb;
        int64_t n0 = bt * M * N;
        void *og[2] = {got, got + n0}, *ow[2] = {want, want + n0};
        CHECK_OK(tt_executable_run(e1, in, og));
        CHECK_OK(tt_executable_run(e2, in, ow));
        CHECK(memcmp(got, want, sizeof(float) * (size_t)(n0 * nout)) == 0);
        /* and the transposed product itself, against a direct sum */
        int bad = 0;
        for (int64_t q = 0; q < bt; ++q)
          for (int n = 0; n < N; ++n)
            for (int m = 0; m < M; ++m) {
              double acc = 0;
              for (int k = 0; k < K; ++k) acc += (double)xa[(q * K + k) * M + m] * xb[(q * K + k) * N + n];
              bad += fabs(got[(q * N + n) * M + m] - acc) > 1e-5;
            }
        CHECK(bad == 0);
      }
      if (e1) tt_executable_release(e1);
      else tt_graph_destroy(o);
      if (e2) tt_executable_release(e2);
      else tt_graph_destroy(plain);
    }
    tt_graph_destroy(g);
    tt_node_t *all[] = {a, b, d, r, t, extra};
    for (size_t i = 0; i < sizeof(all) / sizeof(all[0]); ++i)
      if (all[i]) tt_node_release(all[i]);
    tt_buffer_release(ba);
    tt_buffer_release(bb);
  }
}

/* add(pad(a), pad(b)) of zero pads over adjacent spans of one dim becomes
 * pad(concat(a, b)); three of them (the qkv gradient) one concatenation.
 * Not folded: spans that leave a gap, a pad read elsewhere too. Results
 * equal the unoptimised graph's. */
static tt_node_t *pad0(tt_node_t *x, int64_t lo, int64_t hi) {
  int64_t ia[6] = {lo, 0, 0, hi, 0, 0};
  double f = 0.0;
  tt_node_t *n = NULL;
  CHECK_OK(tt_node_create(TT_OP_PAD, 0, &x, 1, ia, 6, &f, 1, &n));
  return n;
}

static void test_add_of_pads_concat(void) {
  enum { S = 4, E = 3 };
  float xs[3][S * E];
  tt_buffer_t *bufs[3];
  tt_node_t *p[3];
  tt_shape_t sh = {3, {1, S, E}};
  for (int k = 0; k < 3; ++k) {
    for (int i = 0; i < S * E; ++i) xs[k][i] = rnd_unit();
    CHECK_OK(tt_buffer_from_host(0, xs[k], sizeof xs[k], &bufs[k]));
    p[k] = tt_node_create_param(bufs[k], TT_F32, &sh, 0);
  }
  for (int form = 0; form < 3; ++form) {
    tt_node_t *made[8] = {0};
    int nm = 0, nouts = 1;
    tt_node_t *outs[2];
    if (form == 0) { /* k, then q, then v: adjacency either way round */
      tt_node_t *q = made[nm++] = pad0(p[0], 0, 2), *k = made[nm++] = pad0(p[1], 1, 1);
      tt_node_t *v = made[nm++] = pad0(p[2], 2, 0);
      tt_node_t *s1 = made[nm++] = binary(k, q, TT_BIN_ADD);
      outs[0] = made[nm++] = binary(s1, v, TT_BIN_ADD);
    } else if (form == 1) { /* a gap between the spans */
      tt_node_t *q = made[nm++] = pad0(p[0], 0, 2), *v = made[nm++] = pad0(p[2], 2, 0);
      outs[0] = made[nm++] = binary(q, v, TT_BIN_ADD);
    } else { /* the first pad has another reader */
      tt_node_t *q = made[nm++] = pad0(p[0], 0, 2), *k = made[nm++] = pad0(p[1], 1, 1);
      outs[0] = made[nm++] = binary(q, k, TT_BIN_ADD);
      outs[1] = made[nm++] = unary(q, TT_UN_NEG);
      nouts = 2;
    }
    tt_graph_t *g = NULL, *o = NULL;
    tt_node_t **inputs = NULL;
    CHECK_OK(tt_graph_build(outs, nouts, &g, &inputs));
    tt_optimize_options_t opts = OPTS(0, 1, 0, 0, 0);
    CHECK_OK(tt_graph_optimize(g, &opts, &o));
    if (!g || !o) continue;
    CHECK(count_op(o, TT_OP_CONCAT) == (form == 0 ? 1 : 0));
    CHECK(count_op(o, TT_OP_PAD) == (form == 0 ? 0 : 2));
    for (int32_t i = 0; i < o->num_instrs; ++i)
      if (o->instrs[i].op == TT_OP_CONCAT) CHECK(o->instrs[i].num_operands == 3);
    float got[2 * 3 * S * E], want[2 * 3 * S * E];
    int64_t n0 = 3 * S * E;
    memset(got, 0, sizeof got);
    memset(want, 1, sizeof want);
    tt_executable_t *e1 = NULL, *e2 = NULL;
    CHECK_OK(tt_executable_create(o, &e1));
    CHECK_OK(tt_executable_create(g, &e2));
    if (e1 && e2) {
      tt_input_value_t in[3];
      memset(in, 0, sizeof(in));
      for (int32_t i = 0; i < o->num_inputs && i < 3; ++i) in[i].buffer = inputs[i]->buffer;
      void *og[2] = {got, got + n0}, *ow[2] = {want, want + n0};
      CHECK_OK(tt_executable_run(e1, in, og));
      CHECK_OK(tt_executable_run(e2, in, ow));
      CHECK(memcmp(got, want, sizeof(float) * (size_t)(n0 * nouts)) == 0);
      if (form == 0) { /* the concatenation of the three, in span order */
        int bad = 0;
        for (int k = 0; k < 3; ++k)
          for (int i = 0; i < S * E; ++i) bad += got[k * S * E + i] != xs[k][i];
        CHECK(bad == 0);
      }
    }
    free(inputs);
    if (e1) tt_executable_release(e1);
    else tt_graph_destroy(o);
    if (e2) tt_executable_release(e2);
    else tt_graph_destroy(g);
    for (int k = 0; k < nm; ++k) tt_node_release(made[k]);
  }
  for (int k = 0; k < 3; ++k) {
    tt_node_release(p[k]);
    tt_buffer_release(bufs[k]);
  }
}

/* ---- reduction fusion ------------------------------------------------ */

static tt_node_t *reduce(tt_node_t *x, int64_t op, int64_t mask, int64_t keepdim,
                         tt_dtype_t dt) {
  int64_t ia[4] = {op, mask, keepdim, dt};
  tt_node_t *n = NULL;
  tt_status_t st = tt_node_create(TT_OP_REDUCE, 0, &x, 1, ia, 4, NULL, 0, &n);
  if (st) {
    fprintf(stderr, "reduce: %s\n", tt_status_message(st));
    tt_status_free(st);
  }
  return n;
}

static const tt_instr_t *find_fused_reduce(const tt_graph_t *g) {
  for (int32_t i = 0; i < g->num_instrs; ++i)
    if (tt_fused_is_reduce(&g->instrs[i])) return &g->instrs[i];
  return NULL;
}

/* Runs g (tier 1 first when tier1) with PARAM inputs taken in order from
 * params (host data of each input's size) and SCALAR inputs from scalars,
 * into out (the single output). */
static tt_status_t run_graph(tt_graph_t *g, void *const *params, const double *scalars,
                             void *out, int tier1, int32_t *out_kernels) {
  tt_executable_t *exe = NULL;
  TT_RETURN_IF_ERROR(tt_executable_create(g, &exe));
  if (tier1) tt_tier1_request(exe, 1);
  if (out_kernels) *out_kernels = tt_executable_num_kernels(exe);
  tt_input_value_t in[8];
  memset(in, 0, sizeof(in));
  tt_status_t st = NULL;
  int np = 0, ns = 0;
  for (int32_t k = 0; k < g->num_inputs && !st; ++k) {
    const tt_instr_t *p = &g->instrs[g->input_instr[k]];
    if (p->op == TT_OP_PARAM) {
      size_t bytes = (size_t)tt_shape_numel(&p->shape) * tt_dtype_size(p->dtype);
      st = tt_buffer_from_host(0, params[np++], bytes, &in[k].buffer);
    } else {
      in[k].scalar_f = scalars[ns++];
    }
  }
  void *outs[1] = {out};
  if (!st) st = tt_executable_run(exe, in, outs);
  for (int32_t k = 0; k < g->num_inputs; ++k)
    if (in[k].buffer) tt_buffer_release(in[k].buffer);
  tt_executable_release(exe);
  return st;
}

/* layer_norm's shape: var = sum((x - mean)^2) * (1/n); y = (x - mean) *
 * rsqrt(var + eps). The variance becomes one fused reduction (x - mean
 * recomputed in it, the epilogue * 1/n, + eps, rsqrt included) and the
 * output one fused elementwise kernel; the mean of the raw input stays a
 * plain reduction. Results are bit-identical to the unfused graph. */
static void test_reduce_fusion_layer_norm(void) {
  enum { A = 6, R = 40 };
  float data[A * R], y0[A * R], y1[A * R], y2[A * R];
  for (int i = 0; i < A * R; ++i) data[i] = (float)((i * 37) % 101) / 13.0f - 3.0f;
  tt_buffer_t *buf = NULL;
  CHECK_OK(tt_buffer_from_host(0, data, sizeof(data), &buf));
  tt_shape_t s = {2, {A, R}};
  tt_node_t *x = tt_node_create_param(buf, TT_F32, &s, 0);
  tt_node_t *k = tt_node_create_scalar(TT_F32, 1.0 / R, 0, 0);
  tt_node_t *eps = tt_node_create_scalar(TT_F32, 1e-5, 0, 0);
  tt_node_t *mean = reduce(x, TT_RED_MEAN, 2, 1, TT_F32);
  tt_node_t *d = binary(x, mean, TT_BIN_SUB), *sq = binary(d, d, TT_BIN_MUL);
  tt_node_t *v = reduce(sq, TT_RED_SUM, 2, 1, TT_F32);
  tt_node_t *vk = binary(v, k, TT_BIN_MUL), *ve = binary(vk, eps, TT_BIN_ADD);
  tt_node_t *r = unary(ve, TT_UN_RSQRT), *y = binary(d, r, TT_BIN_MUL);
  tt_graph_t *g = NULL;
  CHECK_OK(tt_graph_build(&y, 1, &g, NULL));
  tt_optimize_options_t none = OPTS(0, 1, 0, 0, 0), elem = OPTS(1, 1, 1, 0, 0), both = OPTS(1, 1, 0, 0, 0);
  tt_graph_t *g0 = NULL, *g1 = NULL, *g2 = NULL;
  CHECK_OK(tt_graph_optimize(g, &none, &g0));
  CHECK_OK(tt_graph_optimize(g, &elem, &g1));
  CHECK_OK(tt_graph_optimize(g, &both, &g2));
  CHECK(g && g->num_instrs == 11);
  /* Elementwise fusion alone: x - mean is copied into both its readers'
   * kernels (the squares the reduction reads, and the output), where it
   * used to be stored; the [A, 1] epilogue is the third kernel. */
  CHECK(g1 && count_op(g1, TT_OP_REDUCE) == 2 && g1->num_instrs == 8 &&
        count_op(g1, TT_OP_FUSED) == 3);
  /* x, 1/n, eps, mean, fused variance->rsqrt, fused output. */
  CHECK(g2 && g2->num_instrs == 6 && count_op(g2, TT_OP_REDUCE) == 1 &&
        count_op(g2, TT_OP_FUSED) == 2);
  const tt_instr_t *fr = g2 ? find_fused_reduce(g2) : NULL;
  CHECK(fr != NULL);
  if (fr) {
    const tt_fused_t *f = fr->fused;
    /* sub, mul | sum | mul, add, rsqrt over inputs x, mean, 1/n, eps. */
    CHECK(f->num_ops == 6 && f->ops[2].op == TT_OP_REDUCE && f->ops[2].code == TT_RED_SUM);
    CHECK(f->ops[5].op == TT_OP_UNARY && f->ops[5].code == TT_UN_RSQRT);
    CHECK(fr->num_operands == 4 && fr->shape.rank == 2 && fr->shape.dims[1] == 1);
    tt_shape_t dom = tt_fused_domain(fr);
    CHECK(tt_shape_equal(&dom, &s));
  }
  if (g0 && g1 && g2) {
    void *params[1] = {data};
    double scalars[2] = {1.0 / R, 1e-5};
    CHECK_OK(run_graph(g0, params, scalars, y0, 0, NULL));
    CHECK_OK(run_graph(g1, params, scalars, y1, 0, NULL));
    CHECK_OK(run_graph(g2, params, scalars, y2, 0, NULL));
    CHECK(memcmp(y0, y2, sizeof(y0)) == 0 && memcmp(y1, y2, sizeof(y0)) == 0);
  } else {
    tt_graph_destroy(g0);
    tt_graph_destroy(g1);
    tt_graph_destroy(g2);
  }
  tt_graph_destroy(g);
  tt_node_t *all[] = {x, k, eps, mean, d, sq, v, vk, ve, r, y};
  for (size_t i = 0; i < sizeof(all) / sizeof(all[0]); ++i) tt_node_release(all[i]);
  tt_buffer_release(buf);
}

typedef struct reduce_case_s {
  int rank;
  int64_t dims[4];
  int64_t mask, keepdim, op;
  int fused; /* whether the pass should make a fused reduction */
} reduce_case_t;

/* y = reduce(op, exp((x - max(x)) * k) + x, dims) * k + k for random x:
 * the prologue reads x and a broadcast keepdim max, the epilogue a scalar.
 * Fused (tier 0) equals unfused bit for bit in f32 (bf16: within 1 ulp);
 * tier 1 (rows and columns) within float rounding. */
static void test_reduce_fusion_matches_unfused(void) {
  static const reduce_case_t cases[] = {
      {2, {37, 1000}, 2, 1, TT_RED_SUM, 1},      /* innermost */
      {2, {2, 70000}, 2, 0, TT_RED_MEAN, 1},     /* rows longer than a chunk */
      {3, {5, 3, 200}, 1, 1, TT_RED_MAX, 1},     /* outer dim, B = 600 */
      {2, {1100, 130}, 1, 0, TT_RED_SUM, 1},     /* outer, row blocks merged */
      {4, {4, 1, 5, 256}, 4, 0, TT_RED_MIN, 1},  /* middle dim, size-1 dim */
      {2, {8, 33}, 3, 0, TT_RED_SUM, 1},         /* everything: a scalar */
      {3, {3, 4, 50}, 6, 1, TT_RED_MEAN, 1},     /* two adjacent dims */
      {2, {50, 4}, 1, 1, TT_RED_SUM, 0},         /* outer, rows too short */
      {3, {6, 7, 8}, 5, 1, TT_RED_SUM, 0},       /* two separate runs */
  };
  for (size_t ci = 0; ci < sizeof(cases) / sizeof(cases[0]); ++ci) {
    for (int di = 0; di < 2; ++di) {
      const reduce_case_t *c = &cases[ci];
      tt_dtype_t dt = di ? TT_BF16 : TT_F32;
      tt_shape_t s = {c->rank, {0}};
      for (int d = 0; d < c->rank; ++d) s.dims[d] = c->dims[d];
      int64_t n = tt_shape_numel(&s);
      size_t esz = tt_dtype_size(dt);
      uint8_t *data = malloc((size_t)n * esz);
      for (int64_t i = 0; i < n; ++i) {
        float v = rnd_unit();
        if (dt == TT_BF16) ((uint16_t *)data)[i] = tt_f32_to_bf16(v);
        else ((float *)data)[i] = v;
      }
      tt_buffer_t *buf = NULL;
      CHECK_OK(tt_buffer_from_host(0, data, (size_t)n * esz, &buf));
      tt_node_t *x = tt_node_create_param(buf, dt, &s, 0);
      tt_node_t *k = tt_node_create_scalar(dt, 0.75, 0, 0);
      tt_node_t *m = reduce(x, TT_RED_MAX, c->mask, 1, dt);
      tt_node_t *d = binary(x, m, TT_BIN_SUB), *dk = binary(d, k, TT_BIN_MUL);
      tt_node_t *e = unary(dk, TT_UN_EXP), *t = binary(e, x, TT_BIN_ADD);
      tt_node_t *red = reduce(t, c->op, c->mask, c->keepdim, dt);
      tt_node_t *rk = binary(red, k, TT_BIN_MUL), *y = binary(rk, k, TT_BIN_ADD);
      tt_graph_t *g = NULL, *g0 = NULL, *g1 = NULL;
      CHECK_OK(tt_graph_build(&y, 1, &g, NULL));
      tt_optimize_options_t off = OPTS(1, 1, 1, 0, 0), on = OPTS(1, 1, 0, 0, 0);
      CHECK_OK(tt_graph_optimize(g, &off, &g0));
      CHECK_OK(tt_graph_optimize(g, &on, &g1));
      const tt_instr_t *fr = g1 ? find_fused_reduce(g1) : NULL;
      if ((fr != NULL) != c->fused)
        fprintf(stderr, "case %zu dtype %s: fused reduction %s\n", ci, tt_dtype_name(dt),
                fr ? "made" : "missing");
      CHECK((fr != NULL) == c->fused);
      /* Fused: the reduction and its epilogue are one instruction. */
      if (fr) CHECK(count_op(g1, TT_OP_REDUCE) == 1 && fr->fused->num_ops == 7);
      int64_t on_n = 1;
      for (int dd = 0; dd < c->rank; ++dd)
        if (!((c->mask >> dd) & 1)) on_n *= c->dims[dd];
      uint8_t *a = calloc((size_t)on_n, esz), *b = calloc((size_t)on_n, esz),
              *t1 = calloc((size_t)on_n, esz);
      if (g0 && g1) {
        void *params[1] = {data};
        double scalars[1] = {0.75};
        int32_t kernels = 0;
        CHECK_OK(run_graph(g0, params, scalars, a, 0, NULL));
        CHECK_OK(run_graph(g1, params, scalars, b, 0, NULL));
        int bad = 0;
        for (int64_t i = 0; i < on_n; ++i) {
          float va = dt == TT_BF16 ? tt_bf16_to_f32(((uint16_t *)a)[i]) : ((float *)a)[i];
          float vb = dt == TT_BF16 ? tt_bf16_to_f32(((uint16_t *)b)[i]) : ((float *)b)[i];
          float tol = dt == TT_BF16 ? fabsf(va) * (1.0f / 128) : 0.0f;
          bad += !(fabsf(va - vb) <= tol);
        }
        if (bad) fprintf(stderr, "case %zu dtype %s: %d results differ\n", ci, tt_dtype_name(dt), bad);
        CHECK(bad == 0);
        /* Tier 1: generated C for every fused kernel it supports. */
        tt_graph_t *g2 = NULL;
        CHECK_OK(tt_graph_optimize(g, &on, &g2));
        if (g2) {
          int supported = fr && tt_codegen_supported(g2, (int32_t)(find_fused_reduce(g2) - g2->instrs));
          CHECK_OK(run_graph(g2, params, scalars, t1, 1, &kernels));
          /* Every single-run form has a tier-1 kernel: innermost
           * (rows) and outer or middle dims (columns). */
          CHECK(supported == c->fused);
          CHECK(!supported || kernels >= 1);
          bad = 0;
          for (int64_t i = 0; i < on_n; ++i) {
            float va = dt == TT_BF16 ? tt_bf16_to_f32(((uint16_t *)a)[i]) : ((float *)a)[i];
            float vt = dt == TT_BF16 ? tt_bf16_to_f32(((uint16_t *)t1)[i]) : ((float *)t1)[i];
            bad += !(fabsf(va - vt) <= fabsf(va) * (dt == TT_BF16 ? 1.0f / 64 : 1e-5f) + 1e-6f);
          }
          if (bad) fprintf(stderr, "case %zu dtype %s: %d tier-1 results differ\n", ci, tt_dtype_name(dt), bad);
          CHECK(bad == 0);
        }
      } else {
        tt_graph_destroy(g0);
        tt_graph_destroy(g1);
      }
      free(a);
      free(b);
      free(t1);
      tt_graph_destroy(g);
      tt_node_t *all[] = {x, k, m, d, dk, e, t, red, rk, y};
      for (size_t i = 0; i < sizeof(all) / sizeof(all[0]); ++i) tt_node_release(all[i]);
      tt_buffer_release(buf);
      free(data);
    }
  }
}

/* ---- buffer planning --------------------------------------------------- */

static void test_buffer_plan_packs_by_liveness(void) {
  /* Five buffers: 0 and 1 overlap in time, 2 starts after 0 dies, 3 after
   * 1 and 2, 4 lives throughout. */
  size_t sizes[5] = {4096, 1000, 4000, 5000, 64};
  int32_t start[5] = {0, 1, 3, 5, 0}, end[5] = {2, 4, 4, 6, 6};
  size_t off[5] = {0}, arena = 0;
  CHECK_OK(tt_buffer_plan(5, sizes, start, end, off, &arena));
  int ok = 1;
  for (int i = 0; i < 5; ++i) {
    ok &= off[i] % 64 == 0 && off[i] + sizes[i] <= arena;
    for (int j = 0; j < i; ++j) {
      int overlap_t = start[i] <= end[j] && start[j] <= end[i];
      int overlap_m = off[i] < off[j] + sizes[j] && off[j] < off[i] + sizes[i];
      ok &= !(overlap_t && overlap_m);
    }
  }
  CHECK(ok);
  /* Live at once at most: 4096 + 1024 + 64 or 1024 + 4032 + 64 or 5056 + 64. */
  CHECK(arena <= 5120 + 1024 + 64 && arena < 4096 + 1024 + 4032 + 5056 + 64);
}

/* Graph g optimised without fusion into two executables: e[0] with
 * TORCHTPU_BUFFER_PLAN=0 (allocate and free per intermediate), e[1] with
 * the buffer plan. An entry is NULL when it could not be made (counted as
 * a failure). */
typedef struct {
  tt_graph_t *g[2];
  tt_executable_t *e[2];
} plan_pair_t;

static plan_pair_t plan_pair_make(const tt_graph_t *g) {
  plan_pair_t p = {{NULL, NULL}, {NULL, NULL}};
  tt_optimize_options_t off = OPTS(0, 1, 0, 0, 0);
  for (int k = 0; k < 2; ++k) {
    CHECK_OK(tt_graph_optimize(g, &off, &p.g[k]));
    if (k == 0) setenv("TORCHTPU_BUFFER_PLAN", "0", 1);
    tt_config_reload(); /* the engine reads its environment once */
    if (p.g[k]) CHECK_OK(tt_executable_create(p.g[k], &p.e[k]));
    unsetenv("TORCHTPU_BUFFER_PLAN");
    tt_config_reload();
  }
  return p;
}

static void plan_pair_free(plan_pair_t *p) {
  for (int k = 0; k < 2; ++k) {
    if (p->e[k]) tt_executable_release(p->e[k]); /* owns its graph */
    else tt_graph_destroy(p->g[k]);
  }
}

/* A chain of unfused elementwise ops on 64 KiB values: the plan keeps two
 * buffers' worth (each op reads the previous value while writing its
 * own), and results equal unplanned execution. */
static void test_buffer_plan_reuses_and_matches(void) {
  enum { N = 16384 };
  float *data = malloc(sizeof(float) * N), *a = malloc(sizeof(float) * N),
        *b = malloc(sizeof(float) * N);
  for (int i = 0; i < N; ++i) data[i] = rnd_unit();
  tt_buffer_t *buf = NULL;
  CHECK_OK(tt_buffer_from_host(0, data, sizeof(float) * N, &buf));
  tt_shape_t s = {2, {128, 128}};
  tt_node_t *x = tt_node_create_param(buf, TT_F32, &s, 0);
  tt_node_t *n[8];
  n[0] = unary(x, TT_UN_EXP);
  n[1] = unary(n[0], TT_UN_TANH);
  n[2] = binary(n[1], x, TT_BIN_ADD);
  n[3] = unary(n[2], TT_UN_SIGMOID);
  int64_t dims[2] = {16384, 1}, perm[2] = {1, 0};
  n[4] = NULL;
  CHECK_OK(tt_node_create(TT_OP_RESHAPE, 0, &n[3], 1, dims, 2, NULL, 0, &n[4]));
  n[5] = NULL;
  CHECK_OK(tt_node_create(TT_OP_TRANSPOSE, 0, &n[4], 1, perm, 2, NULL, 0, &n[5]));
  n[6] = unary(n[5], TT_UN_NEG);
  n[7] = reduce(n[6], TT_RED_SUM, 2, 0, TT_F32); /* [1] */
  tt_node_t *y = binary(n[7], n[0], TT_BIN_MUL); /* n[0] lives to the end */
  tt_graph_t *g = NULL;
  CHECK_OK(tt_graph_build(&y, 1, &g, NULL));
  plan_pair_t pp = plan_pair_make(g);
  tt_executable_t *e0 = pp.e[0], *e1 = pp.e[1];
  if (e0 && e1) {
    size_t v = sizeof(float) * N;
    CHECK(tt_executable_arena_bytes(e0) == 0);
    /* exp, tanh, add, sigmoid, transpose, neg, sum: the reshape aliases. */
    CHECK(tt_executable_planned_bytes(e1) == 6 * v + sizeof(float));
    CHECK(tt_executable_arena_bytes(e1) <= 3 * v + 1024);
    tt_input_value_t in[1];
    memset(in, 0, sizeof(in));
    in[0].buffer = buf;
    void *o0[1] = {a}, *o1[1] = {b};
    CHECK_OK(tt_executable_run(e0, in, o0));
    CHECK_OK(tt_executable_run(e1, in, o1));
    CHECK(memcmp(a, b, sizeof(float) * N) == 0);
  }
  plan_pair_free(&pp);
  tt_graph_destroy(g);
  for (int i = 0; i < 8; ++i) tt_node_release(n[i]);
  tt_node_release(y);
  tt_node_release(x);
  tt_buffer_release(buf);
  free(data);
  free(a);
  free(b);
}

/* A value read both through a reshape and directly after the reshape's
 * readers (an activation used as [b, s, d] and as [b*s, d]): with the plan
 * the reshape shares the value's bytes (no copy: planned bytes count the
 * value once) and the slot lives until the last direct reader; results
 * equal unplanned execution, where the reshape copies. */
static void test_buffer_plan_shared_reshape(void) {
  enum { N = 4096 };
  float *data = malloc(sizeof(float) * N), *a = malloc(sizeof(float) * 2 * N),
        *b = malloc(sizeof(float) * 2 * N);
  for (int i = 0; i < N; ++i) data[i] = rnd_unit();
  tt_buffer_t *buf = NULL;
  CHECK_OK(tt_buffer_from_host(0, data, sizeof(float) * N, &buf));
  tt_shape_t s = {2, {64, 64}};
  tt_node_t *x = tt_node_create_param(buf, TT_F32, &s, 0);
  tt_node_t *v = unary(x, TT_UN_EXP);
  int64_t dims[1] = {N};
  tt_node_t *r = NULL;
  CHECK_OK(tt_node_create(TT_OP_RESHAPE, 0, &v, 1, dims, 1, NULL, 0, &r));
  tt_node_t *t = unary(r, TT_UN_TANH);                 /* reads the reshape */
  tt_node_t *big = unary(t, TT_UN_SIGMOID);           /* a value that may reuse a slot */
  tt_node_t *late = binary(v, v, TT_BIN_MUL);         /* reads v after the reshape */
  tt_node_t *outs[2] = {big, late};
  tt_graph_t *g = NULL;
  CHECK_OK(tt_graph_build(outs, 2, &g, NULL));
  plan_pair_t pp = plan_pair_make(g);
  tt_executable_t *e0 = pp.e[0], *e1 = pp.e[1];
  if (e0 && e1) {
    size_t vb = sizeof(float) * N;
    /* exp and tanh are intermediates; the reshape adds nothing. */
    CHECK(tt_executable_planned_bytes(e1) == 2 * vb);
    CHECK(tt_executable_arena_bytes(e1) >= 2 * vb); /* exp lives past tanh */
    tt_input_value_t in[1];
    memset(in, 0, sizeof(in));
    in[0].buffer = buf;
    void *o0[2] = {a, a + N}, *o1[2] = {b, b + N};
    CHECK_OK(tt_executable_run(e0, in, o0));
    CHECK_OK(tt_executable_run(e1, in, o1));
    CHECK(memcmp(a, b, sizeof(float) * 2 * N) == 0);
    int bad = 0;
    for (int i = 0; i < N; ++i) bad += fabsf(b[N + i] - expf(data[i]) * expf(data[i])) > 1e-4f * b[N + i];
    CHECK(bad == 0);
  }
  plan_pair_free(&pp);
  tt_graph_destroy(g);
  tt_node_t *all[] = {x, v, r, t, big, late};
  for (size_t i = 0; i < sizeof(all) / sizeof(all[0]); ++i) tt_node_release(all[i]);
  tt_buffer_release(buf);
  free(data);
  free(a);
  free(b);
}

/* Contiguous slices (q, k, v out of one [3, ...] value, and a slice of a
 * graph input) read their range in place with the plan: planned bytes
 * leave them out, the sliced value's slot outlives their last reader, and
 * results equal unplanned execution, where every slice copies. A slice
 * cutting an inner dim is not contiguous and still copies. */
static tt_node_t *slice3(tt_node_t *x, int64_t a0, int64_t a1, int64_t b0, int64_t b1) {
  int64_t ia[9] = {a0, b0, 0, a1, b1, 128, 1, 1, 1};
  tt_node_t *n = NULL;
  tt_status_t st = tt_node_create(TT_OP_SLICE, 0, &x, 1, ia, 9, NULL, 0, &n);
  if (st) tt_status_free(st);
  return n;
}

static void test_buffer_plan_slice_alias(void) {
  enum { P = 128 * 128, N = 3 * P }; /* 3-plane values too large to hoist */
  float *data = malloc(sizeof(float) * N), *a = malloc(sizeof(float) * 5 * P),
        *b = malloc(sizeof(float) * 5 * P);
  for (int i = 0; i < N; ++i) data[i] = rnd_unit();
  tt_buffer_t *buf = NULL;
  CHECK_OK(tt_buffer_from_host(0, data, sizeof(float) * N, &buf));
  tt_shape_t s = {3, {3, 128, 128}};
  tt_node_t *x = tt_node_create_param(buf, TT_F32, &s, 0);
  tt_node_t *v = unary(x, TT_UN_EXP);
  tt_node_t *half = slice3(v, 0, 3, 0, 64); /* cuts dim 1: copies */
  tt_node_t *o3 = unary(half, TT_UN_NEG);
  tt_node_t *q = slice3(v, 0, 1, 0, 128), *k = slice3(v, 1, 2, 0, 128), *w = slice3(v, 2, 3, 0, 128);
  tt_node_t *qk = binary(q, k, TT_BIN_ADD);
  tt_node_t *o0 = binary(qk, w, TT_BIN_ADD); /* v's last direct reader is w, here */
  /* Three-plane values made after it, which could take v's slot if the
   * slices' late readers did not keep it: */
  tt_node_t *xx = binary(x, x, TT_BIN_ADD);
  tt_node_t *sg = unary(xx, TT_UN_SIGMOID);
  tt_node_t *m = slice3(sg, 0, 1, 0, 128);
  tt_node_t *o1 = binary(m, k, TT_BIN_MUL);  /* reads k late */
  tt_node_t *sx = slice3(x, 2, 3, 0, 128);    /* of the graph input */
  tt_node_t *o2 = binary(w, sx, TT_BIN_ADD); /* reads w late */
  tt_node_t *outs[4] = {o3, o0, o1, o2};
  tt_graph_t *g = NULL;
  CHECK_OK(tt_graph_build(outs, 4, &g, NULL));
  plan_pair_t pp = plan_pair_make(g);
  tt_executable_t *e0 = pp.e[0], *e1 = pp.e[1];
  if (e0 && e1) {
    size_t pb = sizeof(float) * P;
    /* exp, x + x, sigmoid (3 planes each), the half slice (1.5), q + k. */
    CHECK(tt_executable_planned_bytes(e1) == 9 * pb + 3 * pb / 2 + pb);
    tt_input_value_t in[1];
    memset(in, 0, sizeof(in));
    in[0].buffer = buf;
    void *r0[4] = {a, a + 3 * P / 2, a + 5 * P / 2, a + 7 * P / 2};
    void *r1[4] = {b, b + 3 * P / 2, b + 5 * P / 2, b + 7 * P / 2};
    CHECK_OK(tt_executable_run(e0, in, r0));
    CHECK_OK(tt_executable_run(e1, in, r1));
    CHECK(memcmp(a, b, sizeof(float) * 9 * P / 2) == 0);
    int bad = 0;
    for (int i = 0; i < P; ++i) {
      float e0v = expf(data[i]), e1v = expf(data[P + i]), e2v = expf(data[2 * P + i]);
      float want[3] = {e0v + e1v + e2v, 1.0f / (1.0f + expf(-2.0f * data[i])) * e1v,
                       e2v + data[2 * P + i]};
      for (int o = 0; o < 3; ++o) {
        float got = b[3 * P / 2 + o * P + i];
        bad += fabsf(got - want[o]) > 1e-4f * fabsf(want[o]) + 1e-6f;
      }
    }
    CHECK(bad == 0);
  }
  plan_pair_free(&pp);
  tt_graph_destroy(g);
  tt_node_t *all[] = {x, v, half, o3, q, k, w, qk, o0, xx, sg, m, o1, sx, o2};
  for (size_t i = 0; i < sizeof(all) / sizeof(all[0]); ++i) tt_node_release(all[i]);
  tt_buffer_release(buf);
  free(data);
  free(a);
  free(b);
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

/* Tier 1 generates the unary ops with parameters (hardtanh as relu6,
 * leaky_relu, hardsigmoid, hardswish) in a batch-norm-like broadcast
 * program (per-channel [C,1,1] values read once per H*W row), bit for bit
 * tier 0's results, NaN and infinities included. */
static tt_node_t *unary_ab(tt_node_t *x, int64_t code, double alpha, double beta) {
  tt_node_t *n = NULL;
  double f[2] = {alpha, beta};
  tt_status_t st = tt_node_create(TT_OP_UNARY, 0, &x, 1, &code, 1, f, 2, &n);
  if (st) tt_status_free(st);
  return n;
}

static void test_tier1_param_unary(void) {
  enum { C = 3, H = 7, W = 5, N = 2 * C * H * W };
  static const struct { int64_t code; double alpha, beta; } cases[] = {
      {TT_UN_HARDTANH, 0.0, 6.0}, {TT_UN_HARDTANH, -0.3, 0.7},
      {TT_UN_HARDTANH, -INFINITY, 1.5}, {TT_UN_LEAKY_RELU, 0.01, 0.0},
      {TT_UN_HARDSIGMOID, 0.0, 0.0}, {TT_UN_HARDSWISH, 0.0, 0.0},
  };
  float data[N], scale[C] = {0.5f, 3.0f, -2.0f}, a[N], b[N];
  for (int i = 0; i < N; ++i) data[i] = rnd_unit() * 3.0f;
  data[5] = NAN;
  data[6] = INFINITY;
  data[7] = -INFINITY;
  data[8] = 0.0f;
  tt_shape_t xs = {4, {2, C, H, W}}, ps = {3, {C, 1, 1}};
  for (size_t ci = 0; ci < sizeof(cases) / sizeof(cases[0]); ++ci) {
    tt_buffer_t *bx = NULL, *bp = NULL;
    CHECK_OK(tt_buffer_from_host(0, data, sizeof(data), &bx));
    CHECK_OK(tt_buffer_from_host(0, scale, sizeof(scale), &bp));
    tt_node_t *x = tt_node_create_param(bx, TT_F32, &xs, 0);
    tt_node_t *p = tt_node_create_param(bp, TT_F32, &ps, 0);
    tt_node_t *m = binary(x, p, TT_BIN_MUL), *ad = binary(m, p, TT_BIN_ADD);
    tt_node_t *y = unary_ab(ad, cases[ci].code, cases[ci].alpha, cases[ci].beta);
    tt_graph_t *g = NULL, *g0 = NULL, *g1 = NULL;
    CHECK_OK(tt_graph_build(&y, 1, &g, NULL));
    tt_optimize_options_t on = OPTS(1, 1, 0, 0, 0);
    CHECK_OK(tt_graph_optimize(g, &on, &g0));
    CHECK_OK(tt_graph_optimize(g, &on, &g1));
    if (g0 && g1) {
      CHECK(count_op(g0, TT_OP_FUSED) == 1);
      void *params[2] = {data, scale};
      int32_t kernels = 0;
      CHECK_OK(run_graph(g0, params, NULL, a, 0, NULL));
      CHECK_OK(run_graph(g1, params, NULL, b, 1, &kernels));
      CHECK(kernels == 1);
      int bad = 0;
      for (int i = 0; i < N; ++i) bad += !(isnan(a[i]) ? isnan(b[i]) : memcmp(&a[i], &b[i], 4) == 0);
      if (bad) fprintf(stderr, "param unary case %zu: %d tier-1 results differ\n", ci, bad);
      CHECK(bad == 0);
      if (cases[ci].code == TT_UN_HARDTANH && cases[ci].beta == 6.0) {
        CHECK(isnan(a[5]) && a[6] == 6.0f && a[7] == 0.0f);
      }
    } else {
      tt_graph_destroy(g0);
      tt_graph_destroy(g1);
    }
    tt_graph_destroy(g);
    tt_node_t *all[] = {x, p, m, ad, y};
    for (size_t i = 0; i < sizeof(all) / sizeof(all[0]); ++i) tt_node_release(all[i]);
    tt_buffer_release(bx);
    tt_buffer_release(bp);
  }
}

/* Convolution epilogues (executable.c): conv -> fused(relu(conv + r'))
 * where r' is a reshape of a computed value r. Planned, the reshape
 * aliases r and the convolution runs the fused instruction as it stores
 * its output; unplanned, the reshape is a copy made after the
 * convolution (r is read again later), so the fused instruction runs at
 * its own place, in place over the convolution's buffer. Both equal the
 * run with epilogues off, bit for bit. */
static void test_conv_epilogue_plans(void) {
  enum { XN = 4 * 64 * 64, WN = 8 * 4 * 9, BN = 512 * 64 };
  float *xd = malloc(sizeof(float) * XN), *wd = malloc(sizeof(float) * WN),
        *bd = malloc(sizeof(float) * BN);
  for (int i = 0; i < XN; ++i) xd[i] = rnd_unit();
  for (int i = 0; i < WN; ++i) wd[i] = rnd_unit() * 0.3f;
  for (int i = 0; i < BN; ++i) bd[i] = rnd_unit() * 0.5f;
  tt_buffer_t *bx = NULL, *bw = NULL, *bb = NULL;
  CHECK_OK(tt_buffer_from_host(0, xd, sizeof(float) * XN, &bx));
  CHECK_OK(tt_buffer_from_host(0, wd, sizeof(float) * WN, &bw));
  CHECK_OK(tt_buffer_from_host(0, bd, sizeof(float) * BN, &bb));
  tt_shape_t sx = {4, {1, 4, 64, 64}}, sw = {4, {8, 4, 3, 3}}, sb = {2, {512, 64}};
  tt_node_t *x = tt_node_create_param(bx, TT_F32, &sx, 0);
  tt_node_t *w = tt_node_create_param(bw, TT_F32, &sw, 0);
  tt_node_t *big = tt_node_create_param(bb, TT_F32, &sb, 0);
  tt_node_t *r = unary(big, TT_UN_EXP); /* 128 KiB: not hoisted */
  tt_node_t *a = unary(r, TT_UN_NEG);   /* output 0: r is scheduled first */
  tt_node_t *cops[2] = {x, w}, *conv = NULL, *rv = NULL;
  int64_t ca[7] = {1, 1, 1, 1, 1, 1, 1};
  CHECK_OK(tt_node_create(TT_OP_CONV2D, 0, cops, 2, ca, 7, NULL, 0, &conv));
  int64_t dims[4] = {1, 8, 64, 64};
  CHECK_OK(tt_node_create(TT_OP_RESHAPE, 0, &r, 1, dims, 4, NULL, 0, &rv));
  tt_node_t *sum = binary(conv, rv, TT_BIN_ADD), *f = unary(sum, TT_UN_RELU);
  tt_node_t *late = reduce(r, TT_RED_SUM, 1, 0, TT_F32); /* reads r after the reshape */
  tt_node_t *outs[3] = {a, f, late};
  tt_graph_t *g = NULL;
  CHECK_OK(tt_graph_build(outs, 3, &g, NULL));
  /* 0: epilogues off; 1: planned (fused early); 2: unplanned (fused late) */
  float *res[3];
  int64_t fused[3];
  size_t bytes[3] = {sizeof(float) * BN, sizeof(float) * 8 * 64 * 64, sizeof(float) * 64};
  for (int m = 0; m < 3; ++m) {
    res[m] = calloc(BN + 8 * 64 * 64 + 64, sizeof(float));
    if (m == 0) setenv("TORCHTPU_CONV_EPILOGUE", "0", 1);
    if (m == 2) setenv("TORCHTPU_BUFFER_PLAN", "0", 1);
    tt_config_reload(); /* the engine reads its environment once */
    tt_optimize_options_t on;
    tt_optimize_options_from_env(&on); /* fusion, and the pairs unless m == 0 */
    on.verify = 1;
    CHECK(on.fuse && on.conv_epilogue == (m != 0));
    tt_graph_t *o = NULL;
    CHECK_OK(tt_graph_optimize(g, &on, &o));
    tt_executable_t *e = NULL;
    if (o) CHECK_OK(tt_executable_create(o, &e));
    unsetenv("TORCHTPU_CONV_EPILOGUE");
    unsetenv("TORCHTPU_BUFFER_PLAN");
    tt_config_reload();
    int64_t before = tt_counter_value("ConvEpilogueFused");
    if (e) {
      tt_input_value_t in[3];
      memset(in, 0, sizeof(in));
      for (int k = 0; k < 3; ++k) { /* inputs are numbered in schedule order */
        const tt_shape_t *ps = &o->instrs[o->input_instr[k]].shape;
        in[k].buffer = ps->rank == 2 ? bb : ps->dims[0] == 1 ? bx : bw;
      }
      void *ob[3] = {res[m], res[m] + BN, res[m] + BN + 8 * 64 * 64};
      CHECK_OK(tt_executable_run(e, in, ob));
      tt_executable_release(e);
    } else {
      tt_graph_destroy(o);
    }
    fused[m] = tt_counter_value("ConvEpilogueFused") - before;
  }
  /* off / fused by the convolution / fused at its own place */
  CHECK(fused[0] == 0 && fused[1] == 1 && fused[2] == 0);
  size_t total = bytes[0] + bytes[1] + bytes[2];
  CHECK(memcmp(res[0], res[1], total) == 0);
  CHECK(memcmp(res[0], res[2], total) == 0);
  int neg = 0, zero = 0;
  for (int i = 0; i < 8 * 64 * 64; ++i) {
    neg += res[1][BN + i] < 0.0f;
    zero += res[1][BN + i] == 0.0f;
  }
  CHECK(neg == 0 && zero > 0 && zero < 8 * 64 * 64); /* relu of a mixed-sign sum */
  for (int m = 0; m < 3; ++m) free(res[m]);
  tt_graph_destroy(g);
  tt_node_t *all[] = {x, w, big, r, a, conv, rv, sum, f, late};
  for (int i = 0; i < (int)(sizeof all / sizeof all[0]); ++i) tt_node_release(all[i]);
  tt_buffer_release(bx);
  tt_buffer_release(bw);
  tt_buffer_release(bb);
  free(xd);
  free(wd);
  free(bd);
}

/* ---- movement collapse ------------------------------------------------------
 * nn.MultiheadAttention's layout chains (L 5, B 3, H 2, hd 4, E 8): the
 * forward's q, k and v out of one [L, B, 3E] projection (a transpose of
 * all of it, then one per head split) become one transpose that CSE
 * shares, read by three contiguous slices; the backward's gathering of
 * dq, dk and dv (three transposes, a concatenation and a transpose) one
 * transpose. Results equal the uncollapsed graph's bit for bit; a lone
 * transpose and a concatenation of two tensors stay as they are. */
static tt_node_t *mv(tt_op_t op, tt_node_t **xs, int n, const int64_t *ia, int nia) {
  tt_node_t *r = NULL;
  tt_status_t st = tt_node_create(op, 0, xs, n, ia, nia, NULL, 0, &r);
  if (st) tt_status_free(st);
  return r;
}

/* nn.MultiheadAttention's forward split of the projection Y [L, B, 3E]
 * into q, k, v [B, H, L, D] (E = H*D), as functionalization records it. */
static void mha_split(tt_node_t *Y, int64_t L, int64_t B, int64_t H, int64_t D, tt_node_t **made,
                      int *nm, tt_node_t **qkv) {
  int64_t E = H * D, r5[5] = {1, L, B, 3, E}, p5[5] = {3, 1, 2, 0, 4}, r4[4] = {3, L, B, E};
  tt_node_t *a = made[(*nm)++] = mv(TT_OP_RESHAPE, &Y, 1, r5, 5);
  tt_node_t *t = made[(*nm)++] = mv(TT_OP_TRANSPOSE, &a, 1, p5, 5);
  tt_node_t *s3 = made[(*nm)++] = mv(TT_OP_RESHAPE, &t, 1, r4, 4);
  for (int64_t k = 0; k < 3; ++k) {
    int64_t sl[12] = {k, 0, 0, 0, k + 1, L, B, E, 1, 1, 1, 1};
    int64_t ra[3] = {L, B * H, D}, pa[3] = {1, 0, 2}, rb[4] = {B, H, L, D};
    tt_node_t *c = made[(*nm)++] = mv(TT_OP_SLICE, &s3, 1, sl, 12);
    tt_node_t *d = made[(*nm)++] = mv(TT_OP_RESHAPE, &c, 1, ra, 3);
    tt_node_t *e = made[(*nm)++] = mv(TT_OP_TRANSPOSE, &d, 1, pa, 3);
    qkv[k] = made[(*nm)++] = mv(TT_OP_RESHAPE, &e, 1, rb, 4);
  }
}

/* Its backward's gathering of the packed [dq | dk | dv] (each [B, H, L,
 * D]) into [1, L, B, 3, E]. */
static tt_node_t *mha_gather(tt_node_t *P, int64_t L, int64_t B, int64_t H, int64_t D,
                             tt_node_t **made, int *nm) {
  int64_t E = H * D;
  tt_node_t *parts[3];
  for (int64_t k = 0; k < 3; ++k) {
    int64_t n = B * H * L * D, sl[3] = {k * n, (k + 1) * n, 1};
    int64_t ra[3] = {B * H, L, D}, pa[3] = {1, 0, 2}, rb[4] = {1, L, B, E};
    tt_node_t *c = made[(*nm)++] = mv(TT_OP_SLICE, &P, 1, sl, 3);
    tt_node_t *d = made[(*nm)++] = mv(TT_OP_RESHAPE, &c, 1, ra, 3);
    tt_node_t *e = made[(*nm)++] = mv(TT_OP_TRANSPOSE, &d, 1, pa, 3);
    parts[k] = made[(*nm)++] = mv(TT_OP_RESHAPE, &e, 1, rb, 4);
  }
  int64_t dim0[1] = {0}, rc[5] = {3, L, B, 1, E}, pc[5] = {3, 1, 2, 0, 4};
  tt_node_t *cat = made[(*nm)++] = mv(TT_OP_CONCAT, parts, 3, dim0, 1);
  tt_node_t *rcn = made[(*nm)++] = mv(TT_OP_RESHAPE, &cat, 1, rc, 5);
  return made[(*nm)++] = mv(TT_OP_TRANSPOSE, &rcn, 1, pc, 5);
}

static void check_collapse(tt_node_t **outs, int nouts, int want_transposes, int want_concats,
                           const char *what) {
  tt_graph_t *g = NULL, *o = NULL, *g2 = NULL;
  tt_node_t **inputs = NULL;
  CHECK_OK(tt_graph_build(outs, nouts, &g, &inputs));
  CHECK_OK(tt_graph_build(outs, nouts, &g2, NULL));
  tt_optimize_options_t opts = OPTS(0, 1, 0, 0, 0);
  CHECK_OK(tt_graph_optimize(g, &opts, &o));
  if (!g || !o || !g2) return;
  if (count_op(o, TT_OP_TRANSPOSE) != want_transposes || count_op(o, TT_OP_CONCAT) != want_concats)
    fprintf(stderr, "%s: %d transposes, %d concats\n", what, count_op(o, TT_OP_TRANSPOSE),
            count_op(o, TT_OP_CONCAT));
  CHECK(count_op(o, TT_OP_TRANSPOSE) == want_transposes);
  CHECK(count_op(o, TT_OP_CONCAT) == want_concats);
  int64_t total = 0;
  for (int r = 0; r < nouts; ++r) total += tt_shape_numel(&o->instrs[o->output_instr[r]].shape);
  float *got = calloc((size_t)total + 1, sizeof(float)), *want = calloc((size_t)total + 1, sizeof(float));
  void *og[8], *ow[8];
  int64_t at = 0;
  for (int r = 0; r < nouts; ++r) {
    og[r] = got + at;
    ow[r] = want + at;
    at += tt_shape_numel(&o->instrs[o->output_instr[r]].shape);
  }
  tt_executable_t *e1 = NULL, *e2 = NULL;
  CHECK_OK(tt_executable_create(o, &e1));
  CHECK_OK(tt_executable_create(g2, &e2));
  if (e1 && e2) {
    tt_input_value_t in[4];
    memset(in, 0, sizeof(in));
    for (int32_t i = 0; i < o->num_inputs && i < 4; ++i) in[i].buffer = inputs[i]->buffer;
    CHECK_OK(tt_executable_run(e1, in, og));
    CHECK_OK(tt_executable_run(e2, in, ow));
    CHECK(memcmp(got, want, sizeof(float) * (size_t)total) == 0);
  }
  free(got);
  free(want);
  free(inputs);
  if (e1) tt_executable_release(e1);
  else tt_graph_destroy(o);
  if (e2) tt_executable_release(e2);
  else tt_graph_destroy(g2);
  tt_graph_destroy(g);
}

static void test_movement_collapse(void) {
  enum { L = 5, B = 3, H = 2, D = 4, E = H * D };
  float y[L * B * 3 * E], pk[3 * B * H * L * D];
  for (int i = 0; i < L * B * 3 * E; ++i) y[i] = rnd_unit();
  for (int i = 0; i < 3 * B * H * L * D; ++i) pk[i] = rnd_unit();
  tt_buffer_t *by = NULL, *bp = NULL;
  CHECK_OK(tt_buffer_from_host(0, y, sizeof y, &by));
  CHECK_OK(tt_buffer_from_host(0, pk, sizeof pk, &bp));
  tt_shape_t ys = {3, {L, B, 3 * E}}, ps = {1, {3 * B * H * L * D}};
  tt_node_t *Y = tt_node_create_param(by, TT_F32, &ys, 0);
  tt_node_t *P = tt_node_create_param(bp, TT_F32, &ps, 0);
  tt_node_t *made[64];
  int nm = 0;
  /* forward: q, k, v [B, H, L, D] */
  tt_node_t *qkv[3];
  mha_split(Y, L, B, H, D, made, &nm, qkv);
  check_collapse(qkv, 3, 1, 0, "q, k, v");
  /* backward: the packed [dq | dk | dv] back to [1, L, B, 3, E] */
  tt_node_t *grad = mha_gather(P, L, B, H, D, made, &nm);
  check_collapse(&grad, 1, 1, 0, "dq, dk, dv");
  /* a lone transpose; a concatenation of two tensors */
  int64_t pt[3] = {1, 0, 2};
  tt_node_t *lone = made[nm++] = mv(TT_OP_TRANSPOSE, &Y, 1, pt, 3);
  check_collapse(&lone, 1, 1, 0, "lone transpose");
  tt_node_t *two[2] = {Y, made[nm++] = unary(Y, TT_UN_NEG)};
  int64_t d2[1] = {2};
  tt_node_t *cat2 = made[nm++] = mv(TT_OP_CONCAT, two, 2, d2, 1);
  check_collapse(&cat2, 1, 0, 1, "concat of two tensors");
  /* x doubled 18 times by concatenating it with itself: the maps' walk is
   * bounded (a DAG walked as a tree would visit 2^18 nodes per candidate). */
  tt_node_t *dbl = P;
  for (int k = 0; k < 18; ++k) {
    tt_node_t *two2[2] = {dbl, dbl};
    int64_t d0[1] = {0};
    dbl = made[nm++] = mv(TT_OP_CONCAT, two2, 2, d0, 1);
  }
  tt_graph_t *gd = NULL, *od = NULL;
  CHECK_OK(tt_graph_build(&dbl, 1, &gd, NULL));
  tt_optimize_options_t dopts = OPTS(0, 1, 0, 0, 0);
  clock_t c0 = clock();
  CHECK_OK(tt_graph_optimize(gd, &dopts, &od));
  CHECK((double)(clock() - c0) / CLOCKS_PER_SEC < 1.0);
  CHECK(od && count_op(od, TT_OP_CONCAT) == 18);
  tt_graph_destroy(od);
  tt_graph_destroy(gd);
  for (int k = 0; k < nm; ++k) tt_node_release(made[k]);
  tt_node_release(Y);
  tt_node_release(P);
  tt_buffer_release(by);
  tt_buffer_release(bp);
}

/* ---- attention layouts ------------------------------------------------------
 * The decoder's attention block (L 6, B 3, H 2, hd 8): q, k, v sliced out
 * of one [L, B, 3E] projection, the output transposed to [L, B, H, hd],
 * the backward's grad_out read from [L, B, H, hd] and its packed
 * gradients gathered into [L, B, 3E]. With the passes every transpose is
 * gone (the attention ops take their strided forms) and the results equal
 * those of the graph optimised without them, bit for bit. */
static void test_attention_layout(void) {
  enum { L = 6, B = 3, H = 2, D = 8, E = H * D };
  float y[L * B * 3 * E], gy[L * B * E];
  for (int i = 0; i < L * B * 3 * E; ++i) y[i] = rnd_unit();
  for (int i = 0; i < L * B * E; ++i) gy[i] = rnd_unit();
  tt_buffer_t *by = NULL, *bg = NULL;
  CHECK_OK(tt_buffer_from_host(0, y, sizeof y, &by));
  CHECK_OK(tt_buffer_from_host(0, gy, sizeof gy, &bg));
  tt_shape_t ys = {3, {L, B, 3 * E}}, gs = {3, {L, B, E}};
  tt_node_t *Y = tt_node_create_param(by, TT_F32, &ys, 0);
  tt_node_t *G = tt_node_create_param(bg, TT_F32, &gs, 0);
  tt_node_t *made[64];
  int nm = 0;
  tt_node_t *qkv[3];
  mha_split(Y, L, B, H, D, made, &nm, qkv);
  int64_t att_i[2] = {1, 0};
  double att_f[2] = {0.35, 0};
  tt_node_t *att = NULL, *bwd = NULL;
  CHECK_OK(tt_node_create(TT_OP_ATTENTION, 0, qkv, 3, att_i, 2, att_f, 2, &att));
  made[nm++] = att;
  int64_t po[4] = {2, 0, 1, 3}, ro[3] = {L, B, E};
  tt_node_t *ot = made[nm++] = mv(TT_OP_TRANSPOSE, &att, 1, po, 4);
  tt_node_t *out = made[nm++] = mv(TT_OP_RESHAPE, &ot, 1, ro, 3);
  /* grad_out from [L, B, E] */
  int64_t rg[4] = {L, B, H, D}, pg[4] = {1, 2, 0, 3};
  tt_node_t *g4 = made[nm++] = mv(TT_OP_RESHAPE, &G, 1, rg, 4);
  tt_node_t *go = made[nm++] = mv(TT_OP_TRANSPOSE, &g4, 1, pg, 4);
  tt_node_t *bops[4] = {go, qkv[0], qkv[1], qkv[2]};
  int64_t bwd_i[1] = {1};
  CHECK_OK(tt_node_create(TT_OP_ATTENTION_BWD, 0, bops, 4, bwd_i, 1, att_f, 2, &bwd));
  made[nm++] = bwd;
  tt_node_t *grad = mha_gather(bwd, L, B, H, D, made, &nm);
  tt_node_t *outs[2] = {out, grad};
  tt_graph_t *g = NULL, *o1 = NULL, *o0 = NULL;
  tt_node_t **inputs = NULL;
  CHECK_OK(tt_graph_build(outs, 2, &g, &inputs));
  tt_optimize_options_t on = OPTS(0, 1, 0, 0, 0), off = OPTS(0, 1, 0, 1, 0);
  CHECK_OK(tt_graph_optimize(g, &on, &o1));
  CHECK_OK(tt_graph_optimize(g, &off, &o0));
  if (o1 && o0) {
    CHECK(count_op(o1, TT_OP_TRANSPOSE) == 0 && count_op(o1, TT_OP_CONCAT) == 0);
    for (int32_t i = 0; i < o1->num_instrs; ++i) {
      const tt_instr_t *in = &o1->instrs[i];
      if (in->op == TT_OP_ATTENTION) CHECK(in->num_iattrs == 24);
      if (in->op == TT_OP_ATTENTION_BWD) CHECK(in->num_iattrs == 27);
    }
    int64_t n0 = L * B * E, n1 = L * B * 3 * E;
    float *got = calloc((size_t)(n0 + n1), sizeof(float)), *want = calloc((size_t)(n0 + n1), sizeof(float));
    void *og[2] = {got, got + n0}, *ow[2] = {want, want + n0};
    tt_executable_t *e1 = NULL, *e0 = NULL;
    CHECK_OK(tt_executable_create(o1, &e1));
    CHECK_OK(tt_executable_create(o0, &e0));
    if (e1 && e0) {
      tt_input_value_t in[2];
      memset(in, 0, sizeof(in));
      for (int32_t i = 0; i < o1->num_inputs && i < 2; ++i) in[i].buffer = inputs[i]->buffer;
      CHECK_OK(tt_executable_run(e1, in, og));
      CHECK_OK(tt_executable_run(e0, in, ow));
      CHECK(memcmp(got, want, sizeof(float) * (size_t)(n0 + n1)) == 0);
      int nonzero = 0;
      for (int64_t i = 0; i < n0 + n1; ++i) nonzero += got[i] != 0.0f;
      CHECK(nonzero > (n0 + n1) / 2);
    }
    free(got);
    free(want);
    if (e1) tt_executable_release(e1);
    else tt_graph_destroy(o1);
    if (e0) tt_executable_release(e0);
    else tt_graph_destroy(o0);
  }
  /* Graphs emitted as StableHLO (a PJRT plugin runs them) keep the dense
   * attention forms, which the emitter lowers. */
  tt_graph_t *oh = NULL;
  tt_optimize_options_t hlo = OPTS(0, 1, 0, 0, 1);
  CHECK_OK(tt_graph_optimize(g, &hlo, &oh));
  if (oh) {
    for (int32_t i = 0; i < oh->num_instrs; ++i) {
      const tt_instr_t *in = &oh->instrs[i];
      if (in->op == TT_OP_ATTENTION) CHECK(in->num_iattrs == 2);
      if (in->op == TT_OP_ATTENTION_BWD) CHECK(in->num_iattrs == 1);
    }
    tt_graph_destroy(oh);
  }
  free(inputs);
  tt_graph_destroy(g);
  for (int k = 0; k < nm; ++k) tt_node_release(made[k]);
  tt_node_release(Y);
  tt_node_release(G);
  tt_buffer_release(by);
  tt_buffer_release(bg);
}

/* ---- softmax with its bias ---------------------------------------------------
 * A language model's head: log_softmax(reshape(x + bias)) along the last
 * dim becomes one softmax instruction reading x and the bias (no add is
 * left); values equal the unoptimised graph's bit for bit. A bias add
 * with a second reader keeps its add. */
static void test_softmax_bias_fold(void) {
  enum { A = 4, T = 6, V = 37 };
  float xs[A * T * V], bs[V];
  for (int i = 0; i < A * T * V; ++i) xs[i] = rnd_unit() * 3.0f;
  for (int i = 0; i < V; ++i) bs[i] = rnd_unit();
  tt_buffer_t *bx = NULL, *bb = NULL;
  CHECK_OK(tt_buffer_from_host(0, xs, sizeof xs, &bx));
  CHECK_OK(tt_buffer_from_host(0, bs, sizeof bs, &bb));
  tt_shape_t xsh = {3, {A, T, V}}, bsh = {1, {V}};
  tt_node_t *x = tt_node_create_param(bx, TT_F32, &xsh, 0);
  tt_node_t *b = tt_node_create_param(bb, TT_F32, &bsh, 0);
  for (int form = 0; form < 2; ++form) {
    tt_node_t *add = binary(x, b, TT_BIN_ADD);
    int64_t r2[2] = {A * T, V}, sm[2] = {1, 1};
    tt_node_t *r = mv(TT_OP_RESHAPE, &add, 1, r2, 2), *y = NULL;
    CHECK_OK(tt_node_create(TT_OP_SOFTMAX, 0, &r, 1, sm, 2, NULL, 0, &y));
    tt_node_t *other = form ? unary(add, TT_UN_NEG) : NULL;
    tt_node_t *outs[2] = {y, other};
    int nouts = form ? 2 : 1;
    tt_graph_t *g = NULL, *o = NULL;
    tt_node_t **inputs = NULL;
    CHECK_OK(tt_graph_build(outs, nouts, &g, &inputs));
    tt_optimize_options_t opts = OPTS(0, 1, 0, 0, 0);
    CHECK_OK(tt_graph_optimize(g, &opts, &o));
    if (g && o) {
      CHECK(count_op(o, TT_OP_BINARY) == (form ? 1 : 0));
      for (int32_t i = 0; i < o->num_instrs; ++i)
        if (o->instrs[i].op == TT_OP_SOFTMAX) CHECK(o->instrs[i].num_operands == (form ? 1 : 2));
      float got[2 * A * T * V], want[2 * A * T * V];
      memset(got, 0, sizeof got);
      memset(want, 1, sizeof want);
      void *og[2] = {got, got + A * T * V}, *ow[2] = {want, want + A * T * V};
      tt_executable_t *e1 = NULL, *e2 = NULL;
      CHECK_OK(tt_executable_create(o, &e1));
      CHECK_OK(tt_executable_create(g, &e2));
      if (e1 && e2) {
        tt_input_value_t in[2];
        memset(in, 0, sizeof(in));
        for (int32_t i = 0; i < o->num_inputs && i < 2; ++i) in[i].buffer = inputs[i]->buffer;
        CHECK_OK(tt_executable_run(e1, in, og));
        CHECK_OK(tt_executable_run(e2, in, ow));
        CHECK(memcmp(got, want, sizeof(float) * (size_t)(A * T * V * nouts)) == 0);
      }
      if (e1) tt_executable_release(e1);
      else tt_graph_destroy(o);
      if (e2) tt_executable_release(e2);
      else tt_graph_destroy(g);
    }
    free(inputs);
    tt_node_release(add);
    tt_node_release(r);
    tt_node_release(y);
    if (other) tt_node_release(other);
  }
  tt_node_release(x);
  tt_node_release(b);
  tt_buffer_release(bx);
  tt_buffer_release(bb);
}

/* The pair pass marks a convolution with its only reader's fused
 * epilogue and an attention forward with its matching backward; nothing
 * else, and nothing when its options are off. */
static void test_pair_pass(void) {
  float data[4 * 2 * 8 * 8] = {0};
  tt_buffer_t *buf = NULL;
  CHECK_OK(tt_buffer_from_host(0, data, sizeof data, &buf));
  tt_shape_t sx = {4, {1, 2, 8, 8}}, sw = {4, {4, 2, 3, 3}}, sq = {4, {1, 2, 4, 8}};
  tt_node_t *x = tt_node_create_param(buf, TT_F32, &sx, 0);
  tt_node_t *w = tt_node_create_param(buf, TT_F32, &sw, 0);
  tt_node_t *cops[2] = {x, w}, *conv = NULL, *conv2 = NULL;
  int64_t ca[7] = {1, 1, 1, 1, 1, 1, 1};
  CHECK_OK(tt_node_create(TT_OP_CONV2D, 0, cops, 2, ca, 7, NULL, 0, &conv));
  ca[0] = ca[1] = 2; /* strided: no CSE with conv */
  CHECK_OK(tt_node_create(TT_OP_CONV2D, 0, cops, 2, ca, 7, NULL, 0, &conv2));
  tt_node_t *relu = unary(conv, TT_UN_RELU), *epi = unary(relu, TT_UN_NEG);
  tt_node_t *neg2 = unary(conv2, TT_UN_NEG);
  tt_node_t *q = tt_node_create_param(buf, TT_F32, &sq, 0);
  tt_node_t *k = tt_node_create_param(buf, TT_F32, &sq, 0);
  tt_node_t *v = tt_node_create_param(buf, TT_F32, &sq, 0);
  tt_node_t *go = tt_node_create_param(buf, TT_F32, &sq, 0);
  tt_node_t *qkv[3] = {q, k, v}, *bops[4] = {go, q, k, v}, *att = NULL, *bwd = NULL, *bwd2 = NULL;
  int64_t att_i[2] = {1, 0}, causal[1] = {1}, plain[1] = {0};
  double att_f[2] = {0.35, 0};
  CHECK_OK(tt_node_create(TT_OP_ATTENTION, 0, qkv, 3, att_i, 2, att_f, 2, &att));
  CHECK_OK(tt_node_create(TT_OP_ATTENTION_BWD, 0, bops, 4, causal, 1, att_f, 2, &bwd));
  CHECK_OK(tt_node_create(TT_OP_ATTENTION_BWD, 0, bops, 4, plain, 1, att_f, 2, &bwd2));
  tt_node_t *outs[6] = {epi, conv2, neg2, att, bwd, bwd2};
  tt_graph_t *g = NULL;
  CHECK_OK(tt_graph_build(outs, 6, &g, NULL));
  for (int m = 0; m < 2; ++m) {
    tt_optimize_options_t opts = OPTS(1, 1, 0, 0, 0);
    opts.conv_epilogue = opts.attention_pairs = m == 1;
    tt_graph_t *o = NULL;
    CHECK_OK(tt_graph_optimize(g, &opts, &o));
    if (m == 0) {
      CHECK(o->pair == NULL);
    } else {
      CHECK(o->pair != NULL);
      int marked = 0;
      for (int32_t i = 0; i < o->num_instrs; ++i) {
        const tt_instr_t *in = &o->instrs[i];
        int32_t p = o->pair[i];
        marked += p >= 0;
        tt_conv2d_attrs_t c;
        tt_attention_bwd_attrs_t b = {0};
        if (in->op == TT_OP_ATTENTION_BWD) TT_ATTRS(in, &b);
        if (in->op == TT_OP_CONV2D && TT_ATTRS(in, &c) && c.stride[0] == 1) {
          CHECK(p > i && o->instrs[p].op == TT_OP_FUSED);
        } else if (in->op == TT_OP_ATTENTION) {
          tt_attention_bwd_attrs_t pb;
          CHECK(p > i && o->instrs[p].op == TT_OP_ATTENTION_BWD && TT_ATTRS(&o->instrs[p], &pb) &&
                pb.causal == 1);
          CHECK(o->pair[p] == i);
        } else if (!b.causal) {
          CHECK(p == -1); /* the output conv, the non-causal backward, the rest */
        }
      }
      CHECK(marked == 3);
    }
    tt_graph_destroy(o);
  }
  tt_graph_destroy(g);
  for (int i = 0; i < 6; ++i) tt_node_release(outs[i]);
  tt_node_release(x);
  tt_node_release(w);
  tt_node_release(q);
  tt_node_release(k);
  tt_node_release(v);
  tt_node_release(go);
  tt_node_release(conv);
  tt_node_release(relu);
  tt_buffer_release(buf);
}

int main(void) {
  CHECK_OK(tt_runtime_init(1));
  test_fusion_matches_unfused();
  test_fusion_duplicates_cheap_producer();
  test_fusion_copy_limit();
  test_cse_simplify_dce();
  test_broadcast_operands_fold();
  test_verifier_catches_bad_graph();
  test_reduce_fusion_layer_norm();
  test_reduce_fusion_matches_unfused();
  test_buffer_plan_packs_by_liveness();
  test_buffer_plan_reuses_and_matches();
  test_buffer_plan_shared_reshape();
  test_buffer_plan_slice_alias();
  test_transpose_of_dot_folds();
  test_add_of_pads_concat();
  test_movement_collapse();
  test_attention_layout();
  test_softmax_bias_fold();
  test_tier1_param_unary();
  test_conv_epilogue_plans();
  test_pair_pass();
  return test_summary();
}
