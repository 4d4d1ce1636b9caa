/* The collective layer (include/torchtpu/collective.h) with 2, 4 and 8
 * member threads: every operation against a serial reference, the
 * mismatch error naming both sides, the deadline naming the absent
 * member, and abort waking a waiter. */
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "test_harness.h"
#include "runtime/collective_internal.h" /* tt_coll_stream_bytes */
#include "torchtpu/collective.h"

#define MAXN 8

/* One member's call, run on its own thread. */
typedef struct member_s {
  int rank, n;
  const int64_t *ids;
  int op;           /* which call (see member_main) */
  tt_dtype_t dtype;
  tt_reduce_op_t reduce;
  const void *in;
  void *out;
  int64_t count;
  tt_collective_blocks_t in_b, out_b;
  const int64_t *pairs;
  int32_t num_pairs;
  int32_t root;
  tt_status_t st;
} member_t;

enum { OP_ALL_REDUCE, OP_ALL_GATHER, OP_REDUCE_SCATTER, OP_ALL_TO_ALL, OP_PERMUTE, OP_BROADCAST,
       OP_BARRIER };

static void *member_main(void *arg) {
  member_t *m = arg;
  int32_t dev = (int32_t)m->ids[m->rank];
  tt_collective_group_t g = {m->ids, m->n};
  switch (m->op) {
    case OP_ALL_REDUCE:
      m->st = tt_collective_all_reduce(dev, g, m->reduce, m->dtype, m->in, m->out, m->count);
      break;
    case OP_ALL_GATHER:
      m->st = tt_collective_all_gather(dev, g, m->dtype, m->in, m->out, m->out_b);
      break;
    case OP_REDUCE_SCATTER:
      m->st = tt_collective_reduce_scatter(dev, g, m->reduce, m->dtype, m->in, m->out, m->in_b);
      break;
    case OP_ALL_TO_ALL:
      m->st = tt_collective_all_to_all(dev, g, m->dtype, m->in, m->out, m->in_b, m->out_b);
      break;
    case OP_PERMUTE:
      m->st = tt_collective_permute(dev, g, m->pairs, m->num_pairs, m->dtype, m->in, m->out,
                                    m->count);
      break;
    case OP_BROADCAST:
      m->st = tt_collective_broadcast(dev, g, m->root, m->dtype, m->in, m->out, m->count);
      break;
    default:
      m->st = tt_collective_barrier(dev, g);
      break;
  }
  return NULL;
}

/* Runs members m[0..k) on threads and joins them. */
static void run_members(member_t *m, int k) {
  pthread_t th[MAXN];
  for (int i = 0; i < k; ++i) pthread_create(&th[i], NULL, member_main, &m[i]);
  for (int i = 0; i < k; ++i) pthread_join(th[i], NULL);
}

static const int64_t kIds[MAXN] = {0, 1, 2, 3, 4, 5, 6, 7};

static void fill(tensor_t *t, int n, tt_reduce_op_t red) {
  for (int64_t i = 0; i < t->n; ++i) {
    double v;
    if (t->v.dtype == TT_BOOL) v = rnd_int(0, 4) != 0;
    else if (red == TT_RED_PROD) v = (double)rnd_int(-2, 2) + (tt_dtype_is_float(t->v.dtype) ? 0.5 : 0);
    else if (tt_dtype_is_float(t->v.dtype)) v = rnd_uniform(-4, 4);
    else if (t->v.dtype == TT_U8) v = (double)rnd_int(0, 50);
    else v = (double)rnd_int(-50, 50);
    (void)n;
    tset(t, i, v);
  }
}

/* Serial reference of reducing values a (accumulated) and b. */
static double ref_reduce_f(tt_reduce_op_t r, double a, double b) {
  switch (r) {
    case TT_RED_SUM: return a + b;
    case TT_RED_PROD: return a * b;
    case TT_RED_MAX: return b > a ? b : a;
    default: return b < a ? b : a;
  }
}

