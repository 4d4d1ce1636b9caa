/* Discrete Fourier transforms along the last dim (kernels.h "discrete
 * Fourier transforms"). One plan per call (twiddles, bit reversal, and for
 * Bluestein the chirp and its transform) is shared read-only by the
 * threads; each chunk of rows has its own scratch. Everything is computed
 * in double precision and rounded once on store, so the results sit within
 * an ulp or two of an exact transform (pocketfft, PyTorch's CPU library,
 * computes in single precision). */
#include <stdlib.h>

#include "kernels/kernel_util.h"

typedef struct tt_cplx_s {
  double re, im;
} tt_cplx_t;

/* Lengths up to this that are not powers of two use the direct sum. */
#define TT_FFT_DIRECT_MAX 64

typedef struct tt_fft_plan_s {
  int64_t n;      /* transform length */
  int64_t m;      /* power-of-two length of the inner transform (n, or Bluestein's) */
  int direct;     /* n is short and not a power of two */
  tt_cplx_t *tw;  /* m/2 twiddles exp(-2 pi i k / m), or n of exp(-2 pi i k / n) (direct) */
  int64_t *rev;   /* bit reversal of [0, m) */
  tt_cplx_t *chirp;  /* Bluestein: exp(-i pi k^2 / n), k < n */
  tt_cplx_t *chirp_f; /* Bluestein: forward transform of the conjugate chirp, length m */
} tt_fft_plan_t;

static int tt_is_pow2(int64_t n) { return n > 0 && (n & (n - 1)) == 0; }

static tt_cplx_t tt_cexp_turn(int64_t k, int64_t n, double sign) {
  /* exp(sign * 2 pi i k / n) with k reduced first: exact at multiples of
   * quarter turns and no loss for large k. */
  k %= n;
  double a = 2.0 * TT_PI * (double)k / (double)n;
  tt_cplx_t c = {cos(a), sign * sin(a)};
  return c;
}

/* In-place radix-2 transform of length p->m with exp(-2 pi i/m) (forward)
 * or its conjugate (inverse). */
static void tt_fft_pow2(const tt_fft_plan_t *p, tt_cplx_t *a, int inverse) {
  int64_t m = p->m;
  for (int64_t i = 0; i < m; ++i) {
    int64_t j = p->rev[i];
    if (i < j) {
      tt_cplx_t t = a[i];
      a[i] = a[j];
      a[j] = t;
    }
  }
  double s = inverse ? -1.0 : 1.0;
  for (int64_t len = 2; len <= m; len <<= 1) {
    int64_t half = len >> 1, step = m / len;
    for (int64_t i = 0; i < m; i += len) {
      for (int64_t k = 0; k < half; ++k) {
        tt_cplx_t w = p->tw[k * step];
        w.im *= s;
        tt_cplx_t u = a[i + k], v = a[i + k + half];
        tt_cplx_t t = {v.re * w.re - v.im * w.im, v.re * w.im + v.im * w.re};
        a[i + k].re = u.re + t.re;
        a[i + k].im = u.im + t.im;
        a[i + k + half].re = u.re - t.re;
        a[i + k + half].im = u.im - t.im;
      }
    }
  }
}

static void tt_fft_plan_free(tt_fft_plan_t *p) {
  free(p->tw);
  free(p->rev);
  free(p->chirp);
  free(p->chirp_f);
}

static tt_status_t tt_fft_plan_init(tt_fft_plan_t *p, int64_t n) {
  memset(p, 0, sizeof(*p));
  p->n = n;
  p->direct = !tt_is_pow2(n) && n <= TT_FFT_DIRECT_MAX;
  if (p->direct) {
    p->tw = malloc(sizeof(tt_cplx_t) * (size_t)n);
    if (!p->tw) return tt_status_make(TT_RESOURCE_EXHAUSTED, "fft: out of memory (n=%lld)",
                                      (long long)n);
    for (int64_t k = 0; k < n; ++k) p->tw[k] = tt_cexp_turn(k, n, -1.0);
    return NULL;
  }
  int64_t m = 1;
  while (m < (tt_is_pow2(n) ? n : 2 * n - 1)) m <<= 1;
  p->m = m;
  p->tw = malloc(sizeof(tt_cplx_t) * (size_t)(m / 2 + 1));
  p->rev = malloc(sizeof(int64_t) * (size_t)m);
  if (!p->tw || !p->rev) goto oom;
  for (int64_t k = 0; k < m / 2 + 1; ++k) p->tw[k] = tt_cexp_turn(k, m, -1.0);
  int bits = 0;
  while (((int64_t)1 << bits) < m) ++bits;
  for (int64_t i = 0; i < m; ++i) {
    int64_t r = 0;
    for (int b = 0; b < bits; ++b)
      if (i & ((int64_t)1 << b)) r |= (int64_t)1 << (bits - 1 - b);
    p->rev[i] = r;
  }
  if (m != n) {
    /* Bluestein: jk = (j^2 + k^2 - (k-j)^2) / 2, so the transform is a
     * convolution with the chirp exp(i pi t^2 / n), done at length m. */
    p->chirp = malloc(sizeof(tt_cplx_t) * (size_t)n);
    p->chirp_f = calloc((size_t)m, sizeof(tt_cplx_t));
    if (!p->chirp || !p->chirp_f) goto oom;
    for (int64_t k = 0; k < n; ++k) {
      /* k^2 mod 2n keeps the angle exact for large k. */
      int64_t q = (int64_t)(((unsigned __int128)k * (unsigned __int128)k) % (unsigned __int128)(2 * n));
      double a = TT_PI * (double)q / (double)n;
      p->chirp[k].re = cos(a);
      p->chirp[k].im = -sin(a);
    }
    for (int64_t k = 0; k < n; ++k) {
      tt_cplx_t c = {p->chirp[k].re, -p->chirp[k].im};
      p->chirp_f[k] = c;
      if (k) p->chirp_f[m - k] = c;
    }
    tt_fft_pow2(p, p->chirp_f, 0);
  }
  return NULL;
oom:
  tt_fft_plan_free(p);
  return tt_status_make(TT_RESOURCE_EXHAUSTED, "fft: out of memory (n=%lld)", (long long)n);
}

