/* Tests for data movement (transpose, slice, slice_scatter, concat, pad,
 * flip), indexing (index_select, index_add, gather, scatter) and the
 * counter-based RNG. */
#include "test_harness.h"

static void unflatten(const tt_shape_t *s, int64_t i, int64_t *idx) {
  for (int d = s->rank - 1; d >= 0; --d) {
    idx[d] = i % s->dims[d];
    i /= s->dims[d];
  }
}

static int64_t flatten(const tt_shape_t *s, const int64_t *idx) {
  int64_t f = 0;
  for (int d = 0; d < s->rank; ++d) f = f * s->dims[d] + idx[d];
  return f;
}

/* ---- movement ---------------------------------------------------------- */

static void run_transpose(tt_dtype_t dt, int rank, const int64_t *dims, const int32_t *perm) {
  int64_t od[TT_MAX_RANK];
  for (int d = 0; d < rank; ++d) od[d] = dims[perm[d]];
  tensor_t x = tensor_new(dt, rank, dims), o = tensor_new(dt, rank, od);
  tensor_fill_random(&x, -100, 100);
  if (!CHECK_OK(tt_kernel_transpose(&x.v, perm, &o.v), "transpose")) goto done;
  {
    double *ref = malloc((size_t)(o.n + 1) * sizeof(double));
    int64_t oi[TT_MAX_RANK], xi[TT_MAX_RANK];
    for (int64_t i = 0; i < o.n; ++i) {
      unflatten(&o.v.shape, i, oi);
      for (int d = 0; d < rank; ++d) xi[perm[d]] = oi[d];
      ref[i] = tget(&x, flatten(&x.v.shape, xi));
    }
    COMPARE("transpose", &o, ref, 0, 0);
    free(ref);
  }
done:
  tensor_free(&x);
  tensor_free(&o);
}

