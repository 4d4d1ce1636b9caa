/* Reductions (tt_kernel_reduce) and inclusive scans (tt_kernel_scan).
 *
 * A reduction first drops size-1 dims and merges neighbouring dims of the
 * same kind. When at most one run of reduced dims remains, x is viewed as
 * [A, R, B] (A, B kept, R reduced) and takes a fast path:
 *  - B == 1 (innermost dims reduced): each output is a contiguous row. Rows
 *    longer than TT_RED_CHUNK are cut into fixed chunks whose partial
 *    results combine in order, so the result never depends on the thread
 *    count and a single long row still uses every thread.
 *  - B > 1 (outer/middle dims reduced): rows of B accumulate into a block of
 *    per-column accumulators, which vectorises across columns.
 * Anything else (several separated reduced runs) goes through a generic
 * loop that broadcasts the accumulator array over x.
 *
 * Floating-point inputs accumulate in double (PyTorch's CPU acc_type),
 * integers and BOOL in int64 with wrap-around.
 */
#include <stdlib.h>

#include "kernels/kernel_util.h"

#define TT_RED_CHUNK 65536
#define TT_RED_COLS 512 /* columns per item, B > 1 path, for rows wider than: */
/* Rows of up to this many columns are taken whole by one item (its
 * accumulators, 8 bytes a column, stay in L1/L2): one item streaming whole
 * rows ran 1.5x faster than two reading alternate 2 KiB halves of them
 * (column sums of [4096, 1024] at one and two threads, 1.05-1.8 -> 0.66-0.77
 * ms; a bias gradient is such a sum). */
#define TT_RED_WIDE 4096
#define TT_RED_ROWS 512 /* rows per item, B > 1 path with few column blocks */

typedef struct tt_acc_s {
  double d;    /* float-class value */
  int64_t i;   /* int-class value, or the ANY/ALL flag */
  int64_t idx; /* ARGMAX/ARGMIN position; -1 before the first element */
} tt_acc_t;

static void tt_acc_init(tt_reduce_op_t op, tt_acc_t *s) {
  s->idx = -1;
  switch (op) {
    case TT_RED_PROD: s->d = 1; s->i = 1; break;
    case TT_RED_MAX: s->d = -INFINITY; s->i = INT64_MIN; break;
    case TT_RED_MIN: s->d = INFINITY; s->i = INT64_MAX; break;
    case TT_RED_ALL: s->d = 0; s->i = 1; break;
    default: s->d = 0; s->i = 0; break;
  }
}

/* Folds value v at position j into s (float class). */
static TT_ALWAYS_INLINE void tt_acc_f64_one(tt_reduce_op_t op, tt_acc_t *s,
                                            double v, int64_t j) {
  switch (op) {
    case TT_RED_SUM: case TT_RED_MEAN: s->d += v; break;
    case TT_RED_PROD: s->d *= v; break;
    case TT_RED_MAX: if (v > s->d || v != v) s->d = v; break;
    case TT_RED_MIN: if (v < s->d || v != v) s->d = v; break;
    case TT_RED_ARGMAX:
      if (s->idx < 0 || v > s->d || (v != v && s->d == s->d)) {
        s->d = v;
        s->idx = j;
      }
      break;
    case TT_RED_ARGMIN:
      if (s->idx < 0 || v < s->d || (v != v && s->d == s->d)) {
        s->d = v;
        s->idx = j;
      }
      break;
    case TT_RED_ANY: s->i |= v != 0; break;
    case TT_RED_ALL: s->i &= v != 0; break;
    default: break;
  }
}

static TT_ALWAYS_INLINE void tt_acc_i64_one(tt_reduce_op_t op, tt_acc_t *s,
                                            int64_t v, int64_t j) {
  switch (op) {
    case TT_RED_SUM: case TT_RED_MEAN:
      s->i = (int64_t)((uint64_t)s->i + (uint64_t)v);
      break;
    case TT_RED_PROD: s->i = (int64_t)((uint64_t)s->i * (uint64_t)v); break;
    case TT_RED_MAX: if (v > s->i) s->i = v; break;
    case TT_RED_MIN: if (v < s->i) s->i = v; break;
    case TT_RED_ARGMAX:
      if (s->idx < 0 || v > s->i) { s->i = v; s->idx = j; }
      break;
    case TT_RED_ARGMIN:
      if (s->idx < 0 || v < s->i) { s->i = v; s->idx = j; }
      break;
    case TT_RED_ANY: s->i |= v != 0; break;
    case TT_RED_ALL: s->i &= v != 0; break;
    default: break;
  }
}

