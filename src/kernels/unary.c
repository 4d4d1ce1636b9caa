/* Elementwise unary kernels (tt_kernel_unary).
 *
 * Each compute class has one function that applies an op to a dense block:
 * F32/F16/BF16 in float, F64 in double, integers and BOOL in int64. The
 * driver walks the tensor in blocks of TT_BLOCK, converting on load/store
 * only when the storage dtype is not the compute type, so f32 -> f32 runs
 * straight over the caller's memory. Formulas follow PyTorch's CPU kernels
 * (aten/src/ATen/native/cpu/UnaryOpsKernel.cpp and friends).
 */
#include <stdlib.h>

#include "kernels/kernel_util.h"

/* ---- special functions (PyTorch's Math.h formulas) --------------------- */

static double tt_erfinv_f64(double y) {
  /* Rational approximation refined by two Newton steps (Pavlis, as in
   * PyTorch's calc_erfinv). */
  static const double a[4] = {0.886226899, -1.645349621, 0.914624893,
                              -0.140543331};
  static const double b[4] = {-2.118377725, 1.442710462, -0.329097515,
                              0.012229801};
  static const double c[4] = {-1.970840454, -1.624906493, 3.429567803,
                              1.641345311};
  static const double d[2] = {3.543889200, 1.637067800};
  double ya = fabs(y);
  if (ya > 1.0) return NAN;
  if (ya == 1.0) return copysign(INFINITY, y);
  double x, z, num, dem;
  if (ya <= 0.7) {
    z = y * y;
    num = ((a[3] * z + a[2]) * z + a[1]) * z + a[0];
    dem = (((b[3] * z + b[2]) * z + b[1]) * z + b[0]) * z + 1.0;
    x = y * num / dem;
  } else {
    z = sqrt(-log((1.0 - ya) / 2.0));
    num = ((c[3] * z + c[2]) * z + c[1]) * z + c[0];
    dem = (d[1] * z + d[0]) * z + 1.0;
    x = copysign(num, y) / dem;
  }
  const double two_over_sqrt_pi = 1.12837916709551257390;
  x = x - (erf(x) - y) / (two_over_sqrt_pi * exp(-x * x));
  x = x - (erf(x) - y) / (two_over_sqrt_pi * exp(-x * x));
  return x;
}

static float tt_erfinv_f32(float y) {
  static const float a[4] = {0.886226899f, -1.645349621f, 0.914624893f,
                             -0.140543331f};
  static const float b[4] = {-2.118377725f, 1.442710462f, -0.329097515f,
                             0.012229801f};
  static const float c[4] = {-1.970840454f, -1.624906493f, 3.429567803f,
                             1.641345311f};
  static const float d[2] = {3.543889200f, 1.637067800f};
  float ya = fabsf(y);
  if (ya > 1.0f) return NAN;
  if (ya == 1.0f) return copysignf(INFINITY, y);
  float x, z, num, dem;
  if (ya <= 0.7f) {
    z = y * y;
    num = ((a[3] * z + a[2]) * z + a[1]) * z + a[0];
    dem = (((b[3] * z + b[2]) * z + b[1]) * z + b[0]) * z + 1.0f;
    x = y * num / dem;
  } else {
    z = sqrtf(-logf((1.0f - ya) / 2.0f));
    num = ((c[3] * z + c[2]) * z + c[1]) * z + c[0];
    dem = (d[1] * z + d[0]) * z + 1.0f;
    x = copysignf(num, y) / dem;
  }
  const float two_over_sqrt_pi = 1.12837916709551257390f;
  x = x - (erff(x) - y) / (two_over_sqrt_pi * expf(-x * x));
  x = x - (erff(x) - y) / (two_over_sqrt_pi * expf(-x * x));
  return x;
}

