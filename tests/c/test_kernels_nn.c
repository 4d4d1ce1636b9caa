/* Tests for reductions, scans, pooling, softmax and the conv2d paths
 * (forward on phase planes, and all three passes with several images per
 * GEMM) against naive double-precision references written here. */
#include "test_harness.h"
#include "kernels/conv_internal.h"

/* ---- reduce --------------------------------------------------------------- */

/* Output flat index of x flat index i when the masked dims are removed. */
static int64_t reduced_index(const tt_shape_t *s, uint32_t mask, int64_t i,
                             int64_t *pos_in_reduced) {
  int64_t o = 0, ostride = 1, r = 0, rstride = 1;
  for (int d = s->rank - 1; d >= 0; --d) {
    int64_t k = i % s->dims[d];
    i /= s->dims[d];
    if (mask & (1u << d)) {
      r += k * rstride;
      rstride *= s->dims[d];
    } else {
      o += k * ostride;
      ostride *= s->dims[d];
    }
  }
  if (pos_in_reduced) *pos_in_reduced = r;
  return o;
}

static tt_dtype_t reduce_out_dtype(tt_reduce_op_t op, tt_dtype_t dt) {
  int is_float = tt_dtype_is_float(dt);
  switch (op) {
    case TT_RED_SUM: case TT_RED_PROD: return is_float ? dt : TT_I64;
    case TT_RED_MEAN: return is_float ? dt : TT_F64;
    case TT_RED_ARGMAX: case TT_RED_ARGMIN: return TT_I64;
    case TT_RED_ANY: case TT_RED_ALL: return TT_BOOL;
    default: return dt;
  }
}

static void run_reduce(tt_reduce_op_t op, tt_dtype_t dt, int rank,
                       const int64_t *dims, uint32_t mask, int with_nan) {
  tensor_t x = tensor_new(dt, rank, dims);
  int is_float = tt_dtype_is_float(dt);
  if (op == TT_RED_PROD) {
    tensor_fill_random(&x, is_float ? 0.9 : -2, is_float ? 1.1 : 2);
  } else if (op == TT_RED_ANY || op == TT_RED_ALL) {
    for (int64_t i = 0; i < x.n; ++i) tset(&x, i, (rnd_u64() % 50) ? 1 : 0);
  } else {
    tensor_fill_random(&x, is_float ? -3 : (dt == TT_U8 ? 0 : -100), is_float ? 3 : 100);
  }
  if (is_float && (op == TT_RED_ARGMAX || op == TT_RED_MAX)) {
    /* Ties: copy some values so first-occurrence matters. */
    for (int64_t i = 1; i < x.n; i += 3) tset(&x, i, tget(&x, i - 1));
  }
  if (with_nan && x.n > 5) {
    tset(&x, x.n / 2, NAN);
    tset(&x, x.n / 2 + 1, NAN);
  }
  int64_t on = 1;
  int64_t kd[TT_MAX_RANK];
  for (int d = 0; d < rank; ++d) {
    kd[d] = (mask & (1u << d)) ? 1 : dims[d];
    if (!(mask & (1u << d))) on *= dims[d];
  }
  tt_dtype_t odt = reduce_out_dtype(op, dt);
  tensor_t o = tensor_new(odt, rank, kd); /* keepdim layout */
  char what[160];
  snprintf(what, sizeof what, "reduce op %d %s rank %d mask 0x%x n=%lld", (int)op,
           tt_dtype_name(dt), rank, mask, (long long)x.n);
  if (!CHECK_OK(tt_kernel_reduce(op, &x.v, mask, &o.v), what)) goto done;
  {
    double *acc = malloc((size_t)(on + 1) * sizeof(double));
    double *mag = calloc((size_t)(on + 1), sizeof(double));
    int64_t *iacc = malloc((size_t)(on + 1) * sizeof(int64_t));
    int64_t *arg = malloc((size_t)(on + 1) * sizeof(int64_t));
    int64_t *cnt = calloc((size_t)(on + 1), sizeof(int64_t));
    for (int64_t j = 0; j < on; ++j) {
      acc[j] = op == TT_RED_PROD ? 1 : (op == TT_RED_MAX ? -INFINITY : (op == TT_RED_MIN ? INFINITY : 0));
      iacc[j] = op == TT_RED_PROD ? 1 : (op == TT_RED_MAX ? INT64_MIN : (op == TT_RED_MIN ? INT64_MAX : (op == TT_RED_ALL)));
      arg[j] = -1;
    }
    for (int64_t i = 0; i < x.n; ++i) {
      int64_t r;
      int64_t j = reduced_index(&x.v.shape, mask, i, &r);
      double v = tget(&x, i);
      int64_t iv = tgeti(&x, i);
      cnt[j]++;
      mag[j] += fabs(v);
      switch (op) {
        case TT_RED_SUM: case TT_RED_MEAN:
          acc[j] += v;
          iacc[j] = (int64_t)((uint64_t)iacc[j] + (uint64_t)iv);
          break;
        case TT_RED_PROD:
          acc[j] *= v;
          iacc[j] = (int64_t)((uint64_t)iacc[j] * (uint64_t)iv);
          break;
        case TT_RED_MAX: if (isnan(v) || v > acc[j] || isnan(acc[j])) acc[j] = isnan(acc[j]) ? acc[j] : v; break;
        case TT_RED_MIN: if (isnan(v) || v < acc[j] || isnan(acc[j])) acc[j] = isnan(acc[j]) ? acc[j] : v; break;
        case TT_RED_ARGMAX:
          if (arg[j] < 0 || (!isnan(acc[j]) && (v > acc[j] || isnan(v)))) { acc[j] = v; arg[j] = r; }
          break;
        case TT_RED_ARGMIN:
          if (arg[j] < 0 || (!isnan(acc[j]) && (v < acc[j] || isnan(v)))) { acc[j] = v; arg[j] = r; }
          break;
        case TT_RED_ANY: iacc[j] |= v != 0; break;
        case TT_RED_ALL: iacc[j] &= v != 0; break;
        default: break;
      }
    }
    double *ref = malloc((size_t)(on + 1) * sizeof(double));
    for (int64_t j = 0; j < on; ++j) {
      double r;
      switch (op) {
        case TT_RED_ARGMAX: case TT_RED_ARGMIN: r = (double)(arg[j] < 0 ? 0 : arg[j]); break;
        case TT_RED_ANY: case TT_RED_ALL: r = (double)iacc[j]; break;
        case TT_RED_MEAN: r = (is_float ? acc[j] : (double)iacc[j]) / (double)cnt[j]; break;
        case TT_RED_SUM: case TT_RED_PROD:
          r = is_float ? acc[j] : (double)iacc[j];
          break;
        default: r = is_float ? acc[j] : (double)tgeti(&x, 0); break;
      }
      if (!is_float && (op == TT_RED_MAX || op == TT_RED_MIN)) {
        int64_t m = op == TT_RED_MAX ? INT64_MIN : INT64_MAX;
        for (int64_t i = 0; i < x.n; ++i) {
          if (reduced_index(&x.v.shape, mask, i, NULL) != j) continue;
          int64_t v = tgeti(&x, i);
          m = op == TT_RED_MAX ? (v > m ? v : m) : (v < m ? v : m);
        }
        r = (double)m;
      }
      ref[j] = round_to(odt, r);
    }
    double atol = is_float && (op == TT_RED_SUM || op == TT_RED_MEAN) ? 1e-12 : 0;
    double rtol = is_float || op == TT_RED_MEAN ? dtype_rtol(odt) : 0;
    if (op == TT_RED_ARGMAX || op == TT_RED_ARGMIN || op == TT_RED_ANY || op == TT_RED_ALL) rtol = 0;
    if (is_float && op == TT_RED_SUM) {
      /* cancellation: scale absolute tolerance by the magnitude */
      for (int64_t j = 0; j < on; ++j) {
        double got = tget(&o, j);
        if (fabs(got - ref[j]) <= 1e-12 * mag[j] + rtol * fabs(ref[j])) continue;
        if (isnan(ref[j]) && isnan(got)) continue;
        CHECK(0, "%s at %lld: got %.9g want %.9g", what, (long long)j, got, ref[j]);
        break;
      }
    } else {
      COMPARE(what, &o, ref, atol, rtol);
    }
    free(acc); free(mag); free(iacc); free(arg); free(cnt); free(ref);
  }
done:
  tensor_free(&x);
  tensor_free(&o);
}

