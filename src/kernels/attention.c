/* Fused scaled dot-product attention, forward and backward (kernels.h).
 *
 * One (batch, head) problem is q [L, E], k [S, E], v [S, Ev]. Queries are
 * taken in blocks of TT_ATT_BR rows; a block's scores against every key it
 * may see (all S, or under the causal mask the keys up to its last row) sit
 * in one f32 scratch panel [rows, nk] that stays in cache between the
 * score product, the row softmax and the product with v. Nothing of size
 * L x S reaches memory, and under the causal mask no product computes the
 * hidden triangle (below).
 *
 * Backward recomputes each block's probabilities from q and k (the
 * softmax is exact: max, exp, sum per row, as forward), then
 *   dv += p^T do,  dp = do v^T,  ds = p * (dp - rowsum(p * dp)) * scale,
 *   dq = ds k,     dk += ds^T q
 * (rowsum(p * dp) is rowsum(do * out), without reading out). Given the
 * forward's kept probabilities (tt_kernel_attention_ex's probs: the
 * executable pairs a step's forward and backward), the backward reads p
 * instead of recomputing it.
 * One thread owns a whole (batch, head) problem, so dk and dv accumulate
 * without races. The products are small (a head's E is 32-128, a block
 * 64 rows), too small for tt_sgemm's packing to pay, so they run on the
 * register-tiled loops below, which also narrow each 4-row tile's range
 * to the keys the causal mask leaves it: the triangle is skipped in every
 * product, not only by whole blocks. F16/BF16 problems are widened to f32
 * copies first; rows are softmaxed with tt_expf_fast, the exp that the
 * softmax kernel and tier 1 use.
 *
 * Semantics follow PyTorch's CPU flash attention
 * (_scaled_dot_product_flash_attention_for_cpu): a row that sees no key
 * (every score -inf) gives zeros, with logsumexp 0, and a zero gradient. */
#include <math.h>
#include <stdlib.h>

#include "kernels/kernel_util.h"

#if defined(__GNUC__) && defined(__x86_64__) && !defined(__clang__)
#include <immintrin.h>
#define TT_ATT_HAVE_AVX512 1
#endif

#define TT_ATT_BR 64 /* query rows per block */
#define TT_ATT_MR 4  /* rows of a micro-tile */
#define TT_ATT_NR 32 /* columns of a micro-tile */

/* The micro-kernels' clones: AVX-512 and AVX2 (both with FMA, which
 * "avx512f" alone does not enable) and baseline; fp-contract lets a*b+c
 * become one FMA (ISO C mode turns contraction off). Not under
 * ThreadSanitizer or clang, as TT_TARGET_CLONES. */
#if defined(__GNUC__) && defined(__x86_64__) && !defined(__clang__) && \
    !defined(__SANITIZE_THREAD__)
#define TT_ATT_CLONES                                                                  \
  __attribute__((target_clones("arch=x86-64-v4", "arch=x86-64-v3", "default"),         \
                 optimize("fp-contract=fast")))
#else
#define TT_ATT_CLONES
#endif

typedef struct tt_att_ctx_s {
  const tt_view_t *q, *k, *v, *mask, *go;
  tt_view_t *out, *lse, *gq, *gk, *gv;
  int causal;
  float scale;
  int64_t B, H, L, S, E, Ev, nblocks;
  int64_t ms[4]; /* mask strides in elements (0 for a broadcast dim) */
  /* Where each operand's problems live (tt_att_layout_t, kernels.h):
   * q, k, v, out, grad_out, grad_q, grad_k, grad_v. */
  tt_att_layout_t lay[8];
  /* Probabilities kept between a forward and its backward
   * (tt_attention_probs_ld): written by the forward when psave is set,
   * read by the backward instead of recomputing them when pload is. */
  float *psave;
  const float *pload;
  int64_t pld;
  int failed;
} tt_att_ctx_t;

enum { TT_ATT_Q, TT_ATT_K, TT_ATT_V, TT_ATT_O, TT_ATT_GO, TT_ATT_GQ, TT_ATT_GK, TT_ATT_GV };

/* ---- the small products --------------------------------------------------
 * c [m, n] (ldc) = (acc ? c : 0) + A B, A(i, p) = a[i*rsa + p*csa] (any
 * strides: its values are broadcast one at a time), B [k, n] row-major
 * (ldb). Rows go in tiles of MR, columns in tiles of NR held in registers
 * across the whole p loop. Under a causal mask each row tile also narrows
 * its range (rows are offset by `off` into the query block):
 *   TT_ATT_K_UPTO_ROW  p < off + last row + 1   (p is a key: p v, ds k)
 *   TT_ATT_K_FROM_ROW  p >= first row - off     (rows are keys, p a query
 *                                                row of the block: p^T do,
 *                                                ds^T q)
 *   TT_ATT_N_UPTO_ROW  columns < off + last row + 1, rounded up to
 *                                                whole tiles (columns are
 *                                                keys: q k^T, do v^T;
 *                                                columns past them are not
 *                                                written) */
typedef enum tt_att_tri_e {
  TT_ATT_FULL = 0,
  TT_ATT_K_UPTO_ROW,
  TT_ATT_K_FROM_ROW,
  TT_ATT_N_UPTO_ROW,
} tt_att_tri_t;

static TT_ALWAYS_INLINE void tt_att_tile(int mr, int nr, const float *a, int64_t rsa,
                                         int64_t csa, const float *b, int64_t ldb, float *c,
                                         int64_t ldc, int64_t p0, int64_t p1, int acc) {
  float t[TT_ATT_MR][TT_ATT_NR];
  for (int r = 0; r < mr; ++r)
    for (int j = 0; j < nr; ++j) t[r][j] = acc ? c[r * ldc + j] : 0.0f;
  for (int64_t p = p0; p < p1; ++p) {
    const float *bp = b + p * ldb;
    for (int r = 0; r < mr; ++r) {
      float av = a[r * rsa + p * csa];
      for (int j = 0; j < nr; ++j) t[r][j] += av * bp[j];
    }
  }
  for (int r = 0; r < mr; ++r)
    for (int j = 0; j < nr; ++j) c[r * ldc + j] = t[r][j];
}

