/* Internal interface shared by the CPU kernels: view validation (view.c),
 * dtype conversion on load/store (dtype_access.c), the broadcasting index
 * iterator (broadcast.c), the scratch allocator (scratch.c), row max/min
 * (rowminmax.c), and the f32 GEMM entry point that conv2d reuses (gemm.c).
 * Nothing here is part of the public API; tests may include it to reach
 * internal variants. */
#ifndef TORCHTPU_KERNELS_KERNEL_UTIL_H_
#define TORCHTPU_KERNELS_KERNEL_UTIL_H_

#include <math.h>
#include <stdint.h>
#include <string.h>

#include "torchtpu/kernels.h"

/* Hot loops are compiled for AVX-512, AVX2 and baseline x86-64 and the
 * loader picks one at run time (the engine is built without -march): the
 * x86-64-v4 and -v3 levels, which include FMA ("avx512f" or "avx2" alone
 * do not), so fastmath.h's explicit fused multiply-adds are single
 * instructions. a * b + c written as such stays two operations (ISO C
 * mode: no contraction), as each op rounds in eager PyTorch. */
/* (Not under ThreadSanitizer: ifunc resolvers run before its runtime is
 * up and crash when instrumented.) */
#if defined(__GNUC__) && defined(__x86_64__) && !defined(__clang__) && \
    !defined(__SANITIZE_THREAD__)
#define TT_TARGET_CLONES \
  __attribute__((target_clones("arch=x86-64-v4", "arch=x86-64-v3", "default")))
#else
#define TT_TARGET_CLONES
#endif
#define TT_ALWAYS_INLINE inline __attribute__((always_inline))

#define TT_PI 3.14159265358979323846
#define TT_SQRT1_2 0.70710678118654752440

/* Elements processed per step by the blocked load/compute/store loops. */
#define TT_BLOCK 1024
/* Elements per tt_parallel_for chunk for elementwise work. */
#define TT_GRAIN 32768

/* What a dtype computes in (kernels.h "Arithmetic"). */
typedef enum tt_class_e {
  TT_CLASS_F32 = 0, /* F32, F16, BF16 */
  TT_CLASS_F64 = 1,
  TT_CLASS_INT = 2, /* integers and BOOL, in int64 */
} tt_class_t;

static inline tt_class_t tt_class_of(tt_dtype_t dt) {
  if (dt == TT_F32 || dt == TT_F16 || dt == TT_BF16) return TT_CLASS_F32;
  if (dt == TT_F64) return TT_CLASS_F64;
  return TT_CLASS_INT;
}

static inline int64_t tt_min64(int64_t a, int64_t b) { return a < b ? a : b; }
static inline int64_t tt_max64(int64_t a, int64_t b) { return a > b ? a : b; }

/* Checks that v is usable: known dtype, rank in [0, TT_MAX_RANK], dims >= 0,
 * data non-NULL when it has elements. `what` names the argument in the
 * message ("x", "out", ...). */
/* Scratch memory for kernels (padded planes, im2col columns, partial
 * sums): 64-byte aligned, and blocks of 16 KiB and more are kept for reuse
 * after tt_scratch_free (a fresh large malloc costs a page fault per 4 KiB
 * page written, every call). Thread-safe; NULL when out of memory. */
void *tt_scratch_alloc(size_t bytes);
void tt_scratch_free(void *p);

tt_status_t tt_check_view(const char *op, const char *what, const tt_view_t *v);
int64_t tt_view_numel(const tt_view_t *v);
/* Formats dims as "[2, 3]" into buf (at least 128 bytes); returns buf. */
const char *tt_dims_str(const tt_shape_t *s, char *buf, size_t size);
/* Contiguous row-major strides (in elements). */
void tt_contiguous_strides(const tt_shape_t *s, int64_t *strides);

/* Float -> integer as x86 PyTorch does it: truncate toward zero; NaN and
 * out-of-range values become the minimum of the 32- or 64-bit type (what
 * cvttss2si produces), narrower types go through int32 then wrap. */
static inline int64_t tt_f64_to_i64_trunc(double v) {
  if (!(v >= -9223372036854775808.0 && v < 9223372036854775808.0))
    return INT64_MIN;
  return (int64_t)v;
}
static inline int32_t tt_f64_to_i32_trunc(double v) {
  if (!(v > -2147483649.0 && v < 2147483648.0)) return INT32_MIN;
  return (int32_t)v;
}