static int64_t ref_reduce_i(tt_dtype_t dt, tt_reduce_op_t r, int64_t a, int64_t b) {
  if (dt == TT_BOOL) {
    int any = r == TT_RED_SUM || r == TT_RED_MAX || r == TT_RED_ANY;
    return any ? (a || b) : (a && b);
  }
  switch (r) {
    case TT_RED_SUM: return (int64_t)((uint64_t)a + (uint64_t)b);
    case TT_RED_PROD: return (int64_t)((uint64_t)a * (uint64_t)b);
    case TT_RED_MAX: return b > a ? b : a;
    case TT_RED_MIN: return b < a ? b : a;
    case TT_RED_ALL: return a & b;
    default: return a | b;
  }
}

/* want[i] = reduce over q of in[q][i], in rank order, in the dtype's
 * accumulation precision (float for f16/bf16/f32), stored in want. */
static void reference_reduce(tensor_t *want, tensor_t *in, int n, tt_reduce_op_t red,
                             int64_t (*index)(int64_t i, int q, void *ctx), void *ctx) {
  for (int64_t i = 0; i < want->n; ++i) {
    if (tt_dtype_is_float(want->v.dtype)) {
      int f64 = want->v.dtype == TT_F64;
      double acc = tget(&in[0], index(i, 0, ctx));
      for (int q = 1; q < n; ++q) {
        acc = ref_reduce_f(red, acc, tget(&in[q], index(i, q, ctx)));
        if (!f64) acc = (float)acc;
      }
      tset(want, i, acc);
    } else {
      int64_t acc = tgeti(&in[0], index(i, 0, ctx));
      for (int q = 1; q < n; ++q) acc = ref_reduce_i(want->v.dtype, red, acc, tgeti(&in[q], index(i, q, ctx)));
      tset(want, i, (double)acc);
    }
  }
}

static int64_t same_index(int64_t i, int q, void *ctx) {
  (void)q;
  (void)ctx;
  return i;
}

static int bytes_equal(const tensor_t *a, const tensor_t *b) {
  return a->n == b->n &&
         !memcmp(a->v.data, b->v.data, (size_t)a->n * tt_dtype_size(a->v.dtype));
}

static void test_all_reduce(int n, tt_dtype_t dt, tt_reduce_op_t red, int64_t count) {
  int64_t dims[1] = {count};
  tensor_t in[MAXN], out[MAXN];
  member_t m[MAXN];
  for (int q = 0; q < n; ++q) {
    in[q] = tensor_new(dt, 1, dims);
    out[q] = tensor_new(dt, 1, dims);
    fill(&in[q], n, red);
    m[q] = (member_t){.rank = q, .n = n, .ids = kIds, .op = OP_ALL_REDUCE, .dtype = dt,
                      .reduce = red, .in = in[q].v.data, .out = out[q].v.data, .count = count};
  }
  tensor_t want = tensor_new(dt, 1, dims);
  reference_reduce(&want, in, n, red, same_index, NULL);
  run_members(m, n);
  for (int q = 0; q < n; ++q) {
    CHECK_OK(m[q].st, "all_reduce");
    CHECK(bytes_equal(&out[q], &want), "all_reduce %s op %d n=%d count=%lld: member %d differs",
          tt_dtype_name(dt), (int)red, n, (long long)count, q);
  }
  for (int q = 0; q < n; ++q) {
    tensor_free(&in[q]);
    tensor_free(&out[q]);
  }
  tensor_free(&want);
}

/* In place (in == out) on every member. */
static void test_all_reduce_in_place(int n) {
  int64_t dims[1] = {1000};
  tensor_t buf[MAXN], orig[MAXN];
  member_t m[MAXN];
  for (int q = 0; q < n; ++q) {
    buf[q] = tensor_new(TT_F32, 1, dims);
    orig[q] = tensor_new(TT_F32, 1, dims);
    fill(&buf[q], n, TT_RED_SUM);
    memcpy(orig[q].v.data, buf[q].v.data, 4000);
    m[q] = (member_t){.rank = q, .n = n, .ids = kIds, .op = OP_ALL_REDUCE, .dtype = TT_F32,
                      .reduce = TT_RED_SUM, .in = buf[q].v.data, .out = buf[q].v.data, .count = 1000};
  }
  tensor_t want = tensor_new(TT_F32, 1, dims);
  reference_reduce(&want, orig, n, TT_RED_SUM, same_index, NULL);
  run_members(m, n);
  for (int q = 0; q < n; ++q) {
    CHECK_OK(m[q].st, "all_reduce in place");
    CHECK(bytes_equal(&buf[q], &want), "in-place all_reduce n=%d: member %d differs", n, q);
    tensor_free(&buf[q]);
    tensor_free(&orig[q]);
  }
  tensor_free(&want);
}

