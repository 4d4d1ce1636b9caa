/* Throughput of the CPU kernels (absolute numbers: GFLOP/s, GB/s, ms).
 *
 * Build and run from the repository root:
 *   cc -std=c11 -O3 -D_GNU_SOURCE -fno-trapping-math -Iinclude -Isrc -pthread
 *      -o build/bench_kernels bench/bench_kernels.c src/base/[star].c
 *      src/kernels/[star].c -lm
 * (one line; [star] is the shell glob *).
 *   build/bench_kernels            # all threads
 *   TORCHTPU_NUM_THREADS=1 build/bench_kernels
 *   build/bench_kernels gemm       # only benchmarks whose name contains "gemm"
 *   BENCH_CPU_TIME=1 TORCHTPU_NUM_THREADS=1 build/bench_kernels  # CPU time
 *
 * For the ratio against PyTorch, time the same shapes with torch in the
 * same session (see the op list printed here).
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "kernels/kernel_util.h"
#include "torchtpu/kernels.h"

/* BENCH_CPU_TIME=1 measures process CPU time instead of wall time: with
 * TORCHTPU_NUM_THREADS=1 on a shared, busy machine it shows the kernel's
 * own cost without the time it spent preempted. */
static int g_cpu_time = 0;

static double now_s(void) {
  struct timespec t;
  clock_gettime(g_cpu_time ? CLOCK_PROCESS_CPUTIME_ID : CLOCK_MONOTONIC, &t);
  return (double)t.tv_sec + (double)t.tv_nsec * 1e-9;
}

static tt_view_t make(tt_dtype_t dt, int rank, const int64_t *dims) {
  tt_view_t v;
  memset(&v, 0, sizeof v);
  v.dtype = dt;
  v.shape.rank = rank;
  int64_t n = 1;
  for (int i = 0; i < rank; ++i) {
    v.shape.dims[i] = dims[i];
    n *= dims[i];
  }
  v.data = malloc((size_t)n * tt_dtype_size(dt));
  for (int64_t i = 0; i < n; ++i) {
    tt_set_f64(v.data, dt, i, (double)((i * 7919) % 1000) / 500.0 - 1.0);
  }
  return v;
}

static int64_t numel(const tt_view_t *v) {
  int64_t n = 1;
  for (int i = 0; i < v->shape.rank; ++i) n *= v->shape.dims[i];
  return n;
}

static const char *g_filter = NULL;

/* Seconds per call: the best of 7 rounds of at least 50 ms each, after a
 * warm-up call (the minimum filters out other load on a shared machine). */
typedef void (*bench_fn_t)(void *);
static double time_it(bench_fn_t fn, void *arg) {
  fn(arg);
  double best = 1e30;
  for (int round = 0; round < 7; ++round) {
    int reps = 0;
    double t0 = now_s(), t;
    do {
      fn(arg);
      ++reps;
      t = now_s() - t0;
    } while (t < 0.05);
    if (t / reps < best) best = t / reps;
  }
  return best;
}

static int wanted(const char *name) { return !g_filter || strstr(name, g_filter); }

static void check(tt_status_t st) {
  if (st) {
    fprintf(stderr, "error: %s\n", tt_status_message(st));
    exit(1);
  }
}

/* ---- GEMM ---------------------------------------------------------------- */

typedef struct {
  tt_view_t a, b, c;
  int ta, tb;
} dot_arg_t;

static void run_dot(void *p) {
  dot_arg_t *d = (dot_arg_t *)p;
  check(tt_kernel_dot(&d->a, &d->b, d->ta, d->tb, &d->c));
}

/* Times tt_kernel_dot on fresh operands of these dims and prints one row. */
static void bench_dot_dims(const char *name, tt_dtype_t dt, int ta, int tb, const int64_t da[3],
                           const int64_t db[3], const int64_t dc[3], double flops) {
  dot_arg_t d = {.ta = ta, .tb = tb};
  d.a = make(dt, 3, da);
  d.b = make(dt, 3, db);
  d.c = make(dt, 3, dc);
  double t = time_it(run_dot, &d);
  printf("%-48s %9.3f ms %8.1f GFLOP/s\n", name, t * 1e3, flops / t * 1e-9);
  free(d.a.data);
  free(d.b.data);
  free(d.c.data);
}