/* One row tile (mr rows from row i) over columns [0, n). */
static TT_ALWAYS_INLINE void tt_att_rows(int mr, int64_t n, const float *a, int64_t rsa,
                                         int64_t csa, const float *b, int64_t ldb, float *c,
                                         int64_t ldc, int64_t p0, int64_t p1, int acc) {
  int64_t j = 0;
  for (; j + TT_ATT_NR <= n; j += TT_ATT_NR)
    tt_att_tile(mr, TT_ATT_NR, a, rsa, csa, b + j, ldb, c + j, ldc, p0, p1, acc);
  if (j < n) {
    /* A narrower last tile: one row at a time, columns of runtime width. */
    for (int r = 0; r < mr; ++r) {
      float t[TT_ATT_NR];
      int64_t w = n - j;
      const float *ar = a + r * rsa;
      float *cr = c + r * ldc + j;
      for (int64_t q = 0; q < w; ++q) t[q] = acc ? cr[q] : 0.0f;
      for (int64_t p = p0; p < p1; ++p) {
        float av = ar[p * csa];
        const float *bp = b + p * ldb + j;
        for (int64_t q = 0; q < w; ++q) t[q] += av * bp[q];
      }
      for (int64_t q = 0; q < w; ++q) cr[q] = t[q];
    }
  }
}

TT_ATT_CLONES
static void tt_att_mm(int64_t m, int64_t n, int64_t k, const float *a, int64_t rsa,
                      int64_t csa, const float *b, int64_t ldb, float *c, int64_t ldc, int acc,
                      tt_att_tri_t tri, int64_t off) {
  for (int64_t i = 0; i < m;) {
    int mr = m - i >= TT_ATT_MR ? TT_ATT_MR : 1;
    int64_t last = i + mr - 1, p0 = 0, p1 = k, nn = n;
    if (tri == TT_ATT_K_UPTO_ROW) p1 = tt_min64(k, off + last + 1);
    if (tri == TT_ATT_K_FROM_ROW) p0 = tt_max64(0, i - off);
    /* Whole tiles of columns: the few past the last row's keys cost less
     * than a narrow tile, and every reader stops at its row's keys. */
    if (tri == TT_ATT_N_UPTO_ROW)
      nn = tt_min64(n, (off + last + TT_ATT_NR) / TT_ATT_NR * TT_ATT_NR);
    if (p1 < p0) p1 = p0;
    if (mr == TT_ATT_MR)
      tt_att_rows(TT_ATT_MR, nn, a + i * rsa, rsa, csa, b, ldb, c + i * ldc, ldc, p0, p1, acc);
    else
      tt_att_rows(1, nn, a + i * rsa, rsa, csa, b, ldb, c + i * ldc, ldc, p0, p1, acc);
    i += mr;
  }
}

/* dst [cols, rows] = src [rows, cols]^T (a head's keys: 0.6 us for
 * 64 x 32; 16 x 16 blocks and AVX-512 gathers were no faster). */
static void tt_att_transpose(const float *src, int64_t rows, int64_t cols, float *dst) {
  for (int64_t c = 0; c < cols; ++c)
    for (int64_t r = 0; r < rows; ++r) dst[c * rows + r] = src[r * cols + c];
}

/* c[0:nk] (+)= A^T B over key rows (A(j, p) = a[j + p*csa]): rows below
 * `done` hold earlier blocks' sums and accumulate; rows from it on were
 * never written and are stored fresh (no zeroing pass over dk and dv). */
static void tt_att_mm_keys(int64_t nk, int64_t done, int64_t n, int64_t k, const float *a,
                           int64_t csa, const float *b, int64_t ldb, float *c, int64_t ldc,
                           tt_att_tri_t tri, int64_t r0) {
  int64_t split = tt_min64(done, nk);
  if (split > 0) tt_att_mm(split, n, k, a, 1, csa, b, ldb, c, ldc, 1, tri, r0);
  if (nk > split)
    tt_att_mm(nk - split, n, k, a + split, 1, csa, b, ldb, c + split * ldc, ldc, 0, tri,
              r0 - split);
}

/* Element offset of problem bh's first row in operand `which`. */
static int64_t tt_att_base(const tt_att_ctx_t *c, int which, int64_t bh) {
  const tt_att_layout_t *l = &c->lay[which];
  return l->off + bh / c->H * l->sb + bh % c->H * l->sh;
}

/* Problem bh's [rows, w] block of operand `which` (view t) as dense f32:
 * t's own memory when it is F32 with dense rows, else gathered and
 * converted into buf. */
static const float *tt_att_f32(const tt_att_ctx_t *c, int which, const tt_view_t *t,
                               int64_t bh, int64_t rows, int64_t w, float *buf) {
  int64_t base = tt_att_base(c, which, bh), sr = c->lay[which].sr;
  if (t->dtype == TT_F32 && sr == w) return (const float *)t->data + base;
  if (sr == w) {
    tt_load_f32(t->data, t->dtype, base, 1, rows * w, buf);
  } else {
    for (int64_t r = 0; r < rows; ++r)
      tt_load_f32(t->data, t->dtype, base + r * sr, 1, w, buf + r * w);
  }
  return buf;
}

/* Output `which` (view t), problem bh, rows [r0, r0 + rows) of w columns:
 * where an F32 output's rows start (*ld: their stride), else NULL, and
 * the rows go through a dense buffer and tt_att_store. */
static float *tt_att_out_rows(const tt_att_ctx_t *c, int which, tt_view_t *t, int64_t bh,
                              int64_t r0, int64_t *ld) {
  if (t->dtype != TT_F32) return NULL;
  *ld = c->lay[which].sr;
  return (float *)t->data + tt_att_base(c, which, bh) + r0 * *ld;
}