static void test_reduce(void) {
  const tt_dtype_t dts[] = {TT_F32, TT_F64, TT_F16, TT_BF16, TT_I32, TT_I64, TT_U8, TT_BOOL};
  const int64_t d3[3] = {4, 5, 6};
  const int64_t d4[4] = {1, 7, 1, 5};
  for (int op = 0; op < TT_RED_COUNT; ++op) {
    int is_arg = op == TT_RED_ARGMAX || op == TT_RED_ARGMIN;
    for (int di = 0; di < COUNT_OF(dts); ++di) {
      for (uint32_t mask = 0; mask < 8; ++mask) {
        if (is_arg && __builtin_popcount(mask) != 1) continue;
        run_reduce((tt_reduce_op_t)op, dts[di], 3, d3, mask, 0);
      }
      run_reduce((tt_reduce_op_t)op, dts[di], 4, d4, is_arg ? 2u : 0xAu, 0);
      run_reduce((tt_reduce_op_t)op, dts[di], 4, d4, is_arg ? 8u : 0x5u, 0);
      run_reduce((tt_reduce_op_t)op, dts[di], 0, NULL, 0, 0);
    }
    /* Long rows (chunked partials) and NaN. */
    const int64_t big[2] = {3, 150001}, row[1] = {200003};
    run_reduce((tt_reduce_op_t)op, TT_F32, 2, big, 2, 0);
    run_reduce((tt_reduce_op_t)op, TT_F32, 1, row, 1, 0);
    run_reduce((tt_reduce_op_t)op, TT_I64, 1, row, 1, 0);
    run_reduce((tt_reduce_op_t)op, TT_F16, 2, big, 2, 0);
    if (op != TT_RED_ANY && op != TT_RED_ALL) {
      run_reduce((tt_reduce_op_t)op, TT_F32, 1, row, 1, 1);
      run_reduce((tt_reduce_op_t)op, TT_F32, 3, d3, is_arg ? 2u : 3u, 1);
      run_reduce((tt_reduce_op_t)op, TT_F64, 3, d3, 1u, 1);
    }
    /* batch norm's statistics over (N, H, W) with 2x2 planes: short
     * first-pass rows, then a column pass over N */
    const int64_t bn[4] = {9, 24, 2, 2};
    if (!is_arg) run_reduce((tt_reduce_op_t)op, TT_F32, 4, bn, 0xDu, 0);
    const int64_t tall[2] = {3000, 40};
    run_reduce((tt_reduce_op_t)op, TT_F32, 2, tall, 1, 0); /* outer reduction */
    const int64_t wide[3] = {2, 70, 700};
    run_reduce((tt_reduce_op_t)op, TT_F32, 3, wide, 2, 0); /* middle reduction */
    /* Rows wider than one item takes whole (TT_RED_WIDE): column blocks,
     * with row chunks and without. */
    const int64_t wider[2] = {600, 4500}, wider3[3] = {9, 20, 4500};
    run_reduce((tt_reduce_op_t)op, TT_F32, 2, wider, 1, 0);
    run_reduce((tt_reduce_op_t)op, TT_F64, 3, wider3, 2, 0);
  }

  /* Exact checks on a small example. */
  float v[6] = {1, 5, 5, -2, NAN, 3};
  tensor_t x = tensor_new(TT_F32, 2, (int64_t[]){2, 3});
  memcpy(x.v.data, v, sizeof v);
  tensor_t o = tensor_new(TT_I64, 1, (int64_t[]){2});
  CHECK_OK(tt_kernel_reduce(TT_RED_ARGMAX, &x.v, 2, &o.v), "argmax");
  CHECK(((int64_t *)o.v.data)[0] == 1 && ((int64_t *)o.v.data)[1] == 1,
        "argmax first occurrence and NaN");
  tensor_t of = tensor_new(TT_F32, 1, (int64_t[]){2});
  CHECK_OK(tt_kernel_reduce(TT_RED_MIN, &x.v, 2, &of.v), "min");
  CHECK(((float *)of.v.data)[0] == 1 && isnan(((float *)of.v.data)[1]), "min NaN");
  /* Errors. */
  CHECK_CODE(tt_kernel_reduce(TT_RED_ARGMAX, &x.v, 3, &o.v), TT_INVALID_ARGUMENT,
             "argmax over two dims");
  CHECK_CODE(tt_kernel_reduce(TT_RED_ARGMAX, &x.v, 2, &of.v), TT_TYPE_ERROR,
             "argmax out dtype");
  CHECK_CODE(tt_kernel_reduce(TT_RED_SUM, &x.v, 1, &of.v), TT_INVALID_ARGUMENT,
             "out numel");
  CHECK_CODE(tt_kernel_reduce(TT_RED_SUM, &x.v, 4, &of.v), TT_INVALID_ARGUMENT,
             "mask beyond rank");
  tensor_free(&x); tensor_free(&o); tensor_free(&of);
  /* Empty reductions. */
  tensor_t e = tensor_new(TT_F32, 2, (int64_t[]){3, 0});
  tensor_t eo = tensor_new(TT_F32, 1, (int64_t[]){3});
  CHECK_OK(tt_kernel_reduce(TT_RED_SUM, &e.v, 2, &eo.v), "empty sum");
  CHECK(((float *)eo.v.data)[2] == 0, "empty sum is 0");
  CHECK_OK(tt_kernel_reduce(TT_RED_PROD, &e.v, 2, &eo.v), "empty prod");
  CHECK(((float *)eo.v.data)[2] == 1, "empty prod is 1");
  CHECK_OK(tt_kernel_reduce(TT_RED_MEAN, &e.v, 2, &eo.v), "empty mean");
  CHECK(isnan(((float *)eo.v.data)[2]), "empty mean is NaN");
  CHECK_CODE(tt_kernel_reduce(TT_RED_MAX, &e.v, 2, &eo.v), TT_INVALID_ARGUMENT,
             "empty max");
  tensor_t e0 = tensor_new(TT_F32, 1, (int64_t[]){0});
  CHECK_OK(tt_kernel_reduce(TT_RED_MAX, &e.v, 1, &e0.v), "max to empty output is fine");
  tensor_free(&e); tensor_free(&eo); tensor_free(&e0);
}

static void test_scan(void) {
  const tt_dtype_t dts[] = {TT_F32, TT_F64, TT_F16, TT_I32, TT_BOOL};
  const int64_t dims[3] = {3, 40, 300};
  for (int di = 0; di < COUNT_OF(dts); ++di) {
    for (int op = 0; op < 2; ++op) {
      for (int dim = 0; dim < 3; ++dim) {
        tt_dtype_t dt = dts[di];
        int is_float = tt_dtype_is_float(dt);
        tensor_t x = tensor_new(dt, 3, dims);
        tensor_t o = tensor_like(&x, is_float ? dt : TT_I64);
        if (op) tensor_fill_random(&x, is_float ? 0.95 : -1, is_float ? 1.05 : 1);
        else tensor_fill_random(&x, is_float ? -1 : -9, is_float ? 1 : 9);
        if (!CHECK_OK(tt_kernel_scan((tt_scan_op_t)op, &x.v, dim, &o.v), "scan")) continue;
        double *ref = malloc((size_t)x.n * sizeof(double));
        int64_t st = dim == 2 ? 1 : (dim == 1 ? dims[2] : dims[1] * dims[2]);
        for (int64_t i = 0; i < x.n; ++i) {
          int64_t pos = (i / st) % dims[dim];
          double v = tget(&x, i);
          if (pos == 0) ref[i] = v;
          else ref[i] = op ? ref[i - st] * v : ref[i - st] + v;
        }
        for (int64_t i = 0; i < x.n; ++i) ref[i] = round_to(o.v.dtype, ref[i]);
        char what[64];
        snprintf(what, sizeof what, "scan op %d dim %d", op, dim);
        COMPARE(what, &o, ref, is_float ? 1e-5 : 0, is_float ? dtype_rtol(dt) : 0);
        free(ref);
        tensor_free(&x);
        tensor_free(&o);
      }
    }
  }
  tensor_t x = tensor_new(TT_F32, 1, (int64_t[]){3});
  CHECK_CODE(tt_kernel_scan(TT_SCAN_SUM, &x.v, 1, &x.v), TT_INVALID_ARGUMENT, "scan dim");
  tensor_free(&x);
}

/* ---- pooling ---------------------------------------------------------------- */

static int64_t pool_out(int64_t in, int64_t k, int64_t p, int64_t s, int64_t d, int ceil_mode) {
  int64_t eff = d * (k - 1) + 1;
  int64_t num = in + 2 * p - eff;
  int64_t out = (ceil_mode ? (num + s - 1) / s : num / s) + 1;
  if (ceil_mode && (out - 1) * s >= in + p) --out;
  return out;
}

typedef struct {
  int64_t N, C, H, W, kh, kw, sh, sw, ph, pw, dh, dw;
  int ceil_mode, count_include_pad;
  int64_t divisor;
} pool_case_t;