/* Combines a later partial result b into a (chunks are combined in order). */
static void tt_acc_merge(tt_reduce_op_t op, tt_class_t cls, tt_acc_t *a,
                         const tt_acc_t *b) {
  if (op == TT_RED_ARGMAX || op == TT_RED_ARGMIN) {
    if (b->idx < 0) return;
    if (cls == TT_CLASS_INT) {
      if (a->idx < 0 || (op == TT_RED_ARGMAX ? b->i > a->i : b->i < a->i)) *a = *b;
    } else {
      tt_acc_t t = *a;
      tt_acc_f64_one(op, &t, b->d, b->idx);
      *a = t;
    }
    return;
  }
  if (cls == TT_CLASS_INT || op == TT_RED_ANY || op == TT_RED_ALL) {
    tt_acc_i64_one(op, a, b->i, 0);
  } else {
    tt_acc_f64_one(op, a, b->d, 0);
  }
}

/* Sum of a contiguous f32 row in double, 16 independent lanes. */
TT_TARGET_CLONES
static double tt_sum_f32_row(const float *x, int64_t n) {
  double acc[16] = {0};
  int64_t i = 0;
  for (; i + 16 <= n; i += 16) {
    for (int j = 0; j < 16; ++j) acc[j] += x[i + j];
  }
  double s = 0;
  for (int j = 0; j < 16; ++j) s += acc[j];
  for (; i < n; ++i) s += x[i];
  return s;
}

/* Column accumulation of one f32 row into w accumulators. */
TT_TARGET_CLONES
static void tt_colsum_f32(const float *row, double *acc, int64_t w) {
  for (int64_t j = 0; j < w; ++j) acc[j] += row[j];
}

TT_TARGET_CLONES
static void tt_colminmax_f32(const float *row, float *acc, int64_t w,
                             int want_max) {
  if (want_max) {
    for (int64_t j = 0; j < w; ++j) {
      float v = row[j], m = acc[j];
      acc[j] = (v > m || v != v) && m == m ? v : m; /* NaN sticks */
    }
  } else {
    for (int64_t j = 0; j < w; ++j) {
      float v = row[j], m = acc[j];
      acc[j] = (v < m || v != v) && m == m ? v : m;
    }
  }
}

/* Folds x[off .. off+len) (contiguous) into s; j0 is the position of the
 * first element along the reduced dim. */
static void tt_acc_row(tt_reduce_op_t op, const tt_view_t *x, int64_t off,
                       int64_t len, int64_t j0, tt_acc_t *s) {
  tt_class_t cls = tt_class_of(x->dtype);
  if (x->dtype == TT_F32 && (op == TT_RED_SUM || op == TT_RED_MEAN)) {
    s->d += tt_sum_f32_row((const float *)x->data + off, len);
    return;
  }
  if (x->dtype == TT_F32 && (op == TT_RED_MAX || op == TT_RED_MIN) && len > 0) {
    double v = tt_row_minmax_f32((const float *)x->data + off, len,
                                 op == TT_RED_MAX);
    tt_acc_f64_one(op, s, v, 0);
    return;
  }
  if ((x->dtype == TT_BOOL || x->dtype == TT_U8 || x->dtype == TT_I8) &&
      (op == TT_RED_ANY || op == TT_RED_ALL)) {
    /* Byte rows (a mask's "is every score -inf" in safe softmax): OR the
     * bytes, or look for a zero byte; no per-element widening. */
    const uint8_t *b = (const uint8_t *)x->data + off;
    if (op == TT_RED_ANY) {
      uint8_t any = 0;
      for (int64_t k = 0; k < len; ++k) any |= b[k];
      s->i |= any != 0;
    } else {
      s->i &= memchr(b, 0, (size_t)len) == NULL;
    }
    return;
  }
  for (int64_t b = 0; b < len; b += TT_BLOCK) {
    int64_t n = tt_min64(TT_BLOCK, len - b);
    if (cls == TT_CLASS_INT) {
      int64_t buf[TT_BLOCK];
      tt_load_i64(x->data, x->dtype, off + b, 1, n, buf);
      for (int64_t k = 0; k < n; ++k) tt_acc_i64_one(op, s, buf[k], j0 + b + k);
    } else {
      double buf[TT_BLOCK];
      tt_load_f64(x->data, x->dtype, off + b, 1, n, buf);
      if (op == TT_RED_SUM || op == TT_RED_MEAN) {
        double acc[8] = {0};
        int64_t k = 0;
        for (; k + 8 <= n; k += 8) {
          for (int q = 0; q < 8; ++q) acc[q] += buf[k + q];
        }
        for (; k < n; ++k) acc[0] += buf[k];
        for (int q = 0; q < 8; ++q) s->d += acc[q];
      } else {
        for (int64_t k = 0; k < n; ++k) tt_acc_f64_one(op, s, buf[k], j0 + b + k);
      }
    }
  }
}

