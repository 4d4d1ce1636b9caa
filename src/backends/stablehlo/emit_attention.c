/* StableHLO lowerings of fused scaled dot-product attention: ATTENTION
 * (output or logsumexp) and ATTENTION_BWD, composed from dot_general
 * (batch dims B, H), reductions and elementwise ops. The [B, H, L, S]
 * scores are an explicit tensor here; fusing and tiling them is left to
 * the compiler that reads the module.
 *
 * Semantics follow the CPU kernels (src/kernels/attention.c): everything
 * is computed in f32 (F16/BF16 operands are converted and the results
 * converted back), scores = scale * q k^T + mask, the causal mask hides
 * key j from query row i when j > i, and a row that sees no key (every
 * score -inf) gives output 0, logsumexp 0 and zero gradients. */
#include <math.h>

#include "backends/stablehlo/emit_internal.h"

/* The dtype attention computes in, whatever its operands' float dtype
 * (F32, F16 or BF16), as the kernels do. */
#define TT_SHLO_ATT_ACC TT_F32

/* v [B, H, L] broadcast along a new last dim to s [B, H, L, N]. */
static tt_shv_t tt_shlo_att_rows(tt_shlo_t *c, tt_shv_t v, const tt_shape_t *s) {
  static const int64_t dims[3] = {0, 1, 2};
  return tt_shlo_bcast_dims(c, v, s, dims);
}

/* a [B, H, *, *] . b [B, H, *, *] contracting a's dim ca with b's dim cb;
 * the result is [B, H, a's free dim, b's free dim]. */
static tt_shv_t tt_shlo_att_dot(tt_shlo_t *c, tt_shv_t a, int64_t ca, tt_shv_t b, int64_t cb) {
  static const int64_t batch[2] = {0, 1};
  tt_shv_t ab[2] = {a, b};
  if (tt_shlo_bad(c, 2, ab)) return -1;
  const tt_shape_t *as = tt_shlo_shape(c, a), *bs = tt_shlo_shape(c, b);
  int64_t od[4] = {as->dims[0], as->dims[1], as->dims[ca == 2 ? 3 : 2], bs->dims[cb == 2 ? 3 : 2]};
  tt_shape_t os = tt_shlo_dims(4, od);
  return tt_shlo_dot_general(c, a, b, 2, batch, batch, ca, cb, tt_shlo_dtype(c, a), &os);
}

/* The softmax pieces of one attention problem, all in the compute dtype. */
typedef struct tt_shlo_att_s {
  tt_shv_t e;    /* exp(scores - row max) [B, H, L, S]; 0 where hidden and on dead rows */
  tt_shv_t m;    /* row max [B, H, L], 0 on dead rows */
  tt_shv_t sum;  /* row sum of e [B, H, L], 1 on dead rows (so e / sum is 0 there) */
  tt_shv_t dead; /* i1 [B, H, L]: the row sees no key */
} tt_shlo_att_t;

/* Scores of q [B, H, L, E] against k [B, H, S, E] (both in the compute
 * dtype), mask (-1: none) added and the causal triangle hidden, then the
 * row-wise max, exp and sum of a numerically stable softmax. */