static void bench_gemm(tt_dtype_t dt, int64_t n, int tb, int64_t batch) {
  char name[96];
  snprintf(name, sizeof name, "gemm %s %lldx%lld%s batch %lld", tt_dtype_name(dt),
           (long long)n, (long long)n, tb ? " (B transposed)" : "", (long long)batch);
  if (!wanted(name)) return;
  int64_t dims[3] = {batch, n, n};
  bench_dot_dims(name, dt, 0, tb, dims, dims, dims, 2.0 * (double)(batch * n * n * n));
}

/* A linear layer's GEMM: x [m, k] times a weight stored [n, k] (B
 * transposed), as in a transformer block. */
static void bench_linear(int64_t m, int64_t k, int64_t n) {
  char name[96];
  snprintf(name, sizeof name, "gemm float32 linear %lldx%lld @ (%lldx%lld)^T", (long long)m,
           (long long)k, (long long)n, (long long)k);
  if (!wanted(name)) return;
  int64_t da[3] = {1, m, k}, db[3] = {1, n, k}, dc[3] = {1, m, n};
  bench_dot_dims(name, TT_F32, 0, 1, da, db, dc, 2.0 * (double)(m * k * n));
}

/* A product as a training step has it: C[m, n] = op(A) op(B), with /ta
 * (A stored [k, m]: a weight gradient's x^T) or /tb (B stored [n, k]: a
 * linear layer's weight), as TORCHTPU_EXEC_PROFILE=shapes names them. */
static void bench_dot(int64_t m, int64_t n, int64_t k, int ta, int tb) {
  char name[96];
  snprintf(name, sizeof name, "gemm float32 dot [%lld,%lld] k %lld%s%s", (long long)m,
           (long long)n, (long long)k, ta ? "/ta" : "", tb ? "/tb" : "");
  if (!wanted(name)) return;
  int64_t da[3] = {1, ta ? k : m, ta ? m : k}, db[3] = {1, tb ? n : k, tb ? k : n};
  int64_t dc[3] = {1, m, n};
  bench_dot_dims(name, TT_F32, ta, tb, da, db, dc, 2.0 * (double)(m * k * n));
}

/* ---- conv ---------------------------------------------------------------- */

typedef struct {
  tt_view_t x, w, o;
  tt_conv2d_params_t p;
  int which;
} conv_arg_t;

static void run_conv(void *p) {
  conv_arg_t *c = (conv_arg_t *)p;
  if (c->which == 0) check(tt_kernel_conv2d(&c->x, &c->w, &c->p, &c->o));
  if (c->which == 1) check(tt_kernel_conv2d_backward_input(&c->o, &c->w, &c->p, &c->x));
  if (c->which == 2) check(tt_kernel_conv2d_backward_weight(&c->o, &c->x, &c->p, &c->w));
}

static void bench_conv(int64_t N, int64_t C, int64_t H, int64_t O, int64_t k,
                       int64_t groups) {
  static const char *kinds[3] = {"forward", "backward_input", "backward_weight"};
  for (int which = 0; which < 3; ++which) {
    char name[128];
    snprintf(name, sizeof name, "conv2d %s N%lld C%lld %lldx%lld O%lld k%lld g%lld",
             kinds[which], (long long)N, (long long)C, (long long)H, (long long)H,
             (long long)O, (long long)k, (long long)groups);
    if (!wanted(name)) continue;
    conv_arg_t c = {.which = which};
    int64_t xd[4] = {N, C, H, H}, wd[4] = {O, C / groups, k, k}, od[4] = {N, O, H, H};
    c.x = make(TT_F32, 4, xd);
    c.w = make(TT_F32, 4, wd);
    c.o = make(TT_F32, 4, od);
    c.p = (tt_conv2d_params_t){{1, 1}, {k / 2, k / 2}, {1, 1}, groups};
    double t = time_it(run_conv, &c);
    double flops = 2.0 * (double)(N * O * H * H) * (double)(C / groups * k * k);
    printf("%-48s %9.3f ms %8.1f GFLOP/s\n", name, t * 1e3, flops / t * 1e-9);
    free(c.x.data);
    free(c.w.data);
    free(c.o.data);
  }
}

/* ---- memory-bound kernels --------------------------------------------------- */

