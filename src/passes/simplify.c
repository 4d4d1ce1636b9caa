/* Algebraic and structural simplification. Runtime scalars are graph
 * inputs whose values are not known when compiling, so the rewrites here
 * are the ones that hold for every value: identity reshapes, converts and
 * broadcasts, reshape chains, transpose chains, and a few folds of a
 * producer into the kernel that reads it. */
#include <stdlib.h>

#include "torchtpu/kernels.h"
#include "torchtpu/passes.h"

static int tt_is_identity_perm(const tt_transpose_attrs_t *a) {
  for (int32_t d = 0; d < a->perm.n; ++d)
    if (a->perm.v[d] != d) return 0;
  return 1;
}

/* Whether transpose `t` swaps its last two dims and keeps the others. */
static int tt_swaps_last_two(const tt_instr_t *t) {
  if (t->op != TT_OP_TRANSPOSE) return 0;
  tt_transpose_attrs_t a;
  TT_ATTRS(t, &a);
  int32_t r = a.perm.n;
  if (r < 2) return 0;
  for (int32_t d = 0; d < r - 2; ++d)
    if (a.perm.v[d] != d) return 0;
  return a.perm.v[r - 2] == r - 1 && a.perm.v[r - 1] == r - 2;
}

/* Flips dot in's transpose flag of operand k. */
static void tt_flip_dot_operand(tt_instr_t *in, int k) {
  tt_dot_attrs_t a;
  TT_ATTRS(in, &a);
  if (k == 0) a.trans_a = !a.trans_a;
  else a.trans_b = !a.trans_b;
  TT_SET_ATTRS(in, &a);
}

/* Rewrites reshape in's target dims to shape's. */
static void tt_set_reshape_dims(tt_instr_t *in, const tt_shape_t *shape) {
  tt_dims_attrs_t a = {.dims = {.n = shape->rank}};
  for (int32_t k = 0; k < shape->rank; ++k) a.dims.v[k] = shape->dims[k];
  TT_SET_ATTRS(in, &a);
}

/* dot(.., transpose(y)) -> dot(.., y) with the operand's transpose flag
 * flipped: the GEMM packs a transposed operand as cheaply as a plain one,
 * so the transposed copy is never made. Handles the rank-3 transpose and
 * reshape(transpose(y)) to [batch, r, c] (how matmul lowers x @ w.T and
 * q @ k.transpose(-2, -1)); the reshape is rewritten in place only when
 * this dot is its one user. */
static void tt_fold_dot_transpose(tt_work_t *w, tt_instr_t *in, int32_t **uses) {
  for (int k = 0; k < 2; ++k) {
    int32_t y = tt_work_resolve(w, in->operands[k]);
    tt_instr_t *yi = &w->instrs[y];
    if (tt_swaps_last_two(yi) && yi->shape.rank == 3) {
      in->operands[k] = tt_work_resolve(w, yi->operands[0]);
      tt_flip_dot_operand(in, k);
      continue;
    }
    if (yi->op != TT_OP_RESHAPE || yi->shape.rank != 3) continue;
    const tt_instr_t *t = &w->instrs[tt_work_resolve(w, yi->operands[0])];
    if (!tt_swaps_last_two(t)) continue;
    int32_t x = tt_work_resolve(w, t->operands[0]);
    const tt_shape_t *xs = &w->instrs[x].shape;
    int64_t lead = 1;
    for (int32_t d = 0; d < xs->rank - 2; ++d) lead *= xs->dims[d];
    int64_t rows = xs->dims[xs->rank - 2], cols = xs->dims[xs->rank - 1];
    if (lead != yi->shape.dims[0] || cols != yi->shape.dims[1] || rows != yi->shape.dims[2])
      continue;
    if (!*uses) *uses = tt_work_use_counts(w);
    if (!*uses || (*uses)[y] != 1) continue;
    yi->operands[0] = x;
    yi->shape.dims[1] = rows;
    yi->shape.dims[2] = cols;
    tt_set_reshape_dims(yi, &yi->shape); /* [lead, rows, cols] */
    tt_flip_dot_operand(in, k);
  }
}

/* transpose(dot(a, b)) -> dot(b, a) with both transpose flags flipped,
 * since (A B)^T = B^T A^T: the GEMM writes the transposed product directly
 * instead of the product and then a transposed copy. Autograd makes this
 * shape for every linear layer's weight gradient (x^T g computed as a
 * [in, out] product, then t() to the weight's [out, in]). Matches the
 * rank-3 transpose of a dot, and the rank-2 transpose of a batch-1 dot's
 * reshape to [M, N]; the dot (and the reshape) must have no other user,
 * and both operands the same batch size (only b may broadcast). Rewrites
 * the dot (and the reshape) in place and forwards the transpose to it. */