static void test_all_gather(int n, tt_dtype_t dt) {
  const int64_t rows = 3, row = 5;
  int64_t in_dims[2] = {rows, row}, out_dims[2] = {rows, row * n};
  tensor_t in[MAXN], out[MAXN];
  member_t m[MAXN];
  for (int q = 0; q < n; ++q) {
    in[q] = tensor_new(dt, 2, in_dims);
    out[q] = tensor_new(dt, 2, out_dims);
    fill(&in[q], n, TT_RED_SUM);
    m[q] = (member_t){.rank = q, .n = n, .ids = kIds, .op = OP_ALL_GATHER, .dtype = dt,
                      .in = in[q].v.data, .out = out[q].v.data, .out_b = {rows, row}};
  }
  run_members(m, n);
  for (int q = 0; q < n; ++q) {
    CHECK_OK(m[q].st, "all_gather");
    int ok = 1;
    for (int64_t r = 0; r < rows; ++r)
      for (int p = 0; p < n; ++p)
        for (int64_t c = 0; c < row; ++c)
          ok &= tget(&out[q], r * row * n + p * row + c) == tget(&in[p], r * row + c);
    CHECK(ok, "all_gather %s n=%d: member %d differs", tt_dtype_name(dt), n, q);
  }
  for (int q = 0; q < n; ++q) {
    tensor_free(&in[q]);
    tensor_free(&out[q]);
  }
}

typedef struct rs_ctx_s {
  int64_t row, n, rank;
} rs_ctx_t;

static int64_t rs_index(int64_t i, int q, void *ctx) {
  rs_ctx_t *c = ctx;
  (void)q;
  return (i / c->row * c->n + c->rank) * c->row + i % c->row;
}

static void test_reduce_scatter(int n, tt_dtype_t dt, tt_reduce_op_t red) {
  const int64_t rows = 2, row = 7;
  int64_t in_dims[2] = {rows, row * n}, out_dims[2] = {rows, row};
  tensor_t in[MAXN], out[MAXN];
  member_t m[MAXN];
  for (int q = 0; q < n; ++q) {
    in[q] = tensor_new(dt, 2, in_dims);
    out[q] = tensor_new(dt, 2, out_dims);
    fill(&in[q], n, red);
    m[q] = (member_t){.rank = q, .n = n, .ids = kIds, .op = OP_REDUCE_SCATTER, .dtype = dt,
                      .reduce = red, .in = in[q].v.data, .out = out[q].v.data, .in_b = {rows, row}};
  }
  run_members(m, n);
  for (int q = 0; q < n; ++q) {
    CHECK_OK(m[q].st, "reduce_scatter");
    tensor_t want = tensor_new(dt, 2, out_dims);
    rs_ctx_t ctx = {row, n, q};
    reference_reduce(&want, in, n, red, rs_index, &ctx);
    CHECK(bytes_equal(&out[q], &want), "reduce_scatter %s n=%d: member %d differs",
          tt_dtype_name(dt), n, q);
    tensor_free(&want);
  }
  for (int q = 0; q < n; ++q) {
    tensor_free(&in[q]);
    tensor_free(&out[q]);
  }
}

/* x of shape [2, 3n] split along dim 1 (blocks: 2 rows of 3) and
 * concatenated along dim 0 (blocks: 1 row of 6): out [2n, 3]. */