static void tt_att_store(const tt_att_ctx_t *c, int which, tt_view_t *t, int64_t bh, int64_t r0,
                         int64_t rows, int64_t w, const float *src) {
  int64_t sr = c->lay[which].sr, base = tt_att_base(c, which, bh) + r0 * sr;
  if (sr == w) {
    tt_store_f32(src, rows * w, t->data, t->dtype, base);
    return;
  }
  for (int64_t r = 0; r < rows; ++r) tt_store_f32(src + r * w, w, t->data, t->dtype, base + r * sr);
}

/* Keys that query row i (of L) may see. */
static int64_t tt_att_visible(const tt_att_ctx_t *c, int64_t i) {
  return c->causal ? tt_min64(c->S, i + 1) : c->S;
}

/* Rows of the score panels are padded to whole vectors of 16, so the
 * softmax of a short causal row (keys 1..64) runs no scalar remainder
 * loops: its padding is set to -inf, whose exp is 0. */
static int64_t tt_att_pad16(int64_t n) {
  return (n + TT_ROW_LANES - 1) / TT_ROW_LANES * TT_ROW_LANES;
}

#ifdef TT_ATT_HAVE_AVX512
/* tt_expf_fast on 16 lanes, operation for operation (fastmath.h), so the
 * results are the same bits: max/min with the constant first keep a NaN
 * as the scalar selects do. A change to one must be made to the other:
 * test_attention_fast_row_softmax (tests/c) fails when they drift apart. */
__attribute__((target("avx512f"))) static inline __m512 tt_att_exp16(__m512 x) {
  __m512 xc = _mm512_max_ps(_mm512_set1_ps(-88.0f), x);
  xc = _mm512_min_ps(_mm512_set1_ps(89.0f), xc);
  const __m512 big = _mm512_set1_ps(12582912.0f);
  __m512 n = _mm512_sub_ps(_mm512_fmadd_ps(xc, _mm512_set1_ps(1.44269504088896341f), big), big);
  __m512 r = _mm512_fmadd_ps(n, _mm512_set1_ps(-0.693359375f), xc);
  r = _mm512_fmadd_ps(n, _mm512_set1_ps(2.12194440e-4f), r);
  __m512 p = _mm512_set1_ps(1.9875691500e-4f);
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.3981999507e-3f));
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(8.3334519073e-3f));
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(4.1665795894e-2f));
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.6666665459e-1f));
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(5.0000001201e-1f));
  p = _mm512_add_ps(_mm512_fmadd_ps(_mm512_mul_ps(p, r), r, r), _mm512_set1_ps(1.0f));
  __m512i ni = _mm512_maskz_cvttps_epi32(_mm512_cmp_ps_mask(n, n, _CMP_ORD_Q), n);
  __m512i n1 = _mm512_srai_epi32(ni, 1), n2 = _mm512_sub_epi32(ni, n1);
  const __m512i bias = _mm512_set1_epi32(127);
  __m512 s1 = _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_add_epi32(n1, bias), 23));
  __m512 s2 = _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_add_epi32(n2, bias), 23));
  __mmask16 flush = _mm512_cmp_ps_mask(x, _mm512_set1_ps(-87.33654f), _CMP_LT_OQ);
  return _mm512_maskz_mov_ps((__mmask16)~flush, _mm512_mul_ps(_mm512_mul_ps(p, s1), s2));
}

/* The softmax of an unmasked row of w <= 64 padded keys (lim visible) in
 * registers: the general loop below makes five passes over the row in
 * memory with a call for its max, about a third of a decoder's attention
 * forward on its 64-key causal rows. The same values bit for bit: the
 * same exp, the max of the same floats (a NaN still makes it NaN), the
 * sum's 16 lanes added and folded in tt_row_sum_f32's order. Returns 0,
 * writing nothing, for a row without a finite score. */
__attribute__((target("avx512f"))) static int tt_att_softmax_row16(float *s, int64_t lim,
                                                                  int64_t w, float scale,
                                                                  float *lse) {
  __m512 v[4];
  int nv = (int)(w / 16);
  __mmask16 nan = 0;
  const __m512 ninf = _mm512_set1_ps(-INFINITY), vs = _mm512_set1_ps(scale);
  __m512 mx = ninf;
  for (int q = 0; q < nv; ++q) {
    int64_t left = lim - 16 * q;
    __mmask16 vis = left >= 16 ? (__mmask16)0xFFFF
                    : left > 0 ? (__mmask16)((1u << left) - 1u)
                               : (__mmask16)0;
    v[q] = _mm512_mask_mul_ps(ninf, vis, _mm512_loadu_ps(s + 16 * q), vs);
    nan |= _mm512_cmp_ps_mask(v[q], v[q], _CMP_UNORD_Q);
    mx = _mm512_max_ps(mx, v[q]);
  }
  float m = nan ? NAN : _mm512_reduce_max_ps(mx);
  if (m == -INFINITY) return 0;
  const __m512 vm = _mm512_set1_ps(m);
  __m512 acc = _mm512_setzero_ps();
  for (int q = 0; q < nv; ++q) {
    v[q] = tt_att_exp16(_mm512_sub_ps(v[q], vm));
    acc = _mm512_add_ps(acc, v[q]);
  }
  __m256 a8 = _mm256_add_ps(_mm512_castps512_ps256(acc),
                            _mm256_castpd_ps(_mm512_extractf64x4_pd(_mm512_castps_pd(acc), 1)));
  __m128 a4 = _mm_add_ps(_mm256_castps256_ps128(a8), _mm256_extractf128_ps(a8, 1));
  float l[4];
  _mm_storeu_ps(l, a4);
  float sum = (l[0] + l[2]) + (l[1] + l[3]);
  const __m512 inv = _mm512_set1_ps(1.0f / sum);
  for (int q = 0; q < nv; ++q) _mm512_storeu_ps(s + 16 * q, _mm512_mul_ps(v[q], inv));
  if (lse) *lse = m + logf(sum);
  return 1;
}
#endif

/* One row of scores s[0..nk) into probabilities: s = s * scale + mask for
 * the lim visible keys, softmax over them, zeros for keys lim..nk (the row
 * has room for tt_att_pad16(nk) floats). Returns the row's logsumexp when
 * want_lse (0 for a row with no visible finite score), else 0. mrow: the
 * row's additive mask as f32 (NULL: none). */