static void tt_fold_transpose_of_dot(tt_work_t *w, int32_t t, int32_t **uses) {
  tt_instr_t *ti = &w->instrs[t];
  if (!tt_swaps_last_two(ti)) return;
  int32_t y = tt_work_resolve(w, ti->operands[0]);
  tt_instr_t *yi = &w->instrs[y];
  int32_t d = y, r = -1;
  if (yi->op == TT_OP_RESHAPE && ti->shape.rank == 2) {
    r = y;
    d = tt_work_resolve(w, yi->operands[0]);
  }
  tt_instr_t *di = &w->instrs[d];
  if (di->op != TT_OP_DOT || di->shape.rank != 3) return;
  if (r < 0 && ti->shape.rank != 3) return;
  if (r >= 0 && di->shape.dims[0] != 1) return;
  int32_t a = tt_work_resolve(w, di->operands[0]), b = tt_work_resolve(w, di->operands[1]);
  if (w->instrs[a].shape.dims[0] != w->instrs[b].shape.dims[0]) return;
  if (!*uses) *uses = tt_work_use_counts(w);
  if (!*uses || (*uses)[d] != 1 || (r >= 0 && (*uses)[r] != 1)) return;
  tt_dot_attrs_t da;
  TT_ATTRS(di, &da);
  int64_t ta = da.trans_a, tb = da.trans_b;
  di->operands[0] = b;
  di->operands[1] = a;
  da.trans_a = !tb;
  da.trans_b = !ta;
  TT_SET_ATTRS(di, &da);
  int64_t m = di->shape.dims[1];
  di->shape.dims[1] = di->shape.dims[2];
  di->shape.dims[2] = m;
  int32_t head = d;
  if (r >= 0) {
    yi->shape = ti->shape;
    tt_set_reshape_dims(yi, &ti->shape);
    head = r;
  }
  w->forward[t] = head;
  (*uses)[head] = (*uses)[t];
  (*uses)[t] = 0;
}

/* Whether instruction p pads with zeros along dim d alone; sets [lo, end)
 * to the span its operand covers. */
static int tt_zero_pad_on_(const tt_instr_t *p, int32_t d, int64_t *lo, int64_t *end) {
  if (p->op != TT_OP_PAD) return 0;
  tt_pad_attrs_t a;
  TT_ATTRS(p, &a);
  if (a.value != 0.0) return 0;
  int32_t r = p->shape.rank;
  for (int32_t k = 0; k < r; ++k)
    if (k != d && (a.lo.v[k] != 0 || a.hi.v[k] != 0)) return 0;
  if (a.lo.v[d] < 0 || a.hi.v[d] < 0) return 0;
  *lo = a.lo.v[d];
  *end = p->shape.dims[d] - a.hi.v[d];
  return 1;
}

/* Whether instruction x concatenates along dim d. */
static int tt_concat_on_(const tt_instr_t *x, int32_t d) {
  if (x->op != TT_OP_CONCAT) return 0;
  tt_concat_attrs_t a;
  TT_ATTRS(x, &a);
  return a.dim == d;
}

/* add(pad(a), pad(b)) with zeros, where a and b cover adjacent spans of
 * one dim -> pad(concat(a, b)): the backward of selecting or slicing one
 * stacked tensor (nn.MultiheadAttention's q, k and v of one projection)
 * places each gradient in zeros and sums them, three full writes and a
 * three-way add where one concatenation does (the sum differs only in the
 * sign of a zero: -0 + 0 is +0). The later of the two pads is rewritten
 * into the concatenation (both operands are defined before it) and the
 * add into the pad; a concatenation operand that is itself a
 * concatenation along the dim with no other user is spliced in. */
