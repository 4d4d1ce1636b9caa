/* An external f32 GEMM: MKL's sgemm as the process already has it.
 *
 * PyTorch's CPU wheel links MKL into libtorch_cpu.so, which every process
 * running torch_xla has loaded. tt_blas_install(path) looks that library
 * up (RTLD_NOLOAD: it is never loaded for us), takes its Fortran `sgemm_`
 * and `mkl_set_num_threads_local_`, and from then on tt_sgemm hands plain
 * f32 products of at least TT_BLAS_MIN_FLOPS to it (gemm.c). Implicit
 * operands (convolutions' im2col callbacks), narrow dtypes and small or
 * skinny products stay on the engine's own micro-kernels, as does every
 * process without such a library (the C tests, TORCHTPU_BLAS=own).
 *
 * Why: on this machine's transformer shapes ([197, 768] @ [3072, 768]^T)
 * MKL ran at 122-129 GFLOP/s per core against 92-102 for our 12x32
 * kernel in the same minutes (docs/kernels.md). Every call runs on one
 * MKL thread (set per calling thread); gemm.c spreads a product's pieces
 * over the engine's pool, whose workers an execution keeps polling, so
 * MKL's own OpenMP threads would only compete with them. */
#include <dlfcn.h>
#include <stdatomic.h>
#include <stdint.h>

#include "kernels/kernel_util.h"

typedef void (*tt_sgemm_f77_t)(const char *ta, const char *tb, const int *m, const int *n,
                               const int *k, const float *alpha, const float *a,
                               const int *lda, const float *b, const int *ldb,
                               const float *beta, float *c, const int *ldc);
typedef int (*tt_set_threads_f77_t)(const int *n);

static _Atomic(tt_sgemm_f77_t) tt_blas_sgemm_ = NULL;
static tt_set_threads_f77_t tt_blas_set_threads_ = NULL;
static _Atomic int64_t tt_blas_calls_ = 0;

int tt_blas_install(const char *path) {
  if (!path || !path[0]) {
    atomic_store(&tt_blas_sgemm_, NULL);
    return 0;
  }
  void *h = dlopen(path, RTLD_LAZY | RTLD_LOCAL | RTLD_NOLOAD);
  if (!h) return 0;
  tt_sgemm_f77_t f = (tt_sgemm_f77_t)dlsym(h, "sgemm_");
  tt_set_threads_f77_t t = (tt_set_threads_f77_t)dlsym(h, "mkl_set_num_threads_local_");
  if (!f || !t) {
    dlclose(h);
    return 0;
  }
  tt_blas_set_threads_ = t; /* the handle stays open with the library */
  atomic_store(&tt_blas_sgemm_, f);
  return 1;
}

int tt_blas_active(void) { return atomic_load(&tt_blas_sgemm_) != NULL; }

int64_t tt_blas_calls(void) { return atomic_load(&tt_blas_calls_); }

/* One operand as a column-major matrix of rows x cols: element (r, c) at
 * p[r*rs + c*cs]. Sets trans/ld, or returns 0 when it is not a plain
 * matrix the Fortran interface can name. */
static int tt_blas_operand(int64_t rows, int64_t cols, int64_t rs, int64_t cs, char *trans,
                           int *ld) {
  if (rs == 1 && cs >= tt_max64(rows, 1) && cs <= INT32_MAX) {
    *trans = 'N';
    *ld = (int)cs;
    return 1;
  }
  if (cs == 1 && rs >= tt_max64(cols, 1) && rs <= INT32_MAX) {
    *trans = 'T';
    *ld = (int)rs;
    return 1;
  }
  return 0;
}

typedef struct tt_blas_call_s {
  char ta, tb;
  int m, n, k, lda, ldb, ldc;
} tt_blas_call_t;

/* Row-major C[m, n] = A B is column-major C^T[n, m] = B^T A^T: B^T is
 * n x k with (j, k) at b[j*csb + k*rsb], A^T is k x m with (k, i) at
 * a[k*csa + i*rsa]. */
static int tt_blas_plan(const tt_sgemm_args_t *g, tt_blas_call_t *c) {
  if (!atomic_load(&tt_blas_sgemm_) || g->pack_b || g->a_dtype != TT_F32 ||
      g->b_dtype != TT_F32 || g->k <= 0)
    return 0;
  if (g->m > INT32_MAX || g->n > INT32_MAX || g->k > INT32_MAX || g->ldc < g->n ||
      g->ldc > INT32_MAX)
    return 0;
  if (!tt_blas_operand(g->n, g->k, g->csb, g->rsb, &c->tb, &c->ldb)) return 0;
  if (!tt_blas_operand(g->k, g->m, g->csa, g->rsa, &c->ta, &c->lda)) return 0;
  c->m = (int)g->n;
  c->n = (int)g->m;
  c->k = (int)g->k;
  c->ldc = (int)g->ldc;
  return 1;
}

int tt_blas_accepts(const tt_sgemm_args_t *g) {
  tt_blas_call_t c;
  return 2.0 * (double)g->m * (double)g->n * (double)g->k >= TT_BLAS_MIN_FLOPS &&
         tt_blas_plan(g, &c);
}

void tt_blas_sgemm(const tt_sgemm_args_t *g, int threads) {
  tt_blas_call_t c;
  tt_sgemm_f77_t f = atomic_load(&tt_blas_sgemm_);
  /* Callers ask tt_blas_accepts for the whole product first; its pieces
   * (gemm.c) then always plan. */
  if (!f || !tt_blas_plan(g, &c)) return;
  float one = 1.0f, beta = g->accumulate ? 1.0f : 0.0f;
  int nt = threads < 1 ? 1 : threads;
  tt_blas_set_threads_(&nt);
  f(&c.tb, &c.ta, &c.m, &c.n, &c.k, &one, (const float *)g->b, &c.ldb, (const float *)g->a,
    &c.lda, &beta, g->c, &c.ldc);
  atomic_fetch_add_explicit(&tt_blas_calls_, 1, memory_order_relaxed);
}