/* Transforms a[0..n) in place; scratch holds the plan's m (or n) values. */
static void tt_fft_row(const tt_fft_plan_t *p, tt_cplx_t *a, int inverse, tt_cplx_t *scratch) {
  int64_t n = p->n;
  double s = inverse ? -1.0 : 1.0;
  if (p->direct) {
    for (int64_t k = 0; k < n; ++k) {
      double re = 0, im = 0;
      int64_t idx = 0;
      for (int64_t j = 0; j < n; ++j) {
        tt_cplx_t w = p->tw[idx];
        w.im *= s;
        re += a[j].re * w.re - a[j].im * w.im;
        im += a[j].re * w.im + a[j].im * w.re;
        idx += k;
        if (idx >= n) idx -= n;
      }
      scratch[k].re = re;
      scratch[k].im = im;
    }
    memcpy(a, scratch, sizeof(tt_cplx_t) * (size_t)n);
    return;
  }
  if (p->m == n) {
    tt_fft_pow2(p, a, inverse);
    return;
  }
  int64_t m = p->m;
  /* Inverse = conj(forward(conj(x))): one chirp serves both directions. */
  for (int64_t k = 0; k < n; ++k) {
    tt_cplx_t x = {a[k].re, s * a[k].im}, c = p->chirp[k];
    scratch[k].re = x.re * c.re - x.im * c.im;
    scratch[k].im = x.re * c.im + x.im * c.re;
  }
  for (int64_t k = n; k < m; ++k) scratch[k].re = scratch[k].im = 0;
  tt_fft_pow2(p, scratch, 0);
  for (int64_t k = 0; k < m; ++k) {
    tt_cplx_t u = scratch[k], v = p->chirp_f[k];
    scratch[k].re = u.re * v.re - u.im * v.im;
    scratch[k].im = u.re * v.im + u.im * v.re;
  }
  tt_fft_pow2(p, scratch, 1);
  double inv_m = 1.0 / (double)m;
  for (int64_t k = 0; k < n; ++k) {
    tt_cplx_t u = {scratch[k].re * inv_m, scratch[k].im * inv_m}, c = p->chirp[k];
    a[k].re = u.re * c.re - u.im * c.im;
    a[k].im = s * (u.re * c.im + u.im * c.re);
  }
}

typedef struct tt_fft_ctx_s {
  const tt_fft_plan_t *plan;
  tt_fft_kind_t kind;
  double scale;
  const tt_view_t *x;
  tt_view_t *out;
  int64_t in_len, out_len;
  int failed; /* scratch allocation failed in some chunk */
} tt_fft_ctx_t;