typedef struct {
  tt_view_t x, y, o;
  int op;
  int kind; /* 0 unary, 1 binary, 2 reduce, 3 softmax, 4 transpose */
  uint32_t mask;
} mem_arg_t;

static void run_mem(void *p) {
  mem_arg_t *m = (mem_arg_t *)p;
  static const int32_t perm[2] = {1, 0};
  switch (m->kind) {
    case 0: check(tt_kernel_unary((tt_unary_op_t)m->op, &m->x, 0.01, 0, &m->o)); break;
    case 1: check(tt_kernel_binary((tt_binary_op_t)m->op, &m->x, &m->y, &m->o)); break;
    case 2: check(tt_kernel_reduce((tt_reduce_op_t)m->op, &m->x, m->mask, &m->o)); break;
    case 3: check(tt_kernel_softmax(&m->x, 1, 0, &m->o)); break;
    default: check(tt_kernel_transpose(&m->x, perm, &m->o)); break;
  }
}

static void bench_mem(const char *name, int kind, int op, int64_t rows,
                      int64_t cols, int y_scalar, uint32_t mask) {
  if (!wanted(name)) return;
  mem_arg_t m = {.kind = kind, .op = op, .mask = mask};
  int64_t d[2] = {rows, cols}, od[2] = {rows, cols}, one[1] = {1};
  m.x = make(TT_F32, 2, d);
  m.y = y_scalar ? make(TT_F32, 0, one) : make(TT_F32, 2, d);
  if (kind == 2) {
    od[0] = (mask & 1) ? 1 : rows;
    od[1] = (mask & 2) ? 1 : cols;
  }
  if (kind == 4) {
    od[0] = cols;
    od[1] = rows;
  }
  m.o = make(TT_F32, 2, od);
  double t = time_it(run_mem, &m);
  double bytes = (double)(numel(&m.x) + numel(&m.o)) * 4.0;
  if (kind == 1 && !y_scalar) bytes += (double)numel(&m.y) * 4.0;
  printf("%-48s %9.3f ms %8.1f GB/s\n", name, t * 1e3, bytes / t * 1e-9);
  free(m.x.data);
  free(m.y.data);
  free(m.o.data);
}

/* A rank-3 transpose swapping the outer two dims (the attention's head
 * split and merge): rows of d2 contiguous elements move whole. */
typedef struct {
  tt_view_t x, o;
} tr3_arg_t;

static void run_tr3(void *p) {
  static const int32_t perm[3] = {1, 0, 2};
  tr3_arg_t *m = (tr3_arg_t *)p;
  check(tt_kernel_transpose(&m->x, perm, &m->o));
}

static void bench_transpose3(int64_t d0, int64_t d1, int64_t d2) {
  char name[96];
  snprintf(name, sizeof name, "transpose f32 [%lld,%lld,%lld] -> [%lld,%lld,%lld]",
           (long long)d0, (long long)d1, (long long)d2, (long long)d1, (long long)d0,
           (long long)d2);
  if (!wanted(name)) return;
  int64_t xd[3] = {d0, d1, d2}, od[3] = {d1, d0, d2};
  tr3_arg_t m = {make(TT_F32, 3, xd), make(TT_F32, 3, od)};
  double t = time_it(run_tr3, &m);
  printf("%-48s %9.3f ms %8.1f GB/s\n", name, t * 1e3, 2.0 * (double)numel(&m.x) * 4.0 / t * 1e-9);
  free(m.x.data);
  free(m.o.data);
}

typedef struct att_arg_s {
  tt_view_t q, k, v, o, go, gq, gk, gv;
  int causal;
  double scale;
} att_arg_t;

static void run_att_fwd(void *p) {
  att_arg_t *a = p;
  tt_status_free(tt_kernel_attention(&a->q, &a->k, &a->v, NULL, a->causal, a->scale, &a->o, NULL));
}

static void run_att_bwd(void *p) {
  att_arg_t *a = p;
  tt_status_free(tt_kernel_attention_backward(&a->go, &a->q, &a->k, &a->v, NULL, a->causal,
                                              a->scale, &a->gq, &a->gk, &a->gv));
}

/* Fused attention over [B, H, L, E] (S = L), forward and backward. FLOPs
 * counted are the products a causal mask leaves (half the square):
 * 2 products forward, 4 backward (the recomputed scores not counted). */
