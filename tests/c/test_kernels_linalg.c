/* Tests for tt_kernel_dot (every GEMM micro-kernel variant the CPU can run)
 * and the conv2d kernels, against naive double-precision loops. Float
 * results are compared with a tolerance scaled by the sum of |products|,
 * which bounds the rounding of any summation order. */
#include "test_harness.h"

/* got vs ref with |got - ref| <= tol * mag + rtol(dtype) * |ref|. */
static int compare_mag(const char *what, const tensor_t *t, const double *ref,
                       const double *mag, double tol) {
  int bad = 0;
  double rt = dtype_rtol(t->v.dtype);
  for (int64_t i = 0; i < t->n; ++i) {
    double got = tget(t, i);
    double lim = tol * mag[i] + rt * fabs(ref[i]);
    if (!tt_dtype_is_float(t->v.dtype)) lim = 0;
    if (!(fabs(got - ref[i]) <= lim)) {
      if (bad < 3) {
        printf("  %s [%s] at %lld: got %.9g want %.9g (lim %.3g)\n", what,
               tt_dtype_name(t->v.dtype), (long long)i, got, ref[i], lim);
      }
      ++bad;
    }
  }
  CHECK(bad == 0, "%s [%s]: %d of %lld elements differ", what,
        tt_dtype_name(t->v.dtype), bad, (long long)t->n);
  return bad;
}

static double accum_tol(tt_dtype_t dt) {
  return dt == TT_F64 ? 1e-13 : 1e-6;
}

/* ---- dot ------------------------------------------------------------------ */

typedef struct {
  int64_t B, Bb, M, N, K;
} dot_case_t;

static void run_dot(tt_dtype_t dt, const dot_case_t *c, int ta, int tb,
                    const char *isa) {
  int64_t ad[3] = {c->B, ta ? c->K : c->M, ta ? c->M : c->K};
  int64_t bd[3] = {c->Bb, tb ? c->N : c->K, tb ? c->K : c->N};
  int64_t od[3] = {c->B, c->M, c->N};
  tensor_t a = tensor_new(dt, 3, ad), b = tensor_new(dt, 3, bd), o = tensor_new(dt, 3, od);
  double lo = tt_dtype_is_float(dt) ? -1 : (dt == TT_U8 ? 0 : -5);
  tensor_fill_random(&a, lo, tt_dtype_is_float(dt) ? 1 : 5);
  tensor_fill_random(&b, lo, tt_dtype_is_float(dt) ? 1 : 5);
  char what[160];
  snprintf(what, sizeof what, "dot %s B=%lld Bb=%lld M=%lld N=%lld K=%lld ta=%d tb=%d",
           isa, (long long)c->B, (long long)c->Bb, (long long)c->M,
           (long long)c->N, (long long)c->K, ta, tb);
  if (!CHECK_OK(tt_kernel_dot(&a.v, &b.v, ta, tb, &o.v), what)) goto done;
  {
    double *ref = malloc((size_t)(o.n + 1) * sizeof(double));
    double *mag = malloc((size_t)(o.n + 1) * sizeof(double));
    for (int64_t bi = 0; bi < c->B; ++bi) {
      int64_t bb = c->Bb == 1 ? 0 : bi;
      for (int64_t i = 0; i < c->M; ++i) {
        for (int64_t j = 0; j < c->N; ++j) {
          double s = 0, m = 0;
          int64_t si = 0;
          for (int64_t k = 0; k < c->K; ++k) {
            int64_t ai = bi * c->M * c->K + (ta ? k * c->M + i : i * c->K + k);
            int64_t bj = bb * c->K * c->N + (tb ? j * c->K + k : k * c->N + j);
            if (tt_dtype_is_float(dt)) {
              s += tget(&a, ai) * tget(&b, bj);
              m += fabs(tget(&a, ai) * tget(&b, bj));
            } else {
              si += tgeti(&a, ai) * tgeti(&b, bj);
            }
          }
          int64_t oi = (bi * c->M + i) * c->N + j;
          if (tt_dtype_is_float(dt)) {
            ref[oi] = round_to(dt, s);
          } else {
            unsigned char buf[8];
            tt_set_i64(buf, dt, 0, si);
            ref[oi] = tt_get_f64(buf, dt, 0);
          }
          mag[oi] = m;
        }
      }
    }
    compare_mag(what, &o, ref, mag, accum_tol(dt));
    free(ref);
    free(mag);
  }
done:
  tensor_free(&a);
  tensor_free(&b);
  tensor_free(&o);
}

