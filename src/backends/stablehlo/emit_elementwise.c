/* StableHLO lowerings of the elementwise ops: UNARY, BINARY and the fused
 * elementwise programs (TT_OP_FUSED, expanded step by step). Semantics
 * follow the engine's kernels (src/kernels/unary.c, binary.c): half types
 * compute transcendental functions in f32; MAX/MIN ignore a NaN operand;
 * integer division and remainder by zero give 0. A function whose lowering
 * is one StableHLO op takes it from its row in torchtpu/kernels.h; the
 * cases here are the composite lowerings and the dtype rules. */
#include <math.h>
#include <stdlib.h>

#include "backends/stablehlo/emit_internal.h"

#define TT_LN2 0.69314718055994530942
#define TT_LN10 2.30258509299404568402
#define TT_SQRT1_2_ 0.70710678118654752440
#define TT_GELU_BETA 0.79788456080286535588 /* sqrt(2/pi) */

static tt_shv_t tt_shlo_unimplemented_un(tt_shlo_t *c, int64_t code, tt_dtype_t dt) {
  tt_shlo_fail(c, tt_status_make(TT_UNIMPLEMENTED,
                                 "stablehlo: unary op %lld has no lowering for dtype %s",
                                 (long long)code, tt_dtype_name(dt)));
  return -1;
}

/* log1p(exp(x)), the softplus core without a threshold. */
static tt_shv_t tt_shlo_log1p_exp(tt_shlo_t *c, tt_shv_t x) {
  return tt_shlo_un(c, "log_plus_one", tt_shlo_un(c, "exponential", x));
}

/* The single-op lowerings of the elementwise functions (their rows in
 * torchtpu/kernels.h); NULL where a case below writes the lowering out. */
#define TT_SHLO_EW_OP_(prefix, suffix, stablehlo) [prefix##suffix] = stablehlo,
#define TT_SHLO_UNARY_(suffix, name, stablehlo, tier1) TT_SHLO_EW_OP_(TT_UN_, suffix, stablehlo)
#define TT_SHLO_BINARY_(suffix, name, stablehlo, tier1) TT_SHLO_EW_OP_(TT_BIN_, suffix, stablehlo)
static const char *const tt_shlo_unary_ops_[TT_UN_COUNT] = {TT_UNARY_OPS(TT_SHLO_UNARY_)};
static const char *const tt_shlo_binary_ops_[TT_BIN_COUNT] = {TT_BINARY_OPS(TT_SHLO_BINARY_)};
#undef TT_SHLO_UNARY_
#undef TT_SHLO_BINARY_
#undef TT_SHLO_EW_OP_

