/* Dense linear algebra on batches of small matrices, in double precision:
 * Cholesky, LU with partial pivoting, triangular solves, Householder QR
 * (LAPACK's geqr2 / org2r / orm2r conventions, so R, tau and the
 * reflectors match LAPACK's up to rounding), the symmetric eigensolver
 * (cyclic Jacobi) and the SVD (one-sided Jacobi). Every result is written
 * into one packed output per batch element (layouts in kernels.h); the
 * lowering slices it apart. Inputs are rank 3 ([B, rows, cols]); F32,
 * F16, BF16 and F64 are accepted and widened to double.
 */
#include <float.h>
#include <stdlib.h>

#include "kernels/kernel_util.h"

#define A_(r, c) a[(r) * (size_t)n + (c)]

static void tt_la_load(const tt_view_t *v, int64_t b, int64_t count, double *dst) {
  for (int64_t i = 0; i < count; ++i) dst[i] = tt_get_f64(v->data, v->dtype, b * count + i);
}

static void tt_la_store(tt_view_t *out, int64_t b, int64_t stride, int64_t off, const double *src,
                        int64_t count) {
  for (int64_t i = 0; i < count; ++i)
    tt_set_f64(out->data, out->dtype, b * stride + off + i, src[i]);
}

/* ---- Cholesky (lower), LAPACK potrf semantics for info ----------------- */
static int64_t tt_cholesky(double *a, int64_t n) {
  for (int64_t j = 0; j < n; ++j) {
    double d = A_(j, j);
    for (int64_t k = 0; k < j; ++k) d -= A_(j, k) * A_(j, k);
    if (!(d > 0.0)) return j + 1;
    d = sqrt(d);
    A_(j, j) = d;
    for (int64_t i = j + 1; i < n; ++i) {
      double s = A_(i, j);
      for (int64_t k = 0; k < j; ++k) s -= A_(i, k) * A_(j, k);
      A_(i, j) = s / d;
    }
  }
  for (int64_t i = 0; i < n; ++i)
    for (int64_t j = i + 1; j < n; ++j) A_(i, j) = 0.0;
  return 0;
}

/* ---- LU with partial pivoting (getf2): pivots 1-based; perm = row order */
static int64_t tt_lu(double *a, int64_t m, int64_t n, double *piv, double *perm) {
  int64_t k = m < n ? m : n, info = 0;
  for (int64_t i = 0; i < m; ++i) perm[i] = (double)i;
  for (int64_t j = 0; j < k; ++j) {
    int64_t p = j;
    double best = fabs(A_(j, j));
    for (int64_t i = j + 1; i < m; ++i)
      if (fabs(A_(i, j)) > best) {
        best = fabs(A_(i, j));
        p = i;
      }
    piv[j] = (double)(p + 1);
    if (A_(p, j) != 0.0) {
      if (p != j) {
        for (int64_t c = 0; c < n; ++c) {
          double t = A_(j, c);
          A_(j, c) = A_(p, c);
          A_(p, c) = t;
        }
        double t = perm[j];
        perm[j] = perm[p];
        perm[p] = t;
      }
      double inv = 1.0 / A_(j, j);
      for (int64_t i = j + 1; i < m; ++i) A_(i, j) *= inv;
    } else if (!info) {
      info = j + 1;
    }
    for (int64_t i = j + 1; i < m; ++i) {
      double l = A_(i, j);
      if (l == 0.0) continue;
      for (int64_t c = j + 1; c < n; ++c) A_(i, c) -= l * A_(j, c);
    }
  }
  return info;
}

/* ---- triangular solve: op(A) X = B, A [n,n], B/X [n,nr] ------------------ */
static void tt_trsm(const double *a, int64_t n, double *x, int64_t nr, int upper, int unit,
                    int trans) {
  /* op(A) is lower-triangular when (lower && !trans) || (upper && trans). */
  int lower_eff = upper ? trans : !trans;
  for (int64_t c = 0; c < nr; ++c) {
    if (lower_eff) {
      for (int64_t i = 0; i < n; ++i) {
        double s = x[i * nr + c];
        for (int64_t k = 0; k < i; ++k) s -= (trans ? A_(k, i) : A_(i, k)) * x[k * nr + c];
        x[i * nr + c] = unit ? s : s / A_(i, i);
      }
    } else {
      for (int64_t i = n - 1; i >= 0; --i) {
        double s = x[i * nr + c];
        for (int64_t k = i + 1; k < n; ++k) s -= (trans ? A_(k, i) : A_(i, k)) * x[k * nr + c];
        x[i * nr + c] = unit ? s : s / A_(i, i);
      }
    }
  }
}