TT_ATT_CLONES
static float tt_att_softmax_row(float *s, const float *mrow, int64_t lim, int64_t nk,
                                float scale, int want_lse) {
  int64_t w = tt_att_pad16(lim);
#ifdef TT_ATT_HAVE_AVX512
  if (!mrow && lim > 0 && w <= 64 && __builtin_cpu_supports("avx512f")) {
    float lse = 0.0f;
    if (!tt_att_softmax_row16(s, lim, w, scale, want_lse ? &lse : NULL)) {
      for (int64_t j = 0; j < nk; ++j) s[j] = 0.0f;
      return 0.0f;
    }
    if (nk > w) memset(s + w, 0, (size_t)(nk - w) * sizeof(float));
    return lse;
  }
#endif
  if (mrow) {
    for (int64_t j = 0; j < lim; ++j) s[j] = s[j] * scale + mrow[j];
    for (int64_t j = lim; j < w; ++j) s[j] = -INFINITY;
  } else {
    /* One select over whole vectors: a loop to lim ended in up to 15
     * scalar iterations, a sizeable part of a 32-key row. */
    for (int64_t j = 0; j < w; ++j) s[j] = j < lim ? s[j] * scale : -INFINITY;
  }
  float m = lim > 0 ? tt_row_minmax_f32(s, w, 1) : -INFINITY;
  if (m == -INFINITY) {
    for (int64_t j = 0; j < nk; ++j) s[j] = 0.0f;
    return 0.0f;
  }
  for (int64_t j = 0; j < w; ++j) s[j] = tt_expf_fast(s[j] - m);
  float sum = tt_row_sum_f32(s, NULL, w);
  float inv = 1.0f / sum;
  for (int64_t j = 0; j < w; ++j) s[j] *= inv;
  if (nk > w) memset(s + w, 0, (size_t)(nk - w) * sizeof(float));
  return want_lse ? m + logf(sum) : 0.0f;
}

/* The mask's row for (b, h, i) over keys [0, n) as f32: a pointer into the
 * mask when it is a contiguous f32 row, else converted into buf. */
static const float *tt_att_mask_row(const tt_att_ctx_t *c, int64_t b, int64_t h, int64_t i,
                                    int64_t n, float *buf) {
  if (!c->mask) return NULL;
  int64_t off = b * c->ms[0] + h * c->ms[1] + i * c->ms[2];
  if (c->mask->dtype == TT_F32 && c->ms[3] == 1) return (const float *)c->mask->data + off;
  tt_load_f32(c->mask->data, c->mask->dtype, off, c->ms[3], n, buf);
  return buf;
}

/* Probabilities of query rows [r0, r0 + rb) of problem bh against keys
 * [0, nk) into p [rb, nk] (row stride ld >= tt_att_pad16(nk)), from q
 * (the problem's [L, E] rows) and kt (its keys transposed, [E, S]);
 * lse_out (optional) gets each row's logsumexp. */
static void tt_att_probs(const tt_att_ctx_t *c, int64_t bh, const float *q, const float *kt,
                         int64_t r0, int64_t rb, int64_t nk, float *p, int64_t ld, float *mbuf,
                         float *lse_out) {
  tt_att_mm(rb, nk, c->E, q + r0 * c->E, c->E, 1, kt, c->S, p, ld, 0,
            c->causal ? TT_ATT_N_UPTO_ROW : TT_ATT_FULL, r0);
  int64_t b = bh / c->H, h = bh % c->H;
  for (int64_t i = 0; i < rb; ++i) {
    const float *mrow = tt_att_mask_row(c, b, h, r0 + i, nk, mbuf);
    float l = tt_att_softmax_row(p + i * ld, mrow, tt_min64(tt_att_visible(c, r0 + i), nk), nk,
                                 c->scale, lse_out != NULL);
    if (lse_out) lse_out[i] = l;
  }
}

/* Keys a block of rows [r0, r0 + rb) needs. */
static int64_t tt_att_block_keys(const tt_att_ctx_t *c, int64_t r0, int64_t rb) {
  return tt_att_visible(c, r0 + rb - 1);
}

static void tt_att_forward_range(void *arg, int64_t begin, int64_t end) {
  tt_att_ctx_t *c = arg;
  int64_t L = c->L, S = c->S, E = c->E, Ev = c->Ev;
  /* p [BR, S], mask row [S], lse row [BR], k^T [E, S], and dense f32
   * copies of q, k, v and the output block (used for narrow dtypes and
   * strided operands). */
  int64_t Sp = tt_att_pad16(S);
  size_t floats = (size_t)(TT_ATT_BR * Sp + S + TT_ATT_BR + E * S) +
                  (size_t)(L * E + S * E + S * Ev + TT_ATT_BR * Ev);
  float *p = tt_scratch_alloc(floats * sizeof(float));
  if (!p) {
    __atomic_store_n(&c->failed, 1, __ATOMIC_RELAXED);
    return;
  }
  float *mbuf = p + TT_ATT_BR * Sp, *lrow = mbuf + S, *kt = lrow + TT_ATT_BR;
  float *qb = kt + E * S, *kb = qb + L * E, *vb = kb + S * E, *obuf = vb + S * Ev;
  int64_t loaded = -1;
  const float *q = NULL, *v = NULL;
  for (int64_t it = begin; it < end; ++it) {
    int64_t bh = it / c->nblocks, r0 = (it % c->nblocks) * TT_ATT_BR;
    int64_t rb = tt_min64(TT_ATT_BR, L - r0);
    int64_t nk = tt_att_block_keys(c, r0, rb);
    if (bh != loaded) {
      q = tt_att_f32(c, TT_ATT_Q, c->q, bh, L, E, qb);
      v = tt_att_f32(c, TT_ATT_V, c->v, bh, S, Ev, vb);
      tt_att_transpose(tt_att_f32(c, TT_ATT_K, c->k, bh, S, E, kb), S, E, kt);
      loaded = bh;
    }
    /* The block's probabilities: in scratch, or where the backward will
     * read them. */
    float *pb = c->psave ? c->psave + (bh * L + r0) * c->pld : p;
    int64_t pld = c->psave ? c->pld : tt_att_pad16(nk);
    tt_att_probs(c, bh, q, kt, r0, rb, nk, pb, pld, mbuf, c->lse ? lrow : NULL);
    if (c->lse) tt_store_f32(lrow, rb, c->lse->data, c->lse->dtype, bh * L + r0);
    if (!c->out) continue;
    int64_t ld = Ev;
    float *dst = tt_att_out_rows(c, TT_ATT_O, c->out, bh, r0, &ld);
    tt_att_mm(rb, Ev, nk, pb, pld, 1, v, Ev, dst ? dst : obuf, dst ? ld : Ev, 0,
              c->causal ? TT_ATT_K_UPTO_ROW : TT_ATT_FULL, r0);
    if (!dst) tt_att_store(c, TT_ATT_O, c->out, bh, r0, rb, Ev, obuf);
  }
  tt_scratch_free(p);
}

