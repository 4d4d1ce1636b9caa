/* Reduction fusion: a SUM/MEAN/MAX/MIN reduction absorbs the elementwise
 * ops that produce its operand (its prologue, run over the operand's
 * shape, the domain) and a chain of elementwise ops that consume its result
 * with the result's shape (its epilogue), becoming one fused reduction
 * (TT_OP_FUSED with TT_FUSED_REDUCE attributes, see ir.h). The reduced value is
 * then computed tile by tile and never stored.
 *
 * A prologue op that other instructions also read is recomputed inside the
 * reduction (duplicated) when those readers are elementwise ops of the
 * domain's shape, which the elementwise pass will fuse with it, so the
 * value is stored by nobody: softmax's exp(x - max) feeds both its sum and
 * the division by it, layer_norm's x - mean both its variance and the
 * normalised output. Otherwise the reduction reads the stored value.
 *
 * Only forms the executors run well are made: float results; after dropping
 * size-1 dims the reduced dims form one run [A, R, B]; when the reduced run
 * is not innermost (B > 1) the kept inner extent is at least
 * TT_FUSE_REDUCE_MIN_COLS (the interpreter evaluates rows of B elements).
 * Runs before elementwise fusion, which then fuses what is left. Counts
 * the reductions it fuses in the FusedReduction counter (at compile time). */
#include <stdlib.h>
#include <string.h>

#include "torchtpu/kernels.h"
#include "torchtpu/metrics.h"
#include "passes/fused_step.h"

#define TT_FUSE_REDUCE_MAX_STEPS 48
#define TT_FUSE_REDUCE_MIN_COLS 128

static int tt_is_real(tt_dtype_t dt) { return dt == TT_F32 || dt == TT_F16 || dt == TT_BF16; }

/* Whether reducing `shape` over mask is one run [A, R, B] after dropping
 * size-1 dims; sets *B to the kept extent inside the run. */
static int tt_single_run(const tt_shape_t *shape, uint32_t mask, int64_t *B) {
  int runs = 0, prev = -1;
  *B = 1;
  for (int d = 0; d < shape->rank; ++d) {
    if (shape->dims[d] == 1) continue;
    int red = (mask >> d) & 1u;
    if (red && prev != 1) runs++;
    if (!red && runs > 0) *B *= shape->dims[d];
    prev = red;
  }
  return runs == 1;
}

typedef struct tt_users_s {
  int32_t *start; /* CSR over instruction index */
  int32_t *list;
} tt_users_t;

static int tt_users_build(const tt_work_t *w, const int32_t *uses, tt_users_t *u) {
  int32_t n = w->num_instrs;
  u->start = calloc((size_t)n + 2, sizeof(int32_t));
  int32_t *fill = calloc((size_t)n + 1, sizeof(int32_t));
  if (!u->start || !fill) {
    free(fill);
    return 0;
  }
  for (int32_t i = 0; i < n; ++i) {
    if (w->forward[i] != i || uses[i] == 0) continue;
    for (int32_t k = 0; k < w->instrs[i].num_operands; ++k)
      u->start[tt_work_resolve(w, w->instrs[i].operands[k]) + 1]++;
  }
  for (int32_t i = 0; i < n; ++i) u->start[i + 1] += u->start[i];
  u->list = malloc(sizeof(int32_t) * ((size_t)u->start[n] + 1));
  if (!u->list) {
    free(fill);
    return 0;
  }
  for (int32_t i = 0; i < n; ++i) {
    if (w->forward[i] != i || uses[i] == 0) continue;
    for (int32_t k = 0; k < w->instrs[i].num_operands; ++k) {
      int32_t o = tt_work_resolve(w, w->instrs[i].operands[k]);
      u->list[u->start[o] + fill[o]++] = i;
    }
  }
  free(fill);
  return 1;
}

static int tt_cmp_i32(const void *a, const void *b) {
  int32_t x = *(const int32_t *)a, y = *(const int32_t *)b;
  return x < y ? -1 : x > y;
}

/* Argument reference for operand p of a step: an earlier step, or an input
 * slot (added on first use). */
