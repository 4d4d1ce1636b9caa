/* The machine's single-core fp32 FMA peak, as bench_gemm.py's roofline:
 * independent chains of fused multiply-adds on the widest vectors this CPU
 * runs (AVX-512, else AVX2), best of several runs. Prints GFLOP/s.
 * Built and run by bench/bench_gemm.py (cc -O2). */
#include <immintrin.h>
#include <stdio.h>
#include <time.h>

static double now_s(void) {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return (double)t.tv_sec + (double)t.tv_nsec * 1e-9;
}

#define CHAINS 12
#define ITERS 20000000L

__attribute__((target("avx512f"))) static double run_avx512(float *sink) {
  __m512 acc[CHAINS];
  const __m512 m = _mm512_set1_ps(0.999f), c = _mm512_set1_ps(1e-4f);
  for (int i = 0; i < CHAINS; ++i) acc[i] = _mm512_set1_ps((float)i);
  double t0 = now_s();
  for (long k = 0; k < ITERS; ++k) {
#pragma GCC unroll 12
    for (int i = 0; i < CHAINS; ++i) acc[i] = _mm512_fmadd_ps(acc[i], m, c);
  }
  double dt = now_s() - t0;
  for (int i = 0; i < CHAINS; ++i) *sink += _mm512_reduce_add_ps(acc[i]);
  return (double)ITERS * CHAINS * 32.0 / dt / 1e9;
}

__attribute__((target("avx2,fma"))) static double run_avx2(float *sink) {
  __m256 acc[CHAINS];
  const __m256 m = _mm256_set1_ps(0.999f), c = _mm256_set1_ps(1e-4f);
  for (int i = 0; i < CHAINS; ++i) acc[i] = _mm256_set1_ps((float)i);
  double t0 = now_s();
  for (long k = 0; k < ITERS; ++k) {
#pragma GCC unroll 12
    for (int i = 0; i < CHAINS; ++i) acc[i] = _mm256_fmadd_ps(acc[i], m, c);
  }
  double dt = now_s() - t0;
  float out[8];
  for (int i = 0; i < CHAINS; ++i) {
    _mm256_storeu_ps(out, acc[i]);
    *sink += out[0];
  }
  return (double)ITERS * CHAINS * 16.0 / dt / 1e9;
}

int main(void) {
  float sink = 0;
  int wide = __builtin_cpu_supports("avx512f");
  if (!wide && !(__builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma"))) {
    printf("0 none\n");
    return 0;
  }
  double best = 0;
  for (int r = 0; r < 7; ++r) {
    double g = wide ? run_avx512(&sink) : run_avx2(&sink);
    if (g > best) best = g;
  }
  printf("%.1f %s %g\n", best, wide ? "avx512" : "avx2", (double)(sink != sink));
  return 0;
}
