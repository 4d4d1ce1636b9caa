/* Elementwise fusion: unary/binary/where/convert ops whose results are
 * read only inside the group and have the group's shape are merged into
 * one TT_OP_FUSED instruction, so the intermediates never touch
 * memory. Fused programs compute in f32 and round each step to its own
 * dtype (BF16/F16/BOOL), so results equal the unfused graph's.
 *
 * A cheap producer (add, sub, mul, convert) read by several elementwise
 * consumers of its shape is duplicated into each consumer's group instead
 * of being written once and read back by all (XLA's producer
 * duplication): a linear layer's bias add read by the activation and by
 * the activation's gradient. Its own operands stay materialised.
 * Which ops may be steps is tt_instr_fusible's rule (op_table.h). */
#include <stdlib.h>
#include <string.h>

#include "torchtpu/kernels.h"
#include "passes/fused_step.h"

/* Whether fusible, non-output instruction p may be recomputed in every
 * group that reads it: cheap, every user an elementwise op of its shape
 * (so each user's group takes a copy and p itself dies), and the copies
 * read no more memory than storing p would cost. */
static int tt_duplicable(const tt_work_t *w, int32_t p, const int32_t *user_start,
                         const int32_t *users) {
  const tt_instr_t *pi = &w->instrs[p];
  if (pi->op == TT_OP_BINARY) {
    tt_binary_attrs_t a;
    TT_ATTRS(pi, &a);
    if (a.op != TT_BIN_ADD && a.op != TT_BIN_SUB && a.op != TT_BIN_MUL) return 0;
  } else if (pi->op != TT_OP_CONVERT) {
    return 0;
  }
  int32_t readers = user_start[p + 1] - user_start[p];
  if (readers < 2) return 0;
  /* Memory passes: stored, (full-size operands) + 1 write + readers;
   * copied, readers x full-size operands. Copy only if not more. */
  int32_t full = 0;
  for (int32_t k = 0; k < pi->num_operands; ++k) {
    const tt_instr_t *o = &w->instrs[tt_work_resolve(w, pi->operands[k])];
    full += tt_shape_numel(&o->shape) == tt_shape_numel(&pi->shape);
  }
  if ((int64_t)readers * full > full + 1 + readers) return 0;
  for (int32_t u = user_start[p]; u < user_start[p + 1]; ++u) {
    const tt_instr_t *ui = &w->instrs[users[u]];
    if (!tt_work_fusible(w, ui) || !tt_shape_equal(&ui->shape, &pi->shape)) return 0;
  }
  return 1;
}

typedef struct tt_group_s {
  int32_t *members; /* instruction indices, ascending once sorted */
  int32_t count, cap;
} tt_group_t;

static int tt_group_add(tt_group_t *g, int32_t i) {
  if (g->count == g->cap) {
    int32_t ncap = g->cap ? g->cap * 2 : 16;
    int32_t *n = realloc(g->members, sizeof(int32_t) * (size_t)ncap);
    if (!n) return 0;
    g->members = n;
    g->cap = ncap;
  }
  g->members[g->count++] = i;
  return 1;
}

static int tt_cmp_i32(const void *a, const void *b) {
  int32_t x = *(const int32_t *)a, y = *(const int32_t *)b;
  return x < y ? -1 : x > y;
}