static tt_shv_t tt_shlo_unary_float(tt_shlo_t *c, int64_t code, double alpha, double beta,
                                    tt_shv_t x) {
  if (code >= 0 && code < TT_UN_COUNT && tt_shlo_unary_ops_[code])
    return tt_shlo_un(c, tt_shlo_unary_ops_[code], x);
  switch ((tt_unary_op_t)code) {
    case TT_UN_TAN:
      return tt_shlo_bin(c, "divide", tt_shlo_un(c, "sine", x), tt_shlo_un(c, "cosine", x));
    case TT_UN_RELU: {
      tt_shv_t zero = tt_shlo_like(c, x, 0);
      return tt_shlo_select(c, tt_shlo_cmp(c, "LT", x, zero), zero, x);
    }
    case TT_UN_GELU_ERF: {
      tt_shv_t e = tt_shlo_un(c, "chlo.erf", tt_shlo_bin_k(c, "multiply", x, TT_SQRT1_2_));
      tt_shv_t h = tt_shlo_bin_k(c, "multiply", x, 0.5);
      return tt_shlo_bin(c, "multiply", h, tt_shlo_bin_k(c, "add", e, 1.0));
    }
    case TT_UN_GELU_TANH: {
      tt_shv_t x3 = tt_shlo_bin(c, "multiply", tt_shlo_bin(c, "multiply", x, x), x);
      tt_shv_t inner = tt_shlo_bin(c, "add", x, tt_shlo_bin_k(c, "multiply", x3, 0.044715));
      tt_shv_t t = tt_shlo_un(c, "tanh", tt_shlo_bin_k(c, "multiply", inner, TT_GELU_BETA));
      tt_shv_t h = tt_shlo_bin_k(c, "multiply", x, 0.5);
      return tt_shlo_bin(c, "multiply", h, tt_shlo_bin_k(c, "add", t, 1.0));
    }
    case TT_UN_SILU: return tt_shlo_bin(c, "multiply", x, tt_shlo_un(c, "logistic", x));
    case TT_UN_TRUNC:
      return tt_shlo_select(c, tt_shlo_cmp(c, "LT", x, tt_shlo_like(c, x, 0)),
                            tt_shlo_un(c, "ceil", x), tt_shlo_un(c, "floor", x));
    case TT_UN_SIGN: /* the kernel gives 0 for NaN */
      return tt_shlo_select(c, tt_shlo_isnan(c, x), tt_shlo_like(c, x, 0),
                            tt_shlo_un(c, "sign", x));
    case TT_UN_RECIPROCAL: return tt_shlo_bin(c, "divide", tt_shlo_like(c, x, 1), x);
    case TT_UN_LOGICAL_NOT: return tt_shlo_cmp(c, "EQ", x, tt_shlo_like(c, x, 0));
    case TT_UN_ISNAN: return tt_shlo_isnan(c, x);
    case TT_UN_ASIN: case TT_UN_ACOS: {
      tt_shv_t one = tt_shlo_like(c, x, 1);
      tt_shv_t r = tt_shlo_un(c, "sqrt", tt_shlo_bin(c, "subtract", one,
                                                     tt_shlo_bin(c, "multiply", x, x)));
      return code == TT_UN_ASIN ? tt_shlo_bin(c, "atan2", x, r) : tt_shlo_bin(c, "atan2", r, x);
    }
    case TT_UN_ATAN: return tt_shlo_bin(c, "atan2", x, tt_shlo_like(c, x, 1));
    case TT_UN_SINH: {
      tt_shv_t d = tt_shlo_bin(c, "subtract", tt_shlo_un(c, "exponential_minus_one", x),
                               tt_shlo_un(c, "exponential_minus_one", tt_shlo_un(c, "negate", x)));
      return tt_shlo_bin_k(c, "multiply", d, 0.5);
    }
    case TT_UN_COSH: {
      tt_shv_t s = tt_shlo_bin(c, "add", tt_shlo_un(c, "exponential", x),
                               tt_shlo_un(c, "exponential", tt_shlo_un(c, "negate", x)));
      return tt_shlo_bin_k(c, "multiply", s, 0.5);
    }
    case TT_UN_ASINH: {
      /* sign(x) * log1p(|x| + x^2 / (1 + sqrt(1 + x^2))) */
      tt_shv_t ax = tt_shlo_un(c, "abs", x);
      tt_shv_t x2 = tt_shlo_bin(c, "multiply", x, x);
      tt_shv_t den = tt_shlo_bin_k(c, "add", tt_shlo_un(c, "sqrt", tt_shlo_bin_k(c, "add", x2, 1)), 1);
      tt_shv_t l = tt_shlo_un(c, "log_plus_one",
                              tt_shlo_bin(c, "add", ax, tt_shlo_bin(c, "divide", x2, den)));
      return tt_shlo_bin(c, "multiply", tt_shlo_un(c, "sign", x), l);
    }
    case TT_UN_ACOSH: {
      tt_shv_t r = tt_shlo_un(c, "sqrt", tt_shlo_bin_k(c, "subtract",
                                                       tt_shlo_bin(c, "multiply", x, x), 1));
      return tt_shlo_un(c, "log", tt_shlo_bin(c, "add", x, r));
    }
    case TT_UN_ATANH: {
      tt_shv_t q = tt_shlo_bin(c, "divide", tt_shlo_bin_k(c, "multiply", x, 2),
                               tt_shlo_bin(c, "subtract", tt_shlo_like(c, x, 1), x));
      return tt_shlo_bin_k(c, "multiply", tt_shlo_un(c, "log_plus_one", q), 0.5);
    }
    case TT_UN_LOG2: return tt_shlo_bin_k(c, "multiply", tt_shlo_un(c, "log", x), 1.0 / TT_LN2);
    case TT_UN_LOG10:
      return tt_shlo_bin_k(c, "multiply", tt_shlo_un(c, "log", x), 1.0 / TT_LN10);
    case TT_UN_EXP2: return tt_shlo_un(c, "exponential", tt_shlo_bin_k(c, "multiply", x, TT_LN2));
    case TT_UN_SQUARE: return tt_shlo_bin(c, "multiply", x, x);
    case TT_UN_LEAKY_RELU:
      return tt_shlo_select(c, tt_shlo_cmp(c, "GT", x, tt_shlo_like(c, x, 0)), x,
                            tt_shlo_bin_k(c, "multiply", x, alpha));
    case TT_UN_ELU:
      return tt_shlo_select(c, tt_shlo_cmp(c, "LE", x, tt_shlo_like(c, x, 0)),
                            tt_shlo_bin_k(c, "multiply",
                                          tt_shlo_un(c, "exponential_minus_one", x), alpha),
                            x);
    case TT_UN_HARDTANH: {
      tt_shv_t lo = tt_shlo_like(c, x, alpha), hi = tt_shlo_like(c, x, beta);
      tt_shv_t upper = tt_shlo_select(c, tt_shlo_cmp(c, "GT", x, hi), hi, x);
      return tt_shlo_select(c, tt_shlo_cmp(c, "LT", x, lo), lo, upper);
    }
    case TT_UN_SOFTPLUS: {
      tt_shv_t ax = tt_shlo_bin_k(c, "multiply", x, alpha);
      tt_shv_t soft = tt_shlo_bin_k(c, "divide", tt_shlo_log1p_exp(c, ax), alpha);
      return tt_shlo_select(c, tt_shlo_cmp(c, "GT", ax, tt_shlo_like(c, x, beta)), x, soft);
    }
    case TT_UN_HARDSIGMOID:
    case TT_UN_HARDSWISH: {
      tt_shv_t t = tt_shlo_bin_k(c, "add", x, 3);
      t = tt_shlo_bin_k(c, "maximum", t, 0);
      t = tt_shlo_bin_k(c, "minimum", t, 6);
      if (code == TT_UN_HARDSWISH) t = tt_shlo_bin(c, "multiply", x, t);
      return tt_shlo_bin_k(c, "divide", t, 6);
    }
    case TT_UN_MISH:
      return tt_shlo_bin(c, "multiply", x, tt_shlo_un(c, "tanh", tt_shlo_log1p_exp(c, x)));
    default:
      break;
  }
  return tt_shlo_unimplemented_un(c, code, tt_shlo_dtype(c, x));
}