static void test_dot(void) {
  const dot_case_t cases[] = {
      {1, 1, 1, 1, 1},      {1, 1, 13, 37, 29},    {2, 2, 64, 64, 64},
      {1, 1, 100, 200, 300}, {3, 3, 5, 7, 0},      {1, 1, 1, 300, 500},
      {1, 1, 777, 33, 400},  {1, 1, 50, 900, 40},  {4, 1, 20, 20, 20},
      {3, 3, 24, 64, 16},    {5, 1, 31, 47, 800},  {2, 1, 3, 700, 300},
      /* A weight gradient's shape: A transposed, K over several KC blocks,
       * M past several 48-row A blocks and not a multiple of them. */
      {1, 1, 130, 70, 1100},
      /* Long K, small output: split along K (gemm.c, tt_gemm_ksplits),
       * into 2 pieces (K not a multiple of 16) and into 4. */
      {1, 1, 37, 45, 2100},  {1, 1, 20, 30, 4500},
  };
  const struct { tt_sgemm_isa_t isa; const char *name; } isas[] = {
      {TT_SGEMM_ISA_GENERIC, "generic"},
      {TT_SGEMM_ISA_AVX2, "avx2"},
      {TT_SGEMM_ISA_AVX512, "avx512"},
  };
  for (int v = 0; v < COUNT_OF(isas); ++v) {
    if (!tt_sgemm_force_isa(isas[v].isa)) {
      printf("  (skipping GEMM variant %s: not supported by this CPU)\n", isas[v].name);
      continue;
    }
    CHECK(strcmp(tt_sgemm_isa_name(), isas[v].name) == 0, "forced isa %s", isas[v].name);
    for (int ci = 0; ci < COUNT_OF(cases); ++ci) {
      for (int t = 0; t < 4; ++t) {
        if (t != 0 && ci != 1 && ci != 3 && ci != 6 && ci != 9 && ci != 11 && ci != 12 &&
            ci != 13)
          continue;
        run_dot(TT_F32, &cases[ci], t & 1, t >> 1, isas[v].name);
      }
    }
    /* With a thread waiting for the device the products split over every
     * core (tt_parallel_width): the parallel driver, whose column-major A
     * is packed whole by several threads. */
    tt_parallel_host_wait_begin();
    run_dot(TT_F32, &cases[12], 1, 0, isas[v].name);
    run_dot(TT_F32, &cases[6], 1, 1, isas[v].name);
    run_dot(TT_F32, &cases[11], 0, 0, isas[v].name);
    run_dot(TT_F32, &cases[13], 1, 0, isas[v].name);
    run_dot(TT_F32, &cases[14], 0, 1, isas[v].name);
    /* Row-major A with K >= 256, read in place by the AVX-512 kernel
     * (tt_gemm_direct_a): M not a multiple of the 12-row panels, so a
     * block's last rows are packed. */
    run_dot(TT_F32, &cases[6], 0, 0, isas[v].name);
    run_dot(TT_F32, &cases[10], 0, 1, isas[v].name);
    tt_parallel_host_wait_end();
    run_dot(TT_F16, &cases[3], 1, 0, isas[v].name);
    run_dot(TT_BF16, &cases[9], 0, 1, isas[v].name);
  }
  CHECK(tt_sgemm_force_isa(TT_SGEMM_ISA_AUTO), "back to auto");
  const tt_dtype_t others[] = {TT_F16, TT_BF16, TT_F64, TT_I32, TT_I64, TT_I8, TT_U8, TT_BOOL};
  for (int di = 0; di < COUNT_OF(others); ++di) {
    for (int ci = 0; ci < COUNT_OF(cases); ++ci) {
      if (cases[ci].M * cases[ci].N * cases[ci].K > 300000 && others[di] != TT_F16) continue;
      run_dot(others[di], &cases[ci], ci % 2, (ci / 2) % 2, "auto");
    }
  }

  /* Errors. */
  tensor_t a = tensor_new(TT_F32, 3, (int64_t[]){1, 2, 3});
  tensor_t b = tensor_new(TT_F32, 3, (int64_t[]){1, 4, 5});
  tensor_t o = tensor_new(TT_F32, 3, (int64_t[]){1, 2, 5});
  tensor_t b2 = tensor_new(TT_F32, 2, (int64_t[]){3, 5});
  tensor_t bi = tensor_new(TT_I32, 3, (int64_t[]){1, 3, 5});
  CHECK_CODE(tt_kernel_dot(&a.v, &b.v, 0, 0, &o.v), TT_INVALID_ARGUMENT, "K mismatch");
  CHECK_CODE(tt_kernel_dot(&a.v, &b2.v, 0, 0, &o.v), TT_INVALID_ARGUMENT, "rank 2");
  CHECK_CODE(tt_kernel_dot(&a.v, &bi.v, 0, 0, &o.v), TT_TYPE_ERROR, "dtype mismatch");
  tensor_free(&a); tensor_free(&b); tensor_free(&o); tensor_free(&b2); tensor_free(&bi);

  /* tt_sgemm directly: strided C and accumulate. */
  float A[6] = {1, 2, 3, 4, 5, 6};        /* 2x3 */
  float Bm[6] = {1, 0, 0, 1, 1, 1};       /* 3x2 */
  float C[2 * 4] = {10, 20, -1, -1, 30, 40, -1, -1};
  tt_sgemm_args_t g = {.m = 2, .n = 2, .k = 3, .a = A, .a_dtype = TT_F32, .rsa = 3,
                       .csa = 1, .b = Bm, .b_dtype = TT_F32, .rsb = 2, .csb = 1,
                       .c = C, .ldc = 4, .accumulate = 1};
  CHECK_OK(tt_sgemm(&g, 1), "sgemm");
  CHECK(C[0] == 14 && C[1] == 25 && C[4] == 40 && C[5] == 51 && C[2] == -1 && C[6] == -1,
        "sgemm accumulate/ldc: %g %g %g %g", C[0], C[1], C[4], C[5]);

  /* A split-K product: the same bits serial and on every thread, and
   * accumulating into a strided C. */
  {
    enum { M = 24, N = 40, K = 3000, LDC = 50 };
    float *a = malloc(sizeof(float) * M * K), *b = malloc(sizeof(float) * K * N);
    float *c1 = malloc(sizeof(float) * M * LDC), *c2 = malloc(sizeof(float) * M * LDC);
    for (int i = 0; i < M * K; ++i) a[i] = (float)((i * 7919) % 201 - 100) / 64.0f;
    for (int i = 0; i < K * N; ++i) b[i] = (float)((i * 7907) % 199 - 99) / 32.0f;
    for (int i = 0; i < M * LDC; ++i) c1[i] = c2[i] = (float)(i % 13);
    /* x^T g: A column-major, as a weight gradient's. */
    tt_sgemm_args_t s = {.m = M, .n = N, .k = K, .a = a, .a_dtype = TT_F32, .rsa = 1,
                         .csa = M, .b = b, .b_dtype = TT_F32, .rsb = N, .csb = 1,
                         .c = c1, .ldc = LDC, .accumulate = 1};
    CHECK_OK(tt_sgemm(&s, 0), "split-K sgemm, serial");
    s.c = c2;
    tt_parallel_host_wait_begin();
    CHECK_OK(tt_sgemm(&s, 1), "split-K sgemm, parallel");
    tt_parallel_host_wait_end();
    CHECK(memcmp(c1, c2, sizeof(float) * M * LDC) == 0, "split-K: serial and parallel differ");
    int bad = 0;
    for (int i = 0; i < M; ++i) {
      for (int j = 0; j < LDC; ++j) {
        double want = (double)(float)((i * LDC + j) % 13), mag = fabs(want);
        if (j < N) {
          for (int k = 0; k < K; ++k) {
            want += (double)a[k * M + i] * b[k * N + j];
            mag += fabs((double)a[k * M + i] * b[k * N + j]);
          }
        }
        bad += !(fabs(c1[i * LDC + j] - want) <= 1e-6 * mag);
      }
    }
    CHECK(bad == 0, "split-K accumulate: %d of %d wrong", bad, M * LDC);
    free(a);
    free(b);
    free(c1);
    free(c2);
  }
}