static void bench_attention(int64_t B, int64_t H, int64_t L, int64_t E, int causal) {
  char name[2][96];
  for (int w = 0; w < 2; ++w)
    snprintf(name[w], sizeof name[w], "attention %s f32 [%lld,%lld,%lld,%lld]%s",
             w ? "backward" : "forward", (long long)B, (long long)H, (long long)L, (long long)E,
             causal ? " causal" : "");
  if (!wanted(name[0]) && !wanted(name[1])) return;
  int64_t d[4] = {B, H, L, E};
  att_arg_t a = {make(TT_F32, 4, d), make(TT_F32, 4, d), make(TT_F32, 4, d), make(TT_F32, 4, d),
                 make(TT_F32, 4, d), make(TT_F32, 4, d), make(TT_F32, 4, d), make(TT_F32, 4, d),
                 causal, 0.125};
  double prod = 2.0 * (double)(B * H * L * L * E) * (causal ? 0.5 : 1.0);
  for (int w = 0; w < 2; ++w) {
    if (!wanted(name[w])) continue;
    double t = time_it(w ? run_att_bwd : run_att_fwd, &a);
    printf("%-48s %9.3f ms %8.1f GFLOP/s\n", name[w], t * 1e3, prod * (w ? 4 : 2) / t * 1e-9);
  }
  tt_view_t *all[8] = {&a.q, &a.k, &a.v, &a.o, &a.go, &a.gq, &a.gk, &a.gv};
  for (int i = 0; i < 8; ++i) free(all[i]->data);
}

/* The decoder's attention as its training step runs it (the strided
 * forms, src/passes/attention_layout.c): q, k and v read in place from the
 * seq-first projection [L, B, 3 H E], the output written as [L, B, H, E],
 * the output's gradient read from that layout and [dq | dk | dv] written
 * as [L, B, 3 H E]; the forward keeps its probabilities for the
 * backward. */
typedef struct att_strided_s {
  tt_view_t qkv, o, go, g;
  tt_att_geom_t geom;
  float *probs;
} att_strided_t;

static void run_att_strided_fwd(void *p) {
  att_strided_t *a = p;
  tt_status_free(tt_kernel_attention_ex(&a->qkv, &a->qkv, &a->qkv, NULL, 1, 0.125, &a->o,
                                        &a->geom, a->probs));
}

static void run_att_strided_bwd(void *p) {
  att_strided_t *a = p;
  tt_status_free(tt_kernel_attention_backward_ex(&a->go, &a->qkv, &a->qkv, &a->qkv, NULL, 1,
                                                 0.125, &a->g, &a->g, &a->g, &a->geom,
                                                 a->probs));
}

static void bench_attention_strided(int64_t B, int64_t H, int64_t L, int64_t E) {
  char name[2][112];
  for (int w = 0; w < 2; ++w)
    snprintf(name[w], sizeof name[w], "attention %s f32 [%lld,%lld,%lld,%lld] causal strided",
             w ? "backward" : "forward", (long long)B, (long long)H, (long long)L, (long long)E);
  if (!wanted(name[0]) && !wanted(name[1])) return;
  int64_t n3[1] = {L * B * 3 * H * E}, n1[1] = {L * B * H * E};
  att_strided_t a = {make(TT_F32, 1, n3), make(TT_F32, 1, n1), make(TT_F32, 1, n1),
                     make(TT_F32, 1, n3)};
  a.geom = (tt_att_geom_t){.B = B, .H = H, .L = L, .S = L, .E = E, .Ev = E};
  for (int i = 0; i < 3; ++i) {
    a.geom.lay[i] = (tt_att_layout_t){i * H * E, 3 * H * E, E, B * 3 * H * E};
    a.geom.lay[5 + i] = a.geom.lay[i];
  }
  a.geom.lay[3] = a.geom.lay[4] = (tt_att_layout_t){0, H * E, E, B * H * E};
  a.probs = malloc((size_t)(B * H * L * tt_attention_probs_ld(L)) * sizeof(float));
  double prod = 2.0 * (double)(B * H * L * L * E) * 0.5;
  run_att_strided_fwd(&a);
  for (int w = 0; w < 2; ++w) {
    if (!wanted(name[w])) continue;
    double t = time_it(w ? run_att_strided_bwd : run_att_strided_fwd, &a);
    printf("%-48s %9.3f ms %8.1f GFLOP/s\n", name[w], t * 1e3, prod * (w ? 4 : 2) / t * 1e-9);
  }
  free(a.probs);
  tt_view_t *all[4] = {&a.qkv, &a.o, &a.go, &a.g};
  for (int i = 0; i < 4; ++i) free(all[i]->data);
}