tt_status_t tt_pass_fuse_elementwise(tt_work_t *w) {
  int32_t n = w->num_instrs;
  int32_t *uses = tt_work_use_counts(w);
  uint8_t *is_output = calloc((size_t)n + 1, 1);
  uint8_t *claimed = calloc((size_t)n + 1, 1);
  int32_t *user_start = NULL, *users = NULL, *fill = NULL;
  uint8_t *in_group = NULL; /* 1: member of the group being built, 2: a duplicated copy */
  uint8_t *duplicated = NULL; /* copied into a group: never a root itself */
  uint8_t *copyable = NULL;   /* tt_duplicable, judged on the graph before fusion */
  int32_t *step_of = malloc(sizeof(int32_t) * ((size_t)n + 1));
  tt_group_t group = {0};
  tt_status_t st = NULL;
  if (!uses || !is_output || !claimed || !step_of) {
    st = tt_status_make(TT_RESOURCE_EXHAUSTED, "out of memory (fusion)");
    goto done;
  }
  for (int32_t r = 0; r < w->num_outputs; ++r) is_output[tt_work_resolve(w, w->outputs[r])] = 1;
  /* Users of every live instruction (CSR), so a producer with several
   * consumers can join a group once all of them are members. */
  user_start = calloc((size_t)n + 2, sizeof(int32_t));
  in_group = calloc((size_t)n + 1, 1);
  duplicated = calloc((size_t)n + 1, 1);
  copyable = calloc((size_t)n + 1, 1);
  if (!user_start || !in_group || !duplicated || !copyable) goto oom;
  for (int32_t i = 0; i < n; ++i) {
    if (w->forward[i] != i || uses[i] == 0) continue;
    for (int32_t k = 0; k < w->instrs[i].num_operands; ++k)
      user_start[tt_work_resolve(w, w->instrs[i].operands[k]) + 1]++;
  }
  for (int32_t i = 0; i < n; ++i) user_start[i + 1] += user_start[i];
  users = malloc(sizeof(int32_t) * ((size_t)user_start[n] + 1));
  fill = calloc((size_t)n + 1, sizeof(int32_t));
  if (!users || !fill) goto oom;
  for (int32_t i = 0; i < n; ++i) {
    if (w->forward[i] != i || uses[i] == 0) continue;
    for (int32_t k = 0; k < w->instrs[i].num_operands; ++k) {
      int32_t o = tt_work_resolve(w, w->instrs[i].operands[k]);
      users[user_start[o] + fill[o]++] = i;
    }
  }
  for (int32_t i = 0; i < n; ++i)
    copyable[i] = w->forward[i] == i && uses[i] > 0 && !is_output[i] &&
                  tt_work_fusible(w, &w->instrs[i]) && tt_duplicable(w, i, user_start, users);
  for (int32_t c = n - 1; c >= 0; --c) {
    tt_instr_t *root = &w->instrs[c];
    if (w->forward[c] != c || claimed[c] || duplicated[c] || uses[c] == 0 ||
        !tt_work_fusible(w, root))
      continue;
    group.count = 0;
    if (!tt_group_add(&group, c)) goto oom;
    in_group[c] = 1;
    /* Whole members to a fixed point first; then copies of the cheap
     * producers still outside (deciding on a copy earlier would miss
     * users that join later). */
    for (int changed = 1, allow_copy = 0; changed || !allow_copy;) {
      if (!changed) allow_copy = 1;
      changed = 0;
      for (int32_t g = 0; g < group.count; ++g) {
        const tt_instr_t *m = &w->instrs[group.members[g]];
        /* A copy's operands are read from memory by every copy. */
        if (in_group[group.members[g]] == 2) continue;
        for (int32_t k = 0; k < m->num_operands; ++k) {
          int32_t p = tt_work_resolve(w, m->operands[k]);
          const tt_instr_t *pi = &w->instrs[p];
          if (in_group[p] || claimed[p] || is_output[p] || !tt_work_fusible(w, pi) ||
              !tt_shape_equal(&pi->shape, &root->shape))
            continue;
          int all_inside = 1;
          for (int32_t u = user_start[p]; u < user_start[p + 1]; ++u)
            all_inside &= in_group[users[u]] == 1;
          if (!all_inside && !(allow_copy && copyable[p])) continue;
          if (!tt_group_add(&group, p)) goto oom;
          in_group[p] = all_inside ? 1 : 2;
          changed = 1;
        }
      }
    }
    if (group.count < 2) {
      in_group[c] = 0;
      continue;
    }
    qsort(group.members, (size_t)group.count, sizeof(int32_t), tt_cmp_i32);
    /* Steps in index order (a topological order); external inputs are the
     * operands that are not members. */
    tt_fused_t *f = calloc(1, sizeof(*f));
    tt_fused_op_t *ops = calloc((size_t)group.count, sizeof(tt_fused_op_t));
    int32_t *inputs = malloc(sizeof(int32_t) * ((size_t)group.count * 3 + 1));
    if (!f || !ops || !inputs) {
      free(f);
      free(ops);
      free(inputs);
      goto oom;
    }
    int32_t num_inputs = 0;
    for (int32_t g = 0; g < group.count; ++g) step_of[group.members[g]] = g;
    for (int32_t g = 0; g < group.count; ++g) {
      const tt_instr_t *m = &w->instrs[group.members[g]];
      tt_fused_op_t *s = &ops[g];
      tt_fused_step_from(m, s);
      for (int32_t k = 0; k < m->num_operands; ++k) {
        int32_t p = tt_work_resolve(w, m->operands[k]);
        int member = 0;
        for (int32_t h = 0; h < g; ++h) member |= group.members[h] == p;
        if (member) {
          s->args[k] = step_of[p];
        } else {
          int32_t slot = -1;
          for (int32_t q = 0; q < num_inputs; ++q)
            if (inputs[q] == p) slot = q;
          if (slot < 0) {
            slot = num_inputs;
            inputs[num_inputs++] = p;
          }
          s->args[k] = -(slot + 1);
        }
      }
    }
    f->num_ops = group.count;
    f->ops = ops;
    const tt_fused_attrs_t none = {0};
    tt_fused_rewrite(root, f, inputs, num_inputs, &none, 0);
    for (int32_t g = 0; g < group.count; ++g) {
      int32_t m = group.members[g];
      if (in_group[m] == 2)
        duplicated[m] = 1;
      else
        claimed[m] = 1;
      in_group[m] = 0;
    }
  }
  goto done;
oom:
  st = tt_status_make(TT_RESOURCE_EXHAUSTED, "out of memory (fusion)");
done:
  free(group.members);
  free(uses);
  free(is_output);
  free(claimed);
  free(user_start);
  free(users);
  free(fill);
  free(in_group);
  free(duplicated);
  free(copyable);
  free(step_of);
  return st;
}