/* ---- Householder QR (geqr2 with dlarfg's conventions) -------------------- */
static void tt_geqrf(double *a, int64_t m, int64_t n, double *tau) {
  int64_t k = m < n ? m : n;
  for (int64_t i = 0; i < k; ++i) {
    double alpha = A_(i, i), xnorm = 0.0;
    for (int64_t r = i + 1; r < m; ++r) xnorm = hypot(xnorm, A_(r, i));
    if (xnorm == 0.0) {
      tau[i] = 0.0;
    } else {
      double beta = -copysign(hypot(alpha, xnorm), alpha);
      tau[i] = (beta - alpha) / beta;
      double scale = 1.0 / (alpha - beta);
      for (int64_t r = i + 1; r < m; ++r) A_(r, i) *= scale;
      A_(i, i) = beta;
    }
    /* Apply H(i) = I - tau v v^T (v = [1; a[i+1:, i]]) to a[i:, i+1:]. */
    if (tau[i] != 0.0) {
      for (int64_t c = i + 1; c < n; ++c) {
        double w = A_(i, c);
        for (int64_t r = i + 1; r < m; ++r) w += A_(r, i) * A_(r, c);
        w *= tau[i];
        A_(i, c) -= w;
        for (int64_t r = i + 1; r < m; ++r) A_(r, c) -= A_(r, i) * w;
      }
    }
  }
}

/* org2r: the first n columns of H(0)..H(k-1) (a [m,n] holds the reflectors
 * in its first k columns). */
static void tt_orgqr(double *a, int64_t m, int64_t n, int64_t k, const double *tau) {
  for (int64_t j = k; j < n; ++j) {
    for (int64_t r = 0; r < m; ++r) A_(r, j) = 0.0;
    if (j < m) A_(j, j) = 1.0;
  }
  for (int64_t i = k - 1; i >= 0; --i) {
    if (i < n - 1) {
      A_(i, i) = 1.0;
      for (int64_t c = i + 1; c < n; ++c) {
        double w = 0.0;
        for (int64_t r = i; r < m; ++r) w += A_(r, i) * A_(r, c);
        w *= tau[i];
        for (int64_t r = i; r < m; ++r) A_(r, c) -= A_(r, i) * w;
      }
    }
    for (int64_t r = i + 1; r < m; ++r) A_(r, i) *= -tau[i];
    A_(i, i) = 1.0 - tau[i];
    for (int64_t r = 0; r < i; ++r) A_(r, i) = 0.0;
  }
}

/* orm2r: C [cm, cn] := op(Q) C (left) or C op(Q) (right), Q = H(0)..H(k-1)
 * with reflectors in v [vm, vn] (vm = cm when left, cn when right). */
static void tt_ormqr(const double *v, int64_t vm, int64_t vn, const double *tau, int64_t k,
                     double *c, int64_t cm, int64_t cn, int left, int trans) {
  /* Order: left && !trans and right && trans apply H(k-1) first. */
  int backward = (left && !trans) || (!left && trans);
  for (int64_t t = 0; t < k; ++t) {
    int64_t i = backward ? k - 1 - t : t;
    double ti = tau[i];
    if (ti == 0.0) continue;
#define V_(r) ((r) == i ? 1.0 : v[(r) * (size_t)vn + i])
    if (left) {
      for (int64_t col = 0; col < cn; ++col) {
        double w = 0.0;
        for (int64_t r = i; r < cm; ++r) w += V_(r) * c[r * cn + col];
        w *= ti;
        for (int64_t r = i; r < cm; ++r) c[r * cn + col] -= V_(r) * w;
      }
    } else {
      for (int64_t row = 0; row < cm; ++row) {
        double w = 0.0;
        for (int64_t r = i; r < cn; ++r) w += c[row * cn + r] * V_(r);
        w *= ti;
        for (int64_t r = i; r < cn; ++r) c[row * cn + r] -= w * V_(r);
      }
    }
#undef V_
  }
  (void)vm;
}