static void test_movement(void) {
  const int32_t p2[2] = {1, 0}, p3[3] = {2, 0, 1}, p3b[3] = {0, 2, 1};
  const int32_t p4[4] = {0, 2, 3, 1}, p4b[4] = {3, 2, 1, 0};
  const int32_t p3c[3] = {1, 0, 2}, p4c[4] = {2, 0, 1, 3}, p4d[4] = {2, 1, 0, 3};
  for (int di = 0; di < COUNT_OF(kAllDtypes); ++di) {
    tt_dtype_t dt = kAllDtypes[di];
    run_transpose(dt, 2, (int64_t[]){37, 53}, p2);
    run_transpose(dt, 3, (int64_t[]){4, 5, 6}, p3);
    run_transpose(dt, 4, (int64_t[]){2, 3, 4, 5}, p4);
    /* Inner dim kept: whole rows move (short rows copied inline when their
     * bytes are a multiple of 8, by memcpy otherwise). */
    run_transpose(dt, 4, (int64_t[]){5, 7, 3, 6}, p4c);
  }
  /* Rows of a head's 32 floats over several outer dims, split over the
   * threads mid-dim (the row offsets are stepped, not recomputed). */
  run_transpose(TT_F32, 3, (int64_t[]){64, 128, 32}, p3c);
  run_transpose(TT_F32, 4, (int64_t[]){6, 40, 50, 16}, p4d);
  run_transpose(TT_BF16, 4, (int64_t[]){6, 40, 50, 12}, p4d);
  run_transpose(TT_F32, 2, (int64_t[]){513, 1030}, p2); /* tiled, parallel */
  run_transpose(TT_F32, 3, (int64_t[]){3, 200, 300}, p3b);
  run_transpose(TT_F16, 4, (int64_t[]){2, 30, 1, 17}, p4b);
  run_transpose(TT_F32, 0, NULL, NULL);

  /* slice + slice_scatter */
  for (int di = 0; di < COUNT_OF(kAllDtypes); ++di) {
    tt_dtype_t dt = kAllDtypes[di];
    int64_t xd[3] = {5, 9, 8}, sd[3] = {2, 3, 8};
    int64_t start[3] = {1, 2, 0}, step[3] = {3, 2, 1};
    tensor_t x = tensor_new(dt, 3, xd), s = tensor_new(dt, 3, sd);
    tensor_t src = tensor_new(dt, 3, sd), o = tensor_new(dt, 3, xd);
    tensor_fill_random(&x, 0, 100);
    tensor_fill_random(&src, 0, 100);
    CHECK_OK(tt_kernel_slice(&x.v, start, step, &s.v), "slice");
    double ref[400];
    int64_t si[3], xi[3];
    for (int64_t i = 0; i < s.n; ++i) {
      unflatten(&s.v.shape, i, si);
      for (int d = 0; d < 3; ++d) xi[d] = start[d] + si[d] * step[d];
      ref[i] = tget(&x, flatten(&x.v.shape, xi));
    }
    COMPARE("slice", &s, ref, 0, 0);
    CHECK_OK(tt_kernel_slice_scatter(&x.v, &src.v, start, step, &o.v), "slice_scatter");
    for (int64_t i = 0; i < x.n; ++i) ref[i] = tget(&x, i);
    for (int64_t i = 0; i < src.n; ++i) {
      unflatten(&src.v.shape, i, si);
      for (int d = 0; d < 3; ++d) xi[d] = start[d] + si[d] * step[d];
      ref[flatten(&x.v.shape, xi)] = tget(&src, i);
    }
    COMPARE("slice_scatter", &o, ref, 0, 0);
    int64_t bad_start[3] = {3, 2, 0};
    CHECK_CODE(tt_kernel_slice(&x.v, bad_start, step, &s.v), TT_OUT_OF_RANGE, "slice range");
    tensor_free(&x); tensor_free(&s); tensor_free(&src); tensor_free(&o);
  }

  /* concat */
  for (int dim = 0; dim < 3; ++dim) {
    int64_t a[3] = {2, 3, 4}, b[3] = {2, 3, 4}, c[3] = {2, 3, 4}, od[3] = {2, 3, 4};
    a[dim] = 1; b[dim] = 3; c[dim] = 2; od[dim] = 6;
    tensor_t ta = tensor_new(TT_I16, 3, a), tb = tensor_new(TT_I16, 3, b);
    tensor_t tc = tensor_new(TT_I16, 3, c), o = tensor_new(TT_I16, 3, od);
    tensor_fill_random(&ta, -100, 100);
    tensor_fill_random(&tb, -100, 100);
    tensor_fill_random(&tc, -100, 100);
    const tt_view_t *ins[3] = {&ta.v, &tb.v, &tc.v};
    CHECK_OK(tt_kernel_concat(ins, 3, dim, &o.v), "concat");
    double ref[200];
    int64_t oi[3];
    for (int64_t i = 0; i < o.n; ++i) {
      unflatten(&o.v.shape, i, oi);
      int64_t k = oi[dim];
      const tensor_t *src = k < 1 ? &ta : (k < 4 ? &tb : &tc);
      oi[dim] = k < 1 ? k : (k < 4 ? k - 1 : k - 4);
      ref[i] = tget(src, flatten(&src->v.shape, oi));
    }
    COMPARE("concat", &o, ref, 0, 0);
    CHECK_CODE(tt_kernel_concat(ins, 2, dim, &o.v), TT_INVALID_ARGUMENT, "concat total");
    tensor_free(&ta); tensor_free(&tb); tensor_free(&tc); tensor_free(&o);
  }

  /* pad with negative (cropping) amounts */
  {
    int64_t xd[3] = {3, 4, 5}, lo[3] = {1, -1, 2}, hi[3] = {0, 2, -3};
    int64_t od[3] = {4, 5, 4};
    for (int di = 0; di < 3; ++di) {
      tt_dtype_t dt = di == 0 ? TT_F32 : (di == 1 ? TT_BF16 : TT_I64);
      tensor_t x = tensor_new(dt, 3, xd), o = tensor_new(dt, 3, od);
      tensor_fill_random(&x, -9, 9);
      CHECK_OK(tt_kernel_pad(&x.v, lo, hi, 7.5, &o.v), "pad");
      double ref[100];
      int64_t oi[3], xi[3];
      for (int64_t i = 0; i < o.n; ++i) {
        unflatten(&o.v.shape, i, oi);
        int in = 1;
        for (int d = 0; d < 3; ++d) {
          xi[d] = oi[d] - lo[d];
          if (xi[d] < 0 || xi[d] >= xd[d]) in = 0;
        }
        ref[i] = in ? tget(&x, flatten(&x.v.shape, xi)) : round_to(dt, 7.5);
      }
      COMPARE("pad", &o, ref, 0, 0);
      tensor_free(&x);
      tensor_free(&o);
    }
    tensor_t x = tensor_new(TT_F32, 3, xd), o = tensor_new(TT_F32, 3, xd);
    CHECK_CODE(tt_kernel_pad(&x.v, lo, hi, 0, &o.v), TT_INVALID_ARGUMENT, "pad shape");
    tensor_free(&x);
    tensor_free(&o);
  }

  /* flip */
  for (uint32_t mask = 0; mask < 8; ++mask) {
    int64_t xd[3] = {3, 4, 5};
    tensor_t x = tensor_new(TT_F64, 3, xd), o = tensor_new(TT_F64, 3, xd);
    tensor_fill_random(&x, -9, 9);
    CHECK_OK(tt_kernel_flip(&x.v, mask, &o.v), "flip");
    double ref[60];
    int64_t oi[3];
    for (int64_t i = 0; i < o.n; ++i) {
      unflatten(&o.v.shape, i, oi);
      for (int d = 0; d < 3; ++d) {
        if (mask & (1u << d)) oi[d] = xd[d] - 1 - oi[d];
      }
      ref[i] = tget(&x, flatten(&x.v.shape, oi));
    }
    COMPARE("flip", &o, ref, 0, 0);
    tensor_free(&x);
    tensor_free(&o);
  }
  tensor_t x = tensor_new(TT_F32, 2, (int64_t[]){2, 3}), o = tensor_new(TT_F32, 2, (int64_t[]){3, 2});
  const int32_t badp[2] = {0, 0};
  CHECK_CODE(tt_kernel_transpose(&x.v, badp, &o.v), TT_INVALID_ARGUMENT, "bad perm");
  CHECK_CODE(tt_kernel_flip(&x.v, 4, &x.v), TT_INVALID_ARGUMENT, "flip mask");
  tensor_free(&x);
  tensor_free(&o);
}