static tt_shv_t tt_shlo_unary_int(tt_shlo_t *c, int64_t code, double alpha, double beta,
                                  tt_shv_t x) {
  int is_bool = tt_shlo_dtype(c, x) == TT_BOOL;
  switch ((tt_unary_op_t)code) {
    case TT_UN_NEG: return is_bool ? x : tt_shlo_un(c, "negate", x);
    case TT_UN_ABS: return is_bool ? x : tt_shlo_un(c, "abs", x);
    case TT_UN_RELU: return is_bool ? x : tt_shlo_bin_k(c, "maximum", x, 0);
    case TT_UN_FLOOR: case TT_UN_CEIL: case TT_UN_ROUND: case TT_UN_TRUNC:
      return x;
    case TT_UN_SIGN: return is_bool ? x : tt_shlo_un(c, "sign", x);
    case TT_UN_LOGICAL_NOT: return tt_shlo_cmp(c, "EQ", x, tt_shlo_like(c, x, 0));
    case TT_UN_ISNAN: return tt_shlo_isnan(c, x);
    case TT_UN_BITWISE_NOT: return tt_shlo_un(c, "not", x);
    case TT_UN_SQUARE: return tt_shlo_bin(c, is_bool ? "and" : "multiply", x, x);
    case TT_UN_HARDTANH: {
      if (is_bool) break;
      tt_shv_t lo = tt_shlo_like(c, x, alpha), hi = tt_shlo_like(c, x, beta);
      tt_shv_t upper = tt_shlo_select(c, tt_shlo_cmp(c, "GT", x, hi), hi, x);
      return tt_shlo_select(c, tt_shlo_cmp(c, "LT", x, lo), lo, upper);
    }
    default:
      break;
  }
  return tt_shlo_unimplemented_un(c, code, tt_shlo_dtype(c, x));
}

