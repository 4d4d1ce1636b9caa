/* An external f32 GEMM: MKL's sgemm as the process already has it.
 *
 * PyTorch's CPU wheel links MKL into libtorch_cpu.so, which every process
 * running torch_xla has loaded. tt_blas_install(path) looks that library
 * up (RTLD_NOLOAD: it is never loaded for us), takes its Fortran `sgemm_`
 * and `mkl_set_num_threads_local_`, and from then on tt_sgemm hands plain
 * f32 products of at least TT_BLAS_MIN_FLOPS to it (gemm.c), all of them
 * on an Intel AVX-512 CPU, a share on other Intel CPUs and none on
 * others (tt_blas_set_policy). Implicit
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
#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "kernels/kernel_util.h"

typedef void (*tt_sgemm_f77_t)(const char *ta, const char *tb, const int *m, const int *n,
                               const int *k, const float *alpha, const float *a,
                               const int *lda, const float *b, const int *ldb,
                               const float *beta, float *c, const int *ldc);
typedef int (*tt_set_threads_f77_t)(const int *n);

/* MKL's packed-operand API (CBLAS, LP64: int sizes; enums as ints). */
enum { TT_CBLAS_ROW_MAJOR = 101, TT_CBLAS_NO_TRANS = 111, TT_CBLAS_TRANS = 112,
       TT_CBLAS_PACKED = 151, TT_CBLAS_B_MATRIX = 162 };
typedef size_t (*tt_pack_size_fn_t)(int id, int m, int n, int k);
typedef void (*tt_pack_fn_t)(int layout, int id, int trans, int m, int n, int k, float alpha,
                             const float *src, int ld, float *dst);
typedef void (*tt_compute_fn_t)(int layout, int transa, int transb, int m, int n, int k,
                                const float *a, int lda, const float *b, int ldb, float beta,
                                float *c, int ldc);

static _Atomic(tt_sgemm_f77_t) tt_blas_sgemm_ = NULL;
static tt_set_threads_f77_t tt_blas_set_threads_ = NULL;
static _Atomic int64_t tt_blas_calls_ = 0;
static _Atomic(tt_compute_fn_t) tt_blas_compute_ = NULL;
static tt_pack_size_fn_t tt_blas_pack_size_ = NULL;
static tt_pack_fn_t tt_blas_pack_ = NULL;
static _Atomic int64_t tt_blas_packed_calls_ = 0;