static void tt_acc_store(tt_reduce_op_t op, tt_class_t cls, const tt_acc_t *s,
                         int64_t count, tt_view_t *out, int64_t j) {
  switch (op) {
    case TT_RED_ARGMAX: case TT_RED_ARGMIN:
      tt_set_i64(out->data, out->dtype, j, s->idx < 0 ? 0 : s->idx);
      return;
    case TT_RED_ANY: case TT_RED_ALL:
      tt_set_i64(out->data, out->dtype, j, s->i);
      return;
    case TT_RED_MEAN:
      tt_set_f64(out->data, out->dtype, j,
                 (cls == TT_CLASS_INT ? (double)s->i : s->d) / (double)count);
      return;
    default:
      if (cls == TT_CLASS_INT) {
        tt_set_i64(out->data, out->dtype, j, s->i);
      } else {
        tt_set_f64(out->data, out->dtype, j, s->d);
      }
      return;
  }
}

typedef struct tt_reduce_ctx_s {
  tt_reduce_op_t op;
  const tt_view_t *x;
  tt_view_t *out;
  int64_t A, R, B;
  int64_t nchunks;   /* per row, B == 1 path */
  int64_t cols;      /* columns per item, B > 1 path */
  tt_acc_t *partial; /* [A * nchunks] when nchunks > 1 */
  int failed;        /* B > 1 path: scratch allocation failed */
} tt_reduce_ctx_t;

/* B == 1: item = (row, chunk). */
static void tt_reduce_rows_range(void *arg, int64_t begin, int64_t end) {
  const tt_reduce_ctx_t *c = (const tt_reduce_ctx_t *)arg;
  tt_class_t cls = tt_class_of(c->x->dtype);
  if (c->x->dtype == TT_F32 && (c->op == TT_RED_SUM || c->op == TT_RED_MEAN) && c->R < 16 &&
      (c->out->dtype == TT_F64 || c->out->dtype == TT_F32)) {
    /* Short rows (batch norm's first pass over 2x2 planes): the sum
     * tt_acc_row would take (its 16 lanes stay empty below 16 elements),
     * without the per-row dispatch. */
    const float *x = (const float *)c->x->data;
    int64_t R = c->R;
    for (int64_t t = begin; t < end; ++t) {
      double v = 0;
      for (int64_t k = 0; k < R; ++k) v += x[t * R + k];
      if (c->op == TT_RED_MEAN) v /= (double)R;
      if (c->out->dtype == TT_F64) ((double *)c->out->data)[t] = v;
      else ((float *)c->out->data)[t] = (float)v;
    }
    return;
  }
  for (int64_t t = begin; t < end; ++t) {
    int64_t row = t / c->nchunks, ch = t % c->nchunks;
    int64_t r0 = ch * TT_RED_CHUNK;
    int64_t len = tt_min64(TT_RED_CHUNK, c->R - r0);
    tt_acc_t s;
    tt_acc_init(c->op, &s);
    tt_acc_row(c->op, c->x, row * c->R + r0, len, r0, &s);
    if (c->nchunks > 1) {
      c->partial[t] = s;
    } else {
      tt_acc_store(c->op, cls, &s, c->R, c->out, row);
    }
  }
}

/* B > 1: item = (a, column block, row chunk). With several row chunks each
 * item leaves c->cols partial results in c->partial, combined in order
 * afterwards. */