static void run_pool(tt_dtype_t dt, const pool_case_t *c, int rank3) {
  tt_pool2d_params_t p = {{c->kh, c->kw}, {c->sh, c->sw}, {c->ph, c->pw},
                          {c->dh, c->dw}, c->ceil_mode, c->count_include_pad,
                          c->divisor};
  int64_t OH = pool_out(c->H, c->kh, c->ph, c->sh, c->dh, c->ceil_mode);
  int64_t OW = pool_out(c->W, c->kw, c->pw, c->sw, c->dw, c->ceil_mode);
  int64_t xd[4] = {c->N, c->C, c->H, c->W}, od[4] = {c->N, c->C, OH, OW};
  int r = rank3 ? 3 : 4;
  const int64_t *xdp = rank3 ? xd + 1 : xd, *odp = rank3 ? od + 1 : od;
  tensor_t x = tensor_new(dt, r, xdp), o = tensor_new(dt, r, odp);
  tensor_t idx = tensor_new(TT_I64, r, odp), go = tensor_new(dt, r, odp);
  tensor_t gx = tensor_new(dt, r, xdp);
  tensor_fill_random(&x, -5, 5);
  tensor_fill_random(&go, -1, 1);
  if (x.n > 10) tset(&x, 7, NAN);
  int64_t P = c->N * c->C, HW = c->H * c->W, OHW = OH * OW;
  char what[200];
  snprintf(what, sizeof what, "pool %s %lldx%lld k%lldx%lld s%lld,%lld p%lld,%lld d%lld,%lld ceil%d cip%d div%lld",
           tt_dtype_name(dt), (long long)c->H, (long long)c->W, (long long)c->kh,
           (long long)c->kw, (long long)c->sh, (long long)c->sw, (long long)c->ph,
           (long long)c->pw, (long long)c->dh, (long long)c->dw, c->ceil_mode,
           c->count_include_pad, (long long)c->divisor);
  double *ref = calloc((size_t)(o.n + 1), sizeof(double));
  double *refx = calloc((size_t)(x.n + 1), sizeof(double));
  int64_t *refi = calloc((size_t)(o.n + 1), sizeof(int64_t));
  /* max pool: taps in row-major order, first max wins, NaN wins. */
  for (int64_t q = 0; q < P; ++q) {
    for (int64_t oh = 0; oh < OH; ++oh) {
      for (int64_t ow = 0; ow < OW; ++ow) {
        double m = -INFINITY;
        int64_t best = -1, first = -1;
        for (int64_t i = 0; i < c->kh; ++i) {
          for (int64_t j = 0; j < c->kw; ++j) {
            int64_t ih = oh * c->sh - c->ph + i * c->dh, iw = ow * c->sw - c->pw + j * c->dw;
            if (ih < 0 || ih >= c->H || iw < 0 || iw >= c->W) continue;
            double v = tget(&x, q * HW + ih * c->W + iw);
            if (first < 0) first = ih * c->W + iw;
            if (!isnan(m) && (v > m || isnan(v))) {
              m = v;
              best = ih * c->W + iw;
            }
          }
        }
        ref[q * OHW + oh * OW + ow] = round_to(dt, m);
        refi[q * OHW + oh * OW + ow] = best < 0 ? first : best;
      }
    }
  }
  if (CHECK_OK(tt_kernel_max_pool2d(&x.v, &p, &o.v, &idx.v), what)) {
    COMPARE(what, &o, ref, 0, 0);
    int bad = 0;
    for (int64_t i = 0; i < o.n; ++i) bad += ((int64_t *)idx.v.data)[i] != refi[i];
    CHECK(bad == 0, "%s: %d indices differ", what, bad);
    /* Without indices (f32 takes the padded-plane path): same values. */
    tensor_fill_random(&o, -9, 9);
    if (CHECK_OK(tt_kernel_max_pool2d(&x.v, &p, &o.v, NULL), "max pool without indices"))
      COMPARE(what, &o, ref, 0, 0);
    for (int64_t q = 0; q < P; ++q) {
      for (int64_t i = 0; i < OHW; ++i) refx[q * HW + refi[q * OHW + i]] += tget(&go, q * OHW + i);
    }
    for (int64_t i = 0; i < x.n; ++i) refx[i] = round_to(dt, refx[i]);
    if (CHECK_OK(tt_kernel_max_pool2d_backward(&go.v, &idx.v, &gx.v), what)) {
      COMPARE("max_pool2d_backward", &gx, refx, 1e-6, dtype_rtol(dt));
    }
  }
  /* avg pool (no dilation): taps inside [-p, in + p) count for
   * count_include_pad, taps inside the input otherwise. */
  if (c->dh == 1 && c->dw == 1) {
    memset(refx, 0, (size_t)x.n * sizeof(double));
    for (int64_t q = 0; q < P; ++q) {
      for (int64_t oh = 0; oh < OH; ++oh) {
        for (int64_t ow = 0; ow < OW; ++ow) {
          double s = 0;
          int64_t in_pad = 0, inside = 0;
          for (int64_t i = 0; i < c->kh; ++i) {
            for (int64_t j = 0; j < c->kw; ++j) {
              int64_t ih = oh * c->sh - c->ph + i, iw = ow * c->sw - c->pw + j;
              if (ih < c->H + c->ph && iw < c->W + c->pw) ++in_pad;
              if (ih < 0 || ih >= c->H || iw < 0 || iw >= c->W) continue;
              ++inside;
              s += tget(&x, q * HW + ih * c->W + iw);
            }
          }
          int64_t div = c->divisor ? c->divisor : (c->count_include_pad ? in_pad : inside);
          double r = inside ? s / (double)div : 0;
          ref[q * OHW + oh * OW + ow] = round_to(dt, r);
          double g = inside ? tget(&go, q * OHW + oh * OW + ow) / (double)div : 0;
          for (int64_t i = 0; i < c->kh; ++i) {
            for (int64_t j = 0; j < c->kw; ++j) {
              int64_t ih = oh * c->sh - c->ph + i, iw = ow * c->sw - c->pw + j;
              if (ih < 0 || ih >= c->H || iw < 0 || iw >= c->W) continue;
              refx[q * HW + ih * c->W + iw] += g;
            }
          }
        }
      }
    }
    for (int64_t i = 0; i < x.n; ++i) refx[i] = round_to(dt, refx[i]);
    char w2[240];
    snprintf(w2, sizeof w2, "avg %s", what);
    if (CHECK_OK(tt_kernel_avg_pool2d(&x.v, &p, &o.v), w2)) {
      COMPARE(w2, &o, ref, 1e-6, dtype_rtol(dt) * 2);
    }
    if (CHECK_OK(tt_kernel_avg_pool2d_backward(&go.v, &p, &gx.v), w2)) {
      COMPARE("avg_pool2d_backward", &gx, refx, 1e-6, dtype_rtol(dt) * 2);
    }
  }
  free(ref);
  free(refx);
  free(refi);
  tensor_free(&x); tensor_free(&o); tensor_free(&idx); tensor_free(&go); tensor_free(&gx);
}

static void run_adaptive(tt_dtype_t dt, int64_t H, int64_t W, int64_t OH, int64_t OW) {
  int64_t xd[4] = {2, 3, H, W}, od[4] = {2, 3, OH, OW};
  tensor_t x = tensor_new(dt, 4, xd), o = tensor_new(dt, 4, od);
  tensor_t go = tensor_new(dt, 4, od), gx = tensor_new(dt, 4, xd);
  tensor_fill_random(&x, -2, 2);
  tensor_fill_random(&go, -1, 1);
  double *ref = calloc((size_t)o.n, sizeof(double)), *refx = calloc((size_t)x.n, sizeof(double));
  for (int64_t q = 0; q < 6; ++q) {
    for (int64_t oh = 0; oh < OH; ++oh) {
      int64_t h0 = (int64_t)floor((double)(oh * H) / (double)OH);
      int64_t h1 = (int64_t)ceil((double)((oh + 1) * H) / (double)OH);
      for (int64_t ow = 0; ow < OW; ++ow) {
        int64_t w0 = (int64_t)floor((double)(ow * W) / (double)OW);
        int64_t w1 = (int64_t)ceil((double)((ow + 1) * W) / (double)OW);
        double s = 0, cnt = (double)((h1 - h0) * (w1 - w0));
        for (int64_t h = h0; h < h1; ++h)
          for (int64_t w = w0; w < w1; ++w) s += tget(&x, q * H * W + h * W + w);
        ref[q * OH * OW + oh * OW + ow] = round_to(dt, s / cnt);
        double g = tget(&go, q * OH * OW + oh * OW + ow) / cnt;
        for (int64_t h = h0; h < h1; ++h)
          for (int64_t w = w0; w < w1; ++w) refx[q * H * W + h * W + w] += g;
      }
    }
  }
  for (int64_t i = 0; i < x.n; ++i) refx[i] = round_to(dt, refx[i]);
  char what[96];
  snprintf(what, sizeof what, "adaptive %lldx%lld -> %lldx%lld", (long long)H,
           (long long)W, (long long)OH, (long long)OW);
  if (CHECK_OK(tt_kernel_adaptive_avg_pool2d(&x.v, &o.v), what)) {
    COMPARE(what, &o, ref, 1e-6, dtype_rtol(dt) * 2);
  }
  if (CHECK_OK(tt_kernel_adaptive_avg_pool2d_backward(&go.v, &gx.v), what)) {
    COMPARE(what, &gx, refx, 1e-6, dtype_rtol(dt) * 2);
  }
  free(ref);
  free(refx);
  tensor_free(&x); tensor_free(&o); tensor_free(&go); tensor_free(&gx);
}