/* ---- conv2d --------------------------------------------------------------- */

typedef struct {
  int64_t N, C, H, W, O, KH, KW, sh, sw, ph, pw, dh, dw, G;
} conv_case_t;

static void conv_params(const conv_case_t *c, tt_conv2d_params_t *p) {
  p->stride[0] = c->sh;
  p->stride[1] = c->sw;
  p->pad[0] = c->ph;
  p->pad[1] = c->pw;
  p->dilation[0] = c->dh;
  p->dilation[1] = c->dw;
  p->groups = c->G;
}

static void run_conv(tt_dtype_t dt, const conv_case_t *c) {
  int64_t OH = (c->H + 2 * c->ph - c->dh * (c->KH - 1) - 1) / c->sh + 1;
  int64_t OW = (c->W + 2 * c->pw - c->dw * (c->KW - 1) - 1) / c->sw + 1;
  int64_t Cg = c->C / c->G, Og = c->O / c->G;
  int64_t xd[4] = {c->N, c->C, c->H, c->W}, wd[4] = {c->O, Cg, c->KH, c->KW};
  int64_t od[4] = {c->N, c->O, OH, OW};
  tensor_t x = tensor_new(dt, 4, xd), w = tensor_new(dt, 4, wd), o = tensor_new(dt, 4, od);
  tensor_t go = tensor_new(dt, 4, od), gx = tensor_new(dt, 4, xd), gw = tensor_new(dt, 4, wd);
  tensor_fill_random(&x, -1, 1);
  tensor_fill_random(&w, -1, 1);
  tensor_fill_random(&go, -1, 1);
  tt_conv2d_params_t p;
  conv_params(c, &p);
  char what[200];
  snprintf(what, sizeof what,
           "conv N%lld C%lld %lldx%lld O%lld k%lldx%lld s%lld,%lld p%lld,%lld d%lld,%lld g%lld",
           (long long)c->N, (long long)c->C, (long long)c->H, (long long)c->W,
           (long long)c->O, (long long)c->KH, (long long)c->KW, (long long)c->sh,
           (long long)c->sw, (long long)c->ph, (long long)c->pw, (long long)c->dh,
           (long long)c->dw, (long long)c->G);
  int ok = CHECK_OK(tt_kernel_conv2d(&x.v, &w.v, &p, &o.v), what);
  ok &= CHECK_OK(tt_kernel_conv2d_backward_input(&go.v, &w.v, &p, &gx.v), what);
  ok &= CHECK_OK(tt_kernel_conv2d_backward_weight(&go.v, &x.v, &p, &gw.v), what);
  if (ok) {
    double *ro = calloc((size_t)o.n, sizeof(double)), *mo = calloc((size_t)o.n, sizeof(double));
    double *rx = calloc((size_t)gx.n, sizeof(double)), *mx = calloc((size_t)gx.n, sizeof(double));
    double *rw = calloc((size_t)gw.n, sizeof(double)), *mw = calloc((size_t)gw.n, sizeof(double));
    for (int64_t n = 0; n < c->N; ++n)
      for (int64_t oc = 0; oc < c->O; ++oc)
        for (int64_t oh = 0; oh < OH; ++oh)
          for (int64_t ow = 0; ow < OW; ++ow)
            for (int64_t cc = 0; cc < Cg; ++cc)
              for (int64_t i = 0; i < c->KH; ++i)
                for (int64_t j = 0; j < c->KW; ++j) {
                  int64_t ih = oh * c->sh - c->ph + i * c->dh;
                  int64_t iw = ow * c->sw - c->pw + j * c->dw;
                  if (ih < 0 || ih >= c->H || iw < 0 || iw >= c->W) continue;
                  int64_t ci = (oc / Og) * Cg + cc;
                  int64_t xi = ((n * c->C + ci) * c->H + ih) * c->W + iw;
                  int64_t wi = ((oc * Cg + cc) * c->KH + i) * c->KW + j;
                  int64_t oi = ((n * c->O + oc) * OH + oh) * OW + ow;
                  ro[oi] += tget(&w, wi) * tget(&x, xi);
                  mo[oi] += fabs(tget(&w, wi) * tget(&x, xi));
                  rx[xi] += tget(&w, wi) * tget(&go, oi);
                  mx[xi] += fabs(tget(&w, wi) * tget(&go, oi));
                  rw[wi] += tget(&go, oi) * tget(&x, xi);
                  mw[wi] += fabs(tget(&go, oi) * tget(&x, xi));
                }
    for (int64_t i = 0; i < o.n; ++i) ro[i] = round_to(dt, ro[i]);
    for (int64_t i = 0; i < gx.n; ++i) rx[i] = round_to(dt, rx[i]);
    for (int64_t i = 0; i < gw.n; ++i) rw[i] = round_to(dt, rw[i]);
    char w2[240];
    snprintf(w2, sizeof w2, "%s forward", what);
    compare_mag(w2, &o, ro, mo, accum_tol(dt));
    snprintf(w2, sizeof w2, "%s backward_input", what);
    compare_mag(w2, &gx, rx, mx, accum_tol(dt));
    snprintf(w2, sizeof w2, "%s backward_weight", what);
    compare_mag(w2, &gw, rw, mw, accum_tol(dt));
    free(ro); free(mo); free(rx); free(mx); free(rw); free(mw);
  }
  tensor_free(&x); tensor_free(&w); tensor_free(&o);
  tensor_free(&go); tensor_free(&gx); tensor_free(&gw);
}