static void tt_reduce_cols_range(void *arg, int64_t begin, int64_t end) {
  tt_reduce_ctx_t *c = (tt_reduce_ctx_t *)arg;
  tt_class_t cls = tt_class_of(c->x->dtype);
  int64_t cols = c->cols, nblk = (c->B + cols - 1) / cols, nrc = c->nchunks;
  tt_reduce_op_t op = c->op;
  int f32_fast = c->x->dtype == TT_F32 && (op == TT_RED_SUM || op == TT_RED_MEAN ||
                                           op == TT_RED_MAX || op == TT_RED_MIN);
  /* Accumulators and a converted row, cols of each. */
  size_t bytes = (size_t)cols * (sizeof(tt_acc_t) + 2 * sizeof(double) + sizeof(float));
  char *scratch = tt_scratch_alloc(bytes);
  if (!scratch) {
    __atomic_store_n(&c->failed, 1, __ATOMIC_RELAXED);
    return;
  }
  tt_acc_t *local = (tt_acc_t *)scratch;
  double *accd = (double *)(local + cols), *dbuf = accd + cols;
  int64_t *ibuf = (int64_t *)dbuf;
  float *accf = (float *)(dbuf + cols);
  for (int64_t t = begin; t < end; ++t) {
    int64_t a = t / (nblk * nrc), blk = (t / nrc) % nblk, rc = t % nrc;
    int64_t j0 = blk * cols, w = tt_min64(cols, c->B - j0);
    /* One chunk is every row (it used to stop at TT_RED_ROWS: sums over
     * more than 512 rows with 8 or more column blocks dropped the rest). */
    int64_t r0 = rc * TT_RED_ROWS, r1 = nrc > 1 ? tt_min64(c->R, r0 + TT_RED_ROWS) : c->R;
    tt_acc_t *s = nrc > 1 ? c->partial + t * cols : local;
    for (int64_t j = 0; j < w; ++j) tt_acc_init(op, &s[j]);
    if (f32_fast) {
      /* Accumulate straight from the f32 rows. */
      int want_max = op == TT_RED_MAX, is_sum = op == TT_RED_SUM || op == TT_RED_MEAN;
      for (int64_t j = 0; j < w; ++j) {
        accd[j] = 0;
        accf[j] = want_max ? -INFINITY : INFINITY;
      }
      for (int64_t r = r0; r < r1; ++r) {
        const float *row = (const float *)c->x->data + (a * c->R + r) * c->B + j0;
        if (is_sum) {
          tt_colsum_f32(row, accd, w);
        } else {
          tt_colminmax_f32(row, accf, w, want_max);
        }
      }
      for (int64_t j = 0; j < w; ++j) s[j].d = is_sum ? accd[j] : accf[j];
    } else {
      for (int64_t r = r0; r < r1; ++r) {
        int64_t off = (a * c->R + r) * c->B + j0;
        if (cls == TT_CLASS_INT) {
          tt_load_i64(c->x->data, c->x->dtype, off, 1, w, ibuf);
          for (int64_t j = 0; j < w; ++j) tt_acc_i64_one(op, &s[j], ibuf[j], r);
        } else {
          tt_load_f64(c->x->data, c->x->dtype, off, 1, w, dbuf);
          if (op == TT_RED_SUM || op == TT_RED_MEAN) {
            for (int64_t j = 0; j < w; ++j) s[j].d += dbuf[j];
          } else {
            for (int64_t j = 0; j < w; ++j) tt_acc_f64_one(op, &s[j], dbuf[j], r);
          }
        }
      }
    }
    if (nrc == 1) {
      for (int64_t j = 0; j < w; ++j) {
        tt_acc_store(op, cls, &s[j], c->R, c->out, a * c->B + j0 + j);
      }
    }
  }
  tt_scratch_free(scratch);
}

/* Several separated runs of reduced dims (e.g. batch-norm's N, H, W):
 * reduce the innermost run into an f64 (or i64) buffer in keepdim layout,
 * then reduce that over the remaining dims. Exact for MAX/MIN/ANY/ALL and
 * integer ops; MEAN is a mean of equal-sized group means. */