static void test_pool(void) {
  const pool_case_t cases[] = {
      {2, 3, 8, 8, 2, 2, 2, 2, 0, 0, 1, 1, 0, 1, 0},
      {1, 2, 7, 9, 3, 3, 2, 2, 1, 1, 1, 1, 0, 1, 0},
      {1, 2, 7, 9, 3, 3, 2, 2, 1, 1, 1, 1, 0, 0, 0},
      {1, 2, 5, 5, 2, 2, 2, 2, 0, 0, 1, 1, 1, 1, 0},  /* ceil_mode */
      {2, 1, 6, 7, 3, 2, 2, 3, 1, 1, 1, 1, 1, 0, 0},  /* ceil_mode, pad */
      {1, 3, 10, 10, 3, 3, 1, 1, 1, 1, 2, 2, 0, 1, 0}, /* dilation (max only) */
      {1, 2, 6, 6, 3, 3, 2, 2, 1, 1, 1, 1, 1, 1, 5},  /* divisor_override */
      {1, 1, 9, 9, 4, 3, 3, 2, 2, 1, 1, 1, 1, 1, 0},
  };
  for (int ci = 0; ci < COUNT_OF(cases); ++ci) {
    run_pool(TT_F32, &cases[ci], 0);
    run_pool(ci % 2 ? TT_F16 : TT_F64, &cases[ci], ci == 3);
    if (ci == 1) run_pool(TT_BF16, &cases[ci], 1);
  }
  /* PyTorch output sizes: 5x5, k2 s2 ceil -> 3x3; 6x7 k3x2 s2x3 p1 ceil -> 4x3. */
  CHECK(pool_out(5, 2, 0, 2, 1, 1) == 3 && pool_out(6, 3, 1, 2, 1, 1) == 4 &&
            pool_out(7, 2, 1, 3, 1, 1) == 3,
        "reference pool sizes");
  run_adaptive(TT_F32, 7, 7, 3, 3);
  run_adaptive(TT_F32, 10, 9, 4, 5);
  run_adaptive(TT_F64, 3, 5, 5, 7); /* upsampling windows overlap */
  run_adaptive(TT_F16, 8, 8, 1, 1);
  run_adaptive(TT_BF16, 6, 6, 6, 6);

  tensor_t x = tensor_new(TT_F32, 4, (int64_t[]){1, 1, 5, 5});
  tensor_t o = tensor_new(TT_F32, 4, (int64_t[]){1, 1, 2, 2});
  tensor_fill_random(&x, 0, 1);
  tt_pool2d_params_t p = {{2, 2}, {2, 2}, {0, 0}, {1, 1}, 1, 1, 0};
  CHECK_CODE(tt_kernel_max_pool2d(&x.v, &p, &o.v, NULL), TT_INVALID_ARGUMENT,
             "ceil_mode output size mismatch");
  p.ceil_mode = 0;
  p.pad[0] = 2;
  CHECK_CODE(tt_kernel_max_pool2d(&x.v, &p, &o.v, NULL), TT_INVALID_ARGUMENT,
             "pad larger than half the kernel");
  p.pad[0] = 0;
  CHECK_OK(tt_kernel_max_pool2d(&x.v, &p, &o.v, NULL), "5x5 k2 s2 floor -> 2x2");
  tensor_t idx = tensor_new(TT_I64, 4, (int64_t[]){1, 1, 2, 2});
  tensor_t gx = tensor_new(TT_F32, 4, (int64_t[]){1, 1, 5, 5});
  for (int i = 0; i < 4; ++i) ((int64_t *)idx.v.data)[i] = i == 2 ? 25 : i;
  CHECK_CODE(tt_kernel_max_pool2d_backward(&o.v, &idx.v, &gx.v), TT_OUT_OF_RANGE,
             "max pool backward index out of range");
  tensor_t xi = tensor_new(TT_I32, 4, (int64_t[]){1, 1, 5, 5});
  tensor_t oi = tensor_new(TT_I32, 4, (int64_t[]){1, 1, 2, 2});
  CHECK_CODE(tt_kernel_avg_pool2d(&xi.v, &p, &oi.v), TT_TYPE_ERROR, "avg pool int");
  tensor_free(&x); tensor_free(&o); tensor_free(&idx); tensor_free(&gx);
  tensor_free(&xi); tensor_free(&oi);
}

/* ---- softmax ---------------------------------------------------------------- */

static void run_softmax(tt_dtype_t dt, int rank, const int64_t *dims, int dim,
                        int log_out, int special) {
  tensor_t x = tensor_new(dt, rank, dims), y = tensor_like(&x, dt);
  tensor_t g = tensor_like(&x, dt), gx = tensor_like(&x, dt);
  tensor_fill_random(&x, -8, 8);
  tensor_fill_random(&g, -1, 1);
  int64_t A = 1, L = dims[dim], B = 1;
  for (int d = 0; d < dim; ++d) A *= dims[d];
  for (int d = dim + 1; d < rank; ++d) B *= dims[d];
  if (special) {
    /* A few -inf entries in the first line, a whole -inf line, a NaN. */
    tset(&x, 0, -INFINITY);
    if (L > 2) tset(&x, 2 * B, -INFINITY);
    for (int64_t l = 0; l < L; ++l) tset(&x, (1 * L + l) * B, -INFINITY);
    tset(&x, (2 * L + 1) * B, NAN);
  }
  char what[96];
  snprintf(what, sizeof what, "%ssoftmax %s dim %d of rank %d", log_out ? "log_" : "",
           tt_dtype_name(dt), dim, rank);
  if (!CHECK_OK(tt_kernel_softmax(&x.v, dim, log_out, &y.v), what)) goto done;
  {
    double *ref = malloc((size_t)x.n * sizeof(double));
    double *refg = malloc((size_t)x.n * sizeof(double));
    for (int64_t a = 0; a < A; ++a) {
      for (int64_t b = 0; b < B; ++b) {
        double m = -INFINITY, s = 0, sg = 0;
        int nan = 0;
        for (int64_t l = 0; l < L; ++l) {
          double v = tget(&x, (a * L + l) * B + b);
          nan |= isnan(v);
          if (v > m) m = v;
        }
        if (nan) m = NAN;
        for (int64_t l = 0; l < L; ++l) s += exp(tget(&x, (a * L + l) * B + b) - m);
        for (int64_t l = 0; l < L; ++l) {
          int64_t i = (a * L + l) * B + b;
          double v = tget(&x, i);
          ref[i] = round_to(dt, log_out ? (v - m) - log(s) : exp(v - m) / s);
        }
        /* backward from the kernel's own y */
        for (int64_t l = 0; l < L; ++l) {
          int64_t i = (a * L + l) * B + b;
          sg += log_out ? tget(&g, i) : tget(&g, i) * tget(&y, i);
        }
        for (int64_t l = 0; l < L; ++l) {
          int64_t i = (a * L + l) * B + b;
          double yv = tget(&y, i), gv = tget(&g, i);
          refg[i] = round_to(dt, log_out ? gv - exp(yv) * sg : yv * (gv - sg));
        }
      }
    }
    double atol = dt == TT_F64 ? 1e-12 : (dt == TT_F32 ? 1e-6 : 2e-3);
    COMPARE(what, &y, ref, atol, dtype_rtol(dt) * 2);
    if (CHECK_OK(tt_kernel_softmax_backward(&g.v, &y.v, dim, log_out, &gx.v), what)) {
      COMPARE("softmax_backward", &gx, refg, atol * 4, dtype_rtol(dt) * 4);
    }
    free(ref);
    free(refg);
  }
done:
  tensor_free(&x); tensor_free(&y); tensor_free(&g); tensor_free(&gx);
}

static void test_softmax(void) {
  const int64_t d3[3] = {4, 7, 90};
  for (int di = 0; di < COUNT_OF(kFloatDtypes); ++di) {
    for (int dim = 0; dim < 3; ++dim) {
      for (int lg = 0; lg < 2; ++lg) run_softmax(kFloatDtypes[di], 3, d3, dim, lg, dim == 1);
    }
  }
  const int64_t row[2] = {3, 5000}, col[2] = {5000, 3};
  run_softmax(TT_F32, 2, row, 1, 0, 1);
  run_softmax(TT_F32, 2, row, 1, 1, 0);
  run_softmax(TT_F32, 2, col, 0, 0, 0);
  run_softmax(TT_BF16, 2, row, 1, 1, 0);
  /* 65 columns: the last column panel is one wide but strided. */
  const int64_t d65[3] = {2, 6, 65};
  run_softmax(TT_F32, 3, d65, 1, 0, 0);
  run_softmax(TT_F32, 3, d65, 1, 1, 0);
  run_softmax(TT_F16, 3, d65, 1, 0, 0);
  tensor_t x = tensor_new(TT_I32, 1, (int64_t[]){3});
  CHECK_CODE(tt_kernel_softmax(&x.v, 0, 0, &x.v), TT_TYPE_ERROR, "softmax int");
  tensor_t f = tensor_new(TT_F32, 1, (int64_t[]){3});
  CHECK_CODE(tt_kernel_softmax(&f.v, 1, 0, &f.v), TT_INVALID_ARGUMENT, "softmax dim");
  tensor_free(&x);
  tensor_free(&f);
}

/* softmax / log_softmax with a bias row (tt_kernel_softmax_bias): equal,
 * bit for bit, to the add and the plain kernel run apart, for rows that
 * are and are not multiples of 16 long; errors for a dim that is not the
 * last, a bias of another length and a narrow dtype. */
static void test_softmax_bias(void) {
  const int64_t rows[3] = {1, 5, 64}, lens[3] = {1000, 37, 16};
  for (int c = 0; c < 3; ++c)
    for (int log_out = 0; log_out < 2; ++log_out) {
      int64_t xd[2] = {rows[c], lens[c]}, bd[1] = {lens[c]};
      tensor_t x = tensor_new(TT_F32, 2, xd), b = tensor_new(TT_F32, 1, bd);
      tensor_t xb = tensor_new(TT_F32, 2, xd), y1 = tensor_new(TT_F32, 2, xd);
      tensor_t y2 = tensor_new(TT_F32, 2, xd);
      tensor_fill_random(&x, -6, 6);
      tensor_fill_random(&b, -3, 3);
      char what[96];
      snprintf(what, sizeof what, "softmax_bias [%lld, %lld] log %d", (long long)rows[c],
               (long long)lens[c], log_out);
      CHECK_OK(tt_kernel_binary(TT_BIN_ADD, &x.v, &b.v, &xb.v), what);
      CHECK_OK(tt_kernel_softmax(&xb.v, 1, log_out, &y1.v), what);
      CHECK_OK(tt_kernel_softmax_bias(&x.v, &b.v, 1, log_out, &y2.v), what);
      CHECK(memcmp(y1.v.data, y2.v.data, sizeof(float) * (size_t)y1.n) == 0,
            "%s: differs from add + softmax", what);
      tensor_t *all[5] = {&x, &b, &xb, &y1, &y2};
      for (int i = 0; i < 5; ++i) tensor_free(all[i]);
    }
  int64_t xd[2] = {3, 8}, bd[1] = {8}, b7[1] = {7};
  tensor_t x = tensor_new(TT_F32, 2, xd), b = tensor_new(TT_F32, 1, bd), y = tensor_new(TT_F32, 2, xd);
  tensor_t bad = tensor_new(TT_F32, 1, b7), xh = tensor_new(TT_BF16, 2, xd);
  CHECK_CODE(tt_kernel_softmax_bias(&x.v, &b.v, 0, 1, &y.v), TT_INVALID_ARGUMENT, "dim 0");
  CHECK_CODE(tt_kernel_softmax_bias(&x.v, &bad.v, 1, 1, &y.v), TT_INVALID_ARGUMENT, "bias 7");
  CHECK_CODE(tt_kernel_softmax_bias(&xh.v, &b.v, 1, 1, &y.v), TT_INVALID_ARGUMENT, "bf16");
  tensor_t *all[5] = {&x, &b, &y, &bad, &xh};
  for (int i = 0; i < 5; ++i) tensor_free(all[i]);
}