static double tt_digamma_f64(double x) {
  static const double psi_10 = 2.25175258906672110764;
  if (x == 0) return copysign(INFINITY, -x);
  int x_is_integer = x == trunc(x);
  if (x < 0) {
    if (x_is_integer) return NAN;
    /* Reflection, using the fractional part for an accurate tan(pi*r). */
    double q, r = modf(x, &q);
    return tt_digamma_f64(1 - x) - TT_PI / tan(TT_PI * r);
  }
  double result = 0;
  while (x < 10) {
    result -= 1 / x;
    x += 1;
  }
  if (x == 10) return result + psi_10;
  static const double A[] = {
      8.33333333333333333333E-2,  -2.10927960927960927961E-2,
      7.57575757575757575758E-3,  -4.16666666666666666667E-3,
      3.96825396825396825397E-3,  -8.33333333333333333333E-3,
      8.33333333333333333333E-2,
  };
  double y = 0;
  if (x < 1.0e17) {
    double z = 1.0 / (x * x);
    double p = A[0];
    for (int i = 1; i < 7; ++i) p = p * z + A[i];
    y = z * p;
  }
  return result + log(x) - (0.5 / x) - y;
}

static float tt_digamma_f32(float x) {
  static const float psi_10 = 2.25175258906672110764f;
  if (x == 0) return copysignf(INFINITY, -x);
  int x_is_integer = x == truncf(x);
  if (x < 0) {
    if (x_is_integer) return NAN;
    double q, r = modf(x, &q);
    float pi_over_tan_pi_x = (float)(TT_PI / tan(TT_PI * r));
    return tt_digamma_f32(1 - x) - pi_over_tan_pi_x;
  }
  float result = 0;
  while (x < 10) {
    result -= 1 / x;
    x += 1;
  }
  if (x == 10) return result + psi_10;
  static const float A[] = {
      8.33333333333333333333E-2f,  -2.10927960927960927961E-2f,
      7.57575757575757575758E-3f,  -4.16666666666666666667E-3f,
      3.96825396825396825397E-3f,  -8.33333333333333333333E-3f,
      8.33333333333333333333E-2f,
  };
  float y = 0;
  if (x < 1.0e17f) {
    float z = 1 / (x * x);
    float p = A[0];
    for (int i = 1; i < 7; ++i) p = p * z + A[i];
    y = z * p;
  }
  return result + logf(x) - (0.5f / x) - y;
}

/* lgamma without the racy global signgam where the reentrant form exists. */
#if defined(_GNU_SOURCE) || defined(_DEFAULT_SOURCE)
static inline float tt_lgammaf(float x) {
  int sign;
  return lgammaf_r(x, &sign);
}
static inline double tt_lgamma(double x) {
  int sign;
  return lgamma_r(x, &sign);
}
#else
static inline float tt_lgammaf(float x) { return lgammaf(x); }
static inline double tt_lgamma(double x) { return lgamma(x); }
#endif

/* Vectorisable tanh and erf: kernels/fastmath.h. */

/* ---- per-class block functions ----------------------------------------- */

#define TT_GELU_TANH_BETA 0.7978845608028654 /* sqrt(2/pi) */