/* Scalar element access, converting to/from the compute types. */
double tt_get_f64(const void *data, tt_dtype_t dt, int64_t i);
int64_t tt_get_i64(const void *data, tt_dtype_t dt, int64_t i);
void tt_set_f64(void *data, tt_dtype_t dt, int64_t i, double v);
void tt_set_i64(void *data, tt_dtype_t dt, int64_t i, int64_t v);

/* Block conversions: n elements starting at element `off`, `stride`
 * elements apart (0 = the same element repeated), into a dense buffer of
 * the compute type; and back, from a dense buffer into dst at dst[off..]. */
void tt_load_f32(const void *src, tt_dtype_t dt, int64_t off, int64_t stride,
                 int64_t n, float *dst);
void tt_load_f64(const void *src, tt_dtype_t dt, int64_t off, int64_t stride,
                 int64_t n, double *dst);
void tt_load_i64(const void *src, tt_dtype_t dt, int64_t off, int64_t stride,
                 int64_t n, int64_t *dst);
void tt_store_f32(const float *src, int64_t n, void *dst, tt_dtype_t dt,
                  int64_t off);
void tt_store_f64(const double *src, int64_t n, void *dst, tt_dtype_t dt,
                  int64_t off);
void tt_store_i64(const int64_t *src, int64_t n, void *dst, tt_dtype_t dt,
                  int64_t off);

/* ---- broadcasting iterator -------------------------------------------
 * Operand 0 is the (contiguous) output; operands 1.. are inputs
 * right-aligned against it. Dims of size 1 in the output are dropped and
 * adjacent dims merged where every operand allows, so a same-shape
 * elementwise op becomes rank 1 with unit strides. */
#define TT_ITER_MAX_OPS 4
typedef struct tt_iter_s {
  int rank; /* >= 1 */
  int nops;
  int64_t dims[TT_MAX_RANK];
  int64_t strides[TT_ITER_MAX_OPS][TT_MAX_RANK]; /* elements; 0 = broadcast */
} tt_iter_t;

typedef struct tt_iter_pos_s {
  int64_t idx[TT_MAX_RANK];
  int64_t off[TT_ITER_MAX_OPS];
} tt_iter_pos_t;

/* Builds the iterator; fails with TT_INVALID_ARGUMENT naming the shapes if
 * an input does not broadcast to out. */
tt_status_t tt_iter_init(const char *op, const tt_shape_t *out,
                         const tt_view_t *const *inputs, int ninputs,
                         tt_iter_t *it);
/* Positions pos at flat output index `flat`. */
void tt_iter_seek(const tt_iter_t *it, int64_t flat, tt_iter_pos_t *pos);
/* Elements left in the innermost dim from pos. */
static inline int64_t tt_iter_inner_left(const tt_iter_t *it,
                                         const tt_iter_pos_t *pos) {
  return it->dims[it->rank - 1] - pos->idx[it->rank - 1];
}
/* Advances pos by n elements (n <= tt_iter_inner_left). */
void tt_iter_advance(const tt_iter_t *it, tt_iter_pos_t *pos, int64_t n);

/* ---- f32 GEMM (gemm.c) -------------------------------------------------
 * c[i*ldc + j] = (accumulate ? c[...] : 0) + sum_k A(i,k) * B(k,j) with
 * A(i,k) = a[i*rsa + k*csa] and B(k,j) = b[k*rsb + j*csb]. a and b may be
 * F32, F16 or BF16 (widened while packing); c is f32. `parallel` lets it
 * split the work over the thread pool.
 *
 * Instead of b, a caller may supply pack_b, which writes one packed panel
 * of an implicit B (im2col for convolutions): B(k0 + k, j0 + j) into
 * dst[k*nr + j] for k < kc, j < w, and zeros for w <= j < nr. It is called
 * concurrently from several threads for different panels. */
#define TT_GEMM_KC_MAX 512   /* largest kc a pack_b callback receives */
#define TT_GEMM_PANEL_MAX 32 /* largest nr (panel width) */
typedef void (*tt_pack_b_fn_t)(const void *ctx, int64_t k0, int64_t kc,
                               int64_t j0, int64_t w, int nr, float *dst);