/* ds = p * (dp - D) * scale in place in dp [rb, nk] (row stride
 * tt_att_pad16(nk); p's is pld), over each row's visible keys, with D = sum_j p dp:
 * the row's sum of grad_out * out, taken from the f32 probabilities rather
 * than from the out tensor, which for F16/BF16 was rounded (the rounding
 * error of D is amplified where dp - D cancels). Zeros after the visible
 * keys: the causal products read whole tiles, and dp there was never
 * written. */
TT_ATT_CLONES
static void tt_att_dscores(const tt_att_ctx_t *c, const float *p, int64_t pld, float *dp,
                           int64_t r0, int64_t rb, int64_t nk) {
  float scale = c->scale;
  int64_t ld = tt_att_pad16(nk);
  for (int64_t i = 0; i < rb; ++i) {
    const float *pr = p + i * pld;
    float *r = dp + i * ld;
    int64_t lim = tt_min64(tt_att_visible(c, r0 + i), nk), w = tt_att_pad16(lim);
    float di = tt_row_sum_f32(pr, r, lim);
    for (int64_t j = 0; j < w; ++j) r[j] = j < lim ? pr[j] * (r[j] - di) * scale : 0.0f;
    if (nk > w) memset(r + w, 0, (size_t)(nk - w) * sizeof(float));
  }
}

static void tt_att_backward_range(void *arg, int64_t begin, int64_t end) {
  tt_att_ctx_t *c = arg;
  int64_t L = c->L, S = c->S, E = c->E, Ev = c->Ev;
  /* p, dp [BR, S]; mask row [S]; k^T [E, S], v^T [Ev, S]; f32
   * accumulators dk [S, E], dv [S, Ev]; dense f32 copies of q, k, v,
   * grad_out and a dq block (narrow dtypes, strided operands). */
  int64_t Sp = tt_att_pad16(S);
  size_t floats = (size_t)(2 * TT_ATT_BR * Sp + S + E * S + Ev * S + S * E + S * Ev) +
                  (size_t)(L * E + S * E + S * Ev + L * Ev + TT_ATT_BR * E);
  float *p = tt_scratch_alloc(floats * sizeof(float));
  if (!p) {
    __atomic_store_n(&c->failed, 1, __ATOMIC_RELAXED);
    return;
  }
  float *dp = p + TT_ATT_BR * Sp, *mbuf = dp + TT_ATT_BR * Sp, *kt = mbuf + S;
  float *vt = kt + E * S, *dkb = vt + Ev * S, *dvb = dkb + S * E;
  float *qb = dvb + S * Ev, *kb = qb + L * E, *vb = kb + S * E, *gob = vb + S * Ev;
  float *dqb = gob + L * Ev;
  for (int64_t bh = begin; bh < end; ++bh) {
    const float *q = tt_att_f32(c, TT_ATT_Q, c->q, bh, L, E, qb);
    const float *k = tt_att_f32(c, TT_ATT_K, c->k, bh, S, E, kb);
    const float *v = tt_att_f32(c, TT_ATT_V, c->v, bh, S, Ev, vb);
    const float *go = tt_att_f32(c, TT_ATT_GO, c->go, bh, L, Ev, gob);
    if (!c->pload) tt_att_transpose(k, S, E, kt); /* only the recomputed scores read it */
    tt_att_transpose(v, S, Ev, vt);
    int64_t dk_ld = E, dv_ld = Ev;
    float *dk = tt_att_out_rows(c, TT_ATT_GK, c->gk, bh, 0, &dk_ld);
    float *dv = tt_att_out_rows(c, TT_ATT_GV, c->gv, bh, 0, &dv_ld);
    int dk_direct = dk != NULL, dv_direct = dv != NULL;
    if (!dk) dk = dkb;
    if (!dv) dv = dvb;
    int64_t done = 0; /* key rows of dk and dv written so far */
    tt_att_tri_t k_upto = c->causal ? TT_ATT_K_UPTO_ROW : TT_ATT_FULL;
    tt_att_tri_t k_from = c->causal ? TT_ATT_K_FROM_ROW : TT_ATT_FULL;
    tt_att_tri_t n_upto = c->causal ? TT_ATT_N_UPTO_ROW : TT_ATT_FULL;
    for (int64_t r0 = 0; r0 < L; r0 += TT_ATT_BR) {
      int64_t rb = tt_min64(TT_ATT_BR, L - r0);
      int64_t nk = tt_att_block_keys(c, r0, rb);
      int64_t ld = tt_att_pad16(nk), dq_ld = E;
      const float *go_r = go + r0 * Ev, *q_r = q + r0 * E;
      float *dq = tt_att_out_rows(c, TT_ATT_GQ, c->gq, bh, r0, &dq_ld);
      int dq_direct = dq != NULL;
      if (!dq) dq = dqb;
      /* The block's probabilities: the forward's, or recomputed. */
      const float *pb = p;
      int64_t pld = ld;
      if (c->pload) {
        pb = c->pload + (bh * L + r0) * c->pld;
        pld = c->pld;
      } else {
        tt_att_probs(c, bh, q, kt, r0, rb, nk, p, ld, mbuf, NULL);
      }
      /* dv[0:nk] += p^T do */
      tt_att_mm_keys(nk, done, Ev, rb, pb, pld, go_r, Ev, dv, dv_ld, k_from, r0);
      /* dp = do v[0:nk]^T */
      tt_att_mm(rb, nk, Ev, go_r, Ev, 1, vt, S, dp, ld, 0, n_upto, r0);
      tt_att_dscores(c, pb, pld, dp, r0, rb, nk);
      /* dq = ds k[0:nk];  dk[0:nk] += ds^T q */
      tt_att_mm(rb, E, nk, dp, ld, 1, k, E, dq, dq_ld, 0, k_upto, r0);
      tt_att_mm_keys(nk, done, E, rb, dp, ld, q_r, E, dk, dk_ld, k_from, r0);
      done = tt_max64(done, nk);
      if (!dq_direct) tt_att_store(c, TT_ATT_GQ, c->gq, bh, r0, rb, E, dq);
    }
    /* Keys no query saw (causal, S > L). */
    for (int64_t r = done; r < S; ++r) {
      memset(dk + r * dk_ld, 0, (size_t)E * sizeof(float));
      memset(dv + r * dv_ld, 0, (size_t)Ev * sizeof(float));
    }
    if (!dk_direct) tt_att_store(c, TT_ATT_GK, c->gk, bh, 0, S, E, dk);
    if (!dv_direct) tt_att_store(c, TT_ATT_GV, c->gv, bh, 0, S, Ev, dv);
  }
  tt_scratch_free(p);
}

