/* Common-subexpression elimination: two instructions with the same op,
 * dtype, shape, attributes and (resolved) operands compute the same value;
 * the later one is forwarded to the earlier. Inputs and random-number ops
 * are never merged (each RNG draw has its own key input anyway). */
#include <stdlib.h>
#include <string.h>

#include "torchtpu/passes.h"

static uint64_t tt_instr_hash(const tt_work_t *w, const tt_instr_t *in) {
  uint64_t h = 1469598103934665603ull;
#define MIX(v)                     \
  do {                             \
    h ^= (uint64_t)(v);            \
    h *= 1099511628211ull;         \
    h ^= h >> 31;                  \
  } while (0)
  MIX(in->op);
  MIX(in->dtype);
  MIX(in->shape.rank);
  for (int d = 0; d < in->shape.rank; ++d) MIX(in->shape.dims[d]);
  MIX(in->num_operands);
  for (int k = 0; k < in->num_operands; ++k) MIX(tt_work_resolve(w, in->operands[k]));
  MIX(in->num_iattrs);
  for (int k = 0; k < in->num_iattrs; ++k) MIX(in->iattrs[k]);
  for (int k = 0; k < TT_MAX_FATTRS; ++k) {
    uint64_t bits;
    memcpy(&bits, &in->fattrs[k], sizeof(bits));
    MIX(bits);
  }
#undef MIX
  return h;
}

static int tt_instr_same(const tt_work_t *w, const tt_instr_t *a, const tt_instr_t *b) {
  if (a->op != b->op || a->dtype != b->dtype || !tt_shape_equal(&a->shape, &b->shape) ||
      a->num_operands != b->num_operands || a->num_iattrs != b->num_iattrs)
    return 0;
  for (int k = 0; k < a->num_operands; ++k)
    if (tt_work_resolve(w, a->operands[k]) != tt_work_resolve(w, b->operands[k])) return 0;
  if (memcmp(a->iattrs, b->iattrs, sizeof(int64_t) * (size_t)a->num_iattrs)) return 0;
  return memcmp(a->fattrs, b->fattrs, sizeof(a->fattrs)) == 0;
}

tt_status_t tt_pass_cse(tt_work_t *w) {
  size_t nb = 1;
  while (nb < (size_t)w->num_instrs * 2) nb <<= 1;
  int32_t *table = malloc(sizeof(int32_t) * nb);
  if (!table) return tt_status_make(TT_RESOURCE_EXHAUSTED, "out of memory (cse)");
  for (size_t k = 0; k < nb; ++k) table[k] = -1;
  for (int32_t i = 0; i < w->num_instrs; ++i) {
    if (w->forward[i] != i) continue;
    tt_instr_t *in = &w->instrs[i];
    if (in->op == TT_OP_PARAM || in->op == TT_OP_SCALAR || in->op == TT_OP_RNG ||
        in->op == TT_OP_FUSED)
      continue;
    size_t slot = (size_t)tt_instr_hash(w, in) & (nb - 1);
    for (;;) {
      int32_t j = table[slot];
      if (j < 0) {
        table[slot] = i;
        break;
      }
      if (tt_instr_same(w, &w->instrs[j], in)) {
        w->forward[i] = j;
        break;
      }
      slot = (slot + 1) & (nb - 1);
    }
  }
  free(table);
  return NULL;
}