static tt_shv_t tt_shlo_lower_unary(tt_shlo_t *c, int64_t code, double alpha, double beta,
                                    tt_shv_t x, tt_dtype_t out_dt) {
  if (tt_shlo_bad(c, 1, &x)) return -1;
  tt_dtype_t dt = tt_shlo_dtype(c, x);
  if (!tt_dtype_is_float(dt)) return tt_shlo_unary_int(c, code, alpha, beta, x);
  if ((dt == TT_F16 || dt == TT_BF16) && out_dt == dt) {
    /* As the kernels do: compute in f32, round once to the half type. */
    tt_shv_t w = tt_shlo_unary_float(c, code, alpha, beta, tt_shlo_convert(c, x, TT_F32));
    return tt_shlo_convert(c, w, dt);
  }
  return tt_shlo_unary_float(c, code, alpha, beta, x);
}

/* Python-style sign fix of a C remainder r of a by b: r + b when r != 0
 * and r and b differ in sign. */
static tt_shv_t tt_shlo_py_mod(tt_shlo_t *c, tt_shv_t r, tt_shv_t b) {
  tt_shv_t zero = tt_shlo_like(c, r, 0);
  tt_shv_t nz = tt_shlo_cmp(c, "NE", r, zero);
  tt_shv_t diff = tt_shlo_cmp(c, "NE", tt_shlo_cmp(c, "LT", r, zero), tt_shlo_cmp(c, "LT", b, zero));
  return tt_shlo_select(c, tt_shlo_bin(c, "and", nz, diff), tt_shlo_bin(c, "add", r, b), r);
}