/* log_softmax with its probabilities (tt_kernel_log_softmax_probs): the
 * log_softmax equal bit for bit to the kernel without them, with and
 * without a bias row, for rows that are and are not multiples of 16 long;
 * the probabilities within an ulp or two of softmax's and close to
 * exp(log_softmax) (-inf logits give 0); errors for bf16, a probs buffer of another
 * shape and a bias of another length. */
static void test_log_softmax_probs(void) {
  const int64_t rows[3] = {1, 5, 64}, lens[3] = {1000, 37, 16};
  for (int c = 0; c < 3; ++c)
    for (int with_bias = 0; with_bias < 2; ++with_bias) {
      int64_t xd[2] = {rows[c], lens[c]}, bd[1] = {lens[c]};
      tensor_t x = tensor_new(TT_F32, 2, xd), b = tensor_new(TT_F32, 1, bd);
      tensor_t y1 = tensor_new(TT_F32, 2, xd), y2 = tensor_new(TT_F32, 2, xd);
      tensor_t p1 = tensor_new(TT_F32, 2, xd), p2 = tensor_new(TT_F32, 2, xd);
      tensor_fill_random(&x, -6, 6);
      tensor_fill_random(&b, -3, 3);
      ((float *)x.v.data)[0] = -INFINITY; /* a masked logit */
      char what[96];
      snprintf(what, sizeof what, "log_softmax_probs [%lld, %lld] bias %d", (long long)rows[c],
               (long long)lens[c], with_bias);
      const tt_view_t *bv = with_bias ? &b.v : NULL;
      if (with_bias) {
        CHECK_OK(tt_kernel_softmax_bias(&x.v, &b.v, 1, 1, &y1.v), what);
        CHECK_OK(tt_kernel_softmax_bias(&x.v, &b.v, 1, 0, &p1.v), what);
      } else {
        CHECK_OK(tt_kernel_softmax(&x.v, 1, 1, &y1.v), what);
        CHECK_OK(tt_kernel_softmax(&x.v, 1, 0, &p1.v), what);
      }
      CHECK_OK(tt_kernel_log_softmax_probs(&x.v, bv, &y2.v, &p2.v), what);
      CHECK(memcmp(y1.v.data, y2.v.data, sizeof(float) * (size_t)y1.n) == 0,
            "%s: log_softmax differs from the kernel without probabilities", what);
      const float *y = y2.v.data, *ps = p1.v.data, *p = p2.v.data;
      int bad = 0;
      for (int64_t i = 0; i < y1.n; ++i) {
        float e = expf(y[i]);
        /* exp(y) carries y's rounding (absolute, so relative in e): a
         * few ulp of |y| more */
        bad += fabsf(p[i] - ps[i]) > 4e-7f * ps[i] + 1e-30f ||
               fabsf(p[i] - e) > 3e-7f * (fabsf(y[i]) + 2.0f) * e + 1e-30f;
      }
      CHECK(bad == 0, "%s: %d probabilities off softmax / exp(log_softmax)", what, bad);
      CHECK(p[0] == 0.0f, "%s: a -inf logit's probability is %g", what, (double)p[0]);
      tensor_t *all[6] = {&x, &b, &y1, &y2, &p1, &p2};
      for (int i = 0; i < 6; ++i) tensor_free(all[i]);
    }
  int64_t xd[2] = {3, 8}, xd2[2] = {3, 7}, b7[1] = {7};
  tensor_t x = tensor_new(TT_F32, 2, xd), y = tensor_new(TT_F32, 2, xd), p = tensor_new(TT_F32, 2, xd);
  tensor_t p7 = tensor_new(TT_F32, 2, xd2), bad = tensor_new(TT_F32, 1, b7);
  tensor_t xh = tensor_new(TT_BF16, 2, xd);
  CHECK_CODE(tt_kernel_log_softmax_probs(&xh.v, NULL, &y.v, &p.v), TT_INVALID_ARGUMENT, "bf16");
  CHECK_CODE(tt_kernel_log_softmax_probs(&x.v, NULL, &y.v, &p7.v), TT_INVALID_ARGUMENT, "probs");
  CHECK_CODE(tt_kernel_log_softmax_probs(&x.v, &bad.v, &y.v, &p.v), TT_INVALID_ARGUMENT, "bias");
  tensor_t *all[6] = {&x, &y, &p, &p7, &bad, &xh};
  for (int i = 0; i < 6; ++i) tensor_free(all[i]);
}

/* ---- conv2d forward paths ---------------------------------------------------
 * The forward GEMM on phase planes (conv_fwd.c) and the depthwise kernel
 * (conv_direct.c) for strides, padding, dilation, groups, odd sizes,
 * batches, chunked staging and K beyond one GEMM block, in f32/f16/bf16,
 * with every GEMM micro-kernel and with the portable loops. Backward
 * passes are covered in test_kernels_linalg.c. */

typedef struct {
  int64_t N, C, H, W, O, KH, KW, sh, sw, ph, pw, dh, dw, G;
  const char *what;
} conv_fwd_case_t;

/* An epilogue that checks it sees each output element once, already final
 * (equal to the plain convolution's result). */
typedef struct {
  const char *got, *want;
  size_t es;
  int *seen;
  int late;
} conv_epi_check_t;

static void conv_epi_check_range(void *arg, int64_t begin, int64_t end) {
  conv_epi_check_t *k = arg;
  for (int64_t i = begin; i < end; ++i) {
    __atomic_fetch_add(&k->seen[i], 1, __ATOMIC_RELAXED);
    if (memcmp(k->got + (size_t)i * k->es, k->want + (size_t)i * k->es, k->es) != 0)
      __atomic_fetch_add(&k->late, 1, __ATOMIC_RELAXED);
  }
}

static void check_conv_epilogue(const tensor_t *x, const tensor_t *w, const tensor_t *o,
                                const tt_conv2d_params_t *p, const char *what) {
  tensor_t o2 = tensor_new(o->v.dtype, 4, o->v.shape.dims);
  tensor_fill_random(&o2, 1e3, 2e3);
  conv_epi_check_t k = {(const char *)o2.v.data, (const char *)o->v.data,
                        tt_dtype_size(o->v.dtype), calloc((size_t)o->n + 1, sizeof(int)), 0};
  tt_epilogue_t epi = {conv_epi_check_range, &k};
  if (CHECK_OK(tt_kernel_conv2d_epilogue(&x->v, &w->v, p, &o2.v, &epi), what)) {
    int twice = 0, never = 0;
    for (int64_t i = 0; i < o->n; ++i) {
      twice += k.seen[i] > 1;
      never += k.seen[i] == 0;
    }
    CHECK(twice == 0 && never == 0 && k.late == 0,
          "%s [%s] epilogue: %d elements seen twice, %d never, %d before final", what,
          tt_dtype_name(o->v.dtype), twice, never, k.late);
    CHECK(memcmp(o2.v.data, o->v.data, (size_t)o->n * k.es) == 0, "%s [%s] epilogue result",
          what, tt_dtype_name(o->v.dtype));
  }
  free(k.seen);
  tensor_free(&o2);
}

static void run_conv_fwd(tt_dtype_t dt, const conv_fwd_case_t *c, const char *variant) {
  int64_t OH = (c->H + 2 * c->ph - c->dh * (c->KH - 1) - 1) / c->sh + 1;
  int64_t OW = (c->W + 2 * c->pw - c->dw * (c->KW - 1) - 1) / c->sw + 1;
  int64_t Cg = c->C / c->G, Og = c->O / c->G;
  int64_t xd[4] = {c->N, c->C, c->H, c->W}, wd[4] = {c->O, Cg, c->KH, c->KW};
  int64_t od[4] = {c->N, c->O, OH, OW};
  tensor_t x = tensor_new(dt, 4, xd), w = tensor_new(dt, 4, wd), o = tensor_new(dt, 4, od);
  tensor_fill_random(&x, -1, 1);
  tensor_fill_random(&w, -1, 1);
  tensor_fill_random(&o, 1e3, 2e3); /* every output must be overwritten */
  tt_conv2d_params_t p = {{c->sh, c->sw}, {c->ph, c->pw}, {c->dh, c->dw}, c->G};
  char what[200];
  snprintf(what, sizeof what, "conv fwd %s (%s) N%lld C%lld %lldx%lld O%lld k%lldx%lld s%lld,%lld "
           "p%lld,%lld d%lld,%lld g%lld", c->what, variant, (long long)c->N, (long long)c->C,
           (long long)c->H, (long long)c->W, (long long)c->O, (long long)c->KH,
           (long long)c->KW, (long long)c->sh, (long long)c->sw, (long long)c->ph,
           (long long)c->pw, (long long)c->dh, (long long)c->dw, (long long)c->G);
  if (CHECK_OK(tt_kernel_conv2d(&x.v, &w.v, &p, &o.v), what)) {
    double *ref = calloc((size_t)o.n, sizeof(double)), *mag = calloc((size_t)o.n, sizeof(double));
    for (int64_t n = 0; n < c->N; ++n)
      for (int64_t oc = 0; oc < c->O; ++oc)
        for (int64_t oh = 0; oh < OH; ++oh)
          for (int64_t ow = 0; ow < OW; ++ow) {
            int64_t oi = ((n * c->O + oc) * OH + oh) * OW + ow;
            for (int64_t cc = 0; cc < Cg; ++cc)
              for (int64_t i = 0; i < c->KH; ++i)
                for (int64_t j = 0; j < c->KW; ++j) {
                  int64_t ih = oh * c->sh - c->ph + i * c->dh;
                  int64_t iw = ow * c->sw - c->pw + j * c->dw;
                  if (ih < 0 || ih >= c->H || iw < 0 || iw >= c->W) continue;
                  double v = tget(&w, ((oc * Cg + cc) * c->KH + i) * c->KW + j) *
                             tget(&x, ((n * c->C + (oc / Og) * Cg + cc) * c->H + ih) * c->W + iw);
                  ref[oi] += v;
                  mag[oi] += fabs(v);
                }
          }
    /* f32 accumulation of mag-sized terms, then one rounding to dt. */
    int bad = 0;
    for (int64_t i = 0; i < o.n; ++i) {
      double want = round_to(dt, ref[i]), got = tget(&o, i);
      double tol = 1e-5 * mag[i] + dtype_rtol(dt) * fabs(want) + 1e-6;
      if (!(fabs(got - want) <= tol)) {
        if (bad < 3) printf("  %s [%s] at %lld: got %.9g want %.9g\n", what, tt_dtype_name(dt),
                            (long long)i, got, want);
        ++bad;
      }
    }
    CHECK(bad == 0, "%s [%s]: %d of %lld outputs differ", what, tt_dtype_name(dt), bad,
          (long long)o.n);
    free(ref);
    free(mag);
    check_conv_epilogue(&x, &w, &o, &p, what);
  }
  tensor_free(&x); tensor_free(&w); tensor_free(&o);
}