static void tt_fft_range(void *arg, int64_t begin, int64_t end) {
  tt_fft_ctx_t *c = (tt_fft_ctx_t *)arg;
  const tt_fft_plan_t *p = c->plan;
  int64_t n = p->n, sl = p->direct ? n : p->m;
  tt_cplx_t *row = malloc(sizeof(tt_cplx_t) * (size_t)(n + sl));
  if (!row) {
    __atomic_store_n(&c->failed, 1, __ATOMIC_RELAXED);
    return;
  }
  tt_cplx_t *scratch = row + n;
  for (int64_t r = begin; r < end; ++r) {
    int inverse = c->kind == TT_FFT_C2C_INVERSE || c->kind == TT_FFT_C2R;
    if (c->kind == TT_FFT_R2C) {
      const float *x = (const float *)c->x->data + r * c->in_len;
      for (int64_t j = 0; j < n; ++j) {
        row[j].re = x[j];
        row[j].im = 0;
      }
    } else {
      const float *x = (const float *)c->x->data + 2 * r * c->in_len;
      if (c->kind == TT_FFT_C2R) {
        /* The Hermitian completion of the first n/2+1 terms. */
        int64_t h = n / 2;
        row[0].re = x[0];
        row[0].im = 0;
        for (int64_t k = 1; k <= h; ++k) {
          row[k].re = x[2 * k];
          row[k].im = x[2 * k + 1];
        }
        if (n % 2 == 0) row[h].im = 0;
        for (int64_t k = h + 1; k < n; ++k) {
          row[k].re = row[n - k].re;
          row[k].im = -row[n - k].im;
        }
      } else {
        for (int64_t j = 0; j < n; ++j) {
          row[j].re = x[2 * j];
          row[j].im = x[2 * j + 1];
        }
      }
    }
    tt_fft_row(p, row, inverse, scratch);
    if (c->kind == TT_FFT_C2R) {
      float *o = (float *)c->out->data + r * c->out_len;
      for (int64_t j = 0; j < n; ++j) o[j] = (float)(row[j].re * c->scale);
    } else {
      float *o = (float *)c->out->data + 2 * r * c->out_len;
      for (int64_t k = 0; k < c->out_len; ++k) {
        o[2 * k] = (float)(row[k].re * c->scale);
        o[2 * k + 1] = (float)(row[k].im * c->scale);
      }
    }
  }
  free(row);
}

tt_status_t tt_kernel_fft(tt_fft_kind_t kind, int64_t n, double scale, const tt_view_t *x,
                          tt_view_t *out) {
  static const char *name = "fft";
  TT_RETURN_IF_ERROR(tt_check_view(name, "x", x));
  TT_RETURN_IF_ERROR(tt_check_view(name, "out", out));
  if ((unsigned)kind >= TT_FFT_COUNT)
    return tt_status_make(TT_INVALID_ARGUMENT, "fft: unknown kind %d", (int)kind);
  tt_dtype_t want_x = kind == TT_FFT_R2C ? TT_F32 : TT_C64;
  tt_dtype_t want_o = kind == TT_FFT_C2R ? TT_F32 : TT_C64;
  if (x->dtype != want_x || out->dtype != want_o)
    return tt_status_make(TT_TYPE_ERROR, "fft: kind %d takes %s to %s, got %s to %s", (int)kind,
                          tt_dtype_name(want_x), tt_dtype_name(want_o), tt_dtype_name(x->dtype),
                          tt_dtype_name(out->dtype));
  int r = x->shape.rank;
  if (r < 1 || out->shape.rank != r)
    return tt_status_make(TT_INVALID_ARGUMENT, "fft: x and out need one rank >= 1 (got %d, %d)",
                          r, out->shape.rank);
  for (int d = 0; d < r - 1; ++d)
    if (x->shape.dims[d] != out->shape.dims[d])
      return tt_status_make(TT_INVALID_ARGUMENT, "fft: leading dim %d differs (%lld vs %lld)",
                            d, (long long)x->shape.dims[d], (long long)out->shape.dims[d]);
  int64_t in_len = x->shape.dims[r - 1], out_len = out->shape.dims[r - 1];
  int64_t want_in = kind == TT_FFT_C2R ? n / 2 + 1 : n;
  int64_t want_out = kind == TT_FFT_R2C ? n / 2 + 1 : n;
  if (n < 1 || (kind == TT_FFT_C2R ? in_len < want_in : in_len != want_in) ||
      out_len != want_out)
    return tt_status_make(TT_INVALID_ARGUMENT,
                          "fft: a transform of length %lld cannot take a last dim of %lld to "
                          "one of %lld",
                          (long long)n, (long long)in_len, (long long)out_len);
  int64_t rows = tt_view_numel(out) / (out_len ? out_len : 1);
  if (rows == 0 || out_len == 0) return NULL;
  tt_fft_plan_t plan;
  TT_RETURN_IF_ERROR(tt_fft_plan_init(&plan, n));
  tt_fft_ctx_t ctx = {.plan = &plan, .kind = kind, .scale = scale, .x = x, .out = out,
                      .in_len = in_len, .out_len = out_len};
  /* About 32k butterflies a chunk. */
  int64_t work = (plan.direct ? n * n : 5 * (plan.m ? plan.m : n));
  int64_t grain = 32768 / (work > 0 ? work : 1);
  tt_parallel_for(rows, grain > 0 ? grain : 1, tt_fft_range, &ctx);
  tt_fft_plan_free(&plan);
  if (ctx.failed)
    return tt_status_make(TT_RESOURCE_EXHAUSTED, "fft: out of memory (n=%lld)", (long long)n);
  return NULL;
}