static void tt_shlo_att_softmax(tt_shlo_t *c, tt_shv_t q, tt_shv_t k, tt_shv_t mask, int causal,
                                double scale, tt_shlo_att_t *out) {
  out->e = out->m = out->sum = out->dead = -1;
  tt_shv_t s = tt_shlo_bin_k(c, "multiply", tt_shlo_att_dot(c, q, 3, k, 3), scale);
  if (tt_shlo_bad(c, 1, &s)) return;
  const tt_shape_t ss = *tt_shlo_shape(c, s);
  tt_dtype_t acc = tt_shlo_dtype(c, s);
  if (mask >= 0) {
    /* A mask dim of 1 stretches: broadcast_in_dim allows it on equal ranks. */
    static const int64_t ident[4] = {0, 1, 2, 3};
    tt_shv_t mv = tt_shlo_convert(c, mask, acc);
    if (!tt_shlo_bad(c, 1, &mv) && !tt_shape_equal(tt_shlo_shape(c, mv), &ss))
      mv = tt_shlo_bcast_dims(c, mv, &ss, ident);
    s = tt_shlo_bin(c, "add", s, mv);
  }
  if (causal) {
    /* Hidden is -inf rather than a large negative bias, so a row that sees
     * no key is exactly the dead row the kernels define. */
    int64_t ld[2] = {ss.dims[2], ss.dims[3]};
    tt_shape_t ls = tt_shlo_dims(2, ld);
    static const int64_t last2[2] = {2, 3};
    tt_shv_t keep = tt_shlo_cmp(c, "LE", tt_shlo_iota(c, TT_I64, &ls, 1),
                                tt_shlo_iota(c, TT_I64, &ls, 0));
    keep = tt_shlo_bcast_dims(c, keep, &ss, last2);
    s = tt_shlo_select(c, keep, s, tt_shlo_like(c, s, -INFINITY));
  }
  tt_shv_t m = tt_shlo_reduce(c, s, 1u << 3, "stablehlo.maximum", tt_shlo_lowest(c, acc));
  /* A dead row's max is -inf, and s - max would be NaN there: subtract 0
   * instead, so every exp is exp(-inf) = 0. */
  out->dead = tt_shlo_cmp(c, "EQ", m, tt_shlo_like(c, m, -INFINITY));
  out->m = tt_shlo_select(c, out->dead, tt_shlo_like(c, m, 0), m);
  out->e = tt_shlo_un(c, "exponential",
                      tt_shlo_bin(c, "subtract", s, tt_shlo_att_rows(c, out->m, &ss)));
  tt_shv_t sum = tt_shlo_reduce(c, out->e, 1u << 3, "stablehlo.add", tt_shlo_scalar(c, acc, 0));
  out->sum = tt_shlo_select(c, out->dead, tt_shlo_like(c, sum, 1), sum);
}

static tt_shv_t tt_shlo_att_forward(tt_shlo_t *c, const tt_shlo_instr_t *ins) {
  const tt_instr_t *in = ins->in;
  tt_dtype_t acc = TT_SHLO_ATT_ACC;
  tt_shv_t q = tt_shlo_convert(c, ins->x[0], acc), k = tt_shlo_convert(c, ins->x[1], acc);
  tt_shv_t mask = in->num_operands > 3 ? ins->x[3] : -1;
  tt_attention_attrs_t a;
  TT_ATTRS(in, &a);
  tt_shlo_att_t sm;
  tt_shlo_att_softmax(c, q, k, mask, (int)a.causal, a.scale, &sm);
  if (a.lse) {
    /* logsumexp = max + log(sum); 0 on dead rows (log(1) = 0 there). */
    tt_shv_t lse = tt_shlo_bin(c, "add", sm.m, tt_shlo_un(c, "log", sm.sum));
    return tt_shlo_convert(c, lse, in->dtype);
  }
  /* Normalise after the product with v: L x Ev divisions instead of L x S. */
  tt_shv_t v = tt_shlo_convert(c, ins->x[2], acc);
  tt_shv_t o = tt_shlo_att_dot(c, sm.e, 3, v, 2);
  if (tt_shlo_bad(c, 1, &o)) return -1;
  const tt_shape_t os = *tt_shlo_shape(c, o);
  o = tt_shlo_bin(c, "divide", o, tt_shlo_att_rows(c, sm.sum, &os));
  return tt_shlo_convert(c, o, in->dtype);
}

/* v flattened to rank 1 in dtype dt. */
static tt_shv_t tt_shlo_att_flat(tt_shlo_t *c, tt_shv_t v, tt_dtype_t dt) {
  if (tt_shlo_bad(c, 1, &v)) return -1;
  int64_t n = tt_shape_numel(tt_shlo_shape(c, v));
  tt_shape_t fs = tt_shlo_dims(1, &n);
  return tt_shlo_reshape(c, tt_shlo_convert(c, v, dt), &fs);
}