static void test_all_to_all(int n) {
  int64_t in_dims[2] = {2, 3 * n}, out_dims[2] = {2 * n, 3};
  tensor_t in[MAXN], out[MAXN];
  member_t m[MAXN];
  for (int q = 0; q < n; ++q) {
    in[q] = tensor_new(TT_I32, 2, in_dims);
    out[q] = tensor_new(TT_I32, 2, out_dims);
    fill(&in[q], n, TT_RED_SUM);
    m[q] = (member_t){.rank = q, .n = n, .ids = kIds, .op = OP_ALL_TO_ALL, .dtype = TT_I32,
                      .in = in[q].v.data, .out = out[q].v.data, .in_b = {2, 3}, .out_b = {1, 6}};
  }
  run_members(m, n);
  for (int q = 0; q < n; ++q) {
    CHECK_OK(m[q].st, "all_to_all");
    int ok = 1;
    /* out[q][2p + r][c] = in[p][r][3q + c] */
    for (int p = 0; p < n; ++p)
      for (int r = 0; r < 2; ++r)
        for (int c = 0; c < 3; ++c)
          ok &= tgeti(&out[q], (2 * p + r) * 3 + c) == tgeti(&in[p], r * 3 * n + 3 * q + c);
    CHECK(ok, "all_to_all n=%d: member %d differs", n, q);
  }
  for (int q = 0; q < n; ++q) {
    tensor_free(&in[q]);
    tensor_free(&out[q]);
  }
}

/* A ring shifted by one, with the pair into member 0 left out (member 0
 * receives zeros). */
static void test_permute(int n) {
  int64_t dims[1] = {33};
  int64_t pairs[2 * MAXN];
  int32_t np = 0;
  for (int q = 0; q + 1 < n; ++q) {
    pairs[2 * np] = q;
    pairs[2 * np + 1] = q + 1;
    ++np;
  }
  tensor_t in[MAXN], out[MAXN];
  member_t m[MAXN];
  for (int q = 0; q < n; ++q) {
    in[q] = tensor_new(TT_BF16, 1, dims);
    out[q] = tensor_new(TT_BF16, 1, dims);
    fill(&in[q], n, TT_RED_SUM);
    for (int64_t i = 0; i < 33; ++i) tset(&out[q], i, 99);
    m[q] = (member_t){.rank = q, .n = n, .ids = kIds, .op = OP_PERMUTE, .dtype = TT_BF16,
                      .in = in[q].v.data, .out = out[q].v.data, .count = 33, .pairs = pairs,
                      .num_pairs = np};
  }
  run_members(m, n);
  for (int q = 0; q < n; ++q) {
    CHECK_OK(m[q].st, "collective_permute");
    int ok = 1;
    for (int64_t i = 0; i < 33; ++i) ok &= tget(&out[q], i) == (q ? tget(&in[q - 1], i) : 0.0);
    CHECK(ok, "collective_permute n=%d: member %d differs", n, q);
  }
  for (int q = 0; q < n; ++q) {
    tensor_free(&in[q]);
    tensor_free(&out[q]);
  }
}

static void test_broadcast_barrier(int n) {
  int64_t dims[1] = {17};
  tensor_t in[MAXN], out[MAXN];
  member_t m[MAXN];
  for (int q = 0; q < n; ++q) {
    in[q] = tensor_new(TT_I64, 1, dims);
    out[q] = tensor_new(TT_I64, 1, dims);
    fill(&in[q], n, TT_RED_SUM);
    m[q] = (member_t){.rank = q, .n = n, .ids = kIds, .op = OP_BROADCAST, .dtype = TT_I64,
                      .in = in[q].v.data, .out = out[q].v.data, .count = 17, .root = 1};
  }
  run_members(m, n);
  for (int q = 0; q < n; ++q) {
    CHECK_OK(m[q].st, "broadcast");
    CHECK(!memcmp(out[q].v.data, in[1].v.data, 17 * 8), "broadcast n=%d: member %d differs", n, q);
    m[q].op = OP_BARRIER;
  }
  run_members(m, n);
  for (int q = 0; q < n; ++q) CHECK_OK(m[q].st, "barrier");
  for (int q = 0; q < n; ++q) {
    tensor_free(&in[q]);
    tensor_free(&out[q]);
  }
}