static void tt_att_zero(tt_view_t *t) {
  int64_t n = tt_view_numel(t);
  if (n) memset(t->data, 0, (size_t)n * tt_dtype_size(t->dtype));
}

static int tt_att_float(tt_dtype_t dt) { return dt == TT_F32 || dt == TT_F16 || dt == TT_BF16; }

/* Rows (L or S) and columns (E or Ev) of one problem of operand `which`. */
static void tt_att_extent(const tt_att_ctx_t *c, int which, int64_t *rows, int64_t *cols) {
  static const uint8_t key_rows[8] = {0, 1, 1, 0, 0, 0, 1, 1};
  static const uint8_t e_cols[8] = {1, 1, 0, 0, 0, 1, 1, 0};
  *rows = key_rows[which] ? c->S : c->L;
  *cols = e_cols[which] ? c->E : c->Ev;
}

/* Every operand dense [B, H, rows, cols]. */
static void tt_att_dense_layouts(tt_att_ctx_t *c) {
  for (int i = 0; i < 8; ++i) {
    int64_t rows, cols;
    tt_att_extent(c, i, &rows, &cols);
    c->lay[i] = (tt_att_layout_t){0, c->H * rows * cols, rows * cols, cols};
  }
}

/* Whether operand which's layout stays inside view t. */
static int tt_att_layout_fits(const tt_att_ctx_t *c, int which, const tt_view_t *t) {
  const tt_att_layout_t *l = &c->lay[which];
  int64_t rows, cols;
  tt_att_extent(c, which, &rows, &cols);
  if (l->off < 0 || l->sb < 0 || l->sh < 0 || l->sr < 0) return 0;
  if (c->B == 0 || c->H == 0 || rows == 0 || cols == 0) return 1;
  int64_t last = l->off + (c->B - 1) * l->sb + (c->H - 1) * l->sh + (rows - 1) * l->sr + cols - 1;
  return last < tt_view_numel(t);
}

/* The mask (if any): rank 4, float, broadcasting to [B, H, L, S]; its
 * strides into c->ms. */
static tt_status_t tt_att_setup_mask(const char *op, const tt_view_t *mask, tt_att_ctx_t *c) {
  if (!mask) return NULL;
  TT_RETURN_IF_ERROR(tt_check_view(op, "mask", mask));
  const int64_t full[4] = {c->B, c->H, c->L, c->S};
  int ok = mask->shape.rank == 4 && tt_att_float(mask->dtype);
  int64_t stride = 1;
  for (int d2 = 3; ok && d2 >= 0; --d2) {
    int64_t n = mask->shape.dims[d2];
    ok = n == 1 || n == full[d2];
    c->ms[d2] = n == 1 ? 0 : stride;
    stride *= n;
  }
  if (!ok) {
    char a[128];
    return tt_status_make(TT_INVALID_ARGUMENT,
                          "%s: mask %s (%s) must be a float tensor of rank 4 that broadcasts "
                          "to [%lld, %lld, %lld, %lld]", op,
                          tt_dims_str(&mask->shape, a, sizeof a), tt_dtype_name(mask->dtype),
                          (long long)c->B, (long long)c->H, (long long)c->L, (long long)c->S);
  }
  c->mask = mask;
  return NULL;
}

/* The strided form's context: sizes and layouts from geom, the views as
 * the buffers the layouts index (checked to stay inside them). */
static tt_status_t tt_att_setup_geom(const char *op, const tt_att_geom_t *g,
                                     const tt_view_t *const *views, const tt_view_t *mask,
                                     int causal, double scale, tt_att_ctx_t *c) {
  memset(c, 0, sizeof(*c));
  static const char *names[8] = {"query", "key", "value", "out", "grad_out", "grad_query",
                                 "grad_key", "grad_value"};
  if (g->B < 0 || g->H < 0 || g->L < 0 || g->S < 0 || g->E < 0 || g->Ev < 0)
    return tt_status_make(TT_INVALID_ARGUMENT, "%s: negative size", op);
  c->B = g->B;
  c->H = g->H;
  c->L = g->L;
  c->S = g->S;
  c->E = g->E;
  c->Ev = g->Ev;
  c->causal = causal;
  c->scale = (float)scale;
  tt_dtype_t dt = views[0] ? views[0]->dtype : TT_F32;
  if (!tt_att_float(dt))
    return tt_status_make(TT_TYPE_ERROR, "%s: query must be float32, float16 or bfloat16", op);
  for (int i = 0; i < 8; ++i) {
    c->lay[i] = g->lay[i];
    if (!views[i]) continue;
    TT_RETURN_IF_ERROR(tt_check_view(op, names[i], views[i]));
    if (views[i]->dtype != dt)
      return tt_status_make(TT_TYPE_ERROR, "%s: %s is %s, query %s", op, names[i],
                            tt_dtype_name(views[i]->dtype), tt_dtype_name(dt));
    if (!tt_att_layout_fits(c, i, views[i]))
      return tt_status_make(TT_INVALID_ARGUMENT,
                            "%s: the %s layout (offset %lld, strides %lld, %lld, %lld) "
                            "reaches past its buffer of %lld elements",
                            op, names[i], (long long)c->lay[i].off, (long long)c->lay[i].sb,
                            (long long)c->lay[i].sh, (long long)c->lay[i].sr,
                            (long long)tt_view_numel(views[i]));
  }
  c->q = views[0];
  c->k = views[1];
  c->v = views[2];
  /* The mask keeps its own dense shape (broadcast dims of size 1). */
  return tt_att_setup_mask(op, mask, c);
}

