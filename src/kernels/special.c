/* Special functions, elementwise, in double precision: the Hurwitz zeta
 * function (Cephes' algorithm, as ATen's zeta) and the orthogonal
 * polynomial families of torch.special (Chebyshev T/U/V/W and their
 * shifted forms, Hermite H/He, Laguerre L, Legendre P) following ATen's
 * recurrences and special cases. Operands x and y and the output have one
 * shape; the degree n (y) is truncated to an integer, as ATen does. */
#include "kernels/kernel_util.h"

static const double tt_zeta_a[] = {
    12.0, -720.0, 30240.0, -1209600.0, 47900160.0, -1.8924375803183791606e9, 7.47242496e10,
    -2.950130727918164224e12, 1.1646782814350067249e14, -4.5979787224074726105e15,
    1.8152105401943546773e17, -7.1661652561756670113e18};

static double tt_zeta(double x, double q) {
  const double machep = 1.11022302462515654042e-16;
  if (x == 1.0) return INFINITY;
  if (x < 1.0) return NAN;
  if (q <= 0.0) {
    if (q == floor(q)) return INFINITY;
    if (x != floor(x)) return NAN;
  }
  double s = pow(q, -x), a = q, b = 0.0;
  int i = 0;
  while (i < 9 || a <= 9.0) {
    i += 1;
    a += 1.0;
    b = pow(a, -x);
    s += b;
    if (fabs(b / s) < machep) return s;
  }
  double w = a, k = 0.0;
  s += b * w / (x - 1.0);
  s -= 0.5 * b;
  a = 1.0;
  for (int j = 0; j < 12; ++j) {
    a *= x + k;
    b /= w;
    double t = a * b / tt_zeta_a[j];
    s += t;
    if (fabs(t / s) < machep) return s;
    k += 1.0;
    a *= x + k;
    b /= w;
  }
  return s;
}

static double tt_cheb_recur(double two_x, double p, double q, int64_t n) {
  double r = q;
  for (int64_t k = 2; k <= n; ++k) {
    r = two_x * q - p;
    p = q;
    q = r;
  }
  return r;
}

static double tt_cheb_t(double x, int64_t n) {
  if (n < 0) return 0.0;
  if (fabs(x) == 1.0) return (x > 0 || n % 2 == 0) ? 1.0 : -1.0;
  if (n > 6 && fabs(x) < 1.0) return cos((double)n * acos(x));
  if (n == 0) return 1.0;
  if (n == 1) return x;
  return tt_cheb_recur(x + x, 1.0, x, n);
}

static double tt_cheb_u(double x, int64_t n) {
  if (n < 0) return 0.0;
  if (fabs(x) == 1.0) return (x > 0 || n % 2 == 0) ? (double)(n + 1) : -(double)(n + 1);
  if (n > 8 && fabs(x) < 1.0) {
    if (sin(acos(x)) != 0) return sin((double)(n + 1) * acos(x)) / sin(acos(x));
    return (double)(n + 1) * cos((double)(n + 1) * acos(x)) / x;
  }
  if (n == 0) return 1.0;
  if (n == 1) return x + x;
  return tt_cheb_recur(x + x, 1.0, x + x, n);
}

static double tt_cheb_v(double x, int64_t n) {
  if (n < 0) return 0.0;
  if (fabs(x) == 1.0) {
    if (x > 0) return 1.0;
    return n % 2 == 0 ? (double)(n + n + 1) : -(double)(n + n + 1);
  }
  if (n > 8 && fabs(x) < 1.0) {
    if (sin(acos(x) / 2) != 1.0) return cos(((double)n + 0.5) * acos(x)) / cos(acos(x) / 2);
    return n % 2 == 0 ? (double)(n + n + 1) : -(double)(n + n + 1);
  }
  if (n == 0) return 1.0;
  if (n == 1) return x + x - 1.0;
  return tt_cheb_recur(x + x, 1.0, x + x - 1.0, n);
}

static double tt_cheb_w(double x, int64_t n) {
  if (n < 0) return 0.0;
  if (fabs(x) == 1.0) {
    if (x > 0) return (double)(n + n + 1);
    return n % 2 == 0 ? 1.0 : -1.0;
  }
  if (n > 8 && fabs(x) < 1.0) {
    if (cos(acos(x) / 2) != 1.0) return sin(((double)n + 0.5) * acos(x)) / sin(acos(x) / 2);
    if (x > 0) return (double)(n + n + 1);
    return n % 2 == 0 ? 1.0 : -1.0;
  }
  if (n == 0) return 1.0;
  if (n == 1) return x + x + 1.0;
  return tt_cheb_recur(x + x, 1.0, x + x + 1.0, n);
}

