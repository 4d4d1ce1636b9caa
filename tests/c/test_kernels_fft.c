/* Tests of the Fourier transform kernel (fft.c) against a direct sum in
 * long double: every kind, lengths that take each algorithm (radix 2, the
 * direct sum, Bluestein), batches, scaling, and the error statuses. Prints
 * "N passed, M failed". */
#include <math.h>
#include <stdlib.h>

#include "test_harness.h"

/* out[k] = scale * sum_j x[j] exp(sign 2 pi i jk / n), complex in, complex out. */
static void reference_dft(const double *x, int64_t n, int sign, double scale, double *out) {
  for (int64_t k = 0; k < n; ++k) {
    long double re = 0, im = 0;
    for (int64_t j = 0; j < n; ++j) {
      long double a = (long double)sign * 2.0L * 3.14159265358979323846264338327950288L *
                      (long double)((j * k) % n) / (long double)n;
      re += x[2 * j] * cosl(a) - x[2 * j + 1] * sinl(a);
      im += x[2 * j] * sinl(a) + x[2 * j + 1] * cosl(a);
    }
    out[2 * k] = (double)(re * scale);
    out[2 * k + 1] = (double)(im * scale);
  }
}

static double max_abs(const double *v, int64_t n) {
  double m = 0;
  for (int64_t i = 0; i < n; ++i) m = fmax(m, fabs(v[i]));
  return m;
}

static void check_kind(tt_fft_kind_t kind, int64_t n, int64_t rows) {
  int64_t in_len = kind == TT_FFT_C2R ? n / 2 + 1 : n;
  int64_t out_len = kind == TT_FFT_R2C ? n / 2 + 1 : n;
  int real_in = kind == TT_FFT_R2C, real_out = kind == TT_FFT_C2R;
  int64_t in_dims[2] = {rows, in_len}, out_dims[2] = {rows, out_len};
  tensor_t x = tensor_new(real_in ? TT_F32 : TT_C64, 2, in_dims);
  tensor_t y = tensor_new(real_out ? TT_F32 : TT_C64, 2, out_dims);
  float *xf = (float *)x.v.data;
  int64_t nx = rows * in_len * (real_in ? 1 : 2);
  for (int64_t i = 0; i < nx; ++i) xf[i] = (float)rnd_uniform(-1, 1);
  double scale = 0.5;
  CHECK_OK(tt_kernel_fft(kind, n, scale, &x.v, &y.v), "fft");
  double *full = malloc(sizeof(double) * 2 * (size_t)n);
  double *ref = malloc(sizeof(double) * 2 * (size_t)n);
  int sign = (kind == TT_FFT_C2C_FORWARD || kind == TT_FFT_R2C) ? -1 : 1;
  double worst = 0;
  for (int64_t r = 0; r < rows; ++r) {
    for (int64_t j = 0; j < n; ++j) {
      if (real_in) {
        full[2 * j] = xf[r * n + j];
        full[2 * j + 1] = 0;
      } else if (kind == TT_FFT_C2R) {
        /* The Hermitian completion: imag of the 0 (and n/2) terms dropped. */
        int64_t k = j <= n / 2 ? j : n - j;
        double re = xf[2 * (r * in_len + k)], im = xf[2 * (r * in_len + k) + 1];
        if (k == 0 || (n % 2 == 0 && k == n / 2)) im = 0;
        full[2 * j] = re;
        full[2 * j + 1] = j <= n / 2 ? im : -im;
      } else {
        full[2 * j] = xf[2 * (r * n + j)];
        full[2 * j + 1] = xf[2 * (r * n + j) + 1];
      }
    }
    reference_dft(full, n, sign, scale, ref);
    const float *yf = (const float *)y.v.data;
    for (int64_t k = 0; k < out_len; ++k) {
      double d = real_out ? fabs(yf[r * n + k] - ref[2 * k])
                          : fmax(fabs(yf[2 * (r * out_len + k)] - ref[2 * k]),
                                 fabs(yf[2 * (r * out_len + k) + 1] - ref[2 * k + 1]));
      worst = fmax(worst, d);
    }
    if (real_out) {
      double imag = 0;
      for (int64_t k = 0; k < n; ++k) imag = fmax(imag, fabs(ref[2 * k + 1]));
      CHECK(imag < 1e-9 * (double)n, "c2r reference is real (n=%lld)", (long long)n);
    }
  }
  /* f32 storage: a few ulps of the largest value. */
  double bound = 4e-7 * fmax(1.0, max_abs(ref, 2 * n)) * (1.0 + log2((double)n));
  CHECK(worst <= bound, "fft kind %d n=%lld rows=%lld: max error %g > %g", (int)kind,
        (long long)n, (long long)rows, worst, bound);
  free(full);
  free(ref);
  tensor_free(&x);
  tensor_free(&y);
}

static void test_errors(void) {
  int64_t d[1] = {8}, d5[1] = {5};
  tensor_t c = tensor_new(TT_C64, 1, d), f = tensor_new(TT_F32, 1, d), c5 = tensor_new(TT_C64, 1, d5);
  memset(c.v.data, 0, 64);
  memset(f.v.data, 0, 32);
  CHECK_CODE(tt_kernel_fft(TT_FFT_C2C_FORWARD, 8, 1.0, &f.v, &c.v), TT_TYPE_ERROR, "real into c2c");
  CHECK_CODE(tt_kernel_fft(TT_FFT_R2C, 8, 1.0, &f.v, &c.v), TT_INVALID_ARGUMENT, "r2c out len");
  CHECK_CODE(tt_kernel_fft(TT_FFT_R2C, 8, 1.0, &f.v, &c5.v), TT_OK, "r2c");
  CHECK_CODE(tt_kernel_fft(TT_FFT_C2R, 8, 1.0, &c5.v, &f.v), TT_OK, "c2r");
  CHECK_CODE(tt_kernel_fft(TT_FFT_C2C_FORWARD, 5, 1.0, &c.v, &c.v), TT_INVALID_ARGUMENT, "n");
  CHECK_CODE(tt_kernel_fft((tt_fft_kind_t)7, 8, 1.0, &c.v, &c.v), TT_INVALID_ARGUMENT, "kind");
  tensor_free(&c);
  tensor_free(&f);
  tensor_free(&c5);
}

int main(void) {
  static const int64_t lengths[] = {1, 2, 3, 4, 5, 7, 8, 12, 16, 31, 64, 65, 97, 100, 128, 257, 1000};
  for (size_t i = 0; i < sizeof lengths / sizeof lengths[0]; ++i)
    for (int kind = 0; kind < TT_FFT_COUNT; ++kind) check_kind((tt_fft_kind_t)kind, lengths[i], 3);
  /* Enough rows for several threads. */
  check_kind(TT_FFT_C2C_FORWARD, 64, 700);
  check_kind(TT_FFT_R2C, 97, 200);
  test_errors();
  return test_summary();
}
