/* Random numbers from Philox-4x32-10 (Salmon et al., "Parallel random
 * numbers: as easy as 1, 2, 3", SC'11), counter-based so element i of a
 * call depends only on (seed, offset, i): reproducible and independent of
 * the thread count.
 *
 * Scheme:
 *   key     = (seed & 0xffffffff, seed >> 32)
 *   counter = (block & 0xffffffff, block >> 32,
 *              offset & 0xffffffff, offset >> 32)
 * so `offset` selects an independent stream (callers bump it once per
 * call) and `block` walks within the stream. One block yields four 32-bit
 * words w0..w3.
 *   - F32/F16/BF16 and integer outputs: element i uses block i/4, word i%4.
 *     A uniform is (w >> 8) * 2^-24 in [0, 1).
 *   - F64: element i uses block i/2 and the word pair (w0,w1) or (w2,w3);
 *     a uniform takes 53 bits of the pair.
 *   - NORMAL (Box-Muller): a pair of uniforms (u1, u2) gives
 *     r = sqrt(-2 ln(1 - u1)), z = r cos(2 pi u2) for the first element of
 *     the pair and r sin(2 pi u2) for the second. In 32-bit mode elements
 *     (4j, 4j+1) share (w0, w1) and (4j+2, 4j+3) share (w2, w3); in F64 mode
 *     element 2j+q draws its pair from block j's (w0,w1) and (w2,w3) and
 *     takes the cos (q = 0) or sin (q = 1) output.
 * UNIFORM returns a + u*(b - a), stepped down when rounding to the output
 * dtype would reach b (so results stay in [a, b));
 * NORMAL returns a + b*z; BERNOULLI returns u < a as 0/1.
 */
#include "kernels/kernel_util.h"

static void tt_philox4x32_10(const uint32_t ctr_in[4], const uint32_t key_in[2],
                             uint32_t out[4]) {
  const uint32_t M0 = 0xD2511F53u, M1 = 0xCD9E8D57u;
  const uint32_t W0 = 0x9E3779B9u, W1 = 0xBB67AE85u;
  uint32_t c0 = ctr_in[0], c1 = ctr_in[1], c2 = ctr_in[2], c3 = ctr_in[3];
  uint32_t k0 = key_in[0], k1 = key_in[1];
  for (int round = 0; round < 10; ++round) {
    uint64_t p0 = (uint64_t)M0 * c0;
    uint64_t p1 = (uint64_t)M1 * c2;
    uint32_t hi0 = (uint32_t)(p0 >> 32), lo0 = (uint32_t)p0;
    uint32_t hi1 = (uint32_t)(p1 >> 32), lo1 = (uint32_t)p1;
    c0 = hi1 ^ c1 ^ k0;
    c1 = lo1;
    c2 = hi0 ^ c3 ^ k1;
    c3 = lo0;
    k0 += W0;
    k1 += W1;
  }
  out[0] = c0;
  out[1] = c1;
  out[2] = c2;
  out[3] = c3;
}

void tt_philox4x32_10_for_test(const uint32_t ctr[4], const uint32_t key[2],
                               uint32_t out[4]) {
  tt_philox4x32_10(ctr, key, out);
}

typedef struct tt_rng_ctx_s {
  tt_rng_op_t op;
  uint32_t key[2];
  uint64_t offset;
  double a, b;
  tt_view_t *out;
  /* tt_kernel_rng_tile: out is the tile at off of a tensor of dims full
   * (rank out->shape.rank); NULL: out is the whole tensor. */
  const int64_t *full, *off;
} tt_rng_ctx_t;

/* The whole tensor's element index of out's element i, or -1 past its
 * end (a tile's padding). */
static int64_t tt_rng_global(const tt_rng_ctx_t *c, int64_t i) {
  if (!c->full) return i;
  const tt_shape_t *s = &c->out->shape;
  int64_t rest = i, g = 0, stride = 1;
  for (int32_t d = s->rank - 1; d >= 0; --d) {
    int64_t at = c->off[d] + rest % s->dims[d];
    rest /= s->dims[d];
    if (at >= c->full[d]) return -1;
    g += at * stride;
    stride *= c->full[d];
  }
  return g;
}

static void tt_rng_block(const tt_rng_ctx_t *c, uint64_t block, uint32_t w[4]) {
  uint32_t ctr[4] = {(uint32_t)block, (uint32_t)(block >> 32),
                     (uint32_t)c->offset, (uint32_t)(c->offset >> 32)};
  tt_philox4x32_10(ctr, c->key, w);
}

static TT_ALWAYS_INLINE double tt_u24(uint32_t w) {
  return (double)(w >> 8) * 0x1p-24;
}

static TT_ALWAYS_INLINE double tt_u53(uint32_t hi, uint32_t lo) {
  return (double)(((uint64_t)hi << 21) | (lo >> 11)) * 0x1p-53;
}

/* Box-Muller: the cos (q = 0) or sin (q = 1) normal from uniforms u1, u2. */
static TT_ALWAYS_INLINE double tt_box_muller(double u1, double u2, int q) {
  double r = sqrt(-2.0 * log(1.0 - u1)); /* 1 - u1 is in (0, 1] */
  double th = 2.0 * TT_PI * u2;
  return r * (q ? sin(th) : cos(th));
}

/* The largest 16-bit float (f16 or bf16 bit pattern h) below h. */
static uint16_t tt_half_below(uint16_t h) {
  if ((h & 0x7fffu) == 0) return 0x8001u; /* below +-0: -smallest subnormal */
  return (h & 0x8000u) ? (uint16_t)(h + 1) : (uint16_t)(h - 1);
}