TT_TARGET_CLONES
static void tt_unary_f32(tt_unary_op_t op, const float *x, float *y, int64_t n,
                         float alpha, float beta) {
  int64_t i;
  switch (op) {
    case TT_UN_NEG: for (i = 0; i < n; ++i) y[i] = -x[i]; break;
    case TT_UN_ABS: for (i = 0; i < n; ++i) y[i] = fabsf(x[i]); break;
    case TT_UN_EXP: for (i = 0; i < n; ++i) y[i] = tt_expf_fast(x[i]); break;
    case TT_UN_LOG: for (i = 0; i < n; ++i) y[i] = logf(x[i]); break;
    case TT_UN_LOG1P: for (i = 0; i < n; ++i) y[i] = log1pf(x[i]); break;
    case TT_UN_EXPM1: for (i = 0; i < n; ++i) y[i] = expm1f(x[i]); break;
    case TT_UN_SQRT: for (i = 0; i < n; ++i) y[i] = sqrtf(x[i]); break;
    case TT_UN_RSQRT: for (i = 0; i < n; ++i) y[i] = 1.0f / sqrtf(x[i]); break;
    case TT_UN_SIN: for (i = 0; i < n; ++i) y[i] = sinf(x[i]); break;
    case TT_UN_COS: for (i = 0; i < n; ++i) y[i] = cosf(x[i]); break;
    case TT_UN_TAN: for (i = 0; i < n; ++i) y[i] = tanf(x[i]); break;
    case TT_UN_TANH: for (i = 0; i < n; ++i) y[i] = tt_tanhf_fast(x[i]); break;
    case TT_UN_SIGMOID:
      for (i = 0; i < n; ++i) y[i] = 1.0f / (1.0f + tt_expf_fast(-x[i]));
      break;
    case TT_UN_RELU:
      for (i = 0; i < n; ++i) y[i] = x[i] < 0.0f ? 0.0f : x[i];
      break;
    case TT_UN_GELU_ERF:
      for (i = 0; i < n; ++i) {
        y[i] = 0.5f * x[i] * (1.0f + tt_erff_fast(x[i] * (float)TT_SQRT1_2));
      }
      break;
    case TT_UN_GELU_TANH:
      for (i = 0; i < n; ++i) {
        float v = x[i];
        float inner = (float)TT_GELU_TANH_BETA * (v + 0.044715f * v * v * v);
        y[i] = 0.5f * v * (1.0f + tt_tanhf_fast(inner));
      }
      break;
    case TT_UN_SILU:
      for (i = 0; i < n; ++i) y[i] = x[i] / (1.0f + tt_expf_fast(-x[i]));
      break;
    case TT_UN_ERF: for (i = 0; i < n; ++i) y[i] = tt_erff_fast(x[i]); break;
    case TT_UN_FLOOR: for (i = 0; i < n; ++i) y[i] = floorf(x[i]); break;
    case TT_UN_CEIL: for (i = 0; i < n; ++i) y[i] = ceilf(x[i]); break;
    case TT_UN_ROUND: for (i = 0; i < n; ++i) y[i] = nearbyintf(x[i]); break;
    case TT_UN_TRUNC: for (i = 0; i < n; ++i) y[i] = truncf(x[i]); break;
    case TT_UN_SIGN:
      for (i = 0; i < n; ++i) y[i] = (float)((0.0f < x[i]) - (x[i] < 0.0f));
      break;
    case TT_UN_RECIPROCAL: for (i = 0; i < n; ++i) y[i] = 1.0f / x[i]; break;
    case TT_UN_LOGICAL_NOT:
      for (i = 0; i < n; ++i) y[i] = x[i] == 0.0f;
      break;
    case TT_UN_ISNAN: for (i = 0; i < n; ++i) y[i] = x[i] != x[i]; break;
    case TT_UN_ASIN: for (i = 0; i < n; ++i) y[i] = asinf(x[i]); break;
    case TT_UN_ACOS: for (i = 0; i < n; ++i) y[i] = acosf(x[i]); break;
    case TT_UN_ATAN: for (i = 0; i < n; ++i) y[i] = atanf(x[i]); break;
    case TT_UN_SINH: for (i = 0; i < n; ++i) y[i] = sinhf(x[i]); break;
    case TT_UN_COSH: for (i = 0; i < n; ++i) y[i] = coshf(x[i]); break;
    case TT_UN_ASINH: for (i = 0; i < n; ++i) y[i] = asinhf(x[i]); break;
    case TT_UN_ACOSH: for (i = 0; i < n; ++i) y[i] = acoshf(x[i]); break;
    case TT_UN_ATANH: for (i = 0; i < n; ++i) y[i] = atanhf(x[i]); break;
    case TT_UN_LOG2: for (i = 0; i < n; ++i) y[i] = log2f(x[i]); break;
    case TT_UN_LOG10: for (i = 0; i < n; ++i) y[i] = log10f(x[i]); break;
    case TT_UN_EXP2: for (i = 0; i < n; ++i) y[i] = exp2f(x[i]); break;
    case TT_UN_ERFINV: for (i = 0; i < n; ++i) y[i] = tt_erfinv_f32(x[i]); break;
    case TT_UN_SQUARE: for (i = 0; i < n; ++i) y[i] = x[i] * x[i]; break;
    case TT_UN_LEAKY_RELU:
      for (i = 0; i < n; ++i) y[i] = x[i] > 0.0f ? x[i] : x[i] * alpha;
      break;
    case TT_UN_ELU:
      for (i = 0; i < n; ++i) y[i] = x[i] <= 0.0f ? alpha * expm1f(x[i]) : x[i];
      break;
    case TT_UN_HARDTANH:
      for (i = 0; i < n; ++i) {
        y[i] = x[i] < alpha ? alpha : (x[i] > beta ? beta : x[i]);
      }
      break;
    case TT_UN_SOFTPLUS:
      for (i = 0; i < n; ++i) {
        float bx = x[i] * alpha;
        y[i] = bx > beta ? x[i] : log1pf(expf(bx)) / alpha;
      }
      break;
    case TT_UN_HARDSIGMOID:
      for (i = 0; i < n; ++i) {
        float v = x[i] + 3.0f;
        v = v < 0.0f ? 0.0f : v;
        v = 6.0f < v ? 6.0f : v;
        y[i] = v / 6.0f;
      }
      break;
    case TT_UN_HARDSWISH:
      for (i = 0; i < n; ++i) {
        float v = x[i] + 3.0f;
        v = v < 0.0f ? 0.0f : v;
        v = 6.0f < v ? 6.0f : v;
        y[i] = x[i] * v / 6.0f;
      }
      break;
    case TT_UN_MISH:
      for (i = 0; i < n; ++i) y[i] = x[i] * tanhf(log1pf(expf(x[i])));
      break;
    case TT_UN_LGAMMA: for (i = 0; i < n; ++i) y[i] = tt_lgammaf(x[i]); break;
    case TT_UN_DIGAMMA:
      for (i = 0; i < n; ++i) y[i] = tt_digamma_f32(x[i]);
      break;
    default: break; /* rejected by the driver */
  }
}