static tt_status_t tt_reduce_two_pass(tt_reduce_op_t op, const tt_view_t *x,
                                      uint32_t mask, tt_view_t *out) {
  uint32_t inner = 0;
  int d = x->shape.rank - 1;
  while (d >= 0 && !(((mask >> d) & 1u) && x->shape.dims[d] != 1)) --d;
  for (; d >= 0; --d) {
    int red = (mask >> d) & 1u;
    if (!red && x->shape.dims[d] != 1) break;
    if (red) inner |= 1u << d;
  }
  int int_tmp = tt_class_of(x->dtype) == TT_CLASS_INT && op != TT_RED_MEAN;
  tt_view_t tmp = {.dtype = int_tmp ? TT_I64 : TT_F64, .shape = x->shape};
  for (d = 0; d < x->shape.rank; ++d) {
    if ((inner >> d) & 1u) tmp.shape.dims[d] = 1;
  }
  int64_t n = tt_view_numel(&tmp);
  tmp.data = malloc((size_t)tt_max64(n, 1) * 8);
  if (!tmp.data) {
    return tt_status_make(TT_RESOURCE_EXHAUSTED,
                          "reduce: cannot allocate %lld partial results", (long long)n);
  }
  tt_status_t st = tt_kernel_reduce(op, x, inner, &tmp);
  if (!st) st = tt_kernel_reduce(op, &tmp, mask & ~inner, out);
  free(tmp.data);
  return st;
}

static const char *const tt_reduce_names_[TT_RED_COUNT] = {
    "sum", "mean", "prod", "max", "min", "argmax", "argmin", "any", "all"};

