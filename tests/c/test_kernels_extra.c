/* Tests of the lowering table's extra kernels (sort.c, reduce_extra.c):
 * stable argsort with NaN ordering, searchsorted bounds, scatter_reduce
 * modes, cumulative max/min/logcumsumexp. Prints "N passed, M failed". */
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "kernels/kernel_util.h"
#include "test_harness.h"
#include "torchtpu/kernels.h"

static tt_view_t view(void *data, tt_dtype_t dt, int rank, const int64_t *dims) {
  tt_view_t v;
  memset(&v, 0, sizeof v);
  v.data = data;
  v.dtype = dt;
  v.shape.rank = rank;
  for (int i = 0; i < rank; ++i) v.shape.dims[i] = dims[i];
  return v;
}

static void test_argsort(void) {
  float x[6] = {3.f, NAN, 1.f, 3.f, -0.f, 0.f};
  int64_t idx[6];
  int64_t d[1] = {6};
  tt_view_t vx = view(x, TT_F32, 1, d), vo = view(idx, TT_I64, 1, d);
  CHECK_OK(tt_kernel_argsort(&vx, 0, 0, &vo));
  /* ascending, stable, NaN last, -0 == 0 */
  int64_t want[6] = {4, 5, 2, 0, 3, 1};
  CHECK(memcmp(idx, want, sizeof want) == 0);
  CHECK_OK(tt_kernel_argsort(&vx, 0, 1, &vo));
  int64_t want_desc[6] = {1, 0, 3, 2, 4, 5};
  CHECK(memcmp(idx, want_desc, sizeof want_desc) == 0);

  /* along dim 0 of a [3, 2] int64 tensor, with keys past 2**53 */
  int64_t y[6] = {(1LL << 60) + 1, 5, 1LL << 60, 4, -1, 6};
  int64_t d2[2] = {3, 2};
  int64_t o2[6];
  tt_view_t vy = view(y, TT_I64, 2, d2), vo2 = view(o2, TT_I64, 2, d2);
  CHECK_OK(tt_kernel_argsort(&vy, 0, 0, &vo2));
  int64_t want2[6] = {2, 1, 1, 0, 0, 2};
  CHECK(memcmp(o2, want2, sizeof want2) == 0);

  tt_status_t st = tt_kernel_argsort(&vy, 2, 0, &vo2);
  CHECK(st != NULL && tt_status_code(st) == TT_INVALID_ARGUMENT);
  tt_status_free(st);
}

static void test_searchsorted(void) {
  float s[5] = {1.f, 2.f, 2.f, 3.f, 5.f};
  float v[5] = {0.f, 2.f, 2.5f, 6.f, NAN};
  int64_t out[5];
  int64_t ds[1] = {5};
  tt_view_t vs = view(s, TT_F32, 1, ds), vv = view(v, TT_F32, 1, ds), vo = view(out, TT_I64, 1, ds);
  CHECK_OK(tt_kernel_searchsorted(&vs, &vv, 0, &vo));
  int64_t left[5] = {0, 1, 3, 5, 5};
  CHECK(memcmp(out, left, sizeof left) == 0);
  CHECK_OK(tt_kernel_searchsorted(&vs, &vv, 1, &vo));
  int64_t right[5] = {0, 3, 3, 5, 5};
  CHECK(memcmp(out, right, sizeof right) == 0);

  /* one sorted row per values row */
  int64_t s2[4] = {1, 3, 10, 20};
  int64_t v2[4] = {2, 3, 5, 25};
  int32_t o2[4];
  int64_t d2[2] = {2, 2};
  tt_view_t vs2 = view(s2, TT_I64, 2, d2), vv2 = view(v2, TT_I64, 2, d2);
  tt_view_t vo2 = view(o2, TT_I32, 2, d2);
  CHECK_OK(tt_kernel_searchsorted(&vs2, &vv2, 0, &vo2));
  CHECK(o2[0] == 1 && o2[1] == 1 && o2[2] == 0 && o2[3] == 2);
}