static int32_t tt_arg_of(int32_t p, const int32_t *step_of, int32_t *inputs,
                         int32_t *num_inputs) {
  if (step_of[p] >= 0) return step_of[p];
  for (int32_t q = 0; q < *num_inputs; ++q)
    if (inputs[q] == p) return -(q + 1);
  inputs[*num_inputs] = p;
  return -(++*num_inputs);
}

tt_status_t tt_pass_fuse_reduce(tt_work_t *w) {
  int32_t n = w->num_instrs;
  int32_t *uses = tt_work_use_counts(w);
  uint8_t *is_output = calloc((size_t)n + 1, 1);
  uint8_t *in_group = calloc((size_t)n + 1, 1);
  int32_t *step_of = malloc(sizeof(int32_t) * ((size_t)n + 1));
  int32_t pro[TT_FUSE_REDUCE_MAX_STEPS], epi[TT_FUSE_REDUCE_MAX_STEPS];
  tt_users_t users = {0};
  tt_status_t st = NULL;
  int64_t made = 0;
  if (!uses || !is_output || !in_group || !step_of || !tt_users_build(w, uses, &users)) goto oom;
  for (int32_t r = 0; r < w->num_outputs; ++r) is_output[tt_work_resolve(w, w->outputs[r])] = 1;
  for (int32_t i = 0; i < n; ++i) step_of[i] = -1;
  for (int32_t c = 0; c < n; ++c) {
    tt_instr_t *red = &w->instrs[c];
    if (w->forward[c] != c || uses[c] == 0 || red->op != TT_OP_REDUCE) continue;
    tt_reduce_attrs_t ra;
    TT_ATTRS(red, &ra);
    int64_t rop = ra.op;
    uint32_t mask = (uint32_t)ra.dims_mask;
    if (rop != TT_RED_SUM && rop != TT_RED_MEAN && rop != TT_RED_MAX && rop != TT_RED_MIN)
      continue;
    int32_t x = tt_work_resolve(w, red->operands[0]);
    const tt_shape_t dom = w->instrs[x].shape;
    int64_t B = 1;
    if (!tt_is_real(red->dtype) || !tt_is_real(w->instrs[x].dtype) || dom.rank == 0 ||
        tt_shape_numel(&dom) == 0 || !tt_single_run(&dom, mask, &B) ||
        (B > 1 && B < TT_FUSE_REDUCE_MIN_COLS))
      continue;
    /* Prologue: x and the fusible ops of the domain's shape behind it. */
    int32_t np = 0;
    if (tt_work_fusible(w, &w->instrs[x])) {
      pro[np++] = x;
      in_group[x] = 1;
    }
    for (int32_t g = 0; g < np; ++g) {
      const tt_instr_t *m = &w->instrs[pro[g]];
      for (int32_t k = 0; k < m->num_operands && np < TT_FUSE_REDUCE_MAX_STEPS; ++k) {
        int32_t p = tt_work_resolve(w, m->operands[k]);
        const tt_instr_t *pi = &w->instrs[p];
        if (in_group[p] || !tt_work_fusible(w, pi) || !tt_shape_equal(&pi->shape, &dom)) continue;
        /* Readers outside the group must be elementwise ops that will
         * fuse with p, else p is stored anyway and reading it is cheaper. */
        int ok = !is_output[p];
        for (int32_t u = users.start[p]; u < users.start[p + 1] && ok; ++u) {
          const tt_instr_t *ui = &w->instrs[users.list[u]];
          ok = in_group[users.list[u]] ||
               (tt_work_fusible(w, ui) && tt_shape_equal(&ui->shape, &dom));
        }
        if (!ok) continue;
        pro[np++] = p;
        in_group[p] = 1;
      }
    }
    for (int32_t g = 0; g < np; ++g) in_group[pro[g]] = 0;
    /* x itself is stored for another reader when it is an output or has a
     * reader that is not an elementwise op of its shape. */
    if (np > 0) {
      int ok = !is_output[x];
      for (int32_t u = users.start[x]; u < users.start[x + 1] && ok; ++u) {
        const tt_instr_t *ui = &w->instrs[users.list[u]];
        ok = users.list[u] == c || (tt_work_fusible(w, ui) && tt_shape_equal(&ui->shape, &dom));
      }
      if (!ok) np = 0;
    }
    /* Epilogue: a chain of single readers of the result's shape. */
    int32_t ne = 0, cur = c;
    while (ne < TT_FUSE_REDUCE_MAX_STEPS && !is_output[cur] &&
           users.start[cur + 1] > users.start[cur]) {
      int32_t u = users.list[users.start[cur]];
      int single = 1;
      for (int32_t k = users.start[cur]; k < users.start[cur + 1]; ++k)
        single &= users.list[k] == u;
      const tt_instr_t *ui = &w->instrs[u];
      if (!single || uses[u] == 0 || !tt_work_fusible(w, ui) ||
          !tt_shape_equal(&ui->shape, &red->shape))
        break;
      epi[ne++] = u;
      cur = u;
    }
    if (np == 0 && ne == 0) continue; /* the plain reduction kernel is better */
    qsort(pro, (size_t)np, sizeof(int32_t), tt_cmp_i32);
    int32_t nsteps = np + 1 + ne;
    tt_fused_t *f = calloc(1, sizeof(*f));
    tt_fused_op_t *ops = calloc((size_t)nsteps, sizeof(tt_fused_op_t));
    int32_t *inputs = malloc(sizeof(int32_t) * ((size_t)nsteps * 3 + 1));
    if (!f || !ops || !inputs) {
      free(f);
      free(ops);
      free(inputs);
      goto oom;
    }
    int32_t ni = 0;
    for (int32_t g = 0; g < np; ++g) {
      const tt_instr_t *m = &w->instrs[pro[g]];
      tt_fused_step_from(m, &ops[g]);
      for (int32_t k = 0; k < m->num_operands; ++k)
        ops[g].args[k] = tt_arg_of(tt_work_resolve(w, m->operands[k]), step_of, inputs, &ni);
      step_of[pro[g]] = g;
    }
    tt_fused_op_t *rs = &ops[np];
    rs->op = TT_OP_REDUCE;
    rs->dtype = red->dtype;
    rs->num_args = 1;
    rs->code = rop;
    rs->args[0] = tt_arg_of(x, step_of, inputs, &ni);
    /* Epilogue steps see only the reduction and each other. */
    for (int32_t g = 0; g < np; ++g) step_of[pro[g]] = -1;
    step_of[c] = np;
    for (int32_t g = 0; g < ne; ++g) {
      const tt_instr_t *m = &w->instrs[epi[g]];
      tt_fused_step_from(m, &ops[np + 1 + g]);
      for (int32_t k = 0; k < m->num_operands; ++k)
        ops[np + 1 + g].args[k] =
            tt_arg_of(tt_work_resolve(w, m->operands[k]), step_of, inputs, &ni);
      step_of[epi[g]] = np + 1 + g;
    }
    step_of[c] = -1;
    for (int32_t g = 0; g < ne; ++g) step_of[epi[g]] = -1;
    f->num_ops = nsteps;
    f->ops = ops;
    int32_t root_idx = ne ? epi[ne - 1] : c;
    tt_instr_t *root = &w->instrs[root_idx];
    tt_fused_attrs_t fa = {.kind = TT_FUSED_REDUCE, .dims_mask = (int64_t)mask, .rank = dom.rank};
    fa.dims.n = dom.rank;
    for (int32_t d = 0; d < dom.rank; ++d) fa.dims.v[d] = dom.dims[d];
    tt_fused_rewrite(root, f, inputs, ni, &fa, -1);
    /* The reduction and epilogue members other than the root now have no
     * reader; later passes and compaction drop them. */
    uses[c] = 0;
    for (int32_t g = 0; g + 1 < ne; ++g) uses[epi[g]] = 0;
    made++;
  }
  if (made) tt_counter_add("FusedReduction", made);
  goto done;
oom:
  st = tt_status_make(TT_RESOURCE_EXHAUSTED, "out of memory (reduction fusion)");
done:
  free(uses);
  free(is_output);
  free(in_group);
  free(step_of);
  free(users.start);
  free(users.list);
  return st;
}