/* ---- indexing --------------------------------------------------------- */

static void test_index(void) {
  for (int di = 0; di < COUNT_OF(kAllDtypes); ++di) {
    tt_dtype_t dt = kAllDtypes[di];
    for (int dim = 0; dim < 3; ++dim) {
      int64_t xd[3] = {4, 5, 6};
      int64_t L = 7;
      int64_t od[3] = {4, 5, 6};
      od[dim] = L;
      tensor_t x = tensor_new(dt, 3, xd), o = tensor_new(dt, 3, od);
      tensor_t idx = tensor_new(dim == 1 ? TT_I32 : TT_I64, 1, (int64_t[]){L});
      tensor_t src = tensor_new(dt, 3, od), oa = tensor_new(dt, 3, xd);
      tensor_fill_random(&x, 0, 50);
      tensor_fill_random(&src, 0, 20);
      for (int64_t l = 0; l < L; ++l) tset(&idx, l, (double)rnd_int(-xd[dim], xd[dim] - 1));
      tset(&idx, 1, tget(&idx, 0)); /* duplicate for index_add */
      CHECK_OK(tt_kernel_index_select(&x.v, dim, &idx.v, &o.v), "index_select");
      double ref[300];
      int64_t oi[3];
      for (int64_t i = 0; i < o.n; ++i) {
        unflatten(&o.v.shape, i, oi);
        int64_t k = tgeti(&idx, oi[dim]);
        oi[dim] = k < 0 ? k + xd[dim] : k;
        ref[i] = tget(&x, flatten(&x.v.shape, oi));
      }
      COMPARE("index_select", &o, ref, 0, 0);
      CHECK_OK(tt_kernel_index_add(&x.v, dim, &idx.v, &src.v, &oa.v), "index_add");
      for (int64_t i = 0; i < x.n; ++i) ref[i] = tget(&x, i);
      for (int64_t i = 0; i < src.n; ++i) {
        unflatten(&src.v.shape, i, oi);
        int64_t k = tgeti(&idx, oi[dim]);
        oi[dim] = k < 0 ? k + xd[dim] : k;
        int64_t f = flatten(&x.v.shape, oi);
        ref[f] = round_to(dt, ref[f] + tget(&src, i));
      }
      COMPARE("index_add", &oa, ref, 0, dtype_rtol(dt));
      tset(&idx, 3, (double)xd[dim]);
      CHECK_CODE(tt_kernel_index_select(&x.v, dim, &idx.v, &o.v), TT_OUT_OF_RANGE,
                 "index_select out of range");
      tset(&idx, 3, (double)(-xd[dim] - 1));
      CHECK_CODE(tt_kernel_index_add(&x.v, dim, &idx.v, &src.v, &oa.v), TT_OUT_OF_RANGE,
                 "index_add out of range");
      tensor_free(&x); tensor_free(&o); tensor_free(&idx); tensor_free(&src); tensor_free(&oa);
    }
  }

  /* gather / scatter / scatter_add */
  for (int di = 0; di < COUNT_OF(kAllDtypes); ++di) {
    tt_dtype_t dt = kAllDtypes[di];
    for (int dim = 0; dim < 3; ++dim) {
      int64_t xd[3] = {4, 5, 6}, id[3] = {3, 4, 5}, sd[3] = {4, 5, 6};
      id[dim] = 8;
      sd[dim] = 9;
      tensor_t x = tensor_new(dt, 3, xd), idx = tensor_new(TT_I64, 3, id);
      tensor_t o = tensor_new(dt, 3, id), src = tensor_new(dt, 3, sd);
      tensor_t os = tensor_new(dt, 3, xd);
      tensor_fill_random(&x, 0, 50);
      tensor_fill_random(&src, 0, 20);
      for (int64_t i = 0; i < idx.n; ++i) tset(&idx, i, (double)rnd_int(0, xd[dim] - 1));
      CHECK_OK(tt_kernel_gather(&x.v, dim, &idx.v, &o.v), "gather");
      double ref[400];
      int64_t ii[3];
      for (int64_t i = 0; i < idx.n; ++i) {
        unflatten(&idx.v.shape, i, ii);
        ii[dim] = tgeti(&idx, i);
        ref[i] = tget(&x, flatten(&x.v.shape, ii));
      }
      COMPARE("gather", &o, ref, 0, 0);
      for (int reduce = 0; reduce < 2; ++reduce) {
        CHECK_OK(tt_kernel_scatter(&x.v, dim, &idx.v, &src.v, reduce, &os.v), "scatter");
        for (int64_t i = 0; i < x.n; ++i) ref[i] = tget(&x, i);
        for (int64_t i = 0; i < idx.n; ++i) {
          unflatten(&idx.v.shape, i, ii);
          double sv = tget(&src, flatten(&src.v.shape, ii));
          ii[dim] = tgeti(&idx, i);
          int64_t f = flatten(&x.v.shape, ii);
          ref[f] = reduce ? round_to(dt, ref[f] + sv) : sv;
        }
        COMPARE(reduce ? "scatter_add" : "scatter", &os, ref, 0, dtype_rtol(dt));
      }
      tset(&idx, 2, -1.0);
      CHECK_CODE(tt_kernel_gather(&x.v, dim, &idx.v, &o.v), TT_OUT_OF_RANGE, "gather negative");
      CHECK_CODE(tt_kernel_scatter(&x.v, dim, &idx.v, &src.v, 1, &os.v), TT_OUT_OF_RANGE,
                 "scatter negative");
      tensor_free(&x); tensor_free(&idx); tensor_free(&o); tensor_free(&src); tensor_free(&os);
    }
  }
  tensor_t x = tensor_new(TT_F32, 2, (int64_t[]){3, 4});
  tensor_t idx = tensor_new(TT_I64, 2, (int64_t[]){4, 4});
  tensor_t o = tensor_new(TT_F32, 2, (int64_t[]){4, 4});
  memset(idx.v.data, 0, (size_t)idx.n * 8);
  CHECK_CODE(tt_kernel_gather(&x.v, 1, &idx.v, &o.v), TT_INVALID_ARGUMENT,
             "gather index larger than input outside dim");
  tensor_t fidx = tensor_new(TT_F32, 1, (int64_t[]){2});
  tensor_t o2 = tensor_new(TT_F32, 2, (int64_t[]){2, 4});
  CHECK_CODE(tt_kernel_index_select(&x.v, 0, &fidx.v, &o2.v), TT_TYPE_ERROR,
             "float index");
  tensor_free(&x); tensor_free(&idx); tensor_free(&o); tensor_free(&fidx); tensor_free(&o2);
}