static void tt_unary_f64(tt_unary_op_t op, const double *x, double *y,
                         int64_t n, double alpha, double beta) {
  for (int64_t i = 0; i < n; ++i) {
    double v = x[i], r = 0;
    switch (op) {
      case TT_UN_NEG: r = -v; break;
      case TT_UN_ABS: r = fabs(v); break;
      case TT_UN_EXP: r = exp(v); break;
      case TT_UN_LOG: r = log(v); break;
      case TT_UN_LOG1P: r = log1p(v); break;
      case TT_UN_EXPM1: r = expm1(v); break;
      case TT_UN_SQRT: r = sqrt(v); break;
      case TT_UN_RSQRT: r = 1.0 / sqrt(v); break;
      case TT_UN_SIN: r = sin(v); break;
      case TT_UN_COS: r = cos(v); break;
      case TT_UN_TAN: r = tan(v); break;
      case TT_UN_TANH: r = tanh(v); break;
      case TT_UN_SIGMOID: r = 1.0 / (1.0 + exp(-v)); break;
      case TT_UN_RELU: r = v < 0 ? 0 : v; break;
      case TT_UN_GELU_ERF: r = 0.5 * v * (1.0 + erf(v * TT_SQRT1_2)); break;
      case TT_UN_GELU_TANH:
        r = 0.5 * v * (1.0 + tanh(TT_GELU_TANH_BETA * (v + 0.044715 * v * v * v)));
        break;
      case TT_UN_SILU: r = v / (1.0 + exp(-v)); break;
      case TT_UN_ERF: r = erf(v); break;
      case TT_UN_FLOOR: r = floor(v); break;
      case TT_UN_CEIL: r = ceil(v); break;
      case TT_UN_ROUND: r = nearbyint(v); break;
      case TT_UN_TRUNC: r = trunc(v); break;
      case TT_UN_SIGN: r = (0.0 < v) - (v < 0.0); break;
      case TT_UN_RECIPROCAL: r = 1.0 / v; break;
      case TT_UN_LOGICAL_NOT: r = v == 0.0; break;
      case TT_UN_ISNAN: r = v != v; break;
      case TT_UN_ASIN: r = asin(v); break;
      case TT_UN_ACOS: r = acos(v); break;
      case TT_UN_ATAN: r = atan(v); break;
      case TT_UN_SINH: r = sinh(v); break;
      case TT_UN_COSH: r = cosh(v); break;
      case TT_UN_ASINH: r = asinh(v); break;
      case TT_UN_ACOSH: r = acosh(v); break;
      case TT_UN_ATANH: r = atanh(v); break;
      case TT_UN_LOG2: r = log2(v); break;
      case TT_UN_LOG10: r = log10(v); break;
      case TT_UN_EXP2: r = exp2(v); break;
      case TT_UN_ERFINV: r = tt_erfinv_f64(v); break;
      case TT_UN_SQUARE: r = v * v; break;
      case TT_UN_LEAKY_RELU: r = v > 0 ? v : v * alpha; break;
      case TT_UN_ELU: r = v <= 0 ? alpha * expm1(v) : v; break;
      case TT_UN_HARDTANH: r = v < alpha ? alpha : (v > beta ? beta : v); break;
      case TT_UN_SOFTPLUS:
        r = v * alpha > beta ? v : log1p(exp(v * alpha)) / alpha;
        break;
      case TT_UN_HARDSIGMOID:
      case TT_UN_HARDSWISH: {
        double t = v + 3.0;
        t = t < 0 ? 0 : t;
        t = 6.0 < t ? 6.0 : t;
        r = op == TT_UN_HARDSIGMOID ? t / 6.0 : v * t / 6.0;
        break;
      }
      case TT_UN_MISH: r = v * tanh(log1p(exp(v))); break;
      case TT_UN_LGAMMA: r = tt_lgamma(v); break;
      case TT_UN_DIGAMMA: r = tt_digamma_f64(v); break;
      default: break;
    }
    y[i] = r;
  }
}