tt_shv_t tt_shlo_lower_binary(tt_shlo_t *c, int64_t code, tt_shv_t a, tt_shv_t b,
                              tt_dtype_t out_dt) {
  tt_shv_t ab[2] = {a, b};
  if (tt_shlo_bad(c, 2, ab)) return -1;
  tt_dtype_t dt = tt_shlo_dtype(c, a);
  int is_float = tt_dtype_is_float(dt);
  int is_int = !is_float && dt != TT_BOOL;
  switch ((tt_binary_op_t)code) {
    /* The dtype rules of the single-op lowerings (the table's, below). */
    case TT_BIN_ADD: if (dt == TT_BOOL) return tt_shlo_bin(c, "or", a, b); break;
    case TT_BIN_MUL: if (dt == TT_BOOL) return tt_shlo_bin(c, "and", a, b); break;
    case TT_BIN_MAXIMUM_NAN: if (dt == TT_BOOL) return tt_shlo_bin(c, "or", a, b); break;
    case TT_BIN_MINIMUM_NAN: if (dt == TT_BOOL) return tt_shlo_bin(c, "and", a, b); break;
    case TT_BIN_SUB: case TT_BIN_POW: if (dt == TT_BOOL) goto unimplemented; break;
    case TT_BIN_DIV: case TT_BIN_ATAN2: if (!is_float) goto unimplemented; break;
    case TT_BIN_BITWISE_AND: case TT_BIN_BITWISE_OR: case TT_BIN_BITWISE_XOR:
      if (is_float) goto unimplemented;
      break;
    case TT_BIN_SHIFT_LEFT: if (!is_int) goto unimplemented; break;
    /* Composite lowerings. */
    case TT_BIN_MAX:
    case TT_BIN_MIN: {
      tt_shv_t m = tt_shlo_bin(c, code == TT_BIN_MAX ? "maximum" : "minimum", a, b);
      if (!is_float) return m;
      /* torch.fmax/fmin: a NaN operand is ignored. */
      m = tt_shlo_select(c, tt_shlo_isnan(c, b), a, m);
      return tt_shlo_select(c, tt_shlo_isnan(c, a), b, m);
    }
    case TT_BIN_EQ: return tt_shlo_cmp(c, "EQ", a, b);
    case TT_BIN_NE: return tt_shlo_cmp(c, "NE", a, b);
    case TT_BIN_LT: return tt_shlo_cmp(c, "LT", a, b);
    case TT_BIN_LE: return tt_shlo_cmp(c, "LE", a, b);
    case TT_BIN_GT: return tt_shlo_cmp(c, "GT", a, b);
    case TT_BIN_GE: return tt_shlo_cmp(c, "GE", a, b);
    case TT_BIN_LOGICAL_AND:
    case TT_BIN_LOGICAL_OR:
    case TT_BIN_LOGICAL_XOR: {
      const char *name = code == TT_BIN_LOGICAL_AND ? "and" : code == TT_BIN_LOGICAL_OR ? "or" : "xor";
      return tt_shlo_bin(c, name, tt_shlo_convert(c, a, TT_BOOL), tt_shlo_convert(c, b, TT_BOOL));
    }
    case TT_BIN_REMAINDER:
    case TT_BIN_FMOD:
    case TT_BIN_FLOOR_DIV: {
      if (dt == TT_BOOL) goto unimplemented;
      tt_shv_t zero = tt_shlo_like(c, b, 0), bz = -1, bs = b;
      if (is_int) {
        /* Integer division by zero gives 0 (the kernels' rule), and must
         * not trap: divide by 1 there and select 0 after. */
        bz = tt_shlo_cmp(c, "EQ", b, zero);
        bs = tt_shlo_select(c, bz, tt_shlo_like(c, b, 1), b);
      }
      tt_shv_t r;
      if (code == TT_BIN_FLOOR_DIV) {
        if (is_float) return tt_shlo_un(c, "floor", tt_shlo_bin(c, "divide", a, b));
        tt_shv_t q = tt_shlo_bin(c, "divide", a, bs);
        tt_shv_t rem = tt_shlo_bin(c, "remainder", a, bs);
        tt_shv_t nz = tt_shlo_cmp(c, "NE", rem, zero);
        tt_shv_t diff = tt_shlo_cmp(c, "NE", tt_shlo_cmp(c, "LT", rem, zero),
                                    tt_shlo_cmp(c, "LT", bs, zero));
        r = tt_shlo_select(c, tt_shlo_bin(c, "and", nz, diff), tt_shlo_bin_k(c, "subtract", q, 1), q);
      } else {
        r = tt_shlo_bin(c, "remainder", a, bs);
        if (code == TT_BIN_REMAINDER) r = tt_shlo_py_mod(c, r, bs);
      }
      return is_int ? tt_shlo_select(c, bz, zero, r) : r;
    }
    case TT_BIN_SHIFT_RIGHT:
      if (!is_int) goto unimplemented;
      return tt_shlo_bin(c, dt == TT_U8 ? "shift_right_logical" : "shift_right_arithmetic", a, b);
    case TT_BIN_HYPOT:
      if (!is_float) goto unimplemented;
      return tt_shlo_un(c, "sqrt", tt_shlo_bin(c, "add", tt_shlo_bin(c, "multiply", a, a),
                                               tt_shlo_bin(c, "multiply", b, b)));
    default: break;
  }
  if (code >= 0 && code < TT_BIN_COUNT && tt_shlo_binary_ops_[code])
    return tt_shlo_bin(c, tt_shlo_binary_ops_[code], a, b);
unimplemented:
  (void)out_dt;
  tt_shlo_fail(c, tt_status_make(TT_UNIMPLEMENTED,
                                 "stablehlo: binary op %lld has no lowering for dtype %s",
                                 (long long)code, tt_dtype_name(dt)));
  return -1;
}