/* ---- symmetric eigensolver (cyclic Jacobi) ------------------------------- */
static void tt_eigh(double *a, int64_t n, double *w, double *v) {
  for (int64_t i = 0; i < n; ++i)
    for (int64_t j = 0; j < n; ++j) v[i * n + j] = i == j ? 1.0 : 0.0;
  for (int sweep = 0; sweep < 100; ++sweep) {
    double off = 0.0, tot = 0.0;
    for (int64_t i = 0; i < n; ++i)
      for (int64_t j = 0; j < n; ++j) {
        tot += A_(i, j) * A_(i, j);
        if (i != j) off += A_(i, j) * A_(i, j);
      }
    if (off <= 1e-30 * tot || off == 0.0) break;
    for (int64_t p = 0; p < n - 1; ++p)
      for (int64_t q = p + 1; q < n; ++q) {
        double apq = A_(p, q);
        if (fabs(apq) < 1e-300) continue;
        double theta = (A_(q, q) - A_(p, p)) / (2.0 * apq);
        double t = copysign(1.0, theta) / (fabs(theta) + sqrt(theta * theta + 1.0));
        double c = 1.0 / sqrt(t * t + 1.0), s = t * c;
        for (int64_t k = 0; k < n; ++k) {
          double akp = A_(k, p), akq = A_(k, q);
          A_(k, p) = c * akp - s * akq;
          A_(k, q) = s * akp + c * akq;
        }
        for (int64_t k = 0; k < n; ++k) {
          double apk = A_(p, k), aqk = A_(q, k);
          A_(p, k) = c * apk - s * aqk;
          A_(q, k) = s * apk + c * aqk;
        }
        for (int64_t k = 0; k < n; ++k) {
          double vkp = v[k * n + p], vkq = v[k * n + q];
          v[k * n + p] = c * vkp - s * vkq;
          v[k * n + q] = s * vkp + c * vkq;
        }
      }
  }
  /* Sort ascending (selection sort keeps it simple; n is small). */
  for (int64_t i = 0; i < n; ++i) w[i] = A_(i, i);
  for (int64_t i = 0; i < n; ++i) {
    int64_t m = i;
    for (int64_t j = i + 1; j < n; ++j)
      if (w[j] < w[m]) m = j;
    if (m != i) {
      double t = w[i];
      w[i] = w[m];
      w[m] = t;
      for (int64_t k = 0; k < n; ++k) {
        t = v[k * n + i];
        v[k * n + i] = v[k * n + m];
        v[k * n + m] = t;
      }
    }
  }
}

/* ---- SVD (one-sided Jacobi) ---------------------------------------------- */
/* Makes columns [from, cols) of q [rows, cols] orthonormal and orthogonal
 * to columns [0, from), starting from unit vectors (Gram-Schmidt twice). */
static void tt_complete_basis(double *q, int64_t rows, int64_t cols, int64_t from) {
  int64_t e = 0;
  for (int64_t j = from; j < cols; ++j) {
    for (;; ++e) {
      for (int64_t r = 0; r < rows; ++r) q[r * cols + j] = r == (e % rows) ? 1.0 : 0.0;
      for (int pass = 0; pass < 2; ++pass)
        for (int64_t p = 0; p < j; ++p) {
          double d = 0.0;
          for (int64_t r = 0; r < rows; ++r) d += q[r * cols + p] * q[r * cols + j];
          for (int64_t r = 0; r < rows; ++r) q[r * cols + j] -= d * q[r * cols + p];
        }
      double nrm = 0.0;
      for (int64_t r = 0; r < rows; ++r) nrm += q[r * cols + j] * q[r * cols + j];
      nrm = sqrt(nrm);
      if (nrm > 1e-6 || e >= 4 * rows) {
        for (int64_t r = 0; r < rows; ++r) q[r * cols + j] /= (nrm > 0 ? nrm : 1.0);
        ++e;
        break;
      }
    }
  }
}