/* Integer ops wrap like two's complement (computed through uint64). */
static void tt_unary_i64(tt_unary_op_t op, const int64_t *x, int64_t *y,
                         int64_t n, int64_t lo, int64_t hi, int is_bool) {
  for (int64_t i = 0; i < n; ++i) {
    int64_t v = x[i], r = v;
    switch (op) {
      case TT_UN_NEG: r = (int64_t)(0 - (uint64_t)v); break;
      case TT_UN_ABS: r = v < 0 ? (int64_t)(0 - (uint64_t)v) : v; break;
      case TT_UN_RELU: r = v < 0 ? 0 : v; break;
      case TT_UN_SIGN: r = (v > 0) - (v < 0); break;
      case TT_UN_LOGICAL_NOT: r = v == 0; break;
      case TT_UN_ISNAN: r = 0; break;
      case TT_UN_BITWISE_NOT: r = is_bool ? v == 0 : ~v; break;
      case TT_UN_SQUARE: r = (int64_t)((uint64_t)v * (uint64_t)v); break;
      case TT_UN_HARDTANH: r = v < lo ? lo : (v > hi ? hi : v); break;
      default: break; /* FLOOR/CEIL/ROUND/TRUNC are the identity */
    }
    y[i] = r;
  }
}

/* ---- driver ------------------------------------------------------------ */

static int tt_unary_out_is_bool(tt_unary_op_t op) {
  return op == TT_UN_LOGICAL_NOT || op == TT_UN_ISNAN;
}

static int tt_unary_allows_int(tt_unary_op_t op) {
  switch (op) {
    case TT_UN_NEG: case TT_UN_ABS: case TT_UN_RELU: case TT_UN_FLOOR:
    case TT_UN_CEIL: case TT_UN_ROUND: case TT_UN_TRUNC: case TT_UN_SIGN:
    case TT_UN_LOGICAL_NOT: case TT_UN_ISNAN: case TT_UN_BITWISE_NOT:
    case TT_UN_SQUARE: case TT_UN_HARDTANH:
      return 1;
    default:
      return 0;
  }
}

typedef struct tt_unary_ctx_s {
  tt_unary_op_t op;
  const tt_view_t *x;
  tt_view_t *out;
  double alpha, beta;
} tt_unary_ctx_t;