static tt_shv_t tt_shlo_att_backward(tt_shlo_t *c, const tt_shlo_instr_t *ins) {
  const tt_instr_t *in = ins->in;
  tt_dtype_t acc = TT_SHLO_ATT_ACC;
  tt_attention_bwd_attrs_t a;
  TT_ATTRS(in, &a);
  double scale = a.scale;
  tt_shv_t g = tt_shlo_convert(c, ins->x[0], acc);
  tt_shv_t q = tt_shlo_convert(c, ins->x[1], acc), k = tt_shlo_convert(c, ins->x[2], acc);
  tt_shv_t v = tt_shlo_convert(c, ins->x[3], acc);
  tt_shv_t mask = in->num_operands > 4 ? ins->x[4] : -1;
  tt_shlo_att_t sm;
  tt_shlo_att_softmax(c, q, k, mask, (int)a.causal, scale, &sm);
  if (tt_shlo_bad(c, 1, &sm.e)) return -1;
  const tt_shape_t ss = *tt_shlo_shape(c, sm.e);
  /* p is 0 where a key is hidden and on dead rows, so ds is too: those
   * scores get no gradient without a select of their own. */
  tt_shv_t p = tt_shlo_bin(c, "divide", sm.e, tt_shlo_att_rows(c, sm.sum, &ss));
  tt_shv_t dv = tt_shlo_att_dot(c, p, 2, g, 2);  /* p^T g: [B, H, S, Ev] */
  tt_shv_t dp = tt_shlo_att_dot(c, g, 3, v, 3);  /* g v^T: [B, H, L, S] */
  tt_shv_t pdp = tt_shlo_bin(c, "multiply", p, dp);
  tt_shv_t rs = tt_shlo_reduce(c, pdp, 1u << 3, "stablehlo.add", tt_shlo_scalar(c, acc, 0));
  tt_shv_t ds = tt_shlo_bin(c, "multiply", p,
                            tt_shlo_bin(c, "subtract", dp, tt_shlo_att_rows(c, rs, &ss)));
  ds = tt_shlo_bin_k(c, "multiply", ds, scale);
  tt_shv_t dq = tt_shlo_att_dot(c, ds, 3, k, 2); /* ds k: [B, H, L, E] */
  tt_shv_t dk = tt_shlo_att_dot(c, ds, 2, q, 2); /* ds^T q: [B, H, S, E] */
  tt_shv_t parts[3] = {tt_shlo_att_flat(c, dq, in->dtype), tt_shlo_att_flat(c, dk, in->dtype),
                       tt_shlo_att_flat(c, dv, in->dtype)};
  return tt_shlo_concat(c, 3, parts, 0);
}

static tt_shv_t tt_shlo_lower_attention(tt_shlo_t *c, const tt_shlo_instr_t *ins) {
  int n = ins->in->num_operands;
  if (tt_shlo_bad(c, n, ins->x)) return -1;
  /* Fields present beyond causal and lse (forward) or causal (backward). */
  int strided;
  if (ins->in->op == TT_OP_ATTENTION) {
    tt_attention_attrs_t a;
    strided = TT_ATTRS(ins->in, &a) > 2;
  } else {
    tt_attention_bwd_attrs_t a;
    strided = TT_ATTRS(ins->in, &a) > 1;
  }
  if (strided) {
    /* The strided forms exist only in graphs optimised for the engine's
     * own kernels (src/passes/attention_layout.c, skipped when graphs run
     * through a PJRT plugin). */
    tt_shlo_fail(c, tt_status_make(TT_UNIMPLEMENTED,
                                   "stablehlo: %s in its strided form (engine-only)",
                                   tt_op_name(ins->in->op)));
    return -1;
  }
  if (ins->in->op == TT_OP_ATTENTION) return tt_shlo_att_forward(c, ins);
  return tt_shlo_att_backward(c, ins);
}

/* ---- registrations ---- */

const tt_shlo_row_t tt_shlo_rows_attention[] = {
    {TT_OP_ATTENTION, tt_shlo_lower_attention,
     "in f32: dot_general (batch B, H), add mask, causal iota + compare + "
     "select, reduce max, exponential, reduce add, dot_general, divide; "
     "logsumexp = max + log(sum); rows seeing no key selected to 0"},
    {TT_OP_ATTENTION_BWD, tt_shlo_lower_attention,
     "the probabilities recomputed as forward, four dot_generals (dv, dp, "
     "dq, dk), reduce add, reshapes and a concatenate of the three "
     "flattened gradients"},
    TT_SHLO_ROWS_END,
};
