/* Emits C for fused elementwise programs. Each fused instruction becomes
 * one function looping over a flat output range; every input is read
 * through an index expression fixed at generation time (contiguous,
 * scalar, or a broadcast pattern with constant dims and strides), every
 * step is one C expression computed in float, rounded to the step's dtype
 * as the unfused op would round it.
 *
 * A fused reduction whose reduced dims are innermost (after dropping
 * size-1 dims: the domain is [A, R]) becomes a function over a range of
 * its A results: per result, the prologue is evaluated for each of the R
 * elements and folded in double in the tier-0 order (16 lanes and a tail
 * per chunk of 65536, chunks in order), then the epilogue runs on the
 * result. A reduction over outer or middle dims (domain [A, R, B], B > 1
 * kept innermost) walks blocks of up to 64 adjacent results: each row r of
 * the block is read along memory into 64 double accumulators, rows folded
 * in tier 0's order (row chunks of 512 merged in order when tier 0 splits
 * them, tt_fred_cols_range), so the sum is tier 0's bit for bit. */
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kernels/fastmath.h"
#include "torchtpu/codegen.h"
#include "torchtpu/kernels.h"
#include "torchtpu/op_attrs.h"

/* The emitters below write hundreds of fragments; a short name for the
 * engine's string buffer append keeps them readable. */