static void test_scatter_reduce(void) {
  float base[3] = {1.f, 2.f, 3.f};
  int64_t idx[4] = {0, 0, 2, 2};
  float src[4] = {4.f, NAN, 5.f, -1.f};
  float out[3];
  int64_t db[1] = {3}, di[1] = {4};
  tt_view_t vb = view(base, TT_F32, 1, db), vi = view(idx, TT_I64, 1, di);
  tt_view_t vsrc = view(src, TT_F32, 1, di), vo = view(out, TT_F32, 1, db);
  CHECK_OK(tt_kernel_scatter_reduce(&vb, 0, &vi, &vsrc, TT_SCATTER_REDUCE_AMAX, 1, &vo));
  CHECK(isnan(out[0]) && out[1] == 2.f && out[2] == 5.f);
  CHECK_OK(tt_kernel_scatter_reduce(&vb, 0, &vi, &vsrc, TT_SCATTER_REDUCE_MEAN, 0, &vo));
  CHECK(isnan(out[0]) && out[1] == 2.f && out[2] == 2.f);
  CHECK_OK(tt_kernel_scatter_reduce(&vb, 0, &vi, &vsrc, TT_SCATTER_REDUCE_PROD, 1, &vo));
  CHECK(isnan(out[0]) && out[2] == -15.f);

  int64_t ib[2] = {7, 0};
  int64_t ii[3] = {0, 0, 1};
  int64_t is[3] = {2, 3, -5};
  int64_t io[2];
  int64_t d2[1] = {2}, d3[1] = {3};
  tt_view_t vib = view(ib, TT_I64, 1, d2), vii = view(ii, TT_I64, 1, d3);
  tt_view_t vis = view(is, TT_I64, 1, d3), vio = view(io, TT_I64, 1, d2);
  CHECK_OK(tt_kernel_scatter_reduce(&vib, 0, &vii, &vis, TT_SCATTER_REDUCE_MEAN, 1, &vio));
  CHECK(io[0] == 4 && io[1] == -3); /* (7+2+3)/3 = 4; floor((0-5)/2) = -3 */

  int64_t bad[3] = {0, 3, 1};
  tt_view_t vbad = view(bad, TT_I64, 1, d3);
  tt_status_t st = tt_kernel_scatter_reduce(&vib, 0, &vbad, &vis, TT_SCATTER_REDUCE_SUM, 1, &vio);
  CHECK(st != NULL && tt_status_code(st) == TT_OUT_OF_RANGE);
  tt_status_free(st);
}

static void test_cumulative(void) {
  float x[5] = {1.f, 3.f, 3.f, NAN, 2.f};
  float v[5];
  int64_t i[5];
  int64_t d[1] = {5};
  tt_view_t vx = view(x, TT_F32, 1, d), vv = view(v, TT_F32, 1, d), vi = view(i, TT_I64, 1, d);
  CHECK_OK(tt_kernel_cumulative(TT_CUM_MAX, &vx, 0, &vv));
  CHECK_OK(tt_kernel_cumulative(TT_CUM_MAX_INDEX, &vx, 0, &vi));
  CHECK(v[0] == 1.f && v[1] == 3.f && v[2] == 3.f && isnan(v[3]) && isnan(v[4]));
  CHECK(i[0] == 0 && i[1] == 1 && i[2] == 2 && i[3] == 3 && i[4] == 3);
  CHECK_OK(tt_kernel_cumulative(TT_CUM_MIN_INDEX, &vx, 0, &vi));
  CHECK(i[0] == 0 && i[1] == 0 && i[2] == 0 && i[3] == 3);

  double y[3] = {0.0, log(2.0), -INFINITY};
  double o[3];
  int64_t d3[1] = {3};
  tt_view_t vy = view(y, TT_F64, 1, d3), vo = view(o, TT_F64, 1, d3);
  CHECK_OK(tt_kernel_cumulative(TT_CUM_LOGSUMEXP, &vy, 0, &vo));
  CHECK(fabs(o[0]) < 1e-12 && fabs(o[1] - log(3.0)) < 1e-12 && fabs(o[2] - log(3.0)) < 1e-12);
}

/* Linear algebra: LU pivots and reconstruction, triangular solve, QR,
 * symmetric eigendecomposition and SVD on small matrices (double). */