/* Checks shapes and dtypes and fills the shared part of the context. */
static tt_status_t tt_att_setup(const char *op, const tt_view_t *q, const tt_view_t *k,
                                const tt_view_t *v, const tt_view_t *mask, int causal,
                                double scale, tt_att_ctx_t *c) {
  memset(c, 0, sizeof(*c));
  TT_RETURN_IF_ERROR(tt_check_view(op, "query", q));
  TT_RETURN_IF_ERROR(tt_check_view(op, "key", k));
  TT_RETURN_IF_ERROR(tt_check_view(op, "value", v));
  if (q->shape.rank != 4 || k->shape.rank != 4 || v->shape.rank != 4)
    return tt_status_make(TT_INVALID_ARGUMENT,
                          "%s: query, key and value must be rank 4 [B, H, L, E], got ranks %d, "
                          "%d, %d", op, q->shape.rank, k->shape.rank, v->shape.rank);
  if (!tt_att_float(q->dtype) || k->dtype != q->dtype || v->dtype != q->dtype)
    return tt_status_make(TT_TYPE_ERROR,
                          "%s: query, key and value must share one of float32, float16, "
                          "bfloat16, got %s, %s, %s", op, tt_dtype_name(q->dtype),
                          tt_dtype_name(k->dtype), tt_dtype_name(v->dtype));
  const int64_t *qd = q->shape.dims, *kd = k->shape.dims, *vd = v->shape.dims;
  if (kd[0] != qd[0] || vd[0] != qd[0] || kd[1] != qd[1] || vd[1] != qd[1] ||
      kd[3] != qd[3] || vd[2] != kd[2]) {
    char a[128], b[128], d[128];
    return tt_status_make(TT_INVALID_ARGUMENT,
                          "%s: shapes do not match: query %s, key %s, value %s", op,
                          tt_dims_str(&q->shape, a, sizeof a), tt_dims_str(&k->shape, b, sizeof b),
                          tt_dims_str(&v->shape, d, sizeof d));
  }
  c->q = q;
  c->k = k;
  c->v = v;
  c->B = qd[0];
  c->H = qd[1];
  c->L = qd[2];
  c->E = qd[3];
  c->S = kd[2];
  c->Ev = vd[3];
  c->causal = causal;
  c->scale = (float)scale;
  tt_att_dense_layouts(c);
  return tt_att_setup_mask(op, mask, c);
}

static tt_status_t tt_att_expect(const char *op, const char *what, const tt_view_t *t,
                                 tt_dtype_t dt, const int64_t *dims, int rank) {
  TT_RETURN_IF_ERROR(tt_check_view(op, what, t));
  int ok = t->dtype == dt && t->shape.rank == rank;
  for (int d = 0; ok && d < rank; ++d) ok = t->shape.dims[d] == dims[d];
  if (ok) return NULL;
  char a[128];
  tt_shape_t want = {.rank = rank};
  for (int d = 0; d < rank; ++d) want.dims[d] = dims[d];
  char b[128];
  return tt_status_make(TT_INVALID_ARGUMENT, "%s: %s is %s %s, expected %s %s", op, what,
                        tt_dtype_name(t->dtype), tt_dims_str(&t->shape, a, sizeof a),
                        tt_dtype_name(dt), tt_dims_str(&want, b, sizeof b));
}

/* Zeros into rows [0, rows) of every problem of output `which`, through
 * its layout (no keys, or no queries). */
static tt_status_t tt_att_zero_out(tt_att_ctx_t *c, const char *op, int which, tt_view_t *t,
                                   int64_t rows, int64_t w) {
  if (!t) return NULL;
  float *zero = calloc((size_t)tt_max64(1, rows * w), sizeof(float));
  if (!zero) return tt_status_make(TT_RESOURCE_EXHAUSTED, "%s: out of memory", op);
  for (int64_t bh = 0; bh < c->B * c->H; ++bh) tt_att_store(c, which, t, bh, 0, rows, w, zero);
  free(zero);
  return NULL;
}

static tt_status_t tt_att_run_forward(tt_att_ctx_t *c, const char *op) {
  c->nblocks = (c->L + TT_ATT_BR - 1) / TT_ATT_BR;
  if (c->B * c->H * c->nblocks == 0) return NULL;
  if (c->S == 0) {
    if (c->lse) tt_att_zero(c->lse);
    return tt_att_zero_out(c, op, TT_ATT_O, c->out, c->L, c->Ev);
  }
  tt_parallel_for_items(c->B * c->H * c->nblocks, tt_att_forward_range, c);
  if (c->failed) return tt_status_make(TT_RESOURCE_EXHAUSTED, "%s: out of memory", op);
  return NULL;
}

static tt_status_t tt_att_run_backward(tt_att_ctx_t *c, const char *op) {
  if (c->B * c->H == 0) return NULL;
  if (c->S == 0 || c->L == 0) {
    /* No scores: every gradient is zero. */
    TT_RETURN_IF_ERROR(tt_att_zero_out(c, op, TT_ATT_GQ, c->gq, c->L, c->E));
    TT_RETURN_IF_ERROR(tt_att_zero_out(c, op, TT_ATT_GK, c->gk, c->S, c->E));
    return tt_att_zero_out(c, op, TT_ATT_GV, c->gv, c->S, c->Ev);
  }
  tt_parallel_for_items(c->B * c->H, tt_att_backward_range, c);
  if (c->failed) return tt_status_make(TT_RESOURCE_EXHAUSTED, "%s: out of memory", op);
  return NULL;
}