static void tt_fold_add_of_pads(tt_work_t *w, int32_t i, int32_t **uses) {
  tt_instr_t *in = &w->instrs[i];
  tt_binary_attrs_t ba;
  TT_ATTRS(in, &ba);
  if (ba.op != TT_BIN_ADD || in->num_operands != 2) return;
  int32_t pa = tt_work_resolve(w, in->operands[0]), pb = tt_work_resolve(w, in->operands[1]);
  const tt_instr_t *A = &w->instrs[pa], *B = &w->instrs[pb];
  if (pa == pb || A->op != TT_OP_PAD || B->op != TT_OP_PAD || A->dtype != in->dtype ||
      B->dtype != in->dtype || !tt_shape_equal(&A->shape, &in->shape) ||
      !tt_shape_equal(&B->shape, &in->shape))
    return;
  tt_pad_attrs_t apad, bpad;
  TT_ATTRS(A, &apad);
  TT_ATTRS(B, &bpad);
  int32_t r = in->shape.rank, d = -1;
  for (int32_t k = 0; k < r && d < 0; ++k)
    if (apad.lo.v[k] || apad.hi.v[k] || bpad.lo.v[k] || bpad.hi.v[k]) d = k;
  int64_t alo, aend, blo, bend;
  if (d < 0 || !tt_zero_pad_on_(A, d, &alo, &aend) || !tt_zero_pad_on_(B, d, &blo, &bend))
    return;
  if (aend != blo && bend != alo) return;
  if (!*uses) *uses = tt_work_use_counts(w);
  if (!*uses || (*uses)[pa] != 1 || (*uses)[pb] != 1) return;
  int first_a = aend == blo;
  int32_t x[2] = {tt_work_resolve(w, A->operands[0]), tt_work_resolve(w, B->operands[0])};
  if (!first_a) {
    int32_t t = x[0];
    x[0] = x[1];
    x[1] = t;
  }
  int64_t lo = first_a ? alo : blo, end = first_a ? bend : aend;
  /* the operands of the concatenation, splicing concatenations along d */
  int32_t nops = 0, cap = 0;
  for (int k = 0; k < 2; ++k) {
    const tt_instr_t *xi = &w->instrs[x[k]];
    cap += tt_concat_on_(xi, d) && (*uses)[x[k]] == 1 ? xi->num_operands : 1;
  }
  int32_t *ops = malloc(sizeof(int32_t) * (size_t)cap);
  if (!ops) return;
  for (int k = 0; k < 2; ++k) {
    const tt_instr_t *xi = &w->instrs[x[k]];
    if (tt_concat_on_(xi, d) && (*uses)[x[k]] == 1) {
      for (int32_t q = 0; q < xi->num_operands; ++q)
        ops[nops++] = tt_work_resolve(w, xi->operands[q]);
      (*uses)[x[k]] = 0;
    } else {
      ops[nops++] = x[k];
    }
  }
  int32_t j = pa > pb ? pa : pb, dead = pa > pb ? pb : pa;
  tt_instr_t *cj = &w->instrs[j];
  free(cj->operands);
  cj->operands = ops;
  cj->num_operands = nops;
  cj->op = TT_OP_CONCAT;
  const tt_concat_attrs_t ca = {.dim = d};
  TT_SET_ATTRS(cj, &ca);
  cj->shape.dims[d] = end - lo;
  (*uses)[dead] = 0;
  /* the add becomes the pad of the concatenation */
  in->op = TT_OP_PAD;
  in->operands[0] = j;
  in->num_operands = 1;
  tt_pad_attrs_t pad = {.lo = {.n = r}, .hi = {.n = r}, .value = 0.0};
  pad.lo.v[d] = lo;
  pad.hi.v[d] = in->shape.dims[d] - end;
  TT_SET_ATTRS(in, &pad);
}

/* Binary and where kernels broadcast their operands to the instruction's
 * shape, so an operand materialised by a BROADCAST of a value that already
 * broadcasts there is read as that value (a _safe_softmax's where over a
 * broadcast 0: the 2 MiB fill and its read go away). */
static void tt_fold_broadcast_operands(tt_work_t *w, tt_instr_t *in) {
  for (int32_t k = 0; k < in->num_operands; ++k) {
    int32_t o = tt_work_resolve(w, in->operands[k]);
    const tt_instr_t *b = &w->instrs[o];
    if (b->op != TT_OP_BROADCAST) continue;
    int32_t y = tt_work_resolve(w, b->operands[0]);
    if (w->instrs[y].dtype == b->dtype && tt_shape_broadcasts_to(&w->instrs[y].shape, &in->shape))
      in->operands[k] = y;
  }
}

/* softmax(reshape?(add(x, bias))) along the last dim, with bias one value
 * per column and the add (and reshape) read by nothing else ->
 * softmax(reshape?(x), bias): the kernel adds the bias to each row as it
 * loads it (tt_kernel_softmax_bias), so the biased logits of a language
 * model's head ([N, vocab], 8 MiB in the decoder) are never written and
 * read back. F32 only; results equal the separate add's. */