/* a [m, n] with m >= n: u [m, m], s [n], v [n, n] (A = U S V^T). */
static void tt_svd_tall(const double *a, int64_t m, int64_t n, double *u, double *s, double *v) {
  double *w = malloc((size_t)(m * n > 0 ? m * n : 1) * sizeof(double));
  int64_t *order = malloc((size_t)(n > 0 ? n : 1) * sizeof(int64_t));
  double *tmpv = malloc((size_t)(n * n > 0 ? n * n : 1) * sizeof(double));
  if (!w || !order || !tmpv) {
    free(w);
    free(order);
    free(tmpv);
    return;
  }
  memcpy(w, a, (size_t)(m * n) * sizeof(double));
  for (int64_t i = 0; i < n; ++i)
    for (int64_t j = 0; j < n; ++j) v[i * n + j] = i == j ? 1.0 : 0.0;
  for (int sweep = 0; sweep < 100; ++sweep) {
    int rotated = 0;
    for (int64_t p = 0; p < n - 1; ++p)
      for (int64_t q = p + 1; q < n; ++q) {
        double al = 0, be = 0, ga = 0;
        for (int64_t r = 0; r < m; ++r) {
          double x = w[r * n + p], y = w[r * n + q];
          al += x * x;
          be += y * y;
          ga += x * y;
        }
        if (ga == 0.0 || fabs(ga) <= 1e-15 * sqrt(al * be)) continue;
        rotated = 1;
        double zeta = (be - al) / (2.0 * ga);
        double t = copysign(1.0, zeta) / (fabs(zeta) + sqrt(1.0 + zeta * zeta));
        double c = 1.0 / sqrt(1.0 + t * t), sn = c * t;
        for (int64_t r = 0; r < m; ++r) {
          double x = w[r * n + p], y = w[r * n + q];
          w[r * n + p] = c * x - sn * y;
          w[r * n + q] = sn * x + c * y;
        }
        for (int64_t r = 0; r < n; ++r) {
          double x = v[r * n + p], y = v[r * n + q];
          v[r * n + p] = c * x - sn * y;
          v[r * n + q] = sn * x + c * y;
        }
      }
    if (!rotated) break;
  }
  double *sv = malloc((size_t)(n > 0 ? n : 1) * sizeof(double));
  if (!sv) {
    free(w);
    free(order);
    free(tmpv);
    return;
  }
  for (int64_t j = 0; j < n; ++j) {
    double nrm = 0;
    for (int64_t r = 0; r < m; ++r) nrm += w[r * n + j] * w[r * n + j];
    sv[j] = sqrt(nrm);
    order[j] = j;
  }
  for (int64_t i = 0; i < n; ++i) /* descending, stable */
    for (int64_t j = i + 1; j < n; ++j)
      if (sv[order[j]] > sv[order[i]]) {
        int64_t t = order[i];
        order[i] = order[j];
        order[j] = t;
      }
  double smax = n ? sv[order[0]] : 0.0;
  int64_t good = 0;
  for (int64_t j = 0; j < n; ++j) {
    int64_t o = order[j];
    s[j] = sv[o];
    for (int64_t r = 0; r < n; ++r) tmpv[r * n + j] = v[r * n + o];
    if (sv[o] > smax * 1e-13 * (double)(m > n ? m : n) && sv[o] > 0.0 && good == j) {
      for (int64_t r = 0; r < m; ++r) u[r * m + j] = w[r * n + o] / sv[o];
      ++good;
    }
  }
  memcpy(v, tmpv, (size_t)(n * n) * sizeof(double));
  tt_complete_basis(u, m, m, good);
  free(sv);
  free(w);
  free(order);
  free(tmpv);
}

