/* Dtypes and shapes: sizes, names, element counts, and the f16/bf16
 * conversions every kernel uses on load and store.
 *
 * The conversions are portable C (the engine is built without -march), and
 * bit-exact with PyTorch's c10::Half / c10::BFloat16: round to nearest even,
 * overflow to infinity, subnormals kept, NaN stays NaN (f16 keeps the sign
 * and becomes 0x7E00, bf16 becomes 0x7FC0 as c10 does).
 */
#include <string.h>

#include "torchtpu/base.h"

static const size_t tt_dtype_sizes_[TT_DTYPE_COUNT] = {
    [TT_F32] = 4, [TT_F64] = 8, [TT_F16] = 2, [TT_BF16] = 2, [TT_I8] = 1,
    [TT_U8] = 1,  [TT_I16] = 2, [TT_I32] = 4, [TT_I64] = 8,  [TT_BOOL] = 1, [TT_C64] = 8,
};

static const char *const tt_dtype_names_[TT_DTYPE_COUNT] = {
    [TT_F32] = "float32", [TT_F64] = "float64", [TT_F16] = "float16",
    [TT_BF16] = "bfloat16", [TT_I8] = "int8", [TT_U8] = "uint8",
    [TT_I16] = "int16", [TT_I32] = "int32", [TT_I64] = "int64",
    [TT_BOOL] = "bool", [TT_C64] = "complex64",
};

size_t tt_dtype_size(tt_dtype_t dtype) {
  if ((unsigned)dtype >= TT_DTYPE_COUNT) return 0;
  return tt_dtype_sizes_[dtype];
}

const char *tt_dtype_name(tt_dtype_t dtype) {
  if ((unsigned)dtype >= TT_DTYPE_COUNT) return "invalid";
  return tt_dtype_names_[dtype];
}

int tt_dtype_is_float(tt_dtype_t dtype) {
  return dtype == TT_F32 || dtype == TT_F64 || dtype == TT_F16 ||
         dtype == TT_BF16;
}

int tt_dtype_is_complex(tt_dtype_t dtype) { return dtype == TT_C64; }

/* The product of the dims (1 for rank 0); -1 for a rank outside
 * [0, TT_MAX_RANK] or a negative dim. */
void tt_shape_split(const tt_shape_t *shape, int axis, int64_t *outer, int64_t *inner) {
  *outer = *inner = 1;
  for (int32_t i = 0; i < shape->rank; ++i) *(i < axis ? outer : inner) *= shape->dims[i];
}

int64_t tt_shape_numel(const tt_shape_t *shape) {
  if (!shape || shape->rank < 0 || shape->rank > TT_MAX_RANK) return -1;
  int64_t n = 1;
  for (int32_t i = 0; i < shape->rank; ++i) {
    if (shape->dims[i] < 0) return -1;
    n *= shape->dims[i];
  }
  return n;
}

int tt_shape_broadcasts_to(const tt_shape_t *x, const tt_shape_t *to) {
  if (x->rank > to->rank) return 0;
  for (int32_t i = 0; i < x->rank; ++i) {
    int64_t d = x->dims[i], t = to->dims[to->rank - x->rank + i];
    if (d != t && d != 1) return 0;
  }
  return 1;
}

int tt_shape_equal(const tt_shape_t *a, const tt_shape_t *b) {
  if (a->rank != b->rank) return 0;
  for (int32_t i = 0; i < a->rank && i < TT_MAX_RANK; ++i) {
    if (a->dims[i] != b->dims[i]) return 0;
  }
  return 1;
}

static inline uint32_t tt_bits_of_(float f) {
  uint32_t u;
  memcpy(&u, &f, sizeof(u));
  return u;
}

static inline float tt_float_of_(uint32_t u) {
  float f;
  memcpy(&f, &u, sizeof(f));
  return f;
}

float tt_f16_to_f32(uint16_t h) {
  uint32_t sign = (uint32_t)(h & 0x8000u) << 16;
  uint32_t exp = (h >> 10) & 0x1fu;
  uint32_t mant = h & 0x3ffu;
  if (exp == 0) {
    /* Zero or subnormal: mant * 2^-24 is exact in f32. */
    float v = (float)mant * 0x1p-24f;
    return sign ? -v : v;
  }
  if (exp == 31) return tt_float_of_(sign | 0x7f800000u | (mant << 13));
  return tt_float_of_(sign | ((exp + 112u) << 23) | (mant << 13));
}

uint16_t tt_f32_to_f16(float f) {
  uint32_t x = tt_bits_of_(f);
  uint32_t sign = x & 0x80000000u;
  x ^= sign;
  uint16_t o;
  if (x >= (uint32_t)(127 + 16) << 23) {
    /* |f| >= 65536, Inf or NaN. */
    o = x > 0x7f800000u ? 0x7e00u : 0x7c00u;
  } else if (x < (uint32_t)113 << 23) {
    /* The result is subnormal or zero: adding 0.5 aligns the 10 result bits
     * at the bottom of the f32 mantissa and the FPU rounds to nearest even. */
    const uint32_t magic = (uint32_t)((127 - 15) + (23 - 10) + 1) << 23;
    float fx = tt_float_of_(x) + tt_float_of_(magic);
    o = (uint16_t)(tt_bits_of_(fx) - magic);
  } else {
    uint32_t mant_odd = (x >> 13) & 1u;
    x += ((uint32_t)(15 - 127) << 23) + 0xfffu + mant_odd;
    o = (uint16_t)(x >> 13); /* a carry into exponent 31 gives Inf */
  }
  return (uint16_t)(o | (sign >> 16));
}

float tt_bf16_to_f32(uint16_t h) { return tt_float_of_((uint32_t)h << 16); }

uint16_t tt_f32_to_bf16(float f) {
  if (f != f) return 0x7fc0u;
  uint32_t x = tt_bits_of_(f);
  x += 0x7fffu + ((x >> 16) & 1u);
  return (uint16_t)(x >> 16);
}