static void test_linalg(void) {
  double a[9] = {1, 2, 3, 4, 5, 6, 7, 8, 10};
  int64_t d[3] = {1, 3, 3};
  tt_view_t va = view(a, TT_F64, 3, d);
  const tt_view_t *in[1] = {&va};
  int64_t flags[3] = {0, 0, 0};
  /* LU: [LU 9][piv 3][perm 3][info 1] */
  double lu[16];
  int64_t dl[2] = {1, 16};
  tt_view_t vlu = view(lu, TT_F64, 2, dl);
  CHECK_OK(tt_kernel_linalg(TT_LINALG_LU, in, 1, flags, &vlu));
  CHECK(lu[9] == 3.0 && lu[15] == 0.0); /* first pivot: row 3 (largest |7|) */
  /* A[perm] == L U */
  double maxerr = 0;
  for (int i = 0; i < 3; ++i)
    for (int j = 0; j < 3; ++j) {
      double s = 0;
      for (int k = 0; k < 3; ++k) {
        double l = k < i ? lu[i * 3 + k] : (k == i ? 1.0 : 0.0);
        double u = k <= j ? lu[k * 3 + j] : 0.0;
        s += l * u;
      }
      int r = (int)lu[12 + i];
      maxerr = fmax(maxerr, fabs(s - a[r * 3 + j]));
    }
  CHECK(maxerr < 1e-12);

  /* triangular solve: upper [[2,1],[0,4]] x = [3, 8] -> [0.5, 2] */
  double t[4] = {2, 1, 0, 4}, b[2] = {3, 8}, x[2];
  int64_t dt2[3] = {1, 2, 2}, db[3] = {1, 2, 1}, dx[2] = {1, 2};
  tt_view_t vt = view(t, TT_F64, 3, dt2), vb = view(b, TT_F64, 3, db), vx = view(x, TT_F64, 2, dx);
  const tt_view_t *in2[2] = {&vt, &vb};
  int64_t up[3] = {1, 0, 0};
  CHECK_OK(tt_kernel_linalg(TT_LINALG_TRSM, in2, 2, up, &vx));
  CHECK(fabs(x[0] - 0.5) < 1e-12 && fabs(x[1] - 2.0) < 1e-12);

  /* eigh of [[2,1],[1,2]]: eigenvalues 1, 3 */
  double e[4] = {2, 1, 1, 2}, w[6];
  int64_t dw[2] = {1, 6};
  tt_view_t ve = view(e, TT_F64, 3, dt2), vw = view(w, TT_F64, 2, dw);
  const tt_view_t *in3[1] = {&ve};
  CHECK_OK(tt_kernel_linalg(TT_LINALG_EIGH, in3, 1, flags, &vw));
  CHECK(fabs(w[0] - 1.0) < 1e-12 && fabs(w[1] - 3.0) < 1e-12);

  /* SVD of a 3x3: U S Vh reconstructs A; S descending */
  double usv[9 + 3 + 9];
  int64_t ds[2] = {1, 21};
  tt_view_t vs = view(usv, TT_F64, 2, ds);
  CHECK_OK(tt_kernel_linalg(TT_LINALG_SVD, in, 1, flags, &vs));
  double *U = usv, *S = usv + 9, *Vh = usv + 12;
  CHECK(S[0] >= S[1] && S[1] >= S[2] && S[2] > 0);
  maxerr = 0;
  for (int i = 0; i < 3; ++i)
    for (int j = 0; j < 3; ++j) {
      double s = 0;
      for (int k = 0; k < 3; ++k) s += U[i * 3 + k] * S[k] * Vh[k * 3 + j];
      maxerr = fmax(maxerr, fabs(s - a[i * 3 + j]));
    }
  CHECK(maxerr < 1e-10);

  /* QR: R's first diagonal element is -||a[:,0]|| (LAPACK's sign) */
  double qr[9 + 3];
  int64_t dq[2] = {1, 12};
  tt_view_t vq = view(qr, TT_F64, 2, dq);
  CHECK_OK(tt_kernel_linalg(TT_LINALG_GEQRF, in, 1, flags, &vq));
  CHECK(fabs(qr[0] + sqrt(1.0 + 16.0 + 49.0)) < 1e-12);

  /* Cholesky of a non-positive-definite matrix reports info = 2 */
  double c[4] = {1, 2, 2, 1}, co[5];
  int64_t dc[2] = {1, 5};
  tt_view_t vc = view(c, TT_F64, 3, dt2), vco = view(co, TT_F64, 2, dc);
  const tt_view_t *in4[1] = {&vc};
  CHECK_OK(tt_kernel_linalg(TT_LINALG_CHOLESKY, in4, 1, flags, &vco));
  CHECK(co[4] == 2.0);
}

/* The kernels' scratch allocator: aligned, writable, and a freed large
 * block is handed out again for a request of the same size class. */
static void test_scratch_alloc(void) {
  char *small = tt_scratch_alloc(100), *zero = tt_scratch_alloc(0);
  CHECK(small && zero && ((uintptr_t)small % 64) == 0 && ((uintptr_t)zero % 64) == 0);
  memset(small, 1, 100);
  char *big = tt_scratch_alloc(1 << 20);
  CHECK(big && ((uintptr_t)big % 64) == 0);
  memset(big, 2, 1 << 20);
  tt_scratch_free(big);
  char *again = tt_scratch_alloc((1 << 20) - 1000); /* same class */
  CHECK(again == big);
  memset(again, 3, (1 << 20) - 1000);
  char *other = tt_scratch_alloc(3 << 20);
  CHECK(other && other != again);
  tt_scratch_free(again);
  tt_scratch_free(other);
  tt_scratch_free(small);
  tt_scratch_free(zero);
  tt_scratch_free(NULL);
}

int main(void) {
  test_scratch_alloc();
  test_linalg();
  test_argsort();
  test_searchsorted();
  test_scatter_reduce();
  test_cumulative();
  return test_summary();
}