static void tt_unary_range(void *arg, int64_t begin, int64_t end) {
  const tt_unary_ctx_t *c = (const tt_unary_ctx_t *)arg;
  tt_dtype_t xd = c->x->dtype, od = c->out->dtype;
  tt_class_t cls = tt_class_of(xd);
  for (int64_t i = begin; i < end; i += TT_BLOCK) {
    int64_t len = tt_min64(TT_BLOCK, end - i);
    if (cls == TT_CLASS_F32) {
      float in[TT_BLOCK], res[TT_BLOCK];
      const float *px = (const float *)c->x->data + i;
      if (xd != TT_F32) {
        tt_load_f32(c->x->data, xd, i, 1, len, in);
        px = in;
      }
      float *py = od == TT_F32 ? (float *)c->out->data + i : res;
      tt_unary_f32(c->op, px, py, len, (float)c->alpha, (float)c->beta);
      if (py == res) tt_store_f32(res, len, c->out->data, od, i);
    } else if (cls == TT_CLASS_F64) {
      double in[TT_BLOCK], res[TT_BLOCK];
      tt_load_f64(c->x->data, xd, i, 1, len, in);
      tt_unary_f64(c->op, in, res, len, c->alpha, c->beta);
      tt_store_f64(res, len, c->out->data, od, i);
    } else {
      int64_t in[TT_BLOCK], res[TT_BLOCK];
      tt_load_i64(c->x->data, xd, i, 1, len, in);
      tt_unary_i64(c->op, in, res, len, tt_f64_to_i64_trunc(c->alpha),
                   tt_f64_to_i64_trunc(c->beta), xd == TT_BOOL);
      tt_store_i64(res, len, c->out->data, od, i);
    }
  }
}

tt_status_t tt_kernel_unary(tt_unary_op_t op, const tt_view_t *x, double alpha,
                            double beta, tt_view_t *out) {
  static const char *name = "unary";
  TT_RETURN_IF_ERROR(tt_check_view(name, "x", x));
  TT_RETURN_IF_ERROR(tt_check_view(name, "out", out));
  if ((unsigned)op >= TT_UN_COUNT) {
    return tt_status_make(TT_INVALID_ARGUMENT, "unary: unknown op %d", (int)op);
  }
  if (!tt_shape_equal(&x->shape, &out->shape)) {
    char b1[160], b2[160];
    return tt_status_make(TT_INVALID_ARGUMENT,
                          "unary op %d: out shape %s differs from x shape %s",
                          (int)op, tt_dims_str(&out->shape, b1, sizeof b1),
                          tt_dims_str(&x->shape, b2, sizeof b2));
  }
  tt_dtype_t want = tt_unary_out_is_bool(op) ? TT_BOOL : x->dtype;
  if (out->dtype != want) {
    return tt_status_make(TT_TYPE_ERROR,
                          "unary op %d: out dtype is %s, expected %s", (int)op,
                          tt_dtype_name(out->dtype), tt_dtype_name(want));
  }
  tt_class_t cls = tt_class_of(x->dtype);
  if (cls == TT_CLASS_INT && !tt_unary_allows_int(op)) {
    return tt_status_make(TT_TYPE_ERROR,
                          "unary op %d is not implemented for dtype %s "
                          "(floating point only)",
                          (int)op, tt_dtype_name(x->dtype));
  }
  if (cls != TT_CLASS_INT && op == TT_UN_BITWISE_NOT) {
    return tt_status_make(TT_TYPE_ERROR,
                          "bitwise_not is not implemented for dtype %s",
                          tt_dtype_name(x->dtype));
  }
  if (x->dtype == TT_BOOL && (op == TT_UN_NEG || op == TT_UN_ABS)) {
    return tt_status_make(TT_TYPE_ERROR,
                          "unary op %d is not implemented for dtype bool",
                          (int)op);
  }
  tt_unary_ctx_t ctx = {op, x, out, alpha, beta};
  tt_parallel_for(tt_view_numel(x), TT_GRAIN, tt_unary_range, &ctx);
  return NULL;
}