static void put(tt_strbuf_t *s, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void put(tt_strbuf_t *s, const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  tt_strbuf_vprintf(s, fmt, ap);
  va_end(ap);
}

/* The C expressions of the elementwise functions (their rows in
 * torchtpu/kernels.h): a format with one %s per operand, "" where
 * tt_emit_unary writes the function out (TT_EW_TIER1_SPECIAL), NULL where
 * tier 1 has none (TT_EW_TIER0_ONLY). */
#define TT_C_EW_EXPR_(prefix, suffix, tier1) [prefix##suffix] = tier1,
#define TT_C_UNARY_(suffix, name, stablehlo, tier1) TT_C_EW_EXPR_(TT_UN_, suffix, tier1)
#define TT_C_BINARY_(suffix, name, stablehlo, tier1) TT_C_EW_EXPR_(TT_BIN_, suffix, tier1)
static const char *const tt_unary_exprs_[TT_UN_COUNT] = {TT_UNARY_OPS(TT_C_UNARY_)};
static const char *const tt_binary_exprs_[TT_BIN_COUNT] = {TT_BINARY_OPS(TT_C_BINARY_)};
#undef TT_C_UNARY_
#undef TT_C_BINARY_
#undef TT_C_EW_EXPR_

static const char *tt_unary_expr(int64_t code) {
  const char *e = code >= 0 && code < TT_UN_COUNT ? tt_unary_exprs_[code] : NULL;
  return e && e[0] ? e : NULL;
}

/* The TT_EW_TIER1_SPECIAL functions: parameters (alpha, beta as float, as
 * tier 0's f32 kernel takes them) or several uses of the argument, written
 * out by tt_emit_unary; the expressions are tier 0's (src/kernels/unary.c). */
static int tt_unary_special(int64_t code) {
  return code == TT_UN_LEAKY_RELU || code == TT_UN_HARDTANH || code == TT_UN_HARDSWISH;
}

static int tt_unary_supported(int64_t code) {
  return tt_unary_expr(code) != NULL || tt_unary_special(code);
}

static const char *tt_binary_expr(int64_t code) {
  const char *e = code >= 0 && code < TT_BIN_COUNT ? tt_binary_exprs_[code] : NULL;
  return e && e[0] ? e : NULL;
}

/* A float constant as an exact C literal. */
static void tt_put_float(tt_strbuf_t *s, float v) {
  if (v != v) put(s, "NAN");
  else if (isinf(v)) put(s, v > 0 ? "INFINITY" : "(-INFINITY)");
  else put(s, "(%af)", (double)v);
}

static void tt_emit_unary(tt_strbuf_t *s, const tt_fused_op_t *op, const char *x) {
  float a = (float)op->alpha, b = (float)op->beta;
  switch (op->code) {
    case TT_UN_LEAKY_RELU:
      put(s, "(%s > 0.0f ? %s : %s * ", x, x, x);
      tt_put_float(s, a);
      put(s, ")");
      break;
    case TT_UN_HARDTANH:
      put(s, "(%s < ", x);
      tt_put_float(s, a);
      put(s, " ? ");
      tt_put_float(s, a);
      put(s, " : (%s > ", x);
      tt_put_float(s, b);
      put(s, " ? ");
      tt_put_float(s, b);
      put(s, " : %s))", x);
      break;
    case TT_UN_HARDSWISH: put(s, "(%s * tt_hard6(%s) / 6.0f)", x, x); break;
    default: put(s, tt_unary_expr(op->code), x); break;
  }
}

static int tt_loadable(tt_dtype_t dt) {
  return dt == TT_F32 || dt == TT_BF16 || dt == TT_F16 || dt == TT_BOOL || dt == TT_I32 ||
         dt == TT_I64 || dt == TT_U8 || dt == TT_I8;
}

/* A fused reduction's reduced domain dims (bit d: dim d). */
static uint32_t tt_reduce_mask(const tt_instr_t *in) {
  tt_fused_attrs_t a;
  TT_ATTRS(in, &a);
  return (uint32_t)a.dims_mask;
}

/* For a fused reduction over innermost dims: its row length R (> 0);
 * else 0. */
static int64_t tt_reduce_row(const tt_instr_t *in) {
  if (!tt_fused_is_reduce(in)) return 0;
  tt_shape_t dom = tt_fused_domain(in);
  uint32_t mask = tt_reduce_mask(in);
  int64_t R = 1;
  int seen = 0, kept_after = 0;
  for (int d = 0; d < dom.rank; ++d) {
    if (dom.dims[d] == 1) continue;
    if ((mask >> d) & 1u) {
      if (kept_after) return 0; /* a second run */
      R *= dom.dims[d];
      seen = 1;
    } else if (seen) {
      kept_after = 1;
    }
  }
  return kept_after ? 0 : R;
}

/* For a fused reduction whose reduced dims form one run with kept dims
 * after it: the domain as [A, R, B] (B > 1) and 1; else 0. */
static int tt_reduce_cols(const tt_instr_t *in, int64_t *A, int64_t *R, int64_t *B) {
  return tt_fused_is_reduce(in) && tt_fused_reduce_arb(in, A, R, B) == 1 && *B > 1;
}

int tt_codegen_supported(const tt_graph_t *g, int32_t i) {
  const tt_instr_t *in = &g->instrs[i];
  if (in->op != TT_OP_FUSED || !in->fused) return 0;
  if (tt_fused_is_reduce(in)) {
    int64_t A, R, B;
    if ((tt_reduce_row(in) <= 0 && !tt_reduce_cols(in, &A, &R, &B)) || in->num_operands > 64)
      return 0;
    for (int32_t s = 0; s < in->fused->num_ops; ++s) {
      const tt_fused_op_t *op = &in->fused->ops[s];
      if (op->op == TT_OP_REDUCE && op->code != TT_RED_SUM && op->code != TT_RED_MEAN &&
          op->code != TT_RED_MAX && op->code != TT_RED_MIN)
        return 0;
    }
  }
  if (in->dtype != TT_F32 && in->dtype != TT_BF16 && in->dtype != TT_F16 && in->dtype != TT_BOOL)
    return 0;
  for (int32_t k = 0; k < in->num_operands; ++k)
    if (!tt_loadable(g->instrs[in->operands[k]].dtype)) return 0;
  for (int32_t s = 0; s < in->fused->num_ops; ++s) {
    const tt_fused_op_t *op = &in->fused->ops[s];
    if (op->op == TT_OP_UNARY && !tt_unary_supported(op->code)) return 0;
    if (op->op == TT_OP_BINARY && !tt_binary_expr(op->code)) return 0;
  }
  return 1;
}

static const char *tt_c_type(tt_dtype_t dt) {
  switch (dt) {
    case TT_F32: return "float";
    case TT_BF16: case TT_F16: return "uint16_t";
    case TT_I32: return "int32_t";
    case TT_I64: return "int64_t";
    case TT_I8: return "int8_t";
    default: return "uint8_t"; /* U8, BOOL */
  }
}

static const char *tt_load_fn(tt_dtype_t dt) {
  switch (dt) {
    case TT_BF16: return "tt_ld_bf16";
    case TT_F16: return "tt_ld_f16";
    case TT_BOOL: return "tt_ld_bool";
    default: return "(float)";
  }
}

static const char *tt_round_fn(tt_dtype_t dt) {
  switch (dt) {
    case TT_BF16: return "tt_rnd_bf16";
    case TT_F16: return "tt_rnd_f16";
    case TT_BOOL: return "tt_rnd_bool";
    default: return "";
  }
}

/* Index expression of input x (shape xs) for flat output index `i` of
 * output shape os. */
static void tt_emit_index_of(tt_strbuf_t *s, const tt_shape_t *xs, const tt_shape_t *os,
                             const char *var);

static void tt_emit_index(tt_strbuf_t *s, const tt_shape_t *xs, const tt_shape_t *os) {
  tt_emit_index_of(s, xs, os, "i");
}

/* The same for the flat output index held in `var`. */
static void tt_emit_index_of(tt_strbuf_t *s, const tt_shape_t *xs, const tt_shape_t *os,
                             const char *var) {
  int64_t xn = tt_shape_numel(xs), on = tt_shape_numel(os);
  if (xn == on) {
    put(s, "%s", var);
    return;
  }
  if (xn == 1) {
    put(s, "0");
    return;
  }
  /* Strides of x over out's dims (0 where x broadcasts). */
  int64_t xstride[TT_MAX_RANK] = {0}, ostride[TT_MAX_RANK];
  int64_t acc = 1;
  for (int d = xs->rank - 1; d >= 0; --d) {
    int od = os->rank - xs->rank + d;
    xstride[od] = xs->dims[d] == 1 ? 0 : acc;
    acc *= xs->dims[d];
  }
  acc = 1;
  for (int d = os->rank - 1; d >= 0; --d) {
    ostride[d] = acc;
    acc *= os->dims[d];
  }
  put(s, "(0");
  for (int d = 0; d < os->rank; ++d) {
    if (!xstride[d]) continue;
    put(s, " + ((%s / %lldLL) %% %lldLL) * %lldLL", var, (long long)ostride[d],
        (long long)os->dims[d], (long long)xstride[d]);
  }
  put(s, ")");
}

static const char tt_prelude[] =
    "#include <math.h>\n#include <stdint.h>\n#include <string.h>\n"
    TT_FASTMATH_SOURCE "\n"
    "static inline float tt_ld_bf16(uint16_t h) { uint32_t u = (uint32_t)h << 16; float f;"
    " memcpy(&f, &u, 4); return f; }\n"
    "static inline uint16_t tt_st_bf16(float f) { uint32_t u; memcpy(&u, &f, 4);"
    " if ((u & 0x7fffffffu) > 0x7f800000u) return (uint16_t)((u >> 16) | 0x40);"
    " u += 0x7fffu + ((u >> 16) & 1u); return (uint16_t)(u >> 16); }\n"
    "static inline float tt_ld_f16(uint16_t h) { _Float16 v; memcpy(&v, &h, 2); return (float)v; }\n"
    "static inline uint16_t tt_st_f16(float f) { _Float16 v = (_Float16)f; uint16_t h;"
    " memcpy(&h, &v, 2); return h; }\n"
    "static inline float tt_ld_bool(uint8_t b) { return b ? 1.0f : 0.0f; }\n"
    "static inline float tt_rnd_bf16(float f) { return tt_ld_bf16(tt_st_bf16(f)); }\n"
    "static inline float tt_rnd_f16(float f) { return tt_ld_f16(tt_st_f16(f)); }\n"
    "static inline float tt_rnd_bool(float f) { return f != 0.0f ? 1.0f : 0.0f; }\n"
    "static inline float tt_sigmoid(float x) { return 1.0f / (1.0f + tt_expf_fast(-x)); }\n"
    "static inline float tt_silu(float x) { return x / (1.0f + tt_expf_fast(-x)); }\n"
    "static inline float tt_relu(float x) { return x > 0.0f ? x : (x != x ? x : 0.0f); }\n"
    "static inline float tt_square(float x) { return x * x; }\n"
    "static inline float tt_hard6(float x) { float v = x + 3.0f; v = v < 0.0f ? 0.0f : v;"
    " return 6.0f < v ? 6.0f : v; }\n"
    "static inline float tt_hardsigmoid(float x) { return tt_hard6(x) / 6.0f; }\n"
    "static inline float tt_gelu_erf(float x) { return 0.5f * x * (1.0f + tt_erff_fast(x * 0.70710678118654752f)); }\n"
    "static inline float tt_gelu_tanh(float x) { float k = 0.79788456080286536f;"
    " return 0.5f * x * (1.0f + tt_tanhf_fast(k * (x + 0.044715f * x * x * x))); }\n"
    "static inline float tt_maximum(float a, float b) { return (a > b || a != a) ? a : b; }\n"
    "static inline float tt_minimum(float a, float b) { return (a < b || a != a) ? a : b; }\n";

/* Loads `float a<k>` of the inputs with used[k], indexed by `i` over
 * shape os (indent: leading spaces). */
static void tt_emit_loads(tt_strbuf_t *s, const tt_graph_t *g, const tt_instr_t *in,
                          const uint8_t *used, const tt_shape_t *os, const char *indent) {
  for (int32_t k = 0; k < in->num_operands; ++k) {
    if (used && !used[k]) continue;
    const tt_instr_t *x = &g->instrs[in->operands[k]];
    put(s, "%sfloat a%d = %s(x%d[", indent, k, tt_load_fn(x->dtype), k);
    tt_emit_index(s, &x->shape, os);
    put(s, "]);\n");
  }
}

/* Steps [s0, s1) as `float s<n>` expressions. */
static void tt_emit_steps(tt_strbuf_t *s, const tt_fused_t *f, int32_t s0, int32_t s1,
                          const char *indent) {
  for (int32_t st = s0; st < s1; ++st) {
    const tt_fused_op_t *op = &f->ops[st];
    char args[3][16];
    for (int32_t a = 0; a < op->num_args; ++a) {
      int32_t r = op->args[a];
      snprintf(args[a], sizeof(args[a]), r >= 0 ? "s%d" : "a%d", r >= 0 ? r : -r - 1);
    }
    put(s, "%sfloat s%d = %s(", indent, st, tt_round_fn(op->dtype));
    switch (op->op) {
      case TT_OP_UNARY: tt_emit_unary(s, op, args[0]); break;
      case TT_OP_BINARY: put(s, tt_binary_expr(op->code), args[0], args[1]); break;
      case TT_OP_WHERE: put(s, "(%s != 0.0f ? %s : %s)", args[0], args[1], args[2]); break;
      default: put(s, "%s", args[0]); break; /* convert: rounding does it */
    }
    put(s, ");\n");
  }
}

static void tt_emit_store(tt_strbuf_t *s, tt_dtype_t dt, const char *value, const char *indent) {
  switch (dt) {
    case TT_BF16: put(s, "%so[i] = tt_st_bf16(%s);\n", indent, value); break;
    case TT_F16: put(s, "%so[i] = tt_st_f16(%s);\n", indent, value); break;
    case TT_BOOL: put(s, "%so[i] = %s != 0.0f;\n", indent, value); break;
    default: put(s, "%so[i] = %s;\n", indent, value); break;
  }
}

/* How input x is read along a row made of the output's last t dims: 1
 * contiguously (x has those dims as the output does), 0 not at all (x is
 * 1 on all of them: a scalar, or a per-channel value), -1 otherwise. */
static int tt_row_mode(const tt_shape_t *xs, const tt_shape_t *os, int t) {
  int64_t xn = tt_shape_numel(xs), on = tt_shape_numel(os);
  if (xn == on || xn == 1) return xn == on ? 1 : 0;
  int full = 0, bcast = 0;
  for (int d = os->rank - t; d < os->rank; ++d) {
    int xd = xs->rank - os->rank + d;
    int64_t xdim = xd >= 0 ? xs->dims[xd] : 1;
    if (os->dims[d] == 1) continue;
    full |= xdim == os->dims[d];
    bcast |= xdim == 1;
  }
  return full && bcast ? -1 : !bcast;
}

/* An elementwise program whose inputs broadcast: the flat range is walked
 * a row at a time, each input's row offset computed once per row, so the
 * inner loop has no division and vectorises (inputs read contiguously or
 * as one value per row). A row is the longest run of the output's last
 * dims over which every input is read one way: [C,1,1] against
 * [N,C,H,W] gives rows of H*W. */
static int tt_emit_elementwise_rows(tt_strbuf_t *s, const tt_graph_t *g, int32_t i) {
  const tt_instr_t *in = &g->instrs[i];
  const tt_fused_t *f = in->fused;
  const tt_shape_t *os = &in->shape;
  if (os->rank < 2) return 0;
  int broadcasts = 0, t = 0;
  for (int32_t k = 0; k < in->num_operands; ++k) {
    const tt_shape_t *xs = &g->instrs[in->operands[k]].shape;
    broadcasts |= tt_shape_numel(xs) != tt_shape_numel(os) && tt_shape_numel(xs) != 1;
  }
  if (!broadcasts) return 0;
  for (int tt = 1; tt < os->rank; ++tt) {
    int ok = 1;
    for (int32_t k = 0; k < in->num_operands && ok; ++k)
      ok = tt_row_mode(&g->instrs[in->operands[k]].shape, os, tt) >= 0;
    if (!ok) break;
    t = tt;
  }
  if (t == 0) return 0;
  long long inner = 1;
  for (int d = os->rank - t; d < os->rank; ++d) inner *= (long long)os->dims[d];
  if (inner < 8) return 0;
  put(s, "  for (int64_t i0 = begin; i0 < end;) {\n");
  put(s, "    int64_t r = i0 / %lldLL, rb = r * %lldLL;\n", inner, inner);
  put(s, "    int64_t j0 = i0 - rb, j1 = end - rb < %lldLL ? end - rb : %lldLL;\n", inner,
      inner);
  for (int32_t k = 0; k < in->num_operands; ++k) {
    put(s, "    int64_t b%d = ", k);
    tt_emit_index_of(s, &g->instrs[in->operands[k]].shape, os, "rb");
    put(s, ";\n");
  }
  put(s, "    for (int64_t j = j0; j < j1; ++j) {\n");
  put(s, "      int64_t i = rb + j;\n");
  for (int32_t k = 0; k < in->num_operands; ++k) {
    const tt_instr_t *x = &g->instrs[in->operands[k]];
    int mode = tt_row_mode(&x->shape, os, t);
    put(s, "      float a%d = %s(x%d[b%d%s]);\n", k, tt_load_fn(x->dtype), k, k,
        mode == 1 ? " + j" : "");
  }
  tt_emit_steps(s, f, 0, f->num_ops, "      ");
  char last[16];
  snprintf(last, sizeof(last), "s%d", f->num_ops - 1);
  tt_emit_store(s, in->dtype, last, "      ");
  put(s, "    }\n");
  put(s, "    i0 = rb + j1;\n");
  put(s, "  }\n");
  return 1;
}

static void tt_emit_elementwise(tt_strbuf_t *s, const tt_graph_t *g, int32_t i) {
  const tt_instr_t *in = &g->instrs[i];
  const tt_fused_t *f = in->fused;
  if (tt_emit_elementwise_rows(s, g, i)) return;
  put(s, "  for (int64_t i = begin; i < end; ++i) {\n");
  tt_emit_loads(s, g, in, NULL, &in->shape, "    ");
  tt_emit_steps(s, f, 0, f->num_ops, "    ");
  char last[16];
  snprintf(last, sizeof(last), "s%d", f->num_ops - 1);
  tt_emit_store(s, in->dtype, last, "    ");
  put(s, "  }\n");
}

/* Loads of a fused reduction's prologue inputs at domain index i of row
 * r0 (rows of R): a value per row reads index r0, a value per position in
 * the row reads i - r0 * R, so neither divides per element. */
static void tt_emit_row_loads(tt_strbuf_t *s, const tt_graph_t *g, const tt_instr_t *in,
                              const uint8_t *used, const tt_shape_t *dom, uint32_t mask,
                              const char *indent) {
  for (int32_t k = 0; k < in->num_operands; ++k) {
    if (!used[k]) continue;
    const tt_instr_t *x = &g->instrs[in->operands[k]];
    int kept = 0, reduced = 0;
    for (int d = 0; d < x->shape.rank; ++d) {
      int dd = dom->rank - x->shape.rank + d;
      if (x->shape.dims[d] == 1 || dom->dims[dd] == 1) continue;
      if ((mask >> dd) & 1u) reduced = 1;
      else kept = 1;
    }
    int64_t xn = tt_shape_numel(&x->shape), dn = tt_shape_numel(dom);
    int64_t R = tt_reduce_row(in), A = R ? dn / R : 0;
    put(s, "%sfloat a%d = %s(x%d[", indent, k, tt_load_fn(x->dtype), k);
    if (xn == dn || xn == 1 || (kept && reduced) || (kept && xn != A) ||
        (reduced && xn != R)) {
      tt_emit_index(s, &x->shape, dom);
    } else if (kept) {
      put(s, "r0"); /* every kept dim in full, reduced dims 1: one value per row */
    } else {
      put(s, "(i - r0 * R)");
    }
    put(s, "]);\n");
  }
}

/* Marks the inputs read up to the REDUCE step `red` (the prologue) in
 * used_pro and those read after it (the epilogue) in used_epi. */
static void tt_split_uses(const tt_fused_t *f, int32_t red, uint8_t *used_pro,
                          uint8_t *used_epi) {
  for (int32_t st = 0; st < f->num_ops; ++st)
    for (int32_t a = 0; a < f->ops[st].num_args; ++a)
      if (f->ops[st].args[a] < 0) {
        int32_t k = -f->ops[st].args[a] - 1;
        if (st > red) used_epi[k] = 1;
        else used_pro[k] = 1;
      }
}

/* A fused reduction over rows of R (tt_reduce_row): the prologue value at
 * domain index i is a static inline function, folded per result row. */
static void tt_emit_reduce(tt_strbuf_t *s, const tt_graph_t *g, int32_t i) {
  const tt_instr_t *in = &g->instrs[i];
  const tt_fused_t *f = in->fused;
  tt_shape_t dom = tt_fused_domain(in);
  int64_t R = tt_reduce_row(in);
  uint32_t mask = tt_reduce_mask(in);
  int32_t red = 0;
  while (f->ops[red].op != TT_OP_REDUCE) ++red;
  const tt_fused_op_t *rop = &f->ops[red];
  uint8_t used_pro[64] = {0}, used_epi[64] = {0};
  tt_split_uses(f, red, used_pro, used_epi);
  int is_max = rop->code == TT_RED_MAX, is_min = rop->code == TT_RED_MIN;
  put(s, "  for (int64_t r0 = begin; r0 < end; ++r0) {\n");
  put(s, "    const int64_t R = %lldLL;\n", (long long)R);
  if (is_max || is_min) {
    put(s, "    float m = %s; int nan = 0;\n", is_max ? "-INFINITY" : "INFINITY");
    put(s, "    for (int64_t r = 0; r < R; ++r) {\n      const int64_t i = r0 * R + r;\n");
    tt_emit_row_loads(s, g, in, used_pro, &dom, mask, "      ");
    tt_emit_steps(s, f, 0, red, "      ");
    put(s, "      float v = %s%d;\n", rop->args[0] >= 0 ? "s" : "a",
        rop->args[0] >= 0 ? rop->args[0] : -rop->args[0] - 1);
    put(s, "      if (v != v) nan = 1; else if (v %s m) m = v;\n", is_max ? ">" : "<");
    put(s, "    }\n    double acc = nan ? (double)NAN : (double)m;\n");
  } else {
    /* Chunks of 65536, each 16 lanes over its whole blocks, then its tail. */
    put(s, "    double acc = 0;\n");
    put(s, "    for (int64_t c0 = 0; c0 < R; c0 += 65536) {\n");
    put(s, "      const int64_t len = R - c0 < 65536 ? R - c0 : 65536, full = len - len %% 16;\n");
    put(s, "      double lane[16] = {0}, part = 0;\n");
    put(s, "      for (int64_t b = 0; b < full; b += 16) {\n");
    put(s, "        for (int l = 0; l < 16; ++l) {\n");
    put(s, "          const int64_t i = r0 * R + c0 + b + l;\n");
    tt_emit_row_loads(s, g, in, used_pro, &dom, mask, "          ");
    tt_emit_steps(s, f, 0, red, "          ");
    put(s, "          lane[l] += %s%d;\n        }\n      }\n", rop->args[0] >= 0 ? "s" : "a",
        rop->args[0] >= 0 ? rop->args[0] : -rop->args[0] - 1);
    put(s, "      for (int l = 0; l < 16; ++l) part += lane[l];\n");
    put(s, "      for (int64_t r = full; r < len; ++r) {\n");
    put(s, "        const int64_t i = r0 * R + c0 + r;\n");
    tt_emit_row_loads(s, g, in, used_pro, &dom, mask, "        ");
    tt_emit_steps(s, f, 0, red, "        ");
    put(s, "        part += %s%d;\n      }\n", rop->args[0] >= 0 ? "s" : "a",
        rop->args[0] >= 0 ? rop->args[0] : -rop->args[0] - 1);
    put(s, "      acc = c0 == 0 ? part : acc + part;\n    }\n");
    if (rop->code == TT_RED_MEAN) put(s, "    acc = acc / (double)R;\n");
  }
  put(s, "    const int64_t i = r0;\n");
  put(s, "    float s%d = %s((float)acc);\n", red, tt_round_fn(rop->dtype));
  tt_emit_loads(s, g, in, used_epi, &in->shape, "    ");
  tt_emit_steps(s, f, red + 1, f->num_ops, "    ");
  char last[16];
  snprintf(last, sizeof(last), "s%d", f->num_ops - 1);
  tt_emit_store(s, in->dtype, last, "    ");
  put(s, "  }\n");
}

/* Which of the column form's loops input x varies with: the dims of the
 * domain [A, R, B] it spans in full. 1: B only (x[j]), 2: R only (x[r]),
 * 3: A and R (x[a * R + r]), 4: the whole domain (x[i]), 0: a scalar,
 * -1: something else (the general index). */
static int tt_col_input_kind(const tt_shape_t *xs, const tt_shape_t *dom, uint32_t mask,
                             int64_t A, int64_t R, int64_t B) {
  int64_t xn = tt_shape_numel(xs), dn = tt_shape_numel(dom);
  if (xn == dn) return 4;
  if (xn == 1) return 0;
  int spans_a = 0, spans_r = 0, spans_b = 0, seen = 0;
  for (int d = 0; d < xs->rank; ++d) {
    int dd = dom->rank - xs->rank + d;
    if (dom->dims[dd] == 1) continue;
    int red = (mask >> dd) & 1u;
    seen |= red;
    if (xs->dims[d] == 1) continue;
    if (red) spans_r = 1;
    else if (seen) spans_b = 1;
    else spans_a = 1;
  }
  if (spans_b && !spans_a && !spans_r && xn == B) return 1;
  if (spans_r && !spans_a && !spans_b && xn == R) return 2;
  if (spans_a && spans_r && !spans_b && xn == A * R) return 3;
  return -1;
}

/* A fused reduction in the column form (tt_reduce_cols): see the header. */
static void tt_emit_reduce_cols(tt_strbuf_t *s, const tt_graph_t *g, int32_t i) {
  const tt_instr_t *in = &g->instrs[i];
  const tt_fused_t *f = in->fused;
  tt_shape_t dom = tt_fused_domain(in);
  uint32_t mask = tt_reduce_mask(in);
  int64_t A = 1, R = 1, B = 1;
  tt_reduce_cols(in, &A, &R, &B);
  int32_t red = 0;
  while (f->ops[red].op != TT_OP_REDUCE) ++red;
  const tt_fused_op_t *rop = &f->ops[red];
  uint8_t used_pro[64] = {0}, used_epi[64] = {0};
  tt_split_uses(f, red, used_pro, used_epi);
  int is_max = rop->code == TT_RED_MAX, is_min = rop->code == TT_RED_MIN;
  /* tt_execute_fused_reduce's row chunks: whole columns when its column
   * blocks (of 512) alone give enough parallel work. */
  int64_t nblk = (B + 511) / 512, rc = A * nblk >= 8 ? R : 512;
  char v[16];
  snprintf(v, sizeof v, "%s%d", rop->args[0] >= 0 ? "s" : "a",
           rop->args[0] >= 0 ? rop->args[0] : -rop->args[0] - 1);
  put(s, "  const int64_t R = %lldLL, B = %lldLL, RC = %lldLL;\n", (long long)R, (long long)B,
      (long long)rc);
  put(s, "  for (int64_t o0 = begin; o0 < end;) {\n");
  put(s, "    const int64_t a = o0 / B, j0 = o0 - a * B;\n");
  put(s, "    int64_t w = end - o0 < B - j0 ? end - o0 : B - j0;\n    if (w > 64) w = 64;\n");
  put(s, "    double tot[64], part[64];\n");
  put(s, "    for (int64_t c0 = 0; c0 < R; c0 += RC) {\n");
  put(s, "      const int64_t c1 = R - c0 < RC ? R : c0 + RC;\n");
  put(s, "      for (int64_t jj = 0; jj < w; ++jj) part[jj] = %s;\n",
      is_max ? "-INFINITY" : is_min ? "INFINITY" : "0.0");
  put(s, "      for (int64_t r = c0; r < c1; ++r) {\n");
  put(s, "        const int64_t rb = (a * R + r) * B + j0;\n");
  put(s, "        for (int64_t jj = 0; jj < w; ++jj) {\n");
  put(s, "          const int64_t i = rb + jj;\n");
  for (int32_t k = 0; k < in->num_operands; ++k) {
    if (!used_pro[k]) continue;
    const tt_instr_t *x = &g->instrs[in->operands[k]];
    put(s, "          float a%d = %s(x%d[", k, tt_load_fn(x->dtype), k);
    switch (tt_col_input_kind(&x->shape, &dom, mask, A, R, B)) {
      case 4: put(s, "i"); break;
      case 0: put(s, "0"); break;
      case 1: put(s, "j0 + jj"); break;
      case 2: put(s, "r"); break;
      case 3: put(s, "a * R + r"); break;
      default: tt_emit_index(s, &x->shape, &dom); break;
    }
    put(s, "]);\n");
  }
  tt_emit_steps(s, f, 0, red, "          ");
  if (is_max || is_min) {
    put(s, "          double x = %s, m = part[jj];\n", v);
    put(s, "          part[jj] = (x %s m || x != x) && m == m ? x : m;\n", is_max ? ">" : "<");
  } else {
    put(s, "          part[jj] += %s;\n", v);
  }
  put(s, "        }\n      }\n");
  put(s, "      for (int64_t jj = 0; jj < w; ++jj) {\n");
  if (is_max || is_min) {
    put(s, "        double p = part[jj], t = tot[jj];\n");
    put(s, "        tot[jj] = c0 == 0 ? p : ((p %s t || p != p) ? p : t);\n", is_max ? ">" : "<");
  } else {
    put(s, "        tot[jj] = c0 == 0 ? part[jj] : tot[jj] + part[jj];\n");
  }
  put(s, "      }\n    }\n");
  put(s, "    for (int64_t jj = 0; jj < w; ++jj) {\n");
  put(s, "      const int64_t i = o0 + jj;\n");
  put(s, "      float s%d = %s((float)(tot[jj]%s));\n", red, tt_round_fn(rop->dtype),
      rop->code == TT_RED_MEAN ? " / (double)R" : "");
  tt_emit_loads(s, g, in, used_epi, &in->shape, "      ");
  tt_emit_steps(s, f, red + 1, f->num_ops, "      ");
  char last[16];
  snprintf(last, sizeof(last), "s%d", f->num_ops - 1);
  tt_emit_store(s, in->dtype, last, "      ");
  put(s, "    }\n    o0 += w;\n  }\n");
}

char *tt_codegen_emit(const tt_graph_t *g, const char *key) {
  tt_strbuf_t s = {0};
  int any = 0;
  put(&s, "/* Generated by torchtpu tier 1. */\n%s", tt_prelude);
  put(&s, "const char tt_gen_key[] = \"%s\";\n", key);
  for (int32_t i = 0; i < g->num_instrs; ++i) {
    if (!tt_codegen_supported(g, i)) continue;
    any = 1;
    const tt_instr_t *in = &g->instrs[i];
    put(&s, "\nvoid tt_gen_%d(const void *const *in, void *out, int64_t begin, int64_t end) {\n", i);
    for (int32_t k = 0; k < in->num_operands; ++k) {
      tt_dtype_t dt = g->instrs[in->operands[k]].dtype;
      /* No restrict: a donated input shares memory with the output. */
      put(&s, "  const %s *x%d = (const %s *)in[%d];\n", tt_c_type(dt), k, tt_c_type(dt), k);
    }
    put(&s, "  %s *o = (%s *)out;\n", tt_c_type(in->dtype), tt_c_type(in->dtype));
    if (tt_fused_is_reduce(in) && tt_reduce_row(in) <= 0) {
      tt_emit_reduce_cols(&s, g, i);
    } else if (tt_fused_is_reduce(in)) {
      tt_emit_reduce(&s, g, i);
    } else {
      tt_emit_elementwise(&s, g, i);
    }
    put(&s, "}\n");
  }
  if (s.failed || !any) {
    tt_strbuf_release(&s);
    return NULL;
  }
  return tt_strbuf_take(&s);
}