static void test_every_op(int n) {
  static const struct {
    tt_dtype_t dt;
    tt_reduce_op_t red;
  } cases[] = {
      {TT_F32, TT_RED_SUM}, {TT_F32, TT_RED_PROD}, {TT_F32, TT_RED_MIN},  {TT_F32, TT_RED_MAX},
      {TT_F64, TT_RED_SUM}, {TT_BF16, TT_RED_SUM}, {TT_F16, TT_RED_MAX},  {TT_F16, TT_RED_SUM},
      {TT_I32, TT_RED_SUM}, {TT_I32, TT_RED_ALL},  {TT_I32, TT_RED_ANY},  {TT_I8, TT_RED_PROD},
      {TT_I64, TT_RED_MIN}, {TT_U8, TT_RED_MAX},   {TT_I16, TT_RED_SUM},  {TT_BOOL, TT_RED_ALL},
      {TT_BOOL, TT_RED_ANY}, {TT_BOOL, TT_RED_SUM},
  };
  for (size_t c = 0; c < sizeof(cases) / sizeof(cases[0]); ++c) {
    test_all_reduce(n, cases[c].dt, cases[c].red, 1000);
    test_all_reduce(n, cases[c].dt, cases[c].red, 3); /* fewer elements than members */
  }
  test_all_reduce(n, TT_F32, TT_RED_SUM, 5000); /* several blocks per slice */
  /* Several 256 KiB chunks (claimed by whichever member runs), a tail. */
  test_all_reduce(n, TT_F32, TT_RED_SUM, 200003);
  test_all_reduce(n, TT_I32, TT_RED_MAX, 200003);
  test_all_reduce(n, TT_BF16, TT_RED_SUM, 200003);
  test_all_reduce(n, TT_F32, TT_RED_SUM, 0);
  test_all_reduce_in_place(n);
  test_all_gather(n, TT_F32);
  test_all_gather(n, TT_BF16);
  test_reduce_scatter(n, TT_F32, TT_RED_SUM);
  test_reduce_scatter(n, TT_BF16, TT_RED_SUM);
  test_reduce_scatter(n, TT_I32, TT_RED_MAX);
  test_all_to_all(n);
  test_permute(n);
  test_broadcast_barrier(n);
}

/* The fused float32 sum with streaming stores (tt_coll_stream_bytes
 * lowered to 0), against the serial sum in rank order, bit for bit: into
 * 16-byte aligned outputs, into outputs one float off alignment (plain
 * stores), and in place. */
static void test_f32_sum_streamed(int n) {
  size_t saved = tt_coll_stream_bytes;
  tt_coll_stream_bytes = 0;
  const int64_t count = 2 * 65536 + 4099; /* several chunks and blocks, a tail of 3 */
  int64_t dims[1] = {count + 1};
  for (int mode = 0; mode < 3; ++mode) { /* aligned, misaligned, in place */
    tensor_t in[MAXN], out[MAXN], orig[MAXN];
    member_t m[MAXN];
    for (int q = 0; q < n; ++q) {
      in[q] = tensor_new(TT_F32, 1, dims);
      out[q] = tensor_new(TT_F32, 1, dims);
      fill(&in[q], n, TT_RED_SUM);
      orig[q] = tensor_new(TT_F32, 1, dims);
      memcpy(orig[q].v.data, in[q].v.data, (size_t)(count + 1) * 4);
      float *o = (float *)out[q].v.data + (mode == 1);
      m[q] = (member_t){.rank = q, .n = n, .ids = kIds, .op = OP_ALL_REDUCE, .dtype = TT_F32,
                        .reduce = TT_RED_SUM, .in = in[q].v.data,
                        .out = mode == 2 ? in[q].v.data : (void *)o, .count = count};
    }
    run_members(m, n);
    for (int q = 0; q < n; ++q) {
      CHECK_OK(m[q].st, "streamed all_reduce");
      const float *got = m[q].out;
      for (int64_t i = 0; i < count; ++i) {
        float want = ((const float *)orig[0].v.data)[i];
        for (int r = 1; r < n; ++r) want += ((const float *)orig[r].v.data)[i];
        if (memcmp(&got[i], &want, 4)) {
          CHECK(0, "streamed all_reduce n=%d mode %d: member %d element %lld: %g, want %g", n,
                mode, q, (long long)i, (double)got[i], (double)want);
          break;
        }
      }
    }
    for (int q = 0; q < n; ++q) {
      tensor_free(&in[q]);
      tensor_free(&out[q]);
      tensor_free(&orig[q]);
    }
  }
  tt_coll_stream_bytes = saved;
}