tt_status_t tt_kernel_reduce(tt_reduce_op_t op, const tt_view_t *x,
                             uint32_t dims_mask, tt_view_t *out) {
  TT_RETURN_IF_ERROR(tt_check_view("reduce", "x", x));
  TT_RETURN_IF_ERROR(tt_check_view("reduce", "out", out));
  if ((unsigned)op >= TT_RED_COUNT) {
    return tt_status_make(TT_INVALID_ARGUMENT, "reduce: unknown op %d", (int)op);
  }
  const char *name = tt_reduce_names_[op];
  int rank = x->shape.rank;
  if (rank == 0) dims_mask &= ~1u; /* dim 0 of a scalar is the scalar */
  if (rank < 32 && (dims_mask >> rank) != 0) {
    return tt_status_make(TT_INVALID_ARGUMENT,
                          "%s: dims mask 0x%x names a dim >= rank %d", name,
                          dims_mask, rank);
  }
  int is_arg = op == TT_RED_ARGMAX || op == TT_RED_ARGMIN;
  int nred = __builtin_popcount(dims_mask);
  if (is_arg && nred != 1 && rank > 0) {
    return tt_status_make(TT_INVALID_ARGUMENT,
                          "%s: expects exactly one reduced dim, got %d", name,
                          nred);
  }
  if (is_arg && out->dtype != TT_I64) {
    return tt_status_make(TT_TYPE_ERROR, "%s: out dtype must be int64, got %s",
                          name, tt_dtype_name(out->dtype));
  }
  int64_t R = 1, kept = 1;
  for (int d = 0; d < rank; ++d) {
    if (dims_mask & (1u << d)) R *= x->shape.dims[d];
    else kept *= x->shape.dims[d];
  }
  int64_t on = tt_view_numel(out);
  if (on != kept) {
    char b1[160], b2[160];
    return tt_status_make(TT_INVALID_ARGUMENT,
                          "%s: out shape %s has %lld elements, expected %lld "
                          "for x %s with dims mask 0x%x",
                          name, tt_dims_str(&out->shape, b1, sizeof b1),
                          (long long)on, (long long)kept,
                          tt_dims_str(&x->shape, b2, sizeof b2), dims_mask);
  }
  if (on == 0) return NULL;
  tt_class_t cls = tt_class_of(x->dtype);
  if (R == 0) {
    int bad = op == TT_RED_MAX || op == TT_RED_MIN || is_arg;
    if (bad) {
      int d = 0;
      while (d < rank && !((dims_mask & (1u << d)) && x->shape.dims[d] == 0)) ++d;
      return tt_status_make(TT_INVALID_ARGUMENT,
                            "%s(): Expected reduction dim %d to have non-zero "
                            "size.",
                            name, d);
    }
    double v = op == TT_RED_PROD || op == TT_RED_ALL ? 1.0
               : op == TT_RED_MEAN                   ? NAN
                                                     : 0.0;
    return tt_kernel_fill(v, out);
  }

  /* Canonical form: kept/reduced runs of dims with size > 1. */
  int nruns = 0, run_red[TT_MAX_RANK];
  int64_t run_size[TT_MAX_RANK];
  for (int d = 0; d < rank; ++d) {
    int64_t sz = x->shape.dims[d];
    if (sz == 1) continue;
    int red = (dims_mask >> d) & 1u;
    if (nruns > 0 && run_red[nruns - 1] == red) {
      run_size[nruns - 1] *= sz;
    } else {
      run_red[nruns] = red;
      run_size[nruns] = sz;
      ++nruns;
    }
  }
  int nred_runs = 0;
  for (int r = 0; r < nruns; ++r) nred_runs += run_red[r];
  if (nred_runs > 1) return tt_reduce_two_pass(op, x, dims_mask, out);

  tt_reduce_ctx_t ctx = {.op = op, .x = x, .out = out, .A = 1, .R = R, .B = 1};
  int seen_red = 0;
  for (int r = 0; r < nruns; ++r) {
    if (run_red[r]) seen_red = 1;
    else if (seen_red) ctx.B *= run_size[r];
    else ctx.A *= run_size[r];
  }
  if (ctx.B == 1) {
    ctx.nchunks = (R + TT_RED_CHUNK - 1) / TT_RED_CHUNK;
    int64_t items = ctx.A * ctx.nchunks;
    if (ctx.nchunks > 1) {
      ctx.partial = (tt_acc_t *)malloc((size_t)items * sizeof(tt_acc_t));
      if (!ctx.partial) {
        return tt_status_make(TT_RESOURCE_EXHAUSTED,
                              "%s: cannot allocate partial results", name);
      }
    }
    int64_t grain = tt_max64(1, TT_GRAIN / tt_min64(R, TT_RED_CHUNK));
    tt_parallel_for(items, grain, tt_reduce_rows_range, &ctx);
    if (ctx.nchunks > 1) {
      for (int64_t a = 0; a < ctx.A; ++a) {
        tt_acc_t s = ctx.partial[a * ctx.nchunks];
        for (int64_t k = 1; k < ctx.nchunks; ++k) {
          tt_acc_merge(op, cls, &s, &ctx.partial[a * ctx.nchunks + k]);
        }
        tt_acc_store(op, cls, &s, R, out, a);
      }
      free(ctx.partial);
    }
  } else {
    /* Row chunks only when the column blocks alone give little parallel
     * work; the choice depends on the shape only, not the thread count. */
    ctx.cols = ctx.B <= TT_RED_WIDE ? ctx.B : TT_RED_COLS;
    int64_t nblk = (ctx.B + ctx.cols - 1) / ctx.cols;
    ctx.nchunks = ctx.A * nblk >= 8 ? 1 : (R + TT_RED_ROWS - 1) / TT_RED_ROWS;
    int64_t items = ctx.A * nblk * ctx.nchunks;
    if (ctx.nchunks > 1) {
      ctx.partial = (tt_acc_t *)malloc((size_t)items * ctx.cols * sizeof(tt_acc_t));
      if (!ctx.partial) {
        return tt_status_make(TT_RESOURCE_EXHAUSTED,
                              "%s: cannot allocate partial results", name);
      }
    }
    int64_t per_item = tt_min64(R, TT_RED_ROWS) * ctx.cols;
    tt_parallel_for(items, tt_max64(1, TT_GRAIN / per_item), tt_reduce_cols_range, &ctx);
    if (ctx.failed) {
      free(ctx.partial);
      return tt_status_make(TT_RESOURCE_EXHAUSTED, "%s: cannot allocate accumulators", name);
    }
    if (ctx.nchunks > 1) {
      for (int64_t ab = 0; ab < ctx.A * nblk; ++ab) {
        int64_t a = ab / nblk, j0 = (ab % nblk) * ctx.cols;
        int64_t w = tt_min64(ctx.cols, ctx.B - j0);
        const tt_acc_t *p = ctx.partial + ab * ctx.nchunks * ctx.cols;
        for (int64_t j = 0; j < w; ++j) {
          tt_acc_t s = p[j];
          for (int64_t k = 1; k < ctx.nchunks; ++k) {
            tt_acc_merge(op, cls, &s, &p[k * ctx.cols + j]);
          }
          tt_acc_store(op, cls, &s, R, out, a * ctx.B + j0 + j);
        }
      }
      free(ctx.partial);
    }
  }
  return NULL;
}