int tt_blas_install(const char *path) {
  if (!path || !path[0]) {
    atomic_store(&tt_blas_sgemm_, NULL);
    atomic_store(&tt_blas_compute_, NULL);
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
  tt_blas_pack_size_ = (tt_pack_size_fn_t)dlsym(h, "cblas_sgemm_pack_get_size");
  tt_blas_pack_ = (tt_pack_fn_t)dlsym(h, "cblas_sgemm_pack");
  tt_compute_fn_t c = (tt_compute_fn_t)dlsym(h, "cblas_sgemm_compute");
  atomic_store(&tt_blas_compute_, tt_blas_pack_size_ && tt_blas_pack_ ? c : NULL);
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

/* Which products MKL takes (tt_blas_set_policy). On an Intel CPU without
 * AVX-512 the engine's AVX2 kernel ran at or above MKL's speed on the
 * training shapes (docs/kernels.md, "AVX2 routing"), and MKL kept the lead
 * only on small-batch products with a weight B, where its packed weights
 * pay: so there, "auto" hands MKL only keyed products of at most
 * TT_BLAS_AVX2_MAX_M rows. */
#define TT_BLAS_AVX2_MAX_M 256
static _Atomic int tt_blas_policy_ = TT_BLAS_POLICY_AUTO;

void tt_blas_set_policy(tt_blas_policy_t policy) { atomic_store(&tt_blas_policy_, (int)policy); }

/* Whether "auto" hands MKL nothing on this CPU: one that is not Intel's,
 * where MKL's code paths trailed the engine's own kernels on every shape
 * measured (a Zen 4 host: docs/kernels.md, "MKL on AMD"). */
static int tt_blas_cpu_declines_(void) {
#if defined(__x86_64__) && defined(__GNUC__)
  __builtin_cpu_init();
  return !__builtin_cpu_is("intel");
#else
  return 0;
#endif
}

int tt_blas_may_take_f32(void) {
  if (!tt_blas_active()) return 0;
  return atomic_load_explicit(&tt_blas_policy_, memory_order_relaxed) == TT_BLAS_POLICY_ALL ||
         !tt_blas_cpu_declines_();
}

static int tt_blas_wants_(const tt_sgemm_args_t *g) {
  if (atomic_load_explicit(&tt_blas_policy_, memory_order_relaxed) == TT_BLAS_POLICY_ALL) return 1;
  if (tt_blas_cpu_declines_()) return 0;
#if defined(__x86_64__) && defined(__GNUC__)
  if (__builtin_cpu_supports("avx512f")) return 1;
  return g->b_key && g->m <= TT_BLAS_AVX2_MAX_M;
#else
  (void)g;
  return 1;
#endif
}

int tt_blas_accepts(const tt_sgemm_args_t *g) {
  tt_blas_call_t c;
  return 2.0 * (double)g->m * (double)g->n * (double)g->k >= TT_BLAS_MIN_FLOPS &&
         tt_blas_wants_(g) && tt_blas_plan(g, &c);
}

/* ---- packed weights ----------------------------------------------------
 * A product whose B names immutable bytes (g->b_key: a buffer id from the
 * executable, the same id promising the same bytes) may keep B in MKL's
 * packed layout across calls: cblas_sgemm_compute on a packed B skips the
 * per-call packing, 1.2-1.3x faster on transformer weights at batch 1
 * (docs/kernels.md), with the same results (the same micro-kernels). B is
 * packed the second time the same (id, piece) is seen, so weights that
 * change every step (training) are never packed; entries go when their
 * buffer does (tt_blas_forget). At most tt_blas_set_packed_limit bytes
 * (default 1 GiB; TORCHTPU_PACKED_WEIGHTS_MB from Python; 0 disables) of
 * packed copies are kept; MKL's packed size is the matrix plus about
 * 9-12 MB. */
typedef struct tt_packed_s {
  uint64_t id;
  const void *b;
  int64_t rsb, csb, n, k; /* not m: a packed B serves any row count */
  int sightings, packing;
  float *packed;
  size_t bytes;
} tt_packed_t;

static pthread_mutex_t tt_packed_lock_ = PTHREAD_MUTEX_INITIALIZER;
static tt_packed_t *tt_packed_;
static int64_t tt_packed_n_, tt_packed_cap_;
static size_t tt_packed_bytes_;

static _Atomic int64_t tt_packed_limit_bytes_ = (int64_t)1024 << 20;

static size_t tt_packed_limit_(void) { return (size_t)atomic_load(&tt_packed_limit_bytes_); }

void tt_blas_set_packed_limit(int64_t bytes) {
  atomic_store(&tt_packed_limit_bytes_, bytes < 0 ? 0 : bytes);
}

/* m is not part of the key: a packed B serves products of any row count
 * (the pieces of one product split by rows, gemm.c). MKL's packed size is
 * independent of m, and test_blas.py checks that row pieces of other
 * sizes than the one packed for give the plain sgemm's results bit for
 * bit. */
static int tt_packed_match_(const tt_packed_t *e, const tt_sgemm_args_t *g) {
  return e->id == g->b_key && e->b == g->b && e->rsb == g->rsb && e->csb == g->csb &&
         e->n == g->n && e->k == g->k;
}

/* B's packed copy for g, or NULL (not seen before, being packed, over the
 * limit, or out of memory: the caller runs the plain sgemm). Called once
 * per product (a sighting), before it is split. */
static const float *tt_packed_get_(const tt_sgemm_args_t *g, int trans_b, int ldb) {
  pthread_mutex_lock(&tt_packed_lock_);
  tt_packed_t *e = NULL;
  for (int64_t i = 0; i < tt_packed_n_; ++i)
    if (tt_packed_match_(&tt_packed_[i], g)) e = &tt_packed_[i];
  if (e && e->packed) {
    const float *p = e->packed;
    pthread_mutex_unlock(&tt_packed_lock_);
    return p;
  }
  if (!e) {
    if (tt_packed_n_ == tt_packed_cap_) {
      int64_t cap = tt_packed_cap_ ? 2 * tt_packed_cap_ : 64;
      tt_packed_t *n = realloc(tt_packed_, (size_t)cap * sizeof(*n));
      if (!n) {
        pthread_mutex_unlock(&tt_packed_lock_);
        return NULL;
      }
      tt_packed_ = n;
      tt_packed_cap_ = cap;
    }
    e = &tt_packed_[tt_packed_n_++];
    memset(e, 0, sizeof(*e));
    e->id = g->b_key;
    e->b = g->b;
    e->rsb = g->rsb;
    e->csb = g->csb;
    e->n = g->n;
    e->k = g->k;
  }
  size_t bytes = tt_blas_pack_size_(TT_CBLAS_B_MATRIX, (int)g->m, (int)g->n, (int)g->k);
  if (++e->sightings < 2 || e->packing || tt_packed_bytes_ + bytes > tt_packed_limit_()) {
    pthread_mutex_unlock(&tt_packed_lock_);
    return NULL;
  }
  e->packing = 1;
  tt_packed_bytes_ += bytes;
  pthread_mutex_unlock(&tt_packed_lock_);
  float *p = (float *)malloc(bytes);
  if (p) {
    tt_blas_pack_(TT_CBLAS_ROW_MAJOR, TT_CBLAS_B_MATRIX, trans_b, (int)g->m, (int)g->n,
                  (int)g->k, 1.0f, (const float *)g->b, ldb, p);
  }
  pthread_mutex_lock(&tt_packed_lock_);
  e = NULL; /* the array may have moved */
  for (int64_t i = 0; i < tt_packed_n_; ++i)
    if (tt_packed_match_(&tt_packed_[i], g)) e = &tt_packed_[i];
  if (e) e->packing = 0;
  if (e && p) {
    e->packed = p;
    e->bytes = bytes;
  } else {
    tt_packed_bytes_ -= bytes;
    free(p);
  }
  pthread_mutex_unlock(&tt_packed_lock_);
  return e ? p : NULL;
}

void tt_blas_forget(uint64_t id) {
  pthread_mutex_lock(&tt_packed_lock_);
  int64_t w = 0;
  for (int64_t i = 0; i < tt_packed_n_; ++i) {
    if (tt_packed_[i].id == id && !tt_packed_[i].packing) {
      free(tt_packed_[i].packed);
      tt_packed_bytes_ -= tt_packed_[i].bytes;
    } else {
      tt_packed_[w++] = tt_packed_[i];
    }
  }
  tt_packed_n_ = w;
  pthread_mutex_unlock(&tt_packed_lock_);
}

void tt_blas_packed_info(int64_t *entries, int64_t *bytes, int64_t *calls) {
  pthread_mutex_lock(&tt_packed_lock_);
  int64_t n = 0;
  for (int64_t i = 0; i < tt_packed_n_; ++i) n += tt_packed_[i].packed != NULL;
  *entries = n;
  *bytes = (int64_t)tt_packed_bytes_;
  pthread_mutex_unlock(&tt_packed_lock_);
  *calls = atomic_load(&tt_blas_packed_calls_);
}

/* Row-major CBLAS form of an operand: (r, c) at p[r*rs + c*cs], rows x
 * cols, which is the column-major cols x rows matrix with the strides
 * swapped. 0 when it is not a plain matrix. */
static int tt_blas_rm_operand(int64_t rows, int64_t cols, int64_t rs, int64_t cs, int *trans,
                              int *ld) {
  char t;
  if (!tt_blas_operand(cols, rows, cs, rs, &t, ld)) return 0;
  *trans = t == 'N' ? TT_CBLAS_NO_TRANS : TT_CBLAS_TRANS;
  return 1;
}

const float *tt_blas_packed_b(const tt_sgemm_args_t *g) {
  int tb, ldb;
  if (!g->b_key || !atomic_load(&tt_blas_compute_) || tt_packed_limit_() == 0 ||
      !tt_blas_accepts(g) || !tt_blas_rm_operand(g->k, g->n, g->rsb, g->csb, &tb, &ldb))
    return NULL;
  return tt_packed_get_(g, tb, ldb);
}

/* g through cblas_sgemm_compute on its packed B; 0 when it does not apply. */
static int tt_blas_sgemm_packed_(const tt_sgemm_args_t *g) {
  tt_compute_fn_t compute = atomic_load(&tt_blas_compute_);
  int ta, tb, lda, ldb;
  if (!g->b_packed || !compute || !tt_blas_rm_operand(g->m, g->k, g->rsa, g->csa, &ta, &lda) ||
      !tt_blas_rm_operand(g->k, g->n, g->rsb, g->csb, &tb, &ldb))
    return 0;
  compute(TT_CBLAS_ROW_MAJOR, ta, TT_CBLAS_PACKED, (int)g->m, (int)g->n, (int)g->k,
          (const float *)g->a, lda, g->b_packed, ldb, g->accumulate ? 1.0f : 0.0f, g->c,
          (int)g->ldc);
  atomic_fetch_add_explicit(&tt_blas_packed_calls_, 1, memory_order_relaxed);
  return 1;
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
  if (!tt_blas_sgemm_packed_(g)) {
    f(&c.tb, &c.ta, &c.m, &c.n, &c.k, &one, (const float *)g->b, &c.ldb,
      (const float *)g->a, &c.lda, &beta, g->c, &c.ldc);
  }
  atomic_fetch_add_explicit(&tt_blas_calls_, 1, memory_order_relaxed);
}