/* ---- rng ------------------------------------------------------------------ */

static void test_rng(void) {
  /* Known-answer vectors from Random123 (kat_vectors, philox4x32_10). */
  const struct { uint32_t ctr[4], key[2], out[4]; } kat[] = {
      {{0, 0, 0, 0}, {0, 0}, {0x6627e8d5, 0xe169c58d, 0xbc57ac4c, 0x9b00dbd8}},
      {{0xffffffff, 0xffffffff, 0xffffffff, 0xffffffff}, {0xffffffff, 0xffffffff},
       {0x408f276d, 0x41c83b0e, 0xa20bc7c6, 0x6d5451fd}},
      {{0x243f6a88, 0x85a308d3, 0x13198a2e, 0x03707344}, {0xa4093822, 0x299f31d0},
       {0xd16cfe09, 0x94fdcceb, 0x5001e420, 0x24126ea1}},
  };
  for (int k = 0; k < COUNT_OF(kat); ++k) {
    uint32_t out[4];
    tt_philox4x32_10_for_test(kat[k].ctr, kat[k].key, out);
    CHECK(memcmp(out, kat[k].out, sizeof out) == 0,
          "philox KAT %d: %08x %08x %08x %08x", k, out[0], out[1], out[2], out[3]);
  }

  for (int op = 0; op < 3; ++op) {
    for (int di = 0; di < 4; ++di) {
      tt_dtype_t dt = kFloatDtypes[di];
      int64_t n = 200000;
      tensor_t x = tensor_new(dt, 1, (int64_t[]){n}), y = tensor_like(&x, dt);
      tensor_t z = tensor_like(&x, dt), s = tensor_new(dt, 1, (int64_t[]){13});
      double a = op == TT_RNG_BERNOULLI ? 0.3 : -2, b = op == TT_RNG_BERNOULLI ? 0 : 3;
      CHECK_OK(tt_kernel_rng((tt_rng_op_t)op, 42, 7, a, b, &x.v), "rng");
      CHECK_OK(tt_kernel_rng((tt_rng_op_t)op, 42, 7, a, b, &y.v), "rng again");
      CHECK_OK(tt_kernel_rng((tt_rng_op_t)op, 42, 8, a, b, &z.v), "rng other offset");
      CHECK_OK(tt_kernel_rng((tt_rng_op_t)op, 42, 7, a, b, &s.v), "rng prefix");
      size_t es = tt_dtype_size(dt);
      CHECK(memcmp(x.v.data, y.v.data, (size_t)n * es) == 0, "rng is deterministic");
      CHECK(memcmp(x.v.data, s.v.data, 13 * es) == 0, "element i depends only on i");
      int64_t same = 0;
      double sum = 0, sq = 0, mn = INFINITY, mx = -INFINITY;
      for (int64_t i = 0; i < n; ++i) {
        double v = tget(&x, i);
        same += v == tget(&z, i);
        sum += v;
        sq += v * v;
        mn = fmin(mn, v);
        mx = fmax(mx, v);
      }
      double mean = sum / (double)n, var = sq / (double)n - mean * mean;
      CHECK(same < n / 50 || op == TT_RNG_BERNOULLI, "offsets give different streams (%lld same)",
            (long long)same);
      if (op == TT_RNG_UNIFORM) {
        CHECK(fabs(mean - 0.5) < 0.02 && fabs(var - 25.0 / 12) < 0.05 && mn >= -2 && mx < 3,
              "uniform[-2,3) %s: mean %g var %g min %g max %g", tt_dtype_name(dt), mean, var, mn, mx);
      } else if (op == TT_RNG_NORMAL) {
        CHECK(fabs(mean + 2) < 0.03 && fabs(var - 9) < 0.15,
              "normal(-2, 3) %s: mean %g var %g", tt_dtype_name(dt), mean, var);
      } else {
        CHECK(fabs(mean - 0.3) < 0.01 && mn == 0 && mx == 1,
              "bernoulli(0.3) %s: mean %g", tt_dtype_name(dt), mean);
      }
      tensor_free(&x); tensor_free(&y); tensor_free(&z); tensor_free(&s);
    }
  }
  /* Normal pairs: lag-1 correlation should be ~0 (cos/sin pairs). */
  tensor_t x = tensor_new(TT_F32, 1, (int64_t[]){100000});
  CHECK_OK(tt_kernel_rng(TT_RNG_NORMAL, 1, 0, 0, 1, &x.v), "normal");
  double c = 0;
  for (int64_t i = 0; i + 1 < x.n; ++i) c += tget(&x, i) * tget(&x, i + 1);
  CHECK(fabs(c / (double)x.n) < 0.02, "normal lag-1 correlation %g", c / (double)x.n);
  tensor_t bi = tensor_new(TT_I64, 1, (int64_t[]){1000});
  CHECK_OK(tt_kernel_rng(TT_RNG_BERNOULLI, 1, 0, 0.5, 0, &bi.v), "bernoulli int64");
  int64_t ones = 0, bad = 0;
  for (int64_t i = 0; i < bi.n; ++i) {
    int64_t v = ((int64_t *)bi.v.data)[i];
    ones += v == 1;
    bad += v != 0 && v != 1;
  }
  CHECK(bad == 0 && ones > 400 && ones < 600, "bernoulli int64 0/1 (%lld ones)", (long long)ones);
  CHECK_CODE(tt_kernel_rng(TT_RNG_NORMAL, 1, 0, 0, 1, &bi.v), TT_TYPE_ERROR, "normal int");
  CHECK_CODE(tt_kernel_rng(TT_RNG_UNIFORM, 1, 0, 3, 1, &x.v), TT_INVALID_ARGUMENT, "uniform from > to");
  CHECK_CODE(tt_kernel_rng(TT_RNG_BERNOULLI, 1, 0, 1.5, 0, &x.v), TT_INVALID_ARGUMENT, "p > 1");
  CHECK_CODE(tt_kernel_rng(TT_RNG_NORMAL, 1, 0, 0, -1, &x.v), TT_INVALID_ARGUMENT, "std < 0");
  tensor_free(&x);
  tensor_free(&bi);
}

int main(void) {
  test_movement();
  test_index();
  test_rng();
  return test_summary();
}