typedef struct tt_sgemm_args_s {
  int64_t m, n, k;
  const void *a;
  tt_dtype_t a_dtype;
  int64_t rsa, csa;
  const void *b;
  tt_dtype_t b_dtype;
  int64_t rsb, csb;
  float *c;
  int64_t ldc;
  int accumulate;
  tt_pack_b_fn_t pack_b; /* optional; replaces b/b_dtype/rsb/csb */
  const void *pack_b_ctx;
  uint64_t b_key; /* nonzero: b's bytes never change under this key (blas_ext.c) */
  const float *b_packed; /* set by gemm.c: b in MKL's packed layout (tt_blas_packed_b) */
} tt_sgemm_args_t;

tt_status_t tt_sgemm(const tt_sgemm_args_t *args, int parallel);

/* External f32 GEMM (blas_ext.c): whether the installed library takes g
 * (a plain f32 product of at least TT_BLAS_MIN_FLOPS), and running it
 * there with that many threads. */
#define TT_BLAS_MIN_FLOPS 4e6
int tt_blas_accepts(const tt_sgemm_args_t *g);
void tt_blas_sgemm(const tt_sgemm_args_t *g, int threads);
/* The packed copy of a keyed B for product g (whole, before it is split;
 * each call is one use), or NULL: plain calls. */
const float *tt_blas_packed_b(const tt_sgemm_args_t *g);
/* Whether the calling thread runs inside a tt_parallel_for chunk. */
int tt_in_parallel_region(void);

/* Micro-kernel variants, for tests and benchmarks: TT_SGEMM_ISA_AUTO picks
 * the best the CPU supports. tt_sgemm_force_isa returns 0 if the CPU
 * cannot run the requested variant (the setting is then unchanged). */
typedef enum tt_sgemm_isa_e {
  TT_SGEMM_ISA_AUTO = 0,
  TT_SGEMM_ISA_GENERIC = 1,
  TT_SGEMM_ISA_AVX2 = 2,
  TT_SGEMM_ISA_AVX512 = 3,
} tt_sgemm_isa_t;
int tt_sgemm_force_isa(tt_sgemm_isa_t isa);
const char *tt_sgemm_isa_name(void);

/* One Philox-4x32-10 block (rng.c), for the known-answer test. */
void tt_philox4x32_10_for_test(const uint32_t ctr[4], const uint32_t key[2],
                               uint32_t out[4]);

/* Max (want_max) or min of a contiguous f32 row; NaN if any element is
 * (rowminmax.c). Explicit AVX-512 / AVX2 loops picked at run time: gcc
 * vectorises no form of a NaN-propagating select loop (the plain-array
 * version ran scalar in every clone, 3 GB/s). */
float tt_row_minmax_f32(const float *x, int64_t n, int want_max);
/* The same through one variant (AVX-512, AVX2, or GENERIC = scalar; one
 * the CPU lacks runs the scalar loop; AUTO = the best), for the tests. */
float tt_row_minmax_f32_isa(const float *x, int64_t n, int want_max, tt_sgemm_isa_t isa);

/* Sum of a contiguous f32 row (of a[i] * b[i] when b is given) in 16
 * independent lanes, as plain float arrays that gcc vectorises for
 * whichever ISA the calling clone targets (a plain `sum += x` loop is one
 * serial chain under ISO float rules and runs scalar). The lanes fold by
 * halving: 4 dependent adds, not 16. Softmax rows and attention rows. */
#define TT_ROW_LANES 16
static TT_ALWAYS_INLINE float tt_row_lanes_fold(float *acc) {
  for (int l = 0; l < 8; ++l) acc[l] += acc[l + 8];
  for (int l = 0; l < 4; ++l) acc[l] += acc[l + 4];
  return (acc[0] + acc[2]) + (acc[1] + acc[3]);
}
static TT_ALWAYS_INLINE float tt_row_sum_f32(const float *a, const float *b, int64_t n) {
  float acc[TT_ROW_LANES] = {0};
  int64_t i = 0;
  for (; i + TT_ROW_LANES <= n; i += TT_ROW_LANES) {
    if (b) {
      for (int l = 0; l < TT_ROW_LANES; ++l) acc[l] += a[i + l] * b[i + l];
    } else {
      for (int l = 0; l < TT_ROW_LANES; ++l) acc[l] += a[i + l];
    }
  }
  float sum = tt_row_lanes_fold(acc);
  for (; i < n; ++i) sum += b ? a[i] * b[i] : a[i];
  return sum;
}

#include "kernels/fastmath.h"

#endif /* TORCHTPU_KERNELS_KERNEL_UTIL_H_ */