int main(int argc, char **argv) {
  if (argc > 1) g_filter = argv[1];
  const char *cpu = getenv("BENCH_CPU_TIME");
  g_cpu_time = cpu && *cpu == '1';
  printf("threads %d, GEMM micro-kernel %s\n", tt_num_threads(), tt_sgemm_isa_name());
  bench_gemm(TT_F32, 256, 0, 1);
  bench_gemm(TT_F32, 512, 0, 1);
  bench_gemm(TT_F32, 1024, 0, 1);
  bench_gemm(TT_F32, 2048, 0, 1);
  bench_gemm(TT_F32, 512, 1, 1);
  bench_gemm(TT_F32, 64, 0, 64);
  bench_linear(128, 768, 768);
  bench_linear(128, 768, 3072);
  bench_linear(128, 3072, 768);
  /* The GPT-style decoder of bench_training.py (2048 tokens, d 128, FFN
   * 512, vocab 1000) and the MLP (batch 32): forward, input and weight
   * gradients. */
  bench_dot(2048, 512, 128, 0, 1);
  bench_dot(2048, 128, 512, 0, 0);
  bench_dot(512, 128, 2048, 1, 0);
  bench_dot(1000, 128, 2048, 1, 0);
  bench_dot(128, 512, 2048, 1, 0);
  bench_dot(32, 1024, 1024, 0, 1);
  bench_dot(32, 1024, 1024, 0, 0);
  bench_dot(1024, 1024, 32, 1, 0);
  bench_gemm(TT_BF16, 1024, 0, 1);
  bench_conv(8, 64, 56, 64, 3, 1);
  bench_conv(8, 64, 56, 64, 3, 64);
  bench_conv(8, 256, 14, 256, 1, 1);
  const int64_t R = 4096, C = 1024;
  bench_mem("add f32 4M", 1, TT_BIN_ADD, R, C, 0, 0);
  bench_mem("mul f32 4M by scalar", 1, TT_BIN_MUL, R, C, 1, 0);
  bench_mem("exp f32 4M", 0, TT_UN_EXP, R, C, 0, 0);
  bench_mem("sigmoid f32 4M", 0, TT_UN_SIGMOID, R, C, 0, 0);
  bench_mem("tanh f32 4M", 0, TT_UN_TANH, R, C, 0, 0);
  bench_mem("gelu_erf f32 4M", 0, TT_UN_GELU_ERF, R, C, 0, 0);
  bench_mem("relu f32 4M", 0, TT_UN_RELU, R, C, 0, 0);
  bench_mem("sum f32 4096x1024 over dim 1", 2, TT_RED_SUM, R, C, 0, 2);
  bench_mem("sum f32 4096x1024 over dim 0", 2, TT_RED_SUM, R, C, 0, 1);
  /* The decoder's bias gradients: column sums over its 2048 tokens. */
  bench_mem("sum f32 2048x384 over dim 0", 2, TT_RED_SUM, 2048, 384, 0, 1);
  bench_mem("sum f32 2048x128 over dim 0", 2, TT_RED_SUM, 2048, 128, 0, 1);
  bench_mem("max f32 4096x1024 over dim 1", 2, TT_RED_MAX, R, C, 0, 2);
  bench_mem("softmax f32 4096x1024 dim 1", 3, 0, R, C, 0, 0);
  bench_mem("transpose f32 4096x1024", 4, 0, R, C, 0, 0);
  bench_transpose3(64, 128, 32);
  /* The decoder's attention (batch 32, 4 heads of 32, 64 tokens). */
  bench_attention(32, 4, 64, 32, 1);
  bench_attention_strided(32, 4, 64, 32);
  bench_attention(32, 4, 64, 32, 0);
  bench_attention(4, 8, 512, 64, 1);
  bench_transpose3(64, 32, 128);
  return 0;
}