static void tt_svd(const double *a, int64_t m, int64_t n, double *u, double *s, double *vh) {
  if (m >= n) {
    double *v = malloc((size_t)(n * n > 0 ? n * n : 1) * sizeof(double));
    if (!v) return;
    tt_svd_tall(a, m, n, u, s, v);
    for (int64_t i = 0; i < n; ++i)
      for (int64_t j = 0; j < n; ++j) vh[i * n + j] = v[j * n + i];
    free(v);
  } else {
    /* A^T = V S U^T. */
    double *at = malloc((size_t)(m * n) * sizeof(double));
    double *uu = malloc((size_t)(n * n) * sizeof(double));
    double *vv = malloc((size_t)(m * m) * sizeof(double));
    if (!at || !uu || !vv) {
      free(at);
      free(uu);
      free(vv);
      return;
    }
    for (int64_t i = 0; i < m; ++i)
      for (int64_t j = 0; j < n; ++j) at[j * m + i] = a[i * n + j];
    tt_svd_tall(at, n, m, uu, s, vv); /* at [n, m] = uu s vv^T */
    for (int64_t i = 0; i < m; ++i)
      for (int64_t j = 0; j < m; ++j) u[i * m + j] = vv[i * m + j];
    for (int64_t i = 0; i < n; ++i)
      for (int64_t j = 0; j < n; ++j) vh[i * n + j] = uu[j * n + i];
    free(at);
    free(uu);
    free(vv);
  }
}

/* ---- entry point ------------------------------------------------------- */
int64_t tt_linalg_out_size(tt_linalg_op_t op, const tt_shape_t *a, const tt_shape_t *b,
                           const tt_shape_t *c) {
  int64_t m = a->dims[1], n = a->dims[2], k = m < n ? m : n;
  switch (op) {
    case TT_LINALG_CHOLESKY: return n * n + 1;
    case TT_LINALG_LU: return m * n + k + m + 1;
    case TT_LINALG_TRSM: return b ? b->dims[1] * b->dims[2] : 0;
    case TT_LINALG_GEQRF: return m * n + k;
    case TT_LINALG_ORGQR: return m * n;
    case TT_LINALG_ORMQR: return c ? c->dims[1] * c->dims[2] : 0;
    case TT_LINALG_EIGH: return n + n * n;
    case TT_LINALG_SVD: return m * m + k + n * n;
    default: return -1;
  }
}