static void run_conv_bwd(tt_dtype_t dt, const conv_fwd_case_t *c, const char *variant);

static void test_conv_forward_paths(void) {
  const conv_fwd_case_t cases[] = {
      {1, 8, 13, 11, 20, 3, 3, 2, 2, 1, 1, 1, 1, 1, "3x3/2, odd sizes"},
      {2, 6, 16, 16, 14, 3, 3, 2, 2, 1, 1, 1, 1, 1, "3x3/2, batch"},
      {1, 3, 23, 21, 16, 7, 7, 2, 2, 3, 3, 1, 1, 1, "7x7/2 stem"},
      {1, 5, 17, 19, 7, 3, 3, 3, 3, 1, 1, 1, 1, 1, "stride 3"},
      {1, 4, 19, 18, 9, 3, 3, 2, 2, 2, 2, 2, 2, 1, "stride 2, dilation 2"},
      {1, 4, 14, 15, 6, 3, 5, 2, 1, 1, 2, 1, 3, 1, "stride (2,1), dilation (1,3)"},
      {1, 4, 12, 17, 6, 3, 3, 1, 3, 0, 1, 1, 1, 1, "stride (1,3)"},
      {1, 3, 16, 16, 12, 4, 4, 4, 4, 0, 0, 1, 1, 1, "patchify 4x4/4"},
      {1, 3, 17, 14, 5, 2, 2, 3, 3, 0, 0, 1, 1, 1, "kernel 2, stride 3 (skipped phases)"},
      {2, 24, 14, 14, 40, 1, 1, 2, 2, 0, 0, 1, 1, 1, "1x1/2"},
      {1, 6, 9, 9, 13, 1, 1, 3, 3, 1, 1, 1, 1, 1, "1x1/3, padded"},
      {1, 40, 9, 7, 50, 1, 1, 1, 1, 0, 0, 1, 1, 1, "1x1/1 pointwise (in place for f32)"},
      {8, 16, 7, 7, 24, 1, 1, 1, 1, 0, 0, 1, 1, 1, "1x1/1, batch 8"},
      {1, 8, 12, 12, 12, 3, 3, 2, 2, 1, 1, 1, 1, 2, "grouped 3x3/2"},
      {1, 4, 40, 40, 20, 3, 3, 1, 1, 1, 1, 1, 1, 1, "3x3/1, staged in chunks"},
      {1, 8, 64, 48, 96, 1, 1, 1, 1, 0, 0, 1, 1, 1, "1x1/1 on 64x48 (chunked with an epilogue)"},
      {1, 64, 6, 6, 14, 3, 3, 1, 1, 1, 1, 1, 1, 1, "K 576 > one GEMM block"},
      {1, 16, 20, 20, 16, 3, 3, 1, 1, 1, 1, 1, 1, 16, "depthwise 3x3/1"},
      {2, 12, 21, 19, 12, 3, 3, 2, 2, 1, 1, 1, 1, 12, "depthwise 3x3/2, odd"},
      {1, 8, 7, 7, 8, 3, 3, 1, 1, 1, 1, 1, 1, 8, "depthwise 7x7 plane"},
      {1, 6, 15, 13, 12, 5, 3, 3, 2, 2, 1, 2, 1, 6, "depthwise x2, stride 3/2, dilated"},
      {1, 1, 30, 30, 3, 5, 5, 2, 2, 2, 2, 1, 1, 1, "single input channel, 5x5/2"},
  };
  const tt_dtype_t dts[] = {TT_F32, TT_BF16, TT_F16};
  for (int ci = 0; ci < COUNT_OF(cases); ++ci) {
    for (int di = 0; di < COUNT_OF(dts); ++di) {
      if (di == 2 && ci % 3 != 0) continue;
      run_conv_fwd(dts[di], &cases[ci], "auto");
    }
    if (ci % 4 == 0) run_conv_fwd(TT_F64, &cases[ci], "auto");
  }
  /* Every micro-kernel width (nr 8, 16, 32) and the portable loops. */
  const tt_sgemm_isa_t isas[] = {TT_SGEMM_ISA_GENERIC, TT_SGEMM_ISA_AVX2};
  for (int ii = 0; ii < COUNT_OF(isas); ++ii) {
    if (!tt_sgemm_force_isa(isas[ii])) continue;
    for (int ci = 0; ci < COUNT_OF(cases); ci += 2) {
      run_conv_fwd(TT_F32, &cases[ci], isas[ii] == TT_SGEMM_ISA_AVX2 ? "avx2 gemm" : "generic gemm");
    }
  }
  tt_sgemm_force_isa(TT_SGEMM_ISA_AUTO);
  tt_conv_force_portable_for_test(1);
  for (int ci = 0; ci < COUNT_OF(cases); ++ci) run_conv_fwd(TT_F32, &cases[ci], "portable");
  tt_conv_force_portable_for_test(0);
  /* Backward passes on the same shapes: stride-1 backward-input as a
   * forward convolution with the flipped kernel (default) and through
   * col2im. */
  for (int ci = 0; ci < COUNT_OF(cases); ++ci) {
    run_conv_bwd(TT_F32, &cases[ci], "auto");
    if (ci % 2 == 0) run_conv_bwd(TT_BF16, &cases[ci], "auto");
    tt_conv_force_col2im_for_test(1);
    run_conv_bwd(TT_F32, &cases[ci], "col2im");
    tt_conv_force_col2im_for_test(0);
  }
}

/* ---- conv2d: several images per GEMM (conv_batched.c) ----------------------
 * Forward, backward-input and backward-weight with the batched path forced
 * on, forced off (per-image GEMMs of conv.c / conv_fwd.c) and chosen by
 * size, against double references: small planes (1x1, 2x2 outputs, as in
 * ResNet's last stages on 32x32 images), strides 1/2/(2,1), padding,
 * dilation, groups, odd sizes, batches that split into several chunks
 * (and several weight-gradient partials), f32/bf16/f16, every GEMM
 * micro-kernel, and the portable window copies. */

/* |got - want| within the fwd test's tolerance at every index; returns the
 * number of mismatches (the first 3 printed). */
static int conv_compare(const char *what, const char *which, tt_dtype_t dt,
                        const tensor_t *t, const double *ref, const double *mag) {
  int bad = 0;
  for (int64_t i = 0; i < t->n; ++i) {
    double want = round_to(dt, ref[i]), got = tget(t, i);
    double tol = 1e-5 * mag[i] + dtype_rtol(dt) * fabs(want) + 1e-6;
    if (!(fabs(got - want) <= tol)) {
      if (bad < 3) printf("  %s %s [%s] at %lld: got %.9g want %.9g\n", what, which,
                          tt_dtype_name(dt), (long long)i, got, want);
      ++bad;
    }
  }
  CHECK(bad == 0, "%s %s [%s]: %d of %lld values differ", what, which, tt_dtype_name(dt), bad,
        (long long)t->n);
  return bad;
}

