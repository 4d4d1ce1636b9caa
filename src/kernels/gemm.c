/* Matrix products: the packed, cache-blocked f32 GEMM (tt_sgemm) and the
 * batched tt_kernel_dot built on it.
 *
 * f32 GEMM, BLIS style, with the roles of A and B swapped because C is
 * row-major and vectors run along N:
 *
 *   for jc over N in blocks of NC:
 *     for pc over K in blocks of KC:
 *       pack B[pc:pc+KC, jc:jc+NC] into NR-wide panels    (L2/L3 resident)
 *       for ib over M in blocks of MB (48 rows):
 *         pack A[ib:ib+MB, pc:pc+KC] into MR-tall panels      (L2 resident)
 *         for ic over the block in steps of MR:
 *           for jr over NC in steps of NR:
 *             micro-kernel: C[ic:ic+MR, jc+jr:+NR] (+)= Apanel * Bpanel
 *
 * (A column-major A, a weight gradient's x^T, is packed whole for each
 * (jc, pc) instead, one pass over its source rows: tt_gemm_a_whole. An
 * f32 A whose panels the AVX-512 kernel can read in place, row- or
 * column-major, is not packed at all: tt_gemm_direct_a.)
 *
 * Micro-kernel contract: given kc >= 1, a packed A panel (MR floats per k)
 * and a packed B panel (NR floats per k, 64-byte aligned), compute the full
 * MR x NR tile and store it to c with row stride ldc, adding to what is
 * there when `accumulate` is set. Packing pads partial panels with zeros,
 * so edge tiles run the same kernel into a scratch tile that is then
 * clipped. Variants: AVX-512 12x32, AVX2+FMA 6x16, portable C 4x8; the
 * best the CPU supports is picked at run time.
 *
 * Packing reads A and B through (row stride, column stride) pairs, so
 * transposed operands cost nothing extra, and widens F16/BF16 to f32.
 *
 * Parallelism: a large GEMM packs each B block once into a shared buffer
 * (in parallel) and then spreads (A panel, B panel group) items over the
 * pool; a batch of many or small GEMMs runs whole problems in parallel,
 * each with its own packing buffers.
 *
 * F64 and integer products use plain row-times-matrix loops (f64 / int64
 * accumulation), parallel over output rows.
 */
#include <immintrin.h>
#include <pthread.h>
#include <stdlib.h>

#include "kernels/kernel_util.h"

#define TT_GEMM_KC TT_GEMM_KC_MAX
#define TT_GEMM_NC 512
#define TT_GEMM_MR_MAX 12
/* Rows of A packed together (a multiple of every kernel's MR): packing
 * a column-major A (a weight gradient's x^T) one MR panel at a time read
 * MR floats of a new cache line, and page, per k; 48 rows read three
 * whole lines per k (docs/kernels.md). */
#define TT_GEMM_MB 48
#define TT_GEMM_NR_MAX TT_GEMM_PANEL_MAX

typedef void (*tt_ukr_fn_t)(int64_t kc, const float *a, const float *b,
                            float *c, int64_t ldc, int accumulate);

/* The same contract with A read in place instead of from a packed panel:
 * rowa, row i of the tile at a + i * lda, k contiguous; cola, step k's
 * MR floats at a + k * lda. */
typedef void (*tt_ukr_inplace_fn_t)(int64_t kc, const float *a, int64_t lda,
                                    const float *b, float *c, int64_t ldc, int accumulate);

typedef struct tt_ukr_s {
  int mr, nr;
  tt_ukr_fn_t fn;
  const char *name;
  tt_ukr_inplace_fn_t rowa; /* NULL: every A is packed */
  tt_ukr_inplace_fn_t cola; /* column-major A in place (lda: k stride); NULL: packed */
} tt_ukr_t;

/* ---- micro-kernels ------------------------------------------------------ */

static void tt_ukr_generic_4x8(int64_t kc, const float *a, const float *b,
                               float *c, int64_t ldc, int accumulate) {
  /* 4 x 8 keeps the accumulators in eight SSE registers on baseline x86-64. */
  float acc[4][8] = {{0}};
  for (int64_t k = 0; k < kc; ++k) {
    for (int i = 0; i < 4; ++i) {
      float av = a[k * 4 + i];
      for (int j = 0; j < 8; ++j) acc[i][j] += av * b[k * 8 + j];
    }
  }
  for (int i = 0; i < 4; ++i) {
    for (int j = 0; j < 8; ++j) {
      c[i * ldc + j] = accumulate ? c[i * ldc + j] + acc[i][j] : acc[i][j];
    }
  }
}

#if defined(__x86_64__) && defined(__GNUC__)
#define TT_HAVE_X86_UKR 1