static double tt_hermite_h(double x, int64_t n) {
  if (n < 0) return 0.0;
  if (n == 0) return 1.0;
  if (n == 1) return x + x;
  double p = 1.0, q = x + x, r = 0.0;
  for (int64_t k = 2; k < n + n; k += 2) {
    r = (x + x) * q - (double)k * p;
    p = q;
    q = r;
  }
  return r;
}

static double tt_hermite_he(double x, int64_t n) {
  if (n < 0) return 0.0;
  if (n == 0) return 1.0;
  if (n == 1) return x;
  double p = 1.0, q = x, r = 0.0;
  for (int64_t k = 1; k < n; ++k) {
    r = x * q - (double)k * p;
    p = q;
    q = r;
  }
  return r;
}

static double tt_laguerre_l(double x, int64_t n) {
  if (n < 0) return 0.0;
  if (fabs(x) == 0.0) return 1.0;
  if (n == 0) return 1.0;
  if (n == 1) return 1.0 - x;
  double p = 1.0, q = 1.0 - x, r = 0.0;
  for (int64_t k = 1; k < n; ++k) {
    r = (((double)(k + k) + (1.0 - x)) * q - (double)k * p) / (double)(k + 1);
    p = q;
    q = r;
  }
  return r;
}

static double tt_legendre_p(double x, int64_t n) {
  if (n < 0) return 0.0;
  if (fabs(x) == 1.0) {
    if (x > 0 || n == 1) return 1.0;
    return n % 2 == 0 ? 1.0 : -1.0;
  }
  if (n == 0) return 1.0;
  if (n == 1) return x;
  double p = 1.0, q = x, r = 0.0;
  for (int64_t k = 1; k < n; ++k) {
    r = ((double)(k + k + 1) * x * q - (double)k * p) / (double)(k + 1);
    p = q;
    q = r;
  }
  return r;
}

static double tt_special_one(tt_special_op_t op, double x, double y) {
  int64_t n = (y != y) ? 0 : (int64_t)y;
  switch (op) {
    case TT_SP_ZETA: return tt_zeta(x, y);
    case TT_SP_CHEB_T: return tt_cheb_t(x, n);
    case TT_SP_CHEB_U: return tt_cheb_u(x, n);
    case TT_SP_CHEB_V: return tt_cheb_v(x, n);
    case TT_SP_CHEB_W: return tt_cheb_w(x, n);
    case TT_SP_SHIFTED_CHEB_T: return x == 1.0 ? 1.0 : x == 0.0 ? (n < 0 ? 0.0 : n % 2 ? -1.0 : 1.0)
                                                                : tt_cheb_t(x + x - 1.0, n);
    case TT_SP_SHIFTED_CHEB_U: return tt_cheb_u(x + x - 1.0, n);
    case TT_SP_SHIFTED_CHEB_V: return tt_cheb_v(x + x - 1.0, n);
    case TT_SP_SHIFTED_CHEB_W: return tt_cheb_w(x + x - 1.0, n);
    case TT_SP_HERMITE_H: return tt_hermite_h(x, n);
    case TT_SP_HERMITE_HE: return tt_hermite_he(x, n);
    case TT_SP_LAGUERRE_L: return tt_laguerre_l(x, n);
    case TT_SP_LEGENDRE_P: return tt_legendre_p(x, n);
    default: return NAN;
  }
}

tt_status_t tt_kernel_special(tt_special_op_t op, const tt_view_t *x, const tt_view_t *y,
                              tt_view_t *out) {
  TT_RETURN_IF_ERROR(tt_check_view("special", "x", x));
  TT_RETURN_IF_ERROR(tt_check_view("special", "y", y));
  TT_RETURN_IF_ERROR(tt_check_view("special", "out", out));
  if ((unsigned)op >= TT_SP_COUNT)
    return tt_status_make(TT_INVALID_ARGUMENT, "special: unknown op %d", (int)op);
  int64_t n = tt_view_numel(out);
  if (tt_view_numel(x) != n || tt_view_numel(y) != n)
    return tt_status_make(TT_INVALID_ARGUMENT, "special: operands must have the output's shape");
  for (int64_t i = 0; i < n; ++i)
    tt_set_f64(out->data, out->dtype, i,
               tt_special_one(op, tt_get_f64(x->data, x->dtype, i),
                              tt_get_f64(y->data, y->dtype, i)));
  return NULL;
}