static void run_conv_bwd(tt_dtype_t dt, const conv_fwd_case_t *c, const char *variant) {
  int64_t OH = (c->H + 2 * c->ph - c->dh * (c->KH - 1) - 1) / c->sh + 1;
  int64_t OW = (c->W + 2 * c->pw - c->dw * (c->KW - 1) - 1) / c->sw + 1;
  int64_t Cg = c->C / c->G, Og = c->O / c->G;
  int64_t xd[4] = {c->N, c->C, c->H, c->W}, wd[4] = {c->O, Cg, c->KH, c->KW};
  int64_t od[4] = {c->N, c->O, OH, OW};
  tensor_t x = tensor_new(dt, 4, xd), w = tensor_new(dt, 4, wd), go = tensor_new(dt, 4, od);
  tensor_t gx = tensor_new(dt, 4, xd), gw = tensor_new(dt, 4, wd);
  tensor_fill_random(&x, -1, 1);
  tensor_fill_random(&w, -1, 1);
  tensor_fill_random(&go, -1, 1);
  tensor_fill_random(&gx, 1e3, 2e3); /* every gradient must be overwritten */
  tensor_fill_random(&gw, 1e3, 2e3);
  tt_conv2d_params_t p = {{c->sh, c->sw}, {c->ph, c->pw}, {c->dh, c->dw}, c->G};
  char what[200];
  snprintf(what, sizeof what, "conv bwd %s (%s) N%lld C%lld %lldx%lld O%lld k%lldx%lld s%lld,%lld "
           "p%lld,%lld d%lld,%lld g%lld", c->what, variant, (long long)c->N, (long long)c->C,
           (long long)c->H, (long long)c->W, (long long)c->O, (long long)c->KH,
           (long long)c->KW, (long long)c->sh, (long long)c->sw, (long long)c->ph,
           (long long)c->pw, (long long)c->dh, (long long)c->dw, (long long)c->G);
  int ok_in = CHECK_OK(tt_kernel_conv2d_backward_input(&go.v, &w.v, &p, &gx.v), what);
  int ok_w = CHECK_OK(tt_kernel_conv2d_backward_weight(&go.v, &x.v, &p, &gw.v), what);
  double *rx = calloc((size_t)x.n, sizeof(double)), *mx = calloc((size_t)x.n, sizeof(double));
  double *rw = calloc((size_t)w.n, sizeof(double)), *mw = calloc((size_t)w.n, sizeof(double));
  for (int64_t n = 0; n < c->N; ++n)
    for (int64_t oc = 0; oc < c->O; ++oc)
      for (int64_t oh = 0; oh < OH; ++oh)
        for (int64_t ow = 0; ow < OW; ++ow) {
          double gv = tget(&go, ((n * c->O + oc) * OH + oh) * OW + ow);
          for (int64_t cc = 0; cc < Cg; ++cc)
            for (int64_t i = 0; i < c->KH; ++i)
              for (int64_t j = 0; j < c->KW; ++j) {
                int64_t ih = oh * c->sh - c->ph + i * c->dh;
                int64_t iw = ow * c->sw - c->pw + j * c->dw;
                if (ih < 0 || ih >= c->H || iw < 0 || iw >= c->W) continue;
                int64_t wi = ((oc * Cg + cc) * c->KH + i) * c->KW + j;
                int64_t xi = ((n * c->C + (oc / Og) * Cg + cc) * c->H + ih) * c->W + iw;
                double vx = gv * tget(&w, wi), vw = gv * tget(&x, xi);
                rx[xi] += vx;
                mx[xi] += fabs(vx);
                rw[wi] += vw;
                mw[wi] += fabs(vw);
              }
        }
  if (ok_in) conv_compare(what, "grad_input", dt, &gx, rx, mx);
  if (ok_w) conv_compare(what, "grad_weight", dt, &gw, rw, mw);
  free(rx); free(mx); free(rw); free(mw);
  tensor_free(&x); tensor_free(&w); tensor_free(&go); tensor_free(&gx); tensor_free(&gw);
}

static void test_conv_batched_paths(void) {
  const conv_fwd_case_t cases[] = {
      {5, 24, 1, 1, 20, 3, 3, 1, 1, 1, 1, 1, 1, 1, "3x3/1 on a 1x1 plane"},
      {6, 16, 2, 2, 24, 3, 3, 1, 1, 1, 1, 1, 1, 1, "3x3/1 on 2x2"},
      {40, 8, 2, 2, 12, 3, 3, 1, 1, 1, 1, 1, 1, 1, "3x3/1 on 2x2, 40 images (bwd-input as forward)"},
      {4, 12, 3, 3, 20, 3, 3, 2, 2, 1, 1, 1, 1, 1, "3x3/2 on 3x3 (2x2 out)"},
      {3, 10, 5, 7, 9, 3, 3, 2, 2, 1, 1, 1, 1, 1, "3x3/2 odd sizes"},
      {7, 16, 4, 4, 32, 1, 1, 2, 2, 0, 0, 1, 1, 1, "1x1/2 downsample"},
      {3, 20, 5, 5, 8, 1, 1, 1, 1, 0, 0, 1, 1, 1, "1x1/1 pointwise"},
      {2, 6, 9, 8, 10, 3, 3, 1, 1, 2, 2, 2, 2, 1, "dilation 2"},
      {3, 8, 9, 13, 6, 3, 5, 2, 1, 1, 2, 1, 3, 1, "stride (2,1), dilation (1,3)"},
      {4, 12, 6, 6, 18, 3, 3, 1, 1, 1, 1, 1, 1, 3, "grouped 3x3/1"},
      {2, 8, 9, 9, 4, 3, 3, 1, 1, 1, 1, 1, 1, 4, "one output channel per group (flipped: depthwise x2)"},
      {11, 6, 11, 11, 10, 3, 3, 1, 1, 1, 1, 1, 1, 1, "11x11 plane, 11 images (2 chunks)"},
      {9, 64, 1, 1, 40, 3, 3, 1, 1, 1, 1, 1, 1, 1, "K 576 > one GEMM block, 1x1"},
      {2, 3, 12, 12, 8, 7, 7, 2, 2, 3, 3, 1, 1, 1, "7x7/2 stem"},
      {1, 8, 5, 5, 6, 3, 3, 1, 1, 1, 1, 1, 1, 1, "batch 1"},
      {4, 16, 2, 2, 24, 3, 3, 2, 2, 1, 1, 1, 1, 1, "3x3/2 on 2x2 (4 of 9 taps read the image)"},
      {3, 12, 1, 1, 18, 3, 3, 1, 1, 1, 1, 1, 1, 3, "grouped 3x3 on 1x1 (centre tap only)"},
      {2, 4, 1, 1, 6, 1, 1, 4, 4, 2, 2, 1, 1, 1, "every tap reads padding"},
  };
  const tt_dtype_t dts[] = {TT_F32, TT_BF16, TT_F16};
  const int modes[] = {-1, 1, 0};
  const char *mode_names[] = {"auto", "batched", "per image"};
  for (int mi = 0; mi < COUNT_OF(modes); ++mi) {
    tt_conv_force_batched_for_test(modes[mi]);
    /* Forced modes keep the 2x2 and 1x1 planes off the dense path. */
    tt_conv_force_no_dense_for_test(modes[mi] >= 0);
    for (int ci = 0; ci < COUNT_OF(cases); ++ci) {
      for (int di = 0; di < COUNT_OF(dts); ++di) {
        if (di > 0 && (ci + di) % 3 != 0) continue;
        run_conv_fwd(dts[di], &cases[ci], mode_names[mi]);
        run_conv_bwd(dts[di], &cases[ci], mode_names[mi]);
      }
    }
  }
  /* Stride-1 backward-input through col2im instead of the flipped-kernel
   * forward, batched and per image. */
  tt_conv_force_col2im_for_test(1);
  for (int mi = 1; mi < COUNT_OF(modes); ++mi) {
    tt_conv_force_batched_for_test(modes[mi]);
    for (int ci = 0; ci < COUNT_OF(cases); ++ci) {
      char v[64];
      snprintf(v, sizeof v, "%s, col2im", mode_names[mi]);
      run_conv_bwd(ci % 4 == 1 ? TT_BF16 : TT_F32, &cases[ci], v);
    }
  }
  tt_conv_force_col2im_for_test(0);
  /* The batched path with every micro-kernel width (nr 8, 16, 32). */
  tt_conv_force_batched_for_test(1);
  const tt_sgemm_isa_t isas[] = {TT_SGEMM_ISA_GENERIC, TT_SGEMM_ISA_AVX2};
  for (int ii = 0; ii < COUNT_OF(isas); ++ii) {
    if (!tt_sgemm_force_isa(isas[ii])) continue;
    for (int ci = 0; ci < COUNT_OF(cases); ci += 2) {
      const char *v = isas[ii] == TT_SGEMM_ISA_AVX2 ? "batched, avx2 gemm" : "batched, generic gemm";
      run_conv_fwd(TT_F32, &cases[ci], v);
      run_conv_bwd(TT_F32, &cases[ci], v);
    }
  }
  tt_sgemm_force_isa(TT_SGEMM_ISA_AUTO);
  /* The portable window copies (no AVX-512). */
  tt_conv_force_portable_for_test(1);
  for (int ci = 0; ci < COUNT_OF(cases); ++ci) {
    run_conv_fwd(TT_F32, &cases[ci], "batched, portable");
    run_conv_bwd(TT_F32, &cases[ci], "batched, portable");
  }
  tt_conv_force_portable_for_test(0);
  tt_conv_force_batched_for_test(-1);
  tt_conv_force_no_dense_for_test(0);
}

/* ---- conv2d: tiny planes as one dense GEMM (conv_dense.c) ------------------
 * Planes where every output position reads every input position (3x3/1
 * over 2x2, 5x5/1 over 3x3, 3x3/2 over 2x2 onto 1x1, any kernel over a
 * 1x1 plane) run forward and backward-input as one GEMM against a
 * gathered matrix, and the weight gradient as one GEMM per position pair;
 * checked against the double reference, with the path
 * asserted taken (or not) from the geometry, in f32 (bf16/f16 take the
 * other paths), at every GEMM micro-kernel. */