/* Rounds a uniform sample to the output dtype, keeping it below b. */
static double tt_uniform_below(tt_dtype_t dt, double v, double a, double b) {
  float f = (float)v;
  if ((double)f >= b) f = nextafterf((float)b, -INFINITY);
  if (dt == TT_F16) {
    uint16_t h = tt_f32_to_f16(f);
    if (tt_f16_to_f32(h) >= b) h = tt_half_below(h);
    f = tt_f16_to_f32(h);
  } else if (dt == TT_BF16) {
    uint16_t h = tt_f32_to_bf16(f);
    if (tt_bf16_to_f32(h) >= b) h = tt_half_below(h);
    f = tt_bf16_to_f32(h);
  }
  return (double)f < a ? v : f;
}

static double tt_rng_finish(const tt_rng_ctx_t *c, double u_or_z) {
  switch (c->op) {
    case TT_RNG_UNIFORM: {
      double v = c->a + u_or_z * (c->b - c->a);
      if (c->out->dtype != TT_F64 && c->b > c->a) {
        v = tt_uniform_below(c->out->dtype, v, c->a, c->b);
      }
      return v;
    }
    case TT_RNG_NORMAL: return c->a + c->b * u_or_z;
    default: return u_or_z < c->a ? 1.0 : 0.0;
  }
}

static void tt_rng_range(void *arg, int64_t begin, int64_t end) {
  const tt_rng_ctx_t *c = (const tt_rng_ctx_t *)arg;
  int wide = c->out->dtype == TT_F64;
  int per_block = wide ? 2 : 4;
  double buf[TT_BLOCK];
  for (int64_t i0 = begin; i0 < end; i0 += TT_BLOCK) {
    int64_t n = tt_min64(TT_BLOCK, end - i0);
    uint32_t w[4];
    uint64_t cur = UINT64_MAX;
    for (int64_t k = 0; k < n; ++k) {
      int64_t i = tt_rng_global(c, i0 + k);
      if (i < 0) {
        buf[k] = 0.0;
        continue;
      }
      uint64_t block = (uint64_t)i / (uint64_t)per_block;
      int pos = (int)(i % per_block);
      if (block != cur || cur == UINT64_MAX) {
        tt_rng_block(c, block, w);
        cur = block;
      }
      double v;
      if (c->op == TT_RNG_NORMAL) {
        if (wide) {
          v = tt_box_muller(tt_u53(w[0], w[1]), tt_u53(w[2], w[3]), pos);
        } else {
          int pair = pos / 2;
          v = tt_box_muller(tt_u24(w[2 * pair]), tt_u24(w[2 * pair + 1]), pos % 2);
        }
      } else {
        v = wide ? tt_u53(w[2 * pos], w[2 * pos + 1]) : tt_u24(w[pos]);
      }
      buf[k] = tt_rng_finish(c, v);
    }
    tt_store_f64(buf, n, c->out->data, c->out->dtype, i0);
  }
}

static tt_status_t tt_rng_run(tt_rng_op_t op, uint64_t seed, uint64_t offset, double a, double b,
                              const int64_t *full, const int64_t *off, tt_view_t *out) {
  static const char *name = "rng";
  TT_RETURN_IF_ERROR(tt_check_view(name, "out", out));
  if (op != TT_RNG_UNIFORM && op != TT_RNG_NORMAL && op != TT_RNG_BERNOULLI) {
    return tt_status_make(TT_INVALID_ARGUMENT, "rng: unknown op %d", (int)op);
  }
  if (op != TT_RNG_BERNOULLI && !tt_dtype_is_float(out->dtype)) {
    return tt_status_make(TT_TYPE_ERROR,
                          "%s is not implemented for dtype %s",
                          op == TT_RNG_UNIFORM ? "uniform" : "normal",
                          tt_dtype_name(out->dtype));
  }
  if (op == TT_RNG_UNIFORM && !(a <= b)) {
    return tt_status_make(TT_INVALID_ARGUMENT,
                          "uniform_ expects to return a [from, to) range, but "
                          "found from=%g > to=%g",
                          a, b);
  }
  if (op == TT_RNG_NORMAL && !(b >= 0.0)) {
    return tt_status_make(TT_INVALID_ARGUMENT,
                          "normal expects std >= 0.0, but found std %g", b);
  }
  if (op == TT_RNG_BERNOULLI && !(a >= 0.0 && a <= 1.0)) {
    return tt_status_make(TT_INVALID_ARGUMENT,
                          "bernoulli expects p to be in [0, 1], but got p=%g", a);
  }
  tt_rng_ctx_t c = {.op = op,
                    .key = {(uint32_t)seed, (uint32_t)(seed >> 32)},
                    .offset = offset,
                    .a = a,
                    .b = b,
                    .out = out,
                    .full = full,
                    .off = off};
  tt_parallel_for(tt_view_numel(out), TT_GRAIN / 4, tt_rng_range, &c);
  return NULL;
}

tt_status_t tt_kernel_rng(tt_rng_op_t op, uint64_t seed, uint64_t offset,
                          double a, double b, tt_view_t *out) {
  return tt_rng_run(op, seed, offset, a, b, NULL, NULL, out);
}

tt_status_t tt_kernel_rng_tile(tt_rng_op_t op, uint64_t seed, uint64_t offset, double a,
                               double b, const int64_t *full_dims, const int64_t *tile_offsets,
                               tt_view_t *out) {
  for (int32_t d = 0; d < out->shape.rank; ++d)
    if (full_dims[d] < 0 || tile_offsets[d] < 0)
      return tt_status_make(TT_INVALID_ARGUMENT,
                            "rng tile: dim %d has full size %lld and offset %lld", (int)d,
                            (long long)full_dims[d], (long long)tile_offsets[d]);
  return tt_rng_run(op, seed, offset, a, b, full_dims, tile_offsets, out);
}