/* A fused reduction's REDUCE step: x (over the domain) reduced over mask
 * (SUM/MEAN/MAX/MIN; half types accumulate in f32), as dtype dt, shaped
 * like the instruction. */
static tt_shv_t tt_shlo_fused_reduce(tt_shlo_t *c, int64_t code, tt_shv_t x, uint32_t mask,
                                     tt_dtype_t dt, const tt_shape_t *out) {
  if (tt_shlo_bad(c, 1, &x)) return -1;
  tt_dtype_t acc = (dt == TT_F16 || dt == TT_BF16) ? TT_F32 : dt;
  tt_shv_t xv = tt_shlo_convert(c, x, acc), r;
  const tt_shape_t xs = *tt_shlo_shape(c, xv);
  switch (code) {
    case TT_RED_SUM:
    case TT_RED_MEAN: {
      r = tt_shlo_reduce(c, xv, mask, "stablehlo.add", tt_shlo_scalar(c, acc, 0));
      if (code == TT_RED_MEAN) {
        double n = 1;
        for (int d = 0; d < xs.rank; ++d)
          if (mask & (1u << d)) n *= (double)xs.dims[d];
        r = tt_shlo_bin_k(c, "divide", r, n);
      }
      break;
    }
    case TT_RED_MAX: r = tt_shlo_reduce(c, xv, mask, "stablehlo.maximum", tt_shlo_lowest(c, acc)); break;
    case TT_RED_MIN: r = tt_shlo_reduce(c, xv, mask, "stablehlo.minimum", tt_shlo_highest(c, acc)); break;
    default:
      tt_shlo_fail(c, tt_status_make(TT_UNIMPLEMENTED, "stablehlo: fused reduce op %lld",
                                     (long long)code));
      return -1;
  }
  return tt_shlo_reshape(c, tt_shlo_convert(c, r, dt), out);
}