static void tt_fold_softmax_bias(tt_work_t *w, tt_instr_t *in, int32_t **uses) {
  if (in->num_operands != 1 || in->dtype != TT_F32) return;
  int32_t x = tt_work_resolve(w, in->operands[0]), reshape = -1;
  /* The operand's shape: a packed softmax's result has one dim more. */
  int32_t r = w->instrs[x].shape.rank;
  tt_softmax_attrs_t sa;
  TT_ATTRS(in, &sa);
  if (r < 1 || sa.dim != r - 1) return;
  int64_t L = w->instrs[x].shape.dims[r - 1];
  if (w->instrs[x].op == TT_OP_RESHAPE) {
    reshape = x;
    x = tt_work_resolve(w, w->instrs[x].operands[0]);
  }
  tt_instr_t *add = &w->instrs[x];
  if (add->op != TT_OP_BINARY) return;
  tt_binary_attrs_t ba;
  TT_ATTRS(add, &ba);
  if (ba.op != TT_BIN_ADD || add->num_operands != 2 ||
      add->dtype != TT_F32 || add->shape.rank < 1 || add->shape.dims[add->shape.rank - 1] != L)
    return;
  int32_t full = -1, bias = -1;
  for (int k = 0; k < 2; ++k) {
    int32_t o = tt_work_resolve(w, add->operands[k]);
    const tt_instr_t *oi = &w->instrs[o];
    if (oi->dtype != TT_F32) return;
    if (tt_shape_equal(&oi->shape, &add->shape)) {
      full = o;
      continue;
    }
    int row = oi->shape.rank >= 1 && oi->shape.dims[oi->shape.rank - 1] == L;
    for (int32_t d = 0; row && d < oi->shape.rank - 1; ++d) row = oi->shape.dims[d] == 1;
    if (row) bias = o;
  }
  if (full < 0 || bias < 0) return;
  if (!*uses) *uses = tt_work_use_counts(w);
  if (!*uses || (*uses)[x] != 1 || (reshape >= 0 && (*uses)[reshape] != 1)) return;
  int32_t *ops = malloc(sizeof(int32_t) * 2);
  if (!ops) return;
  if (reshape >= 0) {
    w->instrs[reshape].operands[0] = full;
    ops[0] = reshape;
  } else {
    ops[0] = full;
  }
  ops[1] = bias;
  free(in->operands);
  in->operands = ops;
  in->num_operands = 2;
  (*uses)[x] = 0;
}

tt_status_t tt_pass_simplify(tt_work_t *w) {
  int32_t *uses = NULL;
  for (int32_t i = 0; i < w->num_instrs; ++i) {
    if (w->forward[i] != i) continue;
    if (w->instrs[i].op == TT_OP_DOT) tt_fold_dot_transpose(w, &w->instrs[i], &uses);
    if (w->instrs[i].op == TT_OP_TRANSPOSE) tt_fold_transpose_of_dot(w, i, &uses);
    if (w->instrs[i].op == TT_OP_BINARY) tt_fold_add_of_pads(w, i, &uses);
    if (w->instrs[i].op == TT_OP_SOFTMAX) tt_fold_softmax_bias(w, &w->instrs[i], &uses);
    if (w->forward[i] != i) continue;
    tt_instr_t *in = &w->instrs[i];
    if (in->op == TT_OP_BINARY || in->op == TT_OP_WHERE) tt_fold_broadcast_operands(w, in);
    if (in->num_operands < 1) continue;
    int32_t x = tt_work_resolve(w, in->operands[0]);
    in->operands[0] = x;
    const tt_instr_t *src = &w->instrs[x];
    int same_shape = tt_shape_equal(&src->shape, &in->shape) && src->dtype == in->dtype;
    switch (in->op) {
      case TT_OP_RESHAPE:
      case TT_OP_BROADCAST:
      case TT_OP_CONVERT:
        if (same_shape) {
          w->forward[i] = x;
          break;
        }
        /* reshape(reshape(y)) -> reshape(y) */
        if (in->op == TT_OP_RESHAPE && src->op == TT_OP_RESHAPE)
          in->operands[0] = tt_work_resolve(w, src->operands[0]);
        /* convert(convert(y)) is not folded: the inner convert may round. */
        break;
      case TT_OP_PAD: {
        tt_pad_attrs_t a;
        TT_ATTRS(in, &a);
        int none = same_shape;
        for (int32_t k = 0; k < a.lo.n && none; ++k) none = a.lo.v[k] == 0 && a.hi.v[k] == 0;
        if (none) w->forward[i] = x; /* no padding on any side */
        break;
      }
      case TT_OP_TRANSPOSE: {
        tt_transpose_attrs_t q;
        TT_ATTRS(in, &q);
        if (tt_is_identity_perm(&q)) {
          w->forward[i] = x;
        } else if (src->op == TT_OP_TRANSPOSE) {
          /* transpose(transpose(y, p), q) = transpose(y, p[q]) */
          tt_transpose_attrs_t p, composed = {.perm = {.n = q.perm.n}};
          TT_ATTRS(src, &p);
          for (int32_t d = 0; d < q.perm.n; ++d) composed.perm.v[d] = p.perm.v[q.perm.v[d]];
          TT_SET_ATTRS(in, &composed);
          in->operands[0] = tt_work_resolve(w, src->operands[0]);
          if (tt_is_identity_perm(&composed)) w->forward[i] = in->operands[0];
        }
        break;
      }
      default:
        break;
    }
  }
  free(uses);
  return NULL;
}