/* complex64 sums as float pairs. */
static void test_complex_sum(void) {
  float a[4] = {1, 2, 3, 4}, b[4] = {10, 20, 30, 40}, oa[4], ob[4];
  member_t m[2];
  m[0] = (member_t){.rank = 0, .n = 2, .ids = kIds, .op = OP_ALL_REDUCE, .dtype = TT_C64,
                    .reduce = TT_RED_SUM, .in = a, .out = oa, .count = 2};
  m[1] = m[0];
  m[1].rank = 1, m[1].in = b, m[1].out = ob;
  run_members(m, 2);
  CHECK_OK(m[0].st);
  CHECK_OK(m[1].st);
  CHECK(oa[0] == 11 && oa[3] == 44 && ob[1] == 22, "complex64 sum");
}

static void test_mismatch(void) {
  static const int64_t ids[2] = {30, 31};
  float x[1024], y[1024], z[2048];
  memset(x, 0, sizeof(x));
  memset(y, 0, sizeof(y));
  member_t m[2];
  m[0] = (member_t){.rank = 0, .n = 2, .ids = ids, .op = OP_ALL_REDUCE, .dtype = TT_F32,
                    .reduce = TT_RED_SUM, .in = x, .out = y, .count = 1024};
  m[1] = (member_t){.rank = 1, .n = 2, .ids = ids, .op = OP_ALL_GATHER, .dtype = TT_F32,
                    .in = x, .out = z, .out_b = {1, 1024}};
  run_members(m, 2);
  const char *want =
      "device 31 issued all_gather(float32, 1024) #0 but device 30 issued "
      "all_reduce(float32, 1024, sum) #0";
  for (int q = 0; q < 2; ++q) {
    CHECK(tt_status_code(m[q].st) == TT_INVALID_ARGUMENT && strstr(tt_status_message(m[q].st), want),
          "mismatch: member %d got %d '%s'", q, (int)tt_status_code(m[q].st),
          tt_status_message(m[q].st));
    tt_status_free(m[q].st);
  }
  /* Dtype mismatch on the next call, #1 on both sides. */
  m[1] = m[0];
  m[1].rank = 1, m[1].dtype = TT_I32;
  run_members(m, 2);
  CHECK(m[0].st && strstr(tt_status_message(m[0].st),
                          "device 31 issued all_reduce(int32, 1024, sum) #1 but device 30 issued "
                          "all_reduce(float32, 1024, sum) #1"),
        "dtype mismatch: '%s'", tt_status_message(m[0].st));
  tt_status_free(m[0].st);
  tt_status_free(m[1].st);
  /* Agreeing calls work again afterwards. */
  m[1].dtype = TT_F32;
  run_members(m, 2);
  CHECK_OK(m[0].st);
  CHECK_OK(m[1].st);
}

static double now_s(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + ts.tv_nsec * 1e-9;
}

static void test_timeout(void) {
  static const int64_t ids[3] = {40, 41, 42};
  setenv("TORCHTPU_COLLECTIVE_TIMEOUT_S", "0.3", 1);
  tt_config_reload();
  float x[4] = {0}, y[4];
  member_t m[2];
  for (int q = 0; q < 2; ++q)
    m[q] = (member_t){.rank = q, .n = 3, .ids = ids, .op = OP_ALL_REDUCE, .dtype = TT_F32,
                      .reduce = TT_RED_SUM, .in = x, .out = q ? y : x, .count = 4};
  double t0 = now_s();
  run_members(m, 2); /* device 42 never arrives */
  double took = now_s() - t0;
  CHECK(took > 0.25 && took < 3.0, "timeout took %.2f s", took);
  for (int q = 0; q < 2; ++q) {
    const char *msg = tt_status_message(m[q].st);
    CHECK(tt_status_code(m[q].st) == TT_INTERNAL && strstr(msg, "timed out") &&
              strstr(msg, "arrived: 40 41") && strstr(msg, "not arrived: 42") &&
              strstr(msg, "all_reduce(float32, 4, sum)"),
          "timeout: member %d got '%s'", q, msg);
    tt_status_free(m[q].st);
  }
  /* Not a positive number: the default. */
  static const char *const bad[] = {"abc", "-1", "0", "2s", ""};
  for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); ++i) {
    setenv("TORCHTPU_COLLECTIVE_TIMEOUT_S", bad[i], 1);
    tt_config_reload();
    CHECK(tt_config()->collective_timeout_s == 300, "timeout '%s' read as %g", bad[i],
          tt_config()->collective_timeout_s);
  }
  unsetenv("TORCHTPU_COLLECTIVE_TIMEOUT_S");
  tt_config_reload();
  CHECK(tt_config()->collective_timeout_s == 300, "default timeout %g",
        tt_config()->collective_timeout_s);
}