static tt_shv_t tt_shlo_lower_fused(tt_shlo_t *c, const tt_shlo_instr_t *ins) {
  const tt_instr_t *in = ins->in;
  const tt_fused_t *f = in->fused;
  if (!f || f->num_ops < 1) {
    tt_shlo_fail(c, tt_status_make(TT_INTERNAL, "stablehlo: fused instruction without a program"));
    return -1;
  }
  /* A fused reduction (kind TT_FUSED_REDUCE, ir.h): steps up to its
   * REDUCE step run over its domain, the rest over the instruction's
   * shape. A plain fused program has no attributes. */
  tt_fused_attrs_t fa;
  tt_status_t dst = tt_attrs_decode(TT_OP_FUSED, in->iattrs, in->num_iattrs, in->fattrs, &fa,
                                    sizeof(fa), NULL);
  int decoded = dst == NULL; /* a layout that does not decode is reported below */
  tt_status_free(dst);
  int is_reduce = decoded && in->num_iattrs >= 3 && fa.kind == TT_FUSED_REDUCE;
  if (in->num_iattrs > 0 &&
      (!is_reduce || fa.rank < 0 || fa.rank > TT_MAX_RANK || fa.dims.n < fa.rank)) {
    tt_shlo_fail(c, tt_status_make(TT_UNIMPLEMENTED,
                                   "stablehlo: fused instruction of kind %lld with %d attributes",
                                   (long long)fa.kind, in->num_iattrs));
    return -1;
  }
  tt_shape_t domain = in->shape;
  uint32_t mask = 0;
  if (is_reduce) {
    mask = (uint32_t)fa.dims_mask;
    domain = tt_shlo_dims((int32_t)fa.rank, fa.dims.v);
  }
  tt_shv_t *steps = malloc(sizeof(*steps) * (size_t)f->num_ops);
  tt_shv_t *inputs = malloc(sizeof(*inputs) * 2 * (size_t)(in->num_operands ? in->num_operands : 1));
  if (!steps || !inputs) {
    free(steps);
    free(inputs);
    tt_shlo_fail(c, tt_status_make(TT_RESOURCE_EXHAUSTED, "stablehlo: out of memory"));
    return -1;
  }
  /* Inputs are broadcast once per phase (domain, then the instruction's
   * shape), when first used. */
  for (int32_t k = 0; k < 2 * in->num_operands; ++k) inputs[k] = -2;
  int after = !is_reduce;
  tt_shv_t v = -1;
  for (int32_t j = 0; j < f->num_ops && !c->err; ++j) {
    const tt_fused_op_t *op = &f->ops[j];
    const tt_shape_t *shape = after ? &in->shape : &domain;
    tt_shv_t a[3] = {-1, -1, -1};
    for (int32_t k = 0; k < op->num_args && k < 3; ++k) {
      int32_t src = op->args[k];
      if (src >= 0) {
        a[k] = src < j ? steps[src] : -1;
      } else {
        int32_t idx = -(src + 1);
        if (idx >= in->num_operands) break;
        tt_shv_t *slot = &inputs[2 * idx + after];
        if (*slot == -2) *slot = tt_shlo_bcast_to(c, ins->x[idx], shape);
        a[k] = *slot;
      }
    }
    switch (op->op) {
      case TT_OP_UNARY: v = tt_shlo_lower_unary(c, op->code, op->alpha, op->beta, a[0], op->dtype); break;
      case TT_OP_BINARY: v = tt_shlo_lower_binary(c, op->code, a[0], a[1], op->dtype); break;
      case TT_OP_WHERE: v = tt_shlo_select(c, a[0], a[1], a[2]); break;
      case TT_OP_CONVERT: v = tt_shlo_convert(c, a[0], (tt_dtype_t)op->code); break;
      case TT_OP_REDUCE:
        if (after) { /* a second reduce, or one in a plain program */
          tt_shlo_fail(c, tt_status_make(TT_UNIMPLEMENTED,
                                         "stablehlo: fused reduce step outside a fused reduction"));
          v = -1;
          break;
        }
        v = tt_shlo_fused_reduce(c, op->code, a[0], mask, op->dtype, &in->shape);
        after = 1;
        break;
      default:
        tt_shlo_fail(c, tt_status_make(TT_UNIMPLEMENTED, "stablehlo: fused step op %s",
                                       tt_op_name(op->op)));
        v = -1;
    }
    steps[j] = v;
  }
  free(steps);
  free(inputs);
  if (!c->err && !after) {
    tt_shlo_fail(c, tt_status_make(TT_INTERNAL, "stablehlo: fused reduction without a reduce step"));
    return -1;
  }
  return c->err ? -1 : v;
}

/* ---- the ops' lowerings and registrations ---- */

static tt_shv_t tt_shlo_lower_unary_op(tt_shlo_t *c, const tt_shlo_instr_t *ins) {
  tt_unary_attrs_t ua;
  TT_ATTRS(ins->in, &ua);
  return tt_shlo_lower_unary(c, ua.op, ua.alpha, ua.beta, ins->x[0], ins->in->dtype);
}

/* The operands broadcast to the result's shape first. */
static tt_shv_t tt_shlo_lower_binary_op(tt_shlo_t *c, const tt_shlo_instr_t *ins) {
  const tt_instr_t *in = ins->in;
  tt_binary_attrs_t ba;
  TT_ATTRS(in, &ba);
  tt_shv_t a = tt_shlo_bcast_to(c, ins->x[0], &in->shape);
  tt_shv_t b = tt_shlo_bcast_to(c, ins->x[1], &in->shape);
  return tt_shlo_lower_binary(c, ba.op, a, b, in->dtype);
}

const tt_shlo_row_t tt_shlo_rows_elementwise[] = {
    {TT_OP_UNARY, tt_shlo_lower_unary_op,
     "elementwise stablehlo ops (chlo.erf/erf_inv/lgamma/digamma where needed)"},
    {TT_OP_BINARY, tt_shlo_lower_binary_op,
     "broadcast_in_dim + elementwise stablehlo ops / compare"},
    {TT_OP_FUSED, tt_shlo_lower_fused, "the fused program expanded into elementwise ops"},
    TT_SHLO_ROWS_END,
};