int64_t tt_attention_probs_ld(int64_t S) { return tt_att_pad16(S); }

/* The dense forms' contexts (out / grad views checked against q, k, v). */
static tt_status_t tt_att_dense_forward(const char *op, const tt_view_t *q, const tt_view_t *k,
                                        const tt_view_t *v, const tt_view_t *mask, int causal,
                                        double scale, tt_view_t *out, tt_view_t *lse,
                                        tt_att_ctx_t *c) {
  TT_RETURN_IF_ERROR(tt_att_setup(op, q, k, v, mask, causal, scale, c));
  const int64_t od[4] = {c->B, c->H, c->L, c->Ev};
  if (out) TT_RETURN_IF_ERROR(tt_att_expect(op, "out", out, q->dtype, od, 4));
  if (lse) TT_RETURN_IF_ERROR(tt_att_expect(op, "logsumexp", lse, TT_F32, od, 3));
  c->out = out;
  c->lse = lse;
  return NULL;
}

static tt_status_t tt_att_dense_backward(const char *op, const tt_view_t *grad_out,
                                         const tt_view_t *q, const tt_view_t *k,
                                         const tt_view_t *v, const tt_view_t *mask, int causal,
                                         double scale, tt_view_t *grad_q, tt_view_t *grad_k,
                                         tt_view_t *grad_v, tt_att_ctx_t *c) {
  TT_RETURN_IF_ERROR(tt_att_setup(op, q, k, v, mask, causal, scale, c));
  const int64_t od[4] = {c->B, c->H, c->L, c->Ev};
  TT_RETURN_IF_ERROR(tt_att_expect(op, "grad_out", grad_out, q->dtype, od, 4));
  TT_RETURN_IF_ERROR(tt_att_expect(op, "grad_query", grad_q, q->dtype, q->shape.dims, 4));
  TT_RETURN_IF_ERROR(tt_att_expect(op, "grad_key", grad_k, q->dtype, k->shape.dims, 4));
  TT_RETURN_IF_ERROR(tt_att_expect(op, "grad_value", grad_v, q->dtype, v->shape.dims, 4));
  c->go = grad_out;
  c->gq = grad_q;
  c->gk = grad_k;
  c->gv = grad_v;
  return NULL;
}

tt_status_t tt_kernel_attention(const tt_view_t *q, const tt_view_t *k, const tt_view_t *v,
                                const tt_view_t *mask, int causal, double scale, tt_view_t *out,
                                tt_view_t *lse) {
  static const char *op = "attention";
  tt_att_ctx_t c;
  TT_RETURN_IF_ERROR(tt_att_dense_forward(op, q, k, v, mask, causal, scale, out, lse, &c));
  return tt_att_run_forward(&c, op);
}

tt_status_t tt_kernel_attention_backward(const tt_view_t *grad_out, const tt_view_t *q,
                                         const tt_view_t *k, const tt_view_t *v,
                                         const tt_view_t *mask, int causal, double scale,
                                         tt_view_t *grad_q, tt_view_t *grad_k,
                                         tt_view_t *grad_v) {
  static const char *op = "attention_backward";
  tt_att_ctx_t c;
  TT_RETURN_IF_ERROR(tt_att_dense_backward(op, grad_out, q, k, v, mask, causal, scale, grad_q,
                                           grad_k, grad_v, &c));
  return tt_att_run_backward(&c, op);
}

tt_status_t tt_kernel_attention_ex(const tt_view_t *q, const tt_view_t *k, const tt_view_t *v,
                                   const tt_view_t *mask, int causal, double scale,
                                   tt_view_t *out, const tt_att_geom_t *geom, float *probs) {
  static const char *op = "attention";
  if (!out) return tt_status_make(TT_INVALID_ARGUMENT, "%s: out is NULL", op);
  tt_att_ctx_t c;
  if (geom) {
    const tt_view_t *views[8] = {q, k, v, out, NULL, NULL, NULL, NULL};
    TT_RETURN_IF_ERROR(tt_att_setup_geom(op, geom, views, mask, causal, scale, &c));
    c.out = out;
  } else {
    TT_RETURN_IF_ERROR(tt_att_dense_forward(op, q, k, v, mask, causal, scale, out, NULL, &c));
  }
  c.psave = probs;
  c.pld = tt_att_pad16(c.S);
  return tt_att_run_forward(&c, op);
}

tt_status_t tt_kernel_attention_backward_ex(const tt_view_t *grad_out, const tt_view_t *q,
                                            const tt_view_t *k, const tt_view_t *v,
                                            const tt_view_t *mask, int causal, double scale,
                                            tt_view_t *grad_q, tt_view_t *grad_k,
                                            tt_view_t *grad_v, const tt_att_geom_t *geom,
                                            const float *probs) {
  static const char *op = "attention_backward";
  tt_att_ctx_t c;
  if (geom) {
    const tt_view_t *views[8] = {q, k, v, NULL, grad_out, grad_q, grad_k, grad_v};
    for (int i = 4; i < 8; ++i)
      if (!views[i])
        return tt_status_make(TT_INVALID_ARGUMENT, "%s: a gradient view is NULL", op);
    TT_RETURN_IF_ERROR(tt_att_setup_geom(op, geom, views, mask, causal, scale, &c));
    c.go = grad_out;
    c.gq = grad_q;
    c.gk = grad_k;
    c.gv = grad_v;
  } else {
    TT_RETURN_IF_ERROR(tt_att_dense_backward(op, grad_out, q, k, v, mask, causal, scale, grad_q,
                                             grad_k, grad_v, &c));
  }
  c.pload = probs;
  c.pld = tt_att_pad16(c.S);
  return tt_att_run_backward(&c, op);
}