static void test_conv(void) {
  const conv_case_t cases[] = {
      {2, 3, 9, 8, 4, 3, 3, 1, 1, 1, 1, 1, 1, 1},
      {1, 4, 10, 11, 6, 3, 2, 2, 1, 1, 0, 1, 2, 2},
      {3, 6, 7, 7, 6, 3, 3, 1, 1, 1, 1, 1, 1, 6},   /* depthwise */
      {2, 4, 6, 5, 8, 1, 1, 1, 1, 0, 0, 1, 1, 1},   /* pointwise */
      {1, 1, 12, 12, 5, 5, 5, 2, 2, 2, 2, 1, 1, 1}, /* single input channel */
      {4, 8, 5, 5, 4, 3, 3, 1, 1, 0, 0, 1, 1, 2},   /* image-parallel */
      {2, 6, 9, 9, 12, 3, 3, 2, 2, 1, 1, 2, 2, 3},
      {2, 3, 8, 8, 6, 3, 3, 2, 1, 1, 1, 1, 1, 3},   /* depthwise multiplier 2 */
      {2, 16, 20, 20, 32, 3, 3, 1, 1, 1, 1, 1, 1, 1},
      {5, 2, 4, 4, 2, 2, 2, 1, 1, 0, 0, 1, 1, 1},   /* 5 images: 4 partials */
      {2, 4, 6, 6, 4, 1, 1, 2, 2, 0, 0, 1, 1, 2},   /* strided 1x1 */
      {2, 4, 9, 7, 8, 3, 2, 1, 1, 2, 1, 2, 1, 4},   /* depthwise x2, dilated, padded */
      {1, 3, 5, 6, 3, 5, 5, 1, 1, 0, 3, 1, 1, 3},   /* depthwise, kernel taller than padded input rows */
      {2, 4, 9, 9, 6, 3, 3, 1, 1, 2, 1, 2, 2, 2},   /* stride 1, dilated, grouped (padded planes) */
      {3, 5, 7, 4, 7, 2, 3, 1, 1, 0, 2, 1, 1, 1},   /* stride 1, asymmetric kernel and padding */
  };
  for (int ci = 0; ci < COUNT_OF(cases); ++ci) {
    run_conv(TT_F32, &cases[ci]);
    if (ci % 3 == 0 || ci == 2) run_conv(TT_F64, &cases[ci]);
    if (ci % 3 == 1 || ci == 2) run_conv(TT_F16, &cases[ci]);
    if (ci % 3 == 2) run_conv(TT_BF16, &cases[ci]);
  }
  /* Errors. */
  tensor_t x = tensor_new(TT_F32, 4, (int64_t[]){1, 4, 5, 5});
  tensor_t w = tensor_new(TT_F32, 4, (int64_t[]){2, 4, 3, 3});
  tensor_t o = tensor_new(TT_F32, 4, (int64_t[]){1, 2, 3, 3});
  tensor_t bad = tensor_new(TT_F32, 4, (int64_t[]){1, 2, 4, 3});
  tensor_t xi = tensor_new(TT_I32, 4, (int64_t[]){1, 4, 5, 5});
  tt_conv2d_params_t p = {{1, 1}, {0, 0}, {1, 1}, 1};
  CHECK_OK(tt_kernel_conv2d(&x.v, &w.v, &p, &o.v), "conv ok");
  CHECK_CODE(tt_kernel_conv2d(&x.v, &w.v, &p, &bad.v), TT_INVALID_ARGUMENT, "conv bad out");
  CHECK_CODE(tt_kernel_conv2d(&xi.v, &w.v, &p, &o.v), TT_TYPE_ERROR, "conv int");
  p.groups = 3;
  CHECK_CODE(tt_kernel_conv2d(&x.v, &w.v, &p, &o.v), TT_INVALID_ARGUMENT, "conv groups");
  p.groups = 1;
  p.stride[0] = 0;
  CHECK_CODE(tt_kernel_conv2d(&x.v, &w.v, &p, &o.v), TT_INVALID_ARGUMENT, "conv stride 0");
  tensor_free(&x); tensor_free(&w); tensor_free(&o); tensor_free(&bad); tensor_free(&xi);
}

int main(void) {
  test_dot();
  test_conv();
  return test_summary();
}