static void *abort_later(void *arg) {
  (void)arg;
  struct timespec ts = {0, 50 * 1000 * 1000};
  nanosleep(&ts, NULL);
  tt_collective_abort("replica 1 raised ValueError");
  return NULL;
}

static void test_abort(void) {
  static const int64_t ids[2] = {50, 51};
  float x[4] = {0}, y[4];
  member_t m = {.rank = 0, .n = 2, .ids = ids, .op = OP_BARRIER, .in = x, .out = y};
  pthread_t th;
  pthread_create(&th, NULL, abort_later, NULL);
  double t0 = now_s();
  member_main(&m); /* device 51 never arrives: the abort wakes us */
  pthread_join(th, NULL);
  CHECK(now_s() - t0 < 5.0, "abort took too long");
  CHECK(tt_status_code(m.st) == TT_INTERNAL &&
            strstr(tt_status_message(m.st), "collectives aborted: replica 1 raised ValueError"),
        "abort: '%s'", tt_status_message(m.st));
  tt_status_free(m.st);
  /* Later calls fail at once, until a reset. */
  member_t p[2];
  for (int q = 0; q < 2; ++q)
    p[q] = (member_t){.rank = q, .n = 2, .ids = ids, .op = OP_ALL_REDUCE, .dtype = TT_F32,
                      .reduce = TT_RED_SUM, .in = q ? x : y, .out = q ? y : x, .count = 4};
  member_main(&p[0]);
  CHECK(tt_status_code(p[0].st) == TT_INTERNAL, "call after abort");
  tt_status_free(p[0].st);
  tt_collective_reset();
  float a[4] = {1, 2, 3, 4}, b[4] = {1, 1, 1, 1}, oa[4], ob[4];
  p[0].in = a, p[0].out = oa, p[1].in = b, p[1].out = ob;
  run_members(p, 2);
  CHECK_OK(p[0].st, "after reset");
  CHECK_OK(p[1].st, "after reset");
  CHECK(oa[3] == 5 && ob[0] == 2, "all_reduce after reset");
}

static void test_bad_arguments(void) {
  static const int64_t ids[2] = {0, 1};
  float x[2];
  tt_collective_group_t g = {ids, 2};
  CHECK_CODE(tt_collective_all_reduce(5, g, TT_RED_SUM, TT_F32, x, x, 2), TT_INVALID_ARGUMENT,
             "device outside the group");
  CHECK_CODE(tt_collective_all_reduce(0, g, TT_RED_ALL, TT_F32, x, x, 2), TT_TYPE_ERROR,
             "and on floats");
  CHECK_CODE(tt_collective_all_reduce(0, g, TT_RED_MEAN, TT_F32, x, x, 2), TT_INVALID_ARGUMENT,
             "mean is no collective reduction");
  static const int64_t dup[2] = {0, 0};
  CHECK_CODE(tt_collective_barrier(0, (tt_collective_group_t){dup, 2}), TT_INVALID_ARGUMENT,
             "repeated id");
  static const int64_t pairs[4] = {0, 1, 1, 1};
  CHECK_CODE(tt_collective_permute(0, g, pairs, 2, TT_F32, x, x, 2), TT_INVALID_ARGUMENT,
             "a target twice");
  /* One member: a local copy. */
  float a[3] = {1, 2, 3}, b[3];
  static const int64_t one[1] = {7};
  CHECK_OK(tt_collective_all_reduce(7, (tt_collective_group_t){one, 1}, TT_RED_SUM, TT_F32, a, b,
                                    3));
  CHECK(b[2] == 3, "group of one");
}

int main(void) {
  test_every_op(2);
  test_every_op(4);
  test_every_op(8);
  test_f32_sum_streamed(2);
  test_f32_sum_streamed(3);
  test_f32_sum_streamed(4);
  test_complex_sum();
  test_mismatch();
  test_timeout();
  test_abort();
  test_bad_arguments();
  tt_collective_set_world_size(4);
  CHECK(tt_collective_world_size() == 4);
  tt_collective_set_world_size(0);
  CHECK(tt_collective_world_size() == 1);
  return test_summary();
}