/* ---- scan ---------------------------------------------------------------- */

#define TT_SCAN_COLS 256

typedef struct tt_scan_ctx_s {
  tt_scan_op_t op;
  const tt_view_t *x;
  tt_view_t *out;
  int64_t A, L, B;
} tt_scan_ctx_t;

static void tt_scan_range(void *arg, int64_t begin, int64_t end) {
  const tt_scan_ctx_t *c = (const tt_scan_ctx_t *)arg;
  int64_t nblk = (c->B + TT_SCAN_COLS - 1) / TT_SCAN_COLS;
  int is_int = tt_class_of(c->x->dtype) == TT_CLASS_INT;
  int prod = c->op == TT_SCAN_PROD;
  for (int64_t t = begin; t < end; ++t) {
    int64_t a = t / nblk, j0 = (t % nblk) * TT_SCAN_COLS;
    int64_t w = tt_min64(TT_SCAN_COLS, c->B - j0);
    double accd[TT_SCAN_COLS], bufd[TT_SCAN_COLS];
    int64_t acci[TT_SCAN_COLS], bufi[TT_SCAN_COLS];
    for (int64_t j = 0; j < w; ++j) {
      accd[j] = prod;
      acci[j] = prod;
    }
    for (int64_t l = 0; l < c->L; ++l) {
      int64_t off = (a * c->L + l) * c->B + j0;
      if (is_int) {
        tt_load_i64(c->x->data, c->x->dtype, off, 1, w, bufi);
        for (int64_t j = 0; j < w; ++j) {
          acci[j] = prod ? (int64_t)((uint64_t)acci[j] * (uint64_t)bufi[j])
                         : (int64_t)((uint64_t)acci[j] + (uint64_t)bufi[j]);
        }
        tt_store_i64(acci, w, c->out->data, c->out->dtype, off);
      } else {
        tt_load_f64(c->x->data, c->x->dtype, off, 1, w, bufd);
        for (int64_t j = 0; j < w; ++j) {
          accd[j] = prod ? accd[j] * bufd[j] : accd[j] + bufd[j];
        }
        tt_store_f64(accd, w, c->out->data, c->out->dtype, off);
      }
    }
  }
}

tt_status_t tt_kernel_scan(tt_scan_op_t op, const tt_view_t *x, int dim,
                           tt_view_t *out) {
  TT_RETURN_IF_ERROR(tt_check_view("scan", "x", x));
  TT_RETURN_IF_ERROR(tt_check_view("scan", "out", out));
  if (op != TT_SCAN_SUM && op != TT_SCAN_PROD) {
    return tt_status_make(TT_INVALID_ARGUMENT, "scan: unknown op %d", (int)op);
  }
  int rank = x->shape.rank;
  if (rank == 0 && (dim == 0 || dim == -1)) {
    dim = 0;
  } else if (dim < 0 || dim >= rank) {
    return tt_status_make(TT_INVALID_ARGUMENT,
                          "scan: dim %d out of range for rank %d", dim, rank);
  }
  if (!tt_shape_equal(&x->shape, &out->shape)) {
    char b1[160], b2[160];
    return tt_status_make(TT_INVALID_ARGUMENT,
                          "scan: out shape %s differs from x shape %s",
                          tt_dims_str(&out->shape, b1, sizeof b1),
                          tt_dims_str(&x->shape, b2, sizeof b2));
  }
  tt_scan_ctx_t c = {.op = op, .x = x, .out = out, .A = 1, .L = 1, .B = 1};
  for (int d = 0; d < rank; ++d) {
    if (d < dim) c.A *= x->shape.dims[d];
    else if (d == dim) c.L = x->shape.dims[d];
    else c.B *= x->shape.dims[d];
  }
  if (tt_view_numel(x) == 0) return NULL;
  int64_t nblk = (c.B + TT_SCAN_COLS - 1) / TT_SCAN_COLS;
  int64_t per_item = c.L * tt_min64(c.B, TT_SCAN_COLS);
  tt_parallel_for(c.A * nblk, tt_max64(1, TT_GRAIN / per_item), tt_scan_range,
                  &c);
  return NULL;
}