static int dense_taken(const conv_fwd_case_t *c) {
  int64_t OH = (c->H + 2 * c->ph - c->dh * (c->KH - 1) - 1) / c->sh + 1;
  int64_t OW = (c->W + 2 * c->pw - c->dw * (c->KW - 1) - 1) / c->sw + 1;
  tt_conv_geom_t g = {.N = c->N, .C = c->C, .H = c->H, .W = c->W, .O = c->O, .KH = c->KH,
                      .KW = c->KW, .OH = OH, .OW = OW, .G = c->G, .Cg = c->C / c->G,
                      .Og = c->O / c->G, .K = c->C / c->G * c->KH * c->KW, .sh = c->sh,
                      .sw = c->sw, .ph = c->ph, .pw = c->pw, .dh = c->dh, .dw = c->dw};
  tt_view_t v = {.dtype = TT_F32};
  return tt_conv_dense_ok(&g, &v, &v, &v);
}

static void test_conv_dense_path(void) {
  const struct {
    conv_fwd_case_t c;
    int dense;
  } cases[] = {
      {{6, 16, 2, 2, 24, 3, 3, 1, 1, 1, 1, 1, 1, 1, "3x3/1 on 2x2"}, 1},
      {{33, 70, 2, 2, 38, 3, 3, 1, 1, 1, 1, 1, 1, 1, "3x3/1 on 2x2, 33 images, odd widths"}, 1},
      {{1, 9, 2, 2, 5, 3, 3, 1, 1, 1, 1, 1, 1, 1, "3x3/1 on 2x2, one image"}, 1},
      {{4, 6, 3, 3, 7, 5, 5, 1, 1, 2, 2, 1, 1, 1, "5x5/1 on 3x3"}, 1},
      {{4, 8, 2, 1, 6, 3, 3, 1, 1, 1, 1, 1, 1, 1, "3x3/1 on 2x1"}, 1},
      {{5, 12, 2, 2, 10, 3, 3, 2, 2, 1, 1, 1, 1, 1, "3x3/2 on 2x2 onto 1x1"}, 1},
      {{5, 24, 1, 1, 20, 3, 3, 1, 1, 1, 1, 1, 1, 1, "3x3/1 on a 1x1 plane"}, 1},
      {{3, 8, 4, 4, 8, 3, 3, 1, 1, 1, 1, 1, 1, 1, "3x3/1 on 4x4: corners do not meet"}, 0},
      {{3, 8, 2, 2, 8, 3, 3, 1, 1, 2, 2, 2, 2, 1, "dilation 2 on 2x2: odd offsets miss"}, 0},
      {{3, 8, 2, 2, 8, 3, 3, 1, 1, 1, 1, 1, 1, 2, "grouped"}, 0},
      {{3, 8, 2, 2, 8, 1, 1, 1, 1, 0, 0, 1, 1, 1, "1x1 kernel"}, 0},
  };
  for (int ci = 0; ci < COUNT_OF(cases); ++ci) {
    char msg[160];
    snprintf(msg, sizeof msg, "dense path chosen for %s", cases[ci].c.what);
    CHECK(dense_taken(&cases[ci].c) == cases[ci].dense, "%s", msg);
    run_conv_fwd(TT_F32, &cases[ci].c, "dense");
    run_conv_bwd(TT_F32, &cases[ci].c, "dense");
    if (ci % 3 == 0) run_conv_bwd(TT_BF16, &cases[ci].c, "dense (bf16: other paths)");
  }
  const tt_sgemm_isa_t isas[] = {TT_SGEMM_ISA_GENERIC, TT_SGEMM_ISA_AVX2};
  for (int ii = 0; ii < COUNT_OF(isas); ++ii) {
    if (!tt_sgemm_force_isa(isas[ii])) continue;
    for (int ci = 0; ci < 4; ++ci) {
      run_conv_fwd(TT_F32, &cases[ci].c, "dense, other gemm");
      run_conv_bwd(TT_F32, &cases[ci].c, "dense, other gemm");
    }
  }
  tt_sgemm_force_isa(TT_SGEMM_ISA_AUTO);
}

/* ---- layer norm (layer_norm.c) ---------------------------------------------
 * Forward and backward against a double-precision reference: rows of 128
 * (the decoder's), 130 (a vector tail), 3, normalised over two dims, with
 * and without weight and bias, 9000 rows (chunks of 36 rows for the
 * column sums); grad_x left out; a wrong dtype and a wrong weight size. */
static void run_layer_norm(int64_t R, int64_t C1, int64_t C2, int affine, int want_dx) {
  int64_t C = C1 * C2, xd[3] = {R, C1, C2}, cd[1] = {C}, rd[1] = {R};
  tensor_t x = tensor_new(TT_F32, 3, xd), go = tensor_new(TT_F32, 3, xd);
  tensor_t y = tensor_new(TT_F32, 3, xd), dx = tensor_new(TT_F32, 3, xd);
  tensor_t w = tensor_new(TT_F32, 1, cd), b = tensor_new(TT_F32, 1, cd);
  tensor_t dw = tensor_new(TT_F32, 1, cd), db = tensor_new(TT_F32, 1, cd);
  tensor_t mean = tensor_new(TT_F32, 1, rd), rstd = tensor_new(TT_F32, 1, rd);
  tensor_fill_random(&x, -2, 3);
  tensor_fill_random(&go, -1, 1);
  tensor_fill_random(&w, 0.5, 1.5);
  tensor_fill_random(&b, -1, 1);
  const double eps = 1e-5;
  char what[96];
  snprintf(what, sizeof what, "layer_norm R%lld C%lldx%lld%s%s", (long long)R, (long long)C1,
           (long long)C2, affine ? " affine" : "", want_dx ? "" : " no grad_x");
  CHECK_OK(tt_kernel_layer_norm(&x.v, 1, affine ? &w.v : NULL, affine ? &b.v : NULL, eps, &y.v,
                                &mean.v, &rstd.v), what);
  CHECK_OK(tt_kernel_layer_norm_backward(&go.v, &x.v, 1, &mean.v, &rstd.v, affine ? &w.v : NULL,
                                         want_dx ? &dx.v : NULL, &dw.v, &db.v), what);
  double *sw = calloc((size_t)C, sizeof(double)), *sb = calloc((size_t)C, sizeof(double));
  double ey = 0, es = 0, edx = 0;
  for (int64_t r = 0; r < R; ++r) {
    double m = 0, v = 0;
    for (int64_t i = 0; i < C; ++i) m += tget(&x, r * C + i);
    m /= (double)C;
    for (int64_t i = 0; i < C; ++i) v += (tget(&x, r * C + i) - m) * (tget(&x, r * C + i) - m);
    double rs = 1.0 / sqrt(v / (double)C + eps);
    es = fmax(es, fabs(tget(&mean, r) - m) + fabs(tget(&rstd, r) - rs) / rs);
    double mg = 0, mgx = 0;
    for (int64_t i = 0; i < C; ++i) {
      double xh = (tget(&x, r * C + i) - m) * rs, gv = tget(&go, r * C + i);
      double want = affine ? xh * tget(&w, i) + tget(&b, i) : xh;
      ey = fmax(ey, fabs(tget(&y, r * C + i) - want));
      double g = affine ? gv * tget(&w, i) : gv;
      mg += g;
      mgx += g * xh;
      sw[i] += gv * xh;
      sb[i] += gv;
    }
    mg /= (double)C;
    mgx /= (double)C;
    for (int64_t i = 0; i < C && want_dx; ++i) {
      double xh = (tget(&x, r * C + i) - m) * rs, gv = tget(&go, r * C + i);
      double g = affine ? gv * tget(&w, i) : gv;
      edx = fmax(edx, fabs(tget(&dx, r * C + i) - (g - mg - xh * mgx) * rs));
    }
  }
  double ew = 0;
  for (int64_t i = 0; i < C; ++i)
    ew = fmax(ew, (fabs(tget(&dw, i) - sw[i]) + fabs(tget(&db, i) - sb[i])) /
                      (1.0 + sqrt((double)R)));
  CHECK(ey < 2e-5 && es < 2e-5 && edx < 5e-5 && ew < 5e-5,
        "%s: errors y %.3g, mean/rstd %.3g, dx %.3g, dw/db %.3g", what, ey, es, edx, ew);
  if (R > 1 && C > 1) {
    tensor_t h = tensor_new(TT_F16, 3, xd);
    CHECK_CODE(tt_kernel_layer_norm(&h.v, 1, NULL, NULL, eps, &y.v, &mean.v, &rstd.v),
               TT_TYPE_ERROR, "layer_norm f16 input");
    tensor_free(&h);
    tensor_t bad = tensor_new(TT_F32, 1, rd);
    CHECK_CODE(tt_kernel_layer_norm(&x.v, 1, &bad.v, NULL, eps, &y.v, &mean.v, &rstd.v),
               TT_INVALID_ARGUMENT, "layer_norm weight of R elements");
    tensor_free(&bad);
  }
  free(sw);
  free(sb);
  tensor_t *all[10] = {&x, &go, &y, &dx, &w, &b, &dw, &db, &mean, &rstd};
  for (int i = 0; i < 10; ++i) tensor_free(all[i]);
}

static void test_layer_norm(void) {
  run_layer_norm(64, 128, 1, 1, 1);
  run_layer_norm(37, 130, 1, 1, 1);
  run_layer_norm(5, 3, 1, 0, 1);
  run_layer_norm(12, 5, 8, 0, 1);
  run_layer_norm(9000, 16, 1, 1, 1);
  run_layer_norm(40, 64, 1, 1, 0);
}

int main(void) {
  test_reduce();
  test_scan();
  test_pool();
  test_softmax();
  test_softmax_bias();
  test_log_softmax_probs();
  test_conv_forward_paths();
  test_conv_batched_paths();
  test_conv_dense_path();
  test_layer_norm();
  return test_summary();
}