__attribute__((target("avx2,fma"))) static void tt_ukr_avx2_6x16(
    int64_t kc, const float *a, const float *b, float *c, int64_t ldc,
    int accumulate) {
  __m256 c00 = _mm256_setzero_ps(), c01 = _mm256_setzero_ps();
  __m256 c10 = _mm256_setzero_ps(), c11 = _mm256_setzero_ps();
  __m256 c20 = _mm256_setzero_ps(), c21 = _mm256_setzero_ps();
  __m256 c30 = _mm256_setzero_ps(), c31 = _mm256_setzero_ps();
  __m256 c40 = _mm256_setzero_ps(), c41 = _mm256_setzero_ps();
  __m256 c50 = _mm256_setzero_ps(), c51 = _mm256_setzero_ps();
  /* Four k steps per trip: with one step, the loop's pointer updates and
   * branch cost ~10% of the FMA rate on Zen 3 (hot in L1: 72-77 -> 80-85
   * GFLOP/s; docs/kernels.md). The B panel is 64-byte aligned. */
  __m256 b0, b1, av;
#define TT_ROW(i, u)                             \
  av = _mm256_broadcast_ss(a + 6 * (u) + (i));   \
  c##i##0 = _mm256_fmadd_ps(av, b0, c##i##0);    \
  c##i##1 = _mm256_fmadd_ps(av, b1, c##i##1);
#define TT_STEP(u)                               \
  b0 = _mm256_load_ps(b + 16 * (u));             \
  b1 = _mm256_load_ps(b + 16 * (u) + 8);         \
  TT_ROW(0, u) TT_ROW(1, u) TT_ROW(2, u) TT_ROW(3, u) TT_ROW(4, u) TT_ROW(5, u)
  int64_t k = 0;
  for (; k + 4 <= kc; k += 4) {
    TT_STEP(0) TT_STEP(1) TT_STEP(2) TT_STEP(3)
    a += 24;
    b += 64;
  }
  for (; k < kc; ++k) {
    TT_STEP(0)
    a += 6;
    b += 16;
  }
#undef TT_STEP
#undef TT_ROW
#define TT_STORE(i)                                                    \
  if (accumulate) {                                                    \
    c##i##0 = _mm256_add_ps(c##i##0, _mm256_loadu_ps(c + i * ldc));    \
    c##i##1 = _mm256_add_ps(c##i##1, _mm256_loadu_ps(c + i * ldc + 8)); \
  }                                                                    \
  _mm256_storeu_ps(c + i * ldc, c##i##0);                              \
  _mm256_storeu_ps(c + i * ldc + 8, c##i##1);
  TT_STORE(0) TT_STORE(1) TT_STORE(2) TT_STORE(3) TT_STORE(4) TT_STORE(5)
#undef TT_STORE
}

/* The 12 x 32 tile, C (+)= A B over kc steps. A is read one of two ways
 * (rows, a compile-time constant in each caller): from a panel or column
 * whose 12 floats of step k lie at a + k * lda (packed: lda 12), or in
 * place by rows, row i of the tile at a + i * lda with k contiguous. */
__attribute__((target("avx512f,fma"))) static TT_ALWAYS_INLINE void tt_ukr_avx512_12x32_body(
    int64_t kc, const float *a, int64_t lda, const int rows, const float *b, float *c,
    int64_t ldc, int accumulate) {
  /* By rows: three base pointers and 0, lda, 2 lda, 3 lda as indices. */
  const float *a0 = a, *a4 = a + 4 * lda, *a8 = a + 8 * lda;
  const int64_t l2 = 2 * lda, l3 = 3 * lda;
  __m512 c00 = _mm512_setzero_ps(), c01 = _mm512_setzero_ps();
  __m512 c10 = _mm512_setzero_ps(), c11 = _mm512_setzero_ps();
  __m512 c20 = _mm512_setzero_ps(), c21 = _mm512_setzero_ps();
  __m512 c30 = _mm512_setzero_ps(), c31 = _mm512_setzero_ps();
  __m512 c40 = _mm512_setzero_ps(), c41 = _mm512_setzero_ps();
  __m512 c50 = _mm512_setzero_ps(), c51 = _mm512_setzero_ps();
  __m512 c60 = _mm512_setzero_ps(), c61 = _mm512_setzero_ps();
  __m512 c70 = _mm512_setzero_ps(), c71 = _mm512_setzero_ps();
  __m512 c80 = _mm512_setzero_ps(), c81 = _mm512_setzero_ps();
  __m512 c90 = _mm512_setzero_ps(), c91 = _mm512_setzero_ps();
  __m512 c100 = _mm512_setzero_ps(), c101 = _mm512_setzero_ps();
  __m512 c110 = _mm512_setzero_ps(), c111 = _mm512_setzero_ps();
  for (int64_t k = 0; k < kc; ++k) {
    __m512 b0 = _mm512_loadu_ps(b), b1 = _mm512_loadu_ps(b + 16);
    __m512 av;
#define TT_ROW(i, base, off)                            \
  av = _mm512_set1_ps(rows ? (base)[off] : a[i]);       \
  c##i##0 = _mm512_fmadd_ps(av, b0, c##i##0);           \
  c##i##1 = _mm512_fmadd_ps(av, b1, c##i##1);
    TT_ROW(0, a0, 0) TT_ROW(1, a0, lda) TT_ROW(2, a0, l2) TT_ROW(3, a0, l3)
    TT_ROW(4, a4, 0) TT_ROW(5, a4, lda) TT_ROW(6, a4, l2) TT_ROW(7, a4, l3)
    TT_ROW(8, a8, 0) TT_ROW(9, a8, lda) TT_ROW(10, a8, l2) TT_ROW(11, a8, l3)
#undef TT_ROW
    if (rows) {
      ++a0;
      ++a4;
      ++a8;
    } else {
      a += lda;
    }
    b += 32;
  }
#define TT_STORE(i)                                                       \
  if (accumulate) {                                                       \
    c##i##0 = _mm512_add_ps(c##i##0, _mm512_loadu_ps(c + i * ldc));       \
    c##i##1 = _mm512_add_ps(c##i##1, _mm512_loadu_ps(c + i * ldc + 16));  \
  }                                                                       \
  _mm512_storeu_ps(c + i * ldc, c##i##0);                                 \
  _mm512_storeu_ps(c + i * ldc + 16, c##i##1);
  TT_STORE(0) TT_STORE(1) TT_STORE(2) TT_STORE(3) TT_STORE(4) TT_STORE(5)
  TT_STORE(6) TT_STORE(7) TT_STORE(8) TT_STORE(9) TT_STORE(10) TT_STORE(11)
#undef TT_STORE
}

__attribute__((target("avx512f,fma"))) static void tt_ukr_avx512_12x32(
    int64_t kc, const float *a, const float *b, float *c, int64_t ldc,
    int accumulate) {
  tt_ukr_avx512_12x32_body(kc, a, 12, 0, b, c, ldc, accumulate);
}

/* The same tile with a column-major A read in place: the tile's 12 floats
 * of step k at a + k * lda (a weight gradient's x^T). */
__attribute__((target("avx512f,fma"))) static void tt_ukr_avx512_12x32_cola(
    int64_t kc, const float *a, int64_t lda, const float *b, float *c, int64_t ldc,
    int accumulate) {
  tt_ukr_avx512_12x32_body(kc, a, lda, 0, b, c, ldc, accumulate);
}

/* The same tile with a row-major A read in place: row i of the tile at
 * a + i * lda, k contiguous (x W^T, g W). */
__attribute__((target("avx512f,fma"))) static void tt_ukr_avx512_12x32_rowa(
    int64_t kc, const float *a, int64_t lda, const float *b, float *c, int64_t ldc,
    int accumulate) {
  tt_ukr_avx512_12x32_body(kc, a, lda, 1, b, c, ldc, accumulate);
}
#endif

static const tt_ukr_t tt_ukr_generic_ = {4, 8, tt_ukr_generic_4x8, "generic", NULL, NULL};
#ifdef TT_HAVE_X86_UKR
static const tt_ukr_t tt_ukr_avx2_ = {6, 16, tt_ukr_avx2_6x16, "avx2", NULL, NULL};
static const tt_ukr_t tt_ukr_avx512_ = {12, 32, tt_ukr_avx512_12x32, "avx512",
                                        tt_ukr_avx512_12x32_rowa, tt_ukr_avx512_12x32_cola};
#endif

static _Atomic int tt_sgemm_forced_ = TT_SGEMM_ISA_AUTO;

static int tt_cpu_has_(tt_sgemm_isa_t isa) {
#ifdef TT_HAVE_X86_UKR
  __builtin_cpu_init();
  if (isa == TT_SGEMM_ISA_AVX512) return __builtin_cpu_supports("avx512f");
  if (isa == TT_SGEMM_ISA_AVX2) {
    return __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma");
  }
#endif
  return isa == TT_SGEMM_ISA_GENERIC || isa == TT_SGEMM_ISA_AUTO;
}

int tt_sgemm_force_isa(tt_sgemm_isa_t isa) {
  if (!tt_cpu_has_(isa)) return 0;
  tt_sgemm_forced_ = isa;
  return 1;
}

static const tt_ukr_t *tt_ukr_select_(void) {
  tt_sgemm_isa_t isa = (tt_sgemm_isa_t)tt_sgemm_forced_;
#ifdef TT_HAVE_X86_UKR
  if (isa == TT_SGEMM_ISA_AUTO) {
    isa = tt_cpu_has_(TT_SGEMM_ISA_AVX512) ? TT_SGEMM_ISA_AVX512
          : tt_cpu_has_(TT_SGEMM_ISA_AVX2) ? TT_SGEMM_ISA_AVX2
                                           : TT_SGEMM_ISA_GENERIC;
  }
  if (isa == TT_SGEMM_ISA_AVX512) return &tt_ukr_avx512_;
  if (isa == TT_SGEMM_ISA_AVX2) return &tt_ukr_avx2_;
#else
  (void)isa;
#endif
  return &tt_ukr_generic_;
}

const char *tt_sgemm_isa_name(void) { return tt_ukr_select_()->name; }

/* ---- packing ------------------------------------------------------------ */

static TT_ALWAYS_INLINE float tt_gemm_ld(const void *p, tt_dtype_t dt,
                                         int64_t i) {
  if (dt == TT_F32) return ((const float *)p)[i];
  if (dt == TT_F16) return tt_f16_to_f32(((const uint16_t *)p)[i]);
  return tt_bf16_to_f32(((const uint16_t *)p)[i]);
}

#ifdef TT_HAVE_X86_UKR
/* In-register transpose of a 16x16 f32 block: r[i] holds row i on entry
 * and column i on exit (unpack pairs, 4x4 within 128-bit lanes, then the
 * lanes across row groups). */
__attribute__((target("avx512f"))) static inline void tt_transpose16_avx512(__m512 r[16]) {
  __m512 t[16], u[16];
  for (int i = 0; i < 8; ++i) {
    t[2 * i] = _mm512_unpacklo_ps(r[2 * i], r[2 * i + 1]);
    t[2 * i + 1] = _mm512_unpackhi_ps(r[2 * i], r[2 * i + 1]);
  }
  for (int i = 0; i < 4; ++i) {
    u[4 * i + 0] = _mm512_shuffle_ps(t[4 * i], t[4 * i + 2], 0x44);
    u[4 * i + 1] = _mm512_shuffle_ps(t[4 * i], t[4 * i + 2], 0xEE);
    u[4 * i + 2] = _mm512_shuffle_ps(t[4 * i + 1], t[4 * i + 3], 0x44);
    u[4 * i + 3] = _mm512_shuffle_ps(t[4 * i + 1], t[4 * i + 3], 0xEE);
  }
  /* u[4g + c]: lane L holds column 4L + c of rows 4g..4g+3. */
  for (int c = 0; c < 4; ++c) {
    __m512 a0 = _mm512_shuffle_f32x4(u[c], u[4 + c], 0x88);      /* lanes 0,2 */
    __m512 a1 = _mm512_shuffle_f32x4(u[c], u[4 + c], 0xDD);      /* lanes 1,3 */
    __m512 b0 = _mm512_shuffle_f32x4(u[8 + c], u[12 + c], 0x88);
    __m512 b1 = _mm512_shuffle_f32x4(u[8 + c], u[12 + c], 0xDD);
    r[c] = _mm512_shuffle_f32x4(a0, b0, 0x88);
    r[8 + c] = _mm512_shuffle_f32x4(a0, b0, 0xDD);
    r[4 + c] = _mm512_shuffle_f32x4(a1, b1, 0x88);
    r[12 + c] = _mm512_shuffle_f32x4(a1, b1, 0xDD);
  }
}

/* A transposed f32 B panel (k contiguous in memory: each panel column is
 * a stored row) for the AVX-512 kernel (NR 32): 16x16 blocks are loaded a
 * cache line per row, transposed in registers and stored a panel row per
 * k. Columns at or past w are zero. */
__attribute__((target("avx512f"))) static void tt_pack_bt_f32_avx512(
    const float *b, int64_t csb, int64_t kc, int64_t w, float *panel) {
  const int nr = 32;
  for (int j0 = 0; j0 < nr; j0 += 16) {
    int64_t jw = w - j0;
    if (jw > 16) jw = 16;
    for (int64_t k0 = 0; k0 < kc; k0 += 16) {
      int64_t kw = kc - k0 < 16 ? kc - k0 : 16;
      __mmask16 km = kw == 16 ? (__mmask16)0xFFFF : (__mmask16)((1u << kw) - 1u);
      __m512 r[16];
      for (int j = 0; j < 16; ++j) {
        r[j] = j < jw ? _mm512_maskz_loadu_ps(km, b + (j0 + j) * csb + k0)
                      : _mm512_setzero_ps();
      }
      tt_transpose16_avx512(r);
      for (int64_t kk = 0; kk < kw; ++kk) _mm512_storeu_ps(panel + (k0 + kk) * nr + j0, r[kk]);
    }
  }
}

/* A row-major f32 A panel for the AVX-512 kernel (MR 12): 16 k of each of
 * the 12 rows are loaded as vectors, transposed with four zero rows, and
 * each k's 12 values stored at once. Rows at or past mr are zero. */
__attribute__((target("avx512f"))) static void tt_pack_a_f32_avx512(
    const float *a, int64_t rsa, int64_t mr, int64_t kc, float *dst) {
  const int MR = 12;
  for (int64_t k0 = 0; k0 < kc; k0 += 16) {
    int64_t kw = kc - k0 < 16 ? kc - k0 : 16;
    __mmask16 km = kw == 16 ? (__mmask16)0xFFFF : (__mmask16)((1u << kw) - 1u);
    __m512 r[16];
    for (int i = 0; i < 16; ++i)
      r[i] = i < mr ? _mm512_maskz_loadu_ps(km, a + i * rsa + k0) : _mm512_setzero_ps();
    tt_transpose16_avx512(r);
    for (int64_t kk = 0; kk < kw; ++kk)
      _mm512_mask_storeu_ps(dst + (k0 + kk) * MR, (__mmask16)0x0FFF, r[kk]);
  }
}

#endif

#ifdef TT_HAVE_X86_UKR
/* The AVX2 kernel's (MR 6, NR 16) forms of the packing above, over 8x8
 * blocks: rows of A, and the stored rows of a transposed B, are loaded 8 k
 * at a time, transposed in registers and stored a k at a time. */
__attribute__((target("avx2"))) static inline void tt_transpose8_avx2(__m256 r[8]) {
  __m256 t[8], u[8];
  for (int i = 0; i < 4; ++i) {
    t[2 * i] = _mm256_unpacklo_ps(r[2 * i], r[2 * i + 1]);
    t[2 * i + 1] = _mm256_unpackhi_ps(r[2 * i], r[2 * i + 1]);
  }
  for (int i = 0; i < 2; ++i) {
    u[4 * i + 0] = _mm256_shuffle_ps(t[4 * i], t[4 * i + 2], 0x44);
    u[4 * i + 1] = _mm256_shuffle_ps(t[4 * i], t[4 * i + 2], 0xEE);
    u[4 * i + 2] = _mm256_shuffle_ps(t[4 * i + 1], t[4 * i + 3], 0x44);
    u[4 * i + 3] = _mm256_shuffle_ps(t[4 * i + 1], t[4 * i + 3], 0xEE);
  }
  /* u[4g + c]: lane L holds column 4L + c of rows 4g..4g+3. */
  for (int c = 0; c < 4; ++c) {
    r[c] = _mm256_permute2f128_ps(u[c], u[4 + c], 0x20);
    r[4 + c] = _mm256_permute2f128_ps(u[c], u[4 + c], 0x31);
  }
}

/* Lanes below n set (0 <= n <= 8), for maskload. */
__attribute__((target("avx2"))) static inline __m256i tt_mask8_avx2(int64_t n) {
  return _mm256_cmpgt_epi32(_mm256_set1_epi32((int)n), _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7));
}

/* A row-major f32 A panel for the AVX2 kernel (MR 6); rows at or past mr
 * are zero. Each k's 6 values are one 4-wide and one 2-wide store. */
__attribute__((target("avx2"))) static void tt_pack_a_f32_avx2(
    const float *a, int64_t rsa, int64_t mr, int64_t kc, float *dst) {
  const int MR = 6;
  for (int64_t k0 = 0; k0 < kc; k0 += 8) {
    int64_t kw = kc - k0 < 8 ? kc - k0 : 8;
    __m256i km = tt_mask8_avx2(kw);
    __m256 r[8];
    for (int i = 0; i < 8; ++i) {
      r[i] = i < mr ? (kw == 8 ? _mm256_loadu_ps(a + i * rsa + k0)
                               : _mm256_maskload_ps(a + i * rsa + k0, km))
                    : _mm256_setzero_ps();
    }
    tt_transpose8_avx2(r);
    for (int64_t kk = 0; kk < kw; ++kk) {
      float *d = dst + (k0 + kk) * MR;
      _mm_storeu_ps(d, _mm256_castps256_ps128(r[kk]));
      _mm_storel_pi((__m64 *)(d + 4), _mm256_extractf128_ps(r[kk], 1));
    }
  }
}

/* A transposed f32 B panel for the AVX2 kernel (NR 16); columns at or
 * past w are zero. */
__attribute__((target("avx2"))) static void tt_pack_bt_f32_avx2(
    const float *b, int64_t csb, int64_t kc, int64_t w, float *panel) {
  const int nr = 16;
  for (int j0 = 0; j0 < nr; j0 += 8) {
    int64_t jw = w - j0;
    if (jw > 8) jw = 8;
    for (int64_t k0 = 0; k0 < kc; k0 += 8) {
      int64_t kw = kc - k0 < 8 ? kc - k0 : 8;
      __m256i km = tt_mask8_avx2(kw);
      __m256 r[8];
      for (int j = 0; j < 8; ++j) {
        const float *src = b + (j0 + j) * csb + k0;
        r[j] = j < jw ? (kw == 8 ? _mm256_loadu_ps(src) : _mm256_maskload_ps(src, km))
                      : _mm256_setzero_ps();
      }
      tt_transpose8_avx2(r);
      for (int64_t kk = 0; kk < kw; ++kk) _mm256_storeu_ps(panel + (k0 + kk) * nr + j0, r[kk]);
    }
  }
}
#endif

/* Packs B(pc.., jc..) (kc x nc) into NR-wide panels, zero-padding the last. */
static TT_ALWAYS_INLINE void tt_pack_b_body(const tt_sgemm_args_t *g,
                                            tt_dtype_t dt, int64_t pc,
                                            int64_t kc, int64_t jc, int64_t nc,
                                            int nr, float *dst) {
  if (g->csb == 1) {
    /* Row-major B: read each source row once, front to back, and deal it
     * out to the panels (reading down a column of panels would touch a
     * new, unprefetched line every row). */
    for (int64_t k = 0; k < kc; ++k) {
      int64_t row = (pc + k) * g->rsb + jc;
      for (int64_t j0 = 0; j0 < nc; j0 += nr) {
        int64_t w = tt_min64(nr, nc - j0);
        float *d = dst + j0 * kc + k * nr;
        if (dt == TT_F32 && w == nr) {
          /* Constant sizes, so the copies are inlined (a memcpy call per
           * 64 bytes cost ~5% of a 1024^3 product). */
          const float *s = (const float *)g->b + row + j0;
          if (nr == 16) {
            memcpy(d, s, 16 * sizeof(float));
          } else if (nr == 32) {
            memcpy(d, s, 32 * sizeof(float));
          } else {
            memcpy(d, s, (size_t)nr * sizeof(float));
          }
          continue;
        }
        for (int64_t j = 0; j < w; ++j) d[j] = tt_gemm_ld(g->b, dt, row + j0 + j);
        for (int64_t j = w; j < nr; ++j) d[j] = 0.0f;
      }
    }
    return;
  }
  for (int64_t j0 = 0; j0 < nc; j0 += nr) {
    int64_t w = tt_min64(nr, nc - j0);
    float *panel = dst + j0 * kc;
    const int64_t base = pc * g->rsb + (jc + j0) * g->csb;
#ifdef TT_HAVE_X86_UKR
    if (dt == TT_F32 && nr == 32 && g->rsb == 1) { /* NR 32: only the AVX-512 kernel */
      tt_pack_bt_f32_avx512((const float *)g->b + base, g->csb, kc, w, panel);
      continue;
    }
    if (dt == TT_F32 && nr == 16 && g->rsb == 1) { /* NR 16: the AVX2 kernel */
      tt_pack_bt_f32_avx2((const float *)g->b + base, g->csb, kc, w, panel);
      continue;
    }
#endif
    {
      /* Column-major (transposed) B: transpose in blocks of 16 k so the
       * panel rows being written stay in L1. */
      for (int64_t k0 = 0; k0 < kc; k0 += 16) {
        int64_t k1 = tt_min64(kc, k0 + 16);
        for (int64_t j = 0; j < w; ++j) {
          int64_t col = base + j * g->csb;
          for (int64_t k = k0; k < k1; ++k) {
            panel[k * nr + j] = tt_gemm_ld(g->b, dt, col + k * g->rsb);
          }
        }
      }
      if (w < nr) {
        for (int64_t k = 0; k < kc; ++k) {
          for (int64_t j = w; j < nr; ++j) panel[k * nr + j] = 0.0f;
        }
      }
    }
  }
}

static void tt_pack_b(const tt_sgemm_args_t *g, int64_t pc, int64_t kc,
                      int64_t jc, int64_t nc, int nr, float *dst) {
  if (g->pack_b) {
    for (int64_t j0 = 0; j0 < nc; j0 += nr) {
      g->pack_b(g->pack_b_ctx, pc, kc, jc + j0, tt_min64(nr, nc - j0), nr, dst + j0 * kc);
    }
    return;
  }
  switch (g->b_dtype) {
    case TT_F32: tt_pack_b_body(g, TT_F32, pc, kc, jc, nc, nr, dst); break;
    case TT_F16: tt_pack_b_body(g, TT_F16, pc, kc, jc, nc, nr, dst); break;
    default: tt_pack_b_body(g, TT_BF16, pc, kc, jc, nc, nr, dst); break;
  }
}

/* Packs A(ic.., pc..) (mr x kc) into one MR-tall panel. */
static TT_ALWAYS_INLINE void tt_pack_a_body(const tt_sgemm_args_t *g,
                                            tt_dtype_t dt, int64_t ic,
                                            int64_t mr, int64_t pc, int64_t kc,
                                            int MR, float *dst) {
  const int64_t base = ic * g->rsa + pc * g->csa;
#ifdef TT_HAVE_X86_UKR
  if (dt == TT_F32 && MR == 12 && g->csa == 1) { /* MR 12: only the AVX-512 kernel */
    tt_pack_a_f32_avx512((const float *)g->a + base, g->rsa, mr, kc, dst);
    return;
  }
  if (dt == TT_F32 && MR == 6 && g->csa == 1) { /* MR 6: the AVX2 kernel */
    tt_pack_a_f32_avx2((const float *)g->a + base, g->rsa, mr, kc, dst);
    return;
  }
#endif
  if (g->rsa == 1 && mr == MR) {
    for (int64_t k = 0; k < kc; ++k) {
      int64_t col = base + k * g->csa;
      for (int i = 0; i < MR; ++i) dst[k * MR + i] = tt_gemm_ld(g->a, dt, col + i);
    }
    return;
  }
  for (int64_t i = 0; i < mr; ++i) {
    int64_t row = base + i * g->rsa;
    for (int64_t k = 0; k < kc; ++k) {
      dst[k * MR + i] = tt_gemm_ld(g->a, dt, row + k * g->csa);
    }
  }
  for (int64_t i = mr; i < MR; ++i) {
    for (int64_t k = 0; k < kc; ++k) dst[k * MR + i] = 0.0f;
  }
}

static void tt_pack_a(const tt_sgemm_args_t *g, int64_t ic, int64_t mr,
                      int64_t pc, int64_t kc, int MR, float *dst) {
  switch (g->a_dtype) {
    case TT_F32: tt_pack_a_body(g, TT_F32, ic, mr, pc, kc, MR, dst); break;
    case TT_F16: tt_pack_a_body(g, TT_F16, ic, mr, pc, kc, MR, dst); break;
    default: tt_pack_a_body(g, TT_BF16, ic, mr, pc, kc, MR, dst); break;
  }
}

/* Whether A is a column-major f32 matrix (a weight gradient's x^T): its
 * panels are packed a source row (one k) at a time, dealt out to every
 * panel, rather than panel by panel, which read MR floats of a new cache
 * line and page per k (docs/kernels.md). */
static int tt_gemm_a_colmajor(const tt_sgemm_args_t *g) {
  return g->a_dtype == TT_F32 && g->rsa == 1 && g->csa != 1;
}

/* Packs A rows [ic, ic + rows) as consecutive MR panels, panel q at
 * dst + q * MR * kc, for k in [k0, k1) of the block at pc (a column-major
 * A may be packed in k ranges by several threads; any other A takes
 * k0 = 0, k1 = kc). */
static void tt_pack_a_rows(const tt_sgemm_args_t *g, int64_t ic, int64_t rows, int64_t pc,
                           int64_t kc, int64_t k0, int64_t k1, int MR, float *dst) {
  int64_t np = (rows + MR - 1) / MR;
  if (tt_gemm_a_colmajor(g)) {
    /* Eight source rows at a time, each panel taking 8 * MR floats in one
     * run (measured the same as one row at a time dealt to every panel;
     * reading the operand itself is most of the cost). */
    for (int64_t kb = k0; kb < k1; kb += 8) {
      int64_t ke = tt_min64(k1, kb + 8);
      const float *src = (const float *)g->a + ic + (pc + kb) * g->csa;
      for (int64_t q = 0; q < np; ++q) {
        int64_t r0 = q * MR, w = tt_min64(MR, rows - r0);
        float *d = dst + q * MR * kc + kb * MR;
        const float *s = src + r0;
        for (int64_t k = kb; k < ke; ++k, d += MR, s += g->csa) {
          if (w == MR && MR == 6) {
            memcpy(d, s, 6 * sizeof(float));
          } else if (w == MR && MR == 12) {
            memcpy(d, s, 12 * sizeof(float));
          } else {
            for (int64_t i = 0; i < w; ++i) d[i] = s[i];
            for (int64_t i = w; i < MR; ++i) d[i] = 0.0f;
          }
        }
      }
    }
    return;
  }
  for (int64_t q = 0; q < np; ++q) {
    tt_pack_a(g, ic + q * MR, tt_min64(MR, rows - q * MR), pc, kc, MR, dst + q * MR * kc);
  }
}

/* Whether A's whole MR-row panels are read in place rather than packed,
 * under a kernel that can (the AVX-512 one): an f32 A that is row-major
 * (k contiguous, x W and g W) with K of at least TT_GEMM_DIRECT_K, or
 * column-major (a weight gradient's x^T, the tile's MR floats of each k
 * contiguous). The kernel broadcasts the same floats either way, from
 * 12 rows in L1 or a line per k in L2 instead of one packed panel. Row-
 * major: not packing saved 3-5% of the decoder's K = 384-1000 products,
 * while its K = 128 products ran ~2% slower in place. Column-major: the
 * decoder's weight gradients with M = 1000, 384 and 128 (K = 2048) ran
 * 11%, 9% and 5% faster; M = 512, whose k stride of 2 KiB puts every
 * line of a panel in 2 of the 64 L1 sets, gained nothing and stays packed.
 * A block's last rows, short of a panel, are still packed (the kernel
 * reads MR rows). */
#define TT_GEMM_DIRECT_K 256

static int tt_gemm_direct_a(const tt_sgemm_args_t *g, const tt_ukr_t *u) {
  if (g->a_dtype != TT_F32) return 0;
  if (g->csa == 1) return u->rowa && g->k >= TT_GEMM_DIRECT_K;
  /* A k stride of a multiple of 2 KiB maps a panel's lines onto a few
   * cache sets: those are packed. */
  return u->cola && g->rsa == 1 && g->csa % 512 != 0;
}

/* A column-major A of at most this many bytes per KC block that is not
 * read in place is packed whole (all its rows, in one pass over the
 * source rows) for each block. The buffer stays with the calling thread,
 * like the B block's. */
#define TT_GEMM_A_WHOLE_MAX ((int64_t)16 << 20)

static int tt_gemm_a_whole(const tt_sgemm_args_t *g, const tt_ukr_t *u) {
  return tt_gemm_a_colmajor(g) && !tt_gemm_direct_a(g, u) &&
         (g->m + TT_GEMM_MB) * tt_min64(TT_GEMM_KC, g->k) * (int64_t)sizeof(float) <=
             TT_GEMM_A_WHOLE_MAX;
}

/* A block of rows [ib, ib + rows) for the micro-kernels: its packed
 * panels at ap, or (direct) only its last partial panel, packed at ap +
 * (rows / MR * MR) * kc. */
static void tt_gemm_prepare_a(const tt_sgemm_args_t *g, const tt_ukr_t *u, int direct,
                              int64_t ib, int64_t rows, int64_t pc, int64_t kc, float *ap) {
  if (!direct) {
    tt_pack_a_rows(g, ib, rows, pc, kc, 0, kc, u->mr, ap);
    return;
  }
  int64_t full = rows / u->mr * u->mr;
  if (full < rows) tt_pack_a(g, ib + full, rows - full, pc, kc, u->mr, ap + full * kc);
}

/* Panel r of a block at ib: its A in place, or NULL (packed). */
static const float *tt_gemm_adir(const tt_sgemm_args_t *g, const tt_ukr_t *u, int direct,
                                 int64_t row, int64_t mr, int64_t pc) {
  if (!direct || mr != u->mr) return NULL;
  return (const float *)g->a + row * g->rsa + pc * g->csa;
}

/* ---- serial driver -------------------------------------------------------- */

typedef struct tt_gemm_bufs_s {
  float *apack; /* KC * TT_GEMM_MB, or KC * round_up(m, MB) (tt_gemm_a_whole) */
  float *bpack; /* KC * round_up(min(NC, n), NR) */
} tt_gemm_bufs_t;

/* Packing buffers are cached per thread (kernels run on the persistent
 * worker threads and the device threads): a fresh multi-megabyte
 * allocation per call costs a page fault per 4 KiB page, as much as a
 * small GEMM itself. Freed when the thread exits. */
typedef struct tt_gemm_cache_s {
  float *buf;
  size_t bytes;
} tt_gemm_cache_t;

static pthread_key_t tt_gemm_cache_key_[3];
static pthread_once_t tt_gemm_cache_once_ = PTHREAD_ONCE_INIT;

static void tt_gemm_cache_destroy_(void *p) {
  tt_gemm_cache_t *c = (tt_gemm_cache_t *)p;
  free(c->buf);
  free(c);
}

static void tt_gemm_cache_init_(void) {
  for (int i = 0; i < 3; ++i) (void)pthread_key_create(&tt_gemm_cache_key_[i], tt_gemm_cache_destroy_);
}

/* This thread's buffer `slot` of at least `bytes` (64-byte aligned), or
 * NULL. Slot 0: a whole problem's buffers (tt_gemm_bufs_alloc); slot 1:
 * the A blocks of a parallel item, which may run on the thread that holds
 * the shared B block in its slot 0; slot 2: the partial products of a
 * split-K product (tt_gemm_ksplits), held by the thread that started it. */
static float *tt_gemm_cache_get_(int slot, size_t bytes) {
  pthread_once(&tt_gemm_cache_once_, tt_gemm_cache_init_);
  tt_gemm_cache_t *c = (tt_gemm_cache_t *)pthread_getspecific(tt_gemm_cache_key_[slot]);
  if (!c) {
    c = (tt_gemm_cache_t *)calloc(1, sizeof(*c));
    if (!c || pthread_setspecific(tt_gemm_cache_key_[slot], c)) {
      free(c);
      return NULL;
    }
  }
  bytes = (bytes + 63) / 64 * 64; /* aligned_alloc: a multiple of the alignment */
  if (c->bytes < bytes) {
    free(c->buf);
    c->buf = (float *)aligned_alloc(64, bytes);
    c->bytes = c->buf ? bytes : 0;
  }
  return c->buf;
}

static tt_status_t tt_gemm_bufs_alloc(const tt_ukr_t *u, const tt_sgemm_args_t *g,
                                      tt_gemm_bufs_t *bufs) {
  int64_t kc = tt_min64(TT_GEMM_KC, tt_max64(g->k, 1));
  int64_t nc = tt_min64(TT_GEMM_NC, tt_max64(g->n, 1));
  nc = (nc + u->nr - 1) / u->nr * u->nr;
  int64_t arows = tt_gemm_a_whole(g, u) ? (g->m + TT_GEMM_MB - 1) / TT_GEMM_MB * TT_GEMM_MB
                                     : TT_GEMM_MB;
  size_t asz = ((size_t)(kc * arows) * sizeof(float) + 63) / 64 * 64;
  size_t bsz = ((size_t)(kc * nc) * sizeof(float) + 63) / 64 * 64;
  float *buf = tt_gemm_cache_get_(0, asz + bsz);
  if (!buf) {
    return tt_status_make(TT_RESOURCE_EXHAUSTED,
                          "gemm: cannot allocate %zu bytes of packing buffers",
                          asz + bsz);
  }
  bufs->apack = buf;
  bufs->bpack = buf + asz / sizeof(float);
  return NULL;
}

static void tt_gemm_bufs_free(tt_gemm_bufs_t *bufs) {
  (void)bufs; /* the buffer stays with the thread */
}

/* Runs the micro-kernels of one packed A panel (rows ic.., mr of them)
 * against B panels [q0, q1) of the packed block at (jc, pc); adir, when
 * set, is the panel's A in place (tt_gemm_direct_a) and apack unused. */
static void tt_gemm_panel(const tt_sgemm_args_t *g, const tt_ukr_t *u,
                          const float *apack, const float *adir, const float *bpack,
                          int64_t ic, int64_t mr, int64_t jc, int64_t nc, int64_t kc,
                          int acc, int64_t q0, int64_t q1) {
  const int MR = u->mr, NR = u->nr;
  float tile[TT_GEMM_MR_MAX * TT_GEMM_NR_MAX];
  for (int64_t q = q0; q < q1; ++q) {
    int64_t jr = q * NR;
    int64_t nr = tt_min64(NR, nc - jr);
    float *c = g->c + ic * g->ldc + jc + jr;
    const float *bp = bpack + jr * kc;
    /* A whole tile goes straight to C; an edge tile to scratch, clipped. */
    int whole = mr == MR && nr == NR;
    float *dst = whole ? c : tile;
    int64_t ld = whole ? g->ldc : NR;
    int add = whole && acc;
    if (!adir)
      u->fn(kc, apack, bp, dst, ld, add);
    else if (g->csa == 1) /* row-major (tt_gemm_direct_a) */
      u->rowa(kc, adir, g->rsa, bp, dst, ld, add);
    else
      u->cola(kc, adir, g->csa, bp, dst, ld, add);
    if (whole) continue;
    for (int64_t i = 0; i < mr; ++i) {
      for (int64_t j = 0; j < nr; ++j) {
        c[i * g->ldc + j] = acc ? c[i * g->ldc + j] + tile[i * NR + j] : tile[i * NR + j];
      }
    }
  }
}

static void tt_gemm_zero_c(const tt_sgemm_args_t *g) {
  if (g->accumulate) return;
  for (int64_t i = 0; i < g->m; ++i) {
    memset(g->c + i * g->ldc, 0, (size_t)g->n * sizeof(float));
  }
}

static void tt_sgemm_serial_whole(const tt_sgemm_args_t *g, const tt_ukr_t *u,
                                  tt_gemm_bufs_t *bufs) {
  if (g->k == 0) {
    tt_gemm_zero_c(g);
    return;
  }
  int whole = tt_gemm_a_whole(g, u), direct = tt_gemm_direct_a(g, u);
  for (int64_t jc = 0; jc < g->n; jc += TT_GEMM_NC) {
    int64_t nc = tt_min64(TT_GEMM_NC, g->n - jc);
    int64_t npanels = (nc + u->nr - 1) / u->nr;
    for (int64_t pc = 0; pc < g->k; pc += TT_GEMM_KC) {
      int64_t kc = tt_min64(TT_GEMM_KC, g->k - pc);
      int acc = g->accumulate || pc > 0;
      tt_pack_b(g, pc, kc, jc, nc, u->nr, bufs->bpack);
      if (whole) tt_pack_a_rows(g, 0, g->m, pc, kc, 0, kc, u->mr, bufs->apack);
      for (int64_t ib = 0; ib < g->m; ib += TT_GEMM_MB) {
        int64_t rows = tt_min64(TT_GEMM_MB, g->m - ib);
        float *ap = bufs->apack + (whole ? ib * kc : 0);
        if (!whole) tt_gemm_prepare_a(g, u, direct, ib, rows, pc, kc, ap);
        for (int64_t r = 0; r < rows; r += u->mr) {
          int64_t mr = tt_min64(u->mr, rows - r);
          tt_gemm_panel(g, u, ap + r * kc, tt_gemm_adir(g, u, direct, ib + r, mr, pc),
                        bufs->bpack, ib + r, mr, jc, nc, kc, acc, 0, npanels);
        }
      }
    }
  }
}

/* ---- split K ---------------------------------------------------------------
 * A long-K product with a small output (a weight gradient x^T g summed over
 * every token of a batch: [128, 2048] x [2048, 512]) has too few C tiles to
 * keep the threads busy and in step: split over its C tiles it ran at 1.2x
 * one thread's speed on two. Split into S pieces along K instead, each a
 * whole serial GEMM (piece 0 into C, piece s into a partial product), the
 * partials then added to C in order. S follows from the shape alone, and
 * the serial and parallel forms add the same partials in the same order,
 * so the result does not depend on the thread count. */
#define TT_GEMM_KSPLIT_K 1024          /* K per piece, at least */
#define TT_GEMM_KSPLIT_MAX 8
#define TT_GEMM_KSPLIT_MAX_MN (1 << 19) /* output elements (2 MiB of f32) */

static int64_t tt_gemm_ksplits(const tt_sgemm_args_t *g) {
  if (g->pack_b || g->k < 2 * TT_GEMM_KSPLIT_K || g->m * g->n > TT_GEMM_KSPLIT_MAX_MN)
    return 1;
  /* A power of two, so the pieces share out evenly over 2, 4 or 8 threads
   * (3 pieces of a K = 3072 product on two threads ran at 0.8x the
   * unsplit product's speed). */
  int64_t S = 2;
  while (2 * S <= TT_GEMM_KSPLIT_MAX && 2 * S * TT_GEMM_KSPLIT_K <= g->k) S *= 2;
  return S;
}

/* Piece s of S of g: its K range, into c (ldc) with accumulate acc. */
static tt_sgemm_args_t tt_gemm_kpiece(const tt_sgemm_args_t *g, int64_t s, int64_t S,
                                      float *c, int64_t ldc, int acc) {
  int64_t k0 = s * g->k / S / 16 * 16, k1 = s + 1 == S ? g->k : (s + 1) * g->k / S / 16 * 16;
  tt_sgemm_args_t p = *g;
  p.k = k1 - k0;
  p.a = (const char *)g->a + (size_t)(k0 * g->csa) * tt_dtype_size(g->a_dtype);
  p.b = (const char *)g->b + (size_t)(k0 * g->rsb) * tt_dtype_size(g->b_dtype);
  p.c = c;
  p.ldc = ldc;
  p.accumulate = acc;
  p.b_key = 0;
  p.b_packed = NULL;
  return p;
}

/* C rows [r0, r1) += partial (m x n, dense). */
static void tt_gemm_add_rows(const tt_sgemm_args_t *g, const float *part, int64_t r0,
                             int64_t r1) {
  for (int64_t i = r0; i < r1; ++i) {
    float *c = g->c + i * g->ldc;
    const float *q = part + i * g->n;
    for (int64_t j = 0; j < g->n; ++j) c[j] += q[j];
  }
}

static void tt_sgemm_serial(const tt_sgemm_args_t *g, const tt_ukr_t *u,
                            tt_gemm_bufs_t *bufs) {
  int64_t S = tt_gemm_ksplits(g);
  float *part = S > 1 ? tt_gemm_cache_get_(2, (size_t)(g->m * g->n) * sizeof(float)) : NULL;
  if (!part) { /* unsplit, or no memory for a partial: one pass over K */
    tt_sgemm_serial_whole(g, u, bufs);
    return;
  }
  tt_sgemm_args_t p0 = tt_gemm_kpiece(g, 0, S, g->c, g->ldc, g->accumulate);
  tt_sgemm_serial_whole(&p0, u, bufs);
  for (int64_t s = 1; s < S; ++s) {
    tt_sgemm_args_t ps = tt_gemm_kpiece(g, s, S, part, g->n, 0);
    tt_sgemm_serial_whole(&ps, u, bufs);
    tt_gemm_add_rows(g, part, 0, g->m);
  }
}

typedef struct tt_gemm_ksplit_s {
  const tt_sgemm_args_t *g;
  const tt_ukr_t *u;
  int64_t S;
  float *parts; /* S - 1 partials of m x n */
  _Atomic int failed;
} tt_gemm_ksplit_t;

static void tt_gemm_kpiece_range(void *arg, int64_t begin, int64_t end) {
  tt_gemm_ksplit_t *j = (tt_gemm_ksplit_t *)arg;
  const tt_sgemm_args_t *g = j->g;
  for (int64_t s = begin; s < end; ++s) {
    tt_sgemm_args_t p = s == 0 ? tt_gemm_kpiece(g, 0, j->S, g->c, g->ldc, g->accumulate)
                               : tt_gemm_kpiece(g, s, j->S, j->parts + (s - 1) * g->m * g->n,
                                                g->n, 0);
    tt_gemm_bufs_t bufs = {NULL, NULL};
    tt_status_t st = tt_gemm_bufs_alloc(j->u, &p, &bufs);
    if (st) {
      tt_status_free(st);
      j->failed = 1;
      return;
    }
    tt_sgemm_serial_whole(&p, j->u, &bufs);
  }
}

static void tt_gemm_kreduce_range(void *arg, int64_t begin, int64_t end) {
  const tt_gemm_ksplit_t *j = (const tt_gemm_ksplit_t *)arg;
  for (int64_t s = 1; s < j->S; ++s)
    tt_gemm_add_rows(j->g, j->parts + (s - 1) * j->g->m * j->g->n, begin, end);
}

/* The parallel form: 1 when it ran (or failed: *st), 0 when g is not split. */
static int tt_sgemm_ksplit_parallel(const tt_sgemm_args_t *g, const tt_ukr_t *u,
                                    tt_status_t *st) {
  *st = NULL;
  int64_t S = tt_gemm_ksplits(g);
  if (S < 2) return 0;
  float *parts = tt_gemm_cache_get_(2, (size_t)((S - 1) * g->m * g->n) * sizeof(float));
  if (!parts) return 0;
  tt_gemm_ksplit_t j = {.g = g, .u = u, .S = S, .parts = parts};
  tt_parallel_for(S, 1, tt_gemm_kpiece_range, &j);
  if (j.failed) {
    *st = tt_status_make(TT_RESOURCE_EXHAUSTED, "gemm: cannot allocate packing buffers");
    return 1;
  }
  tt_parallel_for(g->m, tt_max64(1, 16384 / tt_max64(g->n, 1)), tt_gemm_kreduce_range, &j);
  return 1;
}

/* ---- parallel drivers ------------------------------------------------------ */

/* One large GEMM: each (jc, pc) block of B is packed once, in parallel, into
 * a shared buffer (and a column-major A whole, tt_gemm_a_whole); then items = (A block of TT_GEMM_MB rows, group of B
 * panels) run in
 * parallel, claimed dynamically so a slow thread does not hold the rest
 * back. Every C tile is computed by one item in a fixed order, so the
 * result does not depend on the thread count. */
typedef struct tt_gemm_par_s {
  const tt_sgemm_args_t *g;
  const tt_ukr_t *u;
  float *bpack;
  float *apack; /* the whole packed A block, or NULL: each item packs its rows */
  int64_t jc, nc, pc, kc;
  int acc;
  int64_t npanels, ngroups;
  int direct; /* tt_gemm_direct_a */
  _Atomic int failed; /* an item could not get its A buffer */
} tt_gemm_par_t;

static void tt_gemm_pack_range(void *arg, int64_t begin, int64_t end) {
  const tt_gemm_par_t *p = (const tt_gemm_par_t *)arg;
  int64_t NR = p->u->nr;
  int64_t j0 = begin * NR, j1 = tt_min64(p->nc, end * NR);
  tt_pack_b(p->g, p->pc, p->kc, p->jc + j0, j1 - j0, (int)NR, p->bpack + j0 * p->kc);
}

/* Items [begin, end) of the whole-A pack: ranges of 16 k. */
static void tt_gemm_pack_a_range(void *arg, int64_t begin, int64_t end) {
  const tt_gemm_par_t *p = (const tt_gemm_par_t *)arg;
  tt_pack_a_rows(p->g, 0, p->g->m, p->pc, p->kc, begin * 16, tt_min64(p->kc, end * 16),
                 p->u->mr, p->apack);
}

static void tt_gemm_compute_range(void *arg, int64_t begin, int64_t end) {
  tt_gemm_par_t *p = (tt_gemm_par_t *)arg;
  const tt_ukr_t *u = p->u;
  float *apack = p->apack;
  if (!apack) apack = tt_gemm_cache_get_(1, (size_t)(TT_GEMM_MB * TT_GEMM_KC) * sizeof(float));
  if (!apack) {
    p->failed = 1;
    return;
  }
  int64_t packed = -1;
  for (int64_t t = begin; t < end; ++t) {
    int64_t blk = t / p->ngroups, grp = t % p->ngroups;
    int64_t ib = blk * TT_GEMM_MB, rows = tt_min64(TT_GEMM_MB, p->g->m - ib);
    float *ap = p->apack ? apack + ib * p->kc : apack;
    if (!p->apack && blk != packed) {
      tt_gemm_prepare_a(p->g, u, p->direct, ib, rows, p->pc, p->kc, ap);
      packed = blk;
    }
    int64_t q0 = grp * p->npanels / p->ngroups;
    int64_t q1 = (grp + 1) * p->npanels / p->ngroups;
    for (int64_t r = 0; r < rows; r += u->mr) {
      int64_t mr = tt_min64(u->mr, rows - r);
      tt_gemm_panel(p->g, u, ap + r * p->kc, tt_gemm_adir(p->g, u, p->direct, ib + r, mr, p->pc),
                    p->bpack, ib + r, mr, p->jc, p->nc, p->kc, p->acc, q0, q1);
    }
  }
}

static tt_status_t tt_sgemm_parallel(const tt_sgemm_args_t *g, const tt_ukr_t *u) {
  if (g->k == 0) {
    tt_gemm_zero_c(g);
    return NULL;
  }
  tt_status_t kst;
  if (tt_sgemm_ksplit_parallel(g, u, &kst)) return kst;
  tt_gemm_bufs_t bufs = {NULL, NULL};
  TT_RETURN_IF_ERROR(tt_gemm_bufs_alloc(u, g, &bufs));
  /* Items for the whole pool, even while a core is left to the host:
   * workers join a running product when the host starts waiting
   * (parallel.c). */
  int64_t nt = tt_num_threads();
  int64_t mblocks = (g->m + TT_GEMM_MB - 1) / TT_GEMM_MB;
  tt_gemm_par_t p = {
      .g = g, .u = u, .bpack = bufs.bpack, .apack = tt_gemm_a_whole(g, u) ? bufs.apack : NULL,
      .direct = tt_gemm_direct_a(g, u)};
  for (p.jc = 0; p.jc < g->n; p.jc += TT_GEMM_NC) {
    p.nc = tt_min64(TT_GEMM_NC, g->n - p.jc);
    p.npanels = (p.nc + u->nr - 1) / u->nr;
    /* Enough items for dynamic balancing; split B panels only when M is
     * too short to provide them. */
    p.ngroups = mblocks >= 4 * nt ? 1 : tt_min64(p.npanels, (4 * nt + mblocks - 1) / mblocks);
    for (p.pc = 0; p.pc < g->k; p.pc += TT_GEMM_KC) {
      p.kc = tt_min64(TT_GEMM_KC, g->k - p.pc);
      p.acc = g->accumulate || p.pc > 0;
      tt_parallel_for(p.npanels, 1, tt_gemm_pack_range, &p);
      if (p.apack) tt_parallel_for((p.kc + 15) / 16, 1, tt_gemm_pack_a_range, &p);
      tt_parallel_for_items(mblocks * p.ngroups, tt_gemm_compute_range, &p);
      if (p.failed) {
        return tt_status_make(TT_RESOURCE_EXHAUSTED,
                              "gemm: cannot allocate an A packing buffer");
      }
    }
  }
  tt_gemm_bufs_free(&bufs);
  return NULL;
}

/* Many independent problems of the same size, one serial GEMM per item. */
typedef struct tt_gemm_batch_s {
  const tt_ukr_t *u;
  const tt_sgemm_args_t *probs;
  _Atomic int failed;
} tt_gemm_batch_t;

static void tt_gemm_batch_range(void *arg, int64_t begin, int64_t end) {
  tt_gemm_batch_t *job = (tt_gemm_batch_t *)arg;
  const tt_sgemm_args_t *g0 = &job->probs[begin];
  tt_gemm_bufs_t bufs = {NULL, NULL};
  tt_status_t st = tt_gemm_bufs_alloc(job->u, g0, &bufs);
  if (st) {
    tt_status_free(st);
    job->failed = 1;
    return;
  }
  for (int64_t t = begin; t < end; ++t) tt_sgemm_serial(&job->probs[t], job->u, &bufs);
  tt_gemm_bufs_free(&bufs);
}

/* ---- short A (m <= TT_GEMM_SHORT_M): matrix-vector style ------------------
 * Packing B would cost as much as the whole product when A has a handful
 * of rows, so f32 operands with contiguous A rows are read in place:
 * row-major B accumulates rows of B (axpy), column-major B (x @ W^T) takes
 * dot products with its rows. Items are (problem, block of N). */
#define TT_GEMM_SHORT_M 4
#define TT_GEMM_SHORT_NB 256

TT_TARGET_CLONES
static void tt_short_axpy(int64_t n, float a, const float *x, float *y) {
  for (int64_t j = 0; j < n; ++j) y[j] += a * x[j];
}

TT_TARGET_CLONES
static float tt_short_dot(int64_t n, const float *x, const float *y) {
  float acc[16] = {0};
  int64_t k = 0;
  for (; k + 16 <= n; k += 16) {
    for (int q = 0; q < 16; ++q) acc[q] += x[k + q] * y[k + q];
  }
  float s = 0;
  for (int q = 0; q < 16; ++q) s += acc[q];
  for (; k < n; ++k) s += x[k] * y[k];
  return s;
}

static int tt_gemm_is_short(const tt_sgemm_args_t *g) {
  return g->m <= TT_GEMM_SHORT_M && !g->pack_b && g->a_dtype == TT_F32 &&
         g->b_dtype == TT_F32 && g->csa == 1 && (g->csb == 1 || g->rsb == 1);
}

typedef struct tt_gemm_short_s {
  const tt_sgemm_args_t *probs;
  int64_t nblk;
} tt_gemm_short_t;

static void tt_gemm_short_range(void *arg, int64_t begin, int64_t end) {
  const tt_gemm_short_t *job = (const tt_gemm_short_t *)arg;
  for (int64_t t = begin; t < end; ++t) {
    const tt_sgemm_args_t *g = &job->probs[t / job->nblk];
    int64_t j0 = (t % job->nblk) * TT_GEMM_SHORT_NB;
    int64_t w = tt_min64(TT_GEMM_SHORT_NB, g->n - j0);
    const float *a = (const float *)g->a, *b = (const float *)g->b;
    for (int64_t i = 0; i < g->m; ++i) {
      const float *arow = a + i * g->rsa;
      float acc[TT_GEMM_SHORT_NB];
      if (g->csb == 1) {
        memset(acc, 0, (size_t)w * sizeof(float));
        for (int64_t k = 0; k < g->k; ++k) {
          tt_short_axpy(w, arow[k], b + k * g->rsb + j0, acc);
        }
      } else {
        for (int64_t j = 0; j < w; ++j) {
          acc[j] = tt_short_dot(g->k, arow, b + (j0 + j) * g->csb);
        }
      }
      float *c = g->c + i * g->ldc + j0;
      for (int64_t j = 0; j < w; ++j) c[j] = g->accumulate ? c[j] + acc[j] : acc[j];
    }
  }
}

typedef struct tt_blas_batch_s {
  const tt_sgemm_args_t *probs;
  const float *b_packed; /* every problem's B, packed (one shared B), or NULL */
} tt_blas_batch_t;

static void tt_blas_batch_range(void *arg, int64_t begin, int64_t end) {
  const tt_blas_batch_t *bt = (const tt_blas_batch_t *)arg;
  for (int64_t t = begin; t < end; ++t) {
    tt_sgemm_args_t p = bt->probs[t];
    p.b_packed = bt->b_packed;
    tt_blas_sgemm(&p, 1);
  }
}

/* One product cut into pieces along its longer side (C's columns or
 * rows, 64 at a time), each an external single-threaded call on a pool
 * thread: MKL's own OpenMP threads would compete with the pool's, which
 * an execution keeps polling (tt_parallel_hold_begin). */
typedef struct tt_blas_split_s {
  const tt_sgemm_args_t *g;
  int64_t pieces, step;
  int by_cols;
  const float *b_packed; /* g's B packed (row pieces share it), or NULL */
} tt_blas_split_t;

static void tt_blas_split_range(void *arg, int64_t begin, int64_t end) {
  const tt_blas_split_t *sp = (const tt_blas_split_t *)arg;
  const tt_sgemm_args_t *g = sp->g;
  for (int64_t t = begin; t < end; ++t) {
    tt_sgemm_args_t p = *g;
    int64_t lo = t * sp->step, hi = tt_min64((t + 1) * sp->step, sp->by_cols ? g->n : g->m);
    if (lo >= hi) continue;
    if (sp->by_cols) {
      p.n = hi - lo;
      p.b = (const float *)g->b + lo * g->csb;
      p.c = g->c + lo;
    } else {
      p.m = hi - lo;
      p.a = (const float *)g->a + lo * g->rsa;
      p.c = g->c + lo * g->ldc;
      p.b_packed = sp->b_packed;
    }
    tt_blas_sgemm(&p, 1);
  }
}

/* The external BLAS (blas_ext.c) when it takes every problem: many
 * problems one per thread, otherwise each split over the threads. */
static int tt_sgemm_blas(const tt_sgemm_args_t *probs, int64_t nprobs, int parallel) {
  for (int64_t i = 0; i < nprobs; ++i)
    if (!tt_blas_accepts(&probs[i])) return 0;
  int top = parallel && !tt_in_parallel_region();
  int64_t nt = top ? tt_parallel_width() : 1;
  if (nt > 1 && nprobs >= 2 * nt) {
    int shared = 1;
    for (int64_t i = 1; i < nprobs; ++i) shared &= probs[i].b == probs[0].b;
    tt_blas_batch_t bt = {probs, shared ? tt_blas_packed_b(&probs[0]) : NULL};
    tt_parallel_for(nprobs, 1, tt_blas_batch_range, &bt);
    return 1;
  }
  for (int64_t i = 0; i < nprobs; ++i) {
    const tt_sgemm_args_t *g = &probs[i];
    /* A keyed B (kept packed, blas_ext.c) is split by rows when there are
     * enough, so its pieces share one packed copy (BERT-base at batch 1, 2
     * threads: 108 ms against 120 split by columns, which also packed
     * twice the entries). */
    int by_cols = g->b_key ? g->m < 64 * nt : g->n >= g->m;
    int64_t len = by_cols ? g->n : g->m;
    int64_t step = (len + nt - 1) / nt;
    step = (step + 63) / 64 * 64;
    int64_t pieces = (len + step - 1) / step;
    const float *bp = nt == 1 || pieces < 2 || !by_cols ? tt_blas_packed_b(g) : NULL;
    tt_blas_split_t sp = {g, pieces, step, by_cols, bp};
    if (nt == 1 || sp.pieces < 2) {
      tt_sgemm_args_t one = *g;
      one.b_packed = bp;
      tt_blas_sgemm(&one, 1);
    } else {
      tt_parallel_for(sp.pieces, 1, tt_blas_split_range, &sp);
    }
  }
  return 1;
}

static tt_status_t tt_sgemm_own(const tt_sgemm_args_t *probs, int64_t nprobs, int parallel);

static tt_status_t tt_sgemm_many(const tt_sgemm_args_t *probs, int64_t nprobs,
                                 int parallel) {
  if (nprobs <= 0) return NULL;
  const tt_sgemm_args_t *g = &probs[0];
  if (g->m == 0 || g->n == 0) return NULL;
  if (tt_blas_may_take_f32() && !tt_gemm_is_short(g) && tt_sgemm_blas(probs, nprobs, parallel))
    return NULL;
  return tt_sgemm_own(probs, nprobs, parallel);
}

/* The engine's own kernels for nprobs problems with the same m, n, k: in
 * parallel across problems when there are many (or they are small),
 * otherwise one after the other, each split across the threads. */
static tt_status_t tt_sgemm_own(const tt_sgemm_args_t *probs, int64_t nprobs, int parallel) {
  const tt_sgemm_args_t *g = &probs[0];
  const tt_ukr_t *u = tt_ukr_select_();
  double flops = 2.0 * (double)g->m * (double)g->n * (double)g->k;
  int64_t nt = tt_num_threads(); /* the pool, not the width of the moment */
  if (tt_gemm_is_short(g)) {
    tt_gemm_short_t job = {probs, (g->n + TT_GEMM_SHORT_NB - 1) / TT_GEMM_SHORT_NB};
    double per_item = flops * (double)TT_GEMM_SHORT_NB / (double)g->n;
    int64_t grain = parallel ? tt_max64(1, (int64_t)(2e5 / (per_item + 1))) : INT64_MAX;
    tt_parallel_for(nprobs * job.nblk, grain, tt_gemm_short_range, &job);
    return NULL;
  }
  if (parallel && nt > 1 && flops * (double)nprobs >= 2e6 &&
      (nprobs < 2 * nt && flops >= 4e6)) {
    for (int64_t i = 0; i < nprobs; ++i) TT_RETURN_IF_ERROR(tt_sgemm_parallel(&probs[i], u));
    return NULL;
  }
  tt_gemm_batch_t job = {.u = u, .probs = probs};
  if (parallel && flops * (double)nprobs >= 2e6) {
    tt_parallel_for_items(nprobs, tt_gemm_batch_range, &job);
  } else {
    tt_gemm_batch_range(&job, 0, nprobs);
  }
  if (job.failed) {
    return tt_status_make(TT_RESOURCE_EXHAUSTED,
                          "gemm: cannot allocate packing buffers");
  }
  return NULL;
}

tt_status_t tt_sgemm(const tt_sgemm_args_t *args, int parallel) {
  return tt_sgemm_many(args, 1, parallel);
}

/* ---- tt_kernel_dot --------------------------------------------------------- */

typedef struct tt_dot_ctx_s {
  const tt_view_t *a, *b;
  tt_view_t *out;
  int trans_a;
  int64_t M, N, K, Bb;
  const void *bmat; /* [Bb, K, N] in the compute type (double or int64) */
} tt_dot_ctx_t;

/* F64 / integer: one output row per item. */
static void tt_dot_rows_range(void *arg, int64_t begin, int64_t end) {
  const tt_dot_ctx_t *c = (const tt_dot_ctx_t *)arg;
  int is_int = tt_class_of(c->a->dtype) == TT_CLASS_INT;
  int64_t M = c->M, N = c->N, K = c->K;
  for (int64_t r = begin; r < end; ++r) {
    int64_t bi = r / M, i = r % M;
    int64_t bb = c->Bb == 1 ? 0 : bi;
    int64_t abase = bi * M * K;
    for (int64_t j0 = 0; j0 < N; j0 += TT_BLOCK) {
      int64_t w = tt_min64(TT_BLOCK, N - j0);
      if (is_int) {
        uint64_t acc[TT_BLOCK];
        const int64_t *bm = (const int64_t *)c->bmat + bb * K * N;
        memset(acc, 0, sizeof(acc));
        for (int64_t k = 0; k < K; ++k) {
          int64_t ai = c->trans_a ? abase + k * M + i : abase + i * K + k;
          uint64_t av = (uint64_t)tt_get_i64(c->a->data, c->a->dtype, ai);
          const int64_t *brow = bm + k * N + j0;
          for (int64_t j = 0; j < w; ++j) acc[j] += av * (uint64_t)brow[j];
        }
        tt_store_i64((const int64_t *)acc, w, c->out->data, c->out->dtype,
                     r * N + j0);
      } else {
        double acc[TT_BLOCK];
        const double *bm = (const double *)c->bmat + bb * K * N;
        memset(acc, 0, sizeof(acc));
        for (int64_t k = 0; k < K; ++k) {
          int64_t ai = c->trans_a ? abase + k * M + i : abase + i * K + k;
          double av = tt_get_f64(c->a->data, c->a->dtype, ai);
          const double *brow = bm + k * N + j0;
          for (int64_t j = 0; j < w; ++j) acc[j] += av * brow[j];
        }
        tt_store_f64(acc, w, c->out->data, c->out->dtype, r * N + j0);
      }
    }
  }
}

static tt_status_t tt_dot_rows(tt_dot_ctx_t *c, int trans_b) {
  int is_int = tt_class_of(c->a->dtype) == TT_CLASS_INT;
  int64_t K = c->K, N = c->N, total = c->Bb * K * N;
  size_t es = is_int ? sizeof(int64_t) : sizeof(double);
  void *bm = malloc((size_t)tt_max64(total, 1) * es);
  if (!bm) {
    return tt_status_make(TT_RESOURCE_EXHAUSTED,
                          "dot: cannot allocate %lld elements", (long long)total);
  }
  /* B in [Bb, K, N] order and the compute type, so rows stream. */
  for (int64_t bb = 0; bb < c->Bb; ++bb) {
    for (int64_t k = 0; k < K; ++k) {
      for (int64_t j = 0; j < N; ++j) {
        int64_t src = bb * K * N + (trans_b ? j * K + k : k * N + j);
        int64_t dst = bb * K * N + k * N + j;
        if (is_int) {
          ((int64_t *)bm)[dst] = tt_get_i64(c->b->data, c->b->dtype, src);
        } else {
          ((double *)bm)[dst] = tt_get_f64(c->b->data, c->b->dtype, src);
        }
      }
    }
  }
  c->bmat = bm;
  int64_t rows = c->out->shape.dims[0] * c->M;
  int64_t grain = tt_max64(1, TT_GRAIN / tt_max64(1, K * N));
  tt_parallel_for(rows, grain, tt_dot_rows_range, c);
  free(bm);
  return NULL;
}

tt_status_t tt_kernel_dot(const tt_view_t *a, const tt_view_t *b, int trans_a,
                          int trans_b, tt_view_t *out) {
  return tt_kernel_dot_keyed(a, b, trans_a, trans_b, out, 0);
}

tt_status_t tt_kernel_dot_keyed(const tt_view_t *a, const tt_view_t *b, int trans_a,
                                int trans_b, tt_view_t *out, uint64_t b_key) {
  static const char *name = "dot";
  TT_RETURN_IF_ERROR(tt_check_view(name, "a", a));
  TT_RETURN_IF_ERROR(tt_check_view(name, "b", b));
  TT_RETURN_IF_ERROR(tt_check_view(name, "out", out));
  if (a->shape.rank != 3 || b->shape.rank != 3 || out->shape.rank != 3) {
    return tt_status_make(TT_INVALID_ARGUMENT,
                          "dot: a, b and out must be rank 3, got ranks %d, %d, %d",
                          (int)a->shape.rank, (int)b->shape.rank,
                          (int)out->shape.rank);
  }
  if (a->dtype != b->dtype || a->dtype != out->dtype) {
    return tt_status_make(TT_TYPE_ERROR,
                          "dot: a (%s), b (%s) and out (%s) must have the same "
                          "dtype",
                          tt_dtype_name(a->dtype), tt_dtype_name(b->dtype),
                          tt_dtype_name(out->dtype));
  }
  int64_t B = a->shape.dims[0];
  int64_t M = trans_a ? a->shape.dims[2] : a->shape.dims[1];
  int64_t K = trans_a ? a->shape.dims[1] : a->shape.dims[2];
  int64_t Bb = b->shape.dims[0];
  int64_t Kb = trans_b ? b->shape.dims[2] : b->shape.dims[1];
  int64_t N = trans_b ? b->shape.dims[1] : b->shape.dims[2];
  char s1[160], s2[160], s3[160];
  if (Kb != K || (Bb != B && Bb != 1) || out->shape.dims[0] != B ||
      out->shape.dims[1] != M || out->shape.dims[2] != N) {
    return tt_status_make(
        TT_INVALID_ARGUMENT,
        "dot: shapes do not match: a %s (trans %d), b %s (trans %d), out %s",
        tt_dims_str(&a->shape, s1, sizeof s1), trans_a,
        tt_dims_str(&b->shape, s2, sizeof s2), trans_b,
        tt_dims_str(&out->shape, s3, sizeof s3));
  }
  if (B == 0 || M == 0 || N == 0) return NULL;
  tt_dot_ctx_t ctx = {.a = a, .b = b, .out = out, .trans_a = trans_a,
                      .M = M, .N = N, .K = K, .Bb = Bb};
  if (tt_class_of(a->dtype) != TT_CLASS_F32) return tt_dot_rows(&ctx, trans_b);

  /* F32 / F16 / BF16 through the packed f32 GEMM. Non-f32 outputs go
   * through an f32 buffer and are rounded once at the end. */
  float *cbuf = out->dtype == TT_F32 ? (float *)out->data : NULL;
  if (!cbuf) {
    cbuf = (float *)tt_scratch_alloc((size_t)(B * M * N) * sizeof(float));
    if (!cbuf) {
      return tt_status_make(TT_RESOURCE_EXHAUSTED,
                            "dot: cannot allocate %lld floats",
                            (long long)(B * M * N));
    }
  }
  tt_sgemm_args_t *probs = (tt_sgemm_args_t *)malloc((size_t)B * sizeof(*probs));
  if (!probs) {
    if (cbuf != out->data) tt_scratch_free(cbuf);
    return tt_status_make(TT_RESOURCE_EXHAUSTED, "dot: out of memory");
  }
  size_t es = tt_dtype_size(a->dtype);
  for (int64_t bi = 0; bi < B; ++bi) {
    tt_sgemm_args_t *g = &probs[bi];
    memset(g, 0, sizeof(*g));
    g->m = M;
    g->n = N;
    g->k = K;
    g->a = (const char *)a->data + (size_t)(bi * M * K) * es;
    g->a_dtype = a->dtype;
    g->rsa = trans_a ? 1 : K;
    g->csa = trans_a ? M : 1;
    g->b = (const char *)b->data + (size_t)((Bb == 1 ? 0 : bi) * K * N) * es;
    g->b_dtype = b->dtype;
    g->rsb = trans_b ? 1 : N;
    g->csb = trans_b ? K : 1;
    g->c = cbuf + bi * M * N;
    g->ldc = N;
    g->accumulate = 0;
    g->b_key = b_key;
  }
  tt_status_t st = tt_sgemm_many(probs, B, 1);
  free(probs);
  if (cbuf != out->data) {
    if (!st) tt_store_f32(cbuf, B * M * N, out->data, out->dtype, 0);
    tt_scratch_free(cbuf);
  }
  return st;
}