tt_status_t tt_kernel_linalg(tt_linalg_op_t op, const tt_view_t *const *in, int nin,
                             const int64_t *flags, tt_view_t *out) {
  if (nin < 1) return tt_status_make(TT_INVALID_ARGUMENT, "linalg: no input");
  for (int i = 0; i < nin; ++i) {
    TT_RETURN_IF_ERROR(tt_check_view("linalg", "input", in[i]));
    if (in[i]->shape.rank != 3)
      return tt_status_make(TT_INVALID_ARGUMENT, "linalg: inputs must be rank 3, got %d",
                            in[i]->shape.rank);
  }
  TT_RETURN_IF_ERROR(tt_check_view("linalg", "out", out));
  const tt_view_t *av = in[0];
  int64_t B = av->shape.dims[0], m = av->shape.dims[1], n = av->shape.dims[2];
  int64_t k = m < n ? m : n;
  int64_t P = tt_linalg_out_size(op, &av->shape, nin > 1 ? &in[1]->shape : NULL,
                                 nin > 2 ? &in[2]->shape : NULL);
  if (P < 0) return tt_status_make(TT_INVALID_ARGUMENT, "linalg: unknown op %d", (int)op);
  if (tt_view_numel(out) != B * P)
    return tt_status_make(TT_INVALID_ARGUMENT, "linalg: out has %lld elements, expected %lld",
                          (long long)tt_view_numel(out), (long long)(B * P));
  size_t work = (size_t)(m * n + m * m + n * n + 2 * (m + n) + 8);
  if (nin > 1) work += (size_t)tt_view_numel(in[1]) / (size_t)(B ? B : 1);
  if (nin > 2) work += (size_t)tt_view_numel(in[2]) / (size_t)(B ? B : 1);
  double *buf = malloc(work * sizeof(double) * 2);
  if (!buf) return tt_status_make(TT_RESOURCE_EXHAUSTED, "linalg: out of memory");
  for (int64_t b = 0; b < B; ++b) {
    double *a = buf;
    tt_la_load(av, b, m * n, a);
    double *rest = a + m * n;
    switch (op) {
      case TT_LINALG_CHOLESKY: {
        if (flags[0]) { /* upper: factor A^T's lower (A = U^T U, U = L^T) */
          for (int64_t i = 0; i < n; ++i)
            for (int64_t j = i + 1; j < n; ++j) {
              double t = A_(i, j);
              A_(i, j) = A_(j, i);
              A_(j, i) = t;
            }
        }
        /* Use the lower triangle only, as LAPACK does. */
        for (int64_t i = 0; i < n; ++i)
          for (int64_t j = i + 1; j < n; ++j) A_(i, j) = A_(j, i);
        double info = (double)tt_cholesky(a, n);
        tt_la_store(out, b, P, 0, a, n * n);
        tt_la_store(out, b, P, n * n, &info, 1);
        break;
      }
      case TT_LINALG_LU: {
        double *piv = rest, *perm = rest + k;
        double info = (double)tt_lu(a, m, n, piv, perm);
        tt_la_store(out, b, P, 0, a, m * n);
        tt_la_store(out, b, P, m * n, piv, k);
        tt_la_store(out, b, P, m * n + k, perm, m);
        tt_la_store(out, b, P, m * n + k + m, &info, 1);
        break;
      }
      case TT_LINALG_TRSM: {
        if (nin < 2 || m != n || in[1]->shape.dims[1] != n)
          break;
        int64_t nr = in[1]->shape.dims[2];
        int64_t bb = in[1]->shape.dims[0] == 1 ? 0 : b;
        tt_la_load(in[1], bb, n * nr, rest);
        tt_trsm(a, n, rest, nr, (int)flags[0], (int)flags[1], (int)flags[2]);
        tt_la_store(out, b, P, 0, rest, n * nr);
        break;
      }
      case TT_LINALG_GEQRF: {
        tt_geqrf(a, m, n, rest);
        tt_la_store(out, b, P, 0, a, m * n);
        tt_la_store(out, b, P, m * n, rest, k);
        break;
      }
      case TT_LINALG_ORGQR: {
        int64_t kt = nin > 1 ? in[1]->shape.dims[2] : 0;
        if (kt > n) kt = n;
        tt_la_load(in[1], b, in[1]->shape.dims[2], rest);
        tt_orgqr(a, m, n, kt, rest);
        tt_la_store(out, b, P, 0, a, m * n);
        break;
      }
      case TT_LINALG_ORMQR: {
        int64_t kt = in[1]->shape.dims[2];
        double *tau = rest, *c = rest + kt;
        int64_t cm = in[2]->shape.dims[1], cn = in[2]->shape.dims[2];
        tt_la_load(in[1], b, kt, tau);
        tt_la_load(in[2], b, cm * cn, c);
        tt_ormqr(a, m, n, tau, kt, c, cm, cn, (int)flags[0], (int)flags[1]);
        tt_la_store(out, b, P, 0, c, cm * cn);
        break;
      }
      case TT_LINALG_EIGH: {
        /* Symmetrise from the triangle asked for (flags[0]: upper). */
        for (int64_t i = 0; i < n; ++i)
          for (int64_t j = i + 1; j < n; ++j) {
            if (flags[0]) A_(j, i) = A_(i, j);
            else A_(i, j) = A_(j, i);
          }
        double *w = rest, *v = rest + n;
        tt_eigh(a, n, w, v);
        tt_la_store(out, b, P, 0, w, n);
        tt_la_store(out, b, P, n, v, n * n);
        break;
      }
      case TT_LINALG_SVD: {
        double *u = rest, *s = u + m * m, *vh = s + k;
        tt_svd(a, m, n, u, s, vh);
        tt_la_store(out, b, P, 0, u, m * m);
        tt_la_store(out, b, P, m * m, s, k);
        tt_la_store(out, b, P, m * m + k, vh, n * n);
        break;
      }
      default:
        break;
    }
  }
  free(buf);
  return NULL;
}
#undef A_
